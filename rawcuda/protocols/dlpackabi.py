"""Protocols: DLPack -- dlpack.h's structs in ctypes, and the five Python C-API calls that carry them in a capsule.

DLPack is how torch, CuPy, JAX and numpy hand each other arrays without a copy. The producer describes its
memory in a ``DLManagedTensorVersioned`` (a ``DLTensor`` -- pointer, device, shape, strides, dtype -- plus a
*deleter*), wraps its address in a ``PyCapsule`` named ``"dltensor_versioned"``, and returns it from
``__dlpack__``. The consumer reads the struct, renames the capsule ``"used_dltensor_versioned"`` (that rename
*is* the transfer of ownership), and calls the deleter, exactly once, when it no longer needs the memory.
Before DLPack 1.0 the struct was ``DLManagedTensor`` (the tensor first, no version, no flags) and the names
had no ``_versioned``; a producer still hands it out when the consumer does not ask for ``max_version``.

Who owns what::

    the capsule (a Python object) --points to--> DLManagedTensorVersioned --data--> the memory
                                                 |  manager_ctx: the producer's (NULL for rawcuda)
                                                 |  deleter(self): ends the producer's hold
    before the rename: whoever drops the capsule must see that the deleter runs
    after the rename:  the consumer calls the deleter; nobody else may

Three things this file cannot get wrong, because C code holds the addresses:

* **The deleter is C code's to call, at any time, from any thread**, perhaps after ``del`` of everything on
  the Python side. rawcuda's deleter is a ``CFUNCTYPE`` thunk (it takes the GIL itself, so any thread may call
  it); C keeps only its address, so the thunk object must outlive every tensor exported: it is module-level
  and deliberately leaked (:func:`immortal`), never freed even when the module is torn down at exit.
* **Capsule names are pointers, not copies.** ``PyCapsule_New`` and ``PyCapsule_SetName`` keep the
  ``const char *`` they are given, and the other side compares it with ``strcmp`` whenever it likes: each name
  below is a bytes object made immortal (:func:`immortal`), so its buffer never moves or goes away.
* **A capsule destructor must not run Python.** ctypes can make one, but a ``PyCapsule_Destructor`` runs
  inside the capsule's deallocation -- and consumers drop a capsule they refuse right after setting their
  exception (numpy's ``from_dlpack`` on a device it does not read does exactly that). A ctypes callback
  entered with an exception pending cannot run at all: CPython replaces the pending exception with a
  ``SystemError`` and discards both, so the consumer's message is lost and the cleanup never runs
  (tests/cpu/test_dlpack.py shows it). rawcuda's capsules therefore have *no* destructor; the producer keeps
  each capsule in its own registry and notices, in ordinary Python, when one was dropped unconsumed
  (rawcuda.dlpackexport).

What no ctypes producer can guarantee, and a C one can: a deleter *called* with an exception pending
meets the same fate (compliant consumers -- numpy, CuPy, the spec's example -- save the exception around
the call), and a deleter called after the interpreter has shut down (from a C++ static destructor, say)
reaches a thunk that needs the interpreter; numpy's C deleter checks ``Py_IsInitialized``, a thunk cannot.

The Python C-API functions are bound as fresh ``PYFUNCTYPE`` objects, not through ``ctypes.pythonapi.X`` with
``argtypes`` set on it: that attribute is one object shared by every library in the process, and another one
setting different ``argtypes`` on it would silently change ours. ``PYFUNCTYPE`` keeps the GIL held during the
call and raises the Python exception the function set -- right for the C API, which needs both.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    PYFUNCTYPE,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
    py_object,
)
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any

from rawcuda.ffi.constants import STREAM_AMBIGUOUS, STREAM_LEGACY, STREAM_PER_THREAD

#: The DLPack version whose ABI this file spells out (dlpack.h: DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION).
#: A major version changes the layout of DLManagedTensorVersioned; a minor one only adds enum values.
DLPACK_VERSION = (1, 0)
#: The first major version with DLManagedTensorVersioned (and ``max_version``): below it, the legacy struct.
VERSIONED_MAJOR = 1


class DLDeviceType(IntEnum):
    """``DLDeviceType``: where the memory is. Device ids of CPU, pinned and managed memory are 0 (dlpack.h)."""

    CPU = 1  # kDLCPU: ordinary host memory
    CUDA = 2  # kDLCUDA: cuMemAlloc memory of one GPU
    CUDA_HOST = 3  # kDLCUDAHost: pinned host memory (cuMemHostAlloc / cudaMallocHost)
    ROCM = 10  # kDLROCM
    CUDA_MANAGED = 13  # kDLCUDAManaged: cuMemAllocManaged memory, valid on host and device


class DLDataTypeCode(IntEnum):
    """``DLDataTypeCode``: the kind of number; with ``bits`` and ``lanes`` it is the element type."""

    INT = 0  # kDLInt
    UINT = 1  # kDLUInt
    FLOAT = 2  # kDLFloat (IEEE)
    OPAQUE_HANDLE = 3  # kDLOpaqueHandle
    BFLOAT = 4  # kDLBfloat
    COMPLEX = 5  # kDLComplex: a pair of floats, ``bits`` for both
    BOOL = 6  # kDLBool: 8 bits of storage per element


BITS_PER_BYTE = 8  # DLDataType.bits counts bits; numpy's itemsize, bytes
#: numpy's kind letter -> the DLPack type code of that kind of number (bool, with its own code, apart).
NUMPY_KIND_CODES = {
    "i": DLDataTypeCode.INT,
    "u": DLDataTypeCode.UINT,
    "f": DLDataTypeCode.FLOAT,
    "c": DLDataTypeCode.COMPLEX,
}
#: Type code -> the sizes (bits) at which numpy's dtype of that kind stores exactly what DLPack means -- the one
#: table both directions use. Not numpy's long double: on x86-64 its float128 is the x87 80-bit format padded
#: to 16 bytes, while kDLFloat with 128 bits means IEEE binary128 (and clongdouble's 256 bits do not even fit
#: DLDataType.bits, a uint8). Where long double *is* binary128 (aarch64) it is refused all the same: safe.
FAITHFUL_BITS = {
    DLDataTypeCode.INT: (8, 16, 32, 64),
    DLDataTypeCode.UINT: (8, 16, 32, 64),
    DLDataTypeCode.FLOAT: (16, 32, 64),
    DLDataTypeCode.COMPLEX: (64, 128),
}


class DLPackFlag(IntFlag):
    """``DLManagedTensorVersioned.flags`` (dlpack.h ``DLPACK_FLAG_BITMASK_*``); the legacy struct has none."""

    READ_ONLY = 1 << 0  # the consumer must not write
    IS_COPIED = 1 << 1  # the producer made a copy for this export: the consumer is its sole user


#: ``__dlpack__(stream=...)`` for CUDA, from the array API standard: the consumer's stream, which the producer
#: must make safe (None also means the legacy stream); 1 and 2 are cuda.h's CU_STREAM_LEGACY and
#: CU_STREAM_PER_THREAD, and 0 (STREAM_AMBIGUOUS) is forbidden -- it could mean either default stream.
STREAM_NO_SYNC = -1  # "do not synchronize at all": the consumer has ordered things itself


# --- the structs, field by field as dlpack.h declares them -------------------------------------------------------
class DLDevice(Structure):
    """``typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;`` -- 8 bytes."""

    _fields_ = (("device_type", c_int32), ("device_id", c_int32))  # an enum is an int: 4 bytes


class DLDataType(Structure):
    """``typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;`` -- float32 is (2, 32, 1)."""

    _fields_ = (("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16))


class DLTensor(Structure):
    """The array itself. ``strides`` count *elements*, not bytes; NULL (only with ndim 0 here) means compact
    row-major. The first element is at ``data + byte_offset``. 48 bytes on a 64-bit machine."""

    _fields_ = (
        ("data", c_void_p),  # void *data: a device pointer for kDLCUDA
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),  # int64_t *shape: ndim extents
        ("strides", POINTER(c_int64)),  # int64_t *strides: ndim strides in elements
        ("byte_offset", c_uint64),
    )


class DLManagedTensor(Structure):
    """Legacy (DLPack < 1.0): ``{ DLTensor dl_tensor; void *manager_ctx; void (*deleter)(DLManagedTensor *); }``.

    ``deleter`` is a C function pointer, kept here as its address (``c_void_p``): rawcuda stores the address of
    its own thunk when it produces, and calls a producer's through :data:`CALL_DELETER` when it consumes.
    """

    _fields_ = (("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p))


class DLPackVersion(Structure):
    """``typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;``"""

    _fields_ = (("major", c_uint32), ("minor", c_uint32))


class DLManagedTensorVersioned(Structure):
    """DLPack >= 1.0: ``{ DLPackVersion version; void *manager_ctx; void (*deleter)(...); uint64_t flags;
    DLTensor dl_tensor; }``. Everything up to ``flags`` stays where it is in every later major version, so a
    consumer that meets a major version it does not know can still call the deleter (and must)."""

    _fields_ = (
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    )


#: ``void (*deleter)(DLManagedTensor *self)``: the type of rawcuda's own deleter (a C-callable thunk, which
#: takes the GIL itself), and the prototype through which rawcuda calls a producer's deleter (with the GIL
#: held: a deleter of C code that forgot to take it is then still safe).
DELETER = CFUNCTYPE(None, c_void_p)
CALL_DELETER = PYFUNCTYPE(None, c_void_p)


# --- capsule names: each a pointer the other side keeps, so each is immortal -----------------------------------
@dataclass(frozen=True)
class CapsuleNames:
    """The name of an unconsumed capsule, and the name its consumer renames it to."""

    unused: bytes
    used: bytes


VERSIONED_NAMES = CapsuleNames(b"dltensor_versioned", b"used_dltensor_versioned")
LEGACY_NAMES = CapsuleNames(b"dltensor", b"used_dltensor")


# --- the Python C API, bound from the running interpreter (no library is opened) ---------------------------------
@dataclass(frozen=True)
class CFunction:
    """One Python C-API function: its C prototype, then the ctypes return and argument types."""

    prototype: str
    restype: Any
    argtypes: tuple[Any, ...]

    @property
    def name(self) -> str:
        return self.prototype.split("(")[0].split()[-1].lstrip("*")

    def bind(self) -> Any:
        return PYFUNCTYPE(self.restype, *self.argtypes)((self.name, ctypes.pythonapi))


CAPSULE_API = (
    # a new reference: PYFUNCTYPE with restype py_object takes it over (no extra incref, no leak)
    CFunction(
        "PyObject *PyCapsule_New(void *pointer, const char *name, PyCapsule_Destructor destructor)",
        py_object,
        (c_void_p, c_char_p, c_void_p),
    ),
    # NULL, with ValueError set, when the name differs: PYFUNCTYPE raises it
    CFunction("void *PyCapsule_GetPointer(PyObject *capsule, const char *name)", c_void_p, (py_object, c_char_p)),
    # 1 when it is a capsule of exactly that name and a non-NULL pointer; never sets an exception
    CFunction("int PyCapsule_IsValid(PyObject *capsule, const char *name)", c_int, (py_object, c_char_p)),
    # keeps the pointer, does not copy the string (see CapsuleNames)
    CFunction("int PyCapsule_SetName(PyObject *capsule, const char *name)", c_int, (py_object, c_char_p)),
    CFunction("const char *PyCapsule_GetName(PyObject *capsule)", c_char_p, (py_object,)),
    # one reference that is never given back: the object is never freed (see immortal)
    CFunction("void Py_IncRef(PyObject *o)", None, (py_object,)),
)

_BOUND = {row.name: row.bind() for row in CAPSULE_API}
capsule_new = _BOUND["PyCapsule_New"]
capsule_get_pointer = _BOUND["PyCapsule_GetPointer"]
capsule_is_valid = _BOUND["PyCapsule_IsValid"]
capsule_set_name = _BOUND["PyCapsule_SetName"]
capsule_get_name = _BOUND["PyCapsule_GetName"]
_incref = _BOUND["Py_IncRef"]


def immortal(obj: Any) -> Any:
    """``obj``, with one reference added that is never given back: C code may keep its address for ever."""
    _incref(obj)
    return obj


for _names in (VERSIONED_NAMES, LEGACY_NAMES):
    immortal(_names.unused)
    immortal(_names.used)

__all__ = [
    "BITS_PER_BYTE",
    "CALL_DELETER",
    "CAPSULE_API",
    "DELETER",
    "DLPACK_VERSION",
    "FAITHFUL_BITS",
    "LEGACY_NAMES",
    "NUMPY_KIND_CODES",
    "STREAM_AMBIGUOUS",
    "STREAM_LEGACY",
    "STREAM_NO_SYNC",
    "STREAM_PER_THREAD",
    "VERSIONED_MAJOR",
    "VERSIONED_NAMES",
    "CFunction",
    "CapsuleNames",
    "DLDataType",
    "DLDataTypeCode",
    "DLDevice",
    "DLDeviceType",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPackFlag",
    "DLPackVersion",
    "DLTensor",
    "capsule_get_name",
    "capsule_get_pointer",
    "capsule_is_valid",
    "capsule_new",
    "capsule_set_name",
    "immortal",
]
