"""What closing a context leaves current on the thread -- on tests/fakecuda/fakectx.c, without a GPU.

The rule (rawcuda/core/guards/contextstack.py): ``close()`` and the garbage-collection fallback leave the thread's stack
as they found it, except for the closing context itself, which leaves the thread -- and when that leaves
nothing current outside a ``with`` block, the device's primary context is put back if someone holds it.
The fake keeps every thread's stack as cuda.h describes it (cuCtxSetCurrent replaces the top, cuCtxDestroy
pops a current context, a primary release never pops), and lets a test read the whole stack, not only its
top. Each scenario runs in a fresh interpreter (the driver is opened once per process). The same scenarios
on the H200: tests/gpu/test_context_stack.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.helpers import TESTS_DIR, build_shared_library, run_python

# Names the scenarios print instead of handles: each script maps the handles it knows to these.
PREAMBLE = """
import ctypes, gc, json, os, threading
import rawcuda
from rawcuda import Context
from rawcuda.checked import cu
fake = ctypes.CDLL(os.environ["RAWCUDA_LIBCUDA"])
fake.fakectx_entry.restype = ctypes.c_void_p
fake.fakectx_destroyed.argtypes = [ctypes.c_void_p]
names = {}

def stack():
    return [names.get(fake.fakectx_entry(i) or 0, "?") for i in range(fake.fakectx_depth())]

def name(**contexts):
    for key, ctx in contexts.items():
        names[ctx if isinstance(ctx, int) else ctx.raw_handle] = key

def contexts(*keys):
    # rawcuda's primary context, then a created one per key, each named for stack() (the last created is current).
    primary = rawcuda.default_context()
    made = [Context.create() for _ in keys]
    name(primary=primary, **dict(zip(keys, made)))
    return (primary, *made)

def other_library_primary():
    # What the CUDA runtime (CuPy, torch) does: retain the primary context and make it current, unseen by rawcuda.
    handle = ctypes.c_void_p()
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(handle), 0)
    cu.cuCtxSetCurrent(handle)
    name(primary=handle.value)
    return handle.value

out = {}
"""


@pytest.fixture(scope="module")
def fake_ctx_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fakectx") / "libfakectx.so"
    return build_shared_library(TESTS_DIR / "fakecuda" / "fakectx.c", out, "the fake libcuda with context stacks")


def scenario(library: Path, body: str) -> dict:
    """Run PREAMBLE + ``body`` (which fills the dict ``out``) with the fake driver; ``out`` comes back."""
    code = PREAMBLE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = run_python(code, RAWCUDA_LIBCUDA=str(library))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the fake itself ------------------------------------------------------------------------------------------------
def test_the_fake_keeps_the_stack_as_cuda_h_says(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        a, b = ctypes.c_void_p(), ctypes.c_void_p()
        cu.cuCtxCreate(ctypes.byref(a), None, 0, 0)
        cu.cuCtxCreate(ctypes.byref(b), None, 0, 0)
        name(a=a.value, b=b.value)
        out["created"] = stack()
        cu.cuCtxSetCurrent(a)
        out["set"] = stack()
        cu.cuCtxDestroy(a)
        out["destroyed"] = stack()
        cu.cuCtxDestroy(b)
        out["not current"] = stack()
        out["b destroyed"] = bool(fake.fakectx_destroyed(b))
        """,
    )
    assert result == {
        "created": ["a", "b"],  # cuCtxCreate pushes
        "set": ["a", "a"],  # cuCtxSetCurrent replaces the top
        "destroyed": ["a"],  # cuCtxDestroy popped the current one (the entry under it names it too)
        "not current": ["a"],  # b was not on top: nothing popped
        "b destroyed": True,
    }


