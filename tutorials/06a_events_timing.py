"""Tutorial 06a -- timing GPU work: events recorded into a stream measure the GPU; the host clock measures queuing.

A kernel launch returns as soon as the work is *queued*, so ``time.perf_counter`` around launches measures
how fast Python can queue them. An *event* is a marker recorded into a stream: the GPU timestamps it when
it gets there, and ``cuEventElapsedTime`` gives the milliseconds between two such markers (with a
resolution of about half a microsecond, says cuda.h). This tutorial times a burst of saxpy launches
three ways:

1. by hand, through ctypes: ``cuEventCreate``, ``cuEventRecord``, ``cuEventSynchronize``,
   ``cuEventElapsedTime_v2`` -- and what the driver answers when asked too early (NOT_READY, 600) or
   about an event made without timing (INVALID_HANDLE, 400);
2. with rawcuda: ``Event()``, ``event.record(stream)``, ``start.elapsed_ms(end)`` (which waits for ``end``),
   beside the host clock;
3. with cust: ``Event::new``, ``event.record(&stream)``, and ``stop.elapsed_time_f32(&start)`` -- called on
   the *later* event, and it does not wait.

Every result of every launch is checked exactly against numpy. Last, where events stop: the commands that
hand the same script to a profiler (Nsight Systems for the timeline, Nsight Compute for one kernel).

Run:  python tutorials/06a_events_timing.py [--step]
"""

from __future__ import annotations

import ctypes
import shutil
import time
from ctypes import POINTER, byref, c_float, c_int, c_uint, c_void_p
from pathlib import Path
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Event, Stream, ops
from rawcuda.checked import cu
from rawcuda.ffi.constants import EventFlag
from rawcuda.ffi.results import Result

