"""Core: device memory that knows its shape and dtype -- cust's ``DeviceBuffer<T>``, checked at run time.

Rust checks element types when it compiles; rawcuda checks them before any byte moves. A ``float32``
buffer refuses a ``float64`` array with a ``TypeError``. A copy of the wrong size is a ``ValueError``
naming both shapes. Nothing is converted silently.

A copy without a stream waits for all work in the context, before and after: it races no kernel. A copy
on a stream is ordered with that stream only, and keeps the host array alive until it has run. It
overlaps other work only from pinned memory (:class:`~rawcuda.core.pinned.PinnedBuffer`).

A view shares the memory and its state (:class:`~rawcuda.core.allocation.Allocation`). torch, CuPy and
numba use a buffer in place, through ``__cuda_array_interface__`` or DLPack (rawcuda.protocols.dlpack).
A DLPack export lends the memory: ``close()`` frees it after the last loan ends. ``rawcuda.adopt`` wraps
another library's array without a copy; ``from_array`` always copies, and only from host memory.
"""

from __future__ import annotations

import math
from ctypes import byref, c_uint64
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.core.guards.pending import PendingStream
from rawcuda.protocols.dlpack import Exportable, is_device_array, sweep
from rawcuda.protocols.loans import Loan

from .allocation import Allocation
from .closeorder import CloseOrder
from .context import Context, resolve
from .elements import byte_count, check_match, exact_element, normalize_dtype, normalize_shape
from .hostarrays import host_array
from .integers import integer, shown, whole
from .overlap import copy_through, overlaps, relaxed_capture, staged_copy, staged_copy_async
from .pinned import PinnedBuffer
from .resource import Resource
from .stream import Stream
from .streamargs import as_stream, stream_handle

#: Element size -> (synchronous memset, the same on a stream, the unsigned type of that size): written out,
#: so that every driver function a buffer calls is named here.
_MEMSET_BY_SIZE = {
    1: ("cuMemsetD8", "cuMemsetD8Async", np.uint8),
    2: ("cuMemsetD16", "cuMemsetD16Async", np.uint16),
    4: ("cuMemsetD32", "cuMemsetD32Async", np.uint32),
}
_CAI_VERSION = 3
GPU_ARRAY_REFUSAL = (
    "from_array copies host arrays, and this {} is GPU memory: rawcuda.adopt(x) wraps it as a buffer without a "
    "copy; for a copy of your own, DeviceBuffer.empty(shape, dtype) then .copy_from(rawcuda.adopt(x))"
)


def _free(ptr: int) -> None:
    cu.cuMemFree(ptr)


