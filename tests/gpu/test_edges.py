"""Edge cases on a real GPU: host views outliving their context, fork, a foreign current context, leaks with
the cyclic GC off, and what a sticky error leaves of the process.

Each test here failed on the code before the fix (the comment on each says how); the crashing ones run in a
child process, so that a crash is a failed test and not a dead test session.
"""

from __future__ import annotations

import ctypes
import gc
import json
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, Module, kernels, ops
from rawcuda.checked import cu
from rawcuda.core.context import default_context
from rawcuda.ffi.attributes import PointerAttribute
from tests.helpers import BLOCK, NAN32, grid_for, needs_fork, run_python

MIB = 1 << 20
BIG = 256 * MIB  # one buffer this big is far above the driver's pool noise in cuMemGetInfo
TOLERANCE = 8 * MIB
N = 1 << 20


def json_tail(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


# --- host views after Context.close() ---------------------------------------------------------------------------------
HOST_VIEWS_AFTER_CLOSE = """
import json, numpy as np
from rawcuda import Context, ManagedBuffer, PinnedBuffer
KIND = {kind!r}
ctx = Context.primary(0) if KIND == "primary" else Context.create(0)   # nothing else retains it
rng = np.random.default_rng()
data = rng.standard_normal(1 << 20, dtype=np.float32)
pinned, managed = PinnedBuffer(data.shape, context=ctx), ManagedBuffer(data.shape, context=ctx)
pv, mv = pinned.array, managed.array
pv[...] = data
mv[...] = data[::-1]
ctx.close()     # frees every allocation of the context -- unless the views hold it
ok = bool(np.array_equal(pv, data)) and bool(np.array_equal(mv, data[::-1]))
pv[0] = 1.0; mv[0] = 2.0   # writable, too
del pv, mv      # the last views: now the memory and the context go
print(json.dumps({{"ok": ok, "closed": ctx.closed and pinned.closed and managed.closed}}))
"""


@pytest.mark.parametrize("kind", ["created", "primary"])
def test_host_views_stay_valid_after_their_context_is_closed(kind: str) -> None:
    # Before: SIGSEGV on the first read after ctx.close() (cuCtxDestroy -- or the last primary release --
    # freed the pinned and managed memory under the numpy views).
    proc = run_python(HOST_VIEWS_AFTER_CLOSE.format(kind=kind))
    assert proc.returncode == 0, f"the child died ({proc.returncode}): {proc.stderr[-2000:]}"
    assert json_tail(proc.stdout) == {"ok": True, "closed": True}


CONTEXT_GOES_WITH_THE_LAST_VIEW = """
import json
import rawcuda
from rawcuda import Context
primary = rawcuda.default_context()
primary.synchronize()
free_before = primary.mem_info()[0]
ctx = Context.create(0)
view = rawcuda.PinnedBuffer(1024, context=ctx).array
view[...] = 3.0
ctx.close()
readable = float(view.sum()) == 3072.0
held = free_before - primary.mem_info()[0]
del view
after = free_before - primary.mem_info()[0]
print(json.dumps({"readable": readable, "held": held, "after": after}))
"""


def test_a_context_held_by_host_views_is_destroyed_with_the_last_view() -> None:
    # The hold must end: a context whose close() was deferred is destroyed when the last view goes. A created
    # context takes device memory of its own (hundreds of MiB on the H200), which cuMemGetInfo shows.
    # Before: SIGSEGV reading the view (in a child process, so that the crash is a failure, not the end).
    proc = run_python(CONTEXT_GOES_WITH_THE_LAST_VIEW)
    assert proc.returncode == 0, f"the child died ({proc.returncode}): {proc.stderr[-2000:]}"
    report = json_tail(proc.stdout)
    assert report["readable"], report
    assert report["held"] > TOLERANCE, f"the created context must still exist while the view lives: {report}"
    assert report["after"] < TOLERANCE, f"the last view must destroy the context: {report}"


# --- fork and host views ----------------------------------------------------------------------------------------------
FORKED_HOST_VIEWS = """
import json, multiprocessing as mp, numpy as np, rawcuda
pinned, managed = rawcuda.PinnedBuffer(1024), rawcuda.ManagedBuffer(1024)
pinned.array[...] = 1.0

def child(queue):
    outcomes = []
    for name, attempt in (("pinned", lambda: pinned.array), ("managed", lambda: managed.array),
                          ("numpy", lambda: np.asarray(pinned)), ("ptr", lambda: pinned.ptr)):
        try:
            attempt().sum() if name != "ptr" else attempt()
            outcomes.append(name + ": no error")
        except rawcuda.RawCudaError as exc:
            outcomes.append(name + ": " + type(exc).__name__)
    queue.put(outcomes)

if __name__ == "__main__":
    fork = mp.get_context("fork")
    queue = fork.Queue()
    p = fork.Process(target=child, args=(queue,))
    p.start()
    p.join(120)
    outcomes = queue.get(timeout=5) if p.exitcode == 0 else []
    print(json.dumps({"outcomes": outcomes, "exitcode": p.exitcode, "parent_ok": float(pinned.array.sum())}))
"""


@needs_fork
def test_a_forked_child_gets_forked_process_error_from_host_views(tmp_path) -> None:
    # Before: the child was handed the view and died of SIGSEGV reading it (the driver does not map pinned or
    # managed memory into a forked child).
    script = tmp_path / "fork_views.py"
    script.write_text(FORKED_HOST_VIEWS)
    proc = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json_tail(proc.stdout)
    assert report["exitcode"] == 0, f"the child died: {report}"
    assert report["outcomes"] == [f"{n}: ForkedProcessError" for n in ("pinned", "managed", "numpy", "ptr")]
    assert report["parent_ok"] == 1024.0


# --- a current context switched behind rawcuda's back -----------------------------------------------------------------
def context_of(ptr: int) -> int:
    ctx = ctypes.c_void_p()
    cu.cuPointerGetAttribute(ctypes.byref(ctx), PointerAttribute.CONTEXT, ptr)
    return ctx.value or 0


@pytest.fixture
def foreign() -> Iterator[Context]:
    other = Context.create(0)
    yield other
    cu.cuCtxSetCurrent(default_context().raw_handle)
    other.close()


def test_objects_land_in_their_own_context_whatever_another_library_made_current(
    foreign: Context, rng: np.random.Generator
) -> None:
    # Before: activate() trusted a per-thread cache, so after a switch it did not see, the buffer was
    # allocated in the foreign context while claiming the primary one.
    primary = default_context()
    primary.activate()
    cu.cuCtxSetCurrent(foreign.raw_handle)  # what torch, CuPy or cuda-python may do on this thread
    buf = DeviceBuffer(N, context=primary)
    assert context_of(buf.ptr) == primary.raw_handle
    cu.cuCtxSetCurrent(foreign.raw_handle)
    stream = rawcuda.Stream(primary)
    cu.cuCtxSetCurrent(foreign.raw_handle)
    module = Module(kernels.ptx_path("vector_add"), primary)
    assert stream.context is primary and module.context is primary
    buf.close()
    stream.close()
    module.close()


@pytest.mark.parametrize("on_stream", [False, True])
def test_a_launch_runs_in_its_kernels_context_whatever_is_current(
    foreign: Context, rng: np.random.Generator, on_stream: bool
) -> None:
    # Before (legacy stream): the cache said "primary is current", the launch went to the driver with the
    # foreign context current, and cuLaunchKernel failed with CUDA_ERROR_INVALID_HANDLE.
    primary = default_context()
    fn = Module(kernels.ptx_path("vector_add"), primary).function("vector_add")
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.from_array(np.full(N, NAN32))
    stream = rawcuda.Stream(primary) if on_stream else None
    for launch in (
        lambda: fn.launch(grid_for(N), BLOCK, dc, da, db, N, stream=stream),
        fn.bind(grid_for(N), BLOCK, dc, da, db, N, stream=stream),
    ):
        dc.fill(NAN32)
        cu.cuCtxSetCurrent(foreign.raw_handle)
        launch()
        cu.cuCtxSetCurrent(0)  # and with no context current at all
        launch()
        primary.synchronize()
        np.testing.assert_array_equal(dc.to_array(), a + b)
    if stream is not None:
        stream.close()


def test_cuda_python_switching_contexts_does_not_fool_rawcuda(rng: np.random.Generator) -> None:
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    default_context().activate()  # rawcuda made the primary current last (what a cache would remember)
    err, dev = driver.cuDeviceGet(0)
    err, theirs = driver.cuCtxCreate(None, 0, dev)
    assert int(err) == 0, err
    try:
        primary = default_context()
        x = rng.standard_normal(N, dtype=np.float32)
        buf = DeviceBuffer.from_array(x, context=primary)  # cuCtxCreate made `theirs` current on this thread
        assert context_of(buf.ptr) == primary.raw_handle
        np.testing.assert_array_equal(buf.to_array(), x)
        buf.close()
    finally:
        driver.cuCtxDestroy(theirs)
    cu.cuCtxSetCurrent(default_context().raw_handle)


# --- kernels that remember their last arguments -----------------------------------------------------------------------
@pytest.fixture
def gc_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_ops_and_functions_do_not_keep_their_last_arguments_alive(gc_off: None) -> None:
    # Before: Function kept its last launch's argument tuple (for the same-objects fast path) and ops keeps
    # its Functions for the whole process, so `ops.gelu(out, x); del x` never freed x.
    ctx = default_context()
    ctx.synchronize()
    free_before = ctx.mem_info()[0]
    n = BIG // 4
    out, x = DeviceBuffer(n), DeviceBuffer(n)
    x.fill(0.5)
    ops.gelu(out, x)
    fn = Module(kernels.ptx_path("vector_add")).function("vector_add")
    fn.launch(grid_for(n), BLOCK, out, x, x, n)
    ctx.synchronize()
    refs = [weakref.ref(out), weakref.ref(x)]
    del out, x
    assert [r() for r in refs] == [None, None], "a launch kept a buffer alive"
    assert ctx.mem_info()[0] > free_before - TOLERANCE
    fn.module.close()


def test_the_fast_path_still_reuses_the_pack_and_never_a_dead_buffers(rng: np.random.Generator) -> None:
    # Remembering buffers weakly must not reuse a pack for a new buffer that happens to get the old one's id.
    fn = Module(kernels.ptx_path("vector_add")).function("vector_add")
    x = rng.standard_normal(N, dtype=np.float32)
    previous = None  # the pack the launches of the previous round used (its buffers are dead now)
    for _ in range(50):
        da, db, dc = DeviceBuffer.from_array(x), DeviceBuffer.from_array(x), DeviceBuffer(N)
        dc.fill(NAN32)
        fn.launch(grid_for(N), BLOCK, dc, da, db, N)
        launched = fn._packed
        assert launched is not previous, "new buffers (perhaps at a dead one's id) were given a dead pack"
        packed = fn.pack((dc, da, db, N))
        fn.launch(grid_for(N), BLOCK, dc, da, db, N)  # the same objects: the same pack as the launch before
        np.testing.assert_array_equal(dc.to_array(), x + x)
        assert packed is not fn._packed  # pack() made a new one; launch kept its own
        assert fn._packed is launched, "the same objects again: the fast path reuses the pack"
        previous = launched
        del da, db, dc, launched, packed
    fn.module.close()


# --- after a sticky error ---------------------------------------------------------------------------------------------
STICKY_CHILD = """
import json, rawcuda
from rawcuda import Context, Module, kernels
before = Context.create(0)        # made before the fault
fn = Module(kernels.ptx_path("vector_add")).function("vector_add")
fn.launch(1, 32, 0x10, 0x10, 0x10, 32)   # writes through a null-ish pointer: an illegal address
report = {}
try:
    fn.context.synchronize()
except rawcuda.KernelFaultError as exc:
    report["fault"] = exc.code
    report["message"] = str(exc)
attempts = {"new created": lambda: Context.create(0), "new primary": lambda: Context.primary(0).mem_info(),
            "older created": lambda: before.mem_info()}
for name, attempt in attempts.items():
    try:
        attempt()
        report[name] = "works"
    except rawcuda.CudaError as exc:
        report[name] = exc.code
print(json.dumps(report))
"""


def test_a_sticky_error_ends_cuda_for_the_whole_process_and_the_error_says_so() -> None:
    # Before: the message said the *context* was unusable, implying a fresh context recovers; it does not.
    proc = run_python(STICKY_CHILD)
    report = json_tail(proc.stdout)
    assert report["fault"] == 700, report
    assert (report["new created"], report["new primary"], report["older created"]) == (700, 700, 700), report
    assert "whole process" in report["message"] and "child process" in report["message"]


def test_a_context_dropped_after_foreign_waits_and_stream_launches_is_collected(rng: np.random.Generator) -> None:
    # Before: the foreign-stream ordering kept its Event in a dict whose value held the context, and
    # a cached ops Function's last_config held the last Stream (whose finalizer holds the context): either
    # kept a dropped, unclosed context alive for good, even through gc.collect().
    ctx = Context.create(0)
    producer = rawcuda.Stream(ctx)
    x = DeviceBuffer.from_array(rng.standard_normal(N, dtype=np.float32), context=ctx)
    out = DeviceBuffer(N, context=ctx)
    interface = {**x.__cuda_array_interface__, "stream": producer.handle}
    foreign = type("Foreign", (), {"__cuda_array_interface__": interface})()
    fn = Module(kernels.ptx_path("vector_add"), ctx).function("vector_add")
    fn.launch(grid_for(N), BLOCK, out, foreign, x, N)
    ops.gelu(out, x, stream=producer)
    ctx.synchronize()
    dead = weakref.ref(ctx)
    del ctx, producer, x, out, foreign, fn
    gc.collect()
    assert dead() is None, "something still holds the dropped context"
