"""rawcuda.core.ptx: the PTX parser, on real nvcc output, on handwritten edge cases, and on bad input.

The nvcc tests compile a .cu that records, next to each kernel, the C ``sizeof``/``alignof`` of every
parameter type as a device global (``.global .u64 sizeof_Pair = 16;`` in the PTX). Each parsed
parameter size must equal that, and the structs must also match their ctypes mirrors (the host C ABI),
so the expected numbers do not come from the parser under test.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import pytest

from rawcuda.checked.errors import RawCudaError
from rawcuda.core import ptx

NVCC_FLAGS = ["--ptx", "-arch=compute_80"]

TYPES_CU = r"""
#include <cstddef>

struct Pair { double d; int i; };              // 16 bytes, align 8 (4 bytes of tail padding)
struct Vec3 { float x, y, z; };                // 12 bytes, align 4
struct __align__(16) Quad { float v[4]; };     // 16 bytes, align 16
struct Bytes { char c[5]; };                   // 5 bytes, align 1
struct Mixed { char c; short s; };             // 4 bytes, align 2 (1 byte of padding)

typedef char char_t;  typedef short short_t;  typedef bool bool_t;  typedef int int_t;
typedef long long int64;  typedef float float_t;  typedef double double_t;  typedef unsigned uint_t;
typedef size_t size;  typedef float *pointer;

// The C answer for every type, as device globals the test reads back from the PTX.
#define RECORD(T) extern "C" __device__ unsigned long long sizeof_##T = sizeof(T), alignof_##T = alignof(T);
RECORD(Pair) RECORD(Vec3) RECORD(Quad) RECORD(Bytes) RECORD(Mixed)
RECORD(char_t) RECORD(short_t) RECORD(bool_t) RECORD(int_t) RECORD(int64) RECORD(float_t)
RECORD(double_t) RECORD(uint_t) RECORD(size) RECORD(pointer)

extern "C" __global__ void scalars(char_t c, short_t s, bool_t b, int_t i, int64 ll, float_t f, double_t d,
                                   uint_t u, size n, pointer out)
{
    out[0] = c + s + b + i + ll + f + d + u + n;
}

extern "C" __global__ void structs(Pair p, Vec3 v, Quad q, Bytes b, Mixed m, pointer out)
{
    out[0] = p.d + p.i + v.z + q.v[3] + b.c[4] + m.s;
}

extern "C" __global__ void grid_constant(const __grid_constant__ Pair p, pointer out) { out[0] = p.d; }

extern "C" __global__ void pointers(float *a, const double *__restrict__ b, int **c, Pair *d) { a[0] = b[0]; }

extern "C" __global__ void nothing() {}

extern "C" __global__ void __launch_bounds__(128, 4) bounded(int *p) { p[threadIdx.x] = 1; }

static __device__ __noinline__ int twice(int x) { return 2 * x; }   // a .func: not a kernel
extern "C" __global__ void calls_func(int *p) { p[0] = twice(p[1]); }

