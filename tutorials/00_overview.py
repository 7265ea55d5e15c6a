"""Tutorial 00 -- the whole journey in one screen: a vector add on the GPU, written with rawcuda's classes.

Before any ctypes: what you will be able to write by the end, and which tutorial takes each line apart.
The program below is the one tutorial 02 builds line by line -- load a kernel, copy two arrays to the GPU,
launch, copy back, check against numpy. Every line hides driver calls (cuInit, a context, cuMemAlloc,
cuModuleLoadDataEx, the kernelParams array, cuLaunchKernelEx, ...) that the tutorials from 00a on write by
hand, so that nothing here stays magic.

Run:  python tutorials/00_overview.py [--step]   (--step shows each step's code before it runs)
"""

from __future__ import annotations

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Module, Stream

N = 1_000_000
BLOCK = 256  # threads per block

ROADMAP = """\
00a  libcuda by hand: open it, call it, declare what each C function takes and returns
00b  a kernel by hand: GPU memory, copies, the argument array, the launch
01   the same program through rawcuda's table of declarations, every driver call in sight
02   this program, line by line, beside the raw calls and the Rust library cust's lines
03a-03f  fast kernels: a sum in nine steps, a transpose, block sizes, fast math, a kernel's resources and their limits
04a-04b  building kernels, and the forms of compiled code the driver loads
05a-05f  errors: from the driver's integer codes to clear Python exceptions
06a-06f  streams: timing, copies that overlap the work, races, and threads
07a-07c  contexts, lifetimes, and the API the seed article's cudaMalloc belongs to
08   when not to use the GPU;  09  many launches replayed with one call;  10  asyncio
11a-11b  memory the CPU and the GPU share;  12a-12b  compiling at run time; the driver's entry points
13   a buffer that grows in place;  14  a matrix multiply, step by step, up to the GPU's matrix units"""


def main(t: Tutorial) -> None:
    t.words("seed article", "cust")
    t.step("the kernel, compiled to PTX by build.py (kernels/vector_add.cu), loaded into the GPU's context")
    kernel = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    t.term("kernel")
    t.term("PTX")
    t.term("context")
    t.term("grid")
    t.term("grid-stride loop")
    t.say(f"{kernel!r}: c[i] = a[i] + b[i], a grid-stride loop, so any grid covers any n")

    t.step(f"two arrays of {N:,} random floats, copied to the GPU; c poisoned with NaN")
    rng = np.random.default_rng()
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    stream = Stream()
    d_a, d_b = DeviceBuffer.from_array(a, stream=stream), DeviceBuffer.from_array(b, stream=stream)
    d_c = DeviceBuffer.empty(N)
    d_c.fill(np.float32(np.nan), stream=stream)  # a kernel that wrote nothing cannot look right

    t.step("launch it on the stream, then copy c back (the copy waits for the kernel)")
    t.term("stream")
    t.term("block")
    grid = (N + BLOCK - 1) // BLOCK
    kernel.launch(grid, BLOCK, d_c, d_a, d_b, N, stream=stream)  # checked against the kernel's PTX signature
    c = d_c.to_array(stream=stream)
    t.say(f"launched {grid:,} blocks of {BLOCK} threads; c[:3] = {c[:3]}")
    t.check(bool(np.array_equal(c, a + b)), f"all {N:,} sums equal numpy's a + b exactly")

    t.step("clean up: the buffers and the stream, each freed exactly once (also when garbage-collected)")
    for resource in (d_a, d_b, d_c, stream):
        resource.close()
    t.check(all(r.closed for r in (d_a, d_b, d_c, stream)), "every buffer and the stream closed")

    t.step("now we take it apart: which tutorial opens which line")
    t.say(ROADMAP)
    t.say("Next: python3 tutorials/00a_declarations_by_hand.py --step")


if __name__ == "__main__":
    run(main, "Tutorial 00: the journey in one screen -- a vector add with rawcuda's classes")
