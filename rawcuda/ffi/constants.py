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


@c_enum("CUpointer_attribute", "CU_POINTER_ATTRIBUTE_")
class PointerAttribute(IntEnum):
    CONTEXT = 1
    MEMORY_TYPE = 2
    DEVICE_POINTER = 3
    HOST_POINTER = 4
    SYNC_MEMOPS = 6
    BUFFER_ID = 7
    IS_MANAGED = 8
    DEVICE_ORDINAL = 9
    RANGE_START_ADDR = 11
    RANGE_SIZE = 12
    MAPPED = 13


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


@c_enum("CUfunction_attribute", "CU_FUNC_ATTRIBUTE_")
class FunctionAttribute(IntEnum):
    MAX_THREADS_PER_BLOCK = 0
    SHARED_SIZE_BYTES = 1  # static shared memory
    CONST_SIZE_BYTES = 2
    LOCAL_SIZE_BYTES = 3  # per-thread local memory: non-zero often means register spills
    NUM_REGS = 4
    PTX_VERSION = 5  # major*10+minor of the PTX *target* the function was compiled for
    BINARY_VERSION = 6
    CACHE_MODE_CA = 7
    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # must be raised before launching with > 48 KiB dynamic shared
    PREFERRED_SHARED_MEMORY_CARVEOUT = 9


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
    COOPERATIVE = 2
    CLUSTER_DIMENSION = 4
    PRIORITY = 8


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


@c_enum("CUdevice_attribute", "CU_DEVICE_ATTRIBUTE_")
class DeviceAttribute(IntEnum):
    """cuDeviceGetAttribute: every compute-relevant attribute (texture/surface limits left out)."""

    MAX_THREADS_PER_BLOCK = 1
    MAX_BLOCK_DIM_X = 2
    MAX_BLOCK_DIM_Y = 3
    MAX_BLOCK_DIM_Z = 4
    MAX_GRID_DIM_X = 5
    MAX_GRID_DIM_Y = 6
    MAX_GRID_DIM_Z = 7
    MAX_SHARED_MEMORY_PER_BLOCK = 8
    TOTAL_CONSTANT_MEMORY = 9
    WARP_SIZE = 10
    MAX_PITCH = 11
    MAX_REGISTERS_PER_BLOCK = 12
    CLOCK_RATE = 13
    MULTIPROCESSOR_COUNT = 16
    KERNEL_EXEC_TIMEOUT = 17
    INTEGRATED = 18
    CAN_MAP_HOST_MEMORY = 19
    COMPUTE_MODE = 20
    CONCURRENT_KERNELS = 31
    ECC_ENABLED = 32
    PCI_BUS_ID = 33
    PCI_DEVICE_ID = 34
    MEMORY_CLOCK_RATE = 36
    GLOBAL_MEMORY_BUS_WIDTH = 37
    L2_CACHE_SIZE = 38
    MAX_THREADS_PER_MULTIPROCESSOR = 39
    ASYNC_ENGINE_COUNT = 40
    UNIFIED_ADDRESSING = 41
    PCI_DOMAIN_ID = 50
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76
    STREAM_PRIORITIES_SUPPORTED = 78
    GLOBAL_L1_CACHE_SUPPORTED = 79
    LOCAL_L1_CACHE_SUPPORTED = 80
    MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
    MAX_REGISTERS_PER_MULTIPROCESSOR = 82
    MANAGED_MEMORY = 83
    MULTI_GPU_BOARD = 84
    MULTI_GPU_BOARD_GROUP_ID = 85
    HOST_NATIVE_ATOMIC_SUPPORTED = 86
    SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO = 87
    PAGEABLE_MEMORY_ACCESS = 88
    CONCURRENT_MANAGED_ACCESS = 89
    COMPUTE_PREEMPTION_SUPPORTED = 90
    CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91
    COOPERATIVE_LAUNCH = 95
    COOPERATIVE_MULTI_DEVICE_LAUNCH = 96
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    CAN_FLUSH_REMOTE_WRITES = 98
    HOST_REGISTER_SUPPORTED = 99
    PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES = 100
    DIRECT_MANAGED_MEM_ACCESS_FROM_HOST = 101
    VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
    HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103
    MAX_BLOCKS_PER_MULTIPROCESSOR = 106
    GENERIC_COMPRESSION_SUPPORTED = 107
    MAX_PERSISTING_L2_CACHE_SIZE = 108
    MAX_ACCESS_POLICY_WINDOW_SIZE = 109
    GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110
    RESERVED_SHARED_MEMORY_PER_BLOCK = 111
    SPARSE_CUDA_ARRAY_SUPPORTED = 112
    READ_ONLY_HOST_REGISTER_SUPPORTED = 113
    TIMELINE_SEMAPHORE_INTEROP_SUPPORTED = 114
    MEMORY_POOLS_SUPPORTED = 115
    GPU_DIRECT_RDMA_SUPPORTED = 116
    GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS = 117
    GPU_DIRECT_RDMA_WRITES_ORDERING = 118
    MEMPOOL_SUPPORTED_HANDLE_TYPES = 119
    CLUSTER_LAUNCH = 120
    DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED = 121
    CAN_USE_64_BIT_STREAM_MEM_OPS = 122
    CAN_USE_STREAM_WAIT_VALUE_NOR = 123
    DMA_BUF_SUPPORTED = 124
    IPC_EVENT_SUPPORTED = 125
    MEM_SYNC_DOMAIN_COUNT = 126
    TENSOR_MAP_ACCESS_SUPPORTED = 127
    HANDLE_TYPE_FABRIC_SUPPORTED = 128
    UNIFIED_FUNCTION_POINTERS = 129
    NUMA_CONFIG = 130
    NUMA_ID = 131
    MULTICAST_SUPPORTED = 132
    MPS_ENABLED = 133
    HOST_NUMA_ID = 134
    MEM_DECOMPRESS_ALGORITHM_MASK = 136
    MEM_DECOMPRESS_MAXIMUM_LENGTH = 137
    GPU_PCI_DEVICE_ID = 139
    GPU_PCI_SUBSYSTEM_ID = 140
    HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 141
    HOST_NUMA_MEMORY_POOLS_SUPPORTED = 142
    HOST_NUMA_MULTINODE_IPC_SUPPORTED = 143
    HOST_MEMORY_POOLS_SUPPORTED = 144
    HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 145
    HOST_ALLOC_DMA_BUF_SUPPORTED = 146
    ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED = 147


#: ``#define`` constants that are not flag families. Stream handles with a special meaning:
#: passing 0 as a CUstream means the legacy default stream, which *implicitly synchronizes* with every
#: blocking stream of the context; CU_STREAM_PER_THREAD is a per-thread default stream that does not.
STREAM_LEGACY = 0x1
STREAM_PER_THREAD = 0x2
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
