"""Does unified memory cost memory-bound kernels 30-50%? Vector add on managed vs explicit memory, measured alike (GPU).

The seed article claims that unified (managed) memory costs memory-bound kernels 30-50%. The cost of managed
memory depends on where its pages are when the kernel runs, and a comparison means something only when both
sides are measured the same way. So every case here follows one protocol, on one stream:

* per trial, the host writes fresh random inputs a and b (``--mib`` MiB each, float32) and the output c is
  poisoned with NaN on the GPU; then the case brings a and b to the GPU -- its *placement*, timed with CUDA
  events when there is one:

  - explicit, pinned: the host wrote pinned buffers; ``cuMemcpyHtoDAsync`` copies them to DeviceBuffers
    (the baseline every ratio is taken against);
  - explicit, pageable: the same from plain numpy arrays (the driver stages them: the old, slower baseline);
  - managed, first touch: no placement -- the kernel's page faults migrate a and b;
  - managed, prefetched: ``cuMemPrefetchAsync`` to the GPU;
  - managed, advised: PREFERRED_LOCATION + ACCESSED_BY the GPU, no prefetch; and advised + prefetched;
  - managed, host read: a and b resident on the GPU, then the host reads them (no advice; and with
    SET_READ_MOSTLY);

* then ``--launches`` launches of the same kernel, each timed by its own pair of CUDA events: launch 1 is
  *cold* (right after the placement), launches 2.. are *warm*;
* medians over ``--trials`` trials (warm: over every warm launch); every result checked element by element.

Cold is compared with cold and warm with warm, so a one-off effect of the first launch after data arrives
(clocks, TLBs) counts against both sides alike. The verdict is computed from the numbers.

Usage: python bench/unified_memory.py [--out DIR] [--mib 256] [--trials 5] [--launches 10]
(writes unified_memory.json / unified_memory.md to DIR, default bench/results)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import Device, DeviceBuffer, Event, ManagedBuffer, PinnedBuffer, Stream, ops
from rawcuda.core.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAdvise

MIB = 1 << 20
F32_BYTES = 4
NAN32 = np.float32(np.nan)
MOVED_ARRAYS = 2  # a and b: what each case brings to the GPU (c is written there)
SEED_CLAIM = (1.3, 1.5)  # "30%~50% performance regression"
SAME_WITHIN = 0.05  # a ratio within 5% of 1 is "the same"
MS_PER_S = 1e3
BYTES_PER_GB = 1e9
BASELINE = "explicit, pinned copies"
MIN_LAUNCHES = 2  # one cold launch and at least one warm one


@dataclass
class Case:
    name: str
    placement: str = ""  # what was timed before the launches ("" when nothing was)
    note: str = ""
    place_ms: list[float] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)


@dataclass
class Row:
    case: str
    placement: str
    place_ms: float | None
    place_gb_per_s: float | None
    cold_ms: float
    cold_min_ms: float
    cold_max_ms: float
    warm_ms: float
    cold_vs_explicit: float
    warm_vs_explicit: float
    trials: int
    warm_launches: int
    note: str


class Timer:
    """CUDA events on one stream, created once: a pair for a placement, one pair per launch."""

    def __init__(self, stream: Stream, launches: int) -> None:
        self.stream = stream
        self.launches = launches
        self.pairs = [(Event(), Event()) for _ in range(launches + 1)]

    def span_ms(self, work: Callable[[], object]) -> float:
        start, end = self.pairs[-1]
        start.record(self.stream)
        work()
        end.record(self.stream)
        return start.elapsed_ms(end)

    def launches_ms(self, launch: Callable[[], object]) -> list[float]:
        for start, end in self.pairs[: self.launches]:
            start.record(self.stream)
            launch()
            end.record(self.stream)
        return [start.elapsed_ms(end) for start, end in self.pairs[: self.launches]]

    def close(self) -> None:
        for pair in self.pairs:
            for event in pair:
                event.close()


class Check:
    """Verifies every element of c = a + b and counts the verifications (a benchmark must be right too)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, got: np.ndarray, expected: np.ndarray, case: str) -> None:
        if not np.array_equal(got, expected):
            bad = int(np.count_nonzero(got != expected))
            raise SystemExit(f"{case}: {bad} of {expected.size} sums are wrong")
        self.count += 1


def describe(ratio: float) -> str:
    if abs(ratio - 1) <= SAME_WITHIN:
        return f"{ratio:.2f}x (the same within {SAME_WITHIN:.0%})"
    return f"{ratio:.2f}x ({abs(ratio - 1):.0%} {'faster' if ratio < 1 else 'slower'})"


def in_seed_range(ratio: float) -> str:
    low, high = SEED_CLAIM
    return f"{'inside' if low <= ratio <= high else 'outside'} the seed's {low - 1:.0%}-{high - 1:.0%}"


