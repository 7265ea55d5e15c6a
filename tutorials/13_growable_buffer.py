"""Tutorial 13 -- a device buffer that grows without copying: virtual memory management (VMM).

The seed article names "virtual memory management" among the driver features cust does not wrap, for
which you fall back to raw FFI. (Its list also has CUDA graphs -- tutorial 09 -- and MPS. MPS itself is a
daemon, ``nvidia-cuda-mps-control``, that libcuda connects to by itself when it runs, so a program uses it
unchanged; but the driver also has API for it, which cust does not wrap: the device attribute
``CU_DEVICE_ATTRIBUTE_MPS_ENABLED``, contexts limited to a number of SMs -- ``CU_EXEC_AFFINITY_TYPE_SM_COUNT``
in ``cuCtxCreate``'s ``CUctxCreateParams`` (``cuCtxCreate_v4``; ``_v3`` took them directly), read back with
``cuCtxGetExecAffinity``, "only supported under Volta+ MPS" -- with ``cuDeviceGetExecAffinitySupport``, and
the error codes 805-810.) Here is what VMM buys. With ``cuMemAlloc`` an address comes with its memory, so
a growing buffer (a vector's push, a KV cache, a particle list) must be reallocated: allocate bigger, copy,
free -- time proportional to the size, twice the memory for a moment, and every stored pointer goes stale.
VMM reserves *addresses* once and maps *memory* into them chunk by chunk:

    cuMemAddressReserve  ->  cuMemCreate  ->  cuMemMap  ->  cuMemSetAccess   (repeat the last three to grow)
    teardown: cuMemUnmap -> cuMemRelease -> cuMemAddressFree

``rawcuda.extras.growable.GrowableBuffer`` does exactly that, and hands out ordinary DeviceBuffer views.

The first steps are the raw half: ``CUmemAllocationProp`` -- the struct that tells cuMemCreate what memory
to make -- written out as a ``ctypes.Structure`` (nested structs, sizes, padding), checked against
rawcuda's definition, and used with hand-bound ``cuMemGetAllocationGranularity``, ``cuMemCreate`` and
``cuMemRelease``. cust has no VMM API at all; the Rust fallback is ``cust_raw::driver_sys``, the same
calls unsafe.

Run:  python tutorials/13_growable_buffer.py [--step]
"""

from __future__ import annotations

import ctypes
import time
from ctypes import POINTER, byref, c_int, c_size_t, c_ubyte, c_uint64, c_ulonglong, c_ushort, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Device, DeviceBuffer, ops
from rawcuda.checked import cu, raise_for
from rawcuda.core.context import default_context
from rawcuda.extras.growable import CapacityError, GrowableBuffer, allocation_granularity, copy_grow
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAllocationType, MemGranularity, MemLocationType
from rawcuda.ffi.types import CUmemAllocationProp

GIB = 1 << 30
MIB = 1 << 20
CAPACITY = 64 * GIB  # address space only: costs nothing until memory is mapped into it
START = 1 << 20  # elements in the first step of the growth comparison
DOUBLINGS = 7  # 1 Mi -> 128 Mi float32 elements (4 MiB -> 512 MiB)
NAN32 = np.float32(np.nan)
CREATE_FLAGS = 0  # cuMemCreate: "flags for future use, must be zero now" (cuda.h)


# --- CUmemAllocationProp, written out by hand (cuda.h: CUmemAllocationProp_v1) ----------------------------------
class MemLocation(ctypes.Structure):
    """CUmemLocation: where memory lives -- a type (device, host, host NUMA node) and an id (the ordinal)."""

    _fields_ = [("type", c_int), ("id", c_int)]  # CUmemLocationType is an enum: a 4-byte int


class AllocFlags(ctypes.Structure):
    """The anonymous `struct { ... } allocFlags` inside CUmemAllocationProp."""

    _fields_ = [
        ("compressionType", c_ubyte),  # unsigned char: compressible memory requested?
        ("gpuDirectRDMACapable", c_ubyte),  # unsigned char
        ("usage", c_ushort),  # unsigned short: CU_MEM_CREATE_USAGE_* bits
        ("reserved", c_ubyte * 4),  # unsigned char reserved[4]: must be zero
    ]


class MemAllocationProp(ctypes.Structure):
    """CUmemAllocationProp: what kind of physical memory cuMemCreate makes."""

    _fields_ = [
        ("type", c_int),  # CUmemAllocationType: PINNED, the only kind for device memory
        ("requestedHandleTypes", c_int),  # CUmemAllocationHandleType: 0 = not exportable to other processes
        ("location", MemLocation),
        ("win32HandleMetaData", c_void_p),  # void *: Windows only; "in all other cases ... required to be zero"
        ("allocFlags", AllocFlags),
    ]


