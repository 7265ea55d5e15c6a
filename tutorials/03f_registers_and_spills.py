"""Tutorial 03f -- registers: a kernel made to spill, measured, and the launch the driver refuses at once.

``sgemm_05_reg2d`` (``kernels/sgemm.cu``, tutorial 14's fifth step) keeps an 8 x 8 tile of C per thread in
registers. This tutorial loads its PTX with the JIT told to use fewer registers (``CU_JIT_MAX_REGISTERS``,
the load-time twin of ``nvcc -maxrregcount``) -- which the kernel's ``__launch_bounds__`` overrides, as the
first try shows -- then loads a copy without the launch bounds at several caps. For each it prints what the
JIT made -- registers per thread, bytes of local memory (the spills), how many threads a block may have --
checks the product against float64 numpy and measures it.

Then the other side of the register budget: a block too large for the kernel's registers. The driver
refuses such a launch *synchronously* -- ``cuLaunchKernel`` itself returns
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701), nothing is queued, and the context stays healthy -- while a block
past the kernel's launch bounds, or past 1024 threads, gets CUDA_ERROR_INVALID_VALUE (1). rawcuda's
``Function.launch`` refuses them before the driver, naming the limit.

Run:  python tutorials/03f_registers_and_spills.py [--step]
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Function, Module, time_ms
from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError
from rawcuda.ffi.constants import JitOption
from rawcuda.ffi.results import Result
from rawcuda.ops import sgemm

KERNEL = "sgemm_05_reg2d"
SIZE = 2048  # M = N = K: large enough that the arithmetic, not the launch, decides
CAPS = (128, 64, 32)  # CU_JIT_MAX_REGISTERS for each load of the PTX without launch bounds
IGNORED_CAP = 64  # the cap first tried on the shipped PTX, whose launch bounds win over it
MAXNTID = re.compile(rb"\.maxntid[^\n]*\n")  # the PTX directive __launch_bounds__(threads) compiles to
REPS = 5
REGISTERS_PER_SM = 65536  # 32-bit registers in one SM's register file (compute capability 5.0 to 9.0)
MAX_BLOCK = 1024  # threads per block, any kernel, any GPU since compute capability 2.0
MS_PER_S = 1000


def load(ptx: bytes, cap: int | None, name: str) -> tuple[Module, float]:
    """``ptx`` JIT-compiled with at most ``cap`` registers per thread (None: no cap); and the seconds it took."""
    options = {} if cap is None else {JitOption.MAX_REGISTERS: cap}
    began = time.perf_counter()
    module = Module(ptx, jit_options=options, name=name)
    return module, time.perf_counter() - began


def without_launch_bounds(ptx: bytes, entry: str) -> bytes:
    """``ptx`` with the ``.maxntid`` directive (``__launch_bounds__``' threads) removed from ``entry`` alone."""
    start = ptx.index(f".entry {entry}(".encode())
    body = ptx.index(b"{", start)
    return ptx[:start] + MAXNTID.sub(b"", ptx[start:body]) + ptx[body:]


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "grid", "block", "warp", "register", "SM", "PTX", "JIT", "launch bounds", "context")
    t.step(f"the kernel: {KERNEL}, an 8 x 8 tile of C per thread")
    spec = sgemm.KERNELS[KERNEL]
    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    t.say(
        f"block {spec.block}, tile {spec.tile[0]} x {spec.tile[1]}: each of the {spec.threads} threads adds 64 "
        "products into 64\nfloats of its own, plus the 8 + 8 values of A and B they need -- about 80 live floats "
        "before any\naddress or loop counter. Registers are the only storage that fast; what does not fit goes "
        "to local memory."
    )
    t.term("local memory")
    t.term("register spill")

    t.step(f"C = A @ B at {SIZE}^3 on random data, the reference in float64")
    rng = np.random.default_rng()
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, bound = a64 @ b64, spec.error_bound(SIZE) * (np.abs(a64) @ np.abs(b64))
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty((SIZE, SIZE))
    args = (dc, da, db, SIZE, SIZE, SIZE)
    grid = spec.grid(SIZE, SIZE)
    t.say(f"every element checked: |C - A@B| <= K * 2^-23 * (|A| @ |B|), the bound tutorial 14 uses; grid {grid}")

    shipped = rawcuda.kernels.ptx_path(sgemm.STEM).read_bytes()
    unbounded = without_launch_bounds(shipped, KERNEL)
    loads = [
        ("shipped PTX, no cap", shipped, None),
        (f"shipped PTX, cap {IGNORED_CAP}", shipped, IGNORED_CAP),
        *((f"no .maxntid, cap {cap}", unbounded, cap) for cap in CAPS),
    ]
    rows = []
    for label, ptx, cap in loads:
        t.step(f"load the {label}" + ("" if cap is None else f" (CU_JIT_MAX_REGISTERS = {cap})"))
        module, seconds = load(ptx, cap, f"sgemm.ptx: {label}")
        fn = module.function(KERNEL)
        regs, local, most = fn.num_regs, fn.local_size_bytes, fn.max_threads_per_block
        per_sm = fn.max_active_blocks_per_sm(spec.threads)
        t.say(f"loaded in {seconds * MS_PER_S:.0f} ms: {regs} registers, {local} B of local memory per thread")
        if ptx is shipped and cap is not None:
            t.check(regs == rows[0][1], f"the cap was ignored: {regs} registers, as with no cap")
            t.say(
                f"{KERNEL} is declared __launch_bounds__({spec.threads}); its PTX says so with .maxntid\n"
                f"{spec.threads}, 1, 1, and launch bounds take precedence over a register cap: the compiler sizes\n"
                f"registers from them (a block must fit: {spec.threads} x {regs} registers does), and ignores\n"
                "-maxrregcount / CU_JIT_MAX_REGISTERS for that kernel. The next loads remove .maxntid from this\n"
                "one entry of a copy of the PTX, so that the cap decides."
            )
        elif cap is not None:
            t.check(regs <= cap, f"the JIT kept to the cap: {regs} <= {cap} registers")
        dc.fill(np.float32(np.nan))
        fn.launch(grid, spec.block, *args)
        got = dc.to_array().astype(np.float64)
        t.check(bool(np.all(np.abs(got - expected) <= bound)), f"all {SIZE * SIZE:,} elements within the bound")
        ms = time_ms(lambda f=fn: f.launch(grid, spec.block, *args), reps=REPS).median
        rows.append((label, regs, local, most, per_sm, ms))
        if cap == CAPS[-1]:
            t.check(local > 0, f"at {cap} registers the JIT spilled: {local} bytes of local memory per thread")
        module.close()

    t.step("what the cap did (this run)")
    t.term("TFLOP/s")
    tflops = 2 * SIZE**3 / 1e12
    base = rows[0][5]
    width = max(len(row[0]) for row in rows)
    lines = [f"{'load':<{width}}  registers  local B  max block  blocks/SM     ms  TFLOP/s  vs no cap"]
    lines += [
        f"{label:<{width}}  {regs:>9}  {local:>7}  {most:>9}  {per_sm:>9}  {ms:>5.2f}  {tflops / ms * 1e3:>7.1f}  "
        f"{base / ms:>8.2f}x"
        for label, regs, local, most, per_sm, ms in rows
    ]
    t.say("\n".join(lines))
    t.say(verdict(rows))
    t.term("L1")
    t.term("nvcc")
    t.term("ptxas")
    t.say(
        "Fewer registers let more threads share an SM (the 'max block' column: how many the registers allow,\n"
        "in whole warps, at most 1024), but every spilled value is a store and a later load through L1. Its 64\n"
        "accumulators are touched on every step of K, so a spilled one is stored and loaded again every step.\n"
        "When compiling: nvcc -maxrregcount N caps every kernel without launch bounds, __maxnreg__(N) one\n"
        "kernel, and __launch_bounds__ sizes registers from its thread count; ptxas -v reports the spills."
    )

    def right() -> bool:
        """A fresh launch of the shipped kernel, every element checked: the context still works."""
        dc.fill(np.float32(np.nan))
        rawcuda.ops.kernel(sgemm.STEM, KERNEL, ctx).launch(grid, spec.block, *args)
        return bool(np.all(np.abs(dc.to_array().astype(np.float64) - expected) <= bound))

    refusals(t, unbounded, args, grid, right)
    for buf in (da, db, dc):
        buf.close()
    ctx.synchronize()


