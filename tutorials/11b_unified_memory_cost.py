"""Tutorial 11b -- what unified memory costs: managed vs explicit device memory, measured the same way.

The seed article says unified memory costs memory-bound kernels 30-50%. What it costs depends on where
the pages are when the kernel runs -- and a comparison is only fair if both sides are measured alike.
So every case here follows one protocol:

* per trial, fresh random inputs go where the case puts them -- explicit: the host fills pinned buffers
  and ``cuMemcpyHtoDAsync`` copies them to device memory; managed: the host writes the managed arrays,
  then a prefetch, or nothing -- and the output is poisoned with NaN on the GPU;
* then the same vector add is launched ``LAUNCHES`` times on one stream, each launch timed by its own pair
  of CUDA events: launch 1 is *cold* (right after the data arrived), the others are *warm*;
* medians over ``TRIALS`` trials; every result is checked element by element.

The explicit baseline therefore has a cold and a warm figure too, and managed memory is compared cold with
cold, warm with warm. Every sentence of the verdict is computed from this run's numbers (the committed
benchmark, bench/unified_memory.py, follows the same protocol at 256 MiB per array).

Tutorial 11a shows the API (by hand, rawcuda, cust); this one only measures.

Run:  python tutorials/11b_unified_memory_cost.py [--step]
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, DeviceBuffer, Event, ManagedBuffer, PinnedBuffer, Stream, ops
from rawcuda.core.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAdvise

N = 1 << 24  # floats per array: 64 MiB (three arrays per case)
TRIALS = 5  # fresh data placed this many times per case; cold figures are medians over these
LAUNCHES = 10  # launches per trial: the first is cold, the other LAUNCHES - 1 warm
NAN32 = np.float32(np.nan)
F32_BYTES = 4
MOVED_ARRAYS = 2  # a and b: what each case must bring to the GPU (c is written there)
SAME_WITHIN = 0.05  # ratios within 5% of 1 are reported as "the same"
PERCENT_BELOW = 2.0  # below 2x a slowdown reads best as a percentage, above it as a factor
SEED_CLAIM = (1.30, 1.50)  # "30%~50% performance regression"
MS_PER_S = 1e3
BYTES_PER_GB = 1e9

READS = "the host read finite inputs"  # the tally of the host's own reads, per advice case


@dataclass
class Case:
    """One way of getting the data to the kernel, and what it measured."""

    label: str
    placement: str  # what was timed before the launches ("" when nothing was)
    place_ms: list[float] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)

    @property
    def cold(self) -> float:
        return statistics.median(self.cold_ms)

    @property
    def warm(self) -> float:
        return statistics.median(self.warm_ms)

    @property
    def place(self) -> float:
        return statistics.median(self.place_ms) if self.place_ms else 0.0


def describe(ratio: float) -> str:
    """A ratio of two times in words: '1.41x (41% slower)', '0.98x (the same within 5%)', '130x as long'."""
    if abs(ratio - 1) <= SAME_WITHIN:
        return f"{ratio:.2f}x (the same within {SAME_WITHIN:.0%})"
    if ratio < 1:
        return f"{ratio:.2f}x ({1 - ratio:.0%} faster)"
    if ratio < PERCENT_BELOW:
        return f"{ratio:.2f}x ({ratio - 1:.0%} slower)"
    return f"{ratio:.0f}x as long"


def in_seed_range(ratio: float) -> str:
    low, high = SEED_CLAIM
    where = "inside" if low <= ratio <= high else "outside"
    return f"{where} the seed's {low - 1:.0%}-{high - 1:.0%}"


class Timer:
    """CUDA events on one stream: a pair around a placement, and one pair per launch (created once)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.pairs = [(Event(), Event()) for _ in range(LAUNCHES + 1)]

    def span_ms(self, work: Callable[[], object]) -> float:
        start, end = self.pairs[-1]
        start.record(self.stream)
        work()
        end.record(self.stream)
        return start.elapsed_ms(end)

    def launches_ms(self, launch: Callable[[], object]) -> list[float]:
        for start, end in self.pairs[:LAUNCHES]:
            start.record(self.stream)
            launch()
            end.record(self.stream)
        return [start.elapsed_ms(end) for start, end in self.pairs[:LAUNCHES]]

    def close(self) -> None:
        for pair in self.pairs:
            for event in pair:
                event.close()


