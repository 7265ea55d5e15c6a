"""Runtime compilation: CUDA C++ source text -> PTX (or cubin) in-process, through NVRTC and ctypes.

``nvcc`` compiles kernels before the program runs (``build.py``, the seed's ``build.rs``). NVRTC, the
"runtime compilation" library that ships with the toolkit, compiles them *while it runs*: the source is
a string, so it can be generated from data only known then -- sizes baked in as constants, a user's
expression turned into a kernel, a template instantiated for the dtype at hand::

    result = rawcuda.nvrtc.compile(source, options=("--std=c++17",), name_expressions=("scale<float>",))
    module = rawcuda.Module(result.ptx)
    kernel = module.function(result.lowered_names["scale<float>"])

About the seed article's "Rust cannot generate kernels at run time": the CUDA toolkit offers no way to
compile Rust *source* into GPU code while the program runs, but that is not what "generating kernels"
needs. NVRTC is a C library; Rust (through FFI), Python (this file) or any language with a C interface can
hand it CUDA C++ text and load the result with the driver. The limit is the kernel language, not the host
language.

What this module does, step by step (every step is one row of :mod:`rawcuda.ffi.nvrtc_table`):

1. find libnvrtc lazily (like libcuda, see :func:`candidates`), failing with :class:`NvrtcNotFoundError`
   that lists each place tried and why;
2. ``nvrtcCreateProgram`` (source, a file name for messages, optional in-memory headers);
3. ``nvrtcAddNameExpression`` for each C++ name whose mangled symbol you will want;
4. ``nvrtcCompileProgram`` with command-line style options; *always* read the log afterwards -- it holds
   the errors when compilation fails and the warnings when it succeeds;
5. ``nvrtcGetPTX`` / ``nvrtcGetCUBIN`` and ``nvrtcGetLoweredName``; then ``nvrtcDestroyProgram`` (the
   lowered names belong to the program, so they are copied out first).

Which GPU to compile for? Without an ``-arch`` option, :func:`compile` targets the current device
(``compute_90`` on an H100/H200), clamped to the architectures this NVRTC supports, or ``compute_80``
when no driver is available. ``compute_XY`` gives PTX, which the driver JIT-compiles for the GPU at load
time; ``sm_XY`` gives a cubin for exactly that GPU as well. PTX written by an NVRTC newer than the driver
cannot be loaded (the driver's PTX ISA is older): :class:`rawcuda.Module` checks and says so.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from ctypes import byref, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import checked
from .errors import MissingSymbolError, RawCudaError
from .ffi import library
from .ffi.constants import DeviceAttribute
from .ffi.nvrtc_table import TABLE, NvrtcDecl, NvrtcResult, nvrtcProgram, result_name

if TYPE_CHECKING:
    from .context import Context
    from .module import Module

ENV_VAR = "RAWCUDA_LIBNVRTC"
#: Sonames, newest first: NVRTC's soname carries the CUDA major version, and one process may see several.
SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
WINDOWS_NAMES = ("nvrtc64_130_0.dll", "nvrtc64_120_0.dll")
#: Where toolkits put their libraries when the loader's search path does not include them.
TOOLKIT_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
NO_DIRECTORY, NO_FILE = library.NO_DIRECTORY, library.NO_FILE

#: Target architecture when no driver can tell us the GPU's: Ampere's, supported by NVRTC 11.x-13.x.
FALLBACK_ARCH = "compute_80"
_ARCH_OPTIONS = ("-arch", "--gpu-architecture")
_ARCH_DIGITS = 10  # compute capability 9.0 -> 90 in NVRTC's numbering


# --- errors ------------------------------------------------------------------------------------------------
class NvrtcNotFoundError(RawCudaError, OSError):
    """No libnvrtc could be opened. Lists every candidate tried and why it failed."""

    def __init__(self, tried: Sequence[tuple[str, str]], env_set: bool) -> None:
        self.tried = list(tried)
        lines = ["could not load NVRTC, the runtime CUDA C++ compiler (libnvrtc); tried:"]
        lines += _describe_tried(self.tried)
        if env_set:
            lines.append(f"fix: {ENV_VAR} is set, so only that path was tried; point it at a real "
                         "libnvrtc.so.13 (or .12), or unset it to search the usual places")
        else:
            lines.append("fix: install NVRTC (it ships with the CUDA toolkit, as its own package in most "
                         f"distributions), set CUDA_HOME to the toolkit, or set {ENV_VAR} to the full path of "
                         "libnvrtc.so.13")
        super().__init__("\n".join(lines))


def _describe_tried(tried: list[tuple[str, str]]) -> list[str]:
    """One line per candidate, except that missing files of one directory share a line."""
    rows: list[tuple[str, str, list[str]]] = []  # (name or folder, why, file names grouped under a folder)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, why in tried:
        folder, _, base = name.rpartition("/")
        if folder and why in (NO_DIRECTORY, NO_FILE):
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


#: Likely cause and fix for the codes people hit.
HINTS: dict[int, str] = {
    NvrtcResult.ERROR_COMPILATION: "the source does not compile: the log above names the file, line and reason",
    NvrtcResult.ERROR_INVALID_OPTION: (
        "NVRTC refused an option: check its spelling (options are separate strings, e.g. '-arch=compute_90', "
        "'--std=c++17', '-DN=4'); rawcuda.nvrtc.supported_archs() lists the architectures this NVRTC knows"
    ),
    NvrtcResult.ERROR_NAME_EXPRESSION_NOT_VALID: (
        "a name expression must name a __global__ function or a __device__/__constant__ variable the source "
        "defines, written as C++ would refer to it: 'scale<float>', 'ns::kernel', '&table'"
    ),
    NvrtcResult.ERROR_BUILTIN_OPERATION_FAILURE: (
        "NVRTC could not run one of its built-in steps, often because libnvrtc-builtins.so is missing or of "
        "another version than libnvrtc: install both from the same toolkit"
    ),
    NvrtcResult.ERROR_INVALID_INPUT: "NULL or an out-of-range value where NVRTC needs one (a bug in the caller)",
}


class NvrtcError(RawCudaError):
    """An NVRTC call returned something other than NVRTC_SUCCESS.

    ``code`` is the nvrtcResult, ``name`` its C name, ``log`` the compiler's log when the failure came from
    compiling (the errors, with file and line), ``call`` the NVRTC function that failed.
    """

    def __init__(self, code: int, *, call: str = "", arguments: str = "", description: str = "", log: str = "",
                 details: Sequence[str] = ()) -> None:
        self.code = int(code)
        self.name = result_name(code)
        self.call = call
        self.arguments = arguments
        self.description = description
        self.log = log
        self.details = list(details)
        self.hint = HINTS.get(self.code, "")
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
        return type(self)(self.code, call=self.call, arguments=self.arguments, description=self.description,
                          log=log or self.log, details=[*self.details, *details])


def _rebuild(cls: type[NvrtcError], state: dict[str, object], args: tuple[object, ...]) -> NvrtcError:
    error = Exception.__new__(cls, *args)
    error.__dict__.update(state)
    error.args = args
    return error


# --- finding and opening libnvrtc ----------------------------------------------------------------------------
#: The opened library: the ctypes handle, the name we asked for, and the file it really is.
NvrtcLibrary = library.Driver


def toolkit_dirs() -> list[str]:
    """Library directories of a CUDA toolkit: ``$CUDA_HOME/lib64`` first, then the usual install places."""
    dirs = []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        dirs.append(os.path.join(cuda_home, "lib64"))
    dirs += [d for d in TOOLKIT_DIRS if d not in dirs]
    return dirs


def candidates() -> list[str]:
    """The names or paths tried, in order.

    Why this order? ``$RAWCUDA_LIBNVRTC`` is an explicit choice, so it is the *only* candidate (falling back
    silently would hide the mistake you are debugging). Then the sonames through the dynamic loader's own
    search (``LD_LIBRARY_PATH``, ``ldconfig``), newest CUDA first; then the same names in the toolkit's
    library directories, which the loader often does not know about.
    """
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        return [chosen]
    if sys.platform == "win32":
        return list(WINDOWS_NAMES)
    return [*SONAMES, *(os.path.join(folder, name) for folder in toolkit_dirs() for name in SONAMES)]


_lock = threading.Lock()
_library: NvrtcLibrary | None = None


def load() -> NvrtcLibrary:
    """Open libnvrtc once per process; later calls return the same :class:`NvrtcLibrary`."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            _library = _open_first(candidates())
    return _library


