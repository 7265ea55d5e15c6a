"""Tutorial 06f -- the per-thread default stream: two threads, two implicit streams, one GPU timeline.

A call that names no stream uses an *implicit* one. cuda.h has two: ``CU_STREAM_LEGACY`` (0x1), the one
stream 0 means in the driver API -- shared by every thread of the context, and waiting for (and waited
for by) every blocking stream -- and ``CU_STREAM_PER_THREAD`` (0x2), a separate implicit stream for each
host thread. 06d showed the legacy stream's race with a non-blocking stream; this tutorial shows what the
per-thread stream changes for threaded code, measured on the GPU's own clock: ``spin_timed``
(``kernels/spin.cu``) writes when it started and ended, so "did the two kernels run at the same time" is
a fact of the GPU's timeline, read back, not a guess from host timers.

Each thread launches by hand (the declaration table's ``cuLaunchKernel``, the stream handle given as the
integer cuda.h defines), because rawcuda's classes take no bare handles: they could not check which
context a bare handle belongs to.

Run:  python tutorials/06f_per_thread_stream.py [--step]
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Function, Module, Stream
from rawcuda.checked import cu

CU_STREAM_LEGACY = 0x1  # cuda.h: #define CU_STREAM_LEGACY ((CUstream)0x1)
CU_STREAM_PER_THREAD = 0x2  # cuda.h: #define CU_STREAM_PER_THREAD ((CUstream)0x2)
SPIN_S = 0.2  # each kernel's length: far longer than the two threads take to launch
NS_PER_S = 1_000_000_000
TIMES_PER_KERNEL = 2  # spin_timed writes [start, end]
SOURCE = Path(rawcuda.kernels.KERNEL_DIR).parent.parent / "kernels" / "spin.cu"


def two_threads(fn: Function, handles: tuple[object, object], times: DeviceBuffer) -> tuple[float, float]:
    """Thread i makes the context current, then launches spin_timed on ``handles[i]`` and waits for it.

    ``handles`` are bare CUstream integers or rawcuda Streams. Returns (seconds for both threads, the overlap
    of the two kernels on the GPU's clock in seconds: positive when they ran at the same time).
    """
    ctx = fn.context
    views = [times.view(i * TIMES_PER_KERNEL, TIMES_PER_KERNEL) for i in range(2)]
    packs = [fn.pack((round(SPIN_S * NS_PER_S), view)) for view in views]  # kept alive until both returned
    ready, failures = threading.Barrier(2), []

    def worker(i: int) -> None:
        try:
            handle = handles[i]
            if isinstance(handle, Stream):
                ready.wait()
                fn.launch(1, 1, round(SPIN_S * NS_PER_S), views[i], stream=handle)
                handle.synchronize()
                return
            cu.cuCtxSetCurrent(ctx.handle)  # a new thread has no current context: the driver call needs one
            ready.wait()
            cu.cuLaunchKernel(fn.handle, 1, 1, 1, 1, 1, 1, 0, handle, packs[i].array, None)
            cu.cuStreamSynchronize(handle)  # CU_STREAM_PER_THREAD here is *this* thread's implicit stream
        except BaseException as exc:  # reported by the main thread, not lost in this one
            failures.append(exc)

    times.fill(np.uint64(0))
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    (a0, a1), (b0, b1) = times.to_array().reshape(2, TIMES_PER_KERNEL).tolist()
    for view in views:
        view.close()
    return elapsed, (min(a1, b1) - max(a0, b0)) / NS_PER_S


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "cust_raw",
        "kernel",
        "stream",
        "legacy default stream",
        "context",
        "name mangling",
        "non-blocking stream",
        "nvcc",
    )
    t.step("the two implicit streams, in cuda.h: CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2)")
    t.term("per-thread default stream")
    t.say(
        "#define CU_STREAM_LEGACY     ((CUstream)0x1)\n"
        "#define CU_STREAM_PER_THREAD ((CUstream)0x2)\n"
        "Stream 0 means the legacy stream, unless the program is built with CUDA_API_PER_THREAD_DEFAULT_STREAM\n"
        "(nvcc --default-stream per-thread): cuda.h then maps cuLaunchKernel to cuLaunchKernel_ptsz,\n"
        "cuMemcpyHtoD to cuMemcpyHtoD_v2_ptds and so on -- symbols for which stream 0 is the per-thread one."
    )

    t.step(f"a kernel that records when it ran: spin_timed, {SPIN_S:g} s on one thread")
    fn = Module(rawcuda.kernels.ptx_path("spin")).function("spin_timed")  # the first driver call: or status 77
    text = SOURCE.read_text() if SOURCE.is_file() else ""
    t.say(text[text.index('extern "C" __global__ void spin_timed') :].rstrip() if text else "(spin.cu not here)")
    times = DeviceBuffer.empty(2 * TIMES_PER_KERNEL, np.uint64)
    fn.launch(1, 1, 0, times)  # the first launch loads the kernel: not part of any measurement
    fn.context.synchronize()

    cases = [
        ("both threads on CU_STREAM_LEGACY", (CU_STREAM_LEGACY, CU_STREAM_LEGACY), False),
        ("both threads on CU_STREAM_PER_THREAD", (CU_STREAM_PER_THREAD, CU_STREAM_PER_THREAD), True),
        ("one on CU_STREAM_PER_THREAD, one on CU_STREAM_LEGACY", (CU_STREAM_PER_THREAD, CU_STREAM_LEGACY), False),
    ]
    for title, handles, together in cases:
        t.step(f"two threads, a {SPIN_S:g} s kernel each: {title}")
        elapsed, overlap = two_threads(fn, handles, times)
        t.say(f"both threads done in {elapsed:.3f} s; the kernels overlapped on the GPU for {max(overlap, 0):.3f} s")
        if together:
            t.check(overlap > 0, "each thread had its own implicit stream: the two kernels ran at the same time")
        else:
            t.check(overlap <= 0, "one kernel started only after the other ended: the legacy stream orders them")
    t.say(
        "The per-thread stream is independent of other threads' per-thread streams, but it is a blocking\n"
        "stream: the legacy stream still waits for it, and it for the legacy stream (the driver API's\n"
        "'Stream synchronization behavior' notes)."
    )

    t.step("what a program writes instead: one stream per thread, said out loud")
    with Stream() as s1, Stream() as s2:
        elapsed, overlap = two_threads(fn, (s1, s2), times)
    t.say(f"two rawcuda Streams, one per thread: done in {elapsed:.3f} s, overlapping for {max(overlap, 0):.3f} s")
    t.check(
        overlap > 0, "a Stream of its own per thread runs the kernels at the same time, as the per-thread stream did"
    )
    t.say(
        "rawcuda: stream=None is the legacy stream, and a bare handle (2) is refused -- rawcuda could not\n"
        "check which context it belongs to; make a Stream per thread instead. cust (Rust-CUDA at ac2674f,\n"
        "crates/cust/src/stream.rs): StreamFlags has DEFAULT and NON_BLOCKING only; a per-thread stream\n"
        "is the raw handle passed through cust_raw."
    )
    times.close()


if __name__ == "__main__":
    run(main, "Tutorial 06f: the per-thread default stream, on the GPU's own clock")
