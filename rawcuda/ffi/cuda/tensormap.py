"""Layer 0, driver table section: tensor maps -- the descriptors Hopper's Tensor Memory Accelerator (TMA) reads.

A tensor map is 128 opaque bytes describing a tile of a tensor in global memory: its address, extents and
strides, the tile ("box") one copy moves, and how the tile lands in shared memory (swizzle). The host encodes
it once; a kernel takes it by value as a ``__grid_constant__`` parameter (``.param .align 64 .b8 x[128]``)
and hands it to ``cp.async.bulk.tensor``. The rules the driver checks are in cuda.h above the prototype;
rawcuda.extras.tensormap checks them first, with a message naming the parameter.
"""

from __future__ import annotations

from ctypes import c_void_p

from ..decl import decl
from ..types import P, cuuint32_t, cuuint64_t, enum

ENTRIES = [
    decl(
        "CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, "
        "cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides, "
        "const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, "
        "CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)",
        "cuTensorMapEncodeTiled",
        c_void_p,  # CUtensorMap *: 128 bytes at a 64-byte-aligned address, which the caller provides
        enum,
        cuuint32_t,
        c_void_p,
        P(cuuint64_t),
        P(cuuint64_t),
        P(cuuint32_t),
        P(cuuint32_t),
        enum,
        enum,
        enum,
        enum,
    ),
    decl(
        "CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)",
        "cuTensorMapReplaceAddress",
        c_void_p,
        c_void_p,
    ),
]
