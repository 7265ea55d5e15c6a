"""rawcuda.tools.kernelbuild and build.py: incremental nvcc builds, the manifest, and the committed PTX.

Builds run on copies of kernels/ in temporary directories; the committed PTX in rawcuda/kernels/ is
only read (ptxas must accept it, the manifest must describe it, and it must be up to date).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rawcuda import kernels
from rawcuda.checked.errors import RawCudaError
from rawcuda.core import ptx
from rawcuda.ops.sgemm import KERNELS as SGEMM_KERNELS
from rawcuda.tools import kernelbuild, reproducible
from rawcuda.tools import nvcc as nvcc_tool
from rawcuda.tools.nvcc import BuildOptions, Compiler, KernelBuildError
from tests.helpers import ROOT

SOURCES = ROOT / "kernels"
BUILD_PY = ROOT / "build.py"

TRANSCENDENTALS = {
    "transcendental_chain": ["u64", "u64", "u64", "u32"],
    "exp_map": ["u64", "u64", "u64"],
    "sin_map": ["u64", "u64", "u64"],
}
#: The kernels other code depends on: source stem -> entries -> PTX parameter types. Every extent is a
#: size_t (.u64): an H200 holds matrices with a side of 2^31 floats, where an `int` size wraps.
CONTRACT = {
    "cluster_reduce": {
        "warp_reduce_sum": ["u64", "u64", "u64"],
        "cluster_sum": ["u64", "u64", "u64"],
        "cluster_ranks": ["u64", "u64"],
        "cluster_ranks_compiled": ["u64", "u64"],
    },
    "dependent_launch": {"add_one": ["u64", "u64", "u64"]},
    "grid_reduce": {"warp_reduce_sum": ["u64", "u64", "u64"], "grid_sum": ["u64", "u64", "u64", "u64"]},
    "elementwise": {"bias_relu": ["u64", "u64", "u64", "u64", "u64"], "gelu": ["u64", "u64", "u64"]},
    "matmul": {"matmul": ["u64", "u64", "u64", "u64", "u64", "u64"]},
    "occupancy": {"copy_one_per_thread": ["u64", "u64", "u64"], "copy_grid_stride": ["u64", "u64", "u64"]},
    "reduce": {"warp_reduce_sum": ["u64", "u64", "u64"]},
    "reduce_steps": {
        name: ["u64", "u64", "u64"]
        for name in (
            "reduce_01_interleaved_divergent",
            "reduce_02_interleaved_bank_conflicts",
            "reduce_03_sequential_addressing",
            "reduce_04_add_during_load",
            "reduce_05_unroll_last_warp",
            "reduce_06_complete_unroll",
            "reduce_07_many_per_thread",
            "reduce_08_warp_shuffle",
        )
    },
    "saxpy": {"saxpy": ["u64", "f32", "u64", "u64"]},
    "sgemm": {name: ["u64"] * 6 for name in SGEMM_KERNELS},  # (C, A, B, M, N, K), like matmul
    "spin": {"spin": ["u64"], "spin_timed": ["u64", "u64"]},
    "transcendentals": TRANSCENDENTALS,
    "transcendentals_fast": TRANSCENDENTALS,  # the same source, built with --use_fast_math
    "tma_copy": {
        "tma_tile_copy": ["b8", "u64", "u64", "u64"],
        "tma_tile_copy_both": ["b8", "b8"],
        "tile_copy_plain": ["u64", "u64", "u64", "u64"],
    },
    "transpose": {
        name: ["u64", "u64", "u64", "u64"] for name in ("transpose_naive", "transpose_unpadded", "transpose_padded")
    },
    "vector_add": {"vector_add": ["u64", "u64", "u64", "u64"]},
}
STEMS = sorted(CONTRACT)
#: The sources that ask for --use_fast_math themselves (`// rawcuda-build: fast_math`).
FAST_MATH_STEMS = ["transcendentals_fast"]
#: The sources that need Hopper (clusters, griddepcontrol): `// rawcuda-build: arch=compute_90`.
HOPPER_STEMS = ["cluster_reduce", "dependent_launch", "tma_copy"]


def run_build_py(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, str(BUILD_PY), *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def first_build(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, kernelbuild.BuildResult]:
    """kernels/ copied to a temporary directory and built once (shared by the tests that copy it again)."""
    work = tmp_path_factory.mktemp("build")
    src, out = work / "src", work / "out"
    shutil.copytree(SOURCES, src)
    return src, out, kernelbuild.build(src, out, nvcc=nvcc)


@pytest.fixture
def built(first_build: tuple[Path, Path, kernelbuild.BuildResult], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the built tree, free to modify."""
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(first_build[0], src)
    shutil.copytree(first_build[1], out)
    return src, out


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# ---------------------------------------------------------------------------------------------------------
# Building


