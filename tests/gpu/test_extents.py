"""Every rawcuda.ops entry point at sizes past 2^31 elements (GPU; 32-bit extents wrapped there).

An H200 holds 2^31 float32 (8 GiB) many times over, and that is where ``int`` sizes and indices broke: a
size of 2^31 or more arrived in an ``int`` parameter as a negative number (the kernel did nothing and the
launch "succeeded"), an ``int`` index wrapped past 2^31 (an illegal address), and one block per tile row
ran into gridDim.y's 65535. Each test below says what the old code did with its shape.

Checking an 8 GiB result without comparing 8 GiB on the host:

* Inputs are a periodic pattern: element i is ``BLOCK[i % PERIOD]`` for a random block, built on the GPU by
  doubling copies (milliseconds, not a host upload), so the expected value of any element is known. The
  period is prime, so a shift by 2^31 or 2^32 -- the wraps we look for -- never lands on an equal value.
* Outputs are poisoned with NaN first, with a NaN guard after them. ``ops.sum(out)`` is finite only if no
  NaN is left: every element was written. The guard must still be NaN: nothing was written past the end.
* The elements that matter are compared with numpy: windows at the start, around flat indices 2^31 and
  2^32, and at the end, plus a random sample.

Each test skips, saying how much it needs, when the device has less free memory (``ctx.mem_info()``).
On the CPU, the grids and limits of the same shapes: tests/cpu/test_ops_limits.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from rawcuda import DeviceBuffer, ops
from rawcuda.core.context import default_context
from rawcuda.ops import sgemm
from tests.helpers import run_python

pytestmark = pytest.mark.gpu

GIB = 1 << 30
F32 = np.dtype(np.float32)
NAN = np.float32(np.nan)
PERIOD = 1_000_003  # prime: no shift by a power of two maps an element of the pattern onto an equal one
PAST_2_31 = (1 << 31) + (1 << 20) + 3  # elements: 8 GiB of float32 and a megabyte more, with an odd tail
PAST_2_32 = (1 << 32) + (1 << 20) + 3  # 16 GiB: an `unsigned` index would wrap here
SHIFT = 1 << 20  # a second input is the pattern from here on (a multiple of 4: float4 alignment kept)
PATTERN = PAST_2_32 + SHIFT  # the shared input: 16 GiB
WINDOW = 4096  # elements compared around each landmark: several warps, blocks and tiles
SAMPLE = 256  # random elements compared besides
GUARD = 1024  # NaN elements after each output: nothing may be written there
SLACK = GIB  # free memory left over for the driver and ops.sum's partial sums
WIDE_ROWS, WIDE_COLS = 2, 1_200_000_000  # the bias_relu: int c + col_stride passed 2^31 and faulted
SQUARE = 46_341  # SQUARE^2 just passes 2^31: a transpose whose out and in flat indices differ past 2^31
MATMUL_TALL = ops.MAX_GRID_Y * sgemm.KERNELS[ops.MATMUL_ANY_KERNEL].tile[0] + 1  # a row tile more than grid y
TRANSPOSE_TALL = ops.MAX_GRID_Y * ops.TRANSPOSE_TILE + 1


def require_free(nbytes: int) -> None:
    free = default_context().mem_info()[0]
    if free < nbytes + SLACK:
        pytest.skip(f"needs {(nbytes + SLACK) / GIB:.1f} GiB of free device memory; {free / GIB:.1f} GiB are free")


@dataclass
class Pattern:
    """A device buffer whose element i is ``block[i % PERIOD]``."""

    buf: DeviceBuffer
    block: np.ndarray

    def at(self, index: np.ndarray) -> np.ndarray:
        return self.block[np.asarray(index) % PERIOD]

    def view(self, offset: int, shape: int | tuple[int, ...]) -> DeviceBuffer:
        return self.buf.view(offset, shape)


def make_pattern(n: int, seed: int) -> Pattern:
    block = np.random.default_rng(seed).standard_normal(PERIOD, dtype=np.float32)
    buf = DeviceBuffer.empty(n, F32)
    filled = min(n, PERIOD)
    with buf.view(0, filled) as first:
        first.copy_from(block[:filled])
    while filled < n:  # double the periodic prefix; `filled` stays a multiple of PERIOD until the last copy
        count = min(filled, n - filled)
        with buf.view(filled, count) as dst, buf.view(0, count) as src:
            dst.copy_from(src)
        filled += count
    return Pattern(buf, block)


@pytest.fixture(scope="module")
def pattern() -> Iterator[Pattern]:
    require_free(PATTERN * F32.itemsize)
    made = make_pattern(PATTERN, seed=12)
    yield made
    made.buf.close()


class Poisoned:
    """An output of ``shape`` poisoned with NaN, followed by a NaN guard; closes on exit."""

    def __init__(self, shape: int | tuple[int, ...]) -> None:
        self.n = math.prod(shape) if isinstance(shape, tuple) else shape
        self.whole = DeviceBuffer.empty(self.n + GUARD, F32)
        self.whole.fill(NAN)
        self.out = self.whole.view(0, shape)

    def __enter__(self) -> Poisoned:
        return self

    def __exit__(self, *exc: object) -> None:
        self.whole.close()


def read(buf: DeviceBuffer, start: int, count: int) -> np.ndarray:
    with buf.view(start, count) as v:
        return v.to_array()


def landmarks(n: int, rng: np.random.Generator, extra: tuple[int, ...] = ()) -> tuple[list[int], np.ndarray]:
    """Window starts (the start, around 2^31 and 2^32, the end, ``extra``) and a random sample of indices."""
    around = [point - WINDOW // 2 for point in (1 << 31, 1 << 32, *extra) if point < n]
    starts = sorted({min(max(s, 0), max(n - WINDOW, 0)) for s in (0, *around, n - WINDOW)})
    return starts, np.sort(rng.integers(0, n, SAMPLE))


Expect = Callable[[np.ndarray], np.ndarray]  # flat output indices -> what numpy says belongs there


def check(
    poisoned: Poisoned,
    expected: Expect,
    rng: np.random.Generator,
    *,
    tolerance: Expect | None = None,
    extra: tuple[int, ...] = (),
) -> None:
    """Every element written, nothing past the end, and the landmark windows and a sample equal to numpy's
    (within ``tolerance(index)`` when given: the kernels that round differently from numpy)."""
    with poisoned.whole.view(0, poisoned.n) as flat:
        assert math.isfinite(ops.sum(flat)), "an element was never written: NaN poison is left in the output"
        assert np.isnan(read(poisoned.whole, poisoned.n, GUARD)).all(), "something was written past the output"
        starts, sample = landmarks(poisoned.n, rng, extra)
        count = min(WINDOW, poisoned.n)
        got = np.concatenate([read(flat, s, count) for s in starts] + [read(flat, int(i), 1) for i in sample])
    index = np.concatenate([np.arange(s, s + count) for s in starts] + [sample])
    want = expected(index)
    if tolerance is None:
        np.testing.assert_array_equal(got, want)
    else:
        error = np.abs(got.astype(np.float64) - want)
        assert np.all(error <= tolerance(index)), f"worst error {error.max()} at index {index[error.argmax()]}"


EPS = float(np.finfo(np.float32).eps)
TINY = float(np.finfo(np.float32).tiny)


# --- 1-D: the kernels that were 64-bit already; these guard that they stay so -----------------------------------
# vector_add, saxpy, gelu and warp_reduce_sum took size_t n and widened their grid-stride arithmetic before
# this issue: these pass on the old code too, and would fail if an index went back to int (2^31) or
# unsigned (2^32).
@pytest.mark.parametrize("n", [PAST_2_31, PAST_2_32], ids=["past-2^31", "past-2^32"])
def test_vector_add(pattern: Pattern, rng: np.random.Generator, n: int) -> None:
    require_free(n * F32.itemsize)
    with pattern.view(0, n) as a, pattern.view(SHIFT, n) as b, Poisoned(n) as c:
        ops.vector_add(c.out, a, b)
        check(c, lambda i: pattern.at(i) + pattern.at(i + SHIFT), rng)


def test_saxpy(pattern: Pattern, rng: np.random.Generator) -> None:
    # In place, so there is no poison: the windows and the sample are the check. A wrap would leave y as it was.
    n, alpha = PAST_2_31, np.float32(2.5)
    require_free(n * F32.itemsize)
    with pattern.view(0, n) as x, DeviceBuffer.empty(n, F32) as y, pattern.view(SHIFT, n) as y0:
        y.copy_from(y0)
        ops.saxpy(y, float(alpha), x)
        starts, sample = landmarks(n, rng)
        got = np.concatenate([read(y, s, WINDOW) for s in starts] + [read(y, int(i), 1) for i in sample])
    index = np.concatenate([np.arange(s, s + WINDOW) for s in starts] + [sample])
    xs, ys = pattern.at(index).astype(np.float64), pattern.at(index + SHIFT).astype(np.float64)
    bound = 2 * EPS * (np.abs(float(alpha) * xs) + np.abs(ys)) + TINY  # one fused rounding against numpy's two
    assert np.all(np.abs(got - (float(alpha) * xs + ys)) <= bound)


@pytest.mark.parametrize("n", [PAST_2_31, PAST_2_32], ids=["past-2^31", "past-2^32"])
def test_gelu(pattern: Pattern, rng: np.random.Generator, n: int) -> None:
    require_free(n * F32.itemsize)

    def gelu64(i: np.ndarray) -> np.ndarray:
        x = pattern.at(i).astype(np.float64)
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    with pattern.view(0, n) as x, Poisoned(n) as out:
        ops.gelu(out.out, x)
        check(out, gelu64, rng, tolerance=lambda i: 16 * EPS * (np.abs(pattern.at(i).astype(np.float64)) + 1))


@pytest.mark.parametrize("n", [PAST_2_31, PAST_2_32], ids=["past-2^31", "past-2^32"])
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset-view"])
def test_sum_and_sum_partials_read_every_element_once(n: int, offset: int) -> None:
    # Zeros with a few powers of two at the landmarks: the sum is exact, and an element skipped, read twice or
    # read from a wrapped index changes it. (No pattern here: the sum of 2^31 random floats has a rounding
    # error larger than a whole skipped megabyte of them.)
    require_free((n + offset) * F32.itemsize)
    marks = sorted(i for i in {0, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, n - 1} if i < n)
    with DeviceBuffer.zeros(n + offset, F32) as whole, whole.view(offset, n) as x:
        for k, i in enumerate(marks):
            with x.view(i, 1) as element:
                element.copy_from(np.array([2.0**k], F32))
        total = float(2 ** len(marks) - 1)
        assert ops.sum(x) == total
        blocks = 7
        with DeviceBuffer.empty(blocks, F32) as partials:
            partials.fill(NAN)
            ops.sum_partials(partials, x, blocks)
            assert float(partials.to_array().astype(np.float64).sum()) == total


# --- bias_relu ----------------------------------------------------------------------------------------------------
def bias_relu_case(pattern: Pattern, rows: int, cols: int, rng: np.random.Generator) -> None:
    """bias_relu of a (rows, cols) view of the pattern with a bias from further along it, checked."""
    with pattern.view(0, (rows, cols)) as x, pattern.view(SHIFT, (cols,)) as bias, Poisoned((rows, cols)) as out:
        ops.bias_relu(out.out, x, bias)

        def expected(i: np.ndarray) -> np.ndarray:  # row r, column i % cols: x + bias[column], then ReLU
            return np.maximum(pattern.at(i) + pattern.at(i % cols + SHIFT), np.float32(0))

        check(out, expected, rng, extra=tuple(r * cols for r in range(1, min(rows, 4))))


def bias_relu_in_a_child(rows: int, cols: int) -> None:
    """bias_relu_case in this (child) interpreter, with a pattern of its own."""
    pattern = make_pattern(rows * cols + SHIFT, seed=34)
    try:
        bias_relu_case(pattern, rows, cols, np.random.default_rng(56))
    finally:
        pattern.buf.close()


def test_bias_relu_two_rows_of_1_2e9_columns() -> None:
    # The case. Old code: `int c` plus the column stride (1.2e9) passed 2^31 and wrapped negative, and
    # bias[c] read outside the buffer: an illegal address, a sticky fault that poisons the context for good.
    # So it runs in a child interpreter: a regression fails this test alone, not every test after it.
    n = WIDE_ROWS * WIDE_COLS
    require_free((2 * n + SHIFT + GUARD) * F32.itemsize)
    code = f"from tests.gpu.test_extents import bias_relu_in_a_child; bias_relu_in_a_child({WIDE_ROWS}, {WIDE_COLS})"
    done = run_python(code, timeout=600)
    assert done.returncode == 0, f"the child exited with {done.returncode}:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize(("rows", "cols"), [(PAST_2_31, 1), (1, PAST_2_31)], ids=["tall", "wide"])
def test_bias_relu_with_a_side_past_2_31(pattern: Pattern, rng: np.random.Generator, rows: int, cols: int) -> None:
    # Old code: the side of 2^31 + ... arrived in its `int` as a negative number, `r < rows` (or `c < cols`)
    # never held, and the launch returned having written nothing: the poison is left.
    require_free(rows * cols * F32.itemsize)
    bias_relu_case(pattern, rows, cols, rng)


# --- transpose ----------------------------------------------------------------------------------------------------
def transpose_case(pattern: Pattern, rows: int, cols: int, padded: bool, rng: np.random.Generator) -> None:
    with pattern.view(0, (rows, cols)) as x, Poisoned((cols, rows)) as out:
        ops.transpose(out.out, x, padded=padded)
        # out[j, i] = x[i, j]: out's flat index f is (j, i) = divmod(f, rows), which is x's flat i * cols + j
        check(out, lambda f: pattern.at((f % rows) * cols + f // rows), rng, extra=(rows, (cols - 1) * rows))


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "naive"])
@pytest.mark.parametrize(
    ("rows", "cols"),
    [(1, PAST_2_31), (PAST_2_31, 1), (SQUARE, SQUARE), (TRANSPOSE_TALL, 3)],
    ids=["wide", "tall", "square", "65536-tile-rows"],
)
def test_transpose(pattern: Pattern, rng: np.random.Generator, rows: int, cols: int, padded: bool) -> None:
    # Old code -- wide: cols arrived as a negative int and nothing was written. tall and 65536-tile-rows: one
    # block per tile row needs gridDim.y > 65535, and the launch was refused ("grid dimension y ... exceeds").
    # square (46341^2, both sides small, the product past 2^31) passed: its offsets were size_t already.
    require_free(rows * cols * F32.itemsize)
    transpose_case(pattern, rows, cols, padded, rng)


# --- matmul -------------------------------------------------------------------------------------------------------
def test_matmul_with_n_past_2_31(pattern: Pattern, rng: np.random.Generator) -> None:
    # (1 x 1) @ (1 x 2^31+): an outer product, each element one rounding -- the same as numpy's float32 product.
    # Old code: N arrived in its `int` as a negative number, `col < N` never held, and C kept its poison.
    # (K past 2^31 is not tested: one block walks K in steps of 8, which takes minutes at that size.)
    n, scale = PAST_2_31, np.float32(3.0)
    require_free(n * F32.itemsize)
    with DeviceBuffer.from_array(np.array([[scale]], F32)) as a, pattern.view(0, (1, n)) as b, Poisoned((1, n)) as c:
        ops.matmul(c.out, a, b)
        check(c, lambda j: scale * pattern.at(j), rng)


def test_matmul_with_more_row_tiles_than_grid_y(rng: np.random.Generator) -> None:
    # M = 65535 * 128 + 1 rows (an 8.4M x K matrix; at K = 1000 that is 31 GiB). Old code: one block per row
    # tile needs gridDim.y = 65536, and the launch was refused. Small integers: the products are exact.
    m, k, n = MATMUL_TALL, 3, 2
    a = rng.integers(-3, 4, (m, k)).astype(np.float32)
    b = rng.integers(-3, 4, (k, n)).astype(np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, Poisoned((m, n)) as c:
        ops.matmul(c.out, da, db)
        with c.whole.view(0, (m, n)) as result:
            np.testing.assert_array_equal(result.to_array(), (a.astype(np.int64) @ b.astype(np.int64)).astype(F32))
        assert np.isnan(read(c.whole, m * n, GUARD)).all()
