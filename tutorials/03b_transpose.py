"""Tutorial 03b -- a transpose three ways: coalescing, then bank conflicts, each measured on its own.

The same job -- out = x.T for an 8192 x 8192 float matrix -- by three kernels of ``kernels/transpose.cu``,
each one change away from the one before, each timed next to a device-to-device copy of the same bytes
(the most a kernel that reads and writes every byte once can hope for):

1. ``transpose_naive``: reads rows, writes columns. A warp's 32 writes land ``rows`` floats apart: 32
   memory transactions where one would do (uncoalesced). No shared memory at all.
2. ``transpose_unpadded``: stages a 32 x 32 tile in shared memory, so that both the reads and the writes of
   global memory go along rows (coalesced). naive -> unpadded is the *coalescing* lesson.
3. ``transpose_padded``: the same template with one more column in the tile (32 x 33). Reading a column of
   a 32-wide tile hits one shared-memory bank 32 times (a 32-way bank conflict); 33 wide, 32 banks once
   each. unpadded -> padded is the *bank-conflict* lesson.

The bank map is computed here from the rule (bank = float index % 32), not asserted; the speeds are this
run's measurements.

Run:  python tutorials/03b_transpose.py [--step]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, ops, time_ms

N = 8192  # 8192 x 8192 floats = 256 MiB
REPS = 10
TILE = 32  # the tile is TILE x (TILE + pad)
BANKS = 32  # shared memory: 32 banks, 4 bytes wide; consecutive floats in consecutive banks
SHOWN = 4  # rows of the bank map printed
SOURCES = Path(rawcuda.kernels.KERNEL_DIR).parent.parent / "kernels"


def excerpt(source: str, name: str) -> str:
    """The text of kernels/<source> between its `// -- begin NAME` and `// -- end NAME` lines."""
    text = (SOURCES / source).read_text()
    begin, end = f"// -- begin {name}\n", f"// -- end {name}"
    return text[text.index(begin) + len(begin) : text.index(end)].rstrip()


def bank_map(width: int) -> np.ndarray:
    """bank[r, c] of tile[r][c] in a tile ``width`` floats wide."""
    rows, cols = np.meshgrid(np.arange(TILE), np.arange(TILE), indexing="ij")
    return (rows * width + cols) % BANKS


def show_banks(t: Tutorial) -> dict[int, int]:
    """Print the bank map of both tiles; return, per width, the banks one warp's column read touches."""
    distinct = {}
    for width in (TILE, TILE + 1):
        banks = bank_map(width)
        column = banks[:, 0]  # the transposed read: lanes 0..31 read tile[lane][c], one column
        distinct[width] = len(set(column.tolist()))
        lines = [f"tile[{TILE}][{width}]: bank of tile[r][c] (c = 0 1 2 ... 31)"]
        lines += [f"  r={r:<3}" + " ".join(f"{b:>2}" for b in banks[r, :8]) + " ... " + f"{banks[r, -1]:>2}"
                  for r in range(SHOWN)]  # fmt: skip
        lines += [
            "  ...",
            f"  r={TILE - 1:<3}" + " ".join(f"{b:>2}" for b in banks[-1, :8]) + f" ... {banks[-1, -1]:>2}",
        ]
        way = TILE // distinct[width]
        verdict = f"a {way}-way conflict, served one float at a time" if way > 1 else "no conflict"
        lines.append(f"  a warp reading column 0 touches {distinct[width]} bank(s): {verdict}")
        t.say("\n".join(lines))
    return distinct


def main(t: Tutorial) -> None:
    t.words("kernel", "bank conflict")
    t.step("three kernels: naive (no tile), and one tiled template, padded or not")
    t.say(excerpt("transpose.cu", "transpose_naive"))
    t.say(excerpt("transpose.cu", "transpose_tiled"))
    t.say(excerpt("transpose.cu", "transpose_unpadded") + "\n" + excerpt("transpose.cu", "transpose_padded"))

    t.step("the bank map: why one extra column matters")
    distinct = show_banks(t)
    t.check(distinct == {TILE: 1, TILE + 1: BANKS}, "32 columns: a column is one bank; 33 columns: 32 banks")

    t.step(f"an {N} x {N} matrix on the GPU, and the ceiling: a device-to-device copy of the same bytes")
    device = rawcuda.Device(0)  # the first driver call: without a GPU the tutorial stops here, status 77
    host = np.random.default_rng().standard_normal((N, N), dtype=np.float32)
    x, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((N, N))
    copy_ms = time_ms(lambda: rawcuda.cu.cuMemcpyDtoDAsync(out.ptr, x.ptr, x.nbytes, 0), reps=REPS).median
    copy_gbps = 2 * x.nbytes / copy_ms / 1e6
    t.say(f"{device.name}, copy: {copy_ms:.3f} ms = {copy_gbps:.0f} GB/s (read + write)")

    speed = {}
    lessons = {
        "naive": "each warp writes 32 floats a whole column apart: 32 transactions per store",
        "unpadded": "coalesced reads and writes; the transposed read of the tile is a 32-way bank conflict",
        "padded": "the same, with the tile 33 wide: the column read is conflict-free",
    }
    for variant, lesson in lessons.items():
        t.step(f"{ops.TRANSPOSE_VARIANTS[variant]}: {lesson}")
        if variant == "naive":  # a warp's stores a column apart: the opposite of coalesced
            t.term("coalescing")
        out.fill(np.float32(np.nan))  # poisoned: an element never written stays NaN and fails the check
        ops.transpose(out, x, variant=variant)
        t.check(bool(np.array_equal(out.to_array(), host.T)), f"every element of the {variant} transpose is exact")
        ms = time_ms(lambda v=variant: ops.transpose(out, x, variant=v), reps=REPS).median
        speed[variant] = 2 * x.nbytes / ms / 1e6
        t.say(f"{ms:.3f} ms = {speed[variant]:.0f} GB/s read + written, {speed[variant] / copy_gbps:.0%} of the copy")

    t.step("the two lessons, measured in this run")
    t.say(
        f"coalescing    (naive -> unpadded): {speed['naive']:.0f} -> {speed['unpadded']:.0f} GB/s, "
        f"{speed['unpadded'] / speed['naive']:.2f}x\n"
        f"bank conflicts (unpadded -> padded): {speed['unpadded']:.0f} -> {speed['padded']:.0f} GB/s, "
        f"{speed['padded'] / speed['unpadded']:.2f}x\n"
        f"padded vs the copy: {speed['padded'] / copy_gbps:.0%}"
    )
    x.close()
    out.close()


if __name__ == "__main__":
    run(main, "Tutorial 03b: a transpose three ways -- coalescing, then bank conflicts")
