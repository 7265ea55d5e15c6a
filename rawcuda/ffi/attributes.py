"""Layer 0: the attribute numbers you can ask the driver about -- of a device, a kernel, a pointer.

``cuDeviceGetAttribute(&value, attribute, device)`` takes one of :class:`DeviceAttribute`: the number of
multiprocessors, the compute capability, whether managed memory can be touched concurrently, and a hundred
more. :class:`FunctionAttribute` does the same for a kernel (registers, shared memory, the largest block)
and :class:`PointerAttribute` for an address (which context, host or device, managed?). Like every enum of
layer 0, each records the C enum it mirrors, and ``rawcuda.tools.headercheck`` proves the values.
"""

from __future__ import annotations

from enum import IntEnum

from .constants import c_enum


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
    CLUSTER_SIZE_MUST_BE_SET = 10  # compiled with __cluster_dims__ or .explicitcluster: a launch must give one
    REQUIRED_CLUSTER_WIDTH = 11  # the compiled-in cluster dimensions (__cluster_dims__), 0 where none
    REQUIRED_CLUSTER_HEIGHT = 12
    REQUIRED_CLUSTER_DEPTH = 13
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # set to 1 before launching clusters above the portable 8 blocks
    CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15


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


__all__ = ["DeviceAttribute", "FunctionAttribute", "PointerAttribute"]