def test_the_fake_destroys_a_context_below_the_top_without_popping(fake_ctx_libcuda: Path) -> None:
    # cuda.h (cuCtxDestroy): a context current to the calling thread is popped "as though cuCtxPopCurrent()
    # were called"; one that is not current here -- below the top -- is destroyed all the same and stays where
    # it is, and using it once it is on top again fails with CUDA_ERROR_CONTEXT_IS_DESTROYED.
    result = scenario(
        fake_ctx_libcuda,
        """
        a, b = ctypes.c_void_p(), ctypes.c_void_p()
        cu.cuCtxCreate(ctypes.byref(a), None, 0, 0)
        cu.cuCtxCreate(ctypes.byref(b), None, 0, 0)
        name(a=a.value, b=b.value)
        cu.cuCtxDestroy(a)
        out["a destroyed below b"] = stack()
        out["a destroyed"] = bool(fake.fakectx_destroyed(a))
        cu.cuCtxPopCurrent(ctypes.byref(ctypes.c_void_p()))
        try:
            cu.cuMemGetInfo(ctypes.byref(ctypes.c_size_t()), ctypes.byref(ctypes.c_size_t()))
        except rawcuda.CudaError as exc:
            out["on top again"] = exc.code
        """,
    )
    assert result == {
        "a destroyed below b": ["a", "b"],
        "a destroyed": True,
        "on top again": 709,  # CUDA_ERROR_CONTEXT_IS_DESTROYED
    }


# --- close() ------------------------------------------------------------------------------------------------------
def test_closing_a_context_another_created_one_replaced_keeps_that_one(fake_ctx_libcuda: Path) -> None:
    # Before: close() synchronized through activate(), which put c in place of d; the destroy popped c, and
    # the thread was left with the primary (or nothing) instead of d.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c, d = contexts("c", "d")
        primary.activate()
        d.mem_info()  # a call into d: d replaced the primary on top
        out["before"] = stack()
        c.close()
        out["after c"] = stack()
        out["c destroyed"] = bool(fake.fakectx_destroyed(c.raw_handle))
        d.close()
        out["after d"] = stack()
        """,
    )
    assert result == {"before": ["d"], "after c": ["d"], "c destroyed": True, "after d": ["primary"]}


def test_children_close_inside_their_context_and_the_stack_is_left_alone(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        from rawcuda.core.guards.current import current_handle
        from rawcuda.core.resource import Resource
        seen = []

        class Child(Resource):
            def __init__(self, context):
                super().__init__(context)
                self._own(lambda handle: seen.append(names.get(current_handle(), "?")), 1)

        primary, c, d = contexts("c", "d")
        kids = [Child(c), Child(c)]
        with d:
            c.close()
            out["inside"] = stack()
        out["after"] = stack()
        out["seen"] = seen
        out["closed"] = [k.closed for k in kids]
        """,
    )
    assert result == {"inside": ["d"], "after": [], "seen": ["c", "c"], "closed": [True, True]}


def test_closing_the_current_context_outside_a_with_block_puts_the_primary_back(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        c.mem_info()
        out["before"] = stack()
        c.close()
        out["after"] = stack()
        """,
    )
    assert result == {"before": ["c"], "after": ["primary"]}


def test_the_primary_comes_back_even_when_rawcuda_never_retained_it(fake_ctx_libcuda: Path) -> None:
    # Before: only rawcuda's own default context was put back; a process where CuPy or torch had made the
    # primary current, and rawcuda had never retained it, was left with nothing (INVALID_CONTEXT next).
    result = scenario(
        fake_ctx_libcuda,
        """
        c = Context.create()
        name(c=c)
        c.mem_info()
        c.close()
        out["nobody holds the primary"] = stack()
        out["refs then"] = fake.fakectx_primary_refs()
        other_library_primary()
        e = Context.create()
        name(e=e)
        e.mem_info()
        out["before"] = stack()
        e.close()
        out["after"] = stack()
        out["refs"] = fake.fakectx_primary_refs()  # only the other library's: rawcuda kept none
        """,
    )
    assert result == {
        "nobody holds the primary": [],  # no primary was made that nobody asked for
        "refs then": 0,
        "before": ["e"],
        "after": ["primary"],
        "refs": 1,
    }


def test_closing_a_primary_context_changes_nothing_current(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        d = Context.create()
        name(d=d)
        p = Context.primary()
        name(primary=p)
        d.mem_info()
        p.close()
        out["after"] = stack()
        """,
    )
    assert result == {"after": ["d"]}  # before: close() had made the primary current in place of d


