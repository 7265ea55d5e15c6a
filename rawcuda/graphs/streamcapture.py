"""Graphs: stream capture -- run ordinary code on a stream, and get a CUDA graph of it instead of results.

``with capture(stream) as graph:`` begins capture (``cuStreamBeginCapture``) on enter and ends it
(``cuStreamEndCapture``) on exit: every copy and launch queued on ``stream`` inside the block is *recorded*
into ``graph``, not run. Then ``graph.instantiate().launch(stream)`` replays all of it with one call
(:mod:`rawcuda.graphs.graph` says why that is fast, and what a graph records).

What capture forbids (and how rawcuda says so):

* **The legacy default stream.** It synchronizes implicitly with every blocking stream, so its work has no
  place in a graph; ``capture(None)`` is a ``ValueError`` before the driver is asked.
* **Anything that waits for the GPU or runs outside the stream.** While a stream captures, nothing has
  run yet, so waiting is meaningless: ``cuCtxSynchronize``, ``cuStreamSynchronize`` and synchronous
  ``cuMemcpy`` fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture. rawcuda's
  convenience calls *without* ``stream=`` (``buf.copy_from(a)``, ``buf.to_array()``, ``buf.fill(v)``, a
  launch on the legacy stream) synchronize the context or use the legacy stream -- inside a capture each
  raises :class:`~rawcuda.checked.errors.StreamCaptureError`, to which this module adds what to do
  instead: pass ``stream=`` so the copy or launch is *recorded*. Copies to or from host memory inside a
  graph should use pinned memory (:class:`~rawcuda.core.pinned.PinnedBuffer`): the graph touches it at every
  replay.
* **Loading code.** A first launch may load code: ``ops`` loads a module on first use, and CUDA's lazy
  loading loads each kernel at its first launch. That is host-side work a graph cannot hold, so run the
  work once before capturing it (tutorial 09 and the tests do) -- which is also how you know it works.
* **The mode.** ``THREAD_LOCAL`` (the default here) makes *this* thread's unsafe calls errors while it
  captures, and leaves other threads alone; ``GLOBAL`` also fails unsafe calls made by other threads;
  ``RELAXED`` refuses only what necessarily conflicts with capture (see cuThreadExchangeStreamCaptureMode).

If the body of ``with capture(stream)`` raises, the capture is ended, the partial graph destroyed, and
the original exception propagates unchanged (with the capture hint added when it is a capture error).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_void_p
from types import TracebackType

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError, CudaError, StreamCaptureError
from rawcuda.core.context import SYNC_LAUNCHES, Context
from rawcuda.core.guards.capturedeferral import EVERYWHERE, LegacyHazard, capture_deferral
from rawcuda.core.stream import Stream
from rawcuda.ffi.constants import LEGACY_STREAM_HANDLES, StreamCaptureMode, StreamCaptureStatus, StreamFlag

from .graph import Graph

#: Added to every StreamCaptureError raised inside ``with capture(stream)``.
CAPTURE_HINT = (
    "inside `with capture(stream)`, queue everything on the capturing stream: rawcuda calls without "
    "stream= (buf.copy_from(a), buf.to_array(), buf.fill(v), ops.*(...), fn.launch(...)) synchronize the "
    "context or use the legacy default stream, which capture forbids -- pass stream=<the capturing stream> "
    "so the copy or launch is recorded, and read results after exec.launch(stream)"
)

LEGACY_STREAM_REFUSAL = (
    "stream capture needs a stream you created (rawcuda.Stream()): the legacy default stream (None / "
    "handle 0) cannot be captured -- it synchronizes implicitly with every blocking stream of the context, "
    "so its work has no place in a graph, and the driver refuses it"
)


def capture(stream: Stream, mode: StreamCaptureMode = StreamCaptureMode.THREAD_LOCAL) -> Capture:
    """``with capture(stream) as graph:`` -- record the work queued on ``stream`` inside the block into ``graph``."""
    if stream is None or (isinstance(stream, int) and stream in LEGACY_STREAM_HANDLES):
        raise ValueError(LEGACY_STREAM_REFUSAL)
    if not isinstance(stream, Stream):
        raise TypeError(f"capture() takes a rawcuda.Stream, not {type(stream).__name__}")
    if isinstance(mode, bool):
        raise TypeError(f"capture's mode is a StreamCaptureMode (GLOBAL, THREAD_LOCAL or RELAXED), not {mode!r}")
    return Capture(stream, StreamCaptureMode(mode))


def capture_status(stream: Stream) -> StreamCaptureStatus:
    """Whether ``stream`` is capturing now: NONE, ACTIVE or INVALIDATED (cuStreamIsCapturing)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"capture_status() takes a rawcuda.Stream, not {type(stream).__name__} {stream!r}")
    stream.context.activate()
    status = ctypes.c_int()
    cu.cuStreamIsCapturing(stream.handle, byref(status))
    return StreamCaptureStatus(status.value)


