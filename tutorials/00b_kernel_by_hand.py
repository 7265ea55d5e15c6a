"""Tutorial 00b -- a kernel by hand: context, memory, PTX and a launch through bare ctypes, checked with numpy.

Tutorial 00a declared driver functions by hand and made their CUresults raise. This one uses the same bare
glue for the job a binding exists for -- run a kernel on the GPU and get its answer back:

* a context: the device's primary context, retained and made current (and cuCtxCreate's renames);
* three device buffers from ``cuMemAlloc_v2``, each address written into a ``byref`` out-parameter;
* copies in with ``cuMemcpyHtoD_v2``, the output poisoned with NaN first, so a kernel that writes nothing
  cannot pass;
* the project's PTX loaded with ``cuModuleLoadData``, the kernel found with ``cuModuleGetFunction``;
* ``kernelParams``, the ``void*[]`` array whose entry i points at argument i, built by hand -- and what
  must stay alive while the driver reads it;
* ``cuLaunchKernel``, then the result copied back and compared with numpy, every element;
* everything freed in the reverse order of creation, the context last.

Every driver call here is bare ctypes. ``cuInit`` comes first, undeclared (00a, step 2, says why that
works): without a GPU it is the only call made. ``declare()`` below writes ``restype`` and ``argtypes``
for 15 functions, those called after it (00a explains each piece); the C types, the errcheck and the
no-GPU exit come from ``tutorials/_handmade.py``, shared with 00a and as bare. Nothing in this file
imports rawcuda; the kernel is the project's ``rawcuda/kernels/vector_add.ptx``, read as a file. No
libcuda, the toolkit's stub, or no device -> one ``skipped:`` line and status 77; the line names this
tutorial's run recorded on a GPU (``tutorials/output/00b_kernel_by_hand.txt``).

``$RAWCUDA_LIBCUDA``, when set, names the file to open instead of the soname (rawcuda's own override).
The CPU tests point it at ``tests/fakecuda/fakehost.c``, a look-alike whose "device" is the host and whose
vector_add reads kernelParams as the GPU does.

Run:  python tutorials/00b_kernel_by_hand.py [--step]
"""

from __future__ import annotations

import ctypes
import re
from ctypes import POINTER, byref, c_char_p, c_int, c_longlong, c_size_t, c_uint, c_uint64, c_void_p
from pathlib import Path
from typing import Any

import numpy as np
from _handmade import (
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    NO_GPU_CODES,
    CUcontext,
    CUdevice,
    CUdeviceptr,
    CUfunction,
    CUmodule,
    CUresult,
    CUstream,
    expect_failure,
    header_lines,
    library_name,
    make_errcheck,
    mapped_file,
    skip,
)
from _tutorial import Tutorial, run

ROOT = Path(__file__).resolve().parent.parent
PTX_FILE = ROOT / "rawcuda" / "kernels" / "vector_add.ptx"  # a file of the checkout: reading it imports nothing

N = (1 << 20) + 3  # not a multiple of 4 or of 256: the kernel's scalar tail and a partial last block both run
BLOCK = 256  # threads per block (a multiple of the 32-thread warp)
FLOAT_BYTES = 4
DEVICE_ORDINAL = 0  # the first device
ABSURD_BYTES = 1 << 40  # 1 TiB: more than any GPU has

