"""Threads: many host threads driving one GPU at once, each result checked against numpy.

rawcuda's claims under test:

* every object works from any thread (each method makes its context current first);
* streams of different threads do not disturb each other's results, whatever mix of pinned and pageable
  memory and of stream-ordered (async) and fully synchronous copies the threads use;
* one :class:`~rawcuda.Function` may be launched from many threads at once with different arguments: the
  packed argument blocks are never rewritten, so no thread can launch with another thread's arguments.

Every iteration uses fresh random data and poisons its output with NaN first, so a launch that did not
run, or ran with someone else's arguments, shows up as a wrong element.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rawcuda import DeviceBuffer, PinnedBuffer, Stream, ops
from rawcuda.core.context import default_context
from rawcuda.ffi.constants import StreamFlag

pytestmark = pytest.mark.gpu

THREADS = 8
DURATION_S = 3.0  # per test: long enough for thousands of interleavings
JOIN_TIMEOUT_S = 120.0
MAX_N = 1 << 16  # elements per iteration: small, so each thread makes many iterations
NAN = np.float32(np.nan)
# Powers of two: alpha * x is exact in float32, so the GPU's fused multiply-add and numpy's separate
# multiply and add round identically and results can be compared bit for bit.
ALPHAS = (0.5, 2.0, -0.25, 4.0)
MIN_ITERATIONS = 3  # per thread: a thread that starved (or died early) fails the test


@dataclass
class Tally:
    """What the threads report back: iterations done per mode, and every failure with its traceback."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    iterations: dict[str, int] = field(default_factory=dict)
    per_thread: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, thread: int, mode: str) -> None:
        with self.lock:
            self.iterations[mode] = self.iterations.get(mode, 0) + 1
            self.per_thread[thread] = self.per_thread.get(thread, 0) + 1

    def fail(self, thread: int) -> None:
        with self.lock:
            self.failures.append(f"thread {thread}:\n{traceback.format_exc()}")


def run_threads(worker: Callable[[int, Tally, float], None]) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + DURATION_S
    start = threading.Barrier(THREADS)

    def body(index: int) -> None:
        try:
            start.wait()  # all threads begin together, to maximise overlap
            worker(index, tally, deadline)
        except BaseException:  # report, never lose, an error in a thread
            tally.fail(index)

    threads = [threading.Thread(target=body, args=(i,), name=f"gpu-worker-{i}") for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not tally.failures, "\n".join(tally.failures)
    for i in range(THREADS):
        assert tally.per_thread.get(i, 0) >= MIN_ITERATIONS, tally.per_thread
    return tally


def mixed_worker(index: int, tally: Tally, deadline: float) -> None:
    """c = a + b, then c = alpha * a + c, on this thread's stream; copies pinned or pageable, async or sync."""
    rng = np.random.default_rng()
    flags = StreamFlag.NON_BLOCKING if index % 2 else StreamFlag.DEFAULT  # both kinds race the legacy stream
    with Stream(flags=flags) as stream:
        iteration = 0
        while time.monotonic() < deadline:
            pinned, asynchronous = bool(iteration & 1), bool(iteration & 2)
            mode = f"{'pinned' if pinned else 'pageable'}-{'async' if asynchronous else 'sync'}"
            n = int(rng.integers(1, MAX_N))
            alpha = ALPHAS[iteration % len(ALPHAS)]
            a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
            expected = np.float32(alpha) * a + (a + b)
            on = stream if asynchronous else None
            hosts: list[Any] = [a, b]
            if pinned:  # page-locked copies of the inputs, and a page-locked place for the result
                hosts = [PinnedBuffer.from_array(a), PinnedBuffer.from_array(b), PinnedBuffer(n)]
            try:
                with DeviceBuffer.empty(n) as da, DeviceBuffer.empty(n) as db, DeviceBuffer.empty(n) as dc:
                    dc.fill(NAN, stream=on)
                    da.copy_from(hosts[0], stream=on)
                    db.copy_from(hosts[1], stream=on)
                    ops.vector_add(dc, da, db, stream=stream)  # kernels always on the thread's own stream
                    ops.saxpy(dc, alpha, da, stream=stream)
                    if pinned:
                        dc.copy_to(hosts[2], stream=on)
                        stream.synchronize()  # a stream-less copy_to is complete already; this is harmless then
                        got = hosts[2].array.copy()
                    else:
                        got = dc.to_array(stream=on)
                    stream.synchronize()  # nothing of ours may still run when the buffers are freed
                np.testing.assert_array_equal(got, expected, err_msg=f"thread {index}, {mode}, n={n}")
            finally:
                for host in hosts:
                    if isinstance(host, PinnedBuffer):
                        host.close()
            tally.count(index, mode)
            iteration += 1


def test_threads_with_their_own_streams() -> None:
    ctx = default_context()
    for stem, name in (("vector_add", "vector_add"), ("saxpy", "saxpy")):
        ops.kernel(stem, name, ctx)  # load once up front: module loading is not what this test measures
    open_before = Counter(repr(c) for c in ctx.children)
    tally = run_threads(mixed_worker)
    assert set(tally.iterations) == {"pinned-async", "pinned-sync", "pageable-async", "pageable-sync"}, tally
    leaked = Counter(repr(c) for c in ctx.children) - open_before  # every buffer, stream, pinned block closed
    assert not leaked, sorted(leaked.elements())


def shared_function_worker(index: int, tally: Tally, deadline: float) -> None:
    """Launch the *same* Function object as every other thread, with this thread's own buffers and sizes."""
    fn = ops.kernel("vector_add", "vector_add", default_context())
    rng = np.random.default_rng()
    # Every thread's buffers have the same capacity, so a launch with another thread's n can never write
    # out of bounds -- it would only produce wrong (checked) results.
    with (
        Stream() as stream,
        DeviceBuffer.empty(MAX_N) as da,
        DeviceBuffer.empty(MAX_N) as db,
        DeviceBuffer.empty(MAX_N) as dc,
    ):
        iteration = 0
        while time.monotonic() < deadline:
            n = int(rng.integers(1, MAX_N))
            a = rng.standard_normal(MAX_N, dtype=np.float32)
            b = rng.standard_normal(MAX_N, dtype=np.float32)
            da.copy_from(a, stream=stream)
            db.copy_from(b, stream=stream)
            dc.fill(NAN, stream=stream)
            grid = (n + ops.BLOCK - 1) // ops.BLOCK
            bound = iteration % 2 == 1  # half the launches through a BoundLaunch, packed in this thread
            if bound:
                fn.bind(grid, ops.BLOCK, dc, da, db, n, stream=stream)()
            else:
                fn.launch(grid, ops.BLOCK, dc, da, db, n, stream=stream)
            got = dc.to_array(stream=stream)
            mode = "bound" if bound else "launch"
            np.testing.assert_array_equal(got[:n], (a + b)[:n], err_msg=f"thread {index}, {mode}, n={n}")
            assert np.isnan(got[n:]).all(), f"thread {index}: elements past n={n} were written"
            tally.count(index, mode)
            iteration += 1


def test_threads_share_one_function() -> None:
    ops.kernel("vector_add", "vector_add", default_context())
    tally = run_threads(shared_function_worker)
    assert tally.iterations.get("launch", 0) > 0 and tally.iterations.get("bound", 0) > 0, tally
