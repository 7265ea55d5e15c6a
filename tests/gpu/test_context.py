"""Context on a real GPU: the primary context, created contexts, ``with``, closing children first, threads.

A context's children (buffers, streams, events, modules, pinned memory, functions) are closed before it;
``with`` blocks free everything also when the body raises; every class works from a thread other than the
one that made the context current.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, Event, Module, PinnedBuffer, Stream
from rawcuda.checked import cu
from rawcuda.core.context import default_context
from rawcuda.ffi.constants import CtxFlag
from tests.helpers import BLOCK, NAN32, grid_for

pytestmark = pytest.mark.gpu

MIB = 1 << 20


def test_default_context_is_the_primary_context() -> None:
    ctx = default_context()
    assert ctx.is_primary and not ctx.closed and ctx is default_context()
    free, total = ctx.mem_info()
    assert 0 < free <= total == ctx.device.total_memory
    least, greatest = ctx.stream_priority_range
    assert greatest <= least


def test_with_context_restores_the_previous_context_even_on_error() -> None:
    outer = default_context()
    created = Context.create(0, CtxFlag.MAP_HOST | CtxFlag.SCHED_BLOCKING_SYNC)
    try:
        assert created.flags & CtxFlag.MAP_HOST and created.flags & CtxFlag.SCHED_BLOCKING_SYNC
        outer.activate()  # reading created.flags made `created` current (methods activate their context)
        current = ctypes.c_void_p()
        with pytest.raises(RuntimeError, match="boom"), created:
            rawcuda.cu.cuCtxGetCurrent(ctypes.byref(current))
            assert current.value == created.handle
            raise RuntimeError("boom")
        rawcuda.cu.cuCtxGetCurrent(ctypes.byref(current))
        assert current.value == outer.handle
    finally:
        created.close()
    assert created.closed
    created.close()  # idempotent


def test_closing_a_context_closes_its_children_first(rng: np.random.Generator) -> None:
    ctx = Context.create(0)
    buf = DeviceBuffer.from_array(rng.standard_normal(1000, dtype=np.float32), context=ctx)
    stream, event = Stream(ctx), Event(ctx)
    module = Module(rawcuda.kernels.ptx_path("vector_add"), context=ctx)
    fn = module.function("vector_add")
    pinned = PinnedBuffer(16, np.float32, context=ctx)
    assert set(ctx.children) >= {buf, stream, event, module, pinned}
    ctx.close()
    for obj in (buf, stream, event, module, pinned, fn):
        assert obj.closed, obj
    with pytest.raises(rawcuda.ClosedError):
        buf.to_array()
    with pytest.raises(rawcuda.ClosedError):
        fn.launch(1, 1, buf, buf, buf, 0)
    with pytest.raises(rawcuda.ClosedError):
        DeviceBuffer(10, context=ctx)
    with pytest.raises(rawcuda.ClosedError):
        stream.synchronize()


def test_exceptions_inside_with_blocks_free_everything() -> None:
    ctx = default_context()
    ctx.synchronize()
    before, _ = ctx.mem_info()
    with pytest.raises(KeyError), DeviceBuffer(256 * MIB, np.uint8) as big, Stream() as s, Event() as e:
        e.record(s)
        raise KeyError("inside")
    assert big.closed and s.closed and e.closed
    after, _ = ctx.mem_info()
    assert abs(after - before) < 64 * MIB  # the 256 MiB came back


def test_every_class_works_from_a_second_thread(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n = 100_003
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)  # made on the main thread
    results: dict[str, object] = {}

    def worker() -> None:
        try:
            s, start, end = Stream(), Event(), Event()
            dc = DeviceBuffer.empty(n)
            dc.fill(NAN32, stream=s)
            start.record(s)
            vector_add.launch(grid_for(n), BLOCK, dc, da, db, n, stream=s)
            end.record(s)
            results["out"] = dc.to_array(stream=s)
            results["ms"] = start.elapsed_ms(end)
            pinned = PinnedBuffer(n, np.float32)
            dc.copy_to(pinned, stream=s)
            s.synchronize()
            results["pinned"] = pinned.array.copy()
            for obj in (dc, s, start, end, pinned):
                obj.close()
        except BaseException as exc:  # surface it in the main thread
            results["error"] = exc

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in results, results.get("error")
    np.testing.assert_array_equal(results["out"], a + b)
    np.testing.assert_array_equal(results["pinned"], a + b)
    assert results["ms"] >= 0
    da.close()
    db.close()


def test_closing_a_created_context_inside_its_with_block_keeps_the_stack() -> None:
    # cuCtxDestroy pops a context that is current on the calling thread; __exit__ then popped once more:
    # the caller's context went too (the next call failed), or, on an empty stack, ContextError (201).
    def current() -> int:
        handle = ctypes.c_void_p()
        cu.cuCtxGetCurrent(ctypes.byref(handle))
        return handle.value or 0

    outer, inner = Context.create(), Context.create()
    with outer:
        with inner:
            inner.close()
        assert current() == outer.raw_handle  # the pop that cuCtxDestroy did was not repeated
        with DeviceBuffer.from_array(np.arange(8, dtype=np.float32), outer) as buf:
            assert (buf.to_array() == np.arange(8)).all()
    outer.close()
    # On an empty stack (a fresh thread): no ContextError, and the thread ends with nothing current.
    result: list[object] = []

    def alone() -> None:
        try:
            ctx = Context.create()
            with ctx:
                ctx.close()
            result.append(current())
        except Exception as exc:
            result.append(exc)

    worker = threading.Thread(target=alone)
    worker.start()
    worker.join()
    assert result == [0]
