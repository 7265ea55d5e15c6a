"""Reading another library's ``__cuda_array_interface__`` without a GPU: what a bare kernel pointer cannot carry
is refused, the producer's stream is collected for the launch to wait on, and a pack never keeps a buffer alive.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.guards.pending import PendingStream
from rawcuda.core.kernelargs import ArgPacker, identity_key
from rawcuda.core.paramspec import ParamSpec
from rawcuda.protocols.cai import ForeignArrayError, foreign_pointer
from tests.helpers import MAPPED_STREAM_NUMBER as STREAM

ADDRESS = 0x7F00_0000_0000


def cai(**changes: Any) -> Any:
    interface = {"shape": (4, 8), "typestr": "<f4", "data": (ADDRESS, False), "strides": None, "version": 3}
    interface.update(changes)
    return type("Foreign", (), {"__cuda_array_interface__": interface})()


def test_the_address_passes_and_the_stream_is_collected() -> None:
    waits: list[int] = []
    assert foreign_pointer(cai(stream=STREAM), False, waits) == ADDRESS and waits == [STREAM]
    assert foreign_pointer(cai(stream=None), False, waits) == ADDRESS and waits == [STREAM]  # None: nothing pending
    assert foreign_pointer(cai(stream=0x99, version=2), False, waits) == ADDRESS and waits == [STREAM]  # v2: no key
    assert foreign_pointer(cai(stream=2), False, waits) == ADDRESS and waits == [STREAM, 2]  # a name, not a pointer


@pytest.mark.parametrize("stream", [True, 1.9, "2", 2.0], ids=["bool", "float", "str", "whole-float"])
def test_a_stream_that_is_not_an_int_is_malformed(stream: object) -> None:
    # int() read these as streams 1, 1, 2 and 2; the spec says an integer.
    with pytest.raises(ForeignArrayError, match=r"malformed \(TypeError: stream is"):
        foreign_pointer(cai(stream=stream), False, [])


def test_numpy_integers_are_ints_for_the_stream() -> None:
    waits: list[int] = []
    foreign_pointer(cai(stream=np.uint64(STREAM)), False, waits)
    assert waits == [STREAM] and type(waits[0]) is int


@pytest.mark.parametrize("number", [3, 0xDEAD_BEEF_000, 0x7FFF_FFFF_FFFF_FFFF], ids=["3", "unmapped", "2^63-1"])
def test_a_stream_number_this_process_cannot_read_is_refused(number: int) -> None:
    # The driver reads a CUstream as a pointer: before the check, a launch with this array died of SIGSEGV.
    waits: list[int] = []
    with pytest.raises(ForeignArrayError, match="this process cannot read memory at that address"):
        foreign_pointer(cai(stream=number), False, waits)
    assert waits == [], "nothing may be collected for the launch to wait on"


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"data": (ADDRESS, True)}, "read-only.*declare_read_only"),
        ({"strides": (4, 16)}, "not C-contiguous"),
        ({"mask": object()}, "masked"),
        ({"stream": 0}, "stream 0, which the CUDA Array Interface forbids"),
    ],
)
def test_what_a_bare_pointer_cannot_carry_is_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ForeignArrayError, match=match):
        foreign_pointer(cai(**changes), False, [])


def test_contiguous_strides_spelled_out_and_read_only_where_declared_pass() -> None:
    assert foreign_pointer(cai(strides=(32, 4)), False, []) == ADDRESS
    assert foreign_pointer(cai(shape=(4, 1), strides=(4, 999)), False, []) == ADDRESS  # extent 1: stride unused
    assert foreign_pointer(cai(shape=(0, 8), strides=(7, 3)), False, []) == ADDRESS  # no elements at all
    assert foreign_pointer(cai(data=(ADDRESS, True)), True, []) == ADDRESS


def test_the_packer_refuses_a_read_only_array_unless_the_parameter_is_read_only() -> None:
    from rawcuda.core.kernelargs import ArgumentError

    with pytest.raises(ArgumentError, match=r"k argument 0: .*read-only"):
        ArgPacker("k", [ParamSpec("int", 8, "u64")]).pack((cai(data=(ADDRESS, True)),))
    read_only = ParamSpec("int", 8, "u64", read_only=True)
    packed = ArgPacker("k", [read_only]).pack((cai(data=(ADDRESS, True), stream=STREAM),))
    assert packed.waits == [STREAM]


def fake_buffer() -> DeviceBuffer:
    buf = DeviceBuffer.__new__(DeviceBuffer)
    buf._ptr, buf._closed, buf._base = ADDRESS, False, None
    buf.shape, buf.dtype = (4,), np.dtype(np.float32)
    buf.pending = PendingStream()  # where a launch records its stream (the packer lists it)
    return buf


def test_a_pack_remembers_buffers_weakly_and_never_matches_a_dead_one() -> None:
    # Before: the pack kept its argument tuple, so a Function (which lives long) kept its last buffers alive.
    buf = fake_buffer()
    _, same = identity_key((buf, 3, 1.5))
    assert same((buf, 3, 1.5)) is True
    assert same((fake_buffer(), 3, 1.5)) is False and same((buf, 4, 1.5)) is False
    assert same((buf, 3)) is False  # another arity
    dead = weakref.ref(buf)
    gc.disable()
    try:
        del buf
        assert dead() is None, "the key must not keep the buffer alive (reference counting alone frees it)"
    finally:
        gc.enable()
    assert same((fake_buffer(), 3, 1.5)) is False


@pytest.mark.parametrize(
    "interface",
    [
        None,
        [1, 2],
        {"shape": (4,), "typestr": "<f4", "version": 3},  # no data
        {"data": None, "shape": (4,), "typestr": "<f4", "version": 3},
        {"data": (ADDRESS,), "shape": (4,), "typestr": "<f4", "version": 3},
        {"data": ("0x1000", False), "shape": (4,), "typestr": "<f4", "version": 3},
        {"data": (ADDRESS, False), "shape": (4,), "typestr": "nonsense", "version": 3},
        {"data": (ADDRESS, False), "shape": (4,), "typestr": "<f4", "version": "3"},
        {"data": (ADDRESS, False), "shape": (4,), "typestr": "<f4", "version": 3, "stream": "legacy"},
        {"data": (ADDRESS, False), "shape": (4,), "typestr": "<f4", "version": 3, "stream": -1},
        {"data": (ADDRESS, False), "shape": (4,), "typestr": "<f4", "version": 3, "stream": 1 << 70},
    ],
)
def test_a_malformed_interface_is_an_argument_error_naming_the_argument(interface: Any) -> None:
    # Guards against KeyError, TypeError or ValueError from inside rawcuda, or (1 << 70) silently
    # truncated to the legacy stream.
    from rawcuda.core.kernelargs import ArgumentError

    foreign = type("Foreign", (), {"__cuda_array_interface__": interface})()
    with pytest.raises(ArgumentError, match=r"^k argument 0: this Foreign"):
        ArgPacker("k", [ParamSpec("int", 8, "u64")]).pack((foreign,))


def test_the_packer_reads_a_property_built_interface_once_per_pack() -> None:
    # Before: hasattr() called the property, then foreign_pointer read it again --
    # two reads per launch, whose pointers and streams could disagree for a producer that builds it each time.
    reads = []

    class Changing:
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            reads.append(1)
            at = ADDRESS + 64 * len(reads)  # (each read describes another array)
            return {"data": (at, False), "shape": (4,), "typestr": "<f4", "version": 3, "stream": STREAM}

    packer = ArgPacker("k", [ParamSpec("int", 8, "u64")])
    first = packer.pack((Changing(),))
    assert len(reads) == 1 and first.waits == [STREAM]
    assert first.slots[0].value == ADDRESS + 64, "the address of the one read"
    packer.pack((Changing(),))
    assert len(reads) == 2


@pytest.mark.parametrize("interface", [None, [("data", (ADDRESS, False))], "a string"])
def test_an_interface_that_is_no_dict_is_malformed(interface: Any) -> None:
    # Before: None counted as "not read yet", so foreign_pointer read the property again,
    # and a second read's None ended in "'NoneType' object is not subscriptable".
    with pytest.raises(ForeignArrayError, match="not a dict"):
        foreign_pointer(object(), True, [], interface)
