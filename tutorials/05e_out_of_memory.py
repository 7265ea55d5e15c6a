"""Tutorial 05e -- out of memory: the one error you handle, so it must say how much was asked and how much is left.

The seed article's case 4 gives OOM its own variant, ``GpuError::OutOfMemory { requested, available }``,
because a program can act on it: free something, use smaller pieces, try again. The driver's answer to a
failed ``cuMemAlloc`` is only ``CUDA_ERROR_OUT_OF_MEMORY`` (2); the two sizes have to be gathered around it.
This tutorial asks for 1 TiB, more than any GPU has, three ways:

1. by hand, through ctypes: ``cuMemAlloc_v2`` returns the bare 2, and ``cuMemGetInfo_v2`` says what is free;
2. with rawcuda: ``DeviceBuffer.empty`` raises ``OutOfMemoryError`` (also a ``MemoryError``) with
   ``.requested`` (the bytes of the failed call) and ``.available`` (asked from cuMemGetInfo as it failed);
3. with cust: ``DeviceBuffer::uninitialized`` returns ``Err(CudaError::OutOfMemory)`` -- no sizes, so the
   seed's variant has to be filled in by the caller, with ``cust::memory::mem_get_info()``.

Then it shows that an OOM is not fatal (the seed calls it unrecoverable): nothing was allocated, and the
context goes on computing correct results.

Run:  python tutorials/05e_out_of_memory.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int, c_size_t, c_uint64
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, ops
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

CUDA_SUCCESS = 0
ONE_TIB = 1 << 40  # bytes: more than any GPU has, so cuMemAlloc must refuse it
GIB = 1 << 30
N = 1 << 20  # elements of the vector add that shows the context still works
NAN32 = np.float32(np.nan)  # poison: an output the kernel never wrote stays NaN and fails the check


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def main(t: Tutorial) -> None:
    t.words("cust", "context", "primary context", "CUresult")
    t.step("the GPU and its primary context")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    free, total = ctx.mem_info()
    t.say(f"device 0: {ctx.device.name}; cuMemGetInfo: {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB")
    t.check(free < ONE_TIB, f"1 TiB is more than the {free / GIB:.1f} GiB free: the allocation below must fail")

    t.step("by hand: cuMemAlloc_v2(&ptr, 1 TiB) -> 2, then cuMemGetInfo_v2 for the sizes")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    # cuda.h #defines cuMemAlloc to cuMemAlloc_v2 (64-bit sizes); the plain symbol is the old 32-bit ABI.
    cuMemAlloc = declare(libcuda, "cuMemAlloc_v2", POINTER(c_uint64), c_size_t)
    cuMemGetInfo = declare(libcuda, "cuMemGetInfo_v2", POINTER(c_size_t), POINTER(c_size_t))
    ptr = c_uint64()
    rc = cuMemAlloc(byref(ptr), ONE_TIB)
    raw_free, raw_total = c_size_t(), c_size_t()
    info_rc = cuMemGetInfo(byref(raw_free), byref(raw_total))
    t.say(
        "CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);          (exported as cuMemAlloc_v2)\n"
        "CUresult cuMemGetInfo(size_t *free, size_t *total);               (exported as cuMemGetInfo_v2)\n"
        f"  rc = cuMemAlloc(byref(ptr), {ONE_TIB})       -> {rc}, ptr = {ptr.value}\n"
        f"  cuMemGetInfo(byref(free), byref(total))        -> {info_rc}, free = {raw_free.value}, "
        f"total = {raw_total.value}"
    )
    t.check(rc == Result.ERROR_OUT_OF_MEMORY, f"cuMemAlloc answered {rc}: CUDA_ERROR_OUT_OF_MEMORY")
    t.check(info_rc == CUDA_SUCCESS and raw_free.value < ONE_TIB, "the free size has to be asked for separately")

    t.step("rawcuda: DeviceBuffer.empty(1 TiB) -> OutOfMemoryError with .requested and .available")
    try:
        DeviceBuffer.empty(ONE_TIB, np.uint8)
    except rawcuda.OutOfMemoryError as exc:
        error = exc
    else:
        raise TutorialCheckError("DeviceBuffer.empty(1 << 40, np.uint8) raised nothing")
    t.say("DeviceBuffer.empty(1 << 40, np.uint8)\n  -> OutOfMemoryError: " + str(error).replace("\n", "\n     "))
    t.check(error.code == rc, f"the same code as by hand: {error.name} ({error.code})")
    t.check(error.requested == ONE_TIB, f".requested = {error.requested} bytes: the failed call's own argument")
    t.check(
        error.available is not None and error.available < ONE_TIB,
        f".available = {error.available} bytes, asked from cuMemGetInfo when the allocation failed",
    )
    t.check(isinstance(error, MemoryError), "OutOfMemoryError is also a MemoryError (`except MemoryError` works)")

    t.step("cust: Err(CudaError::OutOfMemory), and the seed's OutOfMemory { requested, available } by hand")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/memory/device/device_buffer.rs, memory/mod.rs):\n"
        "  let requested: usize = 1 << 40;\n"
        "  match unsafe { DeviceBuffer::<u8>::uninitialized(requested) } {   // cuMemAlloc\n"
        "      Err(CudaError::OutOfMemory) => {\n"
        "          let (available, _total) = cust::memory::mem_get_info()?;   // cuMemGetInfo\n"
        "          Err(GpuError::OutOfMemory { requested, available })        // the seed's variant\n"
        "      }\n"
        "      other => ...,\n"
        "  }\n"
        "CudaError::OutOfMemory carries nothing, so `requested` must be the caller's own number and\n"
        "`available` a second call made soon enough to mean something. rawcuda does both for every allocating\n"
        "row of its table (cuMemAlloc, cuMemAllocAsync, cuMemAllocManaged, cuMemAllocHost, cuMemHostAlloc,\n"
        "cuMemCreate), in the one place it builds exceptions (rawcuda/checked/describe.py)."
    )

    t.step("an OOM is not fatal: nothing was allocated, and the context still computes")
    after, _ = ctx.mem_info()
    t.say(f"free before: {free / GIB:.2f} GiB, after the two failed attempts: {after / GIB:.2f} GiB")
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(NAN32)
        ops.vector_add(dc, da, db)
        t.check(bool(np.array_equal(dc.to_array(), a + b)), f"all {N:,} sums equal numpy's a + b exactly")
    t.check(ctx.poisoned is None, "the context was never poisoned")
    t.say(
        "the seed calls OOM unrecoverable; for the GPU it is not. What to do: free buffers you no longer\n"
        "need (close(), or drop them and gc.collect()), process the data in smaller pieces, or check\n"
        "nvidia-smi for other processes using the GPU."
    )


if __name__ == "__main__":
    run(main, "Tutorial 05e: out of memory -- the bare code, OutOfMemoryError's sizes, cust's empty variant")
