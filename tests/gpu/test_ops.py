"""Every shipped kernel against numpy, on fresh random data at awkward sizes (GPU).

Outputs are poisoned with NaN before each kernel runs, and every element is compared. Exact kernels
(add, transpose, bias+ReLU) must match numpy bit for bit; the reduction and matmul are compared with a
float64 reference and a tolerance scaled by the magnitude of the terms; saxpy and GELU within a few ulps
(the GPU fuses multiply-adds and has its own tanhf). At the end: where ops keeps the modules it loads
(per Context object, going with it). Shapes past 2^31 elements: tests/gpu/test_extents.py.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from rawcuda import Context, DeviceBuffer, Stream, ops

pytestmark = pytest.mark.gpu

NAN = np.float32(np.nan)
BLOCK = ops.BLOCK
PRIME = 1_000_003
BIG = (1 << 28) + 3  # >= 2^28 elements (1 GiB of float32) for the bandwidth kernels
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def poisoned(shape: int | tuple[int, ...]) -> DeviceBuffer:
    buf = DeviceBuffer.empty(shape, np.float32)
    buf.fill(NAN)
    return buf


@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 1, PRIME, BIG])
def test_vector_add(rng: np.random.Generator, n: int) -> None:
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned(n) as dc:
        ops.vector_add(dc, da, db)
        np.testing.assert_array_equal(dc.to_array(), a + b)


@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 1, PRIME])
def test_saxpy(rng: np.random.Generator, n: int) -> None:
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    alpha = float(rng.standard_normal())
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.from_array(y) as dy:
        ops.saxpy(dy, alpha, dx)
        expected = np.float32(alpha) * x.astype(np.float64) + y
        got = dy.to_array()
    scale = np.abs(np.float32(alpha) * x) + np.abs(y)
    assert np.all(np.abs(got - expected) <= 2 * FLOAT32_EPS * scale + np.finfo(np.float32).tiny)


@pytest.mark.parametrize("n", [0, 1, 3, 31, 33, BLOCK - 1, BLOCK + 1, PRIME, BIG])
@pytest.mark.parametrize("offset", [0, 1])
def test_reduction_any_length_and_alignment(rng: np.random.Generator, n: int, offset: int) -> None:
    x = rng.standard_normal(n + offset, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx:
        view = dx.view(offset)  # offset 1: a float pointer that is not 16-byte aligned
        got = ops.sum(view)
    expected = float(x[offset:].astype(np.float64).sum())
    tolerance = 8 * FLOAT32_EPS * float(np.abs(x[offset:]).astype(np.float64).sum()) * max(1.0, np.log2(max(n, 2)))
    assert abs(got - expected) <= tolerance + 1e-30, (got, expected)


@pytest.mark.parametrize("n", [1, 33, BLOCK + 1, PRIME, BIG])
def test_reduction_is_exact_on_small_integers(rng: np.random.Generator, n: int) -> None:
    # Small integers add exactly in float32 (every partial sum stays far below 2^24), so the GPU must
    # match numpy exactly: a single element read twice or skipped would show.
    x = rng.integers(-4, 5, n).astype(np.float32)
    with DeviceBuffer.from_array(x) as dx:
        assert ops.sum(dx) == float(x.astype(np.int64).sum())


def test_reduction_partials_are_per_block(rng: np.random.Generator) -> None:
    n, blocks = 1_000_000, 7
    x = rng.standard_normal(n, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, poisoned(blocks) as partials:
        ops.sum_partials(partials, dx, blocks)
        got = partials.to_array()
    assert not np.isnan(got).any()
    assert abs(got.astype(np.float64).sum() - x.astype(np.float64).sum()) < 1e-3 * np.abs(x).sum()


@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(1, 1, 1), (17, 33, 65), (64, 64, 64), (127, 129, 1), (513, 257, 1031), (1, 1000, 7), (1000, 3, 513)],
)
def test_matmul(rng: np.random.Generator, m: int, n: int, k: int) -> None:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
        ops.matmul(dc, da, db)
        got = dc.to_array()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = a64 @ b64
    bound = 2 * k * FLOAT32_EPS * (np.abs(a64) @ np.abs(b64))  # the standard dot-product error bound
    assert np.all(np.abs(got - expected) <= bound + 1e-30)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (65, 63, 17), (200, 300, 1000)])
def test_matmul_is_exact_on_small_integers(rng: np.random.Generator, m: int, n: int, k: int) -> None:
    a = rng.integers(-3, 4, (m, k)).astype(np.float32)
    b = rng.integers(-3, 4, (k, n)).astype(np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
        ops.matmul(dc, da, db)
        np.testing.assert_array_equal(dc.to_array(), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (31, 33), (32, 32), (1024, 777), (4097, 3), (3, 4097)])
def test_transpose(rng: np.random.Generator, shape: tuple[int, int], padded: bool) -> None:
    x = rng.standard_normal(shape, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, poisoned(shape[::-1]) as out:
        ops.transpose(out, dx, padded=padded)
        np.testing.assert_array_equal(out.to_array(), x.T)


@pytest.mark.parametrize("shape", [(1, 1), (7, 255), (300, 257), (70000, 3)])
def test_bias_relu(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    x = rng.standard_normal(shape, dtype=np.float32)
    bias = rng.standard_normal(shape[1], dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.from_array(bias) as db, poisoned(shape) as out:
        ops.bias_relu(out, dx, db)
        np.testing.assert_array_equal(out.to_array(), np.maximum(x + bias, np.float32(0)))


@pytest.mark.parametrize("n", [1, BLOCK + 1, PRIME])
def test_gelu(rng: np.random.Generator, n: int) -> None:
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    with DeviceBuffer.from_array(x) as dx, poisoned(n) as out:
        ops.gelu(out, dx)
        got = out.to_array()
    x64 = x.astype(np.float64)
    expected = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    assert np.all(np.abs(got - expected) <= 16 * FLOAT32_EPS * (np.abs(x64) + 1))


def test_kernels_on_a_stream(rng: np.random.Generator) -> None:
    n = 12_345
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    with Stream() as s, DeviceBuffer.from_array(a, stream=s) as da, DeviceBuffer.from_array(b, stream=s) as db:
        dc = DeviceBuffer.empty(n)
        dc.fill(NAN, stream=s)
        ops.vector_add(dc, da, db, stream=s)
        np.testing.assert_array_equal(dc.to_array(stream=s), a + b)
        assert abs(ops.sum(dc, stream=s) - float((a + b).astype(np.float64).sum())) < 1e-3 * np.abs(a + b).sum()
        dc.close()


def test_ops_check_shapes_and_dtypes() -> None:
    with DeviceBuffer.zeros(4) as f, DeviceBuffer.zeros(5) as g, DeviceBuffer.zeros(4, np.float64) as d:
        with pytest.raises(ValueError, match="same number of elements"):
            ops.vector_add(f, f, g)
        with pytest.raises(TypeError, match="float32"):
            ops.vector_add(f, f, d)
        with pytest.raises(ValueError, match="matmul needs"):
            ops.matmul(f, f, f)


# --- where ops keeps its modules: per Context object, going with it ---------------------------------------------
def test_ops_modules_belong_to_the_context_object_not_to_its_handle() -> None:
    # Two Context objects of one primary context share a handle value. The old cache was keyed by that value,
    # so the second was handed a module of the first (and a reused handle could have been handed a stranger's).
    first, second = Context.primary(0), Context.primary(0)
    try:
        assert first.raw_handle == second.raw_handle
        mine, theirs = (ops.kernel("vector_add", "vector_add", ctx) for ctx in (first, second))
        assert mine.module.context is first and theirs.module.context is second
        assert ops.kernel("vector_add", "vector_add", first) is mine  # loaded once per Context object
    finally:
        second.close()
        first.close()


def test_a_closed_context_lets_go_of_its_ops_modules() -> None:
    # The old module-level dict kept every module it ever loaded, and so its (closed) context object, forever.
    ctx = Context.create(0)
    fn = ops.kernel("vector_add", "vector_add", ctx)
    module, context = weakref.ref(fn.module), weakref.ref(ctx)
    ctx.close()
    assert fn.closed and not ctx.cache
    del fn, ctx
    gc.collect()
    assert module() is None and context() is None


def test_a_context_dropped_unclosed_is_collected_with_its_ops_modules() -> None:
    # The cache is held by the context, and the module's fallback finalizer holds the context only weakly, so
    # neither keeps the other alive: dropping the context destroys it (and the module with it).
    ctx = Context.create(0)
    with DeviceBuffer.zeros(BLOCK, context=ctx) as buf:
        ops.vector_add(buf, buf, buf)
        ctx.synchronize()
    context, module = weakref.ref(ctx), weakref.ref(ops.kernel("vector_add", "vector_add", ctx).module)
    del ctx, buf  # (a closed buffer still holds its context, like any child)
    gc.collect()
    assert context() is None and module() is None
