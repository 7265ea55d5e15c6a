"""Layer 0, driver table section: launching kernels, host callbacks in stream order, and occupancy.

``kernelParams`` is the heart of the manual glue: an array of N ``void*``, the i-th pointing at the
*value* of the i-th kernel argument (a pointer to the CUdeviceptr, a pointer to the int ...). The driver
copies the values during the call, so they only have to stay alive until cuLaunchKernel returns.
"""

from __future__ import annotations

from ctypes import POINTER, c_int, c_size_t, c_uint, c_void_p

from ..decl import decl
from ..types import VOIDPP, CUfunction, CUhostFn, CUlaunchConfig, CUoccupancyB2DSize, CUstream, P

ENTRIES = [
    decl(
        "CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, "
        "unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, "
        "unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)",
        "cuLaunchKernel",
        CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CUstream,
        VOIDPP,
        VOIDPP,
    ),
    decl(
        "CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)",
        "cuLaunchKernelEx",
        POINTER(CUlaunchConfig),
        CUfunction,
        VOIDPP,
        VOIDPP,
    ),
    # All blocks resident at once, so they may synchronize grid-wide (cooperative groups).
    decl(
        "CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, "
        "unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, "
        "unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)",
        "cuLaunchCooperativeKernel",
        CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CUstream,
        VOIDPP,
    ),
    # Runs a host function in stream order. It runs on a driver thread and must not call CUDA.
    decl(
        "CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)",
        "cuLaunchHostFunc",
        CUstream,
        CUhostFn,
        c_void_p,
    ),
    decl(
        "CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, "
        "int blockSize, size_t dynamicSMemSize)",
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        P(c_int),
        CUfunction,
        c_int,
        c_size_t,
    ),
    # Thread-block clusters (compute capability 9.0): how many clusters of config's shape fit on the GPU at
    # once (0: the shape cannot launch), and the largest cluster the kernel could launch with.
    decl(
        "CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)",
        "cuOccupancyMaxActiveClusters",
        P(c_int),
        CUfunction,
        POINTER(CUlaunchConfig),
    ),
    decl(
        "CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)",
        "cuOccupancyMaxPotentialClusterSize",
        P(c_int),
        CUfunction,
        POINTER(CUlaunchConfig),
    ),
    decl(
        "CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func, "
        "CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit)",
        "cuOccupancyMaxPotentialBlockSize",
        P(c_int),
        P(c_int),
        CUfunction,
        CUoccupancyB2DSize,
        c_size_t,
        c_int,
    ),
]
