"""Every kernel of kernels/sgemm.cu against numpy, on shapes that are not multiples of any tile (GPU).

Each step of the progression, each tuning configuration and each any-input twin (rawcuda.ops.sgemm.KERNELS) runs
through ``ops.matmul(..., kernel=name)`` into a NaN-poisoned C, and every element is compared with a float64
reference on fresh random data. The bound is each kernel's ``error_bound`` (rawcuda/ops/sgemm.py derives it);
for the fp32 kernels it is the one for a K-term dot product accumulated in float32 with fused multiply-adds:

    |C - A @ B| <= K * eps * (|A| @ |B|)        eps = 2^-23, float32's machine epsilon

(the rounding error of such a sum is at most gamma_K = K u / (1 - K u) times |A| @ |B|, u = eps / 2, so the
bound holds with a factor of about 2 to spare; a K = 0 product must be exactly 0). The TF32 tensor-core step
gets (2^-9 + 2 K eps) instead: its inputs are rounded to 10-bit mantissas first. The float4 kernels get
N and K rounded up to multiples of 4 (what they require) and must refuse the rest, and unaligned views,
with a ValueError before anything is launched. The launch table is checked against the kernels
themselves: threads per block, static shared memory.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from rawcuda import DeviceBuffer, ops
from rawcuda.core.context import default_context
from rawcuda.ops import sgemm

pytestmark = pytest.mark.gpu

NAN = np.float32(np.nan)
EPS32 = float(np.finfo(np.float32).eps)
TINY = 1e-30  # so that an exact 0 == 0 passes a bound of 0
SHAPES = [  # (M, N, K): none a multiple of a tile but the last two, which are the benchmark's kind
    (1, 1, 1),
    (17, 33, 9),
    (129, 65, 257),
    (255, 511, 130),
    (3, 5, 0),
    (1024, 1024, 1024),
    (4096, 64, 4096),  # tall and skinny
]
NAMES = list(sgemm.KERNELS)


def poisoned(shape: tuple[int, ...]) -> DeviceBuffer:
    buf = DeviceBuffer.empty(shape, np.float32)
    buf.fill(NAN)
    return buf


def runnable(kernel: sgemm.SgemmKernel, m: int, n: int, k: int) -> tuple[int, int, int]:
    """The shape a kernel is tested at: float4 kernels need N and K multiples of 4."""
    if kernel.vector:
        n, k = -(-n // sgemm.VECTOR_FLOATS) * sgemm.VECTOR_FLOATS, -(-k // sgemm.VECTOR_FLOATS) * sgemm.VECTOR_FLOATS
    return m, n, k


@functools.cache
def problem(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random A, B, the float64 product and |A| @ |B|, made once per shape (the large references cost)."""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a, b, a64 @ b64, np.abs(a64) @ np.abs(b64)


def check(name: str, m: int, n: int, k: int) -> None:
    a, b, expected, magnitude = problem(m, n, k)
    bound = sgemm.KERNELS[name].error_bound(k) * magnitude + TINY
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
        ops.matmul(dc, da, db, kernel=name)
        got = dc.to_array()
    error = np.abs(got - expected)
    bad = ~(error <= bound)  # NaN (an element never written) counts as bad
    assert not bad.any(), (
        f"{name} {m}x{n}x{k}: {int(bad.sum())} of {bad.size} elements off, first at "
        f"{tuple(np.argwhere(bad)[0])}: got {got[bad][0]!r}, expected {expected[bad][0]!r}"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("name", NAMES)
def test_kernel_matches_numpy(name: str, shape: tuple[int, int, int]) -> None:
    check(name, *runnable(sgemm.KERNELS[name], *shape))


@functools.cache
def integer_problem(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Small integers: every product and sum is exact in float32, so the result must equal numpy's."""
    rng = np.random.default_rng()
    a, b = rng.integers(-3, 4, (m, k)).astype(np.float32), rng.integers(-3, 4, (k, n)).astype(np.float32)
    return a, b, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_walks_more_row_tiles_than_grid_y(name: str) -> None:
    # One row tile more than gridDim.y (65535) covers: the blocks of the first grid row compute two tiles.
    spec = sgemm.KERNELS[name]
    m, n, k = sgemm.MAX_GRID_Y * spec.tile[0] + 1, 4, 4
    a, b, expected = integer_problem(m, n, k)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, poisoned((m, n)) as dc:
        assert spec.grid(m, n)[1] == sgemm.MAX_GRID_Y
        ops.matmul(dc, da, db, kernel=name)
        np.testing.assert_array_equal(dc.to_array(), expected)


@pytest.mark.parametrize("name", [k.name for k in sgemm.KERNELS.values() if k.vector])
@pytest.mark.parametrize(("n", "k", "offset"), [(33, 8, 0), (8, 9, 0), (8, 8, 1)], ids=["odd-N", "odd-K", "view"])
def test_float4_kernels_refuse_what_they_cannot_take(name: str, n: int, k: int, offset: int) -> None:
    m = 5
    with DeviceBuffer.zeros(m * k + offset) as wa, DeviceBuffer.zeros((k, n)) as db, poisoned((m, n)) as dc:
        a = wa.view(offset, (m, k))  # offset 1: 4 bytes past an aligned start
        with pytest.raises(ValueError, match=rf"{name} cannot compute this product: {name} moves float4s"):
            ops.matmul(dc, a, db, kernel=name)
        assert np.isnan(dc.to_array()).all(), "nothing was launched"


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_ops_matmul_takes_any_view(rng: np.random.Generator, offset: int) -> None:
    # Unaligned views send ops.matmul to MATMUL_ANY_KERNEL; aligned ones with N, K multiples of 4 to MATMUL_KERNEL.
    # Both are fp32 kernels: the fp32 bound.
    m, n, k = 130, 68, 36
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    pad = np.full(offset, NAN, np.float32)
    with (
        DeviceBuffer.from_array(np.concatenate([pad, a.ravel()])) as wa,
        DeviceBuffer.from_array(np.concatenate([pad, b.ravel()])) as wb,
        poisoned((m * n + offset,)) as wc,
    ):
        va, vb, vc = wa.view(offset, (m, k)), wb.view(offset, (k, n)), wc.view(offset, (m, n))
        expected_kernel = ops.MATMUL_KERNEL if offset == 0 else ops.MATMUL_ANY_KERNEL
        assert ops.matmul_kernel(vc, va, vb).name == expected_kernel
        ops.matmul(vc, va, vb)
        got, before = vc.to_array(), wc.to_array()[:offset]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.all(np.abs(got - a64 @ b64) <= k * EPS32 * (np.abs(a64) @ np.abs(b64)) + TINY)
    assert np.isnan(before).all(), "nothing written before the view"


def test_unknown_kernel_is_refused() -> None:
    known = r"rawcuda\.ops\.sgemm\.KERNELS has sgemm_01_naive"
    with DeviceBuffer.zeros((4, 4)) as x, pytest.raises(ValueError, match=rf"no SGEMM kernel 'sgemm_99'; {known}"):
        ops.matmul(x, x, x, kernel="sgemm_99")


@pytest.mark.parametrize("name", NAMES)
def test_the_table_agrees_with_the_kernel(name: str) -> None:
    spec = sgemm.KERNELS[name]
    fn = ops.kernel(sgemm.STEM, name, default_context())
    assert fn.max_threads_per_block >= spec.threads, "__launch_bounds__ admits the table's block"
    assert fn.shared_size_bytes == spec.shared_bytes, "the table's shared memory is the kernel's"
    assert fn.max_active_blocks_per_sm(spec.threads) >= 1, "the registers of one block fit on an SM"
