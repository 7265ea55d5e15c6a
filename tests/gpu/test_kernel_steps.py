"""The kernel progressions, each step checked against numpy on fresh random data (GPU).

* every reduction step (rawcuda.ops.reduce_steps.STEPS) on odd sizes, aligned and at an offset, with a NaN guard
  after the input (a read past n would show) and NaN-poisoned partial sums (a partial never written would
  show); against a float64 sum within the step's stated bound, and exactly on small integers; and past
  2^31 and 2^32 elements, where an index that wrapped would skip or repeat a marked element;
* each transpose variant on shapes that are neither square nor multiples of the 32x32 tile: every element,
  an output poisoned first and a guard after it;
* the block-size sweep's copy at every block size, and the occupancy the driver reports for it;
* the transcendentals, built with and without --use_fast_math, within bounds stated from the CUDA
  Programming Guide's accuracy tables (doubled: those maxima come from testing, not proof).

Nothing here asserts a time: bench/progressions.py measures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rawcuda import DeviceAttribute, DeviceBuffer, Function, ops
from rawcuda.core.context import default_context
from rawcuda.ops.reduce_steps import STEPS, ReduceStep, Reduction

pytestmark = pytest.mark.gpu

F32 = np.dtype(np.float32)
NAN = np.float32(np.nan)
GIB = 1 << 30
GUARD = 1024  # NaN elements after each input and output
SIZES = (0, 1, 31, 1_000_003, (1 << 24) + 7)
PAST_2_31 = (1 << 31) + (1 << 20) + 3  # 8 GiB of float32 and a megabyte more, with an odd tail
PAST_2_32 = (1 << 32) + (1 << 20) + 3  # 16 GiB: an `unsigned` index would wrap here
SLACK = GIB  # free memory left for the scratch buffers and the driver


def step_id(step: ReduceStep) -> str:
    return f"{step.number}-{step.kernel}"


def guarded(host: np.ndarray, offset: int = 0) -> tuple[DeviceBuffer, DeviceBuffer]:
    """``host`` on the device at element ``offset`` of a buffer that is NaN everywhere else: (whole, view)."""
    whole = DeviceBuffer.empty(offset + host.size + GUARD, F32)
    whole.fill(NAN)
    view = whole.view(offset, host.shape)
    view.copy_from(host)
    return whole, view


def tail_is_nan(whole: DeviceBuffer, start: int) -> bool:
    with whole.view(start, whole.size - start) as tail:
        return bool(np.isnan(tail.to_array()).all())


def require_free(nbytes: int) -> None:
    free = default_context().mem_info()[0]
    if free < nbytes + SLACK:
        pytest.skip(f"needs {(nbytes + SLACK) / GIB:.1f} GiB of free device memory; {free / GIB:.1f} GiB are free")


# --- the reduction steps --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset-view"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_reduction_step_matches_a_float64_sum(step: ReduceStep, n: int, offset: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(n, dtype=np.float32)
    whole, view = guarded(x, offset)
    with whole, Reduction(step, view) as reduction:
        reduction.poison()
        got = reduction()
        x64 = x.astype(np.float64)
        exact, bound = float(x64.sum()), reduction.error_bound(float(np.abs(x64).sum()))
        passes = reduction.passes
    # NaN (a read past the end, a partial never written) fails this comparison too.
    assert abs(got - exact) <= bound, f"{step.kernel}, n={n}, {passes} passes: {got} vs {exact} (bound {bound:.3g})"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("step", STEPS, ids=step_id)
def test_reduction_step_adds_every_element_exactly_once(step: ReduceStep, n: int, rng: np.random.Generator) -> None:
    # Small integers add exactly in float32 while every partial sum stays below 2^24 in magnitude, which a sum
    # of at most 2^24 + 7 values in -4..4 does by a margin of over a thousand standard deviations: an element
    # skipped or added twice changes the total.
    ints = rng.integers(-4, 5, n).astype(np.float32)
    whole, view = guarded(ints)
    with whole, Reduction(step, view) as reduction:
        reduction.poison()
        got = reduction()
    assert got == float(ints.astype(np.int64).sum()), f"{step.kernel}, n={n}"


@pytest.mark.parametrize("n", [PAST_2_31, PAST_2_32], ids=["past-2^31", "past-2^32"])
def test_every_reduction_step_past_2_31_elements(n: int) -> None:
    # Zeros with distinct powers of two at the landmarks: the sum is exact in any order, and an element skipped,
    # read twice or read from a wrapped index changes it. One buffer for all the steps (16 GiB at most).
    require_free(n * F32.itemsize)
    marks = sorted(i for i in {0, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, n - 1} if i < n)
    total = float(2 ** len(marks) - 1)
    wrong = {}
    with DeviceBuffer.zeros(n, F32) as x:
        for k, i in enumerate(marks):
            with x.view(i, 1) as element:
                element.copy_from(np.array([2.0**k], F32))
        for step in STEPS:
            with Reduction(step, x) as reduction:
                reduction.poison()
                got = reduction()
            if got != total:
                wrong[step.kernel] = got
    assert wrong == {}, f"expected {total} from every step"


# --- the transpose variants -----------------------------------------------------------------------------------------
TRANSPOSE_SHAPES = [(1, 1), (1, 37), (37, 1), (31, 33), (33, 65), (300, 257), (1025, 3), (3, 1025), (777, 1001)]


@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("variant", sorted(ops.TRANSPOSE_VARIANTS))
def test_transpose_variant_writes_every_element(variant: str, shape: tuple[int, int], rng: np.random.Generator) -> None:
    rows, cols = shape
    x = rng.standard_normal(shape, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(rows * cols + GUARD, F32) as whole:
        whole.fill(NAN)
        with whole.view(0, (cols, rows)) as out:
            ops.transpose(out, dx, variant=variant)
            got = out.to_array()
        assert tail_is_nan(whole, rows * cols), "something was written past the output"
    np.testing.assert_array_equal(got, x.T)  # a copy: bit for bit, and no NaN poison left


# --- the block-size sweep ---------------------------------------------------------------------------------------
SWEEP_N = 1_000_003  # prime: no block size divides it, so the last block is partial every time
BLOCK_SIZES = (1, 32, 33, 64, 128, 256, 512, 1000, 1024)


def copy_kernel() -> Function:
    return ops.kernel("occupancy", "copy_one_per_thread", default_context())


@pytest.mark.parametrize("block", BLOCK_SIZES)
def test_copy_one_per_thread_at_every_block_size(block: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(SWEEP_N, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(SWEEP_N + GUARD, F32) as whole:
        whole.fill(NAN)
        with whole.view(0, SWEEP_N) as out:
            copy_kernel().launch(-(-SWEEP_N // block), block, out, dx, SWEEP_N)
            got = out.to_array()
        assert tail_is_nan(whole, SWEEP_N)
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize(("grid", "block"), [(1, 1), (1, 32), (7, 33), (132, 64), (1000, 1024)])
def test_copy_grid_stride_covers_any_n_with_any_grid(grid: int, block: int, rng: np.random.Generator) -> None:
    """One wave or one thread: the loop covers every element, and writes nothing past n."""
    x = rng.standard_normal(SWEEP_N, dtype=np.float32)
    fn = ops.kernel("occupancy", "copy_grid_stride", default_context())
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(SWEEP_N + GUARD, F32) as whole:
        whole.fill(NAN)
        with whole.view(0, SWEEP_N) as out:
            fn.launch(grid, block, out, dx, SWEEP_N)
            got = out.to_array()
        assert tail_is_nan(whole, SWEEP_N)
    np.testing.assert_array_equal(got, x)


def test_the_reported_occupancy_fits_the_multiprocessor() -> None:
    fn, device = copy_kernel(), default_context().device
    threads_per_sm = device.attribute(DeviceAttribute.MAX_THREADS_PER_MULTIPROCESSOR)
    blocks_per_sm = device.attribute(DeviceAttribute.MAX_BLOCKS_PER_MULTIPROCESSOR)
    for block in (32, 64, 128, 256, 512, 1024):
        active = fn.max_active_blocks_per_sm(block)
        assert 1 <= active <= blocks_per_sm and active * block <= threads_per_sm, (block, active)
    # What kernels/occupancy.cu says: this kernel needs too few registers to matter, so 32-thread blocks stop
    # at the block limit, and from 64 threads on the thread limit decides.
    assert fn.max_active_blocks_per_sm(32) == min(blocks_per_sm, threads_per_sm // 32)
    assert fn.max_active_blocks_per_sm(1024) == threads_per_sm // 1024


# --- the transcendentals, precise and --use_fast_math ----------------------------------------------------------------
BUILDS = {"precise": "transcendentals", "fast": "transcendentals_fast"}  # kernels/<stem>.cu, same kernels
BLOCK = 256
CHAIN_ITERATIONS = 64  # kernels/transcendentals.cu: CHAIN_MAX_ITERATIONS; t = x + k / 64 stays in [-1, 2)
CHAIN_STEP = np.float32(1 / 64)
CHAIN_LOG_OFFSET = 3.0
MARGIN = 2  # the guide's maxima come from extensive testing, not proof: the tests allow twice as much
ROUNDING_ULPS = 0.5  # the guide measures from the correctly rounded result, these tests from the exact one
ULP_1 = 2.0**-23  # the ulp of numbers in [1, 2): relative error of one ulp is at most this
SINF_ULPS, EXPF_ULPS, LOGF_ULPS = 2, 2, 1  # the guide: sinf, expf, logf over their full range
FAST_SIN_ABS = 2.0**-21.41  # __sinf for |x| <= pi, absolute ("larger otherwise")
FAST_LOG_ULPS = 3  # __logf outside [0.5, 2]


def fast_exp_ulps(x: np.ndarray) -> np.ndarray:
    return 2 + np.floor(np.abs(1.173 * x))  # __expf, the guide's formula


def run_map(build: str, kernel: str, x: np.ndarray, *scalars: int) -> np.ndarray:
    """``kernel`` of one build over ``x`` into a poisoned, guarded output."""
    ctx = default_context()
    fn = ops.kernel(BUILDS[build], kernel, ctx)
    n = x.size
    grid = max(1, min(-(-n // BLOCK), ops.WAVES * ctx.device.multiprocessor_count))
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(n + GUARD, F32) as whole:
        whole.fill(NAN)
        with whole.view(0, n) as out:
            fn.launch(grid, BLOCK, out, dx, n, *scalars)
            got = out.to_array()
        assert tail_is_nan(whole, n)
    return got


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 ulp at ``exact``."""
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def chain_bound(build: str) -> float:
    """The largest absolute error the chain's mean may have, from the guide's maxima (then MARGIN).

    For t in [-1, 2): |sin t| e^-t <= sin(1) e = 2.29, e^-t <= e, log(3 + t^2) <= log 7 < 2, a term is in
    [-0.91, 2.07]. A term's error is at most e * (sin's) + 2.29 * (exp's relative) + (log's) + its own
    roundings: the fused multiply-add and the product (half an ulp of [2, 4) each: 2^-23), 3 + t^2 (half an ulp
    relative: 2^-24 on the log). The mean of the terms, summed in double, has at most a term's error, plus
    half an ulp of [1, 2) for the final float.
    """
    e, sin_exp = math.e, math.sin(1) * math.e
    if build == "precise":
        sin_abs = (SINF_ULPS + ROUNDING_ULPS) * 2.0**-24  # |sin| < 1: its ulp is at most 2^-24
        exp_rel = (EXPF_ULPS + ROUNDING_ULPS) * ULP_1
        log_abs = (LOGF_ULPS + ROUNDING_ULPS) * ULP_1  # log(3 + t^2) < 2: its ulp is at most 2^-23
    else:
        sin_abs = FAST_SIN_ABS
        exp_rel = (float(fast_exp_ulps(np.array(2.0))) + ROUNDING_ULPS) * ULP_1  # |-t| <= 2
        log_abs = (FAST_LOG_ULPS + ROUNDING_ULPS) * ULP_1  # 3 + t^2 >= 3: outside [0.5, 2], so ulps
    arithmetic = 2 * ULP_1 + 2.0**-24 + 2.0**-24
    return MARGIN * (e * sin_abs + sin_exp * exp_rel + log_abs + arithmetic)


