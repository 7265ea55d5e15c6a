"""cuGetProcAddress against the table's dlsym'd symbols, on a real driver (addresses named with dladdr)."""

from __future__ import annotations

import ctypes
from ctypes import c_void_p

import pytest

from rawcuda.checked import cu
from rawcuda.checked.procaddress import (
    ProcAddressError,
    describe,
    driver_cuda_version,
    driver_function_name,
    proc_address,
    table_address,
)
from rawcuda.ffi.constants import ProcAddressFlag, ProcAddressQueryResult
from tests.helpers import run_python

pytestmark = pytest.mark.gpu

ROWS = [
    "cuInit",
    "cuDriverGetVersion",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemGetInfo",
    "cuDeviceTotalMem",
    "cuCtxCreate",
    "cuCtxDestroy",
    "cuModuleLoadDataEx",
    "cuLaunchKernel",
    "cuMemcpyHtoD",
    "cuMemcpyHtoDAsync",
    "cuStreamBeginCapture",
    "cuMemAddressReserve",
    "cuMemCreate",
    "cuMemPrefetchAsync",
    "cuMemAdvise",
    "cuGraphInstantiate",  # a cuda.h *rename* (to cuGraphInstantiateWithFlags): asked for by the target's name
]
CUDA_3_1 = 3010  # before CUDA 3.2 widened sizes and pointers to 64 bits (the _v2 functions)
CUDA_10_0 = 10000  # before virtual memory management (CUDA 10.2)


def dlsym(symbol: str) -> int | None:
    try:
        return ctypes.cast(cu.library().handle[symbol], c_void_p).value
    except AttributeError:
        return None


@pytest.mark.parametrize("name", ROWS)
def test_proc_address_is_the_tables_symbol(name: str) -> None:
    asked = driver_function_name(name)
    got, bound = proc_address(asked), table_address(name)
    assert got == bound, f"{name}: cuGetProcAddress({asked!r}) -> {describe(got)}; table -> {describe(bound)}"


def test_driver_version_is_the_default() -> None:
    version = driver_cuda_version()
    assert version >= 12000
    assert proc_address("cuMemAlloc") == proc_address("cuMemAlloc", version)


def test_an_old_version_gets_the_old_32_bit_abi() -> None:
    old, new = proc_address("cuMemAlloc", CUDA_3_1), proc_address("cuMemAlloc")
    assert old != new == dlsym("cuMemAlloc_v2")
    assert old == dlsym("cuMemAlloc"), f"CUDA 3.1's cuMemAlloc -> {describe(old)}"  # the plain, 32-bit symbol


def test_graph_instantiate_by_its_cuda_h_name_is_the_old_function() -> None:
    # cuda.h (12+) says `#define cuGraphInstantiate cuGraphInstantiateWithFlags`; the driver's lookup knows
    # functions, not macros, so "cuGraphInstantiate" answers with the newest function *of that name*:
    # cudaTypedefs.h lists versions 10.0 and 11.0, both with the five-argument signature (cuGraphInstantiate_v2).
    by_name = proc_address("cuGraphInstantiate")
    with_flags = table_address("cuGraphInstantiate")
    five_args = dlsym("cuGraphInstantiate_v2")
    seen = (
        f"cuGetProcAddress('cuGraphInstantiate') -> {describe(by_name)}; cuGraphInstantiateWithFlags -> "
        f"{describe(with_flags)}; cuGraphInstantiate_v2 -> {describe(five_args)}"
    )
    assert by_name != with_flags, seen
    assert by_name == five_args, seen
    assert proc_address("cuGraphInstantiateWithFlags") == with_flags, seen


# Run in a fresh interpreter: if the three-argument call were wrong for that address, only the child dies.
CALL_WITH_FLAGS = """
import ctypes
from ctypes import byref, c_int, c_ulonglong, c_void_p, POINTER
import rawcuda
from rawcuda.checked import cu
from rawcuda.checked.procaddress import proc_address
ctx = rawcuda.default_context(); ctx.activate()
graph, exec_ = c_void_p(), c_void_p()
cu.cuGraphCreate(byref(graph), 0)
fn = ctypes.CFUNCTYPE(c_int, POINTER(c_void_p), c_void_p, c_ulonglong)(proc_address("cuGraphInstantiateWithFlags"))
print("RESULT", fn(byref(exec_), graph, 0), bool(exec_.value))
cu.cuGraphExecDestroy(exec_.value); cu.cuGraphDestroy(graph.value)
"""


def test_the_with_flags_entry_point_instantiates_a_graph() -> None:
    proc = run_python(CALL_WITH_FLAGS)
    assert "RESULT 0 True" in proc.stdout, proc.stdout + proc.stderr


def test_per_thread_default_stream_variant() -> None:
    legacy = proc_address("cuMemcpyHtoD", flags=ProcAddressFlag.LEGACY_STREAM)
    per_thread = proc_address("cuMemcpyHtoD", flags=ProcAddressFlag.PER_THREAD_DEFAULT_STREAM)
    assert legacy == table_address("cuMemcpyHtoD") != per_thread
    assert per_thread == dlsym("cuMemcpyHtoD_v2_ptds"), describe(per_thread)


def test_unknown_function_and_too_old_version_are_clear_errors() -> None:
    with pytest.raises(ProcAddressError) as info:
        proc_address("cuNoSuchFunction")
    assert info.value.status == ProcAddressQueryResult.SYMBOL_NOT_FOUND and "no function called" in str(info.value)
    with pytest.raises(ProcAddressError) as info:
        proc_address("cuMemAddressReserve", CUDA_10_0)
    err = info.value
    assert err.status == ProcAddressQueryResult.VERSION_NOT_SUFFICIENT and err.cuda_version == CUDA_10_0
    assert "not in a version as old as CUDA 10.0" in str(err) and isinstance(err, LookupError)