class DeviceBuffer(Resource, Exportable):
    """An n-dimensional, C-contiguous array in device memory."""

    close_order = CloseOrder.DEVICE_MEMORY

    def __init__(self, shape: int | tuple[int, ...], dtype: Any = np.float32, context: Context | None = None) -> None:
        ctx = resolve(context)
        self.shape = normalize_shape(shape)
        self.dtype = normalize_dtype(dtype)
        self.nbytes = byte_count(self.shape, self.dtype)
        ptr = self._allocate(ctx, self.nbytes)
        super().__init__(ctx)
        self._ptr = ptr
        self._base: DeviceBuffer | None = None  # the owner of the memory, for a view
        self._join(Allocation(self._new_record(), self.dlpack_device_type))
        if ptr:
            self._take_ownership(ptr)

    def _allocate(self, ctx: Context, nbytes: int) -> int:
        if nbytes == 0:
            return 0  # an empty buffer owns no memory (cuMemAlloc refuses 0 bytes)
        ctx.activate()
        ptr = c_uint64()
        cu.cuMemAlloc(byref(ptr), nbytes)
        return ptr.value

    def _take_ownership(self, ptr: int) -> None:
        self._own(_free, ptr)

    def _new_record(self) -> PendingStream:
        """The PendingStream of new memory. A GrowableBuffer's view returns its grower's instead."""
        return PendingStream()

    def _join(self, allocation: Allocation) -> None:
        """Take ``allocation`` as this buffer's state. It is its own at creation, and its base's for a view."""
        self.allocation = allocation  # Why: docs/hazards.md, "One state per allocation".
        # Plain attributes, set once from it: copies, the interface and the launch pack read them without a call.
        self.pending, self.loans, self.dlpack_device_type = allocation.pending, allocation.loans, allocation.kind

    # --- constructors ------------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape: int | tuple[int, ...], dtype: Any = np.float32, context: Context | None = None) -> Any:
        """Uninitialized memory (whatever the last owner left there)."""
        return cls(shape, dtype, context)

    @classmethod
    def zeros(
        cls,
        shape: int | tuple[int, ...],
        dtype: Any = np.float32,
        context: Context | None = None,
        stream: Stream | None = None,
    ) -> Any:
        buf = cls(shape, dtype, context)
        buf.memset(0, stream=stream)
        return buf

    @classmethod
    def from_array(cls, array: Any, context: Context | None = None, stream: Stream | None = None) -> Any:
        """A new buffer with a host array's shape, dtype and contents: always a copy.

        A GPU array is refused: ``rawcuda.adopt`` wraps one without a copy.
        """
        if not isinstance(array, np.ndarray) and is_device_array(array):
            raise TypeError(GPU_ARRAY_REFUSAL.format(type(array).__name__))
        host = np.asarray(array)
        buf = cls(host.shape, host.dtype, context)
        buf.copy_from(host, stream=stream)
        return buf

    # --- what it is --------------------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        """The CUdeviceptr (an integer address; 0 for an empty buffer)."""
        if self._closed:
            self.check_open()
        return self._ptr

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d buffer")
        return self.shape[0]

    def __repr__(self) -> str:
        kind = "view" if self._base is not None else type(self).__name__
        state = " closed" if self._closed else ""
        return f"<{kind} {self.shape} {self.dtype} at {self._ptr:#x}{state}>"

    # --- views -------------------------------------------------------------------------------------------
    def view(self, offset: int = 0, shape: int | tuple[int, ...] | None = None, dtype: Any = None) -> DeviceBuffer:
        """A buffer over this memory from element ``offset`` on. The owner keeps the memory.

        The view shares the owner's allocation: its pending record, its loans and its set of views.
        """
        self.check_open()
        dt = self.dtype if dtype is None else normalize_dtype(dtype)
        index = whole(offset)
        if index is None:
            raise TypeError(f"a view offset is an int (elements), not {type(offset).__name__} {offset!r}")
        start = index * self.dtype.itemsize
        if not 0 <= start <= self.nbytes:
            raise ValueError(f"view offset {index} is outside a buffer of {self.size} elements")
        if start % dt.itemsize:
            raise ValueError(f"a {dt} view must start on a multiple of {dt.itemsize} bytes; byte offset {start} is not")
        if shape is None:
            remaining = self.nbytes - start
            if remaining % dt.itemsize:
                raise ValueError(
                    f"the remaining {remaining} bytes are not a whole number of {dt} elements: pass "
                    f"shape= to view only whole elements"
                )
            shape = remaining // dt.itemsize
        dims = normalize_shape(shape)
        nbytes = byte_count(dims, dt)
        if start + nbytes > self.nbytes:
            raise ValueError(
                f"a view of shape {dims} {dt} at element {offset} needs {start + nbytes} bytes; "
                f"the buffer has {self.nbytes}"
            )
        view = DeviceBuffer.__new__(DeviceBuffer)
        Resource.__init__(view, self.context)
        view.shape, view.dtype, view.nbytes = dims, dt, nbytes
        view._ptr = self._ptr + start if nbytes else 0
        view._base = self if self._base is None else self._base
        view._join(self.allocation)
        self.allocation.views.add(view)
        return view

    def __getitem__(self, index: slice) -> DeviceBuffer:
        """``buf[i:j]``: a view of rows i..j (contiguous slices of the first axis only)."""
        if not isinstance(index, slice) or not self.shape:
            raise TypeError(
                "DeviceBuffer supports only contiguous slices of the first axis, e.g. buf[10:20]; "
                "copy to the host with to_array() for anything else"
            )
        start, stop, step = index.indices(self.shape[0])
        if step != 1:
            raise ValueError("DeviceBuffer slices must be contiguous (step 1)")
        row = math.prod(self.shape[1:])
        return self.view(start * row, (max(stop - start, 0), *self.shape[1:]))

    def close(self) -> None:
        """Free the memory now, or after the last DLPack export of it is given back.

        Closing the owner closes its views too. A view owns nothing, so its close frees nothing.
        """
        if self._base is None:  # the owner: its views close with it
            for view in list(self.allocation.views):
                view.close()  # a view owns nothing: this only makes later use a ClosedError
            self.allocation.views.clear()
        if not self._closed and self._base is None and self.loans.outstanding and self.context.usable:
            sweep()  # capsules dropped unconsumed end their loans first
            finalizer = self._finalizer  # None: owns nothing (empty; a ManagedBuffer's memory is its host views')
            if finalizer is not None and finalizer.detach() is not None:
                self.loans.release_after(self.context, *self._release)  # so super().close() releases nothing
        super().close()

    def lend(self) -> Loan:
        """Keep this memory for an outside holder until ``loan.end()``.

        ``close()`` of the buffer or of its context frees it only after every loan has ended. A view lends
        its owner's memory. rawcuda.protocols.dlpack lends once for each export.
        """
        self.check_open()
        if self._base is not None:
            return self._base.lend()
        return self.loans.lend(self.context)

    def dlpack_host_wait(self) -> Any:
        """How the host waits before it reads this memory. None for device memory; a view asks its owner."""
        return None if self._base is None else self._base.dlpack_host_wait()

    # --- copies ------------------------------------------------------------------------------------------
    def copy_from(self, src: Any, stream: Stream | None = None) -> None:
        """Fill this buffer from a host array, a PinnedBuffer or another DeviceBuffer. Shape and dtype must match.

        On a stream, from pageable memory, the driver stages the data: the call returns once it is safe.
        """
        self.check_open()
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        if isinstance(src, DeviceBuffer):
            self._copy_device(dst=self, src=src, stream=stream)
            return
        # np.require, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,) (numpy documents
        # it), and the shape check below would then refuse a 0-d buffer's own kind of array.
        host = np.require(host_array(src, "copy_from"), requirements="C")
        check_match(self, host.shape, host.dtype, "copy from")
        if overlaps(self._ptr, host.ctypes.data, self.nbytes):  # a managed buffer's own host view, shifted
            host = host.copy()
        self._transfer(
            lambda s: cu.cuMemcpyHtoDAsync(self._ptr, host.ctypes.data, self.nbytes, s),
            lambda: cu.cuMemcpyHtoD(self._ptr, host.ctypes.data, self.nbytes),
            stream,
            host,
            src.pending if isinstance(src, PinnedBuffer) else None,
        )

    def copy_to(self, dst: Any, stream: Stream | None = None) -> None:
        """Copy this buffer into a C-contiguous, writeable host array (or PinnedBuffer) or another DeviceBuffer."""
        self.check_open()
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        if isinstance(dst, DeviceBuffer):
            self._copy_device(dst=dst, src=self, stream=stream)
            return
        host = host_array(dst, "copy_to")
        if not host.flags.c_contiguous or not host.flags.writeable:
            raise ValueError("copy_to needs a C-contiguous, writeable array (np.empty(shape, dtype) is one)")
        check_match(self, host.shape, host.dtype, "copy into")
        if overlaps(self._ptr, host.ctypes.data, self.nbytes):  # a managed buffer's own host view, shifted
            host[...] = self.to_array(stream)  # (which waits for the stream)
            return
        self._transfer(
            lambda s: cu.cuMemcpyDtoHAsync(host.ctypes.data, self._ptr, self.nbytes, s),
            lambda: cu.cuMemcpyDtoH(host.ctypes.data, self._ptr, self.nbytes),
            stream,
            host,
            dst.pending if isinstance(dst, PinnedBuffer) else None,
        )

    def to_array(self, stream: Stream | None = None) -> np.ndarray:
        """A new host array with this buffer's contents. On ``stream``, it waits for that stream only."""
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        out = np.empty(self.shape, self.dtype)
        self.copy_to(out, stream=stream)
        if stream is not None:
            stream.synchronize()
        return out

    @staticmethod
    def _copy_device(dst: DeviceBuffer, src: DeviceBuffer, stream: Stream | None) -> None:
        src.check_open()
        dst.check_open()
        if src.context.raw_handle != dst.context.raw_handle:
            raise ValueError(
                f"{src!r} and {dst!r} belong to different contexts; copy through the host or use buffers of one context"
            )
        check_match(dst, src.shape, src.dtype, "copy from device buffer")
        to, start, nbytes = dst._ptr, src._ptr, dst.nbytes
        if to == start:
            stream_handle(stream, dst.context)  # (a wrong or closed stream is still refused)
            return  # the same bytes: nothing would change
        keep: Any = src
        if not overlaps(to, start, nbytes):
            steps = (lambda s: cu.cuMemcpyDtoDAsync(to, start, nbytes, s), lambda: cu.cuMemcpyDtoD(to, start, nbytes))
        elif stream_handle(stream, dst.context) == 0 or stream.capturing is None:  # (a wrong stream: TypeError)
            # Undefined for cuMemcpyDtoD: staged, as memmove does.
            steps = (lambda s: staged_copy_async(to, start, nbytes, s), lambda: staged_copy(to, start, nbytes))
        else:  # captured: the graph keeps the temporary. Why: docs/hazards.md, "Overlapping copies are staged".
            with relaxed_capture():
                scratch = keep = (src, DeviceBuffer.empty(nbytes, np.uint8, dst.context))
            steps = (lambda s: copy_through(to, start, nbytes, scratch[1]._ptr, s), lambda: None)
        dst._transfer(*steps, stream, keep)

    def _transfer(
        self, on_stream: Any, synchronous: Any, stream: Stream | None, keep: Any, host: PendingStream | None = None
    ) -> None:
        """Run a copy or memset, and record its stream as pending on this memory.

        ``host`` is the record of pinned memory at the other end. Its DLPack export must wait for the copy too.
        """
        if self.nbytes == 0:
            stream_handle(stream, self.context)  # nothing to do, but a wrong or closed stream is still refused
            return
        ctx = self.context
        if stream is None:
            # Fully synchronous: nothing still running may touch this memory, and nothing after may start early.
            # Why: docs/hazards.md, "A copy without a stream waits for the whole context".
            ctx.synchronize()
            synchronous()
            ctx.synchronize()
            self.pending.record(None)
            if host is not None:
                host.record(None)
            return
        handle = stream_handle(stream, ctx)
        ctx.activate()
        on_stream(handle)
        stream.keep_alive(keep)  # (while capturing, the graph takes it)
        if stream.capturing is not None:
            # A captured copy runs at every replay, not now: its graph holds (and checks) this end too.
            stream.capturing.keep_alive(self)
            return
        self.pending.record(stream)
        if host is not None:
            host.record(stream)

    # --- filling ------------------------------------------------------------------------------------------
    def memset(self, byte: int, stream: Stream | None = None) -> None:
        """Set every byte to ``byte`` (0..255): memset(0) zeroes any dtype."""
        value = integer(byte, "memset's byte")
        if not 0 <= value <= np.iinfo(np.uint8).max:
            raise ValueError(f"memset takes a byte value 0..255, got {shown(byte)}; use fill() for element values")
        self.check_open()
        self._set(1, value, self.nbytes, stream)

    def fill(self, value: Any, stream: Stream | None = None) -> None:
        """Set every element to ``value``, converted to this dtype. A lossy conversion is a TypeError."""
        self.check_open()
        element = exact_element(value, self.dtype)
        size = element.dtype.itemsize
        if size in _MEMSET_BY_SIZE:
            self._set(size, int(element.view(_MEMSET_BY_SIZE[size][2])[0]), self.size, stream)
            return
        halves = element.view(np.uint32)
        if size == 2 * halves.itemsize and halves[0] == halves[1]:  # e.g. 0.0 or -1 as 8-byte values
            self._set(halves.itemsize, int(halves[0]), self.size * 2, stream)
            return
        self.copy_from(np.full(self.shape, element[0], self.dtype), stream=stream)  # no memset for this pattern

    def _set(self, width: int, pattern: int, count: int, stream: Stream | None) -> None:
        """``count`` elements of ``width`` bytes set to ``pattern`` (cuMemsetD8/D16/D32, or their Async)."""
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        if count == 0:
            return
        sync_name, async_name, _ = _MEMSET_BY_SIZE[width]
        sync_fn, async_fn = getattr(cu, sync_name), getattr(cu, async_name)
        self._transfer(
            lambda s: async_fn(self._ptr, pattern, count, s), lambda: sync_fn(self._ptr, pattern, count), stream, None
        )

    # --- sharing with torch / CuPy / numba -----------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Version 3 of the CUDA Array Interface: shape, typestr, data pointer, and the stream to wait on.

        ``stream`` is the consumer's to wait for: after it, no async rawcuda work on this memory is pending.
        That covers copies and kernel launches, through this buffer or any view of it. It is None when
        nothing is pending. A closed stream has finished its work (close() waits), so it counts as none.
        Graph replays are not tracked: synchronize their stream before sharing.
        rawcuda.core.guards.pending keeps the record. rawcuda.protocols.cai reads other libraries' interfaces.
        """
        self.check_open()
        self.context.check_usable()  # in a forked child, the address and the stream handle are the parent's
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": self.dtype.descr if self.dtype.fields else [("", self.dtype.str)],
            "data": (self._ptr, False),
            "strides": None,
            "version": _CAI_VERSION,
            "stream": self.pending.handle(),
        }


__all__ = ["DeviceBuffer"]
