"""Tutorial 05a -- error codes: each driver call returns a CUresult number; read it by hand, in rawcuda, in cust.

The CUDA driver never throws. Each call returns a ``CUresult``, a C enum (an int): ``0`` is CUDA_SUCCESS,
anything else is a code, and nothing stops a program from ignoring it. This tutorial makes one call fail on
purpose -- it asks ``cuDeviceGet`` for a device ordinal that does not exist -- and reads the answer three ways:

1. by hand, through ctypes: the bare integer, then ``cuGetErrorName`` and ``cuGetErrorString`` to name it;
2. with rawcuda: the same call through the checked table raises ``DeviceError``, whose message holds the
   call, its arguments, the code, the driver's words and a hint; ``rawcuda.Device`` checks the ordinal
   before the driver is even asked;
3. with cust, whose ``CudaError`` the seed article's case 4 wraps in its ``GpuError``:
   ``Device::get_device(n)`` returns ``Err(CudaError::InvalidDevice)``, an enum variant with no payload.

Then it checks rawcuda's table of codes against the driver's own names, lists the codes cust's enum does not
have (each of them becomes ``CudaError::UnknownError``), and shows that an ordinary error like this one leaves
the context working (tutorial 05f shows the errors that do not).

Run:  python tutorials/05a_error_codes.py [--step]
"""

from __future__ import annotations

import ctypes
import textwrap
from ctypes import POINTER, byref, c_char_p, c_int, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, ops
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

CUDA_SUCCESS = 0
N = 1 << 20  # elements of the vector add that shows the context still works
NAN32 = np.float32(np.nan)  # poison: an output the kernel never wrote stays NaN and fails the check
WRAP = 100  # characters per line of the list of codes cust lacks

