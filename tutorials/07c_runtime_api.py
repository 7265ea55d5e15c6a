"""Tutorial 07c -- the Runtime API on top of the Driver API: the seed's cudaMalloc and cudaMemcpy, by hand.

The seed article speaks the Runtime API's names (``cudaMalloc``, ``cudaMemcpy``, ``cudaFree``); rawcuda and
cust speak the Driver API (``cuMemAlloc``, ...). The runtime (libcudart) is a library over the driver: its
calls have driver counterparts, and it keeps no memory of its own -- it works in a driver context. Which
one is the lesson: the context current on the calling thread if there is one, else the device's primary
context (CUDA C++ Programming Guide, "Interoperability between Runtime and Driver APIs").

This tutorial loads libcudart with ctypes, declares four of its functions by hand, and shows on the GPU:
memory ``cudaMalloc`` returns belongs to the primary context (the one rawcuda, torch and CuPy share); a
``cudaMemcpy`` in and a driver ``cuMemcpyDtoH`` out move the same bytes; with a driver-made context current,
the runtime allocates there instead; and the two APIs number an error the same but name it differently.

Run:  python tutorials/07c_runtime_api.py [--step]
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Context
from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError
from rawcuda.ffi.attributes import PointerAttribute
from rawcuda.ffi.results import c_name

N = 1 << 20  # floats
FLOAT_BYTES = 4
TOO_MUCH = 1 << 40  # 1 TiB: more than any GPU has
CUDA_MEMCPY_HOST_TO_DEVICE = 1  # driver_types.h: enum cudaMemcpyKind
CUDA_SUCCESS = 0  # cudaSuccess and CUDA_SUCCESS are both 0
RUNTIME_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
RUNTIME_PLACES = ("{}/lib64/libcudart.so*", "{}/lib/libcudart.so*")  # under $CUDA_HOME, /usr/local/cuda
WHEEL_PLACE = "{}/nvidia/*/lib/libcudart.so*"  # under a site-packages folder: the runtime torch or CuPy ship

MAPPING = """\
runtime (libcudart)               a driver counterpart (libcuda)
cudaSetDevice(d)                  cuDevicePrimaryCtxRetain(&ctx, d); cuCtxSetCurrent(ctx)
cudaMalloc(&p, n)                 cuMemAlloc_v2(&p, n)        in the current context, else the primary one
cudaMemcpy(dst, src, n, kind)     cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 / cuMemcpyDtoD_v2 (or cuMemcpy)
cudaFree(p)                       cuMemFree_v2(p)
cudaStreamCreate(&s)              cuStreamCreate(&s, 0)
kernel<<<grid, block, shm, s>>>   cuLaunchKernel(f, grid, block, shm, s, args, NULL)  (f from the
                                  program's own fatbin, which the runtime loads into the context)
cudaDeviceSynchronize()           cuCtxSynchronize()
cudaGetErrorName(e)               cuGetErrorName(e, &name)    (the numbers mostly agree; the names differ)
(what the runtime does inside is its own; these are the driver calls that do the same)"""


def find_runtime() -> str | None:
    """A libcudart this process can load: by soname, then the toolkit's folders, then a wheel's copy."""
    for name in RUNTIME_NAMES:
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            pass
    homes = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    patterns = [p.format(h) for h in homes if h for p in RUNTIME_PLACES] + [WHEEL_PLACE.format(s) for s in sys.path]
    found = sorted({path for pattern in patterns for path in glob.glob(pattern)})
    return found[-1] if found else ctypes.util.find_library("cudart")


def declare(lib: Any) -> None:
    """Four runtime functions, by hand, as 00a declares the driver's. cudaError_t is an enum: a C int."""
    lib.cudaMalloc.argtypes, lib.cudaMalloc.restype = [POINTER(c_void_p), c_size_t], c_int
    lib.cudaMemcpy.argtypes, lib.cudaMemcpy.restype = [c_void_p, c_void_p, c_size_t, c_int], c_int
    lib.cudaFree.argtypes, lib.cudaFree.restype = [c_void_p], c_int
    lib.cudaGetErrorName.argtypes, lib.cudaGetErrorName.restype = [c_int], c_char_p
    lib.cudaRuntimeGetVersion.argtypes, lib.cudaRuntimeGetVersion.restype = [POINTER(c_int)], c_int


def owner_of(pointer: int) -> int:
    """The context a device pointer belongs to, asked from the driver (CU_POINTER_ATTRIBUTE_CONTEXT)."""
    owner = c_void_p()
    cu.cuPointerGetAttribute(byref(owner), PointerAttribute.CONTEXT, pointer)
    return owner.value or 0


def in_a_new_thread(work: Any) -> Any:
    """``work()`` on a fresh thread -- one with no current context -- and its result (or its exception)."""
    box: list[Any] = []

    def body() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # re-raised on the calling thread
            box.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def main(t: Tutorial) -> None:
    t.words("cust", "context", "primary context", "current context", "CUresult", "kernel", "grid", "block", "fatbin")
    t.step("load libcudart, the Runtime API, and declare what this tutorial calls")
    primary = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here
    path = find_runtime()
    if path is None:
        t.check(False, "this tutorial needs libcudart (the CUDA toolkit's lib64, or a torch or CuPy wheel's copy)")
        return
    cudart = ctypes.CDLL(path)
    declare(cudart)
    version = c_int()
    cudart.cudaRuntimeGetVersion(byref(version))
    major, minor = rawcuda.driver_version()
    t.say(f"{path}: runtime {version.value // 1000}.{version.value % 1000 // 10}; the driver supports {major}.{minor}")
    t.check(version.value > 0, "the runtime answered its version")

    t.step("the seed's runtime calls, and the driver calls that do the same")
    t.say(MAPPING)

    t.step("cudaMalloc on a thread with no current context: whose memory is it?")
    host = np.random.default_rng().standard_normal(N, dtype=np.float32)

    def allocate_and_copy_in() -> tuple[int, int, int]:
        pointer = c_void_p()
        code = cudart.cudaMalloc(byref(pointer), N * FLOAT_BYTES)
        copied = cudart.cudaMemcpy(pointer, host.ctypes.data, N * FLOAT_BYTES, CUDA_MEMCPY_HOST_TO_DEVICE)
        return code, copied, pointer.value or 0

    code, copied, pointer = in_a_new_thread(allocate_and_copy_in)
    t.check(code == CUDA_SUCCESS and copied == CUDA_SUCCESS, "cudaMalloc and cudaMemcpy(HostToDevice) returned 0")
    owner = owner_of(pointer)
    t.say(f"cudaMalloc -> {pointer:#x}, owned by context {owner:#x}; the primary context is {primary.handle:#x}")
    t.check(owner == primary.handle, "the runtime allocated in the device's primary context: rawcuda's default")
    back = np.empty_like(host)
    primary.activate()  # a driver call acts on the current context: this thread's, made current by hand
    cu.cuMemcpyDtoH(back.ctypes.data, pointer, N * FLOAT_BYTES)  # the driver reads what the runtime wrote
    t.check(bool(np.array_equal(back, host)), f"all {N:,} floats: in with cudaMemcpy, out with cuMemcpyDtoH")
    t.check(cudart.cudaFree(pointer) == CUDA_SUCCESS, "cudaFree returned 0")

    t.step("with a driver-made context current, the runtime uses that one")
    with Context.create(primary.device) as made:

        def allocate_in_made() -> tuple[int, int]:
            made.activate()  # cuCtxSetCurrent on this thread
            pointer = c_void_p()
            code = cudart.cudaMalloc(byref(pointer), FLOAT_BYTES)
            owner = owner_of(pointer.value or 0)
            cudart.cudaFree(pointer)
            return code, owner

        code, owner = in_a_new_thread(allocate_in_made)
        t.say(f"context {made.handle:#x} current -> cudaMalloc's memory owned by {owner:#x}")
        t.check(code == CUDA_SUCCESS and owner == made.handle, "the runtime allocated in the current context")

    t.step(f"one failure, both APIs: {TOO_MUCH >> 40} TiB")
    pointer = c_void_p()
    runtime_code = cudart.cudaMalloc(byref(pointer), TOO_MUCH)
    runtime_name = cudart.cudaGetErrorName(runtime_code).decode()
    driver = c_uint64()
    primary.activate()
    try:
        cu.cuMemAlloc(byref(driver), TOO_MUCH)
        driver_code = CUDA_SUCCESS
    except CudaError as exc:
        driver_code = exc.code
    t.say(
        f"cudaMalloc -> {runtime_code} ({runtime_name}); cuMemAlloc_v2 -> {driver_code} ({c_name(driver_code)})\n"
        "The same number, two names: cudaError_t and CUresult are separate enums that agree for most codes.\n"
        "A library that mixes them must translate by name where they differ, never assume."
    )
    t.check(runtime_code == driver_code != CUDA_SUCCESS, "both refused it, with the same number")
    t.check(runtime_name != c_name(driver_code), f"named differently: {runtime_name} and {c_name(driver_code)}")

    t.step("cust, and rawcuda")
    t.say(
        "cust (Rust-CUDA at ac2674f) is Driver API only. Its cust::memory::cuda_malloc and cuda_free borrow the\n"
        "runtime's names but call cuMemAlloc and cuMemFree (crates/cust/src/memory/malloc.rs): the seed's\n"
        '"Drop calls cudaFree" is the driver\'s cuMemFree. rawcuda too is Driver API only; it works beside the\n'
        "runtime (torch, CuPy) because with no context of its own it uses the primary context, as the runtime does."
    )


if __name__ == "__main__":
    run(main, "Tutorial 07c: the Runtime API on top of the Driver API, by hand")
