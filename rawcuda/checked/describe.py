"""Layer 1: building the exception for a failed call -- what was called, with what, and what the driver says.

When a row's result code is not 0, :func:`make_error` turns it into the exception the user reads: the
class for that code (:func:`~rawcuda.checked.errors.error_class`), the call's name and exported symbol, its
arguments in readable form (:func:`format_arguments`), the driver's own description of the code and, for
an allocation that ran out of memory, how much was asked for and how much is left.

"Readable" is decided by each parameter's C type, from the row's prototype: an address in hex, a count in
decimal, and a value of a C enum rawcuda mirrors by its name and number -- ``attrib=MULTIPROCESSOR_COUNT(16)``
where the driver sees ``16``, which nobody can read. The trace (:mod:`~rawcuda.checked.tracing`) shows
arguments the same way.

Everything here runs *while handling a failure*, so it must never fail itself: the driver functions it asks
(``cuGetErrorString``, ``cuMemGetInfo``) are taken with :func:`quiet`, which returns None instead of
raising, and are called without the error check -- a failure while describing a failure cannot recurse.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..ffi import attributes, constants, results
from ..ffi.constants import C_ENUMS
from ..ffi.cuda import TABLE
from ..ffi.decl import Decl, param_name
from ..ffi.library import LIBCUDA
from ..ffi.results import Result
from . import process
from .classify import error_class
from .errors import FORK_ADVICE, CudaError, NvrtcError, OutOfMemoryError

#: Called with every CudaError before it is raised (core/guards/contextregistry.py uses this to mark poisoned contexts).
error_observers: list[Callable[[CudaError], None]] = []

# Codes whose message should say *which* libcuda answered: the first thing to check for each.
_SHOW_LIBRARY = frozenset(
    {
        Result.ERROR_STUB_LIBRARY,
        Result.ERROR_NO_DEVICE,
        Result.ERROR_SYSTEM_DRIVER_MISMATCH,
        Result.ERROR_CALL_REQUIRES_NEWER_DRIVER,
        Result.ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
    }
)

#: Every module whose enums register themselves in C_ENUMS as they are defined (imported above, so that the
#: registry is complete before :func:`c_enum_of` reads it).
ENUM_MODULES = (constants, attributes, results)

_ARG_TEXT_LIMIT = 24  # bytes of a string argument shown in a message
_STRUCT_FIELDS_SHOWN = 12  # a struct passed by pointer is shown field by field up to this size (CUlaunchConfig: 10)
_KIB = 1024
_quiet_cache: dict[str, Any] = {}


def quiet(name: str) -> Any:
    """Driver row ``name`` bound *without* the error check, for use while handling an error: None (never an
    exception) when the driver is not loaded yet or does not export the row's symbol."""
    fn = _quiet_cache.get(name)
    if fn is None:
        driver = LIBCUDA.loaded()
        if driver is None:
            return None
        decl = TABLE[name]
        try:
            fn = driver.handle[decl.symbol]
        except AttributeError:
            return None
        fn.restype = decl.restype
        fn.argtypes = decl.argtypes
        _quiet_cache[name] = fn
    return fn


def driver_description(code: int) -> str:
    """cuGetErrorString for a code, or "" when the driver cannot say (stub, unknown code, no driver)."""
    fn = quiet("cuGetErrorString")
    text = ctypes.c_char_p()
    if fn is None or fn(code, ctypes.byref(text)) != 0 or not text.value:
        return ""
    return text.value.decode(errors="replace")


def device_memory_free() -> int | None:
    """Free device memory in the current context, asked unchecked (None if the driver cannot say)."""
    fn = quiet("cuMemGetInfo")
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
                    return int(line.split()[1]) * _KIB  # the file counts KiB
    except OSError:
        pass
    return None


def make_error(code: int, decl: Decl, args: Sequence[Any]) -> CudaError:
    """The exception for CUresult ``code`` returned by driver row ``decl`` called with ``args``."""
    cls = error_class(code)
    common: dict[str, Any] = {
        "call": decl.name,
        "symbol": decl.symbol,
        "arguments": format_arguments(decl, args),
        "description": driver_description(code),
    }
    details: list[str] = []
    driver = LIBCUDA.loaded()
    if code in _SHOW_LIBRARY and driver is not None:
        details.append(f"libcuda: {driver.path} (opened as {driver.requested!r})")
    if process.forked_from() is not None:
        details.append("note: " + FORK_ADVICE)
    if cls is OutOfMemoryError and decl.allocates is not None:
        requested = _int_value(args[decl.allocates]) if decl.allocates < len(args) else None
        available = device_memory_free() if decl.memory == "device" else host_memory_available()
        error: CudaError = OutOfMemoryError(
            code, requested=requested, available=available, memory=decl.memory, details=details, **common
        )
    else:
        error = cls(code, details=details, **common)
    for observer in tuple(error_observers):
        with contextlib.suppress(Exception):  # an observer must never hide the real error
            observer(error)
    return error