def loaded() -> NvrtcLibrary | None:
    """The library if it has been opened already, else None (never opens it)."""
    return _library


def _open_first(names: list[str]) -> NvrtcLibrary:
    opened, tried = library.open_first(names, "nvrtcVersion")
    if opened is None:
        raise NvrtcNotFoundError(tried, env_set=bool(os.environ.get(ENV_VAR)))
    return opened


# --- the checked functions -------------------------------------------------------------------------------------
def bind(decl: NvrtcDecl, lib: NvrtcLibrary | None = None) -> Any:
    """A ctypes function for one NVRTC row: restype and argtypes from the table, nvrtcResult checked."""
    lib = lib or load()
    try:
        fn = lib.handle[decl.symbol]  # a fresh function pointer: our settings never leak to other users
    except AttributeError:
        raise MissingSymbolError(
            f"{decl.name}: {lib.path} does not export {decl.symbol}; this libnvrtc is older than the table "
            f"(rawcuda.nvrtc.version() says which it is)"
        ) from None
    fn.restype = decl.restype
    fn.argtypes = decl.argtypes
    if decl.checked:
        fn.errcheck = _errcheck_for(decl)
    return fn


def _errcheck_for(decl: NvrtcDecl) -> Callable[[int, Any, tuple[Any, ...]], int]:
    def errcheck(result: int, func: Any, args: tuple[Any, ...]) -> int:
        if result != NvrtcResult.SUCCESS:
            arguments = checked.format_arguments(decl, args)  # type: ignore[arg-type]  (duck-typed: a table row)
            raise NvrtcError(result, call=decl.name, arguments=arguments, description=error_string(result))
        return result

    return errcheck


