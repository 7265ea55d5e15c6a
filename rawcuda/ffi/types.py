"""Layer 0: the C types of cuda.h, spelled in ctypes.

Why a file just for types? Because every wrong answer a ctypes binding ever gave comes from a type that
*looks* right: ``c_void_p`` arithmetic that turns an address into ``None``, a ``restype`` left at its
default ``c_int`` that chops a 64-bit pointer in half, a ``long`` that is 4 bytes on Windows. Here each
typedef of cuda.h gets exactly one ctypes spelling, and ``rawcuda.tools.headercheck`` proves the sizes
against the header (and, with a C compiler, every struct field offset).

The rules (docs/architecture.md, "Layer 0"):

* ``CUdeviceptr`` is an unsigned 64-bit integer, never ``c_void_p``: device addresses are numbers the
  host never dereferences, and ``c_void_p(0).value`` is ``None``, which breaks arithmetic.
* Opaque handles (``CUcontext``, ``CUstream`` …) are pointers to incomplete structs: ``c_void_p``.
* ``CUdevice`` is an ``int`` ordinal-like handle; ``size_t`` is ``c_size_t``.
* Enums are passed as C ``int`` (4 bytes); their values live in :mod:`rawcuda.ffi.constants`.

Each ``Structure`` names the C type it mirrors in ``_c_name_`` so the header check can find it.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    c_char,
    c_int,
    c_size_t,
    c_ubyte,
    c_uint,
    c_ulonglong,
    c_ushort,
    c_void_p,
)

# --- scalar typedefs ------------------------------------------------------------------------------
CUresult = c_int  # typedef enum cudaError_enum CUresult;  every driver call returns one
CUdevice = c_int  # typedef int CUdevice_v1; typedef CUdevice_v1 CUdevice;
CUdeviceptr = c_ulonglong  # typedef unsigned long long CUdeviceptr_v2 (on LP64)
CUmemGenericAllocationHandle = c_ulonglong  # typedef unsigned long long CUmemGenericAllocationHandle_v1
cuuint64_t = c_ulonglong  # typedef uint64_t cuuint64_t;
cuuint32_t = ctypes.c_uint32  # typedef uint32_t cuuint32_t;
size_t = c_size_t
enum = c_int  # every C enum parameter: 4 bytes, passed like an int

# --- opaque handles: `typedef struct CUxxx_st *CUxxx;` -----------------------------------------------
CUcontext = c_void_p
CUmodule = c_void_p
CUfunction = c_void_p
CUlibrary = c_void_p
CUkernel = c_void_p
CUstream = c_void_p
CUevent = c_void_p
CUgraph = c_void_p
CUgraphNode = c_void_p
CUgraphExec = c_void_p
CUlinkState = c_void_p
CUmemoryPool = c_void_p

# --- callbacks ------------------------------------------------------------------------------------
# typedef void (CUDA_CB *CUhostFn)(void *userData);
CUhostFn = CFUNCTYPE(None, c_void_p)
# typedef size_t (CUDA_CB *CUoccupancyB2DSize)(int blockSize);
CUoccupancyB2DSize = CFUNCTYPE(c_size_t, c_int)
# typedef void (CUDA_CB *CUstreamCallback)(CUstream hStream, CUresult status, void *userData);
CUstreamCallback = CFUNCTYPE(None, c_void_p, c_int, c_void_p)

# Pointer shorthands used by the declaration table: `P(CUdeviceptr)` reads like `CUdeviceptr *`.
P = POINTER
VOIDPP = POINTER(c_void_p)  # void ** : arrays of pointers (kernelParams, optionValues, out-pointers)


# --- structs passed by pointer or by value ---------------------------------------------------------
class CUuuid(Structure):
    """typedef struct CUuuid_st { char bytes[16]; } CUuuid;"""

    _c_name_ = "CUuuid"
    _fields_ = [("bytes", c_char * 16)]


class CUmemLocation(Structure):
    """Where memory lives: a device ordinal, the host, or a host NUMA node (passed *by value*)."""

    _c_name_ = "CUmemLocation"
    _fields_ = [("type", enum), ("id", c_int)]


class _AllocFlags(Structure):
    _c_name_ = "CUmemAllocationProp.allocFlags"
    _fields_ = [
        ("compressionType", c_ubyte),
        ("gpuDirectRDMACapable", c_ubyte),
        ("usage", c_ushort),
        ("reserved", c_ubyte * 4),
    ]


class CUmemAllocationProp(Structure):
    """What kind of physical memory cuMemCreate should make (virtual memory management)."""

    _c_name_ = "CUmemAllocationProp"
    _fields_ = [
        ("type", enum),
        ("requestedHandleTypes", enum),
        ("location", CUmemLocation),
        ("win32HandleMetaData", c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class CUmemPoolProps(Structure):
    """What cuMemPoolCreate makes: pinned device memory on one device, exportable as handleTypes allow."""

    _c_name_ = "CUmemPoolProps"
    _fields_ = [
        ("allocType", enum),
        ("handleTypes", enum),
        ("location", CUmemLocation),
        ("win32SecurityAttributes", c_void_p),
        ("maxSize", c_size_t),
        ("usage", c_ushort),
        ("reserved", c_ubyte * 54),
    ]


class CUmemAccessDesc(Structure):
    """Who may touch a mapped range, and how (cuMemSetAccess)."""

    _c_name_ = "CUmemAccessDesc"
    _fields_ = [("location", CUmemLocation), ("flags", enum)]


class CUctxCreateParams(Structure):
    """cuCtxCreate_v4's optional extras (execution affinity, CIG). NULL means 'none of them'."""

    _c_name_ = "CUctxCreateParams"
    _fields_ = [
        ("execAffinityParams", c_void_p),
        ("numExecAffinityParams", c_int),
        ("cigParams", c_void_p),
    ]


