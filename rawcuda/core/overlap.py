"""Core: a copy between overlapping ranges of device memory, done right -- as ``memmove`` does.

``cuMemcpyDtoD`` on overlapping ranges is undefined, and on the H200 it is wrong: shifting 16 Mi floats
by one element left up to 960,720 of them stale. numpy's ``a[:-1] = a[1:]`` is well defined, and a
buffer's ``copy_from`` must agree with it. So an overlapping copy goes through a temporary buffer: source
to temporary, temporary to destination. It costs a second copy and ``nbytes`` of device memory for the
copy's duration, and only overlapping copies pay it (docs/hazards.md, "Overlapping copies are staged").
"""

from __future__ import annotations

from ctypes import byref, c_uint64

from rawcuda.checked import cu


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
    to it when the second copy has run (so nothing here waits, and a capture records all four steps)."""
    scratch = c_uint64()
    cu.cuMemAllocAsync(byref(scratch), nbytes, stream)
    try:
        cu.cuMemcpyDtoDAsync(scratch.value, src, nbytes, stream)
        cu.cuMemcpyDtoDAsync(dst, scratch.value, nbytes, stream)
    finally:
        cu.cuMemFreeAsync(scratch.value, stream)


__all__ = ["overlaps", "staged_copy", "staged_copy_async"]
