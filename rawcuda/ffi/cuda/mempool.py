"""Layer 0, driver table section: stream-ordered memory pools -- the memory cuMemAllocAsync hands out.

Each device has a default pool; cuMemPoolCreate makes more. A pool keeps freed memory reserved for the next
allocation instead of giving it back to the driver, up to its release threshold (zero by default: everything
beyond what is in use goes back at each synchronization). Its attributes say how much it holds and how much of
that is in use.
"""

from __future__ import annotations

from ctypes import POINTER, c_size_t, c_void_p

from ..decl import decl
from ..types import CUdevice, CUdeviceptr, CUmemoryPool, CUmemPoolProps, CUstream, P, enum

ENTRIES = [
    decl(
        "CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)",
        "cuDeviceGetDefaultMemPool",
        P(CUmemoryPool),
        CUdevice,
    ),
    decl(
        "CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)", "cuDeviceGetMemPool", P(CUmemoryPool), CUdevice
    ),
    decl(
        "CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)",
        "cuMemPoolCreate",
        P(CUmemoryPool),
        POINTER(CUmemPoolProps),
    ),
    decl("CUresult cuMemPoolDestroy(CUmemoryPool pool)", "cuMemPoolDestroy", CUmemoryPool),
    # From a given pool, not the device's current one: a PoolBuffer names its pool.
    decl(
        "CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)",
        "cuMemAllocFromPoolAsync",
        P(CUdeviceptr),
        c_size_t,
        CUmemoryPool,
        CUstream,
        allocates=1,
    ),
    decl(
        "CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)", "cuMemPoolTrimTo", CUmemoryPool, c_size_t
    ),
    # The value is an int for the REUSE_* attributes and a cuuint64_t for the others: a void * either way.
    decl(
        "CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)",
        "cuMemPoolSetAttribute",
        CUmemoryPool,
        enum,
        c_void_p,
    ),
    decl(
        "CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)",
        "cuMemPoolGetAttribute",
        CUmemoryPool,
        enum,
        c_void_p,
    ),
]
