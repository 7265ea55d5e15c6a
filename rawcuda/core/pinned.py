"""Core: pinned host memory, seen through a numpy array.

Copy engines move data by DMA, which needs pages that cannot be swapped out or moved. From pageable
memory the driver first copies into a pinned staging buffer: an extra copy, and no overlap. Memory from
``cuMemHostAlloc`` is pinned already, so copies from it run at full speed and truly asynchronously.

The flags (:class:`~rawcuda.ffi.constants.HostAllocFlag`): ``PORTABLE`` pins it for every context, not
only its own. ``DEVICEMAP`` maps it into the device address space too, for kernels ("zero copy").
``WRITECOMBINED`` is fast for the host to write and the GPU to read, but **very slow for the host to
read** (uncached): use it only for buffers the host never reads back.

The memory belongs to its numpy views. ``close()`` gives up rawcuda's reference; the last view frees it.
A view holds the context too. A forked child must not touch it: ``.array`` raises ForkedProcessError.
``np.from_dlpack(pinned)`` reads it in place, after the async copies recorded through this PinnedBuffer.
A copy through a numpy slice of ``.array`` is not recorded.
"""

from __future__ import annotations

import ctypes
import functools
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
from .elements import byte_count, normalize_dtype, normalize_shape
from .integers import integer
from .resource import Resource


def host_view(
    ptr: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype, context: Context, release: Any
) -> tuple[Any, np.ndarray]:
    """A numpy array over ``nbytes`` at host address ``ptr``. ``release(ptr)`` runs when no view is left.

    Until then the context is held (Context.hold): closing it must not free the memory under a view.
    """
    # Why: docs/hazards.md, "Host memory belongs to its numpy views".
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
    """A loan on host-view memory. Until it ends, it holds ``raw`` as one more view would.

    ``raw`` is the object under the views (:func:`host_view`).
    """
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
        self.nbytes = byte_count(self.shape, self.dtype)
        self.flags = HostAllocFlag(integer(flags, "flags"))
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
        """The numpy view of the pinned memory. It stays valid after close() of this buffer and of its context.

        The memory goes with the last view. In a forked child, this raises ForkedProcessError.
        """
        self.check_open()
        # Why: docs/hazards.md, "Host memory in a forked child".
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
        """Hold this memory for an outside holder until ``loan.end()``, as a view does. DLPack lends per export."""
        self.check_open()
        return lend_host_memory(self._raw)

    def dlpack_host_wait(self) -> Any:
        """Before the host reads it: wait for the async copies recorded on this memory."""
        return self.pending.synchronize

    def close(self) -> None:
        """Give up the memory. It is freed now, or when the last outside numpy view or DLPack export goes."""
        if self._closed:
            return
        self._raw = None
        self._array = None  # type: ignore[assignment]  (the memory goes as soon as no outside view is left)
        sweep()  # a DLPack capsule dropped unconsumed may be the last holder
        super().close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<PinnedBuffer {self.shape} {self.dtype} flags={self.flags!s}{state}>"
