"""Layer 2: which stream a buffer's ``__cuda_array_interface__`` names -- the producer's side of the interface.

Version 3 of the CUDA Array Interface lets the producer name a ``stream``: the consumer (torch, CuPy,
numba) orders its work after it, so that it never reads memory an async copy is still writing. The stream
to name is the one whose work on this *memory* may still be pending, whichever buffer object the work went
through -- so a :class:`PendingStream` belongs to the memory: a buffer and all its views share one, and a
GrowableBuffer shares its own with every view it hands out. The consumer's side is :mod:`rawcuda.interop`.

DLPack turns the direction round: the consumer names *its* stream in ``__dlpack__(stream=...)``, and the
producer must make that stream safe (:meth:`PendingStream.order_before`), or -- for a consumer on the host --
wait itself (:meth:`PendingStream.synchronize`).
"""

from __future__ import annotations

import contextlib
import weakref
from ctypes import byref, c_void_p

from .checked import cu
from .checked.errors import ClosedError
from .ffi.constants import STREAM_LEGACY, STREAM_PER_THREAD, EventFlag, EventWaitFlag
from .stream import Stream

#: A consumer's stream given as one of these means "the default stream of the context current *there*".
_DEFAULT_STREAMS = frozenset({STREAM_LEGACY, STREAM_PER_THREAD})


class PendingStream:
    """The streams of asynchronous rawcuda operations still possibly pending on some memory, shared by the
    buffer and every view of it; a synchronous operation, which waits for everything, clears them.

    Streams are held *weakly*: a stream that is collected has finished its work first (its finalizer waits,
    like close()), and a strong reference would make a cycle through a stream that holds a buffer for a
    pending copy. Two views written on two streams leave two streams pending, but the interface names one:
    exporting makes the last stream wait (cuStreamWaitEvent) for the others, so it stands for all of them.
    """

    __slots__ = ("streams",)

    def __init__(self) -> None:
        self.streams: list[weakref.ref[Stream]] = []

    def record(self, stream: Stream | None) -> None:
        """After an operation on ``stream`` (None: a synchronous one, after which nothing is pending)."""
        if stream is None:
            self.streams = []
        elif not any(ref() is stream for ref in self.streams):
            self.streams = [*self._live(), weakref.ref(stream)]

    def _live(self) -> list[weakref.ref[Stream]]:
        return [ref for ref in self.streams if (s := ref()) is not None and not s.closed]

    def handle(self) -> int | None:
        """The CAI ``stream`` value: one stream after which nothing on this memory is pending, or None."""
        live = [s for s in (ref() for ref in self._live()) if s is not None]
        self.streams = [weakref.ref(s) for s in live]
        if not live:
            return None
        last = live[-1]
        try:
            for other in live[:-1]:
                _join(last, other)
            self.streams = [weakref.ref(last)]
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
        for stream in [s for s in (ref() for ref in self._live()) if s is not None]:
            try:
                if consumer in _DEFAULT_STREAMS and not stream.context.is_primary:
                    stream.synchronize()
                    continue
                stream.context.activate()  # the event goes in the stream's context; 1 and 2 name its defaults
                if stream.handle != consumer:
                    _wait(consumer, stream.handle)
            except ClosedError:
                continue  # closed meanwhile: close() waited for its work

    def synchronize(self) -> None:
        """Wait, on the host, for everything pending on this memory (then nothing is)."""
        for stream in [s for s in (ref() for ref in self._live()) if s is not None]:
            with contextlib.suppress(ClosedError):  # closed meanwhile: close() waited for its work
                stream.synchronize()
        self.streams = []


def _join(last: Stream, other: Stream) -> None:
    """Make ``last`` wait for the work queued on ``other`` so far."""
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
