"""Tutorial 11a -- unified (managed) memory: one pointer for the host and the GPU, and who moves the pages.

The seed article says cust switches unified memory on "with SCHED_AUTO in ContextFlags". It does not:
SCHED_AUTO (0x00) only decides how the host thread waits for the GPU. Unified memory is a different
*allocation*, ``cuMemAllocManaged``: one address that the host reads and writes like any memory and that
kernels take like device memory, while the driver migrates its pages to whichever processor touches them.
``cuMemPrefetchAsync`` moves them ahead of time; ``cuMemAdvise`` tells the driver how they will be used.

Three ways, in order:

1. by hand: plain ctypes (argtypes, restype, the integer CUresult) -- allocate, write from numpy, prefetch
   to the GPU (in CUDA 13 that is ``cuMemPrefetchAsync_v2``, which takes a ``CUmemLocation`` *by value*),
   ask the driver where the pages went, copy on the GPU, read back on the host;
2. rawcuda's ``ManagedBuffer``: ``.array``, ``prefetch()``, ``advise()``, and a kernel on it;
3. cust's ``UnifiedBuffer`` and its ``MemoryAdvise`` trait.

What it costs, measured the same way as explicit device memory, is tutorial 11b.

Run:  python tutorials/11a_unified_memory.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, byref, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p
from types import SimpleNamespace

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, ManagedBuffer, ops
from rawcuda.checked import cu, raise_for
from rawcuda.core.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute, PointerAttribute
from rawcuda.ffi.constants import CtxFlag, MemAdvise, MemAttachFlag, MemLocationType
from rawcuda.ffi.results import Result, c_name

N = 1 << 22  # floats per array: 16 MiB
F32_BYTES = 4
NAN32 = np.float32(np.nan)
DEVICE_ORDINAL = 0
# CUmem_range_attribute (cuda.h): what cuMemRangeGetAttribute can be asked about a managed range
RANGE_READ_MOSTLY = 1  # CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: a 32-bit int, 1 if SET_READ_MOSTLY is in force
RANGE_LAST_PREFETCH_TYPE = 7  # CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: a CUmemLocationType
RANGE_LAST_PREFETCH_ID = 8  # CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: the device ordinal (or NUMA id)
INT_BYTES = 4  # the dataSize those three attributes require


class MemLocation(Structure):
    """``typedef struct CUmemLocation_st { CUmemLocationType type; int id; } CUmemLocation;`` -- 8 bytes,
    passed by value (rawcuda.ffi.types.CUmemLocation is the same struct, proven against cuda.h)."""

    _fields_ = [("type", c_int), ("id", c_int)]


def expect_success(t: Tutorial, code: int, call: str, *, show: bool = True) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here;
    ``show=False`` keeps repeated small queries quiet unless they fail."""
    if show or code != Result.SUCCESS:
        t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def declare(libcuda: ctypes.CDLL) -> SimpleNamespace:
    """The driver functions the by-hand part calls, each with the argtypes and restype of its prototype."""
    d = SimpleNamespace()
    d.cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    d.cuInit.argtypes, d.cuInit.restype = [c_uint], c_int
    d.cuDeviceGet = libcuda.cuDeviceGet  # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    d.cuDeviceGet.argtypes, d.cuDeviceGet.restype = [POINTER(c_int), c_int], c_int
    # CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
    d.cuDeviceGetAttribute = libcuda.cuDeviceGetAttribute
    d.cuDeviceGetAttribute.argtypes, d.cuDeviceGetAttribute.restype = [POINTER(c_int), c_int, c_int], c_int
    d.cuDevicePrimaryCtxRetain = libcuda.cuDevicePrimaryCtxRetain  # (CUcontext *pctx, CUdevice dev)
    d.cuDevicePrimaryCtxRetain.argtypes, d.cuDevicePrimaryCtxRetain.restype = [POINTER(c_void_p), c_int], c_int
    d.cuDevicePrimaryCtxRelease = libcuda.cuDevicePrimaryCtxRelease_v2  # (CUdevice dev)
    d.cuDevicePrimaryCtxRelease.argtypes, d.cuDevicePrimaryCtxRelease.restype = [c_int], c_int
    d.cuCtxSetCurrent = libcuda.cuCtxSetCurrent  # (CUcontext ctx)
    d.cuCtxSetCurrent.argtypes, d.cuCtxSetCurrent.restype = [c_void_p], c_int
    d.cuCtxSynchronize = libcuda.cuCtxSynchronize  # (void)
    d.cuCtxSynchronize.argtypes, d.cuCtxSynchronize.restype = [], c_int
    # CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags); CUdeviceptr: 64-bit
    d.cuMemAllocManaged = libcuda.cuMemAllocManaged
    d.cuMemAllocManaged.argtypes, d.cuMemAllocManaged.restype = [POINTER(c_uint64), c_size_t, c_uint], c_int
    d.cuMemFree = libcuda.cuMemFree_v2  # (CUdeviceptr dptr)
    d.cuMemFree.argtypes, d.cuMemFree.restype = [c_uint64], c_int
    # CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
    d.cuPointerGetAttribute = libcuda.cuPointerGetAttribute
    d.cuPointerGetAttribute.argtypes, d.cuPointerGetAttribute.restype = [c_void_p, c_int, c_uint64], c_int
    # cuda.h 13: #define cuMemPrefetchAsync cuMemPrefetchAsync_v2, declared as
    # CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
    #                             CUstream hStream)   -- the location is a struct passed *by value*
    d.cuMemPrefetchAsync = libcuda.cuMemPrefetchAsync_v2
    d.cuMemPrefetchAsync.argtypes = [c_uint64, c_size_t, MemLocation, c_uint, c_void_p]
    d.cuMemPrefetchAsync.restype = c_int
    # CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
    #                                 CUdeviceptr devPtr, size_t count)
    d.cuMemRangeGetAttribute = libcuda.cuMemRangeGetAttribute
    d.cuMemRangeGetAttribute.argtypes = [c_void_p, c_size_t, c_int, c_uint64, c_size_t]
    d.cuMemRangeGetAttribute.restype = c_int
    # CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
    d.cuMemcpyDtoD = libcuda.cuMemcpyDtoD_v2
    d.cuMemcpyDtoD.argtypes, d.cuMemcpyDtoD.restype = [c_uint64, c_uint64, c_size_t], c_int
    return d


