"""Core: what every child of a context has in common -- a handle, a context, and a safe ``close()``.

The rules (docs/architecture.md, "Lifetimes") live in one place, so no class can get them slightly wrong.

* The object holds a strong reference to its :class:`~rawcuda.core.context.Context`.
* ``close()`` releases the handle now. It is idempotent, and it is what ``with`` calls on exit.
* An object garbage-collected unclosed is released by a ``weakref.finalize``.
* That fallback leaks instead when the context is closed or poisoned, the process was forked, or the
  interpreter is exiting. A leak at exit is harmless; a driver call into a dead context can crash.
* Using a closed object raises :class:`~rawcuda.checked.errors.ClosedError` before any driver call.
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
    """The base of anything a context owns: Stream, Event, DeviceBuffer, PinnedBuffer, Module and more."""

    close_order = CloseOrder.OTHER  # where Context.close() closes it (the table is in closeorder.py)
    #: True for what rawcuda makes for itself and keeps for its context's lifetime: rawcuda.ops' modules,
    #: rawcuda.extras.aio's idle wait streams. Closed with the context; rawcuda.testing counts it as no leak.
    internal = False
    _finalizer: weakref.finalize | None = None

    def __init__(self, context: Context) -> None:
        self.context = context
        self._closed = False
        context.adopt(self)

    def _own(self, release: Callable[..., None], *args: Any) -> None:
        """Record how to release the handle. close() calls it now; the garbage collector, if close() never runs."""
        self._release = (release, args)
        self._finalizer = weakref.finalize(self, finalize_child, self.context, release, *args)
        self._finalizer.atexit = False

    def hold_context_weakly(self) -> None:
        """Let the garbage-collection fallback hold the context weakly, so that the context may hold this.

        Call it on a child the context itself keeps, as rawcuda.ops does for its Modules in ``Context.cache``.
        Dropping the context unclosed then frees both. A created context is destroyed with everything in it.
        A primary one is released; the child's memory or code stays in it until the primary context resets.
        Close the context to release the child properly. ``close()`` itself is unchanged.
        """
        # Why: docs/hazards.md, "A child the context holds".
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
