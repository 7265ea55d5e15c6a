"""Core: streams -- ordered queues of GPU work, and how to wait for them without surprises.

Work on one stream runs in order; work on different streams may overlap. Two details decide whether a program
is correct.

* **The legacy default stream** (handle 0: ``stream=None`` in a launch) waits for every *blocking* stream of
  the context, and they wait for it. A ``StreamFlag.NON_BLOCKING`` stream opts out. That is faster, but a
  synchronous ``cuMemcpy`` on the legacy stream then *races* its kernels. So rawcuda's streams are blocking
  unless you ask. (The seed's cust stream asks for NON_BLOCKING, but cust drops the flag.) Tutorial 06d shows
  the race. rawcuda's own copies without a stream synchronize the context.
* **Host memory in flight.** An async copy reads or writes host memory *later*. The stream keeps the host
  object alive until an event recorded after the copy has completed.

Priorities: numerically *lower* is *higher* priority. The valid range comes from cuCtxGetStreamPriorityRange.
rawcuda checks it before the driver sees the value.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Generator
from ctypes import byref, c_int, c_uint, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import NotReadyError, StreamCaptureError
from rawcuda.core.guards.capturedeferral import capture_deferral
from rawcuda.core.guards.forgetcount import forgets
from rawcuda.ffi.constants import EventFlag, EventWaitFlag, StreamCaptureStatus, StreamFlag

from .closecounter import closes
from .closeorder import CloseOrder
from .context import Context, described, resolve
from .hostfunc import HostCall, HostCalls, queue_host_call, raise_failures
from .integers import integer, shown
from .resource import Resource

_SPARE_MARKERS = 16  # completed marker events a stream keeps for reuse
STREAM_PROTOCOL_VERSION = 0  # the __cuda_stream__ protocol's version (cuda.core's IsStreamT: currently 0)


def finish_work(handle: int, spare_markers: list[int], held: collections.deque[tuple[int, Any]]) -> None:
    """Wait for the stream's queued work, then let go of what rawcuda keeps for it: markers and host objects."""
    # Wait also when the stream was garbage-collected, not closed.
    # Why: docs/hazards.md, "A dropped stream still waits for its work".
    with contextlib.suppress(StreamCaptureError):
        cu.cuStreamSynchronize(handle)
    # The marker events go with the stream, so even a collected stream leaks nothing. The driver releases
    # a pending one once it completes.
    for marker in [*spare_markers, *(m for m, _ in held)]:
        cu.cuEventDestroy(marker)
    spare_markers.clear()
    held.clear()


def _destroy_stream(handle: int, spare_markers: list[int], held: collections.deque[tuple[int, Any]]) -> None:
    finish_work(handle, spare_markers, held)
    cu.cuStreamDestroy(handle)
    # Its death, not only its close(), must empty the launch caches.
    # Why: docs/hazards.md, "A dead stream's id may be reused".
    closes.generation += 1


