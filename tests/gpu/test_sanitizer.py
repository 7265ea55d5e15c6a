"""compute-sanitizer, short: memcheck over tutorial 01 and the kernel workload, racecheck over the reduction
and the SGEMM kernels.

The full run (every tutorial, racecheck on the transpose too) is ``bash tests/sanitizer/run_sanitizer.sh``;
this test runs its ``--short`` mode, which takes well under two minutes on an H200, and asserts the
script's own verdict: every run clean, every program verified its results.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT, python_env

pytestmark = pytest.mark.gpu

SCRIPT = ROOT / "tests" / "sanitizer" / "run_sanitizer.sh"
TOOLKIT_SANITIZER = Path("/usr/local/cuda/bin/compute-sanitizer")
SHORT_RUNS = 4
TIMEOUT_S = 600  # a guard against a hang; the short run normally takes one to two minutes


def find_sanitizer() -> str | None:
    found = os.environ.get("COMPUTE_SANITIZER") or shutil.which("compute-sanitizer")
    if found:
        return found
    return str(TOOLKIT_SANITIZER) if TOOLKIT_SANITIZER.is_file() else None


def test_sanitizer_finds_nothing() -> None:
    sanitizer = find_sanitizer()
    if sanitizer is None:
        pytest.skip(
            "compute-sanitizer is neither on PATH nor at /usr/local/cuda/bin (install the CUDA toolkit, "
            "or set COMPUTE_SANITIZER)"
        )
    env = python_env(COMPUTE_SANITIZER=sanitizer)
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--short"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    output = proc.stdout + proc.stderr
    runs = [line for line in proc.stdout.splitlines() if re.match(r"sanitizer: (memcheck|racecheck) ", line)]
    assert len(runs) == SHORT_RUNS, output
    for line in runs:
        assert " 0 error(s)" in line and "failed" not in line, output
    assert proc.stdout.rstrip().splitlines()[-1] == f"sanitizer: {SHORT_RUNS} runs, 0 errors", output
    assert proc.returncode == 0, output
