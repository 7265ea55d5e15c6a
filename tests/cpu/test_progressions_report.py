"""bench/progressions.py's report without a GPU: the targets, the tables and the plot from a result of the
shape the bench writes, how bench/run_all.py folds it in, and the one-line skip when there is no GPU.

The measurements themselves need an H200: ``python3 bench/progressions.py`` (or ``bench/run_all.py``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import EXIT_NO_GPU, ROOT, python_env

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # the bench scripts import each other from their folder

import progressions_report  # noqa: E402
import run_all  # noqa: E402

NO_DRIVER = "/nonexistent/libcuda.so.1"


def fake_result(*, peers_available: bool = True, verified: bool = True) -> dict[str, Any]:
    """A progressions result with made-up numbers, in the layout bench/progressions.py writes."""
    steps = [
        {"step": k, "kernel": f"reduce_{k:02}", "change": f"change {k}", "passes": 2, "ms": 1.0 / k,
         "gbps": 500.0 * k, "verified": verified}
        for k in range(1, 10)
    ]  # fmt: skip
    if peers_available:
        peers = [{"name": "cupy.sum", "ms": 0.3, "gbps": 4000.0, "verified": True},
                 {"name": "torch.sum", "ms": 0.3, "gbps": 4600.0, "verified": True}]  # fmt: skip
    else:
        peers = [{"name": n, "unavailable": "ModuleNotFoundError: no module"} for n in ("cupy.sum", "torch.sum")]
    data: dict[str, Any] = {
        "meta": {"date": "2026-12-02", "gpu": "NVIDIA H200", "driver": "580.159.04 (CUDA 13.0)",
                 "python": "3.12.3", "numpy": "2.5.2", "reps": 20, "warmup": 3},
        "reduction": {"n": 1 << 28, "bytes": 1 << 30, "copy_gbps": 4200.0, "steps": steps, "peers": peers},
        "transpose": {"shape": [8192, 8192], "copy_gbps": 4200.0,
                      "variants": [{"variant": v, "kernel": f"transpose_{v}", "ms": 0.2, "gbps": g, "verified": True}
                                   for v, g in (("naive", 600.0), ("unpadded", 2000.0), ("padded", 3400.0))]},
        "block_size": {"n": 1 << 28, "copy_gbps": 4200.0, "max_threads_per_sm": 2048,
                       "rows": [{"block": b, "grid": (1 << 28) // b, "blocks_per_sm": min(32, 2048 // b),
                                 "threads_per_sm": min(32, 2048 // b) * b, "occupancy": min(32, 2048 // b) * b / 2048,
                                 "ms": 0.6, "gbps": 3500.0, "verified": True} for b in (32, 64, 128, 256, 512, 1024)]},
        "fast_math": {"error_elements": 1 << 18,
                      "rows": [{"kernel": k, "build": b, "n": 1 << 24, "ms": 1.0, "rate": 10.0, "unit": u,
                                "copy_gbps": c, "verified": True, "max_abs_error": 1e-7, "max_rel_error": 1e-7}
                               for k, u, c in (("transcendental_chain", "Gterms/s", None), ("exp_map", "GB/s", 4200.0))
                               for b in ("precise", "fast")],
                      "sin_accuracy": [{"kernel": "sin_map", "build": b, "range": r, "max_abs_error": 1e-7,
                                        "max_rel_error": 1e-6}
                                       for r in (3.14159, 1e3, 1e6) for b in ("precise", "fast")]},
    }  # fmt: skip
    data["targets"] = progressions_report.targets(data)
    return data


def test_targets_compare_the_last_step_with_each_peer() -> None:
    targets = {goal: (met, numbers) for goal, met, numbers in fake_result()["targets"]}
    assert targets["last reduction step (reduce_09) >= cupy.sum"] == (True, "4500 vs 4000 GB/s")
    assert targets["last reduction step (reduce_09) >= torch.sum"] == (False, "4500 vs 4600 GB/s")
    assert targets["every step verified before it was timed"] == (
        True,
        "22 of 22",
    )  # 9 steps, 3 transposes, 6 block sizes, 4 builds


def test_a_missing_peer_or_a_failed_check_is_reported_not_hidden() -> None:
    targets = {goal: (met, numbers) for goal, met, numbers in fake_result(peers_available=False)["targets"]}
    assert targets["last reduction step >= cupy.sum"] == (None, "not available: ModuleNotFoundError: no module")
    failed = {goal: met for goal, met, _ in fake_result(verified=False)["targets"]}
    assert failed["every step verified before it was timed"] is False


def test_the_tables_show_every_step_with_its_share_of_the_copy() -> None:
    text = progressions_report.markdown(fake_result(peers_available=False))
    for k in range(1, 10):
        assert f"| {k} | `reduce_{k:02}` | change {k} | 2 |" in text
    assert "| 9 | `reduce_09` | change 9 | 2 | 0.111 | 4500 | 107.1% | yes |" in text
    assert "| peer | `cupy.sum` | ModuleNotFoundError: no module | | — | — | — | — |" in text
    assert "| padded | `transpose_padded` | 0.200 | 3400 | 81.0% | yes |" in text
    assert "| 32 | 8,388,608 | 32 | 1024 | 50% |" in text
    assert "| `transcendental_chain` | fast | 16,777,216 | 1.000 | 10.0 Gterms/s | — |" in text
    assert "| [-1e+06, 1e+06] | fast |" in text
    assert "{" not in text and "}" not in text, "a format field was left unfilled"


def test_run_all_folds_the_progressions_into_its_report() -> None:
    result = fake_result()
    data = {"meta": {"date": "2026-12-02", "gpu": "NVIDIA H200", "driver_cuda": "13.0", "versions": {}},
            "steps": {"progressions": "ok in 40 s"}, "progressions": result,
            "progressions_md": "### Reduction ..."}  # fmt: skip
    data["targets"] = run_all.targets(data)
    text = run_all.markdown(data)
    assert "## 8. Kernel progressions (bench/progressions.py)\n\n### Reduction ..." in text
    assert "| last reduction step (reduce_09) >= torch.sum | NO | 4500 vs 4600 GB/s |" in text
    assert "progressions" in run_all.STEPS and run_all.STEP_ARGS["progressions"] == ["--name", "progressions"]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed (plot extra)")
def test_the_plot_has_a_chart_per_progression(tmp_path: Path) -> None:
    path = tmp_path / "p.png"
    assert progressions_report.plot(fake_result(peers_available=False), path) == "plot: p.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_bench_without_a_gpu_skips_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    command = [sys.executable, str(BENCH / "progressions.py"), "--out", str(out)]
    proc = subprocess.run(
        command, env=python_env(RAWCUDA_LIBCUDA=NO_DRIVER), capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == EXIT_NO_GPU, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: no usable GPU here (DriverNotFoundError:"), lines
    assert not out.exists()
