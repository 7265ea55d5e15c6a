"""Extras: waiting for the GPU from asyncio -- ``await stream`` / ``await event`` -- without blocking the loop.

**The trap (the seed article's Tokio warning).** ``Stream.synchronize()`` blocks the calling OS thread
until the GPU is done. An asyncio event loop is *one* thread running every coroutine in turn, so a
coroutine that calls ``stream.synchronize()`` freezes all of them: timers fire late, sockets go unread,
a ticker that should tick every 10 ms is silent for as long as the kernel runs (tutorial 10 measures
it). The seed says the same of Tokio: ``Stream::synchronize`` blocks the reactor thread; its fix is to
move the wait to a dedicated thread pool. ``await asyncio.to_thread(stream.synchronize)`` does that in
Python -- correct, but each pending wait then occupies a pool thread (the default pool has at most 32),
so a hundred concurrent waits queue behind each other. (cust needs no pool either: its
``Stream::add_callback`` wraps ``cuStreamAddCallback``, whose callback can wake a future -- the design
below, in Rust. cuda.h marks cuStreamAddCallback for eventual deprecation in favour of cuLaunchHostFunc.)

**What rawcuda does instead: let the GPU tell the loop.** ``await stream``:

1. creates an asyncio Future on the running loop and registers it under an integer *token*;
2. enqueues ``cuLaunchHostFunc(stream, host_function, token)``: the driver calls ``host_function`` on one
   of its own threads once everything queued on the stream before it has finished;
3. ``host_function`` does one thing: ``loop.call_soon_threadsafe(resolve, future)`` -- which wakes the
   loop through its self-pipe -- and returns. It must never call CUDA (cuda.h: a host function "must not
   make any CUDA API calls", which may fail with CUDA_ERROR_NOT_PERMITTED, and waiting there for other
   GPU work can deadlock the driver's thread), and it must never raise (an exception cannot cross back
   into C), so it catches everything, e.g. the RuntimeError of a loop that was closed meanwhile;
4. the coroutine sleeps on the Future; no thread is blocked anywhere.

``await event`` does the same on an internal stream of the event's context, after
``cuStreamWaitEvent(internal, event)``. Internal streams come from a small per-context pool, one per
pending wait, so a wait on a quick event is never stuck behind a wait on a slow one (a single internal
stream would run its host functions in order). They are created NON_BLOCKING, so they never wait for
unrelated work on the legacy default stream.

**Lifetimes -- what must stay alive for C to call back into Python.**

* The C function pointer: one module-level ``CUhostFn`` object serves every wait. A per-wait callback
  object would have to stay alive until the driver had *returned* from calling it -- which Python can
  never observe -- so freeing it would be a use-after-free in the driver's thread.
* The per-wait data: ``userData`` is just the integer token, not a pointer, so there is nothing in C to
  keep alive or to dangle. The registry (token -> loop, future, the stream or event) holds the rest.
* Cancellation: when the awaiting task is cancelled, the registry entry is removed at once and the Future
  cancelled. The host function still runs later (a queued host function cannot be withdrawn); it finds no
  entry, counts itself in :func:`orphaned`, and does nothing. Cancelling ``await event`` returns at once:
  its internal stream still holds the wait, so it is set aside (closing it would block until the event
  completes) and pooled again once a later wait finds it finished.

**A host function that never runs.** The driver skips host functions once the context has hit a sticky
error (a kernel fault). So the wait also asks ``query()`` -- which never blocks, and raises that sticky
error -- every :data:`ERROR_CHECK_INTERVAL_S` seconds while it is pending; a faulted kernel becomes an
exception in the awaiting coroutine instead of a hang.

**Costs.** One ``cuLaunchHostFunc`` per wait (a few microseconds), plus the loop's self-pipe wake-up. Work
queued on the same stream *after* ``await stream`` also waits for the host function to return -- and, being
Python, it needs the GIL for a moment: a thread that holds the GIL for long (pure-Python number crunching)
delays it. That is why it does nothing but hand over to the loop.
A stream that is being captured into a graph cannot be awaited: the host function would be recorded
into the graph instead of running.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any

from rawcuda.checked import cu
from rawcuda.core.context import Context
from rawcuda.core.event import Event
from rawcuda.core.stream import Stream
from rawcuda.ffi.constants import EventWaitFlag, StreamFlag
from rawcuda.ffi.types import CUhostFn

#: While a wait is pending, how often to ask the GPU directly whether a sticky error has stopped the host
#: function from ever running. Only matters when something went wrong; a normal wait ends by the callback.
ERROR_CHECK_INTERVAL_S = 0.5

#: Idle internal streams kept per context for ``await event`` (more are created when more waits overlap).
IDLE_WAIT_STREAMS = 8


@dataclass
class _Pending:
    """What the host function needs to complete one wait (everything a C callback cannot hold itself)."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    target: Any  # the Stream or Event: kept alive until the wait has ended


class _Counts:
    orphans = 0  # host functions that found their wait gone (cancelled): proof they ran and did nothing


_registry: dict[int, _Pending] = {}
_counts = _Counts()
_lock = threading.Lock()  # the host function runs on a driver thread; the registry is shared with the loop
_tokens = itertools.count(1)  # never 0: ctypes hands a NULL userData to Python as None
_idle_streams: dict[int, list[Stream]] = {}  # context handle -> idle internal streams for `await event`
_busy_streams: dict[int, list[Stream]] = {}  # context handle -> streams of cancelled waits, still queued