class CUDA_KERNEL_NODE_PARAMS(Structure):
    """A kernel launch frozen into a graph node: the same fields as cuLaunchKernel, plus kern/ctx."""

    _c_name_ = "CUDA_KERNEL_NODE_PARAMS"
    _fields_ = [
        ("func", CUfunction),
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("kernelParams", VOIDPP),
        ("extra", VOIDPP),
        ("kern", CUkernel),
        ("ctx", CUcontext),
    ]


class CUgraphExecUpdateResultInfo(Structure):
    """Why cuGraphExecUpdate refused an update, and at which node."""

    _c_name_ = "CUgraphExecUpdateResultInfo"
    _fields_ = [("result", enum), ("errorNode", CUgraphNode), ("errorFromNode", CUgraphNode)]


EDGE_DATA_RESERVED = 5  # `unsigned char reserved[5]`


class CUgraphEdgeData(Structure):
    """What kind of dependency a graph edge is: full completion (all zero) or, e.g., a programmatic launch's port."""

    _c_name_ = "CUgraphEdgeData"
    _fields_ = [
        ("from_port", ctypes.c_ubyte),
        ("to_port", ctypes.c_ubyte),
        ("type", ctypes.c_ubyte),
        ("reserved", ctypes.c_ubyte * EDGE_DATA_RESERVED),
    ]


LAUNCH_ATTRIBUTE_VALUE_BYTES = 64  # cuda.h pads CUlaunchAttributeValue to 64 bytes
LAUNCH_ATTRIBUTE_ID_PAD = 8 - ctypes.sizeof(enum)  # `char pad[8 - sizeof(CUlaunchAttributeID)]`


class _ClusterDim(Structure):
    _c_name_ = "CUlaunchAttributeValue.clusterDim"
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class _ProgrammaticEvent(Structure):
    _c_name_ = "CUlaunchAttributeValue.programmaticEvent"
    _fields_ = [("event", CUevent), ("flags", c_int), ("triggerAtBlockStart", c_int)]


class _LaunchCompletionEvent(Structure):
    _c_name_ = "CUlaunchAttributeValue.launchCompletionEvent"
    _fields_ = [("event", CUevent), ("flags", c_int)]


class CUlaunchAttributeValue(Union):
    """The payload of one launch attribute; only the members rawcuda uses are spelled out."""

    _c_name_ = "CUlaunchAttributeValue"
    _fields_ = [
        ("pad", c_char * LAUNCH_ATTRIBUTE_VALUE_BYTES),
        ("cooperative", c_int),
        ("clusterDim", _ClusterDim),
        ("programmaticStreamSerializationAllowed", c_int),
        ("programmaticEvent", _ProgrammaticEvent),
        ("launchCompletionEvent", _LaunchCompletionEvent),
        ("priority", c_int),
    ]


class CUlaunchAttribute(Structure):
    _c_name_ = "CUlaunchAttribute"
    _fields_ = [
        ("id", enum),
        ("pad", c_char * LAUNCH_ATTRIBUTE_ID_PAD),
        ("value", CUlaunchAttributeValue),
    ]


class CUlaunchConfig(Structure):
    """cuLaunchKernelEx's launch description: grid, block, shared memory, stream and attributes."""

    _c_name_ = "CUlaunchConfig"
    _fields_ = [
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("hStream", CUstream),
        ("attrs", POINTER(CUlaunchAttribute)),
        ("numAttrs", c_uint),
    ]


# Every struct above, for the header check (sizes and field offsets against the C compiler).
STRUCTS: tuple[type[Structure] | type[Union], ...] = (
    CUuuid,
    CUmemLocation,
    CUmemAllocationProp,
    CUmemAccessDesc,
    CUctxCreateParams,
    CUDA_KERNEL_NODE_PARAMS,
    CUgraphExecUpdateResultInfo,
    CUgraphEdgeData,
    CUlaunchAttributeValue,
    CUlaunchAttribute,
    CUlaunchConfig,
)