template <typename T> __device__ void fill(T *p, T v, size_t n)
{
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
extern "C" __global__ void fill_f64(double *p, double v, size_t n) { fill(p, v, n); }
extern "C" __global__ void fill_i16(short *p, short v, size_t n) { fill(p, v, n); }

template <typename T> __global__ void scale(T *p, T factor) { p[threadIdx.x] *= factor; }
template __global__ void scale<float>(float *, float);   // a mangled entry: _Z5scaleIfEvPT_S0_
"""

EXPECTED_ORDER = [
    "scalars",
    "structs",
    "grid_constant",
    "pointers",
    "nothing",
    "bounded",
    "calls_func",
    "fill_f64",
    "fill_i16",
    "_Z5scaleIfEvPT_S0_",
]


class Pair(ctypes.Structure):
    _fields_ = [("d", ctypes.c_double), ("i", ctypes.c_int)]


class Vec3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_float), ("y", ctypes.c_float), ("z", ctypes.c_float)]


class Bytes(ctypes.Structure):
    _fields_ = [("c", ctypes.c_char * 5)]


class Mixed(ctypes.Structure):
    _fields_ = [("c", ctypes.c_char), ("s", ctypes.c_short)]


CTYPES_MIRRORS = {"Pair": Pair, "Vec3": Vec3, "Bytes": Bytes, "Mixed": Mixed}


@pytest.fixture(scope="module")
def compiled(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    """(PTX text, {"sizeof_Pair": 16, "alignof_Pair": 8, ...}) for TYPES_CU."""
    work = tmp_path_factory.mktemp("ptx")
    source, out = work / "types.cu", work / "types.ptx"
    source.write_text(TYPES_CU)
    done = subprocess.run([nvcc, *NVCC_FLAGS, "-o", str(out), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    facts = {m[1]: int(m[2]) for m in re.finditer(r"\.u64\s+((?:size|align)of_\w+)\s*=\s*(\d+)", text)}
    assert len(facts) == 2 * 15, f"expected 15 sizeof/alignof pairs in the PTX, found {sorted(facts)}"
    return text, facts


# ---------------------------------------------------------------------------------------------------------
# Real nvcc output


def test_module_header(compiled: tuple[str, dict[str, int]]) -> None:
    info = ptx.parse(compiled[0])
    major = int(re.search(r"^\.version (\d+)\.", compiled[0], re.M)[1])  # type: ignore[index]
    assert info.version[0] == major and info.version >= (7, 0)
    assert info.target == "sm_80" and info.targets == ("sm_80",)
    assert info.address_size == 64


def test_every_entry_in_file_order_and_no_func(compiled: tuple[str, dict[str, int]]) -> None:
    info = ptx.parse(compiled[0])
    assert list(info.entries) == EXPECTED_ORDER
    assert ".func" in compiled[0]  # the device function is in the PTX, but it is not a kernel
    assert not any("twice" in name for name in info.entries)


@pytest.mark.parametrize(
    ("kernel", "types"),
    [
        (
            "scalars",
            ["char_t", "short_t", "bool_t", "int_t", "int64", "float_t", "double_t", "uint_t", "size", "pointer"],
        ),
        ("structs", ["Pair", "Vec3", "Quad", "Bytes", "Mixed", "pointer"]),
        ("grid_constant", ["Pair", "pointer"]),
        ("pointers", ["pointer", "pointer", "pointer", "pointer"]),
        ("fill_f64", ["pointer", "double_t", "size"]),
        ("fill_i16", ["pointer", "short_t", "size"]),
        ("_Z5scaleIfEvPT_S0_", ["pointer", "float_t"]),
    ],
)
def test_param_sizes_equal_c_sizeof(compiled: tuple[str, dict[str, int]], kernel: str, types: list[str]) -> None:
    text, facts = compiled
    params = ptx.parse(text).entries[kernel].params
    assert [p.size for p in params] == [facts[f"sizeof_{t}"] for t in types]
    for p, t in zip(params, types, strict=True):
        assert p.name.endswith(f"_param_{params.index(p)}")
        if p.count is not None:  # a by-value aggregate: bytes at the C alignment
            assert (p.type, p.count, p.align) == ("b8", facts[f"sizeof_{t}"], facts[f"alignof_{t}"])
        else:
            assert p.align == p.size


def test_scalar_types_as_nvcc_writes_them(compiled: tuple[str, dict[str, int]]) -> None:
    params = ptx.parse(compiled[0]).entries["scalars"].params
    assert [p.type for p in params] == ["u8", "u16", "u8", "u32", "u64", "f32", "f64", "u32", "u64", "u64"]
    assert not any(p.pointer for p in params)  # nvcc writes pointers as plain .u64


@pytest.mark.parametrize("name", sorted(CTYPES_MIRRORS))
def test_structs_match_the_host_c_abi(compiled: tuple[str, dict[str, int]], name: str) -> None:
    # The device layout of a by-value struct must be the host's, or the launch would pass garbage.
    facts = compiled[1]
    mirror = CTYPES_MIRRORS[name]
    assert facts[f"sizeof_{name}"] == ctypes.sizeof(mirror)
    assert facts[f"alignof_{name}"] == ctypes.alignment(mirror)


def test_zero_parameters_and_launch_bounds(compiled: tuple[str, dict[str, int]]) -> None:
    entries = ptx.parse(compiled[0]).entries
    assert entries["nothing"].params == ()
    assert entries["nothing"].param_bytes == 0
    assert entries["bounded"].directive("maxntid") == (128, 1, 1)
    assert entries["bounded"].directive(".minnctapersm") == (4,)
    assert entries["bounded"].directive("reqntid") is None


def test_param_bytes_follows_alignment(compiled: tuple[str, dict[str, int]]) -> None:
    # structs: Pair 16 @0, Vec3 12 @16, Quad 16 @32 (align 16), Bytes 5 @48, Mixed 4 @54, pointer 8 @64
    assert ptx.parse(compiled[0]).entries["structs"].param_bytes == 72


def test_parse_file_and_bytes_agree(compiled: tuple[str, dict[str, int]], tmp_path: Path) -> None:
    path = tmp_path / "m.ptx"
    path.write_text(compiled[0])
    from_file = ptx.parse_file(path)
    assert from_file == ptx.parse(compiled[0].encode() + b"\0")  # a module image ends with a NUL byte
    assert from_file.entries["structs"].params[0].size == 16


# ---------------------------------------------------------------------------------------------------------
# Handwritten edge cases

HANDWRITTEN = r"""
/* A module written by hand: every form the parser must accept.
   .version 1.0   <- inside a comment: not the version
   .entry commented_out( .param .u32 x ) { }
*/
// .entry also_commented( .param .u32 y ) { }
.version 8.5
.target sm_90a, debug
.address_size 64

.file 1 "/src/*/weird//path.cu"          // a /* and a // inside a string are not comments

.func (.param .b32 ret) helper(.param .b32 a)   // a .func with params: skipped
{
    st.param.b32 [ret], 0;
    ret;
}

.visible .entry pointers(
    .param .u64 .ptr .global .align 4 pointers_param_0,   // pointer annotations (LLVM NVPTX style)
    .param .u64 .ptr .align 8 pointers_param_1,           // generic space
    .param .u32 .ptr .shared .align 16 pointers_param_2,
    .param .u64 pointers_param_3 /* a comment inside the list */
)
.reqntid 64, 2, 1
.maxnreg 32
.pragma "nounroll";
{
    ret;
}

.entry hidden .maxntid 32 { ret; }           // not .visible, no parameter list at all

.weak .entry aggregates(.param .align 8 .b8 a[16], .param .align 4 .b8 b[12], .param .b8 c[5],
                        .param .align 4 .b8 grid[2][6], .param .s32 d, .param .f16 h, .param .b128 wide)
{
    ret;
}

.extern .entry declared(.param .u64 x);       // defined in another module: not in this one

.entry empty( )
{
    // .entry inside_body( .param .u32 z )
    ld.param.u64 %rd1, [x];
    ret;
}
"""


def test_handwritten_header() -> None:
    info = ptx.parse(HANDWRITTEN)
    assert info.version == (8, 5)
    assert info.version_text == "8.5"
    assert info.target == "sm_90a"
    assert info.targets == ("sm_90a", "debug")
    assert info.address_size == 64


def test_handwritten_entries() -> None:
    assert list(ptx.parse(HANDWRITTEN).entries) == ["pointers", "hidden", "aggregates", "empty"]


def test_pointer_annotations() -> None:
    a, b, c, d = ptx.parse(HANDWRITTEN).entries["pointers"].params
    assert (a.type, a.size, a.align, a.pointer, a.state_space, a.pointee_align) == ("u64", 8, 8, True, ".global", 4)
    assert (b.pointer, b.state_space, b.pointee_align) == (True, None, 8)
    assert (c.type, c.size, c.state_space, c.pointee_align) == ("u32", 4, ".shared", 16)
    assert (d.name, d.pointer, d.state_space, d.count) == ("pointers_param_3", False, None, None)


def test_directives_between_params_and_body() -> None:
    entries = ptx.parse(HANDWRITTEN).entries
    assert entries["pointers"].directives == (("reqntid", (64, 2, 1)), ("maxnreg", (32,)), ("pragma", ()))
    assert entries["hidden"].params == ()
    assert entries["hidden"].directive("maxntid") == (32,)
    assert entries["empty"].params == ()


def test_aggregate_and_unusual_scalar_params() -> None:
    a, b, c, grid, d, h, wide = ptx.parse(HANDWRITTEN).entries["aggregates"].params
    assert (a.size, a.align, a.count) == (16, 8, 16)
    assert (b.size, b.align, b.count) == (12, 4, 12)
    assert (c.size, c.align, c.count) == (5, 1, 5)  # no .align: the element size
    assert (grid.size, grid.count) == (12, 12)
    assert (d.type, d.size, h.type, h.size, wide.size, wide.align) == ("s32", 4, "f16", 2, 16, 16)
    assert a.describe() == ".align 8 .b8 a[16]"


def test_no_address_size_means_32() -> None:
    info = ptx.parse(".version 7.0\n.target sm_52\n.entry k(.param .u32 x) { ret; }\n")
    assert info.address_size == 32
    assert info.entries["k"].params[0].size == 4


def test_module_without_kernels() -> None:
    assert ptx.parse(".version 9.0\n.target sm_80\n.address_size 64\n").entries == {}


# ---------------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (".target sm_80\n.address_size 64\n.entry k() { ret; }\n", "no '.version"),
        ("hello, world\nthis is not PTX\n", "no '.version"),
        ("", "empty"),
        ("// only a comment\n", "empty"),
        (".version 9\n.target sm_80\n", "malformed .version"),
        (".version 9.0\n.address_size 64\n", "no '.target'"),
        (".version 9.0\n.target sm_80\n.address_size 48\n", ".address_size must be 32 or 64"),
        (".version 9.0\n.target sm_80\n.entry k(.param .u32) { ret; }\n", "parameter 0"),
        (".version 9.0\n.target sm_80\n.entry k(.param .q32 x) { ret; }\n", "unknown type .q32"),
        (".version 9.0\n.target sm_80\n.entry k(.u32 x) { ret; }\n", "not a kernel parameter"),
        (".version 9.0\n.target sm_80\n.entry k(.param .u32 x\n", "no closing ')'"),
        (".version 9.0\n.target sm_80\n.entry k(.param .u32 x)\n", "neither a body"),
        (".version 9.0\n.target sm_80\n.entry k() .bogus 1 { ret; }\n", "unexpected '.bogus"),
        (".version 9.0\n.target sm_80\n.entry (.param .u32 x) { }\n", "without a kernel name"),
        (".version 9.0\n.target sm_80\n.entry k() { }\n.entry k() { }\n", "defined twice"),
        (".version 9.0\n/* never closed\n.target sm_80\n", "unterminated /* comment"),
    ],
)
def test_errors_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ptx.PtxParseError, match=re.escape(message)):
        ptx.parse(text)


def test_error_names_the_kernel_and_line() -> None:
    with pytest.raises(ptx.PtxParseError) as caught:
        ptx.parse(".version 9.0\n.target sm_80\n\n.entry my_kernel(.param .u64 a, .param .u32) { }\n")
    assert "my_kernel" in str(caught.value)
    assert "parameter 1" in str(caught.value)
    assert "line 4" in str(caught.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x7fELF\x02\x01\x01" + bytes(64), "cubin"),
        (b"\x50\xed\x55\xba" + bytes(64), "fatbin"),
        (b".version 9.0\n\xff\xfe garbage", "not text"),
    ],
)
def test_binary_input(data: bytes, message: str) -> None:
    with pytest.raises(ptx.PtxParseError, match=message):
        ptx.parse(data)


def test_parse_error_is_a_value_error_and_a_rawcuda_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.ptx"
    path.write_text("garbage\n")
    with pytest.raises(ValueError, match=r"bad\.ptx") as caught:
        ptx.parse_file(path)
    assert isinstance(caught.value, RawCudaError)


GRID_SYNC_BODY = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry first(.param .u64 p)
{
    { .reg .b32 inner; }
    ret;
}
.visible .entry second(.param .u64 p)
{
    mov.u32 %r1, %envreg1;
    ret;
}
"""


def test_the_grid_workspace_is_read_from_each_body_alone() -> None:
    """Only the body that reads %envreg1/2 is marked; a nested scope does not end the body early."""
    entries = ptx.parse(GRID_SYNC_BODY).entries
    assert not entries["first"].grid_workspace and entries["second"].grid_workspace
    assert not ptx.parse(GRID_SYNC_BODY.replace("%envreg1", "%envreg10")).entries["second"].grid_workspace


def test_a_truncated_body_is_left_for_the_driver_to_report() -> None:
    """The parser reads headers: a body cut short parses, and the driver's JIT says what is wrong, with its log."""
    cut = GRID_SYNC_BODY[: GRID_SYNC_BODY.rindex("ret;")]
    entries = ptx.parse(cut).entries
    assert list(entries) == ["first", "second"] and entries["second"].grid_workspace


CALLS_INTO_FUNCS = """
.version 8.0
.target sm_90
.address_size 64
.func sync_all()
;
.func sync_all()
{
    mov.u32 %r1, %envreg2;
    ret;
}
.func wait_dep()
{
    griddepcontrol.wait;
    ret;
}
.func outer()
{
    { call.uni
    wait_dep,
    (
    ); }
    ret;
}
.visible .entry syncs(.param .u64 p)
{
    call.uni sync_all, ();
    ret;
}
.visible .entry waits(.param .u64 p)
{
    call.uni outer, ();
    ret;
}
.visible .entry neither(.param .u64 p)
{
    ret;
}
"""


def test_what_a_kernel_does_through_the_device_functions_it_calls_counts() -> None:
    """A grid sync or a dependency wait in a __noinline__ helper is the kernel's own, called directly or not."""
    entries = ptx.parse(CALLS_INTO_FUNCS).entries
    assert (entries["syncs"].grid_workspace, entries["syncs"].dependency_wait) == (True, False)
    assert (entries["waits"].grid_workspace, entries["waits"].dependency_wait) == (False, True)
    assert (entries["neither"].grid_workspace, entries["neither"].dependency_wait) == (False, False)
