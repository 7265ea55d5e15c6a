"""Layer 0: named constants for every enum value and flag rawcuda passes to the driver.

Why not just write ``cuStreamCreate(byref(s), 1)``? Because nobody reading that knows the ``1`` means
``CU_STREAM_NON_BLOCKING`` -- a flag that decides whether your stream races the legacy default stream.
Every number rawcuda sends has a name here, and each class records the C enum (or ``#define`` family)
it mirrors so that ``rawcuda.tools.headercheck`` can prove the value against cuda.h.

Member names drop the C prefix: ``StreamFlag.NON_BLOCKING`` is ``CU_STREAM_NON_BLOCKING``.
Flags are ``IntFlag`` (they combine with ``|``); choices are ``IntEnum``. Both pass straight to ctypes.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import TypeVar

#: The cuda.h this table was written against (``#define CUDA_VERSION 13000``).
HEADER_CUDA_VERSION = 13000

_E = TypeVar("_E", bound=type)

#: Every class below -> (the C type or ``#define`` family it mirrors, the prefix of its C names).
C_ENUMS: dict[type, tuple[str, str]] = {}


def c_enum(c_type: str, prefix: str) -> object:
    """Record which C enum (or ``#define`` family, c_type="#define") a Python enum mirrors."""

    def register(cls: _E) -> _E:
        C_ENUMS[cls] = (c_type, prefix)
        return cls

    return register


@c_enum("CUctx_flags", "CU_CTX_")
class CtxFlag(IntFlag):
    """cuCtxCreate / cuDevicePrimaryCtxSetFlags: how the host thread waits, and host mapping."""

    SCHED_AUTO = 0x00  # spin while the GPU has fewer contexts than CPU cores, else yield
    SCHED_SPIN = 0x01  # lowest latency, burns a CPU core while waiting
    SCHED_YIELD = 0x02  # yield the thread while waiting: kinder to other threads, more latency
    SCHED_BLOCKING_SYNC = 0x04  # sleep on a sync primitive: least CPU, most latency
    MAP_HOST = 0x08  # allow pinned host memory to be mapped into the device address space
    LMEM_RESIZE_TO_MAX = 0x10  # keep local memory at its high-water mark after big kernels
    SYNC_MEMOPS = 0x80  # make synchronous memory ops of this context always synchronize


@c_enum("CUstream_flags", "CU_STREAM_")
class StreamFlag(IntFlag):
    DEFAULT = 0x0  # synchronizes with the legacy default stream (stream 0)
    NON_BLOCKING = 0x1  # does not: faster, but races synchronous cuMemcpy* on stream 0


@c_enum("CUevent_flags", "CU_EVENT_")
class EventFlag(IntFlag):
    DEFAULT = 0x0
    BLOCKING_SYNC = 0x1  # cuEventSynchronize sleeps instead of spinning
    DISABLE_TIMING = 0x2  # cheaper events for pure ordering; cuEventElapsedTime refuses them
    INTERPROCESS = 0x4  # shareable across processes (needs DISABLE_TIMING)


@c_enum("CUevent_wait_flags", "CU_EVENT_WAIT_")
class EventWaitFlag(IntFlag):
    DEFAULT = 0x0


@c_enum("#define", "CU_MEMHOSTALLOC_")
class HostAllocFlag(IntFlag):
    """cuMemHostAlloc: pinned (page-locked) host memory the copy engines can DMA from directly."""

    DEFAULT = 0x00  # not a cuda.h name: "no flags"
    PORTABLE = 0x01  # pinned for every context, not just the current one
    DEVICEMAP = 0x02  # also map it into the device address space (zero-copy)
    WRITECOMBINED = 0x04  # fast for the host to write and the GPU to read; very slow for the host to read


@c_enum("#define", "CU_MEMHOSTREGISTER_")
class HostRegisterFlag(IntFlag):
    DEFAULT = 0x00  # not a cuda.h name: "no flags"
    PORTABLE = 0x01
    DEVICEMAP = 0x02
    IOMEMORY = 0x04
    READ_ONLY = 0x08


@c_enum("CUmemAttach_flags", "CU_MEM_ATTACH_")
class MemAttachFlag(IntFlag):
    """cuMemAllocManaged: which streams may touch the managed range."""

    GLOBAL = 0x1  # any stream on any device
    HOST = 0x2  # the host; devices only after cuStreamAttachMemAsync
    SINGLE = 0x4  # one stream (with cuStreamAttachMemAsync)


@c_enum("CUmemorytype", "CU_MEMORYTYPE_")
class MemoryType(IntEnum):
    HOST = 0x01
    DEVICE = 0x02
    ARRAY = 0x03
    UNIFIED = 0x04


@c_enum("CUmem_advise", "CU_MEM_ADVISE_")
class MemAdvise(IntEnum):
    SET_READ_MOSTLY = 1
    UNSET_READ_MOSTLY = 2
    SET_PREFERRED_LOCATION = 3
    UNSET_PREFERRED_LOCATION = 4
    SET_ACCESSED_BY = 5
    UNSET_ACCESSED_BY = 6


@c_enum("CUmemLocationType", "CU_MEM_LOCATION_TYPE_")
class MemLocationType(IntEnum):
    INVALID = 0x0
    DEVICE = 0x1
    HOST = 0x2
    HOST_NUMA = 0x3
    HOST_NUMA_CURRENT = 0x4


@c_enum("CUmemAllocationType", "CU_MEM_ALLOCATION_TYPE_")
class MemAllocationType(IntEnum):
    INVALID = 0x0
    PINNED = 0x1  # physical device memory that stays put (VMM's only kind for device memory)


@c_enum("CUmemAllocationHandleType", "CU_MEM_HANDLE_TYPE_")
class MemHandleType(IntFlag):
    NONE = 0x0
    POSIX_FILE_DESCRIPTOR = 0x1


@c_enum("CUmemPool_attribute", "CU_MEMPOOL_ATTR_")
class MemPoolAttribute(IntEnum):
    """What cuMemPoolGetAttribute / SetAttribute read and write (value type: int for REUSE_*, else cuuint64_t)."""

    REUSE_FOLLOW_EVENT_DEPENDENCIES = 1
    REUSE_ALLOW_OPPORTUNISTIC = 2
    REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3
    RELEASE_THRESHOLD = 4  # bytes the pool keeps reserved at a synchronization before it releases memory
    RESERVED_MEM_CURRENT = 5  # bytes of device memory the pool holds now
    RESERVED_MEM_HIGH = 6
    USED_MEM_CURRENT = 7  # bytes of it handed out to allocations now
    USED_MEM_HIGH = 8


@c_enum("CUmemAccess_flags", "CU_MEM_ACCESS_FLAGS_")
class MemAccessFlag(IntEnum):
    PROT_NONE = 0x0
    PROT_READ = 0x1
    PROT_READWRITE = 0x3


@c_enum("CUmemAllocationGranularity_flags", "CU_MEM_ALLOC_GRANULARITY_")
class MemGranularity(IntEnum):
    MINIMUM = 0x0
    RECOMMENDED = 0x1


@c_enum("CUjit_option", "CU_JIT_")
class JitOption(IntEnum):
    """cuModuleLoadDataEx / cuLinkCreate options. Values are passed *by value, cast to void pointers*."""

    MAX_REGISTERS = 0
    THREADS_PER_BLOCK = 1
    WALL_TIME = 2  # out: float milliseconds the JIT took
    INFO_LOG_BUFFER = 3
    INFO_LOG_BUFFER_SIZE_BYTES = 4  # in: capacity; out: bytes written
    ERROR_LOG_BUFFER = 5
    ERROR_LOG_BUFFER_SIZE_BYTES = 6  # in: capacity; out: bytes written
    OPTIMIZATION_LEVEL = 7
    TARGET_FROM_CUCONTEXT = 8
    TARGET = 9
    FALLBACK_STRATEGY = 10
    GENERATE_DEBUG_INFO = 11
    LOG_VERBOSE = 12
    GENERATE_LINE_INFO = 13
    CACHE_MODE = 14
    FAST_COMPILE = 16


@c_enum("CUjitInputType", "CU_JIT_INPUT_")
class JitInputType(IntEnum):
    CUBIN = 0
    PTX = 1
    FATBINARY = 2
    OBJECT = 3
    LIBRARY = 4


@c_enum("CUfunc_cache", "CU_FUNC_CACHE_")
class FuncCache(IntEnum):
    PREFER_NONE = 0x00
    PREFER_SHARED = 0x01
    PREFER_L1 = 0x02
    PREFER_EQUAL = 0x03


@c_enum("CUlimit", "CU_LIMIT_")
class Limit(IntEnum):
    STACK_SIZE = 0x00
    PRINTF_FIFO_SIZE = 0x01
    MALLOC_HEAP_SIZE = 0x02
    PERSISTING_L2_CACHE_SIZE = 0x06


@c_enum("CUstreamCaptureMode", "CU_STREAM_CAPTURE_MODE_")
class StreamCaptureMode(IntEnum):
    GLOBAL = 0  # unsafe calls (e.g. synchronous cuMemcpy) from *any* thread invalidate the capture
    THREAD_LOCAL = 1  # only from this thread
    RELAXED = 2  # nothing is checked


@c_enum("CUstreamCaptureStatus", "CU_STREAM_CAPTURE_STATUS_")
class StreamCaptureStatus(IntEnum):
    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2


@c_enum("CUgraphInstantiate_flags", "CUDA_GRAPH_INSTANTIATE_FLAG_")
class GraphInstantiateFlag(IntFlag):
    NONE = 0  # not a cuda.h name: "no flags"
    AUTO_FREE_ON_LAUNCH = 1
    UPLOAD = 2
    DEVICE_LAUNCH = 4
    USE_NODE_PRIORITY = 8


@c_enum("CUgraphExecUpdateResult", "CU_GRAPH_EXEC_UPDATE_")
class GraphExecUpdateResult(IntEnum):
    SUCCESS = 0x0
    ERROR = 0x1
    ERROR_TOPOLOGY_CHANGED = 0x2
    ERROR_NODE_TYPE_CHANGED = 0x3
    ERROR_FUNCTION_CHANGED = 0x4
    ERROR_PARAMETERS_CHANGED = 0x5
    ERROR_NOT_SUPPORTED = 0x6
    ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7
    ERROR_ATTRIBUTES_CHANGED = 0x8


@c_enum("CUgraphNodeType", "CU_GRAPH_NODE_TYPE_")
class GraphNodeType(IntEnum):
    """What a graph node does (cuGraphNodeGetType)."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    HOST = 3
    GRAPH = 4
    EMPTY = 5
    WAIT_EVENT = 6
    EVENT_RECORD = 7
    EXT_SEMAS_SIGNAL = 8
    EXT_SEMAS_WAIT = 9
    MEM_ALLOC = 10
    MEM_FREE = 11
    BATCH_MEM_OP = 12
    CONDITIONAL = 13


@c_enum("CUlaunchAttributeID", "CU_LAUNCH_ATTRIBUTE_")
class LaunchAttributeID(IntEnum):
    IGNORE = 0
    COOPERATIVE = 2  # every block resident at once: grid-wide synchronization is allowed
    CLUSTER_DIMENSION = 4  # thread-block clusters of (x, y, z) blocks (compute capability 9.0)
    CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
    PROGRAMMATIC_STREAM_SERIALIZATION = 6  # programmatic dependent launch: may start before the previous kernel ends
    PROGRAMMATIC_EVENT = 7  # an event the blocks trigger (cudaTriggerProgrammaticLaunchCompletion)
    PRIORITY = 8
    LAUNCH_COMPLETION_EVENT = 12  # an event fired once every block of the launch has started


@c_enum("CUtensorMapDataType", "CU_TENSOR_MAP_DATA_TYPE_")
class TensorMapDataType(IntEnum):
    """The element types a tensor map (TMA, compute capability 9.0) moves; the packed sub-byte ones are left out."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12


@c_enum("CUtensorMapInterleave", "CU_TENSOR_MAP_")
class TensorMapInterleave(IntEnum):
    INTERLEAVE_NONE = 0
    INTERLEAVE_16B = 1  # NC/8HWC8 layouts
    INTERLEAVE_32B = 2


@c_enum("CUtensorMapSwizzle", "CU_TENSOR_MAP_")
class TensorMapSwizzle(IntEnum):
    """How a tile is spread over shared-memory banks as it lands (to read it later without bank conflicts)."""

    SWIZZLE_NONE = 0
    SWIZZLE_32B = 1  # 16-byte chunks swizzled within a 32-byte span
    SWIZZLE_64B = 2
    SWIZZLE_128B = 3


@c_enum("CUtensorMapL2promotion", "CU_TENSOR_MAP_L2_PROMOTION_")
class TensorMapL2Promotion(IntEnum):
    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


@c_enum("CUtensorMapFloatOOBfill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_")
class TensorMapOobFill(IntEnum):
    NONE = 0  # elements outside the tensor read as zero
    NAN_REQUEST_ZERO_FMA = 1  # ... as a NaN that FMA treats as zero (floating-point types only)


@c_enum("CUdriverProcAddress_flags", "CU_GET_PROC_ADDRESS_")
class ProcAddressFlag(IntFlag):
    DEFAULT = 0
    LEGACY_STREAM = 1 << 0
    PER_THREAD_DEFAULT_STREAM = 1 << 1


@c_enum("CUdriverProcAddressQueryResult", "CU_GET_PROC_ADDRESS_")
class ProcAddressQueryResult(IntEnum):
    SUCCESS = 0
    SYMBOL_NOT_FOUND = 1
    VERSION_NOT_SUFFICIENT = 2


#: ``#define`` constants that are not flag families. Stream handles with a special meaning:
#: passing 0 as a CUstream means the legacy default stream, which *implicitly synchronizes* with every
#: blocking stream of the context; CU_STREAM_PER_THREAD is a per-thread default stream that does not.
STREAM_LEGACY = 0x1
STREAM_PER_THREAD = 0x2
#: The handles that are names, not pointers: nothing is read at their "address".
DEFAULT_STREAMS = frozenset({STREAM_LEGACY, STREAM_PER_THREAD})
#: As a CUstream argument, NULL and CU_STREAM_LEGACY both name the legacy default stream of the current context.
LEGACY_STREAM_HANDLES = frozenset({0, STREAM_LEGACY})
#: 0 as a *stream number* in the CUDA Array Interface or DLPack's ``stream=``: forbidden by both, as it could
#: mean either default stream (they say 1 or 2 instead).
STREAM_AMBIGUOUS = 0
#: One past the largest address: host and device pointers (a CUstream, a CUdeviceptr) are 64 bits on the
#: platforms CUDA supports, and the driver would read a larger number modulo 2^64 -- another address.
ADDRESS_LIMIT = 1 << 64
DEVICE_CPU = -1  # a CUdevice meaning "the host" in prefetch/advise on older APIs
IPC_HANDLE_SIZE = 64

C_DEFINES: dict[str, int] = {
    "CU_STREAM_LEGACY": STREAM_LEGACY,
    "CU_STREAM_PER_THREAD": STREAM_PER_THREAD,
    "CU_DEVICE_CPU": DEVICE_CPU,
    "CU_IPC_HANDLE_SIZE": IPC_HANDLE_SIZE,
    "CUDA_VERSION": HEADER_CUDA_VERSION,
}

#: Members above that are *not* cuda.h names (documented "no flags" zeros); the header check skips them.
NOT_IN_HEADER: frozenset[str] = frozenset(
    {"HostAllocFlag.DEFAULT", "HostRegisterFlag.DEFAULT", "GraphInstantiateFlag.NONE"}
)
