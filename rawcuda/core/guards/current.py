"""Core guard: which context is current on this thread, asked of the driver each time and never remembered.

Every driver call that names no context works in the thread's current one. torch, CuPy and cuda-python
switch it too, so a remembered answer lies. :func:`make_current` asks (``cuCtxGetCurrent``, about 0.4 us
on the H200's host) and switches only when it must.

Kernel launches do not ask. In the wrong context the driver refuses them and runs nothing, with one of
``WRONG_CONTEXT_CODES``. Only then does a launch make the right context current and try once more.
``GraphExec.launch`` does ask. On the legacy stream with another context current, a graph launch runs on
that context's legacy stream (measured on the H200).

docs/hazards.md, "What is current"
"""

from __future__ import annotations

import threading
from ctypes import byref, c_void_p, pointer
from typing import Any

from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

#: What a launch returns when the thread's current context is not the kernel's (docs/hazards.md, "What is current").
# (CONTEXT_IS_DESTROYED too: another library may destroy its context and leave it current on this thread.)
WRONG_CONTEXT_CODES = frozenset(
    {Result.ERROR_INVALID_HANDLE, Result.ERROR_INVALID_CONTEXT, Result.ERROR_CONTEXT_IS_DESTROYED}
)

_get_current = checked.hot_slot("cuCtxGetCurrent")


class _Answer(threading.local):
    """Where cuCtxGetCurrent writes, one per thread.

    ctypes releases the GIL during the call. A shared variable could be overwritten by another thread's
    answer before this thread reads its own.
    """

    def __init__(self) -> None:
        self.value = c_void_p()
        self.pointer: Any = pointer(self.value)


_answer = _Answer()


def current_handle() -> int:
    """The CUcontext current on this thread (0 for none), as the driver says now."""
    answer = _answer
    rc = _get_current.call(answer.pointer)
    if rc:
        checked.raise_for(rc, "cuCtxGetCurrent", (answer.pointer,))
    return answer.value.value or 0


def make_current(handle: int) -> None:
    """Make ``handle`` this thread's current context, unless the driver says it already is."""
    if current_handle() != handle:
        cu.cuCtxSetCurrent(handle)


def peek_current() -> int:
    """Like :func:`current_handle`, but never raises: 0 when the driver cannot say.

    It is for code that runs while an error is being built or reported.
    """
    current = c_void_p()
    getter = checked.quiet("cuCtxGetCurrent")
    if getter is None or getter(byref(current)) != 0:
        return 0
    return current.value or 0