def range_int(t: Tutorial, d: SimpleNamespace, attribute: int, ptr: int, nbytes: int) -> int:
    """One 32-bit answer of cuMemRangeGetAttribute about [ptr, ptr + nbytes)."""
    value = c_int()
    code = d.cuMemRangeGetAttribute(byref(value), INT_BYTES, attribute, ptr, nbytes)
    expect_success(t, code, f"cuMemRangeGetAttribute(&value, 4, {attribute}, {ptr:#x}, {nbytes})", show=False)
    return value.value


def where(t: Tutorial, d: SimpleNamespace, ptr: int, nbytes: int) -> str:
    """Where the range's last prefetch was asked to go, as the driver records it (not whether it finished)."""
    kind = MemLocationType(range_int(t, d, RANGE_LAST_PREFETCH_TYPE, ptr, nbytes))
    if kind == MemLocationType.DEVICE:
        return f"DEVICE {range_int(t, d, RANGE_LAST_PREFETCH_ID, ptr, nbytes)}"
    return kind.name


def host_view(ptr: int, n: int) -> np.ndarray:
    """A numpy array over n float32 at a host-accessible address (no copy; it must not outlive the memory)."""
    return np.ctypeslib.as_array((c_float * n).from_address(ptr))


def by_hand(t: Tutorial) -> SimpleNamespace:
    t.step("raw: declare the driver functions by hand; does this GPU do managed memory?")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1").
    libcuda = ctypes.CDLL(cu.library().path)
    d = declare(libcuda)
    code = d.cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    dev, ctx = c_int(), c_void_p()
    expect_success(t, d.cuDeviceGet(byref(dev), DEVICE_ORDINAL), f"cuDeviceGet(&dev, {DEVICE_ORDINAL})")
    answers = {}
    for attr in (DeviceAttribute.MANAGED_MEMORY, DeviceAttribute.CONCURRENT_MANAGED_ACCESS):
        value = c_int()
        expect_success(t, d.cuDeviceGetAttribute(byref(value), attr, dev), f"cuDeviceGetAttribute({attr.name})")
        answers[attr] = value.value
    t.say(", ".join(f"{attr.name} = {value}" for attr, value in answers.items()))
    t.check(answers[DeviceAttribute.MANAGED_MEMORY] == 1, "the device supports managed memory")
    expect_success(t, d.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain(&ctx, dev)")
    expect_success(t, d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent(ctx)")
    t.say(
        f"the plain symbol cuMemPrefetchAsync is exported too: {hasattr(libcuda, 'cuMemPrefetchAsync')} -- it is\n"
        "the CUDA 12 ABI, (devPtr, count, CUdevice dstDevice, hStream), kept for old binaries; CUDA 13's\n"
        "cuda.h maps the name to cuMemPrefetchAsync_v2, (devPtr, count, CUmemLocation, flags, hStream)"
    )

    t.step("raw: cuMemAllocManaged twice, then numpy writes one of them -- no copy anywhere")
    nbytes = N * F32_BYTES
    x, y = c_uint64(), c_uint64()
    for name, ptr in (("x", x), ("y", y)):
        code = d.cuMemAllocManaged(byref(ptr), nbytes, MemAttachFlag.GLOBAL)
        expect_success(t, code, f"cuMemAllocManaged(&{name}, {nbytes}, CU_MEM_ATTACH_GLOBAL)")
    xs, ys = host_view(x.value, N), host_view(y.value, N)
    rng = np.random.default_rng()
    data = rng.standard_normal(N, dtype=np.float32)
    xs[:] = data  # the host writes straight into the managed pages
    ys[:] = NAN32  # poison: y must be written by the GPU below
    managed = c_uint()
    code = d.cuPointerGetAttribute(byref(managed), PointerAttribute.IS_MANAGED, x.value)
    expect_success(t, code, f"cuPointerGetAttribute(&v, IS_MANAGED, {x.value:#x})")
    t.say(
        f"x = {x.value:#x}; the numpy view's data pointer is {xs.ctypes.data:#x}; IS_MANAGED = {managed.value}\n"
        "the same number is a host address (numpy reads and writes through it) and a device address"
    )
    t.check(xs.ctypes.data == x.value and managed.value == 1, "one address for both, and the driver calls it managed")

    t.step("raw: prefetch both to the GPU -- the CUmemLocation goes by value -- and ask where they are")
    to_gpu = MemLocation(MemLocationType.DEVICE, DEVICE_ORDINAL)
    for name, ptr in (("x", x), ("y", y)):
        code = d.cuMemPrefetchAsync(ptr.value, nbytes, to_gpu, 0, None)
        expect_success(t, code, f"cuMemPrefetchAsync({name}, {nbytes}, {{DEVICE, {DEVICE_ORDINAL}}}, 0, NULL)")
    expect_success(t, d.cuCtxSynchronize(), "cuCtxSynchronize()")
    placed = where(t, d, x.value, nbytes)
    t.say(
        f"cuMemRangeGetAttribute(LAST_PREFETCH_LOCATION_TYPE, then _ID) for x: {placed}. That is where the last\n"
        "prefetch was *asked* to go; that it has finished is what cuCtxSynchronize above says."
    )
    t.check(placed == f"DEVICE {DEVICE_ORDINAL}", f"the driver recorded x's last prefetch: device {DEVICE_ORDINAL}")

    t.step("raw: a copy on the GPU (cuMemcpyDtoD takes managed pointers), read back on the host")
    expect_success(t, d.cuMemcpyDtoD(y.value, x.value, nbytes), f"cuMemcpyDtoD(y, x, {nbytes})")
    expect_success(t, d.cuCtxSynchronize(), "cuCtxSynchronize()  -- before the host touches y")
    t.check(bool(np.array_equal(ys, data)), f"all {N:,} floats arrived in y, read through its numpy view")
    host = MemLocation(MemLocationType.HOST, 0)
    expect_success(t, d.cuMemPrefetchAsync(y.value, nbytes, host, 0, None), "cuMemPrefetchAsync(y, .., {HOST}, ..)")
    expect_success(t, d.cuCtxSynchronize(), "cuCtxSynchronize()")
    t.say(f"y was last prefetched to: {where(t, d, y.value, nbytes)}")
    del xs, ys  # the views must die before the memory does: a read after cuMemFree is a segfault
    for name, ptr in (("x", x), ("y", y)):
        expect_success(t, d.cuMemFree(ptr.value), f"cuMemFree({name})")
    expect_success(t, d.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease(dev)")
    return d


def with_rawcuda(t: Tutorial, d: SimpleNamespace) -> None:
    dev = Device(DEVICE_ORDINAL)
    ctx = default_context()
    t.step("rawcuda: ManagedBuffer -- .array for the host, the buffer itself for kernels")
    t.say(
        f"the context's flags: {ctx.flags.name or 'SCHED_AUTO'} ({int(ctx.flags):#x}); SCHED_AUTO is "
        f"{int(CtxFlag.SCHED_AUTO):#x} and picks how the host waits.\nNo context flag turns unified memory on; the "
        "allocation call does."
    )
    rng = np.random.default_rng()
    a, b, c = ManagedBuffer(N), ManagedBuffer(N), ManagedBuffer(N)
    a.array[:] = rng.standard_normal(N, dtype=np.float32)  # numpy writes into the managed pages
    b.array[:] = rng.standard_normal(N, dtype=np.float32)
    c.array[:] = NAN32  # poison: a kernel that writes nothing cannot pass
    expected = a.array + b.array
    for buf in (a, b, c):
        buf.prefetch(dev)  # cuMemPrefetchAsync_v2 on the legacy stream
    ops.vector_add(c, a, b)  # a kernel on managed memory, no copies
    ctx.synchronize()
    t.say(f"a.ptr = {a.ptr:#x}; a.array's data pointer = {a.array.ctypes.data:#x}")
    t.check(a.ptr == a.array.ctypes.data, "the kernel's pointer and numpy's are one address")
    t.check(bool(np.array_equal(c.array, expected)), f"all {N:,} sums are right, read through c.array (no copy)")

    t.step("rawcuda: advice -- SET_READ_MOSTLY, read back by hand with cuMemRangeGetAttribute")
    before = range_int(t, d, RANGE_READ_MOSTLY, a.ptr, a.nbytes)
    a.advise(MemAdvise.SET_READ_MOSTLY, dev)  # cuMemAdvise_v2(ptr, bytes, SET_READ_MOSTLY, {DEVICE, 0})
    after = range_int(t, d, RANGE_READ_MOSTLY, a.ptr, a.nbytes)
    t.say(f"READ_MOSTLY of a: {before} before a.advise(SET_READ_MOSTLY, dev), {after} after")
    t.check(before == 0 and after == 1, "the advice is recorded on the range")
    ops.vector_add(c, a, b)
    ctx.synchronize()
    t.check(bool(np.array_equal(c.array, expected)), "advice changes where pages live, never the results")
    t.say(
        "read-mostly lets a page have read-only copies on several processors at once: the host can read a\n"
        "while the GPU keeps its copy (a write anywhere drops the other copies). Tutorial 11b times it."
    )
    a.advise(MemAdvise.UNSET_READ_MOSTLY, dev)

    t.step("rawcuda: host access while kernels run -- CONCURRENT_MANAGED_ACCESS")
    t.say(
        f"this device: concurrent_access = {c.concurrent_access}.\n"
        "With it (Linux, Pascal and later) the host may touch managed memory at any time. Without it\n"
        "(Windows, WSL, older GPUs) a host access while any kernel runs kills the process with a\n"
        "segmentation fault; rawcuda's .array then synchronizes the context before handing out the view."
    )
    t.check(
        c.concurrent_access == bool(dev.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS)),
        "ManagedBuffer.concurrent_access reads the device attribute",
    )
    for buf in (a, b, c):
        buf.close()


def the_cust_way(t: Tutorial) -> None:
    t.step("cust: UnifiedBuffer and the MemoryAdvise trait (shown, not run)")
    t.say(
        "use cust::prelude::*;\n"
        "use cust::memory::MemoryAdvise;              // the trait with prefetch and advice\n"
        "let _ctx = cust::quick_init()?;\n"
        "let device = Device::get_device(0)?;\n"
        "let stream = Stream::new(StreamFlags::DEFAULT, None)?;\n"
        "let mut a = UnifiedBuffer::from_slice(&host_a)?; // cuMemAllocManaged(GLOBAL), filled by the host\n"
        "let mut b = UnifiedBuffer::from_slice(&host_b)?; // (mut: as_unified_ptr takes &mut self)\n"
        "let mut c = UnifiedBuffer::new(&f32::NAN, n)?;\n"
        "a.prefetch_to_device(&stream, &device)?;     // cuMemPrefetchAsync\n"
        "b.advise_read_mostly(true)?;                 // cuMemAdvise(SET_READ_MOSTLY)\n"
        "unsafe {\n"
        "    launch!(module.vector_add<<<grid, 256, 0, stream>>>(\n"
        "        c.as_unified_ptr(), a.as_unified_ptr(), b.as_unified_ptr(), n))?;\n"
        "}\n"
        "stream.synchronize()?;\n"
        "assert_eq!(c[0], host_a[0] + host_b[0]);    // Deref to [T]: the host reads it in place"
    )
    t.say(
        "Checked in cust's source (memory/unified.rs, memory/malloc.rs, context/mod.rs; Rust-CUDA at commit\n"
        "ac2674f, 2025-08-23): ContextFlags::SCHED_AUTO is 0x00 and has nothing to do with memory; UnifiedBuffer\n"
        "allocates with cuMemAllocManaged(.., CU_MEM_ATTACH_GLOBAL). prefetch_to_device calls\n"
        "cuMemPrefetchAsync(ptr, bytes, device.as_raw(), stream) and prefetch_to_host passes -1 (CU_DEVICE_CPU);\n"
        "advise_read_mostly and preferred_location call cuMemAdvise(ptr, bytes, advice, device). Those are the\n"
        "CUDA 12 signatures. cust_raw generates its bindings from the cuda.h it builds against, and CUDA 13's\n"
        "maps both names to _v2 functions that take a CUmemLocation (and, for the prefetch, flags) -- as\n"
        "declared by hand above; cust's calls, as written, fit the CUDA 12 headers."
    )


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel", "grid", "unified memory", "context", "stream")
    d = by_hand(t)
    with_rawcuda(t, d)
    the_cust_way(t)


if __name__ == "__main__":
    run(main, "Tutorial 11a: unified memory -- one pointer, pages that move, prefetch and advice")
