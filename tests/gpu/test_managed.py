"""ManagedBuffer (unified memory) on a real GPU: host writes, kernels, prefetch, advice, the host-access guard.

Allocations stay small on purpose: asking for more managed memory than the card has free can hang the GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from ctypes import byref

import numpy as np
import pytest

import rawcuda
from rawcuda import Device, DeviceBuffer, ManagedBuffer, ops
from rawcuda.checked import cu
from rawcuda.core.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute, PointerAttribute
from rawcuda.ffi.constants import MemAdvise
from tests.helpers import BLOCK, grid_for

pytestmark = pytest.mark.gpu

N = 65_537  # not a multiple of the block size or of a page of floats
NAN32 = np.float32(np.nan)


@pytest.fixture
def three() -> Iterator[tuple[ManagedBuffer, ManagedBuffer, ManagedBuffer]]:
    bufs = (ManagedBuffer(N), ManagedBuffer(N), ManagedBuffer(N))
    yield bufs
    for buf in bufs:
        buf.close()


def fill_inputs(a: ManagedBuffer, b: ManagedBuffer, c: ManagedBuffer, rng: np.random.Generator) -> np.ndarray:
    """Fresh random inputs written by the host, a poisoned output; returns the expected sum."""
    a.array[:] = rng.standard_normal(N, dtype=np.float32)
    b.array[:] = rng.standard_normal(N, dtype=np.float32)
    c.array[:] = NAN32
    return a.array + b.array


def test_host_writes_then_kernel_then_host_reads(three: tuple[ManagedBuffer, ...], rng: np.random.Generator) -> None:
    a, b, c = three
    expected = fill_inputs(a, b, c, rng)
    ops.vector_add(c, a, b)  # the pages are on the host: the kernel's first touch migrates them
    default_context().synchronize()
    np.testing.assert_array_equal(c.array, expected)


def test_prefetch_both_ways_keeps_contents(three: tuple[ManagedBuffer, ...], rng: np.random.Generator) -> None:
    a, b, c = three
    expected = fill_inputs(a, b, c, rng)
    dev = Device(0)
    for buf in three:
        buf.prefetch(dev)
    ops.vector_add(c, a, b)
    c.prefetch("host")
    default_context().synchronize()
    np.testing.assert_array_equal(c.array, expected)
    with rawcuda.Stream() as stream:  # on a stream too: ordered with the kernel on that stream
        c.array[:] = NAN32
        for buf in three:
            buf.prefetch(dev, stream=stream)
        ops.vector_add(c, a, b, stream=stream)
        stream.synchronize()
    np.testing.assert_array_equal(c.array, expected)


@pytest.mark.parametrize(
    "advice", [MemAdvise.SET_READ_MOSTLY, MemAdvise.SET_PREFERRED_LOCATION, MemAdvise.SET_ACCESSED_BY]
)
def test_advice_changes_placement_not_results(
    three: tuple[ManagedBuffer, ...], rng: np.random.Generator, advice: MemAdvise
) -> None:
    a, b, c = three
    for buf in (a, b):
        buf.advise(advice, Device(0))
    expected = fill_inputs(a, b, c, rng)
    for _ in range(2):  # twice: the second run finds the pages where the advice put them
        c.array[:] = NAN32
        ops.vector_add(c, a, b)
        default_context().synchronize()
        np.testing.assert_array_equal(c.array, expected)
    b.advise(MemAdvise.SET_PREFERRED_LOCATION, "host")
    b.array[:] = rng.standard_normal(N, dtype=np.float32)  # host writes after advice: the next kernel sees them
    expected = a.array + b.array
    ops.vector_add(c, a, b)
    default_context().synchronize()
    np.testing.assert_array_equal(c.array, expected)


def test_concurrent_access_matches_the_device_attribute() -> None:
    with ManagedBuffer(16) as buf:
        assert buf.concurrent_access == bool(Device(0).attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS))


def test_without_concurrent_access_array_synchronizes_first(
    three: tuple[ManagedBuffer, ...], rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = three
    expected = fill_inputs(a, b, c, rng)
    c._concurrent_access = False  # behave as on a device without CONCURRENT_MANAGED_ACCESS
    calls = []
    real = c.context.synchronize

    def counting_synchronize() -> None:
        calls.append(1)
        real()

    monkeypatch.setattr(c.context, "synchronize", counting_synchronize)
    ops.vector_add(c, a, b)
    result = c.array  # no explicit synchronize: the guard must have waited for the kernel
    assert calls == [1]
    np.testing.assert_array_equal(result, expected)


def test_pointer_attribute_tells_managed_from_device_memory() -> None:
    def is_managed(ptr: int) -> bool:
        value = ctypes.c_uint64(0)  # the driver writes a small boolean into the low bytes
        default_context().activate()
        cu.cuPointerGetAttribute(byref(value), PointerAttribute.IS_MANAGED, ptr)
        return value.value != 0

    with ManagedBuffer(1024) as managed, DeviceBuffer(1024) as device:
        assert is_managed(managed.ptr) and not is_managed(device.ptr)


def test_empty_managed_buffer_has_an_empty_view() -> None:
    with ManagedBuffer(0) as buf:
        assert buf.array.shape == (0,) and buf.ptr == 0


def test_managed_buffer_host_and_kernel(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n = 10_007
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)
    a.array[:] = rng.standard_normal(n, dtype=np.float32)
    b.array[:] = rng.standard_normal(n, dtype=np.float32)
    c.array[:] = NAN32
    a.prefetch(Device(0))
    vector_add.launch(grid_for(n), BLOCK, c, a, b, n)
    default_context().synchronize()
    np.testing.assert_array_equal(c.array, a.array + b.array)
    for m in (a, b, c):
        m.close()
