"""Protocols: reading a DLPack capsule another library made -- every field checked before rawcuda trusts it.

The consumer's half of the protocol (rawcuda.protocols.dlpackabi draws the structs), in two steps that must stay
apart:

1. :func:`read` looks, and changes nothing: the capsule's name says which struct it holds
   (``"dltensor_versioned"`` or the legacy ``"dltensor"``; a ``"used_..."`` one was consumed already, and
   reading it again would use memory whose deleter may have run). A versioned tensor of a newer *major*
   version has another layout: only its deleter may be touched. Then the tensor: ``ndim``, every extent, the
   element type (one lane; a type numpy has), the strides -- counted in elements, NULL meaning compact -- must
   be C-contiguous, because a rawcuda buffer is one C-ordered block; the first element is at
   ``data + byte_offset``.
2. :func:`take` transfers ownership: it renames the capsule ``"used_..."`` and returns a
   :class:`~rawcuda.protocols.loans.Loan` whose end calls the producer's deleter, once.

A refusal happens between the two: the capsule keeps its unused name, and the producer's capsule destructor
calls the deleter when it is dropped (rawcuda's own capsules: the next sweep, rawcuda.protocols.dlpack) -- nothing
leaks, and nothing is freed twice.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rawcuda.ffi.constants import ADDRESS_LIMIT

from .dlpackabi import (
    BITS_PER_BYTE,
    CALL_DELETER,
    FAITHFUL_BITS,
    LEGACY_NAMES,
    NUMPY_KIND_CODES,
    VERSIONED_MAJOR,
    VERSIONED_NAMES,
    CapsuleNames,
    DLDataType,
    DLDataTypeCode,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackFlag,
    capsule_get_name,
    capsule_get_pointer,
    capsule_is_valid,
    capsule_set_name,
)
from .loans import Loan

#: numpy's limit on dimensions; a larger ``ndim`` is a corrupt or hostile struct, not an array.
MAX_NDIM = 64
#: DLPack type code -> numpy's letter for that kind of number (the size comes from ``bits``).
_KINDS = {code: kind for kind, code in NUMPY_KIND_CODES.items()}
#: kDLFloat with this many bits is IEEE binary128 (quadruple precision), which numpy has no dtype for:
#: np.dtype("f16") is x87 extended precision on x86-64 -- another format of the same size.
_IEEE_QUAD_BITS = 128


@dataclass(frozen=True)
class Tensor:
    """What a capsule describes, checked: the address of its first element, its shape and dtype, where it
    lives (``(device_type, device_id)``) and the flags that matter to a consumer."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    device: tuple[int, int]
    read_only: bool
    copied: bool
    versioned: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def names_of(capsule: Any) -> CapsuleNames:
    """Which pair of names this unconsumed DLPack capsule uses; BufferError for anything else."""
    if not is_capsule(capsule):
        raise TypeError(f"expected a DLPack capsule (what __dlpack__ returns), not {type(capsule).__name__}")
    for names in (VERSIONED_NAMES, LEGACY_NAMES):
        if capsule_is_valid(capsule, names.unused):
            return names
    name = capsule_get_name(capsule)
    if name in (VERSIONED_NAMES.used, LEGACY_NAMES.used):
        raise BufferError(
            f"this DLPack capsule is named {name.decode()!r}: it was consumed already, and a capsule can be "
            "consumed once -- call __dlpack__ again for a new one"
        )
    raise BufferError(f"a capsule named {name!r} is not a DLPack capsule ('dltensor_versioned' or 'dltensor')")


