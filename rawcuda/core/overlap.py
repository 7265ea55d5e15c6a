"""Core: a copy between overlapping ranges of device memory, done right -- as ``memmove`` does.

``cuMemcpyDtoD`` on overlapping ranges is undefined, and on the H200 it is wrong: shifting 16 Mi floats
by one element left up to 960,720 of them stale. numpy's ``a[:-1] = a[1:]`` is well defined, and a
buffer's ``copy_from`` must agree with it. So an overlapping copy goes through a temporary buffer: source
to temporary, temporary to destination. It costs a second copy and ``nbytes`` of device memory for the
copy's duration, and only overlapping copies pay it (docs/hazards.md, "Overlapping copies are staged").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from ctypes import byref, c_int, c_uint64

from rawcuda.checked import cu
from rawcuda.ffi.constants import StreamCaptureMode


def overlaps(dst: int, src: int, nbytes: int) -> bool:
    """Whether ``nbytes`` at ``dst`` and ``nbytes`` at ``src`` share a byte (a copy onto itself included)."""
    return nbytes > 0 and dst < src + nbytes and src < dst + nbytes


def staged_copy(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` from ``src`` to ``dst`` through a temporary, with the context current and idle."""
    scratch = c_uint64()
    cu.cuMemAlloc(byref(scratch), nbytes)
    try:
        cu.cuMemcpyDtoD(scratch.value, src, nbytes)
        cu.cuMemcpyDtoD(dst, scratch.value, nbytes)
        # A device-to-device cuMemcpy may return before it is done: wait before the scratch is freed.
        cu.cuCtxSynchronize()
    finally:
        cu.cuMemFree(scratch.value)


def staged_copy_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """The same, ordered on ``stream``: the scratch comes from the stream-ordered allocator, and goes back
    to it when the second copy has run, so nothing here waits. Not for a capture: see :func:`copy_through`."""
    scratch = c_uint64()
    cu.cuMemAllocAsync(byref(scratch), nbytes, stream)
    try:
        copy_through(dst, src, nbytes, scratch.value, stream)
    finally:
        cu.cuMemFreeAsync(scratch.value, stream)


def copy_through(dst: int, src: int, nbytes: int, scratch: int, stream: int) -> None:
    """Source to ``scratch``, then ``scratch`` to destination, on ``stream``.

    A capture uses this with a scratch buffer its graph keeps: stream-ordered allocation would become
    memory nodes, and a graph with those can have only one executable at a time.
    """
    cu.cuMemcpyDtoDAsync(scratch, src, nbytes, stream)
    cu.cuMemcpyDtoDAsync(dst, scratch, nbytes, stream)


@contextlib.contextmanager
def relaxed_capture() -> Iterator[None]:
    """Let this thread allocate while a stream captures (cuMemAlloc is "potentially unsafe" in the stricter
    capture modes, and would end the capture); the thread's own mode comes back after."""
    mode = c_int(StreamCaptureMode.RELAXED)
    cu.cuThreadExchangeStreamCaptureMode(byref(mode))
    try:
        yield
    finally:
        cu.cuThreadExchangeStreamCaptureMode(byref(mode))


__all__ = ["copy_through", "overlaps", "relaxed_capture", "staged_copy", "staged_copy_async"]
