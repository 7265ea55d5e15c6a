"""Tutorial 04b -- PTX, cubin and fatbin: what the driver loads, what it refuses, and the JIT cache.

04a ships PTX, which the driver compiles for the GPU at hand. That is one of three forms a kernel can take:

* PTX: virtual instructions, compiled by the driver's JIT when the module is loaded (any newer GPU too);
* a cubin: an ELF file of one GPU architecture's machine code (SASS), loaded as it is -- no JIT;
* a fatbin: several cubins and PTX in one file; the driver picks the best entry for this GPU.

This tutorial builds all of them from ``kernels/vector_add.cu`` with nvcc, loads each, runs the kernel and
checks every element, then shows the classic failure -- a cubin for another architecture refused with
CUDA_ERROR_NO_BINARY_FOR_GPU (209) -- and measures, in fresh processes, what the JIT costs and what the
driver's on-disk JIT cache (``CUDA_CACHE_PATH``, ``CUDA_CACHE_DISABLE``) saves.

Run:  python tutorials/04b_binaries.py [--step]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _tutorial import ROOT, Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.checked.errors import CudaError
from rawcuda.core.module import image_kind
from rawcuda.ffi.attributes import FunctionAttribute
from rawcuda.ffi.results import Result
from rawcuda.tools import kernelbuild

SOURCE = ROOT / "kernels" / "vector_add.cu"
KERNEL = "vector_add"
N = 1 << 20
BLOCK = 256
PTX_ARCH = "compute_80"  # what build.py ships: PTX for sm_80 and every newer GPU
OTHER_MAJOR_ARCH = {8: "sm_90"}  # a cubin for another architecture: sm_80, unless this GPU is an 8.x
DEFAULT_OTHER_ARCH = "sm_80"
MS_PER_S = 1000

# The child process that loads one image: a fresh process, so the driver reads the cache variables again and
# nothing is compiled yet. It times Module() alone (the context is made first) and reports what was loaded.
# The context and the buffers come first (creating a context takes longer than any load here), and the
# timing runs to the end of a first launch: with lazy loading (CUDA 12.2's default) code may reach the GPU
# only when a kernel is first asked for or launched.
CHILD = """
import json, sys, time
import rawcuda
from rawcuda.ffi.attributes import FunctionAttribute
context = rawcuda.default_context()
c, a, b = (rawcuda.DeviceBuffer.empty(1) for _ in range(3))
context.synchronize()
image = open(sys.argv[1], "rb").read()
began = time.perf_counter()
fn = rawcuda.Module(image, context, name=sys.argv[1]).function(sys.argv[2])
fn.launch(1, 1, c, a, b, 0)
context.synchronize()
ms = (time.perf_counter() - began) * 1000
print(json.dumps({"ms": ms, "binary": fn.attribute(FunctionAttribute.BINARY_VERSION)}))
"""


def this_arch(device: rawcuda.Device) -> str:
    major, minor = device.compute_capability
    return f"sm_{major}{minor}"


def builds(device: rawcuda.Device) -> dict[str, list[str]]:
    """file name -> nvcc's flags for it: the forms this tutorial loads."""
    here, other = this_arch(device), OTHER_MAJOR_ARCH.get(device.compute_capability[0], DEFAULT_OTHER_ARCH)
    virtual = "compute_" + here.removeprefix("sm_")
    return {
        "vector_add.ptx": ["--ptx", f"-arch={PTX_ARCH}"],
        f"vector_add.{here}.cubin": ["-cubin", f"-arch={here}"],
        f"vector_add.{other}.cubin": ["-cubin", f"-arch={other}"],
        f"vector_add.{other}+{PTX_ARCH}.fatbin": ["-fatbin", f"-gencode=arch={PTX_ARCH},code=[{other},{PTX_ARCH}]"],
        f"vector_add.{here}+{PTX_ARCH}.fatbin": [
            "-fatbin",
            f"-gencode=arch={virtual},code={here}",
            f"-gencode=arch={PTX_ARCH},code={PTX_ARCH}",
        ],
    }


