"""The SGEMM progression of kernels/sgemm.cu, measured: every step and every tuning configuration next to
torch.matmul (cuBLAS) in fp32 with TF32 off, in one run (about 2 minutes on an H200); the TF32 tensor-core
step (09) next to torch.matmul with TF32 on.

For each shape -- SQUARE (4096^3) and TALL (a tall, skinny product) -- every kernel of rawcuda.ops.sgemm.KERNELS
runs once into a NaN-poisoned C and is verified against numpy's float64 product, every element within the
K-term dot-product bound K * eps * (|A| @ |B|) (eps = 2^-23; the TF32 step and torch with TF32: (2^-9 + 2 K
eps) * (|A| @ |B|), rawcuda.ops.sgemm's error_bound), before it is timed. torch.matmul is verified the same way
(which also shows TF32 really was off: TF32 rounds inputs to 10-bit mantissas, far past the fp32 bound).
Times are CUDA events around one launch on the legacy default stream: WARMUP launches, then the median of
at least MIN_REPS and about TARGET_S seconds of launches. TFLOP/s = 2 M N K / time. The kernel
that kernels/matmul.cu shipped before (ops.matmul until the SGEMM progression) is measured as well, for the record.

Writes <date>-<gpu>-sgemm.json and .md to --out (default bench/results), and a .png when matplotlib is
installed (pip install rawcuda[plot]): each kernel's TFLOP/s as a bar, torch as a line. The Markdown states
the SGEMM target -- the best fp32 kernel >= 80% of torch.matmul -- as met or not, with the numbers,
and names the fastest float4 and any-input kernels: the values for ops.MATMUL_KERNEL / MATMUL_ANY_KERNEL.

Usage: python bench/sgemm.py [--out DIR] [--quick]   (--quick: 1024^3 and a smaller tall shape, to try it)
Exit status: 0, 1 if any kernel failed its verification (the files are written all the same), 77 no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rawcuda  # noqa: E402
from rawcuda import DeviceBuffer, ops, time_ms  # noqa: E402
from rawcuda.core.context import default_context  # noqa: E402
from rawcuda.ops import sgemm  # noqa: E402

SHAPES = {"square": (4096, 4096, 4096), "tall": (32768, 64, 4096)}  # (M, N, K): C is M x N
QUICK_SHAPES = {"square": (1024, 1024, 1024), "tall": (8192, 64, 1024)}
WARMUP = 2
MIN_REPS = 5
MAX_REPS = 50
TARGET_S = 0.25  # timed launches per kernel and shape: about this long
TARGET_OF_PEER = 0.80  # the SGEMM target: the best fp32 kernel reaches 80% of torch.matmul (TF32 off)
EPS32 = float(np.finfo(np.float32).eps)
NAN = np.float32(np.nan)
PREVIOUS = ("matmul", "matmul")  # kernels/matmul.cu: ops.matmul's kernel before the SGEMM progression (block 16 x 16)
PREVIOUS_TILE, PREVIOUS_BLOCK = 64, (16, 16)
EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 77
TF32_STEP = sgemm.KERNELS["sgemm_09_tf32"]  # the stretch step: compared with torch's TF32 matmul
TF32_KINDS = ("tf32", "peer-tf32")


def gpu_ms(work: Callable[[], object]) -> float:
    """Median milliseconds of one ``work()`` on the GPU, by CUDA events on the legacy default stream."""
    first = time_ms(work, reps=1, warmup=WARMUP).median  # how long one run takes sets how many to time
    reps = max(MIN_REPS, min(MAX_REPS, math.ceil(TARGET_S * 1000 / max(first, 1e-3))))
    return time_ms(work, reps=reps, warmup=0).median


class Problem:
    """One shape: random A and B on the device, the float64 product and |A| @ |B| on the host."""

    def __init__(self, m: int, n: int, k: int, rng: np.random.Generator) -> None:
        self.m, self.n, self.k = m, n, k
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        self.expected = a64 @ b64
        self.magnitude = np.abs(a64) @ np.abs(b64)  # the bound is a kernel's error_bound(K) times this
        self.a, self.b, self.c = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty((m, n))
        self.flops = 2 * m * n * k

    def error_ratio(self, got: np.ndarray, unit: float) -> float:
        """max |got - expected| / (unit * |A| @ |B|) over every element (<= 1 passes; NaN, unwritten, fails)."""
        ratio = np.abs(got.astype(np.float64) - self.expected) / (unit * self.magnitude + 1e-30)
        return float("inf") if np.isnan(ratio).any() else float(ratio.max())

    def close(self) -> None:
        for buf in (self.a, self.b, self.c):
            buf.close()


def measure(problem: Problem, run: Callable[[], object], unit: float) -> dict[str, Any]:
    """Verify one ``run()`` (which writes problem.c) into a poisoned C within ``unit``, then time it.

    A launch the driver refuses is recorded as a failure and the run goes on to the next kernel (after a
    sticky fault -- an illegal address -- every later launch fails too, and says so).
    """
    try:
        return verified_and_timed(problem, run, unit)
    except rawcuda.RawCudaError as exc:
        return {"verified": False, "failed": True, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}


def verified_and_timed(problem: Problem, run: Callable[[], object], unit: float) -> dict[str, Any]:
    problem.c.fill(NAN)
    run()
    ratio = problem.error_ratio(problem.c.to_array(), unit)
    if not ratio <= 1.0:
        return {"verified": False, "failed": True, "error_ratio": ratio}
    ms = gpu_ms(run)
    # relative_error: max |C - A @ B| / (|A| @ |B|) -- the accuracy itself, where error_ratio is its share of the bound
    found = {"verified": True, "error_ratio": ratio, "relative_error": ratio * unit}
    return {**found, "ms": ms, "tflops": problem.flops / ms / 1e9}


def kernel_facts(name: str) -> dict[str, int]:
    """Registers, local memory (spills) and resident blocks per SM of one sgemm kernel, from the driver."""
    spec = sgemm.KERNELS[name]
    fn = ops.kernel(sgemm.STEM, name, default_context())
    return {
        "registers": fn.num_regs,
        "local_bytes": fn.local_size_bytes,
        "shared_bytes": fn.shared_size_bytes,
        "blocks_per_sm": fn.max_active_blocks_per_sm(spec.threads),
    }


def torch_peer(problem: Problem, tf32: bool) -> tuple[dict[str, Any], str]:
    """torch.matmul on the same device memory, TF32 off (or on); (row, torch version) or (why not, "")."""
    try:
        import torch
    except ImportError as exc:
        return {"verified": False, "error": f"torch not importable: {exc}"}, ""
    torch.backends.cuda.matmul.allow_tf32 = tf32  # off: plain fp32 FMAs, like the fp32 kernels
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    ta, tb = torch.as_tensor(problem.a, device="cuda"), torch.as_tensor(problem.b, device="cuda")
    tc = torch.as_tensor(problem.c, device="cuda")
    unit = TF32_STEP.error_bound(problem.k) if tf32 else problem.k * EPS32
    try:
        return measure(problem, lambda: torch.matmul(ta, tb, out=tc), unit), torch.__version__
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")


def previous_kernel(problem: Problem) -> dict[str, Any]:
    """kernels/matmul.cu's matmul, launched as ops.matmul launched it before the SGEMM progression."""
    fn = ops.kernel(*PREVIOUS, default_context())
    m, n, k = problem.m, problem.n, problem.k
    grid = (-(-n // PREVIOUS_TILE), min(-(-m // PREVIOUS_TILE), sgemm.MAX_GRID_Y))
    p = problem
    return measure(p, lambda: fn.launch(grid, PREVIOUS_BLOCK, p.c, p.a, p.b, m, n, k), k * EPS32)


def launcher(p: Problem, name: str) -> Callable[[], None]:
    return lambda: ops.matmul(p.c, p.a, p.b, kernel=name)


def run_shape(label: str, problem: Problem) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    shape = f"{problem.m}x{problem.n}x{problem.k}"
    peer, version = torch_peer(problem, tf32=False)
    rows.append({"kind": "peer", "kernel": "torch.matmul", "summary": f"cuBLAS via torch {version}, TF32 off", **peer})
    print(f"{label} {shape}: torch.matmul {peer.get('tflops', float('nan')):.1f} TFLOP/s", flush=True)
    rows.append({"kind": "previous", "kernel": "matmul (kernels/matmul.cu)", "summary": "ops.matmul's former kernel"})
    rows[-1].update(previous_kernel(problem))
    fp32_steps = tuple(s for s in sgemm.STEPS if not s.tf32)
    groups = (("step", fp32_steps), ("tune", sgemm.TUNE), ("any", sgemm.ANY), ("tf32", (TF32_STEP,)))
    for kind, specs in groups:
        for spec in specs:
            row = measure(problem, launcher(problem, spec.name), spec.error_bound(problem.k))
            rows.append({"kind": kind, "kernel": spec.name, "summary": spec.summary, **row})
            why = f"error {row['error_ratio']:.3g}x bound" if "error_ratio" in row else row.get("error")
            result = f"{row['tflops']:.2f} TFLOP/s" if row["verified"] else f"FAILED ({why})"
            print(f"{label} {shape}: {spec.name}: {result}", flush=True)
    peer, version = torch_peer(problem, tf32=True)
    rows.append({"kind": "peer-tf32", "kernel": "torch.matmul (TF32)", "summary": "cuBLAS, allow_tf32", **peer})
    print(f"{label} {shape}: torch.matmul with TF32 {peer.get('tflops', float('nan')):.1f} TFLOP/s", flush=True)
    for row in rows:
        row["shape"] = label
    return share_of_peer(rows)


def share_of_peer(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each timed row's ``of_peer``: its TFLOP/s over torch's at the same shape and precision."""
    peers = {(r["shape"], r["kind"]): r.get("tflops") for r in rows if r["kind"].startswith("peer")}
    for row in rows:
        peer = peers.get((row["shape"], "peer-tf32" if row["kind"] in TF32_KINDS else "peer"))
        if peer and row.get("tflops"):
            row["of_peer"] = row["tflops"] / peer
    return rows


def best(rows: list[dict[str, Any]], label: str, kinds: tuple[str, ...]) -> dict[str, Any] | None:
    candidates = [r for r in rows if r["shape"] == label and r["kind"] in kinds and r.get("tflops")]
    return max(candidates, key=lambda r: r["tflops"]) if candidates else None


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """(target, met?, numbers): the SGEMM target, 80% of torch, at each shape, and the verification of every kernel."""
    found: list[tuple[str, bool | None, str]] = []
    for label in SHAPES:
        peer = next((r for r in rows if r["shape"] == label and r["kind"] == "peer"), {})
        top = best(rows, label, ("step", "tune"))
        if not peer.get("tflops") or top is None:
            found.append((f"best fp32 SGEMM >= 80% of torch.matmul ({label})", None, "not measured"))
            continue
        ratio = top["tflops"] / peer["tflops"]
        numbers = f"{top['kernel']}: {top['tflops']:.1f} vs {peer['tflops']:.1f} TFLOP/s ({ratio:.0%})"
        found.append((f"best fp32 SGEMM >= 80% of torch.matmul ({label})", ratio >= TARGET_OF_PEER, numbers))
    for label in SHAPES:
        tc = next((r for r in rows if r["shape"] == label and r["kind"] == "tf32" and r.get("tflops")), None)
        peer = next((r for r in rows if r["shape"] == label and r["kind"] == "peer-tf32"), {})
        if tc:
            against = f" vs torch TF32 {peer['tflops']:.1f} ({tc['of_peer']:.0%})" if peer.get("tflops") else ""
            numbers = f"{tc['tflops']:.1f} TFLOP/s{against}; max error {tc['relative_error']:.2g} x abs(A)@abs(B)"
            found.append((f"stretch: TF32 tensor-core step ({label}), no target", None, numbers))
    failed = [f"{r['kernel']} ({r['shape']})" for r in rows if r.get("failed")]
    found.append(("every kernel verified against float64 numpy", not failed, ", ".join(failed) or "all passed"))
    return found


def markdown(data: dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        f"# SGEMM progression — {meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']}",
        "",
        f"fp32, row-major C = A @ B; torch {meta['torch'] or 'not installed'} with TF32 off as the peer (with TF32 "
        "on for the TF32 step). error/bound: max |C - A@B| over the kernel's bound, K·eps·(|A|@|B|) for fp32, "
        "(2^-9 + 2K·eps)·(|A|@|B|) for TF32 (≤ 1 passes); rel. error: max |C - A@B| / (|A|@|B|). "
        "Timing: CUDA events, median.",
        "",
        "| target | met | numbers |",
        "|---|---|---|",
    ]
    lines += [f"| {g} | {'—' if m is None else 'yes' if m else 'NO'} | {n} |" for g, m, n in data["targets"]]
    for label, (m, n, k) in data["shapes"].items():
        lines += [
            "",
            f"## {label}: M={m}, N={n}, K={k}",
            "",
            "| kernel | what it does | TFLOP/s | of torch | error/bound | rel. error | regs | spill B | blocks/SM |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in (r for r in data["rows"] if r["shape"] == label):
            facts = data["facts"].get(r["kernel"], {})
            speed = f"{r['tflops']:.2f}" if r.get("tflops") else ("FAILED" if r.get("failed") else "—")
            share = f"{r['of_peer']:.0%}" if r.get("of_peer") else ""
            error = f"{r['error_ratio']:.3f}" if "error_ratio" in r else r.get("error", "")
            error += f" | {r['relative_error']:.2g}" if "relative_error" in r else " |"
            cells = [facts.get(key, "") for key in ("registers", "local_bytes", "blocks_per_sm")]
            lines.append(
                f"| {r['kernel']} | {r['summary']} | {speed} | {share} | {error} | "
                + " | ".join(map(str, cells))
                + " |"
            )
        for kinds, what in ((("tune", "step"), "ops.MATMUL_KERNEL"), (("any",), "ops.MATMUL_ANY_KERNEL")):
            top = best(data["rows"], label, kinds)
            if top:
                lines += ["", f"Fastest for {what} at this shape: `{top['kernel']}` ({top['tflops']:.2f} TFLOP/s)."]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install rawcuda[plot])"
    labels = list(data["shapes"])
    fig, axes = plt.subplots(1, len(labels), figsize=(7 * len(labels), 8), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        colors = {"previous": "tab:gray", "step": "tab:blue", "tune": "tab:green", "any": "tab:olive"}
        rows = [r for r in data["rows"] if r["shape"] == label and r["kind"] in colors]  # fp32 only: TF32 is faster
        ax.barh(
            [r["kernel"] for r in rows], [r.get("tflops") or 0 for r in rows], color=[colors[r["kind"]] for r in rows]
        )
        ax.invert_yaxis()
        peer = next((r for r in data["rows"] if r["shape"] == label and r["kind"] == "peer"), {})
        if peer.get("tflops"):
            ax.axvline(peer["tflops"], color="tab:red", linestyle="--", label=f"torch.matmul {peer['tflops']:.1f}")
            ax.axvline(TARGET_OF_PEER * peer["tflops"], color="tab:red", linestyle=":", label="80% of torch")
            ax.legend(loc="lower right")
        m, n, k = data["shapes"][label]
        ax.set_title(f"{label}: {m} x {n} x {k}")
        ax.set_xlabel("TFLOP/s (fp32)")
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"SGEMM progression on {data['meta']['gpu']} ({data['meta']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot: {path.name}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--quick", action="store_true", help="smaller shapes: a try-out, not a measurement")
    args = parser.parse_args()
    try:
        gpu = rawcuda.Device(0).name
    except (rawcuda.DriverNotFoundError, rawcuda.StubLibraryError, rawcuda.NoDeviceError) as exc:
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        return EXIT_NO_GPU
    shapes = QUICK_SHAPES if args.quick else SHAPES
    began = time.perf_counter()
    facts = {name: kernel_facts(name) for name in sgemm.KERNELS}  # (loads the module: its JIT is not timed)
    rng = np.random.default_rng()
    rows: list[dict[str, Any]] = []
    torch_version = ""
    for label, (m, n, k) in shapes.items():
        problem = Problem(m, n, k, rng)
        try:
            rows += run_shape(label, problem)
        finally:
            problem.close()
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        pass
    data: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d"),
            "gpu": gpu,
            "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "torch": torch_version,
            "seconds": round(time.perf_counter() - began, 1),
        },
        "shapes": shapes,
        "rows": rows,
        "facts": facts,
    }
    data["targets"] = targets(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{data['meta']['date']}-{gpu.replace(' ', '_')}-sgemm"
    (args.out / f"{stem}.json").write_text(json.dumps(data, indent=2))
    (args.out / f"{stem}.md").write_text(markdown(data))
    print(plot(data, args.out / f"{stem}.png"))
    print(markdown(data))
    print(f"sgemm bench: {data['meta']['seconds']} s; wrote {args.out / stem}.json, .md")
    return EXIT_FAILED if any(r.get("failed") for r in rows) else EXIT_OK


if __name__ == "__main__":
    from rawcuda.tools import cli

    cli.run(main)