#: Every symbol declare() gives types to -- the symbols libcuda exports, not always cuda.h's names.
SYMBOLS = (
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
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
    """restype and argtypes for every function this tutorial calls after cuInit, as tutorial 00a writes them.

    ``lib.cuX`` is created on first access and cached by the CDLL, so these settings stick to it.
    """
    # CUresult cuGetErrorName(CUresult error, const char **pStr) -- *pStr: a static string the driver owns
    lib.cuGetErrorName.restype = CUresult
    lib.cuGetErrorName.argtypes = [CUresult, POINTER(c_char_p)]
    # CUresult cuDeviceGetCount(int *count)
    lib.cuDeviceGetCount.restype = CUresult
    lib.cuDeviceGetCount.argtypes = [POINTER(c_int)]
    # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    lib.cuDeviceGet.restype = CUresult
    lib.cuDeviceGet.argtypes = [POINTER(CUdevice), c_int]
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


def main(t: Tutorial) -> None:
    t.words("cust", "CUresult", "errcheck")
    t.step("open libcuda, declare what this file calls, and make every failing call raise")
    requested = library_name()  # SONAME, unless $RAWCUDA_LIBCUDA names another file (the CPU tests' fake)
    try:
        lib = ctypes.CDLL(requested)
    except OSError as exc:
        skip(f"OSError: {str(exc).splitlines()[0]}")
    result = lib.cuInit(0)  # first, and undeclared (00a, step 2): without a GPU, the only call this file makes
    if result in NO_GPU_CODES:
        skip(f"cuInit returned {result}: {NO_GPU_CODES[result]}")
    t.check(result == CUDA_SUCCESS, "cuInit(0) returned 0")
    declare(lib)
    errcheck = make_errcheck(lib)
    for symbol in SYMBOLS:
        if symbol != "cuGetErrorName":  # errcheck itself calls it: a failure there must not recurse
            getattr(lib, symbol).errcheck = errcheck
    count, dev = c_int(), CUdevice()
    lib.cuDeviceGetCount(byref(count))
    if count.value < 1:
        skip("the driver reports no CUDA device")
    lib.cuDeviceGet(byref(dev), DEVICE_ORDINAL)
    t.say(
        f"opened {requested!r} -> {mapped_file(requested)}; {count.value} device(s), using device {DEVICE_ORDINAL}\n"
        "cuInit ran undeclared, as in 00a's step 2 (an unsigned int in, a 4-byte enum out: ctypes' guesses\n"
        f"fit). declare() at the top of this file gives restype and argtypes to the {len(SYMBOLS)} functions called\n"
        "after it (00a explains each piece), and each gets the errcheck of tutorials/_handmade.py: from here\n"
        "on a non-zero CUresult raises DriverError, named by cuGetErrorName, instead of coming back."
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
    # What an undeclared call would pass for a: libc's llabs hands back what arrived (its magnitude).
    bare_llabs = ctypes.CDLL(None)["llabs"]  # long long llabs(long long): a fresh pointer, argtypes left out
    bare_llabs.restype = c_longlong  # the result declared, so what arrived comes back whole
    as_object, as_int = bare_llabs(d_a), bare_llabs(d_a.value)
    t.say(
        "what an undeclared call receives, shown on libc's llabs (long long llabs(long long) returns the\n"
        "magnitude of what arrived), with its restype declared and its argtypes left out, as cuMemFree_v2's\n"
        "would be without declare():\n"
        f"  llabs(a)       -> {as_object:#x}: a is a CUdeviceptr, a ctypes c_uint64 object; it brings its\n"
        "                    own C type, so all 64 bits arrive\n"
        f"  llabs(a.value) -> {as_int:#x}: a plain Python int; ctypes passes it as a C int, the low 32 bits\n"
        "Undeclared, cuMemFree_v2(a) would still free a; cuMemFree_v2(a.value) would free the wrong address\n"
        "(tutorial 00a, step 6: what an undeclared int argument loses). Declared, both pass the same 8 bytes."
    )
    t.check(as_object == d_a.value, "undeclared, a c_uint64 object arrives whole: llabs(a) is a's address")
    t.check(
        as_int == abs(c_int(d_a.value).value) != d_a.value,
        "undeclared, a plain int arrives as a C int, a's low 32 bits: llabs(a.value) is not a's address",
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
    t.term("name mangling")
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
    t.term("dynamic shared memory")
    grid = (N + BLOCK - 1) // BLOCK
    lib.cuLaunchKernel(kernel, grid, 1, 1, BLOCK, 1, 1, 0, None, kernel_params, None)
    lib.cuCtxSynchronize()  # the launch is asynchronous: a fault in the kernel shows up here
    t.term("grid")
    t.term("block")
    t.term("shared memory")
    t.term("stream")
    t.term("legacy default stream")
    t.term("grid-stride loop")
    t.term("float4")
    t.say(
        f"grid = ceil({N:,} / {BLOCK}) = {grid:,} blocks: one thread per element, as for a naive kernel. The\n"
        "shipped kernel (tutorial 01 shows it) loops grid-stride over float4s, so any grid covers any n.\n"
        "cust's unsafe { launch!(f<<<grid, block, 0, stream>>>(c.as_device_ptr(), a.as_device_ptr(),\n"
        "b.as_device_ptr(), n)) } builds the same kernelParams array as the step before, `&arg as *const _ as\n"
        "*mut c_void` for each (an unsafe block: the macro calls an unsafe fn)."
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
        "that is gone: the seed's RAII warning, which rawcuda's Context.close() enforces (tutorials 02, 07b)."
    )


if __name__ == "__main__":
    run(main, "Tutorial 00b: a kernel through bare ctypes -- context, memory and launch by hand")
