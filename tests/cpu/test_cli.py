"""``python -m rawcuda doctor`` and ``python -m rawcuda demo`` without a GPU, as a user runs them.

With a GPU: tests/gpu/test_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, run_cli


def test_doctor_without_a_driver_names_the_problem_and_the_fix() -> None:
    proc = run_cli("doctor", RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "[PROBLEM] libcuda" in proc.stdout and "/nonexistent/libcuda.so.1" in proc.stdout
    assert "fix: install the NVIDIA driver" in proc.stdout and "1 problem(s)" in proc.stdout
    assert "multiprocessing" in proc.stdout and "nvcc" in proc.stdout


def test_doctor_recognises_the_stub_library(fake_libcuda: Path) -> None:
    proc = run_cli("doctor", RAWCUDA_LIBCUDA=str(fake_libcuda), FAKECUDA_MODE="stub")
    assert proc.returncode == 1
    assert "stub library" in proc.stdout and "RAWCUDA_LIBCUDA" in proc.stdout


def test_demo_without_a_driver_says_so_in_one_line() -> None:
    if gpu_unavailable_reason() is None:
        pytest.skip("this machine has a GPU: the demo runs for real in test_demo_on_the_gpu")
    proc = run_cli("demo")
    assert proc.returncode == EXIT_NO_GPU and "Traceback" not in proc.stdout + proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("skipped:")] != []
