"""The ordinary boundary, without a driver: wrong objects in the context's place, waiting on a stream, byte counts.

Each check runs before any driver call, so a stand-in context (one made without the driver) is enough:

* ``context`` takes a Context or None. A Stream, a Device or an int there is a TypeError that names the
  parameter and the fix -- not an AttributeError from deep inside (``'Stream' object has no attribute``).
* ``stream.wait()`` takes an Event. A Stream there (torch's ``wait_stream`` habit) would hand the driver a
  CUstream as a CUevent.
* The bytes a shape asks for must fit a ``size_t``: ctypes masks the count, so 2**64 + 4 would arrive as 4.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rawcuda.core.context import Context, resolve
from rawcuda.core.device import Device
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.elements import byte_count
from rawcuda.core.event import Event
from rawcuda.core.integers import shown, whole
from rawcuda.core.module import Module
from rawcuda.core.pinned import PinnedBuffer
from rawcuda.core.stream import Stream
from rawcuda.graphs.graph import Graph

PTX = Path(__file__).resolve().parents[2] / "rawcuda" / "kernels" / "vector_add.ptx"


def stand_in_context() -> Context:
    return Context.__new__(Context)


def stand_in_stream() -> Stream:
    stream = Stream.__new__(Stream)
    stream.context, stream._closed, stream._handle = stand_in_context(), False, 0x5000
    return stream


def stand_in_device() -> Device:
    device = Device.__new__(Device)
    device.ordinal = 0
    return device


def stand_ins() -> list[Any]:
    return [stand_in_stream(), stand_in_device(), 0, "ctx"]


@pytest.mark.parametrize("value", stand_ins(), ids=["Stream", "Device", "int", "str"])
def test_resolve_refuses_what_is_not_a_context(value: Any) -> None:
    with pytest.raises(TypeError, match=r"context must be a rawcuda Context or None.*not "):
        resolve(value)


def test_a_stream_in_the_context_s_place_is_told_its_keyword() -> None:
    stream = stand_in_stream()
    calls = [
        lambda: DeviceBuffer(16, np.float32, stream),
        lambda: DeviceBuffer.empty(16, np.float32, stream),
        lambda: DeviceBuffer.zeros(16, np.float32, stream),
        lambda: DeviceBuffer.from_array(np.arange(4, dtype=np.float32), stream),
        lambda: PinnedBuffer(16, np.float32, stream),
        lambda: Stream(stream),
        lambda: Event(stream),
        lambda: Module(PTX, stream),
        lambda: Graph(stream),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"not Stream: a Stream goes by its keyword, e\.g\. stream="):
            call()


def test_a_device_in_the_context_s_place_is_told_its_context() -> None:
    with pytest.raises(TypeError, match=r"not Device: pass Context\.primary\(0\)"):
        DeviceBuffer(16, np.float32, stand_in_device())
    with pytest.raises(TypeError, match=r"context must be a rawcuda Context or None.*not int 0"):
        Stream(0)


@pytest.mark.parametrize("value", [None, 0, "event"], ids=["None", "int", "str"])
def test_stream_wait_takes_an_event(value: Any) -> None:
    with pytest.raises(TypeError, match=r"stream\.wait\(\) takes a rawcuda Event, not "):
        stand_in_stream().wait(value)


def test_stream_wait_on_a_stream_says_to_record_an_event() -> None:
    with pytest.raises(TypeError, match=r"not Stream: record an event on that stream"):
        stand_in_stream().wait(stand_in_stream())


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2**62 + 1,), np.float32), ((2**32, 2**30 + 1), np.float32), ((2**61,), np.float64), ((2**64,), np.uint8)],
)
def test_a_byte_count_past_size_t_is_refused(shape: tuple[int, ...], dtype: Any) -> None:
    with pytest.raises(ValueError, match=r"more than any allocation can hold"):
        byte_count(shape, np.dtype(dtype))
    with pytest.raises(ValueError, match=r"more than any allocation can hold"):
        DeviceBuffer(shape, dtype, stand_in_context())  # before any allocation
    with pytest.raises(ValueError, match=r"more than any allocation can hold"):
        PinnedBuffer(shape, dtype, stand_in_context())


def test_byte_counts_up_to_size_t_pass() -> None:
    assert byte_count((2**64 - 1,), np.dtype(np.uint8)) == 2**64 - 1
    assert byte_count((2**31, 2**31), np.dtype(np.float16)) == 2**63
    assert byte_count((), np.dtype(np.float32)) == 4


@pytest.mark.parametrize("value", [4, np.int64(4), np.uint8(4), np.int32(4)])
def test_python_and_numpy_integers_are_alike(value: Any) -> None:
    assert whole(value) == 4 and type(whole(value)) is int
    assert shown(value) == "4"


@pytest.mark.parametrize("value", [True, np.True_, 4.0, np.float32(4), "4", None])
def test_bools_floats_and_text_are_not_integers(value: Any) -> None:
    assert whole(value) is None


def test_a_view_takes_a_numpy_offset_and_refuses_a_float() -> None:
    buf = DeviceBuffer.__new__(DeviceBuffer)
    buf.context, buf._closed, buf._base = stand_in_context(), False, None
    buf.shape, buf.dtype, buf.nbytes, buf._ptr = (16,), np.dtype(np.float32), 64, 0x1000
    buf.allocation = SimpleNamespace(views=weakref.WeakSet(), pending=None, loans=None, kind=None)
    with pytest.raises(ValueError, match=r"view offset 17 is outside a buffer of 16 elements"):
        buf.view(np.int64(17))
    with pytest.raises(TypeError, match=r"a view offset is an int \(elements\), not float 1\.5"):
        buf.view(1.5)
