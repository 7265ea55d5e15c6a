"""Core: another library's stream taken as a rawcuda Stream -- the ``__cuda_stream__`` protocol, consumed.

torch, CuPy and cuda.core streams answer ``__cuda_stream__()`` with ``(0, handle)``. Every ``stream=`` takes
such an object. It becomes a *borrowed* Stream: it queues work on that handle and never destroys it.
The borrowed Stream holds the other library's object, so the handle stays valid while rawcuda has work
recorded on it. Its context is asked of the driver and must be the one the call works in.
Passing the object reads its handle again at every call; ``BorrowedStream.of(obj)`` gives a Stream to keep.
"""

from __future__ import annotations

import collections
import threading
from ctypes import byref, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError, CudaError
from rawcuda.ffi.constants import LEGACY_STREAM_HANDLES, STREAM_PER_THREAD

from .closecounter import closes
from .closeorder import CloseOrder
from .context import Context, default_context, described, resolve
from .guards.contextregistry import live_contexts
from .hostfunc import HostCalls
from .integers import integer
from .resource import Resource
from .stream import STREAM_PROTOCOL_VERSION, Stream, finish_work, not_a_stream

_CACHE_KEY = __name__  # this module's entry in Context.cache: {id(the other library's object): BorrowedStream}
_RETIRING_KEY = __name__ + ".retiring"  # [BorrowedStream]: evicted ones whose work may still be running
_lock = threading.Lock()  # guards those entries
HANDLE_BITS = 64  # a CUstream is a pointer
#: Borrowed streams a context keeps for the objects passed most recently. Each holds its object, so the cap
#: bounds how many foreign streams rawcuda keeps alive; an older one lives on only while work recorded on it does.
KEPT_PER_CONTEXT = 16


def _let_go(handle: int, spare_markers: list[int], held: collections.deque[tuple[int, Any]], owner: Any) -> None:
    """Release what rawcuda added to a borrowed stream; the stream itself stays the other library's."""
    # Why: docs/hazards.md, "A borrowed stream is never destroyed". `owner` rides along: the other library's
    # stream stays alive until its work is done. The wait is what lets an export count a dead stream as done,
    # as it does a closed one: the pending record holds its streams weakly.
    finish_work(handle, spare_markers, held)  # (no cuStreamDestroy: the stream is the other library's)
    closes.generation += 1  # launch caches keyed by this object's id must go (docs/hazards.md, same section)


