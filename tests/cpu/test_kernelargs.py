"""Kernel-argument checking and packing (rawcuda.core.kernelargs), on the CPU (no driver needed).

The packer is given real signatures (parsed from PTX text, or sizes as cuFuncGetParamInfo reports
them); device buffers are stand-ins with an address, which is all the packer reads from them. On a GPU,
every width arriving byte for byte: tests/gpu/test_kernelargs.py. The second half is the integer range
rule -- which Python ints each PTX integer type takes -- and the nvcc fact it rests on.
"""

from __future__ import annotations

import ctypes
import math
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rawcuda import ClosedError
from rawcuda.core import ptx
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.guards.pending import PendingStream
from rawcuda.core.kernelargs import ArgPacker, ArgumentError
from rawcuda.core.paramspec import ParamSpec

PTX = """
.version 9.0
.target sm_80
.address_size 64
.visible .entry k(
    .param .u64 k_param_0,
    .param .u8 k_param_1,
    .param .u16 k_param_2,
    .param .u32 k_param_3,
    .param .u64 k_param_4,
    .param .f32 k_param_5,
    .param .f64 k_param_6,
    .param .align 8 .b8 k_param_7[16]
)
{ ret; }
"""
ADDRESS = 0x7F00_0000_1000


def fake_buffer(address: int = ADDRESS, closed: bool = False) -> DeviceBuffer:
    buf = DeviceBuffer.__new__(DeviceBuffer)
    buf._ptr, buf._closed, buf._base = address, closed, None
    buf.shape, buf.dtype = (4,), np.dtype(np.float32)
    buf.pending = PendingStream()  # where a launch records its stream (the packer lists it)
    return buf


@pytest.fixture
def packer() -> ArgPacker:
    entry = ptx.parse(PTX).entries["k"]
    return ArgPacker("k", [ParamSpec.from_ptx(p) for p in entry.params])


def slot_bytes(packed: tuple, i: int) -> bytes:
    slot = packed.slots[i]
    return ctypes.string_at(packed.array[i], ctypes.sizeof(slot))


def good_args(buf: DeviceBuffer) -> tuple:
    return (buf, -5, 65000, -7, 1 << 40, 1.5, 0.25, struct.pack("<di4x", 3.0, -9))


def test_every_width_lands_as_the_kernel_reads_it(packer: ArgPacker) -> None:
    packed = packer.pack(good_args(fake_buffer()))
    assert slot_bytes(packed, 0) == struct.pack("<Q", ADDRESS)
    assert slot_bytes(packed, 1) == struct.pack("<b", -5)
    assert slot_bytes(packed, 2) == struct.pack("<H", 65000)
    assert slot_bytes(packed, 3) == struct.pack("<i", -7)
    assert slot_bytes(packed, 4) == struct.pack("<Q", 1 << 40)
    assert slot_bytes(packed, 5) == struct.pack("<f", 1.5)
    assert slot_bytes(packed, 6) == struct.pack("<d", 0.25)
    assert slot_bytes(packed, 7) == struct.pack("<di4x", 3.0, -9)
    assert packed.key == () and not packed.same(good_args(fake_buffer()))  # bytes: never reused


def test_numpy_scalars_of_the_exact_width(packer: ArgPacker) -> None:
    args = (
        np.uint64(ADDRESS),
        np.int8(-5),
        np.uint16(7),
        np.int32(-1),
        np.int64(-2),
        np.float32(2.5),
        np.float64(-0.5),
        np.zeros(1, dtype=np.dtype([("a", np.float64), ("b", np.int64)]))[0],
    )
    packed = packer.pack(args)
    assert slot_bytes(packed, 5) == struct.pack("<f", 2.5) and slot_bytes(packed, 4) == struct.pack("<q", -2)