def record(case: Case, launches: list[float]) -> None:
    case.cold_ms.append(launches[0])
    case.warm_ms.extend(launches[1:])


def tally(right: dict[str, int], label: str, ok: bool) -> None:
    """Count one trial of the case ``label`` that came out right."""
    right[label] = right.get(label, 0) + ok


def confirm(t: Tutorial, right: dict[str, int], case: Case) -> None:
    """One check line for all of a case's trials: every sum right in every one."""
    done = right.get(case.label, 0)
    t.check(done == TRIALS, f"{case.label}: every sum right in {done} of {TRIALS} trials")


def main(t: Tutorial) -> None:
    t.words("kernel", "unified memory")
    dev = Device(0)
    ctx = default_context()
    stream = Stream()
    timer = Timer(stream)
    rng = np.random.default_rng()
    nbytes = N * F32_BYTES
    ops.kernel("vector_add", "vector_add", ctx)  # load the module now: no timing below includes the PTX JIT

    t.step(f"the protocol: {TRIALS} trials per case, {LAUNCHES} event-timed launches each, {nbytes >> 20} MiB arrays")
    t.say(
        f"{dev.name}: CONCURRENT_MANAGED_ACCESS = {dev.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS)}, "
        f"PAGEABLE_MEMORY_ACCESS = {dev.attribute(DeviceAttribute.PAGEABLE_MEMORY_ACCESS)}\n"
        "cold = launch 1 of a trial, right after the data arrived; warm = launches 2..; medians throughout"
    )

    t.step("explicit device memory: pinned host buffers -> cuMemcpyHtoDAsync -> DeviceBuffers")
    explicit = Case("explicit: pinned copies, kernel", "copies")
    pa, pb = PinnedBuffer(N, np.float32), PinnedBuffer(N, np.float32)
    da, db, dc = (DeviceBuffer.empty(N) for _ in range(3))
    right: dict[str, int] = {}  # case label -> trials whose every sum was right: one check line per case
    for _ in range(TRIALS):
        rng.standard_normal(dtype=np.float32, out=pa.array)
        rng.standard_normal(dtype=np.float32, out=pb.array)
        expected = pa.array + pb.array
        dc.fill(NAN32, stream=stream)
        explicit.place_ms.append(
            timer.span_ms(lambda: (da.copy_from(pa, stream=stream), db.copy_from(pb, stream=stream)))
        )
        record(explicit, timer.launches_ms(lambda: ops.vector_add(dc, da, db, stream=stream)))
        tally(right, explicit.label, bool(np.array_equal(dc.to_array(stream=stream), expected)))
    confirm(t, right, explicit)
    for buf in (pa, pb, da, db, dc):
        buf.close()

    t.step("managed memory: first touch, prefetched, and a host read between kernels (without and with advice)")
    a, b, c = ManagedBuffer(N), ManagedBuffer(N), ManagedBuffer(N)

    def fresh_inputs() -> np.ndarray:
        """The host writes new a and b (their pages move to the host); c is poisoned on the GPU."""
        stream.synchronize()
        rng.standard_normal(dtype=np.float32, out=a.array)
        rng.standard_normal(dtype=np.float32, out=b.array)
        c.fill(NAN32, stream=stream)
        return a.array + b.array

    def prefetch_inputs() -> None:
        a.prefetch(dev, stream)
        b.prefetch(dev, stream)

    def launch() -> None:
        ops.vector_add(c, a, b, stream=stream)

    def verify(case: Case, expected: np.ndarray) -> None:
        stream.synchronize()
        tally(right, case.label, bool(np.array_equal(c.array, expected)))

    first_touch = Case("managed: first touch", "")
    prefetched = Case("managed: prefetched", "prefetch")
    for _ in range(TRIALS):
        expected = fresh_inputs()
        record(first_touch, timer.launches_ms(launch))  # launch 1 faults every page of a and b over
        verify(first_touch, expected)
        expected = fresh_inputs()
        prefetched.place_ms.append(timer.span_ms(prefetch_inputs))
        record(prefetched, timer.launches_ms(launch))
        verify(prefetched, expected)
    confirm(t, right, first_touch)
    confirm(t, right, prefetched)

    host_read = Case("managed: host read a, b since", "")
    read_mostly = Case("managed: same, SET_READ_MOSTLY", "")
    for case, advice in ((host_read, None), (read_mostly, MemAdvise.SET_READ_MOSTLY)):
        if advice is not None:
            for buf in (a, b):
                buf.advise(advice, dev)
        for _ in range(TRIALS):
            expected = fresh_inputs()
            prefetch_inputs()
            launch()  # everything on the GPU, warm
            stream.synchronize()
            checksum = float(a.array.sum()) + float(b.array.sum())  # the host reads both inputs
            tally(right, READS, bool(np.isfinite(checksum)))
            c.fill(NAN32, stream=stream)
            record(case, timer.launches_ms(launch))
            verify(case, expected)
        t.check(right.pop(READS, 0) == TRIALS, f"the host read finite inputs in all {TRIALS} trials")
        confirm(t, right, case)
    for buf in (a, b):
        buf.advise(MemAdvise.UNSET_READ_MOSTLY, dev)
    for obj in (a, b, c, stream):
        obj.close()
    timer.close()

    cases = [explicit, first_touch, prefetched, host_read, read_mostly]
    report(t, cases, nbytes)


