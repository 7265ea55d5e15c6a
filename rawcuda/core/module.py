"""Core: modules (loaded PTX, cubin or fatbin) and their kernels, launched with checked arguments.

Loading PTX means the driver's JIT compiles it for this GPU. When that fails, the only explanation is in the
JIT's error log. You get it only if you hand cuModuleLoadDataEx a log buffer. rawcuda always does, and puts the
log into the exception.

Before loading PTX, rawcuda compares its ``.version`` (PTX ISA) with the newest this driver understands. PTX
from a toolkit newer than the driver fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222). The error message then
says both versions and both fixes: update the driver, or compile with an older toolkit or ship a cubin.

A kernel is found by its *symbol* name. C++ mangles names (``_Z10vector_addPfPKfS1_m``) unless the kernel is
declared ``extern "C"``. When a name is missing, the error lists the module's kernels and points out a mangled
near-miss.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from ctypes import byref, c_int, c_size_t, c_uint, c_void_p
from pathlib import Path

from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError, InvalidValueError, ModuleLoadError, NotFoundError
from rawcuda.ffi.constants import JitOption
from rawcuda.ffi.results import Result

from . import ptx
from .closeorder import CloseOrder
from .context import Context, resolve
from .function import Function
from .paramspec import ParamSpec
from .resource import Resource

LOG_BYTES = 16 * 1024  # JIT info / error log capacity
ELF_MAGIC = b"\x7fELF"  # a cubin is an ELF file
FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")  # a fatbin (several cubins + PTX) starts with this

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
    """ "cubin", "fatbin" or "ptx", from the first bytes."""
    if image.startswith(ELF_MAGIC):
        return "cubin"
    if image.startswith(FATBIN_MAGIC):
        return "fatbin"
    return "ptx"


def _unload(handle: int) -> None:
    cu.cuModuleUnload(handle)


class Module(Resource):
    """Code loaded into a context: ``Module("kernels.ptx")``, ``Module(ptx_text)`` or ``Module(cubin_bytes)``.

    ``context`` is the default context when None. ``name`` labels the module in errors. ``jit_options`` go to
    cuModuleLoadDataEx beside the log buffers. Raises FileNotFoundError for a missing file, TypeError for any
    other kind of image, and ModuleLoadError for PTX newer than the driver. A failed load raises its CudaError
    with the JIT logs attached (``jit_log``, ``info_log``).
    """

    close_order = CloseOrder.MODULE

    def __init__(
        self,
        image: bytes | str | os.PathLike[str],
        context: Context | None = None,
        *,
        name: str | None = None,
        jit_options: dict[JitOption, int] | None = None,
    ) -> None:
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
        # Weak values: a Function holds its Module. Why: docs/hazards.md, "A module knows its kernels weakly".
        self._functions: weakref.WeakValueDictionary[str, Function] = weakref.WeakValueDictionary()

    def _check_ptx_version(self, info: ptx.PtxInfo) -> None:
        driver = checked.driver_version()
        newest = max_ptx_isa(driver)
        if newest is not None and info.version > newest:
            raise ModuleLoadError(
                Result.ERROR_UNSUPPORTED_PTX_VERSION,
                call="Module",
                symbol="(checked before loading)",
                arguments=repr(self.name),
                description="the PTX needs a newer driver than this one",
                details=[
                    f"the PTX says .version {info.version[0]}.{info.version[1]}; this driver "
                    f"(CUDA {driver[0]}.{driver[1]}) understands PTX ISA up to {newest[0]}.{newest[1]}"
                ],
            )

    def _load(self, data: bytes, extra: dict[JitOption, int]) -> int:
        info, error = ctypes.create_string_buffer(LOG_BYTES), ctypes.create_string_buffer(LOG_BYTES)
        options = {
            JitOption.INFO_LOG_BUFFER: ctypes.addressof(info),
            JitOption.INFO_LOG_BUFFER_SIZE_BYTES: LOG_BYTES,
            JitOption.ERROR_LOG_BUFFER: ctypes.addressof(error),
            JitOption.ERROR_LOG_BUFFER_SIZE_BYTES: LOG_BYTES,
            **extra,
        }
        keys = (c_int * len(options))(*[int(k) for k in options])
        # Option values travel *by value*: each integer squeezed into a void*, not a pointer to it.
        values = (c_void_p * len(options))(*options.values())
        handle = c_void_p()
        try:
            cu.cuModuleLoadDataEx(byref(handle), data, len(options), keys, values)
        except CudaError as exc:
            failure = exc.with_details(self._load_details(error.value, info.value))
            failure.jit_log = error.value.decode(errors="replace").strip()  # type: ignore[attr-defined]
            failure.info_log = info.value.decode(errors="replace").strip()  # type: ignore[attr-defined]
            raise failure from None
        self.info_log = info.value.decode(errors="replace").strip()
        return handle.value or 0

    def _load_details(self, error_log: bytes, info_log: bytes) -> list[str]:
        lines = [f"module: {self.name} ({self.kind})"]
        if self.ptx_info is not None:
            major, minor = self.ptx_info.version
            lines.append(
                f"PTX .version {major}.{minor}, .target {self.ptx_info.target}; driver CUDA {{}}.{{}}".format(
                    *checked.driver_version()
                )
            )
        for label, log in (("JIT error log", error_log), ("JIT info log", info_log)):
            text = log.decode(errors="replace").strip()
            if text:
                lines.append(f"{label}:\n    " + text.replace("\n", "\n    "))
        return lines

    # --- kernels -----------------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def entry_names(self) -> list[str]:
        """The kernels in this module (from the PTX, or asked from the driver for cubin/fatbin)."""
        if self.ptx_info is not None:
            return list(self.ptx_info.entries)
        self.check_open()
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
        """The kernel called ``name``. Asking twice returns the same Function, while you hold it.

        Raises TypeError for a name that is not a str. Raises NotFoundError, listing the module's kernels, for
        a name it lacks.
        """
        self.check_open()
        if not isinstance(name, str):
            raise TypeError(f"a kernel name is a str, e.g. module.function('vector_add'), not {type(name).__name__}")
        fn = self._functions.get(name)
        if fn is None:
            fn = self._lookup(name)
            self._functions[name] = fn
        return fn

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
                details.append(
                    f"{near[0]} looks like {name!r} after C++ name mangling: declare the kernel "
                    f'extern "C" to keep its plain name, or ask for {near[0]!r}'
                )
            failure = exc.with_details(details)
            failure.entries = entries  # type: ignore[attr-defined]  (the kernels that *are* in the module)
            raise failure from None
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

    def loaded_functions(self) -> list[Function]:
        """The Functions asked for so far and still alive, each name once. Empty once the module is closed."""
        return list(self._functions.values()) if not self._closed else []

    def close(self) -> None:
        """Unload the module. Its Functions become closed too: their ``closed`` is the module's."""
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
            raise FileNotFoundError(
                f"no module file at {path} (pass PTX text, bytes, or the path of a .ptx/.cubin/.fatbin file)"
            )
        return path.read_bytes(), name or path.name
    raise TypeError(f"a module image is bytes, PTX text or a path, not {type(image).__name__}")
