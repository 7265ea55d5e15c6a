"""Layers 0 and 1 on a real GPU: queries, a raw end-to-end kernel, OOM, the stub library, JIT logs."""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterator
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
from pathlib import Path

import numpy as np
import pytest

import rawcuda
from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import JitOption, ProcAddressFlag, ProcAddressQueryResult
from rawcuda.ffi.cuda import TABLE
from rawcuda.ffi.library import dladdr
from rawcuda.ffi.types import CUuuid
from tests.helpers import run_python

pytestmark = pytest.mark.gpu

STUB_CANDIDATES = [
    "/usr/local/cuda/lib64/stubs/libcuda.so",
    "/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so",
]
NAN_BITS = 0x7FC00000
LOG_BYTES = 8192
ONE_TIB = 1 << 40
BLOCK = 256


@pytest.fixture(scope="module")
def primary() -> Iterator[tuple[c_int, c_void_p]]:
    """Device 0's primary context, current on this thread for the module's tests."""
    checked.init()
    dev = c_int()
    cu.cuDeviceGet(byref(dev), 0)
    ctx = c_void_p()
    cu.cuDevicePrimaryCtxRetain(byref(ctx), dev)
    cu.cuCtxPushCurrent(ctx)
    yield dev, ctx
    popped = c_void_p()
    cu.cuCtxPopCurrent(byref(popped))
    cu.cuDevicePrimaryCtxRelease(dev)


def attribute(dev: c_int, which: DeviceAttribute) -> int:
    value = c_int()
    cu.cuDeviceGetAttribute(byref(value), which, dev)
    return value.value


def load_module(ptx: bytes) -> tuple[c_void_p, str, str, Exception | None]:
    info, error = ctypes.create_string_buffer(LOG_BYTES), ctypes.create_string_buffer(LOG_BYTES)
    options = (c_int * 4)(
        JitOption.INFO_LOG_BUFFER,
        JitOption.INFO_LOG_BUFFER_SIZE_BYTES,
        JitOption.ERROR_LOG_BUFFER,
        JitOption.ERROR_LOG_BUFFER_SIZE_BYTES,
    )
    values = (c_void_p * 4)(ctypes.addressof(info), LOG_BYTES, ctypes.addressof(error), LOG_BYTES)
    module = c_void_p()
    failure = None
    try:
        cu.cuModuleLoadDataEx(byref(module), ptx + b"\0", 4, options, values)
    except rawcuda.CudaError as exc:
        failure = exc
    return module, info.value.decode(), error.value.decode(), failure


def test_driver_and_device_queries(primary: tuple[c_int, c_void_p]) -> None:
    dev, _ = primary
    raw = c_int()
    cu.cuDriverGetVersion(byref(raw))
    assert checked.driver_version() == (raw.value // 1000, raw.value % 1000 // 10) >= (12, 0)
    count = c_int()
    cu.cuDeviceGetCount(byref(count))
    assert count.value >= 1
    name = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(name, len(name), dev)
    assert name.value and name.value.decode().isprintable()
    assert attribute(dev, DeviceAttribute.COMPUTE_CAPABILITY_MAJOR) >= 7
    assert attribute(dev, DeviceAttribute.WARP_SIZE) == 32
    assert attribute(dev, DeviceAttribute.MULTIPROCESSOR_COUNT) > 0
    assert attribute(dev, DeviceAttribute.MAX_THREADS_PER_BLOCK) == 1024
    total = c_size_t()
    cu.cuDeviceTotalMem(byref(total), dev)
    free, total_ctx = c_size_t(), c_size_t()
    cu.cuMemGetInfo(byref(free), byref(total_ctx))
    assert total.value == total_ctx.value > 1 << 30 and 0 < free.value <= total.value
    uuid = CUuuid()
    cu.cuDeviceGetUuid(byref(uuid), dev)
    assert any(uuid.bytes)
    bus = ctypes.create_string_buffer(32)
    cu.cuDeviceGetPCIBusId(bus, len(bus), dev)
    assert re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]", bus.value.decode())


