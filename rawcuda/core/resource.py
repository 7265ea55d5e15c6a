"""Core: what every child of a context has in common -- a handle, a context, and a safe ``close()``.

The rules (docs/architecture.md, "Lifetimes"), in one place so each class cannot get them slightly wrong:

* the object holds a strong reference to its :class:`~rawcuda.core.context.Context`;
* ``close()`` releases the handle now, is idempotent, and is what ``with`` calls on exit;
* if the object is garbage-collected unclosed, a ``weakref.finalize`` releases the handle -- unless the
  context is already closed or poisoned, the process was forked, or the interpreter is exiting, in which
  case it leaks (a leak at exit is harmless; a driver call into a dead context can crash);
* using a closed object raises :class:`~rawcuda.checked.errors.ClosedError` before any driver call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rawcuda.checked.errors import ClosedError

from .closecounter import closes
from .closeorder import CloseOrder
from .context import Context
from .guards.capturedeferral import finalize_child, finalize_weak_child


class Resource:
    """Base of Stream, Event, DeviceBuffer, PinnedBuffer, Module ... (anything a context owns)."""

    close_order = CloseOrder.OTHER  # where Context.close() closes it (the table is in context.py)
    #: True for what rawcuda makes for itself and keeps for its context's lifetime (rawcuda.ops' modules,
    #: rawcuda.extras.aio's idle wait streams): closed with the context, and not counted as a leak (rawcuda.testing).
    internal = False
    _finalizer: weakref.finalize | None = None

    def __init__(self, context: Context) -> None:
        self.context = context
        self._closed = False
        context.adopt(self)

    def _own(self, release: Callable[..., None], *args: Any) -> None:
        """Record how to release the handle: close() calls it now, the GC later if close() never ran."""
        self._release = (release, args)
        self._finalizer = weakref.finalize(self, finalize_child, self.context, release, *args)
        self._finalizer.atexit = False

    def hold_context_weakly(self) -> None:
        """Let the garbage-collection fallback refer to the context weakly, so that the context may hold this.

        The fallback (a ``weakref.finalize``) normally holds the context: it must make it current to release
        the handle. The finalizer registry is a root, so an object the *context itself* holds -- rawcuda.ops
        keeps its Modules in ``Context.cache`` -- would keep the context alive through its own finalizer,
        and neither could ever be collected. After this, dropping the context unclosed frees both: a created
        context is destroyed with everything in it; a primary one is released, and the child's memory or code
        stays in it until the primary context resets (close() the context to release the child properly).
        ``close()`` itself is unchanged.
        """
        if self._finalizer is None or self._finalizer.detach() is None:
            return  # closed already, or owns nothing
        release, args = self._release
        self._finalizer = weakref.finalize(self, finalize_weak_child, weakref.ref(self.context), release, *args)
        self._finalizer.atexit = False

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise :class:`~rawcuda.checked.errors.ClosedError` if this object was closed."""
        if self._closed:
            raise ClosedError(f"{self!r} is closed; create a new one (closed objects cannot be reopened)")

    def close(self) -> None:
        """Release the driver handle now. Safe to call twice, and after the context has gone."""
        if self._closed:
            return
        self._closed = True
        closes.generation += 1
        finalizer = self._finalizer
        if finalizer is not None and finalizer.detach() is not None:
            ctx = self.context
            if ctx.usable:
                release, args = self._release
                ctx.activate()
                release(*args)
        self.context.forget(self)

    def __enter__(self) -> Any:
        self.check_open()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
