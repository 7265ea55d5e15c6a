"""Extras: managed (unified) memory -- one address valid on the host and on the GPU.

``cuMemAllocManaged`` returns memory the driver migrates page by page to wherever it is touched. It is
the simplest model to program (no explicit copies: ``buf.array`` is a numpy view, and the same ``buf``
goes to a kernel) and the least predictable to run: the first touch on the other side costs a page
fault and a migration. ``prefetch()`` moves the pages ahead of time; ``advise()`` tells the driver how the
range will be used.

A correction to the seed article: unified memory is not switched on by a context flag (``SCHED_AUTO``
only chooses how the host thread waits); it is this separate allocation call.

The seed also says unified memory costs memory-bound kernels 30-50%. One percentage cannot describe it,
because the cost depends on where the pages are when the kernel runs. Measured on an H200 (tutorial 11b,
cold launch against cold and warm against warm, ``tutorials/output/11b_unified_memory_cost.txt``): on the
first touch after the host wrote them, each page faults and migrates during the kernel, which moved about
8 GB/s -- far below the 53 GB/s pinned copies move over the same link; with the pages resident on the GPU,
warm launches ran at a DeviceBuffer's speed (0.98x); the first launch right after ``prefetch()`` took 1.19x
the first launch after explicit copies.
``bench/unified_memory.py`` measures each case against explicit buffers; tutorials 11a and 11b walk through them.

**Host access while kernels run.** On devices with ``CONCURRENT_MANAGED_ACCESS`` (Pascal and later on
Linux, e.g. every H100/H200) the host may touch managed memory at any time (reading what a running kernel
writes is a race, but not a crash). Without it (Windows and WSL, GPUs older than Pascal) *any*
host access to managed memory while *any* kernel of the context runs is a segmentation fault -- the whole
process dies, no exception. rawcuda cannot intercept numpy's accesses, so on such devices ``.array``
synchronizes the context before handing out the view. Why synchronize rather than raise "work pending"?
The driver has no cheap, context-wide "is anything running?" query that covers every stream (a stream
query sees one stream; only cuCtxSynchronize covers all), and waiting turns the common pattern -- launch,
then read ``buf.array`` -- into a correct program instead of an error. The remaining hole is a view kept
*across* a later launch: on such devices, ask ``buf.array`` again after each launch instead of keeping it.
"""

from __future__ import annotations

from ctypes import byref, c_uint64
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.core.context import Context
from rawcuda.core.device import Device
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.integers import integer, shown, whole
from rawcuda.core.pinned import host_view, lend_host_memory
from rawcuda.core.stream import Stream
from rawcuda.core.streamargs import stream_handle
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAdvise, MemAttachFlag, MemLocationType
from rawcuda.ffi.types import CUmemLocation
from rawcuda.protocols.dlpack import sweep
from rawcuda.protocols.dlpackabi import DLDeviceType
from rawcuda.protocols.loans import Loan

HOST = "host"


def _free_managed(ptr: int) -> None:
    cu.cuMemFree(ptr)


#: CUmemLocation.id is a C int.
MAX_ORDINAL = 2**31 - 1


def location(where: Device | str | int) -> CUmemLocation:
    """A CUmemLocation for a Device (or ordinal), or for the host (``"host"``)."""
    if isinstance(where, str):
        if where != HOST:
            raise ValueError(f"a location is a Device, a device ordinal or 'host', not {where!r}")
        return CUmemLocation(MemLocationType.HOST, 0)
    if isinstance(where, Device):
        return CUmemLocation(MemLocationType.DEVICE, where.handle)
    # int() would take 0.5 as device 0, and the struct's C int would mask 2**32 to 0: neither may pass.
    ordinal = whole(where)
    if ordinal is None:
        raise TypeError(f"a location is a Device, a device ordinal (an int) or 'host', not {shown(where)}")
    if not 0 <= ordinal <= MAX_ORDINAL:
        raise ValueError(f"device ordinal {ordinal} is not one: ordinals count GPUs from 0")
    return CUmemLocation(MemLocationType.DEVICE, ordinal)


