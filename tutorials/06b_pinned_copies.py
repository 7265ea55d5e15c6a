"""Tutorial 06b -- pinned host memory: copies from page-locked memory run at full speed and truly asynchronously.

The GPU's copy engines move data by DMA, which needs host pages that cannot be swapped out or moved.
Ordinary (*pageable*) memory -- a numpy array -- is not such memory, so the driver first copies it into a
pinned staging buffer of its own, piece by piece: an extra copy, and the "async" call cannot return before
the data has been taken. Memory from ``cuMemHostAlloc`` is pinned already: the DMA reads it directly, and
the call returns at once. This tutorial copies 256 MiB host -> device from both kinds, three ways:

1. by hand, through ctypes: ``cuMemHostAlloc``, a numpy view of it, ``cuMemcpyHtoDAsync_v2`` from each
   kind of memory (with how long each *call* took on the host), ``cuStreamSynchronize``, ``cuMemFreeHost``;
2. with rawcuda: ``PinnedBuffer.from_array`` against a plain numpy array, each copy timed on the GPU with
   events and checked element by element;
3. with cust: ``LockedBuffer::from_slice`` (``cuMemAllocHost``) and the ``unsafe`` ``async_copy_from``,
   whose documentation asks for page-locked memory but whose type accepts any slice.

Run:  python tutorials/06b_pinned_copies.py [--step]
"""

from __future__ import annotations

import ctypes
import time
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, PinnedBuffer, Stream, time_ms
from rawcuda.checked import cu
from rawcuda.ffi.constants import HostAllocFlag

CUDA_SUCCESS = 0
MIB = 1 << 20
MS_PER_S = 1000
BYTES_PER_GB = 1e9
F32 = np.dtype(np.float32)
NAN32 = np.float32(np.nan)  # poison: a destination the copy never wrote stays NaN and fails the check
COPY_BYTES = 256 * MIB
COPY_N = COPY_BYTES // F32.itemsize
COPY_REPS = 3  # the best of a few: the first copy from fresh pages can pay for page faults
PINNED_LABEL = "PinnedBuffer (cuMemHostAlloc)"
PAGEABLE_LABEL = "pageable numpy array"


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms / MS_PER_S) / BYTES_PER_GB


