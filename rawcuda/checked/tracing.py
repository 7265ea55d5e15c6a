"""Layer 1: see every driver call -- name, arguments, result and microseconds.

    with rawcuda.trace():
        buf = rawcuda.DeviceBuffer.from_array(a)
    # [rawcuda] cuMemAlloc_v2(dptr=&c_ulong, bytesize=4000)                    -> CUDA_SUCCESS    14.2 us
    # [rawcuda] cuCtxSynchronize()                                              -> CUDA_SUCCESS     3.1 us
    # ...

or run anything with ``RAWCUDA_TRACE=1`` in the environment. This is the fastest way to learn what a
high-level call really does, and to see which call failed.

How it stays free when off: the checked namespace ``cu`` and the launch path's hot slots normally hold
the bare ctypes functions. Turning tracing on swaps traced wrappers into them (and into functions bound
later); turning it off swaps the bare functions back. There is no ``if tracing:`` on any call path.
binding.py registers each traced namespace and hot slot here as it makes them, so this file knows what
to swap without importing binding.py (which imports it).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TextIO

from ..ffi.decl import Decl
from ..ffi.results import c_name
from .describe import c_enum_of, format_value, is_address
from .errors import CudaError
from .process import env_flag

#: A tracer is called after every traced call with (row, arguments, result code, nanoseconds).
Tracer = Callable[[Decl, Sequence[Any], int, int], None]


class TracedNamespace(Protocol):
    """What tracing needs of a checked namespace (binding.Namespace)."""

    table: dict[str, Decl]

    def bound(self) -> dict[str, Any]: ...


class TracedSlot(Protocol):
    """What tracing needs of a hot-path slot (binding.HotSlot)."""

    decl: Decl
    real: Any
    call: Callable[..., int]


class _Switch:
    tracer: Tracer | None = None  # the active tracer, or None
    namespaces: list[TracedNamespace] = []  # noqa: RUF012  (one shared list: what set_tracer swaps)
    slots: list[TracedSlot] = []  # noqa: RUF012


_switch = _Switch()
#: Held while a row is bound (binding.py) and while the tracer changes: a row bound during a switch must
#: come out traced exactly when tracing is on, and a switch must not iterate a namespace that is growing.
bind_lock = threading.RLock()


def register_namespace(namespace: TracedNamespace) -> None:
    """Let tracing swap the functions of ``namespace`` (done once, by binding.py, for ``cu``)."""
    with bind_lock:
        _switch.namespaces.append(namespace)


def register_slot(slot: TracedSlot) -> None:
    """Let tracing swap what a hot-path slot calls."""
    with bind_lock:
        _switch.slots.append(slot)


def tracer() -> Tracer | None:
    """The active tracer, or None when tracing is off."""
    return _switch.tracer


def wrapped(fn: Any, decl: Decl, *, checked: bool = True) -> Any:
    """``fn`` itself while tracing is off, else a traced wrapper of it (for a function bound just now)."""
    if _switch.tracer is None:
        return fn
    return _wrap_checked(fn, decl) if checked else _wrap_hot(fn, decl)


def set_tracer(new: Tracer | None) -> None:
    """Install (or with None remove) a tracer for every registered namespace and hot slot."""
    with bind_lock:
        _switch.tracer = new
        for namespace in _switch.namespaces:
            for name, fn in namespace.bound().items():
                real = getattr(fn, "__wrapped__", fn)
                setattr(namespace, name, real if new is None else _wrap_checked(real, namespace.table[name]))
        for slot in _switch.slots:
            if slot.real is not None:
                slot.call = slot.real if new is None else _wrap_hot(slot.real, slot.decl)


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


def _wrap_hot(fn: Any, decl: Decl) -> Callable[..., Any]:
    def traced(*args: Any) -> Any:
        start = time.perf_counter_ns()
        rc = fn(*args)
        _report(decl, args, rc, time.perf_counter_ns() - start)
        return rc

    traced.__wrapped__ = fn  # type: ignore[attr-defined]
    return traced


def _report(decl: Decl, args: Sequence[Any], code: int, ns: int) -> None:
    active = _switch.tracer
    if active is not None:
        with contextlib.suppress(Exception):  # tracing must never change what the call does
            active(decl, args, code, ns)


# --- printing -----------------------------------------------------------------------------------------------

ENV_VAR = "RAWCUDA_TRACE"
PREFIX = "[rawcuda]"
_HANDLE_DIGITS = 6  # a shortened handle keeps this many trailing hex digits: enough to tell them apart
_CALL_WIDTH = 72  # the call text is padded to this width so results line up
_NS_PER_US = 1000

_lock = threading.Lock()
_depth = 0
_stream: TextIO | None = None


def short_handle(value: int | None) -> str:
    """``0x7f3a2c001200`` -> ``0x…001200``: the part that differs between handles of one process."""
    if not value:
        return "NULL"
    text = f"{value:x}"
    return "0x" + text if len(text) <= _HANDLE_DIGITS else "0x…" + text[-_HANDLE_DIGITS:]


def _format_arg(value: Any, c_param: str) -> str:
    address = is_address(c_param) or _is_handle(c_param)
    if isinstance(value, ctypes.c_void_p | ctypes.c_uint64) and address:
        return short_handle(value.value)
    if isinstance(value, int) and address:
        return short_handle(value)
    return format_value(value, address, c_enum_of(c_param))  # an enum by name: attrib=MULTIPROCESSOR_COUNT(16)


def _is_handle(c_param: str) -> bool:
    kind = c_param.split()[0] if c_param.split() else ""
    return kind in {
        "CUcontext",
        "CUmodule",
        "CUfunction",
        "CUstream",
        "CUevent",
        "CUgraph",
        "CUgraphNode",
        "CUgraphExec",
        "CUlinkState",
        "CUkernel",
        "CUlibrary",
    }


def format_call(decl: Decl, args: Sequence[Any], code: int, ns: int) -> str:
    call = ", ".join(
        f"{name}={_format_arg(value, param)}"
        for name, param, value in zip(decl.param_names, decl.params, args, strict=False)
    )
    result = "CUDA_SUCCESS" if code == 0 else f"{c_name(code)} ({code})"
    return f"{PREFIX} {decl.symbol}({call})".ljust(_CALL_WIDTH) + f" -> {result:<14} {ns / _NS_PER_US:8.1f} us"


def _print(decl: Decl, args: Sequence[Any], code: int, ns: int) -> None:
    out = _stream or sys.stderr
    print(format_call(decl, args, code, ns), file=out, flush=True)


@contextlib.contextmanager
def trace(file: TextIO | None = None) -> Iterator[None]:
    """Print every driver call made inside the block (to ``file``, default stderr). Blocks may nest."""
    global _depth, _stream
    with _lock:
        previous = _stream
        if file is not None:
            _stream = file
        if _depth == 0:
            try:
                set_tracer(_print)
            except BaseException:  # entering failed: leave nothing behind (no __exit__ will run to undo it)
                _stream = previous
                set_tracer(None)
                raise
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            _stream = previous
            if _depth == 0:
                set_tracer(None)


def enabled() -> bool:
    """True while any trace is active (a ``with trace():`` block, or ``RAWCUDA_TRACE=1``)."""
    return tracer() is not None


def from_environment() -> None:
    """``RAWCUDA_TRACE=1``: trace the whole process, as if everything ran inside ``with trace():``."""
    global _depth
    if env_flag(ENV_VAR):
        with _lock:
            _depth += 1
            set_tracer(_print)


__all__ = [
    "ENV_VAR",
    "PREFIX",
    "Tracer",
    "enabled",
    "format_call",
    "from_environment",
    "register_namespace",
    "register_slot",
    "set_tracer",
    "short_handle",
    "trace",
    "tracer",
    "wrapped",
]


from_environment()  # RAWCUDA_TRACE=1: from the first call on (this file is imported with the namespaces)
