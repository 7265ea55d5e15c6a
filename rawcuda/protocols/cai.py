"""Protocols: consuming another library's arrays -- the CUDA Array Interface (version 3), read as its spec says.

torch tensors, CuPy and numba arrays describe their memory in ``__cuda_array_interface__``: a pointer, a
shape, a typestr, strides, a read-only flag, and a **stream**. A kernel launch that reads only ``data[0]``
ignores three promises of that dictionary:

* ``stream`` -- the producer may still be writing the array on that stream (a torch kernel queued a moment
  ago). Version 3 obliges the *consumer* to order its work after it. rawcuda records an event on the
  producer's stream and makes the launch stream wait for it (``cuStreamWaitEvent``): the GPU orders the two,
  the host does not wait. Only when the producer's stream belongs to another context (the event cannot be
  recorded there) does it fall back to waiting on the host (``cuStreamSynchronize``).
* ``data[1]``, read-only -- a kernel that writes through that pointer writes memory its owner promised
  would not change. PTX does not say which pointer parameters a kernel writes, so a read-only array is
  accepted only for parameters declared read-only (``Function.declare_read_only``).
* ``strides`` and ``mask`` -- a kernel parameter is a bare pointer, so the kernel assumes C-contiguous
  elements; a transposed or sliced view would be read in the wrong order, silently. Refused, with the fix.

The other direction (rawcuda's buffers read by others) is in :mod:`rawcuda.core.devicebuffer`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from rawcuda.ffi.constants import (
    ADDRESS_LIMIT,
    STREAM_AMBIGUOUS,
)

from .hostmap import is_bad_stream

#: The CAI versions whose ``stream`` key means "order your work after this stream" (2 had no such key).
STREAM_AWARE_VERSION = 3


class ForeignArrayError(TypeError):
    """An object with ``__cuda_array_interface__`` that cannot be passed as it is (raised before the launch)."""


#: What :func:`read_interface` returns for an object without ``__cuda_array_interface__`` (None is no mark:
#: a broken producer's property may return it, and that must be reported as malformed, not as absent).
NO_INTERFACE: Any = object()


def read_interface(value: Any) -> Any:
    """``value.__cuda_array_interface__``, read once, or NO_INTERFACE. Once: a producer may build a new dict at
    each read (a property), and the pointer, the shape and the stream must come from the same one -- so no
    ``hasattr()`` first, which calls the property too. Its own exceptions, but AttributeError, go through."""
    return getattr(value, "__cuda_array_interface__", NO_INTERFACE)


def foreign_pointer(value: Any, read_only_ok: bool, waits: list[int], cai: Any = NO_INTERFACE) -> int:
    """The device address of a CAI object, after checking what a bare pointer cannot carry; appends the
    producer's stream to ``waits`` when the launch must be ordered after it. ``cai``: the interface already
    read by :func:`read_interface` (read here when not given)."""
    name = type(value).__name__
    if cai is NO_INTERFACE:
        cai = value.__cuda_array_interface__  # the producer's own exception, if its property raises, goes through
    if not isinstance(cai, Mapping):
        raise ForeignArrayError(
            f"this {name}'s __cuda_array_interface__ is {type(cai).__name__}, not a dict: version 3 of the "
            "interface is a dict with 'data' = (pointer, read_only), 'shape', 'typestr' and 'version'"
        )
    try:
        ptr, read_only = cai["data"]
        ptr = int(ptr or 0)
        shape, typestr = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides = None if cai.get("strides") is None else tuple(int(n) for n in cai["strides"])
        version = cai["version"]
        if not isinstance(version, int):
            raise TypeError(f"version is {version!r}, not an int")
        stream = cai.get("stream") if version >= STREAM_AWARE_VERSION else None
        if stream is not None:
            # An int, as the spec says -- not int()'s reading of True, 1.9 or "2" (streams 1, 1 and 2), which
            # __dlpack__ refuses too. numbers.Integral: numpy's integers are ints here.
            if isinstance(stream, bool) or not isinstance(stream, numbers.Integral):
                raise TypeError(f"stream is {stream!r} ({type(stream).__name__}), not an int")
            stream = int(stream)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise ForeignArrayError(
            f"this {name}'s __cuda_array_interface__ is malformed ({type(exc).__name__}: {exc}): version 3 of "
            "the interface needs 'data' = (pointer, read_only), 'shape', 'typestr' and 'version'"
        ) from None
    if read_only and not read_only_ok:
        raise ForeignArrayError(
            f"this {name} is read-only (its __cuda_array_interface__ says data[1] = True), and nothing says the "
            "kernel only reads this parameter: if it does, declare it with fn.declare_read_only(index); "
            "otherwise pass a writeable copy"
        )
    if cai.get("mask") is not None:
        raise ForeignArrayError(f"this {name} is masked; a kernel pointer cannot carry a mask: pass the data only")
    if strides is not None and not _c_contiguous(shape, strides, typestr):
        raise ForeignArrayError(
            f"this {name} is not C-contiguous (strides {tuple(strides)}), but a kernel reads its elements in "
            "order from the pointer: pass a contiguous copy (torch: x.contiguous(); CuPy: cupy.ascontiguousarray(x))"
        )
    if stream is not None:
        if not 0 <= stream < ADDRESS_LIMIT:
            raise ForeignArrayError(f"this {name} names stream {stream}, which is not a CUstream handle")
        if stream == STREAM_AMBIGUOUS:
            raise ForeignArrayError(
                f"this {name} names stream 0, which the CUDA Array Interface forbids (it is ambiguous): its "
                "producer should say 1 (legacy default stream) or 2 (per-thread default stream)"
            )
        if is_bad_stream(stream):
            raise ForeignArrayError(
                f"this {name} names stream {stream:#x}, but this process cannot read memory at that address: it "
                "is no CUstream (the driver would crash reading it) -- its producer's __cuda_array_interface__ "
                "is wrong (a device pointer where the stream belongs? a stream of another process?)"
            )
        waits.append(stream)
    return ptr


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype) -> bool:
    if 0 in shape:
        return True  # no elements: any strides describe them
    expected = dtype.itemsize
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True
