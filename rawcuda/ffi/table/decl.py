"""One row of the declaration table: a C prototype, the symbol to bind, and its ctypes argument types.

Why write the prototype as a string instead of a comment? A comment can go stale; this string cannot:
``rawcuda.ffi.headercheck`` compares it, parameter by parameter, with the prototype in cuda.h, and checks
that every ctypes type has the size and kind of the C type beside it. So the C you read is the C the
driver was compiled against.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any

_PROTOTYPE = re.compile(r"^\s*CUresult\s+(\w+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class Decl:
    """A driver function as the table declares it.

    ``name`` is what cuda.h calls it (``cuMemAlloc``); ``symbol`` is what libcuda exports and what we
    bind (``cuMemAlloc_v2``), because cuda.h ``#define``s many plain names to versioned ones and a
    plain-name lookup would silently bind the *old* ABI. ``allocates`` is the index of the byte-count
    argument of an allocation, so that an out-of-memory error can say how much was asked for; ``memory``
    says whose memory that is ("device" or "host"). ``older`` explains a symbol deliberately older
    than the header's (none today; the header check refuses an unexplained one).
    """

    prototype: str
    symbol: str
    argtypes: tuple[Any, ...]
    allocates: int | None = None
    memory: str = "device"
    older: str | None = None
    name: str = field(init=False)
    params: tuple[str, ...] = field(init=False)
    param_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        m = _PROTOTYPE.match(self.prototype)
        if m is None:
            raise ValueError(f"not a 'CUresult name(params)' prototype: {self.prototype!r}")
        params = split_params(m.group(2))
        object.__setattr__(self, "name", m.group(1))
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "param_names", tuple(param_name(p) for p in params))
        if len(params) != len(self.argtypes):
            raise ValueError(
                f"{self.name}: the prototype has {len(params)} parameters but {len(self.argtypes)} "
                "ctypes argtypes were given"
            )

    @property
    def restype(self) -> type:
        return ctypes.c_int  # CUresult: every function in the table returns one


def decl(prototype: str, symbol: str, *argtypes: Any, **options: Any) -> Decl:
    """Shorthand used by the table files: ``decl("CUresult cuX(int a)", "cuX", c_int)``."""
    return Decl(prototype, symbol, tuple(argtypes), **options)


def split_params(text: str) -> tuple[str, ...]:
    """Split a C parameter list on top-level commas; ``void`` or nothing means no parameters."""
    text = " ".join(text.split())
    if text in ("", "void"):
        return ()
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return tuple(parts)


def param_name(param: str) -> str:
    """The declared name of one C parameter (``'CUdeviceptr *dptr'`` -> ``'dptr'``)."""
    m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", param)
    return m.group(1) if m else param
