"""Tutorial 14 -- an fp32 matrix multiply (SGEMM), step by step from naive to double-buffered warp tiles.

kernels/sgemm.cu writes C = A @ B nine times, each kernel changing one thing. This tutorial runs them all
first -- on fresh random matrices, every element checked against numpy's float64 product, timed with CUDA
events next to torch.matmul (cuBLAS, TF32 off) when torch is installed -- and shows the progression as one
table. Then it walks the steps in order: what changed and why, what the compiler made of it (registers,
spills, shared memory, blocks per SM), and each kernel's source with ``--sources`` (between the file's
"// [step NN]" markers). The last step leaves fp32 for tensor cores
on TF32 inputs, and says what that costs in accuracy. The thread of the whole story is
arithmetic intensity: a GPU multiplies far faster than it loads, so each step makes every loaded value
feed more multiply-adds, or makes the loads themselves cheaper. The full measurement (4096^3, a tall
skinny shape, every tile configuration) is bench/sgemm.py; the launch table the steps share is
rawcuda/ops/sgemm.py.

Run:  python tutorials/14_sgemm_progression.py [--step] [--sources]
"""

from __future__ import annotations

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Device, DeviceBuffer, ops, time_ms
from rawcuda.core.context import default_context
from rawcuda.ops import sgemm

SIZE = 2048  # M = N = K: 17 GFLOP per product, a few ms for the later steps (the tutorial stays under ~30 s)
ODD = 2047  # a size float4 kernels cannot take (rows that do not start on 16 bytes)
REPS = 5  # timed launches per step (the median is shown)
BAR = 40  # characters of the fastest row's bar in the summary
FLOAT_BYTES = 4
#: Flops per byte a kernel without a shared tile loads: each output's thread loads one float of A and one of
#: B (8 bytes) for one multiply and one add (the model ignores the caches, which help these two steps).
UNTILED_INTENSITY = 2 / (2 * FLOAT_BYTES)
ROOT = rawcuda.kernels.KERNEL_DIR.parent.parent
SOURCES = ROOT / "kernels"

WHY = {
    "sgemm_01_naive": "a first, correct kernel: K loads of A and K of B per output, and a warp's 32 A loads are "
    "K floats apart (uncoalesced): memory transactions, not arithmetic, set the pace",
    "sgemm_02_coalesced": "only the thread roles swap: a warp's B loads and C stores become one 128-byte "
    "transaction each, and its A loads a single broadcast address",
    "sgemm_03_smem": "each value of A and B is fetched from memory once per block and then read 32 times from "
    "shared memory; but it is one shared load per FMA, and shared memory becomes the limit",
    "sgemm_04_reg1d": "8 outputs per thread in registers: one shared load of B feeds 8 FMAs",
    "sgemm_05_reg2d": "an 8 x 8 block per thread: 16 shared loads feed 64 FMAs, and a 128 x 128 block tile serves "
    "each global value to 128 outputs",
    "sgemm_06_float4": "16-byte loads and stores (a quarter of the instructions); A is stored transposed so that "
    "shared reads are float4s too",
    "sgemm_07_warptile": "each warp owns a 32 x 64 tile and its lanes interleaved 4 x 4 blocks: a warp's float4 "
    "shared reads cover 128 consecutive bytes (no bank conflicts), and fewer distinct values per warp",
    "sgemm_08_double_buffer": "two shared stages: the next tile's global loads are in flight while this one is "
    "multiplied, and one barrier per K-step instead of two",
    "sgemm_09_tf32": "a different machine: tensor cores multiply a 16 x 8 by 8 x 8 tile per warp instruction, on "
    "inputs rounded to TF32 (10-bit mantissas). Much faster, and no longer fp32: its error bound is (2^-9 + 2K eps) "
    "times |A| @ |B|, where fp32's is K eps -- compared here with torch.matmul with TF32 allowed",
}


def excerpt(path_name: str, start: str, end: str) -> str:
    """The lines between two markers of a kernel source (sources are not part of an installed package)."""
    path = SOURCES / path_name
    if not path.exists():
        return f"({path} is not here: the kernel sources come with a source checkout)"
    text = path.read_text()
    return text[text.index(start) + len(start) : text.index(end)].strip("\n")


