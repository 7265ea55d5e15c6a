"""Every way rawcuda can fail, as Python exceptions that say what went wrong and how to fix it.

The driver answers every call with a CUresult number. The seed article wraps them in a Rust enum with
one special case, ``OutOfMemory { requested, available }``, because OOM is the error you *handle*
rather than report. rawcuda keeps that idea and goes further:

* :class:`CudaError` carries the code, the cuda.h name, the driver's own description and *the call
  that failed* (name, exported symbol, arguments). Codes unknown to our table are kept, not lost.
* Subclasses group codes by what you would do about them (:class:`OutOfMemoryError`,
  :class:`ModuleLoadError`, :class:`KernelFaultError` ...), and also derive from the matching built-in
  (``MemoryError``, ``ValueError``, ``LookupError``) so generic handlers work.
* The codes people actually hit get a curated ``hint``: the likely cause and the fix.

This module is pure Python: it imports nothing from the driver layers, so every layer can raise from it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .ffi.results import STICKY, Result, c_name

R = Result  # short alias for the tables below

#: The likely cause and the fix, for the codes people hit. Written for a reader who has never seen
#: the code before.
HINTS: dict[int, str] = {
    R.ERROR_INVALID_VALUE: (
        "an argument is out of range or NULL where a value is required: check sizes (bytes vs "
        "elements), flags, and that handles belong to the current context"
    ),
    R.ERROR_OUT_OF_MEMORY: (
        "free what you no longer need (close() buffers, or drop references and run gc.collect()), "
        "allocate less, or look for other processes holding GPU memory with nvidia-smi"
    ),
    R.ERROR_NOT_INITIALIZED: (
        "cuInit(0) has not been called in this process: rawcuda's classes call it for you; when you call "
        "the table directly, call cuInit(0) first"
    ),
    R.ERROR_DEINITIALIZED: "the driver is shutting down (interpreter exit): no more CUDA calls can succeed",
    R.ERROR_STUB_LIBRARY: (
        "the libcuda that was loaded is the CUDA toolkit's *stub*, which exists only so programs can link "
        "on machines without a driver; every call into it fails. Install the NVIDIA driver, or point "
        "RAWCUDA_LIBCUDA at the real libcuda.so.1 (`ldconfig -p | grep libcuda` lists it) and remove the "
        "toolkit's lib64/stubs directory from LD_LIBRARY_PATH"
    ),
    R.ERROR_CALL_REQUIRES_NEWER_DRIVER: "this call needs a newer NVIDIA driver than the one installed",
    R.ERROR_DEVICE_UNAVAILABLE: (
        "the GPU is busy or exclusive to another process (compute mode EXCLUSIVE_PROCESS?); check nvidia-smi"
    ),
    R.ERROR_NO_DEVICE: (
        "the driver loaded but sees no GPU: check nvidia-smi, CUDA_VISIBLE_DEVICES (empty or wrong?), and "
        "that the container was started with GPU access (e.g. docker --gpus all)"
    ),
    R.ERROR_INVALID_DEVICE: "no GPU with that ordinal: rawcuda.Device.count() says how many this process sees",
    R.ERROR_INVALID_IMAGE: (
        "the module image is not valid PTX, cubin or fatbin: a truncated file, a binary read as text, or "
        "PTX without its terminating NUL byte"
    ),
    R.ERROR_INVALID_CONTEXT: (
        "no context is current on this thread (or the handle is not a context): make one current with "
        "`with ctx:` -- rawcuda's objects do this for every call they make"
    ),
    R.ERROR_CONTEXT_IS_DESTROYED: (
        "the context was destroyed while something still used it -- the seed's RAII-order trap: free "
        "buffers, modules and streams *before* destroying their context (rawcuda's objects keep their "
        "context alive to prevent this)"
    ),
    R.ERROR_NO_BINARY_FOR_GPU: (
        "the image has no machine code for this GPU and no PTX to compile: rebuild for this GPU's "
        "architecture (nvcc -arch=sm_XY, see Device.compute_capability) or ship PTX (nvcc --ptx)"
    ),
    R.ERROR_INVALID_PTX: (
        "the driver's JIT rejected the PTX: the JIT log below says where; regenerate it with nvcc --ptx "
        "and check that its .target is not newer than this GPU"
    ),
    R.ERROR_UNSUPPORTED_PTX_VERSION: (
        "the PTX was written by a newer CUDA toolkit than this driver understands (its .version is higher "
        "than the driver's PTX ISA). Fix 1: update the NVIDIA driver. Fix 2: compile with a toolkit no "
        "newer than the driver (compare `nvcc --version` with cuDriverGetVersion), or ship a cubin for "
        "this GPU instead of PTX"
    ),
    R.ERROR_JIT_COMPILER_NOT_FOUND: "the driver's PTX JIT library is missing: reinstall the NVIDIA driver",
    R.ERROR_FILE_NOT_FOUND: "the module file does not exist: check the path (relative to the working directory?)",
    R.ERROR_INVALID_HANDLE: (
        "a handle (stream, event, module, function, graph) is invalid: destroyed already, never created, "
        "or from another context; rawcuda's objects raise ClosedError before this can happen"
    ),
    R.ERROR_NOT_FOUND: (
        "no symbol of that name in the module: check the spelling, and remember that C++ kernels are "
        "name-mangled (_Z...) unless declared extern \"C\""
    ),
    R.ERROR_NOT_READY: "the work has not finished yet: a status, not a failure (query() returns False)",
    R.ERROR_ILLEGAL_ADDRESS: (
        "a kernel read or wrote memory it does not own: an index past the end, a freed buffer, or a host "
        "pointer passed where a device pointer goes. Find it with compute-sanitizer"
    ),
    R.ERROR_LAUNCH_OUT_OF_RESOURCES: (
        "the kernel needs more registers or shared memory than one block of this size can have: use a "
        "smaller block (Function.max_threads_per_block) or limit registers (__launch_bounds__)"
    ),
    R.ERROR_LAUNCH_TIMEOUT: "the kernel ran longer than the display watchdog allows: split the work",
    R.ERROR_ASSERT: "a device-side assert() failed in a kernel",
    R.ERROR_MISALIGNED_ADDRESS: "a kernel accessed memory at an address not aligned to the access size",
    R.ERROR_LAUNCH_FAILED: "a kernel faulted (an exception on the GPU); compute-sanitizer will say where",
    R.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: (
        "a cooperative grid must fit on the GPU at once: at most (blocks per SM from the occupancy API) "
        "x (number of SMs) blocks"
    ),
    R.ERROR_NOT_SUPPORTED: "this device or driver does not support the operation (check the device attribute)",
    R.ERROR_SYSTEM_DRIVER_MISMATCH: (
        "libcuda and the kernel driver are different versions: often a forward-compatibility libcuda "
        "(cuda-compat) on a GPU it does not support, or a driver update without a reboot"
    ),
    R.ERROR_STREAM_CAPTURE_UNSUPPORTED: (
        "not allowed while a stream is being captured into a graph: no synchronous copies, no "
        "synchronize, no legacy-stream work -- rawcuda calls without stream= (copy_from, to_array, fill, "
        "launch) synchronize the context, so pass stream=<the capturing stream> to record them instead"
    ),
    R.ERROR_STREAM_CAPTURE_INVALIDATED: (
        "an earlier illegal call invalidated the capture: end it, discard the graph and capture again"
    ),
    R.ERROR_STREAM_CAPTURE_IMPLICIT: (
        "the legacy default stream cannot take part in capture: capture on a stream you created"
    ),
    R.ERROR_GRAPH_EXEC_UPDATE_FAILURE: (
        "the new graph differs in topology or node types from the instantiated one: instantiate it instead"
    ),
}

_STICKY_HINT = (
    "this error is *sticky*: the context is now unusable and every later call in it fails with the same "
    "code; only a new process recovers (to find the guilty kernel, synchronize after each launch)"
)


class RawCudaError(Exception):
    """Base of every exception rawcuda raises on purpose."""


class DriverNotFoundError(RawCudaError, OSError):
    """No libcuda could be opened. Lists every candidate tried and why it failed."""

    def __init__(self, tried: Sequence[tuple[str, str]], env_var: str, env_set: bool) -> None:
        self.tried = list(tried)
        names = ", ".join(name for name, _ in self.tried)
        lines = [f"could not load the NVIDIA driver library libcuda (tried {names})"]
        lines += [f"  {name}: {why}" for name, why in self.tried]
        if env_set:
            lines.append(f"fix: {env_var} is set, so only that path was tried; point it at a real "
                         f"libcuda.so.1 or unset it to search the usual places")
        else:
            lines.append(f"fix: install the NVIDIA driver (nvidia-smi should work), or set {env_var} to "
                         "the full path of libcuda.so.1")
        super().__init__("\n".join(lines))


class MissingSymbolError(RawCudaError, AttributeError):
    """libcuda does not export a symbol the table declares: the driver is older than the table."""


class ClosedError(RawCudaError, ValueError):
    """An object was used after close()."""


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
            lines.append("  note: " + _STICKY_HINT)
        return "\n".join(lines)


def _rebuild(cls: type[CudaError], state: dict[str, object], args: tuple[object, ...]) -> CudaError:
    error = Exception.__new__(cls, *args)  # cls.__new__ would be MemoryError.__new__, which refuses
    error.__dict__.update(state)
    error.args = args
    return error


def _fallback_description(name: str) -> str:
    # Used when the driver cannot describe its own code (no driver, stub library, unknown code).
    if name.startswith("CUDA_ERROR_"):
        return name[len("CUDA_ERROR_"):].replace("_", " ").lower()
    return "a code rawcuda's table does not know (from a newer driver?)"


class InvalidValueError(CudaError, ValueError):
    """CUDA_ERROR_INVALID_VALUE: an argument the driver refused."""


class OutOfMemoryError(CudaError, MemoryError):
    """An allocation failed. ``requested`` and ``available`` are in bytes (``available`` may be None)."""

    def __init__(self, code: int, *, requested: int | None = None, available: int | None = None,
                 memory: str = "device", **kwargs: object) -> None:
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
    """A kernel faulted on the GPU (illegal address, assert, misaligned access ...). Sticky."""


class ContextPoisonedError(CudaError):
    """A call into a context that an earlier sticky error made unusable."""


class NotSupportedError(CudaError):
    """The device, driver or system does not support the operation."""


class StreamCaptureError(CudaError):
    """An operation that stream capture forbids, or a capture that was invalidated."""


class GraphError(CudaError):
    """An executable graph could not be updated or launched."""


_CLASS_BY_CODE: dict[int, type[CudaError]] = {
    R.ERROR_INVALID_VALUE: InvalidValueError,
    R.ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    R.ERROR_NOT_INITIALIZED: NotInitializedError,
    R.ERROR_DEINITIALIZED: NotInitializedError,
    R.ERROR_STUB_LIBRARY: StubLibraryError,
    R.ERROR_DEVICE_UNAVAILABLE: DeviceError,
    R.ERROR_NO_DEVICE: NoDeviceError,
    R.ERROR_INVALID_DEVICE: DeviceError,
    R.ERROR_DEVICE_NOT_LICENSED: DeviceError,
    R.ERROR_INVALID_CONTEXT: ContextError,
    R.ERROR_CONTEXT_ALREADY_CURRENT: ContextError,
    R.ERROR_CONTEXT_ALREADY_IN_USE: ContextError,
    R.ERROR_PRIMARY_CONTEXT_ACTIVE: ContextError,
    R.ERROR_CONTEXT_IS_DESTROYED: ContextError,
    R.ERROR_INVALID_IMAGE: ModuleLoadError,
    R.ERROR_NO_BINARY_FOR_GPU: ModuleLoadError,
    R.ERROR_INVALID_PTX: ModuleLoadError,
    R.ERROR_JIT_COMPILER_NOT_FOUND: ModuleLoadError,
    R.ERROR_UNSUPPORTED_PTX_VERSION: ModuleLoadError,
    R.ERROR_JIT_COMPILATION_DISABLED: ModuleLoadError,
    R.ERROR_INVALID_SOURCE: ModuleLoadError,
    R.ERROR_FILE_NOT_FOUND: ModuleLoadError,
    R.ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: ModuleLoadError,
    R.ERROR_SHARED_OBJECT_INIT_FAILED: ModuleLoadError,
    R.ERROR_INVALID_HANDLE: InvalidHandleError,
    R.ERROR_ILLEGAL_STATE: InvalidHandleError,
    R.ERROR_NOT_FOUND: NotFoundError,
    R.ERROR_NOT_READY: NotReadyError,
    R.ERROR_LAUNCH_OUT_OF_RESOURCES: LaunchError,
    R.ERROR_LAUNCH_TIMEOUT: LaunchError,
    R.ERROR_LAUNCH_INCOMPATIBLE_TEXTURING: LaunchError,
    R.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: LaunchError,
    R.ERROR_INVALID_CLUSTER_SIZE: LaunchError,
    R.ERROR_NOT_PERMITTED: NotSupportedError,
    R.ERROR_NOT_SUPPORTED: NotSupportedError,
    R.ERROR_SYSTEM_NOT_READY: NotSupportedError,
    R.ERROR_SYSTEM_DRIVER_MISMATCH: NotSupportedError,
    R.ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: NotSupportedError,
    R.ERROR_STREAM_CAPTURE_UNSUPPORTED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_INVALIDATED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_MERGE: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_UNMATCHED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_UNJOINED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_ISOLATION: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_IMPLICIT: StreamCaptureError,
    R.ERROR_CAPTURED_EVENT: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_WRONG_THREAD: StreamCaptureError,
    R.ERROR_GRAPH_EXEC_UPDATE_FAILURE: GraphError,
}
_CLASS_BY_CODE.update(dict.fromkeys(STICKY, KernelFaultError))


def error_class(code: int) -> type[CudaError]:
    """The exception class for a CUresult (plain :class:`CudaError` for codes with no category)."""
    return _CLASS_BY_CODE.get(code, CudaError)


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