def build(t: Tutorial, nvcc: str, scratch: Path, device: rawcuda.Device) -> dict[str, Path]:
    t.step(f"build five images of {SOURCE.name} with nvcc: PTX, two cubins, two fatbins")
    made = {}
    for name, flags in builds(device).items():
        out = scratch / name
        command = [nvcc, *flags, "-o", str(out), str(SOURCE)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        t.check(done.returncode == 0, f"nvcc {' '.join(flags)} -> {name}{': ' + done.stderr if done.stderr else ''}")
        data = out.read_bytes()
        t.say(f"  {out.stat().st_size:>7,} bytes, starts {data[:4]!r}: rawcuda reads it as {image_kind(data)}")
        made[name] = out
    kinds = [image_kind(path.read_bytes()) for path in made.values()]
    t.term("ELF")
    t.check(kinds == ["ptx", "cubin", "cubin", "fatbin", "fatbin"], "an ELF header marks a cubin, 0xBA55ED50 a fatbin")
    return made


def run_vector_add(module: Module, rng: np.random.Generator) -> bool:
    """Launch the module's vector_add on fresh random data; True when every element equals numpy's a + b."""
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(np.float32(np.nan))  # poisoned: a kernel that did not run cannot look right
        module.function(KERNEL).launch(-(-N // BLOCK), BLOCK, dc, da, db, N)
        return bool(np.array_equal(dc.to_array(), a + b))


def load_in_a_fresh_process(image: Path, cache: Path, **env: str) -> dict[str, float]:
    """Load ``image`` in a new interpreter whose JIT cache is ``cache``; its load time and binary version."""
    environment = {**os.environ, "CUDA_CACHE_PATH": str(cache), "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(image), KERNEL], capture_output=True, text=True, env=environment, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"loading {image.name} in a fresh process failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cached_files(cache: Path) -> int:
    return sum(1 for path in cache.rglob("*") if path.is_file()) if cache.exists() else 0


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "compute capability", "PTX", "JIT", "nvcc")
    t.step("nvcc, and which machine code this GPU runs")
    device = rawcuda.Device(0)  # the first driver call: without a GPU the tutorial stops here, status 77
    try:
        nvcc = kernelbuild.probe().path
    except kernelbuild.KernelBuildError as exc:
        t.check(False, f"this tutorial builds its images with nvcc, and there is none here: {exc}")
        return
    major, minor = device.compute_capability
    t.term("SASS")
    t.term("cubin")
    t.term("fatbin")
    sass = f"sm_{major}0 .. sm_{major}{minor}" if minor else f"sm_{major}0"
    t.say(
        f"{nvcc}\n{device.name} is compute capability {major}.{minor}: it runs SASS built for {sass} (the rule is\n"
        f"step 4's), and PTX for compute_{major}{minor} or any older compute_XY, through the JIT."
    )
    scratch = Path(tempfile.mkdtemp(prefix="rawcuda-binaries-"))
    try:
        lessons(t, build(t, nvcc, scratch, device), scratch, device)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    the_cust_way(t)


def lessons(t: Tutorial, made: dict[str, Path], scratch: Path, device: rawcuda.Device) -> None:
    rng = np.random.default_rng()
    names = list(made)
    ptx, here_cubin, other_cubin, other_fatbin, here_fatbin = (made[name] for name in names)
    here = this_arch(device)

    t.step(f"load the {here} cubin: machine code for this GPU, no JIT, and no PTX to read the signature from")
    with Module(here_cubin.read_bytes(), name=here_cubin.name) as module:
        fn = module.function(KERNEL)
        sizes = [spec.size for spec in fn.params]
        t.say(f"cuFuncGetParamInfo gives the parameters' sizes: {sizes} (a cubin has no PTX text to parse)")
        t.check(sizes == [8, 8, 8, 8], "four 8-byte parameters: c, a, b and n")
        t.check(run_vector_add(module, rng), f"all {N:,} sums equal numpy's, from the {here} cubin")

    t.step(f"the classic failure: the {other_cubin.stem.split('.')[1]} cubin on this {here} GPU")
    try:
        Module(other_cubin.read_bytes(), name=other_cubin.name).close()
        code = Result.SUCCESS
    except CudaError as exc:
        code = exc.code
        t.say(f"Module(...) raised {type(exc).__name__}: {exc.name} ({exc.code}), {exc.description}\nhint: {exc.hint}")
    t.check(code == Result.ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadDataEx refused it: CUDA_ERROR_NO_BINARY_FOR_GPU (209)")
    t.say(
        "The rules (CUDA C++ Programming Guide, 'Binary Compatibility' and 'PTX Compatibility'): SASS for\n"
        "sm_XY runs only on compute capability X.Z with Z >= Y -- the same major version, so sm_80 SASS runs on\n"
        "an 8.6 but never on a 9.0. PTX for compute_XY runs on X.Y and everything newer, through the JIT.\n"
        "Architecture-specific targets (sm_90a) run on exactly that version. So a library ships SASS for the\n"
        "GPUs it knows and PTX for the ones to come -- in one fatbin."
    )

    t.step("two fatbins: the driver picks SASS for this GPU if there is one, else the PTX inside")
    for image in (other_fatbin, here_fatbin):
        with Module(image.read_bytes(), name=image.name) as module:
            version = module.function(KERNEL).attribute(FunctionAttribute.BINARY_VERSION)
            t.check(run_vector_add(module, rng), f"{image.name}: loaded, runs as {version} code, all sums right")

    t.step("the JIT and its cache, measured: each image loaded in a fresh process with its own cache folder")
    t.term("JIT cache")
    cases = [
        ("PTX, empty cache: the JIT compiles", ptx, "cold", {}),
        ("PTX again, the same cache: read back", ptx, "cold", {}),
        ("PTX, CUDA_CACHE_DISABLE=1: compiled every time", ptx, "off", {"CUDA_CACHE_DISABLE": "1"}),
        (f"{here} cubin: nothing to compile", here_cubin, "cubin", {}),
        (f"{other_fatbin.name}: no {here} SASS, its PTX compiled", other_fatbin, "other", {}),
        (f"{here_fatbin.name}: its {here} SASS", here_fatbin, "here", {}),
        (f"{here_fatbin.name}, CUDA_FORCE_PTX_JIT=1", here_fatbin, "forced", {"CUDA_FORCE_PTX_JIT": "1"}),
    ]
    rows = []
    for label, image, folder, env in cases:
        cache = scratch / f"cache-{folder}"
        result = load_in_a_fresh_process(image, cache, **env)
        rows.append((label, result["ms"], cached_files(cache)))
    width = max(len(label) for label, _, _ in rows)
    t.say(
        "\n".join(
            [f"{'case':<{width}}  load ms  files in its cache"]
            + [f"{label:<{width}}  {ms:>7.2f}  {files:>4}" for label, ms, files in rows]
        )
    )
    t.check(rows[0][2] > 0, "the first JIT of the PTX wrote its result into the cache folder")
    t.check(rows[2][2] == 0, "with CUDA_CACHE_DISABLE=1 nothing was written")
    t.check(rows[3][2] == 0 and rows[5][2] == 0, f"the {here} cubin, and the fatbin's {here} SASS, compiled nothing")
    t.check(rows[4][2] > 0 and rows[6][2] > 0, "the fatbin without this GPU's SASS, and a forced JIT, compiled PTX")
    cold, warm, cubin = rows[0][1], rows[1][1], rows[3][1]
    t.say(
        f"this run, load through the first launch: the PTX {cold:.2f} ms with an empty cache, {warm:.2f} ms from the\n"
        f"cache, the cubin {cubin:.2f} ms (one load each: for a kernel this small the JIT is a few ms of it).\n"
        "The cache is keyed by the PTX, the GPU and the driver: a new driver compiles again. It lives in\n"
        "~/.nv/ComputeCache unless CUDA_CACHE_PATH says otherwise, bounded by CUDA_CACHE_MAXSIZE. A big\n"
        "library's PTX can take minutes to compile on first use; a fatbin with SASS for the GPU skips that."
    )


def the_cust_way(t: Tutorial) -> None:
    t.step("cust (Rust-CUDA at ac2674f, crates/cust/src/module.rs), and rawcuda")
    t.say(
        "cust: Module::from_cubin(bytes, &[]) copies the bytes, appends a NUL and calls cuModuleLoadDataEx;\n"
        "Module::from_fatbin is from_cubin under another name. Its doc comment promises InvalidSource for a\n"
        "cubin of another architecture; the driver answers 209, which cust's error.rs maps to\n"
        "CudaError::NoBinaryForGpu. Its JIT targets (ModuleJitOption::Target(JitTarget)) stop at Compute86.\n"
        "rawcuda: Module(bytes) reads the first bytes (ELF: cubin, 0xBA55ED50: fatbin, else PTX) and loads\n"
        "each the same way, with the JIT logs attached to a failure; build.py ships PTX only."
    )


if __name__ == "__main__":
    run(main, "Tutorial 04b: PTX, cubin and fatbin -- what the driver loads, refuses and caches")