def measure_explicit(n: int, trials: int, timer: Timer, rng: np.random.Generator, check: Check) -> list[Case]:
    stream = timer.stream
    pinned = Case(BASELINE, "cuMemcpyHtoDAsync x2", "pinned host buffers: the baseline of every ratio")
    pageable = Case("explicit, pageable copies", "cuMemcpyHtoDAsync x2", "plain numpy arrays, staged by the driver")
    pa, pb = PinnedBuffer(n, np.float32), PinnedBuffer(n, np.float32)
    ha, hb = np.empty(n, np.float32), np.empty(n, np.float32)
    da, db, dc = (DeviceBuffer.empty(n) for _ in range(3))
    for case, (src_a, src_b) in ((pinned, (pa.array, pb.array)), (pageable, (ha, hb))):
        for _ in range(trials):
            stream.synchronize()
            rng.standard_normal(dtype=np.float32, out=src_a)
            rng.standard_normal(dtype=np.float32, out=src_b)
            expected = src_a + src_b
            dc.fill(NAN32, stream=stream)
            case.place_ms.append(
                timer.span_ms(lambda a=src_a, b=src_b: (da.copy_from(a, stream=stream), db.copy_from(b, stream=stream)))
            )
            launches = timer.launches_ms(lambda: ops.vector_add(dc, da, db, stream=stream))
            case.cold_ms.append(launches[0])
            case.warm_ms.extend(launches[1:])
            check(dc.to_array(stream=stream), expected, case.name)
    for buf in (pa, pb, da, db, dc):
        buf.close()
    return [pinned, pageable]


def measure_managed(n: int, trials: int, timer: Timer, rng: np.random.Generator, check: Check) -> list[Case]:
    stream = timer.stream
    dev = default_context().device
    first_touch = Case("managed, first touch", "", "every page of a and b faults and migrates during launch 1")
    prefetched = Case("managed, prefetched", "cuMemPrefetchAsync x2")
    advised = Case("managed, advised (preferred location + accessed by GPU)", "", "pages on the host, no prefetch")
    advised_prefetched = Case("managed, advised + prefetched", "cuMemPrefetchAsync x2")
    host_read = Case("managed, resident, then the host read a and b", "", "no advice")
    read_mostly = Case("managed, resident, then the host read a and b: SET_READ_MOSTLY", "")
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)

    def fresh() -> np.ndarray:
        stream.synchronize()
        rng.standard_normal(dtype=np.float32, out=a.array)
        rng.standard_normal(dtype=np.float32, out=b.array)
        c.fill(NAN32, stream=stream)
        return a.array + b.array

    def prefetch() -> None:
        a.prefetch(dev, stream)
        b.prefetch(dev, stream)

    def launch() -> None:
        ops.vector_add(c, a, b, stream=stream)

    def run(case: Case, expected: np.ndarray) -> None:
        launches = timer.launches_ms(launch)
        case.cold_ms.append(launches[0])
        case.warm_ms.extend(launches[1:])
        stream.synchronize()
        check(c.array, expected, case.name)

    def advise(*advice: MemAdvise) -> None:
        for buf in (a, b):
            for item in advice:
                buf.advise(item, dev)

    for _ in range(trials):
        run(first_touch, fresh())
        expected = fresh()
        prefetched.place_ms.append(timer.span_ms(prefetch))
        run(prefetched, expected)
    for case, advice in ((host_read, ()), (read_mostly, (MemAdvise.SET_READ_MOSTLY,))):
        advise(*advice)
        for _ in range(trials):
            expected = fresh()
            prefetch()
            launch()  # every page on the GPU
            stream.synchronize()
            if not np.isfinite(float(a.array.sum()) + float(b.array.sum())):  # the host reads both inputs
                raise SystemExit(f"{case.name}: the inputs are not finite")
            c.fill(NAN32, stream=stream)
            run(case, expected)
    advise(MemAdvise.UNSET_READ_MOSTLY)
    for buf in (a, b, c):
        buf.close()

    # advice sticks to a range: fresh allocations for the advised cases
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)
    advise(MemAdvise.SET_PREFERRED_LOCATION, MemAdvise.SET_ACCESSED_BY)
    for _ in range(trials):
        run(advised, fresh())
        expected = fresh()
        advised_prefetched.place_ms.append(timer.span_ms(prefetch))
        run(advised_prefetched, expected)
    for buf in (a, b, c):
        buf.close()
    return [first_touch, prefetched, advised, advised_prefetched, host_read, read_mostly]