class ManagedBuffer(DeviceBuffer):
    """Managed memory: a DeviceBuffer for kernels, with a numpy view (``.array``) for the host."""

    _concurrent_access: bool | None = None  # CONCURRENT_MANAGED_ACCESS of the device, asked once
    dlpack_device_type = DLDeviceType.CUDA_MANAGED
    #: What the host views (and DLPack exports) hold: set by _take_ownership; an empty buffer allocates nothing,
    #: so it has nothing to hold -- and exports a 0-element tensor with a NULL pointer, as PinnedBuffer(0) does.
    _raw: Any = None

    def _allocate(self, ctx: Context, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        ctx.activate()
        ptr = c_uint64()
        cu.cuMemAllocManaged(byref(ptr), nbytes, MemAttachFlag.GLOBAL)
        return ptr.value

    def _take_ownership(self, ptr: int) -> None:
        # The memory lives as long as the host views of it do (see pinned.host_view): no _own() here.
        self._raw, self._array = host_view(ptr, self.nbytes, self.shape, self.dtype, self.context, _free_managed)

    @property
    def concurrent_access(self) -> bool:
        """True when the host may touch managed memory while kernels run (CONCURRENT_MANAGED_ACCESS)."""
        if self._concurrent_access is None:
            device = self.context.device
            self._concurrent_access = bool(device.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS))
        return self._concurrent_access

    @property
    def array(self) -> np.ndarray:
        """The host's view of the memory.

        With concurrent managed access (H100/H200 on Linux) this returns at once: synchronize before
        reading what a kernel wrote. Without it, host access during a kernel would crash the process, so
        the context is synchronized first (see the module docstring) -- ask again after each launch.
        """
        self.check_open()
        if self.context.forked:  # not mapped in a forked child: a read would be SIGSEGV
            self.context.check_usable()
        if self.nbytes == 0:
            return np.empty(self.shape, self.dtype)
        if not self.concurrent_access:
            self.context.synchronize()
        return self._array

    def prefetch(self, to: Device | str | int, stream: Stream | None = None) -> None:
        """Migrate the pages to a device or to the host ahead of use (asynchronous on ``stream``)."""
        self.check_open()
        if self.nbytes == 0:
            return
        self.context.activate()
        cu.cuMemPrefetchAsync(self._ptr, self.nbytes, location(to), 0, stream_handle(stream, self.context))

    def advise(self, advice: MemAdvise, where: Device | str | int) -> None:
        """Tell the driver how the range will be used (read-mostly, preferred location, accessed-by)."""
        self.check_open()
        if self.nbytes == 0:
            return
        self.context.activate()
        cu.cuMemAdvise(self._ptr, self.nbytes, integer(advice, "advice"), location(where))

    def lend(self) -> Loan:
        """Hold this memory for an outside holder (a DLPack consumer) until ``loan.end()``, as a view does."""
        self.check_open()
        return lend_host_memory(self._raw)

    def dlpack_host_wait(self) -> Any:
        """Before the host reads it (``np.from_dlpack``): the async work recorded on it, and -- without
        concurrent managed access -- every kernel of the context (see :attr:`array`)."""
        return self._wait_for_host

    def _wait_for_host(self) -> None:
        self.pending.synchronize()
        if not self.concurrent_access:
            self.context.synchronize()

    def close(self) -> None:
        """Give up the memory: freed now, or when the last outside numpy view (or DLPack export) is dropped."""
        if self._closed:
            return
        self._raw = None
        self._array = None  # type: ignore[assignment]
        sweep()  # a DLPack capsule dropped unconsumed may be the last holder
        super().close()


__all__: list[Any] = ["HOST", "ManagedBuffer", "location"]
