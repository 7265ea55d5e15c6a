"""Work for compute-sanitizer: every shipped kernel on awkward sizes, each result checked against numpy.

Run by tests/sanitizer/run_sanitizer.sh under ``compute-sanitizer``; also runs on its own::

    python3 tests/sanitizer/workload.py kernels [--short]   # memcheck: every ops kernel
    python3 tests/sanitizer/workload.py reduce [--short]    # racecheck: warp_reduce_sum through ops.sum
    python3 tests/sanitizer/workload.py transpose [--short] # racecheck: the three transposes (two tile shared memory)
    python3 tests/sanitizer/workload.py steps [--short]     # racecheck: every step of the reduction progression
    python3 tests/sanitizer/workload.py sgemm [--short]     # memcheck and racecheck: every kernel of sgemm.cu

Why awkward sizes? Out-of-bounds accesses hide at the edges: a length one past a block, a tail shorter than
a float4, a matrix that is not a multiple of the tile, a view whose pointer is not 16-byte aligned (which
sends vector_add down its scalar path). Why verified? A kernel that reads out of bounds may still "work" on
the GPU; under the sanitizer it is reported -- but a kernel that computes the wrong thing is caught here.

Only synchronous copies are used: no driver call in this script is expected to fail or return a status,
so compute-sanitizer's report of failing API calls stays meaningful.

Prints ``sanitizer-workload: <mode>: N checks verified`` and exits 0, or prints what differed and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # runs from a source checkout without installing
    sys.path.insert(0, str(ROOT))

from rawcuda import DeviceBuffer, ops  # noqa: E402
from rawcuda.ops import sgemm  # noqa: E402  (after the sys.path fix above)
from rawcuda.ops.reduce_steps import STEPS, Reduction  # noqa: E402

NAN = np.float32(np.nan)  # outputs are poisoned with it: an element a kernel skipped stays NaN
FLOAT32_EPS = float(np.finfo(np.float32).eps)
BLOCK = ops.BLOCK
LENGTHS = (1, 3, 4, 5, 31, 33, BLOCK - 1, BLOCK + 1, 4 * BLOCK + 3, 100_003, 1_000_003)
SHORT_LENGTHS = (1, 5, 33, BLOCK + 1, 10_007)
OFFSETS = (0, 1, 3)  # elements: views at 4 and 12 bytes past an aligned start
MATRICES = ((1, 1, 1), (17, 33, 65), (64, 64, 64), (65, 63, 17), (127, 129, 1), (1, 200, 7), (200, 3, 129))
SHORT_MATRICES = ((1, 1, 1), (17, 33, 65), (65, 63, 17))
# Every SGEMM kernel (rawcuda.ops.sgemm.KERNELS) at these; float4 kernels get N and K rounded up to multiples of 4.
# 257 = 32 K-steps of 8 and a 1-deep tail: the double-buffered kernels switch stages 32 times.
SGEMM_MATRICES = ((1, 1, 1), (17, 33, 9), (129, 65, 257), (130, 260, 12))
SHORT_SGEMM_MATRICES = ((129, 65, 257),)
TRANSPOSES = ((1, 1), (31, 33), (32, 32), (33, 65), (300, 257), (1025, 3), (3, 1025))
SHORT_TRANSPOSES = ((1, 1), (33, 65), (65, 33))
REDUCTIONS = (0, 1, 31, 33, BLOCK + 1, 10_007, 1_000_003)
SHORT_REDUCTIONS = (1, 33, 10_007)
DATA_SCALE = 3.0


class Checks:
    """Counts the verifications and collects every failure (all are reported, not only the first)."""

    def __init__(self) -> None:
        self.count = 0
        self.failures: list[str] = []

    def equal(self, got: np.ndarray, expected: np.ndarray, what: str) -> None:
        self.count += 1
        if not np.array_equal(got, expected):
            bad = int(np.count_nonzero(~(got == expected)))
            self.failures.append(f"{what}: {bad} of {expected.size} elements differ")

    def close(self, got: np.ndarray, expected: np.ndarray, bound: np.ndarray | float, what: str) -> None:
        self.count += 1
        error = np.abs(got.astype(np.float64) - expected)
        if not np.all(error <= bound):  # NaN (an element never written) fails this too
            self.failures.append(f"{what}: max error {np.nanmax(error) if error.size else 0.0:.3g} over the bound")


def poisoned(shape: int | tuple[int, ...]) -> DeviceBuffer:
    buf = DeviceBuffer.empty(shape, np.float32)
    buf.fill(NAN)
    return buf


def with_offset(host: np.ndarray, offset: int) -> tuple[DeviceBuffer, DeviceBuffer]:
    """``host`` on the device, ``offset`` elements into a larger buffer: (the whole buffer, the view)."""
    padded = np.concatenate([np.full(offset, NAN, np.float32), host])
    whole = DeviceBuffer.from_array(padded)
    return whole, whole.view(offset, host.shape)


def elementwise(checks: Checks, rng: np.random.Generator, lengths: tuple[int, ...]) -> None:
    for n in lengths:
        for offset in OFFSETS:
            a, b = (rng.standard_normal(n) * DATA_SCALE).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            alpha = 2.0  # a power of two: the GPU's fused multiply-add and numpy round alike
            (wa, va), (wb, vb) = with_offset(a, offset), with_offset(b, offset)
            wc, vc = with_offset(np.full(n, NAN, np.float32), offset)
            ops.vector_add(vc, va, vb)
            checks.equal(vc.to_array(), a + b, f"vector_add n={n} offset={offset}")
            ops.saxpy(vc, alpha, va)
            checks.equal(vc.to_array(), np.float32(alpha) * a + (a + b), f"saxpy n={n} offset={offset}")
            ops.gelu(vc, va)
            x = a.astype(np.float64)
            expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
            checks.close(vc.to_array(), expected, 16 * FLOAT32_EPS * (np.abs(x) + 1), f"gelu n={n} offset={offset}")
            before = wc.to_array()[:offset]
            checks.equal(np.isnan(before), np.ones(offset, bool), f"nothing written before the view n={n}")
            for buf in (wa, wb, wc):
                buf.close()


def bias_relu(checks: Checks, rng: np.random.Generator, shapes: tuple[tuple[int, int], ...]) -> None:
    for rows, cols in shapes:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        bias = rng.standard_normal(cols).astype(np.float32)
        with DeviceBuffer.from_array(x) as dx, DeviceBuffer.from_array(bias) as db, poisoned((rows, cols)) as out:
            ops.bias_relu(out, dx, db)
            checks.equal(out.to_array(), np.maximum(x + bias, np.float32(0)), f"bias_relu {rows}x{cols}")


def matmul(checks: Checks, rng: np.random.Generator, shapes: tuple[tuple[int, int, int], ...]) -> None:
    for m, n, k in shapes:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
            ops.matmul(dc, da, db)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            bound = 2 * k * FLOAT32_EPS * (np.abs(a64) @ np.abs(b64)) + 1e-30  # the dot-product error bound
            checks.close(dc.to_array(), a64 @ b64, bound, f"matmul {m}x{k} @ {k}x{n}")


def sgemm_kernels(checks: Checks, rng: np.random.Generator, shapes: tuple[tuple[int, int, int], ...]) -> None:
    for spec in sgemm.KERNELS.values():
        for m, n, k in shapes:
            if spec.vector:
                n, k = (-(-x // sgemm.VECTOR_FLOATS) * sgemm.VECTOR_FLOATS for x in (n, k))
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
                ops.matmul(dc, da, db, kernel=spec.name)
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                bound = spec.error_bound(k) * (np.abs(a64) @ np.abs(b64)) + 1e-30  # rawcuda/ops/sgemm.py derives it
                checks.close(dc.to_array(), a64 @ b64, bound, f"{spec.name} {m}x{k} @ {k}x{n}")


def transposes(checks: Checks, rng: np.random.Generator, shapes: tuple[tuple[int, int], ...]) -> None:
    for rows, cols in shapes:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        for variant in sorted(ops.TRANSPOSE_VARIANTS):
            with DeviceBuffer.from_array(x) as dx, poisoned((cols, rows)) as out:
                ops.transpose(out, dx, variant=variant)
                checks.equal(out.to_array(), x.T, f"transpose {variant} {rows}x{cols}")


def reductions(checks: Checks, rng: np.random.Generator, lengths: tuple[int, ...]) -> None:
    for n in lengths:
        for offset in (0, 1):
            x = rng.standard_normal(n).astype(np.float32)
            whole, view = with_offset(x, offset)
            got = ops.sum(view)
            exact = float(x.astype(np.float64).sum())
            bound = 8 * FLOAT32_EPS * float(np.abs(x).astype(np.float64).sum()) * max(1.0, np.log2(max(n, 2)))
            checks.close(np.array([got]), np.array([exact]), bound + 1e-30, f"sum n={n} offset={offset}")
            # small integers add exactly in float32: any element read twice or skipped would show
            ints = rng.integers(-4, 5, n).astype(np.float32)
            with DeviceBuffer.from_array(ints) as di:
                checks.equal(
                    np.array([ops.sum(di)]), np.array([float(ints.astype(np.int64).sum())]), f"exact sum n={n}"
                )
            whole.close()


def reduction_steps(checks: Checks, rng: np.random.Generator, lengths: tuple[int, ...]) -> None:
    """Every step of rawcuda.ops.reduce_steps on small integers (exact in float32): each element added once."""
    for n in lengths:
        ints = rng.integers(-4, 5, n).astype(np.float32)
        with DeviceBuffer.from_array(ints) as x:
            for step in STEPS:
                with Reduction(step, x) as reduction:
                    reduction.poison()
                    got = reduction()
                checks.equal(np.array([got]), np.array([float(ints.astype(np.int64).sum())]), f"{step.kernel} n={n}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("kernels", "reduce", "transpose", "steps", "sgemm"))
    parser.add_argument("--short", action="store_true", help="fewer sizes (for the test suite)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng()
    checks = Checks()
    short = args.short
    plan: dict[str, list[Callable[[], None]]] = {
        "kernels": [
            lambda: elementwise(checks, rng, SHORT_LENGTHS if short else LENGTHS),
            lambda: bias_relu(checks, rng, SHORT_TRANSPOSES if short else TRANSPOSES),
            lambda: matmul(checks, rng, SHORT_MATRICES if short else MATRICES),
            lambda: transposes(checks, rng, SHORT_TRANSPOSES if short else TRANSPOSES),
            lambda: reductions(checks, rng, SHORT_REDUCTIONS if short else REDUCTIONS),
            lambda: reduction_steps(checks, rng, SHORT_REDUCTIONS if short else REDUCTIONS),
        ],
        "reduce": [lambda: reductions(checks, rng, SHORT_REDUCTIONS if short else REDUCTIONS)],
        "transpose": [lambda: transposes(checks, rng, SHORT_TRANSPOSES if short else TRANSPOSES)],
        "steps": [lambda: reduction_steps(checks, rng, SHORT_REDUCTIONS if short else REDUCTIONS)],
        "sgemm": [lambda: sgemm_kernels(checks, rng, SHORT_SGEMM_MATRICES if short else SGEMM_MATRICES)],
    }
    for step in plan[args.mode]:
        step()
    if checks.failures:
        for failure in checks.failures:
            print("FAILED:", failure)
        return 1
    print(f"sanitizer-workload: {args.mode}: {checks.count} checks verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