class _Functions:
    """``nv.nvrtcVersion(...)``: each row bound on first use, then a plain attribute."""

    def __getattr__(self, name: str) -> Any:
        decl = TABLE.get(name)
        if decl is None:
            raise AttributeError(f"{name} is not in rawcuda's NVRTC table (rawcuda/ffi/nvrtc_table.py)")
        with _bind_lock:
            fn = self.__dict__.get(name)
            if fn is None:
                fn = bind(decl)
                setattr(self, name, fn)
        return fn

    def __dir__(self) -> list[str]:
        return sorted(TABLE)


_bind_lock = threading.Lock()

#: The checked NVRTC functions: ``from rawcuda.nvrtc import nv``.
nv = _Functions()


def error_string(code: int) -> str:
    """nvrtcGetErrorString (which returns the C name, e.g. "NVRTC_ERROR_COMPILATION"); never raises."""
    try:
        text = nv.nvrtcGetErrorString(code)
    except RawCudaError:
        return ""
    return text.decode(errors="replace") if text else ""


def version() -> tuple[int, int]:
    """The NVRTC version, e.g. ``(13, 0)`` (independent of the driver's)."""
    major, minor = c_int(), c_int()
    nv.nvrtcVersion(byref(major), byref(minor))
    return major.value, minor.value


def supported_archs() -> list[int]:
    """The architectures this NVRTC can compile for, ascending: ``[75, 80, 86, ..., 120]``."""
    count = c_int()
    nv.nvrtcGetNumSupportedArchs(byref(count))
    archs = (c_int * count.value)()
    if count.value:
        nv.nvrtcGetSupportedArchs(archs)
    return list(archs)


