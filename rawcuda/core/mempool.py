"""Core: a stream-ordered memory pool -- the device's default one, or a new one -- and what it holds.

``cuMemAllocAsync`` takes memory from a pool in stream order, without the device-wide synchronization of
``cuMemAlloc``/``cuMemFree``. Freed memory stays reserved in the pool for the next allocation, up to its release
threshold: zero by default, so at every synchronization the pool gives back all it does not use. A program that
allocates in a loop sets the threshold high, and the pool stops going back to the driver. Reading ``reserved``
and ``used`` shows which happens. :class:`~rawcuda.core.poolbuffer.PoolBuffer` allocates from one on a stream
(docs/hazards.md, "Memory pools").
"""

from __future__ import annotations

import weakref
from ctypes import byref, c_int, c_uint64, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.ffi.constants import MemAllocationType, MemHandleType, MemLocationType, MemPoolAttribute
from rawcuda.ffi.types import CUmemLocation, CUmemPoolProps

from .closeorder import CloseOrder
from .context import Context, resolve
from .integers import integer
from .resource import Resource

#: Attributes whose value is a C int; the others are cuuint64_t (cuda.h, above cuMemPoolSetAttribute).
INT_ATTRIBUTES = frozenset(
    {
        MemPoolAttribute.REUSE_FOLLOW_EVENT_DEPENDENCIES,
        MemPoolAttribute.REUSE_ALLOW_OPPORTUNISTIC,
        MemPoolAttribute.REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    }
)
#: The high watermarks take one value only: "It is illegal to set this attribute to a non-zero value".
RESETTABLE = frozenset({MemPoolAttribute.RESERVED_MEM_HIGH, MemPoolAttribute.USED_MEM_HIGH})
#: What the pool measures and no one sets (cuda.h lists them for cuMemPoolGetAttribute only).
READ_ONLY = frozenset({MemPoolAttribute.RESERVED_MEM_CURRENT, MemPoolAttribute.USED_MEM_CURRENT})
MAX_U64 = 2**64 - 1
_DEFAULT_KEY = __name__  # this module's entry in Context.cache: the default pool's object


def _count(value: object, what: str, high: int = MAX_U64) -> int:
    """``value`` as a whole number in [0, high]; TypeError or ValueError naming ``what`` otherwise."""
    number = integer(value, what)
    if not 0 <= number <= high:
        raise ValueError(f"{what} must be in [0, {high}], got {number}")
    return number


def _destroy_pool(handle: int) -> None:
    cu.cuMemPoolDestroy(handle)


