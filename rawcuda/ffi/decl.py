"""Layer 0: one row of a declaration table -- a C prototype, the symbol to bind, its ctypes types.

Both tables use this one type: the driver's (:mod:`rawcuda.ffi.cuda`) and NVRTC's
(:mod:`rawcuda.ffi.nvrtc`). A row says what the function *returns* as well as what it takes, because that
decides how a call is checked: ``CUresult`` and ``nvrtcResult`` are result codes (0 is success, anything
else becomes an exception in layer 1), while NVRTC's ``nvrtcGetErrorString`` returns ``const char *`` --
a pointer. Left at ctypes' default ``restype`` (``c_int``) a pointer is cut to 32 bits, so a row that
returns anything but a result code must name its ``restype``, and the constructor refuses one that does
not.

Why write the prototype as a string instead of a comment? A comment can go stale; this string cannot:
``python -m rawcuda.tools.headercheck`` compares it, parameter by parameter, with the prototype in the
header, and checks that every ctypes type has the size and kind of the C type beside it. So the C you
read is the C the library was compiled against.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: The C return types that are result codes: 0 means success, and layer 1 turns anything else into an error.
RESULT_TYPES = frozenset({"CUresult", "nvrtcResult"})

_PROTOTYPE = re.compile(r"^\s*(CUresult|nvrtcResult|const\s+char\s*\*)\s*(\w+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class Decl:
    """A C function as a table declares it.

    ``name`` is what the header calls it (``cuMemAlloc``); ``symbol`` is what the library exports and what
    we bind (``cuMemAlloc_v2``), because cuda.h ``#define``s many plain names to versioned ones and a
    plain-name lookup would silently bind the *old* ABI. ``returns`` is the C return type, read from the
    prototype; ``restype`` its ctypes spelling. ``allocates`` is the index of the byte-count argument of an
    allocation, so that an out-of-memory error can say how much was asked for; ``memory`` says whose memory
    that is ("device" or "host"). ``older`` explains a symbol deliberately older than the header's (none
    today; the header check refuses an unexplained one).
    """

    prototype: str
    symbol: str
    argtypes: tuple[Any, ...]
    restype: Any = ctypes.c_int
    allocates: int | None = None
    memory: str = "device"
    older: str | None = None
    name: str = field(init=False)
    returns: str = field(init=False)
    params: tuple[str, ...] = field(init=False)
    param_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        m = _PROTOTYPE.match(self.prototype)
        if m is None:
            raise ValueError(
                f"not a 'CUresult name(params)', 'nvrtcResult name(params)' or 'const char "
                f"*name(params)' prototype: {self.prototype!r}"
            )
        params = split_params(m.group(3))
        object.__setattr__(self, "returns", " ".join(m.group(1).split()))
        object.__setattr__(self, "name", m.group(2))
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "param_names", tuple(param_name(p) for p in params))
        if len(params) != len(self.argtypes):
            raise ValueError(
                f"{self.name}: the prototype has {len(params)} parameters but {len(self.argtypes)} "
                "ctypes argtypes were given"
            )
        if self.checked != (self.restype is ctypes.c_int):
            raise ValueError(
                f"{self.name} returns {self.returns}: its restype must be "
                f"{'c_int' if self.checked else 'a pointer type'}, not {self.restype}"
            )

    @property
    def checked(self) -> bool:
        """True when the function returns a result code, which layer 1 turns into an exception."""
        return self.returns in RESULT_TYPES


def decl(prototype: str, symbol: str, *argtypes: Any, **options: Any) -> Decl:
    """Shorthand used by the table files: ``decl("CUresult cuX(int a)", "cuX", c_int)``."""
    return Decl(prototype, symbol, tuple(argtypes), **options)


def index(rows: Iterable[Decl], table: str, returns: frozenset[str]) -> dict[str, Decl]:
    """Header name -> row, refusing a name declared twice (the second row would silently win) and a row
    whose return type is not one of ``returns`` (a CUresult function in NVRTC's table is a mistake)."""
    by_name: dict[str, Decl] = {}
    for row in rows:
        if row.returns not in returns:
            raise ValueError(
                f"{row.name} returns {row.returns}: not a function of the {table} table, whose "
                f"functions return {' or '.join(sorted(returns))}"
            )
        if row.name in by_name:
            raise ValueError(f"{row.name} is declared twice in the {table} table")
        by_name[row.name] = row
    return by_name


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


__all__ = ["RESULT_TYPES", "Decl", "decl", "index", "param_name", "split_params"]