def verdict(rows: list[tuple[str, int, int, int, int, float]]) -> str:
    """What the table says, computed from it: the fastest load, and what its registers and spills bought."""
    base = rows[0]
    best = min(rows, key=lambda row: row[5])
    worst = max(rows, key=lambda row: row[5])
    if best is base:
        gain = "no cap beat the compiler's own choice"
    else:
        gain = (
            f"{best[0]} was {base[5] / best[5]:.2f}x faster than no cap: at {best[1]} registers {best[4]} blocks\n"
            f"share an SM instead of {base[4]}, and it was faster despite {best[2]} spilled bytes per thread"
        )
    return f"This run: {gain};\n{worst[0]} ({worst[2]} B spilled per thread) ran at {base[5] / worst[5]:.2f}x."


def refused_by_hand(t: Tutorial, fn: Function, block: int, grid: tuple[int, int], params: object) -> int:
    """The 11-argument launch by hand, through the declaration table; the CUresult the call itself returned."""
    try:
        cu.cuLaunchKernel(fn.handle, *grid, 1, block, 1, 1, 0, None, params, None)
        return Result.SUCCESS
    except CudaError as exc:
        t.say(f"cuLaunchKernel(block={block}) returned {exc.name} ({exc.code}) -- from the call itself")
        return exc.code