def test_build_compiles_every_kernel(first_build: tuple[Path, Path, kernelbuild.BuildResult]) -> None:
    src, out, result = first_build
    assert sorted(result.built) == STEMS == sorted(p.stem for p in src.glob("*.cu"))
    assert result.cached == [] and result.removed == []
    assert sorted(p.name for p in out.iterdir()) == sorted([*(s + ".ptx" for s in STEMS), "manifest.json"])
    manifest = kernels.load_manifest(out)
    assert list(manifest["kernels"]) == STEMS
    for stem, entries in CONTRACT.items():
        recorded = manifest["kernels"][stem]["entries"]
        assert {name: [p["type"] for p in e["params"]] for name, e in recorded.items()} == entries


def test_second_build_compiles_nothing(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    before = contents(out)
    result = kernelbuild.build(src, out, nvcc=nvcc)
    assert result.built == []
    assert sorted(result.cached) == STEMS
    assert contents(out) == before


def test_editing_one_source_rebuilds_exactly_that_one(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    saxpy = src / "saxpy.cu"
    saxpy.write_text(saxpy.read_text() + "\n// an edit\n")
    old_key = kernels.load_manifest(out)["kernels"]["saxpy"]["cache_key"]
    result = kernelbuild.build(src, out, nvcc=nvcc)
    assert result.built == ["saxpy"]
    assert sorted(result.cached) == [s for s in STEMS if s != "saxpy"]
    assert kernels.load_manifest(out)["kernels"]["saxpy"]["cache_key"] != old_key


def test_touching_without_editing_rebuilds_nothing(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    os.utime(src / "matmul.cu")  # a new mtime, the same bytes: the key is a content hash
    assert kernelbuild.build(src, out, nvcc=nvcc).built == []


def test_changing_a_flag_rebuilds_all(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    result = kernelbuild.build(src, out, BuildOptions(fast_math=True), nvcc=nvcc)
    # ... all but the sources that had the flag already: their options, so their PTX, did not change
    assert sorted(result.built) == [s for s in STEMS if s not in FAST_MATH_STEMS]
    record = kernels.load_manifest(out)["kernels"]["elementwise"]
    assert record["options"]["fast_math"] is True and "--use_fast_math" in record["flags"]
    assert kernelbuild.build(src, out, BuildOptions(fast_math=True), nvcc=nvcc).built == []


def test_force_rebuilds_all(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    assert sorted(kernelbuild.build(src, out, force=True, nvcc=nvcc).built) == STEMS


def test_missing_ptx_is_rebuilt(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    (out / "reduce.ptx").unlink()
    assert kernelbuild.build(src, out, nvcc=nvcc).built == ["reduce"]
    assert (out / "reduce.ptx").is_file()


def test_removed_source_is_pruned(built: tuple[Path, Path], nvcc: str) -> None:
    src, out = built
    (src / "transpose.cu").unlink()
    result = kernelbuild.build(src, out, nvcc=nvcc)
    assert result.removed == ["transpose"] and result.built == []
    assert not (out / "transpose.ptx").exists()
    assert "transpose" not in kernels.load_manifest(out)["kernels"]


def test_included_header_is_part_of_the_key(nvcc: str, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "detail").mkdir(parents=True)
    (src / "common.cuh").write_text('#include "detail/scale.cuh"\n')
    (src / "detail" / "scale.cuh").write_text("constexpr float SCALE = 2.0f;\n")
    (src / "uses.cu").write_text('#include "common.cuh"\nextern "C" __global__ void uses(float *p) { p[0] = SCALE; }\n')
    (src / "plain.cu").write_text('extern "C" __global__ void plain(float *p) { p[0] = 1.0f; }\n')
    assert sorted(kernelbuild.build(src, out, nvcc=nvcc).built) == ["plain", "uses"]
    (src / "detail" / "scale.cuh").write_text("constexpr float SCALE = 3.0f;\n")  # included transitively
    assert kernelbuild.build(src, out, nvcc=nvcc).built == ["uses"]
    assert sorted(p.name for p in kernelbuild.local_includes(src / "uses.cu", src)) == ["common.cuh", "scale.cuh"]


def test_a_header_outside_the_kernel_folder_is_part_of_the_key(nvcc: str, tmp_path: Path) -> None:
    # #include "../shared/x.cuh" reaches past kernels/: an edit there must rebuild, never leave the PTX stale.
    src, out, shared = tmp_path / "src", tmp_path / "out", tmp_path / "shared"
    src.mkdir()
    shared.mkdir()
    (shared / "x.cuh").write_text("constexpr float SCALE = 2.0f;\n")
    kernel = 'extern "C" __global__ void uses(float *p) { p[0] = SCALE; }\n'
    (src / "uses.cu").write_text('#include "../shared/x.cuh"\n' + kernel)
    assert kernelbuild.build(src, out, nvcc=nvcc).built == ["uses"]
    (shared / "x.cuh").write_text("constexpr float SCALE = 3.0f;\n")
    assert kernelbuild.build(src, out, nvcc=nvcc).built == ["uses"], "the edited header left the PTX stale"
    assert [p.name for p in kernelbuild.local_includes(src / "uses.cu", src)] == ["x.cuh"]
    assert "3.0" in (out / "uses.ptx").read_text() or "0f40400000" in (out / "uses.ptx").read_text()


def test_the_key_does_not_depend_on_where_the_checkout_is(tmp_path: Path) -> None:
    compiler = Compiler("/usr/local/cuda/bin/nvcc", "Cuda compilation tools, release 13.0")
    keys = []
    for place in ("a", "b"):
        src, shared = tmp_path / place / "src", tmp_path / place / "shared"
        src.mkdir(parents=True)
        shared.mkdir()
        (shared / "x.cuh").write_text("constexpr float SCALE = 2.0f;\n")
        (src / "uses.cu").write_text('#include "../shared/x.cuh"\n')
        keys.append(kernelbuild.cache_key(src / "uses.cu", src, BuildOptions(), compiler))
    assert keys[0] == keys[1]


def test_a_source_may_ask_for_fast_math_for_itself(nvcc: str, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "k.cu").write_text('extern "C" __global__ void k(float *p, float x) { p[0] = sinf(x); }\n')
    (src / "k_fast.cu").write_text('// rawcuda-build: fast_math\n#include "k.cu"\n')
    assert sorted(kernelbuild.build(src, out, nvcc=nvcc).built) == ["k", "k_fast"]
    records = kernels.load_manifest(out)["kernels"]
    assert records["k"]["options"]["fast_math"] is False and "--use_fast_math" not in records["k"]["flags"]
    assert records["k_fast"]["options"]["fast_math"] is True and "--use_fast_math" in records["k_fast"]["flags"]
    assert "sin.approx" in (out / "k_fast.ptx").read_text() and "sin.approx" not in (out / "k.ptx").read_text()
    assert list(records["k_fast"]["entries"]) == ["k"]  # the included kernel, by its own name
    assert kernelbuild.build(src, out, nvcc=nvcc).built == []  # the source's own options are in its cache key


def test_an_unknown_source_option_is_refused_by_name(tmp_path: Path) -> None:
    source = tmp_path / "k.cu"
    source.write_text('// rawcuda-build: fast_math, turbo\nextern "C" __global__ void k() {}\n')
    with pytest.raises(KernelBuildError, match=r"turbo.*it can say: fast_math") as caught:
        nvcc_tool.source_options(source, BuildOptions())
    assert caught.value.source == source
    # A directive inside an included file, or not at the start of a line, is not the source's own.
    source.write_text('#include "other.cu"  // rawcuda-build: fast_math\n')
    assert nvcc_tool.source_options(source, BuildOptions()) == BuildOptions()


@pytest.mark.parametrize(
    ("build_arch", "asked", "got"),
    [
        ("compute_80", "compute_90", "compute_90"),  # raised to what the source needs
        ("compute_100", "compute_90", "compute_100"),  # never lowered: a build for a newer GPU stays one
        ("compute_100", "compute_90a", "compute_90a"),  # Hopper-only instructions exist on no other arch
    ],
)
def test_a_source_names_the_oldest_architecture_it_needs(tmp_path: Path, build_arch: str, asked: str, got: str) -> None:
    source = tmp_path / "k.cu"
    source.write_text(f'// rawcuda-build: arch={asked}\nextern "C" __global__ void k() {{}}\n')
    assert nvcc_tool.source_options(source, BuildOptions(arch=build_arch)) == BuildOptions(arch=got)


@pytest.mark.parametrize(
    ("line", "match"),
    [("arch=sm_90", "not a virtual architecture"), ("arch=compute_90 arch=compute_80", "2 architectures")],
)
def test_a_bad_source_architecture_is_refused_by_name(tmp_path: Path, line: str, match: str) -> None:
    source = tmp_path / "k.cu"
    source.write_text(f'// rawcuda-build: {line}\nextern "C" __global__ void k() {{}}\n')
    with pytest.raises(KernelBuildError, match=match):
        nvcc_tool.source_options(source, BuildOptions())


def test_no_temporary_files_are_left(first_build: tuple[Path, Path, kernelbuild.BuildResult]) -> None:
    assert not [p.name for p in first_build[1].iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------------------------------------------------
# Cache keys and finding nvcc (no nvcc needed)


def test_cache_key_covers_source_flags_and_nvcc_version(tmp_path: Path) -> None:
    source = tmp_path / "k.cu"
    source.write_text('extern "C" __global__ void k() {}\n')
    nvcc_a, nvcc_b = Compiler("nvcc", "release 13.0, V13.0.88"), Compiler("nvcc", "release 13.1, V13.1.1")
    key = kernelbuild.cache_key(source, tmp_path, BuildOptions(), nvcc_a)
    assert key == kernelbuild.cache_key(source, tmp_path, BuildOptions(), Compiler("/other/nvcc", nvcc_a.version))
    assert key != kernelbuild.cache_key(source, tmp_path, BuildOptions(), nvcc_b)
    assert key != kernelbuild.cache_key(source, tmp_path, BuildOptions(fast_math=True), nvcc_a)
    assert key != kernelbuild.cache_key(source, tmp_path, BuildOptions(lineinfo=False), nvcc_a)
    assert key != kernelbuild.cache_key(source, tmp_path, BuildOptions(arch="compute_90"), nvcc_a)
    source.write_text('extern "C" __global__ void k() { }\n')
    assert key != kernelbuild.cache_key(source, tmp_path, BuildOptions(), nvcc_a)
    assert nvcc_a.release == "13.0, V13.0.88"


def test_flags() -> None:
    assert BuildOptions().flags() == ["--ptx", "-arch=compute_80", "-lineinfo"]
    assert BuildOptions(arch="compute_90", fast_math=True, lineinfo=False).flags() == [
        "--ptx",
        "-arch=compute_90",
        "--use_fast_math",
    ]


def fake_nvcc(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 99.0, V99.0.0'\n")
    path.chmod(0o755)
    return path


def test_nvcc_search_order(tmp_path: Path) -> None:
    on_path = fake_nvcc(tmp_path / "path" / "nvcc")
    in_home = fake_nvcc(tmp_path / "home" / "bin" / "nvcc")
    chosen = fake_nvcc(tmp_path / "chosen" / "nvcc")
    path_env = {"PATH": str(on_path.parent), "CUDA_HOME": str(tmp_path / "home")}
    assert nvcc_tool.find_nvcc(path_env) == str(on_path)
    assert nvcc_tool.find_nvcc({"PATH": str(tmp_path / "empty"), "CUDA_HOME": str(tmp_path / "home")}) == str(in_home)
    assert nvcc_tool.find_nvcc({**path_env, "NVCC_PATH": str(chosen)}) == str(chosen)
    assert nvcc_tool.probe(str(chosen)).release == "99.0, V99.0.0"


def test_nvcc_path_is_the_only_candidate_when_set(tmp_path: Path) -> None:
    on_path = fake_nvcc(tmp_path / "path" / "nvcc")
    with pytest.raises(KernelBuildError, match="NVCC_PATH is set") as caught:
        nvcc_tool.find_nvcc({"PATH": str(on_path.parent), "NVCC_PATH": "/nonexistent/nvcc"})
    assert "/nonexistent/nvcc" in str(caught.value)
    assert isinstance(caught.value, RawCudaError)


# ---------------------------------------------------------------------------------------------------------
# The command line


def test_cli_missing_nvcc(tmp_path: Path) -> None:
    done = run_build_py("--out", str(tmp_path / "out"), NVCC_PATH="/nonexistent/nvcc")
    assert done.returncode != 0
    assert "/nonexistent/nvcc" in done.stderr and "NVCC_PATH" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_compile_error(nvcc: str, tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    bad = src / "broken.cu"
    bad.write_text('extern "C" __global__ void broken(float *p) {\n    p[0] = not_declared_anywhere;\n}\n')
    (src / "fine.cu").write_text('extern "C" __global__ void fine(float *p) { p[0] = 1.0f; }\n')
    done = run_build_py("--src", str(src), "--out", str(out))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert re.search(r"broken\.cu\(2\): error: .*not_declared_anywhere", done.stderr)  # nvcc's own message
    assert f"failed to compile {bad}" in done.stderr  # the file
    # The options' flags, then the one that keeps the checkout's path out of the PTX (tools/reproducible.py).
    flags = r"--ptx -arch=compute_80 -lineinfo -Xcicc --orig_src_path_name -Xcicc src/broken\.cu"
    assert re.search(rf"command: \S*nvcc {flags} -o \S+ {re.escape(str(bad))}", done.stderr)
    # The kernel that compiled is built and recorded; the broken one is not.
    assert list(kernels.load_manifest(out)["kernels"]) == ["fine"]
    assert not (out / "broken.ptx").exists()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_compile_error_as_an_exception(nvcc: str, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.cu").write_text("this is not C++\n")
    with pytest.raises(KernelBuildError) as caught:
        kernelbuild.build(tmp_path / "src", tmp_path / "out", nvcc=nvcc)
    assert caught.value.source == tmp_path / "src" / "bad.cu"
    assert caught.value.command[0] == nvcc and "--ptx" in caught.value.command
    assert "error" in caught.value.output


def test_cli_list_reads_the_committed_manifest() -> None:
    done = run_build_py("--list")
    assert done.returncode == 0, done.stderr
    for entries in CONTRACT.values():
        for name in entries:
            assert re.search(rf"^\s+{name}\(", done.stdout, re.M)
    assert "PTX ISA" in done.stdout and "sm_80" in done.stdout
    assert "matmul(.u64, .u64, .u64, .u64, .u64, .u64)  .maxntid 256,1,1" in done.stdout


def test_cli_check(built: tuple[Path, Path]) -> None:
    src, out = built
    assert run_build_py("--check", "--src", str(src), "--out", str(out)).returncode == 0
    (src / "extra.cu").write_text('extern "C" __global__ void extra() {}\n')
    done = run_build_py("--check", "--src", str(src), "--out", str(out))
    assert done.returncode == 1 and "extra.cu" in done.stdout
    assert not (out / "extra.ptx").exists()  # --check compiles nothing


# ---------------------------------------------------------------------------------------------------------
# The committed PTX (rawcuda/kernels)


def committed_ptx() -> list[Path]:
    return sorted(kernels.KERNEL_DIR.glob("*.ptx"))


def test_every_kernel_source_has_committed_ptx() -> None:
    assert sorted(p.stem for p in committed_ptx()) == sorted(p.stem for p in SOURCES.glob("*.cu")) == STEMS
    assert list(kernels.load_manifest()["kernels"]) == STEMS


@pytest.mark.parametrize("path", committed_ptx(), ids=lambda p: p.name)
def test_committed_ptx_passes_ptxas_for_sm_90(path: Path, tmp_path: Path) -> None:
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not on PATH")
    done = subprocess.run(
        [ptxas, "-arch=sm_90", str(path), "-o", str(tmp_path / "out.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_manifest_matches_the_committed_ptx() -> None:
    manifest = kernels.load_manifest()
    for stem, record in manifest["kernels"].items():
        info = ptx.parse_file(kernels.ptx_path(stem))
        assert record["ptx"] == f"{stem}.ptx" and record["source"] == f"{stem}.cu"
        assert (record["ptx_version"], record["target"], record["address_size"]) == (
            info.version_text,
            info.target,
            info.address_size,
        )
        assert list(record["entries"]) == list(info.entries)
        for name, entry in info.entries.items():
            assert record["entries"][name] == kernelbuild.entry_record(entry), f"{stem}: {name}"
        own = nvcc_tool.source_options(SOURCES / record["source"], BuildOptions())
        assert record["options"] == own.to_json(), "the committed PTX must use the default options (+ its own line's)"
        assert own.fast_math == (stem in FAST_MATH_STEMS)
        assert (own.arch == "compute_90") == (stem in HOPPER_STEMS)


def test_committed_ptx_is_up_to_date(nvcc: str, tmp_path: Path) -> None:
    manifest = kernels.load_manifest()
    compiler = nvcc_tool.probe(nvcc)
    if compiler.version != manifest["nvcc_version"]:
        pytest.skip(
            f"the local nvcc ({compiler.release}) is not the one that built the committed PTX "
            f"({manifest['kernels'][STEMS[0]]['nvcc_release']}), so its cache keys differ by design"
        )
    plain = [r for stem, r in manifest["kernels"].items() if stem not in FAST_MATH_STEMS + HOPPER_STEMS]
    options = {BuildOptions.from_json(record["options"]) for record in plain}
    assert len(options) == 1, "the committed kernels were built with different options"
    result = kernelbuild.build(SOURCES, tmp_path, options.pop(), nvcc=nvcc)
    assert sorted(result.built) == STEMS
    rebuilt = kernels.load_manifest(tmp_path)["kernels"]
    stale = [s for s in STEMS if rebuilt[s]["cache_key"] != manifest["kernels"][s]["cache_key"]]
    assert not stale, f"committed PTX is out of date for {stale}: run `python build.py` and commit the result"
    for stem in STEMS:
        fresh, committed = (tmp_path / f"{stem}.ptx").read_bytes(), kernels.ptx_path(stem).read_bytes()
        assert fresh == committed, f"{stem}.ptx differs from what nvcc produces"


# ---------------------------------------------------------------------------------------------------------
# Reproducible PTX: no path of the checkout (or the toolkit) reaches it (rawcuda.tools.reproducible)

#: What a checkout needs to build its kernels: the command line, the package it imports, the sources.
BUILD_MACHINERY = ("build.py", "rawcuda", "kernels")


def copy_checkout(dest: Path) -> Path:
    """The build machinery of this checkout, copied to ``dest`` (caches left behind)."""
    for name in BUILD_MACHINERY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def run_copy(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python build.py ARGS`` in ``checkout``, importing that checkout's rawcuda (not this one's)."""
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    return subprocess.run(
        [sys.executable, "build.py", *args], cwd=checkout, env=environment, capture_output=True, text=True, timeout=300
    )


def test_a_checkout_at_another_path_builds_the_same_bytes(nvcc: str, tmp_path: Path) -> None:
    manifest = kernels.load_manifest()
    if nvcc_tool.probe(nvcc).version != manifest["nvcc_version"]:
        pytest.skip("the local nvcc is not the one that built the committed PTX, so its bytes differ by design")
    # Deeper than ROOT and named differently, so that no path of the two can be the other's.
    checkout = copy_checkout(tmp_path / "another" / "place" / "for-a-clone")
    assert ROOT.name != checkout.name
    check = run_copy(checkout, "--check")
    assert check.returncode == 0, f"--check depends on the checkout's path:\n{check.stdout}{check.stderr}"
    done = run_copy(checkout, "--force", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    built = checkout / "rawcuda" / "kernels"
    names = sorted(p.name for p in kernels.KERNEL_DIR.iterdir() if p.suffix in (".ptx", ".json"))
    assert names == sorted(p.name for p in built.iterdir() if p.suffix in (".ptx", ".json"))
    differ = [n for n in names if (built / n).read_bytes() != (kernels.KERNEL_DIR / n).read_bytes()]
    assert not differ, f"built at {checkout}, these differ from the committed ones: {differ}"


def test_committed_ptx_records_no_absolute_path() -> None:
    for path in committed_ptx():
        text = path.read_text()
        names = reproducible.file_names(text)
        assert names, f"{path.name}: no .file directives (was it built without -lineinfo?)"
        assert not [n for n in names if Path(n).is_absolute()], f"{path.name}: {names}"
        # Its own source -- or, for a source that only #includes another (transcendentals_fast.cu), that one.
        assert any(n.startswith(f"{SOURCES.name}/") for n in names), f"{path.name}: {names}"
        assert str(ROOT) not in text
    assert str(ROOT) not in (kernels.KERNEL_DIR / kernels.MANIFEST_NAME).read_text()


def test_relocate_files_rewrites_only_file_names_under_the_folders() -> None:
    text = (
        '\t.file\t1 "/home/u/co/kernels/saxpy.cu"\n'
        '\t.file\t2 "/opt/cuda/bin/../targets/x/include/crt/math_functions.hpp", 0, 100\n'
        '\t.file\t3 "/usr/include/stdio.h"\n'
        "\t.loc\t1 20 5 // /home/u/co/kernels/saxpy.cu is not a .file\n"
    )
    pairs = reproducible.relocations(Path("/home/u/co/kernels"), ["/opt/cuda/bin/../targets/x/include"])
    assert reproducible.relocate_files(text, pairs) == (
        '\t.file\t1 "kernels/saxpy.cu"\n'
        '\t.file\t2 "crt/math_functions.hpp", 0, 100\n'  # the optional time stamp and size stay
        '\t.file\t3 "/usr/include/stdio.h"\n'  # under no folder: left alone (the test above catches it)
        "\t.loc\t1 20 5 // /home/u/co/kernels/saxpy.cu is not a .file\n"
    )
    # The more specific folder wins: the toolkit's cccl/ include folder lies inside its include/ folder.
    nested = reproducible.relocations(Path("/k"), ["/t/include", "/t/include/cccl"])
    assert reproducible.relocate_files('.file 1 "/t/include/cccl/cuda/std/x.h"', nested) == '.file 1 "cuda/std/x.h"'


def test_recorded_name_is_relative_to_the_checkout_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "kernels"
    (src / "sub").mkdir(parents=True)
    assert reproducible.recorded_name(src / "sub" / "a.cu", src) == "kernels/sub/a.cu"
    monkeypatch.chdir(src)  # `build.py --src .`: the folder's own name, not ""
    assert reproducible.recorded_name(Path("a.cu"), Path(".")) == "kernels/a.cu"
    assert reproducible.source_path_flags("kernels/a.cu") == [
        "-Xcicc",
        reproducible.ORIG_SRC_PATH_OPTION,
        "-Xcicc",
        "kernels/a.cu",
    ]


def test_toolkit_include_dirs_come_from_nvcc_dryrun(tmp_path: Path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        "echo '#$ TOP=/opt/cuda/bin/..' >&2\n"
        "echo '#$ INCLUDES=\"-I/opt/cuda/bin/../targets/t/include\"  ' >&2\n"
        'echo \'#$ SYSTEM_INCLUDES="-isystem" "/opt/cuda/bin/../targets/t/include/cccl"  \' >&2\n'
    )
    fake.chmod(0o755)
    compiler = Compiler(str(fake), "release 99.0, V99.0.0")
    assert reproducible.toolkit_include_dirs(compiler) == [
        "/opt/cuda/bin/../targets/t/include",
        "/opt/cuda/bin/../targets/t/include/cccl",
    ]
    assert reproducible.toolkit_include_dirs(Compiler(str(tmp_path / "missing"), "")) == []


# ---------------------------------------------------------------------------------------------------------
# rawcuda.kernels


def test_ptx_path() -> None:
    assert kernels.ptx_path("vector_add") == kernels.KERNEL_DIR / "vector_add.ptx"
    with pytest.raises(FileNotFoundError) as caught:
        kernels.ptx_path("no_such_kernel")
    message = str(caught.value)
    assert "no_such_kernel" in message and str(kernels.KERNEL_DIR) in message and "python build.py" in message
    with pytest.raises(ValueError, match="stem"):
        kernels.ptx_path("../vector_add")


def test_load_manifest_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"python build\.py"):
        kernels.load_manifest(tmp_path)


def test_source_dir_is_the_checkouts_kernels_folder() -> None:
    # kernelbuild.py sits two folders below the checkout (rawcuda/tools/); once it pointed at rawcuda/kernels,
    # the PTX folder, and the demo then reported "no *.cu files" and never rebuilt stale PTX.
    checkout_kernels = ROOT / "kernels"
    assert checkout_kernels == kernelbuild.SOURCE_DIR
    assert (kernelbuild.SOURCE_DIR / "vector_add.cu").is_file()
