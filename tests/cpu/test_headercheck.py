"""The declaration table, proven against the CUDA 13 cuda.h on this machine (CPU only).

Each row is its own test case, so a drifting declaration names itself. The second half proves the
checker can fail: it is fed wrong rows, constants and structs, and must report each mismatch.
"""

from __future__ import annotations

import ctypes
import os
from enum import IntEnum
from pathlib import Path

import pytest

from rawcuda.ffi.constants import C_DEFINES, C_ENUMS, StreamFlag
from rawcuda.ffi.cuda import SECTIONS, TABLE
from rawcuda.ffi.decl import Decl, decl
from rawcuda.ffi.results import Result
from rawcuda.ffi.types import STRUCTS, CUdeviceptr, CUmemLocation, P
from rawcuda.tools import cheader, headercheck

HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"
pytestmark = pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER} (set CUDA_HOME)")


@pytest.fixture(scope="module")
def header() -> cheader.Header:
    return cheader.parse(str(HEADER))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_table_row_matches_cuda_h(header: cheader.Header, name: str) -> None:
    assert headercheck.check_decl(TABLE[name], header) == []


def test_every_enum_member_and_define_matches_cuda_h(header: cheader.Header) -> None:
    assert headercheck.check_constants(header) == []
    assert sum(len(cls.__members__) for cls in C_ENUMS) > 300  # the check covered real ground


def test_result_table_is_complete(header: cheader.Header) -> None:
    codes = header.enum_of("CUresult")
    assert codes is not None and len(codes) == len(Result)
    assert codes["CUDA_ERROR_STUB_LIBRARY"] == Result.ERROR_STUB_LIBRARY == 34


def test_struct_layouts_match_the_c_compiler() -> None:
    if headercheck.find_compiler() is None:
        pytest.skip("no C compiler to lay out the structs")
    assert headercheck.struct_layout_problems(str(HEADER)) == []


def test_symbols_are_the_versioned_ones_cuda_h_selects(header: cheader.Header) -> None:
    assert TABLE["cuMemAlloc"].symbol == header.symbol_for("cuMemAlloc") == "cuMemAlloc_v2"
    assert TABLE["cuCtxCreate"].symbol == header.symbol_for("cuCtxCreate") == "cuCtxCreate_v4"
    assert TABLE["cuGraphInstantiate"].symbol == "cuGraphInstantiateWithFlags"
    # Routed through __CUDA_API_PTSZ(...): the default (legacy-stream) variant, not the _ptsz one.
    assert header.symbol_for("cuMemPrefetchAsync") == "cuMemPrefetchAsync_v2"
    assert header.symbol_for("cuLaunchKernel") == "cuLaunchKernel"


def test_preprocessor_skips_the_old_abi_block(header: cheader.Header) -> None:
    # cuda.h re-declares the 32-bit cuMemAlloc inside #if defined(__CUDA_API_VERSION_INTERNAL); a parser
    # without conditionals would pick it up. Prove that text is really there, and that we skipped it.
    assert "CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)" in " ".join(
        HEADER.read_text().split()
    )
    assert header.prototypes["cuMemAlloc"] == ("CUdeviceptr *dptr", "size_t bytesize")
    assert header.resolve("CUdeviceptr").size == 8  # the __LP64__ branch


def test_the_table_covers_what_the_foundation_needs() -> None:
    required = {
        "cuInit",
        "cuDriverGetVersion",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDeviceTotalMem",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuCtxCreate",
        "cuCtxDestroy",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemHostAlloc",
        "cuMemFreeHost",
        "cuMemAllocManaged",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemsetD32",
        "cuMemsetD8Async",
        "cuMemGetInfo",
        "cuPointerGetAttribute",
        "cuMemPrefetchAsync",
        "cuMemAdvise",
        "cuModuleLoadData",
        "cuModuleLoadDataEx",
        "cuModuleUnload",
        "cuModuleGetFunction",
        "cuModuleGetGlobal",
        "cuFuncGetAttribute",
        "cuFuncSetAttribute",
        "cuFuncGetParamInfo",
        "cuLaunchKernel",
        "cuLaunchCooperativeKernel",
        "cuLaunchHostFunc",
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        "cuStreamCreate",
        "cuStreamCreateWithPriority",
        "cuStreamSynchronize",
        "cuEventCreate",
        "cuEventRecord",
        "cuEventElapsedTime",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuGraphCreate",
        "cuGraphAddKernelNode",
        "cuGraphInstantiate",
        "cuGraphLaunch",
        "cuGraphExecUpdate",
        "cuGraphDestroy",
        "cuGraphExecDestroy",
        "cuMemAddressReserve",
        "cuMemCreate",
        "cuMemMap",
        "cuMemSetAccess",
        "cuMemGetAllocationGranularity",
        "cuGetProcAddress",
        "cuLinkCreate",
        "cuLinkAddData",
        "cuLinkComplete",
    }
    assert required <= set(TABLE), sorted(required - set(TABLE))
    assert sum(len(entries) for entries in SECTIONS.values()) == len(TABLE)


