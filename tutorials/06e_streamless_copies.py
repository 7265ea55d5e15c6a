"""Tutorial 06e -- copies without a stream: rawcuda synchronizes the whole context around them, at a measured cost.

A copy given no stream cannot know which stream wrote the data it reads, or which will read what it
writes. rawcuda therefore makes ``buf.to_array()``, ``buf.copy_from(a)`` and ``buf.fill(v)`` without
``stream=`` fully synchronous: ``cuCtxSynchronize``, the synchronous copy, ``cuCtxSynchronize``. The
legacy-stream race of tutorial 06d cannot happen, whatever the streams' flags. The price: the copy waits
for *all* of the context's work, related or not. This tutorial shows it three ways:

1. by hand, through ctypes: the three calls, after a kernel queued on a NON_BLOCKING stream -- correct;
2. with rawcuda: ``tail.to_array()`` in the same situation, then the cost measured: on an idle GPU, and
   behind milliseconds of unrelated work that a copy on its own stream does not wait for;
3. with cust: ``copy_to`` is a bare ``cuMemcpyDtoH`` -- cheaper, and safe because cust's streams are
   all blocking (tutorial 06d); ``CurrentContext::synchronize()`` is its ``cuCtxSynchronize``.

Run:  python tutorials/06e_streamless_copies.py [--step]
"""

from __future__ import annotations

import ctypes
import statistics
import time
from ctypes import c_int, c_size_t, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Stream, ops
from rawcuda.checked import cu
from rawcuda.ffi.constants import StreamFlag

CUDA_SUCCESS = 0
NAN32 = np.float32(np.nan)  # poison: a value the kernel has not written yet stays NaN
US_PER_S = 1_000_000
MS_PER_S = 1000
KIB = 1024

# DELAY_LAUNCHES saxpys on scratch memory keep a stream busy for milliseconds before its last kernel writes
# the output; the host queues them in a fraction of that.
RACE_N = 1 << 22
DELAY_N = 1 << 25
DELAY_LAUNCHES = 100
DELAY_ALPHA = 1e-3  # scratch arithmetic only: keeps the scratch values finite over all the launches
SCRATCH_VALUE = np.float32(1.0)  # the scratch data's content does not matter, only the time it takes
PROBE = 4096  # elements read back from the end of the output
SMALL_COPY_REPS = 20


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def median_us(action: Any, reps: int) -> float:
    """Median host time of ``action()`` in microseconds (it is synchronous: the host clock is the right one)."""
    costs = []
    for _ in range(reps):
        began = time.perf_counter()
        action()
        costs.append(time.perf_counter() - began)
    return statistics.median(costs) * US_PER_S