@pytest.mark.parametrize(
    ("index", "value", "error", "match"),
    [
        (0, np.zeros(4, np.float32), ArgumentError, "host numpy array where a device pointer is expected"),
        (0, 1.5, ArgumentError, "a float"),
        (0, "text", ArgumentError, "str cannot be passed"),
        (0, fake_buffer(closed=True), ClosedError, "closed"),
        (1, 256, ArgumentError, "does not fit"),
        (2, np.int32(1), ArgumentError, "wrong width"),
        (3, 1 << 32, ArgumentError, "does not fit"),
        (4, -(1 << 64), ArgumentError, "does not fit"),
        (5, np.float64(1.0), ArgumentError, "wrong width"),
        (5, np.int32(1), ArgumentError, "numpy integer"),
        (6, "1.0", ArgumentError, "str cannot be passed"),
        (7, b"\0" * 12, ArgumentError, "12 bytes given"),
    ],
)
def test_bad_arguments_name_the_argument_and_the_fix(
    packer: ArgPacker, index: int, value: object, error: type, match: str
) -> None:
    args = list(good_args(fake_buffer()))
    args[index] = value
    with pytest.raises(error, match=match) as info:
        packer.pack(tuple(args))
    if error is ArgumentError:
        assert str(info.value).startswith(f"k argument {index}:")


def test_wrong_count_lists_the_signature(packer: ArgPacker) -> None:
    with pytest.raises(
        ArgumentError,
        match=r"k takes 8 argument\(s\) \(u64, u8, u16, u32, u64, f32, f64, b8\[16\]\) "
        "but 2 were given",
    ):
        packer.pack((fake_buffer(), 1))


def test_packs_are_never_rewritten() -> None:
    p = ArgPacker("k", [ParamSpec("int", 8, "u64")])
    first = p.pack((1,))
    second = p.pack((2,))
    assert first.array is not second.array
    assert ctypes.c_uint64.from_address(first.array[0]).value == 1  # still what the first launch was given
    assert first.key == (1,) and first.same((1,))  # plain ints: reusable by identity


def test_objects_with_cuda_array_interface_pass_their_address_and_are_not_cached() -> None:
    class Foreign:
        __cuda_array_interface__ = {"data": (ADDRESS + 64, False), "shape": (4,), "typestr": "<f4", "version": 3}  # noqa: RUF012

    foreign = Foreign()
    packed = ArgPacker("k", [ParamSpec("int", 8, "u64")]).pack((foreign,))
    assert ctypes.c_uint64.from_address(packed.array[0]).value == ADDRESS + 64
    assert not packed.same((foreign,)) and packed.waits == []  # read again at every launch


def test_a_128_bit_parameter_takes_its_sixteen_bytes() -> None:
    # `.param .b128` (an __int128 argument) once made Module.function() raise KeyError: 16 -- there is no
    # 16-byte ctypes integer to hold it. It is a 16-byte value: bytes, a ctypes Structure or a numpy record.
    info = ptx.parse(
        ".version 8.3\n.target sm_90\n.address_size 64\n.visible .entry k(.param .b128 k_param_0)\n{ ret; }\n"
    )
    packer = ArgPacker("k", [ParamSpec.from_ptx(p) for p in info.entries["k"].params])
    value = bytes(range(3, 19))
    packed = packer.pack((value,))
    assert ctypes.string_at(packed.array[0], 16) == value
    with pytest.raises(ArgumentError, match="16"):
        packer.pack((value[:8],))


# --- which Python ints an integer parameter takes (the rule in rawcuda.core.kernelargs' docstring) ----------------
#: What nvcc 13 declares for each C parameter type (compiled below): every integer is *unsigned* in PTX,
#: signed or not, and every pointer is .u64. The packer's range rule is written from this fact.
NVCC_PARAM_TYPES = {
    "int": "u32",
    "unsigned": "u32",
    "short": "u16",
    "char": "u8",
    "bool": "u8",
    "long long": "u64",
    "unsigned long long": "u64",
    "size_t": "u64",
    "ptrdiff_t": "u64",
    "float *": "u64",
}


