"""Every tutorial, run as a learner would run it: alone, in its own interpreter.

With a GPU each must verify its own result and exit 0, and print what its recording in tutorials/output/
says it prints -- compared by structure only: the step titles and check lines, numbers masked (timings
and sizes change from run to run). A tutorial whose steps or checks changed fails here with a diff until
its recording is made again (tutorials/record_outputs.py, on a GPU host), so the recordings that readers
without a GPU read cannot go stale. Comparing here, on the run this test makes anyway, costs no second run.

Without a GPU (CI), each must say so in one line, print no traceback, and exit with the documented
status 77.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, ROOT, run_tutorial, tutorial_module

# NN_name.py, and NNa_name.py for one topic split into lettered parts (one idea per tutorial, no renumbering)
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]*_*.py"))
TIMEOUT_S = 300


def test_there_are_tutorials() -> None:
    assert TUTORIALS, "tutorials/NN_name.py files are part of the product"


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial(path: Path) -> None:
    proc = run_tutorial(path, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    if gpu_unavailable_reason() is None:
        assert proc.returncode == 0, output
        assert "every step verified" in proc.stdout
        assert "== step 1:" in proc.stdout
        assert_matches_recording(path, proc.stdout)
    else:
        assert proc.returncode == EXIT_NO_GPU, output
        lines = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
        assert len(lines) == 1 and "no usable GPU here" in lines[0], output


def assert_matches_recording(path: Path, stdout: str) -> None:
    """This run's step titles and checks are the recording's (tutorials/output/<stem>.txt), numbers masked."""
    recorder = tutorial_module("record_outputs")
    recording = tutorial_module("_tutorial").recorded_output(path)
    shown = recording.relative_to(ROOT).as_posix()
    again = f"python3 tutorials/record_outputs.py --only {path.stem}"
    assert recording.is_file(), f"{shown} is missing: record it on this GPU host with `{again}`, and commit it"
    diff = recorder.structure_diff(recording.read_text(encoding="utf-8"), stdout, shown)
    assert not diff, (
        f"{path.name} no longer prints the steps and checks its recording {shown} has (numbers masked).\n"
        f"If the change is intended, record it again with `{again}` and commit it.\n{diff}"
    )
