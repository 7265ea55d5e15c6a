"""Core: a DeviceBuffer taken from a memory pool in stream order, and given back after its pending work.

``cuMemAlloc``/``cuMemFree`` synchronize the device. ``cuMemAllocFromPoolAsync``/``cuMemFreeAsync`` are queued
on a stream instead, so a loop that allocates stays asynchronous. The free is the part a program gets wrong:
it must come after every kernel and copy still using the memory, on whichever streams. The buffer's pending
record already knows those streams. So ``close()`` makes the last one wait for the others and frees there.
Usable at once on the stream it was allocated on (``stream=None``: the legacy default stream, which every
blocking stream waits for). Why, and the other streams: docs/hazards.md, "Memory pools".
"""

from __future__ import annotations

from ctypes import byref, c_uint64
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.core.guards.capturedeferral import capture_deferral
from rawcuda.core.guards.pending import LEGACY_HANDLE, PendingStream, legacy_stream
from rawcuda.protocols.dlpack import is_device_array

from .context import Context, resolve
from .devicebuffer import GPU_ARRAY_REFUSAL, DeviceBuffer
from .mempool import MemoryPool
from .stream import Stream
from .streamargs import as_stream, context_for, stream_handle

ALLOCATION = "allocating from a memory pool on the legacy default stream"
FREE = "freeing a pool buffer on the legacy default stream"


def _free_in_stream_order(ptr: int, pending: PendingStream, raw_context: int) -> None:
    """Free after everything still pending on the memory: on its last stream, made to wait for the others."""
    stream = pending.handle()  # None: nothing is pending (synchronized since, or its streams closed)
    if stream is None or stream == LEGACY_HANDLE:
        capture_deferral.refuse_legacy(FREE, raw_context)
    cu.cuMemFreeAsync(ptr, LEGACY_HANDLE if stream is None else stream)


class PoolBuffer(DeviceBuffer):
    """A buffer from ``pool`` (the device's default pool when None), allocated on ``stream``.

    It is a DeviceBuffer in every other way: views, copies, launches, exports. ``close()`` frees it on a stream,
    after the work still pending on it; closing its context closes it before the pool.
    """

    def __init__(
        self,
        shape: int | tuple[int, ...],
        dtype: Any = np.float32,
        context: Context | None = None,
        *,
        pool: MemoryPool | None = None,
        stream: Stream | None = None,
    ) -> None:
        if context is None and stream is not None:
            context = context_for(stream, None)  # the stream says which context, as a launch's does
        if context is None and isinstance(pool, MemoryPool):
            context = pool.context
        ctx = resolve(context)
        stream = as_stream(stream, ctx)  # another library's stream: borrowed, its context checked
        if pool is None:
            pool = MemoryPool.default(ctx)
        elif not isinstance(pool, MemoryPool):
            raise TypeError(
                f"pool must be a rawcuda MemoryPool or None (the device's default), not {type(pool).__name__}"
            )
        elif pool.context.raw_handle != ctx.raw_handle:
            raise ValueError(f"{pool!r} belongs to {pool.context!r}, not {ctx!r}: take a pool of the same context")
        self.pool = pool
        self._stream = stream
        super().__init__(shape, dtype, ctx)
        if pool.owned:
            pool.buffers.add(self)

    def _allocate(self, ctx: Context, nbytes: int) -> int:
        stream = self._stream
        handle = stream_handle(stream, ctx)  # TypeError, ValueError or ClosedError for a wrong stream
        if nbytes == 0:
            return 0  # an empty buffer owns no memory (the driver refuses 0 bytes)
        if stream is not None and stream.capturing is not None:
            raise ValueError(
                f"{stream!r} is being captured: an allocation there would become a graph memory node, which the "
                "graph would own. Allocate before the capture begins, or on another stream"
            )
        if stream is None:
            capture_deferral.refuse_legacy(ALLOCATION, ctx.raw_handle)
        ctx.activate()
        ptr = c_uint64()
        cu.cuMemAllocFromPoolAsync(byref(ptr), nbytes, self.pool.handle, handle)
        return ptr.value

    def _take_ownership(self, ptr: int) -> None:
        # Recorded first: the allocation is queued work, and an export or the free is ordered after it.
        self.pending.record(legacy_stream(self.context) if self._stream is None else self._stream)
        self._stream = None  # (held no longer: the record holds the stream weakly)
        self._own(_free_in_stream_order, ptr, self.pending, self.context.raw_handle)

    def close(self) -> None:
        """Free the memory on a stream after the work pending on it (after the last DLPack export is given back)."""
        if not self._closed and self._base is None:
            for ref in self.pending.streams:
                stream = ref()
                if stream is not None and not stream.closed and stream.capturing is not None:
                    raise ValueError(
                        f"{self!r} has work pending on {stream!r}, which is being captured: a free there would "
                        "become a graph node. Close the buffer after the capture ends"
                    )
        super().close()

    # --- constructors: the same as DeviceBuffer's, with the pool and the stream passed on --------------------
    @classmethod
    def empty(
        cls,
        shape: int | tuple[int, ...],
        dtype: Any = np.float32,
        context: Context | None = None,
        *,
        pool: MemoryPool | None = None,
        stream: Stream | None = None,
    ) -> Any:
        """Uninitialized memory from the pool (whatever an earlier allocation left there)."""
        return cls(shape, dtype, context, pool=pool, stream=stream)

    @classmethod
    def zeros(
        cls,
        shape: int | tuple[int, ...],
        dtype: Any = np.float32,
        context: Context | None = None,
        stream: Stream | None = None,
        *,
        pool: MemoryPool | None = None,
    ) -> Any:
        buf = cls(shape, dtype, context, pool=pool, stream=stream)
        buf.memset(0, stream=stream)
        return buf

    @classmethod
    def from_array(
        cls, array: Any, context: Context | None = None, stream: Stream | None = None, *, pool: MemoryPool | None = None
    ) -> Any:
        """A new pool buffer with a host array's shape, dtype and contents, copied on ``stream``: always a copy."""
        if not isinstance(array, np.ndarray) and is_device_array(array):
            raise TypeError(GPU_ARRAY_REFUSAL.format(type(array).__name__))
        host = np.asarray(array)
        buf = cls(host.shape, host.dtype, context, pool=pool, stream=stream)
        buf.copy_from(host, stream=stream)
        return buf


__all__ = ["PoolBuffer"]
