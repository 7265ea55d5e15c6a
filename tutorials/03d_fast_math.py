"""Tutorial 03d -- --use_fast_math: what it buys and what it costs, on the same kernels built both ways.

The seed article passes ``--use_fast_math`` for "speed at a little precision". Both halves can be measured:
``kernels/transcendentals.cu`` is built as it is, and ``kernels/transcendentals_fast.cu`` -- one line asking
the build for ``fast_math``, then ``#include "transcendentals.cu"`` -- builds the very same kernels with the
flag. This tutorial

1. shows what the flag did to the PTX (sinf, expf, logf became single ``.approx`` instructions);
2. times a compute-bound kernel (64 terms sin(t) e^-t + log(3 + t^2) per element) from both builds;
3. times a memory-bound one (one expf per element) from both, next to a device-to-device copy;
4. measures sinf's error as |x| grows, for both builds.

Errors are against numpy in float64; every output is checked for elements left unwritten. The speeds and
errors printed are this run's; the CUDA Programming Guide's stated maxima are quoted next to them.

Run:  python tutorials/03d_fast_math.py [--step]
"""

from __future__ import annotations

import math
import re

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, ops, time_ms

BUILDS = {"precise": "transcendentals", "fast": "transcendentals_fast"}  # kernels/<stem>.cu
REPS = 10
BLOCK = 256
CHAIN_N = 1 << 22  # 4 Mi elements x 64 terms
CHAIN_ITERATIONS = 64
CHAIN_STEP = np.float32(1 / 64)
CHAIN_LOG_OFFSET = 3.0
MAP_N = 1 << 26  # 256 MiB in, 256 MiB out: memory bound
ERROR_N = 1 << 16  # elements whose error is computed in numpy
SIN_SCALES = (math.pi, 1e3, 1e6)
CHECK_BOUND = 1e-5  # a loose sanity bound for the in-range cases (tests/gpu/test_kernel_steps.py derives tight ones)
PTX_MATH = re.compile(r"\b(sin|cos|ex2|lg2)\.approx(\.ftz)?\.f32")


def chain_reference(x: np.ndarray) -> np.ndarray:
    """transcendental_chain in float64, from the same float32 t the GPU computes."""
    total = np.zeros(x.size)
    for k in range(CHAIN_ITERATIONS):
        t = (x + np.float32(k) * CHAIN_STEP).astype(np.float64)
        total += np.sin(t) * np.exp(-t) + np.log(CHAIN_LOG_OFFSET + t * t)
    return total / CHAIN_ITERATIONS


def worst(got: np.ndarray, exact: np.ndarray) -> tuple[float, float]:
    """(largest absolute error, largest relative error); NaN if an element was never written."""
    error = np.abs(got.astype(np.float64) - exact)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(error.max()), float((error / np.abs(exact)).max())


