"""Tutorial 04a -- the build pipeline: from kernels/*.cu to PTX, the manifest, and PTX ISA vs the driver.

The seed article compiles kernels in Rust's ``build.rs`` (``nvcc --ptx``) and embeds the PTX with
``include_str!``. The same pipeline three ways:

1. by hand: one ``nvcc --ptx`` command line, then the PTX loaded through plain ctypes -- ``cuModuleLoadData``
   and ``cuModuleGetFunction`` declared with their argtypes and restype, each integer CUresult checked;
2. rawcuda: ``build.py`` compiles every kernel with a content-hash cache and writes a manifest of each
   kernel's parameters; the PTX ships inside the package, so a machine without nvcc can still load it (the
   driver compiles PTX to machine code), and ``Module`` refuses PTX newer than the driver before loading;
3. cust: a ``build.rs`` that runs nvcc (or ``cuda_builder`` for kernels written in Rust), ``include_str!``,
   ``Module::from_ptx`` -- and cust_raw's own build script, which generates the driver bindings.

Where the hand-written lines live inside rawcuda -- the three layers -- is drawn on the way.

Run:  python tutorials/04a_build_pipeline.py [--step]
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p
from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.checked import cu, raise_for
from rawcuda.core import ptx
from rawcuda.core.module import max_ptx_isa
from rawcuda.ffi.attributes import FunctionAttribute
from rawcuda.ffi.cuda import TABLE
from rawcuda.ffi.results import Result, c_name
from rawcuda.tools import kernelbuild
from rawcuda.tools.nvcc import BuildOptions

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "saxpy"  # the kernel followed through the pipeline: y = a*x + y
N = 100_003
BLOCK = 256
NVCC_TIMEOUT_S = 120
ARCH_DIGITS = 10  # cuFuncGetAttribute answers architectures as major * 10 + minor: 80 for .target sm_80
LAYERS = """\
by hand (step 3)                     the rawcuda layer that does it (each imports only the layers below)
-----------------------------------  ------------------------------------------------------------------
module, function = c_void_p(), ...   core     rawcuda/core/module.py, function.py, devicebuffer.py, ...:
(the whole step, and the launch)              Module(ptx).function("saxpy").launch(...): objects with
                                              close()/with, lifetimes, arguments checked against the PTX
