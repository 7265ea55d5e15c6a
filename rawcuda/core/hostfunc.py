"""Core: host functions -- a Python callable queued in stream order with ``cuLaunchHostFunc``, its outcome kept.

The driver calls it on one of its own threads once the work before it has finished. ``userData`` is a token, so
nothing in C can dangle; one module-level ``CUhostFn`` outlives every call. What the callable raises is kept on
its :class:`HostCall`: ``result()`` raises it, else the stream's next ``synchronize()`` does, once. Nothing the
call held is let go on the driver's thread: a buffer freed there would call CUDA from a host function, which
cuda.h forbids. docs/hazards.md, "Host functions".
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ForkedProcessError, RawCudaError
from rawcuda.ffi.types import CUhostFn

WAIT_SLICE_S = 0.5  # result(None) wakes this often to see whether a sticky error means it will never run
KEPT_FAILURES = 16  # failures a stream keeps to report at its next synchronize; the rest are counted


class HostFunctionError(RawCudaError, RuntimeError):
    """A host function raised; the exception it raised is this one's ``__cause__``."""


class HostCall:
    """One queued host function: ``done``, ``result(timeout)``, ``exception(timeout)``."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], context: Any) -> None:
        self.fn, self.args, self.context = fn, args, context
        self._finished = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._reported = False
        self._claim = threading.Lock()
        self.traceback = ""  # what it raised, formatted where it raised it

    def run(self) -> None:
        """On the driver's thread: call it, keep what it returned or raised, never raise, let nothing go."""
        try:
            self._value = self.fn(*self.args)
        except BaseException as exc:  # (KeyboardInterrupt too: nothing may cross into C)
            # Its traceback's frames hold the arguments, and through f_back this frame, which holds this call: a
            # cycle only the cyclic GC could free. Keep the traceback as text instead.
            self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self._error = exc.with_traceback(None)
        finally:
            self._finished.set()

    def finish_unrun(self, error: BaseException) -> None:
        """It will never run (a fork, a context lost): finish it with ``error``."""
        if not self._finished.is_set():
            self._error = error
            self._finished.set()

    @property
    def done(self) -> bool:
        """True once the callable has returned or raised."""
        return self._finished.is_set()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What it raised (None when it returned), after waiting up to ``timeout`` seconds; asking counts as told."""
        waited = 0.0
        while not self._finished.wait(WAIT_SLICE_S if timeout is None else min(WAIT_SLICE_S, timeout - waited)):
            waited += WAIT_SLICE_S
            self.context.check_usable()  # poisoned or forked: the driver will never call it
            if timeout is not None and waited >= timeout:
                raise TimeoutError(f"{self!r} has not run within {timeout} s: the work before it still runs")
        self.claim_report()
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """What it returned; HostFunctionError (from what it raised) if it raised."""
        error = self.exception(timeout)
        if error is not None:
            raise HostFunctionError(f"{self!r} raised {type(error).__name__}: {error}\n{self.traceback}") from error
        return self._value

    def claim_report(self) -> BaseException | None:
        """What it raised, the first time anyone asks after it ran; None after that (or if it returned)."""
        with self._claim:
            if self._reported or not self._finished.is_set():
                return None
            self._reported = True
            return self._error

    @property
    def raised_unseen(self) -> bool:
        """It ran and raised, and nobody has been told."""
        return self.done and self._error is not None and not self._reported

    def release(self) -> None:
        """On a user thread, after it ran: let the callable and its arguments go (what it returned stays)."""
        self.fn = self.args = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("raised" if self._error is not None else "returned")
        return f"<HostCall {state}>"


class HostCalls:
    """A stream's host functions: the ones not known to have run, in queue order, and the failures not yet told."""

    def __init__(self) -> None:
        # Reentrant: letting a call's arguments go may run a finalizer that queues on this very stream.
        self._lock = threading.RLock()
        self.pending: deque[HostCall] = deque()
        self.failed: list[HostCall] = []
        self.more_failed = 0  # failures past KEPT_FAILURES, counted only

    def add(self, call: HostCall) -> None:
        with self._lock:
            self._settle()
            self.pending.append(call)

    def _settle(self) -> None:
        # A stream runs its host functions in order: the ones that ran are at the left.
        while self.pending and self.pending[0].done:
            call = self.pending.popleft()
            if call.raised_unseen:
                if len(self.failed) < KEPT_FAILURES:
                    self.failed.append(call)
                else:
                    self.more_failed += 1
            call.release()

    def take_failures(self) -> tuple[list[BaseException], int]:
        """After a synchronize: what ran and raised unseen (each told once), and how many more were not kept."""
        with self._lock:
            self._settle()
            failed, more = self.failed, self.more_failed
            self.failed, self.more_failed = [], 0
        errors = [error for call in failed if (error := call.claim_report()) is not None]
        return errors, more


def raise_failures(stream: Any, calls: HostCalls) -> None:
    """After ``stream`` synchronized: HostFunctionError for what its host functions raised unseen."""
    if not (calls.pending or calls.failed):  # no host function queued since the last look: no lock taken
        return
    errors, more = calls.take_failures()
    if not (errors or more):
        return
    count = len(errors) + more
    first = errors[0] if errors else None
    said = f"the first raised {type(first).__name__}: {first}" if first is not None else "each one counted only"
    raise HostFunctionError(
        f"{count} host function(s) queued on {stream!r} raised; {said} (HostCall.result() raises each one's)"
    ) from first


_registry: dict[int, HostCall] = {}
_ran: list[HostCall] = []  # run on a driver thread, let go on a user thread (never the last reference there)
_lock = threading.Lock()  # the trampoline runs on a driver thread
_tokens = itertools.count(1)  # never 0: ctypes hands a NULL userData to Python as None


def _trampoline(user_data: int | None) -> None:
    """What the driver calls: the token's HostCall, run. Never raises, and drops no reference but the token's."""
    with contextlib.suppress(BaseException):
        with _lock:
            call = _registry.pop(user_data or 0, None)
            if call is not None:
                _ran.append(call)  # still referenced: whatever it frees is freed on a user thread
        if call is not None:
            call.run()


#: The one C function pointer every host function goes through (module-level: it outlives every call).
_HOST_FN = CUhostFn(_trampoline)


def _let_go_of_ran() -> None:
    """On a user thread: drop the driver thread's references to the calls that ran."""
    with _lock:
        ran = _ran[:]
        _ran.clear()
    del ran  # (here, on this thread, whatever they held is freed)


def queue_host_call(stream_handle: int, fn: Callable[..., Any], args: tuple[Any, ...], context: Any) -> HostCall:
    """Queue ``fn(*args)`` on the stream with this handle (its context current); returns its HostCall."""
    if not callable(fn):
        raise TypeError(f"launch_host_func takes a callable, not {type(fn).__name__} {fn!r}")
    _let_go_of_ran()
    call = HostCall(fn, args, context)
    token = next(_tokens)
    with _lock:
        _registry[token] = call
    try:
        cu.cuLaunchHostFunc(stream_handle, _HOST_FN, token)
    except BaseException:
        with _lock:
            _registry.pop(token, None)
        raise
    return call


def pending_calls() -> int:
    """Host functions queued that have not run yet (a test's view of the registry)."""
    _let_go_of_ran()
    with _lock:
        return len(_registry)


def _after_fork_in_child() -> None:
    # The driver's threads are not in the child: nothing queued will ever run, and a lock they held stays held.
    global _lock
    _lock = threading.Lock()
    for call in _registry.values():
        call.finish_unrun(ForkedProcessError("the process forked before this host function ran: it never will"))
    _registry.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
