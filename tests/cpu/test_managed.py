"""ManagedBuffer without a GPU: the host-access guard for devices without concurrent managed access.

An H200 has CONCURRENT_MANAGED_ACCESS, so the GPU tests never take the other path. Here a ManagedBuffer is
built around ordinary numpy memory with a stand-in context and device, so both paths run on the CPU: the
guard must synchronize the context before every host view on a device without concurrent access, and
never on one with it.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda.extras import managed
from rawcuda.extras.managed import ManagedBuffer
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemLocationType


class StandInDevice:
    def __init__(self, concurrent: int) -> None:
        self.concurrent = concurrent
        self.asked: list[DeviceAttribute] = []

    def attribute(self, which: DeviceAttribute) -> int:
        self.asked.append(which)
        return self.concurrent if which == DeviceAttribute.CONCURRENT_MANAGED_ACCESS else 0


class StandInContext:
    def __init__(self, concurrent: int) -> None:
        self.device = StandInDevice(concurrent)
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1

    forked = False  # (not inherited through fork())


def stand_in_buffer(concurrent: int, n: int = 8) -> tuple[ManagedBuffer, StandInContext, np.ndarray]:
    """A ManagedBuffer over host memory, with a stand-in context (no driver involved)."""
    memory = np.arange(n, dtype=np.float32)
    ctx = StandInContext(concurrent)
    buf = ManagedBuffer.__new__(ManagedBuffer)
    buf.context = ctx  # type: ignore[assignment]
    buf._closed = False
    buf.shape, buf.dtype, buf.nbytes = (n,), memory.dtype, memory.nbytes
    buf._array = memory
    buf._base, buf._ptr = None, memory.ctypes.data  # what repr() reads
    return buf, ctx, memory


def test_without_concurrent_access_every_host_view_waits_for_the_gpu() -> None:
    buf, ctx, memory = stand_in_buffer(concurrent=0)
    assert buf.array is memory and ctx.synchronized == 1
    buf.array[0] = 5.0  # a second access: synchronized again (a kernel may have been launched in between)
    assert ctx.synchronized == 2 and memory[0] == 5.0
    assert buf.concurrent_access is False
    assert ctx.device.asked == [DeviceAttribute.CONCURRENT_MANAGED_ACCESS]  # asked once, then remembered


def test_with_concurrent_access_the_view_is_handed_out_at_once() -> None:
    buf, ctx, memory = stand_in_buffer(concurrent=1)
    for _ in range(3):
        assert buf.array is memory
    assert ctx.synchronized == 0 and buf.concurrent_access is True
    assert ctx.device.asked == [DeviceAttribute.CONCURRENT_MANAGED_ACCESS]


def test_empty_and_closed_buffers_never_synchronize() -> None:
    buf, ctx, _ = stand_in_buffer(concurrent=0, n=0)
    assert buf.array.shape == (0,) and ctx.synchronized == 0
    buf, ctx, _ = stand_in_buffer(concurrent=0)
    buf._closed = True
    with pytest.raises(rawcuda.ClosedError):
        buf.array  # noqa: B018
    assert ctx.synchronized == 0


def test_location_names_the_host_or_a_device() -> None:
    host = managed.location("host")
    assert host.type == MemLocationType.HOST
    dev = managed.location(3)
    assert dev.type == MemLocationType.DEVICE and dev.id == 3
    with pytest.raises(ValueError, match="'host'"):
        managed.location("gpu")


def test_docstring_keeps_the_correction_of_the_seed() -> None:
    doc = managed.__doc__ or ""
    assert "cuMemAllocManaged" in doc and "not switched on by a context flag" in doc and "SCHED_AUTO" in doc
    assert "CONCURRENT_MANAGED_ACCESS" in doc


@pytest.mark.parametrize(
    ("where", "error"), [(0.5, TypeError), (True, TypeError), (-1, ValueError), (2**32, ValueError)]
)
def test_location_refuses_what_is_not_an_ordinal(where: object, error: type[Exception]) -> None:
    # int(0.5) is 0, and the struct's C int field would mask 2**32 to device 0: prefetch(0.5) went to GPU 0.
    with pytest.raises(error, match="ordinal"):
        managed.location(where)  # type: ignore[arg-type]
    assert managed.location(np.int64(1)).id == 1
