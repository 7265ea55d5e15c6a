"""Tutorial 05 -- errors: provoke every kind of failure on purpose, read what it says, learn what to do.

The seed article's case 4 wraps CUDA's integer error codes in a Rust enum, ``GpuError``, with a special
``OutOfMemory { requested, available }`` because an OOM is the error you *handle* rather than report.
rawcuda turns every CUresult into an exception of a class that says what you would do about it, and adds
its own checks that fire *before* the driver is called. This tutorial triggers each one and reads it:

* bad PTX                  -> ``ModuleLoadError``       (carries the JIT compiler's error log)
* a kernel name not found  -> ``NotFoundError``         (lists the module's kernels, spots C++ name mangling)
* wrong kernel arguments   -> ``ArgumentError`` / ``ClosedError``, before the launch
* too much memory          -> ``OutOfMemoryError``      (``.requested`` and ``.available`` bytes)
* a kernel that faults     -> ``KernelFaultError``, then ``ContextPoisonedError`` for every later call --
  shown in a child process, because a faulted context cannot be repaired, only abandoned.

Run:  python tutorials/05_errors.py [--step]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from _tutorial import ROOT, Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, Module, kernels
from rawcuda.ffi.results import STICKY, Result

N = 100_003  # elements: not a multiple of the block size, so the kernel's tail handling is exercised too
BLOCK = 256
NAN32 = np.float32(np.nan)  # the poison written into outputs before a kernel is supposed to fill them
ONE_TIB = 1 << 40  # bytes: more than any GPU has, so cuMemAlloc must refuse it
SMALL_ALLOC = 4  # elements: a tiny allocation that proves the context still works after an OOM
SAXPY_ALPHA = 2.0
TRANSPOSE_SIDE = 64  # rows = cols of the (never launched) transpose used for the size_t width mistake
TRANSPOSE_BLOCK = (32, 8)
MANGLED_VECTOR_ADD = "_Z10vector_addPfPKfS1_m"  # what nvcc calls vector_add(float*, const float*, ...) in C++
FAULT_ADDRESS = 0x10  # a device address no allocation ever has: the first page is never mapped
CHILD_TIMEOUT_S = 120
CHILD_STDERR_SHOWN = 4000  # characters of the child's stderr to show when something went wrong
GIB = 1 << 30
RESULT_TAG = "RESULT "  # prefix of the child's one machine-readable line

# PTX with a mistake a person makes when writing PTX by hand: `.reg .f32 %f<3>` declares %f0, %f1 and %f2,
# so %f3 does not exist. rawcuda's own PTX reader only reads headers and signatures (it accepts this); the
# driver's JIT compiler (ptxas) rejects it and explains why in its error log.
BROKEN_PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry double_it(
    .param .u64 double_it_param_0
)
{
    .reg .f32   %f<3>;
    .reg .b64   %rd<3>;
    ld.param.u64        %rd1, [double_it_param_0];
    cvta.to.global.u64  %rd2, %rd1;
    ld.global.f32       %f1, [%rd2];
    add.f32             %f3, %f1, %f1;
    st.global.f32       [%rd2], %f3;
    ret;
}
"""

