"""What closing a context leaves current, on the real driver (H200, driver 580).

Each one left the thread in a state where CuPy's next kernel failed: with no context at all
(CUDA_ERROR_INVALID_CONTEXT), or in a context rawcuda had closed. The rule that replaced the ad-hoc fix is in
rawcuda/core/guards/contextstack.py; tests/cpu/test_context_stack.py runs the same scenarios on a fake driver.

Every scenario but the subprocess one runs on a fresh thread: its stack starts empty, so after
``primary.activate()`` it holds exactly [primary], whatever earlier tests left on the main thread's stack.
Each test fails on the code before (da6c7a4 + dc61dc1); the comment in each says how.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import weakref
from collections.abc import Callable

import numpy as np
import pytest

from rawcuda import Context, DeviceBuffer, PinnedBuffer
from rawcuda.core.context import default_context
from rawcuda.core.guards.current import current_handle
from tests.helpers import run_python

pytestmark = pytest.mark.gpu

N = 4096


def on_fresh_thread(scenario: Callable[[], None]) -> None:
    """Run ``scenario`` on a new thread (an empty context stack) and re-raise what it raised here."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            scenario()
        except BaseException as exc:  # an assertion inside: fail the test with it
            failure.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]


@pytest.mark.parametrize("gc_on", [True, False])
def test_a_created_context_dropped_unclosed_puts_the_primary_back(gc_on: bool) -> None:
    # Before: the finalizer's cuCtxDestroy popped the context that mem_info() had put in place of the primary,
    # and the thread was left with nothing current (current_handle() == 0).
    primary = default_context()

    def scenario() -> None:
        primary.activate()
        ctx = Context.create()
        ctx.mem_info()  # a call into it: it replaced the primary on top of the stack
        assert current_handle() == ctx.raw_handle
        gone = weakref.ref(ctx)
        del ctx  # no close(): the weakref finalizer destroys it, now (reference counting, no cycle)
        assert gone() is None
        assert current_handle() == primary.raw_handle

    was_enabled = gc.isenabled()
    if not gc_on:
        gc.disable()
    try:
        on_fresh_thread(scenario)
    finally:
        if was_enabled:
            gc.enable()


PRIMARY_NEVER_RETAINED_BY_RAWCUDA = """
import json
from ctypes import byref, c_int, c_size_t, c_uint, c_void_p
import rawcuda
from rawcuda import Context
from rawcuda.checked import cu
from rawcuda.core.guards.current import current_handle

dev = rawcuda.Device(0).handle

def primary_active():
    flags, active = c_uint(), c_int()
    cu.cuDevicePrimaryCtxGetState(dev, byref(flags), byref(active))
    return bool(active.value)

out = {"active at start": primary_active()}
# Nobody holds the primary: closing leaves nothing current, as the thread began, and creates no primary.
c = Context.create()
c.mem_info()
out["c was current"] = current_handle() == c.raw_handle
c.close()
out["nobody: current"] = current_handle()
out["nobody: active"] = primary_active()
# Another library holds it and made it current (what the CUDA runtime under CuPy or torch does).
theirs = c_void_p()
cu.cuDevicePrimaryCtxRetain(byref(theirs), dev)
cu.cuCtxSetCurrent(theirs)
e = Context.create()
e.mem_info()  # replaces theirs on top
out["e was current"] = current_handle() == e.raw_handle
e.close()
out["theirs current"] = current_handle() == (theirs.value or 0)
free, total = c_size_t(), c_size_t()
cu.cuMemGetInfo(byref(free), byref(total))  # raises (the child dies) with nothing, or a dead context, current
out["a raw call works"] = total.value > 0
cu.cuCtxSetCurrent(None)
cu.cuDevicePrimaryCtxRelease(dev)
out["active after their release"] = primary_active()  # rawcuda kept no reference of its own
print(json.dumps(out))
"""


def test_the_primary_comes_back_in_a_process_where_rawcuda_never_retained_it() -> None:
    # Before: only rawcuda's own default context was put back; here there is none, and the thread was left
    # with nothing ("theirs current" false). A fresh interpreter, so that default_context() was never called.
    proc = run_python(PRIMARY_NEVER_RETAINED_BY_RAWCUDA)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "active at start": False,
        "c was current": True,
        "nobody: current": 0,
        "nobody: active": False,
        "e was current": True,
        "theirs current": True,
        "a raw call works": True,
        "active after their release": False,
    }