CUDA_SUCCESS = 0
MS_PER_S = 1000
BYTES_PER_GB = 1e9
PROFILERS = ("nsys", "ncu")  # Nsight Systems (the timeline) and Nsight Compute (one kernel in depth)
F32 = np.dtype(np.float32)
ALPHA = 0.5  # a power of two: with small integer data every intermediate result is exact in float32 ...
DATA_LIMIT = 1000  # ... for data in [-1000, 1000): |y| stays <= 1000 * (1 + 41 / 2), far below 2**23
TIMING_N = 1 << 24  # 16 Mi floats: each saxpy takes long enough on the GPU to dwarf its launch cost
TIMING_LAUNCHES = 20  # per timed burst; two bursts (by hand, rawcuda) and one warm-up launch in all
SAXPY_BYTES = 3 * F32.itemsize  # per element: saxpy reads x and y and writes y


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms / MS_PER_S) / BYTES_PER_GB


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "grid", "block", "occupancy", "CUresult", "stream", "legacy default stream")
    t.step("a GPU, a stream, and two vectors of small integers (so that every saxpy result is exact)")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    stream = Stream()
    rng = np.random.default_rng()
    x0 = rng.integers(-DATA_LIMIT, DATA_LIMIT, TIMING_N, dtype=np.int32).astype(np.float32)
    y0 = rng.integers(-DATA_LIMIT, DATA_LIMIT, TIMING_N, dtype=np.int32).astype(np.float32)
    x, y = DeviceBuffer.from_array(x0), DeviceBuffer.from_array(y0)
    ops.saxpy(y, ALPHA, x, stream=stream)  # warm-up: loads the module (PTX JIT) outside the measurements
    stream.synchronize()
    launches = 1
    t.say(f"device 0: {ctx.device.name}; y = {ALPHA} * x + y on {TIMING_N:,} floats, {TIMING_LAUNCHES} times per burst")

    t.step("by hand: cuEventCreate, cuEventRecord around the burst, cuEventSynchronize, cuEventElapsedTime_v2")
    t.term("event")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuEventCreate = declare(libcuda, "cuEventCreate", POINTER(c_void_p), c_uint)
    cuEventRecord = declare(libcuda, "cuEventRecord", c_void_p, c_void_p)
    cuEventQuery = declare(libcuda, "cuEventQuery", c_void_p)
    cuEventSynchronize = declare(libcuda, "cuEventSynchronize", c_void_p)
    # cuda.h 13 #defines cuEventElapsedTime to cuEventElapsedTime_v2.
    cuEventElapsedTime = declare(libcuda, "cuEventElapsedTime_v2", POINTER(c_float), c_void_p, c_void_p)
    cuEventDestroy = declare(libcuda, "cuEventDestroy_v2", c_void_p)
    start, end, untimed = c_void_p(), c_void_p(), c_void_p()
    create_rcs = [
        cuEventCreate(byref(start), EventFlag.DEFAULT),
        cuEventCreate(byref(end), EventFlag.DEFAULT),
        cuEventCreate(byref(untimed), EventFlag.DISABLE_TIMING),
    ]
    ms = c_float()
    try:
        record_rcs = [cuEventRecord(start, stream.handle)]
        for _ in range(TIMING_LAUNCHES):
            ops.saxpy(y, ALPHA, x, stream=stream)
        launches += TIMING_LAUNCHES
        # `untimed` goes in before `end`: once `end` has completed, so has `untimed`.
        record_rcs += [cuEventRecord(untimed, stream.handle), cuEventRecord(end, stream.handle)]
        early_rc = cuEventElapsedTime(byref(ms), start, end)  # the GPU is most likely still running the burst
        query_rc = cuEventQuery(end)
        sync_rc = cuEventSynchronize(end)  # block until the GPU has passed `end`
        elapsed_rc = cuEventElapsedTime(byref(ms), start, end)
        raw_ms = ms.value
        untimed_rc = cuEventElapsedTime(byref(ms), start, untimed)
    finally:
        destroy_rcs = [cuEventDestroy(event) for event in (start, end, untimed)]
    t.say(
        "CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);\n"
        "CUresult cuEventRecord(CUevent hEvent, CUstream hStream);\n"
        "CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);\n"
        f"  cuEventCreate x3 (DEFAULT, DEFAULT, DISABLE_TIMING)             -> {create_rcs}\n"
        f"  cuEventRecord(start, s); {TIMING_LAUNCHES} saxpys; (untimed, s), (end, s) -> {record_rcs}\n"
        f"  cuEventElapsedTime(&ms, start, end) at once                     -> {early_rc}"
        + ("  (NOT_READY: the GPU had not reached `end` yet)" if early_rc == Result.ERROR_NOT_READY else "")
        + f"\n  cuEventQuery(end)                                               -> {query_rc}\n"
        f"  cuEventSynchronize(end)                                         -> {sync_rc}\n"
        f"  cuEventElapsedTime(&ms, start, end)                             -> {elapsed_rc}, ms = {raw_ms:.3f}\n"
        f"  cuEventElapsedTime(&ms, start, untimed)                         -> {untimed_rc}\n"
        f"  cuEventDestroy_v2 x3                                            -> {destroy_rcs}"
    )
    t.check(
        all(rc == CUDA_SUCCESS for rc in [*create_rcs, *record_rcs, sync_rc, elapsed_rc, *destroy_rcs]),
        "create, record, synchronize, elapsed time and destroy all returned 0",
    )
    t.check(
        early_rc in (CUDA_SUCCESS, Result.ERROR_NOT_READY) and query_rc in (CUDA_SUCCESS, Result.ERROR_NOT_READY),
        "asked before the GPU got there, the driver answers 600 (NOT_READY: not a failure, 'not yet') or 0",
    )
    t.check(raw_ms > 0, f"the events measured {raw_ms:.3f} ms of GPU work")
    t.check(
        untimed_rc == Result.ERROR_INVALID_HANDLE,
        "an event created with DISABLE_TIMING cannot be timed: 400, CUDA_ERROR_INVALID_HANDLE, as cuda.h says",
    )

    t.step("rawcuda: Event().record(stream) and start.elapsed_ms(end), beside the host clock")
    with Event() as first, Event() as last:
        began = time.perf_counter()
        first.record(stream)
        for _ in range(TIMING_LAUNCHES):
            ops.saxpy(y, ALPHA, x, stream=stream)
        last.record(stream)
        queued_s = time.perf_counter() - began
        gpu_ms = first.elapsed_ms(last)  # waits for `last` to complete, then asks cuEventElapsedTime
        total_s = time.perf_counter() - began
    launches += TIMING_LAUNCHES
    t.say(
        f"{TIMING_LAUNCHES} saxpy launches on {TIMING_N:,} floats:\n"
        f"  host time to queue them:       {queued_s * MS_PER_S:8.3f} ms  (launches return at once)\n"
        f"  GPU time between the events:   {gpu_ms:8.3f} ms  "
        f"({gb_per_s(SAXPY_BYTES * TIMING_N * TIMING_LAUNCHES, gpu_ms):.0f} GB/s of device memory)\n"
        f"  host time until they finished: {total_s * MS_PER_S:8.3f} ms\n"
        f"  (the burst timed by hand above: {raw_ms:.3f} ms)"
    )
    t.check(gpu_ms > 0, "the events measured the GPU's work (cuEventElapsedTime > 0)")
    with Event(timing=False) as cheap:
        cheap.record(stream)
        try:
            cheap.elapsed_ms(cheap)
        except ValueError as exc:
            t.say(f"Event(timing=False).elapsed_ms(...)\n  -> ValueError: {exc}")
            refused = True
        else:
            refused = False
    t.check(refused, "rawcuda refuses to time an event made without timing, before the driver's 400")
    # y = y0 + launches * ALPHA * x0: with small integers and ALPHA = 1/2 every intermediate is exact in float32.
    expected = (y0 + launches * ALPHA * x0.astype(np.float64)).astype(np.float32)
    t.check(
        bool(np.array_equal(y.to_array(), expected)),
        f"all {TIMING_N:,} results of the {launches} saxpys (warm-up and both bursts) are exact",
    )

    t.step("where events stop and a profiler takes over")
    t.term("profiler")
    script = Path(__file__).resolve()
    t.say(
        "events answer the question you asked: how long between two marks. Why a kernel takes that long, and\n"
        "what else ran meanwhile, is a profiler's answer -- on this same script, unchanged:\n"
        f"  nsys profile --trace=cuda -o timeline python3 {script.name}\n"
        "      every cuLaunchKernel, copy and synchronize on a timeline, per stream (open timeline.nsys-rep)\n"
        f"  ncu --kernel-name saxpy --launch-count 1 --set full python3 {script.name}\n"
        "      one saxpy replayed and measured: memory throughput against the peak, occupancy, stalls"
    )
    found = {tool: shutil.which(tool) for tool in PROFILERS}
    t.say(
        "on this machine: "
        + ", ".join(f"{tool} at {path}" if path else f"no {tool} on PATH" for tool, path in found.items())
        + " (both ship with the CUDA toolkit; a profiler needs the driver's permission to read the GPU's\n"
        "counters, so ncu may ask for root or NVreg_RestrictProfilingToAdminUsers=0)"
    )

    t.step("cust: Event::new, record(&stream), and stop.elapsed_time_f32(&start) -- which does not wait")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/event.rs):\n"
        "  let start = Event::new(EventFlags::DEFAULT)?;      // cuEventCreate\n"
        "  let stop = Event::new(EventFlags::DEFAULT)?;\n"
        "  start.record(&stream)?;                             // cuEventRecord(start, stream)\n"
        "  for _ in 0..20 {\n"
        "      let (yp, xp) = (y.as_device_ptr(), x.as_device_ptr());\n"
        "      unsafe { launch!(saxpy<<<grid, block, 0, stream>>>(yp, 0.5f32, xp, n))?; }\n"
        "  }\n"
        "  stop.record(&stream)?;\n"
        "  stop.synchronize()?;                                // without it: Err(CudaError::NotReady), as above\n"
        "  let ms: f32 = stop.elapsed_time_f32(&start)?;       // cuEventElapsedTime(&ms, start, stop)\n"
        "The method is called on the *later* event and takes the earlier one; rawcuda's reads the other way\n"
        "(start.elapsed_ms(stop)) and synchronizes on stop first. record() takes a &Stream: cust offers no\n"
        "NULL stream to record on. Timing an event made with EventFlags::DISABLE_TIMING gives\n"
        "Err(CudaError::InvalidHandle) (cust's own test says so), the 400 seen above.\n"
        "time.perf_counter (or std::time::Instant) around launches measures queuing, in either language."
    )
    for obj in (x, y, stream):
        obj.close()


if __name__ == "__main__":
    run(main, "Tutorial 06a: timing GPU work with events, by hand, in rawcuda and in cust")
