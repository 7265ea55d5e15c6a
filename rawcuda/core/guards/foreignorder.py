"""Core guard: ordering a launch after another library's stream (the CUDA Array Interface's promise).

A foreign array's ``stream`` is where its producer may still be writing. Before a kernel reads it, the
launch stream waits for an event recorded there: the GPU orders the two, and the host does not wait. A
stream of another context cannot take the event, so the host waits for it instead. Inside a capture, the
producer's stream must be idle: a graph cannot wait for another library's stream at replay time.

docs/hazards.md, "Foreign streams"
"""

from __future__ import annotations

import threading
from ctypes import byref, c_int, c_void_p
from typing import TYPE_CHECKING

from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError
from rawcuda.ffi.constants import LEGACY_STREAM_HANDLES, EventFlag, EventWaitFlag, StreamCaptureMode
from rawcuda.protocols.cai import ForeignArrayError

from .capturedeferral import capture_deferral
from .current import WRONG_CONTEXT_CODES

if TYPE_CHECKING:
    from rawcuda.core.context import Context
    from rawcuda.core.stream import Stream


class _OrderEvent:
    """The event one context records on producer streams: a bare handle in ``Context.cache``.

    It is not an :class:`~rawcuda.core.event.Event`. An Event holds its context, and so does its finalizer. A
    cache entry holding one would keep a dropped context alive. ``Context.close()`` closes this with the context.
    """

    __slots__ = ("handle",)

    def __init__(self) -> None:
        handle = c_void_p()
        cu.cuEventCreate(byref(handle), int(EventFlag.DISABLE_TIMING))
        self.handle: int = handle.value or 0

    def close(self) -> None:
        handle, self.handle = self.handle, 0
        if handle:
            cu.cuEventDestroy(handle)


_CACHE_KEY = __name__  # this module's entry in Context.cache: the context's _OrderEvent


# One event per context is recorded and waited on under this lock: a wait captures the event's state when it
# is called, so the pair must not interleave with another thread's record of the same event.
_order_lock = threading.Lock()


def order_after(waits: list[int], launch_stream: Stream | None, context: Context) -> None:
    """Make work queued next on ``launch_stream`` wait for the work already queued on each stream in ``waits``.

    ``launch_stream`` belongs to ``context``, or is None for the legacy stream. ``context`` must be current.
    Thread-safe: the record and the wait of the context's one event happen under one lock.
    """
    if launch_stream is not None and launch_stream.capturing is not None:
        _check_idle_for_capture(waits, launch_stream)
        return
    stream = 0 if launch_stream is None else launch_stream.handle
    for producer in waits:
        if producer == stream or (producer in LEGACY_STREAM_HANDLES and stream in LEGACY_STREAM_HANDLES):
            continue  # one stream: already in order
        if producer in LEGACY_STREAM_HANDLES or stream in LEGACY_STREAM_HANDLES:
            # (an event recorded on, or waited for by, the legacy stream: the driver would invalidate a capture)
            capture_deferral.refuse_legacy("ordering after another library's stream", context.raw_handle)
        with _order_lock:
            event = context.cache.get(_CACHE_KEY)
            if event is None:
                event = context.cache[_CACHE_KEY] = _OrderEvent()
            try:
                cu.cuEventRecord(event.handle, producer)
            except CudaError as exc:
                if exc.code not in WRONG_CONTEXT_CODES:
                    raise
                cu.cuStreamSynchronize(producer)  # a stream of another context: the event cannot go there
                continue
            cu.cuStreamWaitEvent(stream, event.handle, EventWaitFlag.DEFAULT)


def _check_idle_for_capture(waits: list[int], launch_stream: Stream) -> None:
    """Inside a capture, refuse a foreign array's stream that is not *idle* (ForeignArrayError).

    A graph replays later, long after the producer's work, so no wait recorded now could order a replay after
    it. The driver also refuses events recorded outside the capture, or on the legacy stream. An idle stream
    (cuStreamQuery: done) is fine.
    """
    # Asking is a "potentially unsafe" call while a capture runs in the default (global) mode: the thread
    # switches to RELAXED for the query and back -- the pattern cuda.h gives for cuThreadExchangeStreamCaptureMode.
    mode = c_int(StreamCaptureMode.RELAXED)
    cu.cuThreadExchangeStreamCaptureMode(byref(mode))
    try:
        for producer in waits:
            _check_idle(producer, launch_stream)
    finally:
        cu.cuThreadExchangeStreamCaptureMode(byref(mode))  # the mode this thread had


def _check_idle(producer: int, launch_stream: Stream) -> None:
    try:
        cu.cuStreamQuery(producer)
    except CudaError as exc:  # NOT_READY: work still queued; anything else: the capture forbids asking
        raise ForeignArrayError(
            f"an array passed to a launch captured on {launch_stream!r} names stream {producer:#x}, and "
            f"that stream cannot be shown idle ({exc.name}): a graph cannot wait for another library's "
            "stream -- synchronize that stream before the capture begins"
        ) from None
