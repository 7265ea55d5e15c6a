"""Core guard: every live Context object of the process, and the two events that end them all at once.

A sticky error ends CUDA for the whole process: on the H200, after a kernel fault every context fails with
the same code. So the error observer poisons every Context object, and one made later is poisoned from
birth (:func:`register` says so). A fork() gives the child the Python objects but none of the CUDA state:
every Context is marked forked, and its locks are replaced.

The registry knows contexts by duck type (``poison(error)``, ``mark_forked()``), because it sits below
context.py. One lock guards its tables; ``poison()`` is called after the lock is let go.

docs/hazards.md, "Poisoning and the context registry"
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from rawcuda import checked
from rawcuda.checked.errors import CudaError, KernelFaultError

from .current import peek_current

_live: dict[int, weakref.WeakSet[Any]] = {}  # handle -> live Context objects
_lock = threading.Lock()
_poisoned: dict[int, CudaError] = {}  # handle -> the sticky error that poisoned it


def register(context: Any, handle: int) -> CudaError | None:
    """Track ``context``; returns the sticky error that already ended CUDA in this process, if one did."""
    with _lock:
        _live.setdefault(handle, weakref.WeakSet()).add(context)
        return next(iter(_poisoned.values()), None)


def live_contexts() -> list[Any]:
    """Every Context object of this process that is alive and not closed (for the leak checks of rawcuda.testing).

    With each one's ``children``, this is every open rawcuda object. It reads weak sets rawcuda keeps
    anyway, so counting costs nothing until asked.
    """
    with _lock:
        return [ctx for contexts in _live.values() for ctx in list(contexts) if not ctx.closed]


def is_poisoned(handle: int) -> bool:
    """True when a sticky error poisoned the context ``handle``: nothing may call into it any more."""
    return handle in _poisoned


def _observe(error: CudaError) -> None:
    if not isinstance(error, KernelFaultError):
        return
    with _lock:
        _poisoned.setdefault(peek_current(), error)  # the failed call ran in the current context
        victims = [(handle, ctx) for handle, contexts in _live.items() for ctx in list(contexts)]
        for handle, _ in victims:
            _poisoned.setdefault(handle, error)
    for _, ctx in victims:
        ctx.poison(error)


checked.error_observers.append(_observe)


def _after_fork_in_child() -> None:
    for contexts in _live.values():
        for ctx in list(contexts):
            ctx.mark_forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