def run_both(kernel: str, x: DeviceBuffer, out: DeviceBuffer, *scalars: int) -> dict[str, tuple[np.ndarray, float]]:
    """``kernel`` from each build over x: (its output, its median time in ms)."""
    ctx = x.context
    grid = min(-(-x.size // BLOCK), ops.WAVES * ctx.device.multiprocessor_count)
    results = {}
    for build, stem in BUILDS.items():
        fn = ops.kernel(stem, kernel, ctx)
        out.fill(np.float32(np.nan))
        fn.launch(grid, BLOCK, out, x, x.size, *scalars)
        got = out.to_array()
        results[build] = (got, time_ms(lambda f=fn: f.launch(grid, BLOCK, out, x, x.size, *scalars), reps=REPS).median)
    return results


def main(t: Tutorial) -> None:
    t.words("PTX")
    t.step("what the flag changed: the special-function instructions in each build's PTX")
    manifest = rawcuda.kernels.load_manifest()["kernels"]
    for stem in BUILDS.values():
        found = PTX_MATH.findall(rawcuda.kernels.ptx_path(stem).read_text())
        counts = {name: sum(1 for f in found if f[0] == name) for name in ("sin", "ex2", "lg2")}
        t.say(f"{stem}.ptx (flags {' '.join(manifest[stem]['flags'][1:])}): .approx instructions {counts}")
    t.say(
        "precise: sinf and logf are range reductions and polynomials in ordinary arithmetic (expf uses ex2.approx\n"
        "inside a more careful formula); fast: each is one sin.approx / ex2.approx / lg2.approx (the chain's loop\n"
        "is unrolled, so it holds several of each).\n"
        "The CUDA Programming Guide's maxima: sinf 2 ulp, expf 2 ulp, logf 1 ulp; __sinf 2^-21.41 absolute on\n"
        "[-pi, pi] and 'larger otherwise'; __expf 2 + floor(|1.173 x|) ulp; __logf 3 ulp outside [0.5, 2]."
    )

    t.step(f"compute bound: {CHAIN_N:,} elements x {CHAIN_ITERATIONS} terms, three transcendentals each")
    rng = np.random.default_rng()
    host = rng.uniform(-1, 1, CHAIN_N).astype(np.float32)  # |x| <= 1 keeps t in [-1, 2): __sinf's good range
    exact = chain_reference(host[:ERROR_N])
    with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(CHAIN_N) as out:
        chain = run_both("transcendental_chain", x, out, CHAIN_ITERATIONS)
    for build, (got, ms) in chain.items():
        abs_err, rel_err = worst(got[:ERROR_N], exact)
        t.check(bool(np.isfinite(got).all()) and abs_err <= CHECK_BOUND, f"{build}: every element written, close")
        terms = CHAIN_N * CHAIN_ITERATIONS / ms / 1e6
        t.say(f"{build:>7}: {ms:.3f} ms = {terms:.1f} G terms/s; max error {abs_err:.2e} abs, {rel_err:.2e} rel")
    t.say(f"fast / precise: {chain['precise'][1] / chain['fast'][1]:.2f}x the speed")

    t.step(f"memory bound: one expf per element over {MAP_N:,} floats, next to a copy of the same bytes")
    host = rng.random(MAP_N, dtype=np.float32) * np.float32(8) - np.float32(4)  # [-4, 4]: no overflow, no denormal
    exact = np.exp(host[:ERROR_N].astype(np.float64))
    with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(MAP_N) as out:
        copy_ms = time_ms(lambda: rawcuda.cu.cuMemcpyDtoDAsync(out.ptr, x.ptr, x.nbytes, 0), reps=REPS).median
        copy_gbps = 2 * x.nbytes / copy_ms / 1e6
        mapped = run_both("exp_map", x, out)
        nbytes = 2 * x.nbytes
    t.say(f"copy: {copy_gbps:.0f} GB/s (read + write)")
    for build, (got, ms) in mapped.items():
        abs_err, rel_err = worst(got[:ERROR_N], exact)
        t.check(bool(np.isfinite(got).all()) and rel_err <= CHECK_BOUND, f"{build}: every element written, close")
        gbps = nbytes / ms / 1e6
        share = f"{gbps / copy_gbps:.0%} of the copy"
        t.say(f"{build:>7}: {ms:.3f} ms = {gbps:.0f} GB/s ({share}); max error {abs_err:.2e} abs, {rel_err:.2e} rel")
    t.say(f"fast / precise: {mapped['precise'][1] / mapped['fast'][1]:.2f}x the speed")

    t.step("sinf's error as |x| grows: precise keeps its 2 ulp, the fast one only promises [-pi, pi]")
    for scale in SIN_SCALES:
        host = rng.uniform(-scale, scale, ERROR_N).astype(np.float32)
        exact = np.sin(host.astype(np.float64))
        with DeviceBuffer.from_array(host) as x, DeviceBuffer.empty(ERROR_N) as out:
            for build, (got, _) in run_both("sin_map", x, out).items():
                abs_err, rel_err = worst(got, exact)
                t.say(f"|x| <= {scale:<8.4g} {build:>7}: max error {abs_err:.2e} abs, {rel_err:.2e} rel")
                if build == "precise" or scale == math.pi:
                    t.check(abs_err <= CHECK_BOUND, f"{build} sinf within {CHECK_BOUND:g} for |x| <= {scale:.4g}")


if __name__ == "__main__":
    run(main, "Tutorial 03d: --use_fast_math, measured")
