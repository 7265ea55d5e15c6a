"""The test suite's own layout: every test file in tests/cpu/ or tests/gpu/, and the folder agrees with the marker.

tests/cpu/ must hold no gpu-marked test (it runs everywhere); every test collected from tests/gpu/ must be
marked ``gpu`` (tests/conftest.py adds the marker by folder). The markers are read the way a user selects
by them: ``pytest --collect-only -m gpu`` and ``-m "not gpu"``, in a child process over the whole of tests/,
so the check holds also when only this file is run.
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import CPU_DIR, GPU_DIR, ROOT, TESTS_DIR

TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")  # pytest's default python_files
CPU_PREFIX = CPU_DIR.relative_to(ROOT).as_posix() + "/"
GPU_PREFIX = GPU_DIR.relative_to(ROOT).as_posix() + "/"


def collected(marker_expression: str) -> list[str]:
    """The node ids pytest selects from tests/ with ``-m marker_expression``."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker_expression,
            str(TESTS_DIR),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"collection failed (status {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_every_test_file_is_in_cpu_or_gpu() -> None:
    files = sorted({path for pattern in TEST_FILE_PATTERNS for path in TESTS_DIR.rglob(pattern)})
    misplaced = [str(path.relative_to(ROOT)) for path in files if path.parent not in (CPU_DIR, GPU_DIR)]
    assert files and not misplaced, f"test files outside tests/cpu/ and tests/gpu/: {misplaced}"


def test_the_folder_is_the_marker() -> None:
    gpu, not_gpu = collected("gpu"), collected("not gpu")
    assert gpu and not_gpu
    in_cpu = [node for node in gpu if node.startswith(CPU_PREFIX)]
    assert not in_cpu, f"gpu-marked tests in tests/cpu/ (move them to tests/gpu/): {in_cpu}"
    unmarked = [node for node in not_gpu if node.startswith(GPU_PREFIX)]
    assert not unmarked, f"tests in tests/gpu/ without the gpu marker: {unmarked}"
    elsewhere = [node for node in gpu + not_gpu if not node.startswith((CPU_PREFIX, GPU_PREFIX))]
    assert not elsewhere, f"tests collected outside tests/cpu/ and tests/gpu/: {elsewhere}"
