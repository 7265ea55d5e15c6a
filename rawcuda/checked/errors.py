"""Layer 1: every way rawcuda can fail, as Python exceptions that say what went wrong and how to fix it.

The driver answers every call with a CUresult number. The seed article wraps them in a Rust enum with
one special case, ``OutOfMemory { requested, available }``, because OOM is the error you *handle*
rather than report. rawcuda keeps that idea and goes further:

* :class:`CudaError` carries the code, the cuda.h name, the driver's own description and *the call
  that failed* (name, exported symbol, arguments). Codes unknown to our table are kept, not lost.
* Subclasses group codes by what you would do about them (:class:`OutOfMemoryError`,
  :class:`ModuleLoadError`, :class:`KernelFaultError` ...), and also derive from the matching built-in
  (``MemoryError``, ``ValueError``, ``LookupError``) so generic handlers work.
* The codes people actually hit get a curated ``hint`` (:mod:`rawcuda.checked.hints`): cause and fix.
* NVRTC's failures (:class:`NvrtcError`) are a family of their own: NVRTC's result codes overlap
  CUresult's numbers but not their meanings. This file only defines classes; it calls nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..ffi.results import STICKY, NvrtcResult, Result, c_name, result_name
from .hints import HINTS, NVRTC_HINTS, STICKY_HINT

if TYPE_CHECKING:
    from ..ffi.library import LibraryNotFoundError


class RawCudaError(Exception):
    """Base of every exception rawcuda raises on purpose."""


class LibraryMissingError(RawCudaError, OSError):
    """A library rawcuda needs could not be opened. Lists every candidate tried and why it failed.

    The loader (layer 0) only reports the search; the subclasses say which library it was and how to fix it.
    """

    head = "could not load a library (tried {names})"
    real_file = "the library"
    install = "set {env_var} to its full path"

    def __init__(self, tried: Sequence[tuple[str, str]], env_var: str, env_set: bool) -> None:
        self.tried = list(tried)
        fix = (
            f"{env_var} is set, so only that path was tried; point it at a real {self.real_file}, or unset it to "
            "search the usual places"
            if env_set
            else self.install.format(env_var=env_var)
        )
        head = self.head.format(names=", ".join(name for name, _ in self.tried))
        super().__init__("\n".join([head, *describe_tried(self.tried), "fix: " + fix]))

    def __reduce__(self) -> tuple[object, ...]:
        # The constructor takes the search, not the message: rebuild from the fields (worker processes).
        return _rebuild, (type(self), dict(self.__dict__), self.args)

    @classmethod
    def from_search(cls, search: LibraryNotFoundError) -> LibraryMissingError:
        """The error to raise for the loader's report of a failed search (every candidate, and why)."""
        return cls(search.tried, env_var=search.library.env_var, env_set=search.env_set)


class DriverNotFoundError(LibraryMissingError):
    """No libcuda could be opened."""

    head = "could not load the NVIDIA driver library libcuda (tried {names})"
    real_file = "libcuda.so.1"
    install = "install the NVIDIA driver (nvidia-smi should work), or set {env_var} to the full path of libcuda.so.1"


class NvrtcNotFoundError(LibraryMissingError):
    """No libnvrtc could be opened."""

    head = "could not load NVRTC, the runtime CUDA C++ compiler (libnvrtc); tried:"
    real_file = "libnvrtc.so.13 (or .12)"
    install = (
        "install NVRTC (it ships with the CUDA toolkit, as its own package in most distributions), set "
        "CUDA_HOME to the toolkit, or set {env_var} to the full path of libnvrtc.so.13"
    )


def describe_tried(tried: list[tuple[str, str]]) -> list[str]:
    """One line per candidate, except that files of one directory that failed for the same reason (all
    missing, say) share a line: ``/usr/local/cuda/lib64/{libnvrtc.so.13, libnvrtc.so}: no such file``."""
    rows: list[tuple[str, str, list[str]]] = []  # (name or folder, why, file names grouped under a folder)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, why in tried:
        folder, _, base = name.rpartition("/")
        if folder:
            key = (folder, why)
            if key not in groups:
                groups[key] = []
                rows.append((folder, why, groups[key]))
            groups[key].append(base)
        else:
            rows.append((name, why, []))
    lines = []
    for name, why, bases in rows:
        if not bases:
            lines.append(f"  {name}: {why}")
        else:
            files = bases[0] if len(bases) == 1 else "{" + ", ".join(bases) + "}"
            lines.append(f"  {name}/{files}: {why}")
    return lines


