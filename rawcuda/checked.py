"""Layer 1: checked calls -- the declaration table bound to libcuda, each CUresult turned into an exception.

``cu.cuMemAlloc(byref(ptr), nbytes)`` calls the exported symbol ``cuMemAlloc_v2`` with the argument
types the table declares, and raises :class:`~rawcuda.errors.OutOfMemoryError` (with ``requested`` and
``available``) instead of returning 2. Nothing else changes: arguments and out-parameters are exactly
those of the C function, so the C documentation applies word for word.

How it works, and why this way:

* **Bound once, lazily.** The first time you touch ``cu.cuX`` we open libcuda (if needed), take a
  *fresh* function pointer for the row's symbol, set ``restype``/``argtypes`` from the table, attach an
  ``errcheck``, and store it on ``cu`` -- so every later ``cu.cuX`` is a plain attribute read. A driver
  too old to export a symbol fails only when that function is used, with :class:`MissingSymbolError`.
* **ctypes ``errcheck``** runs after each call with the integer result; a non-zero result raises. This is
  the single place a CUresult becomes an exception, so every row behaves the same, and it is the one
  place tracing hooks in.
* **Error descriptions come from the driver** (``cuGetErrorName``/``cuGetErrorString``, called
  *unchecked* so a failure while describing a failure cannot recurse), with our table as the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import errors
from .errors import FORK_ADVICE, CudaError, ForkedProcessError, MissingSymbolError, OutOfMemoryError, error_class
from .ffi import library
from .ffi.results import Result
from .ffi.table import TABLE, Decl

#: Called with every CudaError before it is raised (layer 2 uses this to mark poisoned contexts).
error_observers: list[Callable[[CudaError], None]] = []

# Codes whose message should say *which* libcuda answered: the first thing to check for each.
_SHOW_LIBRARY = frozenset({
    Result.ERROR_STUB_LIBRARY,
    Result.ERROR_NO_DEVICE,
    Result.ERROR_SYSTEM_DRIVER_MISMATCH,
    Result.ERROR_CALL_REQUIRES_NEWER_DRIVER,
    Result.ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
})


def bind(decl: Decl, driver: library.Driver | None = None) -> Any:
    """A ctypes function for one table row, with restype, argtypes and the error check set."""
    driver = driver or library.load()
    try:
        # handle[symbol] (not getattr) builds a *new* function pointer: our argtypes/errcheck never leak
        # into other users of the same CDLL, e.g. the bare-ctypes benchmark.
        fn = driver.handle[decl.symbol]
    except AttributeError:
        raise MissingSymbolError(
            f"{decl.name}: the driver library {driver.path} does not export {decl.symbol}. rawcuda's table "
            f"follows cuda.h of CUDA 13; this driver is older (see rawcuda.checked.driver_version()). "
            "Update the NVIDIA driver to use this function."
        ) from None
    fn.restype = decl.restype
    fn.argtypes = decl.argtypes
    fn.errcheck = _errcheck_for(decl)
    return fn


def _errcheck_for(decl: Decl) -> Callable[[int, Any, tuple[Any, ...]], int]:
    def errcheck(result: int, func: Any, args: tuple[Any, ...]) -> int:
        if result:  # CUDA_SUCCESS is 0; anything else is an error code
            raise make_error(result, decl, args)
        return result

    return errcheck


def unchecked(name: str) -> Any:
    """A second binding of table row ``name`` for a hot path: no argtypes, no errcheck.

    Why? ctypes' per-argument conversion and the errcheck call cost about 3 us per cuLaunchKernel -- more
    than half of the driver's own cost. A hot path that already holds every argument as a ctypes object
    of the declared type can skip the conversion; it must then check the result itself, with
    :func:`raise_for`. The symbol is still the table's, so the header check still covers it.
    """
    decl = TABLE[name]
    fn = library.load().handle[decl.symbol]
    fn.restype = decl.restype
    return fn


def raise_for(code: int, name: str, args: Sequence[Any]) -> None:
    """Raise the exception for ``code`` returned by table row ``name`` (the partner of :func:`unchecked`)."""
    raise make_error(code, TABLE[name], args)


#: Hot-path slots: name -> [callable]. A hot path calls ``slot[0](...)``; tracing swaps what is in the slot.
_hot_slots: dict[str, list[Any]] = {}


def hot_slot(name: str) -> list[Any]:
    """A one-element list holding the :func:`unchecked` binding of ``name`` (bound on its first call).

    Why a list? The hot path keeps a reference to the slot, not to the function, so that tracing can put a
    traced wrapper in (and take it out again) without the hot path knowing -- and without touching the
    driver at import time: the first call binds the real function and replaces itself.
    """
    slot = _hot_slots.get(name)
    if slot is None:
        def bind_on_first_call(*args: Any) -> int:
            real = unchecked(name)
            slot[0] = _wrap_hot(real, name) if _tracer is not None else real
            return int(slot[0](*args))

        slot = _hot_slots.setdefault(name, [bind_on_first_call])
    return slot


# --- tracing: the one place every driver call passes through ----------------------------------------------
#: The active tracer (set by rawcuda.trace), or None. When None, `cu.X` and hot slots hold the bare
#: ctypes functions: tracing costs nothing while it is off.
_tracer: Any = None


def set_tracer(tracer: Any) -> None:
    """Install (or with None remove) a tracer: a callable ``tracer(name, symbol, args, result, ns)``."""
    global _tracer
    with _bind_lock:
        _tracer = tracer
        for name, fn in list(cu.__dict__.items()):
            real = getattr(fn, "__wrapped__", fn)
            setattr(cu, name, real if tracer is None else _wrap_checked(real, TABLE[name]))
        for name, slot in _hot_slots.items():
            real = getattr(slot[0], "__wrapped__", slot[0])
            if getattr(real, "__name__", "") != "bind_on_first_call":
                slot[0] = real if tracer is None else _wrap_hot(real, name)


def _wrap_checked(fn: Any, decl: Decl) -> Callable[..., Any]:
    def traced(*args: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            result = fn(*args)
        except CudaError as exc:
            _report(decl, args, exc.code, time.perf_counter_ns() - start)
            raise
        _report(decl, args, 0, time.perf_counter_ns() - start)
        return result

    traced.__wrapped__ = fn  # type: ignore[attr-defined]
    return traced


def _wrap_hot(fn: Any, name: str) -> Callable[..., Any]:
    decl = TABLE[name]

    def traced(*args: Any) -> Any:
        start = time.perf_counter_ns()
        rc = fn(*args)
        _report(decl, args, rc, time.perf_counter_ns() - start)
        return rc

    traced.__wrapped__ = fn  # type: ignore[attr-defined]
    return traced


def _report(decl: Decl, args: Sequence[Any], code: int, ns: int) -> None:
    tracer = _tracer
    if tracer is not None:
        with contextlib.suppress(Exception):  # tracing must never change what the call does
            tracer(decl, args, code, ns)


class _Checked:
    """The namespace of checked driver functions: ``cu.cuInit(0)``. Attributes bind on first use."""

    def __getattr__(self, name: str) -> Any:
        decl = TABLE.get(name)
        if decl is None:
            raise AttributeError(
                f"{name} is not in rawcuda's declaration table (rawcuda/ffi/table/); add a row for it "
                "(the header check will verify it against cuda.h)"
            )
        with _bind_lock:
            fn = self.__dict__.get(name)
            if fn is None:
                fn = bind(decl)
                if _tracer is not None:
                    fn = _wrap_checked(fn, decl)
                setattr(self, name, fn)
        return fn

    def __dir__(self) -> list[str]:
        return sorted(TABLE)


_bind_lock = threading.Lock()

#: The checked driver: ``from rawcuda.checked import cu``.
cu = _Checked()


# --- building the exception ------------------------------------------------------------------------
_raw_cache: dict[str, Any] = {}


def _raw(symbol: str, argtypes: Sequence[Any]) -> Any:
    """An *unchecked* function pointer, for use while building an error (must never raise)."""
    fn = _raw_cache.get(symbol)
    if fn is None:
        driver = library.loaded()
        if driver is None:
            return None
        try:
            fn = driver.handle[symbol]
        except AttributeError:
            return None
        fn.restype = ctypes.c_int
        fn.argtypes = list(argtypes)
        _raw_cache[symbol] = fn
    return fn


def driver_description(code: int) -> str:
    """cuGetErrorString for a code, or "" when the driver cannot say (stub, unknown code, no driver)."""
    fn = _raw("cuGetErrorString", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])
    text = ctypes.c_char_p()
    if fn is None or fn(code, ctypes.byref(text)) != 0 or not text.value:
        return ""
    return text.value.decode(errors="replace")


def device_memory_free() -> int | None:
    """Free device memory in the current context, asked unchecked (None if the driver cannot say)."""
    fn = _raw("cuMemGetInfo_v2", [ctypes.POINTER(ctypes.c_size_t)] * 2)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if fn is None or fn(ctypes.byref(free), ctypes.byref(total)) != 0:
        return None
    return free.value


def host_memory_available() -> int | None:
    """MemAvailable from /proc/meminfo: what a pinned host allocation could still get."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts KiB
    except OSError:
        pass
    return None


