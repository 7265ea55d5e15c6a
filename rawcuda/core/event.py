"""Core: events -- markers recorded into a stream, for ordering streams and for timing on the GPU.

Why time with events, not ``time.perf_counter``? Launches are asynchronous. The host clock measures how long it
took to *queue* the work. Two events recorded around the work measure the GPU's own execution instead.
``cuEventElapsedTime`` gives the time between them, to about half a microsecond.

:func:`time_ms` is that recipe, written once. It makes warm-up runs, then puts an event pair around each timed
run. It returns the times as a :class:`Timing`; its ``median`` is what the tutorials and benchmarks report.
"""

from __future__ import annotations

import statistics
import weakref
from collections.abc import Callable, Generator
from ctypes import byref, c_float, c_void_p
from dataclasses import dataclass
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import NotReadyError
from rawcuda.ffi.constants import EventFlag

from .closeorder import CloseOrder
from .context import Context, resolve
from .integers import integer, whole
from .resource import Resource
from .stream import Stream
from .streamargs import as_stream, context_for, stream_handle

DEFAULT_REPS = 10  # timed runs of time_ms: enough for a stable median of a kernel of milliseconds
DEFAULT_WARMUP = 1  # untimed runs first: the first launch of a kernel may load its module


def _destroy_event(handle: int) -> None:
    cu.cuEventDestroy(handle)


class Event(Resource):
    """A CUDA event in ``context`` (the default context when None).

    ``timing=False`` makes a cheaper event, usable only for ordering. ``blocking=True`` makes a host wait on it
    sleep rather than spin. ``interprocess=True`` needs ``timing=False``; else it raises ValueError.
    """

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
        cu.cuEventCreate(byref(handle), integer(flags, "flags"))
        self._handle: int = handle.value or 0
        self._own(_destroy_event, self._handle)
        self.timing = timing
        self.recorded = False
        # A weak reference to the graph its last record went into (a capturing stream's): weak, so that an
        # event kept for timing does not keep a graph and everything it holds alive.
        self.captured_by: weakref.ref[Any] | None = None

    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def record(self, stream: Stream | None = None) -> Event:
        """Capture the current end of ``stream`` (the legacy default stream for None). Returns the event."""
        self.check_open()
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        self.context.activate()
        cu.cuEventRecord(self._handle, stream_handle(stream, self.context))
        self.recorded = True
        # A stream that waits for this event joins the capture (a fork): Stream.wait tells the graph.
        graph = None if stream is None else stream.capturing
        self.captured_by = None if graph is None else weakref.ref(graph)
        return self

    def synchronize(self) -> None:
        """Block this thread until the work before the recorded point has finished.

        Raises ValueError if the event was never recorded.
        """
        self.require_recorded("synchronize on")
        self.context.activate()
        cu.cuEventSynchronize(self._handle)

    def __await__(self) -> Generator[Any, None, None]:
        """``await event``: wait until it completes without blocking the event loop (see :mod:`rawcuda.extras.aio`)."""
        from rawcuda.extras.aio import wait  # (upward, only when a program awaits: see Stream.__await__)

        return wait(self).__await__()

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
        """GPU milliseconds from this event to ``end``. It waits for ``end`` to complete first.

        Raises ValueError when either event was never recorded or was made with ``timing=False``. Also when the
        two belong to different contexts.
        """
        if not isinstance(end, Event):
            raise TypeError(
                f"elapsed_ms(end) takes the rawcuda Event recorded after the work, not {type(end).__name__}"
            )
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
        """ClosedError when closed; ValueError (naming ``action``) when never recorded, or recorded in a capture."""
        self.check_open()
        if not self.recorded:
            raise ValueError(f"cannot {action} {self!r}: it was never recorded; call event.record(stream) first")
        if self.captured_by is not None:
            raise ValueError(self.in_capture(action))

    def open_capture(self) -> Any:
        """The graph of the still-open capture this event was last recorded into; None when recorded outside one.

        Raises ValueError when that capture has ended: the event marks a point of a graph, and nothing waits there.
        """
        graph = None if self.captured_by is None else self.captured_by()
        if self.captured_by is not None and (graph is None or graph.capture_stream is None):
            raise ValueError(self.in_capture("wait for"))
        return graph

    def in_capture(self, action: str) -> str:
        """Why an event last recorded in a capture cannot be queried, synchronized, timed or awaited."""
        return (
            f"cannot {action} {self!r}: it was last recorded inside a stream capture, so it marks a point of the "
            "graph, not of work that runs (the driver answers CUDA_ERROR_INVALID_VALUE); record it again outside "
            "the capture, e.g. after exec.launch(stream)"
        )

    def __repr__(self) -> str:
        state = " closed" if self._closed else ("" if self.recorded else " unrecorded")
        return f"<Event {self._handle:#x}{state}>"


