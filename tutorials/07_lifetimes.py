"""Tutorial 07 -- lifetimes: the context must outlive everything in it, and how rawcuda makes sure it does.

The seed article's RAII warning: cust's ``DeviceBuffer`` frees its memory when it is dropped (the seed
says ``cudaFree``; cust calls the driver's ``cuMemFree``) -- even during a panic -- but the CUDA context
must still be alive then. If the ``Context`` is dropped first, the free fails. An implicit drop discards
that error; cust's explicit ``DeviceBuffer::drop(buf)`` returns it (a ``DropResult``: the error and the
buffer). This tutorial first commits that mistake on purpose with raw driver calls, then shows
each rule rawcuda's objects follow so that it cannot happen:

1. every child (buffer, stream, event, module) holds a strong reference to its Context;
2. ``Context.close()`` synchronizes and closes the children it still tracks *before* destroying itself;
3. a closed object raises ``ClosedError`` -- never a crash, never a call with a dangling handle;
4. ``with`` closes on the way out, even when the body raises;
5. an object nobody closed is freed by ``weakref.finalize`` when it is garbage-collected;
6. a PinnedBuffer's numpy view keeps its memory alive after ``close()``; the memory goes with the last view;
7. ... and keeps its *context* alive too: ``ctx.close()`` closes everything, but the CUcontext (whose
   destruction would free the memory under the view) is destroyed only when the last view goes.

Run:  python tutorials/07_lifetimes.py [--step]
"""

from __future__ import annotations

import gc
import weakref
from ctypes import byref, c_int, c_uint, c_uint64, c_void_p

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Context, DeviceBuffer, PinnedBuffer, Stream
from rawcuda.checked import cu

MIB = 1 << 20
RAW_BYTES = 1 * MIB  # the allocation left dangling by the raw mistake
N = 1 << 20  # floats in the buffers of the rawcuda steps
GC_BYTES = 256 * MIB  # big enough that cuMemGetInfo clearly sees it come and go
MEMINFO_SLACK = 32 * MIB  # free memory also moves by the driver's own bookkeeping (and other processes)
CTX_FLAGS = 0  # cuCtxCreate flags: the defaults (automatic scheduling)


class HalfwayError(RuntimeError):
    """The error raised inside a `with` block, to show that the block still closes its buffer."""


