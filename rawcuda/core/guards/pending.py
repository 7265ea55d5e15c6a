"""Core guard: which stream a buffer's ``__cuda_array_interface__`` names -- the producer's side of the interface.

A consumer (torch, CuPy, numba) orders its work after the stream the interface names. So that stream must
stand for all work that may still be pending on this *memory*, whichever buffer object the work went
through. A :class:`PendingStream` therefore belongs to the memory: a buffer and its views share one.

Async copies, memsets and kernel launches record their stream; a launch on no stream records the context's
:class:`LegacyStream`. A synchronous operation records None: it waited for everything. A captured launch,
a graph replay and a bare address record nothing. For DLPack the consumer names its own stream, and
:meth:`PendingStream.order_before` orders it. The consumer's side is :mod:`rawcuda.protocols.cai` and
:mod:`rawcuda.core.guards.foreignorder`.

docs/hazards.md, "Pending work"
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from ctypes import byref, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError
from rawcuda.core.closecounter import closes
from rawcuda.core.context import Context
from rawcuda.core.stream import Stream, release_deferred
from rawcuda.ffi.constants import DEFAULT_STREAMS, LEGACY_STREAM_HANDLES, STREAM_LEGACY, EventFlag, EventWaitFlag

from .capturedeferral import capture_deferral
from .current import peek_current
from .forgetcount import forgets

#: The CUstream a launch on "no stream" passes: NULL, the legacy default stream of the current context.
LEGACY_HANDLE = 0
_CACHE_KEY = __name__  # this module's entry in Context.cache: the context's LegacyStream


class LegacyStream:
    """The legacy default stream (CUstream 0) of one context, as a :class:`PendingStream` records it.

    It is what ``stream=None`` launches on. It offers what a PendingStream reads of a :class:`Stream`:
    ``handle``, ``context``, ``closed``, ``capturing`` and ``synchronize()``. There is one per Context object
    (:func:`legacy_stream`), so "the same stream again" is an identity check.

    It holds its context *weakly*. The context's ``cache`` holds it, and a strong reference back would be a
    cycle that keeps a dropped context for the cyclic GC. Its work ends when the context closes, since
    close() synchronizes. So it is ``closed`` then, as a closed Stream is.
    """

    __slots__ = ("__weakref__", "_context")
    handle = LEGACY_HANDLE
    capturing = None  # the legacy stream is never captured (rawcuda.capture and the driver refuse it)

    def __init__(self, context: Context) -> None:
        self._context = weakref.ref(context)

    @property
    def context(self) -> Context:
        ctx = self._context()
        if ctx is None:
            raise ClosedError("the context of this legacy default stream is gone (its work ended with it)")
        return ctx

    @property
    def closed(self) -> bool:
        ctx = self._context()
        return ctx is None or ctx.closed

    def synchronize(self) -> None:
        """Block this thread until everything queued on the context's legacy stream has finished."""
        capture_deferral.refuse_legacy("waiting for this buffer's pending work", self.context.raw_handle)
        self.context.activate()
        cu.cuStreamSynchronize(LEGACY_HANDLE)

    def __repr__(self) -> str:
        return f"<LegacyStream of {self._context()!r}>"


def legacy_stream(context: Context) -> LegacyStream:
    """The :class:`LegacyStream` of ``context`` (made once, kept in its ``cache``)."""
    marker = context.cache.get(_CACHE_KEY)
    if marker is None:
        marker = context.cache.setdefault(_CACHE_KEY, LegacyStream(context))
    return marker


def record_on(memories: tuple[PendingStream, ...], target: Stream | LegacyStream) -> int:
    """A launch's record of ``target`` on each memory; returns the :data:`forgets` value read *before* it.

    The records stand for as long as that value has not moved (rawcuda.core.function keeps it per pack).
    It is read after the launch's driver call: a waiter whose snapshot came earlier moved it, so this launch
    records under the lock and renumbers its entry; a waiter whose snapshot comes later covers the kernel.
    """
    count = forgets.value
    for memory in memories:
        if memory.last() is not target:  # the same stream again costs this one call per memory
            memory.record(target)
    return count


def _nothing() -> None:
    """What :attr:`PendingStream.last` is while nothing is pending: a call that names no stream."""
    return None


