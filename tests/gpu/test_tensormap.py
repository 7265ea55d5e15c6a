"""TMA on the H200: a TensorMap's descriptor, passed as a __grid_constant__ parameter, copies every tile exactly.

kernels/tma_copy.cu asks the Tensor Memory Accelerator for 32 x 32 tiles of a float matrix through the map and
writes them out; the output, poisoned first, must equal the fresh random matrix everywhere -- edge tiles
included, where the map's zero fill lands in shared memory but nothing outside the matrix is written.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.core.context import default_context
from rawcuda.extras.tensormap import TensorMap

pytestmark = pytest.mark.gpu

TILE = 32  # TILE_ROWS = TILE_COLS in kernels/tma_copy.cu
THREADS = 256
WARP = 32  # BOTH_THREADS in kernels/tma_copy.cu


@pytest.fixture(scope="module")
def tile_copy() -> rawcuda.Function:
    if default_context().device.compute_capability < (9, 0):
        pytest.skip("tensor maps need compute capability 9.0")
    return Module(rawcuda.kernels.ptx_path("tma_copy")).function("tma_tile_copy")


@pytest.mark.parametrize(("rows", "cols"), [(256, 256), (1000, 200), (33, 36)])
def test_every_tile_arrives_through_the_tensor_map(tile_copy: rawcuda.Function, rows: int, cols: int) -> None:
    host = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((rows, cols))
    out.fill(np.float32(np.nan))
    # Columns a multiple of 4 floats: the row stride must be a multiple of 16 bytes.
    tmap = TensorMap(src, box=(TILE, TILE))
    grid = (-(-cols // TILE), -(-rows // TILE))
    tile_copy.launch(grid, THREADS, tmap.descriptor, out, rows, cols)
    np.testing.assert_array_equal(out.to_array(), host)


@pytest.fixture(scope="module")
def copies(tile_copy: rawcuda.Function) -> Module:
    return tile_copy.module


@pytest.mark.parametrize(("rows", "cols"), [(256, 256), (1000, 200), (33, 36)])
def test_a_tile_copied_in_and_out_through_the_tma_lands_whole_and_nothing_outside(
    copies: Module, rows: int, cols: int
) -> None:
    host = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((rows, cols))
    out.fill(np.float32(np.nan))
    grid = (-(-cols // TILE), -(-rows // TILE))
    both = copies.function("tma_tile_copy_both")
    both.launch(grid, WARP, TensorMap(src, box=(TILE, TILE)).descriptor, TensorMap(out, box=(TILE, TILE)).descriptor)
    np.testing.assert_array_equal(out.to_array(), host)
    # The plain copy it is measured against (tutorials/15b_tma.py), checked the same way.
    out.fill(np.float32(np.nan))
    copies.function("tile_copy_plain").launch(grid, THREADS, src, out, rows, cols)
    np.testing.assert_array_equal(out.to_array(), host)


def test_a_store_through_the_tma_writes_no_byte_past_its_tensor(copies: Module) -> None:
    # The output's tensor map covers the first `rows` rows of a taller buffer: the rows below must stay poisoned.
    rows, cols, spare = 40, 36, 8
    host = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((rows + spare, cols))
    out.fill(np.float32(np.nan))
    view = out[:rows]  # the first rows: a view, so the map's tensor ends where the spare rows begin
    grid = (-(-cols // TILE), -(-rows // TILE))
    both = copies.function("tma_tile_copy_both")
    both.launch(grid, WARP, TensorMap(src, box=(TILE, TILE)).descriptor, TensorMap(view, box=(TILE, TILE)).descriptor)
    got = out.to_array()
    np.testing.assert_array_equal(got[:rows], host)
    assert np.isnan(got[rows:]).all()


def test_rows_the_tma_cannot_stride_are_refused_before_the_driver(tile_copy: rawcuda.Function) -> None:
    src = DeviceBuffer.empty((64, 30))  # rows of 120 bytes: not a multiple of 16
    with pytest.raises(ValueError, match=r"strides\[0\] = 120 bytes must be a multiple of 16"):
        TensorMap(src, box=(8, 8))