def test_nvcc_declares_every_integer_unsigned(nvcc: str, tmp_path: Path) -> None:
    # If a future nvcc writes .s32 for `int`, the rule can become stricter: this test will say so.
    params = ", ".join(f"{c_type} p{i}" for i, c_type in enumerate(NVCC_PARAM_TYPES))
    source = tmp_path / "types.cu"
    source.write_text(f'#include <cstddef>\nextern "C" __global__ void types({params}) {{}}\n')
    subprocess.run([nvcc, "--ptx", "-arch=compute_80", "-o", str(tmp_path / "types.ptx"), str(source)], check=True)
    entry = ptx.parse((tmp_path / "types.ptx").read_text()).entries["types"]
    assert dict(zip(NVCC_PARAM_TYPES, [p.type for p in entry.params], strict=True)) == NVCC_PARAM_TYPES


def signed_range(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def either_range(bits: int) -> tuple[int, int]:  # a C signed or unsigned type of that width
    return -(1 << (bits - 1)), (1 << bits) - 1


RANGES = [
    *[(f"s{bits}", signed_range(bits)) for bits in (8, 16, 32, 64)],
    *[(f"{kind}{bits}", either_range(bits)) for kind in "ub" for bits in (8, 16, 32)],
    ("u64", (0, (1 << 64) - 1)),  # pointers and size_t: a negative value is a bug
    ("b64", (0, (1 << 64) - 1)),
]


def one_param(ptx_type: str) -> ArgPacker:
    return ArgPacker("k", [ParamSpec("int", int(ptx_type[1:]) // 8, ptx_type)])


@pytest.mark.parametrize(("ptx_type", "bounds"), RANGES, ids=[r[0] for r in RANGES])
def test_integer_parameters_take_exactly_their_range(ptx_type: str, bounds: tuple[int, int]) -> None:
    packer, (low, high) = one_param(ptx_type), bounds
    size = int(ptx_type[1:]) // 8
    for value in (low, high):
        assert slot_bytes(packer.pack((value,)), 0) == (value % (1 << (8 * size))).to_bytes(size, "little")
    for value in (low - 1, high + 1):
        with pytest.raises(ArgumentError, match=rf"k argument 0: {value} does not fit {ptx_type}"):
            packer.pack((value,))


def test_int_and_unsigned_share_a_u32() -> None:
    # nvcc writes .u32 for both, so both ranges are accepted: -1 reaches an `int` as -1, 2^32-1 an `unsigned`.
    packer = one_param("u32")
    assert slot_bytes(packer.pack((-1,)), 0) == slot_bytes(packer.pack(((1 << 32) - 1,)), 0) == b"\xff" * 4
    with pytest.raises(ArgumentError, match=r"C int or unsigned: -2\*\*31\.\.2\*\*32-1\).*declare it size_t"):
        packer.pack((1 << 32,))


@pytest.mark.parametrize("spec", [ParamSpec("int", 8, "u64"), ParamSpec("int", 8, "b64"), ParamSpec.from_size(8)])
def test_a_negative_64_bit_int_is_refused_and_np_int64_is_the_way_out(spec: ParamSpec) -> None:
    # Pointers and size_t are .u64: -1 would arrive as 2^64 - 1, and a kernel given that size walks off its
    # buffer. long long is .u64 as well, so a signed value says what it is with np.int64.
    packer = ArgPacker("k", [spec])
    with pytest.raises(ArgumentError, match=r"-3 does not fit .*negative address or size is a bug.*np\.int64\(-3\)"):
        packer.pack((-3,))
    assert slot_bytes(packer.pack((np.int64(-3),)), 0) == struct.pack("<q", -3)


def test_an_s64_takes_negative_ints() -> None:
    assert slot_bytes(one_param("s64").pack((-3,)), 0) == struct.pack("<q", -3)


@pytest.mark.parametrize(
    ("ptx_type", "value", "fits"),
    [
        ("s32", np.uint32(1 << 31), False),  # its bits would arrive as -2^31
        ("s32", np.uint32((1 << 31) - 1), True),
        ("s32", np.int32(-1), True),
        ("s64", np.uint64(1 << 63), False),
        ("u32", np.uint32((1 << 32) - 1), True),
        ("u32", np.int32(-1), True),
        ("u64", np.uint64((1 << 64) - 1), True),
    ],
)
def test_numpy_integers_pass_their_bits_unless_a_signed_parameter_would_read_them_negative(
    ptx_type: str, value: np.integer, fits: bool
) -> None:
    packer = one_param(ptx_type)
    if fits:
        assert slot_bytes(packer.pack((value,)), 0) == value.tobytes()
    else:
        with pytest.raises(ArgumentError, match=r"does not fit .*the parameter is signed"):
            packer.pack((value,))


@pytest.mark.parametrize(("ptx_type", "size", "value"), [("f32", 4, 1e39), ("f32", 4, -(10**39)), ("f64", 8, 10**400)])
def test_a_float_parameter_refuses_a_number_that_would_arrive_as_inf(ptx_type: str, size: int, value: float) -> None:
    # ctypes stores 1e39 in a c_float as inf without a word; fill() refuses the same value.
    packer = ArgPacker("k", [ParamSpec("float", size, ptx_type)])
    with pytest.raises(ArgumentError, match=r"inf|beyond every finite"):
        packer.pack((value,))
    fmt = "<f" if size == 4 else "<d"
    assert struct.unpack(fmt, slot_bytes(packer.pack((3.4e38,)), 0))[0] == pytest.approx(3.4e38, rel=1e-6)
    assert slot_bytes(ArgPacker("k", [ParamSpec("float", 4, "f32")]).pack((float("inf"),)), 0) == struct.pack(
        "<f", float("inf")
    )


@pytest.mark.parametrize(("ptx_type", "size"), [("u64", 8), ("u32", 4), ("s16", 2)])
def test_a_bool_is_refused_where_a_size_or_count_goes_and_fits_a_one_byte_parameter(ptx_type: str, size: int) -> None:
    # True for a size_t n launched over one element; a C bool is one byte (.u8), where True belongs.
    with pytest.raises(ArgumentError, match=r"bool cannot be passed as"):
        ArgPacker("k", [ParamSpec("int", size, ptx_type)]).pack((True,))
    assert slot_bytes(ArgPacker("k", [ParamSpec("int", 1, "u8")]).pack((True,)), 0) == b"\x01"


# --- which arguments a pack may be reused for (identity_key) -------------------------------------------------------
def test_new_int_and_float_objects_of_the_same_value_reuse_the_pack() -> None:
    # `a.size` and `float(alpha)` are new objects at every call: matching by identity alone repacked every launch.
    packer = ArgPacker("k", [ParamSpec("int", 8, "u64"), ParamSpec("float", 4, "f32")])
    big, scale = 1 << 20, 2.5
    packed = packer.pack((big, scale))
    again = (int(str(big)), float(str(scale)))
    assert again[0] is not big and again[1] is not scale
    assert packed.same(again)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ((1 << 20, 0.0), (1 << 20, -0.0)),  # equal, but another sign bit
        ((1 << 20, math.nan), (1 << 20, float("nan"))),  # NaN equals nothing: another NaN object is packed again
        ((1, 2.0), (1.0, 2.0)),  # equal, but a float where an integer parameter goes must be refused
        ((1, 2.0), (True, 2.0)),
        ((1 << 20, 2.0), (np.uint64(1 << 20), 2.0)),  # numpy scalars: by identity only
        ((1 << 20, 2), (1 << 20, 2.0)),  # an int given to a float parameter, then a float
    ],
)
def test_a_value_of_another_type_or_sign_is_packed_again(first: tuple, then: tuple) -> None:
    packed = ArgPacker("k", [ParamSpec("int", 8, "u64"), ParamSpec("float", 4, "f32")]).pack(first)
    assert not packed.same(then)