# The numbers in cust 0.3.2's `CudaError` enum (crates/cust/src/error.rs, Rust-GPU/Rust-CUDA commit ac2674f),
# without cust's own two (InvalidMemoryAllocation = 100_100, OptixError = 100_101). Its `to_result` maps every
# other CUresult to `CudaError::UnknownError` (999).
CUST_CUDA_ERROR_CODES = frozenset(
    {1, 2, 3, 4, 5, 6, 7, 8, 100, 101, 200, 201, 202, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216}
    | {217, 218, 219, 220, 222, 300, 301, 302, 303, 304, 400, 500, 600, 700, 701, 702, 703, 704, 705, 708, 709}
    | {710, 711, 712, 713, 714, 715, 716, 717, 718, 719, 800, 801, 999}
)


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def main(t: Tutorial) -> None:
    t.words("cust", "context", "primary context", "CUresult", "PTX", "errcheck")
    t.step("the GPU and its primary context (rawcuda opens libcuda and calls cuInit here)")
    ctx = rawcuda.default_context()
    ctx.activate()
    count = rawcuda.Device.count()
    bad_ordinal = count  # one past the last valid ordinal: there is no such device
    t.say(f"{count} GPU(s) visible, ordinals 0..{count - 1}; device 0 is {ctx.device.name}")

    t.step(f"by hand: cuDeviceGet(&dev, {bad_ordinal}) through ctypes returns a bare integer")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened: dlopen returns the same handle
    cuDeviceGet = declare(libcuda, "cuDeviceGet", POINTER(c_int), c_int)
    cuGetErrorName = declare(libcuda, "cuGetErrorName", c_int, POINTER(c_char_p))
    cuGetErrorString = declare(libcuda, "cuGetErrorString", c_int, POINTER(c_char_p))
    cuCtxGetCurrent = declare(libcuda, "cuCtxGetCurrent", POINTER(c_void_p))
    current = c_void_p()
    t.check(
        cuCtxGetCurrent(byref(current)) == CUDA_SUCCESS and current.value == ctx.handle,
        "cuCtxGetCurrent by hand returns the CUcontext rawcuda made current: both ways see one driver",
    )
    dev = c_int(-1)
    t.check(
        cuDeviceGet(byref(dev), 0) == CUDA_SUCCESS and dev.value == ctx.device.handle,
        f"cuDeviceGet(&dev, 0) returns 0 (CUDA_SUCCESS) and CUdevice {dev.value}, the one rawcuda holds",
    )
    rc = cuDeviceGet(byref(dev), bad_ordinal)
    name, text = c_char_p(), c_char_p()
    name_rc = cuGetErrorName(rc, byref(name))
    text_rc = cuGetErrorString(rc, byref(text))
    t.say(
        "the C prototypes, and what came back:\n"
        "  CUresult cuDeviceGet(CUdevice *device, int ordinal);\n"
        "  CUresult cuGetErrorName(CUresult error, const char **pStr);\n"
        "  CUresult cuGetErrorString(CUresult error, const char **pStr);\n"
        f"  rc = cuDeviceGet(byref(dev), {bad_ordinal})  -> {rc}\n"
        f"  cuGetErrorName({rc}, byref(name))          -> {name_rc}, name = {name.value!r}\n"
        f"  cuGetErrorString({rc}, byref(text))        -> {text_rc}, text = {text.value!r}\n"
        "ctypes raised nothing: the failure is an int the program must look at, or it goes unnoticed."
    )
    t.check(rc == Result.ERROR_INVALID_DEVICE, f"cuDeviceGet answered {rc}: CUDA_ERROR_INVALID_DEVICE is 101 in cuda.h")
    t.check(
        name_rc == CUDA_SUCCESS and name.value == b"CUDA_ERROR_INVALID_DEVICE",
        "cuGetErrorName names it CUDA_ERROR_INVALID_DEVICE",
    )
    t.check(text_rc == CUDA_SUCCESS and bool(text.value), "cuGetErrorString describes it in words")
    raw_name = (name.value or b"").decode()
    raw_text = (text.value or b"").decode()

    t.step("rawcuda: the same call through the checked table raises -- and the message says what happened")
    try:
        cu.cuDeviceGet(byref(dev), bad_ordinal)
    except rawcuda.DeviceError as exc:
        error = exc
    else:
        raise TutorialCheckError(f"cu.cuDeviceGet(&dev, {bad_ordinal}) raised nothing")
    t.say(
        f"cu.cuDeviceGet(byref(dev), {bad_ordinal})\n  -> {type(error).__name__}: "
        + str(error).replace("\n", "\n     ")
    )
    t.check(
        error.code == rc and error.name == raw_name, f"the exception carries the same code: {error.code}, {error.name}"
    )
    t.check(error.description == raw_text, "and the driver's own words, from cuGetErrorString")
    t.check(error.call == "cuDeviceGet", "and the call that failed, with its arguments")
    t.check(isinstance(error, rawcuda.CudaError), "DeviceError is a CudaError: `except rawcuda.CudaError` catches it")
    t.say(
        "the checked table turns every non-zero CUresult into an exception in one place (a ctypes errcheck),\n"
        "of a class that says what you would do: DeviceError, OutOfMemoryError (05e), ModuleLoadError (05b),\n"
        "NotFoundError (05c), KernelFaultError (05f) ..."
    )
    try:
        rawcuda.Device(bad_ordinal)
    except ValueError as exc:
        t.say(f"rawcuda.Device({bad_ordinal})\n  -> {type(exc).__name__}: {exc}")
        t.check(
            not isinstance(exc, rawcuda.CudaError),
            "rawcuda.Device checks the ordinal itself, before any driver call: a ValueError, not a CudaError",
        )
    else:
        raise TutorialCheckError(f"rawcuda.Device({bad_ordinal}) raised nothing")

    t.step("cust: Device::get_device returns Err(CudaError::InvalidDevice) -- an enum with no payload")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/device.rs and error.rs):\n"
        f"  match Device::get_device({bad_ordinal}) {{     // cuDeviceGet(&mut device, ordinal).to_result()\n"
        "      Ok(device) => ...,\n"
        '      Err(e) => println!("{e:?}: {e}"),\n'
        "  }\n"
        "would print:\n"
        f'  InvalidDevice: "{raw_text}"\n'
        "(Debug gives the variant; Display asks cuGetErrorString and writes the C string with {:?}, quotes\n"
        "included). The variant is all a cust error holds: not the call, not its arguments -- for an OOM\n"
        "not the size asked for (05e), for bad PTX not the compiler's log (05b). The seed's GpuError adds\n"
        "OutOfMemory { requested, available } for that reason; the caller has to fill both in."
    )
    missing = [code for code in Result if code != Result.SUCCESS and int(code) not in CUST_CUDA_ERROR_CODES]
    listing = ", ".join(f"{code.name.removeprefix('ERROR_')}({int(code)})" for code in missing)
    t.say(
        f"cuda.h 13 has {len(Result) - 1} error codes; cust's enum has {len(CUST_CUDA_ERROR_CODES)} of them. "
        f"The other {len(missing)}\nall become CudaError::UnknownError (999), so a program cannot tell them apart:\n"
        + textwrap.fill(listing, WRAP, initial_indent="  ", subsequent_indent="  ")
    )
    t.check(
        Result.ERROR_INVALID_DEVICE in CUST_CUDA_ERROR_CODES and Result.ERROR_STUB_LIBRARY in missing,
        "INVALID_DEVICE (101) is in cust's enum; STUB_LIBRARY (34, the toolkit's stub libcuda) is not",
    )

    t.step("rawcuda's table of codes, checked against the driver's own names")
    unnamed: list[Result] = []
    mismatched: list[str] = []
    for code in Result:
        code_name = c_char_p()
        if cuGetErrorName(code, byref(code_name)) != CUDA_SUCCESS or code_name.value is None:
            unnamed.append(code)  # cuda.h: an unrecognized code gives CUDA_ERROR_INVALID_VALUE and NULL
        elif code_name.value.decode() != "CUDA_" + code.name:
            mismatched.append(f"{int(code)}: rawcuda {code.name}, driver {code_name.value.decode()}")
    t.check(
        not mismatched,
        f"for each of the {len(Result) - len(unnamed)} codes this driver names, rawcuda.Result has the same "
        "number under the same name" + (f" (mismatches: {mismatched})" if mismatched else ""),
    )
    if unnamed:
        t.say(f"this driver names none of {[int(c) for c in unnamed]}: codes newer than the driver")
    t.say(
        "rawcuda.Result is read from cuda.h by the header check (tests/cpu); a code missing from it would still\n"
        "be reported, as 'CUresult <number>', never mapped onto another one."
    )

    t.step("an ordinary error leaves the context working: a vector add right after it")
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(NAN32)
        ops.vector_add(dc, da, db)
        t.check(bool(np.array_equal(dc.to_array(), a + b)), f"all {N:,} sums equal numpy's a + b exactly")
    t.check(ctx.poisoned is None, "the context was never poisoned: INVALID_DEVICE is about one call only")


if __name__ == "__main__":
    run(main, "Tutorial 05a: error codes -- the bare CUresult, rawcuda's exceptions, cust's CudaError")