@dataclass(frozen=True)
class Timing:
    """The GPU milliseconds of each timed run of :func:`time_ms`, in the order they ran."""

    times: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("a Timing needs at least one time: time_ms(work, reps=1) or more")

    @property
    def median(self) -> float:
        """The middle time: what a run typically takes (one slow outlier does not move it)."""
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        """The fastest run: the best case, once page faults or clock ramp-up no longer show."""
        return min(self.times)


def _count(name: str, value: object, least: int) -> int:
    """``value`` as a count of runs, checked: an int (not a bool) of at least ``least``."""
    number = whole(value)
    if number is None:
        raise TypeError(f"{name} must be an int (a number of runs), not {type(value).__name__} {value!r}")
    if number < least:
        raise ValueError(f"{name} must be at least {least}, got {number}: pass {name}={least} or more")
    return number


def time_ms(
    work: Callable[[], object],
    *,
    reps: int = DEFAULT_REPS,
    warmup: int = DEFAULT_WARMUP,
    stream: Stream | None = None,
    context: Context | None = None,
) -> Timing:
    """Time ``work()`` on the GPU: ``warmup`` untimed calls, then ``reps`` calls, each between two events.

    ``work`` must queue its GPU work on ``stream``. With no stream, that is the legacy default stream of
    ``context``, or of the default context when None. With a stream, it is the stream's own context.
    Returns a :class:`Timing`; ``time_ms(work).median`` is the usual figure. The two events are created here.
    They are closed before it returns, also when ``work`` raises.

    Why events and not ``time.perf_counter()``? A launch returns once the work is *queued*. So the host clock
    around ``work()`` measures the queueing, not the GPU's execution. A synchronize would add the host's
    wake-up latency too. An event is a marker the GPU itself timestamps when it reaches it in the stream.

    Why a median, and warm-up runs? Repeated runs do not take the same time, and the spread is one-sided. The
    first launch may load the module or touch fresh pages. Any run can be slowed by clocks ramping up or by
    another process. The host may also be descheduled between the start event and the launch: the GPU idles,
    and the idle time counts. A mean follows such outliers; the median of several runs does not. ``min`` gives
    the best case.

    Each run waits for its end event before the next starts, so runs never overlap. The stream is idle when the
    start event is recorded. So a run also includes the few microseconds a launch takes to reach the GPU. For
    shorter work, time a loop of launches in one ``work`` and divide.

    All errors are raised before ``work`` runs. TypeError: ``work`` is not callable, ``reps`` or ``warmup`` is
    not an int, or ``stream`` is not a Stream. ValueError: ``reps < 1``, ``warmup < 0``, or ``stream`` belongs
    to another ``context``. ClosedError: the stream is closed.
    """
    if not callable(work):
        raise TypeError(f"work must be a callable that queues the GPU work to time, not {type(work).__name__}")
    reps = _count("reps", reps, 1)
    warmup = _count("warmup", warmup, 0)
    if stream is not None and not isinstance(stream, Stream):  # another library's: borrowed where it runs
        # (context_for refuses what is no stream before any driver call: the checks need none)
        stream = as_stream(stream, context_for(stream, context))
    if stream is None:
        owner = resolve(context)
    else:
        stream.check_open()  # ClosedError now, not after the warm-up runs
        owner = stream.context if context is None else resolve(context)
        if owner.raw_handle != stream.context.raw_handle:
            raise ValueError(f"{stream!r} belongs to {stream.context!r}, not {owner!r}: leave context=None")
    for _ in range(warmup):
        work()
    times = []
    with Event(owner) as start, Event(owner) as end:
        for _ in range(reps):
            start.record(stream)
            work()
            end.record(stream)
            times.append(start.elapsed_ms(end))  # waits for `end`: the next run starts on an idle stream
    return Timing(tuple(times))


__all__ = ["DEFAULT_REPS", "DEFAULT_WARMUP", "Event", "NotReadyError", "Timing", "time_ms"]
