"""``await stream`` / ``await event`` on a real GPU: the event loop keeps running while the GPU works.

The GPU side is ``kernels/spin.cu``: one thread that busy-waits on the GPU's nanosecond clock, so a kernel
takes a known wall-clock time. A ticker task measures the longest gap between its ticks; a loop that is
never blocked keeps that gap near the tick period, a blocked loop shows the kernel's whole duration.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import rawcuda
from rawcuda import Event, Stream, capture
from rawcuda.extras import aio
from tests.helpers import longest_gap_while

pytestmark = pytest.mark.gpu

NS_PER_S = 1_000_000_000
LONG_SPIN_S = 2.0  # long enough that a blocked loop could not hide it
SHORT_SPIN_S = 0.5
TICK_S = 0.005
MAX_GAP_S = 0.05  # the ticker may never stall longer than this while a kernel is awaited
CONCURRENT = 100
SPIN_RANGE_S = (0.01, 0.1)  # durations of the concurrent kernels
EARLY_S = 0.02  # timer and clock granularity: an await may end this much before the nominal duration
CANCEL_AFTER_S = 0.05


def launch_spin(fn: rawcuda.Function, seconds: float, stream: Stream) -> None:
    fn.launch(1, 1, round(seconds * NS_PER_S), stream=stream)


def test_the_loop_keeps_ticking_while_a_long_kernel_is_awaited(spin: rawcuda.Function, stream: Stream) -> None:
    async def main() -> tuple[float, float, bool]:
        start = time.perf_counter()
        launch_spin(spin, LONG_SPIN_S, stream)
        marker = Event(timing=False).record(stream)
        gap = await longest_gap_while(asyncio.ensure_future(_await(stream)), TICK_S)
        # Ask a marker recorded after the kernel, not stream.query(): the host function that completed the
        # await is itself part of the stream and may still be returning.
        return gap, time.perf_counter() - start, marker.query()

    gap, elapsed, done = asyncio.run(main())
    assert done and elapsed >= LONG_SPIN_S - EARLY_S, "the await returned before the kernel finished"
    assert gap < MAX_GAP_S, f"the event loop stalled for {gap * 1000:.0f} ms"
    assert aio.pending() == 0


async def _await(target: Stream | Event) -> None:
    await target


def test_synchronize_inside_a_coroutine_stalls_the_loop(spin: rawcuda.Function, stream: Stream) -> None:
    async def blocking() -> None:
        await asyncio.sleep(TICK_S)  # let the ticker start
        stream.synchronize()  # the seed's Tokio trap: the whole loop waits here

    async def main() -> float:
        launch_spin(spin, SHORT_SPIN_S, stream)
        return await longest_gap_while(asyncio.ensure_future(blocking()), TICK_S)

    gap = asyncio.run(main())
    assert gap >= SHORT_SPIN_S / 2, f"expected the loop to freeze during synchronize(), longest gap {gap:.3f} s"


def test_await_event(spin: rawcuda.Function, stream: Stream) -> None:
    async def main() -> tuple[float, bool, bool]:
        launch_spin(spin, SHORT_SPIN_S, stream)
        event = Event().record(stream)
        later = Stream()
        launch_spin(spin, LONG_SPIN_S, later)  # unrelated, longer work must not delay the event's wait
        start = time.perf_counter()
        await event
        elapsed = time.perf_counter() - start
        result = (elapsed, event.query(), later.query())
        later.synchronize()
        later.close()
        event.close()
        return result

    elapsed, done, later_done = asyncio.run(main())
    assert done and SHORT_SPIN_S - EARLY_S <= elapsed < LONG_SPIN_S and not later_done
    assert aio.pending() == 0


def test_a_hundred_concurrent_awaits_all_complete(spin: rawcuda.Function) -> None:
    rng = np.random.default_rng()
    durations = rng.uniform(*SPIN_RANGE_S, CONCURRENT)
    streams = [Stream() for _ in range(CONCURRENT)]

    async def one(i: int) -> bool:
        launch_spin(spin, float(durations[i]), streams[i])
        if i % 2:
            event = Event().record(streams[i])
            await event
            done = event.query()
            event.close()
            return done
        marker = Event(timing=False).record(streams[i])
        await streams[i]
        return marker.query()  # the await may not return before the work queued before it is done

    async def main() -> list[bool]:
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(CONCURRENT))), timeout=60)

    results = asyncio.run(main())
    assert len(results) == CONCURRENT and all(results)
    assert aio.pending() == 0
    for s in streams:
        s.close()


def test_many_awaits_on_one_stream(spin: rawcuda.Function, stream: Stream) -> None:
    marker = Event(timing=False)

    async def main() -> list[None]:
        launch_spin(spin, SHORT_SPIN_S, stream)
        marker.record(stream)
        results = await asyncio.gather(*(_await(stream) for _ in range(CONCURRENT)))
        assert marker.query(), "an await returned before the kernel queued before it had finished"
        return results

    assert len(asyncio.run(main())) == CONCURRENT and aio.pending() == 0
    marker.close()


def test_cancelling_an_await_leaves_nothing_dangling(spin: rawcuda.Function, stream: Stream) -> None:
    async def main() -> None:
        launch_spin(spin, SHORT_SPIN_S, stream)
        task = asyncio.ensure_future(aio.wait(stream))
        await asyncio.sleep(CANCEL_AFTER_S)
        assert aio.pending() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert aio.pending() == 0
        before = aio.orphaned()
        await stream  # queued behind the cancelled wait's host function, which therefore runs first
        assert aio.orphaned() == before + 1, "the cancelled wait's host function should have run and done nothing"

    asyncio.run(main())
    assert aio.pending() == 0 and stream.query()


def test_cancelling_an_event_await(spin: rawcuda.Function, stream: Stream) -> None:
    async def main() -> None:
        launch_spin(spin, SHORT_SPIN_S, stream)
        event = Event().record(stream)
        task = asyncio.ensure_future(aio.wait(event))
        await asyncio.sleep(CANCEL_AFTER_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert aio.pending() == 0
        await event  # a fresh wait on the same event still works
        assert event.query()
        event.close()

    asyncio.run(main())
    assert aio.pending() == 0


def test_cancelling_an_event_await_returns_while_the_kernel_still_runs(spin: rawcuda.Function, stream: Stream) -> None:
    # The cancelled wait's internal stream still holds the wait; closing it there would block until the
    # kernel ended. It is set aside instead, and a later wait takes it back once it has finished.
    async def main() -> None:
        launch_spin(spin, LONG_SPIN_S, stream)
        event = Event().record(stream)
        task = asyncio.ensure_future(aio.wait(event))
        await asyncio.sleep(CANCEL_AFTER_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not event.query(), "the cancellation waited for the kernel to end"
        await event
        assert event.query()
        event.close()

    asyncio.run(main())
    assert aio.pending() == 0


def test_what_cannot_be_awaited(stream: Stream) -> None:
    async def unrecorded() -> None:
        await Event()

    with pytest.raises(ValueError, match="never recorded"):
        asyncio.run(unrecorded())

    async def capturing() -> None:
        with capture(stream), pytest.raises(RuntimeError, match="being captured"):
            await stream

    asyncio.run(capturing())
    assert aio.pending() == 0
