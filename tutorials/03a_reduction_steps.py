"""Tutorial 03a -- a reduction, step by step: nine kernels, each one change away from the last, each measured.

Summing an array is the seed article's "case 3", the kernel it writes by hand. This tutorial walks the
classic progression of that kernel (``kernels/reduce_steps.cu``, ending with the seed's ``warp_reduce_sum``
from ``kernels/reduce.cu``): for each step it prints the source, says what changed and why, checks the sum
against numpy's exact total (the data are small whole numbers, so float32 adds them without rounding), and
times it with CUDA events next to the ceiling -- a device-to-device copy of the
same bytes. What each change bought is the difference between two lines of measurements, printed at the
end; nothing here is claimed that this run does not measure. (bench/progressions.py measures the same
steps over 1 GiB, with cupy.sum and torch.sum beside them.)

Every step writes one partial sum per block, so a sum is several passes, each over the partial sums of
the pass before, until one block is left. How each step is launched -- block, grid, shared memory, elements
per thread -- is one table, ``rawcuda.ops.reduce_steps.STEPS``.

Run:  python tutorials/03a_reduction_steps.py [--step]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, time_ms
from rawcuda.ops.reduce_steps import STEPS, ReduceStep, Reduction

N = 1 << 26  # 64 Mi floats = 256 MiB: memory bandwidth, not launch cost, decides
# The data: whole numbers -VALUE_RANGE..VALUE_RANGE, stored as float32. Every partial sum a reduction forms is
# then a whole number far below FLOAT32_EXACT_INTEGERS, which float32 adds without rounding: the GPU's total
# must equal numpy's to the last unit, whatever order the kernel adds in (Harris checks with integers too).
VALUE_RANGE = 8
FLOAT32_EXACT_INTEGERS = 1 << 24  # float32 has 24 significant bits: every integer up to 2^24 is exact
REPS = 10
FLOAT_BYTES = 4  # sizeof(float), the seed's sizeof(f32)
WARP = 32  # threads per warp
SOURCES = Path(rawcuda.kernels.KERNEL_DIR).parent.parent / "kernels"  # the checkout's kernels/*.cu
# What each step's text shows: the kernel, and the helper it introduces (if any).
HELPERS = {4: "load_two", 5: "last_warp", 6: "block_tree", 7: "grid_stride_sum", 8: "warp_sum", 9: "thread_sum"}

SHUFFLE_TREE = """\
how warp_sum adds 32 lanes: v += __shfl_down_sync(mask, v, offset) -- lane i adds lane i + offset's v
   lanes        0  1  2  3  4  5  6  7  8 ... 15 16 17 ... 31
   offset 16:   0<-16  1<-17  2<-18 ...  15<-31              16 sums of 2 (lanes 16..31: unused)
   offset  8:   0<-8   1<-9   ...  7<-15                      8 sums of 4
   offset  4:   0<-4   1<-5   2<-6   3<-7                     4 sums of 8
   offset  2:   0<-2   1<-3                                   2 sums of 16
   offset  1:   0<-1                                          1 sum of 32, in lane 0
five steps through registers: no shared memory, no __syncthreads"""


def excerpt(source: str, name: str) -> str:
    """The text of kernels/<source> between its `// -- begin NAME` and `// -- end NAME` lines."""
    text = (SOURCES / source).read_text()
    begin, end = f"// -- begin {name}\n", f"// -- end {name}"
    return text[text.index(begin) + len(begin) : text.index(end)].rstrip()


def launch_table() -> str:
    lines = ["step  kernel                                block  elems/thread  grid                     shared"]
    for s in STEPS:
        grid = "ceil(n / (block*elems))" if s.blocks_per_sm is None else f"{s.blocks_per_sm} per SM (loops)"
        lines.append(
            f"{s.number:>4}  {s.kernel:<37} {s.block:>5}  {s.elements_per_thread:>12}  {grid:<24} {s.shared_bytes} B"
        )
    return "\n".join(lines)


def show_step(t: Tutorial, step: ReduceStep) -> None:
    source = "reduce.cu" if step.stem == "reduce" else "reduce_steps.cu"
    if step.number in HELPERS:
        t.say(excerpt(source, HELPERS[step.number]))
    if step.number == 8:
        t.say(SHUFFLE_TREE)
    t.say(excerpt(source, step.kernel))


def seed_kernel_note(step: ReduceStep) -> str:
    """What the seed article gives of warp_reduce_sum, and how its shared memory compares with the kernel's."""
    seed_bytes = step.block * FLOAT_BYTES  # the seed's launch: block_size * sizeof(f32)
    return (
        f"The seed article gives this kernel's name and its launch only -- {step.kernel}(output, input, n), with\n"
        f"block_size * sizeof(f32) = {seed_bytes:,} B of dynamic shared memory; the body above is the project's.\n"
        f"It keeps one float per warp: {step.block} / {WARP} warps x {FLOAT_BYTES} B = {step.shared_bytes} B, "
        f"what the table launches it with.\nThe seed's {seed_bytes:,} B is {seed_bytes // step.shared_bytes}x what "
        "the kernel reads."
    )


