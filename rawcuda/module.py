"""Layer 2: modules (loaded PTX / cubin / fatbin) and their kernels, launched with checked arguments.

Loading PTX means the driver's JIT compiles it for this GPU, and when that fails, the only explanation
is in the JIT's error log -- which you get only if you hand cuModuleLoadDataEx a log buffer. rawcuda
always does, and puts the log into the exception.

Before loading PTX, its ``.version`` (PTX ISA) is compared with the newest this driver understands.
PTX from a toolkit newer than the driver fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222), and the
error message then says both versions and both fixes (update the driver, or compile with an older
toolkit / ship a cubin).

A kernel is found by its *symbol* name: C++ mangles names (``_Z10vector_addPfPKfS1_m``) unless the kernel
is declared ``extern "C"``. When a name is missing, the error lists the module's kernels and points out a
mangled near-miss.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_int, c_size_t, c_uint, c_void_p
from operator import is_
from pathlib import Path
from typing import Any

import numpy as np

from . import checked, ptx
from .checked import cu
from .context import SYNC_LAUNCHES, Context, _tls, resolve
from .errors import ClosedError, CudaError, InvalidValueError, ModuleLoadError, NotFoundError
from .ffi.constants import DeviceAttribute as A
from .ffi.constants import FunctionAttribute, JitOption
from .ffi.results import Result
from .launch import ArgPacker, Packed, ParamSpec
from .resource import Resource, close_generation
from .stream import Stream, stream_handle

LOG_BYTES = 16 * 1024  # JIT info / error log capacity
ELF_MAGIC = b"\x7fELF"  # a cubin is an ELF file
FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")  # a fatbin (several cubins + PTX) starts with this
DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs an explicit opt-in per function
_MAX_CONFIGS = 256  # launch configurations remembered per function (validated once each)

# The argtypes-free binding of cuLaunchKernel used by the hot path (bound at the first launch).
_launch_kernel: list[Any] = [None]

#: The newest PTX ISA each CUDA driver version understands (from the PTX ISA release history).
_PTX_ISA_BY_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    **{(11, m): (7, m) for m in range(9)},
    **{(12, m): (8, m) for m in range(6)},
    (12, 6): (8, 5),
    (12, 7): (8, 6),
    (12, 8): (8, 7),
    (12, 9): (8, 8),
}


def max_ptx_isa(cuda: tuple[int, int]) -> tuple[int, int] | None:
    """The newest PTX ISA a driver of CUDA version ``cuda`` loads; None when we cannot say."""
    if cuda in _PTX_ISA_BY_CUDA:
        return _PTX_ISA_BY_CUDA[cuda]
    if cuda[0] == 13:
        return 9, cuda[1]  # CUDA 13.m understands PTX ISA 9.m
    return None


def image_kind(image: bytes) -> str:
    """"cubin", "fatbin" or "ptx", from the first bytes."""
    if image.startswith(ELF_MAGIC):
        return "cubin"
    if image.startswith(FATBIN_MAGIC):
        return "fatbin"
    return "ptx"


def _unload(handle: int) -> None:
    cu.cuModuleUnload(handle)


class Module(Resource):
    """Code loaded into a context: ``Module("kernels.ptx")``, ``Module(ptx_text)`` or ``Module(cubin_bytes)``."""

    _close_rank = -10  # before buffers: launches in flight were synchronized by Context.close()

    def __init__(self, image: bytes | str | os.PathLike[str], context: Context | None = None, *,
                 name: str | None = None, jit_options: dict[JitOption, int] | None = None) -> None:
        data, self.name = _read_image(image, name)
        self.kind = image_kind(data)
        self.ptx_info: ptx.PtxInfo | None = None
        ctx = resolve(context)
        if self.kind == "ptx":
            self.ptx_info = ptx.parse(data)
            self._check_ptx_version(self.ptx_info)
            data = data.rstrip(b"\0") + b"\0"  # the JIT reads PTX as a C string
        ctx.activate()
        self.info_log = ""
        handle = self._load(data, jit_options or {})
        super().__init__(ctx)
        self._handle = handle
        self._own(_unload, handle)
        self._functions: dict[str, Function] = {}

    def _check_ptx_version(self, info: ptx.PtxInfo) -> None:
        driver = checked.driver_version()
        newest = max_ptx_isa(driver)
        if newest is not None and info.version > newest:
            raise ModuleLoadError(
                Result.ERROR_UNSUPPORTED_PTX_VERSION, call="Module", symbol="(checked before loading)",
                arguments=repr(self.name),
                description="the PTX needs a newer driver than this one",
                details=[f"the PTX says .version {info.version[0]}.{info.version[1]}; this driver "
                         f"(CUDA {driver[0]}.{driver[1]}) understands PTX ISA up to {newest[0]}.{newest[1]}"],
            )

    def _load(self, data: bytes, extra: dict[JitOption, int]) -> int:
        info, error = ctypes.create_string_buffer(LOG_BYTES), ctypes.create_string_buffer(LOG_BYTES)
        options = {JitOption.INFO_LOG_BUFFER: ctypes.addressof(info), JitOption.INFO_LOG_BUFFER_SIZE_BYTES: LOG_BYTES,
                   JitOption.ERROR_LOG_BUFFER: ctypes.addressof(error),
                   JitOption.ERROR_LOG_BUFFER_SIZE_BYTES: LOG_BYTES, **extra}
        keys = (c_int * len(options))(*[int(k) for k in options])
        # Option values travel *by value*: each integer squeezed into a void*, not a pointer to it.
        values = (c_void_p * len(options))(*options.values())
        handle = c_void_p()
        try:
            cu.cuModuleLoadDataEx(byref(handle), data, len(options), keys, values)
        except CudaError as exc:
            raise _with_details(exc, self._load_details(error.value, info.value)) from None
        self.info_log = info.value.decode(errors="replace").strip()
        return handle.value or 0

    def _load_details(self, error_log: bytes, info_log: bytes) -> list[str]:
        lines = [f"module: {self.name} ({self.kind})"]
        if self.ptx_info is not None:
            major, minor = self.ptx_info.version
            lines.append(f"PTX .version {major}.{minor}, .target {self.ptx_info.target}; driver CUDA "
                         "{}.{}".format(*checked.driver_version()))
        for label, log in (("JIT error log", error_log), ("JIT info log", info_log)):
            text = log.decode(errors="replace").strip()
            if text:
                lines.append(f"{label}:\n    " + text.replace("\n", "\n    "))
        return lines

    # --- kernels -----------------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        self._check_open()
        return self._handle

    def entry_names(self) -> list[str]:
        """The kernels in this module (from the PTX, or asked from the driver for cubin/fatbin)."""
        if self.ptx_info is not None:
            return list(self.ptx_info.entries)
        self._check_open()
        self.context.activate()
        count = c_uint()
        cu.cuModuleGetFunctionCount(byref(count), self._handle)
        handles = (c_void_p * count.value)()
        cu.cuModuleEnumerateFunctions(handles, count.value, self._handle)
        names = []
        for h in handles:
            name = ctypes.c_char_p()
            cu.cuFuncGetName(byref(name), h)
            names.append((name.value or b"").decode())
        return names

    def function(self, name: str) -> Function:
        """The kernel called ``name`` (cached: asking twice returns the same Function)."""
        self._check_open()
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self._lookup(name)
        return fn

    get_function = function
    __getitem__ = function

    def _lookup(self, name: str) -> Function:
        self.context.activate()
        handle = c_void_p()
        try:
            cu.cuModuleGetFunction(byref(handle), self._handle, name.encode())
        except NotFoundError as exc:
            entries = self.entry_names()
            near = [e for e in entries if name in e and e != name]
            details = [f"kernels in {self.name}: {', '.join(entries) or '(none)'}"]
            if near:
                details.append(f"{near[0]} looks like {name!r} after C++ name mangling: declare the kernel "
                               f"extern \"C\" to keep its plain name, or ask for {near[0]!r}")
            raise _with_details(exc, details) from None
        specs = self._param_specs(name, handle.value or 0)
        return Function(self, name, handle.value or 0, specs)

    def _param_specs(self, name: str, handle: int) -> list[ParamSpec]:
        if self.ptx_info is not None and name in self.ptx_info.entries:
            return [ParamSpec.from_ptx(p) for p in self.ptx_info.entries[name].params]
        specs, offset, size = [], c_size_t(), c_size_t()
        while True:  # cuFuncGetParamInfo answers INVALID_VALUE one past the last parameter
            try:
                cu.cuFuncGetParamInfo(handle, len(specs), byref(offset), byref(size))
            except InvalidValueError:
                return specs
            specs.append(ParamSpec.from_size(size.value))

    def close(self) -> None:
        """Unload the module; its Functions become closed too."""
        for fn in self._functions.values():
            fn._closed = True
        super().close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Module {self.name!r} ({self.kind}){state}>"


def _read_image(image: bytes | str | os.PathLike[str], name: str | None) -> tuple[bytes, str]:
    if isinstance(image, bytes | bytearray | memoryview):
        return bytes(image), name or "<bytes>"
    if isinstance(image, str) and ("\n" in image or ".version" in image or ".entry" in image):
        return image.encode(), name or "<ptx text>"
    if isinstance(image, str | os.PathLike):
        path = Path(image)
        if not path.is_file():
            raise FileNotFoundError(f"no module file at {path} (pass PTX text, bytes, or the path of a "
                                    ".ptx/.cubin/.fatbin file)")
        return path.read_bytes(), name or path.name
    raise TypeError(f"a module image is bytes, PTX text or a path, not {type(image).__name__}")


def _with_details(exc: CudaError, details: list[str]) -> CudaError:
    """The same error (same class and fields) with more lines of explanation."""
    return type(exc)(exc.code, call=exc.call, symbol=exc.symbol, arguments=exc.arguments,
                     description=exc.description, details=[*exc.details, *details])


class Function:
    """A kernel of a Module. ``fn.launch(grid, block, *args, shared_mem=0, stream=None)``."""

    def __init__(self, module: Module, name: str, handle: int, specs: list[ParamSpec]) -> None:
        self.module = module
        self.context = module.context
        self.name = name
        self._handle = handle
        self.params = tuple(specs)
        self._closed = False
        self._configs: dict[tuple[Any, Any, int], tuple[int, ...]] = {}  # validated configurations
        self._prepared: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # ... and their ctypes driver arguments
        self._generation = close_generation[0]
        self._limit_cache: dict[str, Any] | None = None
        self._packer = ArgPacker(name, self.params)
        self._packed: Packed = (None, None, -1, [])  # the latest packed arguments (see ArgPacker)
        self._dynamic_shared_limit = DEFAULT_SHARED_LIMIT
        self.last_config: tuple[Any, ...] = (0, 0, 0, None)  # (grid, block, shared_mem, stream) of the last launch

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"kernel {self.name!r} belongs to {self.module!r}, which is closed")

    @property
    def handle(self) -> int:
        self._check_open()
        return self._handle

    # --- attributes and occupancy -------------------------------------------------------------------------
    def attribute(self, which: FunctionAttribute) -> int:
        self._check_open()
        self.context.activate()
        value = c_int()
        cu.cuFuncGetAttribute(byref(value), int(which), self._handle)
        return value.value

    def set_attribute(self, which: FunctionAttribute, value: int) -> None:
        self._check_open()
        self.context.activate()
        cu.cuFuncSetAttribute(self._handle, int(which), value)

    @property
    def num_regs(self) -> int:
        return self.attribute(FunctionAttribute.NUM_REGS)

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can launch with (registers and __launch_bounds__ permitting)."""
        return self.attribute(FunctionAttribute.MAX_THREADS_PER_BLOCK)

    @property
    def shared_size_bytes(self) -> int:
        return self.attribute(FunctionAttribute.SHARED_SIZE_BYTES)

    @property
    def local_size_bytes(self) -> int:
        return self.attribute(FunctionAttribute.LOCAL_SIZE_BYTES)

    def max_active_blocks_per_sm(self, block_size: int, shared_mem: int = 0) -> int:
        """Occupancy: how many blocks of this size fit on one multiprocessor at once."""
        self._check_open()
        self.context.activate()
        blocks = c_int()
        cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(byref(blocks), self._handle, block_size, shared_mem)
        return blocks.value

    # --- launching -----------------------------------------------------------------------------------------
    def launch(self, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any,
               shared_mem: int = 0, stream: Stream | None = None) -> None:
        """Queue the kernel on ``stream`` (the legacy default stream for None); returns before it runs.

        The first launch with a given (grid, block, shared_mem, stream) validates the configuration and
        builds every driver argument as a ctypes object; the first launch with given arguments checks and
        packs them. After that a launch is: one dict lookup, one identity check of the arguments, and one
        cuLaunchKernel through an argtypes-free binding of the table row -- close to a bare ctypes call.
        Launching one Function from several threads at once is safe (packed blocks are never rewritten).
        """
        key = (grid, block, shared_mem, stream)
        prepared = self._prepared.get(key)
        generation = close_generation[0]
        if prepared is None or self._generation != generation or grid.__class__ is float:
            prepared = self._prepare(grid, block, shared_mem, stream)  # (1.0 == 1: floats must not hit the cache)
        packed = self._packed
        same = packed[0]
        if same is None or packed[2] != generation or len(args) != len(same) or not all(map(is_, args, same)):
            packed = self._packed = self._packer.pack(args)
        ctx = self.context
        if ctx._unusable is not None or _tls.handle != ctx._handle:
            ctx.activate()
        rc = _launch_kernel[0](*prepared, packed[1], None)
        if rc:
            checked.raise_for(rc, "cuLaunchKernel", (*prepared, packed[1], None))
        ctx.last_launch = self  # named in the error if a sticky fault ever poisons the context
        self.last_config = key
        if SYNC_LAUNCHES:
            ctx.synchronize()

    def _prepare(self, grid: Any, block: Any, shared_mem: int, stream: Stream | None) -> tuple[Any, ...]:
        """Validate once, then build the driver arguments (all but kernelParams) as ctypes objects."""
        if self._closed:
            self._check_open()
        if self._generation != close_generation[0]:
            self._prepared.clear()  # something was closed: a cached stream handle might be stale
            self._generation = close_generation[0]
        config = self._configs.get((grid, block, shared_mem))
        if config is None:
            config = self._configure(grid, block, shared_mem)
        if _launch_kernel[0] is None:
            _launch_kernel[0] = checked.unchecked("cuLaunchKernel")
        h_stream = stream_handle(stream, self.context)
        prepared = (c_void_p(self._handle), *(c_uint(v) for v in config), c_void_p(h_stream))
        if len(self._prepared) < _MAX_CONFIGS:
            self._prepared[(grid, block, shared_mem, stream)] = prepared
        return prepared

    def _configure(self, grid: Any, block: Any, shared_mem: int) -> tuple[int, ...]:
        """Check a launch configuration against the device and the kernel (once per configuration)."""
        g, b = _dims("grid", grid), _dims("block", block)
        limits = self._limits()
        for axis, n in enumerate(b):
            if n > limits["block"][axis]:
                raise ValueError(f"block dimension {'xyz'[axis]} = {n} exceeds the device limit "
                                 f"{limits['block'][axis]}")
        threads = b[0] * b[1] * b[2]
        if threads > limits["threads"]:
            raise ValueError(f"a block of {b} = {threads} threads is too large for {self.name!r}: at most "
                             f"{limits['threads']} (the device allows 1024; registers or __launch_bounds__ may "
                             "lower it)")
        for axis, n in enumerate(g):
            if n > limits["grid"][axis]:
                raise ValueError(f"grid dimension {'xyz'[axis]} = {n} exceeds the device limit {limits['grid'][axis]}")
        self._configure_shared(shared_mem, limits)
        config = (*g, *b, shared_mem)
        if len(self._configs) < _MAX_CONFIGS:
            self._configs[(grid, block, shared_mem)] = config
        return config

    def _limits(self) -> dict[str, Any]:
        if self._limit_cache is None:
            dev = self.context.device
            self._limit_cache = {
                "block": [dev.attribute(a) for a in (A.MAX_BLOCK_DIM_X, A.MAX_BLOCK_DIM_Y, A.MAX_BLOCK_DIM_Z)],
                "grid": [dev.attribute(a) for a in (A.MAX_GRID_DIM_X, A.MAX_GRID_DIM_Y, A.MAX_GRID_DIM_Z)],
                "threads": self.max_threads_per_block,
                "static_shared": self.shared_size_bytes,
                "optin_shared": dev.max_shared_memory_per_block_optin,
            }
        return self._limit_cache

    def _configure_shared(self, shared_mem: int, limits: dict[str, Any]) -> None:
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise ValueError(f"shared_mem must be a byte count >= 0, got {shared_mem!r}")
        static, optin = limits["static_shared"], limits["optin_shared"]
        if static + shared_mem > optin:
            raise ValueError(f"{shared_mem} bytes of dynamic shared memory plus {static} static exceed the "
                             f"{optin} bytes a block can have on this device")
        if shared_mem > self._dynamic_shared_limit:
            # Above 48 KiB a kernel must opt in: raise its limit once, then launches may use up to it.
            self.set_attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
            self._dynamic_shared_limit = shared_mem

    def __repr__(self) -> str:
        sig = ", ".join(s.ptx_type for s in self.params)
        return f"<Function {self.name}({sig}) of {self.module.name!r}{' closed' if self._closed else ''}>"


def _dims(what: str, value: Any) -> tuple[int, int, int]:
    dims = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 1 for d in dims):
        raise ValueError(f"every {what} dimension must be >= 1, got {value!r} (a launch of zero threads does nothing; "
                         "skip the launch instead)")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]
