"""Sticky errors: a kernel that writes to an illegal address ruins its context for the rest of the process.

Each scenario runs in a child process (``run_python``), because a sticky error cannot be undone: the
driver answers every later call in that context with the same code. rawcuda's promises, checked here:

* the fault surfaces as :class:`rawcuda.KernelFaultError`, naming CUDA_ERROR_ILLEGAL_ADDRESS and saying
  that the error is sticky -- at the next synchronize, or at the launch itself with RAWCUDA_SYNC_LAUNCHES=1;
* every later use of the context raises :class:`rawcuda.ContextPoisonedError`, naming the poisoning error
  and the last kernel launched (so the guilty kernel can be found);
* closing objects of a poisoned context is silent, and the process exits cleanly: status 0, nothing on
  stderr (finalizers leak rather than call into the dead context);
* a fresh process afterwards works normally.

The faulting kernel is PTX written by hand: it stores a 32-bit value at whatever address it is given.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from rawcuda import DeviceBuffer, ops
from tests.helpers import run_python

pytestmark = pytest.mark.gpu

# The smallest kernel that faults on demand: `*(unsigned *)address = 42`. Address 8 is 4-byte aligned (so the
# store is not merely misaligned) and lies in the never-mapped first page, so the store is an illegal access.
FAULT_PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry poke(
    .param .u64 poke_param_0
)
{
    .reg .b32   %r<2>;
    .reg .b64   %rd<2>;

    ld.param.u64    %rd1, [poke_param_0];
    mov.u32         %r1, 42;
    st.global.u32   [%rd1], %r1;
    ret;
}
"""
ILLEGAL_ADDRESS = 8
ILLEGAL_ADDRESS_NAME = "CUDA_ERROR_ILLEGAL_ADDRESS"
ILLEGAL_ADDRESS_CODE = 700
KERNEL = "poke"
N = 4099  # elements of the buffers the child makes before the fault
TAG = "STICKY-REPORT "  # prefix of the child's one machine-readable line

# The child: make some objects, launch the faulting kernel, then try every kind of call again.
CHILD = """
import json, sys
import numpy as np
import rawcuda
from rawcuda import DeviceBuffer, Event, Module, PinnedBuffer, Stream, ops

PTX, ADDRESS, TAG, N, CLOSE = {ptx!r}, {address}, {tag!r}, {n}, {close}
report = {{}}

def outcome(action):
    try:
        action()
    except Exception as exc:
        return {{"type": type(exc).__name__, "code": getattr(exc, "code", None), "message": str(exc),
                 "rawcuda": isinstance(exc, rawcuda.RawCudaError)}}
    return {{"type": None}}

ctx = rawcuda.default_context()
before = DeviceBuffer.from_array(np.arange(N, dtype=np.float32))
stream, event = Stream(), Event()
module = Module(PTX, name="poke.ptx")
poke = module.function("poke")
report["launch"] = outcome(lambda: poke.launch(1, 1, ADDRESS))
report["synchronize"] = outcome(ctx.synchronize)
report["poisoned"] = ctx.poisoned is not None
later = {{
    "synchronize_again": ctx.synchronize,
    "mem_info": ctx.mem_info,
    "new_buffer": lambda: DeviceBuffer.empty(4),
    "copy_to_host": before.to_array,
    "copy_to_device": lambda: before.copy_from(np.zeros(N, np.float32)),
    "fill": lambda: before.fill(1.0),
    "new_stream": Stream,
    "new_event": Event,
    "new_pinned": lambda: PinnedBuffer(4),
    "new_module": lambda: Module(PTX, name="again.ptx"),
    "launch_again": lambda: poke.launch(1, 1, ADDRESS),
    "ops": lambda: ops.vector_add(before, before, before),
    "stream_synchronize": stream.synchronize,
    "event_record": lambda: event.record(stream),
}}
report["later"] = {{name: outcome(action) for name, action in later.items()}}
if CLOSE:
    objects = [("buffer", before), ("stream", stream), ("event", event), ("module", module), ("context", ctx)]
    report["close"] = {{name: outcome(obj.close) for name, obj in objects}}
print(TAG + json.dumps(report))
"""