# --- with blocks ----------------------------------------------------------------------------------------------------
def test_closing_inside_with_blocks_keeps_the_stack(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, outer, inner = contexts("outer", "inner")
        primary.activate()
        with outer:
            with inner:
                inner.close()
                out["inner closed"] = stack()
            out["inner left"] = stack()
        out["outer left"] = stack()
        outer.close()
        result = []

        def alone():  # a fresh thread: the block ends with nothing current, as the thread began
            ctx = Context.create()
            with ctx:
                ctx.close()
            result.append(stack())

        worker = threading.Thread(target=alone)
        worker.start()
        worker.join()
        out["fresh thread"] = result[0]
        out["here"] = stack()
        """,
    )
    assert result == {
        "inner closed": ["primary", "outer"],
        "inner left": ["primary", "outer"],
        "outer left": ["primary"],
        "fresh thread": [],
        "here": ["primary"],
    }


def test_closing_inside_two_blocks_of_the_same_context_keeps_what_lay_below(fake_ctx_libcuda: Path) -> None:
    # Before: close() popped c twice but told only one block (a flag): the outer __exit__ popped the primary.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        with c:
            with c:
                c.close()
                out["closed"] = stack()
            out["inner left"] = stack()
        out["outer left"] = stack()
        """,
    )
    assert result == {"closed": ["primary"], "inner left": ["primary"], "outer left": ["primary"]}


def test_closing_in_a_block_of_a_context_a_call_made_current_puts_the_primary_back(fake_ctx_libcuda: Path) -> None:
    # c current by a call (in place of the primary) *and* pushed by the block. Before: both entries were popped
    # and, the close being inside a block, the primary was not put back: the thread was left with nothing.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        c.synchronize()
        with c:
            out["inside"] = stack()
            c.close()
            out["closed"] = stack()
        out["after"] = stack()
        """,
    )
    assert result == {"inside": ["c", "c"], "closed": ["primary"], "after": ["primary"]}


def test_closing_a_context_below_another_block_takes_it_off_the_thread(fake_ctx_libcuda: Path) -> None:
    # Before: only the top was looked at, so c stayed on the stack under p's block -- current, destroyed,
    # once the block ended (rawcuda's next call switched; another library's got CONTEXT_IS_DESTROYED).
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c, p = contexts("c", "p")
        primary.activate()
        c.synchronize()  # c in place of the primary
        with p:
            c.close()
            out["closed"] = stack()
        out["after"] = stack()
        cu.cuMemGetInfo(ctypes.byref(ctypes.c_size_t()), ctypes.byref(ctypes.c_size_t()))  # raises if destroyed
        out["usable"] = True
        d = Context.create()
        name(d=d)
        with d:  # a context made current by a call, between two created ones, in the middle of the stack
            c2 = Context.create()
            name(c2=c2)
            c2.synchronize()  # replaces d's entry on top
            with p:
                c2.close()
                out["middle"] = stack()
        out["end"] = stack()
        """,
    )
    assert result == {
        "closed": ["primary", "p"],
        "after": ["primary"],
        "usable": True,
        "middle": ["primary", "d", "p"],  # c2 had replaced d's block entry: d takes its slot back
        "end": ["primary"],  # d's exit popped d, not the primary under it
    }


def test_a_context_closed_inside_another_contexts_block_gives_the_block_its_slot_back(
    fake_ctx_libcuda: Path,
) -> None:
    # Before: b's entry (made by a call, in place of a's) was removed, and a's __exit__ then popped the primary
    # under it: CuPy's next kernel failed with CUDA_ERROR_INVALID_CONTEXT on the H200.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, a, b = contexts("a", "b")
        primary.activate()
        with a:
            b.synchronize()  # b in place of a's block entry
            b.close()
            out["closed"] = stack()
        out["after"] = stack()
        with a:
            with a:
                b2 = Context.create()
                name(b2=b2)
                b2.synchronize()  # in place of the inner block's entry
                b2.close()
                out["nested"] = stack()
            out["inner left"] = stack()
        out["outer left"] = stack()
        a.close()
        out["end"] = stack()
        """,
    )
    assert result == {
        "closed": ["primary", "a"],
        "after": ["primary"],
        "nested": ["primary", "a", "a"],
        "inner left": ["primary", "a"],
        "outer left": ["primary"],
        "end": ["primary"],
    }


def test_an_exit_without_an_enter_on_this_thread_is_refused(fake_ctx_libcuda: Path) -> None:
    # Before: __exit__ counted down from 1 on a thread that never entered, and popped that thread's context; a
    # second one drove the count to -1, after which closing no longer put the primary back.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        refused = []
        for _ in range(2):
            try:
                c.__exit__(None, None, None)
            except RuntimeError as exc:
                refused.append("did not enter" in str(exc))
        out["refused"] = refused
        out["untouched"] = stack()
        with c:
            box = []

            def elsewhere():
                try:
                    c.__exit__(None, None, None)
                except RuntimeError:
                    box.append("refused")

            worker = threading.Thread(target=elsewhere)
            worker.start()
            worker.join()
            out["other thread"] = box
        out["after the block"] = stack()
        c.mem_info()
        c.close()
        out["after close"] = stack()
        """,
    )
    assert result == {
        "refused": [True, True],
        "untouched": ["primary"],
        "other thread": ["refused"],
        "after the block": ["primary"],
        "after close": ["primary"],
    }