def make_error(code: int, decl: Decl, args: Sequence[Any]) -> CudaError:
    """The exception for ``code`` returned by ``decl`` called with ``args``."""
    cls = error_class(code)
    common: dict[str, Any] = {
        "call": decl.name,
        "symbol": decl.symbol,
        "arguments": format_arguments(decl, args),
        "description": driver_description(code),
    }
    details: list[str] = []
    driver = library.loaded()
    if code in _SHOW_LIBRARY and driver is not None:
        details.append(f"libcuda: {driver.path} (opened as {driver.requested!r})")
    if forked_from is not None:
        details.append("note: " + FORK_ADVICE)
    if cls is OutOfMemoryError and decl.allocates is not None:
        requested = _int_value(args[decl.allocates]) if decl.allocates < len(args) else None
        available = device_memory_free() if decl.memory == "device" else host_memory_available()
        error: CudaError = OutOfMemoryError(code, requested=requested, available=available,
                                            memory=decl.memory, details=details, **common)
    else:
        error = cls(code, details=details, **common)
    for observer in tuple(error_observers):
        with contextlib.suppress(Exception):  # an observer must never hide the real error
            observer(error)
    return error


def _int_value(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    inner = getattr(value, "value", None)
    return inner if isinstance(inner, int) else None


_ARG_TEXT_LIMIT = 24


def format_arguments(decl: Decl, args: Sequence[Any]) -> str:
    """``dptr=&c_ulong, bytesize=1099511627776``: enough to recognise the call, never huge."""
    parts = []
    for name, c_param, value in zip(decl.param_names, decl.params, args, strict=False):
        # Addresses read best in hex; counts and flags in decimal. The C type says which is which.
        address = "*" in c_param or "CUdeviceptr" in c_param
        parts.append(f"{name}={format_value(value, address)}")
    return ", ".join(parts)


def format_value(value: Any, address: bool) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        shown = value[:_ARG_TEXT_LIMIT]
        return repr(shown) + ("..." if len(value) > _ARG_TEXT_LIMIT else "")
    if isinstance(value, int):
        return hex(value) if address else str(value)
    if isinstance(value, ctypes.Array):
        return f"<{value._type_.__name__}[{len(value)}]>"
    if type(value).__name__ == "CArgObject":  # what byref() returns
        return "&" + type(value._obj).__name__
    if isinstance(value, ctypes._SimpleCData):
        inner = value.value
        return hex(inner) if isinstance(inner, int) and address else repr(inner)
    return "<" + type(value).__name__ + ">"


# --- start-up, and fork ------------------------------------------------------------------------------
_init_lock = threading.Lock()
_initialized_pid: int | None = None
#: In a child forked after CUDA was initialized: the parent's pid. CUDA is unusable in such a child.
forked_from: int | None = None


def init() -> None:
    """``cuInit(0)`` once per process (it must precede every other call; repeating it is harmless)."""
    global _initialized_pid
    if _initialized_pid == os.getpid():
        return
    if forked_from is not None:
        raise ForkedProcessError("rawcuda cannot initialize CUDA in this process")
    with _init_lock:
        if _initialized_pid != os.getpid():
            cu.cuInit(0)
            _initialized_pid = os.getpid()


def _after_fork_in_child() -> None:
    # Runs in every forked child. fork() copies the parent's memory but not its CUDA state: the driver
    # refuses (or, worse, misbehaves on) every call. Remember that, so rawcuda can say why -- and how to fix it.
    global forked_from
    if _initialized_pid is not None:
        forked_from = _initialized_pid


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def driver_version() -> tuple[int, int]:
    """The newest CUDA version the installed driver supports, e.g. ``(13, 0)``."""
    version = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(version))
    major, minor_x10 = divmod(version.value, 1000)
    return major, minor_x10 // 10


__all__ = ["bind", "cu", "driver_version", "error_observers", "errors", "hot_slot", "init", "make_error", "raise_for",
           "set_tracer", "unchecked"]


if os.environ.get("RAWCUDA_TRACE", "") not in ("", "0"):
    from . import tracing  # noqa: F401  (RAWCUDA_TRACE=1: tracing.py installs the tracer for the process)
