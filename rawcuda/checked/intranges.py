"""Layer 1: every integer argument checked against its C type's range before ctypes converts it.

ctypes converts a Python int to a C integer by *masking*: ``c_size_t`` passes ``2**64 + 4`` as 4, and
``c_int`` passes ``2**32 + 7`` as 7, without a word. So a size computed wrongly above this layer would
reach the driver as a small, valid-looking number -- an allocation of 4 bytes that the buffer believes
is 2**64 + 4. This file is where that stops: the namespace binds each row through :func:`range_checked`,
which refuses an out-of-range integer with :class:`~rawcuda.checked.errors.IntegerRangeError` naming the
call, the parameter, its C type and the value (docs/reliability.md, "Integers at the boundary").

Only plain integers are checked. A ctypes object (``c_size_t(n)``) was converted when the caller built
it, and a pointer or buffer object is not a number. numpy integers are checked like ints.
"""

from __future__ import annotations

import ctypes
import keyword
from collections.abc import Callable
from typing import Any

from ..ffi.decl import Decl
from .errors import IntegerRangeError

#: ctypes' one-letter codes of the C integer types, and which are signed. ``void *`` ("P": handles and host
#: pointers) is left out although ctypes masks it too: those values come from the driver or from a numpy
#: array, never from arithmetic, and checking them doubled the cost of an event record.
_SIGNED_CODES = frozenset("bhilq")
_INTEGER_CODES = frozenset("bBhHiIlLqQ")
_BITS_PER_BYTE = 8

#: (argument index, lowest, highest) for each integer parameter of one row.
Checks = tuple[tuple[int, int, int], ...]


def c_range(ctype: Any) -> tuple[int, int] | None:
    """The values a ctypes integer type holds (``c_int`` -> (-2**31, 2**31 - 1)); None for other types."""
    code = getattr(ctype, "_type_", None)
    if not isinstance(code, str) or code not in _INTEGER_CODES:
        return None
    bits = ctypes.sizeof(ctype) * _BITS_PER_BYTE
    if code in _SIGNED_CODES:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def integer_checks(decl: Decl) -> Checks:
    """The integer parameters of ``decl`` with their ranges (empty when it takes none)."""
    checks = []
    for index, ctype in enumerate(decl.argtypes):
        span = c_range(ctype)
        if span is not None:
            checks.append((index, *span))
    return tuple(checks)


def out_of_range(decl: Decl, index: int, value: Any, low: int, high: int) -> IntegerRangeError:
    """The error for ``value`` passed as argument ``index`` of ``decl``, outside ``low .. high``."""
    number = int(value)
    masked = number & ((1 << (high - low).bit_length()) - 1)
    if low < 0 and masked > high:
        masked -= 1 << (high - low).bit_length()
    return IntegerRangeError(
        f"{decl.name}: {decl.param_names[index]} ({decl.params[index]}) takes {low} .. {high}, got {number}; "
        f"ctypes would have passed it as {masked} without a word. A value outside its C type is a bug in "
        "the arithmetic that made it (or a request no device can meet)"
    )


def range_checked(fn: Callable[..., Any], decl: Decl) -> Callable[..., Any]:
    """``fn`` itself when ``decl`` takes no integers; else a function that checks them, then calls ``fn``.

    The check is generated code, one ``if`` per integer parameter with its bounds written in. A loop over a
    table of checks cost 0.3-0.6 us a call on the H200, this 0-0.25 us (bench/results/2026-12-02-NVIDIA_H200-
    boundary.md). A plain int is compared at once; anything else only if it is an integer (has
    ``__index__``: numpy's do, ctypes objects do not). The parameters keep their C names, so a call with one
    too few says which one is missing.
    """
    checks = integer_checks(decl)
    if not checks:
        return fn
    names = [f"{name}_" if keyword.iskeyword(name) else name for name in decl.param_names]
    lines = [f"def {decl.name}({', '.join(names)}):"]
    for index, low, high in checks:
        arg = names[index]
        lines += [
            f"    if {arg}.__class__ is int or _integral({arg}):",
            f"        if not {low} <= {arg} <= {high}:",
            f"            raise _refuse({index}, {arg}, {low}, {high})",
        ]
    lines.append(f"    return _fn({', '.join(names)})")
    scope: dict[str, Any] = {
        "_fn": fn,
        "_integral": _is_integer,
        "_refuse": lambda index, value, low, high: out_of_range(decl, index, value, low, high),
    }
    exec("\n".join(lines), scope)  # (the text is built above from the table's own names)
    return scope[decl.name]


def _is_integer(value: Any) -> bool:
    """A numpy (or other) integer that is not a plain int; ctypes objects and ``byref`` have no __index__."""
    return hasattr(type(value), "__index__")


__all__ = ["Checks", "c_range", "integer_checks", "out_of_range", "range_checked"]