# --- host views: a close that waits -----------------------------------------------------------------------------
def test_a_deferred_close_takes_the_context_off_the_thread_at_once(fake_ctx_libcuda: Path) -> None:
    # Before: with a host view alive, close() left the closed (not yet destroyed) context current, so the next
    # library call on this thread ran in a context rawcuda had closed.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        c.hold()  # what a numpy view of pinned memory does
        c.mem_info()
        c.close()
        out["closed"] = stack()
        out["alive"] = not fake.fakectx_destroyed(c.raw_handle)
        c.call_held(lambda: None)  # the last view goes
        out["destroyed"] = bool(fake.fakectx_destroyed(c.raw_handle))
        out["after"] = stack()
        e = Context.create()
        name(e=e)
        with e:
            e.hold()
            e.close()
            out["in the block"] = stack()
        out["block left"] = stack()
        e.call_held(lambda: None)
        out["e after"] = stack()
        """,
    )
    assert result == {
        "closed": ["primary"],
        "alive": True,
        "destroyed": True,
        "after": ["primary"],
        "in the block": ["primary"],
        "block left": ["primary"],  # __exit__ did not pop a second time
        "e after": ["primary"],
    }


# --- the garbage-collection fallback --------------------------------------------------------------------------------
@pytest.mark.parametrize("gc_on", [True, False])
def test_a_context_dropped_unclosed_puts_the_primary_back(fake_ctx_libcuda: Path, gc_on: bool) -> None:
    # Before: the finalizer's cuCtxDestroy popped the context a call had made current: nothing was left.
    result = scenario(
        fake_ctx_libcuda,
        f"""
        import weakref
        if not {gc_on}:
            gc.disable()
        primary, c = contexts("c")
        handle = c.raw_handle
        primary.activate()
        c.mem_info()
        out["before"] = stack()
        gone = weakref.ref(c)
        del c
        out["collected"] = gone() is None  # by reference counting: no cycle holds a Context
        out["destroyed"] = bool(fake.fakectx_destroyed(handle))
        out["after"] = stack()
        """,
    )
    assert result == {"before": ["c"], "collected": True, "destroyed": True, "after": ["primary"]}


# --- what cannot be helped ------------------------------------------------------------------------------------------
def test_a_context_closed_on_another_thread_stays_current_here_until_rawcuda_is_called(
    fake_ctx_libcuda: Path,
) -> None:
    # The driver keeps a current context per thread, and only that thread can change it: closing c on thread B
    # cannot take it off thread A. rawcuda's own next call on A asks the driver and switches; another library's
    # call there gets CUDA_ERROR_CONTEXT_IS_DESTROYED (docs/architecture.md, "Primary vs created").
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, c = contexts("c")
        primary.activate()
        c.mem_info()
        worker = threading.Thread(target=c.close)
        worker.start()
        worker.join()
        out["here"] = stack()
        out["destroyed"] = bool(fake.fakectx_destroyed(c.raw_handle))
        primary.mem_info()
        out["after a rawcuda call"] = stack()
        """,
    )
    assert result == {"here": ["c"], "destroyed": True, "after a rawcuda call": ["primary"]}


