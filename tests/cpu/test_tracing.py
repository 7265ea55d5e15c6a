"""Call tracing: every driver call printed with arguments, result and time; nothing at all when off.

Here with the fake libcuda (tests/fakecuda/); a real vector add traced on a GPU is in tests/gpu/test_tracing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_python

TRACE_SCRIPT = """
import ctypes, io, json, rawcuda
from rawcuda import checked
from rawcuda.checked import cu
out = io.StringIO()
p = ctypes.c_uint64()
cu.cuInit(0)
bare_init = cu.cuInit  # takes an int: bound through its range check (rawcuda.checked.intranges)
bare = type(cu.cuCtxSynchronize).__name__, bare_init.__name__, hasattr(bare_init, "__wrapped__")
with rawcuda.trace(file=out):
    inside = type(cu.cuInit).__name__, cu.cuInit.__wrapped__ is bare_init
    cu.cuMemAlloc(ctypes.byref(p), 4096)
    with rawcuda.trace(file=out):
        cu.cuDriverGetVersion(ctypes.byref(ctypes.c_int()))
    try:
        cu.cuMemAlloc(ctypes.byref(p), 1 << 40)
    except rawcuda.OutOfMemoryError:
        pass
    slot = checked.hot_slot("cuLaunchKernel")
    args = [ctypes.c_uint(1)] * 7
    slot.call(ctypes.c_void_p(0x7f00aabbcc00), *args, ctypes.c_void_p(0), (ctypes.c_void_p * 1)(), None)
after = cu.cuInit is bare_init, type(cu.cuCtxSynchronize).__name__, type(slot.call).__name__
print(json.dumps({"bare": bare, "inside": inside, "after": after, "lines": out.getvalue().splitlines()}))
"""


def test_trace_prints_each_call_and_costs_nothing_when_off(fake_libcuda: Path) -> None:
    proc = run_python(TRACE_SCRIPT, RAWCUDA_LIBCUDA=str(fake_libcuda))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # Off: a row without integer parameters is the bare ctypes function, one with them its range check only.
    assert result["bare"] == ["_FuncPtr", "cuInit", False]
    assert result["inside"] == ["function", True]  # on: a traced wrapper around exactly that
    assert result["after"] == [True, "_FuncPtr", "_FuncPtr"]  # off again: what was there before
    lines = result["lines"]
    assert len(lines) == 4, lines
    assert lines[0].startswith("[rawcuda] cuMemAlloc_v2(dptr=&c_ulong, bytesize=4096)")
    assert "-> CUDA_SUCCESS" in lines[0] and lines[0].endswith(" us")
    assert lines[1].startswith("[rawcuda] cuDriverGetVersion(")  # a nested trace block prints once
    assert "bytesize=1099511627776" in lines[2] and "CUDA_ERROR_OUT_OF_MEMORY (2)" in lines[2]
    assert lines[3].startswith("[rawcuda] cuLaunchKernel(f=0x…bbcc00, gridDimX=1,")  # the hot path too


def test_environment_variable_traces_the_whole_process(fake_libcuda: Path) -> None:
    proc = run_python(
        "import rawcuda\nrawcuda.init()\nprint(rawcuda.driver_version())",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
        RAWCUDA_TRACE="1",
    )
    assert proc.returncode == 0
    assert "[rawcuda] cuInit(Flags=0)" in proc.stderr and "[rawcuda] cuDriverGetVersion(" in proc.stderr
    quiet = run_python("import rawcuda\nrawcuda.init()", RAWCUDA_LIBCUDA=str(fake_libcuda), RAWCUDA_TRACE="0")
    assert quiet.stderr == ""


def test_short_handles() -> None:
    from rawcuda.checked.tracing import short_handle

    assert short_handle(0) == "NULL" and short_handle(0x1234) == "0x1234"
    assert short_handle(0x7F3A2C001200) == "0x…001200"


RACE_SCRIPT = """
import ctypes, io, json, linecache, sys, threading
import rawcuda
from rawcuda.checked import cu, init
direction = sys.argv[1]  # "on": thread B starts a trace while thread A binds a row; "off": B ends one
target = "cuDriverGetVersion"
init()
paused, resume = threading.Event(), threading.Event()
def tracer(frame, event, arg):  # stops thread A just before it stores the row it bound
    if event == "call":
        return tracer if frame.f_code.co_name == "__getattr__" else None
    if event == "line":
        text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if "setattr(self, name, fn)" in text and frame.f_locals.get("name") == target:
            paused.set()
            resume.wait(5)
    return tracer
out = io.StringIO()
block = rawcuda.trace(file=out)
if direction == "off":
    block.__enter__()
def bind():
    sys.settrace(tracer)
    try:
        getattr(cu, target)
    finally:
        sys.settrace(None)
a = threading.Thread(target=bind)
a.start()
reached = paused.wait(5)
def toggle():
    block.__enter__() if direction == "on" else block.__exit__(None, None, None)
b = threading.Thread(target=toggle)
b.start()
b.join(0.5)  # (with one lock, B waits for A here)
resume.set()
a.join(5)
b.join(5)
cu.cuDriverGetVersion(ctypes.byref(ctypes.c_int()))
traced = target in out.getvalue()
if direction == "on":
    block.__exit__(None, None, None)
print(json.dumps({"reached": reached, "traced": traced}))
"""


@pytest.mark.parametrize(("direction", "traced"), [("on", True), ("off", False)])
def test_a_row_bound_while_tracing_switches_follows_the_switch(
    fake_libcuda: Path, direction: str, traced: bool
) -> None:
    # Binding a row and switching tracing took two different locks: a row bound while a trace began stayed
    # bare for the whole trace, and one bound while a trace ended stayed traced (every call paying for it).
    # Thread A is stopped just before it stores its row; thread B switches tracing meanwhile.
    import subprocess
    import sys

    from tests.helpers import ROOT, python_env

    env = python_env(RAWCUDA_LIBCUDA=str(fake_libcuda))
    proc = subprocess.run(
        [sys.executable, "-c", RACE_SCRIPT, direction], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"reached": True, "traced": traced}


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("yes", True), ("0", False), ("false", False), ("No", False), ("off", False), ("", False)],
)
def test_rawcuda_trace_off_words_mean_off(fake_libcuda: Path, value: str, on: bool) -> None:
    # RAWCUDA_TRACE=0 was off, but "false", "no" and "off" turned tracing ON (anything but "" and "0" did).
    proc = run_python(
        "import rawcuda\nfrom rawcuda.checked import tracing\nprint('ON' if tracing.enabled() else 'OFF')\n",
        RAWCUDA_TRACE=value,
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert proc.stdout.strip().splitlines()[-1] == ("ON" if on else "OFF"), proc.stderr
