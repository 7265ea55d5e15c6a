"""Tutorial 03 -- the seed's custom kernel: a warp-shuffle reduction, shared memory, coalesced writes.

The seed article's "case 3" writes its own CUDA kernel because some things need hand control:
warp-level primitives (``__shfl_down_sync``), shared memory and its bank conflicts, and dynamic shared
memory chosen at launch time. This tutorial runs ``kernels/reduce.cu`` and ``kernels/transpose.cu``. It
times two things with CUDA events -- the reduction against a device-to-device copy of the same bytes, and
a naive transpose against one staged through a shared-memory tile -- and shows the other choices without
timing them. The transpose pair measures *coalescing*, not bank conflicts: the naive kernel uses no shared
memory at all, and its writes go down a column. (A bank-conflict measurement needs the tiled kernel with
and without its padding column; that kernel is not written yet.)

Run:  python tutorials/03_custom_reduction.py [--step]
"""

from __future__ import annotations

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Device, DeviceBuffer, Event, Module, ops
from rawcuda.ffi.attributes import FunctionAttribute

N = 1 << 26  # 64 Mi floats = 256 MiB: large enough that memory bandwidth, not launch cost, dominates
BLOCK = 256
WARP = 32
REPS = 10
TRANSPOSE_N = 4096
BIG_SHARED = 64 * 1024  # above the 48 KiB every kernel gets without asking
ROOT = rawcuda.kernels.KERNEL_DIR.parent.parent


def timed_ms(work: object) -> float:
    start, end = Event(), Event()
    work()  # warm-up, untimed: one-time costs of a first launch stay out (cuMemAlloc memory has no pages to fault)
    start.record()
    for _ in range(REPS):
        work()
    end.record()
    ms = start.elapsed_ms(end) / REPS
    start.close()
    end.close()
    return ms


def main(t: Tutorial) -> None:
    dev = Device(0)
    t.step("the kernel: per-thread sums, then warp shuffles, then one shared-memory slot per warp")
    source = ROOT / "kernels" / "reduce.cu"
    if source.exists():
        text = source.read_text()
        body = text[text.index("__device__ __forceinline__ float warp_sum") :].split("}\n", 1)[0] + "}"
        t.say(body)
    t.say("each step halves the active lanes: after 5 shuffles lane 0 holds the warp's sum, no shared memory used")

    t.step("load it and look at what the compiler made of it")
    fn = Module(rawcuda.kernels.ptx_path("reduce")).function("warp_reduce_sum")
    t.say(
        f"{fn!r}\nregisters/thread: {fn.num_regs}, static shared: {fn.shared_size_bytes} B, "
        f"blocks of {BLOCK} per SM: {fn.max_active_blocks_per_sm(BLOCK, BLOCK // WARP * 4)}"
    )

    t.step(
        f"pass 1: {ops.REDUCE_BLOCKS_PER_SM} blocks per SM x {dev.multiprocessor_count} SMs, "
        "each writing one partial sum"
    )
    rng = np.random.default_rng()
    x = rng.standard_normal(N, dtype=np.float32)
    blocks = ops.REDUCE_BLOCKS_PER_SM * dev.multiprocessor_count
    shared = BLOCK // WARP * 4  # dynamic shared memory: one float per warp, sized at launch time
    dx = DeviceBuffer.from_array(x)
    partials, total = DeviceBuffer.empty(blocks), DeviceBuffer.empty(1)
    partials.fill(np.float32(np.nan))
    fn.launch(blocks, BLOCK, partials, dx, N, shared_mem=shared)
    t.say(f"launched with shared_mem={shared} bytes ({BLOCK // WARP} warps x 4 bytes)")

    t.step("pass 2: one block reduces the partial sums")
    fn.launch(1, BLOCK, total, partials, blocks, shared_mem=shared)
    got = float(total.to_array()[0])
    expected = float(x.astype(np.float64).sum())
    t.say(f"GPU float32 sum: {got:.6f}   numpy float64 sum: {expected:.6f}")
    t.check(abs(got - expected) <= 1e-5 * float(np.abs(x).sum()), "the sum agrees with float64 to 1e-5 of sum|x|")
    ints = rng.integers(-4, 5, N).astype(np.float32)
    dx.copy_from(ints)
    t.check(ops.sum(dx) == float(ints.astype(np.int64).sum()), "small integers sum exactly (no element lost)")

    t.step("how fast? compare with a device-to-device copy of the same bytes")
    nbytes = N * 4
    with DeviceBuffer.empty(N) as scratch:
        copy_ms = timed_ms(lambda: rawcuda.cu.cuMemcpyDtoDAsync(scratch.ptr, dx.ptr, nbytes, 0))
        red_ms = timed_ms(
            lambda: (
                fn.launch(blocks, BLOCK, partials, dx, N, shared_mem=shared),
                fn.launch(1, BLOCK, total, partials, blocks, shared_mem=shared),
            )
        )
    t.say(
        f"reduction reads {nbytes / red_ms / 1e6:.0f} GB/s; a copy of the same array moves "
        f"{2 * nbytes / copy_ms / 1e6:.0f} GB/s (read + write)"
    )

    t.step("coalescing: a naive transpose (column writes) vs one through a padded 32x32 shared tile")
    m = rng.standard_normal((TRANSPOSE_N, TRANSPOSE_N), dtype=np.float32)
    dm, out = DeviceBuffer.from_array(m), DeviceBuffer.empty((TRANSPOSE_N, TRANSPOSE_N))
    results = {}
    for padded in (False, True):
        out.fill(np.float32(np.nan))
        ops.transpose(out, dm, padded=padded)
        t.check(bool(np.array_equal(out.to_array(), m.T)), f"{'padded' if padded else 'naive'} transpose is exact")
        results[padded] = timed_ms(lambda p=padded: ops.transpose(out, dm, padded=p))
    t.say(
        f"naive: {results[False] * 1000:.0f} us, padded tile: {results[True] * 1000:.0f} us "
        f"({results[False] / results[True]:.2f}x) -- the naive kernel's warps write down a column: 32 floats\n"
        "a whole row apart, 32 separate memory transactions where a tile row needs one 128-byte line.\n"
        "The tile's extra column keeps its own column reads free of bank conflicts, but this pair does not\n"
        "measure that: the naive kernel has no shared memory to conflict in."
    )

    t.step(f"dynamic shared memory above 48 KiB: launch with {BIG_SHARED // 1024} KiB")
    before = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    fn.launch(1, BLOCK, total, partials, blocks, shared_mem=BIG_SHARED)
    after = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    t.say(f"MAX_DYNAMIC_SHARED_SIZE_BYTES: {before} -> {after} (rawcuda raised it with cuFuncSetAttribute)")
    t.check(after >= BIG_SHARED and not np.isnan(total.to_array()[0]), "the big-shared-memory launch ran")
    for buf in (dx, partials, total, dm, out):
        buf.close()


if __name__ == "__main__":
    run(main, "Tutorial 03: a custom warp-shuffle reduction, shared memory and coalesced writes")
