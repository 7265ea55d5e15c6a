"""Tutorial 00 -- the glue itself: libcuda through bare ctypes, every declaration written by hand.

Every other tutorial calls the driver through rawcuda, which has already chosen the symbol, declared the
types and turned failures into exceptions. This one does what the seed article says a binding must do by
hand -- and shows where each piece of rawcuda comes from:

* ``ctypes.CDLL("libcuda.so.1")`` -- the driver's soname, not ``libcuda.so``;
* a bare call: what ctypes assumes when nobody declared anything, and the integer CUresult it returns;
* ``restype`` and ``argtypes`` written out for 19 functions, a failure code and ``cuGetErrorName``;
* what goes wrong without ``argtypes``/``restype``: an int cut to 32 bits on the way in, a pointer cut to
  32 bits on the way out (shown on harmless libc calls -- never on a call that could crash);
* why ``cuMemAlloc`` is really ``cuMemAlloc_v2`` (cuda.h's ``#define``, and the driver's own answer);
* the hand-written lines as one *row* of a table plus one ``errcheck`` -- which is what rawcuda is;
* ``byref`` out-parameters, the ``void**`` kernelParams array built by hand, a vector add from the
  project's PTX checked against numpy, and everything freed in reverse order;
* last, the same declaration as rawcuda's table holds it, rawcuda's errcheck, and the cust code.

Nothing in this file imports rawcuda before the last step, and no driver call here goes through it.
(The shared frame ``tutorials/_tutorial.py`` -- step numbering, ``--step``, the exit statuses -- imports
rawcuda to recognise its no-GPU errors; importing rawcuda touches no driver.) The no-GPU exit is this
file's own: no libcuda, the toolkit's stub, or no device -> one ``skipped:`` line and status 77.

``$RAWCUDA_LIBCUDA``, when set, names the file to open instead of the soname (rawcuda's own override).
The CPU tests point it at ``tests/fakecuda/fakehost.c``, a look-alike whose "device" is the host.

Run:  python tutorials/00_raw_ctypes.py [--step]
"""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint, c_uint64, c_void_p
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from _tutorial import EXIT_NO_GPU, Tutorial, TutorialCheckError, run

ROOT = Path(__file__).resolve().parent.parent
PTX_FILE = ROOT / "rawcuda" / "kernels" / "vector_add.ptx"  # a file of the checkout: reading it imports nothing
CUDA_H = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"

SONAME = "libcuda.so.1"
OVERRIDE_ENV = "RAWCUDA_LIBCUDA"

# The CUresult codes this tutorial meets (cuda.h, enum cudaError_enum).
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
NO_GPU_CODES = {CUDA_ERROR_STUB_LIBRARY: "the toolkit's stub libcuda", CUDA_ERROR_NO_DEVICE: "no CUDA device"}
CU_GET_PROC_ADDRESS_DEFAULT = 0  # cuGetProcAddress flags: the default search
CUDA_3_1 = 3010  # the last CUDA whose cuMemAlloc took 32-bit sizes and pointers

N = (1 << 20) + 3  # not a multiple of 4 or of 256: the kernel's scalar tail and a partial last block both run
BLOCK = 256  # threads per block (a multiple of the 32-thread warp)
FLOAT_BYTES = 4
NAME_BYTES = 256  # buffer for cuDeviceGetName
BAD_ORDINAL = 99  # a device this machine does not have
ABSURD_BYTES = 1 << 40  # 1 TiB: more than any GPU has
TOO_BIG_FOR_INT = (1 << 32) + 5  # 4 GiB + 5: the size a 32-bit int cannot hold
LIBC_BUFFER_BYTES = 16
LOW_32_BITS = 0xFFFFFFFF
VERSION_MAJOR, VERSION_MINOR = 1000, 10  # CUDA versions are major * 1000 + minor * 10: 13000 is 13.0

# ---- C types, spelled in ctypes (what cuda.h's typedefs are on 64-bit Linux) ----------------------------
CUresult = c_int  # typedef enum cudaError_enum CUresult: an enum is a 4-byte int
CUdevice = c_int  # typedef int CUdevice
CUdeviceptr = c_uint64  # typedef unsigned long long CUdeviceptr: a number, never dereferenced by the host
CUcontext = CUmodule = CUfunction = CUstream = c_void_p  # typedef struct CUctx_st *CUcontext ...: handles

