"""Layer 0: THE driver table -- every libcuda function rawcuda declares, by hand.

One row per function (see :class:`~rawcuda.ffi.decl.Decl`): the C prototype from cuda.h, the symbol
libcuda really exports, and the ctypes type of each argument. The rows are grouped by topic in the files
beside this one, in the order a program meets them::

    init     cuInit, versions, error strings, cuGetProcAddress
    device   counting devices, names, attributes, memory size
    context  primary context, created contexts, the context stack, limits
    memory   device / pinned / managed memory, copies, memsets, pointer attributes, prefetch & advise
    mempool  stream-ordered memory pools: the default pool, new pools, their attributes, trimming
    module   PTX / cubin / fatbin modules, functions and their attributes, the JIT linker
    launch   cuLaunchKernel and friends, host functions, occupancy
    stream   streams and events
    graph    stream capture, graphs, executable graphs
    tensormap  TMA tensor-map descriptors (Hopper)
    vmm      virtual memory management (reserve / create / map / set access)

Most rows are called by rawcuda's classes. The others are listed in :data:`NOT_CALLED_BY_RAWCUDA`, each
with the reason it is declared anyway: a tutorial or a test calls it through ``cu``, or it completes a
topic (the JIT linker, cooperative launches) so that its prototype and structs are proven against cuda.h
before anyone builds on them. A CPU test keeps that list true in both directions.

Nothing here calls the driver. :mod:`rawcuda.checked` binds the rows to libcuda, lazily, and
``python -m rawcuda.tools.headercheck`` proves them against cuda.h.
"""

from __future__ import annotations

from ..decl import Decl, index
from . import context, device, graph, init, launch, memory, mempool, module, stream, tensormap, vmm

SECTIONS: dict[str, list[Decl]] = {
    "init": init.ENTRIES,
    "device": device.ENTRIES,
    "context": context.ENTRIES,
    "memory": memory.ENTRIES,
    "mempool": mempool.ENTRIES,
    "module": module.ENTRIES,
    "launch": launch.ENTRIES,
    "stream": stream.ENTRIES,
    "graph": graph.ENTRIES,
    "tensormap": tensormap.ENTRIES,
    "vmm": vmm.ENTRIES,
}

#: Header name -> declaration. ``TABLE["cuMemAlloc"].symbol == "cuMemAlloc_v2"``.
TABLE: dict[str, Decl] = index((row for rows in SECTIONS.values() for row in rows), "driver", frozenset({"CUresult"}))

_FOR_TUTORIALS = "called through cu by a tutorial or a test"
_TOPIC = "completes its topic; proven against cuda.h so that code built on it starts from a checked row"

#: Rows that no rawcuda class calls, and why each is declared all the same.
NOT_CALLED_BY_RAWCUDA: dict[str, str] = {
    "cuGetErrorName": "rawcuda names codes from its own Result table, complete and proven against cuda.h",
    "cuMemcpy": _TOPIC + " (the unified-addressing copy; rawcuda's copies say which way they go)",
    "cuMemHostGetFlags": _FOR_TUTORIALS + " (tutorial 07b reads a pinned buffer's flags)",
    "cuMemGetAccess": _FOR_TUTORIALS + " (the VMM tests read back what cuMemSetAccess granted)",
    "cuModuleLoadData": _TOPIC + " (rawcuda loads with cuModuleLoadDataEx, to get the JIT log)",
    "cuModuleLoadFatBinary": _TOPIC,
    "cuModuleGetGlobal": _TOPIC + " (__device__ / __constant__ variables)",
    "cuFuncSetCacheConfig": _TOPIC,
    "cuFuncGetModule": _TOPIC,
    "cuLinkCreate": _TOPIC + " (the JIT linker: several PTX/cubin images into one)",
    "cuLinkAddData": _TOPIC,
    "cuLinkAddFile": _TOPIC,
    "cuLinkComplete": _TOPIC,
    "cuLinkDestroy": _TOPIC,
    "cuLaunchKernel": _FOR_TUTORIALS
    + " (the 11-argument launch the tutorials build by hand; rawcuda's launch path calls cuLaunchKernelEx, whose"
    " 4 arguments cost ctypes less to convert: function.py)",
    "cuLaunchCooperativeKernel": _TOPIC + " (grid-wide synchronization)",
    "cuOccupancyMaxPotentialBlockSize": _TOPIC,
    "cuDeviceCanAccessPeer": _TOPIC + " (peer access between GPUs)",
    "cuDevicePrimaryCtxSetFlags": _TOPIC,
    "cuDevicePrimaryCtxReset": _TOPIC,
    "cuCtxGetId": _TOPIC,
    "cuStreamGetId": _TOPIC,
    "cuMemAllocHost": _TOPIC + " (rawcuda pins with cuMemHostAlloc, which takes flags)",
    "cuMemHostRegister": _TOPIC + " (pinning memory that numpy allocated)",
    "cuMemHostUnregister": _TOPIC,
    "cuPointerGetAttributes": _TOPIC,
    "cuMemcpyAsync": _TOPIC + " (unified-addressing copies)",
    "cuTensorMapReplaceAddress": _TOPIC + " (the same tensor map over another buffer)",
    "cuGraphClone": _TOPIC,
    "cuGraphDebugDotPrint": _TOPIC,
    "cuMemRetainAllocationHandle": _TOPIC,
    "cuDeviceGetMemPool": _TOPIC + " (the pool cuMemAllocAsync uses now, which may be set; MemoryPool.default asks"
    " for the device's own)",
}

__all__ = ["NOT_CALLED_BY_RAWCUDA", "SECTIONS", "TABLE", "Decl"]