class BorrowedStream(Stream):
    """A stream another library made, used through rawcuda: ``owner`` is that library's object.

    Everything a Stream does works on it. ``close()`` waits for its work and ends rawcuda's use of it (markers,
    held host memory), never the stream. Made by :func:`borrow`; the other library must keep the stream open
    while rawcuda uses it. Every call that takes it asks ``owner`` again, and refuses it once the answer changed.
    """

    internal = True  # kept by its context for the next call that passes the same object: no leak
    close_order = CloseOrder.BORROWED_STREAM  # its handle may be one of this context's own streams

    def __init__(self, owner: Any, handle: int, context: Context) -> None:
        Resource.__init__(self, context)  # (not Stream's: that one creates a stream)
        self.owner = owner
        self._handle = handle
        self._held: collections.deque[tuple[int, Any]] = collections.deque()
        self._spare_markers: list[int] = []
        self._host_calls = HostCalls()
        self._gone = ""  # why it closed, when its owner let the stream go
        self._own(_let_go, handle, self._spare_markers, self._held, owner)
        self.hold_context_weakly()  # the context's cache holds this: dropping both unclosed frees both

    def check_owner(self) -> None:
        """ClosedError when ``owner`` names another stream now (cuda.core's closed stream answers handle 0)."""
        self.check_open()
        try:
            now = protocol_handle(self.owner)
        except Exception as exc:  # cuda.core's closed stream raises RuntimeError: the stream is gone as well
            self._gone = f"{self!r}: its {type(self.owner).__name__} no longer answers __cuda_stream__ ({exc})"
            self._abandon()
            raise ClosedError(self._gone) from exc
        if now != self._handle:
            self._gone = (
                f"{self!r}: its {type(self.owner).__name__} now names stream {now:#x}, not {self._handle:#x} -- "
                "the other library closed or replaced it. Pass that library's stream again (or borrow it again)"
            )
            self._abandon()
            raise ClosedError(self._gone)

    def check_open(self) -> None:
        """ClosedError once closed; once its owner let the stream go, the error says so."""
        if self._closed:
            raise ClosedError(self._gone or f"{self!r} is closed; borrow the stream again (BorrowedStream.of)")

    def _abandon(self) -> None:
        """Closed without a call on the handle: its owner destroyed it, and waiting on it could crash."""
        if self._finalizer is not None:
            self._finalizer.detach()  # so the close below releases nothing through the handle
        for marker in self._spare_markers:  # rawcuda's own completed events: safe to destroy
            cu.cuEventDestroy(marker)
        self._spare_markers.clear()
        Resource.close(self)  # closed, the close count moved, forgotten by its context

    @classmethod
    def of(cls, obj: Any, context: Context | None = None) -> Stream | None:
        """``obj``'s stream (anything with ``__cuda_stream__``) as a Stream of ``context`` (the default when None).

        Keep it and pass it as ``stream=``: the borrowing is done once, and ``obj`` is asked only whether it
        still names the same stream. None when ``obj`` names the legacy default stream.
        """
        ctx = resolve(context)
        stream = as_stream(obj, ctx)
        if stream is not None:
            stream_handle(stream, ctx)  # a rawcuda Stream of another context: the ValueError a call would give
        return stream

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<BorrowedStream {self._handle:#x} of {type(self.owner).__name__}{state}>"


def _idle(stream: BorrowedStream) -> bool:
    """Whether a retiring stream's work is done (cuStreamQuery: never blocks). An error answers no: it retires on."""
    try:
        return stream.closed or stream.query()
    except CudaError:
        return False


def protocol_handle(obj: Any) -> int:
    """The CUstream ``obj.__cuda_stream__()`` names; TypeError or ValueError for an answer not of the protocol."""
    # The older form, an attribute or property holding the pair, is read too (cuda.core still takes it).
    answer = obj.__cuda_stream__
    if callable(answer):
        answer = answer()
    name = type(obj).__name__
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise TypeError(
            f"{name}.__cuda_stream__() must return (version, handle), got {described(answer)}: the CUDA stream "
            "protocol (cuda.core's IsStreamT)"
        )
    version = integer(answer[0], "the __cuda_stream__ protocol version")
    if version != STREAM_PROTOCOL_VERSION:
        raise ValueError(
            f"{name}.__cuda_stream__() speaks version {version} of the stream protocol; rawcuda reads version "
            f"{STREAM_PROTOCOL_VERSION}: pass a rawcuda Stream, or an object whose __cuda_stream__ speaks it"
        )
    handle = integer(answer[1], "the handle __cuda_stream__ returned")
    if not 0 <= handle < 1 << HANDLE_BITS:  # ctypes would wrap it: 2**64 would become the legacy stream
        raise ValueError(
            f"the handle __cuda_stream__ returned is {handle}, not a CUstream (0 to 2**{HANDLE_BITS} - 1): "
            f"{name}'s protocol answer is broken"
        )
    return handle


def stream_context(handle: int) -> int:
    """The CUcontext the driver says ``handle`` belongs to."""
    ctx = c_void_p()
    cu.cuStreamGetCtx(handle, byref(ctx))
    return ctx.value or 0


def borrow(obj: Any, context: Context) -> Stream | None:
    """``obj``'s stream as a Stream of ``context``: None for the legacy default stream, else a BorrowedStream.

    ValueError for a stream of another context, and for the per-thread default stream.
    """
    # Why: docs/hazards.md, "A borrowed stream is never destroyed".
    handle = protocol_handle(obj)
    if handle in LEGACY_STREAM_HANDLES:
        return None  # the legacy default stream of whichever context the call works in: what None means here
    if handle == STREAM_PER_THREAD:
        raise ValueError(
            f"{described(obj)} is the per-thread default stream (handle 2): rawcuda queues on the legacy default "
            "stream (stream=None) or on streams it can check; pass None or a Stream"
        )
    context.check_usable()
    with _lock:  # several threads may borrow at once: the cache's order and its eviction must stay one
        kept: dict[int, BorrowedStream] = context.cache.setdefault(_CACHE_KEY, {})
        known = kept.pop(id(obj), None)
        if known is not None and known.owner is obj and not known.closed:
            if known.handle == handle:
                kept[id(obj)] = known  # the most recently used last: the least recent goes first
                return known
        else:
            known = None
    if known is not None:  # the owner replaced its stream: the old handle may be destroyed, so no wait on it
        known._abandon()
    owner = stream_context(handle)
    if owner != context.raw_handle:
        raise ValueError(
            f"{described(obj)} (stream {handle:#x}) belongs to context {owner:#x}, not {context!r}: pass a stream "
            "of the context the buffers and kernels are in"
        )
    stream = BorrowedStream(obj, handle, context)
    with _lock:
        kept[id(obj)] = stream
        if len(kept) > KEPT_PER_CONTEXT:  # the least recently used retires: kept until its stream is idle
            context.cache.setdefault(_RETIRING_KEY, []).append(kept.pop(next(iter(kept))))
        retiring = context.cache.get(_RETIRING_KEY, [])
        idle = [s for s in retiring if _idle(s)]
        retiring[:] = [s for s in retiring if s not in idle]
    del idle  # (outside the lock: a release waits for the stream, which is idle now)
    return stream


def as_stream(stream: Any, context: Context) -> Stream | None:
    """What a ``stream=`` parameter takes: None, a Stream, or an object with ``__cuda_stream__`` (borrowed).

    TypeError for anything else, saying what to pass.
    """
    if stream is None or isinstance(stream, Stream):
        if type(stream) is BorrowedStream:
            stream.check_owner()  # a handle its owner destroyed would crash the driver
        return stream
    if not stream_like(stream):
        raise TypeError(not_a_stream(stream))
    return borrow(stream, context)


def context_for(stream: Any, context: Context | None, ordinal: int = 0) -> Context:
    """The context a call with no ``context`` works in: a Stream's own; for another library's stream, the one
    the driver says it is in, as rawcuda knows it; else the default context of device ``ordinal``.

    TypeError, before any driver call, for a ``stream`` that is none of what a ``stream=`` takes.
    """
    if not stream_like(stream):  # refused before any driver call
        raise TypeError(not_a_stream(stream))
    if context is not None:
        return resolve(context)
    if isinstance(stream, Stream):
        return stream.context
    fallback = default_context(ordinal)  # (also what makes the driver answer the question below)
    if stream is None:
        return fallback
    handle = protocol_handle(stream)
    if handle in LEGACY_STREAM_HANDLES or handle == STREAM_PER_THREAD:
        return fallback
    raw = stream_context(handle)
    return next((c for c in live_contexts() if c.raw_handle == raw and c.usable), fallback)


def stream_like(value: Any) -> bool:
    """Whether ``value`` is what a ``stream=`` takes, asking nothing of the driver (for checks made before it)."""
    return value is None or isinstance(value, Stream) or getattr(value, "__cuda_stream__", None) is not None


def stream_handle(stream: Any, context: Context) -> int:
    """The CUstream to pass for ``stream``: 0, the legacy default stream, for None.

    Takes what :func:`as_stream` takes. Raises TypeError for anything else, ClosedError for a closed stream, and
    ValueError for a stream of another context.
    """
    if stream is None:
        return 0
    if not isinstance(stream, Stream):
        stream = as_stream(stream, context)  # another library's stream, or the TypeError
        if stream is None:
            return 0
    handle = stream.handle  # ClosedError for a closed stream
    owner = stream.context
    if owner is not context and owner.raw_handle != context.raw_handle:  # (identity first: the common case)
        raise ValueError(f"{stream!r} belongs to {owner!r}, not {context!r}: use a stream of the same context")
    return handle


__all__ = [
    "KEPT_PER_CONTEXT",
    "BorrowedStream",
    "as_stream",
    "borrow",
    "context_for",
    "protocol_handle",
    "stream_context",
    "stream_handle",
    "stream_like",
]
