"""Function on a real GPU: launches checked before cuLaunchKernel, large dynamic shared memory, cached packs, bind().

Bad arguments and bad configurations are refused before the launch (nothing runs); a kernel may get more
than the 48 KiB default of dynamic shared memory; repeated launches reuse the packed argument block until a
close invalidates it; a bound launch repeats, updates and re-checks after a close.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.core.context import default_context
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.testing import assert_device_equal
from tests.helpers import BLOCK, NAN32, grid_for

pytestmark = pytest.mark.gpu

MIB = 1 << 20


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("c", "a", "b"), ArgumentError, "takes 4 argument"),
        (("c", "a", "b", 10, 11), ArgumentError, "takes 4 argument"),
        (("c", "host", "b", 10), ArgumentError, "host numpy array"),
        (("c", "a", "b", 1.5), ArgumentError, "float"),
        (("c", "a", "b", np.int32(10)), ArgumentError, "wrong width"),
        (("c", "a", "b", -(1 << 64)), ArgumentError, "does not fit"),
        (("closed", "a", "b", 10), rawcuda.ClosedError, "closed"),
    ],
)
def test_bad_launch_arguments_are_caught_before_the_launch(
    vector_add: rawcuda.Function, args: tuple, error: type, match: str
) -> None:
    n = 10
    bufs = {
        "a": DeviceBuffer.zeros(n),
        "b": DeviceBuffer.zeros(n),
        "c": DeviceBuffer.zeros(n),
        "closed": DeviceBuffer.zeros(n),
        "host": np.zeros(n, np.float32),
    }
    bufs["closed"].close()
    bufs["c"].fill(NAN32)
    real = tuple(bufs.get(a, a) if isinstance(a, str) else a for a in args)
    with pytest.raises(error, match=match):
        vector_add.launch(1, BLOCK, *real)
    default_context().synchronize()
    assert np.isnan(bufs["c"].to_array()).all()  # nothing ran


def test_bad_launch_configurations(vector_add: rawcuda.Function) -> None:
    buf = DeviceBuffer.zeros(4)
    with pytest.raises(ValueError, match="exceeds the device limit 1024"):
        vector_add.launch(1, 2048, buf, buf, buf, 4)
    with pytest.raises(ValueError, match="2048 threads is too large"):
        vector_add.launch(1, (32, 32, 2), buf, buf, buf, 4)
    with pytest.raises(ValueError, match=">= 1"):
        vector_add.launch(0, BLOCK, buf, buf, buf, 4)
    with pytest.raises(TypeError, match="tuple of 1 to 3"):
        vector_add.launch(1.5, BLOCK, buf, buf, buf, 4)
    vector_add.launch(1, BLOCK, buf, buf, buf, 4)
    with pytest.raises(TypeError, match="tuple of 1 to 3"):
        vector_add.launch(1.5, BLOCK, buf, buf, buf, 4)  # still refused once grid=1 is cached
    # Whole numbers of any type mean the same launch (a value-keyed cache could not tell them apart).
    vector_add.launch(np.int64(1), (np.int32(BLOCK),), buf, buf, buf, 4)
    vector_add.launch(1.0, float(BLOCK), buf, buf, buf, 4, shared_mem=0.0)
    with pytest.raises(ValueError, match="exceed"):
        vector_add.launch(1, BLOCK, buf, buf, buf, 4, shared_mem=10 * MIB)
    buf.close()


def test_reduction_with_more_than_48k_dynamic_shared_memory(rng: np.random.Generator) -> None:
    fn = Module(rawcuda.kernels.ptx_path("reduce")).function("warp_reduce_sum")
    n = 1_000_003
    x = rng.standard_normal(n, dtype=np.float32)
    dx, partial, total = DeviceBuffer.from_array(x), DeviceBuffer.empty(1), DeviceBuffer.empty(1)
    partial.fill(NAN32)
    shared = 64 * 1024  # more than the reduction needs, and more than the 48 KiB default limit
    fn.launch(1, BLOCK, partial, dx, n, shared_mem=shared)
    expected = x.astype(np.float64).sum()
    assert abs(float(partial.to_array()[0]) - expected) <= 1e-4 * np.abs(x).sum()
    total.close()


def test_repeated_launches_reuse_the_packed_block(vector_add: rawcuda.Function) -> None:
    buf = DeviceBuffer.zeros(8)
    vector_add.launch(1, 32, buf, buf, buf, 8)
    packed = vector_add._packed
    vector_add.launch(1, 32, buf, buf, buf, 8)
    assert vector_add._packed is packed and packed.key  # same objects: the same block, unchanged
    other = DeviceBuffer.zeros(8)
    vector_add.launch(1, 32, other, buf, buf, 8)
    assert vector_add._packed is not packed and packed.array[0] == ctypes.addressof(packed.slots[0])  # old one intact
    buf.close()
    with pytest.raises(rawcuda.ClosedError):
        vector_add.launch(1, 32, buf, other, other, 8)  # a close invalidates every cached pack
    other.close()


def test_bound_launch_repeats_and_rechecks_after_a_close(
    vector_add: rawcuda.Function, rng: np.random.Generator
) -> None:
    n = 4099
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(n)
    dc.fill(NAN32)
    launch = vector_add.bind(grid_for(n), BLOCK, dc, da, db, n)
    launch()
    assert_device_equal(dc, a + b)
    launch.update(dc, dc, db, n)  # c = c + b
    launch()
    launch()
    assert_device_equal(dc, a + b + b + b)  # (left to right, in float32, as the kernel adds)
    with pytest.raises(ArgumentError, match="takes 4 argument"):
        launch.update(dc, da)
    launch.update(dc, da, db, n)
    db.close()
    with pytest.raises(rawcuda.ClosedError):
        launch()  # re-checked after the close: never a launch on freed memory
    da.close()
    dc.close()


def test_a_list_grid_or_block_launches_like_a_tuple(vector_add: rawcuda.Function) -> None:
    # _dims accepts lists, but the launch cache keyed on them raised "TypeError: unhashable type: 'list'".
    rng = np.random.default_rng()
    a = rng.standard_normal(1000, dtype=np.float32)
    b = rng.standard_normal(1000, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(1000) as dc:
        for grid, block in (([4], [256]), ([4, 1], (256, 1, 1)), (4, [256, 1, 1])):
            dc.fill(np.float32(np.nan))
            vector_add.launch(grid, block, dc, da, db, 1000)
            assert (dc.to_array() == a + b).all()
            dc.fill(np.float32(np.nan))
            vector_add.bind(grid, block, dc, da, db, 1000)()
            assert (dc.to_array() == a + b).all()
