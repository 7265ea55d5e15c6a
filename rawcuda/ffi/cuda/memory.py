"""Layer 0, driver table section: memory -- device, pinned host and managed allocations, copies, memsets, queries.

Why so many ``_v2`` symbols? CUDA 3.2 widened device pointers and sizes to 64 bits. The old 32-bit
functions still exist under the plain names (``cuMemAlloc``), and cuda.h quietly ``#define``s the plain
names to the ``_v2`` ones. A binding that looks up ``cuMemAlloc`` by name gets the 32-bit ABI: it works
until the first allocation above 4 GiB, then corrupts addresses. The header check guards every row.

The synchronous copies and memsets here run on the *legacy default stream* (their ``_ptds`` twins,
which rawcuda does not bind, use the per-thread default stream instead).
"""

from __future__ import annotations

from ctypes import c_size_t, c_ubyte, c_uint, c_ushort, c_void_p

from ..decl import decl
from ..types import VOIDPP, CUdeviceptr, CUmemLocation, CUstream, P, enum

ENTRIES = [
    decl("CUresult cuMemGetInfo(size_t *free, size_t *total)", "cuMemGetInfo_v2", P(c_size_t), P(c_size_t)),
    # --- device memory
    decl(
        "CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)",
        "cuMemAlloc_v2",
        P(CUdeviceptr),
        c_size_t,
        allocates=1,
    ),
    decl("CUresult cuMemFree(CUdeviceptr dptr)", "cuMemFree_v2", CUdeviceptr),
    decl(
        "CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)",
        "cuMemGetAddressRange_v2",
        P(CUdeviceptr),
        P(c_size_t),
        CUdeviceptr,
    ),
    # Stream-ordered allocation from the device's memory pool: no device-wide synchronization.
    decl(
        "CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)",
        "cuMemAllocAsync",
        P(CUdeviceptr),
        c_size_t,
        CUstream,
        allocates=1,
    ),
    decl("CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)", "cuMemFreeAsync", CUdeviceptr, CUstream),
    # --- pinned (page-locked) host memory: the only host memory the copy engines read directly
    decl(
        "CUresult cuMemAllocHost(void **pp, size_t bytesize)",
        "cuMemAllocHost_v2",
        VOIDPP,
        c_size_t,
        allocates=1,
        memory="host",
    ),
    decl(
        "CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)",
        "cuMemHostAlloc",
        VOIDPP,
        c_size_t,
        c_uint,
        allocates=1,
        memory="host",
    ),
    decl("CUresult cuMemFreeHost(void *p)", "cuMemFreeHost", c_void_p),
    decl(
        "CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)",
        "cuMemHostGetDevicePointer_v2",
        P(CUdeviceptr),
        c_void_p,
        c_uint,
    ),
    decl("CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)", "cuMemHostGetFlags", P(c_uint), c_void_p),
    decl(
        "CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)",
        "cuMemHostRegister_v2",
        c_void_p,
        c_size_t,
        c_uint,
    ),
    decl("CUresult cuMemHostUnregister(void *p)", "cuMemHostUnregister", c_void_p),
    # --- managed (unified) memory: one address valid on host and device, migrated on page faults
    decl(
        "CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)",
        "cuMemAllocManaged",
        P(CUdeviceptr),
        c_size_t,
        c_uint,
        allocates=1,
    ),
    # CUDA 13: the location is a CUmemLocation passed *by value* (v1 took a CUdevice int).
    decl(
        "CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location, "
        "unsigned int flags, CUstream hStream)",
        "cuMemPrefetchAsync_v2",
        CUdeviceptr,
        c_size_t,
        CUmemLocation,
        c_uint,
        CUstream,
    ),
    decl(
        "CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)",
        "cuMemAdvise_v2",
        CUdeviceptr,
        c_size_t,
        enum,
        CUmemLocation,
    ),
    # --- pointer attributes: ask the driver what an address is
    decl(
        "CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)",
        "cuPointerGetAttribute",
        c_void_p,
        enum,
        CUdeviceptr,
    ),
    decl(
        "CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, "
        "void **data, CUdeviceptr ptr)",
        "cuPointerGetAttributes",
        c_uint,
        P(enum),
        VOIDPP,
        CUdeviceptr,
    ),
    # --- synchronous copies (legacy default stream; return once the copy is done for pageable memory)
    decl(
        "CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)",
        "cuMemcpyHtoD_v2",
        CUdeviceptr,
        c_void_p,
        c_size_t,
    ),
    decl(
        "CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)",
        "cuMemcpyDtoH_v2",
        c_void_p,
        CUdeviceptr,
        c_size_t,
    ),
    decl(
        "CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)",
        "cuMemcpyDtoD_v2",
        CUdeviceptr,
        CUdeviceptr,
        c_size_t,
    ),
    # Unified addressing: the driver works out the direction from the two addresses.
    decl(
        "CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)",
        "cuMemcpy",
        CUdeviceptr,
        CUdeviceptr,
        c_size_t,
    ),
    # --- asynchronous copies: truly async only from/to *pinned* host memory
    decl(
        "CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)",
        "cuMemcpyHtoDAsync_v2",
        CUdeviceptr,
        c_void_p,
        c_size_t,
        CUstream,
    ),
    decl(
        "CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)",
        "cuMemcpyDtoHAsync_v2",
        c_void_p,
        CUdeviceptr,
        c_size_t,
        CUstream,
    ),
    decl(
        "CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)",
        "cuMemcpyDtoDAsync_v2",
        CUdeviceptr,
        CUdeviceptr,
        c_size_t,
        CUstream,
    ),
    decl(
        "CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)",
        "cuMemcpyAsync",
        CUdeviceptr,
        CUdeviceptr,
        c_size_t,
        CUstream,
    ),
    # --- memsets: N counts *elements* of 1, 2 or 4 bytes, not bytes
    decl(
        "CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)",
        "cuMemsetD8_v2",
        CUdeviceptr,
        c_ubyte,
        c_size_t,
    ),
    decl(
        "CUresult cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N)",
        "cuMemsetD16_v2",
        CUdeviceptr,
        c_ushort,
        c_size_t,
    ),
    decl(
        "CUresult cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)",
        "cuMemsetD32_v2",
        CUdeviceptr,
        c_uint,
        c_size_t,
    ),
    decl(
        "CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)",
        "cuMemsetD8Async",
        CUdeviceptr,
        c_ubyte,
        c_size_t,
        CUstream,
    ),
    decl(
        "CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)",
        "cuMemsetD16Async",
        CUdeviceptr,
        c_ushort,
        c_size_t,
        CUstream,
    ),
    decl(
        "CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)",
        "cuMemsetD32Async",
        CUdeviceptr,
        c_uint,
        c_size_t,
        CUstream,
    ),
]
