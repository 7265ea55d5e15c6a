"""Layer 2: which stream a buffer's ``__cuda_array_interface__`` names -- the producer's side of the interface.

Version 3 of the CUDA Array Interface lets the producer name a ``stream``: the consumer (torch, CuPy,
numba) orders its work after it, so that it never reads memory an async copy or a kernel is still writing.
The stream to name is the one whose work on this *memory* may still be pending, whichever buffer object the
work went through -- so a :class:`PendingStream` belongs to the memory: a buffer and all its views share one,
and a GrowableBuffer shares its own with every view it hands out. The consumer's side is :mod:`rawcuda.interop`.

What records there: async copies and memsets (``stream=s``), and kernel launches (``Function.launch``,
``BoundLaunch``, so ``rawcuda.ops`` too) on every rawcuda buffer passed as an argument. A launch on no stream
runs on the *legacy* default stream, which is asynchronous as well: it records that context's
:class:`LegacyStream` (a synchronous copy, by contrast, records None: it waited for everything). Not recorded:

* a launch being captured (``with rawcuda.capture(s)``): it does not run now, but at each replay; and an event
  recorded on the capturing stream later, to order a consumer after it, would itself be captured -- pulling
  the consumer's stream into the graph instead of ordering it;
* graph replays (``GraphExec.launch``), and kernels given a bare address (an int) instead of the buffer.

DLPack turns the direction round: the consumer names *its* stream in ``__dlpack__(stream=...)``, and the
producer must make that stream safe (:meth:`PendingStream.order_before`), or -- for a consumer on the host --
wait itself (:meth:`PendingStream.synchronize`).
"""

from __future__ import annotations

import contextlib
import weakref
from ctypes import byref, c_void_p
from typing import Any

from .checked import cu
from .checked.errors import ClosedError
from .context import Context
from .ffi.constants import STREAM_LEGACY, STREAM_PER_THREAD, EventFlag, EventWaitFlag
from .stream import Stream

#: A consumer's stream given as one of these means "the default stream of the context current *there*".
_DEFAULT_STREAMS = frozenset({STREAM_LEGACY, STREAM_PER_THREAD})
#: The CUstream a launch on "no stream" passes: NULL, the legacy default stream of the current context.
LEGACY_HANDLE = 0
_CACHE_KEY = __name__  # this module's entry in Context.cache: the context's LegacyStream


