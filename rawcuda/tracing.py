"""Layer 1: see every driver call -- name, arguments, result and microseconds.

    with rawcuda.trace():
        buf = rawcuda.DeviceBuffer.from_array(a)
    # [rawcuda] cuMemAlloc_v2(dptr=&c_ulong, bytesize=4000)                    -> CUDA_SUCCESS    14.2 us
    # [rawcuda] cuCtxSynchronize()                                              -> CUDA_SUCCESS     3.1 us
    # ...

or run anything with ``RAWCUDA_TRACE=1`` in the environment. This is the fastest way to learn what a
high-level call really does, and to see which call failed.

How it stays free when off: the checked namespace ``cu`` and the launch path's hot slot normally hold
the bare ctypes functions. Turning tracing on swaps traced wrappers into them (for functions bound
later too); turning it off swaps the bare functions back. There is no ``if tracing:`` on any call path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from . import checked
from .ffi.results import c_name
from .ffi.table import Decl

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
    address = "*" in c_param or "CUdeviceptr" in c_param or _is_handle(c_param)
    if isinstance(value, ctypes.c_void_p | ctypes.c_uint64) and address:
        return short_handle(value.value)
    if isinstance(value, int) and address:
        return short_handle(value)
    return checked.format_value(value, address)


def _is_handle(c_param: str) -> bool:
    kind = c_param.split()[0] if c_param.split() else ""
    return kind in {"CUcontext", "CUmodule", "CUfunction", "CUstream", "CUevent", "CUgraph", "CUgraphNode",
                    "CUgraphExec", "CUlinkState", "CUkernel", "CUlibrary"}


def format_call(decl: Decl, args: Sequence[Any], code: int, ns: int) -> str:
    call = ", ".join(f"{name}={_format_arg(value, param)}"
                     for name, param, value in zip(decl.param_names, decl.params, args, strict=False))
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
        _depth += 1
        previous = _stream
        if file is not None:
            _stream = file
        if _depth == 1:
            checked.set_tracer(_print)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            _stream = previous
            if _depth == 0:
                checked.set_tracer(None)


def enabled() -> bool:
    return checked._tracer is not None


def _from_environment() -> None:
    # RAWCUDA_TRACE=1: trace the whole process, as if everything ran inside `with trace():`.
    global _depth
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        with _lock:
            _depth += 1
            checked.set_tracer(_print)


_from_environment()
