"""Another library's stream as ``stream=``: the ``__cuda_stream__`` protocol, taken (rawcuda/core/streamargs.py).

The calls run in a child over bench/fake/fakelaunch.c. "Their" stream is a handle the fake made, exported by a
small class as torch and cuda.core export theirs; the fake reports which stream each launch, copy and event
went to, and can say that one stream belongs to another context. The GPU tests pass torch, CuPy and cuda.core
streams on the H200.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import over_fake_launch

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the fake driver")

PREAMBLE = """
import ctypes, gc, json, sys, weakref
import numpy as np
import rawcuda
from rawcuda import BorrowedStream, DeviceBuffer, Event, Module, Stream
from rawcuda.ffi.types import CUlaunchConfig
fake = ctypes.CDLL(sys.argv[1])
for name in ("fakelaunch_last_config", "fakelaunch_last_recorded_on"):
    getattr(fake, name).restype = ctypes.c_void_p

def new_handle():
    h = ctypes.c_void_p()
    assert fake.cuStreamCreate(ctypes.byref(h), 0) == 0
    return h.value

class Theirs:  # a stream of another library: only the protocol
    def __init__(self, handle, version=0):
        self.handle, self.version = handle, version
    def __cuda_stream__(self):
        return (self.version, self.handle)

def launched_on():
    return ctypes.cast(fake.fakelaunch_last_config(), ctypes.POINTER(CUlaunchConfig)).contents.hStream or 0