@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 1, 1_000_003])
def test_raw_vector_add_end_to_end(primary: tuple[c_int, c_void_p], n: int) -> None:
    rng = np.random.default_rng()
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, 7.0, dtype=np.float32)
    module, _, _, failure = load_module(rawcuda.kernels.ptx_path("vector_add").read_bytes())
    assert failure is None
    kernel = c_void_p()
    cu.cuModuleGetFunction(byref(kernel), module, b"vector_add")
    ptrs = [c_uint64() for _ in range(3)]
    try:
        for p in ptrs:
            cu.cuMemAlloc(byref(p), n * 4)
        d_c, d_a, d_b = ptrs
        cu.cuMemcpyHtoD(d_a, a.ctypes.data, n * 4)
        cu.cuMemcpyHtoD(d_b, b.ctypes.data, n * 4)
        cu.cuMemsetD32(d_c, NAN_BITS, n)  # poison: a kernel that writes nothing leaves NaN
        values = [c_uint64(d_c.value), c_uint64(d_a.value), c_uint64(d_b.value), c_size_t(n)]
        params = (c_void_p * 4)(*[ctypes.addressof(v) for v in values])
        grid = (n + BLOCK - 1) // BLOCK
        cu.cuLaunchKernel(kernel, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
        cu.cuCtxSynchronize()
        cu.cuMemcpyDtoH(out.ctypes.data, d_c, n * 4)
    finally:
        for p in ptrs:
            if p.value:
                cu.cuMemFree(p)
        cu.cuModuleUnload(module)
    np.testing.assert_array_equal(out, a + b)


def test_one_tib_allocation_is_out_of_memory_with_requested_and_available(primary: tuple[c_int, c_void_p]) -> None:
    free_before, total = c_size_t(), c_size_t()
    cu.cuMemGetInfo(byref(free_before), byref(total))
    ptr = c_uint64()
    with pytest.raises(rawcuda.OutOfMemoryError) as info:
        cu.cuMemAlloc(byref(ptr), ONE_TIB)
    err = info.value
    assert err.code == 2 and err.call == "cuMemAlloc" and err.symbol == "cuMemAlloc_v2"
    assert err.requested == ONE_TIB
    assert err.available is not None and 0 < err.available <= total.value
    assert "requested 1.00 TiB" in str(err) and isinstance(err, MemoryError)
    assert err.description  # the driver's own words, from cuGetErrorString


def test_invalid_ptx_is_a_module_load_error_with_the_jit_log(primary: tuple[c_int, c_void_p]) -> None:
    bad = b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken() { this is not ptx; }\n"
    _, _, error_log, failure = load_module(bad)
    assert isinstance(failure, rawcuda.ModuleLoadError), failure
    assert failure.code == rawcuda.Result.ERROR_INVALID_PTX
    assert error_log.strip(), "the JIT should explain itself in the error log"


def test_missing_kernel_is_not_found(primary: tuple[c_int, c_void_p]) -> None:
    module, _, _, failure = load_module(rawcuda.kernels.ptx_path("vector_add").read_bytes())
    assert failure is None
    try:
        with pytest.raises(rawcuda.NotFoundError) as info:
            cu.cuModuleGetFunction(byref(c_void_p()), module, b"vector_sub")
        assert 'extern "C"' in str(info.value) and "name=b'vector_sub'" in str(info.value)
    finally:
        cu.cuModuleUnload(module)


def test_get_proc_address_finds_the_tables_symbol(primary: tuple[c_int, c_void_p]) -> None:
    driver = cu.library()
    for name in ("cuMemAlloc", "cuCtxCreate", "cuLaunchKernel", "cuMemcpyHtoDAsync", "cuStreamBeginCapture"):
        pfn, status = c_void_p(), c_int()
        cu.cuGetProcAddress(name.encode(), byref(pfn), 13000, ProcAddressFlag.DEFAULT, byref(status))
        assert status.value == ProcAddressQueryResult.SUCCESS
        expected = ctypes.cast(driver.handle[TABLE[name].symbol], c_void_p).value
        assert pfn.value == expected, (name, TABLE[name].symbol, symbol_at(pfn.value))
    # An old CUDA version asks for the old ABI: cuMemAlloc as of CUDA 3.1 is the 32-bit symbol.
    pfn, status = c_void_p(), c_int()
    cu.cuGetProcAddress(b"cuMemAlloc", byref(pfn), 3010, ProcAddressFlag.DEFAULT, byref(status))
    if status.value == ProcAddressQueryResult.SUCCESS:
        assert pfn.value != ctypes.cast(driver.handle["cuMemAlloc_v2"], c_void_p).value


def symbol_at(address: int | None) -> str:
    """The exported name nearest to ``address`` (for a readable assertion message)."""
    info = dladdr(address or 0)
    return info.dli_sname.decode() if info is not None and info.dli_sname else "?"


def test_stub_library_gives_the_stub_error() -> None:
    stub = next((p for p in STUB_CANDIDATES if os.path.exists(p)), None)
    if stub is None:
        pytest.skip("no toolkit stub libcuda on this machine")
    proc = run_python(
        "import rawcuda\ntry:\n    rawcuda.init()\nexcept rawcuda.StubLibraryError as e:\n    print('RAISED', e)\n",
        RAWCUDA_LIBCUDA=stub,
    )
    assert "RAISED cuInit(Flags=0) failed: CUDA_ERROR_STUB_LIBRARY (34)" in proc.stdout, proc.stdout + proc.stderr
    assert f"libcuda: {Path(stub).resolve()}" in proc.stdout and "RAWCUDA_LIBCUDA" in proc.stdout
