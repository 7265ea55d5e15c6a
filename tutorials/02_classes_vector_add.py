"""Tutorial 02 -- the same vector add with rawcuda's classes, beside the seed's cust code and the raw calls.

Each step shows three columns of the same idea: what the seed article wrote with cust (Rust; where the
seed's line is wrong or legacy, the line current cust needs, and why), what rawcuda writes, and which
driver calls of tutorial 01 that line replaces. What the classes add on top of saving
lines: shapes and dtypes checked before any copy, kernel arguments checked against the kernel's PTX
signature before the launch, and objects that free themselves in the right order.

The launch step also shows the kernel: a naive one-thread-per-element version beside the lines of
``kernels/vector_add.cu`` that make it a grid-stride loop -- which is why this tutorial sizes the grid as
rawcuda.ops does (at most 32 blocks per SM) instead of one thread per element.

Run:  python tutorials/02_classes_vector_add.py [--step]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Context, Device, DeviceBuffer, Function, Module, Stream, ops
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.ffi.constants import CtxFlag, StreamFlag

N = 1_000_000
BLOCK = 256
REPEATS = 2000  # launches per way of launching: enough that one launch's host time is measurable
US_PER_S = 1_000_000
SOURCE = Path(__file__).resolve().parent.parent / "kernels" / "vector_add.cu"  # in a source checkout
NAIVE_KERNEL = """\
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;   // one thread per element
    if (i < n) c[i] = a[i] + b[i];"""
GRID_STRIDE_MARKERS = ("const size_t thread =", "const size_t threads =", "for (size_t i = scalar_start")


def grid_stride_lines() -> str:
    """The lines of kernels/vector_add.cu that make it a grid-stride loop."""
    if not SOURCE.is_file():
        return f"    ({SOURCE} is not here: an installed rawcuda ships the PTX only)"
    lines = [line for line in SOURCE.read_text().splitlines() if line.strip().startswith(GRID_STRIDE_MARKERS)]
    return "\n".join(lines) + "\n    ...       (and a float4 loop over the aligned part before the scalar one)"


def show(t: Tutorial, cust: str, rawcuda_line: str, raw: str) -> None:
    t.say(f"cust:     {cust}\nrawcuda:  {rawcuda_line}\nreplaces: {raw}")


def repeat_it(t: Tutorial, kernel: Function, grid: int, args: tuple[Any, ...], stream: Stream, want: Any) -> None:
    """The same launch many times: fn.launch (checks cached, compared each call) against fn.bind (checked once)."""
    t.step(f"launch it {REPEATS:,} times: kernel.launch each time, or kernel.bind once and call it")
    show(
        t,
        "unsafe { launch!(f<<<grid, block, 0, stream>>>(dev_c.as_device_ptr(), dev_a.as_device_ptr(),\n"
        "          dev_b.as_device_ptr(), n))? }  (in a loop: the kernelParams array built at every call)",
        "again = kernel.bind(grid, BLOCK, d_c, d_a, d_b, N, stream=stream); again()",
        "cuLaunchKernelEx(&config, f, kernelParams, NULL): the same prepared arguments every time",
    )
    d_c = args[0]
    per_call = {}
    for label, launch in (
        ("kernel.launch(...)", lambda: kernel.launch(grid, BLOCK, *args, stream=stream)),
        ("bound()", kernel.bind(grid, BLOCK, *args, stream=stream)),
    ):
        d_c.fill(np.float32(np.nan), stream=stream)
        stream.synchronize()
        began = time.perf_counter()
        for _ in range(REPEATS):
            launch()
        per_call[label] = (time.perf_counter() - began) / REPEATS * US_PER_S  # host time to queue one launch
        got = d_c.to_array(stream=stream)
        t.check(bool(np.array_equal(got, want)), f"{label}: after {REPEATS:,} launches, every sum is right")
    t.say(
        "host time to queue one launch (this run): "
        + ", ".join(f"{label} {us:.2f} us" for label, us in per_call.items())
        + "\nkernel.launch compares the grid, block, stream and arguments with its last launch before reusing its\n"
        "packed arguments; a bound launch checked them once, and only makes sure nothing was closed since.\n"
        "bench/launch_overhead.py measures both against C and the other Python bindings."
    )


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "kernel",
        "grid",
        "grid-stride loop",
        "block",
        "SM",
        "register",
        "context",
        "primary context",
        "current context",
        "stream",
        "PTX",
        "float4",
    )
    t.step("initialise and pick a device")
    show(
        t,
        "let _ctx = cust::quick_init()?; let device = Device::get_device(0)?;\n"
        "          (quick_init is #[must_use]: it returns the Context; the seed's `quick_init()?;` drops it at once)",
        "dev = Device(0)",
        "dlopen + cuInit(0) + cuDeviceGet",
    )
    dev = Device(0)
    t.say(repr(dev))

    t.step("a context, current on this thread")
    show(
        t,
        "legacy::Context::create_and_push(ContextFlags::MAP_HOST | ContextFlags::SCHED_AUTO, device)?",
        "ctx = Context.create(dev, CtxFlag.MAP_HOST | CtxFlag.SCHED_AUTO)",
        "cuCtxCreate_v4(&ctx, NULL, flags, dev)   (+ cuCtxDestroy when closed)",
    )
    t.say(
        "(create_and_push is cust's legacy API. cust's current Context::new(device) retains the primary\n"
        "context, and its drop is cuDevicePrimaryCtxRelease; rawcuda uses that primary context too when\n"
        "no context is given -- the one torch and CuPy share)"
    )
    with Context.create(dev, CtxFlag.MAP_HOST | CtxFlag.SCHED_AUTO) as ctx:
        t.check(bool(ctx.flags & CtxFlag.MAP_HOST), "the context has the MAP_HOST flag")

        t.step("a stream")
        show(
            t,
            "Stream::new(StreamFlags::NON_BLOCKING, None)?   (cust clears the flag: a blocking stream)",
            "stream = Stream(ctx, flags=StreamFlag.NON_BLOCKING)",
            "cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)",
        )
        stream = Stream(ctx, flags=StreamFlag.NON_BLOCKING)

        t.step("device buffers from host data")
        show(
            t,
            "DeviceBuffer::from_slice(&host_a)?",
            "d_a = DeviceBuffer.from_array(a, ctx, stream=stream)",
            "cuMemAlloc_v2 + cuMemcpyHtoDAsync_v2 (+ cuMemFree_v2 when closed)",
        )
        rng = np.random.default_rng()
        a = rng.standard_normal(N, dtype=np.float32)
        b = rng.standard_normal(N, dtype=np.float32)
        d_a = DeviceBuffer.from_array(a, ctx, stream=stream)
        d_b = DeviceBuffer.from_array(b, ctx, stream=stream)
        d_c = DeviceBuffer.empty(N, np.float32, ctx)
        d_c.fill(np.float32(np.nan), stream=stream)  # poison: a kernel that writes nothing cannot pass
        t.say(f"{d_a!r}")

        t.step("load the module and find the kernel")
        show(
            t,
            'Module::from_ptx(ptx, &[])?; module.get_function("vector_add")?',
            "kernel = Module(kernels.ptx_path('vector_add'), ctx).function('vector_add')",
            "cuModuleLoadDataEx (with JIT log buffers) + cuModuleGetFunction",
        )
        module = Module(rawcuda.kernels.ptx_path("vector_add"), ctx)
        kernel = module.function("vector_add")
        t.say(f"{kernel!r}: {kernel.num_regs} registers, up to {kernel.max_threads_per_block} threads per block")

        t.step("launch -- arguments checked against the PTX signature first")
        show(
            t,
            "unsafe { launch!(kernel<<<grid, block, 0, stream>>>(dev_c.as_device_ptr(), dev_a.as_device_ptr(),\n"
            "                                                               dev_b.as_device_ptr(), n))? }\n"
            "          (the macro calls an unsafe fn, Stream::launch: without unsafe { } it is error E0133; each\n"
            "          argument must be DeviceCopy, which a DeviceBuffer is not: its device pointer goes in)",
            "kernel.launch(grid, BLOCK, d_c, d_a, d_b, N, stream=stream)",
            "build void*[4] of pointers to each value + cuLaunchKernel",
        )
        try:
            kernel.launch(1, BLOCK, d_c, a, d_b, N, stream=stream)  # a host array by mistake
        except ArgumentError as exc:
            t.say(f"a mistake caught before the driver saw it:\n  {exc}")
        # The grid rawcuda.ops uses for this kernel: enough blocks to fill the GPU a few times over, no more.
        grid = min((N + BLOCK - 1) // BLOCK, ops.WAVES * dev.multiprocessor_count)
        t.say(
            f"the naive kernel needs one thread per element, grid = ceil(N / {BLOCK}) = {(N + BLOCK - 1) // BLOCK:,}:\n"
            f"{NAIVE_KERNEL}\n"
            f"{SOURCE.name} is a grid-stride loop over float4s, so any grid covers any n:\n{grid_stride_lines()}\n"
            f"grid = min(ceil(N / {BLOCK}), {ops.WAVES} x {dev.multiprocessor_count} SMs) = {grid:,} blocks "
            "(tutorial 01 shows the whole kernel, and one block doing all of it)"
        )
        kernel.launch(grid, BLOCK, d_c, d_a, d_b, N, stream=stream)

        t.step("copy back and verify")
        show(
            t,
            "stream.synchronize()?; dev_c.copy_to(&mut host_c)?",
            "c = d_c.to_array(stream=stream)",
            "cuMemcpyDtoHAsync_v2 + cuStreamSynchronize",
        )
        c = d_c.to_array(stream=stream)
        t.check(bool(np.array_equal(c, a + b)), f"all {N:,} sums equal numpy's a + b exactly")

        repeat_it(t, kernel, grid, (d_c, d_a, d_b, N), stream, a + b)

        t.step("clean up: ctx.close() closes the children the context still owns, then the context itself")
        show(
            t,
            "(Drop order: the context must outlive its buffers -- the seed's warning)",
            "ctx.close()",
            "cuCtxSynchronize; cuMemFree_v2 x3; cuModuleUnload; cuStreamDestroy_v2; cuCtxDestroy_v2",
        )
        children = ctx.children
        t.say(f"{len(children)} objects still open in the context: {sorted(type(c).__name__ for c in children)}")
    # Leaving `with ctx:` popped the context off this thread's stack; it did not destroy it. Closing does.
    ctx.close()
    t.check(all(obj.closed for obj in (d_a, d_b, d_c, module, stream)), "every child was closed with the context")
    try:
        d_c.to_array()
    except rawcuda.ClosedError as exc:
        t.say(f"using a buffer after its context closed is a clear error, not a crash:\n  {exc}")


if __name__ == "__main__":
    run(main, "Tutorial 02: vector add with rawcuda's classes")