def _legacy_hazards(stream: Stream, mode: StreamCaptureMode) -> tuple[LegacyHazard, ...]:
    """Where a legacy-stream operation would break a capture of ``stream`` in ``mode`` (resource.LegacyHazard)."""
    hazards = []
    if not stream.flags & StreamFlag.NON_BLOCKING:
        hazards.append(LegacyHazard(stream.context.raw_handle, None))
    if mode == StreamCaptureMode.GLOBAL:
        hazards.append(EVERYWHERE)
    elif mode == StreamCaptureMode.THREAD_LOCAL:
        hazards.append(LegacyHazard(None, threading.get_ident()))
    return tuple(hazards)


class Capture:
    """The context manager behind ``capture(stream)``: begins capture on enter, ends it on exit.

    ``__enter__`` returns the :class:`Graph` that will hold the recorded work; it becomes usable when the
    ``with`` block ends without an exception.
    """

    def __init__(self, stream: Stream, mode: StreamCaptureMode) -> None:
        self.stream = stream
        self.mode = mode
        self.graph: Graph | None = None
        self.hazards: tuple[LegacyHazard, ...] = ()

    def __enter__(self) -> Graph:
        stream = self.stream
        handle = stream.handle  # ClosedError for a closed stream
        if handle in LEGACY_STREAM_HANDLES:
            raise ValueError(LEGACY_STREAM_REFUSAL)
        if SYNC_LAUNCHES:
            raise RuntimeError(
                "RAWCUDA_SYNC_LAUNCHES=1 synchronizes after every launch, which stream capture "
                "forbids: unset it to capture graphs"
            )
        stream.context.check_usable()  # ForkedProcessError in a forked child, before any state of the parent's
        if stream.capturing is not None:
            raise RuntimeError(f"{stream!r} is already capturing into {stream.capturing!r}: end that capture first")
        stream.context.activate()
        self.hazards = _legacy_hazards(stream, self.mode)
        graph = Graph.for_capture(stream)
        capture_deferral.begin(self.hazards)  # from here the GC's releases wait (resource.CaptureDeferral says why)
        try:
            cu.cuStreamBeginCapture(handle, int(self.mode))
        except BaseException:
            capture_deferral.end(self.hazards)
            graph.receive_capture(0)
            raise
        stream.capturing = graph
        self.graph = graph
        return graph

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        stream, graph = self.stream, self.graph
        if graph is None:
            raise RuntimeError(
                "Capture.__exit__ without a matching __enter__: the capture never began, or it has ended already"
            )
        # Forget the graph first: a second __exit__ (by hand) must not end a capture twice -- it would take one
        # more off the deferral's count of open captures, and every later GC release would then wait forever.
        self.graph = None
        stream.capturing = None
        graph.end_joins()  # joined streams leave the capture with it, whether it ended well or not
        handle = c_void_p()
        try:
            try:
                stream.context.activate()
                cu.cuStreamEndCapture(stream.handle, byref(handle))
            finally:
                capture_deferral.end(self.hazards)  # the capture is over (or gone): the queued releases may run
        except (CudaError, ClosedError) as end_error:  # invalidated by an illegal call; a poisoned/closed context
            _destroy_quietly(graph.context, handle.value or 0)
            graph.receive_capture(0)
            if error is not None:
                _add_capture_hint(error)
                return  # the body's own exception is the one to see; the end error is its consequence
            raise _add_capture_hint(end_error) from None
        if error is not None:
            _destroy_quietly(graph.context, handle.value or 0)
            graph.receive_capture(0)
            _add_capture_hint(error)
            return  # returning None re-raises the body's exception unchanged
        graph.receive_capture(handle.value or 0)


def _add_capture_hint(error: BaseException) -> BaseException:
    """Add :data:`CAPTURE_HINT` to a StreamCaptureError (same object, so `raise` keeps its traceback)."""
    if isinstance(error, StreamCaptureError):
        error.add_details(CAPTURE_HINT)
    return error


def _destroy_quietly(context: Context, handle: int) -> None:
    """Destroy a graph we are discarding; errors here must not hide the error that made us discard it."""
    if not handle:
        return
    try:
        context.activate()
        cu.cuGraphDestroy(handle)
    except CudaError:
        pass  # a poisoned context: the graph goes with the process


__all__ = ["CAPTURE_HINT", "LEGACY_STREAM_REFUSAL", "Capture", "capture", "capture_status"]
