"""rawcuda.time_ms's argument checks and rawcuda.Timing, without a driver: every check runs before the
first driver call, so bad arguments fail the same way on a machine with no GPU (tests/gpu/test_event.py
times real work)."""

from __future__ import annotations

import pytest

from rawcuda import Timing, time_ms
from tests.helpers import run_python


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"reps": 0}, ValueError, r"reps must be at least 1, got 0"),
        ({"reps": -1}, ValueError, r"reps must be at least 1, got -1"),
        ({"warmup": -2}, ValueError, r"warmup must be at least 0, got -2"),
        ({"reps": 3.0}, TypeError, r"reps must be an int .*float"),
        ({"warmup": "1"}, TypeError, r"warmup must be an int .*str"),
        ({"reps": False}, TypeError, r"reps must be an int .*bool"),
        ({"stream": 7}, TypeError, r"stream must be a rawcuda Stream, another library.s stream"),
    ],
)
def test_bad_arguments_are_refused_before_work_runs(
    arguments: dict[str, object], error: type[Exception], match: str
) -> None:
    calls: list[int] = []
    with pytest.raises(error, match=match):
        time_ms(lambda: calls.append(1), **arguments)  # type: ignore[arg-type]
    assert calls == []


def test_work_must_be_callable() -> None:
    with pytest.raises(TypeError, match="work must be a callable"):
        time_ms(42)  # type: ignore[arg-type]


def test_the_checks_need_no_driver() -> None:
    proc = run_python(
        "import rawcuda\n"
        "try:\n"
        "    rawcuda.time_ms(lambda: None, reps=0)\n"
        "except ValueError as exc:\n"
        "    print('refused:', exc)\n",
        RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1",
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused: reps must be at least 1" in proc.stdout


def test_timing_median_and_min() -> None:
    timing = Timing((5.0, 1.0, 3.0, 100.0, 2.0))
    assert timing.median == 3.0  # the outlier does not move it
    assert timing.min == 1.0
    assert Timing((4.0, 2.0)).median == 3.0


def test_an_empty_timing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one time"):
        Timing(())