code = cuModuleGetFunction(...)      layer 1  rawcuda/checked/binding.py: cu.cuModuleGetFunction binds
expect_success(t, code, ...)                  the row on first use; a non-zero CUresult raises
f = libcuda.cuModuleGetFunction      layer 0  rawcuda/ffi/cuda/module.py: the Decl row (C prototype,
f.argtypes = [POINTER(c_void_p), ..]          exported symbol, argtypes); ffi/types.py: the C types
ctypes.CDLL("libcuda.so.1")                   rawcuda/ffi/library.py: finds and opens libcuda
-----------------------------------  ------------------------------------------------------------------
                                     libcuda.so.1, the driver (rawcuda/tools/headercheck.py proves layer 0
                                     against cuda.h: prototypes, type sizes, struct offsets given a C compiler)"""


def expect_success(t: Tutorial, code: int, call: str) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here."""
    t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel", "register", "CUresult", "PTX", "JIT", "name mangling", "nvcc")
    t.step("which nvcc? ($NVCC_PATH, then PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin)")
    try:
        compiler = kernelbuild.probe()
        t.say(f"{compiler.path}: release {compiler.release}")
    except kernelbuild.KernelBuildError as exc:
        compiler = None
        t.say(f"no nvcc here ({str(exc).splitlines()[0]}); the shipped PTX is used instead")

    scratch = Path(tempfile.mkdtemp(prefix="rawcuda-tutorial-"))
    try:
        ptx_file = compile_by_hand(t, compiler, scratch)
        load_by_hand(t, ptx_file)
        t.step("the same lines inside rawcuda: three layers, one folder each")
        t.say(LAYERS)
        row = TABLE["cuModuleGetFunction"]
        names = ", ".join(kind.__name__ for kind in row.argtypes)
        t.say(f"the table's row (ffi/cuda/module.py): {row.prototype}\n  symbol {row.symbol!r}, argtypes ({names})")
        t.check(
            row.symbol == "cuModuleGetFunction" and row.argtypes == (POINTER(c_void_p), c_void_p, c_char_p),
            "the row declares exactly what step 3 declared by hand",
        )
        with_rawcuda(t, compiler, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    the_cust_way(t)


def compile_by_hand(t: Tutorial, compiler: kernelbuild.Compiler | None, scratch: Path) -> Path:
    t.step(f"raw: one nvcc command line, {KERNEL}.cu -> {KERNEL}.ptx (the flags build.py uses)")
    if compiler is None:
        shipped = rawcuda.kernels.KERNEL_DIR / f"{KERNEL}.ptx"
        t.say(f"(no nvcc: using the shipped {shipped})")
        return shipped
    out = scratch / "by-hand" / f"{KERNEL}.ptx"
    out.parent.mkdir()
    command = [compiler.path, *BuildOptions().flags(), "-o", str(out), str(ROOT / "kernels" / f"{KERNEL}.cu")]
    t.say("$ " + " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
    t.check(done.returncode == 0, f"nvcc exited with {done.returncode}{(': ' + done.stderr) if done.stderr else ''}")
    text = out.read_text()
    t.say("\n".join(line for line in text.splitlines() if line.startswith((".version", ".target", ".visible .entry"))))
    t.check(f".entry {KERNEL}(" in text, f'the PTX holds one entry named {KERNEL!r} (extern "C": no mangling)')
    return out


def load_by_hand(t: Tutorial, ptx_file: Path) -> None:
    t.step("raw: load that PTX through plain ctypes -- cuModuleLoadData, cuModuleGetFunction")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1").
    libcuda = ctypes.CDLL(cu.library().path)
    cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    cuInit.argtypes, cuInit.restype = [c_uint], c_int
    cuDeviceGet = libcuda.cuDeviceGet  # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    cuDeviceGet.argtypes, cuDeviceGet.restype = [POINTER(c_int), c_int], c_int
    # CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev); ...Release(CUdevice dev) is _v2
    cuDevicePrimaryCtxRetain = libcuda.cuDevicePrimaryCtxRetain
    cuDevicePrimaryCtxRetain.argtypes, cuDevicePrimaryCtxRetain.restype = [POINTER(c_void_p), c_int], c_int
    cuDevicePrimaryCtxRelease = libcuda.cuDevicePrimaryCtxRelease_v2
    cuDevicePrimaryCtxRelease.argtypes, cuDevicePrimaryCtxRelease.restype = [c_int], c_int
    cuCtxSetCurrent = libcuda.cuCtxSetCurrent  # CUresult cuCtxSetCurrent(CUcontext ctx)
    cuCtxSetCurrent.argtypes, cuCtxSetCurrent.restype = [c_void_p], c_int
    cuModuleLoadData = libcuda.cuModuleLoadData  # CUresult cuModuleLoadData(CUmodule *module, const void *image)
    cuModuleLoadData.argtypes, cuModuleLoadData.restype = [POINTER(c_void_p), c_void_p], c_int
    # CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
    cuModuleGetFunction = libcuda.cuModuleGetFunction
    cuModuleGetFunction.argtypes, cuModuleGetFunction.restype = [POINTER(c_void_p), c_void_p, c_char_p], c_int
    # CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
    cuFuncGetAttribute = libcuda.cuFuncGetAttribute
    cuFuncGetAttribute.argtypes, cuFuncGetAttribute.restype = [POINTER(c_int), c_int, c_void_p], c_int
    cuModuleUnload = libcuda.cuModuleUnload  # CUresult cuModuleUnload(CUmodule hmod)
    cuModuleUnload.argtypes, cuModuleUnload.restype = [c_void_p], c_int

    code = cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    dev, ctx = c_int(), c_void_p()
    expect_success(t, cuDeviceGet(byref(dev), 0), "cuDeviceGet(&dev, 0)")
    expect_success(t, cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain(&ctx, dev)")
    expect_success(t, cuCtxSetCurrent(ctx), "cuCtxSetCurrent(ctx)")

    image = ctypes.create_string_buffer(ptx_file.read_bytes())  # PTX is read as a C string: NUL-terminated
    module, function = c_void_p(), c_void_p()
    expect_success(t, cuModuleLoadData(byref(module), image), f"cuModuleLoadData(&module, <{len(image):,} bytes>)")
    expect_success(
        t, cuModuleGetFunction(byref(function), module, KERNEL.encode()), f'cuModuleGetFunction(.., "{KERNEL}")'
    )
    ptx_target, binary, regs = c_int(), c_int(), c_int()
    for value, attribute in (
        (ptx_target, FunctionAttribute.PTX_VERSION),
        (binary, FunctionAttribute.BINARY_VERSION),
        (regs, FunctionAttribute.NUM_REGS),
    ):
        expect_success(
            t, cuFuncGetAttribute(byref(value), attribute, function), f"cuFuncGetAttribute({attribute.name})"
        )
    parsed = ptx.parse(ptx_file.read_text())
    target = parsed.target
    major, minor = rawcuda.Device(0).compute_capability
    t.say(
        f"PTX_VERSION {ptx_target.value}: the PTX was written for .target {target} (despite its name, not the ISA\n"
        f".version {parsed.version[0]}.{parsed.version[1]}); BINARY_VERSION {binary.value}: the JIT compiled it for "
        f"this GPU, sm_{major}{minor};\n{regs.value} registers per thread"
    )
    t.check(
        f"sm_{ptx_target.value}" == target and binary.value == major * ARCH_DIGITS + minor,
        "what the driver reports matches the PTX header and the device",
    )
    missing = cuModuleGetFunction(byref(function), module, b"saxpy_typo")
    t.say(f'cuModuleGetFunction(.., "saxpy_typo") -> {missing} ({c_name(missing)}): the integer is all C gets')
    t.check(missing == Result.ERROR_NOT_FOUND, "a name the module lacks is CUDA_ERROR_NOT_FOUND")
    expect_success(t, cuModuleUnload(module), "cuModuleUnload(module)")
    expect_success(t, cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease(dev)")


def with_rawcuda(t: Tutorial, compiler: kernelbuild.Compiler | None, scratch: Path) -> None:
    built_dir = scratch / "built"
    if compiler is not None:
        t.step("rawcuda: build every kernel into a scratch directory, then build again: the cache skips them all")
        first = kernelbuild.build(ROOT / "kernels", built_dir)
        second = kernelbuild.build(ROOT / "kernels", built_dir)
        t.say(f"first build compiled {sorted(first.built)}\nsecond build compiled {second.built or 'nothing'}")
        t.check(
            not second.built and sorted(second.cached) == sorted(first.built),
            "the second build was served entirely from the cache",
        )
        t.say("the cache key hashes the source, its local headers, the flags and the full `nvcc --version`")
        source_dir = built_dir
    else:
        source_dir = rawcuda.kernels.KERNEL_DIR

    t.step("rawcuda: read the PTX -- the header says which ISA and which GPU; each .entry is a kernel")
    text = (source_dir / f"{KERNEL}.ptx").read_text()
    info = ptx.parse(text)
    header = [line for line in text.splitlines() if line.startswith((".version", ".target", ".address_size"))]
    t.say("\n".join(header))
    entry = info.entries[KERNEL]
    t.say(
        f"{KERNEL}(" + ", ".join(f".{p.type}" for p in entry.params) + ")   <- float *y, float a, const float *x, "
        "size_t n: pointers are just 64-bit integers in PTX"
    )

    t.step("rawcuda: the manifest -- every kernel, its parameters, its ISA and arch, and the cache key")
    manifest = kernelbuild.read_manifest(source_dir)
    record = manifest["kernels"][KERNEL]
    t.say(str({k: record[k] for k in ("ptx", "ptx_version", "target")} | {"entries": list(record["entries"])}))
    t.check(
        [p["type"] for p in record["entries"][KERNEL]["params"]] == [p.type for p in entry.params],
        "the manifest's parameter list is what the PTX parser reads",
    )

    t.step("rawcuda: PTX ISA vs the driver -- the driver must understand the PTX's .version")
    driver = rawcuda.driver_version()
    newest = max_ptx_isa(driver)
    t.say(f"driver CUDA {driver[0]}.{driver[1]} understands PTX ISA up to {newest}; this PTX is {info.version}")
    bumped = text.replace(f".version {info.version[0]}.{info.version[1]}", ".version 99.0")
    try:
        Module(bumped, name="saxpy-from-the-future.ptx")
        t.check(False, "PTX from the future should be refused")
    except rawcuda.ModuleLoadError as exc:
        t.say("a PTX with .version 99.0 is refused before the driver sees it:\n" + str(exc))

    t.step("rawcuda: load the PTX we built and run it -- y = a*x + y, checked against numpy")
    module = Module(source_dir / f"{KERNEL}.ptx")
    rng = np.random.default_rng()
    x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    dx, dy = DeviceBuffer.from_array(x), DeviceBuffer.from_array(y)
    alpha = 2.5
    module.function(KERNEL).launch((N + BLOCK - 1) // BLOCK, BLOCK, dy, alpha, dx, N)
    got = dy.to_array()
    expected = np.float32(alpha) * x.astype(np.float64) + y
    t.check(bool(np.allclose(got, expected, rtol=1e-6, atol=1e-6)), f"all {N:,} results match numpy")
    for obj in (dx, dy, module):
        obj.close()


def the_cust_way(t: Tutorial) -> None:
    t.step("cust: build.rs, include_str!, Module::from_ptx (shown, not run)")
    t.say(
        "// build.rs -- Cargo runs it before compiling the crate\n"
        "fn main() {\n"
        '    println!("cargo::rerun-if-changed=kernels/saxpy.cu");\n'
        '    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());\n'
        '    let status = std::process::Command::new("nvcc")\n'
        '        .args(["--ptx", "-arch=compute_80", "-o"]).arg(out.join("saxpy.ptx"))\n'
        '        .arg("kernels/saxpy.cu").status().expect("nvcc not found");\n'
        '    assert!(status.success(), "nvcc failed");\n'
        "}\n"
        "\n"
        "// src/main.rs -- the PTX becomes a string constant inside the binary\n"
        'static PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/saxpy.ptx"));\n'
        "let module = Module::from_ptx(PTX, &[])?;     // cuModuleLoadDataEx\n"
        'let saxpy = module.get_function("saxpy")?;    // cuModuleGetFunction'
    )
    t.say(
        "What Rust-CUDA really does (at commit ac2674f, 2025-08-23): cust has no kernel build step of its own.\n"
        "For CUDA C++ kernels a crate writes a build.rs like the one above (the repository's OptiX examples,\n"
        "crates/optix/examples/ex03_window/build.rs, run nvcc -ptx with std::process::Command). For kernels\n"
        'written in Rust, cuda_builder::CudaBuilder::new("kernels").copy_to(out.join("kernels.ptx")).build()\n'
        "compiles a GPU crate through rustc_codegen_nvvm (libNVVM), as in examples/cuda/vecadd/build.rs.\n"
        "Cargo re-runs build.rs when a rerun-if-changed path's modification time changes, and whenever build.rs\n"
        "itself changes: it is recompiled, then re-run (the Cargo book). So flags written in build.rs, as above,\n"
        "take effect at the next build. What Cargo cannot see is outside the files: a new nvcc on the PATH, or a\n"
        "path or flags read from the environment (the seed's NVCC_PATH), unless build.rs also prints\n"
        "cargo::rerun-if-env-changed=NVCC_PATH. There is no manifest: launch! checks only that each\n"
        "argument is DeviceCopy, so a wrong count or width compiles -- rawcuda checks the PTX signature.\n"
        "The bindings are built too: cust_raw's build script runs bindgen over the cuda.h it finds, and\n"
        "expands cuda.h's #define cuMemAlloc cuMemAlloc_v2 (with the C preprocessor) so that\n"
        "each Rust name links to the versioned symbol -- decided by the headers on the build machine.\n"
        "(crates.io's cust 0.3.2, the 2022 code, builds none: its cust_raw 0.11.3 ships bindings generated once\n"
        "from CUDA 11.4's cuda.h, and cust calls the versioned names itself, cuda::cuMemAlloc_v2.)\n"
        "rawcuda writes that table by hand (layer 0) and proves it against cuda.h in CI."
    )


if __name__ == "__main__":
    run(main, "Tutorial 04a: the build pipeline (nvcc -> PTX -> manifest -> driver)")