# Valid PTX whose kernel stores one 32-bit value at whatever address it is given. Given FAULT_ADDRESS, the
# store hits unmapped memory: the GPU raises an illegal-address exception and the context is lost.
FAULT_PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry store_to(
    .param .u64 store_to_param_0
)
{
    .reg .b32   %r<2>;
    .reg .b64   %rd<3>;
    ld.param.u64        %rd1, [store_to_param_0];
    cvta.to.global.u64  %rd2, %rd1;
    mov.u32             %r1, 42;
    st.global.u32       [%rd2], %r1;
    ret;
}
"""

# The child process: load FAULT_PTX, launch it at a bad address, synchronize, then try to keep working.
# It prints what a learner should read, and one JSON line (RESULT_TAG) that the parent checks.
CHILD_CODE = textwrap.dedent("""\
    import json
    import sys

    import rawcuda
    from rawcuda import DeviceBuffer, Module
    from rawcuda.checked import cu

    ptx, address, tag = sys.argv[1], int(sys.argv[2], 0), sys.argv[3]
    report = {}

    def record(key, exc):
        report[key] = {"type": type(exc).__name__, "code": getattr(exc, "code", None),
                       "name": getattr(exc, "name", ""), "message": str(exc)}
        print(f"child: {key}: {type(exc).__name__}:\\n  " + str(exc).replace("\\n", "\\n  "))

    module = Module(ptx, name="store_to.ptx")
    ctx = module.context
    kernel = module.function("store_to")
    print(f"child: launching store_to({address:#x}); the launch is queued and returns at once")
    try:
        kernel.launch(1, 1, address)
        ctx.synchronize()  # the fault happened on the GPU; the next call that waits for the GPU reports it
    except rawcuda.KernelFaultError as exc:
        record("fault", exc)
    try:
        DeviceBuffer.empty(4)  # any later use of the context
    except rawcuda.ContextPoisonedError as exc:
        record("poisoned", exc)
    try:
        cu.cuCtxSynchronize()  # below rawcuda: the driver itself keeps answering with the sticky error
    except rawcuda.CudaError as exc:
        record("raw_again", exc)
    try:
        rawcuda.Context.create(0)  # a brand-new context: does it start clean?
    except rawcuda.CudaError as exc:
        record("new_context", exc)
    print(tag + json.dumps(report))
