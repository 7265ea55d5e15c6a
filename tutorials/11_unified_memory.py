"""Tutorial 11 -- unified (managed) memory: one pointer for host and GPU, and what it really costs.

The seed article says two things about unified memory. First, that cust switches it on "with SCHED_AUTO
in ContextFlags" -- it does not: SCHED_AUTO only decides how the host thread waits for the GPU. Unified
memory is a different *allocation*, ``cuMemAllocManaged``, whose pages the driver migrates to whichever
processor touches them. Second, that it costs memory-bound kernels 30-50%. This tutorial shows where the
cost comes from -- page faults on first touch -- and what prefetching and advice change, next to explicit
DeviceBuffers doing the same vector add. Each number here is one run; bench/unified_memory.py takes
medians at 256 MiB per array (bench/results/2026-11-30-NVIDIA_H200.md).

Run:  python tutorials/11_unified_memory.py [--step]
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import byref

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, DeviceBuffer, Event, ManagedBuffer, ops
from rawcuda.checked import cu
from rawcuda.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute, PointerAttribute
from rawcuda.ffi.constants import CtxFlag, MemAdvise

N = 1 << 24  # 16 Mi floats = 64 MiB per array: big enough to time, small next to any GPU's free memory
REPS = 10
NAN32 = np.float32(np.nan)
MIB = 1 << 20


def gpu_ms(work: Callable[[], object], reps: int = 1) -> float:
    """GPU milliseconds per run of ``work`` (CUDA events around it; no warm-up -- first runs are the point)."""
    start, end = Event(), Event()
    start.record()
    for _ in range(reps):
        work()
    end.record()
    ms = start.elapsed_ms(end) / reps
    start.close()
    end.close()
    return ms


def is_managed(ptr: int) -> bool:
    """Ask the driver what an address is: CU_POINTER_ATTRIBUTE_IS_MANAGED."""
    value = ctypes.c_uint64(0)  # the driver writes a small boolean into the low bytes
    default_context().activate()
    cu.cuPointerGetAttribute(byref(value), PointerAttribute.IS_MANAGED, ptr)
    return value.value != 0


def main(t: Tutorial) -> None:
    dev = Device(0)
    ctx = default_context()
    gib = 3 * N * 4 / 2**30

    t.step("what this GPU offers for unified memory")
    for attr in (
        DeviceAttribute.MANAGED_MEMORY,
        DeviceAttribute.CONCURRENT_MANAGED_ACCESS,
        DeviceAttribute.PAGEABLE_MEMORY_ACCESS,
        DeviceAttribute.DIRECT_MANAGED_MEM_ACCESS_FROM_HOST,
    ):
        t.say(f"{attr.name:40} {dev.attribute(attr)}")
    t.check(dev.attribute(DeviceAttribute.MANAGED_MEMORY) == 1, "the device supports managed memory")
    t.say(
        f"the context's flags: {ctx.flags!r} -- SCHED_AUTO is {CtxFlag.SCHED_AUTO:#x}: it picks how the host "
        "waits (spin or yield).\nNo context flag turns unified memory on; the allocation call does."
    )

    t.step("allocate managed memory and write it from the host -- no copies anywhere")
    t.say("cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL): one address, valid on the host and the GPU")
    rng = np.random.default_rng()
    a, b, c = ManagedBuffer(N), ManagedBuffer(N), ManagedBuffer(N)
    a.array[:] = rng.standard_normal(N, dtype=np.float32)  # numpy writes straight into the managed pages
    b.array[:] = rng.standard_normal(N, dtype=np.float32)
    c.array[:] = NAN32  # poison: a kernel that writes nothing cannot pass
    expected = a.array + b.array
    ops.kernel("vector_add", "vector_add", ctx)  # load the module now, so no timing below includes the JIT
    with DeviceBuffer(16) as plain:
        t.check(
            is_managed(a.ptr) and not is_managed(plain.ptr),
            "cuPointerGetAttribute(IS_MANAGED) tells managed memory from cuMemAlloc memory",
        )

    t.step("first touch: the kernel's loads fault, and the driver migrates each page from the host")
    first_ms = gpu_ms(lambda: ops.vector_add(c, a, b))
    ctx.synchronize()
    t.check(bool(np.array_equal(c.array, expected)), f"all {N:,} sums are right (read through c.array, no copy)")
    t.say(
        f"first launch: {first_ms:.2f} ms for {gib:.2f} GiB moved -- {gib / first_ms * 1e3:.1f} GiB/s\n"
        "reading c.array just now migrated c's pages back to the host, so the next step starts by poisoning\n"
        "c on the GPU (a memset) rather than from numpy"
    )

    t.step("pages resident on the GPU: the same kernel again")
    c.fill(NAN32)  # a device-side memset: c's pages move back to the GPU, a and b are still there
    ops.vector_add(c, a, b)  # one untimed run so that every page is resident
    resident_ms = gpu_ms(lambda: ops.vector_add(c, a, b), REPS)
    t.check(bool(np.array_equal(c.array, expected)), "still right after repeated launches")
    t.say(f"resident: {resident_ms:.3f} ms per launch -- {first_ms / resident_ms:.0f}x faster than the first touch")

    t.step("the host writes new inputs; prefetch them to the GPU before the kernel needs them")
    a.array[:] = rng.standard_normal(N, dtype=np.float32)  # pages of a and b migrate back to the host
    b.array[:] = rng.standard_normal(N, dtype=np.float32)
    c.array[:] = NAN32
    expected = a.array + b.array
    t.say("cuMemPrefetchAsync(ptr, bytes, {DEVICE, 0}, 0, stream): bulk migration, no faults")
    prefetch_ms = gpu_ms(lambda: [buf.prefetch(dev) for buf in (a, b, c)])
    after_prefetch_ms = gpu_ms(lambda: ops.vector_add(c, a, b))
    t.check(bool(np.array_equal(c.array, expected)), "right after prefetching")
    t.say(
        f"prefetch {prefetch_ms:.2f} ms ({gib / prefetch_ms * 1e3:.1f} GiB/s), then the kernel: "
        f"{after_prefetch_ms:.3f} ms"
    )

    t.step("advice: SET_READ_MOSTLY lets the host read the inputs without taking them from the GPU")
    c.fill(NAN32)
    ops.vector_add(c, a, b)  # everything on the GPU again
    checksum = float(a.array.sum() + b.array.sum())  # host reads: without advice, the pages migrate back
    plain_ms = gpu_ms(lambda: ops.vector_add(c, a, b))
    t.say(f"after the host read a and b, no advice: {plain_ms:.2f} ms (the kernel faulted them back)")
    for buf in (a, b):
        buf.advise(MemAdvise.SET_READ_MOSTLY, dev)  # read-only copies may live on several processors at once
    ops.vector_add(c, a, b)  # the GPU gets its copies
    again = float(a.array.sum() + b.array.sum())  # the host gets its own copies; the GPU keeps its
    advised_ms = gpu_ms(lambda: ops.vector_add(c, a, b))
    t.say(f"after the host read a and b, with SET_READ_MOSTLY: {advised_ms:.3f} ms")
    t.check(again == checksum and bool(np.array_equal(c.array, expected)), "advice changes placement, not results")
    for buf in (a, b):
        buf.advise(MemAdvise.UNSET_READ_MOSTLY, dev)

    t.step("the same vector add on explicit DeviceBuffers")
    da, db = DeviceBuffer.from_array(a.array), DeviceBuffer.from_array(b.array)
    dc = DeviceBuffer.empty(N)
    dc.fill(NAN32)
    explicit_ms = gpu_ms(lambda: ops.vector_add(dc, da, db), REPS)
    t.check(bool(np.array_equal(dc.to_array(), expected)), "explicit buffers give the same sums")

    t.step("so what does unified memory cost?")
    rows = [
        ("managed, first touch (page faults)", first_ms),
        ("managed, pages resident", resident_ms),
        ("managed, after prefetch", after_prefetch_ms),
        ("managed, host read the inputs", plain_ms),
        ("managed, host read them, read-mostly", advised_ms),
        ("explicit DeviceBuffers", explicit_ms),
    ]
    for label, ms in rows:
        t.say(f"{label:40} {ms:8.3f} ms   {ms / explicit_ms:7.2f}x explicit")
    t.say(
        "Not one number: where the pages are decides. The committed bench (256 MiB per array, medians;\n"
        "bench/results/2026-11-30-NVIDIA_H200.md): resident pages 1.00x explicit, the kernel just after a\n"
        "prefetch 1.41x (0.92x with advice too), a first touch ~9 GB/s where pinned copies move 53-55 GB/s.\n"
        "The seed's '30-50%' fits only the just-prefetched case."
    )

    t.step("host access while kernels run: CONCURRENT_MANAGED_ACCESS")
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
    for buf in (a, b, c, da, db, dc):
        buf.close()
    t.say(f"(managed memory used: {3 * N * 4 // MIB} MiB; closed)")


if __name__ == "__main__":
    run(main, "Tutorial 11: unified memory -- first touch, prefetch, advice, and explicit buffers")