def _host_function(user_data: int | None) -> None:
    """Runs on a driver thread when the stream reaches it. Only hands the news to the loop; never raises."""
    with contextlib.suppress(BaseException):  # nothing may propagate into C
        with _lock:
            pending = _registry.pop(user_data or 0, None)
            if pending is None:
                _counts.orphans += 1
        if pending is not None:
            pending.loop.call_soon_threadsafe(_resolve, pending.future)


#: The one C function pointer every wait uses (module-level: it outlives every call into it).
_HOST_FN = CUhostFn(_host_function)


def _resolve(future: asyncio.Future[None]) -> None:
    """On the loop thread: complete the Future, unless the wait was cancelled meanwhile."""
    if not future.done():
        future.set_result(None)


def _register(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None], target: Any) -> int:
    token = next(_tokens)
    with _lock:
        _registry[token] = _Pending(loop, future, target)
    return token


def _forget(token: int) -> None:
    with _lock:
        _registry.pop(token, None)


def pending() -> int:
    """How many waits are registered and not yet completed by their host function."""
    with _lock:
        return len(_registry)


def orphaned() -> int:
    """How many host functions have run after their wait was cancelled (and, correctly, did nothing)."""
    with _lock:
        return _counts.orphans


async def wait(target: Stream | Event, *, check_interval_s: float = ERROR_CHECK_INTERVAL_S) -> None:
    """Wait until the work queued on a stream so far, or the work before a recorded event, has finished.

    Never blocks the event loop. ``await stream`` and ``await event`` call this.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    token, waiter = _enqueue(target, loop, future)
    try:
        while not future.done():
            await asyncio.wait({future}, timeout=check_interval_s)
            # The callback may never come if a sticky error stopped the context: query() raises it then.
            if not future.done() and target.query():
                break
    finally:
        _forget(token)
        completed = future.done() and not future.cancelled()
        if not future.done():
            future.cancel()
        if waiter is not None:
            _release_waiter(waiter, idle=completed)


def _enqueue(
    target: Stream | Event, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]
) -> tuple[int, Stream | None]:
    """Queue the host function behind ``target``'s work; returns the token and the internal stream used."""
    if isinstance(target, Stream):
        handle = target.handle  # ClosedError for a closed stream
        if target.capturing is not None:
            raise RuntimeError(
                f"cannot await {target!r} while it is being captured into a graph: the wait "
                "would be recorded into the graph instead of running; await after the capture"
            )
        target.context.activate()
        token = _register(loop, future, target)
        try:
            cu.cuLaunchHostFunc(handle, _HOST_FN, token)
        except BaseException:
            _forget(token)
            raise
        return token, None
    if isinstance(target, Event):
        target.require_recorded("await")
        ctx = target.context
        ctx.activate()
        waiter = _acquire_waiter(ctx)
        token = _register(loop, future, target)
        try:
            cu.cuStreamWaitEvent(waiter.handle, target.handle, EventWaitFlag.DEFAULT)
            cu.cuLaunchHostFunc(waiter.handle, _HOST_FN, token)
        except BaseException:
            _forget(token)
            _release_waiter(waiter, idle=False)
            raise
        return token, waiter
    raise TypeError(f"await needs a rawcuda Stream or Event, not {type(target).__name__}")


def _acquire_waiter(ctx: Context) -> Stream:
    """An idle internal stream of ``ctx`` (a new one when none is idle)."""
    _reclaim_finished(ctx)
    with _lock:
        idle = _idle_streams.get(ctx.raw_handle, [])
        while idle:
            stream = idle.pop()
            if not stream.closed and stream.context is ctx:
                return stream
    waiter = Stream(ctx, flags=StreamFlag.NON_BLOCKING)
    waiter.internal = True  # pooled until the context closes: not a leak of the program's
    return waiter


def _release_waiter(stream: Stream, *, idle: bool) -> None:
    """Back to the pool when its work is done. A cancelled wait's stream still has the wait queued: closing
    it would block until the event completes (a stream's close waits for its work), so it is set aside,
    and a later wait reuses it once it has finished."""
    if stream.closed:
        return
    with _lock:
        key = stream.context.raw_handle
        if not idle:
            _busy_streams.setdefault(key, []).append(stream)
            return
        pool = _idle_streams.setdefault(key, [])
        if len(pool) < IDLE_WAIT_STREAMS:
            pool.append(stream)
            return
    with contextlib.suppress(Exception):  # a closed or poisoned context: nothing left to release
        stream.close()


def _reclaim_finished(ctx: Context) -> None:
    """The set-aside streams of ``ctx`` whose cancelled wait has run go back to the pool (never blocks)."""
    with _lock:
        busy = _busy_streams.pop(ctx.raw_handle, [])
    still = []
    for stream in busy:
        try:
            done = stream.closed or stream.query()
        except Exception:  # a poisoned context: the next wait reports it; this stream is of no more use
            continue
        if not done:
            still.append(stream)
        elif not stream.closed:
            _release_waiter(stream, idle=True)
    if still:
        with _lock:
            _busy_streams.setdefault(ctx.raw_handle, []).extend(still)


__all__ = ["ERROR_CHECK_INTERVAL_S", "IDLE_WAIT_STREAMS", "orphaned", "pending", "wait"]