def chain_reference(x: np.ndarray) -> np.ndarray:
    total = np.zeros(x.size)
    for k in range(CHAIN_ITERATIONS):
        t = (x + np.float32(k) * CHAIN_STEP).astype(np.float64)  # float32 add, one rounding: the GPU's own t
        total += np.sin(t) * np.exp(-t) + np.log(CHAIN_LOG_OFFSET + t * t)
    return total / CHAIN_ITERATIONS


@pytest.mark.parametrize("n", [1, 31, 65_539])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_transcendental_chain_within_its_stated_bound(build: str, n: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, n).astype(np.float32)
    got = run_map(build, "transcendental_chain", x, CHAIN_ITERATIONS)
    error = np.abs(got.astype(np.float64) - chain_reference(x))
    bound = chain_bound(build)
    assert np.all(error <= bound), f"{build}: max error {np.nanmax(error):.3g} over the bound {bound:.3g}"


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_exp_map_within_its_stated_ulps(build: str, rng: np.random.Generator) -> None:
    x = rng.uniform(-4, 4, SWEEP_N).astype(np.float32)  # e^-4 .. e^4: no denormal to flush, no overflow
    got = run_map(build, "exp_map", x)
    allowed = MARGIN * (EXPF_ULPS if build == "precise" else fast_exp_ulps(x)) + ROUNDING_ULPS
    error = ulps(got, np.exp(x.astype(np.float64)))
    assert np.all(error <= allowed), f"{build}: {np.nanmax(error):.2f} ulps"


@pytest.mark.parametrize("scale", [math.pi, 1e3, 1e6], ids=["pi", "1e3", "1e6"])
def test_precise_sinf_stays_within_two_ulps_at_any_magnitude(scale: float, rng: np.random.Generator) -> None:
    # 1e6 is past 105615, where sinf switches to its slow, exact argument reduction.
    x = rng.uniform(-scale, scale, SWEEP_N).astype(np.float32)
    error = ulps(run_map("precise", "sin_map", x), np.sin(x.astype(np.float64)))
    assert np.all(error <= MARGIN * SINF_ULPS + ROUNDING_ULPS), f"{np.nanmax(error):.2f} ulps"


def test_fast_sinf_within_its_absolute_bound_on_minus_pi_to_pi(rng: np.random.Generator) -> None:
    # Only there: outside [-pi, pi] the guide promises nothing but "larger" (tutorial 03d prints how much).
    x = rng.uniform(-math.pi, math.pi, SWEEP_N).astype(np.float32)
    error = np.abs(run_map("fast", "sin_map", x).astype(np.float64) - np.sin(x.astype(np.float64)))
    assert np.all(error <= MARGIN * FAST_SIN_ABS), f"max error {np.nanmax(error):.3g}"
