"""Tutorial 06c -- overlap: copy chunk k+1 on one stream while another stream computes chunk k.

Work on one stream runs in order; work on *different* streams may run at the same time. A GPU has copy
engines separate from its SMs, so a host->device copy on one stream can proceed while a kernel on another
computes -- the main way to hide PCIe transfers. The price is ordering: chunk k may be computed only after
chunk k has arrived, and the host must not wait for that itself. An *event* recorded after the copy, and
``cuStreamWaitEvent`` on the compute stream, make the GPU wait instead. This tutorial shows it three ways:

1. by hand, through ctypes: ``cuEventCreate``, ``cuEventRecord`` on the copy stream, ``cuStreamWaitEvent``
   on the compute stream, and a check that the compute saw the copied data;
2. with rawcuda: ``copy_stream`` / ``compute_stream``, ``event.record(copy_stream)`` and
   ``compute_stream.wait(event)``, a pipeline of 8 chunks run serialized on one stream and overlapped on
   two, timed with events, every result checked, and a timeline of both drawn from the events' timestamps;
3. with cust: ``event.record(&copy_stream)`` and ``compute_stream.wait_event(&event, StreamWaitEventFlags::DEFAULT)``.

Run:  python tutorials/06c_overlap_streams.py [--step]
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from ctypes import POINTER, byref, c_int, c_uint, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Event, PinnedBuffer, Stream, ops
from rawcuda.checked import cu
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import EventFlag, EventWaitFlag

CUDA_SUCCESS = 0
MIB = 1 << 20
F32 = np.dtype(np.float32)
NAN32 = np.float32(np.nan)  # poison: a result that was never written stays NaN and cannot pass a check
ALPHA = 0.5  # a power of two: with small integer data every intermediate result is exact in float32 ...
DATA_LIMIT = 1000  # ... for data in [-1000, 1000): every |y| below stays <= 1000 * 18, far below 2**23

# The by-hand step: one small copy on stream A, its doubling on stream B, ordered by an event.
PROBE_N = 1 << 22

# The pipeline: CHUNKS pieces; each is copied in, doubled (vector_add x + x) and then grown by
# SAXPY_PER_CHUNK saxpys, so that computing a chunk takes about as long as copying one over PCIe.
OVERLAP_N = 1 << 26  # 64 Mi floats = 256 MiB
CHUNKS = 8
SAXPY_PER_CHUNK = 32
OVERLAP_FACTOR = np.float32(2 + SAXPY_PER_CHUNK * ALPHA)  # y = x + x + SAXPY_PER_CHUNK * ALPHA * x
OVERLAP_REPS = 3
SERIALIZED = "serialized (one stream)"
OVERLAPPED = "overlapped (two streams)"
TIMELINE_COLUMNS = 64  # characters of the drawn timeline

Interval = tuple[float, float]  # (begin, end) in ms after the run's first event


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


class Marks:
    """Four timing events per chunk -- copy begins, copy ends, compute begins, compute ends -- and the run's two."""

    def __init__(self) -> None:
        self.start, self.end = Event(), Event()
        self.copy = [(Event(), Event()) for _ in range(CHUNKS)]
        self.compute = [(Event(), Event()) for _ in range(CHUNKS)]

    def intervals(self) -> tuple[float, list[Interval], list[Interval]]:
        """The run's total and each chunk's copy and compute (ms after ``start``); waits for the run to finish."""
        total = self.start.elapsed_ms(self.end)
        copies = [(self.start.elapsed_ms(a), self.start.elapsed_ms(b)) for a, b in self.copy]
        computes = [(self.start.elapsed_ms(a), self.start.elapsed_ms(b)) for a, b in self.compute]
        return total, copies, computes

    def close(self) -> None:
        for event in (self.start, self.end, *(e for pair in self.copy + self.compute for e in pair)):
            event.close()


def lane(intervals: list[Interval], scale_ms: float) -> str:
    """One row of the timeline: chunk k's interval drawn with the digit k, TIMELINE_COLUMNS for ``scale_ms``."""
    cells = [" "] * TIMELINE_COLUMNS
    for k, (begin, end) in enumerate(intervals):
        first = min(TIMELINE_COLUMNS - 1, int(begin / scale_ms * TIMELINE_COLUMNS))
        last = max(first + 1, min(TIMELINE_COLUMNS, math.ceil(end / scale_ms * TIMELINE_COLUMNS)))
        for column in range(first, last):
            cells[column] = str(k % 10)
    return "".join(cells)


