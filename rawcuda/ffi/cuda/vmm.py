"""Layer 0, driver table section: virtual memory management -- address ranges and physical memory, separately.

cuMemAlloc hands out address and memory together, so a buffer can only grow by copying. VMM splits
them: reserve a large *virtual* range once (cuMemAddressReserve), create *physical* chunks
(cuMemCreate), map chunks into the range (cuMemMap) and grant access (cuMemSetAccess). Growing is mapping
one more chunk at the end. Sizes and offsets must be multiples of the allocation granularity.
"""

from __future__ import annotations

from ctypes import POINTER, c_size_t, c_ulonglong, c_void_p

from ..decl import decl
from ..types import (
    CUdeviceptr,
    CUmemAccessDesc,
    CUmemAllocationProp,
    CUmemGenericAllocationHandle,
    CUmemLocation,
    P,
    enum,
)

ENTRIES = [
    decl(
        "CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, "
        "CUmemAllocationGranularity_flags option)",
        "cuMemGetAllocationGranularity",
        P(c_size_t),
        POINTER(CUmemAllocationProp),
        enum,
    ),
    decl(
        "CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, "
        "unsigned long long flags)",
        "cuMemAddressReserve",
        P(CUdeviceptr),
        c_size_t,
        c_size_t,
        CUdeviceptr,
        c_ulonglong,
    ),
    decl("CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)", "cuMemAddressFree", CUdeviceptr, c_size_t),
    decl(
        "CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, "
        "const CUmemAllocationProp *prop, unsigned long long flags)",
        "cuMemCreate",
        P(CUmemGenericAllocationHandle),
        c_size_t,
        POINTER(CUmemAllocationProp),
        c_ulonglong,
        allocates=1,
    ),
    # Releasing a handle that is still mapped is fine: the memory lives until it is unmapped too.
    decl("CUresult cuMemRelease(CUmemGenericAllocationHandle handle)", "cuMemRelease", CUmemGenericAllocationHandle),
    decl(
        "CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, "
        "unsigned long long flags)",
        "cuMemMap",
        CUdeviceptr,
        c_size_t,
        c_size_t,
        CUmemGenericAllocationHandle,
        c_ulonglong,
    ),
    decl("CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)", "cuMemUnmap", CUdeviceptr, c_size_t),
    decl(
        "CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)",
        "cuMemSetAccess",
        CUdeviceptr,
        c_size_t,
        POINTER(CUmemAccessDesc),
        c_size_t,
    ),
    decl(
        "CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)",
        "cuMemGetAccess",
        P(c_ulonglong),
        POINTER(CUmemLocation),
        CUdeviceptr,
    ),
    decl(
        "CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)",
        "cuMemRetainAllocationHandle",
        P(CUmemGenericAllocationHandle),
        c_void_p,
    ),
]
