"""bench/hopper.py without a GPU, and its report on made-up numbers: device time is scarce, and a KeyError in
the table code would waste a run on the H200."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, ROOT, python_env

SCRIPT = ROOT / "bench" / "hopper.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_hopper", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: the benchmark would measure")
def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=60,
    )
    assert run.returncode == EXIT_NO_GPU, run.stdout + run.stderr
    assert run.stdout.startswith("skipped: no usable GPU here") and "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_report_has_a_row_per_figure_with_its_ratio(bench: ModuleType) -> None:
    meta = {"date": "2026-12-02", "gpu": "GPU", "driver_cuda": "13.0"}
    results = {
        "reductions": {
            "us": {"two passes": 100.0, "cluster of 2 + pass 2": 90.0, "cooperative grid_sum, 1056 blocks": 80.0}
        },
        "chains": {"plain, stream": 2.5, "PDL, graph": 0.55},
        "tile_copies": {"plain loads and stores": 2000.0, "cuMemcpyDtoDAsync (the ceiling)": 4000.0},
    }
    text = bench.markdown(meta, results)
    assert "| cluster of 2 + pass 2 | 90.0 | 0.90x |" in text
    assert "| cooperative grid_sum, 1056 blocks | 80.0 | 0.80x |" in text
    assert "| PDL, graph | 0.55 |" in text
    assert (
        "| plain loads and stores | 2000 | 50% |" in text
        and "| cuMemcpyDtoDAsync (the ceiling) | 4000 | 100% |" in text
    )
    assert text.startswith("# Hopper features (2026-12-02, GPU, driver CUDA 13.0)")