def main(t: Tutorial) -> None:
    t.words("cust", "pageable memory", "CUresult", "stream", "event")
    t.step(f"a GPU, a stream, {COPY_BYTES // MIB} MiB of random floats on the host, and room for them on the device")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    stream = Stream()
    host = np.random.default_rng().standard_normal(COPY_N, dtype=np.float32)
    dest = DeviceBuffer.empty(COPY_N, np.float32)
    t.say(f"device 0: {ctx.device.name}")

    t.step("by hand: cuMemHostAlloc, a numpy view of it, and cuMemcpyHtoDAsync_v2 from each kind of memory")
    t.term("pinned memory")  # what cuMemHostAlloc allocates
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuMemHostAlloc = declare(libcuda, "cuMemHostAlloc", POINTER(c_void_p), c_size_t, c_uint)
    cuMemFreeHost = declare(libcuda, "cuMemFreeHost", c_void_p)
    # cuda.h #defines cuMemcpyHtoDAsync to cuMemcpyHtoDAsync_v2 (64-bit device pointers and sizes).
    cuMemcpyHtoDAsync = declare(libcuda, "cuMemcpyHtoDAsync_v2", c_uint64, c_void_p, c_size_t, c_void_p)
    cuStreamSynchronize = declare(libcuda, "cuStreamSynchronize", c_void_p)
    pinned_ptr = c_void_p()
    alloc_rc = cuMemHostAlloc(byref(pinned_ptr), COPY_BYTES, HostAllocFlag.DEFAULT)
    t.check(alloc_rc == CUDA_SUCCESS, f"cuMemHostAlloc(&p, {COPY_BYTES}, 0) returned {alloc_rc}")
    try:
        view = np.frombuffer((ctypes.c_float * COPY_N).from_address(pinned_ptr.value or 0), dtype=np.float32)
        view[:] = host  # the CPU writes pinned memory like any other
        call_ms: dict[str, float] = {}
        copy_rcs: list[int] = []
        for label, source in ((PAGEABLE_LABEL, host.ctypes.data), ("cuMemHostAlloc memory", pinned_ptr.value)):
            dest.fill(NAN32)
            began = time.perf_counter()
            copy_rcs.append(cuMemcpyHtoDAsync(dest.ptr, source, COPY_BYTES, stream.handle))
            call_ms[label] = (time.perf_counter() - began) * MS_PER_S
            copy_rcs.append(cuStreamSynchronize(stream.handle))
            t.check(bool(np.array_equal(dest.to_array(), host)), f"every float arrived from the {label}")
        del view  # no view may outlive the memory under it
    finally:
        free_rc = cuMemFreeHost(pinned_ptr)
    t.term("copy engine")
    t.say(
        "CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);\n"
        "CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);\n"
        + "\n".join(
            f"  cuMemcpyHtoDAsync(dest, <{label}>, {COPY_BYTES}, s): the call returned after {ms:7.2f} ms (host clock)"
            for label, ms in call_ms.items()
        )
        + f"\n  copy and cuStreamSynchronize results: {copy_rcs}; cuMemFreeHost -> {free_rc}\n"
        "From pageable memory the 'async' call stages the data and returns only once it has been taken;\n"
        "from pinned memory it queues a DMA and returns (the copy itself then runs on the copy engine)."
    )
    t.check(all(rc == CUDA_SUCCESS for rc in [*copy_rcs, free_rc]), "both copies, the waits and the free returned 0")

    t.step(f"rawcuda: PinnedBuffer vs a numpy array, {COPY_BYTES // MIB} MiB each, timed on the GPU with events")
    pinned = PinnedBuffer.from_array(host)
    rates: dict[str, float] = {}
    for label, source in ((PAGEABLE_LABEL, host), (PINNED_LABEL, pinned)):
        dest.fill(NAN32)
        copies = time_ms(lambda s=source: dest.copy_from(s, stream=stream), reps=COPY_REPS, warmup=0, stream=stream)
        best_ms = copies.min
        rates[label] = gb_per_s(COPY_BYTES, best_ms)
        t.say(f"{label:30s} {best_ms:7.2f} ms = {rates[label]:5.1f} GB/s (best of {COPY_REPS}, event to event)")
        t.check(bool(np.array_equal(dest.to_array(), host)), f"every float arrived ({label})")
    ratio = rates[PINNED_LABEL] / rates[PAGEABLE_LABEL]
    t.say(
        f"pinned ran at {ratio:.1f}x the pageable rate here. PinnedBuffer is cuMemHostAlloc with a numpy\n"
        "view (.array); its memory is freed when the buffer is closed and no view of it is left."
    )
    pinned.close()

    t.step("cust: LockedBuffer and the unsafe async_copy_from")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/memory/locked/locked_buffer.rs, malloc.rs, "
        "device/device_slice.rs):\n"
        "  let pinned = LockedBuffer::from_slice(&host)?;        // cuMemAllocHost, then a CPU copy into it\n"
        "  let mut dest = DeviceBuffer::<f32>::zeroed(n)?;\n"
        "  unsafe { dest.async_copy_from(&pinned, &stream)?; }   // cuMemcpyHtoDAsync on stream\n"
        "  stream.synchronize()?;\n"
        "  dest.copy_from(&host)?;                               // cuMemcpyHtoD: synchronous, legacy stream\n"
        "LockedBuffer allocates with cuMemAllocHost, which takes no flags (rawcuda uses cuMemHostAlloc, which\n"
        "takes PORTABLE, DEVICEMAP, WRITECOMBINED). async_copy_from is unsafe: until the stream is synchronized\n"
        "the source must not be freed or modified. Its documentation says host memory used with it 'must be\n"
        "page-locked', but it accepts any slice (I: AsRef<[T]>), a pageable Vec included -- which the driver\n"
        "then stages, as the pageable row above shows."
    )
    for obj in (dest, stream):
        obj.close()


if __name__ == "__main__":
    run(main, "Tutorial 06b: pinned vs pageable host memory, by hand, in rawcuda and in cust")