class MemoryPool(Resource):
    """A new memory pool on ``context``'s device (``max_size`` bytes at most; 0: the driver's default).

    ``MemoryPool.default(context)`` is the device's own pool: what ``cuMemAllocAsync`` uses unless
    ``cuDeviceSetMemPool`` made another current. Closing that object destroys nothing (it owns no handle).
    """

    close_order = CloseOrder.MEMORY_POOL
    _handle = 0  # (until the driver answers: a failed create leaves a readable object)
    owned = False

    def __init__(self, context: Context | None = None, *, max_size: int = 0) -> None:
        ctx = resolve(context)
        props = CUmemPoolProps()
        props.allocType = MemAllocationType.PINNED  # the one type cuda.h allows
        props.handleTypes = MemHandleType.NONE  # not exportable to another process
        props.location = CUmemLocation(MemLocationType.DEVICE, ctx.device.ordinal)
        props.maxSize = _count(max_size, "max_size")
        ctx.activate()
        handle = c_void_p()
        cu.cuMemPoolCreate(byref(handle), byref(props))  # first: a refusal leaves no half-made child in the context
        super().__init__(ctx)
        self._handle: int = handle.value or 0
        self.owned = True
        self.buffers: weakref.WeakSet[Any] = weakref.WeakSet()  # the PoolBuffers taken from it, while they live
        self._own(_destroy_pool, self._handle)

    def close(self) -> None:
        """Destroy a new pool (the default one's object destroys nothing); refused while a buffer from it is open.

        Why refused: its memory would be used after the pool went (a crash on the H200). Close the buffers first.
        """
        if self.owned and not self._closed and any(not b.closed for b in list(self.buffers)):
            raise ValueError(f"{self!r} still has open buffers: close them first (closing the context closes both)")
        super().close()

    @classmethod
    def default(cls, context: Context | None = None) -> MemoryPool:
        """The default pool of ``context``'s device (what ``cuMemAllocAsync`` takes from, unless the current pool
        was changed with ``cuDeviceSetMemPool``)."""
        ctx = resolve(context)
        known = ctx.cache.get(_DEFAULT_KEY)
        if known is not None and not known.closed:
            return known  # one object per context: a PoolBuffer asks at every allocation
        ctx.activate()
        handle = c_void_p()
        cu.cuDeviceGetDefaultMemPool(byref(handle), ctx.device.handle)
        pool = cls.__new__(cls)
        Resource.__init__(pool, ctx)
        pool._handle = handle.value or 0
        pool.owned = False  # the device's: nothing to destroy
        pool.internal = True  # an object over the device's pool is no leak, kept or not (rawcuda.testing)
        ctx.cache[_DEFAULT_KEY] = pool
        return pool

    @property
    def handle(self) -> int:
        """The driver's ``CUmemoryPool``; ClosedError once closed."""
        self.check_open()
        return self._handle

    def attribute(self, which: MemPoolAttribute) -> int:
        """One attribute, read with ``cuMemPoolGetAttribute`` (an int, or bytes as a 64-bit count)."""
        which = MemPoolAttribute(integer(which, "which"))
        value = c_int() if which in INT_ATTRIBUTES else c_uint64()
        self.context.activate()
        cu.cuMemPoolGetAttribute(self.handle, which, byref(value))
        return value.value

    def set_attribute(self, which: MemPoolAttribute, value: int) -> None:
        """Set one attribute with ``cuMemPoolSetAttribute``, its value checked against the C type first."""
        which = MemPoolAttribute(integer(which, "which"))
        if which in READ_ONLY:
            raise ValueError(f"{which.name} is what the pool measures: it can be read, not set")
        number = integer(value, which.name.lower())
        if which in RESETTABLE and number != 0:
            raise ValueError(f"{which.name} can only be reset, to 0 (cuda.h); got {value!r}")
        if which in INT_ATTRIBUTES:
            c_value: c_int | c_uint64 = c_int(_count(number, which.name.lower(), high=1))
        else:
            c_value = c_uint64(_count(number, which.name.lower()))
        self.context.activate()
        cu.cuMemPoolSetAttribute(self.handle, which, byref(c_value))

    @property
    def release_threshold(self) -> int:
        """Bytes the pool keeps reserved at a synchronization instead of giving them back (0 by default)."""
        return self.attribute(MemPoolAttribute.RELEASE_THRESHOLD)

    @release_threshold.setter
    def release_threshold(self, nbytes: int) -> None:
        self.set_attribute(MemPoolAttribute.RELEASE_THRESHOLD, nbytes)

    @property
    def reserved(self) -> int:
        """Bytes of device memory the pool holds now, in use or not."""
        return self.attribute(MemPoolAttribute.RESERVED_MEM_CURRENT)

    @property
    def used(self) -> int:
        """Bytes of it handed out to allocations now."""
        return self.attribute(MemPoolAttribute.USED_MEM_CURRENT)

    def high_watermarks(self, *, reset: bool = False) -> tuple[int, int]:
        """(most bytes reserved, most bytes used) since the pool was made or last reset; ``reset=True`` starts
        both again from now."""
        marks = (self.attribute(MemPoolAttribute.RESERVED_MEM_HIGH), self.attribute(MemPoolAttribute.USED_MEM_HIGH))
        if reset:
            for which in RESETTABLE:
                self.set_attribute(which, 0)
        return marks

    def trim(self, keep: int = 0) -> None:
        """Give back to the driver what the pool holds beyond ``keep`` bytes and does not use."""
        self.context.activate()
        cu.cuMemPoolTrimTo(self.handle, _count(keep, "keep"))

    def __repr__(self) -> str:
        kind = "new" if self.owned else "default"
        state = " closed" if self.closed else ""
        return f"<MemoryPool {kind} {self._handle:#x} on device {self.context.device.ordinal}{state}>"
