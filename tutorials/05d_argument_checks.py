"""Tutorial 05d -- wrong kernel arguments: cuLaunchKernel cannot check them, so rawcuda checks them before it.

``cuLaunchKernel`` takes the arguments as ``void **kernelParams``: an array of pointers, the i-th pointing
at the value of argument i -- with no count and no sizes. The driver takes both from the kernel's image and
copies that many bytes from each pointer. Too few pointers, a 4-byte value where the kernel reads 8, a host
address where it dereferences a device one: the launch is accepted, and the kernel reads garbage or faults
later (tutorial 05f). This tutorial shows it three ways:

1. by hand, through ctypes: ``cuFuncGetParamInfo`` reads each parameter's offset and size from the loaded
   kernel (the driver *knows* them), then a correct launch with ``kernelParams`` built by hand;
2. with rawcuda: five mistakes -- a missing argument, a float64 for a float32, int32s for size_t, a host
   numpy array, a closed buffer -- each raise ``ArgumentError`` (a TypeError) or ``ClosedError`` (a
   ValueError) before the driver is called, checked against the signature in the kernel's PTX;
3. with cust: ``launch!`` only requires every argument to be ``DeviceCopy``, so the same five mistakes
   compile, inside the ``unsafe`` block the macro needs, and are undefined behaviour.

Run:  python tutorials/05d_argument_checks.py [--step]
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, Function, Module, kernels
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

CUDA_SUCCESS = 0
N = 100_003  # elements: not a multiple of the block size, so the kernel's tail handling is exercised too
BLOCK = 256
NAN32 = np.float32(np.nan)  # poison: if any launch below reached the GPU, the output would not be all NaN
SAXPY_ALPHA = 2.0
TRANSPOSE_SIDE = 64  # rows = cols of the (never launched) transpose used for the size_t width mistake
TRANSPOSE_BLOCK = (32, 8)
LEGACY_STREAM = None  # CUstream 0: the legacy default stream
NO_EXTRA = None  # cuLaunchKernel's `extra` (the other way to pass arguments): unused
MAX_PARAMS_ASKED = 64  # far more than any kernel here has: cuFuncGetParamInfo refuses the index past the last


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "grid", "block", "context", "CUresult", "stream", "PTX")
    t.step("the GPU, three kernels, and their signatures read from the PTX")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    vector_add = Module(kernels.ptx_path("vector_add")).function("vector_add")
    saxpy = Module(kernels.ptx_path("saxpy")).function("saxpy")
    transpose = Module(kernels.ptx_path("transpose")).function("transpose_naive")
    functions: list[Function] = [vector_add, saxpy, transpose]
    t.say(
        f"device 0: {ctx.device.name}\n"
        "  vector_add(float *c, const float *a, const float *b, size_t n)          -> "
        + ", ".join(p.ptx_type for p in vector_add.params)
        + "\n  saxpy(float *y, float a, const float *x, size_t n)                       -> "
        + ", ".join(p.ptx_type for p in saxpy.params)
        + "\n  transpose_naive(float *out, const float *in, size_t rows, size_t cols) -> "
        + ", ".join(p.ptx_type for p in transpose.params)
        + "\n(PTX writes every pointer and size_t as .u64: to the kernel they are all 8-byte integers)"
    )
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.empty(N, np.float32)

    t.step("by hand: cuFuncGetParamInfo -- the driver knows each parameter's size -- then a hand-built launch")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuFuncGetParamInfo = declare(
        libcuda, "cuFuncGetParamInfo", c_void_p, c_size_t, POINTER(c_size_t), POINTER(c_size_t)
    )
    cuLaunchKernel = declare(
        libcuda, "cuLaunchKernel", c_void_p, *([c_uint] * 7), c_void_p, POINTER(c_void_p), POINTER(c_void_p)
    )
    cuCtxSynchronize = declare(libcuda, "cuCtxSynchronize")
    lines = ["CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);"]
    for fn in functions:
        sizes, offsets = [], []
        offset, size = c_size_t(), c_size_t()
        for index in range(MAX_PARAMS_ASKED):  # a bound, so that a driver that never refuses cannot loop forever
            rc = cuFuncGetParamInfo(fn.handle, index, byref(offset), byref(size))
            if rc != CUDA_SUCCESS:
                break
            sizes.append(size.value)
            offsets.append(offset.value)
        lines.append(f"  {fn.name}: sizes {sizes} at offsets {offsets}; index {len(sizes)} -> {rc}")
        t.check(
            rc == Result.ERROR_INVALID_VALUE and sizes == [p.size for p in fn.params],
            f"{fn.name}: the driver's sizes equal the PTX signature's; one index past the end is "
            "CUDA_ERROR_INVALID_VALUE (1)",
        )
    t.say("\n".join(lines))
    dc.fill(NAN32)
    # kernelParams: one pointer per parameter, each to a value of exactly the parameter's size (8 bytes here).
    values = [c_uint64(dc.ptr), c_uint64(da.ptr), c_uint64(db.ptr), c_uint64(N)]
    kernel_params = (c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    launch_rc = cuLaunchKernel(
        vector_add.handle, grid_for(N), 1, 1, BLOCK, 1, 1, 0, LEGACY_STREAM, kernel_params, NO_EXTRA
    )
    sync_rc = cuCtxSynchronize()
    t.say(
        "CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, unsigned blockDimX,\n"
        "                        blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream,\n"
        "                        void **kernelParams, void **extra);\n"
        f"  values = [c_uint64(c), c_uint64(a), c_uint64(b), c_uint64({N})]\n"
        "  kernel_params = (c_void_p * 4)(*[addressof(v) for v in values])\n"
        f"  cuLaunchKernel(f, {grid_for(N)}, 1, 1, {BLOCK}, 1, 1, 0, NULL, kernel_params, NULL) -> {launch_rc}; "
        f"cuCtxSynchronize() -> {sync_rc}\n"
        "cuLaunchKernel got no count and no sizes: had kernel_params held 3 pointers, or c_uint32(n), it would\n"
        "have read past the array, or 4 bytes of whatever followed, and still returned 0."
    )
    t.check(launch_rc == sync_rc == CUDA_SUCCESS, "the hand-built launch and the synchronize returned 0")
    t.check(bool(np.array_equal(dc.to_array(), a + b)), f"all {N:,} sums of the hand-built launch equal a + b")

    t.step("rawcuda: five mistakes, each refused before cuLaunchKernel")
    closed = DeviceBuffer.from_array(a)
    closed.close()
    square = DeviceBuffer.empty((TRANSPOSE_SIDE, TRANSPOSE_SIDE), np.float32)
    dc.fill(NAN32)  # if any of the launches below reached the GPU, dc would no longer be all NaN
    before = ctx.last_launch
    grid = grid_for(N)
    mistakes: list[tuple[str, type[BaseException], Callable[[], object]]] = [
        (
            "vector_add with 3 arguments instead of 4",
            rawcuda.ArgumentError,
            lambda: vector_add.launch(grid, BLOCK, dc, da, db),
        ),
        (
            "saxpy with np.float64 alpha for its f32 parameter",
            rawcuda.ArgumentError,
            lambda: saxpy.launch(grid, BLOCK, dc, np.float64(SAXPY_ALPHA), da, N),
        ),
        (
            "transpose with np.int32 rows/cols for its size_t (u64) parameters",
            rawcuda.ArgumentError,
            lambda: transpose.launch(
                1, TRANSPOSE_BLOCK, square, square, np.int32(TRANSPOSE_SIDE), np.int32(TRANSPOSE_SIDE)
            ),
        ),
        (
            "vector_add with a host numpy array where a device pointer goes",
            rawcuda.ArgumentError,
            lambda: vector_add.launch(grid, BLOCK, dc, a, db, N),
        ),
        (
            "vector_add with a DeviceBuffer that was closed",
            rawcuda.ClosedError,
            lambda: vector_add.launch(grid, BLOCK, dc, closed, db, N),
        ),
    ]
    for what, error, action in mistakes:
        try:
            action()
        except error as exc:
            t.say(f"{what}\n  -> {type(exc).__name__}: " + str(exc).replace("\n", "\n     "))
        else:
            raise TutorialCheckError(f"{what}: expected {error.__name__}, but nothing was raised")
    t.check(ctx.last_launch is before, "no launch reached the driver (the context's last launch is unchanged)")
    t.check(bool(np.isnan(dc.to_array()).all()), "the output is still all NaN: no kernel ran")
    t.check(
        issubclass(rawcuda.ArgumentError, TypeError) and issubclass(rawcuda.ClosedError, ValueError),
        "ArgumentError is a TypeError, ClosedError a ValueError",
    )
    t.say(
        "what to do: pass DeviceBuffers for pointers, numpy scalars of the parameter's exact width\n"
        "(np.float32, np.uint64) or plain Python numbers, and only open buffers."
    )
    vector_add.launch(grid, BLOCK, dc, da, db, N)
    t.check(bool(np.array_equal(dc.to_array(), a + b)), "the corrected launch adds correctly")

    t.step("cust: launch! checks only that each argument is DeviceCopy -- all five mistakes compile")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/function.rs: the macro; cust_core: DeviceCopy):\n"
        "  unsafe {\n"
        "      launch!(vector_add<<<grid, block, 0, stream>>>(c.as_device_ptr(), a.as_device_ptr(),\n"
        "                                                      b.as_device_ptr()))?;          // 3 of 4\n"
        "      launch!(saxpy<<<grid, block, 0, stream>>>(y.as_device_ptr(), 2.0f64, x.as_device_ptr(), n))?;\n"
        "      launch!(transpose_naive<<<grid, block, 0, stream>>>(out.as_device_ptr(), inp.as_device_ptr(),\n"
        "                                                           64i32, 64i32))?;  // size_t gets i32\n"
        "      launch!(vector_add<<<grid, block, 0, stream>>>(c.as_device_ptr(), host_a.as_ptr(),\n"
        "                                                      b.as_device_ptr(), n))?;  // *const T: DeviceCopy\n"
        "      let p = a.as_device_ptr(); drop(a);       // DevicePointer is Copy: it outlives the buffer\n"
        "      launch!(vector_add<<<grid, block, 0, stream>>>(c.as_device_ptr(), p, b.as_device_ptr(), n))?;\n"
        "  }\n"
        "The macro builds &[&arg as *const _ as *mut c_void, ...] and calls cuLaunchKernel: each line compiles,\n"
        "and nothing checks it before the driver reads the array. What each returns is not promised: the first\n"
        "line hands over 3 pointers for 4 parameters, so the driver reads a fourth past the array's end (it may\n"
        "return Ok, return an error, or crash), and an i32 for a size_t has 8 bytes read from a 4-byte value.\n"
        "A launch that does return Ok leaves the kernel to read whatever it was given -- the `unsafe` is the\n"
        "programmer's promise that the count and types match. The seed's #[cust::kernel] macro, which would\n"
        "check them, is not in cust (cuda_std's #[kernel] marks a kernel written in Rust; it checks nothing at\n"
        "the host's launch).\n"
        "rawcuda reads the signature from the PTX instead, and checks every launch against it."
    )
    for buf in (da, db, dc, square):
        buf.close()


if __name__ == "__main__":
    run(main, "Tutorial 05d: wrong kernel arguments -- kernelParams by hand, rawcuda's checks, cust's launch!")