class PendingStream:
    """The streams of asynchronous rawcuda operations still possibly pending on some memory.

    The buffer and every view of it share one. A synchronous operation waits for everything, and clears it.
    Streams are held *weakly*: a collected stream has finished its work first, since its finalizer waits. A
    strong reference would make a cycle through a stream that holds a buffer for a pending copy. The
    interface names one stream, so exporting makes the last stream wait for the others (cuStreamWaitEvent).

    ``last`` is the weak reference to the stream recorded last; it answers None when nothing is pending.
    :func:`record_on` compares ``last() is stream`` before calling :meth:`record`: the same stream again costs
    one call of a weak reference, without a lock; a stream listed but not last, a move to the end of a small
    dict. A launch mostly calls neither: its pack remembers having seen its stream listed
    (:mod:`rawcuda.core.guards.forgetcount`).

    Threads: a launch on one thread may record while another exports or waits. The record changes under a
    lock, never held across a driver call. A waiter (:meth:`handle`, :meth:`order_before`,
    :meth:`synchronize`) takes a snapshot and waits outside the lock. It then forgets only the entries it
    waited for *and that nobody recorded again since*; each record numbers its entry. While a waiter runs,
    ``last`` answers None. A launch meanwhile takes the locked path and renumbers its entry. So the lock-free
    check can never skip a record that a waiter is about to forget.

    Captures: pending work on a stream that is capturing now makes exporting raise BufferError. So does a
    stream collected during a capture whose release still waits (:func:`rawcuda.core.stream.release_deferred`):
    each entry keeps its stream's handle for that. docs/hazards.md, "Pending work", says why.
    """

    __slots__ = ("_entries", "_lock", "_number", "_swept", "_waiters", "last")

    def __init__(self) -> None:
        # id(stream) -> (weak reference, the number of its latest record, its handle); insertion order is recording
        # order. A collected stream whose release waits for a capture keeps its entry, keyed by _collected_key.
        self._entries: dict[Any, tuple[weakref.ref[Any], int, int]] = {}
        # Re-entrant: an allocation under the lock may run the GC, and a finalizer there may touch this record.
        self._lock = threading.RLock()
        self._number = 0  # counts records: an entry renumbered since a waiter's snapshot is kept by it
        self._waiters = 0  # waiters between their snapshot and their forget: ``last`` stays None meanwhile
        self._swept = closes.generation  # the close count when finished entries were last forgotten
        self.last: Any = _nothing

    @property
    def streams(self) -> list[weakref.ref[Any]]:
        """The weak references recorded, oldest first (a copy)."""
        with self._lock:
            return [entry[0] for entry in self._entries.values()]

    def record(self, stream: Stream | LegacyStream | None) -> None:
        """After an operation queued on ``stream`` (None: a synchronous one, after which nothing is pending)."""
        if stream is None:
            with self._lock:
                forgets.move()
                self.last = _nothing
                self._entries.clear()
            return
        if self.last() is stream:  # only ever a stream whose entry no waiter is about to forget (see the class)
            return
        key = id(stream)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is stream:
                ref, handle = entry[0], entry[2]
            else:  # new (or a dead stream's id reused)
                try:
                    handle = stream.handle
                except ClosedError:  # closed by another thread since the launch: close() waited for its work
                    return  # (and the entry under its id, a dead stream's maybe, stays as it was)
                ref = weakref.ref(stream)
                if entry is not None and _still_running(entry):  # the dead one's id, now the new stream's
                    self._entries[_collected_key(entry)] = entry
            self._number += 1
            self._entries.pop(key, None)  # moved to the end when it was there: ``last`` is then this one
            # Forget finished streams when one may have finished -- a stream's close or death moves the close
            # count -- so the record stays as small as the streams still open (never walked on the fast path).
            if self._swept != closes.generation:
                self._swept = closes.generation
                for old, old_entry in list(self._entries.items()):
                    if _finished(old_entry):
                        forgets.move()
                        del self._entries[old]
            self._entries[key] = (ref, self._number, handle)
            if not self._waiters:
                self.last = ref

    def _begin(self) -> list[tuple[Any, int, Any]]:
        """A waiter's snapshot: (key, number, stream) of each stream still open, held strongly for the caller."""
        with self._lock:
            forgets.move()  # before the snapshot: a launch that reads the count after this records again
            self._waiters += 1
            self.last = _nothing  # from now, a launch records under the lock (renumbering what it records)
            live: list[tuple[Any, int, Any]] = []
            for key, entry in list(self._entries.items()):
                if (s := entry[0]()) is not None and not s.closed:
                    live.append((key, entry[1], s))
                elif s is None and _still_running(entry):
                    live.append((key, entry[1], _Collected(entry[2])))  # _refuse_capturing refuses it
                else:
                    del self._entries[key]
            return live

    def _end(self, waited: list[tuple[Any, int, Any]]) -> None:
        """Forget the entries waited for, unless recorded again since the snapshot; then set ``last`` again.

        It does not move :data:`forgets`: :meth:`_begin` did, so a launch since then recorded under the lock.
        """
        with self._lock:
            for key, number, _ in waited:
                entry = self._entries.get(key)
                if entry is not None and entry[1] == number:
                    del self._entries[key]
            self._waiters -= 1
            if not self._waiters and self._entries:
                self.last = next(reversed(self._entries.values()))[0]

    def handle(self) -> int | None:
        """The CAI ``stream`` value: one stream after which nothing on this memory is pending, or None."""
        live = self._begin()
        waited: list[tuple[Any, int, Any]] = []
        try:
            _refuse_capturing(live)
            while live:
                last = live[-1][2]
                try:
                    if last.handle == LEGACY_HANDLE and not last.context.is_primary:
                        # 1 would name the legacy stream of the *consumer's* current context -- the primary one,
                        # for torch and CuPy -- not this created context's: the host waits for it instead.
                        last.synchronize()
                        waited.append(live.pop())
                        continue
                    for _, _, other in live[:-1]:
                        _join(last, other)
                    waited.extend(live[:-1])
                    return last.handle or STREAM_LEGACY  # 0 is forbidden in the interface (ambiguous)
                except ClosedError:  # closed by another thread meanwhile: its work is done, ask the rest
                    closed = [item for item in live if item[2].closed]
                    if not closed:
                        raise
                    waited.extend(closed)
                    live = [item for item in live if not item[2].closed]
            return None
        finally:
            self._end(waited)

    def order_before(self, consumer: int) -> None:
        """Make the consumer's stream wait, on the GPU, for everything pending on this memory.

        ``consumer`` is a CUstream, or 1 or 2 for the legacy or per-thread default stream. The default streams
        are per context, and a consumer means those of the context current on *its* side: the primary one, for
        torch and CuPy. Work pending on a stream of a created context cannot be ordered before a stream named
        that way. The same number would name a stream the consumer never uses, so the host waits instead.
        """
        live = self._begin()
        waited: list[tuple[Any, int, Any]] = []
        try:
            _refuse_capturing(live)
            for item in live:
                stream = item[2]
                try:
                    if consumer in DEFAULT_STREAMS and not stream.context.is_primary:
                        stream.synchronize()  # kept in the record all the same, as a GPU-side wait leaves it
                        continue
                    stream.context.activate()  # the event goes in the stream's context; 0, 1, 2 name its defaults
                    producer = stream.handle
                    if producer != consumer and not (producer == LEGACY_HANDLE and consumer == STREAM_LEGACY):
                        _wait(consumer, producer)
                except ClosedError:
                    waited.append(item)  # closed meanwhile: close() waited for its work
        finally:
            self._end(waited)

    def synchronize(self) -> None:
        """Wait, on the host, for everything pending on this memory (then nothing is, unless recorded meanwhile)."""
        live = self._begin()
        waited: list[tuple[Any, int, Any]] = []
        try:
            _refuse_capturing(live)
            for item in live:
                with contextlib.suppress(ClosedError):  # closed meanwhile: close() waited for its work
                    item[2].synchronize()
                waited.append(item)
        finally:
            self._end(waited)


