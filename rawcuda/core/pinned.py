"""Core: pinned host memory, seen through a numpy array.

Why pin? The copy engines move data by DMA, which needs physical pages that cannot be swapped or moved.
From ordinary (pageable) memory the driver first copies into a pinned staging buffer of its own -- an
extra copy, and no overlap with computation. Memory from ``cuMemHostAlloc`` is pinned already: copies
from it run at full PCIe/NVLink speed and truly asynchronously.

The flags (:class:`~rawcuda.ffi.constants.HostAllocFlag`) matter:

* ``PORTABLE`` -- pinned for every context, not only the one that allocated it;
* ``DEVICEMAP`` -- also mapped into the device address space (kernels can read it directly, "zero copy");
* ``WRITECOMBINED`` -- the CPU writes it fast and the GPU reads it fast over PCIe, but **CPU reads are
  very slow** (uncached): use it only for buffers the host writes and never reads back.

Lifetime and safety: the numpy array is a *view* of driver memory, and nothing can stop numpy from
reading it. If ``close()`` freed that memory while a view still existed, touching the view would crash
the interpreter. So the memory belongs to the ctypes object under the views: ``close()`` gives up
rawcuda's reference, and the memory is freed when the last view is gone too (immediately, in the usual
case of no outside views). The same holds for the *context*: destroying it would free the memory under
the views, so a view keeps its context alive (:meth:`~rawcuda.core.context.Context.hold`) -- ``ctx.close()``
closes everything, and the CUcontext itself goes with the last view.

Two things a view cannot survive: a sticky error (the context is poisoned and rawcuda never calls into it
again -- the memory is left mapped, not freed) and ``fork()``. The driver maps pinned and managed memory so
that a forked child does not inherit it: a view the child touches is a segmentation fault that no library
can intercept. In the child, ``buf.array`` raises :class:`~rawcuda.checked.errors.ForkedProcessError`;
views obtained before the fork must not be touched there (fork before you allocate, or use "spawn").

DLPack: ``np.from_dlpack(pinned)`` reads the memory in place (kDLCUDAHost; numpy reads host memory). An
export holds the memory exactly as a numpy view does (:meth:`PinnedBuffer.lend`), and waits first for async
copies into it that went through this PinnedBuffer (``buf.copy_to(pinned, stream=s)``): they are recorded
in its ``pending``, as a device buffer's are. A copy through a numpy slice of ``.array`` is not seen there.
"""

from __future__ import annotations

import ctypes
import functools
import math
import weakref
from ctypes import byref, c_uint64, c_void_p
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.core.guards.pending import PendingStream
from rawcuda.ffi.constants import HostAllocFlag
from rawcuda.protocols.dlpack import Exportable, sweep
from rawcuda.protocols.dlpackabi import DLDeviceType
from rawcuda.protocols.loans import Loan

from .closeorder import CloseOrder
from .context import Context, resolve
from .elements import normalize_dtype, normalize_shape
from .resource import Resource


def host_view(
    ptr: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype, context: Context, release: Any
) -> tuple[Any, np.ndarray]:
    """A numpy array over ``nbytes`` at host address ``ptr``; ``release(ptr)`` runs when no view is left.

    Until then the context holds (see Context.hold): closing it must not free the memory under a view.
    """
    if nbytes == 0:
        return None, np.empty(shape, dtype)
    raw = (ctypes.c_byte * nbytes).from_address(ptr)
    context.hold()
    finalizer = weakref.finalize(raw, context.call_held, release, ptr)
    finalizer.atexit = False  # at exit the process teardown returns the memory
    return raw, np.frombuffer(raw, dtype=dtype).reshape(shape)


def _free_host(ptr: int) -> None:
    cu.cuMemFreeHost(ptr)


def lend_host_memory(raw: Any) -> Loan:
    """A loan on host-view memory: it holds ``raw`` (the object under the views, see :func:`host_view`) as one
    more view would, until it ends."""
    return Loan(functools.partial(_hold, raw))


def _hold(raw: Any) -> None:
    """Nothing to do when the loan ends: holding ``raw`` until then was the point."""


class PinnedBuffer(Resource, Exportable):
    """Page-locked host memory with a numpy view (``.array``)."""

    close_order = CloseOrder.HOST_MEMORY
    dlpack_device_type = DLDeviceType.CUDA_HOST

    def __init__(
        self,
        shape: int | tuple[int, ...],
        dtype: Any = np.float32,
        context: Context | None = None,
        *,
        flags: HostAllocFlag = HostAllocFlag.DEFAULT,
    ) -> None:
        ctx = resolve(context)
        self.shape = normalize_shape(shape)
        self.dtype = normalize_dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.flags = HostAllocFlag(flags)
        ptr = c_void_p()
        if self.nbytes:
            ctx.activate()
            cu.cuMemHostAlloc(byref(ptr), self.nbytes, int(self.flags))
        super().__init__(ctx)
        self._ptr: int = ptr.value or 0
        self._raw, self._array = host_view(self._ptr, self.nbytes, self.shape, self.dtype, ctx, _free_host)
        self.pending = PendingStream()  # async copies to or from it, through DeviceBuffer.copy_from/copy_to

    @classmethod
    def from_array(
        cls, array: Any, context: Context | None = None, *, flags: HostAllocFlag = HostAllocFlag.DEFAULT
    ) -> PinnedBuffer:
        host = np.asarray(array)
        buf = cls(host.shape, host.dtype, context, flags=flags)
        buf.array[...] = host
        return buf

    @property
    def array(self) -> np.ndarray:
        """The numpy view of the pinned memory. It stays valid after this buffer's close() and its context's,
        until you drop it (the memory goes with the last view); not in a forked child (ForkedProcessError)."""
        self.check_open()
        if self.context.forked:  # (not usable() alone: after a sticky error the memory is still readable)
            self.context.check_usable()
        return self._array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.array
        return array if dtype is None else array.astype(dtype)

    @property
    def ptr(self) -> int:
        """The host address."""
        self.check_open()
        if self.context.forked:  # (not usable() alone: after a sticky error the memory is still readable)
            self.context.check_usable()
        return self._ptr

    @property
    def device_ptr(self) -> int:
        """The device address of a DEVICEMAP allocation (kernels read host memory through it)."""
        self.check_open()
        if not self.flags & HostAllocFlag.DEVICEMAP:
            raise ValueError("only memory allocated with HostAllocFlag.DEVICEMAP has a device address")
        self.context.activate()
        dptr = c_uint64()
        cu.cuMemHostGetDevicePointer(byref(dptr), self._ptr, 0)
        return dptr.value

    def lend(self) -> Loan:
        """Hold this memory for an outside holder (a DLPack consumer) until ``loan.end()``, as a view does."""
        self.check_open()
        return lend_host_memory(self._raw)

    def dlpack_host_wait(self) -> Any:
        """Before the host reads it: wait for the async copies recorded on this memory."""
        return self.pending.synchronize

    def close(self) -> None:
        """Give up the memory: freed now, or when the last outside numpy view (or DLPack export) is dropped."""
        if self._closed:
            return
        self._raw = None
        self._array = None  # type: ignore[assignment]  (the memory goes as soon as no outside view is left)
        sweep()  # a DLPack capsule dropped unconsumed may be the last holder
        super().close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<PinnedBuffer {self.shape} {self.dtype} flags={self.flags!s}{state}>"
