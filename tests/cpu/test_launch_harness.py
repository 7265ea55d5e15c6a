"""bench/fake/launch_fake.py runs on a machine without a GPU, and its loops really reach the (fake) driver.

Why a test? The harness is how a change to the launch path is measured before the GPU run; a harness that
silently stopped launching (a variant raising, a loop compiled empty) would report a fast launch path.
Times are never asserted: only that every variant was measured and every launch reached cuLaunchKernelEx.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

HARNESS = ROOT / "bench" / "fake" / "launch_fake.py"
ROUNDS, LAUNCHES = 2, 40  # a few launches per loop: this checks the harness, it measures nothing


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_every_variant_is_measured_and_every_launch_reaches_the_driver(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAWCUDA_LIBCUDA"}  # the harness builds its own fake
    out = tmp_path / "launch.json"
    cmd = [sys.executable, str(HARNESS), "--rounds", str(ROUNDS), "--n", str(LAUNCHES), "--json", str(out)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(out.read_text())
    sys.path.insert(0, str(HARNESS.parent))
    try:
        import launch_fake
    finally:
        sys.path.remove(str(HARNESS.parent))
    assert sorted(data["results"]) == sorted(launch_fake.VARIANTS)
    # Every block runs once to warm up; then each round runs every variant beside a reference block. A variant
    # whose second statement is an export launches half as often.
    variants = [name for name in launch_fake.VARIANTS if name != launch_fake.REFERENCE]
    exports = sum("__cuda_array_interface__" in " ".join(launch_fake.VARIANTS[name]) for name in variants)
    copies = sum("copy" in name for name in variants)  # the copy variants launch nothing
    per_pass = len(variants) * LAUNCHES - exports * LAUNCHES // 2 - copies * LAUNCHES
    expected = (ROUNDS + 1) * per_pass + (1 + ROUNDS * len(variants)) * LAUNCHES
    assert data["meta"]["launches_reaching_the_driver"] == expected
    assert "| launch3_two_streams |" in run.stdout
