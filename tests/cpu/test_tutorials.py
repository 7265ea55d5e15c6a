"""Every tutorial, run as a learner would run it: alone, in its own interpreter.

With a GPU each must verify its own result and exit 0. Without one (CI), each must say so in one line,
print no traceback, and exit with the documented status 77.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, ROOT, run_tutorial

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
    else:
        assert proc.returncode == EXIT_NO_GPU, output
        lines = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
        assert len(lines) == 1 and "no usable GPU here" in lines[0], output
