"""The kernel progressions, measured in one run: each step's speed next to its ceiling and its peers (GPU).

Four tables, every result verified before it is timed:

1. reduction -- every step of rawcuda.ops.reduce_steps over 2^28 floats (1 GiB), GB/s read, next to the
   device-to-device copy of the same bytes (cuMemcpyDtoDAsync: they are read *and* written) and cupy.sum /
   torch.sum over the same memory (imports guarded: "not available" otherwise);
2. transpose -- naive, unpadded and padded at 8192 x 8192, GB/s read + written, next to the copy;
3. block size -- copy_one_per_thread at blocks of 32 .. 1024 (grid = ceil(n / block)), with the blocks per
   SM the driver reports (cuOccupancyMaxActiveBlocksPerMultiprocessor), the occupancy that makes, and GB/s;
4. fast math -- transcendental_chain (compute bound) and exp_map (memory bound), each built with and without
   --use_fast_math: time, and the largest absolute and relative error against numpy in float64; and
   sin_map's error as |x| grows (no time: it is there for the accuracy).

Timing: CUDA events around each run on the legacy default stream, WARMUP runs first, the median of REPS.
The whole run takes well under a minute on an H200 (most of it numpy making and checking data).

Usage: python bench/progressions.py [--out DIR] [--name NAME]
    writes NAME.json and NAME.md in DIR (default: bench/results/<date>-<GPU>-progressions), and NAME.png with
    a bar chart per progression when matplotlib is installed (pip install rawcuda[plot]).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from progressions_report import markdown, plot, targets

import rawcuda
from rawcuda import DeviceAttribute, DeviceBuffer, ops, time_ms
from rawcuda.checked import cu
from rawcuda.ops.reduce_steps import STEPS, Reduction

WARMUP = 3
REPS = 20
F32 = np.dtype(np.float32)
NAN = np.float32(np.nan)
REDUCE_N = 1 << 28  # 1 GiB of float32
TRANSPOSE_N = 8192  # 256 MiB
BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
CHAIN_N = 1 << 24  # 64 MiB in, 64 MiB out: at 64 iterations the memory is idle
CHAIN_ITERATIONS = 64  # kernels/transcendentals.cu's CHAIN_MAX_ITERATIONS
CHAIN_STEP = np.float32(1 / 64)
CHAIN_LOG_OFFSET = 3.0
EXP_RANGE = 4.0  # exp_map's inputs: [-4, 4]
ERROR_N = 1 << 18  # elements whose error is measured against numpy (the first ERROR_N of each output)
SIN_SCALES = (np.pi, 1e3, 1e6)  # sin_map's inputs: [-scale, scale]
BUILDS = {"precise": "transcendentals", "fast": "transcendentals_fast"}  # the same kernels, two builds
BLOCK = 256  # the transcendentals' documented block
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")  # "NVRM version: NVIDIA UNIX ... Module  580.159.04 ..."
DRIVER_VERSION_PATTERN = re.compile(r"\s(\d+\.\d+(?:\.\d+)?)\s")
RESULTS = Path(__file__).resolve().parent / "results"
EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 77  # 77: "skipped, no GPU", as the tutorials and run_all.py say


def gpu_ms(work: Callable[[], object], reps: int = REPS) -> float:
    """Median GPU milliseconds of ``work`` (queued on the legacy default stream) after WARMUP runs."""
    return time_ms(work, reps=reps, warmup=WARMUP).median


def copy_gbps(dst: DeviceBuffer, src: DeviceBuffer) -> float:
    """The device-to-device copy of src's bytes, in GB/s read + written: the practical ceiling."""
    return 2 * src.nbytes / gpu_ms(lambda: cu.cuMemcpyDtoDAsync(dst.ptr, src.ptr, src.nbytes, 0)) / 1e6


