"""``python -m rawcuda doctor`` and ``python -m rawcuda demo`` on a real GPU, as a user runs them."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.gpu


def test_doctor_on_the_gpu() -> None:
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stdout
    assert "[  ok   ] device 0" in proc.stdout and "PTX ISA" in proc.stdout and "no problems found" in proc.stdout


def test_demo_on_the_gpu() -> None:
    proc = run_cli("demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[rawcuda] cuLaunchKernelEx(config=&CUlaunchConfig(gridDimX=" in proc.stdout and "verified on" in proc.stdout
