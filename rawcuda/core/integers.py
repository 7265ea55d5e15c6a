"""Core: the one integer rule of the public API -- Python ints and numpy integers alike, bools and floats not.

A count, an offset, an ordinal or a priority may come from numpy arithmetic (``np.int64``), and must be
taken as the number it is. ``True`` or ``2.0`` in those places is a mistake, so it is refused. Messages show
the plain value (``4``, not ``np.int64(4)``). No numpy import: the rule is ``operator.index``.
"""

from __future__ import annotations

import operator
from typing import Any


def whole(value: Any) -> int | None:
    """``value`` as an int when it is an integer (a Python int or a numpy integer), else None."""
    if isinstance(value, bool):
        return None  # (numpy's bool already refuses operator.index)
    try:
        return operator.index(value)
    except TypeError:
        return None


def integer(value: Any, what: str) -> int:
    """``value`` as an int by :func:`whole`; a TypeError naming ``what`` when it is not an integer."""
    number = whole(value)
    if number is None:
        raise TypeError(
            f"{what} is an int (or a numpy integer), not {type(value).__name__} {value!r}: pass a whole number"
        )
    return number


def shown(value: Any) -> str:
    """``value`` for a message: an integer as its plain number, anything else as its repr."""
    number = whole(value)
    return repr(value) if number is None else str(number)


__all__ = ["integer", "shown", "whole"]
