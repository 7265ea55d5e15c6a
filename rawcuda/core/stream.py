"""Core: streams -- ordered queues of GPU work, and how to wait for them without surprises.

Work on one stream runs in order; work on different streams may overlap. Two details decide whether
a program is correct:

* **The legacy default stream** (handle 0, what ``stream=None`` means in a launch) implicitly waits for
  every *blocking* stream of the context, and they wait for it. A stream created with
  ``StreamFlag.NON_BLOCKING`` opts out -- faster, but a synchronous ``cuMemcpy`` on the legacy stream
  then *races* its kernels. rawcuda's streams are therefore blocking unless you ask (the seed's cust
  example asks for NON_BLOCKING, but cust clears that flag for this very race -- Rust-CUDA issue 15 --
  so its stream is blocking; tutorial 06d shows the race), and rawcuda's own copies without a stream
  synchronize the whole context, so they cannot race anything.
* **Host memory in flight.** An async copy reads or writes host memory *later*. The stream keeps the
  host object alive until the copy is known to be done (an event recorded after it has completed).

Priorities: numerically *lower* is *higher* priority; the valid range comes from
cuCtxGetStreamPriorityRange and is checked before the driver sees it.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Generator
from ctypes import byref, c_int, c_uint, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import NotReadyError, StreamCaptureError
from rawcuda.core.guards.capturedeferral import capture_deferral
from rawcuda.ffi.constants import EventFlag, EventWaitFlag, StreamFlag

from .closecounter import closes
from .closeorder import CloseOrder
from .context import Context, resolve
from .resource import Resource

_SPARE_MARKERS = 16  # completed marker events a stream keeps for reuse


def _destroy_stream(handle: int, spare_markers: list[int], held: collections.deque[tuple[int, Any]]) -> None:
    # Wait for the queued work -- also when the stream was garbage-collected, not closed. Host objects still
    # held belong to copies that may not have run yet (a freed array under a pending copy is a use-after-
    # free), and a buffer's __cuda_array_interface__ stops naming a stream once it is gone: its work must be
    # done by then (rawcuda.core.guards.pending). A stream being captured has no work to wait for, and the driver
    # refuses to synchronize it: that refusal is no reason to keep the stream.
    with contextlib.suppress(StreamCaptureError):
        cu.cuStreamSynchronize(handle)
    # The marker events are the stream's too: destroy them with it (a pending one is released by the
    # driver once it completes), so that even a stream that is garbage-collected leaks nothing.
    for marker in [*spare_markers, *(m for m, _ in held)]:
        cu.cuEventDestroy(marker)
    spare_markers.clear()
    held.clear()
    cu.cuStreamDestroy(handle)
    # Launch caches key streams by id() so as not to keep them alive (function.py); a dead stream's id may be
    # reused, so its death -- garbage-collected, not only closed -- must move the counter that empties them.
    closes.generation += 1


class Stream(Resource):
    """A CUDA stream in ``context`` (the default context when None)."""

    close_order = CloseOrder.STREAM
    #: The Graph this stream is being captured into, or None: set and cleared by ``rawcuda.capture(stream)``;
    #: while it is set, :meth:`keep_alive` hands objects to the graph (they are needed at every replay).
    capturing: Any = None

    def __init__(
        self, context: Context | None = None, *, flags: StreamFlag = StreamFlag.DEFAULT, priority: int | None = None
    ) -> None:
        ctx = resolve(context)
        if priority is not None:
            least, greatest = ctx.stream_priority_range
            if not isinstance(priority, int) or not greatest <= priority <= least:
                raise ValueError(
                    f"stream priority {priority!r} is outside this device's range {least} (lowest) .. {greatest} "
                    "(highest): lower numbers run first; pass an int in that range or None for the default"
                )
        super().__init__(ctx)
        ctx.activate()
        handle = c_void_p()
        if priority is None:
            cu.cuStreamCreate(byref(handle), int(flags))
        else:
            cu.cuStreamCreateWithPriority(byref(handle), int(flags), priority)
        self._handle: int = handle.value or 0
        self._held: collections.deque[tuple[int, Any]] = collections.deque()
        self._spare_markers: list[int] = []  # completed marker events, kept for the next keep_alive
        self._own(_destroy_stream, self._handle, self._spare_markers, self._held)

    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def synchronize(self) -> None:
        """Block this thread until everything queued on the stream has finished."""
        self.check_open()
        self.context.activate()
        cu.cuStreamSynchronize(self._handle)
        self._release_held(all_done=True)

    def query(self) -> bool:
        """True when all queued work has finished (never blocks)."""
        self.check_open()
        self.context.activate()
        try:
            cu.cuStreamQuery(self._handle)
        except NotReadyError:
            return False
        return True

    def wait(self, event: Any) -> None:
        """Make future work on this stream wait until ``event`` has completed (no host blocking)."""
        self.check_open()
        same_context(self, event)
        self.context.activate()
        cu.cuStreamWaitEvent(self._handle, event.handle, EventWaitFlag.DEFAULT)

    def __await__(self) -> Generator[Any, None, None]:
        """``await stream``: wait for the queued work without blocking the event loop (:mod:`rawcuda.extras.aio`)."""
        # One of two imports upward from core (Event.__await__ is the other): aio, an extra, creates Streams,
        # so it sits above this file; ``await stream`` reaches up to it only when a program awaits.
        from rawcuda.extras.aio import wait

        return wait(self).__await__()

    @property
    def priority(self) -> int:
        self.check_open()
        value = c_int()
        cu.cuStreamGetPriority(self._handle, byref(value))
        return value.value

    @property
    def flags(self) -> StreamFlag:
        self.check_open()
        value = c_uint()
        cu.cuStreamGetFlags(self._handle, byref(value))
        return StreamFlag(value.value)

    # --- keeping host objects alive while async work uses them --------------------------------------------
    def keep_alive(self, obj: Any) -> None:
        """Hold ``obj`` until the work queued on this stream so far has completed."""
        if self.capturing is not None:  # captured work runs at every replay: the graph holds obj from now on
            self.capturing.keep_alive(obj)
            return
        self.context.activate()
        if self._spare_markers:
            marker = self._spare_markers.pop()  # reuse: creating an event per async copy costs microseconds
        else:
            created = c_void_p()
            cu.cuEventCreate(byref(created), EventFlag.DISABLE_TIMING)
            marker = created.value or 0
        cu.cuEventRecord(marker, self._handle)
        self._held.append((marker, obj))
        self._release_held(all_done=False)

    def _release_held(self, *, all_done: bool) -> None:
        while self._held:
            marker, _ = self._held[0]
            if not all_done:
                try:
                    cu.cuEventQuery(marker)
                except NotReadyError:
                    return
            self._held.popleft()
            if len(self._spare_markers) < _SPARE_MARKERS:
                self._spare_markers.append(marker)
            else:
                cu.cuEventDestroy(marker)

    def close(self) -> None:
        """Wait for the stream's work (host objects it reads may be freed after), then destroy it."""
        if self._closed:
            return
        if self._held and self.context.usable:
            with contextlib.suppress(Exception):
                self.synchronize()
        self._held.clear()
        super().close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Stream {self._handle:#x}{state}>"


def release_deferred(handle: int) -> bool:
    """Whether the stream ``handle`` was garbage-collected while a capture was open and its release -- which
    waits for its work -- still waits for the capture to end (resource.CaptureDeferral): its last work may
    still be running, though no Stream object is left to say so (rawcuda.core.guards.pending refuses to export then)."""
    return capture_deferral.holds(_destroy_stream, handle)


def same_context(a: Resource, b: Resource) -> None:
    """Objects of two contexts cannot be combined; say so before the driver answers INVALID_HANDLE."""
    if getattr(b, "context", a.context).raw_handle != a.context.raw_handle:
        raise ValueError(
            f"{b!r} belongs to {b.context!r} but {a!r} belongs to {a.context!r}: objects of different contexts "
            "cannot be combined; create both in the same context"
        )


def stream_handle(stream: Stream | None, context: Context) -> int:
    """The CUstream to pass for ``stream`` (0, the legacy default stream, for None), checked."""
    if stream is None:
        return 0
    if not isinstance(stream, Stream):  # an int handle (1, 2: the legacy / per-thread streams), a torch stream...
        raise TypeError(
            f"stream must be a rawcuda Stream or None (the legacy default stream), not {type(stream).__name__} "
            f"{stream!r}: make one with rawcuda.Stream() (a bare handle such as 2, the per-thread default stream, "
            "is not accepted: rawcuda could not check which context it belongs to)"
        )
    handle = stream.handle  # ClosedError for a closed stream
    owner = stream.context
    if owner is not context and owner.raw_handle != context.raw_handle:  # (identity first: the common case)
        raise ValueError(f"{stream!r} belongs to {owner!r}, not {context!r}: use a stream of the same context")
    return handle
