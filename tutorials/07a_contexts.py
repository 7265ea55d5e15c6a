"""Tutorial 07a -- contexts: the per-thread stack, what "current" means, and who pushes and pops.

Every driver call that names no context -- cuMemAlloc, cuModuleLoadData, cuStreamCreate, cuCtxSynchronize
-- works in the calling thread's *current* context: the top of a stack of contexts the driver keeps for each
thread. Create pushes, pop pops, set replaces the top. The stack is invisible: the driver answers only "what
is on top?" (cuCtxGetCurrent), so a program that loses track of it allocates in the wrong context.

Three ways to drive it, in order:

1. by hand: libcuda through plain ctypes -- each function declared with its argtypes and restype, each
   integer CUresult checked -- pushing, popping and replacing, and asking the driver after every move;
2. rawcuda: ``with ctx:`` pushes and pops; every object makes *its own* context current before it acts,
   so no rawcuda call depends on what someone else left on the stack;
3. cust: ``Context::new`` retains the primary context and *replaces* the top; ``legacy::Context::
   create_and_push`` pushes a created one; ``legacy::ContextStack::pop``/``push`` move it by hand.

Tutorial 07b is the other half of the story: what must outlive what, and what happens when it does not.

Run:  python tutorials/07a_contexts.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_ulonglong, c_void_p

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Context, DeviceBuffer
from rawcuda.checked import cu, raise_for
from rawcuda.ffi.attributes import PointerAttribute
from rawcuda.ffi.constants import CtxFlag
from rawcuda.ffi.results import Result, c_name

N = 1 << 18  # floats per buffer (1 MiB)
FLOAT_BYTES = 4
NO_CONTEXT = 0  # cuCtxGetCurrent writes NULL when the stack is empty
BOX_WIDTH = 34  # characters inside the stack picture


def expect_success(t: Tutorial, code: int, call: str, *, show: bool = True) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here;
    ``show=False`` keeps the many small queries quiet unless they fail."""
    if show or code != Result.SUCCESS:
        t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def picture(stack: list[tuple[str, int, int]], current: int) -> str:
    """The stack as this program believes it to be (top first), beside what the driver says is current.

    The driver has no call that lists the stack: only its top can be asked for, so the answer printed beside
    the top is the one check a program can make."""
    names = {handle: name for name, handle, _ in stack}
    answer = "NULL" if current == NO_CONTEXT else f"{current:#x} (= {names.get(current, '?')})"
    rows = [f"{name}  {handle:#x}  id {ident}" for name, handle, ident in reversed(stack)] or ["(empty)"]
    edge = "+" + "-" * (BOX_WIDTH + 2) + "+"
    lines = ["this thread's context stack (top first)", edge]
    for i, row in enumerate(rows):
        beside = f"  <- top; cuCtxGetCurrent says {answer}" if i == 0 else ""
        lines.append(f"| {row:<{BOX_WIDTH}} |{beside}")
    lines.append(edge)
    return "\n".join(lines)


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "block", "context", "primary context", "CUresult")
    t.step("raw: open libcuda with ctypes and declare, by hand, the functions this tutorial calls")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1"). Every declaration names the *exported* symbol: cuda.h #defines many plain
    # names to versioned ones (cuCtxCreate -> cuCtxCreate_v4), and the plain symbol is the old ABI.
    libcuda = ctypes.CDLL(cu.library().path)
    cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    cuInit.argtypes, cuInit.restype = [c_uint], c_int
    cuDeviceGet = libcuda.cuDeviceGet  # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    cuDeviceGet.argtypes, cuDeviceGet.restype = [POINTER(c_int), c_int], c_int
    # CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
    cuCtxCreate = libcuda.cuCtxCreate_v4
    cuCtxCreate.argtypes, cuCtxCreate.restype = [POINTER(c_void_p), c_void_p, c_uint, c_int], c_int
    cuCtxGetCurrent = libcuda.cuCtxGetCurrent  # CUresult cuCtxGetCurrent(CUcontext *pctx)
    cuCtxGetCurrent.argtypes, cuCtxGetCurrent.restype = [POINTER(c_void_p)], c_int
    cuCtxPushCurrent = libcuda.cuCtxPushCurrent_v2  # CUresult cuCtxPushCurrent(CUcontext ctx)
    cuCtxPushCurrent.argtypes, cuCtxPushCurrent.restype = [c_void_p], c_int
    cuCtxPopCurrent = libcuda.cuCtxPopCurrent_v2  # CUresult cuCtxPopCurrent(CUcontext *pctx)
    cuCtxPopCurrent.argtypes, cuCtxPopCurrent.restype = [POINTER(c_void_p)], c_int
    cuCtxSetCurrent = libcuda.cuCtxSetCurrent  # CUresult cuCtxSetCurrent(CUcontext ctx)
    cuCtxSetCurrent.argtypes, cuCtxSetCurrent.restype = [c_void_p], c_int
    cuCtxGetId = libcuda.cuCtxGetId  # CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
    cuCtxGetId.argtypes, cuCtxGetId.restype = [c_void_p, POINTER(c_ulonglong)], c_int
    cuCtxDestroy = libcuda.cuCtxDestroy_v2  # CUresult cuCtxDestroy(CUcontext ctx)
    cuCtxDestroy.argtypes, cuCtxDestroy.restype = [c_void_p], c_int
    # CUdeviceptr is an unsigned 64-bit integer, never c_void_p (whose value 0 reads back as None)
    cuMemAlloc = libcuda.cuMemAlloc_v2  # CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
    cuMemAlloc.argtypes, cuMemAlloc.restype = [POINTER(c_uint64), c_size_t], c_int
    cuMemFree = libcuda.cuMemFree_v2  # CUresult cuMemFree(CUdeviceptr dptr)
    cuMemFree.argtypes, cuMemFree.restype = [c_uint64], c_int
    # CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
    cuPointerGetAttribute = libcuda.cuPointerGetAttribute
    cuPointerGetAttribute.argtypes, cuPointerGetAttribute.restype = [c_void_p, c_int, c_uint64], c_int
    declared = (cuInit, cuDeviceGet, cuCtxCreate, cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent)
    declared += (cuCtxSetCurrent, cuCtxGetId, cuCtxDestroy, cuMemAlloc, cuMemFree, cuPointerGetAttribute)
    t.say(f"libcuda: {cu.library().path}\n{len(declared)} functions declared, each returning a CUresult (a C int)")

    code = cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    dev = c_int()
    expect_success(t, cuDeviceGet(byref(dev), 0), "cuDeviceGet(&dev, 0)")

    # Three small queries, used after every move (quiet unless they fail):
    def current() -> int:
        answer = c_void_p()
        expect_success(t, cuCtxGetCurrent(byref(answer)), "cuCtxGetCurrent(&ctx)", show=False)
        return answer.value or NO_CONTEXT

    def context_id(handle: int) -> int:
        ident = c_ulonglong()
        expect_success(t, cuCtxGetId(handle, byref(ident)), f"cuCtxGetId({handle:#x}, &id)", show=False)
        return ident.value

    def owner_of(dptr: int) -> int:
        owner = c_void_p()
        code = cuPointerGetAttribute(byref(owner), PointerAttribute.CONTEXT, dptr)
        expect_success(t, code, f"cuPointerGetAttribute(&ctx, CONTEXT, {dptr:#x})", show=False)
        return owner.value or NO_CONTEXT

    t.step("raw: a fresh thread has an empty stack; cuCtxCreate creates a context *and pushes it*")
    stack: list[tuple[str, int, int]] = []  # our model of the stack: (name, handle, cuCtxGetId)
    t.say(picture(stack, current()))
    t.check(current() == NO_CONTEXT, "nothing is current before the first context exists")
    handles: dict[str, int] = {}
    for name in ("A", "B"):
        ctx = c_void_p()
        expect_success(t, cuCtxCreate(byref(ctx), None, CtxFlag.SCHED_AUTO, dev), f"cuCtxCreate(&{name}, NULL, 0, dev)")
        handles[name] = ctx.value or NO_CONTEXT
        stack.append((name, handles[name], context_id(handles[name])))
    a, b = handles["A"], handles["B"]
    t.say(picture(stack, current()))
    t.check(current() == b, "the context created last is the one on top: B is current")

    t.step("raw: calls that name no context use the top -- a buffer allocated now belongs to B")
    d_b = c_uint64()
    expect_success(t, cuMemAlloc(byref(d_b), N * FLOAT_BYTES), f"cuMemAlloc(&d_b, {N * FLOAT_BYTES})")
    t.say(f"d_b = {d_b.value:#x}; the driver says its context is {owner_of(d_b.value):#x}; B is {b:#x}")
    t.check(owner_of(d_b.value) == b, "cuPointerGetAttribute(CONTEXT) names B as d_b's owner")

    t.step("raw: pop B -- A is on top again, and the next allocation goes to A")
    popped = c_void_p()
    expect_success(t, cuCtxPopCurrent(byref(popped)), "cuCtxPopCurrent(&popped)")
    stack.pop()
    t.check(popped.value == b, f"cuCtxPopCurrent handed back B ({b:#x})")
    d_a = c_uint64()
    expect_success(t, cuMemAlloc(byref(d_a), N * FLOAT_BYTES), f"cuMemAlloc(&d_a, {N * FLOAT_BYTES})")
    t.say(picture(stack, current()) + f"\nd_a = {d_a.value:#x}, owned by {owner_of(d_a.value):#x}")
    t.check(current() == a and owner_of(d_a.value) == a, "A is current, and d_a belongs to A")
    t.term("UVA")
    t.say(
        f"asked with A current, d_b ({d_b.value:#x}) is still owned by {owner_of(d_b.value):#x}, B: with unified\n"
        "addressing a device pointer is unique in the process, so any context can ask the driver about it.\n"
        "What stays with B is access: B's memory is not mapped for kernels that run in A."
    )
    t.check(owner_of(d_b.value) == b, "asked from A, cuPointerGetAttribute(CONTEXT) still names B as d_b's owner")

    t.step("raw: push B back, then cuCtxSetCurrent(A): set *replaces* the top, it does not push")
    expect_success(t, cuCtxPushCurrent(b), f"cuCtxPushCurrent({b:#x})")
    stack.append(("B", b, context_id(b)))
    t.check(current() == b, "after the push, B is current")
    expect_success(t, cuCtxSetCurrent(a), f"cuCtxSetCurrent({a:#x})")
    stack[-1] = ("A", a, context_id(a))
    t.say(picture(stack, current()))
    expect_success(t, cuCtxPopCurrent(byref(popped)), "cuCtxPopCurrent(&popped)")
    stack.pop()
    t.check(popped.value == a and current() == a, "popping the replaced top gives A back, and A is still under it")
    t.say("the stack held A twice and no B: code that sets where it means to push loses B for whoever pops next")

    t.step("raw: free each buffer in its own context, destroy both; destroying the current one pops it")
    expect_success(t, cuMemFree(d_a.value), f"cuMemFree({d_a.value:#x})  (A current)")
    expect_success(t, cuCtxPushCurrent(b), f"cuCtxPushCurrent({b:#x})")
    expect_success(t, cuMemFree(d_b.value), f"cuMemFree({d_b.value:#x})  (B current)")
    expect_success(t, cuCtxPopCurrent(byref(popped)), "cuCtxPopCurrent(&popped)")
    expect_success(t, cuCtxDestroy(b), f"cuCtxDestroy({b:#x})  (B, not on the stack)")
    expect_success(t, cuCtxDestroy(a), f"cuCtxDestroy({a:#x})  (A, current: also popped)")
    stack.clear()
    t.say(picture(stack, current()))
    t.check(current() == NO_CONTEXT, "the stack is empty again")

    t.step("rawcuda: Context.create() leaves the stack alone; `with ctx:` pushes and pops")
    first, second = Context.create(), Context.create()
    t.check(current() == NO_CONTEXT, "creating two rawcuda Contexts changed nothing current (each was popped)")
    with first:
        t.say(f"inside `with first:`  cuCtxGetCurrent -> {current():#x}; first.handle = {first.handle:#x}")
        t.check(current() == first.handle, "`with first:` pushed first")
        with second:
            t.check(current() == second.handle, "a nested `with second:` pushed second on top")
        t.check(current() == first.handle, "leaving it popped second: first is on top again")
    t.check(current() == NO_CONTEXT, "leaving the outer block popped first: the stack is empty")

    t.step("rawcuda: an object makes its own context current before it acts -- the stack cannot mislead it")
    rng = np.random.default_rng()
    data = rng.standard_normal(N, dtype=np.float32)
    with first:  # first is on top, yet the buffer belongs to second
        buf = DeviceBuffer.from_array(data, context=second)
        after = current()
    t.say(f"inside `with first:`, after creating the buffer, cuCtxGetCurrent -> {after:#x} (second)")
    t.check(after == second.handle, "the buffer made second current: it replaced first on top of the stack")
    owner = c_void_p()
    second.activate()
    cu.cuPointerGetAttribute(byref(owner), PointerAttribute.CONTEXT, buf.ptr)
    t.say(
        f"buf.ptr = {buf.ptr:#x}: its owner is {owner.value or NO_CONTEXT:#x}; second.handle = {second.handle:#x},"
        f" first.handle = {first.handle:#x}"
    )
    t.check(owner.value == second.handle, "allocated inside `with first:`, the buffer still belongs to second")
    back = buf.to_array()
    t.check(bool(np.array_equal(back, data)), f"its {N:,} random floats came back unchanged")
    t.say(
        "how: before each driver call an object asks cuCtxGetCurrent and, only when another context is\n"
        "current, calls cuCtxSetCurrent(its own) -- which replaces the top, so it is left current afterwards.\n"
        "rawcuda never relies on the stack, and never remembers what it set (other libraries move it too).\n"
        "The flip side, seen above: after using an object of another context inside `with first:`, a raw\n"
        "call in that block would go to second. Keep raw calls and other contexts' objects apart."
    )
    buf.close()
    for ctx in (first, second):
        ctx.close()

    t.step("cust: the same stack, from Rust (shown, not run)")
    t.say(
        "// cust::context::Context -- the current API: the device's primary context\n"
        "let ctx = Context::new(device)?;   // cuDevicePrimaryCtxRetain, then cuCtxSetCurrent:\n"
        "                                  // replaces the top, like the cuCtxSetCurrent step above\n"
        "CurrentContext::set_current(&ctx)?;            // cuCtxSetCurrent\n"
        "drop(ctx);   // cuDevicePrimaryCtxRelease; unlike cuCtxDestroy it never pops the stack\n"
        "\n"
        "// cust::context::legacy -- created contexts, pushed and popped by hand\n"
        "let ctx = legacy::Context::create_and_push(legacy::ContextFlags::SCHED_AUTO, device)?;\n"
        "                                  // cuCtxCreate: the new context is pushed and stays on top\n"
        "let top = legacy::ContextStack::pop()?;    // cuCtxPopCurrent -> an UnownedContext\n"
        "legacy::ContextStack::push(&top)?;         // cuCtxPushCurrent\n"
        "let now = legacy::CurrentContext::get_current()?;  // cuCtxGetCurrent\n"
        "drop(ctx);   // cuCtxDestroy (error discarded)"
    )
    t.say(
        "Facts behind those lines (crates/cust/src/context/mod.rs and context/legacy.rs, Rust-CUDA at commit\n"
        "ac2674f, 2025-08-23): cust::quick_init() is init + Device::get_device(0) + Context::new +\n"
        "set_flags(SCHED_AUTO). create_and_push calls cuCtxCreate(&ctx, flags, device) -- the 3-argument form\n"
        "of the CUDA 12 headers (cuCtxCreate_v2); CUDA 13's cuda.h maps cuCtxCreate to cuCtxCreate_v4, with a\n"
        "CUctxCreateParams* before the flags, as declared above. cust's objects do not record a context: a\n"
        "DeviceBuffer is a pointer and a length (memory/device/device_buffer.rs), and its copies and its\n"
        "drop call the driver in whatever context is current -- which one that is, the program must track."
    )


if __name__ == "__main__":
    run(main, "Tutorial 07a: contexts -- the per-thread stack, push, pop, set")
