"""The public API walked with the sizes that wrap: what the driver receives is what the object reports.

ctypes masks a Python int to its C type without a word (``c_size_t`` takes ``2**64 + 4`` as 4). So for
sizes at 2**31, 2**32, 2**63 and 2**64, and for every integer parameter of the driver table, each call
must either reach the driver with exactly the number the Python object reports, or be refused with an
exception that names the parameter. The driver here is tests/fakecuda/fakerecord.c: it logs every size it
is asked for and backs nothing with memory, so a 2**63-byte request costs nothing to make.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rawcuda.checked.errors import IntegerRangeError
from rawcuda.checked.intranges import c_range, integer_checks, range_checked
from rawcuda.ffi.cuda import TABLE
from tests.helpers import TESTS_DIR, build_shared_library, run_python

SIZES = [2**31, 2**32, 2**63, 2**64, 2**62 + 1]


@pytest.fixture(scope="module")
def recording_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fakerecord") / "libfakerecord.so"
    return build_shared_library(TESTS_DIR / "fakecuda" / "fakerecord.c", out, "the recording fake libcuda")


# --- layer 1: every integer parameter of the table ------------------------------------------------------------
def table_cases() -> list[tuple[str, int, int, int]]:
    return [(name, index, low, high) for name, decl in TABLE.items() for index, low, high in integer_checks(decl)]


@pytest.mark.parametrize("edge", ["below", "above"])
@pytest.mark.parametrize(("name", "index", "low", "high"), table_cases())
def test_every_integer_parameter_of_the_table_refuses_a_value_ctypes_would_mask(
    name: str, index: int, low: int, high: int, edge: str
) -> None:
    decl = TABLE[name]
    calls: list[tuple[Any, ...]] = []
    checked = range_checked(lambda *args: calls.append(args), decl)
    args = [None] * len(decl.argtypes)
    args[index] = low - 1 if edge == "below" else high + 1
    with pytest.raises(IntegerRangeError) as info:
        checked(*args)
    assert calls == []  # refused before the call
    message = str(info.value)
    assert message.startswith(f"{name}: {decl.param_names[index]} ")
    assert f"got {args[index]}" in message
    args[index] = high  # the edge itself goes through
    checked(*args)
    assert calls == [tuple(args)]


def test_numpy_integers_are_checked_like_ints_and_ctypes_objects_pass() -> None:
    decl = TABLE["cuMemsetD8"]  # (CUdeviceptr dstDevice, unsigned char uc, size_t N)
    calls: list[tuple[Any, ...]] = []
    checked = range_checked(lambda *args: calls.append(args), decl)
    with pytest.raises(IntegerRangeError, match=r"uc \(unsigned char uc\) takes 0 \.\. 255, got -1; .* as 255"):
        checked(np.uint64(1), np.int64(-1), 4)
    checked(np.uint64(1), np.uint8(7), ctypes.c_size_t(4))
    assert len(calls) == 1


def test_the_ranges_are_those_of_the_c_types() -> None:
    assert c_range(ctypes.c_int) == (-(2**31), 2**31 - 1)
    assert c_range(ctypes.c_uint) == (0, 2**32 - 1)
    assert c_range(ctypes.c_size_t) == (0, 2**64 - 1)
    # Handles and host pointers come from the driver or numpy, never from arithmetic: not checked (intranges.py).
    assert c_range(ctypes.c_void_p) is None
    assert c_range(ctypes.c_float) is None and c_range(ctypes.POINTER(ctypes.c_int)) is None


# --- the public API through the recording driver ----------------------------------------------------------------
WALK = r"""
import ctypes, json, os
import numpy as np
import rawcuda
from rawcuda import Device, DeviceBuffer, Stream
from rawcuda.extras.growable import GrowableBuffer

lib = ctypes.CDLL(os.environ["RAWCUDA_LIBCUDA"])
lib.fake_log_entry.restype = ctypes.c_char_p
out = {}

