"""Testing: compare what a kernel wrote with a numpy reference, and say exactly how they differ.

``assert np.allclose(buf.to_array(), expected)`` fails with ``assert False``: no count, no index, no value.
:func:`assert_device_equal` copies the buffer to the host and, when it differs, raises an AssertionError
that answers the questions one asks next (one long first line, folded here)::

    DeviceBuffer (1048576,) float32 differs from the expected array: 3 of 1048576 elements (0.000286%)
        are not within atol=0 + rtol=1e-06 * |expected|
    max abs error 0.5 at index (17,); max rel error 0.25 at index (17,)
    first mismatches (index: got, expected, abs error):
      (17,): 2.5, 2.0, 0.5
      (901,): nan, 1.0, nan
      (4000,): 1.5, 1.25, 0.25

The comparison itself is :func:`array_mismatch`, plain numpy (host arrays in, a message or None out), so it
is tested without a GPU. The rules:

* **Shapes must be equal, and dtypes too.** Nothing is converted behind your back: a float32 result compared
  with a float64 reference is a mistake half of the time (the reference was computed at another precision)
  and a decision the other half -- say which with ``expected.astype(np.float32)``. A Python scalar or list
  (or a numpy scalar) as ``expected`` takes the buffer's dtype (``assert_device_equal(buf, 0.0)``: every
  element zero) -- only when its values survive that: 1.5 for an int32 buffer, 2 for a bool one, 1e40 for a
  float32 one (it would become inf) or -1 for a uint8 one is a ValueError, not a comparison with the 1, True,
  inf or 255 the cast would make. (Rounding a float to a float buffer's precision is no loss: 0.1 is fine.)
* **Floating and complex elements** match when ``|got - expected| <= atol + rtol * |expected|``, as in
  ``numpy.isclose``; with ``equal_nan`` (the default) a NaN matches a NaN, and nothing else.
* **Integers and booleans** must be equal: a tolerance on counts or indices hides off-by-one errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.pinned import PinnedBuffer

#: How many mismatching elements the message lists (the count says how many there are in all).
SHOWN_MISMATCHES = 10
#: numpy.testing.assert_allclose's defaults: a relative tolerance below float32's epsilon, so float32 results
#: usually need ``rtol=1e-6`` or so -- a choice the test should make, and show.
DEFAULT_RTOL = 1e-7
DEFAULT_ATOL = 0.0
ERROR_DIGITS = 6  # significant digits of the errors in the message


def host_copy(buf: Any) -> np.ndarray:
    """What ``buf`` holds, as a host numpy array it does not share.

    A DeviceBuffer (a view, a ManagedBuffer, a GrowableBuffer's view) is copied with ``to_array()``, which
    waits for all work in its context first; a PinnedBuffer's context is synchronized before its memory is
    read (async copies into it may still be running); a numpy array is taken as it is.
    """
    if isinstance(buf, DeviceBuffer):
        return buf.to_array()
    if isinstance(buf, PinnedBuffer):
        buf.context.synchronize()
        return np.array(buf.array, copy=True)
    if isinstance(buf, np.ndarray):
        return buf
    raise TypeError(
        f"assert_device_equal compares a rawcuda DeviceBuffer, ManagedBuffer, PinnedBuffer or a numpy array, "
        f"not {type(buf).__name__}"
    )


def array_mismatch(
    got: np.ndarray,
    expected: Any,
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    equal_nan: bool = True,
    what: str = "array",
) -> str | None:
    """None when ``got`` matches ``expected`` under the rules above; otherwise the message saying how not."""
    if rtol < 0 or atol < 0:
        raise ValueError(f"tolerances must be 0 or more, not rtol={rtol!r}, atol={atol!r}")
    want = np.asarray(expected) if isinstance(expected, np.ndarray) else _in_dtype(expected, got.dtype)
    if want.ndim == 0 and got.ndim != 0:
        want = np.broadcast_to(want, got.shape)  # one value for every element
    if got.shape != want.shape:
        return f"shape mismatch: the {what} has shape {got.shape}, the expected array {want.shape}"
    if got.dtype != want.dtype:
        return (
            f"dtype mismatch: the {what} holds {got.dtype}, the expected array {want.dtype} "
            f"(compare like with like: expected.astype(np.{got.dtype.name}) if that is what you mean)"
        )
    if got.dtype.names is not None:
        return _record_mismatch(got, want, (rtol, atol, equal_nan), what)
    exact = not np.issubdtype(got.dtype, np.inexact)
    bad = got != want if exact else ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    rule = "are not equal" if exact else f"are not within atol={atol:g} + rtol={rtol:g} * |expected|"
    share = f"{100 * count / got.size:.3g}%"
    lines = [f"{what} differs from the expected array: {count} of {got.size} elements ({share}) {rule}"]
    where = np.argwhere(bad)
    abs_err = _abs_error(got, want)
    lines.append(_worst(abs_err, want, bad))
    lines.append("first mismatches (index: got, expected, abs error):")
    for index in where[:SHOWN_MISMATCHES]:
        key = tuple(int(i) for i in index)
        lines.append(f"  {key}: {_show(got[key])}, {_show(want[key])}, {_error(abs_err[key])}")
    if count > SHOWN_MISMATCHES:
        lines.append(f"  ... and {count - SHOWN_MISMATCHES} more")
    return "\n".join(lines)


def assert_device_equal(
    buf: Any,
    expected: Any,
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    equal_nan: bool = True,
) -> None:
    """Raise AssertionError, with the differences spelled out, unless ``buf`` holds ``expected``.

    ``buf``: a DeviceBuffer (or a view of one, a ManagedBuffer), a PinnedBuffer or a numpy array; it is
    copied to the host after its context's work is done (:func:`host_copy`). ``expected``: a numpy array of
    the same shape and dtype, or a scalar or list (taken in ``buf``'s dtype). Tolerances as in
    ``numpy.isclose``, applied to floating and complex elements only (see the module docstring).
    """
    got = host_copy(buf)
    message = array_mismatch(got, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, what=_describe(buf))
    if message is not None:
        raise AssertionError(message)


def _field_bad(got: np.ndarray, want: np.ndarray, rules: tuple[float, float, bool], prefix: str = "") -> dict[str, Any]:
    """Field name (nested ones dotted) -> which elements differ there: floats by the tolerances, the rest exactly."""
    rtol, atol, equal_nan = rules
    found: dict[str, Any] = {}
    for name in got.dtype.names or ():
        g, w, label = got[name], want[name], prefix + name
        if g.dtype.names is not None:  # nested records (a subarray of them too: its fields come back wider)
            found.update({sub: _per_element(bad, got) for sub, bad in _field_bad(g, w, rules, label + ".").items()})
            continue
        inexact = np.issubdtype(g.dtype, np.inexact)
        bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan) if inexact else g != w
        found[label] = _per_element(bad, got)
    return found


def _per_element(bad: np.ndarray, got: np.ndarray) -> np.ndarray:
    """``bad`` of a subarray field, one flag per element of ``got``: it differs where any of its values does."""
    if bad.ndim > got.ndim:
        return bad.reshape(*got.shape, int(np.prod(bad.shape[got.ndim :]))).any(axis=-1)
    return bad


def _record_mismatch(got: np.ndarray, want: np.ndarray, rules: tuple[float, float, bool], what: str) -> str | None:
    """:func:`array_mismatch` for a structured dtype: which records differ, in which fields."""
    fields = _field_bad(got, want, rules)
    bad = np.zeros(got.shape, dtype=bool)
    for field in fields.values():
        bad |= field
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    rtol, atol, _ = rules
    lines = [
        f"{what} differs from the expected array: {count} of {got.size} elements ({100 * count / got.size:.3g}%) "
        f"differ in some field (float fields within atol={atol:g} + rtol={rtol:g} * |expected|, the rest exactly)"
    ]
    for label, field in fields.items():
        if (n := int(np.count_nonzero(field))) > 0:
            lines.append(f"  field {label!r}: {n} element{'s' if n != 1 else ''}")
    lines.append("first mismatches (index: got, expected):")
    for index in np.argwhere(bad)[:SHOWN_MISMATCHES]:
        key = tuple(int(i) for i in index)
        lines.append(f"  {key}: {_show(got[key])}, {_show(want[key])}")
    if count > SHOWN_MISMATCHES:
        lines.append(f"  ... and {count - SHOWN_MISMATCHES} more")
    return "\n".join(lines)


def _in_dtype(expected: Any, dtype: np.dtype) -> np.ndarray:
    """A scalar or list ``expected`` in the buffer's ``dtype``; ValueError when a value does not survive the cast."""
    if dtype.names is not None:
        raise TypeError(
            f"a buffer of records ({dtype}) is compared with a numpy array of its dtype, not with "
            f"{type(expected).__name__} {expected!r}: pass np.array(records, dtype=buf.dtype)"
        )
    given = np.asarray(expected)
    if given.dtype == object or given.dtype.kind not in "biufc":
        raise TypeError(
            f"expected must be a numpy array, a number or a (nested) list of numbers, not {type(expected).__name__} "
            f"({given.dtype})"
        )
    dropped_imag = np.zeros(given.shape, bool)
    if given.dtype.kind == "c" and dtype.kind != "c":  # (a cast would drop the imaginary part with a warning)
        dropped_imag = given.imag != 0
        given = given.real
    with np.errstate(all="ignore"):  # out-of-range casts are detected below, not warned about
        want = given.astype(dtype)
        if dtype.kind in "biu":  # exact types: every value must come back unchanged
            kept = want.astype(given.dtype) == given
        else:  # floats round to the buffer's precision, but must not overflow or go NaN
            kept = (np.isfinite(want) | ~np.isfinite(given)) & (np.isnan(want) == np.isnan(given))
    kept = np.asarray(kept) & ~dropped_imag
    given = np.asarray(expected)
    if not np.all(kept):
        first = tuple(int(i) for i in np.argwhere(~kept)[0]) if given.ndim else ()
        where = f" at index {first}" if given.ndim else ""
        raise ValueError(
            f"the expected value {given[first]}{where} does not fit the buffer's dtype {dtype}: the cast would "
            f"make it {want[first]}, and the comparison would lie -- compare with a value {dtype} holds, or with an "
            f"expected array of the dtype you mean (a dtype mismatch is reported as such)"
        )
    return want


# --- the message's parts -------------------------------------------------------------------------------------
def _abs_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - expected|: float64 for floats (complex: the modulus); exact for integers, as uint64."""
    if np.issubdtype(got.dtype, np.complexfloating):
        return np.abs(got.astype(np.complex128) - want.astype(np.complex128))
    if got.dtype == np.bool_:
        return (got != want).astype(np.float64)
    if np.issubdtype(got.dtype, np.integer):
        # float64 would round: 2**53 + 1 - 2**53 came out as 0. Modular uint64 subtraction of the smaller from
        # the larger is exact for any two 64-bit integers (the difference is below 2**64).
        high, low = np.maximum(got, want), np.minimum(got, want)
        return high.astype(np.uint64) - low.astype(np.uint64)
    return np.abs(got.astype(np.float64) - want.astype(np.float64))


def _worst(abs_err: np.ndarray, want: np.ndarray, bad: np.ndarray) -> str:
    """The line with the largest absolute and relative errors among the mismatches (finite ones only)."""
    finite = bad & np.isfinite(abs_err)
    if not finite.any():
        return "no finite error to report: every mismatch involves a NaN or an infinity"
    ranked = np.where(finite, abs_err, 0) if abs_err.dtype.kind == "u" else np.where(finite, abs_err, -1.0)
    at_abs = np.unravel_index(int(np.argmax(ranked)), abs_err.shape)  # (uint64 ranked as uint64: exact)
    line = f"max abs error {_error(abs_err[at_abs])} at index {_index(at_abs)}"
    wide = np.complex128 if np.iscomplexobj(want) else np.float64
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = abs_err / np.abs(want.astype(wide))
    rel = np.where(finite & np.isfinite(rel), rel, -1.0)
    if not (rel >= 0).any():
        return line + "; no relative error (every finite mismatch is against an expected 0)"
    at_rel = np.unravel_index(int(np.argmax(rel)), rel.shape)
    return line + f"; max rel error {_error(rel[at_rel])} at index {_index(at_rel)}"


def _index(index: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in index)


def _show(value: Any) -> str:
    """An element as numpy prints it, in its own precision: ``0.1`` (not float32's 0.10000000149...), ``nan``."""
    return str(value)


def _error(value: Any) -> str:
    """An error, to ERROR_DIGITS significant digits (its own precision would be float64's 17); an integer's
    exactly."""
    if isinstance(value, np.integer):
        return str(int(value))
    return f"{float(value):.{ERROR_DIGITS}g}"


def _describe(buf: Any) -> str:
    if isinstance(buf, DeviceBuffer | PinnedBuffer):
        return f"{type(buf).__name__} {buf.shape} {buf.dtype}"
    return "array"


__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "SHOWN_MISMATCHES", "array_mismatch", "assert_device_equal", "host_copy"]