def library_path() -> str:
    """The file libnvrtc was loaded from (opens it if needed)."""
    return load().path


# --- choosing the target architecture ----------------------------------------------------------------------------
def device_compute_capability() -> tuple[int, int] | None:
    """The current context's device (device 0 when none is current) as ``(major, minor)``; None without a GPU."""
    cu = checked.cu
    try:
        checked.init()
        current, dev = c_void_p(), c_int()
        cu.cuCtxGetCurrent(byref(current))
        if current.value:
            cu.cuCtxGetDevice(byref(dev))
        else:
            cu.cuDeviceGet(byref(dev), 0)
        major, minor = c_int(), c_int()
        cu.cuDeviceGetAttribute(byref(major), DeviceAttribute.COMPUTE_CAPABILITY_MAJOR, dev)
        cu.cuDeviceGetAttribute(byref(minor), DeviceAttribute.COMPUTE_CAPABILITY_MINOR, dev)
    except RawCudaError:  # no driver, the stub, no device: there is no GPU to target
        return None
    return major.value, minor.value


def choose_arch(capability: tuple[int, int] | None, supported: Sequence[int] = ()) -> str:
    """``compute_XY`` for a device: the newest architecture NVRTC supports that the device can run.

    PTX for an *older* architecture runs on a newer GPU (the driver JIT-compiles it); PTX for a newer one
    does not. So when this NVRTC is older than the GPU, we target the newest architecture it knows.
    """
    if capability is None:
        return FALLBACK_ARCH
    wanted = capability[0] * _ARCH_DIGITS + capability[1]
    fitting = [arch for arch in supported if arch <= wanted]
    return f"compute_{max(fitting) if fitting else wanted}"


def default_arch() -> str:
    """What :func:`compile` targets when the options name no architecture."""
    capability = device_compute_capability()
    if capability is None:
        return FALLBACK_ARCH
    return choose_arch(capability, supported_archs())


def _has_arch(options: Sequence[str]) -> bool:
    return any(opt.split("=", 1)[0] in _ARCH_OPTIONS for opt in options)


# --- compiling ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileResult:
    """What NVRTC produced: PTX text (bytes, no trailing NUL), the log, and the lowered C++ names.

    ``cubin`` is machine code for one GPU, present only when the options named a real architecture
    (``-arch=sm_90``); ``image`` is what to load (the cubin when there is one, else the PTX).
    """

    ptx: bytes
    log: str
    lowered_names: dict[str, str]
    cubin: bytes | None = None
    name: str = "kernel.cu"
    options: tuple[str, ...] = field(default_factory=tuple)

    @property
    def image(self) -> bytes:
        return self.cubin if self.cubin else self.ptx

    def load(self, context: Context | None = None) -> Module:
        """Load :attr:`image` as a :class:`rawcuda.Module` (in ``context``, the default one when None)."""
        from .module import Module

        return Module(self.image, context, name=self.name)