class _Collected:
    """What a waiter's snapshot holds for a garbage-collected stream whose release waits for a capture."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle


def _still_running(entry: tuple[weakref.ref[Any], int, int]) -> bool:
    """Whether a dead entry's stream may still be running: its release is deferred behind an open capture."""
    return release_deferred(entry[2])


def _finished(entry: tuple[weakref.ref[Any], int, int]) -> bool:
    """Whether an entry's stream has no work left that an export must wait for.

    That is so when it is closed, or collected and released: close() and the release wait for its work.
    """
    stream = entry[0]()
    return stream.closed if stream is not None else not _still_running(entry)


def _collected_key(entry: tuple[weakref.ref[Any], int, int]) -> tuple[str, int]:
    """The key of a collected stream's entry once a new stream took over its id().

    Handles are unique while the deferred release keeps this one.
    """
    return ("collected", entry[2])


def _refuse_capturing(live: list[tuple[Any, int, Any]]) -> None:
    """Refuse to wait for pending work on a stream that is capturing now, with BufferError.

    An event recorded there to order a consumer would itself be captured, joining the consumer's stream into
    the graph. A synchronize there is a call capture forbids: the driver invalidates the capture. Refuse too
    while work may still run on a stream collected during a capture (see :class:`PendingStream`). A wait
    through the legacy stream is refused where it would be made: :func:`_wait`, :meth:`LegacyStream.synchronize`.
    """
    for _, _, stream in live:
        if isinstance(stream, _Collected):
            raise BufferError(
                f"this buffer's pending work ran on stream {stream.handle:#x}, which was garbage-collected while a"
                " capture is open: its release, which waits for that work, runs when the capture ends -- export "
                "it (or read it on the host) after the capture ends, or keep the stream alive (or close it) first"
            )
        if getattr(stream, "capturing", None) is not None:
            raise BufferError(
                f"this buffer's pending work is being captured into a graph on {stream!r}: export it (or read it"
                " on the host) after the capture ends"
            )


def _join(last: Any, other: Any) -> None:
    """Make ``last`` wait for the work queued on ``other`` so far (two streams of one context)."""
    last.context.activate()
    _wait(last.handle, other.handle)


def _wait(waiter: int, producer: int) -> None:
    """Make stream ``waiter`` wait for the work queued on stream ``producer`` so far. A context must be current.

    The event recorded there is dropped at once: the driver keeps a pending event alive until it completes.
    """
    if not LEGACY_STREAM_HANDLES.isdisjoint((waiter, producer)):
        capture_deferral.refuse_legacy("waiting for this buffer's pending work", peek_current() or None)
    event = c_void_p()
    cu.cuEventCreate(byref(event), int(EventFlag.DISABLE_TIMING))
    try:
        cu.cuEventRecord(event, producer)
        cu.cuStreamWaitEvent(waiter, event, EventWaitFlag.DEFAULT)
    finally:
        cu.cuEventDestroy(event)