def layout(struct: type[ctypes.Structure], prefix: str = "", base: int = 0) -> list[tuple[str, int, int]]:
    """(dotted field, offset, size) of every field, nested structs included."""
    rows = []
    for name, ftype, *_ in struct._fields_:
        offset = base + getattr(struct, name).offset
        rows.append((prefix + name, offset, ctypes.sizeof(ftype)))
        if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
            rows += layout(ftype, f"{prefix}{name}.", offset)
    return rows


def padding(struct: type[ctypes.Structure]) -> int:
    """Bytes of the struct that belong to no top-level field (alignment holes and tail padding)."""
    return ctypes.sizeof(struct) - sum(ctypes.sizeof(ftype) for _, ftype, *_ in struct._fields_)


def bound(name: str, argtypes: list[Any]) -> Any:
    """A fresh pointer to driver symbol ``name`` (in the libcuda rawcuda opened), typed by hand: CUresult."""
    fn = cu.library().handle[name]
    fn.restype, fn.argtypes = c_int, argtypes
    return fn


def checked(code: int, name: str, *args: Any) -> None:
    """rawcuda's exception for a hand-bound call's non-zero CUresult (rawcuda.checked.raise_for)."""
    if code:
        raise_for(code, name, args)


def free_mib() -> float:
    ctx = default_context()
    ctx.synchronize()
    return ctx.mem_info()[0] / MIB


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel")
    t.step("raw ctypes first: CUmemAllocationProp written out as nested ctypes Structures")
    t.term("VMM")  # the struct describes the physical memory cuMemCreate makes
    t.say(
        "offset size field\n"
        + "\n".join(f"  {offset:3}  {size:2}  {name}" for name, offset, size in layout(MemAllocationProp))
        + f"\nsizeof = {ctypes.sizeof(MemAllocationProp)}, {padding(MemAllocationProp)} bytes of padding: each field "
        "already falls on its alignment\n(the 8-byte pointer at 16, right after the two 4-byte enums and the "
        "8-byte location)"
    )
    t.check(
        ctypes.sizeof(MemAllocationProp) == ctypes.sizeof(CUmemAllocationProp)
        and layout(MemAllocationProp) == layout(CUmemAllocationProp),
        "every size and offset equals rawcuda's CUmemAllocationProp (proven against the C compiler by headercheck)",
    )

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

    t.step("the same by hand: fill the struct, ask the granularity, cuMemCreate one chunk, cuMemRelease it")
    prop = MemAllocationProp()  # ctypes zero-fills every field: no handle types, no flags, reserved bytes 0
    prop.type = MemAllocationType.PINNED
    prop.location.type = MemLocationType.DEVICE
    prop.location.id = dev.ordinal
    get_granularity = bound("cuMemGetAllocationGranularity", [POINTER(c_size_t), POINTER(MemAllocationProp), c_int])
    create = bound("cuMemCreate", [POINTER(c_uint64), c_size_t, POINTER(MemAllocationProp), c_ulonglong])
    release = bound("cuMemRelease", [c_uint64])  # CUmemGenericAllocationHandle: an unsigned long long
    default_context().activate()  # the calls below act on the current context
    raw_granularity, handle = c_size_t(), c_uint64()
    checked(
        get_granularity(byref(raw_granularity), byref(prop), MemGranularity.MINIMUM), "cuMemGetAllocationGranularity"
    )
    before_create = free_mib()
    checked(create(byref(handle), raw_granularity.value, byref(prop), CREATE_FLAGS), "cuMemCreate")
    after_create = free_mib()
    checked(release(handle), "cuMemRelease")
    t.say(
        f"granularity {raw_granularity.value // 1024} KiB; cuMemCreate -> handle {handle.value:#x}: physical memory\n"
        f"with no address yet (free device memory {before_create:,.0f} -> {after_create:,.0f} MiB; released again).\n"
        "Who owns what: `prop` is an input (const CUmemAllocationProp *), read during each call, so a local is\n"
        "enough; the handle owns the memory until cuMemRelease -- and, once mapped, until cuMemUnmap as well.\n"
        "cust (Rust-CUDA at ac2674f): no VMM API (nothing in cust calls cuMemCreate, cuMemMap or\n"
        "cuMemAddressReserve). Its bindgen crate cust_raw::driver_sys has the functions and CUmemAllocationProp:\n"
        "the seed's 'fall back to FFI' (crates.io's 2022 cust 0.3.2 has them as cust::sys)."
    )
    t.check(
        raw_granularity.value == granularity and handle.value != 0,
        "the hand-bound calls agree with rawcuda.extras.growable.allocation_granularity() and made a chunk",
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
    t.term("CAI")
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
