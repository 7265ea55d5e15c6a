"""rawcuda.time_ms on a real GPU: it measures GPU time, runs ``work`` exactly warmup + reps times, closes
its two events however it ends, and refuses bad arguments before anything runs.

The timed work is kernels/spin.cu: one thread that busy-waits on the GPU's nanosecond clock, so a launch
takes at least the time asked, on any GPU. Only a lower bound is asserted, with a wide margin (the event
clock and %globaltimer are different clocks): an upper bound would fail on a busy machine, not on a bug.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rawcuda import ClosedError, Context, Event, Function, Stream, time_ms
from rawcuda.core.context import default_context

pytestmark = pytest.mark.gpu

NS_PER_MS = 1_000_000
SPIN_MS = 20  # long next to a launch's few microseconds, short enough for a quick test
LOWER_SHARE = 0.5  # each timed run must be at least this share of SPIN_MS
REPS = 3
WARMUP = 2


def live_events(context: Context) -> set[Event]:
    """The open events of ``context``. Held strongly, so that an unrelated event collected meanwhile cannot
    make a leak look like none: a test asserts that no event *outside* its "before" set is open after."""
    return {child for child in context.children if isinstance(child, Event)}


def counting(launch: Callable[[], object]) -> tuple[Callable[[], None], list[int]]:
    """``launch`` wrapped so that each call is counted in the returned list."""
    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        launch()

    return work, calls


@pytest.mark.parametrize("on_stream", [True, False], ids=["stream", "legacy-default-stream"])
def test_time_ms_measures_the_gpu_time_of_a_spin_kernel(spin: Function, stream: Stream, on_stream: bool) -> None:
    target = stream if on_stream else None
    work, calls = counting(lambda: spin.launch(1, 1, SPIN_MS * NS_PER_MS, stream=target))
    before = live_events(default_context())
    timing = time_ms(work, reps=REPS, warmup=WARMUP, stream=target)
    assert len(calls) == WARMUP + REPS
    assert len(timing.times) == REPS
    too_short = [ms for ms in timing.times if ms < LOWER_SHARE * SPIN_MS]
    assert not too_short, f"runs shorter than the {SPIN_MS} ms the kernel spins: {too_short}"
    assert timing.min <= timing.median <= max(timing.times)
    assert live_events(default_context()) <= before, "time_ms left an event open"


def test_time_ms_closes_its_events_when_work_raises(spin: Function, stream: Stream) -> None:
    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        if len(calls) == WARMUP + 2:  # the second timed run: after its start event was recorded
            raise RuntimeError("work failed")
        spin.launch(1, 1, 0, stream=stream)

    before = live_events(default_context())
    with pytest.raises(RuntimeError, match="work failed"):
        time_ms(work, reps=REPS, warmup=WARMUP, stream=stream)
    assert live_events(default_context()) <= before, "time_ms left an event open after work raised"
    stream.synchronize()


def test_time_ms_creates_its_events_in_the_streams_context() -> None:
    ctx = Context.create(0)
    try:
        with Stream(ctx) as other:
            timing = time_ms(lambda: None, reps=REPS, stream=other)  # nothing queued: two events in a row
            assert len(timing.times) == REPS and all(ms >= 0 for ms in timing.times)
            assert live_events(ctx) == set()
            with pytest.raises(ValueError, match="belongs to"):
                time_ms(lambda: None, stream=other, context=default_context())
    finally:
        ctx.close()


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"reps": 0}, ValueError, "reps must be at least 1"),
        ({"reps": -3}, ValueError, "reps must be at least 1"),
        ({"warmup": -1}, ValueError, "warmup must be at least 0"),
        ({"reps": 2.5}, TypeError, "reps must be an int"),
        ({"reps": True}, TypeError, "reps must be an int"),
        ({"stream": 0}, TypeError, "stream must be a rawcuda.Stream"),
    ],
)
def test_time_ms_refuses_bad_arguments_before_anything_runs(
    spin: Function, arguments: dict[str, object], error: type[Exception], match: str
) -> None:
    work, calls = counting(lambda: spin.launch(1, 1, 0))
    before = live_events(default_context())
    with pytest.raises(error, match=match):
        time_ms(work, **arguments)  # type: ignore[arg-type]
    assert calls == [] and live_events(default_context()) <= before


def test_time_ms_refuses_a_closed_stream_before_anything_runs(spin: Function) -> None:
    closed = Stream()
    closed.close()
    work, calls = counting(lambda: spin.launch(1, 1, 0))
    with pytest.raises(ClosedError):
        time_ms(work, stream=closed)
    assert calls == []
