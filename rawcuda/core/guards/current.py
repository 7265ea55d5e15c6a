"""Core guard: which context is current on this thread -- asked of the driver each time, never remembered.

The driver keeps a current context per thread, and every call that does not name a context (cuMemAlloc,
cuModuleLoadData, cuStreamCreate ...) works in it. rawcuda used to remember, per thread, the context it
had last made current, and skip ``cuCtxSetCurrent`` when the memory said it was already there. Why is that
wrong? Because rawcuda is not alone in the process: torch, CuPy and cuda-python switch the thread's
context too, and so does ``rawcuda.cu.cuCtxSetCurrent``. The memory then lies, and a
``DeviceBuffer(context=primary)`` is allocated in whatever context the other library left current --
and freed under you when that one is destroyed. So :func:`make_current` asks the driver
(``cuCtxGetCurrent``, about 0.4 us from Python on the H200's host) and switches only when it must.

The launch paths do not ask at all, and this is why they need not (measured on the H200, driver 580):
``cuLaunchKernel`` on a stream of the kernel's own context runs in that context whatever is current, and
on the legacy or per-thread default stream with another context current it fails with
``CUDA_ERROR_INVALID_HANDLE`` (no context current: ``CUDA_ERROR_INVALID_CONTEXT``) and launches nothing.
So a launch goes straight to the driver, and only on one of those two codes makes the right context
current and tries once more: the common case pays nothing, and no case runs in the wrong context.

``cuGraphLaunch`` is different, and so ``GraphExec.launch`` does ask: on the legacy stream with another
context current it *succeeds* -- on that other context's legacy stream, out of order with the work of its
own (measured on the same machine). Only "no context current" is refused there (CUDA_ERROR_INVALID_CONTEXT).
"""

from __future__ import annotations

import threading
from ctypes import byref, c_void_p, pointer
from typing import Any

from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

#: What a launch returns when the thread's current context is not the kernel's (see the module docstring).
# (CONTEXT_IS_DESTROYED too: another library may destroy its context and leave it current on this thread.)
WRONG_CONTEXT_CODES = frozenset(
    {Result.ERROR_INVALID_HANDLE, Result.ERROR_INVALID_CONTEXT, Result.ERROR_CONTEXT_IS_DESTROYED}
)

_get_current = checked.hot_slot("cuCtxGetCurrent")


class _Answer(threading.local):
    """Where cuCtxGetCurrent writes, one per thread: ctypes releases the GIL during the call, so a shared
    variable could be overwritten by another thread's answer before this thread reads its own."""

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
    """Like :func:`current_handle`, but never raises (0 when the driver cannot say): for code that runs while
    an error is being built or reported."""
    current = c_void_p()
    getter = checked.quiet("cuCtxGetCurrent")
    if getter is None or getter(byref(current)) != 0:
        return 0
    return current.value or 0
