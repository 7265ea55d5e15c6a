"""Tutorial 08 -- when not to use the GPU: a measured crossover for vector add, transfers included.

The seed article ends with the cases where CUDA is not worth it (不适用场景): simple array arithmetic
that numpy or a BLAS binding already does well, and work that does not need acceleration at all. This
tutorial measures the simplest such case instead of asserting it: ``c = a + b`` on the CPU with numpy
versus the full GPU round trip -- copy a and b to the device, run ``rawcuda.ops.vector_add``, copy c back.

First the smallest case by hand -- 1,024 floats, libcuda through plain ctypes (argtypes, restype, the
integer CUresult), timed against numpy -- then the sweep with rawcuda's classes, then the same round trip
in cust.

Vector add does one addition per 12 bytes moved. On the GPU it is limited by device memory bandwidth
(terabytes per second), but a round trip first pushes those 12 bytes per element over PCIe or NVLink,
which is often no faster than the host's own memory -- so the copies, not the kernel, decide. The table shows
where (and whether) the round trip beats numpy, with pinned and with pageable host memory, and where the
kernel alone wins when the data already lives on the GPU. A diagram of the path the bytes take, with this
run's measured rates beside each hop, follows, and then the smallest round trip taken apart: the same five
driver calls made bare against rawcuda's path, so the GPU's fixed cost and the binding's share are two numbers.

Run:  python tutorials/08_when_not_to_use_the_gpu.py [--step]
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint, c_uint64, c_void_p
from dataclasses import dataclass

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, PinnedBuffer, Stream, kernels, ops
from rawcuda.checked import cu, raise_for
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.results import Result, c_name

MIN_EXP, MAX_EXP = 10, 26  # sizes 2**10 .. 2**26 floats (4 KiB .. 256 MiB per array)
SIZES = [1 << e for e in range(MIN_EXP, MAX_EXP + 1)]
MAX_N = SIZES[-1]
REPS = 5  # timed runs per size and method; the median is reported (robust to one slow outlier)
F32 = np.dtype(np.float32)
BYTES_MOVED = 3 * F32.itemsize  # per element: a and b in, c out
NAN32 = np.float32(np.nan)  # poison: an output that was not written stays NaN and fails the check
US_PER_S = 1_000_000
BYTES_PER_GB = 1e9
KIB = 1024
RAW_N = SIZES[0]  # floats per array in the by-hand round trip: the table's smallest size, 4 KiB
RAW_REPS = 50  # timed by-hand round trips (median reported)
RAW_BLOCK = 256  # threads per block for the by-hand launch (vector_add has a grid-stride loop: any size works)
NAN_BITS = 0x7FC00000  # a float32 quiet NaN as a 32-bit pattern, to poison the device output


@dataclass
class Row:
    n: int
    numpy_us: float
    pinned_us: float
    pageable_us: float
    kernel_us: float


def median_us(action: Callable[[], None], reset: Callable[[], None], verify: Callable[[], bool]) -> tuple[float, bool]:
    """Median wall-clock microseconds of ``action`` over REPS runs after one warm-up run.

    ``reset`` (poisoning the outputs) runs before each run, outside the clock; ``verify`` checks every
    element after each run. Returns the median and whether every run was verified correct.
    """
    reset()
    action()  # warm-up: first-touch page faults, lazy module loading, clocks ramping up
    correct = verify()
    times = []
    for _ in range(REPS):
        reset()
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
        correct = verify() and correct
    return statistics.median(times) * US_PER_S, correct


@dataclass
class Memory:
    """The largest arrays, allocated once; each size uses views of their first n elements."""

    a: np.ndarray  # pageable inputs and output (plain numpy)
    b: np.ndarray
    c: np.ndarray
    pa: np.ndarray  # numpy views of pinned memory (PinnedBuffer.array)
    pb: np.ndarray
    pc: np.ndarray
    da: DeviceBuffer
    db: DeviceBuffer
    dc: DeviceBuffer


def expect_success(t: Tutorial, code: int, call: str, *, show: bool = True) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here;
    ``show=False`` keeps the calls repeated in a loop quiet unless they fail."""
    if show or code != Result.SUCCESS:
        t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def round_trip_by_hand(t: Tutorial) -> float:
    """The smallest round trip -- two copies in, a launch, a copy out -- with nothing but ctypes: its median, us."""
    t.step(f"raw: {RAW_N:,} floats through libcuda by hand (plain ctypes), timed against numpy")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1"). The copies and cuMemAlloc/cuMemFree bind their _v2 symbols: 64-bit sizes.
    libcuda = ctypes.CDLL(cu.library().path)
    cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    cuInit.argtypes, cuInit.restype = [c_uint], c_int
    cuDeviceGet = libcuda.cuDeviceGet  # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    cuDeviceGet.argtypes, cuDeviceGet.restype = [POINTER(c_int), c_int], c_int
    cuDevicePrimaryCtxRetain = libcuda.cuDevicePrimaryCtxRetain  # (CUcontext *pctx, CUdevice dev)
    cuDevicePrimaryCtxRetain.argtypes, cuDevicePrimaryCtxRetain.restype = [POINTER(c_void_p), c_int], c_int
    cuDevicePrimaryCtxRelease = libcuda.cuDevicePrimaryCtxRelease_v2  # (CUdevice dev)
    cuDevicePrimaryCtxRelease.argtypes, cuDevicePrimaryCtxRelease.restype = [c_int], c_int
    cuCtxSetCurrent = libcuda.cuCtxSetCurrent  # (CUcontext ctx)
    cuCtxSetCurrent.argtypes, cuCtxSetCurrent.restype = [c_void_p], c_int
    cuMemAlloc = libcuda.cuMemAlloc_v2  # (CUdeviceptr *dptr, size_t bytesize); CUdeviceptr: unsigned 64-bit
    cuMemAlloc.argtypes, cuMemAlloc.restype = [POINTER(c_uint64), c_size_t], c_int
    cuMemFree = libcuda.cuMemFree_v2  # (CUdeviceptr dptr)
    cuMemFree.argtypes, cuMemFree.restype = [c_uint64], c_int
    cuMemsetD32 = libcuda.cuMemsetD32_v2  # (CUdeviceptr dstDevice, unsigned int ui, size_t N)
    cuMemsetD32.argtypes, cuMemsetD32.restype = [c_uint64, c_uint, c_size_t], c_int
    cuMemcpyHtoD = libcuda.cuMemcpyHtoD_v2  # (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
    cuMemcpyHtoD.argtypes, cuMemcpyHtoD.restype = [c_uint64, c_void_p, c_size_t], c_int
    cuMemcpyDtoH = libcuda.cuMemcpyDtoH_v2  # (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
    cuMemcpyDtoH.argtypes, cuMemcpyDtoH.restype = [c_void_p, c_uint64, c_size_t], c_int
    cuModuleLoadData = libcuda.cuModuleLoadData  # (CUmodule *module, const void *image)
    cuModuleLoadData.argtypes, cuModuleLoadData.restype = [POINTER(c_void_p), c_void_p], c_int
    cuModuleGetFunction = libcuda.cuModuleGetFunction  # (CUfunction *hfunc, CUmodule hmod, const char *name)
    cuModuleGetFunction.argtypes, cuModuleGetFunction.restype = [POINTER(c_void_p), c_void_p, c_char_p], c_int
    cuModuleUnload = libcuda.cuModuleUnload  # (CUmodule hmod)
    cuModuleUnload.argtypes, cuModuleUnload.restype = [c_void_p], c_int
    cuCtxSynchronize = libcuda.cuCtxSynchronize  # (void)
    cuCtxSynchronize.argtypes, cuCtxSynchronize.restype = [], c_int
    # (CUfunction f, grid x y z, block x y z, unsigned sharedMemBytes, CUstream hStream, void **kernelParams,
    #  void **extra)
    cuLaunchKernel = libcuda.cuLaunchKernel
    cuLaunchKernel.argtypes = [c_void_p, *[c_uint] * 7, c_void_p, POINTER(c_void_p), POINTER(c_void_p)]
    cuLaunchKernel.restype = c_int

    code = cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    dev, ctx = c_int(), c_void_p()
    expect_success(t, cuDeviceGet(byref(dev), 0), "cuDeviceGet(&dev, 0)")
    expect_success(t, cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain(&ctx, dev)")
    expect_success(t, cuCtxSetCurrent(ctx), "cuCtxSetCurrent(ctx)")
    nbytes = RAW_N * F32.itemsize
    d_a, d_b, d_c = c_uint64(), c_uint64(), c_uint64()
    for name, ptr in (("a", d_a), ("b", d_b), ("c", d_c)):
        expect_success(t, cuMemAlloc(byref(ptr), nbytes), f"cuMemAlloc(&d_{name}, {nbytes})")
    image = ctypes.create_string_buffer(kernels.ptx_path("vector_add").read_bytes())  # NUL-terminated PTX
    module, function = c_void_p(), c_void_p()
    expect_success(t, cuModuleLoadData(byref(module), image), "cuModuleLoadData(&module, vector_add.ptx)")
    expect_success(t, cuModuleGetFunction(byref(function), module, b"vector_add"), 'cuModuleGetFunction("vector_add")')
    # vector_add(float *c, const float *a, const float *b, size_t n): kernelParams holds one pointer per
    # argument, each pointing at that argument's value (the driver copies the values during the launch).
    values = (c_uint64(d_c.value), c_uint64(d_a.value), c_uint64(d_b.value), c_size_t(RAW_N))
    params = (c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    grid = (RAW_N + RAW_BLOCK - 1) // RAW_BLOCK

    rng = np.random.default_rng()
    a = rng.standard_normal(RAW_N, dtype=np.float32)
    b = rng.standard_normal(RAW_N, dtype=np.float32)
    c = np.empty(RAW_N, np.float32)  # the GPU's answer
    host_sum = np.empty(RAW_N, np.float32)  # numpy's, into a preallocated array (like the GPU's)
    expected = a + b
    gpu_times, numpy_times = [], []
    all_exact = True
    for _ in range(RAW_REPS + 1):  # the first round trip is a warm-up (the JIT ran at load; clocks ramp up)
        c[...] = NAN32
        code = cuMemsetD32(d_c.value, NAN_BITS, RAW_N)  # the device output is poisoned too ...
        expect_success(t, code, f"cuMemsetD32(d_c, {NAN_BITS:#x}, {RAW_N})", show=False)
        expect_success(t, cuCtxSynchronize(), "cuCtxSynchronize()", show=False)  # ... before the clock starts
        began = time.perf_counter()
        codes = (
            cuMemcpyHtoD(d_a.value, a.ctypes.data, nbytes),
            cuMemcpyHtoD(d_b.value, b.ctypes.data, nbytes),
            cuLaunchKernel(function, grid, 1, 1, RAW_BLOCK, 1, 1, 0, None, params, None),
            cuMemcpyDtoH(c.ctypes.data, d_c.value, nbytes),  # legacy stream: waits for the kernel first
        )
        gpu_times.append(time.perf_counter() - began)
        began = time.perf_counter()
        np.add(a, b, out=host_sum)
        numpy_times.append(time.perf_counter() - began)
        if any(codes):
            t.check(False, f"HtoD, HtoD, launch, DtoH returned {[c_name(code) for code in codes]}")
        all_exact = all_exact and bool(np.array_equal(c, expected) and np.array_equal(host_sum, expected))
    t.check(all_exact, f"every by-hand result equals numpy's a + b exactly ({RAW_REPS + 1} round trips)")
    gpu_us = statistics.median(gpu_times[1:]) * US_PER_S
    numpy_us = statistics.median(numpy_times[1:]) * US_PER_S
    t.say(
        f"median of {RAW_REPS}: GPU round trip {gpu_us:.1f} us (cuMemcpyHtoD x2, cuLaunchKernel, cuMemcpyDtoH),\n"
        f"numpy np.add {numpy_us:.2f} us -- "
        + (
            f"the GPU took {gpu_us / numpy_us:.0f}x as long for {RAW_N:,} floats"
            if gpu_us >= numpy_us
            else f"the GPU was {numpy_us / gpu_us:.1f}x faster for {RAW_N:,} floats"
        )
    )
    for name, ptr in (("a", d_a), ("b", d_b), ("c", d_c)):
        expect_success(t, cuMemFree(ptr.value), f"cuMemFree(d_{name})")
    expect_success(t, cuModuleUnload(module), "cuModuleUnload(module)")
    expect_success(t, cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease(dev)")
    return gpu_us


def measure(n: int, m: Memory, stream: Stream) -> tuple[Row, bool]:
    """Time numpy, both GPU round trips and the resident kernel at size ``n``; True if every GPU run was exact."""
    ha, hb, hc = m.a[:n], m.b[:n], m.c[:n]
    hpa, hpb, hpc = m.pa[:n], m.pb[:n], m.pc[:n]  # views of pinned memory are pinned too
    va, vb, vc = m.da[:n], m.db[:n], m.dc[:n]  # device views: no allocation while measuring
    expected = ha + hb  # float32 + float32 is correctly rounded on both sides: results must be identical

    def cpu() -> None:
        np.add(ha, hb, out=hc)

    def round_trip(src_a: np.ndarray, src_b: np.ndarray, dst: np.ndarray) -> None:
        va.copy_from(src_a, stream=stream)
        vb.copy_from(src_b, stream=stream)
        ops.vector_add(vc, va, vb, stream=stream)
        vc.copy_to(dst, stream=stream)
        stream.synchronize()

    def kernel_only() -> None:
        ops.vector_add(vc, va, vb, stream=stream)
        stream.synchronize()

    def poison(host: np.ndarray | None) -> Callable[[], None]:
        def reset() -> None:
            if host is not None:
                host[...] = NAN32
            vc.fill(NAN32)

        return reset

    def exact(host: np.ndarray | None) -> Callable[[], bool]:
        return lambda: bool(np.array_equal(vc.to_array() if host is None else host, expected))

    numpy_us, _ = median_us(cpu, lambda: None, lambda: True)
    pinned_us, ok_pinned = median_us(lambda: round_trip(hpa, hpb, hpc), poison(hpc), exact(hpc))
    pageable_us, ok_pageable = median_us(lambda: round_trip(ha, hb, hc), poison(hc), exact(hc))
    va.copy_from(hpa)  # make the inputs resident; now only the kernel (launch + wait) is timed
    vb.copy_from(hpb)
    kernel_us, ok_kernel = median_us(kernel_only, poison(None), exact(None))
    for view in (va, vb, vc):
        view.close()  # a view's close() only marks it; the memory belongs to the full buffer
    return Row(n, numpy_us, pinned_us, pageable_us, kernel_us), ok_pinned and ok_pageable and ok_kernel


def crossover(rows: list[Row], gpu: Callable[[Row], float]) -> int | None:
    """The smallest size from which the GPU is faster than numpy at that size *and every larger one*."""
    found = None
    for row in reversed(rows):
        if gpu(row) >= row.numpy_us:
            break
        found = row.n
    return found


def size_text(n: int) -> str:
    nbytes = n * F32.itemsize
    return f"{nbytes // KIB:,} KiB" if nbytes < KIB * KIB else f"{nbytes // (KIB * KIB):,} MiB"


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "kernel",
        "grid",
        "SM",
        "register",
        "shared memory",
        "pageable memory",
        "pinned memory",
        "copy engine",
        "context",
        "stream",
        "PTX",
    )
    by_hand_us = round_trip_by_hand(t)
    t.step("rawcuda: the contenders, and the memory they use")
    dev = rawcuda.Device(0)
    stream = Stream()
    rng = np.random.default_rng()
    a = rng.standard_normal(MAX_N, dtype=np.float32)
    b = rng.standard_normal(MAX_N, dtype=np.float32)
    c = np.empty(MAX_N, np.float32)  # numpy's output and the pageable GPU output, preallocated like the rest
    pa, pb, pc = PinnedBuffer.from_array(a), PinnedBuffer.from_array(b), PinnedBuffer(MAX_N, np.float32)
    da, db, dc = (DeviceBuffer.empty(MAX_N, np.float32) for _ in range(3))
    t.say(
        f"GPU: {dev.name}. CPU: numpy {np.__version__}, np.add(a, b, out=c) -- `a + b` into a preallocated\n"
        "array, so neither side pays for allocating its output inside the clock.\n"
        "GPU round trip: a, b host -> device, ops.vector_add, c device -> host, one stream, then wait.\n"
        f"Each time is the median of {REPS} runs after a warm-up, wall clock (time.perf_counter) around the\n"
        "whole round trip, as a caller would experience it."
    )
    with (
        DeviceBuffer.from_array(a[:KIB]) as wa,
        DeviceBuffer.from_array(b[:KIB]) as wb,
        DeviceBuffer.empty(KIB, np.float32) as wc,
    ):
        ops.vector_add(wc, wa, wb)  # warm-up: loads the kernel's module (PTX JIT) before anything is timed
        t.check(bool(np.array_equal(wc.to_array(), a[:KIB] + b[:KIB])), "warm-up result is exact")

    t.step(f"measure every size from 2^{MIN_EXP} to 2^{MAX_EXP} floats, checking every GPU result")
    memory = Memory(a, b, c, pa.array, pb.array, pc.array, da, db, dc)
    rows: list[Row] = []
    all_correct = True
    for n in SIZES:
        row, correct = measure(n, memory, stream)
        if not correct:
            t.say(f"WRONG RESULT at n = {n:,}")
        all_correct = all_correct and correct
        rows.append(row)
    t.check(
        all_correct,
        f"every GPU result at every size ({len(SIZES)} sizes x 3 methods x {REPS + 1} runs) "
        "equals numpy's a + b exactly",
    )

    t.step("the table (microseconds, median)")
    header = (
        f"{'n':>10} {'per array':>10} {'numpy':>10} {'GPU pinned':>11} {'GPU pageable':>13} "
        f"{'kernel only':>12}  fastest with transfers"
    )
    lines = [header]
    for r in rows:
        contenders = {"numpy": r.numpy_us, "GPU pinned": r.pinned_us, "GPU pageable": r.pageable_us}
        fastest = min(contenders, key=lambda k: contenders[k])
        lines.append(
            f"{r.n:>10,} {size_text(r.n):>10} {r.numpy_us:>10.1f} {r.pinned_us:>11.1f} "
            f"{r.pageable_us:>13.1f} {r.kernel_us:>12.1f}  {fastest}"
        )
    t.say("\n".join(lines))
    big = rows[-1]
    rate = {
        name: big.n * BYTES_MOVED / (us / US_PER_S) / BYTES_PER_GB
        for name, us in (
            ("numpy", big.numpy_us),
            ("pinned", big.pinned_us),
            ("pageable", big.pageable_us),
            ("kernel", big.kernel_us),
        )
    }
    t.say(
        f"at n = {big.n:,}, bytes of a, b and c per second: numpy {rate['numpy']:.1f} GB/s, GPU round trip\n"
        f"{rate['pinned']:.1f} GB/s pinned / {rate['pageable']:.1f} GB/s pageable (the bus), kernel alone "
        f"{rate['kernel']:.0f} GB/s"
    )

    memory_path(t, rate, dev)
    ours_us, driver_us = split_fixed_cost(t, memory, stream)

    t.step("the verdict")
    pinned_from = crossover(rows, lambda r: r.pinned_us)
    pageable_from = crossover(rows, lambda r: r.pageable_us)
    kernel_from = crossover(rows, lambda r: r.kernel_us)
    for label, start in (
        ("GPU round trip, pinned host memory", pinned_from),
        ("GPU round trip, pageable host memory", pageable_from),
    ):
        if start is None:
            t.say(f"{label}: never beats numpy up to {MAX_N:,} floats")
        else:
            t.say(f"{label}: beats numpy from n = {start:,} ({size_text(start)} per array) on")
    if kernel_from is None:
        t.say("kernel alone, data already on the GPU: never beats numpy here")
    else:
        t.say(
            f"kernel alone, data already on the GPU: beats numpy from n = {kernel_from:,} "
            f"({size_text(kernel_from)} per array) on"
        )
    t.check(
        big.kernel_us < big.numpy_us,
        f"with the data resident, the kernel beats numpy at n = {big.n:,} ({big.kernel_us:.0f} us vs "
        f"{big.numpy_us:.0f} us)",
    )
    small = rows[0]  # n = RAW_N: the size step 1 moved by hand
    t.say(
        f"small arrays: a round trip has a fixed cost -- three copies, a launch and a synchronization. The\n"
        f"five bare driver calls took {driver_us:.1f} us (step 1's synchronous calls from pageable memory: "
        f"{by_hand_us:.1f} us),\nrawcuda's path {ours_us:.1f} us, numpy {small.numpy_us:.1f} us. Even the bare "
        "calls lose to numpy here: the GPU's fixed\ncost alone decides small arrays, whatever the binding. "
        f"Large arrays: the same {BYTES_MOVED} bytes per element\nthat numpy streams through host memory must "
        "cross the bus (PCIe or NVLink) instead."
    )
    t.check(
        driver_us > small.numpy_us,
        f"at {RAW_N:,} floats, numpy beats even the bare driver calls ({small.numpy_us:.1f} us vs {driver_us:.1f} us)",
    )
    if pinned_from is None:
        t.say(
            f"here the bus ({rate['pinned']:.1f} GB/s) never catches up with numpy ({rate['numpy']:.1f} GB/s): "
            "for one cheap\noperation the copies cost more than the whole job on the CPU."
        )
    else:
        which = "only from pinned memory" if pageable_from is None else "even from pageable memory"
        t.say(
            f"here the bus ({rate['pinned']:.1f} GB/s pinned) does beat single-threaded numpy "
            f"({rate['numpy']:.1f} GB/s) for large\narrays, {which} -- yet the kernel "
            f"({rate['kernel']:.0f} GB/s alone) is a small part of the round trip:\nalmost all of the time "
            "is spent moving data."
        )
    t.say(
        "so: move data to the GPU when it will *stay* there for many operations, or when the work per byte\n"
        "is high (a matmul, not an add). For a one-off cheap operation, an array that fits in cache, or code\n"
        "numpy already vectorizes, the GPU's extra complexity -- drivers, contexts, copies, deployment --\n"
        "buys little or nothing (the seed's 不适用场景)."
    )
    for buf in (da, db, dc, pa, pb, pc, stream):
        buf.close()
    the_cust_way(t)


def split_fixed_cost(t: Tutorial, m: Memory, stream: Stream) -> tuple[float, float]:
    """The smallest pinned round trip, through rawcuda and as the same five driver calls made bare, taking
    turns: (rawcuda's median, the bare calls' median), microseconds. The difference is rawcuda's own share."""
    t.step(f"where the small round trip's time goes: the driver's five calls, and rawcuda's path ({RAW_N:,} floats)")
    n, nbytes = RAW_N, RAW_N * F32.itemsize
    expected = m.a[:n] + m.b[:n]
    va, vb, vc = m.da[:n], m.db[:n], m.dc[:n]
    handle = cu.library().handle  # fresh function pointers: no argtypes, no errcheck, nothing of rawcuda's
    htod, dtoh = handle["cuMemcpyHtoDAsync_v2"], handle["cuMemcpyDtoHAsync_v2"]
    launch, wait = handle["cuLaunchKernel"], handle["cuStreamSynchronize"]
    # Without argtypes every argument must already be its C type: a bare Python int would go as a C int.
    s, size = c_void_p(stream.handle), c_size_t(nbytes)
    d_a, d_b, d_c = (c_uint64(v.ptr) for v in (va, vb, vc))
    h_a, h_b, h_c = (c_void_p(x.ctypes.data) for x in (m.pa, m.pb, m.pc))
    f = c_void_p(ops.kernel("vector_add", "vector_add", stream.context).handle)
    values = [d_c, d_a, d_b, c_size_t(n)]  # vector_add(c, a, b, n)
    params = (c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    grid, block, one, zero = c_uint((n + RAW_BLOCK - 1) // RAW_BLOCK), c_uint(RAW_BLOCK), c_uint(1), c_uint(0)

    def bare() -> int:
        return (
            htod(d_a, h_a, size, s)
            or htod(d_b, h_b, size, s)
            or launch(f, grid, one, one, block, one, one, zero, s, params, None)
            or dtoh(h_c, d_c, size, s)
            or wait(s)
        )

    def through_rawcuda() -> int:
        va.copy_from(m.pa[:n], stream=stream)
        vb.copy_from(m.pb[:n], stream=stream)
        ops.vector_add(vc, va, vb, stream=stream)
        vc.copy_to(m.pc[:n], stream=stream)
        stream.synchronize()
        return Result.SUCCESS

    times: dict[str, list[float]] = {"bare": [], "rawcuda": []}
    exact = True
    for turn in range(RAW_REPS + 1):  # the first turn of each is a warm-up
        for name, path in (("bare", bare), ("rawcuda", through_rawcuda)):
            m.pc[:n] = NAN32
            began = time.perf_counter()
            code = path()
            elapsed = time.perf_counter() - began
            expect_success(t, code, f"{name} round trip", show=False)
            exact = exact and bool(np.array_equal(m.pc[:n], expected))
            if turn:
                times[name].append(elapsed * US_PER_S)
    t.check(exact, f"both paths, taking turns {RAW_REPS + 1} times each: every result equals numpy's a + b exactly")
    for view in (va, vb, vc):
        view.close()
    ours, theirs = (statistics.median(times[name]) for name in ("rawcuda", "bare"))
    t.say(
        f"the same pinned buffers and stream, the median of {RAW_REPS} turns each:\n"
        f"  five bare driver calls (2 x cuMemcpyHtoDAsync, cuLaunchKernel, cuMemcpyDtoHAsync, cuStreamSynchronize):"
        f" {theirs:.1f} us\n"
        f"  the same through rawcuda (copy_from x2, ops.vector_add, copy_to, synchronize): {ours:.1f} us\n"
        f"so the GPU and the driver take {theirs:.1f} us of it, and rawcuda's path adds {ours - theirs:.1f} us: all "
        "it does around the\nsame five calls (checking each argument, recording the pending work on each buffer, "
        "holding each\nhost array until its copy is done). This run does not split that share further."
    )
    return ours, theirs


def memory_path(t: Tutorial, rate: dict[str, float], dev: rawcuda.Device) -> None:
    """Where the bytes go, hop by hop: this run's rates, and the sizes the driver reports for this GPU."""
    t.step("the path the bytes take, with what this run measured at each hop")
    l2 = dev.attribute(DeviceAttribute.L2_CACHE_SIZE)
    shared = dev.attribute(DeviceAttribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    registers = dev.attribute(DeviceAttribute.MAX_REGISTERS_PER_MULTIPROCESSOR)
    sms = dev.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT)
    column = 46  # where the measured rates start
    t.term("L2")
    t.say(
        "\n".join(
            [
                "host memory, pageable (numpy arrays)".ljust(column) + f"np.add on it: {rate['numpy']:.1f} GB/s",
                "   |  the driver stages pageable copies through pinned buffers of its own",
                "   |".ljust(column) + f"whole round trip from pageable arrays: {rate['pageable']:.1f} GB/s",
                "   v",
                "host memory, pinned (PinnedBuffer)",
                "   |  the bus (PCIe; NVLink-C2C on Grace Hopper): copy engines read pinned pages by DMA",
                "   |".ljust(column) + f"whole round trip from pinned arrays: {rate['pinned']:.1f} GB/s",
                "   v",
                f"device memory, {dev.total_memory / 2**30:.0f} GiB".ljust(column)
                + f"the kernel alone, data resident: {rate['kernel']:.0f} GB/s",
                "   |",
                "   v",
                f"L2 cache, {l2 / 2**20:.0f} MiB, shared by all {sms} SMs",
                "   |",
                "   v",
                f"each SM: up to {shared // KIB} KiB of shared memory and {registers:,} 32-bit registers",
            ]
        )
    )
    t.say(
        "each GB/s counts the 12 bytes per element of a, b and c over the whole time (a round trip includes\n"
        "the launch and the kernel); the sizes are the driver's device attributes. Vector add reads each byte\n"
        "once, so L2, shared memory and registers cannot help it: only work that reuses data gains from them."
    )


def the_cust_way(t: Tutorial) -> None:
    t.step("cust: the same round trip, timed the same way (shown, not run)")
    t.say(
        "use cust::prelude::*;                         // DeviceBuffer, CopyDestination, launch!, ...\n"
        "let _ctx = cust::quick_init()?;\n"
        'let module = Module::from_ptx(PTX, &[])?;     // PTX = include_str!(... "/vector_add.ptx")\n'
        "let stream = Stream::new(StreamFlags::DEFAULT, None)?;\n"
        "let mut a_gpu = unsafe { DeviceBuffer::<f32>::uninitialized(n)? };  // allocated outside the clock\n"
        "let mut b_gpu = unsafe { DeviceBuffer::<f32>::uninitialized(n)? };\n"
        "let c_gpu = unsafe { DeviceBuffer::<f32>::uninitialized(n)? };\n"
        "let began = std::time::Instant::now();\n"
        "a_gpu.copy_from(&a)?;                         // cuMemcpyHtoD: synchronous, from pageable memory\n"
        "b_gpu.copy_from(&b)?;\n"
        "unsafe {\n"
        "    launch!(module.vector_add<<<grid, 256, 0, stream>>>(\n"
        "        c_gpu.as_device_ptr(), a_gpu.as_device_ptr(), b_gpu.as_device_ptr(), n))?;\n"
        "}\n"
        "stream.synchronize()?;\n"
        "c_gpu.copy_to(&mut c)?;                       // cuMemcpyDtoH\n"
        "let round_trip = began.elapsed();"
    )
    t.say(
        "The seed's DeviceBuffer::from_slice(&a) allocates *and* copies (memory/device/device_buffer.rs), so\n"
        "timing it adds cuMemAlloc to the round trip; copy_from (trait CopyDestination) into a buffer\n"
        "allocated once is the copy alone. For pinned memory cust has LockedBuffer (cuMemAllocHost) and the\n"
        "unsafe AsyncCopyDestination::async_copy_from (cuMemcpyHtoDAsync). None of this moves the crossover:\n"
        "for large arrays the bus, not the binding, sets the cost (for small ones, steps 1 and 6 compare a\n"
        "bare path with a binding's)."
    )


if __name__ == "__main__":
    run(main, "Tutorial 08: when not to use the GPU -- a measured crossover for vector add")