class Stream(Resource):
    """A CUDA stream in ``context`` (the default context when None).

    ``flags`` are blocking by default. ``priority`` is an int within ``context.stream_priority_range``, or None for
    the default. Raises ValueError for any other priority.
    """

    close_order = CloseOrder.STREAM
    _capturing: Any = None

    @property
    def capturing(self) -> Any:
        """The Graph this stream is being captured into, or None: set and cleared by ``rawcuda.capture(stream)``.

        While it is set, :meth:`keep_alive` hands objects to the graph (they are needed at every replay).
        """
        return self._capturing

    @capturing.setter
    def capturing(self, graph: Any) -> None:
        if graph is not None:  # a launch that skipped its bookkeeping must now hand its arguments to the graph
            forgets.move()
        self._capturing = graph

    # Blocking unless you ask. Why: docs/hazards.md, "Streams are blocking unless you ask".
    def __init__(
        self, context: Context | None = None, *, flags: StreamFlag = StreamFlag.DEFAULT, priority: int | None = None
    ) -> None:
        ctx = resolve(context)
        if priority is not None:
            least, greatest = ctx.stream_priority_range
            number = integer(priority, "priority")
            if not greatest <= number <= least:
                raise ValueError(
                    f"stream priority {shown(priority)} is outside this device's range {greatest} (highest) .. "
                    f"{least} (lowest): lower numbers run first; pass an int in that range or None for the default"
                )
            priority = number
        super().__init__(ctx)
        ctx.activate()
        handle = c_void_p()
        if priority is None:
            cu.cuStreamCreate(byref(handle), integer(flags, "flags"))
        else:
            cu.cuStreamCreateWithPriority(byref(handle), integer(flags, "flags"), priority)
        self._handle: int = handle.value or 0
        self._held: collections.deque[tuple[int, Any]] = collections.deque()
        self._spare_markers: list[int] = []  # completed marker events, kept for the next keep_alive
        self._host_calls = HostCalls()  # host functions queued here: the ones not known to have run, failures unseen
        self._own(_destroy_stream, self._handle, self._spare_markers, self._held)

    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (version 0): ``(0, handle)``, so cuda.core and the libraries that take it
        (``cuda.core.Device().create_stream(s)``, numba-cuda, RMM) can use this stream. ClosedError once closed.

        The consumer borrows the handle: this Stream must stay open while they queue work on it.
        """
        self.context.check_usable()  # a forked child's or a poisoned context's handle means nothing to them
        return (STREAM_PROTOCOL_VERSION, self.handle)

    def synchronize(self) -> None:
        """Block this thread until everything queued on the stream has finished."""
        self.check_open()
        self.context.activate()
        cu.cuStreamSynchronize(self._handle)
        self._release_held(all_done=True)
        raise_failures(self, self._host_calls)  # (those queued before the synchronize have run: it waited for them)

    def launch_host_func(self, fn: Callable[..., Any], *args: Any) -> HostCall:
        """Queue ``fn(*args)`` after the work queued so far; the work queued after it waits until it returns.

        The driver calls it on one of its own threads. It must make no CUDA call: cuda.h forbids it (the call
        fails with CUDA_ERROR_NOT_PERMITTED, or the driver's thread deadlocks). What it raises is kept: the
        returned HostCall's ``result()`` raises it, and so does this stream's next ``synchronize()`` if nothing
        asked. Refused on a stream being captured: the graph would run it at every replay, or never.
        """
        self.check_open()
        self.context.activate()
        status = c_int()
        cu.cuStreamIsCapturing(self._handle, byref(status))  # a capture rawcuda did not start counts too
        if self.capturing is not None or status.value != StreamCaptureStatus.NONE:
            raise ValueError(
                f"{self!r} is being captured: a host function queued now would become a node of the graph, run at "
                "every replay; queue it after the capture, on the stream that replays the graph"
            )
        call = queue_host_call(self._handle, fn, args, self.context)
        self._host_calls.add(call)
        return call

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
        """Make future work on this stream wait until ``event`` has completed (no host blocking).

        ``event`` is a rawcuda Event. To wait for another stream, record an event on it first.
        """
        from .event import Event  # (event.py imports this file: the one import here that waits for a call)

        self.check_open()
        if not isinstance(event, Event):
            raise TypeError(not_an_event(event))
        same_context(self, event)
        graph = event.open_capture()  # (an ended capture's event is refused: the driver's INVALID_VALUE says less)
        self.context.activate()
        cu.cuStreamWaitEvent(self._handle, event.handle, EventWaitFlag.DEFAULT)
        if graph is not None and self.capturing is None:
            # The driver now captures this stream too: what it queues belongs to that graph.
            # Why: docs/hazards.md, "A stream that waits on a capture joins it".
            graph.join(self)

    def __await__(self) -> Generator[Any, None, None]:
        """``await stream``: wait for the queued work without blocking the event loop (:mod:`rawcuda.extras.aio`)."""
        # One of core's two upward imports (Event.__await__ is the other). aio creates Streams, so it sits
        # above this file; it is imported only when a program awaits.
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
        """Hold ``obj`` until the work queued on this stream so far has completed.

        While the stream is being captured, the graph holds ``obj`` instead: every replay needs it.
        """
        if self.capturing is not None:  # captured work runs at every replay
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
        """Wait for the stream's work, then destroy the stream. Host objects its copies use may be freed after."""
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
    """Whether stream ``handle`` was garbage-collected during a capture, with its release still queued.

    The release waits for the stream's work, and runs when the capture ends (rawcuda.core.guards.capturedeferral).
    Until then its last work may still run, with no Stream object left to say so. rawcuda.core.guards.pending
    refuses to export then.
    """
    return capture_deferral.holds(_destroy_stream, handle)


def not_an_event(value: Any) -> str:
    """Why ``value`` cannot be waited for with ``stream.wait()``, and what to pass instead."""
    problem = f"stream.wait() takes a rawcuda Event, not {described(value)}"
    if isinstance(value, Stream):  # torch's wait_stream habit: a stream is no point in time
        return f"{problem}: record an event on that stream and wait for it: s.wait(Event(ctx).record(other))"
    return problem


def same_context(a: Resource, b: Resource) -> None:
    """Raise ValueError when ``a`` and ``b`` belong to two contexts, before the driver answers INVALID_HANDLE."""
    if getattr(b, "context", a.context).raw_handle != a.context.raw_handle:
        raise ValueError(
            f"{b!r} belongs to {b.context!r} but {a!r} belongs to {a.context!r}: objects of different contexts "
            "cannot be combined; create both in the same context"
        )


def not_a_stream(value: Any) -> str:
    """Why ``value`` cannot be a ``stream=``, and what to pass instead."""
    return (
        f"stream must be a rawcuda Stream, another library's stream (an object with __cuda_stream__: torch, "
        f"cuda.core) or None (the legacy default stream), not {described(value)}: make one with "
        "rawcuda.Stream() (a bare handle such as 2, the per-thread default stream, is not accepted: rawcuda could "
        "not tell what owns it, or keep it alive)"
    )