def main(t: Tutorial) -> None:
    t.step("raw: create a context and allocate in it (cuInit, cuDeviceGet, cuCtxCreate_v4, cuMemAlloc_v2)")
    cu.cuInit(0)
    dev = c_int()
    cu.cuDeviceGet(byref(dev), 0)
    raw_ctx = c_void_p()
    cu.cuCtxCreate(byref(raw_ctx), None, CTX_FLAGS, dev)  # also makes it current on this thread
    dptr = c_uint64()
    cu.cuMemAlloc(byref(dptr), RAW_BYTES)
    t.say(f"context {raw_ctx.value:#x}, {RAW_BYTES:,} bytes at device address {dptr.value:#x}")

    t.step("raw: destroy the context first -- the seed's wrong drop order -- then free the buffer")
    cu.cuCtxDestroy(raw_ctx)
    t.say(
        "cuCtxDestroy_v2 succeeded: it freed everything the context owned and popped it from this thread.\n"
        f"{dptr.value:#x} is now a dangling address that nothing owns."
    )
    error: rawcuda.CudaError | None = None
    try:
        cu.cuMemFree(dptr)
    except rawcuda.CudaError as exc:
        error = exc
        t.say(f"cuMemFree_v2 -> {type(exc).__name__} {exc.name} ({exc.code}):\n  " + str(exc).replace("\n", "\n  "))
    t.check(error is not None, "freeing after the context was destroyed is refused with an error")
    t.say(
        "here the driver said no. Worse outcomes are possible: had another context been current, the\n"
        "dangling address could even name *its* memory. In cust an implicit drop discards the error\n"
        "(DeviceBuffer::drop(buf) returns it, as a DropResult); in C it is an ignored return code.\n"
        "The cure is an order the code cannot get wrong."
    )

    t.step("rule 1: children hold a strong reference to their context")
    ctx = Context.create(rawcuda.Device(0))  # a created context, like the raw one (rawcuda pops it again)
    rng = np.random.default_rng()
    data = rng.standard_normal(N, dtype=np.float32)
    buf = DeviceBuffer.from_array(data, ctx)
    stream = Stream(ctx)
    t.say(f"buf.context is ctx -> {buf.context is ctx}; stream.context is ctx -> {stream.context is ctx}")
    t.check(buf.context is ctx and stream.context is ctx, "each child points at its context")
    ctx_ref = weakref.ref(ctx)
    del ctx  # drop *our* reference: in Rust this would be the Context's Drop
    gc.collect()
    t.check(
        ctx_ref() is not None and ctx_ref() is buf.context and not buf.context.closed,
        "deleting our name for the context did not destroy it: the buffer keeps it alive",
    )
    ctx = buf.context

    t.step("rule 2: Context.close() synchronizes, closes its children, then destroys the context")
    t.say(f"ctx.children before close(): {ctx.children}")
    buf.copy_from(data[::-1].copy(), stream=stream)  # work still queued when close() is called
    ctx.close()
    t.say(f"after close(): buf.closed={buf.closed}, stream.closed={stream.closed}, ctx.closed={ctx.closed}")
    t.check(buf.closed and stream.closed and ctx.closed, "closing the context closed its children first")
    t.say(
        "inside close(): cuCtxSynchronize (the queued copy finishes), then each child's own release --\n"
        "cuModuleUnload, cuStreamDestroy_v2, cuEventDestroy_v2, cuMemFree_v2, cuMemFreeHost -- and\n"
        "cuCtxDestroy_v2 last, when nothing is left that could dangle"
    )

    t.step("rule 3: using a closed object is a ClosedError, not a crash")
    for what, action in (
        ("buf.to_array()", buf.to_array),
        ("stream.synchronize()", stream.synchronize),
        ("DeviceBuffer.empty(4, context=ctx)", lambda: DeviceBuffer.empty(4, np.float32, ctx)),
    ):
        try:
            action()
            t.check(False, f"{what} should have raised ClosedError")
        except rawcuda.ClosedError as exc:
            t.say(f"{what} -> ClosedError: {exc}")
    t.say("the check happens in Python before any driver call, so no dangling handle ever reaches libcuda")

    t.step("rule 4: `with` closes the object even when the body raises")
    scratch: DeviceBuffer | None = None
    try:
        with DeviceBuffer.from_array(data) as scratch:  # the default (primary) context from here on
            raise HalfwayError("something failed halfway through the with block")
    except HalfwayError as exc:
        t.say(f"the body raised {type(exc).__name__}: {exc}")
    t.check(scratch is not None and scratch.closed, "the buffer was closed (cuMemFree_v2) on the way out")
    t.say(
        "cust relies on Drop for this; Python's `with` (or try/finally) gives the same guarantee without\n"
        "depending on when the garbage collector runs"
    )

    t.step(f"rule 5: an unclosed object is freed when garbage-collected ({GC_BYTES // MIB} MiB, by cuMemGetInfo)")
    primary = rawcuda.default_context()
    primary.synchronize()
    baseline, total = primary.mem_info()
    big = DeviceBuffer.empty(GC_BYTES, np.uint8)
    during = primary.mem_info()[0]
    del big  # no close(): the last reference goes away ...
    gc.collect()  # ... (CPython frees at once; collect() covers reference cycles and other interpreters)
    after = primary.mem_info()[0]
    t.say(
        f"free device memory: {baseline / MIB:,.0f} MiB -> {during / MIB:,.0f} MiB with the buffer -> "
        f"{after / MIB:,.0f} MiB after `del big; gc.collect()` (of {total / MIB:,.0f} MiB)"
    )
    t.check(baseline - during >= GC_BYTES - MEMINFO_SLACK, "the allocation showed up in cuMemGetInfo")
    t.check(after >= baseline - MEMINFO_SLACK, "and free memory returned to its baseline: weakref.finalize freed it")
    t.say(
        "the finalizer is only the fallback: it runs at an unpredictable time (and never at interpreter\n"
        "exit, or once its context is closed or poisoned -- then it leaks rather than crash). close() and\n"
        "`with` say exactly when memory goes back."
    )

    t.step("rule 6: a PinnedBuffer's numpy view outlives close(); the memory goes with the last view")
    pinned = PinnedBuffer.from_array(data)
    view = pinned.array  # a numpy array whose memory is the pinned allocation itself
    address = pinned.ptr
    flags = c_uint()
    pinned.close()
    t.check(bool(np.array_equal(view, data)), "after close() the view still reads the right data (no crash)")
    try:
        _ = pinned.array
        t.check(False, "pinned.array after close() should raise ClosedError")
    except rawcuda.ClosedError as exc:
        t.say(f"pinned.array -> ClosedError: {exc}")
    del pinned
    gc.collect()
    primary.activate()  # raw calls below use the thread's current context
    cu.cuMemHostGetFlags(byref(flags), address)
    t.say(f"cuMemHostGetFlags({address:#x}) still succeeds: the view keeps the pinned pages alive")
    del view  # the last view: now cuMemFreeHost runs
    gc.collect()
    freed: rawcuda.CudaError | None = None
    try:
        cu.cuMemHostGetFlags(byref(flags), address)
    except rawcuda.CudaError as exc:
        freed = exc
        t.say(f"after `del view`: cuMemHostGetFlags -> {exc.name}: the driver no longer knows the address")
    t.check(freed is not None, "the pinned memory was freed when its last numpy view died")
    t.say(
        "freeing under a live view would turn every later read of it into a segfault; rawcuda ties the\n"
        "memory's life to the ctypes object every view refers to instead"
    )
    rule_7(t, data)


