"""Tutorial 01 -- vector add from dlopen to a verified result, with nothing but the declaration table.

This is the seed article's case 1 (``vector_add_cust``) without cust: every piece of glue that
``cust::quick_init``, ``DeviceBuffer``, ``Module::from_ptx`` and ``launch!`` hide is written out, one
driver call at a time, through ``rawcuda.checked.cu`` -- the table rows bound to libcuda, where each
non-zero CUresult becomes an exception. Tutorials 00a and 00b write those rows and that check by hand, with
bare ctypes; tutorial 02 does the same job with rawcuda's classes.

The kernel is shown before it is launched: first the three-line version every CUDA course starts with,
then what ``kernels/vector_add.cu`` really ships (a grid-stride loop over float4 pairs) and why -- and
why the grid of the naive kernel, ceil(N / 256) blocks, is still correct for it (so is one block).

Run:  python tutorials/01_raw_vector_add.py [--step]
"""

from __future__ import annotations

import ctypes
import re
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import kernels
from rawcuda.checked import cu
from rawcuda.ffi.attributes import DeviceAttribute, FunctionAttribute
from rawcuda.ffi.constants import CtxFlag, JitOption, StreamFlag

N = 1_000_000  # the seed's n
BLOCK = 256  # threads per block, the seed's choice: a multiple of the warp size (32); other sizes not measured
NAN_BITS = 0x7FC00000  # a float32 quiet NaN, as a 32-bit pattern for cuMemsetD32
LOG_BYTES = 8192  # capacity of each JIT log buffer
FLOAT_BYTES = 4
CTX_CREATE_V4_SINCE = 12050  # cuDriverGetVersion's 1000 * major + 10 * minor: cuCtxCreate_v4 came with CUDA 12.5
ALLOC_ALIGNMENT = 256  # bytes: what cuMemAlloc guarantees (the float4 loads below need 16)
MAX_REGISTERS_PER_THREAD = 255  # every GPU since compute capability 3.5: a kernel may use at most this many
TARGET = re.compile(r"^\.target sm_(\d+)", re.M)  # the PTX's oldest GPU: .target sm_80 = compute capability 8.0
NAIVE_KERNEL = """\
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;   // one thread per element
    if (i < n) c[i] = a[i] + b[i];                              // the last block's extra threads do nothing
}"""
GRID_STRIDE_KERNEL = """\
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, size_t n) {
    const size_t threads = (size_t)gridDim.x * blockDim.x;              // every thread of the grid
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads)
        c[i] = a[i] + b[i];                                             // then the next element it owns
}"""


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "kernel",
        "grid",
        "grid-stride loop",
        "block",
        "shared memory",
        "dynamic shared memory",
        "context",
        "primary context",
        "current context",
        "stream",
        "legacy default stream",
        "PTX",
        "name mangling",
        "float4",
    )
    t.step("dlopen libcuda (the first thing that touches the driver; `import rawcuda` did not)")
    driver = cu.library()
    t.say(f"opened {driver.requested!r} -> {driver.path}")

    t.step("cuInit(0): must precede every other driver call")
    cu.cuInit(0)
    version = c_int()
    cu.cuDriverGetVersion(byref(version))
    t.say(f"cuDriverGetVersion -> {version.value} (CUDA {version.value // 1000}.{version.value % 1000 // 10})")
    t.check(version.value >= CTX_CREATE_V4_SINCE, "the driver is CUDA 12.5 or newer: it has cuCtxCreate_v4 (step 4)")

    t.step("pick device 0 and ask what it is")
    count = c_int()
    cu.cuDeviceGetCount(byref(count))
    dev = c_int()
    cu.cuDeviceGet(byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(name, len(name), dev)
    major, minor, sms = c_int(), c_int(), c_int()
    cu.cuDeviceGetAttribute(byref(major), DeviceAttribute.COMPUTE_CAPABILITY_MAJOR, dev)
    cu.cuDeviceGetAttribute(byref(minor), DeviceAttribute.COMPUTE_CAPABILITY_MINOR, dev)
    cu.cuDeviceGetAttribute(byref(sms), DeviceAttribute.MULTIPROCESSOR_COUNT, dev)
    t.term("SM")
    t.term("compute capability")
    t.say(
        f"{count.value} device(s); device 0 = {name.value.decode()}, compute capability "
        f"{major.value}.{minor.value}, {sms.value} SMs"
    )
    t.check(count.value >= 1 and sms.value >= 1, f"device 0 exists, with {sms.value} SMs to run blocks on")

    t.step("create a context and make it current (the seed: Context::create_and_push(MAP_HOST | SCHED_AUTO))")
    # CUDA 13's cuCtxCreate is cuCtxCreate_v4: a params struct (NULL = no extras) comes before the flags.
    ctx = c_void_p()
    cu.cuCtxCreate(byref(ctx), None, CtxFlag.MAP_HOST | CtxFlag.SCHED_AUTO, dev)
    t.say(
        f"cuCtxCreate_v4 -> context {ctx.value:#x}, now current on this thread\n"
        "create_and_push is cust's legacy API (cust::context::legacy; its drop is cuCtxDestroy). cust's\n"
        "current Context::new(device) retains the primary context instead: cuDevicePrimaryCtxRetain, and\n"
        "its drop is cuDevicePrimaryCtxRelease."
    )

    t.step("a non-blocking stream (cust: Stream::new(StreamFlags::NON_BLOCKING, None))")
    t.term("non-blocking stream")
    stream = c_void_p()
    cu.cuStreamCreate(byref(stream), StreamFlag.NON_BLOCKING)
    t.say(
        "NON_BLOCKING: this stream does not wait for the legacy default stream -- so every copy below is\n"
        "issued on *this* stream with the Async calls; a plain cuMemcpyHtoD would run on the legacy\n"
        "stream and could race the kernel. (cust clears NON_BLOCKING for that reason, Rust-CUDA issue 15:\n"
        "the seed's Stream::new(StreamFlags::NON_BLOCKING, None) makes an ordinary blocking stream.)"
    )

    t.step(f"host data: {N:,} random float32 in a and b (random, so a wrong kernel cannot pass by luck)")
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    c = np.empty(N, dtype=np.float32)
    nbytes = N * FLOAT_BYTES

    t.step("allocate three device buffers with cuMemAlloc (binds cuMemAlloc_v2: 64-bit sizes)")
    d_a, d_b, d_c = c_uint64(), c_uint64(), c_uint64()
    for ptr in (d_a, d_b, d_c):
        cu.cuMemAlloc(byref(ptr), nbytes)
    t.say(f"a at {d_a.value:#x}, b at {d_b.value:#x}, c at {d_c.value:#x} ({nbytes:,} bytes each)")
    t.check(
        all(ptr.value % ALLOC_ALIGNMENT == 0 for ptr in (d_a, d_b, d_c)),
        f"each address is a multiple of {ALLOC_ALIGNMENT}: cuMemAlloc's alignment, which the float4 loads rely on",
    )

    t.step("copy a and b to the device, and poison c with NaN so an idle kernel cannot look right")
    cu.cuMemcpyHtoDAsync(d_a, a.ctypes.data, nbytes, stream)
    cu.cuMemcpyHtoDAsync(d_b, b.ctypes.data, nbytes, stream)
    cu.cuMemsetD32Async(d_c, NAN_BITS, N, stream)
    t.term("pageable memory")
    t.say(
        "the sources are pageable numpy arrays, so these 'async' copies are staged and return only when\n"
        "the data has been taken: safe to reuse a and b afterwards"
    )

    t.step("the kernel: the naive three lines, then the grid-stride loop kernels/vector_add.cu is built on")
    t.say(f"naive -- one thread per element, so the grid must cover n:\n{NAIVE_KERNEL}")
    t.say(f"grid-stride -- each thread steps by the grid's thread count, any grid covers any n:\n{GRID_STRIDE_KERNEL}")
    t.say(
        "kernels/vector_add.cu is that loop, with size_t indices (n may pass 2^31), plus a part that moves\n"
        "float4s -- 16 bytes per load -- for a kernel whose speed is the memory's: tutorial 03c shows the whole\n"
        "file and why. So the grid this tutorial computes for the naive kernel, ceil(N / 256), is correct\n"
        "here too; rawcuda.ops caps it at 32 blocks per SM instead, and a later step launches a single block\n"
        "to prove the point."
    )

    t.step("load the PTX with cuModuleLoadDataEx, handing the JIT two log buffers")
    t.term("JIT")
    ptx_file = kernels.ptx_path("vector_add")
    ptx = ptx_file.read_bytes() + b"\0"  # the driver reads PTX as a C string: NUL-terminate it
    header = [line for line in ptx.decode().splitlines() if line.startswith((".version", ".target"))]
    t.say(f"{ptx_file.name}: {' '.join(header)}")
    target = TARGET.search(ptx.decode())
    oldest = int(target.group(1)) if target else 0
    t.check(
        target is not None and divmod(oldest, 10) <= (major.value, minor.value),
        f"the PTX's .target sm_{oldest} is no newer than the device ({major.value}.{minor.value}): the JIT can "
        "compile it for this GPU",
    )
    info_log = ctypes.create_string_buffer(LOG_BYTES)
    error_log = ctypes.create_string_buffer(LOG_BYTES)
    options = (c_int * 4)(
        JitOption.INFO_LOG_BUFFER,
        JitOption.INFO_LOG_BUFFER_SIZE_BYTES,
        JitOption.ERROR_LOG_BUFFER,
        JitOption.ERROR_LOG_BUFFER_SIZE_BYTES,
    )
    # Option values are passed *by value*, each squeezed into a void*: the buffer's address, or the
    # size itself cast to a pointer -- not a pointer to the size.
    values = (c_void_p * 4)(ctypes.addressof(info_log), LOG_BYTES, ctypes.addressof(error_log), LOG_BYTES)
    module = c_void_p()
    cu.cuModuleLoadDataEx(byref(module), ptx, len(options), options, values)
    t.say(f"module {module.value:#x}; JIT info log: {info_log.value.decode().strip() or '(empty)'}")

    t.step('cuModuleGetFunction(module, "vector_add") -- the name exists because the kernel is extern "C"')
    kernel = c_void_p()
    cu.cuModuleGetFunction(byref(kernel), module, b"vector_add")
    regs = c_int()
    cu.cuFuncGetAttribute(byref(regs), FunctionAttribute.NUM_REGS, kernel)
    t.term("register")
    t.say(f"function {kernel.value:#x}, {regs.value} registers per thread")
    t.check(
        0 < regs.value <= MAX_REGISTERS_PER_THREAD,
        f"{regs.value} registers per thread, within the {MAX_REGISTERS_PER_THREAD} a thread may have",
    )

    t.step("pack the arguments: an array of void*, each pointing at one argument's *value*")
    # vector_add(float *c, const float *a, const float *b, size_t n): three device addresses (8 bytes)
    # and one size_t. The driver copies the values during cuLaunchKernel; they only have to live till then.
    arg_values = [c_uint64(d_c.value), c_uint64(d_a.value), c_uint64(d_b.value), c_size_t(N)]
    kernel_params = (c_void_p * len(arg_values))(*[ctypes.addressof(v) for v in arg_values])
    t.say("kernelParams = [&c, &a, &b, &n]")

    t.step("cuLaunchKernel: grid x block threads, 0 bytes of dynamic shared memory, on our stream")
    grid = (N + BLOCK - 1) // BLOCK
    cu.cuLaunchKernel(kernel, grid, 1, 1, BLOCK, 1, 1, 0, stream, kernel_params, None)
    t.say(f"grid = ceil({N:,} / {BLOCK}) = {grid:,} blocks; the call returns before the kernel finishes")

    t.step("copy c back on the same stream, then wait for the stream")
    cu.cuMemcpyDtoHAsync(c.ctypes.data, d_c, nbytes, stream)
    cu.cuStreamSynchronize(stream)

    t.step("verify every element against numpy")
    expected = a + b  # float32 + float32 is correctly rounded on both sides: the results must be identical
    t.check(bool(np.array_equal(c, expected)), f"all {N:,} sums equal numpy's a + b exactly")
    t.say(f"c[:3] = {c[:3]}")

    t.step(f"the grid-stride loop: the same launch with ONE block of {BLOCK} threads gives the same result")
    c_one = np.empty(N, dtype=np.float32)
    cu.cuMemsetD32Async(d_c, NAN_BITS, N, stream)  # poison again: the one-block launch must write every element
    cu.cuLaunchKernel(kernel, 1, 1, 1, BLOCK, 1, 1, 0, stream, kernel_params, None)
    cu.cuMemcpyDtoHAsync(c_one.ctypes.data, d_c, nbytes, stream)
    cu.cuStreamSynchronize(stream)
    t.check(bool(np.array_equal(c_one, expected)), f"one block covered all {N:,} elements, each exactly right")
    t.say(
        f"each of the {BLOCK} threads looped over about {N // 4 // BLOCK:,} float4s; a naive kernel launched like\n"
        f"this would have written only the first {BLOCK} elements"
    )

    t.step("clean up in the right order: buffers, module and stream first, the context last")
    for ptr in (d_a, d_b, d_c):
        cu.cuMemFree(ptr)
    cu.cuModuleUnload(module)
    cu.cuStreamDestroy(stream)
    cu.cuCtxDestroy(ctx)
    t.say("destroying the context first would leave every handle above dangling -- the seed's RAII warning")


if __name__ == "__main__":
    run(main, "Tutorial 01: vector add through the raw declaration table")