def peer_sum(name: str, x: DeviceBuffer, exact: float, bound: float) -> dict[str, Any]:
    """cupy.sum or torch.sum over x's memory (shared, not copied): GB/s, or why it could not be measured."""
    try:
        if name == "cupy.sum":
            import cupy

            array, total = cupy.asarray(x), cupy.sum
        else:
            import torch

            array, total = torch.as_tensor(x, device="cuda"), torch.sum
        got = float(total(array))
        ms = gpu_ms(lambda: total(array))
    except Exception as exc:  # not installed, no CUDA build, a version that cannot share: say so, carry on
        return {"name": name, "unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return {"name": name, "ms": ms, "gbps": x.nbytes / ms / 1e6, "verified": abs(got - exact) <= bound}


def reduction(rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray, DeviceBuffer]:
    host = rng.standard_normal(REDUCE_N, dtype=np.float32)
    x = DeviceBuffer.from_array(host)
    exact, abs_sum = float(host.sum(dtype=np.float64)), float(np.abs(host).sum(dtype=np.float64))
    with DeviceBuffer.empty(REDUCE_N, F32) as scratch:
        ceiling = copy_gbps(scratch, x)
    rows, widest = [], 0.0
    for step in STEPS:
        with Reduction(step, x) as r:
            r.poison()
            got, bound = r(), r.error_bound(abs_sum)
            widest = max(widest, bound)
            ms = gpu_ms(r.run)
            rows.append(
                {
                    "step": step.number,
                    "kernel": step.kernel,
                    "change": step.change,
                    "passes": r.passes,
                    "ms": ms,
                    "gbps": x.nbytes / ms / 1e6,
                    "verified": abs(got - exact) <= bound,
                }
            )
    peers = [peer_sum(name, x, exact, widest) for name in ("cupy.sum", "torch.sum")]
    result = {"n": REDUCE_N, "bytes": x.nbytes, "copy_gbps": ceiling, "steps": rows, "peers": peers}
    return result, host, x


def transpose(rng: np.random.Generator) -> dict[str, Any]:
    host = rng.standard_normal((TRANSPOSE_N, TRANSPOSE_N), dtype=np.float32)
    rows = []
    with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(host.shape, F32) as out:
        ceiling = copy_gbps(out, x)
        for variant in ("naive", "unpadded", "padded"):
            out.fill(NAN)
            ops.transpose(out, x, variant=variant)
            verified = bool(np.array_equal(out.to_array(), host.T))
            ms = gpu_ms(lambda v=variant: ops.transpose(out, x, variant=v))
            rows.append({"variant": variant, "kernel": ops.TRANSPOSE_VARIANTS[variant], "ms": ms,
                         "gbps": 2 * x.nbytes / ms / 1e6, "verified": verified})  # fmt: skip
    return {"shape": [TRANSPOSE_N, TRANSPOSE_N], "copy_gbps": ceiling, "variants": rows}


def block_size(host: np.ndarray, x: DeviceBuffer) -> dict[str, Any]:
    ctx = x.context
    fn = ops.kernel("occupancy", "copy_one_per_thread", ctx)
    threads_per_sm = ctx.device.attribute(DeviceAttribute.MAX_THREADS_PER_MULTIPROCESSOR)
    rows = []
    with DeviceBuffer.empty(x.size, F32) as out:
        ceiling = copy_gbps(out, x)
        for block in BLOCK_SIZES:
            grid = -(-x.size // block)
            out.fill(NAN)
            fn.launch(grid, block, out, x, x.size)
            verified = bool(np.array_equal(out.to_array(), host))
            ms = gpu_ms(lambda g=grid, b=block: fn.launch(g, b, out, x, x.size))
            active = fn.max_active_blocks_per_sm(block)
            rows.append({"block": block, "grid": grid, "blocks_per_sm": active, "threads_per_sm": active * block,
                         "occupancy": active * block / threads_per_sm, "ms": ms,
                         "gbps": 2 * x.nbytes / ms / 1e6, "verified": verified})  # fmt: skip
    return {"n": x.size, "copy_gbps": ceiling, "max_threads_per_sm": threads_per_sm, "rows": rows}


def chain_reference(x: np.ndarray) -> np.ndarray:
    """transcendental_chain in float64 numpy, from the same float32 t the GPU computes."""
    total = np.zeros(x.size)
    for k in range(CHAIN_ITERATIONS):
        t = (x + np.float32(k) * CHAIN_STEP).astype(np.float64)
        total += np.sin(t) * np.exp(-t) + np.log(CHAIN_LOG_OFFSET + t * t)
    return total / CHAIN_ITERATIONS


def errors(got: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """The largest absolute and relative error of ``got`` (NaN, an element never written, makes both NaN)."""
    error = np.abs(got.astype(np.float64) - exact)
    with np.errstate(divide="ignore", invalid="ignore"):  # sin's exact value may be 0: that element's is inf
        relative = error / np.abs(exact)
    return {"max_abs_error": float(error.max()), "max_rel_error": float(relative.max())}


def fast_math(rng: np.random.Generator) -> dict[str, Any]:
    ctx = rawcuda.default_context()
    grid_cap = ops.WAVES * ctx.device.multiprocessor_count
    chain_x = rng.uniform(-1, 1, CHAIN_N).astype(np.float32)
    exp_x = rng.random(REDUCE_N, dtype=np.float32) * np.float32(2 * EXP_RANGE) - np.float32(EXP_RANGE)
    cases = [  # (kernel, input, extra scalar arguments, reference of the first ERROR_N, unit of the rate)
        ("transcendental_chain", chain_x, (CHAIN_ITERATIONS,), chain_reference(chain_x[:ERROR_N]), "Gterms/s"),
        ("exp_map", exp_x, (), np.exp(exp_x[:ERROR_N].astype(np.float64)), "GB/s"),
    ]
    rows = []
    for kernel, host, scalars, exact, unit in cases:
        with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(host.size, F32) as out:
            ceiling = copy_gbps(out, x) if unit == "GB/s" else None
            for build, stem in BUILDS.items():
                fn = ops.kernel(stem, kernel, ctx)
                grid = min(-(-host.size // BLOCK), grid_cap)
                out.fill(NAN)
                fn.launch(grid, BLOCK, out, x, host.size, *scalars)
                got = out.to_array()
                ms = gpu_ms(lambda f=fn, g=grid, o=out, i=x, n=host.size, s=scalars: f.launch(g, BLOCK, o, i, n, *s))
                rate = host.size * CHAIN_ITERATIONS / ms / 1e6 if unit == "Gterms/s" else 2 * x.nbytes / ms / 1e6
                rows.append({"kernel": kernel, "build": build, "n": host.size, "ms": ms, "rate": rate, "unit": unit,
                             "copy_gbps": ceiling, "verified": bool(np.isfinite(got).all()),
                             **errors(got[:ERROR_N], exact)})  # fmt: skip
    accuracy = []
    for scale in SIN_SCALES:
        host = rng.uniform(-scale, scale, ERROR_N).astype(np.float32)
        exact = np.sin(host.astype(np.float64))
        with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(host.size, F32) as out:
            for build, stem in BUILDS.items():
                out.fill(NAN)  # an element never written stays NaN, and so do its errors
                ops.kernel(stem, "sin_map", ctx).launch(min(-(-host.size // BLOCK), grid_cap), BLOCK, out, x, host.size)
                accuracy.append(
                    {"kernel": "sin_map", "build": build, "range": float(scale), **errors(out.to_array(), exact)}
                )
    return {"error_elements": ERROR_N, "rows": rows, "sin_accuracy": accuracy}


def driver_version() -> str:
    """The kernel driver's version (Linux: /proc/driver/nvidia/version), and the CUDA version it supports."""
    cuda = "CUDA {}.{}".format(*rawcuda.driver_version())
    try:
        found = DRIVER_VERSION_PATTERN.search(DRIVER_VERSION_FILE.read_text().splitlines()[0])
    except (OSError, IndexError):
        found = None
    return f"{found.group(1)} ({cuda})" if found else cuda


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"where to write (default {RESULTS})")
    parser.add_argument("--name", help="file name stem (default: <date>-<GPU>-progressions)")
    args = parser.parse_args()
    try:
        gpu = rawcuda.Device(0).name
    except (rawcuda.DriverNotFoundError, rawcuda.StubLibraryError, rawcuda.NoDeviceError) as exc:
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        return EXIT_NO_GPU
    started = time.perf_counter()
    rng = np.random.default_rng()
    reduced, host, x = reduction(rng)
    blocks = block_size(host, x)
    x.close()
    del host
    data: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d"),
            "gpu": gpu,
            "driver": driver_version(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "reps": REPS,
            "warmup": WARMUP,
        },
        "reduction": reduced,
        "transpose": transpose(rng),
        "block_size": blocks,
        "fast_math": fast_math(rng),
    }
    data["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    data["targets"] = targets(data)
    name = args.name or f"{data['meta']['date']}-{gpu.replace(' ', '_')}-progressions"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(data, indent=2))
    text = markdown(data)
    (args.out / f"{name}.md").write_text(text)
    print(text)
    print(plot(data, args.out / f"{name}.png"))
    verified = next(met for goal, met, _ in data["targets"] if goal.startswith("every step verified"))
    return EXIT_OK if verified else EXIT_FAILED


if __name__ == "__main__":
    from rawcuda.tools import cli

    cli.run(main)
