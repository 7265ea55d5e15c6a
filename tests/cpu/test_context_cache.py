"""Context.cache and Resource.hold_context_weakly, on the CPU: a child the context holds must not pin it.

rawcuda.ops keeps the Modules it loads in ``Context.cache``. A child's fallback finalizer holds its context
(it must make the context current to release the handle), and the finalizer registry is a root: so a child
held by its own context would keep the pair alive forever -- a dropped context never destroyed. The
child's ``hold_context_weakly()`` turns that reference weak. Shown here with a stand-in context (a made-up
handle, its own finalizer detached and marked unusable, so no driver call can ever reach it) and a
stand-in child; on a GPU, with real contexts and ops' modules: tests/gpu/test_ops.py.
"""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

from rawcuda.core.context import Context
from rawcuda.core.resource import Resource

FAKE_HANDLE = 0xDEAD0000  # no context has this handle; nothing here passes it to the driver


class Child(Resource):
    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self._own(lambda handle: None, 1)  # "releasing" it calls no driver


def stand_in_pair(weakly: bool) -> tuple[weakref.ref[Context], weakref.ref[Child], Child]:
    ctx = Context(FAKE_HANDLE, SimpleNamespace(handle=0, ordinal=0), primary=False)
    ctx._finalizer.detach()  # it would call cuCtxDestroy on the made-up handle
    child = Child(ctx)
    ctx.unusable = "a stand-in: no driver call may reach it"  # finalizers and close() then release nothing
    if weakly:
        child.hold_context_weakly()
    ctx.cache["test"] = child
    return weakref.ref(ctx), weakref.ref(child), child


def test_a_child_held_by_its_context_pins_both_unless_it_holds_the_context_weakly() -> None:
    context, child, held = stand_in_pair(weakly=False)
    del held
    gc.collect()
    assert context() is not None and child() is not None  # the registry -> finalizer -> context -> cache -> child
    child().close()  # detaches the finalizer: now it is a plain cycle, which the collector frees
    gc.collect()
    assert context() is None and child() is None

    context, child, held = stand_in_pair(weakly=True)
    del held
    gc.collect()
    assert context() is None and child() is None


def test_holding_the_context_weakly_keeps_close_working() -> None:
    _, _, child = stand_in_pair(weakly=True)
    assert child._finalizer is not None and child._finalizer.alive
    child.close()
    assert child.closed and not child._finalizer.alive
    child.hold_context_weakly()  # closed already: nothing to do
    assert not child._finalizer.alive
