"""Layer 2: what every child of a context has in common -- a handle, a context, and a safe ``close()``.

The rules (ARCHITECTURE.md, "Lifetimes"), in one place so each class cannot get them slightly wrong:

* the object holds a strong reference to its :class:`~rawcuda.context.Context`;
* ``close()`` releases the handle now, is idempotent, and is what ``with`` calls on exit;
* if the object is garbage-collected unclosed, a ``weakref.finalize`` releases the handle -- unless the
  context is already closed or poisoned, the process was forked, or the interpreter is exiting, in which
  case it leaks (a leak at exit is harmless; a driver call into a dead context can crash);
* using a closed object raises :class:`~rawcuda.errors.ClosedError` before any driver call.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .context import Context, finalize_child
from .errors import ClosedError

#: Bumped by every close(); lets a launch cache know that no buffer it packed has been closed since.
close_generation = [0]


class Resource:
    """Base of Stream, Event, DeviceBuffer, PinnedBuffer, Module ... (anything a context owns)."""

    _close_rank = 0  # Context.close() closes children in increasing rank
    _finalizer: weakref.finalize | None = None

    def __init__(self, context: Context) -> None:
        self.context = context
        self._closed = False
        context._adopt(self)

    def _own(self, release: Callable[..., None], *args: Any) -> None:
        """Record how to release the handle: close() calls it now, the GC later if close() never ran."""
        self._release = (release, args)
        self._finalizer = weakref.finalize(self, finalize_child, self.context, release, *args)
        self._finalizer.atexit = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed; create a new one (closed objects cannot be reopened)")

    def close(self) -> None:
        """Release the driver handle now. Safe to call twice, and after the context has gone."""
        if self._closed:
            return
        self._closed = True
        close_generation[0] += 1
        finalizer = self._finalizer
        if finalizer is not None and finalizer.detach() is not None:
            ctx = self.context
            if ctx._unusable is None and os.getpid() == ctx._pid:
                release, args = self._release
                ctx.activate()
                release(*args)
        self.context._forget(self)

    def __enter__(self) -> Any:
        self._check_open()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
