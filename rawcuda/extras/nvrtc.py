"""Extras: runtime compilation -- CUDA C++ source text -> PTX (or cubin) in-process, through NVRTC and ctypes.

``nvcc`` compiles kernels before the program runs (``build.py``, the seed's ``build.rs``). NVRTC, the
"runtime compilation" library that ships with the toolkit, compiles them *while it runs*: the source is
a string, so it can be generated from data only known then -- sizes baked in as constants, a user's
expression turned into a kernel, a template instantiated for the dtype at hand::

    result = rawcuda.extras.nvrtc.compile(source, options=("--std=c++17",), name_expressions=("scale<float>",))
    module = rawcuda.Module(result.ptx)
    kernel = module.function(result.lowered_names["scale<float>"])

About the seed article's "Rust cannot generate kernels at run time": the CUDA toolkit offers no way to
compile Rust *source* into GPU code while the program runs, but that is not what "generating kernels"
needs. NVRTC is a C library; Rust (through FFI), Python (this file) or any language with a C interface can
hand it CUDA C++ text and load the result with the driver. The limit is the kernel language, not the host
language.

What this module does, step by step (every step is one row of :mod:`rawcuda.ffi.nvrtc`, called through
``rawcuda.checked.nv`` -- the same checked-call machinery as the driver's ``cu``):

1. find libnvrtc lazily (like libcuda, see :mod:`rawcuda.ffi.library`), failing with
   :class:`~rawcuda.checked.errors.NvrtcNotFoundError` that lists each place tried and why;
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
from collections.abc import Mapping, Sequence
from ctypes import byref, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rawcuda import checked
from rawcuda.checked import nv
from rawcuda.checked.binding import nvrtc_error_string
from rawcuda.checked.errors import NvrtcError, RawCudaError
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.nvrtc import nvrtcProgram

if TYPE_CHECKING:  # what load() returns: imported there, so that compiling never loads the launch stack and numpy
    from rawcuda.core.context import Context
    from rawcuda.core.module import Module

#: Target architecture when no driver can tell us the GPU's: Ampere's, supported by NVRTC 11.x-13.x.
FALLBACK_ARCH = "compute_80"
_ARCH_OPTIONS = ("-arch", "--gpu-architecture")
_ARCH_DIGITS = 10  # compute capability 9.0 -> 90 in NVRTC's numbering


def error_string(code: int) -> str:
    """nvrtcGetErrorString (which returns the C name, e.g. "NVRTC_ERROR_COMPILATION"); never raises."""
    return nvrtc_error_string(code)


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
    return nv.library().path


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
        from rawcuda.core.module import Module  # here: compiling alone needs none of the launch stack

        return Module(self.image, context, name=self.name)


def compile(
    source: str | bytes,
    name: str = "kernel.cu",
    options: Sequence[str] | None = None,
    name_expressions: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
) -> CompileResult:
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
    "FALLBACK_ARCH",
    "CompileResult",
    "choose_arch",
    "compile",
    "default_arch",
    "device_compute_capability",
    "error_string",
    "library_path",
    "supported_archs",
    "version",
]
