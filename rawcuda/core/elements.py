"""Core: what a buffer holds -- shapes, dtypes, and element values converted exactly or not at all.

Every buffer (device, pinned, managed, growable) takes a shape and a dtype, and ``fill()`` takes a value.
The checks are the same for all of them, so they live here once. A shape is non-negative integers. A dtype
holds no Python objects. A fill value must survive the conversion to the dtype unchanged. numpy would wrap
2**40 into an int32 silently; rawcuda refuses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rawcuda.ffi.constants import ADDRESS_LIMIT


def normalize_shape(shape: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """``5`` -> ``(5,)``. Raises TypeError for an extent that is not an int, ValueError for a negative one."""
    if isinstance(shape, int | np.integer):
        dims: tuple[object, ...] = (shape,)
    elif isinstance(shape, tuple | list):
        dims = tuple(shape)
    else:
        raise TypeError(f"shape {shape!r}: a shape is an int or a tuple of ints, e.g. 1000 or (64, 64)")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise TypeError(f"shape {shape!r}: extents must be integers, got {type(d).__name__}")
        if d < 0:
            raise ValueError(f"shape {shape!r}: extents must be >= 0, got {d}")
    return tuple(int(d) for d in dims)  # type: ignore[call-overload]


def byte_count(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes of ``shape`` elements of ``dtype``. Raises ValueError past what a ``size_t`` holds.

    Why check? ctypes masks a Python int to the C type: 2**64 + 4 bytes would reach the driver as 4.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= ADDRESS_LIMIT:
        raise ValueError(
            f"shape {shape} of {dtype} is {nbytes} bytes, more than any allocation can hold "
            f"(a size_t ends at 2**64 - 1): check how the shape was computed"
        )
    return nbytes


def normalize_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype. Raises TypeError for one that holds Python objects."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(
            f"dtype {dt} holds Python objects, which cannot live in GPU memory: use a numeric dtype "
            "(np.float32, np.int64 ...) or a structured dtype of numbers"
        )
    return dt


def check_match(buffer: Any, shape: tuple[int, ...], dtype: np.dtype, action: str) -> None:
    """Refuse a copy between ``buffer`` and an array of another dtype (TypeError) or shape (ValueError)."""
    if dtype != buffer.dtype:
        raise TypeError(
            f"cannot {action} a {dtype} array: this buffer holds {buffer.dtype}; convert first "
            f"(e.g. a.astype(np.{buffer.dtype.name})) -- rawcuda never converts silently"
        )
    if tuple(shape) != buffer.shape:
        raise ValueError(
            f"cannot {action} an array of shape {tuple(shape)}: this buffer has shape {buffer.shape} "
            f"({buffer.nbytes} bytes); reshape one of them or make a view"
        )


def exact_element(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as a one-element array of ``dtype``, or a TypeError when that would change it.

    numpy's casting rules decide by *type*. An int64 into uint8 is "unsafe" even for 255. An int into an int32
    silently wraps. A fill decides by *value*. 255 fits a uint8; 2**40 does not fit an int32. 1.5 is not an
    integer, and 1e40 becomes inf in float32. Ordinary rounding (0.1 in float32) is not a change.
    """

    def refuse(why: str) -> TypeError:
        return TypeError(f"cannot fill a {dtype} buffer with {value!r}: {why}")

    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]  # a 0-d array is a scalar in a box: judge the scalar

    if dtype.kind in "iub":
        if isinstance(value, float | np.floating) or not isinstance(value, int | np.integer | np.bool_):
            raise refuse(f"{dtype} holds only integers; pass int(value) if you mean to truncate")
        low, high = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        if not low <= int(value) <= high:
            raise refuse(f"{dtype} holds the integers {low}..{high}; pass a value in that range")
        return np.array([int(value)], dtype)
    if dtype.kind in "fc":
        if not isinstance(value, int | float | complex | np.number | np.bool_):
            raise refuse(f"{dtype} holds numbers; pass a number")
        if dtype.kind == "f" and isinstance(value, complex | np.complexfloating):
            raise refuse(f"{dtype} holds real numbers; pass value.real if that is what you mean")
        with np.errstate(over="ignore"):
            element = np.array([value], dtype)
        if np.isfinite(complex(value)) and not np.isfinite(element[0]):
            limit = np.finfo(dtype).max
            raise refuse(f"{dtype} holds finite magnitudes up to {limit:.4g}; {value!r} would become inf")
        return element
    try:
        return np.asarray(value).astype(dtype, casting="same_kind").reshape(1)
    except (TypeError, ValueError) as exc:
        raise refuse(str(exc)) from None


__all__ = ["check_match", "exact_element", "normalize_dtype", "normalize_shape"]