def log():
    entries = [lib.fake_log_entry(i).decode() for i in range(lib.fake_log_count())]
    lib.fake_log_clear()
    return entries

def step(label, action):
    log()
    try:
        value = action()
        out[label] = {"value": value, "log": log()}
    except Exception as exc:
        out[label] = {"error": type(exc).__name__, "text": str(exc), "log": log()}

for n in SIZES:
    step(f"bytes {n}", lambda: DeviceBuffer.empty(n, np.uint8).nbytes)
    step(f"floats {n}", lambda: DeviceBuffer.empty((n,), np.float32).nbytes)
step("rows", lambda: DeviceBuffer((2**32, 2**30 + 1), np.float32).nbytes)
big = DeviceBuffer.empty(2**33, np.uint8)
stream = Stream()
step("view at 2**32", lambda: big.view(np.int64(2**32), (4,)).ptr - big.ptr)
step("memset 2**31", lambda: big.view(2**32, (2**31,)).memset(np.uint8(7)))
step("memset on a stream", lambda: big.memset(1, stream=stream))
step("overlap", lambda: big[0 : 2**32].copy_from(big[1 : 2**32 + 1]))
step("overlap on a stream", lambda: big[0 : 2**32].copy_from(big[1 : 2**32 + 1], stream=stream))
step("same bytes", lambda: big.copy_from(big))
step("priority 2**32", lambda: Stream(priority=2**32))
step("device 2**32", lambda: Device(2**32))
step("raw 2**64 + 4", lambda: rawcuda.cu.cuMemAlloc(ctypes.byref(ctypes.c_uint64()), 2**64 + 4))
step("growable 2**64", lambda: GrowableBuffer(2**64 + 2**21).capacity_bytes)
step("growable 2**40", lambda: GrowableBuffer(2**40 + 1).capacity_bytes)
from rawcuda import Event
from rawcuda.graphs.graphexec import GraphExec
from rawcuda.graphs.streamcapture import capture, capture_status
for label, action in [
    ("stream flags True", lambda: Stream(flags=True)),
    ("stream flags 1.0", lambda: Stream(flags=1.0)),
    ("priority -1.0", lambda: Stream(priority=-1.0)),
    ("priority True", lambda: Stream(priority=True)),
    ("memset 7.0", lambda: big.memset(7.0)),
    ("memset True", lambda: big.memset(True)),
    ("attribute 1.5", lambda: Device(0).attribute(1.5)),
    ("capture mode True", lambda: capture(stream, mode=True)),
    ("GraphExec of a stream", lambda: GraphExec(stream)),
    ("capture_status of an event", lambda: capture_status(Event(timing=False))),
    ("copy onto itself, closed stream", lambda: big.copy_from(big, stream=closed_stream)),
    ("overlap, an int for stream", lambda: big[0 : 2**32].copy_from(big[1 : 2**32 + 1], stream=2)),
    ("empty copy, wrong stream", lambda: DeviceBuffer.empty(0, np.uint8).copy_from(np.empty(0, np.uint8), stream=7)),
]:
    closed_stream = Stream()
    closed_stream.close()
    step(label, action)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def walk(recording_libcuda: Path) -> dict[str, Any]:
    proc = run_python(WALK.replace("SIZES", repr(SIZES)), RAWCUDA_LIBCUDA=str(recording_libcuda))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("kind", "itemsize"), [("bytes", 1), ("floats", 4)])
def test_an_allocation_asks_the_driver_for_the_bytes_it_reports(
    walk: dict[str, Any], n: int, kind: str, itemsize: int
) -> None:
    result = walk[f"{kind} {n}"]
    if n * itemsize >= 2**64:  # no size_t holds it: refused before the driver is asked
        assert result["error"] == "ValueError" and "a size_t ends at 2**64 - 1" in result["text"]
        assert result["log"] == []
    elif "error" in result:  # more than the device has: the driver's answer, with the bytes asked for
        assert result["error"] == "OutOfMemoryError" and f"({n * itemsize} bytes)" in result["text"]
        assert result["log"] == [f"cuMemAlloc {n * itemsize}"]
    else:
        assert result["value"] == n * itemsize
        assert result["log"] == [f"cuMemAlloc {result['value']}"]