def refusal(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"

fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
a, b, c = (DeviceBuffer.zeros(256) for _ in range(3))
out = {}
"""

USES = (
    PREAMBLE
    + """
theirs = Theirs(new_handle())
fn.launch(1, 256, c, a, b, 256, stream=theirs)
out["launch"] = launched_on() == theirs.handle
fn.launch(1, 256, c, a, b, 256, stream=theirs)  # the same again: still read from the object
out["launch again"] = launched_on() == theirs.handle
moved = theirs.handle
theirs.handle = new_handle()  # their library replaced the stream behind the same object
fn.launch(1, 256, c, a, b, 256, stream=theirs)
out["a new handle is read"] = launched_on() == theirs.handle != moved
bound = fn.bind(1, 256, c, a, b, 256, stream=theirs)
theirs_then = theirs.handle
bound()
out["bound"] = launched_on() == theirs_then
kept = BorrowedStream.of(theirs)
out["of() is the one calls use"] = kept is BorrowedStream.of(theirs) and kept.owner is theirs
fn.launch(1, 256, c, a, b, 256, stream=kept)
out["a kept one"] = launched_on() == theirs.handle
e = Event()
e.record(theirs)
out["event"] = (fake.fakelaunch_last_recorded_on() or 0) == theirs.handle
host = np.random.default_rng(7).random(256, dtype=np.float32)
a.copy_from(host, stream=theirs)
out["copy and read back"] = bool((a.to_array(stream=theirs) == host).all())
c.fill(3.0, stream=theirs)
out["legacy"] = (fn.launch(1, 256, c, a, b, 256, stream=Theirs(0)), launched_on())[1] == 0
out["timing"] = len(rawcuda.time_ms(lambda: None, reps=2, warmup=0, stream=theirs).times) == 2
print(json.dumps(out))
"""
)

REFUSALS = (
    PREAMBLE
    + """
class Broken:
    def __cuda_stream__(self):
        return self.answer
def with_answer(answer):
    broken = Broken(); broken.answer = answer
    return broken
other = new_handle()
fake.fakelaunch_stream_in_other_context(ctypes.c_void_p(other))
cases = {
    "version 1": Theirs(new_handle(), version=1),
    "not a pair": with_answer(7),
    "a float handle": with_answer((0, 1.5)),
    "per-thread": Theirs(2),
    "other context": Theirs(other),
    "no protocol": object(),
    "an int": 5,
}
for name, stream in cases.items():
    out[name] = [
        refusal(lambda: fn.launch(1, 256, c, a, b, 256, stream=stream)),
        refusal(lambda: c.memset(0, stream=stream)),
        refusal(lambda: Event().record(stream)),
    ]
print(json.dumps(out))
"""
)

LIFETIME = (
    PREAMBLE
    + """
gc.disable()
theirs = [Theirs(new_handle()) for _ in range(20)]
refs = [weakref.ref(t) for t in theirs]
for t in theirs:
    fn.launch(1, 256, c, a, b, 256, stream=t)
del theirs, t
alive = [r() is not None for r in refs]
out["the oldest let go"] = alive[:4] == [False] * 4
out["the newest kept"] = all(alive[-16:])
print(json.dumps(out))
"""
)


def test_every_stream_parameter_takes_another_librarys_stream(tmp_path: Path) -> None:
    result = over_fake_launch(USES, tmp_path)
    assert result == dict.fromkeys(result, True) and len(result) == 10


def test_a_stream_rawcuda_cannot_check_is_refused_with_the_reason(tmp_path: Path) -> None:
    result = over_fake_launch(REFUSALS, tmp_path)
    expected = {
        "version 1": "ValueError: Theirs.__cuda_stream__() speaks version 1 of the stream protocol",
        "not a pair": "TypeError: Broken.__cuda_stream__() must return (version, handle), got int 7",
        "a float handle": "TypeError: the handle __cuda_stream__ returned is an int",
        "per-thread": "ValueError: ",
        "other context": "ValueError: ",
        "no protocol": "TypeError: stream must be a rawcuda Stream, another library's stream",
        "an int": "TypeError: stream must be a rawcuda Stream, another library's stream",
    }
    for name, start in expected.items():
        assert [r.startswith(start) for r in result[name]] == [True] * 3, (name, result[name])
    assert all("per-thread default stream" in r for r in result["per-thread"])
    assert all("belongs to context" in r for r in result["other context"])


def test_a_context_keeps_only_its_latest_borrowed_streams_alive(tmp_path: Path) -> None:
    result = over_fake_launch(LIFETIME, tmp_path)
    assert result == {"the oldest let go": True, "the newest kept": True}


EDGES = (
    PREAMBLE
    + """
import threading
class Huge:  # a repr that raises: the refusal must not call it
    def __repr__(self):
        raise RuntimeError("repr called")
class AsAttribute:  # cuda.core's older form: an attribute, not a method
    def __init__(self, handle):
        self.__cuda_stream__ = (0, handle)
class AsProperty:
    def __init__(self, handle):
        self.handle = handle
    @property
    def __cuda_stream__(self):
        return (0, self.handle)
handle = new_handle()
for name, value in {"2**64": 2**64, "-1": -1, "2**64 + 2": 2**64 + 2, "np -1": np.int64(-1)}.items():
    out[name] = refusal(lambda: fn.launch(1, 256, c, a, b, 256, stream=Theirs(value)))
out["raising repr"] = refusal(lambda: c.memset(0, stream=Huge()))
out["a context in stream's place"] = refusal(lambda: DeviceBuffer.empty(4, np.float32, Theirs(handle)))
out["attribute form"] = refusal(lambda: fn.launch(1, 256, c, a, b, 256, stream=AsAttribute(handle)))
out["attribute form goes there"] = launched_on() == handle
out["property form"] = refusal(lambda: fn.launch(1, 256, c, a, b, 256, stream=AsProperty(handle)))
failures = []
def borrow_many():
    for _ in range(8000):
        try:
            BorrowedStream.of(Theirs(handle))
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
sys.setswitchinterval(1e-6)
threads = [threading.Thread(target=borrow_many) for _ in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
out["threads"] = failures[:3]
print(json.dumps(out))
"""
)


def test_what_slipped_past_the_refusals(tmp_path: Path) -> None:
    # Each case was once accepted or failed with the wrong error: handles past 64 bits wrapped around (2**64
    # became the legacy stream, 2**64 + 2 the per-thread one), a raising repr escaped from the message, the
    # attribute form of the protocol was "not callable", and borrowing
    # from several threads raised an internal KeyError.
    result = over_fake_launch(EDGES, tmp_path)
    for name in ("2**64", "-1", "2**64 + 2", "np -1"):
        assert result[name].startswith("ValueError: the handle __cuda_stream__ returned"), (name, result[name])
    assert result["raising repr"].startswith("TypeError: stream must be"), result["raising repr"]
    assert "goes by its keyword" in result["a context in stream's place"], result["a context in stream's place"]
    assert result["attribute form"] == result["property form"] == "accepted"
    assert result["attribute form goes there"] is True
    assert result["threads"] == []


CLOSED_OWNER = (
    PREAMBLE
    + """
from rawcuda.checked.errors import ClosedError
fake.fakelaunch_count.restype = ctypes.c_ulonglong
theirs = Theirs(new_handle())
kept = BorrowedStream.of(theirs)
bound = fn.bind(1, 256, c, a, b, 256, stream=theirs)
for _ in range(2):  # the second of each is the cached one
    fn.launch(1, 256, c, a, b, 256, stream=kept)
    bound()
before = fake.fakelaunch_count()
theirs.handle = 0  # what cuda.core's stream answers once it is closed: its old handle is destroyed
out["launch"] = refusal(lambda: fn.launch(1, 256, c, a, b, 256, stream=kept))
out["bound"] = refusal(bound)
out["memset"] = refusal(lambda: c.memset(0, stream=kept))
out["event"] = refusal(lambda: Event().record(kept))
out["reached"] = fake.fakelaunch_count() - before
print(json.dumps(out))
"""
)


def test_a_kept_borrowed_stream_whose_owner_closed_it_is_refused(tmp_path: Path) -> None:
    # Launching on the destroyed handle crashed the H200's driver (signal 11): a kept BorrowedStream and a
    # bound launch must ask the owner again, and refuse once it names another stream.
    result = over_fake_launch(CLOSED_OWNER, tmp_path)
    for name in ("launch", "bound", "memset", "event"):
        assert result[name].startswith("ClosedError: <BorrowedStream"), (name, result[name])
        assert "the other library closed or replaced it" in result[name]
    assert result["reached"] == 0
