"""rawcuda.ops' size limits and launch grids, on the CPU (no driver needed).

Every shipped kernel takes its sizes as size_t, so what an entry point must still check is the grid: where
its kernel loops over tiles or elements, the grid is capped at the device limits (65535 in y, 2^31 - 1 in
x) and the loop covers the rest; where it does not, the size is refused with a ValueError naming the limit,
before anything is launched. Both are shown here on stand-in buffers -- a shape and a dtype, which is all
ops reads before it launches -- of shapes far past any GPU's memory, with the launch itself recorded
instead of made. On a GPU, shapes past 2^31 elements for real: tests/gpu/test_extents.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rawcuda import ops
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.ops import sgemm

SMS = 132  # the stand-in device's multiprocessor count (an H200's)
BIG = 1 << 40  # elements: far past any GPU, and past every 32-bit index
ALIGNED = 1 << 32  # a stand-in device address on a 256-byte boundary, like every cuMemAlloc result
SPACING = 1 << 48  # bytes between two stand-in buffers: more than BIG floats


def stand_in(shape: tuple[int, ...], context: Any = None, address: int = ALIGNED) -> DeviceBuffer:
    buf = DeviceBuffer.__new__(DeviceBuffer)
    buf.shape, buf.dtype = shape, np.dtype(np.float32)
    buf.context = context
    buf._ptr, buf._closed = address, False  # what DeviceBuffer.ptr reads (ops.matmul picks a kernel by it)
    buf._base = None  # what its repr reads, in the messages of refused calls
    buf.nbytes = math.prod(shape) * buf.dtype.itemsize  # with ptr, what ops' overlap check reads
    return buf


class RecordedKernel:
    """Stands in for a Function: its launch is recorded, with the scalar arguments."""

    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def launch(self, grid: Any, block: Any, *args: Any, **kwargs: Any) -> None:
        self.recorder.launches.append((self.name, grid, block, [a for a in args if isinstance(a, int)]))


class Recorder:
    """Stands in for ops.kernel: records each launch's kernel, grid, block and scalar arguments."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, Any, Any, list[int]]] = []
        self.functions: dict[str, RecordedKernel] = {}
        self.context = SimpleNamespace(device=SimpleNamespace(multiprocessor_count=SMS), check_usable=lambda: None)

    def kernel(self, stem: str, name: str, context: Any) -> Any:
        # One per name, kept here as ops.kernel keeps its Functions in the context's cache (ops remembers them
        # weakly).
        if name not in self.functions:
            self.functions[name] = RecordedKernel(self, name)
        return self.functions[name]

    def buffers(self, *shapes: tuple[int, ...], address: int = ALIGNED) -> list[DeviceBuffer]:
        # Each its own address range (ops refuses an output that overlaps an input), as far apart as the
        # largest stand-in (BIG floats), so each keeps the alignment of ``address``.
        return [stand_in(shape, self.context, address + i * SPACING) for i, shape in enumerate(shapes)]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(ops, "kernel", rec.kernel)
    return rec


def within_device_limits(grid: Any) -> bool:
    x, y = (grid, 1) if isinstance(grid, int) else grid
    return 1 <= x <= ops.MAX_GRID_X and 1 <= y <= ops.MAX_GRID_Y