def compile(source: str | bytes, name: str = "kernel.cu", options: Sequence[str] | None = None,
            name_expressions: Sequence[str] = (), headers: Mapping[str, str] | None = None) -> CompileResult:
    """Compile CUDA C++ ``source`` with NVRTC.

    ``name`` is the file name NVRTC uses in messages. ``options`` are nvcc-style words; without an
    ``-arch``/``--gpu-architecture`` among them the current device's architecture is added (see
    :func:`default_arch`). ``name_expressions`` are C++ names (``"scale<float>"``) whose mangled symbols
    come back in ``lowered_names``. ``headers`` maps ``#include`` names to their source text.
    Raises :class:`NvrtcError` -- with the compile log -- when compilation fails.
    """
    for what, value in (("options", options), ("name_expressions", name_expressions)):
        if isinstance(value, str | bytes):  # tuple("-lineinfo") would be ten one-letter options
            raise TypeError(f"{what} is a sequence of strings: write ({value!r},), not {value!r}")
    text = source.encode() if isinstance(source, str) else bytes(source)
    opts = tuple(options) if options is not None else ()
    if not _has_arch(opts):
        opts = (f"-arch={default_arch()}", *opts)
    expressions = tuple(name_expressions)
    context_lines = [f"program: {name}", f"options: {' '.join(opts) or '(none)'}"]

    includes = list((headers or {}).items())
    header_sources = (c_char_p * len(includes))(*[src.encode() for _, src in includes]) if includes else None
    header_names = (c_char_p * len(includes))(*[inc.encode() for inc, _ in includes]) if includes else None
    prog = nvrtcProgram()
    nv.nvrtcCreateProgram(byref(prog), text, name.encode(), len(includes), header_sources, header_names)
    try:
        for expression in expressions:
            nv.nvrtcAddNameExpression(prog, expression.encode())
        words = (c_char_p * len(opts))(*[o.encode() for o in opts]) if opts else None
        try:
            nv.nvrtcCompileProgram(prog, len(opts), words)
        except NvrtcError as exc:
            raise exc.with_details(log=_program_log(prog), details=context_lines) from None
        log = _program_log(prog)
        cubin = _cubin(prog, required=_real_arch(opts))
        try:
            ptx = _read_bytes(prog, nv.nvrtcGetPTXSize, nv.nvrtcGetPTX).rstrip(b"\0")
        except NvrtcError:
            if not cubin:
                raise
            ptx = b""  # some target kinds produce machine code only; the cubin is what to load then
        try:
            lowered = {expression: _lowered_name(prog, expression) for expression in expressions}
        except NvrtcError as exc:
            raise exc.with_details(log=log, details=context_lines) from None
    finally:
        nv.nvrtcDestroyProgram(byref(prog))
    return CompileResult(ptx=ptx, log=log, lowered_names=lowered, cubin=cubin, name=name, options=opts)


def _read_bytes(prog: nvrtcProgram, size_fn: Any, data_fn: Any) -> bytes:
    """The size-then-contents protocol shared by PTX, cubin and log."""
    size = c_size_t()
    size_fn(prog, byref(size))
    if size.value == 0:
        return b""
    buf = ctypes.create_string_buffer(size.value)
    data_fn(prog, buf)
    return buf.raw[: size.value]


def _program_log(prog: nvrtcProgram) -> str:
    raw = _read_bytes(prog, nv.nvrtcGetProgramLogSize, nv.nvrtcGetProgramLog)
    return raw.rstrip(b"\0").decode(errors="replace").strip()


def _real_arch(options: Sequence[str]) -> bool:
    """True when an -arch option names a real GPU (sm_90), for which NVRTC also produces a cubin."""
    return any(opt.split("=", 1)[0] in _ARCH_OPTIONS and opt.split("=", 1)[-1].startswith("sm_") for opt in options)


def _cubin(prog: nvrtcProgram, *, required: bool) -> bytes | None:
    """The cubin, or None when a virtual architecture (compute_90) was targeted: then there is only PTX."""
    try:
        data = _read_bytes(prog, nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN)
    except NvrtcError:
        if required:
            raise
        return None  # (documented to answer size 0 here; an error means the same: no machine code)
    return data or None


def _lowered_name(prog: nvrtcProgram, expression: str) -> str:
    out = c_char_p()
    nv.nvrtcGetLoweredName(prog, expression.encode(), byref(out))
    return (out.value or b"").decode()  # copied now: the string dies with the program


__all__ = [
    "ENV_VAR",
    "FALLBACK_ARCH",
    "CompileResult",
    "NvrtcError",
    "NvrtcNotFoundError",
    "NvrtcResult",
    "candidates",
    "choose_arch",
    "compile",
    "default_arch",
    "device_compute_capability",
    "load",
    "nv",
    "supported_archs",
    "version",
]
