"""Layer 0: every CUresult code of cuda.h, by name -- and every nvrtcResult code of nvrtc.h.

A driver call answers with a number. ``Result(2).name`` is ``"ERROR_OUT_OF_MEMORY"``; the C name is
``"CUDA_" + name``. The header check verifies that this enum holds *every* code cuda.h declares, with the
same value -- so a new driver release that adds codes shows up as a failing test, not as a mystery number.
Codes this table does not know (a newer driver) are still reported: see :func:`c_name`.
"""

from __future__ import annotations

from enum import IntEnum

from .constants import c_enum


@c_enum("CUresult", "CUDA_")
class Result(IntEnum):
    SUCCESS = 0
    ERROR_INVALID_VALUE = 1
    ERROR_OUT_OF_MEMORY = 2
    ERROR_NOT_INITIALIZED = 3
    ERROR_DEINITIALIZED = 4
    ERROR_PROFILER_DISABLED = 5
    ERROR_PROFILER_NOT_INITIALIZED = 6
    ERROR_PROFILER_ALREADY_STARTED = 7
    ERROR_PROFILER_ALREADY_STOPPED = 8
    ERROR_STUB_LIBRARY = 34
    ERROR_CALL_REQUIRES_NEWER_DRIVER = 36
    ERROR_DEVICE_UNAVAILABLE = 46
    ERROR_NO_DEVICE = 100
    ERROR_INVALID_DEVICE = 101
    ERROR_DEVICE_NOT_LICENSED = 102
    ERROR_INVALID_IMAGE = 200
    ERROR_INVALID_CONTEXT = 201
    ERROR_CONTEXT_ALREADY_CURRENT = 202
    ERROR_MAP_FAILED = 205
    ERROR_UNMAP_FAILED = 206
    ERROR_ARRAY_IS_MAPPED = 207
    ERROR_ALREADY_MAPPED = 208
    ERROR_NO_BINARY_FOR_GPU = 209
    ERROR_ALREADY_ACQUIRED = 210
    ERROR_NOT_MAPPED = 211
    ERROR_NOT_MAPPED_AS_ARRAY = 212
    ERROR_NOT_MAPPED_AS_POINTER = 213
    ERROR_ECC_UNCORRECTABLE = 214
    ERROR_UNSUPPORTED_LIMIT = 215
    ERROR_CONTEXT_ALREADY_IN_USE = 216
    ERROR_PEER_ACCESS_UNSUPPORTED = 217
    ERROR_INVALID_PTX = 218
    ERROR_INVALID_GRAPHICS_CONTEXT = 219
    ERROR_NVLINK_UNCORRECTABLE = 220
    ERROR_JIT_COMPILER_NOT_FOUND = 221
    ERROR_UNSUPPORTED_PTX_VERSION = 222
    ERROR_JIT_COMPILATION_DISABLED = 223
    ERROR_UNSUPPORTED_EXEC_AFFINITY = 224
    ERROR_UNSUPPORTED_DEVSIDE_SYNC = 225
    ERROR_CONTAINED = 226
    ERROR_INVALID_SOURCE = 300
    ERROR_FILE_NOT_FOUND = 301
    ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302
    ERROR_SHARED_OBJECT_INIT_FAILED = 303
    ERROR_OPERATING_SYSTEM = 304
    ERROR_INVALID_HANDLE = 400
    ERROR_ILLEGAL_STATE = 401
    ERROR_LOSSY_QUERY = 402
    ERROR_NOT_FOUND = 500
    ERROR_NOT_READY = 600
    ERROR_ILLEGAL_ADDRESS = 700
    ERROR_LAUNCH_OUT_OF_RESOURCES = 701
    ERROR_LAUNCH_TIMEOUT = 702
    ERROR_LAUNCH_INCOMPATIBLE_TEXTURING = 703
    ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
    ERROR_PEER_ACCESS_NOT_ENABLED = 705
    ERROR_PRIMARY_CONTEXT_ACTIVE = 708
    ERROR_CONTEXT_IS_DESTROYED = 709
    ERROR_ASSERT = 710
    ERROR_TOO_MANY_PEERS = 711
    ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
    ERROR_HOST_MEMORY_NOT_REGISTERED = 713
    ERROR_HARDWARE_STACK_ERROR = 714
    ERROR_ILLEGAL_INSTRUCTION = 715
    ERROR_MISALIGNED_ADDRESS = 716
    ERROR_INVALID_ADDRESS_SPACE = 717
    ERROR_INVALID_PC = 718
    ERROR_LAUNCH_FAILED = 719
    ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
    ERROR_TENSOR_MEMORY_LEAK = 721
    ERROR_NOT_PERMITTED = 800
    ERROR_NOT_SUPPORTED = 801
    ERROR_SYSTEM_NOT_READY = 802
    ERROR_SYSTEM_DRIVER_MISMATCH = 803
    ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804
    ERROR_MPS_CONNECTION_FAILED = 805
    ERROR_MPS_RPC_FAILURE = 806
    ERROR_MPS_SERVER_NOT_READY = 807
    ERROR_MPS_MAX_CLIENTS_REACHED = 808
    ERROR_MPS_MAX_CONNECTIONS_REACHED = 809
    ERROR_MPS_CLIENT_TERMINATED = 810
    ERROR_CDP_NOT_SUPPORTED = 811
    ERROR_CDP_VERSION_MISMATCH = 812
    ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    ERROR_STREAM_CAPTURE_INVALIDATED = 901
    ERROR_STREAM_CAPTURE_MERGE = 902
    ERROR_STREAM_CAPTURE_UNMATCHED = 903
    ERROR_STREAM_CAPTURE_UNJOINED = 904
    ERROR_STREAM_CAPTURE_ISOLATION = 905
    ERROR_STREAM_CAPTURE_IMPLICIT = 906
    ERROR_CAPTURED_EVENT = 907
    ERROR_STREAM_CAPTURE_WRONG_THREAD = 908
    ERROR_TIMEOUT = 909
    ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910
    ERROR_EXTERNAL_DEVICE = 911
    ERROR_INVALID_CLUSTER_SIZE = 912
    ERROR_FUNCTION_NOT_LOADED = 913
    ERROR_INVALID_RESOURCE_TYPE = 914
    ERROR_INVALID_RESOURCE_CONFIGURATION = 915
    ERROR_KEY_ROTATION = 916
    ERROR_UNKNOWN = 999


