"""Extras: virtual memory management -- a device buffer that grows *without copying* and without moving.

``cuMemAlloc`` hands out an address and the memory behind it together. To grow such a buffer you must
allocate a bigger one, copy, and free the old one: the copy costs time and, for a moment, twice the
memory, and every pointer to the old address (in a kernel argument, a CUDA graph, another library) is now
stale. The driver's virtual memory management API (CUDA 10.2+) separates the two things:

1. **reserve** a range of *virtual* addresses, as large as the buffer could ever become
   (``cuMemAddressReserve``). This costs no memory -- a 64 GiB reservation on a 16 GiB card is fine;
2. **create** *physical* memory in chunks (``cuMemCreate``, described by a ``CUmemAllocationProp``:
   pinned device memory on this context's device);
3. **map** each chunk at the end of what is mapped so far (``cuMemMap``);
4. **grant access**: a fresh mapping is not accessible to anyone until ``cuMemSetAccess`` says which
   devices may read and write it. Forgetting this step is the classic VMM bug: the first kernel that
   touches the range faults with an illegal address.

Growing is steps 2-4 again. The base address never changes and the old contents stay where they were.
Sizes and offsets must be multiples of the **allocation granularity** (``cuMemGetAllocationGranularity``,
2 MiB on current GPUs), so every request is rounded up to it.

Tearing down runs the other way (:meth:`GrowableBuffer.close`): wait for the GPU, ``cuMemUnmap`` each
chunk, ``cuMemRelease`` each physical handle (memory returns to the device when it is both unmapped and
released), then ``cuMemAddressFree`` the reservation -- an address range cannot be freed while something
is still mapped into it.

:attr:`GrowableBuffer.buffer` is a :class:`~rawcuda.core.devicebuffer.DeviceBuffer` *view* of the current size: it
owns nothing, so kernels, copies and ``__cuda_array_interface__`` work as with any buffer, and closing
the GrowableBuffer closes every view it handed out.
"""

from __future__ import annotations

import weakref
from ctypes import byref, c_size_t, c_uint64, c_ulonglong
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.checked.errors import NotSupportedError, RawCudaError
from rawcuda.core.closeorder import CloseOrder
from rawcuda.core.context import Context, resolve
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.elements import normalize_dtype
from rawcuda.core.guards.pending import PendingStream
from rawcuda.core.integers import whole
from rawcuda.core.kernelargs import MEMORY_VIEWS
from rawcuda.core.resource import Resource
from rawcuda.core.stream import Stream
from rawcuda.core.streamargs import as_stream
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import (
    ADDRESS_LIMIT,
    MemAccessFlag,
    MemAllocationType,
    MemGranularity,
    MemHandleType,
    MemLocationType,
)
from rawcuda.ffi.results import Result
from rawcuda.ffi.types import CUmemAccessDesc, CUmemAllocationProp, CUmemLocation
from rawcuda.protocols.loans import Loan

_NO_FLAGS = 0  # cuMemAddressReserve / cuMemCreate / cuMemMap: "flags: must be 0" (reserved for the future)


class CapacityError(RawCudaError, ValueError):
    """A GrowableBuffer was asked to grow beyond the address range it reserved."""


