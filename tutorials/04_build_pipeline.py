"""Tutorial 04 -- the build pipeline: from kernels/*.cu to PTX, the manifest, and PTX ISA vs the driver.

The seed article compiles kernels in Rust's ``build.rs`` and embeds the PTX with ``include_str!``.
rawcuda's ``build.py`` does the same job in Python: nvcc ``--ptx`` for each kernel source, a cache that
rebuilds only what changed, and a manifest that records each kernel's parameters. The PTX ships inside
the package, so a machine without nvcc can still load it -- the driver compiles PTX to machine code.

Run:  python tutorials/04_build_pipeline.py [--step]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Module, ptx
from rawcuda.module import max_ptx_isa
from rawcuda.tools import kernelbuild

ROOT = Path(__file__).resolve().parent.parent
N = 100_003
BLOCK = 256


def main(t: Tutorial) -> None:
    t.step("which nvcc? ($NVCC_PATH, then PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin)")
    try:
        compiler = kernelbuild.probe()
        t.say(f"{compiler.path}: release {compiler.release}")
    except kernelbuild.KernelBuildError as exc:
        compiler = None
        t.say(f"no nvcc here ({str(exc).splitlines()[0]}); the shipped PTX is used instead")

    built_dir = Path(tempfile.mkdtemp(prefix="rawcuda-tutorial-"))
    try:
        if compiler is not None:
            t.step("build every kernel into a scratch directory, then build again: the cache skips them all")
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

        t.step("read the PTX: the header says which ISA and which GPU; each .entry is a kernel")
        text = (source_dir / "saxpy.ptx").read_text()
        info = ptx.parse(text)
        header = [line for line in text.splitlines() if line.startswith((".version", ".target", ".address_size"))]
        t.say("\n".join(header))
        entry = info.entries["saxpy"]
        t.say(
            "saxpy(" + ", ".join(f".{p.type}" for p in entry.params) + ")   <- float *y, float a, const float *x, "
            "size_t n: pointers are just 64-bit integers in PTX"
        )

        t.step("the manifest: every kernel, its parameters, its ISA and arch, and the cache key")
        manifest = kernelbuild.read_manifest(source_dir)
        record = manifest["kernels"]["saxpy"]
        t.say(str({k: record[k] for k in ("ptx", "ptx_version", "target")} | {"entries": list(record["entries"])}))
        t.check(
            [p["type"] for p in record["entries"]["saxpy"]["params"]] == [p.type for p in entry.params],
            "the manifest's parameter list is what the PTX parser reads",
        )

        t.step("PTX ISA vs the driver: the driver must understand the PTX's .version")
        driver = rawcuda.driver_version()
        newest = max_ptx_isa(driver)
        t.say(f"driver CUDA {driver[0]}.{driver[1]} understands PTX ISA up to {newest}; this PTX is {info.version}")
        bumped = text.replace(f".version {info.version[0]}.{info.version[1]}", ".version 99.0")
        try:
            Module(bumped, name="saxpy-from-the-future.ptx")
            t.check(False, "PTX from the future should be refused")
        except rawcuda.ModuleLoadError as exc:
            t.say("a PTX with .version 99.0 is refused before the driver sees it:\n" + str(exc))

        t.step("load the PTX we built and run it: y = a*x + y")
        module = Module(source_dir / "saxpy.ptx")
        rng = np.random.default_rng()
        x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
        dx, dy = DeviceBuffer.from_array(x), DeviceBuffer.from_array(y)
        alpha = 2.5
        module.function("saxpy").launch((N + BLOCK - 1) // BLOCK, BLOCK, dy, alpha, dx, N)
        got = dy.to_array()
        expected = np.float32(alpha) * x.astype(np.float64) + y
        t.check(bool(np.allclose(got, expected, rtol=1e-6, atol=1e-6)), f"all {N:,} results match numpy")
        for obj in (dx, dy, module):
            obj.close()
    finally:
        shutil.rmtree(built_dir, ignore_errors=True)


if __name__ == "__main__":
    run(main, "Tutorial 04: the build pipeline (nvcc -> PTX -> manifest -> driver)")