#: Every symbol declare() gives types to -- the symbols libcuda exports, not always cuda.h's names.
SYMBOLS = (
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuGetProcAddress_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
)


def declare(lib: Any) -> None:
    """The hand-written half of the glue: for each function, what it returns and what it takes.

    ``lib.cuX`` is created on first access and cached by the CDLL, so these settings stick to it.
    """
    # CUresult cuInit(unsigned int Flags)
    lib.cuInit.restype = CUresult
    lib.cuInit.argtypes = [c_uint]
    # CUresult cuDriverGetVersion(int *driverVersion)
    lib.cuDriverGetVersion.restype = CUresult
    lib.cuDriverGetVersion.argtypes = [POINTER(c_int)]
    # CUresult cuGetErrorName(CUresult error, const char **pStr) -- *pStr: a static string the driver owns
    lib.cuGetErrorName.restype = CUresult
    lib.cuGetErrorName.argtypes = [CUresult, POINTER(c_char_p)]
    # CUresult cuDeviceGetCount(int *count)
    lib.cuDeviceGetCount.restype = CUresult
    lib.cuDeviceGetCount.argtypes = [POINTER(c_int)]
    # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    lib.cuDeviceGet.restype = CUresult
    lib.cuDeviceGet.argtypes = [POINTER(CUdevice), c_int]
    # CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
    lib.cuDeviceGetName.restype = CUresult
    lib.cuDeviceGetName.argtypes = [c_char_p, c_int, CUdevice]
    # CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    #                           CUdriverProcAddressQueryResult *symbolStatus)       (#define'd to _v2)
    lib.cuGetProcAddress_v2.restype = CUresult
    lib.cuGetProcAddress_v2.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
    # CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
    lib.cuDevicePrimaryCtxRetain.restype = CUresult
    lib.cuDevicePrimaryCtxRetain.argtypes = [POINTER(CUcontext), CUdevice]
    # CUresult cuDevicePrimaryCtxRelease(CUdevice dev)                                (#define'd to _v2)
    lib.cuDevicePrimaryCtxRelease_v2.restype = CUresult
    lib.cuDevicePrimaryCtxRelease_v2.argtypes = [CUdevice]
    # CUresult cuCtxSetCurrent(CUcontext ctx)
    lib.cuCtxSetCurrent.restype = CUresult
    lib.cuCtxSetCurrent.argtypes = [CUcontext]
    # CUresult cuCtxSynchronize(void)
    lib.cuCtxSynchronize.restype = CUresult
    lib.cuCtxSynchronize.argtypes = []
    # CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)                        (#define'd to _v2)
    lib.cuMemAlloc_v2.restype = CUresult
    lib.cuMemAlloc_v2.argtypes = [POINTER(CUdeviceptr), c_size_t]
    # CUresult cuMemFree(CUdeviceptr dptr)                                           (#define'd to _v2)
    lib.cuMemFree_v2.restype = CUresult
    lib.cuMemFree_v2.argtypes = [CUdeviceptr]
    # CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)   (_v2)
    lib.cuMemcpyHtoD_v2.restype = CUresult
    lib.cuMemcpyHtoD_v2.argtypes = [CUdeviceptr, c_void_p, c_size_t]
    # CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)         (_v2)
    lib.cuMemcpyDtoH_v2.restype = CUresult
    lib.cuMemcpyDtoH_v2.argtypes = [c_void_p, CUdeviceptr, c_size_t]
    # CUresult cuModuleLoadData(CUmodule *module, const void *image)
    lib.cuModuleLoadData.restype = CUresult
    lib.cuModuleLoadData.argtypes = [POINTER(CUmodule), c_void_p]
    # CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
    lib.cuModuleGetFunction.restype = CUresult
    lib.cuModuleGetFunction.argtypes = [POINTER(CUfunction), CUmodule, c_char_p]
    # CUresult cuModuleUnload(CUmodule hmod)
    lib.cuModuleUnload.restype = CUresult
    lib.cuModuleUnload.argtypes = [CUmodule]
    # CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, gridDimY, gridDimZ,
    #                         unsigned int blockDimX, blockDimY, blockDimZ, unsigned int sharedMemBytes,
    #                         CUstream hStream, void **kernelParams, void **extra)
    lib.cuLaunchKernel.restype = CUresult
    lib.cuLaunchKernel.argtypes = [
        CUfunction,
        c_uint,  # gridDimX
        c_uint,  # gridDimY
        c_uint,  # gridDimZ
        c_uint,  # blockDimX
        c_uint,  # blockDimY
        c_uint,  # blockDimZ
        c_uint,  # sharedMemBytes
        CUstream,
        POINTER(c_void_p),  # void **kernelParams
        POINTER(c_void_p),  # void **extra
    ]


