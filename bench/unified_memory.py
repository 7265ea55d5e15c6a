"""Does unified memory cost memory-bound kernels 30-50%? Vector add on managed vs explicit device memory (GPU).

The seed article claims that unified (managed) memory costs memory-bound kernels 30-50%. The cost of
managed memory depends on where its pages are when the kernel runs, so this benchmark times the same
vector add ``c = a + b`` (3 arrays of ``--mib`` MiB each, float32) in each situation:

* explicit DeviceBuffers -- the baseline (kernel only), and with the host-to-device copies of a and b
  that the explicit program must make (a first touch moves that data too). Those copies are from pageable
  arrays and synchronous: the simplest explicit program, not the fastest -- pinned copies run several
  times faster (bench/copies.py);
* managed, resident -- the pages are already on the GPU (a steady state: the same kernel again);
* managed, first touch -- the host just wrote a, b and c, so every page faults and migrates;
* managed, prefetched -- the host wrote them, then ``cuMemPrefetchAsync`` moved them (prefetch timed apart);
* managed, advised -- PREFERRED_LOCATION and ACCESSED_BY the GPU, pages written by the host, no prefetch;
  and advised + prefetched.

Every time is from CUDA events on the GPU's timeline; each figure is the median of several runs (fresh
random data written by the host before each first-touch run); every result is checked element by element.

Usage: python bench/unified_memory.py [--out DIR] [--mib 256] [--trials 5]
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
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import Device, DeviceBuffer, Event, ManagedBuffer, ops
from rawcuda.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAdvise

MIB = 1 << 20
WARMUP = 3
REPS = 20  # steady-state runs (pages resident): cheap, so many
NAN32 = np.float32(np.nan)
ARRAYS = 3  # a and b read, c written: the bytes a vector add must move
SEED_CLAIM = (1.3, 1.5)  # "30%~50% performance regression"


@dataclass
class Row:
    case: str
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    gb_per_s: float
    vs_explicit: float
    note: str = ""


def event_ms(work: Callable[[], object]) -> float:
    """GPU milliseconds of one run of ``work`` (events on the legacy default stream, like the work)."""
    start, end = Event(), Event()
    start.record()
    work()
    end.record()
    ms = start.elapsed_ms(end)
    start.close()
    end.close()
    return ms


def steady_ms(work: Callable[[], object]) -> list[float]:
    """REPS timed runs of ``work`` after WARMUP untimed ones."""
    for _ in range(WARMUP):
        work()
    return [event_ms(work) for _ in range(REPS)]


class Check:
    """Verifies every element of c = a + b and counts the verifications (a benchmark must be right too)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, got: np.ndarray, expected: np.ndarray, case: str) -> None:
        if not np.array_equal(got, expected):
            bad = int(np.count_nonzero(got != expected))
            raise SystemExit(f"{case}: {bad} of {expected.size} sums are wrong")
        self.count += 1


