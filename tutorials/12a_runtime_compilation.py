"""Tutorial 12a -- compiling kernels while the program runs: NVRTC by hand, through rawcuda, and from Rust.

The seed article lists "dynamic kernel generation (JIT)" among the things you cannot do, because "Rust
cannot generate CUDA kernels at run time". That sentence mixes up two things:

* compiling *Rust source* into GPU code at run time -- the toolkit's run-time compilers take CUDA C++
  (NVRTC) or NVVM IR (libNVVM), not Rust. libNVVM is what Rust-to-PTX compilers target (Rust-CUDA's
  ``rustc_codegen_nvvm``), but they run inside rustc, ahead of time; numba's JIT feeds libNVVM at run
  time for Python. The limit is the kernel language, not compiling at run time;
* generating a *CUDA C++* kernel at run time and compiling it -- which any language can do, because the
  compiler is a library: NVRTC (libnvrtc), the runtime compilation library shipped with the toolkit.
  Hand it source text, get PTX back, load it with the driver.

Three ways, in order: NVRTC by hand through plain ctypes (argtypes, restype -- one function returns a
``const char *``, not a result code -- and each integer nvrtcResult checked); then ``rawcuda.extras.nvrtc``
(rawcuda/ffi/nvrtc.py declares the same functions, rawcuda/extras/nvrtc.py wraps them): templates and lowered
names, a kernel generated from data, a compile error with its log; then what Rust has (cust: nothing;
cudarc; or the same FFI by hand).

Tutorial 12b is the other run-time lookup: finding a *driver* function by name and CUDA version.

Run:  python tutorials/12a_runtime_compilation.py [--step]
"""

from __future__ import annotations

import ctypes
import re
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, DeviceBuffer, Module, NvrtcError
from rawcuda.extras import nvrtc
from rawcuda.ffi.results import NvrtcResult

N = 1_000_003
BLOCK = 256
RAW_SOURCE = r"""
extern "C" __global__ void affine(float *out, const float *x, float a, float b, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + b;
}
"""
RAW_NAME = "affine.cu"  # the file name NVRTC uses in its messages

SOURCE = r"""
// A C++ template: one source, one kernel per type it is instantiated with.
template <typename T>
__global__ void scale_add(T *out, const T *x, const T *y, T alpha, size_t n) {
    int unused_counter = 0;  // deliberately unused: the compile log will mention it
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = alpha * x[i] + y[i];
}
"""
# --fmad=false: keep alpha * x + y as two roundings (like numpy) instead of one fused multiply-add, so the
# results can be compared bit for bit.
OPTIONS = ("--std=c++17", "--fmad=false", "-lineinfo")


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def nvrtc_ok(t: Tutorial, code: int, call: str) -> None:
    """An nvrtcResult is a plain C int too: 0 is NVRTC_SUCCESS. NVRTC's codes are its own, not CUresult's."""
    name = NvrtcResult(code).name if code in NvrtcResult._value2member_map_ else "unknown"
    t.check(code == NvrtcResult.SUCCESS, f"{call} -> {code} (NVRTC_{name})")