#: The same declaration as data: prototype, exported symbol, restype, argtypes. A list of these is a table.
CU_MEM_ALLOC_ROW = (
    "CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)",
    "cuMemAlloc_v2",
    CUresult,
    (POINTER(CUdeviceptr), c_size_t),
)


class DriverError(RuntimeError):
    """A non-zero CUresult, with its number and the driver's name for it."""

    def __init__(self, code: int, name: str, call: str) -> None:
        self.code, self.name, self.call = code, name, call
        super().__init__(f"{call} returned {code} ({name})")


def error_name(lib: Any, code: int) -> str:
    """cuGetErrorName: the driver's name for a code (an out-parameter: a const char * it owns)."""
    text = c_char_p()
    if lib.cuGetErrorName(code, byref(text)) != CUDA_SUCCESS or text.value is None:
        return "an unknown code"
    return text.value.decode()


def make_errcheck(lib: Any) -> Any:
    """One errcheck for every function: ctypes calls it with each result; a non-zero one raises."""

    def errcheck(result: int, func: Any, args: tuple[Any, ...]) -> int:
        if result != CUDA_SUCCESS:
            raise DriverError(result, error_name(lib, result), func.__name__)
        return result

    return errcheck


def bind(lib: Any, row: tuple[str, str, Any, tuple[Any, ...]], errcheck: Any) -> Any:
    """A function for one row: a *fresh* pointer to the symbol (lib[...] is not cached), typed and checked."""
    _prototype, symbol, restype, argtypes = row
    fn = lib[symbol]
    fn.restype, fn.argtypes, fn.errcheck = restype, list(argtypes), errcheck
    return fn


def skip(why: str) -> NoReturn:
    """No usable GPU: the frame's one-line skip (tutorials/README.md, "Exit statuses"), status 77."""
    print(f"skipped: no usable GPU here ({why})")
    sys.exit(EXIT_NO_GPU)


def expect_failure(call: Callable[[], object], what: str) -> DriverError:
    """Run ``call``, which must fail: the DriverError its errcheck raised."""
    try:
        call()
    except DriverError as exc:
        return exc
    raise TutorialCheckError(f"{what} should have failed, and did not")


def mapped_file(requested: str) -> str:
    """The file the loader really opened for ``requested``, from this process's memory map (Linux)."""
    stem = Path(requested).name.split(".so")[0]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if Path(path).name.startswith(stem + "."):
                    return path
    except OSError:
        pass
    return "(not known on this system)"


def header_lines(pattern: str, fallback: str) -> str:
    """The lines of cuda.h matching ``pattern`` -- or, without a toolkit, what CUDA 13.0's cuda.h says."""
    if CUDA_H.is_file():
        found = [line.strip() for line in CUDA_H.read_text(errors="replace").splitlines() if re.search(pattern, line)]
        if found:
            return "\n".join(f"{CUDA_H}: {line}" for line in found)
    return f"(no cuda.h at {CUDA_H}; CUDA 13.0's reads:) {fallback}"