def round_up(nbytes: int, granularity: int) -> int:
    """The smallest multiple of ``granularity`` that holds ``nbytes``."""
    return -(-nbytes // granularity) * granularity


def _allocation_prop(device_ordinal: int) -> CUmemAllocationProp:
    """Physical memory that stays put (PINNED) on one device, not exportable to other processes."""
    prop = CUmemAllocationProp()
    prop.type = MemAllocationType.PINNED
    prop.requestedHandleTypes = MemHandleType.NONE
    prop.location = CUmemLocation(MemLocationType.DEVICE, device_ordinal)
    return prop


def allocation_granularity(context: Context | None = None, *, which: MemGranularity = MemGranularity.MINIMUM) -> int:
    """The size every VMM chunk and offset must be a multiple of, for pinned memory on the context's device.

    MINIMUM is what the driver requires; RECOMMENDED is what it prefers for performance (the same 2 MiB on
    current GPUs).
    """
    ctx = resolve(context)
    ctx.activate()
    value = c_size_t()
    prop = _allocation_prop(ctx.device.handle)
    cu.cuMemGetAllocationGranularity(byref(value), byref(prop), int(which))
    return value.value


def _teardown(base: int, reserved: int, chunks: list[tuple[int, int, int]]) -> None:
    """Unmap every chunk, release every handle, free the address range -- in that order.

    ``chunks`` is the GrowableBuffer's own list of (offset, nbytes, handle), shared (not copied) so that
    the garbage-collection fallback sees chunks mapped after it was set up.
    """
    cu.cuCtxSynchronize()  # nothing may still run on this memory: cuMemUnmap does not wait for kernels
    for offset, nbytes, _ in chunks:
        cu.cuMemUnmap(base + offset, nbytes)
    for _, _, handle in chunks:
        cu.cuMemRelease(handle)  # unmapped and released: the physical memory returns to the device
    chunks.clear()
    cu.cuMemAddressFree(base, reserved)


class _MappedView(DeviceBuffer):
    """A DeviceBuffer over memory a GrowableBuffer owns: allocates nothing, frees nothing.

    It goes through DeviceBuffer's own constructor, whose hooks (``_allocate``, ``_take_ownership`` and
    ``_new_record``) are where a buffer normally gets and owns its memory; here they borrow instead.
    It holds its GrowableBuffer, so the mapping cannot disappear under a view that is still in use.
    """

    def __init__(self, owner: GrowableBuffer, ptr: int, shape: int | tuple[int, ...], dtype: Any) -> None:
        self._borrowed_ptr = ptr
        self._owner = owner
        super().__init__(shape, dtype, owner.context)

    def _allocate(self, ctx: Context, nbytes: int) -> int:
        return self._borrowed_ptr if nbytes else 0

    def _take_ownership(self, ptr: int) -> None:
        pass  # the GrowableBuffer unmaps and frees it

    def _new_record(self) -> PendingStream:
        # The memory outlives this view (grow() makes a new one): the stream of work still pending on it is
        # the GrowableBuffer's to remember, for the __cuda_array_interface__ of every later view.
        return self._owner.pending

    def lend(self) -> Loan:
        # A loan would promise memory that the GrowableBuffer's close() unmaps whatever is still out.
        raise BufferError(
            "a GrowableBuffer's memory cannot be exported with DLPack (its close() unmaps it, whoever still holds "
            "an export): copy it into a DeviceBuffer first (rawcuda.extras.growable.copy_grow, or copy_from), or share "
            "it through __cuda_array_interface__ while the GrowableBuffer stays open"
        )

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<GrowableBuffer view {self.shape} {self.dtype} at {self._ptr:#x}{state}>"


class GrowableBuffer(Resource):
    """A 1-D device array whose address never changes while it grows, up to ``capacity_bytes_max``.

    ``GrowableBuffer(1 << 34, np.float32)`` reserves 16 GiB of addresses and maps nothing;
    ``grow(n)`` makes room for ``n`` elements; ``buffer`` is a DeviceBuffer view of those ``n``.
    """

    close_order = CloseOrder.GROWABLE_MEMORY

    def __init__(self, capacity_bytes_max: int, dtype: Any = np.float32, context: Context | None = None) -> None:
        self.dtype = normalize_dtype(dtype)
        capacity = whole(capacity_bytes_max)
        if capacity is None:
            raise TypeError(f"capacity_bytes_max is a number of bytes (an int), not {capacity_bytes_max!r}")
        if capacity < self.dtype.itemsize:
            raise ValueError(
                f"capacity_bytes_max must be at least one {self.dtype} element ({self.dtype.itemsize} bytes), "
                f"got {capacity}"
            )
        ctx = resolve(context)  # (arguments are checked before any driver call)
        device = ctx.device
        if not device.attribute(DeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED):
            raise NotSupportedError(
                Result.ERROR_NOT_SUPPORTED,
                call="GrowableBuffer",
                symbol="(checked before reserving)",
                description=f"{device!r} does not support virtual memory management",
                details=[
                    "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0 (the API needs a CUDA 10.2+ "
                    "driver, and some virtualized setups lack it): grow by copying into a bigger DeviceBuffer "
                    "instead (rawcuda.extras.growable.copy_grow)"
                ],
            )
        self._prop = _allocation_prop(device.handle)
        self.granularity = allocation_granularity(ctx)
        self.capacity_bytes = round_up(capacity, self.granularity)
        if self.capacity_bytes >= ADDRESS_LIMIT:  # (rounded up first: the reservation is what must fit)
            raise ValueError(
                f"capacity_bytes_max {capacity} rounds up to {self.capacity_bytes} bytes, more than a 64-bit "
                "address space holds: reserve what the program could really use (reserving costs no memory)"
            )
        ctx.activate()
        base = c_uint64()
        # alignment = the granularity; addr = 0: "anywhere" (a non-zero addr is only a hint)
        cu.cuMemAddressReserve(byref(base), self.capacity_bytes, self.granularity, 0, _NO_FLAGS)
        super().__init__(ctx)
        self._base = base.value
        self._chunks: list[tuple[int, int, int]] = []  # (offset, nbytes, physical handle), in address order
        self.pending = PendingStream()  # shared by every view (see devicebuffer.PendingStream)
        self._size = 0
        # Both weak: a view holds its GrowableBuffer, so strong references back would make cycles that only
        # the cyclic GC frees (and, with gc.disable(), nothing frees).
        self._view: weakref.ref[_MappedView] | None = None  # the current view, while someone holds it
        self._views: weakref.WeakSet[_MappedView] = weakref.WeakSet()
        self._own(_teardown, self._base, self.capacity_bytes, self._chunks)

    # --- what it is -----------------------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        """The base address: the same from the first grow() to close()."""
        self.check_open()
        return self._base

    @property
    def size(self) -> int:
        """Elements in use (what :attr:`buffer` covers)."""
        return self._size

    @property
    def nbytes(self) -> int:
        return self._size * self.dtype.itemsize

    @property
    def mapped_bytes(self) -> int:
        """Physical memory mapped so far: ``nbytes`` rounded up to the granularity."""
        return sum(nbytes for _, nbytes, _ in self._chunks)

    @property
    def capacity(self) -> int:
        """The most elements this buffer can ever hold (the reservation, in elements)."""
        return self.capacity_bytes // self.dtype.itemsize

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """(byte offset, bytes) of each physical chunk mapped, in address order."""
        return [(offset, nbytes) for offset, nbytes, _ in self._chunks]

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<GrowableBuffer {self._size} x {self.dtype} at {self._base:#x}: {self.mapped_bytes} of "
            f"{self.capacity_bytes} bytes mapped in {len(self._chunks)} chunk(s){state}>"
        )

    # --- growing --------------------------------------------------------------------------------------------
    def grow(self, n_elements: int) -> DeviceBuffer:
        """Make room for ``n_elements`` in total (never fewer than now) and return the new :attr:`buffer`.

        Only the missing bytes are created and mapped, as one new chunk at the end; nothing is copied.
        Raises :class:`CapacityError` beyond the reservation (and changes nothing).
        """
        self.check_open()
        if isinstance(n_elements, bool) or not isinstance(n_elements, int | np.integer):
            raise TypeError(f"grow() takes a number of elements, got {type(n_elements).__name__}")
        n = int(n_elements)
        if n < self._size:
            raise ValueError(f"grow({n}) would shrink a buffer of {self._size} elements; a GrowableBuffer only grows")
        needed = round_up(n * self.dtype.itemsize, self.granularity)
        if needed > self.capacity_bytes:
            raise CapacityError(
                f"cannot grow to {n} {self.dtype} elements ({n * self.dtype.itemsize} bytes): the reservation "
                f"holds {self.capacity} elements ({self.capacity_bytes} bytes); reserve more when creating the "
                f"GrowableBuffer (reserving address space costs no memory)"
            )
        mapped = self.mapped_bytes
        if needed > mapped:
            self._map_chunk(mapped, needed - mapped)
        self._size = n
        return self.buffer

    def _map_chunk(self, offset: int, nbytes: int) -> None:
        """Create ``nbytes`` of physical memory, map it at ``offset`` and let this device read and write it."""
        self.context.activate()
        handle = c_ulonglong()
        cu.cuMemCreate(byref(handle), nbytes, byref(self._prop), _NO_FLAGS)  # OutOfMemoryError when the card is full
        address = self._base + offset
        try:
            cu.cuMemMap(address, nbytes, 0, handle.value, _NO_FLAGS)  # offset 0 into the new chunk
        except Exception:
            cu.cuMemRelease(handle.value)
            raise
        try:
            access = CUmemAccessDesc(self._prop.location, MemAccessFlag.PROT_READWRITE)
            cu.cuMemSetAccess(address, nbytes, byref(access), 1)
        except Exception:
            cu.cuMemUnmap(address, nbytes)
            cu.cuMemRelease(handle.value)
            raise
        self._chunks.append((offset, nbytes, handle.value))

    def extend(self, values: Any, stream: Stream | None = None) -> None:
        """Append a host array's elements at the end (grows first; converts nothing: dtypes must match)."""
        host = np.ascontiguousarray(values).reshape(-1)
        stream = as_stream(stream, self.context)  # refused before growing too, and another library's borrowed
        if host.dtype != self.dtype:  # refuse before growing, so a refused extend changes nothing
            raise TypeError(
                f"cannot extend a {self.dtype} buffer with {host.dtype} values; convert first "
                f"(e.g. values.astype(np.{self.dtype.name})) -- rawcuda never converts silently"
            )
        start = self._size
        self.grow(start + host.size)
        if host.size:
            self.buffer[start:].copy_from(host, stream=stream)

    # --- views ----------------------------------------------------------------------------------------------
    @property
    def buffer(self) -> DeviceBuffer:
        """A DeviceBuffer view of the ``size`` elements in use (owns nothing; the same object until grow(), while
        it is in use)."""
        self.check_open()
        view = self._view() if self._view is not None else None
        if view is None or view.closed or view.size != self._size:
            view = _MappedView(self, self._base if self._size else 0, self._size, self.dtype)
            self._view = weakref.ref(view)
            self._views.add(view)
        return view

    def to_array(self, stream: Stream | None = None) -> np.ndarray:
        """A host copy of the elements in use."""
        return self.buffer.to_array(stream=stream)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.buffer.__cuda_array_interface__

    # --- lifetime -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the views, then unmap every chunk, release the memory and free the address range."""
        if self._closed:
            return
        for view in list(self._views):
            view.close()  # they own nothing: this only makes later use a ClosedError
        self._views.clear()
        self._view = None
        super().close()  # Resource.close -> _teardown (synchronize, unmap, release, free the range)


def copy_grow(buf: DeviceBuffer, n_elements: int, stream: Stream | None = None) -> DeviceBuffer:
    """The classic way to grow, for comparison: a new, bigger buffer, a device-to-device copy, free the old.

    The address changes, both buffers exist during the copy, and the copy takes time proportional to the
    old size. Returns the new buffer (the old one is closed).
    """
    if n_elements < buf.size:
        raise ValueError(f"copy_grow({n_elements}) would shrink a buffer of {buf.size} elements")
    stream = as_stream(stream, buf.context)  # another library's stream: borrowed, its context checked
    bigger = DeviceBuffer.empty(n_elements, buf.dtype, buf.context)
    if buf.size:
        flat = (buf.size,)
        bigger.view(0, flat).copy_from(buf.view(0, flat), stream=stream)
        if stream is not None:
            stream.synchronize()  # the old buffer is freed next: the copy must be done reading it
    buf.close()
    return bigger


__all__ = ["CapacityError", "GrowableBuffer", "allocation_granularity", "copy_grow", "round_up"]


# A launch passes a GrowableBuffer as its current view (its address, never its interface): core's table.
MEMORY_VIEWS[GrowableBuffer] = lambda memory: memory.buffer