class MissingSymbolError(RawCudaError, AttributeError):
    """libcuda does not export a symbol the table declares: the driver is older than the table."""


class ClosedError(RawCudaError, ValueError):
    """An object was used after close()."""


class IntegerRangeError(RawCudaError, OverflowError, ValueError):
    """An integer outside its C parameter's range: ctypes would have masked it (rawcuda.checked.intranges)."""


FORK_ADVICE = (
    "this process was forked from one that had already initialized CUDA, and CUDA state (contexts, memory, "
    "streams) does not survive fork(): start worker processes with the 'spawn' (or 'forkserver') method -- "
    "multiprocessing.set_start_method('spawn'), or multiprocessing.get_context('spawn') -- so that each "
    "worker initializes CUDA itself"
)


class ForkedProcessError(RawCudaError, RuntimeError):
    """CUDA used in a child forked after the parent initialized CUDA."""

    def __init__(self, what: str = "CUDA cannot be used here") -> None:
        super().__init__(f"{what}: {FORK_ADVICE}")


class CudaError(RawCudaError):
    """A driver call returned a CUresult other than CUDA_SUCCESS."""

    def __init__(
        self,
        code: int,
        *,
        call: str = "",
        symbol: str = "",
        arguments: str = "",
        description: str = "",
        details: Sequence[str] = (),
    ) -> None:
        self.code = int(code)
        self.name = c_name(code)
        self.description = description or _fallback_description(self.name)
        self.call = call
        self.symbol = symbol
        self.arguments = arguments
        self.details = list(details)
        self.hint = HINTS.get(self.code, "")
        super().__init__(self._message())

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only constructors defeat the default pickling of exceptions; rebuild from the fields so
        # an error raised in a worker process (multiprocessing, concurrent.futures) arrives intact.
        return _rebuild, (type(self), dict(self.__dict__), self.args)

    def with_details(self, details: Sequence[str]) -> CudaError:
        """A new error of the same class and fields, with more lines of explanation."""
        return type(self)(
            self.code,
            call=self.call,
            symbol=self.symbol,
            arguments=self.arguments,
            description=self.description,
            details=[*self.details, *details],
        )

    def add_details(self, *lines: str) -> None:
        """Add lines of explanation to *this* error (so that a re-raise keeps its traceback)."""
        self.details.extend(line for line in lines if line not in self.details)
        self.args = (self._message(),)

    @property
    def result(self) -> Result | None:
        """The code as a :class:`Result` member, or None if our table does not know it."""
        try:
            return Result(self.code)
        except ValueError:
            return None

    def _message(self) -> str:
        if self.call:
            where = self.call + (f" [{self.symbol}]" if self.symbol and self.symbol != self.call else "")
            head = f"{where}({self.arguments}) failed: {self.name} ({self.code}): {self.description}"
        else:  # raised by rawcuda itself, not returned by a call (e.g. a poisoned context)
            head = f"{self.name} ({self.code}): {self.description}"
        lines = [head, *("  " + d for d in self.details)]
        if self.hint:
            lines.append("  hint: " + self.hint)
        if self.code in STICKY:
            lines.append("  note: " + STICKY_HINT)
        return "\n".join(lines)


def _rebuild(cls: type[RawCudaError], state: dict[str, object], args: tuple[object, ...]) -> RawCudaError:
    # cls.__new__ would be MemoryError.__new__ (OutOfMemoryError), which refuses; an OSError needs its own.
    error = (OSError.__new__ if issubclass(cls, OSError) else Exception.__new__)(cls, *args)
    error.__dict__.update(state)
    error.args = args
    return error


def _fallback_description(name: str) -> str:
    # Used when the driver cannot describe its own code (no driver, stub library, unknown code).
    if name.startswith("CUDA_ERROR_"):
        return name[len("CUDA_ERROR_") :].replace("_", " ").lower()
    return "a code rawcuda's table does not know (from a newer driver?)"


class InvalidValueError(CudaError, ValueError):
    """CUDA_ERROR_INVALID_VALUE: an argument the driver refused."""


class OutOfMemoryError(CudaError, MemoryError):
    """An allocation failed. ``requested`` and ``available`` are in bytes (``available`` may be None)."""

    def __init__(
        self,
        code: int,
        *,
        requested: int | None = None,
        available: int | None = None,
        memory: str = "device",
        **kwargs: object,
    ) -> None:
        self.requested = requested
        self.available = available
        extra = []
        if requested is not None:
            have = "unknown" if available is None else format_bytes(available)
            extra.append(f"requested {format_bytes(requested)}; {memory} memory available: {have}")
        details = [*extra, *kwargs.pop("details", ())]  # type: ignore[misc]
        super().__init__(code, details=details, **kwargs)  # type: ignore[arg-type]


