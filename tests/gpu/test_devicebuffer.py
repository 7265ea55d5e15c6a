"""DeviceBuffer on a real GPU: round trips, fill and memset, checked copies, views, async copies, sharing.

Copies are checked (dtype, shape, layout) before a byte moves; a view at an offset is what a kernel sees;
an async copy keeps its host array alive; ``__cuda_array_interface__`` lets torch and CuPy share the memory.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Stream
from rawcuda.ffi.constants import StreamFlag
from rawcuda.testing import assert_device_equal
from tests.helpers import BLOCK, NAN32, grid_for, run_vector_add

pytestmark = pytest.mark.gpu

MIB = 1 << 20


@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 1, 1_000_003])
def test_vector_add_with_classes(vector_add: rawcuda.Function, rng: np.random.Generator, n: int) -> None:
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_array_equal(run_vector_add(vector_add, a, b), a + b)
    with Stream(flags=StreamFlag.NON_BLOCKING) as s:
        np.testing.assert_array_equal(run_vector_add(vector_add, a, b, stream=s), a + b)


@pytest.mark.no_leaks  # (rawcuda's pytest plugin: both buffers must be closed by the end)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int32, np.int64, np.complex64])
def test_round_trip_fill_and_memset(rng: np.random.Generator, dtype: type) -> None:
    host = (rng.standard_normal((37, 11)) * 50).astype(dtype)
    buf = DeviceBuffer.from_array(host)
    assert_device_equal(buf, host)
    value = np.array(3, dtype)
    buf.fill(value)
    assert_device_equal(buf, np.full(host.shape, value))
    buf.memset(0)
    assert_device_equal(buf, 0)  # a scalar: every element, in the buffer's dtype
    z = DeviceBuffer.zeros(5, dtype)
    assert_device_equal(z, np.zeros(5, dtype))
    buf.close()
    z.close()


@pytest.mark.no_leaks
def test_a_0d_array_round_trips(rng: np.random.Generator) -> None:
    value = np.float32(rng.standard_normal())  # a numpy scalar: from_array makes a 0-d buffer of it
    with DeviceBuffer.from_array(value) as buf:
        assert buf.shape == ()
        out = buf.to_array()
        assert out.shape == () and out.dtype == np.float32 and out == value
        again = np.array(rng.standard_normal(), np.float32)  # copy_from of a 0-d array
        buf.copy_from(again)
        assert buf.to_array() == again
        with pytest.raises(ValueError, match=r"shape \(1,\)"):
            buf.copy_from(np.zeros(1, np.float32))  # a 1-element 1-d array is still another shape


def test_copies_are_checked_before_moving_a_byte(rng: np.random.Generator) -> None:
    buf = DeviceBuffer.from_array(rng.standard_normal(10, dtype=np.float32))
    with pytest.raises(TypeError, match="holds float32"):
        buf.copy_from(np.zeros(10, np.float64))
    with pytest.raises(ValueError, match=r"shape \(11,\)"):
        buf.copy_from(np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="C-contiguous, writeable"):
        buf.copy_to(np.zeros(20, np.float32)[::2])
    with pytest.raises(TypeError, match="cannot fill"):
        DeviceBuffer.empty(3, np.int32).fill(1.5)
    with pytest.raises(ValueError, match="extents must be >= 0"):
        DeviceBuffer.empty(-1)
    buf.close()


def test_views_at_an_offset(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n, start, length = 1000, 100, 300
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(n)
    dc.fill(NAN32)
    part = dc[start : start + length]
    assert part.shape == (length,) and part.ptr == dc.ptr + start * 4
    vector_add.launch(grid_for(length), BLOCK, part, da.view(start), db.view(start, length), length)
    out = dc.to_array()
    np.testing.assert_array_equal(out[start : start + length], (a + b)[start : start + length])
    assert np.isnan(out[:start]).all() and np.isnan(out[start + length :]).all()
    with pytest.raises(ValueError, match="needs"):
        dc.view(900, 200)
    dc.close()
    assert part.closed
    with pytest.raises(rawcuda.ClosedError):
        vector_add.launch(1, 1, part, da, db, 1)
    da.close()
    db.close()


def test_async_copies_keep_the_host_array_alive(rng: np.random.Generator) -> None:
    n = 4 * MIB
    with Stream() as s:
        buf = DeviceBuffer.empty(n)
        host = rng.standard_normal(n, dtype=np.float32)
        expected = host.copy()
        buf.copy_from(host, stream=s)
        del host  # only the stream's hold keeps it alive now
        gc.collect()
        np.testing.assert_array_equal(buf.to_array(stream=s), expected)
        iface = buf.__cuda_array_interface__
        assert iface["stream"] == s.handle and iface["data"] == (buf.ptr, False) and iface["version"] == 3
        buf.close()


def test_torch_and_cupy_share_rawcuda_memory(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    host = rng.standard_normal(1000, dtype=np.float32)
    buf = DeviceBuffer.from_array(host)
    t = torch.as_tensor(buf, device="cuda")
    c = cupy.asarray(buf)
    assert t.data_ptr() == buf.ptr == c.data.ptr
    t.mul_(2.0)  # write through torch ...
    torch.cuda.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(c), host * 2)  # ... read through CuPy
    c += 1.0  # write through CuPy ...
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(buf.to_array(), host * 2 + 1)  # ... read through rawcuda
    del t, c
    buf.close()
