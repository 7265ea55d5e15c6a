"""bench/sgemm.py's reporting, on made-up numbers: targets, the Markdown, the plot, and run_all's use of them.

The benchmark runs on a GPU, seldom (device time is scarce); a KeyError in its table code would waste a
run. So what it does with its measurements -- deciding the targets, writing the Markdown and the PNG, and
bench/run_all.py folding them into the combined results -- is run here on rows shaped like the real ones
(every kernel of rawcuda.ops.sgemm, a torch peer, the previous kernel, one kernel that failed verification).
Without a GPU the script itself must skip in one line with status 77, writing nothing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rawcuda.ops import sgemm
from tests.helpers import EXIT_NO_GPU, ROOT, python_env

BENCH = ROOT / "bench"
NO_DRIVER = "/nonexistent/libcuda.so.1"
PEER_TFLOPS = 50.0


def load_script(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:  # the bench scripts import each other from their folder (run_all.py does)
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("sgemm")


def made_up(bench: ModuleType, fastest: float) -> dict[str, Any]:
    """A result file as bench/sgemm.py writes it; the fastest tuned kernel runs at ``fastest`` TFLOP/s."""
    rows: list[dict[str, Any]] = []
    for label in bench.SHAPES:
        rows.append({"kind": "peer", "kernel": "torch.matmul", "summary": "cuBLAS", "shape": label})
        rows[-1].update(verified=True, error_ratio=0.01, ms=1.0, tflops=PEER_TFLOPS)
        rows.append({"kind": "previous", "kernel": "matmul (kernels/matmul.cu)", "summary": "before", "shape": label})
        rows[-1].update(verified=True, error_ratio=0.02, ms=2.0, tflops=19.1)
        for i, spec in enumerate(sgemm.KERNELS.values()):
            kind = "tf32" if spec.tf32 else "step" if spec in sgemm.STEPS else "tune" if spec in sgemm.TUNE else "any"
            speed = fastest if spec.name == sgemm.TUNE[-1].name else 100.0 if spec.tf32 else 1.0 + i
            rows.append({"kind": kind, "kernel": spec.name, "summary": spec.summary, "shape": label})
            rows[-1].update(verified=True, error_ratio=0.05, relative_error=3e-5, ms=1.0, tflops=speed)
        rows.append({"kind": "peer-tf32", "kernel": "torch.matmul (TF32)", "summary": "cuBLAS, TF32", "shape": label})
        rows[-1].update(verified=True, error_ratio=0.04, relative_error=2e-5, ms=0.2, tflops=400.0)
    failed = rows[-2]  # one kernel failed its verification: not timed
    failed.update(verified=False, failed=True, error_ratio=7.5)
    del failed["tflops"], failed["ms"], failed["relative_error"]
    bench.share_of_peer(rows)
    facts = {
        name: {"registers": 128, "local_bytes": 0, "shared_bytes": 1, "blocks_per_sm": 2} for name in sgemm.KERNELS
    }
    meta = {"date": "2026-12-01", "gpu": "NVIDIA H200", "driver_cuda": "13.0", "torch": "2.11.0", "seconds": 99.0}
    data = {"meta": meta, "shapes": bench.SHAPES, "rows": rows, "facts": facts}
    data["targets"] = bench.targets(rows)
    return data


def test_targets_say_met_or_not_with_the_numbers(bench: ModuleType) -> None:
    met = made_up(bench, 0.8 * PEER_TFLOPS)["targets"]
    missed = made_up(bench, 0.79 * PEER_TFLOPS)["targets"]
    assert [goal for goal, _, _ in met] == [
        "best fp32 SGEMM >= 80% of torch.matmul (square)",
        "best fp32 SGEMM >= 80% of torch.matmul (tall)",
        "stretch: TF32 tensor-core step (square), no target",
        "stretch: TF32 tensor-core step (tall), no target",
        "every kernel verified against float64 numpy",
    ]
    assert [ok for _, ok, _ in met] == [True, True, None, None, False]
    assert [ok for _, ok, _ in missed] == [False, False, None, None, False]
    assert met[0][2] == f"{sgemm.TUNE[-1].name}: 40.0 vs 50.0 TFLOP/s (80%)"
    assert met[2][2] == "100.0 TFLOP/s vs torch TF32 400.0 (25%); max error 3e-05 x abs(A)@abs(B)"
    assert met[4][2] == f"{sgemm.ANY[-1].name} (tall)", "the failed kernel is named"


def test_markdown_has_a_row_per_kernel_and_names_the_fastest(bench: ModuleType) -> None:
    text = bench.markdown(made_up(bench, 45.0))
    for name in sgemm.KERNELS:
        assert text.count(f"| {name} |") == len(bench.SHAPES), name
    assert (
        "| torch.matmul | cuBLAS | 50.00 | 100% |" in text
        and "| matmul (kernels/matmul.cu) | before | 19.10 | 38% |" in text
    )
    assert f"Fastest for ops.MATMUL_KERNEL at this shape: `{sgemm.TUNE[-1].name}` (45.00 TFLOP/s)." in text
    assert "| FAILED |" in text and "| best fp32 SGEMM >= 80% of torch.matmul (square) | yes |" in text


def test_plot_is_written(bench: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "sgemm.png"
    assert bench.plot(made_up(bench, 45.0), path) == "plot: sgemm.png"
    assert path.stat().st_size > 10_000


def test_run_all_folds_the_progression_in(bench: ModuleType, tmp_path: Path) -> None:
    run_all = load_script("run_all")
    results = made_up(bench, 45.0)
    (tmp_path / "2026-12-01-NVIDIA_H200-sgemm.json").write_text(json.dumps(results))
    data: dict[str, Any] = {"sgemm": run_all.load(tmp_path, "sgemm"), "steps": {"sgemm": "ok in 99 s"}}
    data["sgemm_md"] = bench.markdown(results).split("\n", 2)[-1].strip()
    data["meta"] = {"date": "2026-12-01", "gpu": "NVIDIA H200", "driver_cuda": "13.0", "versions": {"numpy": "2"}}
    data["targets"] = run_all.targets(data)
    assert ("best fp32 SGEMM >= 80% of torch.matmul (square)", True, results["targets"][0][2]) in data["targets"]
    text = run_all.markdown(data)
    assert "## 7. SGEMM progression" in text and "\n### square: M=4096, N=4096, K=4096\n" in text


def test_sgemm_bench_without_a_gpu_skips_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "sgemm.py"), "--out", str(out)],
        cwd=ROOT,
        env=python_env(RAWCUDA_LIBCUDA=NO_DRIVER),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == EXIT_NO_GPU and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: no usable GPU here (DriverNotFoundError:"), lines
    assert not out.exists()


def test_run_all_says_whether_the_launch_targets_are_reachable_over_ctypes() -> None:
    """The floor rows: a bound target below the bare Python-plus-ctypes call is reported as unreachable."""
    run_all = load_script("run_all")
    launch = {
        "rawcuda_launch": {"us": 5.5},
        "cuda_core": {"us": 5.1},
        "cuda_bindings": {"us": 4.6},
        "python_floor": {"us": 4.7},
    }
    rows = {goal: (met, numbers) for goal, met, numbers in run_all.floor_targets(launch)}
    reach = rows["the floor over ctypes (python_floor) <= cuda.bindings: the bound target is reachable"]
    assert reach == (False, "python_floor 4.70 vs cuda.bindings 4.60 us")
    checks = rows["Function.launch's checks above the floor <= cuda.core's whole call above it"]
    assert checks[0] is False and checks[1].startswith("checks +0.80 us; cuda.core +0.40 us")
    assert run_all.floor_targets({"rawcuda_launch": {"us": 1.0}}) == []  # no floor measured: nothing claimed
