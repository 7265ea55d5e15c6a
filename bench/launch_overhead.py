"""Host time per kernel launch: rawcuda against the bare ctypes floor and the peers, in one process.

What is measured: the host-side cost of *queuing* one launch of a 4-argument kernel (``vector_add`` with
n = 0, so the GPU side is trivial and never the bottleneck). Each variant launches ``LAUNCHES`` times in a
tight loop, timed with ``perf_counter_ns``; that is repeated ``ROUNDS`` times (synchronizing between
rounds, outside the timed region) and the median per-launch time is reported.

Variants:
  bare_ctypes       a fresh ctypes pointer to cuLaunchKernel, no argtypes, every argument prebuilt
  table             rawcuda.checked.cu.cuLaunchKernel (argtypes + errcheck), arguments prebuilt
  rawcuda_launch    Function.launch(grid, block, c, a, b, n): checked arguments, cached packing
  cuda_bindings     cuda.bindings.driver.cuLaunchKernel with a prebuilt kernelParams address
  cupy_rawmodule    cupy.RawModule(...).get_function(...)(grid, block, args)

Usage: python bench/launch_overhead.py [--out DIR]   (writes launch_overhead.json / .md there)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import DeviceBuffer, Module, Stream
from rawcuda.checked import cu
from rawcuda.ffi import library

LAUNCHES = 2000
ROUNDS = 21
WARMUP = 2000
BLOCK = 256


def time_variant(launch: Callable[[], object], sync: Callable[[], object]) -> float:
    """Median microseconds per launch over ROUNDS rounds of LAUNCHES launches."""
    for _ in range(WARMUP):
        launch()
    sync()
    per_launch = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        for _ in range(LAUNCHES):
            launch()
        elapsed = time.perf_counter_ns() - start
        sync()
        per_launch.append(elapsed / LAUNCHES / 1000)
    return statistics.median(per_launch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    dev = rawcuda.Device(0)
    stream = Stream()
    module = Module(rawcuda.kernels.ptx_path("vector_add"))
    fn = module.function("vector_add")
    a, b, c = (DeviceBuffer.zeros(BLOCK) for _ in range(3))
    n = 0
    values = [ctypes.c_uint64(c.ptr), ctypes.c_uint64(a.ptr), ctypes.c_uint64(b.ptr), ctypes.c_size_t(n)]
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in values])
    sync = stream.synchronize
    results: dict[str, float | str] = {}

    raw = library.load().handle["cuLaunchKernel"]  # a fresh pointer: no argtypes, no errcheck
    f_arg, s_arg = ctypes.c_void_p(fn.handle), ctypes.c_void_p(stream.handle)
    one, blk, zero = ctypes.c_uint(1), ctypes.c_uint(BLOCK), ctypes.c_uint(0)
    results["bare_ctypes"] = time_variant(lambda: raw(f_arg, one, one, one, blk, one, one, zero, s_arg, params, None),
                                          sync)
    h_fn, h_stream = fn.handle, stream.handle
    results["table"] = time_variant(lambda: cu.cuLaunchKernel(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, params, None),
                                    sync)
    results["rawcuda_launch"] = time_variant(lambda: fn.launch(1, BLOCK, c, a, b, n, stream=stream), sync)

    try:
        from cuda.bindings import driver

        cb_fn, cb_stream = driver.CUfunction(h_fn), driver.CUstream(h_stream)
        addr = ctypes.addressof(params)
        results["cuda_bindings"] = time_variant(
            lambda: driver.cuLaunchKernel(cb_fn, 1, 1, 1, BLOCK, 1, 1, 0, cb_stream, addr, 0), sync)
    except Exception as exc:  # a peer that is missing or changed its API is reported, not fatal
        results["cuda_bindings"] = f"unavailable: {type(exc).__name__}: {exc}"

    try:
        import cupy

        raw_module = cupy.RawModule(path=str(rawcuda.kernels.ptx_path("vector_add")))
        kernel = raw_module.get_function("vector_add")
        ca, cb_, cc = (cupy.zeros(BLOCK, cupy.float32) for _ in range(3))
        cn = np.uint64(0)
        cs = cupy.cuda.Stream(non_blocking=False)
        with cs:
            results["cupy_rawmodule"] = time_variant(lambda: kernel((1,), (BLOCK,), (cc, ca, cb_, cn)),
                                                     cs.synchronize)
    except Exception as exc:
        results["cupy_rawmodule"] = f"unavailable: {type(exc).__name__}: {exc}"

    floor = results["bare_ctypes"]
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "launches_per_round": LAUNCHES,
        "rounds": ROUNDS,
    }
    (args.out / "launch_overhead.json").write_text(json.dumps({"meta": meta, "us_per_launch": results}, indent=2))
    lines = [f"# Launch overhead ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']}, "
             f"Python {meta['python']})", "",
             "| variant | µs per launch (median) | ratio to bare ctypes |", "|---|---:|---:|"]
    for name, value in results.items():
        if isinstance(value, float):
            lines.append(f"| {name} | {value:.2f} | {value / floor:.2f}x |")
        else:
            lines.append(f"| {name} | {value} | |")
    (args.out / "launch_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for buf in (a, b, c):
        buf.close()


if __name__ == "__main__":
    main()