def rule_7(t: Tutorial, data: np.ndarray) -> None:
    t.step("rule 7: a host view outlives its context's close(); the context goes with the last view")
    primary = rawcuda.default_context()
    primary.synchronize()
    free_before = primary.mem_info()[0]
    ctx = Context.create(0)  # a created context takes device memory of its own: cuMemGetInfo shows it
    pinned = PinnedBuffer.from_array(data, context=ctx)
    view = pinned.array
    ctx.close()  # cuCtxDestroy would free the pinned memory -- and crash the next read of `view`
    t.check(ctx.closed and pinned.closed, "ctx.close() closed the context and every object in it")
    t.check(bool(np.array_equal(view, data)), "yet the view still reads the right data (no crash)")
    held = free_before - primary.mem_info()[0]
    t.say(f"device memory still taken by the closed context while the view lives: {held / MIB:.0f} MiB")
    t.check(held > MEMINFO_SLACK, "the CUcontext itself still exists: the view holds it")
    del view  # the last view: cuMemFreeHost, then the deferred cuCtxDestroy
    after = free_before - primary.mem_info()[0]
    t.say(f"after `del view`: {after / MIB:.0f} MiB")
    t.check(after < MEMINFO_SLACK, "the context was destroyed with its last view")
    t.say(
        "two things no view survives: a sticky error (rawcuda never calls into a poisoned context, so the\n"
        "memory stays mapped and is not freed) and fork() -- the driver does not map pinned or managed\n"
        "memory into a forked child, so there `pinned.array` raises ForkedProcessError, and a view taken\n"
        "before the fork must not be touched"
    )


if __name__ == "__main__":
    run(main, "Tutorial 07: lifetimes -- contexts, children, close(), with, and finalizers")
