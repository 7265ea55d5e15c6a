"""The SGEMM kernels run on the CPU under AddressSanitizer and UBSan: every index checked without a GPU.

tests/gpu/test_sgemm.py checks the kernels' results on a GPU. This checks what a GPU does not report: a read
past a matrix that happens to find harmless memory, a float4 access that is not 16-byte aligned, a write
before or after C. kernels/sgemm.cu is compiled as C++ against tests/kernels/cuda_on_cpu.h (a std::thread per
CUDA thread, a std::barrier for __syncthreads) with ``-fsanitize=address,undefined``; each kernel then runs in
a child interpreter with the sanitizer runtimes preloaded (tests/kernels/sgemm_on_cpu.py), launched with the
grid and block of rawcuda.ops.sgemm's table, on shapes that fit no tile, with gridDim.y capped at 1, and on
unaligned buffers where the kernel takes them; every element is compared with numpy. A last test shows that
the sanitizers do catch what they are here for: a float4 kernel handed an unaligned buffer.

Skipped without g++ (10 or later: C++20's std::barrier) and its sanitizer runtimes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rawcuda.ops import sgemm
from tests.helpers import ROOT, TESTS_DIR

SOURCE = TESTS_DIR / "kernels" / "sgemm_on_cpu.cpp"
RUNNER = TESTS_DIR / "kernels" / "sgemm_on_cpu.py"
RUNTIMES = ("libasan.so", "libubsan.so")  # what g++ links for -fsanitize=address,undefined
FLAGS = [
    "-std=c++20",
    "-O1",  # the sanitizers' own advice: fast enough, and every access still checked
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",  # a UBSan finding ends the process (non-zero status), not just a line
    "-Wno-unknown-pragmas",  # #pragma unroll is nvcc's
    "-shared",
    "-fPIC",
    "-pthread",
]
TIMEOUT_S = 300


def compiler() -> str:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to build the kernels for the CPU")
    return cxx


def runtime(cxx: str, name: str) -> str:
    """The sanitizer runtime g++ links (``g++ -print-file-name`` echoes the bare name when it has none)."""
    path = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    if not Path(path).is_absolute() or not Path(path).exists():
        pytest.skip(f"g++ has no {name} (its sanitizer runtime)")
    return path


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """kernels/sgemm.cu built for the CPU with the sanitizers, and the environment that runs it."""
    cxx = compiler()
    preload = ":".join(runtime(cxx, name) for name in RUNTIMES)
    work = tmp_path_factory.mktemp("sgemm_on_cpu")
    probe = work / "probe.cpp"
    probe.write_text("#include <barrier>\nint f() { std::barrier<> b(1); b.arrive_and_wait(); return 0; }\n")
    if subprocess.run([cxx, *FLAGS, "-o", str(work / "probe.so"), str(probe)], capture_output=True).returncode:
        pytest.skip(f"{cxx} cannot build C++20 with -fsanitize=address,undefined")
    (work / "sgemm_kernels.inc").write_text("".join(f'{{"{name}", {name}}},\n' for name in sgemm.KERNELS))
    library = work / "libsgemm_on_cpu.so"
    build = subprocess.run(
        [cxx, *FLAGS, "-I", str(work), "-o", str(library), str(SOURCE)], capture_output=True, text=True
    )
    assert build.returncode == 0, f"kernels/sgemm.cu does not build for the CPU:\n{build.stderr[-4000:]}"
    env = dict(os.environ, LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    env["PYTHONPATH"] = str(ROOT)
    return library, env


def run(emulator: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    library, env = emulator
    return subprocess.run(
        [sys.executable, str(RUNNER), str(library), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize("name", list(sgemm.KERNELS))
def test_kernel_on_the_cpu_under_the_sanitizers(emulator: tuple[Path, dict[str, str]], name: str) -> None:
    proc = run(emulator, name)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "cases verified" in proc.stdout and "FAILED" not in proc.stdout, output[-6000:]
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, output[-6000:]


def test_the_sanitizers_catch_a_misaligned_float4(emulator: tuple[Path, dict[str, str]]) -> None:
    # What rawcuda.ops.sgemm refuses on the host (a float4 kernel, a buffer 4 bytes past an aligned start) is run
    # here anyway: UBSan must stop it. A test that could never fail would prove nothing.
    proc = run(emulator, "sgemm_07_warptile", "--misaligned")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "misaligned address" in proc.stderr and "16 byte alignment" in proc.stderr, proc.stderr[-4000:]