""")

E = TypeVar("E", bound=BaseException)


def expect(t: Tutorial, what: str, error: type[E], action: Callable[[], object]) -> E:
    """Run ``action``, which must raise ``error``; print the exception as a learner would see it."""
    try:
        action()
    except error as exc:
        t.say(f"{what}\n  -> {type(exc).__name__}: " + str(exc).replace("\n", "\n     "))
        return exc
    raise TutorialCheckError(f"{what}: expected {error.__name__}, but nothing was raised")


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def child_env() -> dict[str, str]:
    """This environment, with the source tree on PYTHONPATH so the child imports the same rawcuda."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def main(t: Tutorial) -> None:
    t.step("the GPU, and the primary context every object below uses")
    ctx = rawcuda.default_context()
    t.say(f"{ctx!r} on {ctx.device.name}")
    t.say(
        "every error below is a subclass of rawcuda.CudaError (driver codes) or a TypeError/ValueError\n"
        "subclass (rawcuda's own checks); each message names the call, the code, the driver's description\n"
        "and a hint"
    )
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.empty(N, np.float32)

    t.step("bad PTX: the driver's JIT compiler refuses it -> ModuleLoadError with the JIT error log")
    t.say("the kernel declares `.reg .f32 %f<3>` (that is %f0..%f2) and then writes %f3")
    exc_load = expect(t, "Module(BROKEN_PTX)", rawcuda.ModuleLoadError, lambda: Module(BROKEN_PTX, name="broken.ptx"))
    t.check(
        exc_load.code in (Result.ERROR_INVALID_PTX, Result.ERROR_INVALID_IMAGE),
        f"the driver answered {exc_load.name} (INVALID_PTX expected)",
    )
    t.check("JIT error log" in str(exc_load), "the exception carries the JIT compiler's error log")
    t.say(
        "what to do: read the log -- it gives the PTX line and the reason. PTX from nvcc rarely has such\n"
        "mistakes; hand-written or generated PTX often does."
    )

    t.step("a kernel that is not there -> NotFoundError, listing the module's kernels")
    # The shipped vector_add PTX with its entry renamed to what nvcc emits when the kernel is *not* extern "C".
    source = kernels.ptx_path("vector_add").read_text()
    mangled_ptx = re.sub(r"(?<![\w/$])vector_add(?=[\s(]|_param_)", MANGLED_VECTOR_ADD, source)
    mangled = Module(mangled_ptx, name="vector_add_without_extern_C.ptx")
    t.say(f"the module's kernels, read from its PTX: {mangled.entry_names()}")
    exc_missing = expect(
        t, 'module.function("vector_add")', rawcuda.NotFoundError, lambda: mangled.function("vector_add")
    )
    t.check(exc_missing.code == Result.ERROR_NOT_FOUND, "cuModuleGetFunction answered CUDA_ERROR_NOT_FOUND (500)")
    t.check(
        MANGLED_VECTOR_ADD in str(exc_missing) and "extern" in str(exc_missing),
        'the message lists the mangled kernel and suggests extern "C"',
    )
    t.check(isinstance(exc_missing, LookupError), "NotFoundError is also a LookupError (generic handlers work)")
    t.say('what to do: declare kernels extern "C" so the PTX name is the C name -- or ask for the mangled one:')
    dc.fill(NAN32)
    mangled.function(MANGLED_VECTOR_ADD).launch(grid_for(N), BLOCK, dc, da, db, N)
    t.check(bool(np.array_equal(dc.to_array(), a + b)), f"the kernel found as {MANGLED_VECTOR_ADD} adds correctly")
    mangled.close()

    t.step("wrong kernel arguments -> ArgumentError / ClosedError, raised before cuLaunchKernel")
    vector_add = Module(kernels.ptx_path("vector_add")).function("vector_add")
    saxpy = Module(kernels.ptx_path("saxpy")).function("saxpy")
    transpose = Module(kernels.ptx_path("transpose")).function("transpose_naive")
    t.say(f"signatures read from the PTX:\n  {vector_add!r}\n  {saxpy!r}\n  {transpose!r}")
    closed = DeviceBuffer.from_array(a)
    closed.close()
    square = DeviceBuffer.empty((TRANSPOSE_SIDE, TRANSPOSE_SIDE), np.float32)
    dc.fill(NAN32)  # if any of the launches below reached the GPU, dc would no longer be all NaN
    before = ctx.last_launch
    grid = grid_for(N)
    mistakes: list[tuple[str, type[BaseException], Callable[[], object]]] = [
        (
            "vector_add with 3 arguments instead of 4",
            rawcuda.ArgumentError,
            lambda: vector_add.launch(grid, BLOCK, dc, da, db),
        ),
        (
            "saxpy with np.float64 alpha for its f32 parameter",
            rawcuda.ArgumentError,
            lambda: saxpy.launch(grid, BLOCK, dc, np.float64(SAXPY_ALPHA), da, N),
        ),
        (
            "transpose with np.int32 rows/cols for its size_t (u64) parameters",
            rawcuda.ArgumentError,
            lambda: transpose.launch(
                1, TRANSPOSE_BLOCK, square, square, np.int32(TRANSPOSE_SIDE), np.int32(TRANSPOSE_SIDE)
            ),
        ),
        (
            "vector_add with a host numpy array where a device pointer goes",
            rawcuda.ArgumentError,
            lambda: vector_add.launch(grid, BLOCK, dc, a, db, N),
        ),
        (
            "vector_add with a DeviceBuffer that was closed",
            rawcuda.ClosedError,
            lambda: vector_add.launch(grid, BLOCK, dc, closed, db, N),
        ),
    ]
    for what, error, action in mistakes:
        expect(t, what, error, action)
    t.check(ctx.last_launch is before, "no launch reached the driver (the context's last launch is unchanged)")
    t.check(bool(np.isnan(dc.to_array()).all()), "the output is still all NaN: no kernel ran")
    t.say(
        "ArgumentError is a TypeError and ClosedError a ValueError. cust checks less: launch! (inside\n"
        "`unsafe`) only requires each argument to be DeviceCopy, so a wrong count or width compiles and is\n"
        "undefined behaviour; a host pointer, or the DevicePointer of a dropped buffer, compiles too.\n"
        "Here every argument is checked against the kernel's PTX signature before the driver sees it.\n"
        "what to do: pass DeviceBuffers for pointers, numpy scalars of the parameter's exact width\n"
        "(np.float32, np.uint32) or plain Python numbers, and only open buffers."
    )
    vector_add.launch(grid, BLOCK, dc, da, db, N)
    t.check(bool(np.array_equal(dc.to_array(), a + b)), "the corrected launch adds correctly")
    square.close()

    t.step("out of memory -> OutOfMemoryError with .requested and .available (the seed's OutOfMemory)")
    free, total = ctx.mem_info()
    t.say(f"cuMemGetInfo: {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB")
    exc_oom = expect(
        t,
        "DeviceBuffer.empty(1 << 40, np.uint8)  # 1 TiB",
        rawcuda.OutOfMemoryError,
        lambda: DeviceBuffer.empty(ONE_TIB, np.uint8),
    )
    t.check(exc_oom.requested == ONE_TIB, f".requested = {exc_oom.requested} bytes (1 TiB)")
    t.check(
        exc_oom.available is not None and exc_oom.available < ONE_TIB,
        f".available = {exc_oom.available} bytes, asked from cuMemGetInfo when the allocation failed",
    )
    t.check(isinstance(exc_oom, MemoryError), "OutOfMemoryError is also a MemoryError")
    with DeviceBuffer.from_array(a[:SMALL_ALLOC]) as small:
        t.check(bool(np.array_equal(small.to_array(), a[:SMALL_ALLOC])), "the context still works after the OOM")
    t.say(
        "the seed calls OOM unrecoverable; for the GPU it is not: nothing was allocated, the context is\n"
        "fine. what to do: free buffers you no longer need (close(), or drop them and gc.collect()),\n"
        "process the data in smaller pieces, or check nvidia-smi for other processes using the GPU."
    )

    t.step("a kernel that writes to a bad address -> KernelFaultError, then ContextPoisonedError (child process)")
    t.say(f"the kernel (valid PTX, written by hand):\n{FAULT_PTX.rstrip()}")
    t.say(
        f"launched with address {FAULT_ADDRESS:#x}. Such a fault is *sticky*: CUDA is ruined for the rest of\n"
        "the process -- every context, old or new -- so it runs in a fresh Python process; this one stays healthy."
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_CODE, FAULT_PTX, hex(FAULT_ADDRESS), RESULT_TAG],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    shown = [line for line in proc.stdout.splitlines() if not line.startswith(RESULT_TAG)]
    t.say("\n".join(shown) or "(the child printed nothing)")
    results = [line[len(RESULT_TAG) :] for line in proc.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if proc.returncode != 0 or proc.stderr.strip():
        t.say("child stderr:\n" + proc.stderr[-CHILD_STDERR_SHOWN:])
    t.check(proc.returncode == 0 and len(results) == 1, f"the child ran to its end (exit status {proc.returncode})")
    report = json.loads(results[0])
    fault, poisoned = report.get("fault"), report.get("poisoned")
    t.check(
        fault is not None and fault["type"] == "KernelFaultError" and fault["code"] in {int(c) for c in STICKY},
        f"synchronize raised KernelFaultError: {fault and fault['name']} (CUDA_ERROR_ILLEGAL_ADDRESS, 700, "
        "expected; every sticky code is a KernelFaultError)",
    )
    t.check("sticky" in fault["message"], "its message says the error is sticky")
    t.check(
        poisoned is not None and poisoned["type"] == "ContextPoisonedError",
        "the next call in that context raised ContextPoisonedError",
    )
    t.check(
        fault["name"] in poisoned["message"] and "store_to" in poisoned["message"],
        f"it names the poisoning error ({fault['name']}) and the last kernel launched (store_to)",
    )
    raw_again = report.get("raw_again")
    if raw_again is not None:
        t.say(f"below rawcuda, cuCtxSynchronize kept failing with {raw_again['name']}: the driver's own answer")
    new_context = report.get("new_context")
    t.check(
        new_context is not None and new_context["code"] == fault["code"],
        "a brand-new context (Context.create) failed with the same code: the whole process is done with CUDA, "
        "not only the context that faulted",
    )
    t.say(
        "what to do: a sticky error cannot be cleared, not even by a fresh context -- save what you can and\n"
        "start a new process (or, as here, run risky kernels in a child process from the start). To find\n"
        "the guilty kernel run with RAWCUDA_SYNC_LAUNCHES=1 (each launch waits for the GPU, so the error\n"
        "appears at its own launch) or under compute-sanitizer, which names the faulting instruction."
    )

    t.step("meanwhile, this process is unharmed")
    dc.fill(NAN32)
    vector_add.launch(grid, BLOCK, dc, da, db, N)
    t.check(bool(np.array_equal(dc.to_array(), a + b)), "vector_add in the parent still gives every sum exactly")
    t.check(ctx.poisoned is None, "the parent's context was never poisoned")
    for buf in (da, db, dc):
        buf.close()


if __name__ == "__main__":
    run(main, "Tutorial 05: provoking and reading every kind of error")
