"""Layer 1: checked calls -- a declaration table bound to its library, each result code turned into an exception.

``cu.cuMemAlloc(byref(ptr), nbytes)`` calls the exported symbol ``cuMemAlloc_v2`` with the argument
types the table declares, and raises :class:`~rawcuda.checked.errors.OutOfMemoryError` (with ``requested``
and ``available``) instead of returning 2. Nothing else changes: arguments and out-parameters are exactly
those of the C function, so the C documentation applies word for word. ``nv`` does the same for NVRTC.

How it works, and why this way:

* **Bound once, lazily.** The first time you touch ``cu.cuX`` we open the library (if needed), take a
  *fresh* function pointer for the row's symbol, set ``restype``/``argtypes`` from the table, attach an
  ``errcheck``, and store it on the namespace -- so every later ``cu.cuX`` is a plain attribute read. A
  library too old to export a symbol fails only when that function is used, with MissingSymbolError.
* **Integers in range.** ctypes would mask ``2**64 + 4`` to 4 for a ``size_t``; each row with integer
  parameters is bound through :func:`~rawcuda.checked.intranges.range_checked`, which refuses it first.
* **ctypes ``errcheck``** runs after each call with the integer result; a non-zero result raises. This is
  the single place a result code becomes an exception, so every row behaves the same, and it is the one
  place tracing hooks in.
* **Hot paths** (``cuLaunchKernel``, ``cuGraphLaunch``) use a second binding of the same row without
  argtypes or errcheck (:func:`hot_slot`): the conversion of 11 arguments and the errcheck call cost more
  than half of the driver's own time, and those callers already hold every argument as a ctypes object.
* **Tracing** (:mod:`rawcuda.checked.tracing`) swaps traced wrappers into the namespace and the hot slots,
  and the bare functions back when it ends: no ``if tracing:`` on any call path, so it costs nothing when off.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..ffi import cuda, nvrtc
from ..ffi.decl import Decl
from ..ffi.library import LIBCUDA, LIBNVRTC, Library, LibraryNotFoundError, Opened
from . import process, tracing
from .describe import make_error, make_nvrtc_error
from .errors import DriverNotFoundError, ForkedProcessError, MissingSymbolError, NvrtcNotFoundError
from .intranges import range_checked

_bind_lock = tracing.bind_lock  # one lock for binding and for switching tracing (see tracing.py)


class Namespace:
    """The checked functions of one table: ``cu.cuInit(0)``. Attributes bind on first use.

    ``make_error(code, row, args)`` builds the exception for a failed call; ``not_found`` turns the
    loader's :class:`~rawcuda.ffi.library.LibraryNotFoundError` into the error a user reads; ``missing``
    says what to do when the library lacks a symbol. Only ``traced`` namespaces are seen by tracing.
    """

    def __init__(
        self,
        table: dict[str, Decl],
        library: Library,
        *,
        make_error: Callable[[int, Decl, Sequence[Any]], Exception],
        not_found: Callable[[LibraryNotFoundError], Exception],
        missing: Callable[[Decl, Opened], str],
        traced: bool,
        what: str,
        name: str,
    ) -> None:
        # No C function is called "table" or starts with "_", so these never shadow a row.
        self.table = table
        self._library = library
        self._make_error = make_error
        self._not_found = not_found
        self._missing = missing
        self._traced = traced
        self._what = what
        self._name = name  # the module-level name it is bound to (cu, nv): what pickling refers to

    def library(self) -> Opened:
        """The opened library (opened now if needed)."""
        try:
            return self._library.load()
        except LibraryNotFoundError as exc:
            raise self._not_found(exc) from None

    def bind(self, decl: Decl) -> Any:
        """A new ctypes function for one row, with restype, argtypes and (for result codes) the error check."""
        opened = self.library()
        try:
            # handle[symbol] (not getattr) builds a *new* function pointer: our argtypes/errcheck never leak
            # into other users of the same CDLL, e.g. the bare-ctypes benchmark.
            fn = opened.handle[decl.symbol]
        except AttributeError:
            raise MissingSymbolError(self._missing(decl, opened)) from None
        fn.restype = decl.restype
        fn.argtypes = decl.argtypes
        if decl.checked:
            make = self._make_error

            def errcheck(result: int, func: Any, args: tuple[Any, ...]) -> int:
                if result:  # success is 0 in both CUresult and nvrtcResult; anything else is an error code
                    raise make(result, decl, args)
                return result

            fn.errcheck = errcheck
        return range_checked(fn, decl)  # ctypes masks integers silently: refuse one out of range instead

    def bound(self) -> dict[str, Any]:
        """The rows bound so far: name -> the function now in the namespace."""
        # list() copies the items in one step: code that adds or deletes rows meanwhile (without the lock)
        # cannot make this iteration fail half-way.
        return {name: fn for name, fn in list(vars(self).items()) if name in self.table}

    def reset(self) -> None:
        """Forget every binding and the opened library (for tests that point the library elsewhere)."""
        with _bind_lock:
            for name in self.bound():
                delattr(self, name)
            self._library.reset()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "table":  # not a row (and, in a half-built copy, no table yet)
            raise AttributeError(name)
        decl = self.table.get(name)
        if decl is None:
            raise AttributeError(
                f"{name} is not in rawcuda's {self._what}; add a row for it (the header "
                "check will verify it against the C header)"
            )
        with _bind_lock:
            fn = vars(self).get(name)
            if fn is None:
                fn = self.bind(decl)
                if self._traced:
                    fn = tracing.wrapped(fn, decl)  # the function itself while tracing is off
                setattr(self, name, fn)
        return fn

    def __dir__(self) -> list[str]:
        return sorted(self.table)

    def __reduce__(self) -> str:
        # One namespace per table per process: a copy or an unpickled one is the same module-level object.
        return self._name


def _driver_missing(decl: Decl, opened: Opened) -> str:
    return (
        f"{decl.name}: the driver library {opened.path} does not export {decl.symbol}. rawcuda's table "
        f"follows cuda.h of CUDA 13; this driver is older (see rawcuda.checked.driver_version()). "
        "Update the NVIDIA driver to use this function."
    )


def _nvrtc_missing(decl: Decl, opened: Opened) -> str:
    return (
        f"{decl.name}: {opened.path} does not export {decl.symbol}; this libnvrtc is older than the table "
        "(rawcuda.extras.nvrtc.version() says which it is)"
    )


def nvrtc_error_string(code: int) -> str:
    """nvrtcGetErrorString (which returns the C name, e.g. "NVRTC_ERROR_COMPILATION"); never raises."""
    try:
        text = nv.nvrtcGetErrorString(code)
    except Exception:  # describing a failure must not fail: no library, a missing symbol ...
        return ""
    return text.decode(errors="replace") if text else ""


def _nvrtc_error(code: int, decl: Decl, args: Sequence[Any]) -> Exception:
    return make_nvrtc_error(code, decl, args, nvrtc_error_string(code))


#: The checked driver: ``from rawcuda.checked import cu``.
cu = Namespace(
    cuda.TABLE,
    LIBCUDA,
    make_error=make_error,
    not_found=DriverNotFoundError.from_search,
    missing=_driver_missing,
    traced=True,
    what="declaration table (rawcuda/ffi/cuda/)",
    name="cu",
)
tracing.register_namespace(cu)
#: The checked NVRTC functions: ``from rawcuda.checked import nv``.
nv = Namespace(
    nvrtc.TABLE,
    LIBNVRTC,
    make_error=_nvrtc_error,
    not_found=NvrtcNotFoundError.from_search,
    missing=_nvrtc_missing,
    traced=False,
    what="NVRTC table (rawcuda/ffi/nvrtc.py)",
    name="nv",
)


# --- hot paths ----------------------------------------------------------------------------------------------
def unchecked(name: str) -> Any:
    """A second binding of driver row ``name`` for a hot path: no argtypes, no errcheck.

    A hot path that already holds every argument as a ctypes object of the declared type can skip the
    conversion; it must then check the result itself, with :func:`raise_for`. The symbol is still the
    table's, so the header check still covers it.
    """
    decl = cuda.TABLE[name]
    fn = cu.library().handle[decl.symbol]
    fn.restype = decl.restype
    return fn


def raise_for(code: int, name: str, args: Sequence[Any]) -> None:
    """Raise the exception for ``code`` returned by driver row ``name`` (the partner of :func:`unchecked`)."""
    raise make_error(code, cuda.TABLE[name], args)


class HotSlot:
    """Where a hot path finds its function: ``slot.call(...)``. Tracing replaces ``call`` (and puts it back).

    The hot path keeps the slot, not the function, so that tracing can swap a traced wrapper in without the
    hot path knowing -- and without touching the driver at import time: the first call binds the real
    function (:func:`unchecked`) and replaces itself.
    """

    __slots__ = ("call", "decl", "real")

    def __init__(self, name: str) -> None:
        self.decl = cuda.TABLE[name]
        self.real: Any = None  # the bare binding, once made
        self.call: Callable[..., int] = self._bind_on_first_call

    def _bind_on_first_call(self, *args: Any) -> int:
        with _bind_lock:
            if self.real is None:
                self.real = unchecked(self.decl.name)
                self.call = tracing.wrapped(self.real, self.decl, checked=False)
        return int(self.call(*args))


_hot_slots: dict[str, HotSlot] = {}


def hot_slot(name: str) -> HotSlot:
    """The :class:`HotSlot` of driver row ``name`` (one per row, shared by every hot path that calls it)."""
    with _bind_lock:
        slot = _hot_slots.get(name)
        if slot is None:
            slot = _hot_slots[name] = HotSlot(name)
            tracing.register_slot(slot)
        return slot


# --- start-up -------------------------------------------------------------------------------------------------
_init_lock = threading.Lock()


def init() -> None:
    """``cuInit(0)`` once per process (it must precede every other call; repeating it is harmless)."""
    if process.initialized():
        return
    if process.forked_from() is not None:
        raise ForkedProcessError("rawcuda cannot initialize CUDA in this process")
    with _init_lock:
        if not process.initialized():
            cu.cuInit(0)
            process.mark_initialized()


#: CUDA versions are integers, major * 1000 + minor * 10: 13000 is 13.0, 3020 is 3.2.
VERSION_MAJOR = 1000
VERSION_MINOR = 10


def decode_version(cuda_version: int) -> tuple[int, int]:
    """``12080`` -> ``(12, 8)``."""
    major, rest = divmod(cuda_version, VERSION_MAJOR)
    return major, rest // VERSION_MINOR


def driver_version() -> tuple[int, int]:
    """The newest CUDA version the installed driver supports, e.g. ``(13, 0)``."""
    version = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(version))
    return decode_version(version.value)


__all__ = [
    "VERSION_MAJOR",
    "VERSION_MINOR",
    "HotSlot",
    "Namespace",
    "cu",
    "decode_version",
    "driver_version",
    "hot_slot",
    "init",
    "nv",
    "nvrtc_error_string",
    "raise_for",
    "unchecked",
]
