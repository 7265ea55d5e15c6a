"""Shared test machinery: the `gpu` marker, a fake libcuda, and a way to run code in a fresh interpreter.

GPU tests are marked ``@pytest.mark.gpu``. On a machine without a usable driver and GPU they are skipped,
and the skip reason is the first line of the error rawcuda itself raised (so `pytest -rs` shows *why*).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE_SOURCE = Path(__file__).resolve().parent / "fakecuda" / "fakecuda.c"


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when a driver loads and sees a GPU; otherwise why not, in one line."""
    try:
        from rawcuda import checked

        checked.init()
        count = ctypes.c_int()
        checked.cu.cuDeviceGetCount(ctypes.byref(count))
        if count.value < 1:
            return "the NVIDIA driver loaded but reports no GPU"
    except Exception as exc:  # any failure to reach a GPU is a reason to skip, shown verbatim
        return f"no usable GPU: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


def python_env(**extra: str) -> dict[str, str]:
    """The environment for a child interpreter that imports rawcuda from this source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RAWCUDA_LIBCUDA", None)
    env.update(extra)
    return env


def run_python(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (fresh driver state) and capture what it printed."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=python_env(**env), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fakecuda/fakecuda.c built as a shared library (skips when there is no C compiler)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler to build the fake libcuda")
    out = tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(FAKE_SOURCE)], check=True)
    return out