def intensity(spec: sgemm.SgemmKernel) -> float:
    """Flops per byte of global memory a block loads, in the tile model: per K, a BM x BN tile loads BM floats
    of A and BN of B and makes 2 * BM * BN flops. A bigger tile feeds more arithmetic per byte loaded."""
    if not spec.shared_bytes:
        return UNTILED_INTENSITY
    rows, columns = spec.tile
    return 2 * rows * columns / (FLOAT_BYTES * (rows + columns))


def torch_tflops(a: DeviceBuffer, b: DeviceBuffer, c: DeviceBuffer, flops: int, tf32: bool) -> float | None:
    """torch.matmul (cuBLAS) on the same memory, TF32 off (or on); None without torch (it is optional here)."""
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = tf32
    ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (a, b, c))
    try:
        return flops / time_ms(lambda: torch.matmul(ta, tb, out=tc), reps=REPS).median / 1e9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def main(t: Tutorial) -> None:
    t.words("kernel", "grid", "block", "warp", "lane", "SM", "register", "shared memory", "bank conflict", "float4")
    t.step(f"the problem: C = A @ B at {SIZE}^3, and the budget")
    flops = 2 * SIZE**3
    t.term("TFLOP/s")
    t.say(
        f"{flops / 1e9:.1f} GFLOP per product (a multiply and an add per term); A, B and C are "
        f"{3 * SIZE * SIZE * 4 / 2**20:.0f} MiB. Moving them once at ~4 TB/s takes ~0.01 ms, the arithmetic "
        f"at an H200's fp32 peak (~67 TFLOP/s) {flops / 67e12 * 1e3:.2f} ms, ~20x longer: a good kernel is "
        "bound by its arithmetic. But a kernel that reloads a row of A and a column of B for every output "
        "moves 8 bytes per 2 flops, and runs at memory speed. Each step below reuses what it loads more."
    )
    t.term("arithmetic intensity")
    t.say(
        "the H200 makes ~67 TFLOP/s from ~4.8 TB/s: a kernel needs about 14 flops per byte it loads from global "
        "memory to be limited by its arithmetic rather than by memory"
    )
    dev = Device(0)  # the first driver call: without a GPU the tutorial stops here, with status 77
    t.say(f"GPU: {dev.name}, {dev.multiprocessor_count} SMs")
    rng = np.random.default_rng()
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, magnitude = a64 @ b64, np.abs(a64) @ np.abs(b64)
    t.term("TF32")
    t.say(
        "every result is checked element by element: |C - A@B| <= K * eps * (|A| @ |B|), eps = 2^-23, the bound "
        "of a K-term float32 dot product (rawcuda.ops.sgemm's error_bound, which also gives step 09's TF32 bound)"
    )
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty((SIZE, SIZE))
    peers = {tf32: torch_tflops(da, db, dc, flops, tf32) for tf32 in (False, True)}
    t.say(
        f"torch.matmul (cuBLAS): {peers[False]:.1f} TFLOP/s with TF32 off, {peers[True]:.1f} with TF32 on"
        if peers[False] and peers[True]
        else "torch is not installed: no peer"
    )

    t.step("the progression at a glance: every step run, checked and timed first")
    speeds: dict[str, float] = {}
    errors: dict[str, float] = {}
    for spec in sgemm.STEPS:
        dc.fill(np.float32(np.nan))  # poisoned: an element the kernel never wrote fails the check
        ops.matmul(dc, da, db, kernel=spec.name)
        error = np.abs(dc.to_array() - expected)
        t.check(
            bool(np.all(error <= spec.error_bound(SIZE) * magnitude)), f"{spec.name}: every element within its bound"
        )
        errors[spec.name] = float(np.max(error / magnitude))
        speeds[spec.name] = (
            flops / time_ms(lambda s=spec: ops.matmul(dc, da, db, kernel=s.name), reps=REPS).median / 1e9
        )
    fastest = max([*speeds.values(), *(p for p in peers.values() if p)])
    t.say(f"{'kernel':24s} {'TFLOP/s':>8s} {'flops/B':>8s}")
    for spec in sgemm.STEPS:
        speed = speeds[spec.name]
        t.say(f"{spec.name:24s} {speed:8.2f} {intensity(spec):8.2f} {'#' * max(1, round(BAR * speed / fastest))}")
    for tf32, peer in peers.items():
        if peer:
            label = "torch.matmul, TF32" if tf32 else "torch.matmul"
            t.say(f"{label:24s} {peer:8.2f} {'':8s} {'#' * max(1, round(BAR * peer / fastest))}")
    t.term("L2")
    t.say(
        "flops/B: flops per byte a block loads from global memory (the tile model: a BM x BN tile makes "
        "2 * BM * BN flops per BM + BN floats loaded; the L2 cache, which the model leaves out, serves some "
        "re-reads). Steps 01-03 are below the ~14 the arithmetic needs, so memory can hold them back; from "
        "step 04 on the tile feeds enough, and the later steps gain by making each instruction cheaper."
    )
    t.say("(speeds are measurements of this GPU, this run: bench/sgemm.py measures them properly)")

    previous = None
    for spec in sgemm.STEPS:
        number = spec.name.split("_")[1]
        t.step(f"step {number}: {spec.summary}")
        if t.args.sources:
            t.say(excerpt("sgemm.cu", f"// [step {number}]", f"// [end {number}]"))
            if spec.name == "sgemm_08_double_buffer":
                t.say("... and the heart of the template it instantiates (kernels/sgemm_tile.cuh):")
                t.say(excerpt("sgemm_tile.cuh", "// [pipeline]", "// [end pipeline]"))
        else:
            t.say(f"source: kernels/sgemm.cu, between // [step {number}] and // [end {number}] (--sources shows it)")
        if "tensor core" in WHY[spec.name]:  # defined where a step first needs it, not at step 01
            t.term("tensor core")
        t.say(f"why: {WHY[spec.name]}")
        fn = ops.kernel(sgemm.STEM, spec.name, default_context())
        t.say(
            f"block {spec.block}, tile {spec.tile[0]} x {spec.tile[1]}, grid {spec.grid(SIZE, SIZE)}; "
            f"{fn.num_regs} registers, {fn.local_size_bytes} B spilled, {fn.shared_size_bytes} B shared, "
            f"{fn.max_active_blocks_per_sm(spec.threads)} blocks per SM; {intensity(spec):.2f} flops per byte loaded"
        )
        gain = f", {speeds[spec.name] / speeds[previous]:.1f}x step before" if previous else ""
        peer = peers[spec.tf32]
        share = f", {speeds[spec.name] / peer:.0%} of torch{' with TF32' if spec.tf32 else ''}" if peer else ""
        t.say(f"{speeds[spec.name]:.2f} TFLOP/s{gain}{share}; largest error {errors[spec.name]:.2g} x (|A| @ |B|)")
        previous = spec.name

    t.step("what the float4 steps cannot take, and what ops.matmul does about it")
    with DeviceBuffer.zeros((ODD, ODD)) as odd:
        try:
            ops.matmul(odd, odd, odd, kernel="sgemm_07_warptile")
            t.check(False, "a float4 kernel must refuse N = K = 2047")
        except ValueError as exc:
            t.say(f"ValueError: {exc}")
            t.check("multiples of 4" in str(exc), "refused before launching, with the reason")
        chosen = ops.matmul_kernel(odd, odd, odd)
    t.say(
        f"ops.matmul runs {ops.MATMUL_KERNEL} (step 08's template at the tiles the benchmark found fastest) when "
        f"it can, and its single-float twin otherwise: here {chosen.name}"
    )
    t.check(not chosen.vector, "an odd size goes to the any-input kernel")
    for buf in (da, db, dc):
        buf.close()


if __name__ == "__main__":
    run(main, "Tutorial 14: SGEMM, step by step", flags={"sources": "print each step's kernel source"})
