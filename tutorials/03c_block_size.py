"""Tutorial 03c -- block size and occupancy: what the driver reports, next to what a copy achieves.

rawcuda's 1-D launches use 256 threads per block, the seed article's choice, and the usual advice is that
"enough threads hide memory latency". This tutorial measures instead of repeating: a copy with exactly one
element per thread (``kernels/occupancy.cu``, grid = ceil(n / block), so the block size decides how the
work is cut) at blocks of 32 to 1024 threads. For each it prints

* how many such blocks one SM holds at once -- ``cuOccupancyMaxActiveBlocksPerMultiprocessor``, through
  ``Function.max_active_blocks_per_sm`` -- and the limit that decides it (resident threads or resident
  blocks per SM: this kernel needs too few registers and no shared memory for those to matter);
* the occupancy that makes (resident threads / the SM's maximum);
* the bandwidth achieved, next to a device-to-device copy of the same bytes.

Then the table says why: below 256 threads each block costs the GPU a fixed time, so a block of one element
per thread is too little work per start, however full the SMs are. Last, the same copy as a grid-stride
loop (``copy_grid_stride``) with one wave of small blocks, which starts each block once.

Every copy is checked element for element. The speeds are this run's; the tutorial asserts none of them.

Run:  python tutorials/03c_block_size.py [--step]
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceAttribute, DeviceBuffer, ops, time_ms

N = 1 << 26  # 64 Mi floats = 256 MiB read and 256 MiB written per copy
REPS = 10
BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
NS_PER_MS = 1_000_000
SAME_COST = 0.25  # per-block times within 25 % of each other read as one fixed cost per block
STRIDE_BLOCKS = (64, 256)  # the grid-stride copy's block sizes: one too small above, and the default
SOURCE = Path(rawcuda.kernels.KERNEL_DIR).parent.parent / "kernels" / "occupancy.cu"
VECTOR_ADD = SOURCE.with_name("vector_add.cu")


def main(t: Tutorial) -> None:
    t.words(
        "kernel",
        "block",
        "warp",
        "SM",
        "register",
        "shared memory",
        "name mangling",
        "grid-stride loop",
        "wave",
        "float4",
    )
    t.step("the kernel: one element per thread, no loop")
    text = SOURCE.read_text()
    t.say(text[text.index('extern "C"') :].rstrip())

    t.step("what an SM can hold: the two limits that decide this kernel's occupancy")
    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    device = ctx.device
    max_threads = device.attribute(DeviceAttribute.MAX_THREADS_PER_MULTIPROCESSOR)
    max_blocks = device.attribute(DeviceAttribute.MAX_BLOCKS_PER_MULTIPROCESSOR)
    fn = ops.kernel("occupancy", "copy_one_per_thread", ctx)
    t.term("occupancy")
    t.say(
        f"{device.name}: {device.multiprocessor_count} SMs, each at most {max_threads} resident threads and "
        f"{max_blocks} resident blocks\nthe kernel: {fn.num_regs} registers per thread, "
        f"{fn.shared_size_bytes} bytes of shared memory -- neither limits it"
    )

    t.step(f"{N:,} floats, and the ceiling: a device-to-device copy of the same bytes")
    host = np.random.default_rng().standard_normal(N, dtype=np.float32)
    x, out = DeviceBuffer.from_array(host), DeviceBuffer.empty(N)
    copy_ms = time_ms(lambda: rawcuda.cu.cuMemcpyDtoDAsync(out.ptr, x.ptr, x.nbytes, 0), reps=REPS).median
    copy_gbps = 2 * x.nbytes / copy_ms / 1e6
    t.say(f"copy: {copy_ms:.3f} ms = {copy_gbps:.0f} GB/s (read + write)")

    rows = []
    for block in BLOCK_SIZES:
        grid = -(-N // block)
        t.step(f"{block} threads per block: {grid:,} blocks")
        active = fn.max_active_blocks_per_sm(block)
        limit = "resident blocks" if active == max_blocks and active * block < max_threads else "resident threads"
        occupancy = active * block / max_threads
        t.say(
            f"the driver: {active} blocks per SM = {active * block} threads, occupancy {occupancy:.0%} "
            f"(the {limit} per SM decide)"
        )
        t.check(active == min(max_blocks, max_threads // block), "the driver's figure is the smaller of the two limits")
        out.fill(np.float32(np.nan))
        fn.launch(grid, block, out, x, N)
        t.check(bool(np.array_equal(out.to_array(), host)), "every element copied")
        ms = time_ms(lambda g=grid, b=block: fn.launch(g, b, out, x, N), reps=REPS).median
        gbps = 2 * x.nbytes / ms / 1e6
        rows.append((block, active, occupancy, gbps, ms * NS_PER_MS / grid))
        t.say(f"{ms:.3f} ms = {gbps:.0f} GB/s, {gbps / copy_gbps:.0%} of the copy")

    t.step("occupancy next to bandwidth, and the time per block (this run)")
    lines = ["block  blocks/SM  occupancy   GB/s  of copy  ns per block"]
    lines += [f"{b:>5}  {a:>9}  {o:>9.0%}  {g:>5.0f}  {g / copy_gbps:>7.0%}  {ns:>12.3f}" for b, a, o, g, ns in rows]
    best = max(rows, key=lambda r: r[3])
    at_256 = next(r for r in rows if r[0] == ops.BLOCK)
    lines.append(
        f"fastest here: {best[0]} threads ({best[3]:.0f} GB/s); rawcuda's default, {ops.BLOCK}: {at_256[3]:.0f} GB/s "
        f"({at_256[3] / best[3]:.0%} of the fastest)"
    )
    t.say("\n".join(lines))
    t.say(conclusion(rows, device.multiprocessor_count))

    t.step("the same copy as a grid-stride loop: one wave of small blocks, each copying many elements")
    stride = ops.kernel("occupancy", "copy_grid_stride", ctx)
    for block in STRIDE_BLOCKS:
        grid = stride.max_active_blocks_per_sm(block) * device.multiprocessor_count  # one wave: all fit at once
        out.fill(np.float32(np.nan))
        stride.launch(grid, block, out, x, N)
        t.check(bool(np.array_equal(out.to_array(), host)), f"{grid:,} blocks of {block} copied every element")
        ms = time_ms(lambda g=grid, b=block: stride.launch(g, b, out, x, N), reps=REPS).median
        gbps = 2 * x.nbytes / ms / 1e6
        one_per_thread = next(r[3] for r in rows if r[0] == block)
        t.say(
            f"{block} threads x {grid:,} blocks (each thread copies ~{N // (grid * block)} elements): {gbps:.0f} GB/s, "
            f"{gbps / copy_gbps:.0%} of the copy; one element per thread at {block}: {one_per_thread:.0f} GB/s"
        )
    t.say(
        "A grid-stride kernel starts each block once and keeps it busy, so the block size only has to give\n"
        "each SM enough warps in flight. That is why rawcuda.ops, 01's kernel and 03a's steps 7-9 loop."
    )

    t.step("the whole of kernels/vector_add.cu: the same loop, written for the memory system")
    t.say(shipped_vector_add())
    t.term("memory-bound")
    t.term("__restrict__")
    t.term("read-only data path")
    t.say(
        "Vector add is memory-bound, one add per 12 bytes moved, so the kernel is written for the memory. float4\n"
        "loads and stores move 16 bytes per instruction when a, b and c are 16-byte aligned (cuMemAlloc gives\n"
        "256-byte alignment); two float4 pairs are loaded before either is added, to keep more bytes in flight;\n"
        "__restrict__ promises the compiler the pointers never alias; __ldg loads through the read-only data\n"
        "cache; the scalar loop does the last n % 4 elements (or everything, for unaligned views)."
    )
    x.close()
    out.close()


def shipped_vector_add() -> str:
    """The ``vector_add`` function of kernels/vector_add.cu (from ``extern "C"`` to its closing brace)."""
    if not VECTOR_ADD.is_file():
        return f"({VECTOR_ADD} is not here: an installed rawcuda ships the PTX, not the .cu source)"
    text = VECTOR_ADD.read_text()
    match = re.search(r'^extern "C" __global__ void\s+vector_add\(.*?^}', text, re.S | re.M)
    return match.group(0) if match else f"(no vector_add function found in {VECTOR_ADD})"


def conclusion(rows: list[tuple[int, int, float, float, float]], sms: int) -> str:
    """What the table says, computed from it: whether small blocks cost a fixed time each."""
    small = [r for r in rows if r[0] < ops.BLOCK]
    times = [r[4] for r in small]
    if max(times) > (1 + SAME_COST) * min(times):
        return "The small blocks' times per block differ here: no single per-block cost explains them."
    mean = sum(times) / len(times)
    full = next((r[0] for r in rows if r[2] >= 1.0), None)
    occupancy = f"Occupancy was 100 % from {full} threads on" if full else "Occupancy was high"
    return (
        f"Blocks of {small[0][0]} to {small[-1][0]} threads all take ~{mean:.2f} ns of the whole GPU each, "
        f"whatever\ntheir size (about {mean * sms:.0f} ns per block on each of the {sms} SMs): below "
        f"{ops.BLOCK} threads the GPU\nfinishes blocks at a fixed rate, and a block of one element per thread "
        f"has too few bytes to fill it.\n{occupancy}, yet the copy ran at a fraction of the ceiling: full "
        "SMs are not busy SMs\nwhen each block starts, loads a few bytes and ends. Bigger blocks carry more "
        f"bytes per start; from\n{ops.BLOCK} on the time per block grows with the block, and the copy is still "
        "short of the ceiling:\nthe grid-stride loop below gets closer."
    )


if __name__ == "__main__":
    run(main, "Tutorial 03c: block size and occupancy, measured")