def read(capsule: Any) -> Tensor:
    """The tensor in an unconsumed capsule, checked (see the module docstring); changes nothing."""
    names = names_of(capsule)
    address = capsule_get_pointer(capsule, names.unused)
    flags = 0
    if names is VERSIONED_NAMES:
        managed: Any = DLManagedTensorVersioned.from_address(address)
        version = (managed.version.major, managed.version.minor)
        if version[0] != VERSIONED_MAJOR:
            raise BufferError(
                f"the producer made a DLPack {version[0]}.{version[1]} tensor; rawcuda reads major version "
                f"{VERSIONED_MAJOR}, and another major version has another layout"
            )
        flags = int(managed.flags)
    else:
        managed = DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    ndim = tensor.ndim
    if not 0 <= ndim <= MAX_NDIM:
        raise BufferError(f"the DLPack tensor says ndim={ndim}; an array has 0..{MAX_NDIM} dimensions")
    if ndim and not tensor.shape:  # (ctypes would say only "NULL pointer access")
        raise BufferError(f"the DLPack tensor has ndim {ndim} but a NULL shape pointer: its producer is broken")
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if any(extent < 0 for extent in shape):
        raise BufferError(f"the DLPack tensor has a negative extent: shape {shape}")
    dtype = numpy_dtype(tensor.dtype)
    if ndim and tensor.strides:
        strides = tuple(int(tensor.strides[i]) for i in range(ndim))
        if not c_contiguous(shape, strides):
            raise BufferError(
                f"this array is not C-contiguous (shape {shape}, strides {strides} in elements), but a rawcuda "
                "buffer is one C-ordered block: pass a contiguous copy (torch: x.contiguous(); CuPy: "
                "cupy.ascontiguousarray(x); numpy: np.ascontiguousarray(x))"
            )
    ptr = (tensor.data or 0) + tensor.byte_offset
    if ptr >= ADDRESS_LIMIT:  # (the driver would take it modulo 2^64: another address)
        raise BufferError(f"the DLPack tensor's data + byte_offset is {ptr:#x}, past any 64-bit address")
    return Tensor(
        ptr=ptr,
        shape=shape,
        dtype=dtype,
        device=(int(tensor.device.device_type), int(tensor.device.device_id)),
        read_only=bool(flags & DLPackFlag.READ_ONLY),
        copied=bool(flags & DLPackFlag.IS_COPIED),
        versioned=names is VERSIONED_NAMES,
    )


def numpy_dtype(dl: DLDataType) -> np.dtype:
    """The numpy dtype of a DLPack element type; BufferError for one numpy has no dtype for."""
    code, bits, lanes = int(dl.code), int(dl.bits), int(dl.lanes)
    if lanes != 1:
        raise BufferError(f"DLPack vector elements ({lanes} lanes of {bits} bits) have no numpy dtype")
    if code == DLDataTypeCode.BOOL and bits == BITS_PER_BYTE:
        return np.dtype(np.bool_)
    if code == DLDataTypeCode.BFLOAT:
        raise BufferError("bfloat16 has no numpy dtype: convert first (torch: x.float(), or x.view(torch.int16))")
    kind = _KINDS.get(code)  # type: ignore[call-overload]
    if kind is not None and bits in FAITHFUL_BITS[code]:  # type: ignore[index]
        return np.dtype(f"{kind}{bits // BITS_PER_BYTE}")
    if code == DLDataTypeCode.FLOAT and bits == _IEEE_QUAD_BITS:
        raise BufferError(
            "DLPack kDLFloat with 128 bits is IEEE binary128 (quadruple precision), which numpy has no dtype for "
            "(its float128 is x87 extended precision on x86-64, another format): convert to float64 first"
        )
    raise BufferError(f"DLPack type code {code} with {bits} bits has no numpy dtype")


def c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether element strides describe compact C order (extents of 1 may have any stride)."""
    if 0 in shape:
        return True  # no elements: any strides describe them
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def take(capsule: Any) -> Loan:
    """Take ownership of the tensor in ``capsule`` (rename it ``used_...``): the returned loan's ``end()`` calls
    the producer's deleter, exactly once. Read the capsule first: after this, only the deleter may be called."""
    names = names_of(capsule)
    address = capsule_get_pointer(capsule, names.unused)
    struct = DLManagedTensorVersioned if names is VERSIONED_NAMES else DLManagedTensor
    deleter = struct.from_address(address).deleter
    capsule_set_name(capsule, names.used)
    if not deleter:
        return Loan(_nothing)  # dlpack.h allows a NULL deleter: there is nothing to call
    return Loan(functools.partial(_call_deleter, deleter, address))


def _call_deleter(deleter: int, address: int) -> None:
    CALL_DELETER(deleter)(address)


def _nothing() -> None:
    """The end of a loan on a tensor without a deleter."""


__all__ = ["MAX_NDIM", "Tensor", "c_contiguous", "is_capsule", "names_of", "numpy_dtype", "read", "take"]
