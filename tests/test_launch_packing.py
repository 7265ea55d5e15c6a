"""Kernel-argument checking and packing, on the CPU (no driver needed).

The packer is given real signatures (parsed from PTX text, or sizes as cuFuncGetParamInfo reports
them); device buffers are stand-ins with an address, which is all the packer reads from them.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from rawcuda import ClosedError, ptx
from rawcuda.devicebuffer import DeviceBuffer
from rawcuda.elements import exact_element
from rawcuda.function import _dims
from rawcuda.kernelargs import ArgPacker, ArgumentError, ParamSpec
from rawcuda.module import image_kind, max_ptx_isa

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
    return buf


@pytest.fixture
def packer() -> ArgPacker:
    entry = ptx.parse(PTX).entries["k"]
    return ArgPacker("k", [ParamSpec.from_ptx(p) for p in entry.params])


def slot_bytes(packed: tuple, i: int) -> bytes:
    slot = packed[3][i]
    return ctypes.string_at(packed[1][i], ctypes.sizeof(slot))


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
    assert packed[0] is None  # bytes are mutable-sourced: this pack must not be reused by identity


def test_numpy_scalars_of_the_exact_width(packer: ArgPacker) -> None:
    args = (np.uint64(ADDRESS), np.int8(-5), np.uint16(7), np.int32(-1), np.int64(-2), np.float32(2.5),
            np.float64(-0.5), np.zeros(1, dtype=np.dtype([("a", np.float64), ("b", np.int64)]))[0])
    packed = packer.pack(args)
    assert slot_bytes(packed, 5) == struct.pack("<f", 2.5) and slot_bytes(packed, 4) == struct.pack("<q", -2)


@pytest.mark.parametrize(("index", "value", "error", "match"), [
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
])
def test_bad_arguments_name_the_argument_and_the_fix(packer: ArgPacker, index: int, value: object,
                                                     error: type, match: str) -> None:
    args = list(good_args(fake_buffer()))
    args[index] = value
    with pytest.raises(error, match=match) as info:
        packer.pack(tuple(args))
    if error is ArgumentError:
        assert str(info.value).startswith(f"k argument {index}:")


def test_wrong_count_lists_the_signature(packer: ArgPacker) -> None:
    with pytest.raises(ArgumentError, match=r"k takes 8 argument\(s\) \(u64, u8, u16, u32, u64, f32, f64, b8\[16\]\) "
                                            "but 2 were given"):
        packer.pack((fake_buffer(), 1))


def test_packs_are_never_rewritten() -> None:
    p = ArgPacker("k", [ParamSpec("int", 8, "u64")])
    first = p.pack((1,))
    second = p.pack((2,))
    assert first[1] is not second[1]
    assert ctypes.c_uint64.from_address(first[1][0]).value == 1  # still what the first launch was given
    assert first[0] == (1,)  # plain ints: reusable by identity


def test_objects_with_cuda_array_interface_pass_their_address_and_are_not_cached() -> None:
    class Foreign:
        __cuda_array_interface__ = {"data": (ADDRESS + 64, False)}  # noqa: RUF012

    packed = ArgPacker("k", [ParamSpec("int", 8, "u64")]).pack((Foreign(),))
    assert ctypes.c_uint64.from_address(packed[1][0]).value == ADDRESS + 64 and packed[0] is None


def test_launch_dimensions() -> None:
    assert _dims("grid", 5) == (5, 1, 1) and _dims("grid", (2, 3)) == (2, 3, 1)
    assert _dims("grid", [np.int64(4)]) == (4, 1, 1)
    # Whole numbers of any type are the same dimension (a value-keyed cache cannot tell 2.0 from 2 anyway).
    assert _dims("grid", 2.0) == _dims("grid", np.float64(2.0)) == _dims("grid", (2,)) == (2, 1, 1)
    assert _dims("grid", True) == (1, 1, 1)
    for bad in (1.5, (1, 2.5), (1, 2, 3, 4), (), "8", None):
        with pytest.raises(TypeError, match="int or a tuple of 1 to 3 ints"):
            _dims("grid", bad)
    with pytest.raises(ValueError, match=">= 1"):
        _dims("block", (32, 0))


def test_image_kinds_and_ptx_isa_table() -> None:
    assert image_kind(b"\x7fELF....") == "cubin"
    assert image_kind((0xBA55ED50).to_bytes(4, "little") + b"rest") == "fatbin"
    assert image_kind(b"//\n.version 9.0") == "ptx"
    assert max_ptx_isa((13, 0)) == (9, 0) and max_ptx_isa((12, 8)) == (8, 7) and max_ptx_isa((12, 6)) == (8, 5)
    assert max_ptx_isa((11, 4)) == (7, 4) and max_ptx_isa((99, 0)) is None


@pytest.mark.parametrize(("dtype", "value", "expected"), [
    (np.uint8, 255, 255), (np.uint16, 65535, 65535), (np.int32, -7, -7), (np.int64, -(1 << 40), -(1 << 40)),
    (np.bool_, True, True), (np.float32, 0.1, np.float32(0.1)), (np.float64, 3, 3.0), (np.complex64, 1 + 2j, 1 + 2j),
    (np.uint8, np.uint8(200), 200), (np.float32, np.float64(2.5), 2.5), (np.int16, np.array(3, np.int16), 3),
    (np.complex64, np.array(3, np.complex64), 3),
])
def test_fill_values_that_fit(dtype: type, value: object, expected: object) -> None:
    element = exact_element(value, np.dtype(dtype))
    assert element.dtype == np.dtype(dtype) and element[0] == expected


@pytest.mark.parametrize(("dtype", "value", "match"), [
    (np.int32, 1.5, "holds only integers"), (np.int32, 1 << 40, r"holds the integers -2147483648\.\.2147483647"),
    (np.uint8, -1, r"holds the integers 0\.\.255"), (np.uint8, 256, r"0\.\.255"),
    (np.float32, 1e40, "would become inf"), (np.float32, 1 + 1j, "holds real numbers"), (np.int8, "3", "holds only"),
    (np.float64, "3", "holds numbers"),
])
def test_fill_values_that_do_not_fit(dtype: type, value: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        exact_element(value, np.dtype(dtype))