def test_a_close_that_waits_for_host_views_takes_the_context_off_the_thread() -> None:
    # Before: with a numpy view of pinned memory alive, close() left the closed (not yet destroyed) context
    # current: the first assertion after close() saw ctx, not the primary.
    primary = default_context()
    rng = np.random.default_rng()

    def scenario() -> None:
        data = rng.standard_normal(N, dtype=np.float32)
        primary.activate()
        ctx = Context.create()
        pinned = PinnedBuffer.from_array(data, context=ctx)  # a call into ctx: it replaced the primary
        view = pinned.array
        assert current_handle() == ctx.raw_handle
        ctx.close()
        assert ctx.closed and pinned.closed
        assert current_handle() == primary.raw_handle
        np.testing.assert_array_equal(view, data)  # the memory lives on under the view
        del view  # the last view: the memory is freed and the context destroyed, here
        assert current_handle() == primary.raw_handle
        # The same inside `with ctx:`: the close pops the block's entry, and __exit__ does not pop again.
        other = Context.create()
        with other:
            pinned = PinnedBuffer.from_array(data, context=other)
            view = pinned.array
            other.close()
            assert current_handle() == primary.raw_handle
        assert current_handle() == primary.raw_handle
        np.testing.assert_array_equal(view, data)
        del view
        assert current_handle() == primary.raw_handle

    on_fresh_thread(scenario)


def test_closing_a_context_keeps_another_created_context_current() -> None:
    # Before: close() synchronized through activate(), which put c in place of d; the destroy popped c, and the
    # primary was put back instead of d.
    primary = default_context()
    rng = np.random.default_rng()

    def scenario() -> None:
        a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
        primary.activate()
        c, d = Context.create(), Context.create()
        in_c = DeviceBuffer.from_array(a, context=c)
        in_d = DeviceBuffer.from_array(b, context=d)  # d is current now
        assert current_handle() == d.raw_handle
        c.close()  # closes in_c (in c) first
        assert in_c.closed
        assert current_handle() == d.raw_handle
        np.testing.assert_array_equal(in_d.to_array(), b)
        d.close()  # d itself was current: the primary comes back
        assert current_handle() == primary.raw_handle

    on_fresh_thread(scenario)


def test_a_context_closed_inside_another_contexts_block_leaves_the_primary_under_it() -> None:
    # Before: b's entry, made current by a call in place of a's block entry, was removed by b.close(), and a's
    # __exit__ then popped the primary: nothing current (CuPy: CUDA_ERROR_INVALID_CONTEXT).
    primary = default_context()
    rng = np.random.default_rng()

    def scenario() -> None:
        x = rng.standard_normal(N, dtype=np.float32)
        primary.activate()
        a, b = Context.create(), Context.create()
        primary.activate()  # (wherever create() left the stack's top: the primary on it, as in a CuPy program)
        with a:
            in_b = DeviceBuffer.from_array(x, context=b)  # b in place of a's block entry
            assert current_handle() == b.raw_handle
            np.testing.assert_array_equal(in_b.to_array(), x)
            b.close()
            assert current_handle() == a.raw_handle, "a's block got its slot back"
            with DeviceBuffer.from_array(x, context=a) as in_a:
                np.testing.assert_array_equal(in_a.to_array(), x)
        assert current_handle() == primary.raw_handle, "a's exit popped a, not the primary under it"
        a.close()
        assert current_handle() == primary.raw_handle
        with DeviceBuffer.from_array(x) as in_primary:
            np.testing.assert_array_equal(in_primary.to_array(), x)

    on_fresh_thread(scenario)