CREATED_CONTEXT_CHILD = """
import json
import numpy as np
import rawcuda
from rawcuda import Context, DeviceBuffer, Module, ops

PTX, ADDRESS, TAG, N = {ptx!r}, {address}, {tag!r}, {n}
report = {{}}
created = Context.create(0)
poke = Module(PTX, context=created, name="poke.ptx").function("poke")
poke.launch(1, 1, ADDRESS)
try:
    created.synchronize()
    report["fault"] = None
except rawcuda.KernelFaultError as exc:
    report["fault"] = exc.name
report["created_poisoned"] = created.poisoned is not None
rng = np.random.default_rng()
a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
try:  # the default (primary) context: it may work, or the driver may refuse it too -- never a crash
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    dc.fill(np.float32(np.nan))
    ops.vector_add(dc, da, db)
    report["default"] = "verified" if np.array_equal(dc.to_array(), a + b) else "wrong result"
except rawcuda.RawCudaError as exc:
    report["default"] = type(exc).__name__
print(TAG + json.dumps(report))
"""

FRESH_CHILD = """
import numpy as np
from rawcuda import DeviceBuffer, ops
rng = np.random.default_rng()
n = {n}
a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(n) as dc:
    dc.fill(np.float32(np.nan))
    ops.vector_add(dc, da, db)
    print("verified" if np.array_equal(dc.to_array(), a + b) else "WRONG")
"""


def run_child(code: str, **env: str) -> dict[str, Any]:
    proc = run_python(code, **env)
    assert proc.returncode == 0, f"status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stderr == "", f"the child wrote to stderr:\n{proc.stderr}"
    lines = [line[len(TAG) :] for line in proc.stdout.splitlines() if line.startswith(TAG)]
    assert len(lines) == 1, proc.stdout
    result: dict[str, Any] = json.loads(lines[0])
    return result


def assert_fault(outcome: dict[str, Any]) -> None:
    assert outcome["type"] == "KernelFaultError", outcome
    assert outcome["code"] == ILLEGAL_ADDRESS_CODE, outcome
    assert ILLEGAL_ADDRESS_NAME in outcome["message"] and "sticky" in outcome["message"], outcome["message"]


def assert_poisoned(name: str, outcome: dict[str, Any]) -> None:
    assert outcome["type"] == "ContextPoisonedError", (name, outcome)
    message = outcome["message"]
    assert "poisoned by: " in message and ILLEGAL_ADDRESS_NAME in message, (name, message)
    assert f"last kernel launched in it: {KERNEL} grid=1 block=1" in message, (name, message)
    assert "start a new process" in message and "RAWCUDA_SYNC_LAUNCHES=1" in message, (name, message)


def child_code(close: bool) -> str:
    return CHILD.format(ptx=FAULT_PTX, address=ILLEGAL_ADDRESS, tag=TAG, n=N, close=close)


def test_fault_surfaces_at_synchronize_then_poisons_the_context() -> None:
    report = run_child(child_code(close=True))
    assert report["launch"] == {"type": None}  # launches are asynchronous: the kernel has not run yet
    assert_fault(report["synchronize"])
    assert report["poisoned"] is True
    for name, outcome in report["later"].items():
        assert_poisoned(name, outcome)
    for name, outcome in report["close"].items():
        assert outcome == {"type": None}, (name, outcome)  # closing is silent: it leaks instead of calling in


def test_sync_launches_report_the_fault_at_the_launch() -> None:
    # RAWCUDA_SYNC_LAUNCHES=1 synchronizes after each launch, so the guilty launch raises. This child also
    # exits with every object still open in the poisoned context.
    report = run_child(child_code(close=False), RAWCUDA_SYNC_LAUNCHES="1")
    assert_fault(report["launch"])
    assert_poisoned("synchronize", report["synchronize"])
    for name, outcome in report["later"].items():
        assert_poisoned(name, outcome)


def test_a_fault_in_a_created_context_never_crashes_the_process() -> None:
    report = run_child(CREATED_CONTEXT_CHILD.format(ptx=FAULT_PTX, address=ILLEGAL_ADDRESS, tag=TAG, n=N))
    assert report["fault"] == ILLEGAL_ADDRESS_NAME and report["created_poisoned"] is True
    # The driver documents sticky errors as process-wide; whether the primary context still works is the
    # driver's choice. rawcuda's promise: a correct result or a rawcuda error, never a wrong answer or a crash.
    assert report["default"] in {"verified", "KernelFaultError", "ContextPoisonedError"}, report


def test_a_fresh_process_works_after_a_fault() -> None:
    run_child(child_code(close=True))
    proc = run_python(FRESH_CHILD.format(n=N))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.strip() == "verified", proc.stdout
    # ... and so does this process, which never faulted.
    rng = np.random.default_rng()
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(np.float32(np.nan))
        ops.vector_add(dc, da, db)
        np.testing.assert_array_equal(dc.to_array(), a + b)
