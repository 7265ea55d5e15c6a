"""Tutorial 03e -- what a kernel asks of an SM: its attributes, and the shared memory a launch adds.

A kernel's cost to the multiprocessor is fixed in two places. The compiler fixes some of it: registers per
thread, static shared memory (``__shared__ float tile[32][33]``), local memory, and the largest block
``__launch_bounds__`` allows -- the driver reports each through ``cuFuncGetAttribute`` (``fn.num_regs``,
``fn.shared_size_bytes``, ...). The launch adds the rest: dynamic shared memory (``extern __shared__``),
sized per launch, which changes how many blocks fit on an SM (``cuOccupancyMaxActiveBlocksPerMultiprocessor``).
Above 48 KiB a kernel must opt in (``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)``): rawcuda does that
at the first launch that asks for more, and refuses, before the driver sees it, more than the device has.

The kernels are the ones tutorials 03a-03c measured: the reduction steps, the two tiled transposes, the copy.

Run:  python tutorials/03e_kernel_resources.py [--step]
"""

from __future__ import annotations

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Function, FunctionAttribute, ops
from rawcuda.reduce_steps import STEPS, STEPS_BLOCK, error_bound

KIB = 1024
DEFAULT_LIMIT = 48 * KIB  # dynamic shared memory every kernel may use without opting in
SHARED_SIZES = (1 * KIB, 16 * KIB, 32 * KIB, 48 * KIB)  # up to the limit every kernel has without opting in
BIG_SHARED = 64 * KIB
N = 1_000_003
KERNELS = [  # (source stem, kernel): a range of what the compiler decided
    ("reduce_steps", "reduce_03_sequential_addressing"),
    ("reduce_steps", "reduce_08_warp_shuffle"),
    ("reduce", "warp_reduce_sum"),
    ("transpose", "transpose_unpadded"),
    ("transpose", "transpose_padded"),
    ("occupancy", "copy_one_per_thread"),
    ("transcendentals", "transcendental_chain"),
]


def occupancy(fn: Function, shared: int) -> str:
    """What the driver says about blocks of STEPS_BLOCK threads with ``shared`` bytes each, or its refusal."""
    try:
        return (
            f"at {shared // KIB} KiB the driver fits {fn.max_active_blocks_per_sm(STEPS_BLOCK, shared)} blocks per SM"
        )
    except rawcuda.CudaError as exc:  # the occupancy call may refuse a size past the kernel's current limit
        return f"at {shared // KIB} KiB the occupancy call refuses: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def main(t: Tutorial) -> None:
    t.step("what the compiler fixed: each kernel's attributes, as the driver reports them")
    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    lines = ["kernel                             registers  static shared  local  max block"]
    for stem, name in KERNELS:
        fn = ops.kernel(stem, name, ctx)
        lines.append(
            f"{name:<34} {fn.num_regs:>9}  {fn.shared_size_bytes:>11} B  {fn.local_size_bytes:>3} B  "
            f"{fn.max_threads_per_block:>9}"
        )
    t.say("\n".join(lines))
    padded, unpadded = (ops.kernel("transpose", f"transpose_{v}", ctx) for v in ("padded", "unpadded"))
    t.check(
        padded.shared_size_bytes - unpadded.shared_size_bytes == 32 * 4,
        "the padded tile is one 32-float column (128 bytes) larger than the unpadded one",
    )
    step = STEPS[2]  # __launch_bounds__(256) in kernels/reduce_steps.cu
    fn = step.function(ctx)
    t.check(fn.max_threads_per_block == STEPS_BLOCK, f"__launch_bounds__({STEPS_BLOCK}) caps {step.kernel}'s block")

    t.step(f"what the launch adds: dynamic shared memory, and the blocks of {STEPS_BLOCK} threads that then fit")
    device = ctx.device
    optin = device.max_shared_memory_per_block_optin
    per_sm = device.attribute(rawcuda.DeviceAttribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    t.say(f"{device.name}: up to {optin // KIB} KiB per block (opted in), {per_sm // KIB} KiB per SM")
    for shared in SHARED_SIZES:
        blocks = fn.max_active_blocks_per_sm(STEPS_BLOCK, shared)
        t.say(f"{shared // KIB:>4} KiB per block: {blocks} blocks per SM ({blocks * STEPS_BLOCK} threads)")

    t.step(f"above {DEFAULT_LIMIT // KIB} KiB: a launch with {BIG_SHARED // KIB} KiB makes rawcuda opt the kernel in")
    before = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    t.say(f"before: MAX_DYNAMIC_SHARED_SIZE_BYTES = {before}; {occupancy(fn, BIG_SHARED)}")
    x = np.random.default_rng().standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(-(-N // STEPS_BLOCK)) as out:
        out.fill(np.float32(np.nan))
        grid = step.grid(N, device.multiprocessor_count)
        fn.launch(grid, STEPS_BLOCK, out, dx, N, shared_mem=BIG_SHARED)  # uses 1 KiB of it; the rest is reserved
        partials = out.to_array()
    after = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    t.say(f"after:  MAX_DYNAMIC_SHARED_SIZE_BYTES = {after} (cuFuncSetAttribute, once); {occupancy(fn, BIG_SHARED)}")
    exact = float(x.astype(np.float64).sum())
    bound = error_bound(step, N, device.multiprocessor_count, float(np.abs(x.astype(np.float64)).sum()))
    t.check(after >= BIG_SHARED, "the kernel was opted in to the larger size")
    t.check(abs(float(partials.astype(np.float64).sum()) - exact) <= bound, "and its partial sums are right")

    t.step(f"more than the device has ({optin // KIB} KiB): refused before the driver is called")
    with DeviceBuffer.empty(STEPS_BLOCK) as dx, DeviceBuffer.empty(1) as out:
        try:
            fn.launch(1, STEPS_BLOCK, out, dx, STEPS_BLOCK, shared_mem=optin + KIB)
            refused = None
        except ValueError as exc:
            refused = exc
    t.say(f"ValueError: {refused}")
    t.check(refused is not None and str(optin) in str(refused), "the message names the device's limit")


if __name__ == "__main__":
    run(main, "Tutorial 03e: a kernel's resources -- attributes, and shared memory at launch")
