"""The exception layer on its own: classes per code, hints, messages, pickling (CPU only)."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

import rawcuda
from rawcuda.checked import errors
from rawcuda.checked.classify import error_class
from rawcuda.checked.errors import CudaError, OutOfMemoryError, format_bytes
from rawcuda.ffi.results import STICKY, Result, c_name


def test_every_code_has_a_class_and_a_name() -> None:
    for code in Result:
        cls = error_class(code)
        assert issubclass(cls, CudaError)
        err = cls(code, call="cuX")
        assert err.name == "CUDA_" + code.name and err.code == code
        assert err.description  # falls back to a readable form of the name without a driver


def test_hints_are_keyed_by_real_codes_and_say_something() -> None:
    for code, hint in errors.HINTS.items():
        assert Result(code) is not None and len(hint) > 30


def test_categories() -> None:
    assert error_class(Result.ERROR_OUT_OF_MEMORY) is OutOfMemoryError
    assert error_class(Result.ERROR_STUB_LIBRARY) is rawcuda.StubLibraryError
    assert error_class(Result.ERROR_NO_DEVICE) is rawcuda.NoDeviceError
    assert error_class(Result.ERROR_UNSUPPORTED_PTX_VERSION) is rawcuda.ModuleLoadError
    assert error_class(Result.ERROR_NOT_FOUND) is rawcuda.NotFoundError
    assert error_class(Result.ERROR_STREAM_CAPTURE_IMPLICIT) is rawcuda.StreamCaptureError
    assert all(error_class(code) is rawcuda.KernelFaultError for code in STICKY)
    assert issubclass(rawcuda.KernelFaultError, rawcuda.LaunchError)
    assert error_class(12345) is CudaError


def test_message_names_the_call_symbol_arguments_code_and_hint() -> None:
    err = error_class(222)(
        222,
        call="cuModuleLoadDataEx",
        symbol="cuModuleLoadDataEx",
        arguments="module=&c_void_p",
        description="the provided PTX was compiled with an unsupported toolchain.",
        details=["PTX .version 9.1, driver accepts up to 9.0"],
    )
    text = str(err)
    assert text.startswith("cuModuleLoadDataEx(module=&c_void_p) failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)")
    assert "PTX .version 9.1" in text and "Fix 1: update the NVIDIA driver" in text and "Fix 2" in text
    versioned = CudaError(2, call="cuMemAlloc", symbol="cuMemAlloc_v2")
    assert str(versioned).startswith("cuMemAlloc [cuMemAlloc_v2]() failed")


def test_unknown_codes_are_kept() -> None:
    err = CudaError(4242)
    assert err.code == 4242 and err.result is None and err.name == c_name(4242) == "CUresult 4242"
    assert "does not know" in str(err)


def test_out_of_memory_fields() -> None:
    err = OutOfMemoryError(2, requested=3 << 30, available=1 << 30, call="cuMemAlloc")
    assert (err.requested, err.available) == (3 << 30, 1 << 30)
    assert isinstance(err, MemoryError)
    assert "requested 3.00 GiB (3221225472 bytes); device memory available: 1.00 GiB (1073741824 bytes)" in str(err)
    unknown = OutOfMemoryError(2, requested=10)
    assert "available: unknown" in str(unknown)


@pytest.mark.parametrize(
    "err",
    [
        OutOfMemoryError(2, requested=5, available=1, call="cuMemAlloc"),
        rawcuda.KernelFaultError(700, call="cuCtxSynchronize", details=["x"]),
        CudaError(4242, call="cuY"),
    ],
)
def test_errors_survive_pickling(err: CudaError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.code == err.code
    assert back.__dict__ == err.__dict__


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 bytes"
    assert format_bytes(1023) == "1023 bytes"
    assert format_bytes(1024) == "1.00 KiB (1024 bytes)"
    assert format_bytes(1 << 40) == "1.00 TiB (1099511627776 bytes)"


HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"


@pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER}")
def test_sticky_codes_are_the_ones_cuda_h_says_end_the_process() -> None:
    # cuda.h documents each sticky code: "To continue using CUDA, the process must be terminated and
    # relaunched" (ASSERT: "the context cannot be used anymore, and must be destroyed"). STICKY once
    # missed LAUNCH_TIMEOUT, CONTAINED and EXTERNAL_DEVICE, so they raised no KernelFaultError and
    # poisoned nothing.
    text = HEADER.read_text()
    documented = set()
    for m in re.finditer(r"/\*\*((?:(?!\*/).)*)\*/\s*CUDA_(ERROR_\w+)\s*=\s*\d+", text, re.S):
        comment = " ".join(m.group(1).replace("*", " ").split())
        if "must be terminated and relaunched" in comment or "cannot be used anymore" in comment:
            documented.add(m.group(2))
    assert documented == {code.name for code in STICKY}
    assert all(error_class(code) is rawcuda.KernelFaultError for code in STICKY)


@pytest.mark.parametrize("cls", [rawcuda.DriverNotFoundError, rawcuda.NvrtcNotFoundError])
def test_library_errors_pickle(cls: type[rawcuda.RawCudaError]) -> None:
    # Their constructor takes the search (candidates, env var), not the message: the default pickling of
    # exceptions called it with the message alone and failed, so a worker process could not report one.
    error = cls([("/opt/x/lib.so", "no such file"), ("lib.so", "not found")], env_var="X_LIB", env_set=False)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == str(error) and again.tried == error.tried
    assert isinstance(again, OSError)
