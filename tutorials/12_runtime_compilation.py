"""Tutorial 12 -- compiling kernels while the program runs (NVRTC), and finding driver functions by version.

The seed article lists "dynamic kernel generation (JIT)" among the things you cannot do, because "Rust
cannot generate CUDA kernels at run time". That sentence mixes up two things:

* compiling *Rust source* into GPU code at run time -- the toolkit's run-time compilers take CUDA C++
  (NVRTC) or NVVM IR (libNVVM), not Rust. libNVVM is what Rust-to-PTX compilers target (Rust-CUDA's
  ``rustc_codegen_nvvm``), but they run inside rustc, ahead of time; numba's JIT feeds libNVVM at run
  time for Python. The limit is the kernel language, not compiling at run time;
* generating a *CUDA C++* kernel at run time and compiling it -- which any language can do, because the
  compiler is a library: NVRTC (libnvrtc), the runtime compilation library shipped with the toolkit.
  Hand it source text, get PTX back, load it with the driver. Rust calls it through FFI exactly as this
  tutorial calls it through ctypes (rawcuda/ffi/nvrtc.py declares it by hand, like the driver).

The last step looks at another run-time lookup: cuGetProcAddress, which finds a driver function by name
*and CUDA version* instead of by exported symbol.

Run:  python tutorials/12_runtime_compilation.py [--step]
"""

from __future__ import annotations

import re

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, DeviceBuffer, Module, NvrtcError, nvrtc
from rawcuda.checked.procaddress import describe, driver_function_name, proc_address, table_address
from rawcuda.ffi.results import NvrtcResult

N = 1_000_003
BLOCK = 256
CUDA_3_1 = 3010  # a CUDA version before 64-bit sizes (cuMemAlloc_v2 arrived in 3.2)

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


def main(t: Tutorial) -> None:
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

    t.step("compile a source string: nvrtcCreateProgram, nvrtcAddNameExpression, nvrtcCompileProgram")
    t.say(SOURCE.strip())
    expressions = ("scale_add<float>", "scale_add<double>")
    result = nvrtc.compile(SOURCE, name="scale_add.cu", options=OPTIONS, name_expressions=expressions)
    t.say(f"options: {' '.join(result.options)}")
    t.say(
        "compile log (warnings show up even when compilation succeeds):\n  "
        + (result.log.replace("\n", "\n  ") if result.log else "(empty)")
    )
    t.check(len(result.ptx) > 0 and result.cubin is None, f"{len(result.ptx):,} bytes of PTX, no cubin for {arch}")

    t.step("C++ names: the template instances' mangled symbols (nvrtcGetLoweredName)")
    for expression, lowered in result.lowered_names.items():
        t.say(f"{expression:20} -> {lowered}")
    entries = re.findall(rb"\.entry\s+(\w+)", result.ptx)
    t.check(
        sorted(e.decode() for e in entries) == sorted(result.lowered_names.values()),
        "the PTX's .entry names are exactly the lowered names",
    )

    t.step("load the PTX with the driver and launch each instance")
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

    t.step("generate a kernel from data known only now")
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

    t.step("a compile error: the exception carries NVRTC's log")
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

    t.step("so: can a program generate kernels at run time?")
    t.say(
        "Yes -- in CUDA C++, from any language: the kernel above did not exist when this script started.\n"
        "What NVRTC does not do is compile other kernel languages. libNVVM, also in the toolkit, compiles\n"
        "NVVM IR to PTX at run time; Rust-to-PTX compilers (Rust-CUDA's rustc_codegen_nvvm, run ahead of\n"
        "time) and numba target it. So the limit is the kernel language: the seed's 'Rust cannot generate\n"
        "kernels at run time' is true only of kernels written in Rust. Rust code can generate CUDA C++\n"
        "text (or NVVM IR) and compile it through FFI while it runs, exactly as done here."
    )

    t.step("cuGetProcAddress: a driver function by name and CUDA version, not by symbol")
    for name in ("cuMemAlloc", "cuCtxCreate", "cuLaunchKernel"):
        got, bound = proc_address(name), table_address(name)
        t.say(f"{name:16} cuGetProcAddress -> {describe(got)};  the table's dlsym -> {describe(bound)}")
        t.check(got == bound, f"{name}: the driver's answer for its own CUDA version is the symbol the table binds")
    old = proc_address("cuMemAlloc", CUDA_3_1)
    t.say(f"cuMemAlloc as CUDA 3.1 defined it -> {describe(old)} (32-bit sizes: the ABI of old binaries)")
    t.check(old != proc_address("cuMemAlloc"), "an old CUDA version gets the old entry point")
    by_macro_name = proc_address("cuGraphInstantiate")
    target = driver_function_name("cuGraphInstantiate")
    t.say(
        f"cuda.h: #define cuGraphInstantiate {target} -- a different function, not a newer version.\n"
        f"The driver knows functions, not macros: 'cuGraphInstantiate' -> {describe(by_macro_name)};\n"
        f"'{target}' -> {describe(proc_address(target))}"
    )
    t.check(
        proc_address(target) == table_address("cuGraphInstantiate"),
        f"asking for {target} finds what the table binds for cuGraphInstantiate",
    )


if __name__ == "__main__":
    run(main, "Tutorial 12: runtime compilation with NVRTC, and cuGetProcAddress")