#: Codes after which this process can no longer use CUDA: every later call fails with the same code, in
#: every context -- a new one too. cuda.h says of each "the process must be terminated and relaunched"
#: (of ASSERT: the context "must be destroyed"); tests/cpu/test_errors.py reads that from the header.
STICKY: frozenset[Result] = frozenset(
    {
        Result.ERROR_ILLEGAL_ADDRESS,
        Result.ERROR_ASSERT,
        Result.ERROR_HARDWARE_STACK_ERROR,
        Result.ERROR_ILLEGAL_INSTRUCTION,
        Result.ERROR_MISALIGNED_ADDRESS,
        Result.ERROR_INVALID_ADDRESS_SPACE,
        Result.ERROR_INVALID_PC,
        Result.ERROR_LAUNCH_FAILED,
        Result.ERROR_TENSOR_MEMORY_LEAK,
        Result.ERROR_LAUNCH_TIMEOUT,  # the watchdog stopped a kernel
        Result.ERROR_CONTAINED,  # an error the hardware contained (e.g. on NVLink)
        Result.ERROR_EXTERNAL_DEVICE,  # an external device signalled an error
        Result.ERROR_MPS_CLIENT_TERMINATED,  # the MPS server terminated this client
    }
)


def c_name(code: int) -> str:
    """The cuda.h name of a CUresult, or a placeholder that keeps the number for unknown codes."""
    try:
        return "CUDA_" + Result(code).name
    except ValueError:
        return f"CUresult {code}"


# --- NVRTC's result codes: the same idea, another numbering ------------------------------------------
#: The C names of NvrtcResult members are this prefix plus the member name.
RESULT_PREFIX = "NVRTC_"


class NvrtcResult(IntEnum):
    """nvrtcResult: NVRTC's own result codes (not CUresult's -- the numbers overlap, the meanings do not)."""

    SUCCESS = 0
    ERROR_OUT_OF_MEMORY = 1
    ERROR_PROGRAM_CREATION_FAILURE = 2
    ERROR_INVALID_INPUT = 3
    ERROR_INVALID_PROGRAM = 4
    ERROR_INVALID_OPTION = 5
    ERROR_COMPILATION = 6
    ERROR_BUILTIN_OPERATION_FAILURE = 7
    ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8
    ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9
    ERROR_NAME_EXPRESSION_NOT_VALID = 10
    ERROR_INTERNAL_ERROR = 11
    ERROR_TIME_FILE_WRITE_FAILED = 12
    ERROR_NO_PCH_CREATE_ATTEMPTED = 13  # CUDA 12.8: precompiled headers
    ERROR_PCH_CREATE_HEAP_EXHAUSTED = 14
    ERROR_PCH_CREATE = 15
    ERROR_CANCELLED = 16
    ERROR_TIME_TRACE_FILE_WRITE_FAILED = 17
    ERROR_BUSY = 18  # newer than CUDA 13.0's header; kept so a newer libnvrtc's code still has a name


#: Members a CUDA 13.0 nvrtc.h does not declare yet (the header check accepts their absence).
NEWER_RESULTS = frozenset({"ERROR_BUSY"})


def result_name(code: int) -> str:
    """``6`` -> ``'NVRTC_ERROR_COMPILATION'`` (a code this table does not know keeps its number)."""
    try:
        return RESULT_PREFIX + NvrtcResult(code).name
    except ValueError:
        return f"NVRTC result {code}"


__all__ = ["NEWER_RESULTS", "RESULT_PREFIX", "STICKY", "NvrtcResult", "Result", "c_name", "result_name"]