class NotInitializedError(CudaError):
    """cuInit was not called, or the driver is shutting down."""


class StubLibraryError(CudaError):
    """The toolkit's stub libcuda was loaded instead of the driver (CUDA_ERROR_STUB_LIBRARY, 34)."""


class DeviceError(CudaError):
    """No usable GPU: none present, a bad ordinal, or the device is unavailable."""


class NoDeviceError(DeviceError):
    """The driver works but sees no GPU (CUDA_ERROR_NO_DEVICE, 100)."""


class ContextError(CudaError):
    """No current context, a destroyed context, or a context in the wrong state."""


class ModuleLoadError(CudaError):
    """A module image could not be loaded: bad PTX, no code for this GPU, a PTX ISA too new ...

    When the driver's JIT was involved, ``jit_log`` and ``info_log`` hold its logs (also in the message).
    """

    jit_log = ""
    info_log = ""


class InvalidHandleError(CudaError, ValueError):
    """A handle that is not (or no longer) valid."""


class NotFoundError(CudaError, LookupError):
    """A named symbol (kernel, global) is not in the module. ``entries`` lists the kernels that are."""

    entries: list[str] = []  # noqa: RUF012  (a default for errors raised outside Module.function)


class NotReadyError(CudaError):
    """Work still pending. Query methods turn this into False instead of raising."""


class LaunchError(CudaError):
    """A launch was refused: too many resources, a cooperative grid too large, a bad cluster size."""


class KernelFaultError(LaunchError):
    """A kernel faulted on the GPU (illegal address, assert, misaligned access ...), or another sticky error
    (watchdog timeout, a contained hardware error): this process can no longer use CUDA."""


class ContextPoisonedError(CudaError):
    """A call into a context that an earlier sticky error made unusable."""


class NotSupportedError(CudaError):
    """The device, driver or system does not support the operation."""


class StreamCaptureError(CudaError):
    """An operation that stream capture forbids, or a capture that was invalidated."""


class GraphError(CudaError):
    """An executable graph could not be updated or launched."""


class NvrtcError(RawCudaError):
    """An NVRTC call returned something other than NVRTC_SUCCESS.

    ``code`` is the nvrtcResult, ``name`` its C name, ``log`` the compiler's log when the failure came from
    compiling (the errors, with file and line), ``call`` the NVRTC function that failed.
    """

    def __init__(
        self,
        code: int,
        *,
        call: str = "",
        arguments: str = "",
        description: str = "",
        log: str = "",
        details: Sequence[str] = (),
    ) -> None:
        self.code = int(code)
        self.name = result_name(code)
        self.call = call
        self.arguments = arguments
        self.description = description
        self.log = log
        self.details = list(details)
        self.hint = NVRTC_HINTS.get(self.code, "")
        super().__init__(self._message())

    @property
    def result(self) -> NvrtcResult | None:
        try:
            return NvrtcResult(self.code)
        except ValueError:
            return None

    def _message(self) -> str:
        head = f"{self.call or 'an NVRTC call'}({self.arguments}) failed: {self.name} ({self.code})"
        if self.description and self.description != self.name:  # nvrtcGetErrorString often just repeats the name
            head += f": {self.description}"
        lines = [head, *("  " + d for d in self.details)]
        if self.log.strip():
            lines.append("  compile log:\n    " + self.log.strip().replace("\n", "\n    "))
        if self.hint:
            lines.append("  hint: " + self.hint)
        return "\n".join(lines)

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only constructor: rebuild from the fields so the error pickles (worker processes).
        return _rebuild, (type(self), dict(self.__dict__), self.args)

    def with_details(self, *, log: str = "", details: Sequence[str] = ()) -> NvrtcError:
        """The same error with the compile log and more lines of context attached."""
        return type(self)(
            self.code,
            call=self.call,
            arguments=self.arguments,
            description=self.description,
            log=log or self.log,
            details=[*self.details, *details],
        )


_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
_KIB = 1024


def format_bytes(n: int) -> str:
    """``1099511627776`` -> ``'1.00 TiB (1099511627776 bytes)'``: readable, and still exact."""
    value, unit = float(n), 0
    while value >= _KIB and unit < len(_UNITS) - 1:
        value /= _KIB
        unit += 1
    if unit == 0:
        return f"{n} bytes"
    return f"{value:.2f} {_UNITS[unit]} ({n} bytes)"