@pytest.mark.parametrize("shape", [(BIG, 1), (1, BIG), (1 << 21, 1 << 21), (3, 5)])
def test_bias_relu_caps_both_grid_dimensions_and_passes_the_exact_shape(
    recorder: Recorder, shape: tuple[int, int]
) -> None:
    out, x, bias = recorder.buffers(shape, shape, (shape[1],))
    ops.bias_relu(out, x, bias)
    [(name, grid, block, sizes)] = recorder.launches
    assert name == "bias_relu" and block == ops.ELEMENTWISE_THREADS and sizes == list(shape)
    assert within_device_limits(grid)


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("shape", [(BIG, 1), (1 << 31, 2), (65535 * 32 + 1, 3), (1, 1 << 31)])
def test_transpose_caps_the_grid_rows_it_loops_over(recorder: Recorder, shape: tuple[int, int], padded: bool) -> None:
    out, x = recorder.buffers(shape[::-1], shape)
    ops.transpose(out, x, padded=padded)
    [(_, grid, _, sizes)] = recorder.launches
    assert sizes == list(shape) and within_device_limits(grid)
    assert grid[0] == -(-shape[1] // ops.TRANSPOSE_TILE)  # x is not looped over: every column tile has its block


MATMUL_SHAPES = [(BIG, 1, 1), (65535 * 128 + 1, 3, 2), (1, 1 << 31, 1), (1, 1, 1 << 31), (BIG, 4, 4), (4, 1 << 33, 8)]


@pytest.mark.parametrize(("m", "n", "k"), MATMUL_SHAPES)
def test_matmul_caps_the_grid_rows_it_loops_over(recorder: Recorder, m: int, n: int, k: int) -> None:
    c, a, b = recorder.buffers((m, n), (m, k), (k, n))
    ops.matmul(c, a, b)
    [(name, grid, block, sizes)] = recorder.launches
    spec = sgemm.KERNELS[name]
    assert sizes == [m, n, k] and block == spec.block and within_device_limits(grid)
    assert grid == (-(-n // spec.tile[1]), min(-(-m // spec.tile[0]), ops.MAX_GRID_Y))


@pytest.mark.parametrize(
    ("n", "k", "address", "chosen"),
    [
        (8, 12, ALIGNED, ops.MATMUL_KERNEL),  # float4 access works: the fast kernel
        (9, 12, ALIGNED, ops.MATMUL_ANY_KERNEL),  # rows of B and C not 16-byte aligned
        (8, 13, ALIGNED, ops.MATMUL_ANY_KERNEL),  # rows of A not aligned
        (8, 12, ALIGNED + 4, ops.MATMUL_ANY_KERNEL),  # a view 4 bytes in
    ],
)
def test_matmul_takes_float4_kernels_only_where_they_work(
    recorder: Recorder, n: int, k: int, address: int, chosen: str
) -> None:
    m = 5
    c, a, b = recorder.buffers((m, n), (m, k), (k, n), address=address)
    ops.matmul(c, a, b)
    [(name, _, block, _)] = recorder.launches
    assert name == chosen and block == sgemm.KERNELS[chosen].block
    assert sgemm.KERNELS[ops.MATMUL_KERNEL].vector and not sgemm.KERNELS[ops.MATMUL_ANY_KERNEL].vector


def test_matmul_names_a_kernel_and_refuses_one_that_cannot_take_the_inputs(recorder: Recorder) -> None:
    c, a, b = recorder.buffers((5, 9), (5, 12), (12, 9))
    ops.matmul(c, a, b, kernel="sgemm_05_reg2d")
    assert recorder.launches[0][:3] == ("sgemm_05_reg2d", (1, 1), (256, 1))
    with pytest.raises(ValueError, match=r"sgemm_07_warptile cannot compute this product: .*multiples of 4; N = 9"):
        ops.matmul(c, a, b, kernel="sgemm_07_warptile")
    with pytest.raises(ValueError, match=r"no SGEMM kernel 'matmul'; rawcuda.ops.sgemm.KERNELS has sgemm_01_naive, "):
        ops.matmul(c, a, b, kernel="matmul")
    assert len(recorder.launches) == 1


def test_matmul_of_an_empty_c_launches_nothing_and_reads_no_address(recorder: Recorder) -> None:
    c, a, b = recorder.buffers((0, 9), (0, 12), (12, 9))
    for buf in (a, b, c):
        buf._closed = True  # a closed buffer's address cannot be read: an empty product must not try
    ops.matmul(c, a, b)
    ops.matmul(c, a, b, kernel="sgemm_07_warptile")
    assert not recorder.launches


ONE_DIMENSIONAL = {
    "vector_add": lambda a, b, c: ops.vector_add(c, a, b),
    "saxpy": lambda a, b, c: ops.saxpy(c, 2.0, a),
    "gelu": lambda a, b, c: ops.gelu(c, a),
}


@pytest.mark.parametrize("op", sorted(ONE_DIMENSIONAL))
def test_one_dimensional_kernels_pass_sizes_past_2_to_the_32(recorder: Recorder, op: str) -> None:
    ONE_DIMENSIONAL[op](*recorder.buffers((BIG,), (BIG,), (BIG,)))
    [(_, grid, _, sizes)] = recorder.launches
    assert sizes == [BIG] and grid == ops.WAVES * SMS


def test_matmul_refuses_more_columns_than_its_grid_covers(recorder: Recorder) -> None:
    n = ops.MATMUL_MAX_N + 1
    c, a, b = recorder.buffers((1, n), (1, 1), (1, n))
    with pytest.raises(ValueError, match=rf"matmul's N = {n} is more than {ops.MATMUL_MAX_N}: .*gridDim\.x.*split"):
        ops.matmul(c, a, b)
    assert not recorder.launches
    c, a, b = recorder.buffers((1, n - 1), (1, 1), (1, n - 1))
    ops.matmul(c, a, b)  # the limit itself is fine
    assert within_device_limits(recorder.launches[0][1])


def test_transpose_refuses_more_columns_than_its_grid_covers(recorder: Recorder) -> None:
    cols = ops.TRANSPOSE_MAX_COLS + 1
    out, x = recorder.buffers((cols, 1), (1, cols))
    with pytest.raises(ValueError, match=rf"column count = {cols} is more than {ops.TRANSPOSE_MAX_COLS}: .*gridDim"):
        ops.transpose(out, x)
    assert not recorder.launches


@pytest.mark.parametrize(("blocks", "match"), [(0, "at least 1"), (ops.MAX_GRID_X + 1, "blocks = .* is more than")])
def test_sum_partials_refuses_a_grid_it_cannot_launch(recorder: Recorder, blocks: int, match: str) -> None:
    out, x = recorder.buffers((BIG,), (BIG,))
    with pytest.raises(ValueError, match=match):
        ops.sum_partials(out, x, blocks)
    assert not recorder.launches