def rows_of(cases: list[Case], moved: int) -> list[Row]:
    base = cases[0]
    base_cold, base_warm = statistics.median(base.cold_ms), statistics.median(base.warm_ms)
    rows = []
    for case in cases:
        place = statistics.median(case.place_ms) if case.place_ms else None
        cold, warm = statistics.median(case.cold_ms), statistics.median(case.warm_ms)
        rows.append(
            Row(
                case=case.name,
                placement=case.placement,
                place_ms=place,
                place_gb_per_s=moved / (place / MS_PER_S) / BYTES_PER_GB if place else None,
                cold_ms=cold,
                cold_min_ms=min(case.cold_ms),
                cold_max_ms=max(case.cold_ms),
                warm_ms=warm,
                cold_vs_explicit=cold / base_cold,
                warm_vs_explicit=warm / base_warm,
                trials=len(case.cold_ms),
                warm_launches=len(case.warm_ms),
                note=case.note,
            )
        )
    return rows


def verdict(rows: dict[str, Row], moved: int) -> list[str]:
    base, first = rows[BASELINE], rows["managed, first touch"]
    pre = rows["managed, prefetched"]
    base_total = (base.place_ms or 0.0) + base.cold_ms
    touch_rate = moved / (first.cold_ms / MS_PER_S) / BYTES_PER_GB
    return [
        f"Seed: unified memory costs memory-bound kernels {SEED_CLAIM[0] - 1:.0%}-{SEED_CLAIM[1] - 1:.0%}. Measured "
        "(cold against cold, warm against warm):",
        f"* resident pages (warm launches after a first touch): {describe(first.warm_vs_explicit)} -- "
        f"{in_seed_range(first.warm_vs_explicit)};",
        f"* the first launch after a prefetch: {describe(pre.cold_vs_explicit)} against the first launch after "
        f"pinned copies -- {in_seed_range(pre.cold_vs_explicit)}; its warm launches {describe(pre.warm_vs_explicit)};",
        f"* a first touch: {first.cold_ms:.2f} ms against {base_total:.2f} ms for pinned copies + first launch "
        f"({first.cold_ms / base_total:.1f}x); a and b moved at {touch_rate:.1f} GB/s during it, where pinned "
        f"copies moved {base.place_gb_per_s or 0.0:.1f} GB/s and a prefetch {pre.place_gb_per_s or 0.0:.1f} GB/s.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--mib", type=int, default=256, help="MiB per array (three arrays, managed and device)")
    parser.add_argument("--trials", type=int, default=5, help="placements per case (cold figures: their median)")
    parser.add_argument("--launches", type=int, default=10, help="event-timed launches per trial (the first is cold)")
    args = parser.parse_args()
    if args.mib < 1 or args.trials < 1 or args.launches < MIN_LAUNCHES:
        parser.error("--mib and --trials must be at least 1, --launches at least 2 (one cold, one warm)")
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.mib * MIB // F32_BYTES
    moved = MOVED_ARRAYS * n * F32_BYTES
    rng = np.random.default_rng()
    dev = Device(0)
    ctx = default_context()
    check = Check()
    ops.kernel("vector_add", "vector_add", ctx)  # load the module before any timing (its JIT is host time)
    stream = Stream()
    timer = Timer(stream, args.launches)
    cases = measure_explicit(n, args.trials, timer, rng, check) + measure_managed(n, args.trials, timer, rng, check)
    timer.close()
    stream.close()

    rows = rows_of(cases, moved)
    by_case = {row.case: row for row in rows}
    summary = verdict(by_case, moved)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "mib_per_array": args.mib,
        "trials": args.trials,
        "launches_per_trial": args.launches,
        "protocol": "per trial: fresh host data, placement (event-timed), then event-timed launches on one stream; "
        "launch 1 cold, the rest warm; ratios cold/cold and warm/warm against explicit pinned copies",
        "verified_results": check.count,
        "concurrent_managed_access": dev.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS),
        "pageable_memory_access": dev.attribute(DeviceAttribute.PAGEABLE_MEMORY_ACCESS),
    }
    (args.out / "unified_memory.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) for r in rows], "verdict": summary}, indent=2)
    )
    lines = [
        f"# Unified memory vs explicit buffers ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']})",
        "",
        f"c = a + b over 3 x {args.mib} MiB float32, one stream, CUDA events. Per trial: fresh host data, the "
        f"placement, then {args.launches} launches (launch 1 cold, the rest warm); medians over {args.trials} "
        f"trials; {check.count} results verified element by element.",
        "",
        "| case | placement | ms | GB/s | cold launch ms (min-max) | warm launch ms | cold / explicit | "
        "warm / explicit | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        place = f"{r.place_ms:.3f}" if r.place_ms is not None else "-"
        rate = f"{r.place_gb_per_s:.1f}" if r.place_gb_per_s is not None else "-"
        lines.append(
            f"| {r.case} | {r.placement or '-'} | {place} | {rate} | {r.cold_ms:.3f} ({r.cold_min_ms:.3f}-"
            f"{r.cold_max_ms:.3f}) | {r.warm_ms:.3f} | {r.cold_vs_explicit:.2f} | {r.warm_vs_explicit:.2f} | "
            f"{r.note} |"
        )
    lines += ["", *summary]
    (args.out / "unified_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