def test_a_block_whose_entry_lies_under_another_librarys_push_is_still_told(fake_ctx_libcuda: Path) -> None:
    # Before (slot mapping alone): the foreign push sat in a's block slot, a's own entry below it was taken for
    # one made by a call, the block was not told, and its __exit__ popped the primary.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, a = contexts("a")
        primary.activate()
        with a:
            cu.cuCtxPushCurrent(primary.raw_handle)  # another library pushes (numba, cuda-python do)
            a.close()
            out["closed"] = stack()
            cu.cuCtxPopCurrent(ctypes.byref(ctypes.c_void_p()))  # ... and pops its own entry
        out["after"] = stack()
        """,
    )
    assert result == {"closed": ["primary", "primary"], "after": ["primary"]}


def test_a_closed_blocks_context_is_never_pushed_back(fake_ctx_libcuda: Path) -> None:
    # Before: a's call-made entry sat in b's block slot after b had closed, and a.close() pushed the destroyed b
    # back into it: on the H200 the process aborted (free(): invalid pointer).
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, a, b = contexts("a", "b")
        primary.activate()
        try:
            with a:
                with b:
                    a.synchronize()  # a in place of b's block entry
                    b.close()
                    a.close()
                    out["closed"] = stack()
                    out["b pushed back"] = any(fake.fakectx_destroyed(e) and e == b.raw_handle
                                               for e in [fake.fakectx_entry(i) for i in range(fake.fakectx_depth())])
                    raise KeyError("body")
        except KeyError:
            out["raised"] = True
        out["after"] = stack()
        """,
    )
    assert result["raised"] and not result["b pushed back"], result
    assert result["after"] == ["primary"], "neither exit popped the primary: both blocks' entries had gone"


def test_a_call_made_entry_in_a_closed_blocks_slot_tells_that_block(fake_ctx_libcuda: Path) -> None:
    # Before: c's entry sat in b's slot; b.close() found no entry of b, c.close() could not
    # push the closed b back, and b's __exit__ then popped a -- and a's own exit the primary under it.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, a, b, c = contexts("a", "b", "c")
        primary.activate()
        with a:
            with b:
                c.synchronize()  # c in place of b's block entry
                b.close()
                c.close()
                out["closed"] = stack()
            out["b left"] = stack()
        out["a left"] = stack()
        """,
    )
    assert result == {"closed": ["primary", "a"], "b left": ["primary", "a"], "a left": ["primary"]}


def test_a_context_collected_while_a_close_walks_the_stack_is_not_pushed_back(fake_ctx_libcuda: Path) -> None:
    # Before: the GC may run inside leave()'s walk; a dropped context's finalizer then walked
    # the half-popped stack itself, found nothing of its own there, and was destroyed -- and the outer walk
    # pushed the destroyed context back with the entries it had popped.
    result = scenario(
        fake_ctx_libcuda,
        """
        from rawcuda.core.guards import contextstack
        primary, c, e = contexts("c", "e")
        primary.activate()
        cu.cuCtxPushCurrent(e.raw_handle)
        cu.cuCtxPushCurrent(c.raw_handle)
        e_handle, victims, pops, pushed = e.raw_handle, [e], [0], []
        del e

        class Driver:  # the real checked calls, but once the walk has popped c and e, the GC collects e
            def __getattr__(self, name):
                return getattr(cu, name)

            def cuCtxPushCurrent(self, handle):
                pushed.append(handle)  # (the fake refuses a destroyed context; the real driver crashed on one)
                cu.cuCtxPushCurrent(handle)

            def cuCtxPopCurrent(self, popped):
                cu.cuCtxPopCurrent(popped)
                pops[0] += 1
                if pops[0] == 3:  # (the first pop ends close()'s own push; the walk pops c, then e)
                    victims.clear()
                    gc.collect()  # e's finalizer runs now: contextstack.destroy, inside the walk

        contextstack.cu = Driver()
        c.close()
        contextstack.cu = cu
        out["after"] = stack()
        out["e destroyed"] = bool(fake.fakectx_destroyed(e_handle))
        out["e pushed back"] = e_handle in pushed
        """,
    )
    assert result == {"after": ["primary"], "e destroyed": True, "e pushed back": False}


def test_a_context_destroyed_on_another_thread_is_never_pushed_back_here(fake_ctx_libcuda: Path) -> None:
    # Before (on the H200): a closed on the main thread while a worker was inside
    # `with a: with b:`; b.close() on the worker walked its stack and pushed the destroyed a back, and the
    # pop of a's block then crashed the process (a segfault in cuCtxPopCurrent). Here the destroyed entry goes,
    # and a's block pops nothing.
    result = scenario(
        fake_ctx_libcuda,
        """
        primary, a, b = contexts("a", "b")
        primary.activate()
        inside, closed = threading.Event(), threading.Event()

        def has_destroyed(ctx):
            return any(fake.fakectx_entry(i) == ctx.raw_handle for i in range(fake.fakectx_depth()))

        def worker():
            with a:
                with b:
                    inside.set()
                    closed.wait(10)
                    out["before b.close"] = stack()
                    b.close()
                    out["a still on the worker's stack"] = has_destroyed(a)
                out["after b's block"] = stack()
            out["after a's block"] = stack()

        t = threading.Thread(target=worker)
        t.start()
        inside.wait(10)
        a.close()
        closed.set()
        t.join(10)
        """,
    )
    assert result == {
        "before b.close": ["a", "b"],
        "a still on the worker's stack": False,
        "after b's block": [],
        "after a's block": [],
    }


# The real checked calls, with `hook` run once, right after the at-th pop (on="push": push) -- where a GC would
# run a finalizer inside a close's stack walk.
DRIVER_WITH_A_HOOK = """
from rawcuda.core.guards import contextstack
calls = {"pop": 0, "push": 0}