def make_nvrtc_error(code: int, decl: Decl, args: Sequence[Any], description: str) -> NvrtcError:
    """The exception for nvrtcResult ``code`` returned by NVRTC row ``decl`` called with ``args``."""
    return NvrtcError(code, call=decl.name, arguments=format_arguments(decl, args), description=description)


def _int_value(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    inner = getattr(value, "value", None)
    return inner if isinstance(inner, int) else None


def is_address(c_param: str) -> bool:
    """True when a C parameter holds an address (a pointer or a CUdeviceptr): shown in hex."""
    return "*" in c_param or "CUdeviceptr" in c_param


@functools.cache
def c_enum_of(c_param: str) -> type[enum.Enum] | None:
    """The Python enum that mirrors a parameter's C enum type: ``'CUdevice_attribute attrib'`` ->
    ``DeviceAttribute``. None for anything else: a pointer, an ``unsigned int``, a C enum rawcuda does not
    mirror. The table rows carry their C prototypes, so the parameter's own type decides, not its value."""
    c_type = c_param[: c_param.rfind(param_name(c_param))].strip()
    for cls, (mirrored, _prefix) in C_ENUMS.items():
        if mirrored == c_type:
            return cls
    return None


def format_enum(value: Any, cls: type[enum.Enum]) -> str | None:
    """``MULTIPROCESSOR_COUNT(16)`` for the number 16 and ``DeviceAttribute``; None for a number the enum
    does not name (then the number alone is shown: it may be newer than rawcuda's table)."""
    number = _int_value(value)
    if number is None:
        return None
    try:
        member = cls(number)
    except ValueError:
        return None
    return None if member.name is None else f"{member.name}({number})"


def format_arguments(decl: Decl, args: Sequence[Any]) -> str:
    """``dptr=&c_ulong, bytesize=1099511627776, attrib=MULTIPROCESSOR_COUNT(16)``: enough to recognise the
    call, never huge."""
    parts = []
    for name, c_param, value in zip(decl.param_names, decl.params, args, strict=False):
        # Addresses read best in hex; counts and flags in decimal; an enum by its name. The C type says which.
        parts.append(f"{name}={format_value(value, is_address(c_param), c_enum_of(c_param))}")
    return ", ".join(parts)


def format_value(value: Any, address: bool, enum_class: type[enum.Enum] | None = None) -> str:
    """One argument as text: ``NULL``, ``0x7f..``, ``&c_int`` (a byref), ``<c_void_p[3]>`` (an array),
    ``MULTIPROCESSOR_COUNT(16)`` (a number of the C enum ``enum_class`` mirrors) ..."""
    if value is None:
        return "NULL"
    named = None if enum_class is None else format_enum(value, enum_class)
    if named is not None:
        return named
    if isinstance(value, bytes):
        shown = value[:_ARG_TEXT_LIMIT]
        return repr(shown) + ("..." if len(value) > _ARG_TEXT_LIMIT else "")
    if isinstance(value, int):
        return hex(value) if address else str(value)
    if isinstance(value, ctypes.Array):
        return f"<{value._type_.__name__}[{len(value)}]>"  # ctypes' own name for an array's element type
    if type(value).__name__ == "CArgObject":  # what byref() returns; ._obj is what it points at (ctypes API)
        target = value._obj
        if isinstance(target, ctypes.Structure) and len(target._fields_) <= _STRUCT_FIELDS_SHOWN:
            # A small struct passed by pointer (cuLaunchKernelEx's CUlaunchConfig): its fields *are* the
            # call's arguments, so show them -- a trace reading ``config=&CUlaunchConfig`` teaches nothing.
            return "&" + format_struct(target)
        return "&" + type(target).__name__
    if isinstance(value, ctypes._SimpleCData):  # ctypes' public base of c_int, c_void_p ... (underscore and all)
        inner = value.value
        return hex(inner) if isinstance(inner, int) and address else repr(inner)
    return "<" + type(value).__name__ + ">"


def format_struct(value: ctypes.Structure) -> str:
    """``CUlaunchConfig(gridDimX=1, ..., hStream=0x5a.., attrs=NULL, numAttrs=0)``: each field by its C type."""
    parts = []
    for field in value._fields_:
        name, c_type = field[0], field[1]
        shown = getattr(value, name)
        is_pointer = issubclass(c_type, ctypes._Pointer | ctypes.c_void_p)
        if is_pointer and not shown:
            parts.append(f"{name}=NULL")
        elif is_pointer:
            address = shown if isinstance(shown, int) else ctypes.cast(shown, ctypes.c_void_p).value
            parts.append(f"{name}={hex(address or 0)}")
        else:
            parts.append(f"{name}={format_value(shown, False)}")
    return f"{type(value).__name__}({', '.join(parts)})"


__all__ = [
    "ENUM_MODULES",
    "c_enum_of",
    "device_memory_free",
    "driver_description",
    "error_observers",
    "format_arguments",
    "format_enum",
    "format_struct",
    "format_value",
    "host_memory_available",
    "is_address",
    "make_error",
    "make_nvrtc_error",
    "quiet",
]