def compile_by_hand(t: Tutorial, arch: str) -> bytes:
    """nvrtcCreateProgram, nvrtcCompileProgram, the log, the PTX, nvrtcDestroyProgram -- plain ctypes."""
    t.step("raw: NVRTC through plain ctypes -- create, compile, read the log and the PTX, destroy")
    # rawcuda's loader found the file (step 1); by hand this line is ctypes.CDLL("libnvrtc.so.13").
    libnvrtc = ctypes.CDLL(nvrtc.library_path())
    # const char *nvrtcGetErrorString(nvrtcResult result) -- returns a *pointer*: restype c_char_p. Left at
    # ctypes' default (c_int) the 64-bit address would be cut to 32 bits.
    nvrtcGetErrorString = libnvrtc.nvrtcGetErrorString
    nvrtcGetErrorString.argtypes, nvrtcGetErrorString.restype = [c_int], c_char_p
    # nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
    #                                const char * const *headers, const char * const *includeNames)
    nvrtcCreateProgram = libnvrtc.nvrtcCreateProgram
    nvrtcCreateProgram.argtypes = [POINTER(c_void_p), c_char_p, c_char_p, c_int, POINTER(c_char_p), POINTER(c_char_p)]
    nvrtcCreateProgram.restype = c_int
    # nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options)
    nvrtcCompileProgram = libnvrtc.nvrtcCompileProgram
    nvrtcCompileProgram.argtypes, nvrtcCompileProgram.restype = [c_void_p, c_int, POINTER(c_char_p)], c_int
    # nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet); ...Log(prog, char *log)
    nvrtcGetProgramLogSize = libnvrtc.nvrtcGetProgramLogSize
    nvrtcGetProgramLogSize.argtypes, nvrtcGetProgramLogSize.restype = [c_void_p, POINTER(c_size_t)], c_int
    nvrtcGetProgramLog = libnvrtc.nvrtcGetProgramLog
    nvrtcGetProgramLog.argtypes, nvrtcGetProgramLog.restype = [c_void_p, c_char_p], c_int
    # nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet); nvrtcGetPTX(prog, char *ptx)
    nvrtcGetPTXSize = libnvrtc.nvrtcGetPTXSize
    nvrtcGetPTXSize.argtypes, nvrtcGetPTXSize.restype = [c_void_p, POINTER(c_size_t)], c_int
    nvrtcGetPTX = libnvrtc.nvrtcGetPTX
    nvrtcGetPTX.argtypes, nvrtcGetPTX.restype = [c_void_p, c_char_p], c_int
    # nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) -- takes the handle's address, and NULLs it
    nvrtcDestroyProgram = libnvrtc.nvrtcDestroyProgram
    nvrtcDestroyProgram.argtypes, nvrtcDestroyProgram.restype = [POINTER(c_void_p)], c_int

    t.say(
        f"NVRTC_ERROR_COMPILATION is {NvrtcResult.ERROR_COMPILATION.value}: nvrtcGetErrorString says "
        f"{nvrtcGetErrorString(NvrtcResult.ERROR_COMPILATION).decode()!r}"
    )
    program = c_void_p()
    code = nvrtcCreateProgram(byref(program), RAW_SOURCE.encode(), RAW_NAME.encode(), 0, None, None)
    nvrtc_ok(t, code, f'nvrtcCreateProgram(&prog, src, "{RAW_NAME}", 0, NULL, NULL)')
    words = (f"--gpu-architecture={arch}", "--fmad=false")  # fmad off: a*x + b rounds twice, like numpy
    options = (c_char_p * len(words))(*[word.encode() for word in words])
    compiled = nvrtcCompileProgram(program, len(words), options)
    size = c_size_t()
    nvrtc_ok(t, nvrtcGetProgramLogSize(program, byref(size)), "nvrtcGetProgramLogSize(prog, &size)")
    log = ctypes.create_string_buffer(size.value)  # the size counts the terminating NUL
    nvrtc_ok(t, nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog(prog, log)")
    t.say(f"options {' '.join(words)}; log: {log.value.decode().strip() or '(empty)'}")
    nvrtc_ok(t, compiled, f"nvrtcCompileProgram(prog, {len(words)}, options)")
    nvrtc_ok(t, nvrtcGetPTXSize(program, byref(size)), "nvrtcGetPTXSize(prog, &size)")
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc_ok(t, nvrtcGetPTX(program, ptx), "nvrtcGetPTX(prog, ptx)")
    nvrtc_ok(t, nvrtcDestroyProgram(byref(program)), "nvrtcDestroyProgram(&prog)")
    text = ptx.value
    header = [line for line in text.decode().splitlines() if line.startswith((".version", ".target", ".visible"))]
    t.say(f"{len(text):,} bytes of PTX:\n" + "\n".join(header))
    t.check(b".entry affine(" in text, 'the PTX has the kernel, under its extern "C" name')
    return text


def run_by_hand_ptx(t: Tutorial, ptx: bytes) -> None:
    t.step("load the hand-compiled PTX (rawcuda's Module: cuModuleLoadDataEx) and check it against numpy")
    module = Module(ptx, name=RAW_NAME)
    rng = np.random.default_rng()
    x = rng.standard_normal(N, dtype=np.float32)
    a, b = np.float32(rng.standard_normal()), np.float32(rng.standard_normal())
    dx, dout = DeviceBuffer.from_array(x), DeviceBuffer.empty(N)
    dout.fill(np.float32(np.nan))  # poison
    module.function("affine").launch(grid_for(N), BLOCK, dout, dx, a, b, N)
    t.check(bool(np.array_equal(dout.to_array(), a * x + b)), f"all {N:,} results equal numpy's a * x + b exactly")
    for obj in (dx, dout, module):
        obj.close()


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel", "PTX", "NVRTC", "name mangling")
    dev = Device(0)  # first: without a GPU the tutorial stops here with "skipped"

    t.step("find NVRTC, the runtime compiler library")
    try:
        path = nvrtc.library_path()
    except nvrtc.NvrtcNotFoundError as exc:
        t.check(False, f"this tutorial needs libnvrtc: {exc}")
        return
    major, minor = nvrtc.version()
    archs = nvrtc.supported_archs()
    t.say(f"libnvrtc: {path}\nNVRTC {major}.{minor}; it compiles for compute_{archs[0]} .. compute_{archs[-1]}")
    arch = nvrtc.default_arch()
    t.say(
        f"this GPU is sm_{''.join(map(str, dev.compute_capability))}: rawcuda compiles for {arch} unless told otherwise"
    )
    run_by_hand_ptx(t, compile_by_hand(t, arch))

    t.step("rawcuda: nvrtc.compile -- a C++ template, two name expressions, options, the log")
    t.say(SOURCE.strip())
    expressions = ("scale_add<float>", "scale_add<double>")
    result = nvrtc.compile(SOURCE, name="scale_add.cu", options=OPTIONS, name_expressions=expressions)
    t.say(f"options: {' '.join(result.options)}")
    t.term("cubin")  # what NVRTC could have made instead of PTX: the check below says it did not
    t.say(
        "compile log (warnings show up even when compilation succeeds):\n  "
        + (result.log.replace("\n", "\n  ") if result.log else "(empty)")
    )
    t.check(len(result.ptx) > 0 and result.cubin is None, f"{len(result.ptx):,} bytes of PTX, no cubin for {arch}")

    t.step("rawcuda: C++ names -- the template instances' mangled symbols (nvrtcGetLoweredName)")
    for expression, lowered in result.lowered_names.items():
        t.say(f"{expression:20} -> {lowered}")
    entries = re.findall(rb"\.entry\s+(\w+)", result.ptx)
    t.check(
        sorted(e.decode() for e in entries) == sorted(result.lowered_names.values()),
        "the PTX's .entry names are exactly the lowered names",
    )

    t.step("rawcuda: load the PTX with the driver and launch each instance")
    module = Module(result.ptx, name="scale_add.cu")
    rng = np.random.default_rng()
    for expression, dtype in zip(expressions, (np.float32, np.float64), strict=True):
        x, y = rng.standard_normal(N).astype(dtype), rng.standard_normal(N).astype(dtype)
        alpha = dtype(rng.standard_normal())
        dx, dy, dout = DeviceBuffer.from_array(x), DeviceBuffer.from_array(y), DeviceBuffer.empty(N, dtype)
        dout.fill(dtype(np.nan))  # poison
        kernel = module.function(result.lowered_names[expression])
        kernel.launch(grid_for(N), BLOCK, dout, dx, dy, alpha, N)
        t.check(
            bool(np.array_equal(dout.to_array(), alpha * x + y)),
            f"{expression}: all {N:,} results equal numpy's alpha * x + y exactly",
        )
        for buf in (dx, dy, dout):
            buf.close()

    t.step("rawcuda: generate a kernel from data known only now")
    coefficients = [float(c) for c in rng.integers(-5, 6, size=5)]
    body = " + ".join(f"({c!r}f * p{k})" for k, c in enumerate(coefficients))
    powers = "".join(f"        float p{k} = p{k - 1} * v;\n" for k in range(1, len(coefficients)))
    generated = (
        f'extern "C" __global__ void poly(float *out, const float *x, size_t n) {{\n'
        f"    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {{\n        float v = x[i];\n        float p0 = 1.0f;\n{powers}"
        f"        out[i] = {body};\n    }}\n}}\n"
    )
    t.say(f"coefficients {coefficients} became this source:\n{generated.rstrip()}")
    poly = nvrtc.compile(generated, name="poly.cu", options=("--fmad=false",)).load()
    x = rng.standard_normal(N, dtype=np.float32)
    dx, dout = DeviceBuffer.from_array(x), DeviceBuffer.empty(N)
    dout.fill(np.float32(np.nan))
    poly.function("poly").launch(grid_for(N), BLOCK, dout, dx, N)
    expected, power = np.zeros_like(x), np.ones_like(x)
    for k, c in enumerate(coefficients):
        if k:
            power = power * x
        expected = expected + np.float32(c) * power  # the kernel's order of float32 operations
    t.check(bool(np.array_equal(dout.to_array(), expected)), "the generated polynomial kernel matches numpy")
    for obj in (dx, dout, poly, module):
        obj.close()

    t.step("rawcuda: a compile error -- the exception carries NVRTC's log")
    try:
        nvrtc.compile("__global__ void broken(float *out) {\n    out[0] = not_declared;\n}\n", name="broken.cu")
    except NvrtcError as exc:
        t.say(str(exc))
        t.check(
            exc.code == NvrtcResult.ERROR_COMPILATION and "broken.cu(2)" in exc.log,
            "NVRTC_ERROR_COMPILATION, and the log names the file and line",
        )
    else:
        t.check(False, "the broken source should not compile")

    the_rust_way(t)
    t.step("so: can a program generate kernels at run time?")
    t.say(
        "Yes -- in CUDA C++, from any language: the kernels above did not exist when this script started.\n"
        "What NVRTC does not do is compile other kernel languages. libNVVM, also in the toolkit, compiles\n"
        "NVVM IR to PTX at run time; Rust-to-PTX compilers (Rust-CUDA's rustc_codegen_nvvm, run ahead of\n"
        "time) and numba target it. So the limit is the kernel language: the seed's 'Rust cannot generate\n"
        "kernels at run time' is true only of kernels written in Rust. Rust code can generate CUDA C++\n"
        "text (or NVVM IR) and compile it through FFI while it runs, exactly as done here."
    )


def the_rust_way(t: Tutorial) -> None:
    t.step("Rust: cust has no NVRTC; cudarc wraps it; or declare it by hand (shown, not run)")
    t.say(
        "// with the cudarc crate (cudarc::nvrtc), then cust to load and launch:\n"
        "let ptx = cudarc::nvrtc::compile_ptx(source)?;      // nvrtcCreateProgram .. nvrtcGetPTX\n"
        "let module = cust::module::Module::from_ptx(ptx.to_src(), &[])?;\n"
        "\n"
        "// or by hand, exactly like the ctypes step above:\n"
        '#[link(name = "nvrtc")]\n'
        'extern "C" {\n'
        "    fn nvrtcCreateProgram(prog: *mut *mut c_void, src: *const c_char, name: *const c_char,\n"
        "                          num_headers: c_int, headers: *const *const c_char,\n"
        "                          include_names: *const *const c_char) -> c_int;\n"
        "    fn nvrtcCompileProgram(prog: *mut c_void, n: c_int, options: *const *const c_char) -> c_int;\n"
        "    fn nvrtcGetErrorString(result: c_int) -> *const c_char;   // a pointer, not a code\n"
        "}"
    )
    t.say(
        "Checked in Rust-CUDA (commit ac2674f, 2025-08-23): cust has no NVRTC module, and cust_raw's features\n"
        "are driver, runtime, cublas, cublaslt, cublasxt, cudnn, nvptx-compiler and nvvm -- no nvrtc. Two of\n"
        "those are run-time compilers too: nvvm binds libNVVM (NVVM IR -> PTX), nvptx-compiler the PTX\n"
        "Compiler API (PTX -> machine code). cudarc's nvrtc::compile_ptx returns a Ptx whose to_src() is\n"
        "the PTX text."
    )


if __name__ == "__main__":
    run(main, "Tutorial 12a: runtime compilation -- NVRTC by hand, through rawcuda, and from Rust")