def refusals(
    t: Tutorial, unbounded: bytes, args: tuple[object, ...], grid: tuple[int, int], right: Callable[[], bool]
) -> None:
    """Three blocks the driver refuses at once, and rawcuda's refusal before it."""
    capped, _ = load(unbounded, CAPS[0], f"sgemm.ptx: no .maxntid, cap {CAPS[0]}")
    fn = capped.function(KERNEL)
    regs, most = fn.num_regs, fn.max_threads_per_block
    t.step(f"a block of {MAX_BLOCK} threads for a kernel of {regs} registers: the driver says no at once")
    t.say(
        f"{regs} registers x {MAX_BLOCK} threads = {regs * MAX_BLOCK:,} > the {REGISTERS_PER_SM:,} an SM has: "
        f"this copy (no launch bounds) allows blocks of {most}."
    )
    code = refused_by_hand(t, fn, MAX_BLOCK, grid, fn.pack(args).array)
    t.check(
        code == Result.ERROR_LAUNCH_OUT_OF_RESOURCES,
        "too many registers for the block: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701), from the launch call itself",
    )
    shipped = rawcuda.ops.kernel(sgemm.STEM, KERNEL, rawcuda.default_context())
    bounds = shipped.max_threads_per_block
    params = shipped.pack(args).array
    over_bounds = refused_by_hand(t, shipped, 2 * bounds, grid, params)
    t.check(
        over_bounds == Result.ERROR_INVALID_VALUE,
        f"past the shipped kernel's __launch_bounds__({bounds}): CUDA_ERROR_INVALID_VALUE (1), not 701",
    )
    past = refused_by_hand(t, shipped, MAX_BLOCK + 1, grid, params)
    t.check(past == Result.ERROR_INVALID_VALUE, f"a block past {MAX_BLOCK} threads: CUDA_ERROR_INVALID_VALUE (1)")
    t.check(right(), "nothing is sticky: the next launch ran, every element right -- the context is healthy")
    try:
        fn.launch(grid, MAX_BLOCK, *args)
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    t.say(f"rawcuda: fn.launch(grid, {MAX_BLOCK}, ...) -> ValueError: {refused}")
    t.check(str(most) in refused, f"rawcuda refused it before the driver, naming the limit ({most} threads)")
    capped.close()
    t.say(
        "cust (Rust-CUDA at ac2674f): launch! returns cuLaunchKernel's result, so the same launch is\n"
        "Err(CudaError::LaunchOutOfResources) (crates/cust/src/error.rs); the register cap is\n"
        "ModuleJitOption::MaxRegisters(u32) when loading PTX (crates/cust/src/module.rs)."
    )


if __name__ == "__main__":
    run(main, "Tutorial 03f: registers -- a kernel made to spill, and the launch the driver refuses at once")
