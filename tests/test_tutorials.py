"""Every tutorial, run as a learner would run it: alone, in its own interpreter.

With a GPU each must verify its own result and exit 0. Without one (CI), each must say so in one line,
print no traceback, and exit with the documented status 77.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, gpu_unavailable_reason, python_env

TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
EXIT_NO_GPU = 77
TIMEOUT_S = 300


def run_tutorial(path: Path) -> subprocess.CompletedProcess[str]:
    # Run from a neutral directory, as a learner would: the tutorial must find rawcuda by itself.
    env = python_env()
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(path)], cwd=path.parent.parent.parent, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_there_are_tutorials() -> None:
    assert TUTORIALS, "tutorials/NN_name.py files are part of the product"


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial(path: Path) -> None:
    proc = run_tutorial(path)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    if gpu_unavailable_reason() is None:
        assert proc.returncode == 0, output
        assert "every step verified" in proc.stdout
        assert "== step 1:" in proc.stdout
    else:
        assert proc.returncode == EXIT_NO_GPU, output
        lines = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
        assert len(lines) == 1 and "no usable GPU here" in lines[0], output