def main(t: Tutorial) -> None:
    t.words("kernel", "grid", "block", "register", "shared memory")
    t.step("the plan: nine kernels, one table of launches, passes until one block is left")
    t.say(launch_table())
    t.term("wave")
    t.say(
        "steps 1-6 launch one block per 256 (or 512) elements: over 2^26 floats that is 262,144 (or 131,072)\n"
        "blocks, then a pass over their partial sums, and so on. Steps 7-9 launch one wave of blocks whose\n"
        "threads loop over the array, so the second pass is tiny."
    )

    t.step(f"{N:,} random whole numbers as floats on the GPU, and the ceiling: a device-to-device copy")
    device = rawcuda.Device(0)  # the first driver call: without a GPU the tutorial stops here, status 77
    rng = np.random.default_rng()
    host = rng.integers(-VALUE_RANGE, VALUE_RANGE + 1, N).astype(np.float32)
    exact = int(host.sum(dtype=np.int64))
    # Each partial sum is a sum of some elements chosen without looking at them: about 5 * sqrt(count) in size.
    spread = float(np.sqrt(N) * host.std())
    t.say(
        f"values {-VALUE_RANGE}..{VALUE_RANGE} (a random sign and size, mean 0), exact total {exact:,}. A partial\n"
        f"sum of m of them is about sqrt(m) * {host.std():.1f} in size: at most ~{spread:,.0f} here, far below\n"
        f"2^24 = {FLOAT32_EXACT_INTEGERS:,}, up to which float32 holds every integer. So every addition is exact\n"
        "and each kernel's total must equal numpy's exactly; a kernel that lost one element would be off by it."
    )
    t.check(abs(exact) * 4 < FLOAT32_EXACT_INTEGERS, f"the total {exact:,} is far inside float32's exact integers")
    x = DeviceBuffer.from_array(host)
    with DeviceBuffer.empty(N) as scratch:
        copy_ms = time_ms(lambda: rawcuda.cu.cuMemcpyDtoDAsync(scratch.ptr, x.ptr, x.nbytes, 0), reps=REPS).median
    copy_gbps = 2 * x.nbytes / copy_ms / 1e6
    t.say(f"{device.name}, copy: {copy_ms:.3f} ms = {copy_gbps:.0f} GB/s (read + write; a reduction only reads)")

    measured: list[tuple[ReduceStep, float]] = []
    for step in STEPS:
        t.step(f"step {step.number}, {step.kernel}: {step.change}")
        if step.number == 1:  # its source is about warps and their lanes idling
            t.term("warp")
            t.term("lane")
        elif step.number == 2:  # its change: strided shared-memory accesses
            t.term("bank conflict")
        show_step(t, step)
        with Reduction(step, x) as reduction:
            reduction.poison()  # a partial sum a pass forgets to write would turn the total into NaN
            got = reduction()
            t.check(got == exact, f"sum {got:,.0f} equals numpy's exact total {exact:,}, to the last unit")
            ms = time_ms(reduction.run, reps=REPS).median
            passes = reduction.grids
        gbps = x.nbytes / ms / 1e6
        measured.append((step, gbps))
        t.say(
            f"{len(passes)} passes, grids {passes}: {ms:.3f} ms = {gbps:.0f} GB/s, {gbps / copy_gbps:.0%} of the copy"
        )
        if step.stem == "reduce":  # the seed's kernel: what the seed gives of it, and what it asks for
            t.say(seed_kernel_note(step))

    t.step("what each change bought (this run's measurements)")
    lines = ["step  kernel                                GB/s   of copy   vs step before"]
    for k, (step, gbps) in enumerate(measured):
        versus = f"{gbps / measured[k - 1][1]:.2f}x" if k else ""
        lines.append(f"{step.number:>4}  {step.kernel:<37} {gbps:>5.0f}   {gbps / copy_gbps:>6.0%}   {versus:>8}")
    t.say("\n".join(lines))
    x.close()


if __name__ == "__main__":
    run(main, "Tutorial 03a: a reduction, step by step")
