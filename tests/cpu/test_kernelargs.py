"""Kernel-argument checking and packing (rawcuda.kernelargs), on the CPU (no driver needed).

The packer is given real signatures (parsed from PTX text, or sizes as cuFuncGetParamInfo reports
them); device buffers are stand-ins with an address, which is all the packer reads from them. On a GPU,
every width arriving byte for byte: tests/gpu/test_kernelargs.py.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from rawcuda import ClosedError, ptx
from rawcuda.devicebuffer import DeviceBuffer
from rawcuda.kernelargs import ArgPacker, ArgumentError, ParamSpec

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
    assert packed.key == () and not packed.same(good_args(fake_buffer()), packed.key)  # bytes: never reused


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
    assert first.key == (1,) and first.same((1,), first.key)  # plain ints: reusable by identity


def test_objects_with_cuda_array_interface_pass_their_address_and_are_not_cached() -> None:
    class Foreign:
        __cuda_array_interface__ = {"data": (ADDRESS + 64, False)}  # noqa: RUF012

    foreign = Foreign()
    packed = ArgPacker("k", [ParamSpec("int", 8, "u64")]).pack((foreign,))
    assert ctypes.c_uint64.from_address(packed.array[0]).value == ADDRESS + 64
    assert not packed.same((foreign,), packed.key) and packed.waits == []  # read again at every launch


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
