"""What the layer-1 integer range check costs a checked driver call, measured against the same row bound bare.

``rawcuda.checked.intranges`` puts a Python check in front of every row that takes integers, because ctypes
masks them silently. The launch path does not pay it (its hot slots take ctypes objects), but every other
checked call does: event records, async copies, memsets. This measures three such calls and a row with no
integer parameters (bound bare, so the two columns should agree), through ``cu`` and through a binding of
the same symbol with the same argtypes and errcheck but no range check, taking turns.

Usage: python bench/range_check_cost.py [--out DIR]   (on a GPU host)
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import rawcuda
from rawcuda import DeviceBuffer, Event, PinnedBuffer, Stream
from rawcuda.checked import cu
from rawcuda.ffi.cuda import TABLE

CALLS, ROUNDS = 20_000, 15
NS_PER_S = 1e9


def bare(name: str) -> Any:
    """Row ``name`` bound as layer 1 binds it, less the range check: argtypes, restype and an errcheck."""
    decl = TABLE[name]
    fn = cu.library().handle[decl.symbol]
    fn.restype, fn.argtypes = decl.restype, decl.argtypes

    def errcheck(result: int, func: Any, args: Any) -> int:
        if result:
            raise RuntimeError(result)
        return result

    fn.errcheck = errcheck
    return fn


def per_call_ns(fn: Any, args: tuple[Any, ...], after: Any) -> float:
    start = time.perf_counter_ns()
    for _ in range(CALLS):
        fn(*args)
    after()
    return (time.perf_counter_ns() - start) / CALLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    options = parser.parse_args()
    stream = Stream()
    event = Event(timing=False)
    pinned = PinnedBuffer(16, np.float32)
    buf = DeviceBuffer.empty(16, np.float32)
    rows = {
        "cuEventRecord": (event.handle, stream.handle),
        "cuMemcpyHtoDAsync": (buf.ptr, pinned.array.ctypes.data, buf.nbytes, stream.handle),
        "cuMemsetD32Async": (buf.ptr, 7, buf.size, stream.handle),
        "cuCtxSynchronize": (),  # no integer parameters: bound bare in both columns
    }
    results: dict[str, dict[str, float]] = {}
    for name, args in rows.items():
        checked, plain = getattr(cu, name), bare(name)
        samples: dict[str, list[float]] = {"checked": [], "bare": []}
        for _ in range(ROUNDS):
            samples["checked"].append(per_call_ns(checked, args, stream.synchronize))
            samples["bare"].append(per_call_ns(plain, args, stream.synchronize))
        medians = {kind: statistics.median(values) for kind, values in samples.items()}
        results[name] = {**medians, "added_ns": medians["checked"] - medians["bare"]}
    device = rawcuda.Device(0)
    record = {
        "date": datetime.date.today().isoformat(),
        "gpu": device.name,
        "driver_cuda_version": ".".join(map(str, rawcuda.driver_version())),
        "calls_per_round": CALLS,
        "rounds": ROUNDS,
        "median_ns_per_call": results,
    }
    text = json.dumps(record, indent=2)
    print(text)
    options.out.mkdir(parents=True, exist_ok=True)
    name = f"{record['date']}-{device.name.replace(' ', '_')}-range-check-cost.json"
    (options.out / name).write_text(text + "\n")
    for obj in (buf, pinned, event, stream):
        obj.close()


if __name__ == "__main__":
    main()