# --- the checker can fail ---------------------------------------------------------------------------
MEMALLOC = "CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (decl(MEMALLOC, "cuMemAlloc", P(CUdeviceptr), ctypes.c_size_t), "maps cuMemAlloc to cuMemAlloc_v2"),
        (decl(MEMALLOC, "cuMemAlloc_v2", P(ctypes.c_uint), ctypes.c_size_t), "pointee differs"),
        (decl(MEMALLOC, "cuMemAlloc_v2", P(CUdeviceptr), ctypes.c_uint), "unsigned 4-byte int"),
        (decl(MEMALLOC, "cuMemAlloc_v2", P(CUdeviceptr), ctypes.c_ssize_t), "signed 8-byte int"),
        (decl(MEMALLOC, "cuMemAlloc_v2", P(CUdeviceptr), ctypes.c_double), "8-byte float"),
        (decl(MEMALLOC, "cuMemAlloc_v2", ctypes.c_void_p, ctypes.c_size_t), None),  # void* for an out-pointer: ok
        (decl(MEMALLOC, "cuMemAlloc_v2", CUdeviceptr, ctypes.c_size_t), "C has pointer"),
        (
            decl(
                "CUresult cuMemAlloc(CUdeviceptr *dptr, unsigned int bytesize)",
                "cuMemAlloc_v2",
                P(CUdeviceptr),
                ctypes.c_size_t,
            ),
            "prototype differs",
        ),
        (
            decl(
                "CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)",
                "cuCtxGetStreamPriorityRange",
                P(ctypes.c_uint),
                P(ctypes.c_int),
            ),
            "signed 4-byte int",
        ),
        (
            decl(
                "CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)",
                "cuMemAdvise_v2",
                CUdeviceptr,
                ctypes.c_size_t,
                ctypes.c_int,
                ctypes.c_int,
            ),
            "struct",
        ),
        (
            decl(
                "CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)",
                "cuLaunchHostFunc",
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_void_p,
            ),
            "C has pointer",
        ),
        (decl("CUresult cuNoSuchFunction(int x)", "cuNoSuchFunction", ctypes.c_int), "not declared"),
    ],
)
def test_checker_reports_a_wrong_row(header: cheader.Header, row: Decl, expected: str | None) -> None:
    problems = headercheck.check_decl(row, header)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_a_row_with_mismatched_argtype_count_is_refused_at_definition() -> None:
    with pytest.raises(ValueError, match="2 parameters but 1"):
        decl(MEMALLOC, "cuMemAlloc_v2", P(CUdeviceptr))


def test_checker_reports_wrong_constants(header: cheader.Header) -> None:
    class WrongStreamFlag(IntEnum):
        NON_BLOCKING = 0x2  # really 0x1
        MADE_UP = 0x4

    class NotAnEnum(IntEnum):
        X = 1

    registry: dict[type, tuple[str, str]] = {}
    registry[WrongStreamFlag] = ("CUstream_flags", "CU_STREAM_")
    registry[NotAnEnum] = ("CUnot_a_type", "CU_X_")
    problems = headercheck.check_constants(header, registry, {"CU_STREAM_LEGACY": 7})
    text = "\n".join(problems)
    assert "CU_STREAM_NON_BLOCKING = 1, rawcuda 2" in text
    assert "CU_STREAM_MADE_UP is not in cuda.h" in text
    assert "no enum CUnot_a_type" in text
    assert "#define CU_STREAM_LEGACY: cuda.h says 1, rawcuda 7" in text
    assert StreamFlag.NON_BLOCKING == 1 and "CU_STREAM_LEGACY" in C_DEFINES


def test_checker_reports_a_wrong_struct_layout() -> None:
    if headercheck.find_compiler() is None:
        pytest.skip("no C compiler to lay out the structs")

    class BadLocation(ctypes.Structure):
        _c_name_ = "CUmemLocation"
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_longlong)]  # id is an int in C

    problems = headercheck.struct_layout_problems(str(HEADER), [BadLocation])
    assert any("sizeof CUmemLocation:" in p for p in problems), problems
    assert any("id" in p for p in problems), problems
    assert ctypes.sizeof(CUmemLocation) == 8 and CUmemLocation in STRUCTS


def test_checker_reports_a_wrong_union_member() -> None:
    """A launch attribute's payload is a union: the driver reads the member its id names, so each is proven."""
    if headercheck.find_compiler() is None:
        pytest.skip("no C compiler to lay out the structs")

    class Swapped(ctypes.Structure):  # flags and triggerAtBlockStart the wrong way round
        _c_name_ = "CUlaunchAttributeValue.programmaticEvent"
        _fields_ = [("event", ctypes.c_void_p), ("triggerAtBlockStart", ctypes.c_int), ("flags", ctypes.c_int)]

    class BadValue(ctypes.Union):
        _c_name_ = "CUlaunchAttributeValue"
        _fields_ = [("pad", ctypes.c_char * 64), ("programmaticEvent", Swapped)]

    problems = headercheck.struct_layout_problems(str(HEADER), [BadValue])
    assert any("CUlaunchAttributeValue.programmaticEvent.flags: C says 8, ctypes 12" in p for p in problems), problems


def test_command_line_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert headercheck.main([str(HEADER)]) == 0
    out = capsys.readouterr().out
    assert f"{len(TABLE)} functions" in out and out.rstrip().endswith("OK")
