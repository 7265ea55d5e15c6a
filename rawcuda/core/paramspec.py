"""Core: what one kernel parameter accepts -- its kind, its size, and the integers that fit it.

nvcc writes every C integer as an unsigned PTX type: ``int`` and ``unsigned`` are both ``.u32``.
So a Python ``int`` must fit what either C type holds, and never arrive wrapped.
A wrapped -1 as a ``size_t`` is ``2**64-1``, and the kernel walks off its buffer.

* ``.s8`` ... ``.s64`` say signed: ``-2**(n-1)..2**(n-1)-1``.
* ``.u8``/``.u16``/``.u32`` and ``.b8``/``.b16``/``.b32`` take ``-2**(n-1)..2**n-1``.
  Past that, the kernel needs a wider parameter, and the error says so.
* ``.u64``/``.b64`` take ``0..2**64-1``: pointers and sizes land there, and a negative one is a bug.
  A signed 64-bit parameter takes a negative value as ``np.int64(v)``.

What nvcc writes for each C type: docs/hazards.md, "What nvcc writes for each C integer type".
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Any

from rawcuda.core.integers import shown, whole
from rawcuda.core.ptx import Param

BITS_PER_BYTE = 8  # a parameter's size is in bytes; its range is in bits
POINTER_KINDS = ("int", "word")  # ParamSpec kinds that may hold a pointer
POINTER_SIZE = 8  # bytes. nvcc writes pointers, size_t and every 64-bit C integer as .u64.
SIGNED_PREFIX = "s"  # .s8 .s16 .s32 .s64: the only PTX integer types that state a sign
# The slot of each integer size: unsigned, since a value is stored as its masked bits.
UINT_SLOT = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}
FLOAT_SLOT = {4: ctypes.c_float, 8: ctypes.c_double}  # the slots of .f32 and .f64 parameters
_FLOAT_TYPES = {"f32", "f64"}  # the float parameters a Python float may fill
_HALF_TYPES = {"f16", "bf16"}  # no Python scalar holds these: they are passed as bytes


@dataclass(frozen=True)
class ParamSpec:
    """What one kernel parameter accepts. ``kind`` is "int", "float", "bytes" or "word" (known by size only)."""

    kind: str
    size: int
    ptx_type: str = ""
    read_only: bool = False  # the kernel only reads through it: a read-only foreign array may be passed

    @classmethod
    def from_ptx(cls, param: Param) -> ParamSpec:
        if param.count is not None:
            return cls("bytes", param.size, f"{param.type}[{param.count}]")
        if param.type in _FLOAT_TYPES:
            return cls("float", param.size, param.type)
        if param.type in _HALF_TYPES or param.size not in UINT_SLOT:
            # Halves have no Python scalar; a .b128 (CUDA's __int128, or 16 raw bytes) has no ctypes integer.
            return cls("bytes", param.size, param.type)
        return cls("int", param.size, param.type)

    @classmethod
    def from_size(cls, size: int) -> ParamSpec:
        """From ``cuFuncGetParamInfo``: a cubin has no types. 8 bytes may be a pointer; others need numpy scalars."""
        return cls("word" if size in UINT_SLOT else "bytes", size, f"{size} bytes")

    @property
    def signed(self) -> bool:
        """True only for the .s types. nvcc's .u types may hold a signed C type too (module docstring)."""
        return self.ptx_type.startswith(SIGNED_PREFIX)

    def int_range(self) -> tuple[int, int]:
        """The Python ints this integer parameter accepts, as (lowest, highest). The module docstring gives the rule."""
        bits = BITS_PER_BYTE * self.size
        if self.signed:
            return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if self.size == POINTER_SIZE:
            return 0, (1 << bits) - 1
        return -(1 << (bits - 1)), (1 << bits) - 1

    def range_text(self) -> str:
        """:meth:`int_range` as people write it: ``-2**31..2**32-1``."""
        bits = BITS_PER_BYTE * self.size
        low, high = self.int_range()
        return f"{f'-2**{bits - 1}' if low else '0'}..2**{bits if high.bit_length() == bits else bits - 1}-1"

    def describe(self) -> str:
        """What the parameter takes, in words, for error messages."""
        if self.kind == "word" and self.size == 8:
            return "8 bytes: a device pointer (DeviceBuffer), a Python int >= 0, or an 8-byte numpy scalar"
        bits = BITS_PER_BYTE * self.size
        if self.kind == "int" and self.size == 8:
            signed = "signed " if self.signed else ""
            return f"{self.ptx_type}: a device pointer (DeviceBuffer) or a {signed}64-bit integer ({self.range_text()})"
        if self.kind == "int":
            article = "an" if bits == BITS_PER_BYTE else "a"  # "an 8-bit", "a 16-bit"
            if self.signed:
                return f"{self.ptx_type}: a signed {bits}-bit integer ({self.range_text()})"
            either = "C int or unsigned" if self.size == 4 else "signed or unsigned"
            return f"{self.ptx_type}: {article} {bits}-bit integer ({either}: {self.range_text()})"
        if self.kind == "float":
            return f"{self.ptx_type}: a {8 * self.size}-bit float"
        if self.kind == "word":
            return f"{self.size} bytes: a numpy scalar of exactly that width (np.int32, np.float32 ...)"
        return f"{self.ptx_type}: {self.size} bytes (bytes, a ctypes Structure or a numpy record)"


def out_of_range(value: int, spec: ParamSpec) -> str:
    """Why the Python int ``value`` does not fit the integer parameter ``spec``. It also says what to do instead."""
    problem = f"{value} does not fit {spec.describe()}"
    if value < 0 and spec.int_range()[0] == 0:
        return (
            f"{problem}: nvcc declares pointers and size_t (and every 64-bit C integer) .u64, and a negative "
            "address or size is a bug -- check how the value was computed; if the kernel's parameter really "
            f"is signed (long long, int64_t), pass np.int64({value})"
        )
    if spec.size == POINTER_SIZE:
        return f"{problem}: no 64-bit parameter holds it"
    return (
        f"{problem}: a value this far out needs a wider parameter -- declare it size_t (a size or an "
        "index) or long long (a signed value) in the kernel"
    )


def with_read_only(kernel: str, specs: tuple[ParamSpec, ...], indices: tuple[Any, ...]) -> tuple[ParamSpec, ...]:
    """``specs`` with the pointer parameters at ``indices`` (0-based) marked read-only; IndexError for an index
    the kernel does not have, ValueError for a parameter that is not a pointer."""
    marked = list(specs)
    for given in indices:
        index = whole(given)
        if index is None or not 0 <= index < len(marked):
            raise IndexError(f"{kernel!r} has parameters 0..{len(marked) - 1}; {shown(given)} is not one of them")
        if marked[index].size != POINTER_SIZE or marked[index].kind not in POINTER_KINDS:
            raise ValueError(f"parameter {index} of {kernel!r} ({marked[index].ptx_type}) is not a pointer")
        marked[index] = dataclasses.replace(marked[index], read_only=True)
    return tuple(marked)