def busy_ms(intervals: list[Interval]) -> float:
    return sum(end - begin for begin, end in intervals)


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "SM", "pageable memory", "pinned memory", "copy engine", "CUresult", "stream", "event")
    t.step("a GPU with copy engines beside its SMs, and two streams")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    dev = ctx.device
    engines = dev.attribute(DeviceAttribute.ASYNC_ENGINE_COUNT)
    t.say(
        f"{dev.name}: {dev.multiprocessor_count} SMs; CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = {engines} "
        "(copy engines that run beside the kernels)"
    )
    copy_stream, compute_stream = Stream(), Stream()
    rng = np.random.default_rng()

    t.step("by hand: cuEventRecord on stream A, cuStreamWaitEvent on stream B -- B waits on the GPU, not the host")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuEventCreate = declare(libcuda, "cuEventCreate", POINTER(c_void_p), c_uint)
    cuEventRecord = declare(libcuda, "cuEventRecord", c_void_p, c_void_p)
    cuStreamWaitEvent = declare(libcuda, "cuStreamWaitEvent", c_void_p, c_void_p, c_uint)
    cuEventDestroy = declare(libcuda, "cuEventDestroy_v2", c_void_p)
    probe = rng.integers(-DATA_LIMIT, DATA_LIMIT, PROBE_N, dtype=np.int32).astype(np.float32)
    probe_host = PinnedBuffer.from_array(probe)
    probe_x, probe_y = DeviceBuffer.empty(PROBE_N), DeviceBuffer.empty(PROBE_N)
    probe_x.fill(NAN32)  # if B doubled x before A's copy landed, the result would be NaN
    probe_y.fill(NAN32)
    arrived = c_void_p()
    create_rc = cuEventCreate(byref(arrived), EventFlag.DISABLE_TIMING)  # ordering only: no timestamp needed
    try:
        probe_x.copy_from(probe_host, stream=copy_stream)  # on A
        record_rc = cuEventRecord(arrived, copy_stream.handle)  # "the copy is done" -- once A gets here
        wait_rc = cuStreamWaitEvent(compute_stream.handle, arrived, EventWaitFlag.DEFAULT)  # B: wait for it
        ops.vector_add(probe_y, probe_x, probe_x, stream=compute_stream)  # on B: y = x + x
        doubled = probe_y.to_array(stream=compute_stream)  # copies back on B, and waits for B
    finally:
        destroy_rc = cuEventDestroy(arrived)  # B has finished by now: to_array(stream=B) waited for it
    t.say(
        "CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);\n"
        f"  cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)   -> {create_rc}\n"
        "  (copy on A)\n"
        f"  cuEventRecord(ev, A)                          -> {record_rc}\n"
        f"  cuStreamWaitEvent(B, ev, 0)                   -> {wait_rc}   (returns at once: the GPU waits)\n"
        "  (vector_add on B, copy back on B)\n"
        f"  cuEventDestroy_v2(ev)                         -> {destroy_rc}"
    )
    t.check(all(rc == CUDA_SUCCESS for rc in (create_rc, record_rc, wait_rc, destroy_rc)), "every call returned 0")
    t.check(bool(np.array_equal(doubled, probe + probe)), f"B computed 2x from the copied data in all {PROBE_N:,}")
    for obj in (probe_host, probe_x, probe_y):
        obj.close()

    t.step(f"rawcuda: {CHUNKS} chunks serialized on one stream, then overlapped on two, each run checked")
    integers = rng.integers(-DATA_LIMIT, DATA_LIMIT, OVERLAP_N, dtype=np.int32)
    x_host = PinnedBuffer.from_array(integers.astype(np.float32))
    expected = x_host.array * OVERLAP_FACTOR
    x_dev = DeviceBuffer.empty(OVERLAP_N, np.float32)
    y_dev = DeviceBuffer.empty(OVERLAP_N, np.float32)
    chunk = OVERLAP_N // CHUNKS
    parts = [slice(k * chunk, (k + 1) * chunk) for k in range(CHUNKS)]
    host_parts = [x_host.array[p] for p in parts]  # numpy views of pinned memory: still pinned
    x_parts, y_parts = [x_dev[p] for p in parts], [y_dev[p] for p in parts]  # device views, no copies
    t.say(
        f"{OVERLAP_N * F32.itemsize // MIB} MiB in {CHUNKS} chunks of {chunk * F32.itemsize // MIB} MiB; each "
        f"chunk: copy in, then y = x + x and {SAXPY_PER_CHUNK} saxpys (y += {ALPHA} x)"
    )

    def compute(k: int, on: Stream) -> None:
        ops.vector_add(y_parts[k], x_parts[k], x_parts[k], stream=on)  # y = 2x (also overwrites the poison)
        for _ in range(SAXPY_PER_CHUNK):
            ops.saxpy(y_parts[k], ALPHA, x_parts[k], stream=on)

    def serialized(m: Marks) -> None:
        m.start.record(compute_stream)
        for k in range(CHUNKS):  # one stream: each copy waits for the previous chunk's compute
            m.copy[k][0].record(compute_stream)
            x_parts[k].copy_from(host_parts[k], stream=compute_stream)
            m.copy[k][1].record(compute_stream)
            m.compute[k][0].record(compute_stream)
            compute(k, compute_stream)
            m.compute[k][1].record(compute_stream)
        m.end.record(compute_stream)

    def overlapped(m: Marks) -> None:
        m.start.record(copy_stream)
        compute_stream.wait(m.start)
        for k in range(CHUNKS):
            m.copy[k][0].record(copy_stream)
            x_parts[k].copy_from(host_parts[k], stream=copy_stream)
            m.copy[k][1].record(copy_stream)  # "chunk k has arrived" ...
            compute_stream.wait(m.copy[k][1])  # ... and the compute stream waits for it on the GPU, not here
            m.compute[k][0].record(compute_stream)
            compute(k, compute_stream)
            m.compute[k][1].record(compute_stream)
        m.end.record(compute_stream)  # the compute stream finishes last: it waited for every copy

    marks = Marks()
    timings: dict[str, float] = {}
    drawn: dict[str, tuple[float, list[Interval], list[Interval]]] = {}
    pipelines: list[tuple[str, Callable[[Marks], None]]] = [(SERIALIZED, serialized), (OVERLAPPED, overlapped)]
    for label, pipeline in pipelines:
        runs, correct = [], True
        for _ in range(OVERLAP_REPS):
            y_dev.fill(NAN32)  # poison every run, so each run must write every element itself
            pipeline(marks)
            drawn[label] = marks.intervals()  # waits for the run's last event
            runs.append(drawn[label][0])
            correct = bool(np.array_equal(y_dev.to_array(), expected)) and correct
        timings[label] = min(runs)
        t.say(f"{label:26s} {timings[label]:7.2f} ms (best of {OVERLAP_REPS}, first event to last)")
        t.check(
            correct,
            f"{label}: in each of {OVERLAP_REPS} runs all {OVERLAP_N:,} results equal {OVERLAP_FACTOR:g} * x exactly",
        )
    _, serial_copies, serial_computes = drawn[SERIALIZED]
    copy_ms, compute_ms = busy_ms(serial_copies), busy_ms(serial_computes)
    speedup = timings[SERIALIZED] / timings[OVERLAPPED]
    scale = max(total for total, _, _ in drawn.values())
    rows = []
    for label, (total, copies, computes) in drawn.items():
        rows.append(f"{label:26s} copy engine |{lane(copies, scale)}| {total:6.2f} ms")
        rows.append(f"{'':26s} SMs         |{lane(computes, scale)}|")
    t.say(
        f"the last run of each, drawn from its {4 * CHUNKS + 2} events (digit k = chunk k; one column = "
        f"{scale / TIMELINE_COLUMNS:.2f} ms):\n" + "\n".join(rows)
    )
    t.say(
        f"measured in the serialized run: copying took {copy_ms:.2f} ms in all, computing {compute_ms:.2f} ms;\n"
        f"their sum is {copy_ms + compute_ms:.2f} ms, the larger of the two {max(copy_ms, compute_ms):.2f} ms.\n"
        f"Overlapped ran {speedup:.2f}x as fast as serialized: with an event between each copy and its compute,\n"
        "copying chunk k+1 runs while chunk k computes, and the total tends to the larger of the two instead\n"
        "of their sum. The copies must come from pinned memory (tutorial 06b): from pageable memory the\n"
        "driver's staging serializes them."
    )
    marks.close()
    for obj in (x_dev, y_dev, x_host):
        obj.close()

    t.step("cust: Event::record(&copy_stream) and compute_stream.wait_event(&event, ...)")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/event.rs, stream.rs, memory/device/device_slice.rs):\n"
        "  let copy_stream = Stream::new(StreamFlags::DEFAULT, None)?;\n"
        "  let compute_stream = Stream::new(StreamFlags::DEFAULT, None)?;\n"
        "  let mut arrived = Vec::new();\n"
        "  for _ in 0..8 { arrived.push(Event::new(EventFlags::DISABLE_TIMING)?); }   // cuEventCreate\n"
        "  for k in 0..8 {\n"
        "      let part = k * chunk..(k + 1) * chunk;\n"
        "      unsafe { x_dev[part.clone()].async_copy_from(&x_host[part.clone()], &copy_stream)?; }\n"
        "      arrived[k].record(&copy_stream)?;                                     // cuEventRecord\n"
        "      compute_stream.wait_event(&arrived[k], StreamWaitEventFlags::DEFAULT)?; // cuStreamWaitEvent\n"
        "      // launch! the chunk's kernels on compute_stream\n"
        "  }\n"
        "  compute_stream.synchronize()?;\n"
        "(x_host: a LockedBuffer, whose slices stay page-locked; x_dev[range] is a DeviceSlice.) Both APIs map\n"
        "one call to one driver call here; the ordering is the programmer's in both."
    )
    for stream in (copy_stream, compute_stream):
        stream.close()


if __name__ == "__main__":
    run(main, "Tutorial 06c: overlapping copies and kernels on two streams, ordered by events")
