"""Tutorial 06 -- streams and events: timing on the GPU, pinned copies, overlap, and the legacy-stream race.

The seed article's advice on streams is short: ``Stream::synchronize()`` blocks the thread, so keep it out
of async code. Streams matter for more than that. Work on one stream runs in order; work on *different*
streams may overlap -- a copy on one while a kernel runs on another -- which is the main way to hide
PCIe transfers. Events mark points in a stream: one stream can wait for another's event (no host
blocking), and two events time the GPU's own work.

This tutorial measures each of those, and then shows the classic bug: a synchronous ``cuMemcpyDtoH`` runs
on the *legacy default stream*, which does not wait for a ``NON_BLOCKING`` stream -- so the host can read
a result before the kernel that writes it has run. It is why cust clears ``NON_BLOCKING`` (Rust-CUDA issue
15): the seed's ``Stream::new(StreamFlags::NON_BLOCKING, None)`` gets an ordinary blocking stream.

Run:  python tutorials/06_streams_events.py [--step]
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Event, PinnedBuffer, Stream, ops
from rawcuda.checked import cu
from rawcuda.ffi.constants import StreamFlag

MIB = 1 << 20
MS_PER_S = 1000
US_PER_S = 1_000_000
BYTES_PER_GB = 1e9
F32 = np.dtype(np.float32)
NAN32 = np.float32(np.nan)  # poison: a result that was never written stays NaN and cannot pass a check

ALPHA = 0.5  # a power of two: with small integer data every intermediate result is exact in float32 ...
DATA_LIMIT = 1000  # ... for data in [-1000, 1000): every |y| below stays <= 1000 * 19, far below 2**24

# Section "events": a burst of launches, timed by the host clock and by events.
TIMING_N = 1 << 24  # 16 Mi floats: each saxpy takes long enough on the GPU to dwarf its launch cost
TIMING_LAUNCHES = 20
SAXPY_BYTES = 3 * F32.itemsize  # per element: saxpy reads x and y and writes y

# Section "pinned vs pageable".
COPY_BYTES = 256 * MIB
COPY_N = COPY_BYTES // F32.itemsize
COPY_REPS = 3  # the best of a few: the first copy from fresh pages can pay for page faults

# Section "overlap": CHUNKS pieces; each is copied in, doubled (vector_add x + x) and then grown by
# SAXPY_PER_CHUNK saxpys, so that computing a chunk takes about as long as copying one over PCIe.
OVERLAP_N = 1 << 26  # 64 Mi floats = 256 MiB
CHUNKS = 8
SAXPY_PER_CHUNK = 32
OVERLAP_FACTOR = np.float32(2 + SAXPY_PER_CHUNK * ALPHA)  # y = x + x + SAXPY_PER_CHUNK * ALPHA * x
OVERLAP_REPS = 3

# Section "the race": DELAY_LAUNCHES saxpys on scratch memory keep a NON_BLOCKING stream busy for
# milliseconds before its last kernel writes the output; the host queues them in a fraction of that.
RACE_N = 1 << 22
DELAY_N = 1 << 25
DELAY_LAUNCHES = 100
DELAY_ALPHA = 1e-3  # scratch arithmetic only: keeps the scratch values finite over all the launches
SCRATCH_VALUE = np.float32(1.0)  # the scratch data's content does not matter, only the time it takes
PROBE = 4096  # elements read back from the *end* of the output: a grid-stride kernel writes them last
SMALL_COPY_REPS = 20


def gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms / MS_PER_S) / BYTES_PER_GB


def timed_copy_ms(dst: DeviceBuffer, src: object, stream: Stream) -> float:
    """GPU milliseconds of one host->device copy, measured by two events around it on ``stream``."""
    with Event() as start, Event() as end:
        start.record(stream)
        dst.copy_from(src, stream=stream)
        end.record(stream)
        return start.elapsed_ms(end)


def main(t: Tutorial) -> None:
    t.step("a GPU, and streams: ordered queues of work")
    dev = rawcuda.Device(0)
    ctx = rawcuda.default_context()
    t.say(f"{dev.name}: {dev.multiprocessor_count} SMs; context {ctx!r}")
    stream = Stream()
    t.say(
        f"{stream!r} flags={stream.flags!r}: rawcuda's streams are *blocking* unless you ask -- they order\n"
        "with the legacy default stream (stream 0). The last step shows why that default matters."
    )
    rng = np.random.default_rng()

    t.step("timing: the host clock measures queuing; events measure the GPU")
    x0 = rng.integers(-DATA_LIMIT, DATA_LIMIT, TIMING_N, dtype=np.int32).astype(np.float32)
    y0 = rng.integers(-DATA_LIMIT, DATA_LIMIT, TIMING_N, dtype=np.int32).astype(np.float32)
    x, y = DeviceBuffer.from_array(x0), DeviceBuffer.from_array(y0)
    ops.saxpy(y, ALPHA, x, stream=stream)  # warm-up: loads the module (PTX JIT) outside the measurement
    stream.synchronize()
    with Event() as start, Event() as end:
        began = time.perf_counter()
        start.record(stream)
        for _ in range(TIMING_LAUNCHES):
            ops.saxpy(y, ALPHA, x, stream=stream)
        end.record(stream)
        queued_s = time.perf_counter() - began
        gpu_ms = start.elapsed_ms(end)  # waits for `end` to complete, then asks cuEventElapsedTime
        total_s = time.perf_counter() - began
    t.say(
        f"{TIMING_LAUNCHES} saxpy launches on {TIMING_N:,} floats:\n"
        f"  host time to queue them:      {queued_s * MS_PER_S:8.3f} ms  (launches return at once)\n"
        f"  GPU time between the events:  {gpu_ms:8.3f} ms  "
        f"({gb_per_s(SAXPY_BYTES * TIMING_N * TIMING_LAUNCHES, gpu_ms):.0f} GB/s of device memory)\n"
        f"  host time until they finished: {total_s * MS_PER_S:7.3f} ms"
    )
    t.check(gpu_ms > 0, "the events measured the GPU's work (cuEventElapsedTime > 0)")
    # y = y0 + (1 + TIMING_LAUNCHES) * ALPHA * x0: with small integers and ALPHA = 1/2 every step is exact.
    timed_expected = (y0 + (1 + TIMING_LAUNCHES) * ALPHA * x0.astype(np.float64)).astype(np.float32)
    t.check(
        bool(np.array_equal(y.to_array(), timed_expected)),
        f"all {TIMING_N:,} results of the {1 + TIMING_LAUNCHES} saxpys are exact",
    )
    t.say(
        "Event().record(stream) marks a point in the stream; start.elapsed_ms(end) waits for `end` and\n"
        "reads the GPU's clock (about 0.5 us resolution). time.perf_counter around async calls only\n"
        "measures how fast Python can queue them."
    )
    x.close()
    y.close()

    t.step(f"pinned vs pageable: copy {COPY_BYTES // MIB} MiB host -> device, timed with events")
    host = rng.standard_normal(COPY_N, dtype=np.float32)
    pinned = PinnedBuffer.from_array(host)
    dest = DeviceBuffer.empty(COPY_N, np.float32)
    rates: dict[str, float] = {}
    for label, source in (("pageable numpy array", host), ("PinnedBuffer (cuMemHostAlloc)", pinned)):
        dest.fill(NAN32)
        best_ms = min(timed_copy_ms(dest, source, stream) for _ in range(COPY_REPS))
        rates[label] = gb_per_s(COPY_BYTES, best_ms)
        t.say(f"{label:30s} {best_ms:7.2f} ms = {rates[label]:5.1f} GB/s")
        t.check(bool(np.array_equal(dest.to_array(), host)), f"every float arrived ({label})")
    ratio = rates["PinnedBuffer (cuMemHostAlloc)"] / rates["pageable numpy array"]
    t.say(
        f"pinned is {ratio:.1f}x the pageable rate here. The copy engine moves data by DMA, which needs\n"
        "pages that cannot move: from pageable memory the driver first copies into its own pinned staging\n"
        "buffer, piece by piece -- an extra copy, and the call cannot return before the data is taken.\n"
        "From pinned memory the DMA reads your buffer directly, and the call returns at once."
    )
    dest.close()
    pinned.close()

    t.step(f"overlap: {CHUNKS} chunks, copied on stream A while stream B computes the previous chunk")
    integers = rng.integers(-DATA_LIMIT, DATA_LIMIT, OVERLAP_N, dtype=np.int32)
    x_host = PinnedBuffer.from_array(integers.astype(np.float32))
    expected = x_host.array * OVERLAP_FACTOR
    x_dev = DeviceBuffer.empty(OVERLAP_N, np.float32)
    y_dev = DeviceBuffer.empty(OVERLAP_N, np.float32)
    chunk = OVERLAP_N // CHUNKS
    parts = [slice(k * chunk, (k + 1) * chunk) for k in range(CHUNKS)]
    host_parts = [x_host.array[p] for p in parts]  # numpy views of pinned memory: still pinned
    x_parts, y_parts = [x_dev[p] for p in parts], [y_dev[p] for p in parts]  # device views, no copies
    copy_stream, compute_stream = Stream(), Stream()
    copied = [Event(timing=False) for _ in range(CHUNKS)]  # ordering only: cheaper than timing events

    def compute(k: int, on: Stream) -> None:
        ops.vector_add(y_parts[k], x_parts[k], x_parts[k], stream=on)  # y = 2x (also overwrites the poison)
        for _ in range(SAXPY_PER_CHUNK):
            ops.saxpy(y_parts[k], ALPHA, x_parts[k], stream=on)

    def serialized() -> float:
        with Event() as start, Event() as end:
            start.record(compute_stream)
            for k in range(CHUNKS):  # one stream: each copy waits for the previous chunk's compute
                x_parts[k].copy_from(host_parts[k], stream=compute_stream)
                compute(k, compute_stream)
            end.record(compute_stream)
            return start.elapsed_ms(end)

    def overlapped() -> float:
        with Event() as start, Event() as end:
            start.record(copy_stream)
            compute_stream.wait(start)
            for k in range(CHUNKS):
                x_parts[k].copy_from(host_parts[k], stream=copy_stream)
                copied[k].record(copy_stream)  # "chunk k has arrived" ...
                compute_stream.wait(copied[k])  # ... and the compute stream waits for it on the GPU, not here
                compute(k, compute_stream)
            end.record(compute_stream)  # the compute stream finishes last: it waited for every copy
            return start.elapsed_ms(end)

    timings: dict[str, float] = {}
    for label, pipeline in (("serialized (one stream)", serialized), ("overlapped (two streams)", overlapped)):
        runs, correct = [], True
        for _ in range(OVERLAP_REPS):
            y_dev.fill(NAN32)  # poison every run, so each run must write every element itself
            runs.append(pipeline())
            correct = bool(np.array_equal(y_dev.to_array(), expected)) and correct
        timings[label] = min(runs)
        t.say(f"{label:26s} {timings[label]:7.2f} ms (best of {OVERLAP_REPS})")
        t.check(
            correct,
            f"{label}: in each of {OVERLAP_REPS} runs all {OVERLAP_N:,} results equal {OVERLAP_FACTOR:g} * x exactly",
        )
    speedup = timings["serialized (one stream)"] / timings["overlapped (two streams)"]
    t.say(
        f"overlapped runs {speedup:.2f}x as fast as serialized. The GPU has separate copy engines and SMs:\n"
        "with the work split into chunks and an event between each copy and its compute, copying chunk\n"
        "k+1 runs while chunk k computes, and the total tends to max(copy, compute) instead of their sum.\n"
        "The copies must come from pinned memory: from pageable memory the driver's staging serializes them."
    )
    for obj in (*copied, copy_stream, compute_stream, x_dev, y_dev, x_host):
        obj.close()

    t.step("the race: a synchronous cuMemcpyDtoH does not wait for a NON_BLOCKING stream")
    fast = Stream(flags=StreamFlag.NON_BLOCKING)
    a, b = rng.standard_normal(RACE_N, dtype=np.float32), rng.standard_normal(RACE_N, dtype=np.float32)
    truth = (a + b)[-PROBE:]
    a_dev, b_dev = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    out = DeviceBuffer.empty(RACE_N, np.float32)
    tail = out[RACE_N - PROBE :]  # a view of the last PROBE elements
    delay_x, delay_y = DeviceBuffer.empty(DELAY_N, np.float32), DeviceBuffer.empty(DELAY_N, np.float32)
    delay_x.fill(SCRATCH_VALUE)
    delay_y.fill(SCRATCH_VALUE)
    probe = np.empty(PROBE, np.float32)

    def queue_slow_write(on: Stream) -> None:
        """Poison `out`, then queue milliseconds of unrelated work and, last, the kernel that writes `out`."""
        out.fill(NAN32)  # stream-less: finished before anything below starts
        for _ in range(DELAY_LAUNCHES):
            ops.saxpy(delay_y, DELAY_ALPHA, delay_x, stream=on)
        ops.vector_add(out, a_dev, b_dev, stream=on)

    def raw_read() -> np.ndarray:
        """cuMemcpyDtoH, straight from the table: synchronous, on the legacy default stream."""
        ctx.activate()  # raw calls use the thread's current context
        cu.cuMemcpyDtoH(probe.ctypes.data, tail.ptr, probe.nbytes)
        return probe.copy()

    queue_slow_write(fast)  # warm-up: the kernels' modules are loaded before anything is timed or raced
    fast.synchronize()

    queue_slow_write(fast)
    racy = raw_read()
    fast.synchronize()
    stale = int(np.count_nonzero(~(racy == truth)))  # NaN poison compares unequal, so it counts as stale
    t.say(
        f"kernel queued on a NON_BLOCKING stream, then cuMemcpyDtoH at once: {stale} of {PROBE} values read\n"
        f"were stale ({int(np.isnan(racy).sum())} still the NaN poison)"
    )
    t.say(
        "(a race: it shows on most runs because the host queues the work ~100x faster than the GPU runs it,\n"
        "but nothing guarantees either outcome -- which is exactly the problem)"
        if stale
        else "(no stale value this time -- the race is still there: nothing ordered the copy after the kernel)"
    )

    t.say("three correct ways, each checked on every element:")
    queue_slow_write(fast)
    t.check(
        bool(np.array_equal(tail.to_array(stream=fast), truth)),
        "1. copy on the same stream (cuMemcpyDtoHAsync on `fast`, then wait for `fast`)",
    )
    queue_slow_write(fast)
    fast.synchronize()
    t.check(bool(np.array_equal(raw_read(), truth)), "2. synchronize the stream first, then cuMemcpyDtoH")
    queue_slow_write(fast)
    t.check(
        bool(np.array_equal(tail.to_array(), truth)),
        "3. rawcuda's stream-less copy (tail.to_array(): synchronizes the whole context first)",
    )
    blocking = Stream()  # StreamFlag.DEFAULT
    queue_slow_write(blocking)
    t.check(
        bool(np.array_equal(raw_read(), truth)),
        "and with a *blocking* stream the same raw cuMemcpyDtoH is correct: stream 0 waits for it",
    )

    t.step("why rawcuda's copies without a stream synchronize the whole context")
    ctx.synchronize()
    costs = []
    for _ in range(SMALL_COPY_REPS):
        began = time.perf_counter()
        tail.to_array()
        costs.append(time.perf_counter() - began)
    t.say(
        f"a stream-less copy of {PROBE * F32.itemsize // 1024} KiB takes "
        f"{statistics.median(costs) * US_PER_S:.0f} us here (median of {SMALL_COPY_REPS}), two\n"
        "cuCtxSynchronize calls included. A copy without a stream cannot know which stream wrote the data,\n"
        "so rawcuda waits for *all* of the context's work before it (and after it), making the race above\n"
        "impossible whatever the streams' flags. When those microseconds matter, pass stream=: the copy is\n"
        "then ordered with that stream only -- and you are responsible for the ordering between streams\n"
        "(stream.wait(event))."
    )
    for obj in (fast, blocking, stream, a_dev, b_dev, out, delay_x, delay_y):
        obj.close()


if __name__ == "__main__":
    run(main, "Tutorial 06: streams, events, pinned memory, overlap and the legacy-stream race")
