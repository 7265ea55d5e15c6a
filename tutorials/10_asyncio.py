"""Tutorial 10 -- asyncio: ``await stream`` keeps the event loop alive; ``stream.synchronize()`` freezes it.

The seed article's warning, for Tokio: "CUDA stream semantics differ from Rust's Future.
``Stream::synchronize()`` is blocking -- it blocks the current OS thread. Using it in Tokio's async context
blocks the reactor thread." Python's asyncio has the same shape: one thread runs every coroutine, so one
coroutine that blocks in ``stream.synchronize()`` stops all of them.

rawcuda's ``await stream`` (``rawcuda/aio.py``) asks the driver to call a tiny host function when the
stream reaches it (``cuLaunchHostFunc``); that function only wakes the loop
(``loop.call_soon_threadsafe``). No thread blocks anywhere. cust has the same tool, which the seed does not
mention: ``Stream::add_callback`` (``cuStreamAddCallback``) runs a closure when the stream gets there, and
that closure can wake a Tokio future -- no thread pool needed.

To *see* the difference, the GPU must be busy for a known time: ``kernels/spin.cu`` busy-waits on the GPU's
nanosecond clock (``%globaltimer``) for as long as it is told. A ticker coroutine ticks every 10 ms and
records the longest gap between ticks: that gap is how long the loop was unavailable.

Run:  python tutorials/10_asyncio.py [--step]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Event, Module, Stream, aio

NS_PER_S = 1_000_000_000
MS_PER_S = 1000
SPIN_S = 1.0  # the GPU is busy this long in each experiment
TICK_S = 0.010
RESPONSIVE_S = 0.1  # a loop that never blocks keeps every gap far below this
CONCURRENT = 100
SPIN_RANGE_S = (0.05, 0.25)  # the 100 concurrent kernels' durations
EARLY_S = 0.02  # clock granularity: a wait may end this much before the nominal duration


async def ticker(stop: asyncio.Event) -> float:
    """Tick every TICK_S until ``stop``; return the longest gap between two ticks, in seconds."""
    longest, last = 0.0, time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(TICK_S)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return longest


async def with_ticker(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Run ``work`` while the ticker runs: (seconds the work took, the ticker's longest gap)."""
    stop = asyncio.Event()
    ticks = asyncio.ensure_future(ticker(stop))
    await asyncio.sleep(TICK_S)  # the ticker is running before the GPU work starts
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    stop.set()
    return elapsed, await ticks


def main(t: Tutorial) -> None:
    t.step("a kernel of known duration: spin(ns) busy-waits on the GPU's %globaltimer")
    spin = Module(rawcuda.kernels.ptx_path("spin")).function("spin")
    spin.launch(1, 1, 0)  # the first launch loads the kernel: do it before anything is timed
    spin.context.synchronize()
    t.say(f"{spin!r}: one thread, launched as spin<<<1, 1>>>({round(SPIN_S * NS_PER_S)}) for {SPIN_S:g} s")
    stream = Stream()

    def busy(seconds: float, on: Stream) -> None:
        spin.launch(1, 1, round(seconds * NS_PER_S), stream=on)

    t.step(
        f"the right way: `await stream` while a {SPIN_S:g} s kernel runs, a ticker ticking every "
        f"{TICK_S * MS_PER_S:.0f} ms"
    )

    async def awaiting() -> None:
        busy(SPIN_S, stream)
        await stream  # cuLaunchHostFunc(stream, host_fn, token); host_fn -> loop.call_soon_threadsafe

    elapsed, gap = asyncio.run(with_ticker(awaiting))
    t.say(f"the await took {elapsed:.3f} s; the longest gap between ticks was {gap * MS_PER_S:.1f} ms")
    t.check(elapsed >= SPIN_S - EARLY_S and stream.query(), "the await returned only after the kernel finished")
    t.check(gap < RESPONSIVE_S, f"the loop kept ticking (every gap < {RESPONSIVE_S * MS_PER_S:.0f} ms)")

    t.step("the trap: `stream.synchronize()` inside a coroutine (the seed's Tokio warning)")

    async def blocking() -> None:
        busy(SPIN_S, stream)
        stream.synchronize()  # cuStreamSynchronize: this OS thread -- the whole event loop -- waits here

    elapsed, gap = asyncio.run(with_ticker(blocking))
    t.say(f"the wait took {elapsed:.3f} s; the longest gap between ticks was {gap * MS_PER_S:.1f} ms")
    t.check(gap >= SPIN_S - EARLY_S, "the loop froze for the whole kernel: no coroutine ran meanwhile")
    t.say(
        "the seed's fix for Tokio is a dedicated thread pool; in Python that is\n"
        "`await asyncio.to_thread(stream.synchronize)` -- correct, but each pending wait holds a pool thread.\n"
        "cust's Stream::add_callback (cuStreamAddCallback) is the Rust counterpart of `await stream`."
    )

    t.step("events too: `await event` waits for the work recorded before it, not for the whole stream")

    async def awaiting_event() -> None:
        busy(SPIN_S / 2, stream)
        half = Event().record(stream)
        busy(SPIN_S / 2, stream)
        start = time.perf_counter()
        await half  # cuStreamWaitEvent on an internal stream, then the same host function
        waited = time.perf_counter() - start
        t.say(
            f"`await event` returned after {waited:.3f} s, while the stream still had "
            f"{'no' if stream.query() else 'more'} work"
        )
        t.check(half.query() and not stream.query(), "the event was done, the rest of the stream was not")
        await stream
        half.close()

    asyncio.run(awaiting_event())

    t.step(f"{CONCURRENT} concurrent awaits, each on its own stream with its own kernel")
    rng = np.random.default_rng()
    durations = rng.uniform(*SPIN_RANGE_S, CONCURRENT)
    streams = [Stream() for _ in range(CONCURRENT)]

    async def one(i: int) -> bool:
        busy(float(durations[i]), streams[i])
        marker = Event(timing=False).record(streams[i])
        await streams[i]
        # The kernel (and the marker after it) must be done when the await returns. The stream itself may
        # still be busy for a moment: the host function that woke us up is part of it and may not have
        # returned yet -- so ask the marker, not stream.query().
        finished = marker.query()
        marker.close()
        return finished

    async def all_of_them() -> list[bool]:
        return await asyncio.gather(*(one(i) for i in range(CONCURRENT)))

    start = time.perf_counter()
    done = asyncio.run(all_of_them())
    elapsed = time.perf_counter() - start
    t.say(
        f"{CONCURRENT} awaits completed in {elapsed:.3f} s (kernels of {SPIN_RANGE_S[0]:g}-{SPIN_RANGE_S[1]:g} s, "
        f"{durations.sum():.1f} s if run one after another)"
    )
    t.check(len(done) == CONCURRENT and all(done), f"all {CONCURRENT} awaits returned, each after its own kernel")
    t.check(aio.pending() == 0, "no wait is left registered")
    for s in (*streams, stream):
        s.close()


if __name__ == "__main__":
    run(main, "Tutorial 10: awaiting the GPU from asyncio without blocking the event loop")
