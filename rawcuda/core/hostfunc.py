"""Core: host functions -- a Python callable queued in stream order with ``cuLaunchHostFunc``, its outcome kept.

The driver calls it on one of its own threads once the work queued before it has finished; the work after it
waits until it returns. ``userData`` is a token, an int, so nothing in C can dangle, and one module-level
``CUhostFn`` outlives every call into it. Whatever the callable raises is caught there (an exception cannot cross
into C) and kept on its :class:`HostCall`: ``result()`` raises it, and so does the stream's next
``synchronize()`` if nothing asked. cuda.h: a host function must make no CUDA call (CUDA_ERROR_NOT_PERMITTED,
or a driver thread deadlocked). docs/hazards.md, "Host functions".
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import RawCudaError
from rawcuda.ffi.types import CUhostFn


class HostFunctionError(RawCudaError, RuntimeError):
    """A host function raised; the exception it raised is this one's ``__cause__``."""


class HostCall:
    """One queued host function: ``done``, ``result(timeout)``, ``exception(timeout)``."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args  # alive until it ran: the registry holds this call
        self._finished = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self.reported = False  # its exception was raised to someone (result(), or a synchronize)

    def run(self) -> None:
        """On the driver's thread: call it, keep what it returned or raised, never raise."""
        try:
            self._value = self.fn(*self.args)
        except BaseException as exc:  # (KeyboardInterrupt too: nothing may cross into C)
            self._error = exc
        finally:
            self.fn = self.args = None  # type: ignore[assignment]  # its arguments may be large: let them go
            self._finished.set()

    @property
    def done(self) -> bool:
        """True once the callable has returned or raised."""
        return self._finished.is_set()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What it raised (None when it returned), after waiting up to ``timeout`` seconds for it to run."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the host function has not run within {timeout} s: the work before it still runs")
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """What it returned; HostFunctionError (from what it raised) if it raised."""
        error = self.exception(timeout)
        if error is not None:
            self.reported = True
            raise HostFunctionError(f"the host function {self!r} raised {type(error).__name__}: {error}") from error
        return self._value

    @property
    def unreported_error(self) -> BaseException | None:
        """What it raised, if it has run and nobody has been told."""
        return None if self.reported or not self.done else self._error

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("raised" if self._error is not None else "returned")
        return f"<HostCall {state}>"


_registry: dict[int, HostCall] = {}
_lock = threading.Lock()  # the trampoline runs on a driver thread
_tokens = itertools.count(1)  # never 0: ctypes hands a NULL userData to Python as None


def _trampoline(user_data: int | None) -> None:
    """What the driver calls: the token's HostCall, run. Never raises."""
    with contextlib.suppress(BaseException):
        with _lock:
            call = _registry.pop(user_data or 0, None)
        if call is not None:
            call.run()


#: The one C function pointer every host function goes through (module-level: it outlives every call).
_HOST_FN = CUhostFn(_trampoline)


def queue_host_call(stream_handle: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> HostCall:
    """Queue ``fn(*args)`` on the stream with this handle (its context current); returns its HostCall."""
    if not callable(fn):
        raise TypeError(f"launch_host_func takes a callable, not {type(fn).__name__} {fn!r}")
    call = HostCall(fn, args)
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


def report_host_calls(stream: Any, calls: list[HostCall]) -> None:
    """After ``stream`` synchronized: raise HostFunctionError for what its host functions raised unseen."""
    errors = [error for call in calls if (error := call.unreported_error) is not None]
    for call in calls:
        call.reported = call.reported or call.done
    if errors:
        first = errors[0]
        raise HostFunctionError(
            f"{len(errors)} host function(s) queued on {stream!r} raised; the first raised "
            f"{type(first).__name__}: {first} (HostCall.result() raises each one's)"
        ) from first


def pending_calls() -> int:
    """Host functions queued that have not run yet (a test's view of the registry)."""
    with _lock:
        return len(_registry)