class LegacyStream:
    """The legacy default stream (CUstream 0) of one context, as a :class:`PendingStream` records it: what
    ``stream=None`` launches on. It offers what a PendingStream reads of a :class:`Stream` -- ``handle``,
    ``context``, ``closed``, ``capturing``, ``synchronize()`` -- and there is one per Context object
    (:func:`legacy_stream`), so that "the same stream again" is an identity check.

    It holds its context *weakly*: the context's ``cache`` holds it, and a strong reference back would be a
    cycle that keeps a dropped context for the cyclic GC. Its work ends when the context closes (close()
    synchronizes), so it is ``closed`` then, as a closed Stream is.
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


def _nothing() -> None:
    """What :attr:`PendingStream.last` is while nothing is pending: a call that names no stream."""
    return None


class PendingStream:
    """The streams of asynchronous rawcuda operations still possibly pending on some memory, shared by the
    buffer and every view of it; a synchronous operation, which waits for everything, clears them.

    Streams are held *weakly*: a stream that is collected has finished its work first (its finalizer waits,
    like close()), and a strong reference would make a cycle through a stream that holds a buffer for a
    pending copy. Two views written on two streams leave two streams pending, but the interface names one:
    exporting makes the last stream wait (cuStreamWaitEvent) for the others, so it stands for all of them.

    ``last`` is the weak reference to the stream recorded last (``streams[-1]``; a call answering None when
    nothing is pending). A launch compares ``last() is stream`` before calling :meth:`record`: the same stream
    again -- a loop of launches -- is the common case, and costs one call of a weak reference per buffer.
    """

    __slots__ = ("last", "streams")

    def __init__(self) -> None:
        self.streams: list[weakref.ref[Any]] = []
        self.last: Any = _nothing

    def _set(self, refs: list[weakref.ref[Any]]) -> None:
        # ``last`` is taken back first and set last: a thread reading it between the two steps sees nothing
        # recorded (and records), never a stream the list no longer holds.
        self.last = _nothing
        self.streams = refs
        if refs:
            self.last = refs[-1]

    def record(self, stream: Stream | LegacyStream | None) -> None:
        """After an operation queued on ``stream`` (None: a synchronous one, after which nothing is pending)."""
        if stream is None:
            self._set([])
        elif self.last() is not stream:
            # Moved to the end when it was there already: ``last`` is then the stream used most recently.
            kept = [ref for ref in self.streams if (s := ref()) is not None and s is not stream and not s.closed]
            self._set([*kept, weakref.ref(stream)])

    def _alive(self) -> list[Any]:
        """The streams still open, strongly held for the caller (and the record pruned to them)."""
        live = [(ref, s) for ref in self.streams if (s := ref()) is not None and not s.closed]
        if len(live) != len(self.streams):
            self._set([ref for ref, _ in live])
        return [s for _, s in live]

    def handle(self) -> int | None:
        """The CAI ``stream`` value: one stream after which nothing on this memory is pending, or None."""
        live = self._alive()
        if not live:
            return None
        last = live[-1]
        try:
            if last.handle == LEGACY_HANDLE and not last.context.is_primary:
                # 1 would name the legacy stream of the *consumer's* current context -- the primary one, for
                # torch and CuPy -- not this created context's: the host waits for it instead.
                last.synchronize()
                self._set([weakref.ref(s) for s in live[:-1]])
                return self.handle()
            for other in live[:-1]:
                _join(last, other)
            self._set([weakref.ref(last)])
            return last.handle or STREAM_LEGACY  # 0 is forbidden in the interface (ambiguous)
        except ClosedError:  # closed by another thread meanwhile: its work is done, ask again
            return self.handle()

    def order_before(self, consumer: int) -> None:
        """Make the consumer's stream wait (on the GPU) for everything pending on this memory: ``consumer`` is a
        CUstream, or 1 / 2 for the legacy / per-thread default stream.

        The default streams are per context, and a consumer means those of the context current on *its* side:
        the primary one, for torch and CuPy. Work pending on a stream of another (created) context cannot be
        ordered before a stream named that way -- the same number would name a stream the consumer never
        uses -- so the host waits for that stream instead.
        """
        for stream in self._alive():
            try:
                if consumer in _DEFAULT_STREAMS and not stream.context.is_primary:
                    stream.synchronize()
                    continue
                stream.context.activate()  # the event goes in the stream's context; 0, 1 and 2 name its defaults
                producer = stream.handle
                if producer != consumer and not (producer == LEGACY_HANDLE and consumer == STREAM_LEGACY):
                    _wait(consumer, producer)
            except ClosedError:
                continue  # closed meanwhile: close() waited for its work

    def synchronize(self) -> None:
        """Wait, on the host, for everything pending on this memory (then nothing is)."""
        for stream in self._alive():
            with contextlib.suppress(ClosedError):  # closed meanwhile: close() waited for its work
                stream.synchronize()
        self._set([])


def _join(last: Any, other: Any) -> None:
    """Make ``last`` wait for the work queued on ``other`` so far (two streams of one context)."""
    last.context.activate()
    _wait(last.handle, other.handle)


def _wait(waiter: int, producer: int) -> None:
    """Make stream ``waiter`` wait for the work queued on stream ``producer`` so far (an event recorded there,
    then dropped: the driver keeps a pending event alive until it completes). A context must be current."""
    event = c_void_p()
    cu.cuEventCreate(byref(event), int(EventFlag.DISABLE_TIMING))
    try:
        cu.cuEventRecord(event, producer)
        cu.cuStreamWaitEvent(waiter, event, EventWaitFlag.DEFAULT)
    finally:
        cu.cuEventDestroy(event)
