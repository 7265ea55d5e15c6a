"""Bandwidth and throughput of the shipped kernels, next to the copy ceiling and the peers (GPU).

Every figure is the median of REPS runs timed with CUDA events after WARMUP runs, on fresh random data.
Bandwidths count the bytes a kernel must move (reads + writes); the device-to-device copy measured in the
same run is the practical ceiling. The reduction is also compared with ``cupy.sum`` and ``torch.sum`` over
the *same* memory (shared zero-copy through ``__cuda_array_interface__``).

Usage: python bench/kernels.py [--out DIR]   (writes kernels.json / kernels.md there)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import DeviceBuffer, ops, time_ms
from rawcuda.checked import cu

WARMUP = 3
REPS = 20
GIB = 1 << 30
FLOATS_PER_GIB = GIB // 4
TRANSPOSE_N = 8192
MATMUL_N = 4096


def gpu_ms(work: Callable[[], object], reps: int = REPS) -> float:
    """Median GPU milliseconds of ``work`` (queued on the legacy default stream) after WARMUP runs."""
    return time_ms(work, reps=reps, warmup=WARMUP).median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng()
    dev = rawcuda.Device(0)
    rows: list[tuple[str, str, float, str]] = []  # (case, unit, value, note)

    a = DeviceBuffer.from_array(rng.standard_normal(FLOATS_PER_GIB, dtype=np.float32))
    b = DeviceBuffer.from_array(rng.standard_normal(FLOATS_PER_GIB, dtype=np.float32))
    c = DeviceBuffer.empty(FLOATS_PER_GIB)

    copy_ms = gpu_ms(lambda: cu.cuMemcpyDtoDAsync(c.ptr, a.ptr, GIB, 0))
    copy_tbs = 2 * GIB / copy_ms / 1e9
    rows.append(("device-to-device copy, 1 GiB (read + write)", "TB/s", copy_tbs, "the ceiling"))

    add_ms = gpu_ms(lambda: ops.vector_add(c, a, b))
    add_tbs = 3 * GIB / add_ms / 1e9
    rows.append(("vector_add, 3 x 1 GiB", "TB/s", add_tbs, f"{add_tbs / copy_tbs:.1%} of the copy"))

    blocks = ops.REDUCE_BLOCKS_PER_SM * dev.multiprocessor_count
    partials, total = DeviceBuffer.empty(blocks), DeviceBuffer.empty(1)

    def reduce() -> None:
        ops.sum_partials(partials, a, blocks)
        ops.sum_partials(total, partials, 1)

    red_ms = gpu_ms(reduce)
    red_tbs = GIB / red_ms / 1e9
    rows.append(
        ("warp_reduce_sum, 1 GiB (read)", "TB/s", red_tbs, f"{red_tbs / copy_tbs:.1%} of the copy's read+write")
    )
    check = ops.sum(a)
    reference = float(a.to_array().astype(np.float64).sum())
    rows.append(("reduction |gpu - float64| / sum|x|", "", abs(check - reference) / GIB * 4, "accuracy"))

    try:
        import cupy

        ca = cupy.asarray(a)
        cupy_ms = gpu_ms(lambda: cupy.sum(ca))
        rows.append(("cupy.sum, same 1 GiB", "TB/s", GIB / cupy_ms / 1e9, f"rawcuda is {cupy_ms / red_ms:.2f}x faster"))
    except Exception as exc:
        rows.append(("cupy.sum", "", float("nan"), f"unavailable: {exc}"))
    try:
        import torch

        ta = torch.as_tensor(a, device="cuda")
        torch_ms = gpu_ms(lambda: torch.sum(ta))
        rows.append(
            ("torch.sum, same 1 GiB", "TB/s", GIB / torch_ms / 1e9, f"rawcuda is {torch_ms / red_ms:.2f}x faster")
        )
    except Exception as exc:
        rows.append(("torch.sum", "", float("nan"), f"unavailable: {exc}"))
    for buf in (b, c, partials, total):
        buf.close()

    x = a.view(0, (TRANSPOSE_N, TRANSPOSE_N))  # 256 MiB of the random data
    t = DeviceBuffer.empty((TRANSPOSE_N, TRANSPOSE_N))
    tr_bytes = 2 * TRANSPOSE_N * TRANSPOSE_N * 4
    naive_ms = gpu_ms(lambda: ops.transpose(t, x, padded=False))
    padded_ms = gpu_ms(lambda: ops.transpose(t, x, padded=True))
    rows.append((f"transpose_naive {TRANSPOSE_N}^2", "TB/s", tr_bytes / naive_ms / 1e9, ""))
    rows.append(
        (
            f"transpose_padded {TRANSPOSE_N}^2",
            "TB/s",
            tr_bytes / padded_ms / 1e9,
            f"{naive_ms / padded_ms:.2f}x faster than naive",
        )
    )
    t.close()

    m = MATMUL_N
    ma = DeviceBuffer.from_array(rng.standard_normal((m, m), dtype=np.float32))
    mb = DeviceBuffer.from_array(rng.standard_normal((m, m), dtype=np.float32))
    mc = DeviceBuffer.empty((m, m))
    flops = 2 * m**3
    mm_ms = gpu_ms(lambda: ops.matmul(mc, ma, mb), reps=10)
    rows.append((f"matmul fp32 {m}^3", "TFLOP/s", flops / mm_ms / 1e9, ""))
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32, like ours
        ta_, tb_ = torch.as_tensor(ma, device="cuda"), torch.as_tensor(mb, device="cuda")
        torch_mm = gpu_ms(lambda: torch.matmul(ta_, tb_), reps=10)
        rows.append(
            (
                f"torch.matmul fp32 {m}^3 (TF32 off)",
                "TFLOP/s",
                flops / torch_mm / 1e9,
                f"rawcuda reaches {torch_mm / mm_ms:.0%} of torch",
            )
        )
    except Exception as exc:
        rows.append(("torch.matmul", "", float("nan"), f"unavailable: {exc}"))
    for buf in (a, ma, mb, mc):
        buf.close()

    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "reps": REPS,
    }
    (args.out / "kernels.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [
        f"# Kernels ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']})",
        "",
        "| case | value | unit | note |",
        "|---|---:|---|---|",
    ]
    lines += [f"| {case} | {value:.3g} | {unit} | {note} |" for case, unit, value, note in rows]
    (args.out / "kernels.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