RefusalCheck = Callable[[dict[str, Any]], bool]
REFUSED: dict[str, tuple[str, str]] = {
    "rows": ("ValueError", "a size_t ends at 2**64 - 1"),
    "priority 2**32": ("ValueError", "stream priority 4294967296 is outside"),
    "device 2**32": ("ValueError", "no GPU with ordinal 4294967296"),
    "raw 2**64 + 4": ("IntegerRangeError", "cuMemAlloc: bytesize (size_t bytesize) takes 0 .. "),
    "growable 2**64": ("ValueError", "more than a 64-bit address space holds"),
}


@pytest.mark.parametrize("label", sorted(REFUSED))
def test_a_size_no_c_type_holds_is_refused_before_the_driver_sees_it(walk: dict[str, Any], label: str) -> None:
    error, text = REFUSED[label]
    result = walk[label]
    assert result.get("error") == error and text in result["text"], result
    assert result["log"] == []


def test_sizes_past_2_to_the_32_arrive_whole(walk: dict[str, Any]) -> None:
    assert walk["view at 2**32"] == {"value": 2**32, "log": []}
    assert walk["memset 2**31"]["log"] == [f"cuMemsetD8 {2**31}"]
    assert walk["memset on a stream"]["log"] == [f"cuMemsetD8Async {2**33}"]
    assert walk["growable 2**40"]["log"] == [f"cuMemAddressReserve {walk['growable 2**40']['value']}"]


def test_an_overlapping_copy_goes_through_a_temporary_and_a_copy_onto_itself_does_nothing(
    walk: dict[str, Any],
) -> None:
    n = 2**32
    assert walk["overlap"]["log"] == [f"cuMemAlloc {n}", f"cuMemcpyDtoD {n}", f"cuMemcpyDtoD {n}"]
    assert walk["overlap on a stream"]["log"] == [
        f"cuMemAllocAsync {n}",
        f"cuMemcpyDtoDAsync {n}",
        f"cuMemcpyDtoDAsync {n}",
    ]
    assert walk["same bytes"] == {"value": None, "log": []}


WRONG_KINDS: dict[str, tuple[str, str]] = {
    "stream flags True": ("TypeError", "flags is an int (or a numpy integer), not bool True: pass a whole number"),
    "stream flags 1.0": ("TypeError", "flags is an int"),
    "priority -1.0": ("TypeError", "priority is an int"),
    "priority True": ("TypeError", "priority is an int"),
    "memset 7.0": ("TypeError", "memset's byte is an int"),
    "memset True": ("TypeError", "memset's byte is an int"),
    "attribute 1.5": ("TypeError", "attribute is an int"),
    "capture mode True": ("TypeError", "capture's mode is a StreamCaptureMode"),
    "GraphExec of a stream": ("TypeError", "made from a rawcuda Graph"),
    "capture_status of an event": ("TypeError", "capture_status() takes a rawcuda.Stream"),
    "copy onto itself, closed stream": ("ClosedError", "is closed"),
    "empty copy, wrong stream": ("TypeError", "stream must be a rawcuda Stream, another library's stream"),
    "overlap, an int for stream": ("TypeError", "stream must be a rawcuda Stream, another library's stream"),
}


@pytest.mark.parametrize("label", sorted(WRONG_KINDS))
def test_a_bool_a_float_or_the_wrong_object_is_refused_by_name(walk: dict[str, Any], label: str) -> None:
    # True and 1.0 were taken through int() as 1; a Stream reached the graph code as a graph; a copy that had
    # nothing to do never looked at its stream.
    error, text = WRONG_KINDS[label]
    result = walk[label]
    assert result.get("error") == error and text in result["text"], result
    assert result["log"] == []