def host_writes(a: ManagedBuffer, b: ManagedBuffer, c: ManagedBuffer, rng: np.random.Generator) -> np.ndarray:
    """Fresh inputs written by the host (so the pages now live on the host), c poisoned; the expected sum."""
    default_context().synchronize()
    rng.standard_normal(dtype=np.float32, out=a.array)
    rng.standard_normal(dtype=np.float32, out=b.array)
    c.array[:] = NAN32
    return a.array + b.array


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--mib", type=int, default=256, help="MiB per array (three arrays, twice: managed + device)")
    parser.add_argument("--trials", type=int, default=5, help="runs of each first-touch case (median reported)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.mib * MIB // 4
    nbytes = ARRAYS * n * 4
    rng = np.random.default_rng()
    dev = Device(0)
    ctx = default_context()
    check = Check()
    ops.kernel("vector_add", "vector_add", ctx)  # load the module before any timing (its JIT is host time)
    samples: dict[str, list[float]] = {}
    notes: dict[str, str] = {}

    # --- explicit device memory: the baseline ---------------------------------------------------------------
    a_host, b_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a_host), DeviceBuffer.from_array(b_host), DeviceBuffer.empty(n)
    dc.fill(NAN32)
    samples["explicit DeviceBuffers (kernel)"] = steady_ms(lambda: ops.vector_add(dc, da, db))
    check(dc.to_array(), a_host + b_host, "explicit")
    copies = []
    for _ in range(args.trials):
        a_host, b_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        dc.fill(NAN32)
        # copy_from without a stream is synchronous (pageable memory, staged by the driver): the events on
        # the GPU's timeline see the whole copy, including the gaps while the driver stages it.
        copies.append(
            event_ms(lambda a=a_host, b=b_host: (da.copy_from(a), db.copy_from(b), ops.vector_add(dc, da, db)))
        )
        check(dc.to_array(), a_host + b_host, "explicit + copies")
    samples["explicit, HtoD copies of a and b + kernel"] = copies
    notes["explicit, HtoD copies of a and b + kernel"] = "pageable host arrays, synchronous copies (pinned: see copies)"
    for buf in (da, db, dc):
        buf.close()

    # --- managed memory, no hints ------------------------------------------------------------------------------
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)
    first, prefetch, after_prefetch = [], [], []
    for _ in range(args.trials):
        expected = host_writes(a, b, c, rng)
        first.append(event_ms(lambda: ops.vector_add(c, a, b)))
        check(c.array, expected, "managed, first touch")
    for _ in range(args.trials):
        expected = host_writes(a, b, c, rng)
        prefetch.append(event_ms(lambda: [buf.prefetch(dev) for buf in (a, b, c)]))
        after_prefetch.append(event_ms(lambda: ops.vector_add(c, a, b)))
        check(c.array, expected, "managed, prefetched")
    expected = host_writes(a, b, c, rng)
    ops.vector_add(c, a, b)  # first touch: from here on every page is on the GPU
    resident = steady_ms(lambda: ops.vector_add(c, a, b))
    check(c.array, expected, "managed, resident")
    samples["managed, resident (pages already on the GPU)"] = resident
    samples["managed, first touch (pages on the host)"] = first
    notes["managed, first touch (pages on the host)"] = "every page faults and migrates during the kernel"
    samples["managed, prefetch to the GPU (prefetch only)"] = prefetch
    samples["managed, after prefetch (kernel only)"] = after_prefetch
    samples["managed, prefetch + kernel"] = [p + k for p, k in zip(prefetch, after_prefetch, strict=True)]
    for buf in (a, b, c):
        buf.close()

    # --- managed memory with advice (fresh allocations: advice sticks to a range) ----------------------------
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)
    for buf in (a, b, c):
        buf.advise(MemAdvise.SET_PREFERRED_LOCATION, dev)
        buf.advise(MemAdvise.SET_ACCESSED_BY, dev)
    advised, advised_prefetched = [], []
    for _ in range(args.trials):
        expected = host_writes(a, b, c, rng)
        advised.append(event_ms(lambda: ops.vector_add(c, a, b)))
        check(c.array, expected, "managed, advised")
    for _ in range(args.trials):
        expected = host_writes(a, b, c, rng)
        for buf in (a, b, c):
            buf.prefetch(dev)
        advised_prefetched.append(event_ms(lambda: ops.vector_add(c, a, b)))
        check(c.array, expected, "managed, advised + prefetched")
    samples["managed, advised: preferred location + accessed by GPU, pages on the host"] = advised
    samples["managed, advised + prefetched (kernel only)"] = advised_prefetched
    for buf in (a, b, c):
        buf.close()

    # --- report -------------------------------------------------------------------------------------------------
    baseline = statistics.median(samples["explicit DeviceBuffers (kernel)"])
    rows = []
    for case, times in samples.items():
        med = statistics.median(times)
        # GB/s of the three arrays' bytes in every row (a prefetch moves exactly those bytes too)
        rows.append(
            Row(case, med, min(times), max(times), len(times), nbytes / med / 1e6, med / baseline, notes.get(case, ""))
        )
    by_case = {row.case: row for row in rows}
    resident_x = by_case["managed, resident (pages already on the GPU)"].vs_explicit
    first_x = by_case["managed, first touch (pages on the host)"].vs_explicit
    copies_row = by_case["explicit, HtoD copies of a and b + kernel"]
    verdict = (
        f"seed: unified memory costs memory-bound kernels {SEED_CLAIM[0] - 1:.0%}-{SEED_CLAIM[1] - 1:.0%}. "
        f"Measured: resident managed memory runs at {resident_x:.2f}x the explicit kernel time; the first "
        f"touch at {first_x:.1f}x ({first_x * baseline / copies_row.median_ms:.2f}x the explicit "
        "copies + kernel that move the same data)."
    )
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "mib_per_array": args.mib,
        "trials": args.trials,
        "steady_reps": REPS,
        "verified_results": check.count,
        "concurrent_managed_access": dev.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS),
        "pageable_memory_access": dev.attribute(DeviceAttribute.PAGEABLE_MEMORY_ACCESS),
    }
    (args.out / "unified_memory.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) for r in rows], "verdict": verdict}, indent=2)
    )
    lines = [
        f"# Unified memory vs explicit buffers ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']})",
        "",
        f"c = a + b over 3 x {args.mib} MiB float32; CUDA-event times, median of the runs shown; "
        f"{check.count} results verified element by element.",
        "",
        "| case | median ms | min | max | runs | GB/s | x explicit kernel | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r.case} | {r.median_ms:.3f} | {r.min_ms:.3f} | {r.max_ms:.3f} | {r.runs} | {r.gb_per_s:,.0f} | "
        f"{r.vs_explicit:.2f} | {r.note} |"
        for r in rows
    ]
    lines += ["", verdict]
    (args.out / "unified_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