def test_a_closed_blocks_context_is_never_pushed_back() -> None:
    # Before: `with a: with b: <a call in a>; b.close(); a.close()` pushed the destroyed b back into its slot,
    # and the process aborted (free(): invalid pointer, on the H200).
    primary = default_context()
    rng = np.random.default_rng()

    def scenario() -> None:
        x = rng.standard_normal(N, dtype=np.float32)
        primary.activate()
        a, b, c = Context.create(), Context.create(), Context.create()
        primary.activate()
        with pytest.raises(KeyError), a, b:
            a.synchronize()  # a in place of b's block entry
            b.close()
            a.close()
            raise KeyError("the body")
        assert current_handle() == primary.raw_handle
        with c, Context.create() as inner:  # c's entry in the inner block's place; inner closed first, then c
            c.synchronize()
            inner.close()
            c.close()
        assert current_handle() == primary.raw_handle, "neither exit popped the primary"
        with DeviceBuffer.from_array(x) as in_primary:
            np.testing.assert_array_equal(in_primary.to_array(), x)

    on_fresh_thread(scenario)


def test_an_exit_without_an_enter_on_this_thread_is_refused() -> None:
    # Before: the first __exit__ counted down from 1 and popped this thread's primary (no error: "DID NOT
    # RAISE"); a second one left the count at -1, after which closing no longer put the primary back.
    primary = default_context()

    def scenario() -> None:
        primary.activate()
        ctx = Context.create()
        with pytest.raises(RuntimeError, match="did not enter"):
            ctx.__exit__(None, None, None)
        assert current_handle() == primary.raw_handle
        with ctx:
            assert current_handle() == ctx.raw_handle
        with pytest.raises(RuntimeError, match="did not enter"):
            ctx.__exit__(None, None, None)  # one exit too many
        assert current_handle() == primary.raw_handle
        with ctx:
            refused: list[bool] = []

            def elsewhere() -> None:
                try:
                    ctx.__exit__(None, None, None)
                except RuntimeError:
                    refused.append(True)

            on_fresh_thread(elsewhere)
            assert refused == [True]
            assert current_handle() == ctx.raw_handle
        assert current_handle() == primary.raw_handle
        ctx.mem_info()
        ctx.close()  # the count was not driven below zero: the primary comes back
        assert current_handle() == primary.raw_handle

    on_fresh_thread(scenario)


DESTROYED_ON_ANOTHER_THREAD = """
import json, threading
import numpy as np
import rawcuda
from rawcuda import Context, DeviceBuffer
from rawcuda.core.guards.current import current_handle
primary = rawcuda.default_context()
a, b = Context.create(), Context.create()
inside, closed, out = threading.Event(), threading.Event(), {}
x = np.random.default_rng().standard_normal(4096, dtype=np.float32)

def worker():
    with a:
        with b:
            inside.set()
            closed.wait(30)
            b.close()  # its walk finds a below, destroyed by the main thread
        out["b's block popped"] = True
    out["a's block popped"] = True
    with DeviceBuffer.from_array(x) as d:
        out["worker round trip"] = bool(np.array_equal(d.to_array(), x))

t = threading.Thread(target=worker)
t.start()
inside.wait(30)
a.close()
closed.set()
t.join(30)
with DeviceBuffer.from_array(x) as d:
    out["main round trip"] = bool(np.array_equal(d.to_array(), x))
out["main current"] = current_handle() == primary.raw_handle
print(json.dumps(out))
"""


def test_a_context_destroyed_on_another_thread_is_never_pushed_back_here() -> None:
    # Before: b.close() on the worker pushed the a the main thread had destroyed back
    # onto the worker's stack, and a's block then popped it: the process died (SIGSEGV in cuCtxPopCurrent).
    proc = run_python(DESTROYED_ON_ANOTHER_THREAD)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-3000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "b's block popped": True,
        "a's block popped": True,
        "worker round trip": True,
        "main round trip": True,
        "main current": True,
    }


def test_closing_a_context_under_five_thousand_open_blocks_of_it() -> None:
    # Before: the walk stopped at 4096 entries and pushed them back above the ones
    # it never saw: the destroyed context stayed current after close(), and nothing was once the blocks ended.
    primary = default_context()
    depth = 5000

    def scenario() -> None:
        primary.activate()
        a = Context.create()
        with contextlib.ExitStack() as blocks:
            for _ in range(depth):
                blocks.enter_context(a)
            a.close()
            assert current_handle() == primary.raw_handle
        assert current_handle() == primary.raw_handle
        primary.synchronize()

    on_fresh_thread(scenario)