def main(t: Tutorial) -> None:
    t.words(
        "cust", "kernel", "block", "context", "current context", "CUresult", "stream", "event", "non-blocking stream"
    )
    t.step("a GPU, a NON_BLOCKING stream, and out = a + b written last after milliseconds of other work")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    fast = Stream(flags=StreamFlag.NON_BLOCKING)
    rng = np.random.default_rng()
    a, b = rng.standard_normal(RACE_N, dtype=np.float32), rng.standard_normal(RACE_N, dtype=np.float32)
    truth = (a + b)[-PROBE:]
    a_dev, b_dev = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    out = DeviceBuffer.empty(RACE_N, np.float32)
    tail = out[RACE_N - PROBE :]  # a view of the last PROBE elements
    delay_x, delay_y = DeviceBuffer.empty(DELAY_N, np.float32), DeviceBuffer.empty(DELAY_N, np.float32)
    delay_x.fill(SCRATCH_VALUE)
    delay_y.fill(SCRATCH_VALUE)
    t.say(
        f"device 0: {ctx.device.name}; a stream whose cuStreamGetFlags reads {int(fast.flags)} ({fast.flags.name});\n"
        f"the last {PROBE} of {RACE_N:,} sums are read back"
    )

    def queue_delay(on: Stream) -> None:
        for _ in range(DELAY_LAUNCHES):
            ops.saxpy(delay_y, DELAY_ALPHA, delay_x, stream=on)

    def queue_slow_write(on: Stream) -> None:
        """Poison `out`, then queue milliseconds of unrelated work and, last, the kernel that writes `out`."""
        out.fill(NAN32)  # stream-less: finished before anything below starts
        queue_delay(on)
        ops.vector_add(out, a_dev, b_dev, stream=on)

    queue_slow_write(fast)  # warm-up: the kernels' modules are loaded before anything is measured
    fast.synchronize()

    t.step("by hand: cuCtxSynchronize, cuMemcpyDtoH_v2, cuCtxSynchronize -- what a stream-less copy is")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuCtxSynchronize = declare(libcuda, "cuCtxSynchronize")
    cuMemcpyDtoH = declare(libcuda, "cuMemcpyDtoH_v2", c_void_p, c_uint64, c_size_t)
    probe = np.empty(PROBE, np.float32)
    queue_slow_write(fast)
    rcs = [cuCtxSynchronize(), cuMemcpyDtoH(probe.ctypes.data, tail.ptr, probe.nbytes), cuCtxSynchronize()]
    t.say(
        "CUresult cuCtxSynchronize(void);   -- blocks until every stream of the current context is idle\n"
        f"  cuCtxSynchronize() ; cuMemcpyDtoH(host, tail, {probe.nbytes}) ; cuCtxSynchronize()  -> {rcs}"
    )
    t.check(all(rc == CUDA_SUCCESS for rc in rcs), "all three returned 0")
    t.check(
        bool(np.array_equal(probe, truth)),
        "the copy read the finished sums: the first cuCtxSynchronize waited for the NON_BLOCKING stream too",
    )

    t.step("rawcuda: tail.to_array() without a stream is right -- and what it costs")
    queue_slow_write(fast)
    t.check(
        bool(np.array_equal(tail.to_array(), truth)),
        "tail.to_array() right after the kernel was queued on the NON_BLOCKING stream read every sum",
    )
    ctx.synchronize()
    own = Stream()  # a second stream for the copy: it has no work of its own queued
    idle_streamless = median_us(tail.to_array, SMALL_COPY_REPS)
    idle_on_stream = median_us(lambda: tail.to_array(stream=own), SMALL_COPY_REPS)
    queue_delay(fast)  # milliseconds of work that has nothing to do with `tail`
    began = time.perf_counter()
    behind_on_stream = tail.to_array(stream=own)  # ordered with `own` only
    on_stream_ms = (time.perf_counter() - began) * MS_PER_S
    began = time.perf_counter()
    behind_streamless = tail.to_array()  # waits for `fast` as well
    streamless_ms = (time.perf_counter() - began) * MS_PER_S
    t.say(
        f"copying {PROBE * probe.itemsize // KIB} KiB to the host, host clock (the calls are synchronous):\n"
        f"  idle GPU, without a stream:    {idle_streamless:8.1f} us  (median of {SMALL_COPY_REPS}, two "
        "cuCtxSynchronize included)\n"
        f"  idle GPU, on its own stream:   {idle_on_stream:8.1f} us  (median of {SMALL_COPY_REPS}, "
        "cuMemcpyDtoHAsync + cuStreamSynchronize)\n"
        f"  behind {DELAY_LAUNCHES} unrelated saxpys on another stream:\n"
        f"    on its own stream:           {on_stream_ms:8.3f} ms  (issued first)\n"
        f"    without a stream:            {streamless_ms:8.3f} ms  (waits for what is left of the saxpys)"
    )
    t.check(
        bool(np.array_equal(behind_on_stream, truth)) and bool(np.array_equal(behind_streamless, truth)),
        "both copies behind the unrelated work read every sum correctly",
    )
    t.say(
        "a copy without a stream is always right and costs the wait for everything queued before it. When\n"
        "that matters, pass stream=: the copy is then ordered with that stream only -- and the ordering\n"
        "between streams is yours (stream.wait(event), tutorial 06c)."
    )

    t.step("cust: copy_to is a bare cuMemcpyDtoH; CurrentContext::synchronize() is cuCtxSynchronize")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/memory/device/device_slice.rs, context/mod.rs):\n"
        "  dev_c.copy_to(&mut host_c)?;           // cuMemcpyDtoH: the legacy stream, no context synchronize\n"
        "  CurrentContext::synchronize()?;        // cuCtxSynchronize, when you want rawcuda's behaviour\n"
        "  unsafe { dev_c.async_copy_to(&mut pinned_c, &stream)?; }  stream.synchronize()?;   // stream=\n"
        "copy_to waits only for what the legacy stream waits for: every *blocking* stream's work. With cust\n"
        "that is every stream (Stream::new removes NON_BLOCKING, tutorial 06d), so the seed's\n"
        "`stream.synchronize()?; dev_c.copy_to(&mut host_c)?;` is correct even without its synchronize."
    )
    for obj in (fast, own, a_dev, b_dev, out, delay_x, delay_y):
        obj.close()


if __name__ == "__main__":
    run(main, "Tutorial 06e: copies without a stream synchronize the context -- safe, and what it costs")
