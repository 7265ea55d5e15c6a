"""Host time per kernel launch: rawcuda against the bare ctypes floor and the peers, in one process.

What is measured: the host-side cost of *queuing* one launch of a 4-argument kernel (``vector_add`` with
n = 0, so the GPU side is trivial and never the bottleneck). Each variant launches ``LAUNCHES`` times in a
tight loop, timed with ``perf_counter_ns``; that is repeated ``ROUNDS`` times (synchronizing between
rounds, outside the timed region) and the median per-launch time is reported.

Variants:
  bare_ctypes       a fresh ctypes pointer to cuLaunchKernel, no argtypes, every argument prebuilt
  table             rawcuda.checked.cu.cuLaunchKernel (argtypes + errcheck), arguments prebuilt
  rawcuda_launch    Function.launch(grid, block, c, a, b, n): checked arguments, cached packing
  rawcuda_bound     Function.bind(grid, block, c, a, b, n)(): checked once, then only a close check
  cuda_bindings     cuda.bindings.driver.cuLaunchKernel with a prebuilt kernelParams address
  cuda_core         cuda.core.launch(stream, LaunchConfig, kernel, *args)
  cupy_rawmodule    cupy.RawModule(...).get_function(...)(grid, block, args)

Usage: python bench/launch_overhead.py [--out DIR]   (writes launch_overhead.json / .md there)
"""

from __future__ import annotations

import argparse
import ctypes
import io
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

LAUNCHES = 2000
ROUNDS = 21
WARMUP = 2000
BLOCK = 256


def measure(variants: dict[str, tuple[Callable[[], object], Callable[[], object]]]) -> dict[str, dict[str, float]]:
    """Interleaved rounds: every variant once per round, so machine noise hits all of them alike.

    Returns, per variant, the median microseconds per launch and the median of its per-round ratio to
    the first variant (the floor) -- a ratio taken within one round is steadier than a ratio of medians.
    """
    for launch, sync in variants.values():
        for _ in range(WARMUP):
            launch()
        sync()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, (launch, sync) in variants.items():
            start = time.perf_counter_ns()
            for _ in range(LAUNCHES):
                launch()
            elapsed = time.perf_counter_ns() - start
            sync()
            samples[name].append(elapsed / LAUNCHES / 1000)
    floor = samples[next(iter(variants))]
    return {
        name: {
            "us": statistics.median(values),
            "ratio": statistics.median(v / f for v, f in zip(values, floor, strict=True)),
        }
        for name, values in samples.items()
    }


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

    raw = cu.library().handle["cuLaunchKernel"]  # a fresh pointer: no argtypes, no errcheck
    f_arg, s_arg = ctypes.c_void_p(fn.handle), ctypes.c_void_p(stream.handle)
    one, blk, zero = ctypes.c_uint(1), ctypes.c_uint(BLOCK), ctypes.c_uint(0)
    h_fn, h_stream = fn.handle, stream.handle
    variants = {
        "bare_ctypes": (lambda: raw(f_arg, one, one, one, blk, one, one, zero, s_arg, params, None), sync),
        "table": (lambda: cu.cuLaunchKernel(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, params, None), sync),
        "rawcuda_launch": (lambda: fn.launch(1, BLOCK, c, a, b, n, stream=stream), sync),
    }
    notes: dict[str, str] = {}
    try:
        from cuda.bindings import driver

        cb_fn, cb_stream = driver.CUfunction(h_fn), driver.CUstream(h_stream)
        addr = ctypes.addressof(params)
        variants["cuda_bindings"] = (
            lambda: driver.cuLaunchKernel(cb_fn, 1, 1, 1, BLOCK, 1, 1, 0, cb_stream, addr, 0),
            sync,
        )
    except Exception as exc:  # a peer that is missing or changed its API is reported, not fatal
        notes["cuda_bindings"] = f"unavailable: {type(exc).__name__}: {exc}"
    try:
        import cupy

        kernel = cupy.RawModule(path=str(rawcuda.kernels.ptx_path("vector_add"))).get_function("vector_add")
        ca, cb_, cc = (cupy.zeros(BLOCK, cupy.float32) for _ in range(3))
        cn = np.uint64(0)
        cupy_stream = cupy.cuda.Stream(non_blocking=False)
        variants["cupy_rawmodule"] = (
            lambda: kernel((1,), (BLOCK,), (cc, ca, cb_, cn), stream=cupy_stream),
            cupy_stream.synchronize,
        )
    except Exception as exc:
        notes["cupy_rawmodule"] = f"unavailable: {type(exc).__name__}: {exc}"
    try:
        from cuda.core import Device as CoreDevice
        from cuda.core import LaunchConfig, ObjectCode, launch

        core_device = CoreDevice(0)
        core_device.set_current()  # the primary context: the one rawcuda uses too
        core_stream = core_device.create_stream()
        core_kernel = ObjectCode.from_ptx(rawcuda.kernels.ptx_path("vector_add").read_bytes()).get_kernel("vector_add")
        core_config = LaunchConfig(grid=1, block=BLOCK)
        core_args = (np.uint64(c.ptr), np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(0))
        variants["cuda_core"] = (lambda: launch(core_stream, core_config, core_kernel, *core_args), core_stream.sync)
    except Exception as exc:
        notes["cuda_core"] = f"unavailable: {type(exc).__name__}: {exc}"
    variants["rawcuda_bound"] = (fn.bind(1, BLOCK, c, a, b, n, stream=stream), sync)
    results = measure(variants)

    # Tracing must cost nothing once it is off: trace a few calls, turn it off, and measure again.
    with rawcuda.trace(file=io.StringIO()):
        fn.launch(1, BLOCK, c, a, b, n, stream=stream)
        cu.cuLaunchKernel(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, params, None)
    after = measure({name: variants[name] for name in ("bare_ctypes", "table", "rawcuda_launch", "rawcuda_bound")})
    results.update({f"{name} (after a trace block)": value for name, value in after.items() if name != "bare_ctypes"})

    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "launches_per_round": LAUNCHES,
        "rounds": ROUNDS,
    }
    (args.out / "launch_overhead.json").write_text(
        json.dumps({"meta": meta, "results": results, "notes": notes}, indent=2)
    )
    lines = [
        f"# Launch overhead ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']}, "
        f"Python {meta['python']})",
        "",
        f"Host time to queue one 4-argument launch; median of {ROUNDS} interleaved rounds of {LAUNCHES}.",
        "",
        "| variant | µs per launch | ratio to bare ctypes (median of per-round ratios) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {r['us']:.2f} | {r['ratio']:.2f}x |" for name, r in results.items()]
    lines += [f"| {name} | {why} | |" for name, why in notes.items()]
    (args.out / "launch_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for buf in (a, b, c):
        buf.close()


if __name__ == "__main__":
    main()
