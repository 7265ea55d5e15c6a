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
import numbers
from collections.abc import Callable
from typing import Any

from ..ffi.decl import Decl
from .errors import IntegerRangeError

#: ctypes' one-letter codes of the C integer types, and whether each is signed. "P" is ``void *``: ctypes
#: masks an int passed as a pointer as well (``c_void_p.from_param(2**65)`` is NULL).
_SIGNED_CODES = frozenset("bhilq")
_INTEGER_CODES = frozenset("bBhHiIlLqQP")
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
    """``fn`` itself when ``decl`` takes no integers; else a function that checks them, then calls ``fn``."""
    checks = integer_checks(decl)
    if not checks:
        return fn

    def call(*args: Any) -> Any:
        count = len(args)
        for index, low, high in checks:
            if index < count:
                value = args[index]
                # type() first: a plain int is the common case, and a ctypes object passes unchecked.
                if (type(value) is int or isinstance(value, numbers.Integral)) and not low <= value <= high:
                    raise out_of_range(decl, index, value, low, high)
        return fn(*args)

    call.__name__ = call.__qualname__ = decl.symbol
    return call


__all__ = ["Checks", "c_range", "integer_checks", "out_of_range", "range_checked"]
