"""Tutorial 07b -- lifetimes: the context must outlive everything in it, and how rawcuda makes sure it does.

The seed article's RAII warning: cust's ``DeviceBuffer`` frees its memory when it is dropped (the seed
says ``cudaFree``; cust calls the driver's ``cuMemFree``) -- even during a panic -- but the CUDA context
must still be alive then. If the ``Context`` is dropped first, the free fails. An implicit drop discards
that error; cust's explicit ``DeviceBuffer::drop(buf)`` returns it (a ``DropResult``: the error and the
buffer). This tutorial follows the seed's order of ideas in three parts:

* by hand: libcuda through plain ctypes (argtypes, restype, ``byref``, the integer CUresult), committing the
  mistake on purpose twice -- with a created context (``cuCtxDestroy``, what cust's legacy Context does on
  drop) and with the primary context (``cuDevicePrimaryCtxRelease``, what cust's Context does) -- and
  reading the error code the late ``cuMemFree`` gets, with nothing left that could crash;
* rawcuda's rules, each shown working:

  1. every child (buffer, stream, event, module) holds a strong reference to its Context;
  2. ``Context.close()`` synchronizes and closes the children it still tracks *before* destroying itself;
  3. a closed object raises ``ClosedError`` -- never a crash, never a call with a dangling handle;
  4. ``with`` closes on the way out, even when the body raises;
  5. an object nobody closed is freed by ``weakref.finalize`` when it is garbage-collected;
  6. a PinnedBuffer's numpy view keeps its memory alive after ``close()``; the memory goes with the last view;
  7. ... and keeps its *context* alive too: ``ctx.close()`` closes everything, but the CUcontext (whose
     destruction would free the memory under the view) is destroyed only when the last view goes;

* cust's Drop impls and DropResult, and the drop order Rust gives you.

Tutorial 07a is the other half: which context is current, and the per-thread stack.

Run:  python tutorials/07b_lifetimes.py [--step]
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Context, DeviceBuffer, PinnedBuffer, Stream
from rawcuda.checked import cu, raise_for
from rawcuda.ffi.constants import CtxFlag, HostAllocFlag
from rawcuda.ffi.results import Result, c_name

MIB = 1 << 20
RAW_BYTES = 1 * MIB  # the allocation left dangling by the raw mistake
N = 1 << 20  # floats in the buffers of the rawcuda steps
GC_BYTES = 256 * MIB  # big enough that cuMemGetInfo clearly sees it come and go
MEMINFO_SLACK = 32 * MIB  # free memory also moves by the driver's own bookkeeping (and other processes)
# "Any address ... returned by one of the memory allocation routines from the driver or runtime API is always
# aligned to at least 256 bytes" (CUDA C++ Programming Guide, Device Memory Accesses).
ALLOCATION_ALIGNMENT = 256
NO_CONTEXT = 0  # what cuCtxGetCurrent writes when nothing is current (NULL)


class HalfwayError(RuntimeError):
    """The error raised inside a `with` block, to show that the block still closes its buffer."""


def expect_success(t: Tutorial, code: int, call: str) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here."""
    t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def main(t: Tutorial) -> None:
    t.words(
        "cust", "kernel", "pinned memory", "context", "primary context", "CUresult", "sticky error", "stream", "event"
    )
    t.step("raw: open libcuda with ctypes and declare, by hand, what this part calls")
    t.say(f"libcuda: {cu.library().path}")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1"). Each declaration names the symbol libcuda exports: cuda.h #defines the plain
    # names to these versioned ones, and the plain symbols are older ABIs (cuMemAlloc took 32-bit sizes).
    libcuda = ctypes.CDLL(cu.library().path)
    cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    cuInit.argtypes, cuInit.restype = [c_uint], c_int
    cuDeviceGet = libcuda.cuDeviceGet  # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    cuDeviceGet.argtypes, cuDeviceGet.restype = [POINTER(c_int), c_int], c_int
    # CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
    cuCtxCreate = libcuda.cuCtxCreate_v4
    cuCtxCreate.argtypes, cuCtxCreate.restype = [POINTER(c_void_p), c_void_p, c_uint, c_int], c_int
    cuCtxDestroy = libcuda.cuCtxDestroy_v2  # CUresult cuCtxDestroy(CUcontext ctx)
    cuCtxDestroy.argtypes, cuCtxDestroy.restype = [c_void_p], c_int
    cuCtxGetCurrent = libcuda.cuCtxGetCurrent  # CUresult cuCtxGetCurrent(CUcontext *pctx)
    cuCtxGetCurrent.argtypes, cuCtxGetCurrent.restype = [POINTER(c_void_p)], c_int
    cuCtxSetCurrent = libcuda.cuCtxSetCurrent  # CUresult cuCtxSetCurrent(CUcontext ctx)
    cuCtxSetCurrent.argtypes, cuCtxSetCurrent.restype = [c_void_p], c_int
    # CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
    cuDevicePrimaryCtxRetain = libcuda.cuDevicePrimaryCtxRetain
    cuDevicePrimaryCtxRetain.argtypes, cuDevicePrimaryCtxRetain.restype = [POINTER(c_void_p), c_int], c_int
    # CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
    cuDevicePrimaryCtxRelease = libcuda.cuDevicePrimaryCtxRelease_v2
    cuDevicePrimaryCtxRelease.argtypes, cuDevicePrimaryCtxRelease.restype = [c_int], c_int
    # CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
    cuDevicePrimaryCtxGetState = libcuda.cuDevicePrimaryCtxGetState
    cuDevicePrimaryCtxGetState.argtypes = [c_int, POINTER(c_uint), POINTER(c_int)]
    cuDevicePrimaryCtxGetState.restype = c_int
    # CUdeviceptr is an unsigned 64-bit integer, never c_void_p (whose value 0 reads back as None)
    cuMemAlloc = libcuda.cuMemAlloc_v2  # CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
    cuMemAlloc.argtypes, cuMemAlloc.restype = [POINTER(c_uint64), c_size_t], c_int
    cuMemFree = libcuda.cuMemFree_v2  # CUresult cuMemFree(CUdeviceptr dptr)
    cuMemFree.argtypes, cuMemFree.restype = [c_uint64], c_int
    # CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
    cuMemGetAddressRange = libcuda.cuMemGetAddressRange_v2
    cuMemGetAddressRange.argtypes = [POINTER(c_uint64), POINTER(c_size_t), c_uint64]
    cuMemGetAddressRange.restype = c_int

    code = cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    dev = c_int()
    expect_success(t, cuDeviceGet(byref(dev), 0), "cuDeviceGet(&dev, 0)")

    def shown(handle: int) -> str:
        return "NULL" if handle == NO_CONTEXT else f"{handle:#x}"

    def current() -> int:
        answer = c_void_p()
        code = cuCtxGetCurrent(byref(answer))
        if code != Result.SUCCESS:
            expect_success(t, code, "cuCtxGetCurrent(&ctx)")
        return answer.value or NO_CONTEXT

    def allocate_and_show(what: str) -> int:
        """cuMemAlloc in the current context, then what the driver says about the allocation."""
        dptr, base, size = c_uint64(), c_uint64(), c_size_t()
        expect_success(t, cuMemAlloc(byref(dptr), RAW_BYTES), f"cuMemAlloc(&dptr, {RAW_BYTES:,})")
        code = cuMemGetAddressRange(byref(base), byref(size), dptr.value)
        expect_success(t, code, f"cuMemGetAddressRange(&base, &size, {dptr.value:#x})")
        t.say(
            f"{what}: dptr = {dptr.value:#x}; dptr % {ALLOCATION_ALIGNMENT} = {dptr.value % ALLOCATION_ALIGNMENT}; "
            f"the allocation it lies in: base {base.value:#x}, {size.value:,} bytes"
        )
        t.check(
            base.value == dptr.value and size.value == RAW_BYTES and dptr.value % ALLOCATION_ALIGNMENT == 0,
            f"one allocation of exactly {RAW_BYTES:,} bytes starting at dptr, {ALLOCATION_ALIGNMENT}-byte aligned",
        )
        return dptr.value

    t.step("raw: a created context and a buffer in it -- then the seed's wrong order: destroy, then free")
    raw_ctx = c_void_p()
    expect_success(t, cuCtxCreate(byref(raw_ctx), None, CtxFlag.SCHED_AUTO, dev), "cuCtxCreate(&ctx, NULL, 0, dev)")
    created = raw_ctx.value or NO_CONTEXT
    t.say(f"context {shown(created)}; cuCtxGetCurrent says {shown(current())}: cuCtxCreate pushed it")
    t.check(current() == raw_ctx.value, "the new context is the current one")
    dangling = allocate_and_show("in the created context")
    expect_success(t, cuCtxDestroy(raw_ctx), f"cuCtxDestroy({shown(created)})  -- first, wrongly")
    t.say(f"cuCtxDestroy freed everything the context owned and popped it: cuCtxGetCurrent says {shown(current())}")
    # cuda.h: passing a destroyed context's resources to later calls "will result in undefined behavior". The
    # late free below is made only with *no* context current, so the driver refuses it without acting on it.
    t.check(current() == NO_CONTEXT, "no context is current: the late cuMemFree cannot land in another context")
    late = cuMemFree(dangling)
    t.say(f"cuMemFree({dangling:#x}) -> {late} ({c_name(late)})")
    t.check(late != Result.SUCCESS, "the late free is refused with an error code (here cust's Drop says `let _ =`)")

    t.step("raw: the same mistake with the primary context -- what cust's Context::new retains")
    raw_primary = c_void_p()
    expect_success(t, cuDevicePrimaryCtxRetain(byref(raw_primary), dev), "cuDevicePrimaryCtxRetain(&ctx, dev)")
    retained = raw_primary.value or NO_CONTEXT
    expect_success(t, cuCtxSetCurrent(raw_primary), f"cuCtxSetCurrent({shown(retained)})")
    dangling = allocate_and_show("in the primary context")
    flags, active = c_uint(), c_int()
    expect_success(t, cuDevicePrimaryCtxGetState(dev, byref(flags), byref(active)), "cuDevicePrimaryCtxGetState")
    t.check(active.value == 1, "the primary context is active while retained")
    expect_success(t, cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease(dev)  -- first, wrongly")
    expect_success(t, cuDevicePrimaryCtxGetState(dev, byref(flags), byref(active)), "cuDevicePrimaryCtxGetState")
    t.say(
        f"after the last release: active = {active.value} (reset: its memory is gone), yet cuCtxGetCurrent still\n"
        f"says {shown(current())} (the primary context is {shown(retained)}) -- a release, unlike cuCtxDestroy,\n"
        "never pops"
    )
    t.check(active.value == 0 and current() == retained, "reset, but still current on this thread")
    late = cuMemFree(dangling)
    t.say(f"cuMemFree({dangling:#x}) -> {late} ({c_name(late)})")
    t.check(late != Result.SUCCESS, "this late free is refused too")
    expect_success(t, cuCtxSetCurrent(None), "cuCtxSetCurrent(NULL)  -- leave this thread with nothing current")
    t.say(
        "Here the driver said no. Nothing promises that: with another context current the dangling address could\n"
        "even name *its* memory. In cust an implicit drop discards the error (DeviceBuffer::drop(buf) returns\n"
        "it, as a DropResult); in C it is an ignored return code. The cure is an order the code cannot get wrong:"
    )

    t.step("rawcuda rule 1: children hold a strong reference to their context")
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

    t.step("rawcuda rule 2: Context.close() synchronizes, closes its children, then destroys the context")
    children = ctx.children
    t.say(
        f"ctx.children before close(): {sorted(type(child).__name__ for child in children)} -- the buffer\n"
        f"(dptr {buf.ptr:#x}, the address the ClosedError messages below name) and the stream"
    )
    t.check(buf in children and stream in children, "the context tracks both of its children")
    del children
    buf.copy_from(data[::-1].copy(), stream=stream)  # work still queued when close() is called
    ctx.close()
    t.say(f"after close(): buf.closed={buf.closed}, stream.closed={stream.closed}, ctx.closed={ctx.closed}")
    t.check(buf.closed and stream.closed and ctx.closed, "closing the context closed its children first")
    t.say(
        "inside close(): cuCtxSynchronize (the queued copy finishes), then each child's own release --\n"
        "cuModuleUnload, cuStreamDestroy_v2, cuEventDestroy_v2, cuMemFree_v2, cuMemFreeHost -- and\n"
        "cuCtxDestroy_v2 last, when nothing is left that could dangle"
    )

    t.step("rawcuda rule 3: using a closed object is a ClosedError, not a crash")
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

    t.step("rawcuda rule 4: `with` closes the object even when the body raises")
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

    t.step(
        f"rawcuda rule 5: an unclosed object is freed when garbage-collected ({GC_BYTES // MIB} MiB, by cuMemGetInfo)"
    )
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

    t.step("rawcuda rule 6: a PinnedBuffer's numpy view outlives close(); the memory goes with the last view")
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
    t.say(
        f"the view's data pointer {view.ctypes.data:#x} is the pinned address {address:#x}; cuMemHostGetFlags on it\n"
        f"still succeeds ({HostAllocFlag(flags.value)!r}): the view keeps the pinned pages alive"
    )
    t.check(view.ctypes.data == address, "the numpy view reads the pinned memory itself, not a copy")
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
    the_cust_way(t)


def rule_7(t: Tutorial, data: np.ndarray) -> None:
    t.step("rawcuda rule 7: a host view outlives its context's close(); the context goes with the last view")
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
    t.term("managed memory")  # the note below names it, before tutorial 11a teaches it
    t.say(
        "two things no view survives: a sticky error (rawcuda never calls into a poisoned context, so the\n"
        "memory stays mapped and is not freed) and fork() -- the driver does not map pinned or managed\n"
        "memory into a forked child, so there `pinned.array` raises ForkedProcessError, and a view taken\n"
        "before the fork must not be touched"
    )


def the_cust_way(t: Tutorial) -> None:
    t.step("cust: Drop, DropResult, and the order Rust drops in (shown, not run)")
    t.say(
        "{\n"
        "    let _ctx = cust::quick_init()?;             // Context::new: cuDevicePrimaryCtxRetain\n"
        "    let buf = DeviceBuffer::from_slice(&host)?; // cuMemAlloc + cuMemcpyHtoD\n"
        "    // ... kernels ...\n"
        "}   // locals drop in reverse order of declaration: buf (cuMemFree), then _ctx (release)\n"
        "\n"
        "// The wrong order compiles: a DeviceBuffer is a pointer and a length, it borrows no Context.\n"
        "let ctx = cust::quick_init()?;\n"
        "let buf = DeviceBuffer::from_slice(&host)?;\n"
        "drop(ctx);                         // the last reference: the primary context resets\n"
        "match DeviceBuffer::drop(buf) {    // an implicit drop(buf) would discard the error instead\n"
        "    Ok(()) => {}\n"
        "    Err((e, buf)) => { /* e: the CudaError; buf: handed back, still owning its pointer */ }\n"
        "}"
    )
    t.say(
        "Checked in cust's source (Rust-CUDA at commit ac2674f, 2025-08-23): the Drop impls of DeviceBuffer\n"
        "(crates/cust/src/memory/device/device_buffer.rs, cuMemFree), Context (context/mod.rs,\n"
        "cuDevicePrimaryCtxRelease), "
        "legacy::Context (cuCtxDestroy), Stream, Event and Module each end in `let _ = ...`: the CUresult is\n"
        "dropped. Each type also has an associated X::drop(x) -> DropResult<X>, where (error.rs)\n"
        "DropResult<T> = Result<(), (CudaError, T)>: on failure you get the error *and the object back*.\n"
        "'Even during a panic' holds when panics unwind; with panic = \"abort\" no destructor runs at all.\n"
        "rawcuda's close() does not discard: a failing release raises, and the rules above keep the order."
    )


if __name__ == "__main__":
    run(main, "Tutorial 07b: lifetimes -- the wrong drop order by hand, rawcuda's rules, cust's Drop")