class Driver:
    def __init__(self, at, hook, on="pop"):
        self.at, self.hook, self.on = at, hook, on

    def __getattr__(self, name):
        return getattr(cu, name)

    def counted(self, kind):
        calls[kind] += 1
        if kind == self.on and calls[kind] == self.at:
            self.hook()

    def cuCtxPopCurrent(self, popped):
        cu.cuCtxPopCurrent(popped)
        self.counted("pop")

    def cuCtxPushCurrent(self, handle):
        cu.cuCtxPushCurrent(handle)
        self.counted("push")
"""


def test_a_context_collected_on_top_of_the_half_popped_stack_waits_for_the_walk(fake_ctx_libcuda: Path) -> None:
    # Before (on the H200): y's finalizer destroyed it in the middle of x's walk,
    # with y on top of what was left -- cuCtxDestroy popped it, the walk's next pop popped nothing it knew,
    # and the thread was left with nothing current. Now the destroy waits for the walk to put the stack back.
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent("""
        primary, x, y = contexts("x", "y")
        primary.activate()
        y.mem_info()  # y in place of the primary
        y_handle, victims = y.raw_handle, [y]
        del y
        contextstack.cu = Driver(2, victims.clear)  # (pop 1 ends close()'s own push; pop 2 takes x off)
        with x:
            x.close()
            out["inside"] = stack()
        contextstack.cu = cu
        out["after"] = stack()
        out["y destroyed"] = bool(fake.fakectx_destroyed(y_handle))
        """),
    )
    assert result == {"inside": ["primary"], "after": ["primary"], "y destroyed": True}


@pytest.mark.parametrize("at", [2, 3, 4])
def test_a_generators_block_ending_in_a_walk_pops_after_it(fake_ctx_libcuda: Path, at: int) -> None:
    # Before (on the H200): a generator suspended in `with g:` was collected in
    # the middle of x's walk, and g's __exit__ popped whatever was on top of the half-popped stack -- the
    # primary, or nothing (a ContextError out of a finalizer); g was then left current. Now its pop waits for
    # the walk. (at: the pop after which it is collected -- x taken off, then g, then the primary.)
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent(f"""
        primary, g, x = contexts("g", "x")
        primary.activate()

        def suspended():
            with g:
                yield

        it = suspended()
        next(it)
        victims = [it]
        del it
        contextstack.cu = Driver({at}, victims.clear)
        with x:
            x.close()
            out["inside"] = stack()
        contextstack.cu = cu
        out["after"] = stack()
        """),
    )
    assert result == {"inside": ["primary"], "after": ["primary"]}


def test_a_context_collected_after_the_walk_pushed_it_back_still_leaves_the_thread(fake_ctx_libcuda: Path) -> None:
    # y (no block: a call made it current in place of the primary) is collected right after x's walk pushed it
    # back. The deferred destroy (a bare cuCtxDestroy, before c41fb32) did not take it off the thread again: on top, the
    # destroy pops it and leaves nothing current; collected before the walk, the primary would come back.
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent("""
        primary, x, y = contexts("x", "y")
        primary.activate()
        y.mem_info()  # y in place of the primary
        y_handle, victims = y.raw_handle, [y]
        del y
        with x:
            contextstack.cu = Driver(2, victims.clear, on="push")  # (push 1: close()'s own push of x; 2: y back)
            x.close()
            contextstack.cu = cu
            out["inside"] = stack()
        out["after"] = stack()
        out["y destroyed"] = bool(fake.fakectx_destroyed(y_handle))
        """),
    )
    assert result == {"inside": ["primary"], "after": ["primary"], "y destroyed": True}


def test_a_context_collected_after_the_walk_pushed_it_back_below_a_block_is_not_left_destroyed(
    fake_ctx_libcuda: Path,
) -> None:
    # The same, with z's block above y: the deferred destroy cannot pop y (not on top) and leaves it on the
    # stack, destroyed -- current again once z's block ends (what the walk exists to prevent).
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent("""
        primary, x, y, z = contexts("x", "y", "z")
        primary.activate()
        y.mem_info()
        y_handle, victims = y.raw_handle, [y]
        del y
        with z:
            with x:
                contextstack.cu = Driver(2, victims.clear, on="push")
                x.close()
                contextstack.cu = cu
                out["inside"] = stack()
        out["after"] = stack()
        """),
    )
    assert result == {"inside": ["primary", "z"], "after": ["primary"]}


@pytest.mark.parametrize("at", [2, 3])
def test_a_generators_block_of_the_closing_context_ending_in_its_walk_adds_no_entry(
    fake_ctx_libcuda: Path, at: int
) -> None:
    # g.close() inside `with a:`, with a generator suspended in `with g:` above a's block. The generator is
    # collected inside g's walk (after pop `at`): its block leaves contextstack's list while the walk still has
    # its entry, so the slots shift -- g's entry is read as a call made inside a's block, a is pushed in its
    # place, and a's block ends leaving a current (an entry nobody pops).
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent(f"""
        primary, a, g = contexts("a", "g")
        primary.activate()

        def suspended():
            with g:
                yield

        with a:
            it = suspended()
            next(it)
            victims = [it]
            del it
            out["before"] = stack()
            contextstack.cu = Driver({at}, victims.clear)  # (pop 1 ends close()'s push; pop 2 takes g off)
            g.close()
            contextstack.cu = cu
            out["inside"] = stack()
        out["after"] = stack()
        """),
    )
    assert result == {"before": ["primary", "a", "g"], "inside": ["primary", "a"], "after": ["primary"]}


def test_a_finalizers_balanced_with_block_inside_a_walk_leaves_no_entry(fake_ctx_libcuda: Path) -> None:
    # A __del__ that does `with w: ...` runs inside x's walk (the GC, after the walk popped x and a). Its push
    # happened at once, but its pop was deferred (89976dc) -- and the walk then popped w's entry as one of the
    # thread's own and pushed it back under a's; after the walk w was not on top, so the deferred pop popped
    # nothing, and w stayed on the stack: current once a's block ended. Now a block entered in a walk pops at once.
    result = scenario(
        fake_ctx_libcuda,
        DRIVER_WITH_A_HOOK
        + textwrap.dedent("""
        primary, a, x, w = contexts("a", "x", "w")
        primary.activate()

        class Tidy:
            def __del__(self):
                with w:  # balanced: pushes w, pops it
                    pass

        victims = [Tidy()]
        with a:
            with x:
                contextstack.cu = Driver(3, victims.clear)  # (pop 1 ends close()'s push; 2: x; 3: a)
                x.close()
                contextstack.cu = cu
                out["inside"] = stack()
        out["after"] = stack()
        """),
    )
    assert result == {"inside": ["primary", "a"], "after": ["primary"]}
