"""Layer 2: events -- markers recorded into a stream, for ordering streams and for timing on the GPU.

Why time with events, not ``time.perf_counter``? Launches are asynchronous: the host clock measures how
long it took to *queue* the work. Two events recorded around the work, and ``cuEventElapsedTime``
between them, measure the GPU's own execution (resolution about half a microsecond).
"""

from __future__ import annotations

from collections.abc import Generator
from ctypes import byref, c_float, c_void_p
from typing import Any

from . import aio
from .checked import cu
from .checked.errors import NotReadyError
from .closeorder import CloseOrder
from .context import Context, resolve
from .ffi.constants import EventFlag
from .resource import Resource
from .stream import Stream, stream_handle


def _destroy_event(handle: int) -> None:
    cu.cuEventDestroy(handle)


class Event(Resource, aio.WaitableEvent):
    """A CUDA event. ``timing=False`` makes a cheaper event usable only for ordering."""

    close_order = CloseOrder.EVENT

    def __init__(
        self, context: Context | None = None, *, timing: bool = True, blocking: bool = False, interprocess: bool = False
    ) -> None:
        ctx = resolve(context)
        flags = EventFlag.DEFAULT
        if not timing:
            flags |= EventFlag.DISABLE_TIMING
        if blocking:
            flags |= EventFlag.BLOCKING_SYNC
        if interprocess:
            if timing:
                raise ValueError("an interprocess event cannot record timing: pass timing=False as well")
            flags |= EventFlag.INTERPROCESS
        super().__init__(ctx)
        ctx.activate()
        handle = c_void_p()
        cu.cuEventCreate(byref(handle), int(flags))
        self._handle: int = handle.value or 0
        self._own(_destroy_event, self._handle)
        self.timing = timing
        self.recorded = False

    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def record(self, stream: Stream | None = None) -> Event:
        """Capture the current end of ``stream`` (the legacy default stream for None)."""
        self.check_open()
        self.context.activate()
        cu.cuEventRecord(self._handle, stream_handle(stream, self.context))
        self.recorded = True
        return self

    def synchronize(self) -> None:
        """Block this thread until the work before the recorded point has finished."""
        self.require_recorded("synchronize on")
        self.context.activate()
        cu.cuEventSynchronize(self._handle)

    def __await__(self) -> Generator[Any, None, None]:
        """``await event``: wait until it completes without blocking the event loop (see :mod:`rawcuda.aio`)."""
        return aio.wait(self).__await__()

    def query(self) -> bool:
        """True once the recorded work has completed (never blocks)."""
        self.require_recorded("query")
        self.context.activate()
        try:
            cu.cuEventQuery(self._handle)
        except NotReadyError:
            return False
        return True

    def elapsed_ms(self, end: Event) -> float:
        """GPU milliseconds from this event to ``end`` (waits for ``end`` to complete first)."""
        for event in (self, end):
            event.require_recorded("time")
            if not event.timing:
                raise ValueError(
                    f"{event!r} was created with timing=False: it cannot be timed; create it with Event(timing=True)"
                )
        if end.context.raw_handle != self.context.raw_handle:
            raise ValueError(
                "the two events belong to different contexts and cannot be timed against each other: "
                "record both in the same context"
            )
        end.synchronize()
        ms = c_float()
        cu.cuEventElapsedTime(byref(ms), self._handle, end.handle)
        return ms.value

    def require_recorded(self, action: str) -> None:
        """Raise ClosedError when closed, ValueError (naming ``action``) when never recorded."""
        self.check_open()
        if not self.recorded:
            raise ValueError(f"cannot {action} {self!r}: it was never recorded; call event.record(stream) first")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ("" if self.recorded else " unrecorded")
        return f"<Event {self._handle:#x}{state}>"


__all__ = ["Event", "NotReadyError"]
