"""The hand-written pieces tutorials 00a and 00b share: C types, CUresult codes, one errcheck, the no-GPU exit.

Tutorial 00a writes the driver glue by hand and explains each piece; 00b uses the same pieces to launch a
kernel. What both need is here, once, and written the same bare way -- ctypes and the standard library,
nothing of rawcuda (tests/cpu/test_tutorial_raw.py reads this file's imports to hold it to that):

* the C types of cuda.h's typedefs, spelled in ctypes (``CUresult = c_int`` ...);
* the few CUresult numbers the two tutorials meet, and which of them mean "no usable GPU here";
* :func:`error_name` (``cuGetErrorName``), :class:`DriverError` and :func:`make_errcheck`, the one
  ``errcheck`` every declared function gets -- 00a shows it and explains it;
* :func:`library_name` (the soname, or ``$RAWCUDA_LIBCUDA``), :func:`mapped_file`, :func:`skip`,
  :func:`expect_failure` and :func:`header_lines`, small helpers of the steps.

The declarations themselves (``restype``/``argtypes``) are not here: each tutorial writes out its own, in
its own file, because declaring is what 00a teaches and what 00b's reader must see beside each call.
``error_name`` and the errcheck call ``lib.cuGetErrorName``, so a tutorial declares it before using them.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable
from ctypes import byref, c_char_p, c_int, c_uint64, c_void_p
from pathlib import Path
from typing import Any, NoReturn

from _tutorial import EXIT_NO_GPU, TutorialCheckError, recording_note

CUDA_H = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"
SONAME = "libcuda.so.1"
OVERRIDE_ENV = "RAWCUDA_LIBCUDA"  # rawcuda's own override: the file to open instead of the soname

# The CUresult codes the tutorials meet (cuda.h, enum cudaError_enum).
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
NO_GPU_CODES = {CUDA_ERROR_STUB_LIBRARY: "the toolkit's stub libcuda", CUDA_ERROR_NO_DEVICE: "no CUDA device"}
LOW_32_BITS = 0xFFFFFFFF  # what survives of a 64-bit value passed or returned as a 32-bit C int

# ---- C types, spelled in ctypes (what cuda.h's typedefs are on 64-bit Linux) ----------------------------
CUresult = c_int  # typedef enum cudaError_enum CUresult: an enum is a 4-byte int
CUdevice = c_int  # typedef int CUdevice
CUdeviceptr = c_uint64  # typedef unsigned long long CUdeviceptr: a number, never dereferenced by the host
CUcontext = CUmodule = CUfunction = CUstream = c_void_p  # typedef struct CUctx_st *CUcontext ...: handles


class DriverError(RuntimeError):
    """A non-zero CUresult, with its number and the driver's name for it."""

    def __init__(self, code: int, name: str, call: str) -> None:
        self.code, self.name, self.call = code, name, call
        super().__init__(f"{call} returned {code} ({name})")


def error_name(lib: Any, code: int) -> str:
    """cuGetErrorName: the driver's name for a code (an out-parameter: a const char * it owns)."""
    text = c_char_p()
    if lib.cuGetErrorName(code, byref(text)) != CUDA_SUCCESS or text.value is None:
        return "an unknown code"
    return text.value.decode()


def make_errcheck(lib: Any) -> Any:
    """One errcheck for every function: ctypes calls it with each result; a non-zero one raises."""

    def errcheck(result: int, func: Any, args: tuple[Any, ...]) -> int:
        if result != CUDA_SUCCESS:
            raise DriverError(result, error_name(lib, result), func.__name__)
        return result

    return errcheck


def library_name() -> str:
    """The file to dlopen: ``$RAWCUDA_LIBCUDA`` when set (the CPU tests' fake), else the driver's soname."""
    return os.environ.get(OVERRIDE_ENV) or SONAME


def skip(why: str) -> NoReturn:
    """No usable GPU: the frame's one-line skip (tutorials/README.md, "Exit statuses"), status 77.

    Like the frame's, the line says where the calling tutorial's run recorded on a GPU is.
    """
    caller = inspect.currentframe()
    caller = caller.f_back if caller is not None else None  # the tutorial that gave up: its file names its recording
    script = Path(caller.f_code.co_filename) if caller is not None else None
    print(f"skipped: no usable GPU here ({why}){recording_note(script)}")
    sys.exit(EXIT_NO_GPU)


def expect_failure(call: Callable[[], object], what: str) -> DriverError:
    """Run ``call``, which must fail: the DriverError its errcheck raised."""
    try:
        call()
    except DriverError as exc:
        return exc
    raise TutorialCheckError(f"{what} should have failed, and did not")


def mapped_file(requested: str) -> str:
    """The file the loader really opened for ``requested``, from this process's memory map (Linux)."""
    stem = Path(requested).name.split(".so")[0]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if Path(path).name.startswith(stem + "."):
                    return path
    except OSError:
        pass
    return "(not known on this system)"


def header_lines(pattern: str, fallback: str) -> str:
    """The lines of cuda.h matching ``pattern`` -- or, without a toolkit, what CUDA 13.0's cuda.h says."""
    if CUDA_H.is_file():
        found = [line.strip() for line in CUDA_H.read_text(errors="replace").splitlines() if re.search(pattern, line)]
        if found:
            return "\n".join(f"{CUDA_H}: {line}" for line in found)
    return f"(no cuda.h at {CUDA_H}; CUDA 13.0's reads:) {fallback}"


__all__ = [
    "CUDA_ERROR_INVALID_DEVICE",
    "CUDA_ERROR_NO_DEVICE",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUDA_ERROR_STUB_LIBRARY",
    "CUDA_H",
    "CUDA_SUCCESS",
    "LOW_32_BITS",
    "NO_GPU_CODES",
    "OVERRIDE_ENV",
    "SONAME",
    "CUcontext",
    "CUdevice",
    "CUdeviceptr",
    "CUfunction",
    "CUmodule",
    "CUresult",
    "CUstream",
    "DriverError",
    "error_name",
    "expect_failure",
    "header_lines",
    "library_name",
    "make_errcheck",
    "mapped_file",
    "skip",
]
