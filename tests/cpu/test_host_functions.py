"""Host functions (Stream.launch_host_func) over the fake driver, which calls each one at once: the callable gets
its arguments, stays alive until it ran, and what it raises is kept -- result() raises it, and so does the
stream's next synchronize() when nobody asked -- never lost, never crossing into C. And the stream protocol a
Stream exports (__cuda_stream__)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CHILD_REFUSED, over_fake_launch

SCRIPT = (
    CHILD_REFUSED
    + r"""
import gc, json, weakref
import rawcuda
from rawcuda import HostFunctionError, Stream
from rawcuda.core import hostfunc

out = {}
s = Stream()
seen = []
call = s.launch_host_func(seen.append, 41)
out["ran"] = [seen, call.done, call.result(), repr(call)]

def boom(x):
    raise KeyError(x)

bad = s.launch_host_func(boom, "k")
try:
    bad.result()
except HostFunctionError as exc:
    out["result"] = [str(exc), type(exc.__cause__).__name__]
try:
    s.synchronize()  # result() already reported it: synchronize says nothing more
    out["sync_after_result"] = "quiet"
except HostFunctionError as exc:
    out["sync_after_result"] = str(exc)

s.launch_host_func(boom, "unseen")
try:
    s.synchronize()
    out["sync_unseen"] = None
except HostFunctionError as exc:
    out["sync_unseen"] = [str(exc), repr(exc.__cause__)]
try:
    s.synchronize()
    out["sync_again"] = "quiet"
except HostFunctionError as exc:
    out["sync_again"] = str(exc)

class Big:
    pass

big = Big()
gone = weakref.ref(big)
gc.disable()
s.launch_host_func(lambda b: None, big)
del big
held = gone() is not None  # it ran (the fake runs it at once), on what stands for the driver's thread ...
s.synchronize()  # ... and is let go here, on ours: whatever it frees may call CUDA
out["args_released"] = [held, gone() is None]

def fails_with(arg):
    raise ValueError("kept")

failing = Big()
gone = weakref.ref(failing)
s.launch_host_func(fails_with, failing)
del failing
try:
    s.synchronize()
except HostFunctionError:
    pass
out["failure_released"] = gone() is None  # the kept exception's frames do not hold the arguments (gc is off)
gc.enable()

told = s.launch_host_func(boom, "asked")
out["exception_counts_as_told"] = repr(told.exception())
s.synchronize()  # quiet: exception() told the caller already


out["not_callable"] = refused(lambda: s.launch_host_func(42))
out["pending"] = hostfunc.pending_calls()
version, handle = s.__cuda_stream__()
out["protocol"] = [version, handle == s.handle, type(handle).__name__]
s.close()
try:
    s.__cuda_stream__()
    out["protocol_closed"] = None
except rawcuda.ClosedError as exc:
    out["protocol_closed"] = str(exc)
out["closed"] = refused(lambda: s.launch_host_func(print))
print(json.dumps(out))
"""
)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_host_functions_run_with_their_arguments_and_report_what_they_raise(tmp_path: Path) -> None:
    out: dict[str, Any] = over_fake_launch(SCRIPT, tmp_path)
    assert out["ran"] == [[41], True, None, "<HostCall returned>"]
    assert out["result"][1] == "KeyError" and "raised KeyError: 'k'" in out["result"][0]
    assert out["sync_after_result"] == "quiet"
    assert (
        out["sync_unseen"][0].startswith("1 host function(s) queued on")
        and "KeyError: 'unseen'" in out["sync_unseen"][0]
    )
    assert out["sync_unseen"][1] == "KeyError('unseen')"
    assert out["sync_again"] == "quiet"  # reported once, not at every synchronize
    assert out["args_released"] == [True, True]  # held until it ran, let go on the user's thread
    assert out["failure_released"] is True
    assert out["exception_counts_as_told"] == "KeyError('asked')"
    assert out["not_callable"].startswith("TypeError: launch_host_func takes a callable, not int 42")
    assert out["pending"] == 0  # every token was taken by its run
    assert out["closed"] is not None and "closed" in out["closed"]
    assert out["protocol"] == [0, True, "int"]  # the __cuda_stream__ protocol, version 0: (0, the CUstream)
    assert out["protocol_closed"] is not None  # a closed stream hands out no handle


# --- deferred: each host function runs later, on the fake's worker thread, as on the driver's own ---------------
DEFERRED = (
    CHILD_REFUSED
    + r"""
import ctypes, gc, json, sys, threading
import rawcuda
from rawcuda import DeviceBuffer, HostFunctionError, Stream

fake = ctypes.CDLL(sys.argv[1])
fake.fakelaunch_defer_host_functions(1)
out = {}
s = Stream()

fake.fakelaunch_gate(1)  # a long kernel ahead of it
call = s.launch_host_func(lambda: "ran")
out["pending"] = [call.done, rawcuda.core.hostfunc.pending_calls()]
fake.fakelaunch_gate(0)
s.synchronize()
out["after"] = [call.done, call.result()]

# The call holds the last reference to a buffer: it must not be freed inside the host function.
gc.disable()
buf = DeviceBuffer.zeros(1024)
s.launch_host_func(lambda b: None, buf)
del buf
fake.fakelaunch_gate(0)
s.synchronize()
out["calls_inside"] = fake.fakelaunch_calls_inside_host_functions()
gc.enable()

# Two threads queue failing host functions on one stream: every failure is told, by count, at the synchronize.
def fail():
    raise RuntimeError("x")

N = 500
fake.fakelaunch_gate(1)
workers = [threading.Thread(target=lambda: [s.launch_host_func(fail) for _ in range(N)]) for _ in range(2)]
for w in workers:
    w.start()
for w in workers:
    w.join()
fake.fakelaunch_gate(0)
try:
    s.synchronize()
    out["told"] = None
except HostFunctionError as exc:
    out["told"] = str(exc).split(" host function(s)")[0]
print(json.dumps(out))
"""
)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_deferred_host_functions_wait_let_go_on_our_thread_and_are_all_told(tmp_path: Path) -> None:
    out: dict[str, Any] = over_fake_launch(DEFERRED, tmp_path)
    assert out["pending"] == [False, 1]  # behind the "kernel": not run, held by the registry
    assert out["after"] == [True, "ran"]
    assert out["calls_inside"] == 0  # before: cuCtxPushCurrent, cuMemFree and a pop, inside the host function
    assert out["told"] == str(2 * 500)  # before: the two threads' rebuilt lists lost some of them