def report(t: Tutorial, cases: list[Case], nbytes: int) -> None:
    explicit, first_touch, prefetched, host_read, read_mostly = cases
    t.step("the table (milliseconds, medians; each ratio against the explicit buffers measured the same way)")
    heads = ("placement", "cold launch", "warm launch", "cold / expl.", "warm / expl.")
    lines = [f"{'case':34} {heads[0]:>16} {heads[1]:>12} {heads[2]:>12} {heads[3]:>13} {heads[4]:>13}"]
    for case in cases:
        placed = f"{case.placement} {case.place:.3f}" if case.placement else "-"
        lines.append(
            f"{case.label:34} {placed:>16} {case.cold:>12.3f} {case.warm:>12.3f} "
            f"{case.cold / explicit.cold:>12.2f}x {case.warm / explicit.warm:>12.2f}x"
        )
    t.say("\n".join(lines))
    moved = MOVED_ARRAYS * nbytes
    copy_rate = moved / (explicit.place / MS_PER_S) / BYTES_PER_GB
    prefetch_rate = moved / (prefetched.place / MS_PER_S) / BYTES_PER_GB
    touch_rate = moved / (first_touch.cold / MS_PER_S) / BYTES_PER_GB
    t.term("page fault")
    t.say(
        f"bringing a and b ({moved >> 20} MiB) to the GPU: pinned copies {copy_rate:.1f} GB/s, prefetch "
        f"{prefetch_rate:.1f} GB/s,\nfirst touch (page faults during the kernel) {touch_rate:.1f} GB/s"
    )

    t.step("what this run shows (every sentence computed from the numbers above)")
    resident = first_touch.warm / explicit.warm
    cold_after_prefetch = prefetched.cold / explicit.cold
    warm_after_prefetch = prefetched.warm / explicit.warm
    explicit_total = explicit.place + explicit.cold
    t.say(
        f"* pages resident on the GPU (warm launches after a first touch): {describe(resident)} against warm\n"
        f"  explicit buffers -- {in_seed_range(resident)}.\n"
        f"* the first launch after a prefetch: {describe(cold_after_prefetch)} against the first launch after the\n"
        f"  explicit copies -- {in_seed_range(cold_after_prefetch)}; the warm launches after it:\n"
        f"  {describe(warm_after_prefetch)}.\n"
        f"* a first touch: {first_touch.cold:.2f} ms, against {explicit_total:.2f} ms for the pinned copies plus the\n"
        f"  first explicit launch: {describe(first_touch.cold / explicit_total)}; it moved a and b at "
        f"{touch_rate:.1f} GB/s where\n"
        f"  pinned copies move {copy_rate:.1f} GB/s ({copy_rate / touch_rate:.1f}x faster).\n"
        f"* prefetch + first launch: {prefetched.place + prefetched.cold:.2f} ms, "
        f"{describe((prefetched.place + prefetched.cold) / explicit_total)} against copies + first launch.\n"
        f"* the host read a and b since the last kernel: the next launch {describe(host_read.cold / explicit.cold)};\n"
        f"  with SET_READ_MOSTLY: {describe(read_mostly.cold / explicit.cold)}. Both against the explicit cold launch."
    )
    t.say(
        "So no single percentage describes unified memory: where the pages are when the kernel runs decides,\n"
        "and a fair comparison times both sides the same way -- cold against cold, warm against warm."
    )


if __name__ == "__main__":
    run(main, "Tutorial 11b: what unified memory costs -- managed vs explicit, measured the same way")
