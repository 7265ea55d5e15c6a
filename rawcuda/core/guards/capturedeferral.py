"""Core guard: releases that wait while a stream capture is open, and where the legacy stream is forbidden.

The cyclic GC may run a finalizer inside ``with capture(stream):``. A release there is a call capture
forbids, and the driver would invalidate the capture. So finalizers queue their release until the last
capture ends. An operation on the legacy default stream can break an open capture too: each capture says
where (:class:`LegacyHazard`), and :meth:`CaptureDeferral.refuse_legacy` refuses it there.

docs/hazards.md, "Capture deferral"
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from rawcuda.core.closecounter import closes

from .contextstack import pushed

if TYPE_CHECKING:
    from rawcuda.core.context import Context


class LegacyHazard(NamedTuple):
    """Where an open capture forbids touching the legacy default stream.

    That is in ``context`` (None: every one) on ``thread`` (None: every one). A capture of a *blocking*
    stream brings (its context, None). The legacy stream synchronizes with every blocking stream of its
    context, and the driver answers that by invalidating the capture. The capture's mode adds one entry
    (cuda.h, cuStreamBeginCapture). THREAD_LOCAL forbids "potentially unsafe" calls on the capturing thread:
    (None, that thread). GLOBAL forbids them on every thread: (None, None). RELAXED adds nothing. So a
    capture of a non-blocking stream on another thread, in any mode but GLOBAL, leaves this thread free.
    """

    context: int | None
    thread: int | None


#: A capture rawcuda knows nothing about: every legacy-stream operation could break it.
EVERYWHERE = LegacyHazard(None, None)


class CaptureDeferral:
    """Releases that wait while a rawcuda stream capture is open, and the legacy-stream hazards of the open captures.

    While any capture is open, a finalizer queues its release, and the last capture to end runs the queue.
    A ``close()`` the user writes inside a capture still runs at once, and fails clearly. Only the GC's
    releases wait, which nobody asked for at that moment.

    Thread-safe: one lock guards the count, the queue, the running releases and the hazards. The releases
    run outside it.
    """

    def __init__(self) -> None:
        # Re-entrant: an allocation under the lock may run the GC, and a finalizer there calls defer() on this
        # thread (a plain Lock deadlocked: a capture loop making cyclic garbage hung on the H200).
        self._lock = threading.RLock()
        self.open_captures = 0
        self._queue: list[tuple[Context, Callable[..., None], tuple[Any, ...]]] = []
        self._running: list[tuple[Context, Callable[..., None], tuple[Any, ...]]] = []  # taken off, not done yet
        self._hazards: list[LegacyHazard] = []  # of the open captures, one entry per hazard each brought

    def begin(self, hazards: tuple[LegacyHazard, ...] = (EVERYWHERE,)) -> None:
        """A capture opens. ``hazards`` says where a legacy-stream operation would break it (unknown: everywhere)."""
        with self._lock:
            self.open_captures += 1
            self._hazards.extend(hazards)

    def end(self, hazards: tuple[LegacyHazard, ...] = (EVERYWHERE,)) -> None:
        """The capture that :meth:`begin` was told of, with the same ``hazards``, is over."""
        with self._lock:
            self.open_captures -= 1
            for hazard in hazards:
                self._hazards.remove(hazard)
            queue, self._queue = (self._queue, []) if self.open_captures == 0 else ([], self._queue)
            self._running.extend(queue)  # holds() still sees them until each release has run (it waits)
        for item in queue:
            context, release, args = item
            try:
                finalize_child(context, release, *args)
            finally:
                with self._lock:
                    self._running.remove(item)

    def defer(self, context: Context, release: Callable[..., None], args: tuple[Any, ...]) -> bool:
        """Queue the release if a capture is open (True), else leave it to the caller (False)."""
        with self._lock:
            if self.open_captures == 0:
                return False
            self._queue.append((context, release, args))
            return True

    def pending(self) -> int:
        """How many releases wait for the open captures to end."""
        return len(self._queue)

    def refuse_legacy(self, what: str, context: int | None) -> None:
        """Raise BufferError if ``what`` could break an open capture (see :class:`LegacyHazard`).

        ``what`` is about to touch the legacy default stream of ``context`` on this thread. ``context`` is a
        CUcontext, or None when not known. The driver would invalidate the capture, and the user's graph
        would be lost (seen on the H200).
        """
        here = threading.get_ident()
        with self._lock:
            hit = any(
                (hazard.context is None or context is None or hazard.context == context)
                and (hazard.thread is None or hazard.thread == here)
                for hazard in self._hazards
            )
        if hit:
            raise BufferError(
                f"{what} would use the legacy default stream while a graph capture is open, which invalidates "
                "the capture: do it after the capture ends, or keep the legacy stream out of it -- rawcuda "
                "streams of your own (stream=), a producer on a non-default stream -- or capture a NON_BLOCKING "
                "stream in RELAXED mode on another thread"
            )

    def holds(self, release: Callable[..., None], handle: int) -> bool:
        """Whether ``release(handle, ...)`` is queued or running: the object is dead, its handle not yet released.

        A stream's release waits for its work. Until it returns, that work may still run.
        """
        with self._lock:
            return any(queued is release and args[:1] == (handle,) for _, queued, args in self._queue + self._running)


#: The process's one deferral queue (streamcapture.Capture calls begin() and end()).
capture_deferral = CaptureDeferral()


def finalize_child(context: Context, release: Callable[..., None], *args: Any) -> None:
    """The fallback release of a child (buffer, stream ...) that was garbage-collected without close().

    It pushes and pops the context rather than activating it. A finalizer runs on whatever thread the GC
    chose, and must leave that thread's current context as it found it. It releases nothing while the
    interpreter exits or when the context is unusable. While a capture is open, it queues the release.
    """
    if sys.is_finalizing() or not context.usable:
        return
    if capture_deferral.defer(context, release, args):
        # The object is dead even though its handle is not released yet: move the close counter now, as a
        # release would. Launch caches key streams by id(), and a new Stream may get the dead one's id at once
        # (seen on the H200: during another thread's capture, launches on a new stream went to the dead one).
        closes.generation += 1
        return
    with contextlib.suppress(Exception), pushed(context.raw_handle, []) as here:
        if here:  # (a refused push: the context is gone or poisoned, and nothing may call into it)
            release(*args)


def finalize_weak_child(context_ref: weakref.ref[Context], release: Callable[..., None], *args: Any) -> None:
    """:func:`finalize_child` for a child that lets go of its context first (:meth:`Resource.hold_context_weakly`).

    The context object may be gone too, collected in the same cycle. Its own finalizer then destroys or
    releases the context, and this releases nothing. Leaking is the rule whenever calling in is not known
    to be safe.
    """
    context = context_ref()
    if context is not None:
        finalize_child(context, release, *args)
