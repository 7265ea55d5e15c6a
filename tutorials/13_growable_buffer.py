"""Tutorial 13 -- a device buffer that grows without copying: virtual memory management (VMM).

The seed article names "virtual memory management" among the driver features cust does not wrap, for
which you fall back to raw FFI. (Its list also has CUDA graphs -- tutorial 09 -- and MPS. MPS is not an
API a binding could wrap: it is a daemon, ``nvidia-cuda-mps-control``, that libcuda connects to by itself
when it runs, so a cust or rawcuda program uses it unchanged.) Here is what VMM buys. With ``cuMemAlloc``
an address comes with its memory, so a growing buffer (a vector's push, a KV cache, a particle list) must
be reallocated: allocate bigger, copy, free -- time proportional to the size, twice the memory for a
moment, and every stored pointer goes stale. VMM reserves *addresses* once and maps *memory* into them
chunk by chunk:

    cuMemAddressReserve  ->  cuMemCreate  ->  cuMemMap  ->  cuMemSetAccess   (repeat the last three to grow)
    teardown: cuMemUnmap -> cuMemRelease -> cuMemAddressFree

``rawcuda.growable.GrowableBuffer`` does exactly that, and hands out ordinary DeviceBuffer views.

Run:  python tutorials/13_growable_buffer.py [--step]
"""

from __future__ import annotations

import time

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Device, DeviceBuffer, ops
from rawcuda.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemGranularity
from rawcuda.growable import CapacityError, GrowableBuffer, allocation_granularity, copy_grow

GIB = 1 << 30
MIB = 1 << 20
CAPACITY = 64 * GIB  # address space only: costs nothing until memory is mapped into it
START = 1 << 20  # elements in the first step of the growth comparison
DOUBLINGS = 7  # 1 Mi -> 128 Mi float32 elements (4 MiB -> 512 MiB)
NAN32 = np.float32(np.nan)


def free_mib() -> float:
    ctx = default_context()
    ctx.synchronize()
    return ctx.mem_info()[0] / MIB


def main(t: Tutorial) -> None:
    dev = Device(0)

    t.step("does this GPU support it, and in what units?")
    supported = dev.attribute(DeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    t.check(supported == 1, "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 1")
    granularity = allocation_granularity()
    recommended = allocation_granularity(which=MemGranularity.RECOMMENDED)
    t.say(
        f"cuMemGetAllocationGranularity: minimum {granularity // 1024} KiB, recommended {recommended // 1024} KiB\n"
        "every chunk size and mapping offset is a multiple of it; requests are rounded up"
    )

    t.step(f"reserve {CAPACITY // GIB} GiB of addresses (cuMemAddressReserve) -- no memory yet")
    before = free_mib()
    buf = GrowableBuffer(CAPACITY, np.float32)
    t.say(f"{buf!r}\nfree device memory: {before:,.0f} MiB before, {free_mib():,.0f} MiB after the reservation")
    t.check(buf.mapped_bytes == 0 and buf.size == 0, "a reservation maps nothing")
    base = buf.ptr

    t.step("grow in steps: each maps one more physical chunk at the end (cuMemCreate + cuMemMap + cuMemSetAccess)")
    rng = np.random.default_rng()
    reference = np.empty(0, np.float32)
    # within the first chunk, just past it, a few chunks in, then 40 MiB (sorted: granularities differ)
    for step in sorted({1000, granularity // 4 + 1, 5 * granularity // 4 + 321, 40 * MIB // 4}):
        fresh = rng.standard_normal(step - reference.size, dtype=np.float32)
        buf.extend(fresh)  # grow(), then copy the new elements into the new tail
        reference = np.concatenate([reference, fresh])
        t.say(
            f"size {buf.size:>10,}  mapped {buf.mapped_bytes // 1024:>7,} KiB in {len(buf.chunks)} chunk(s)  "
            f"address {buf.ptr:#x}  free {free_mib():,.0f} MiB"
        )
        t.check(
            buf.ptr == base and bool(np.array_equal(buf.to_array(), reference)),
            "same address, and every old and new element intact",
        )

    t.step("kernels take the views like any DeviceBuffer")
    other = GrowableBuffer(CAPACITY, np.float32)
    other.extend(rng.standard_normal(buf.size, dtype=np.float32))
    out = DeviceBuffer.empty(buf.size)
    out.fill(NAN32)
    ops.vector_add(out, buf.buffer, other.buffer)
    t.check(
        bool(np.array_equal(out.to_array(), reference + other.to_array())),
        f"vector_add over {buf.size:,} elements spanning {len(buf.chunks)} separately mapped chunks",
    )
    cai = buf.__cuda_array_interface__
    t.say(f"__cuda_array_interface__: data={cai['data'][0]:#x}, shape={cai['shape']} -- torch/CuPy can share it")
    for obj in (out, other):
        obj.close()

    t.step("the reservation is a hard limit")
    small = GrowableBuffer(4 * granularity, np.float32)
    small.grow(small.capacity)
    try:
        small.grow(small.capacity + 1)
    except CapacityError as exc:
        t.say(f"CapacityError: {exc}")
        t.check(small.size == small.capacity, "a refused grow changes nothing")
    else:
        t.check(False, "growing past the reservation must be refused")
    small.close()

    t.step(f"compare: grow by doubling {DOUBLINGS} times, copying vs mapping")
    data = rng.standard_normal(START << DOUBLINGS, dtype=np.float32)
    copied = DeviceBuffer.from_array(data[:START])
    addresses, moved = {copied.ptr}, 0
    started = time.perf_counter()
    for k in range(1, DOUBLINGS + 1):
        moved += copied.nbytes  # cuMemAlloc the bigger one, copy everything so far, cuMemFree the old one
        copied = copy_grow(copied, START << k)
        addresses.add(copied.ptr)
    default_context().synchronize()
    copy_s = time.perf_counter() - started
    mapped = GrowableBuffer(CAPACITY, np.float32)
    mapped.extend(data[:START])
    default_context().synchronize()
    started = time.perf_counter()
    for k in range(1, DOUBLINGS + 1):
        mapped.grow(START << k)  # maps only the missing chunk; copies nothing
    default_context().synchronize()
    map_s = time.perf_counter() - started
    t.say(
        f"copy on grow: {copy_s * 1e3:7.1f} ms, {moved // MIB:,} MiB copied, {len(addresses)} different addresses\n"
        f"map on grow:  {map_s * 1e3:7.1f} ms, 0 MiB copied, 1 address ({len(mapped.chunks)} chunks)"
    )
    head = data[:START]
    t.check(
        bool(np.array_equal(copied.to_array()[:START], head)) and bool(np.array_equal(mapped.to_array()[:START], head)),
        "both kept the first elements",
    )
    t.say(
        "copying costs time and, at each step, old + new memory at once; mapping costs a few driver calls.\n"
        "The price of VMM: sizes in granularity units, and more driver calls to set up and tear down."
    )
    copied.close()
    mapped.close()

    t.step("tear down: synchronize, cuMemUnmap each chunk, cuMemRelease each handle, cuMemAddressFree")
    view = buf.buffer
    before_close = free_mib()
    buf.close()
    after_close = free_mib()
    t.say(f"free device memory: {before_close:,.0f} MiB -> {after_close:,.0f} MiB")
    t.check(buf.closed and view.closed and after_close >= before_close, "the memory went back to the device")
    try:
        view.to_array()
    except rawcuda.ClosedError as exc:
        t.say(f"a view of a closed GrowableBuffer is a clear error, not a crash:\n  {exc}")


if __name__ == "__main__":
    run(main, "Tutorial 13: a growable buffer with virtual memory management")
