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

Every copy is checked element for element. The speeds are this run's; the tutorial asserts none of them.

Run:  python tutorials/03c_block_size.py [--step]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceAttribute, DeviceBuffer, ops, time_ms

N = 1 << 26  # 64 Mi floats = 256 MiB read and 256 MiB written per copy
REPS = 10
BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
SOURCE = Path(rawcuda.kernels.KERNEL_DIR).parent.parent / "kernels" / "occupancy.cu"


def main(t: Tutorial) -> None:
    t.words("kernel", "block", "SM", "register", "shared memory", "name mangling")
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
        rows.append((block, active, occupancy, gbps))
        t.say(f"{ms:.3f} ms = {gbps:.0f} GB/s, {gbps / copy_gbps:.0%} of the copy")

    t.step("occupancy next to bandwidth (this run)")
    lines = ["block  blocks/SM  occupancy   GB/s  of copy"]
    lines += [f"{b:>5}  {a:>9}  {o:>9.0%}  {g:>5.0f}  {g / copy_gbps:>7.0%}" for b, a, o, g in rows]
    best = max(rows, key=lambda r: r[3])
    at_256 = next(r for r in rows if r[0] == ops.BLOCK)
    lines.append(
        f"fastest here: {best[0]} threads ({best[3]:.0f} GB/s); rawcuda's default, {ops.BLOCK}: {at_256[3]:.0f} GB/s "
        f"({at_256[3] / best[3]:.0%} of the fastest)"
    )
    t.say("\n".join(lines))
    x.close()
    out.close()


if __name__ == "__main__":
    run(main, "Tutorial 03c: block size and occupancy, measured")