def main(t: Tutorial) -> None:
    t.step(f"dlopen the driver by its soname: ctypes.CDLL({SONAME!r})")
    requested = os.environ.get(OVERRIDE_ENV) or SONAME
    try:
        lib = ctypes.CDLL(requested)
    except OSError as exc:
        skip(f"OSError: {str(exc).splitlines()[0]}")
    t.say(
        f"opened {requested!r} -> {mapped_file(requested)}\n"
        f"Why {SONAME} and not libcuda.so? The driver installs libcuda.so.<version>, and the loader finds it by\n"
        "its soname, libcuda.so.1. The bare libcuda.so is a name for *linking* (-lcuda); on a machine with\n"
        "only the toolkit, the file of that name is the toolkit's stub (lib64/stubs/libcuda.so), whose every\n"
        "function returns CUDA_ERROR_STUB_LIBRARY (34). Nothing is declared yet: ctypes knows only names."
    )

    t.step("a bare call before any declaration: cuInit(0)")
    result = lib.cuInit(0)
    t.term("CUresult")
    t.say(
        f"lib.cuInit(0) -> {result!r} (a Python int: the CUresult; 0 is CUDA_SUCCESS)\n"
        "It works undeclared only because ctypes' guesses happen to be right here: with no argtypes every\n"
        "Python int is passed as a C int, and with no restype the result is read as a C int. cuInit takes an\n"
        "unsigned int and returns an enum (4 bytes): both guesses fit. For most functions they do not."
    )
    if result in NO_GPU_CODES:
        skip(f"cuInit returned {result}: {NO_GPU_CODES[result]}")
    t.check(result == CUDA_SUCCESS, "cuInit(0) returned 0")

    t.step("declare the functions by hand: restype (what comes back) and argtypes (what goes in)")
    declare(lib)
    body = inspect.getsource(declare).split('"""')[-1].rstrip()
    t.say(f"def declare(lib):{body}")
    t.say(
        "Out-parameters are pointers: `byref(x)` passes the address of the ctypes object x, and the driver\n"
        "writes the answer into it. Handles (CUcontext, CUmodule ...) are opaque pointers: c_void_p. Device\n"
        "addresses (CUdeviceptr) are 64-bit *numbers*: c_uint64, never c_void_p (whose 0 reads back as None)."
    )

    t.step("call them, and read each CUresult by hand")
    version, count, dev = c_int(), c_int(), CUdevice()
    name = ctypes.create_string_buffer(NAME_BYTES)
    results = {
        "cuDriverGetVersion(&version)": lib.cuDriverGetVersion(byref(version)),
        "cuDeviceGetCount(&count)": lib.cuDeviceGetCount(byref(count)),
        "cuDeviceGet(&dev, 0)": lib.cuDeviceGet(byref(dev), 0),
        f"cuDeviceGetName(name, {NAME_BYTES}, dev)": lib.cuDeviceGetName(name, NAME_BYTES, dev),
    }
    t.say("\n".join(f"{call:<36} -> {rc}" for call, rc in results.items()))
    if results["cuDeviceGetCount(&count)"] == CUDA_SUCCESS and count.value < 1:
        skip("the driver reports no CUDA device")
    t.check(all(rc == CUDA_SUCCESS for rc in results.values()), "every call returned 0 (CUDA_SUCCESS)")
    t.say(
        f"driver supports CUDA {version.value // VERSION_MAJOR}.{version.value % VERSION_MAJOR // VERSION_MINOR} "
        f"({version.value}); "
        f"{count.value} device(s); device 0 is {name.value.decode()!r}"
    )

    t.step(f"a failure is just a number: cuDeviceGet(&dev, {BAD_ORDINAL}), named with cuGetErrorName")
    bad = CUdevice()
    failed = lib.cuDeviceGet(byref(bad), BAD_ORDINAL)
    failed_name = error_name(lib, failed)
    t.say(
        f"cuDeviceGet(&dev, {BAD_ORDINAL}) -> {failed}; cuGetErrorName({failed}, &str) -> {failed_name!r}\n"
        "Nothing was raised: ignore the integer and the program carries on with a garbage device. The seed's\n"
        "case 4 is about exactly this -- the codes must become errors somewhere; a later step makes them."
    )
    t.check(
        failed == CUDA_ERROR_INVALID_DEVICE and failed_name == "CUDA_ERROR_INVALID_DEVICE",
        f"code {CUDA_ERROR_INVALID_DEVICE}, CUDA_ERROR_INVALID_DEVICE",
    )

    t.step("what goes wrong WITHOUT argtypes and restype (shown on harmless libc calls)")
    libc = ctypes.CDLL(None)  # the C library already in this process
    bare_abs = libc["abs"]  # int abs(int): lib[...] gives a fresh, undeclared function pointer
    try:
        outcome = f"-> {bare_abs(TOO_BIG_FOR_INT)}"
    except (ctypes.ArgumentError, OverflowError) as exc:
        outcome = f"refused: {type(exc).__name__}: {exc}"
    t.say(
        f"in:  undeclared abs({TOO_BIG_FOR_INT:#x}) {outcome}\n"
        "     With no argtypes a Python int travels as a 32-bit C int: on 64-bit Linux the high bits are\n"
        "     silently dropped (a 32-bit `long`, as on Windows, raises instead). Undeclared, cuMemAlloc_v2(&p,\n"
        "     4 GiB + 5) would hand the driver a size_t whose low half is 5 and whose high half is whatever\n"
        "     the CPU left there -- so this tutorial never makes that call."
    )
    t.check(outcome != f"-> {TOO_BIG_FOR_INT}", "an undeclared call does not pass a 33-bit int through intact")
    buf = ctypes.create_string_buffer(LIBC_BUFFER_BYTES)
    address = ctypes.addressof(buf)
    memset_int = libc["memset"]  # void *memset(void *s, int c, size_t n): returns s
    memset_int.argtypes = [c_void_p, c_int, c_size_t]  # arguments declared, restype left at its default
    memset_ptr = libc["memset"]
    memset_ptr.argtypes, memset_ptr.restype = [c_void_p, c_int, c_size_t], c_void_p
    as_int, as_ptr = memset_int(buf, 0, len(buf)), memset_ptr(buf, 0, len(buf))
    t.say(
        f"out: memset(buf at {address:#x}, 0, {len(buf)}) returns buf's address;\n"
        f"     restype left at c_int   -> {as_int} ({as_int & LOW_32_BITS:#x}: the low 32 bits, read as signed)\n"
        f"     restype = c_void_p      -> {as_ptr:#x}\n"
        "     A pointer read through the default restype is cut in half; using it would touch someone else's\n"
        "     memory. Driver functions return CUresult, so their pointers come back through out-parameters --\n"
        "     but NVRTC's nvrtcGetErrorString returns a const char *, and needs restype = c_char_p."
    )
    t.term("NVRTC")
    t.check(as_ptr == address and as_int == c_int(address).value, "c_void_p keeps the pointer; c_int cuts it")

    t.step("why cuMemAlloc is really cuMemAlloc_v2")
    t.say(
        header_lines(r"#define cuMemAlloc\s", "#define cuMemAlloc  cuMemAlloc_v2")
        + "\n"
        + header_lines(
            r"cuMemAlloc\(CUdeviceptr_v1|typedef unsigned int CUdeviceptr_v1",
            "typedef unsigned int CUdeviceptr_v1; CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)",
        )
    )
    exports = {symbol: hasattr(lib, symbol) for symbol in ("cuMemAlloc", "cuMemAlloc_v2")}
    listed = ", ".join(f"{symbol}: {'yes' if found else 'no'}" for symbol, found in exports.items())
    t.say(
        f"this libcuda exports -- {listed}\n"
        "CUDA 3.2 widened device pointers and sizes to 64 bits. The old functions kept the plain names (so old\n"
        "binaries still link) and the new ones got _v2; cuda.h #defines the plain name to the new one, so C\n"
        "code never notices. ctypes never reads cuda.h: lib.cuMemAlloc is the 32-bit-era symbol. A binding\n"
        "must look up the symbol the header maps the name to -- or ask the driver, as the CUDA runtime does:"
    )
    t.check(exports["cuMemAlloc_v2"], "libcuda exports cuMemAlloc_v2")
    pfn, status = c_void_p(), c_int()
    lib.cuGetProcAddress_v2(b"cuMemAlloc", byref(pfn), version.value, CU_GET_PROC_ADDRESS_DEFAULT, byref(status))
    v2_address = ctypes.cast(lib.cuMemAlloc_v2, c_void_p).value
    old = c_void_p()
    old_rc = lib.cuGetProcAddress_v2(b"cuMemAlloc", byref(old), CUDA_3_1, CU_GET_PROC_ADDRESS_DEFAULT, byref(status))
    plain_address = ctypes.cast(lib.cuMemAlloc, c_void_p).value if exports["cuMemAlloc"] else None
    t.say(
        f'cuGetProcAddress("cuMemAlloc", &pfn, {version.value}, DEFAULT, &status) -> {pfn.value or 0:#x}; '
        f"dlsym(cuMemAlloc_v2) = {v2_address or 0:#x}\n"
        f'cuGetProcAddress("cuMemAlloc", &pfn, {CUDA_3_1} = CUDA 3.1, ...) -> result {old_rc}, {old.value or 0:#x}'
        f"{'' if plain_address is None else f'; dlsym(cuMemAlloc) = {plain_address:#x}'}\n"
        "(tutorial 12 and rawcuda/checked/procaddress.py follow this road further)"
    )
    t.check(pfn.value == v2_address, "asked by name and version, the driver answers with cuMemAlloc_v2")

    t.step("the hand-written lines as a table row, and one errcheck for every function")
    errcheck = make_errcheck(lib)
    t.say(
        f"CU_MEM_ALLOC_ROW = {CU_MEM_ALLOC_ROW!r}\n"
        "(64-bit Linux has one 8-byte unsigned type under three names: ctypes shows c_uint64 and c_size_t as\n"
        "c_ulong, so POINTER(CUdeviceptr) prints as LP_c_ulong)\n\n"
        + inspect.getsource(make_errcheck)
        + "\n"
        + inspect.getsource(bind).rstrip()
    )
    cu_mem_alloc = bind(lib, CU_MEM_ALLOC_ROW, errcheck)
    t.check(
        cu_mem_alloc.argtypes == lib.cuMemAlloc_v2.argtypes and cu_mem_alloc.restype is lib.cuMemAlloc_v2.restype,
        "the row binds exactly what step 3 declared by hand",
    )
    for symbol in SYMBOLS:
        if symbol != "cuGetErrorName":  # errcheck itself calls it: a failure there must not recurse
            getattr(lib, symbol).errcheck = errcheck
    raised = expect_failure(lambda: lib.cuDeviceGet(byref(bad), BAD_ORDINAL), "cuDeviceGet of a missing device")
    t.say(f"the same bad call again: lib.cuDeviceGet(&dev, {BAD_ORDINAL}) raises DriverError: {raised}")
    t.check(raised.code == CUDA_ERROR_INVALID_DEVICE, "from now on a failing call raises instead of returning")
    t.say(
        "That is all a binding's core is: a table of such rows, bound once each, and one errcheck. rawcuda's\n"
        "table (rawcuda/ffi/cuda/) holds a row like this for every function it calls, proven against cuda.h;\n"
        "its errcheck builds richer exceptions. The last step shows both."
    )

    t.step("a context: retain the device's primary context and make it current")
    ctx = CUcontext()
    lib.cuDevicePrimaryCtxRetain(byref(ctx), dev)
    lib.cuCtxSetCurrent(ctx)
    t.term("context")
    t.term("primary context")
    t.term("current context")
    create_exports = [
        s for s in ("cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4") if hasattr(lib, s)
    ]
    t.say(
        f"primary context {ctx.value or 0:#x}, current on this thread. Every allocation, module and launch\n"
        "below belongs to the current context. The primary context is the one per device that the CUDA\n"
        "runtime, CuPy and torch share (cust's Context::new retains it too). Creating a private one is\n"
        "cuCtxCreate -- which in CUDA 13 is yet another rename:\n"
        + header_lines(
            r"#define cuCtxCreate\s|CUresult CUDAAPI cuCtxCreate(_v\d)?\(",
            "#define cuCtxCreate cuCtxCreate_v4 / cuCtxCreate(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, "
            "unsigned int flags, CUdevice dev)",
        )
        + f"\nthis libcuda exports: {', '.join(create_exports) or 'none of them'}\n"
        "The prototype the header's users see takes a CUctxCreateParams * (NULL: no extras) before the flags;\n"
        "the older ones are kept at the end of cuda.h, under #if defined(__CUDA_API_VERSION_INTERNAL), for\n"
        "the driver's own build. An old tutorial's lib.cuCtxCreate(&ctx, flags, dev) calls the plain,\n"
        "3-argument symbol. Bind that plain symbol but pass the CUDA 13 argument list (&ctx, NULL, flags,\n"
        "dev), and NULL arrives as the flags and the flags as the device. Tutorial 01 binds cuCtxCreate_v4."
    )

    t.step(f"device memory: three buffers of {N:,} float32 with cuMemAlloc_v2(&dptr, bytes)")
    nbytes = N * FLOAT_BYTES
    d_a, d_b, d_c = CUdeviceptr(), CUdeviceptr(), CUdeviceptr()
    for dptr in (d_a, d_b, d_c):
        lib.cuMemAlloc_v2(byref(dptr), nbytes)  # the driver writes the new address into dptr
    t.say(f"a at {d_a.value:#x}, b at {d_b.value:#x}, c at {d_c.value:#x} ({nbytes:,} bytes each)")
    t.say(
        f"had cuMemFree_v2 been left undeclared, cuMemFree_v2(a) would have received "
        f"{c_int(d_a.value).value & LOW_32_BITS:#x}\n(the low 32 bits of {d_a.value:#x}): freeing the wrong address"
    )
    huge = CUdeviceptr()
    oom = expect_failure(lambda: lib.cuMemAlloc_v2(byref(huge), ABSURD_BYTES), "allocating 1 TiB")
    t.say(f"cuMemAlloc_v2(&p, 1 TiB) -> {oom.code} ({oom.name}): an ordinary, recoverable error")
    t.check(oom.code == CUDA_ERROR_OUT_OF_MEMORY, f"asking for 1 TiB fails with {CUDA_ERROR_OUT_OF_MEMORY}")

    t.step("copy a and b to the device; poison c with NaN, so a kernel that writes nothing cannot pass")
    t.term("kernel")
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    poison = np.full(N, np.nan, dtype=np.float32)
    lib.cuMemcpyHtoD_v2(d_a, a.ctypes.data, nbytes)  # (device address, host address, bytes)
    lib.cuMemcpyHtoD_v2(d_b, b.ctypes.data, nbytes)
    lib.cuMemcpyHtoD_v2(d_c, poison.ctypes.data, nbytes)
    t.say(
        "a.ctypes.data is the numpy array's host address (an int; argtypes makes it a void *). These copies\n"
        "are synchronous: when cuMemcpyHtoD_v2 returns the data has been taken, and a may be reused."
    )

    t.step("load the PTX with cuModuleLoadData and find the kernel with cuModuleGetFunction")
    t.term("PTX")
    ptx = PTX_FILE.read_bytes() + b"\0"  # the driver reads PTX as a C string: it must end with a NUL
    entry = re.search(rb"\.entry vector_add\((.*?)\)", ptx, re.S)
    params_text = " ".join(entry.group(1).decode().split()) if entry else "(no .entry vector_add found)"
    t.say(f"{PTX_FILE.relative_to(ROOT)}: .entry vector_add({params_text})")
    module, kernel = CUmodule(), CUfunction()
    lib.cuModuleLoadData(byref(module), ptx)  # `ptx` (bytes) must stay alive during the call: it is a local
    lib.cuModuleGetFunction(byref(kernel), module, b"vector_add")
    t.say(
        f"module {module.value or 0:#x}, function {kernel.value or 0:#x}. The name is exactly 'vector_add' "
        'because the kernel is extern "C";\nPTX names its parameters by position only: four 8-byte values '
        "(c, a, b, n in kernels/vector_add.cu)."
    )
    t.check(entry is not None and entry.group(1).count(b".param .u64") == 4, "the PTX kernel takes four u64 values")

    t.step("kernelParams by hand: a void*[4], entry i pointing at argument i's value")
    n_arg = c_uint64(N)  # size_t n: 8 bytes, as the PTX says (.param .u64)
    args = [d_c, d_a, d_b, n_arg]  # vector_add(float *c, const float *a, const float *b, size_t n)
    kernel_params = (c_void_p * len(args))(*[ctypes.addressof(arg) for arg in args])
    t.say(
        "\n".join(
            f"kernelParams[{i}] = {kernel_params[i]:#x} -> {c_uint64.from_address(kernel_params[i]).value:#x}  ({what})"
            for i, what in enumerate(["&c: the address of the c_uint64 holding c", "&a", "&b", "&n"])
        )
    )
    t.say(
        "Who keeps what alive: the array holds bare integers, so it keeps nothing alive -- the list `args`\n"
        "keeps the four ctypes objects whose addresses it holds. Build it from temporaries,\n"
        "(c_void_p * 4)(addressof(c_uint64(x)), ...), and each temporary is freed as soon as addressof returns:\n"
        "the driver would read freed memory. The driver copies the values out while it queues the launch\n"
        "(C code passes addresses of local variables), so they must live until cuLaunchKernel returns."
    )

    t.step(f"cuLaunchKernel: grid x {BLOCK} threads, no dynamic shared memory, the legacy default stream")
    grid = (N + BLOCK - 1) // BLOCK
    lib.cuLaunchKernel(kernel, grid, 1, 1, BLOCK, 1, 1, 0, None, kernel_params, None)
    lib.cuCtxSynchronize()  # the launch is asynchronous: a fault in the kernel shows up here
    t.term("grid")
    t.term("block")
    t.term("shared memory")
    t.term("stream")
    t.term("legacy default stream")
    t.say(
        f"grid = ceil({N:,} / {BLOCK}) = {grid:,} blocks: one thread per element, as for a naive kernel. The\n"
        "shipped kernel (tutorial 01 shows it) loops grid-stride over float4s, so any grid covers any n."
    )

    t.step("copy c back and compare every element with numpy")
    c = np.empty(N, dtype=np.float32)
    lib.cuMemcpyDtoH_v2(c.ctypes.data, d_c, nbytes)  # (host address, device address, bytes)
    t.check(bool(np.array_equal(c, a + b)), f"all {N:,} sums equal numpy's a + b exactly")
    t.say(f"c[:3] = {c[:3]}")

    t.step("free everything in the reverse order of creation; the context last")
    lib.cuModuleUnload(module)
    for dptr in (d_c, d_b, d_a):
        lib.cuMemFree_v2(dptr)
    lib.cuCtxSetCurrent(None)
    lib.cuDevicePrimaryCtxRelease_v2(dev)
    t.say(
        "cuModuleUnload, cuMemFree_v2 x3, cuCtxSetCurrent(NULL), cuDevicePrimaryCtxRelease_v2 -- every result\n"
        "checked by the errcheck. Release the context first and the frees would name memory of a context\n"
        "that is gone: the seed's RAII warning, which rawcuda's Context.close() enforces (tutorials 02, 07)."
    )

    t.step("where rawcuda comes from: the same row in its table, its errcheck -- and the cust code")
    # The first import of rawcuda's own code in this file.
    from rawcuda import CudaError
    from rawcuda.checked import Namespace, cu
    from rawcuda.ffi.cuda import TABLE, memory

    row = TABLE["cuMemAlloc"]
    source = inspect.getsource(memory).splitlines()
    at = next(i for i, line in enumerate(source) if f'"{row.symbol}"' in line)
    start = max(i for i in range(at) if "decl(" in source[i])
    end = next(i for i in range(at, len(source)) if source[i].strip() == "),")
    t.say("rawcuda/ffi/cuda/memory.py:\n" + "\n".join(source[start : end + 1]))
    t.check(
        row.symbol == CU_MEM_ALLOC_ROW[1]
        and row.restype is CU_MEM_ALLOC_ROW[2]
        and [ctypes.sizeof(x) for x in row.argtypes] == [ctypes.sizeof(x) for x in CU_MEM_ALLOC_ROW[3]],
        "rawcuda's row binds the same symbol with the same types as ours",
    )
    bind_source = inspect.getsource(Namespace.bind).splitlines()
    first = next(i for i, line in enumerate(bind_source) if "def errcheck" in line)
    last = next(i for i, line in enumerate(bind_source) if "fn.errcheck = errcheck" in line)
    errcheck_source = textwrap.dedent("\n".join(bind_source[first : last + 1]))
    t.say(
        f"rawcuda/checked/binding.py, Namespace.bind: attached to each of the table's {len(TABLE)} rows when it is\n"
        f"first used:\n{errcheck_source}"
    )
    try:
        cu.cuDeviceGet(byref(bad), BAD_ORDINAL)
    except CudaError as exc:
        rawcuda_error = exc
    else:
        raise TutorialCheckError(f"rawcuda's cuDeviceGet({BAD_ORDINAL}) should have raised")
    t.say(f"cu.cuDeviceGet(&dev, {BAD_ORDINAL}) raises {type(rawcuda_error).__name__}:\n  {rawcuda_error}")
    t.check(rawcuda_error.code == CUDA_ERROR_INVALID_DEVICE, "rawcuda's errcheck raised for the same code")
    t.say(
        "cust, the seed's library, has the same two halves, generated instead of hand-written:\n"
        "  let d_a = DeviceBuffer::from_slice(&host_a)?;             // cuda_malloc + copy_from\n"
        "  let d_c = unsafe { DeviceBuffer::<f32>::uninitialized(n)? };\n"
        "cust::memory::cuda_malloc calls driver_sys::cuMemAlloc(&mut ptr, size).to_result()?: the row comes\n"
        "from bindgen over cuda.h (crate cust_raw), whose build script expands cuda.h's #defines with the C\n"
        "preprocessor so that the Rust name cuMemAlloc links to the symbol cuMemAlloc_v2; to_result() is the\n"
        "errcheck, a match from CUresult to CudaError (CudaError::OutOfMemory carries no sizes: the seed's\n"
        "OutOfMemory { requested, available } is the seed's own type). And launch!(f<<<grid, block, 0,\n"
        "stream>>>(c, a, b, n)) builds the same kernelParams array, `&arg as *const _ as *mut c_void` for each."
    )


if __name__ == "__main__":
    run(main, "Tutorial 00: libcuda through bare ctypes -- the glue written by hand")
