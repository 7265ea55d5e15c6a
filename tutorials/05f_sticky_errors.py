"""Tutorial 05f -- sticky errors: once a kernel faults, every CUDA call in the process fails; only a new one recovers.

Most error codes are about one call (tutorials 05a-05e): the call fails, the context is fine. A kernel
that writes to an address no allocation has is different. The GPU raises an illegal-address exception,
and cuda.h says of CUDA_ERROR_ILLEGAL_ADDRESS (700): "This leaves the process in an inconsistent state and
any further CUDA work will return the same error. To continue using CUDA, the process must be terminated
and relaunched." The launch itself returns success -- it was only queued -- so the fault is reported by
whichever call next waits for the GPU. This tutorial provokes it in a child process (this one must stay
healthy) and reads it three ways:

1. by hand, through ctypes (in the child): after the fault, ``cuCtxSynchronize`` and ``cuMemAlloc_v2``
   return the same bare 700, call after call;
2. with rawcuda: the synchronize raises ``KernelFaultError`` (every sticky code does), every context is
   marked poisoned, and every later use raises ``ContextPoisonedError`` naming the error and the last
   kernel launched -- without calling the driver again; a brand-new context fails with the same code;
3. with cust: ``stream.synchronize()`` returns ``Err(CudaError::IllegalAddress)``, and so does every later
   call; cust keeps no record of it, and ``Drop`` discards the errors of the frees.

Run:  python tutorials/05f_sticky_errors.py [--step]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from _tutorial import ROOT, Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, ops
from rawcuda.ffi.results import STICKY

N = 100_003  # elements of the vector add that shows the parent is unharmed
NAN32 = np.float32(np.nan)  # the poison written into outputs before a kernel is supposed to fill them
FAULT_ADDRESS = 0x10  # a device address no allocation ever has: the first page is never mapped
CHILD_TIMEOUT_S = 120
CHILD_STDERR_SHOWN = 4000  # characters of the child's stderr to show when something went wrong
RESULT_TAG = "RESULT "  # prefix of the child's one machine-readable line
WRAP = 100  # characters per line of the list of sticky codes
BY_HAND_BEGIN = "# By hand:"  # the part of CHILD_CODE shown in the by-hand step: from this line ...
BY_HAND_END = 'print(f"child: by hand'  # ... to this one

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

# The child process: load FAULT_PTX, launch it at a bad address, synchronize, then try to keep working --
# with rawcuda, and below it with bare ctypes. It prints what a learner should read, and one JSON line
# (RESULT_TAG) that the parent checks.
CHILD_CODE = textwrap.dedent("""\
    import ctypes
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

    # By hand: the bare CUresult of later calls in the same (current) context.
    libcuda = ctypes.CDLL(cu.library().path)
    cuCtxSynchronize = libcuda["cuCtxSynchronize"]
    cuCtxSynchronize.restype, cuCtxSynchronize.argtypes = ctypes.c_int, []
    cuMemAlloc = libcuda["cuMemAlloc_v2"]
    cuMemAlloc.restype = ctypes.c_int
    cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuGetErrorName = libcuda["cuGetErrorName"]
    cuGetErrorName.restype = ctypes.c_int
    cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    ptr = ctypes.c_uint64()
    codes = [cuCtxSynchronize(), cuCtxSynchronize(), cuMemAlloc(ctypes.byref(ptr), 4)]
    name = ctypes.c_char_p()
    name_rc = cuGetErrorName(codes[0], ctypes.byref(name))
    report["raw"] = {"codes": codes, "name": (name.value or b"").decode() if name_rc == 0 else ""}
    print(f"child: by hand, cuCtxSynchronize() -> {codes[0]}, again -> {codes[1]}, "
          f"cuMemAlloc_v2(&ptr, 4) -> {codes[2]}; cuGetErrorName({codes[0]}) -> {report['raw']['name']}")

    try:
        rawcuda.Context.create(0)  # a brand-new context: does it start clean?
    except rawcuda.CudaError as exc:
        record("new_context", exc)
    print(tag + json.dumps(report))
""")


def child_env() -> dict[str, str]:
    """This environment, with the source tree on PYTHONPATH so the child imports the same rawcuda."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "context", "stream", "PTX")
    t.step("the GPU, and data for a check that this process stays healthy")
    ctx = rawcuda.default_context()
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.empty(N, np.float32)
    t.term("sticky error")
    t.say(f"device 0: {ctx.device.name}; the codes rawcuda treats as sticky (rawcuda/ffi/results.py, from cuda.h):")
    listing = ", ".join(f"{code.name.removeprefix('ERROR_')}({int(code)})" for code in sorted(STICKY))
    t.say(textwrap.fill(listing, WRAP, initial_indent="  ", subsequent_indent="  "))

    t.step("a kernel that writes to a bad address, run in a child process (this one must stay healthy)")
    t.say(f"the kernel (valid PTX, written by hand):\n{FAULT_PTX.rstrip()}")
    t.say(
        f"launched with address {FAULT_ADDRESS:#x}: the first page of the device address space, which no\n"
        "allocation ever gets. The child runs the same rawcuda from this source tree."
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

    t.step("by hand: after the fault the driver answers every call with the same bare code")
    t.check(fault is not None, "the child caught the fault (its log is above)")
    by_hand = CHILD_CODE[CHILD_CODE.index(BY_HAND_BEGIN) : CHILD_CODE.index(BY_HAND_END)]
    t.say("what the child ran, after the fault:\n" + textwrap.indent(by_hand.rstrip(), "  "))
    raw = report.get("raw", {})
    codes = raw.get("codes", [])
    t.check(
        len(codes) == 3 and all(code == fault["code"] for code in codes),
        f"cuCtxSynchronize twice and cuMemAlloc_v2 each returned {codes}: the fault's code, "
        f"{fault['code']}, every time (it does not clear once reported)",
    )
    t.check(raw.get("name") == fault["name"], f"cuGetErrorName still works and names it {raw.get('name')}")
    t.say(
        "this is what every program sees from here on, whatever binding it uses: the driver's own state,\n"
        "which no call clears."
    )

    t.step("rawcuda: KernelFaultError, then ContextPoisonedError -- and a new context does not help")
    t.check(
        fault["type"] == "KernelFaultError" and fault["code"] in {int(c) for c in STICKY},
        f"synchronize raised KernelFaultError: {fault and fault['name']} (CUDA_ERROR_ILLEGAL_ADDRESS, 700, "
        "expected; every sticky code is a KernelFaultError)",
    )
    t.check("sticky" in fault["message"], "its message says the error is sticky")
    t.check(
        poisoned is not None and poisoned["type"] == "ContextPoisonedError",
        "the next use of that context raised ContextPoisonedError, before any driver call",
    )
    t.check(
        fault["name"] in poisoned["message"] and "store_to" in poisoned["message"],
        f"it names the poisoning error ({fault['name']}) and the last kernel launched (store_to)",
    )
    new_context = report.get("new_context")
    t.check(
        new_context is not None and new_context["code"] == fault["code"],
        "a brand-new context (Context.create) failed with the same code: the whole process is done with CUDA, "
        "not only the context that faulted",
    )

    t.step("cust: Err(CudaError::IllegalAddress) at the next wait, from every call after, and silent drops")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/stream.rs, memory/device/device_buffer.rs, error.rs):\n"
        f"  unsafe {{ launch!(store_to<<<1, 1, 0, stream>>>({FAULT_ADDRESS:#x}u64))?; }}  // Ok(()): only queued\n"
        "  stream.synchronize()?;                  // Err(CudaError::IllegalAddress)\n"
        "  unsafe { DeviceBuffer::<u8>::uninitialized(4) }?;   // Err(IllegalAddress) again: the driver's answer\n"
        "  drop(buffer);                           // Drop for DeviceBuffer: `let _ = cuda_free(ptr);` -- discarded\n"
        "  // or DeviceBuffer::drop(buffer), a DropResult: Err((IllegalAddress, buffer)) hands the buffer back\n"
        "cust keeps no state of its own: each call asks the driver and gets 700, with nothing saying which\n"
        "kernel caused it. IllegalAddress, AssertError, MisalignedAddress ... are ordinary CudaError variants;\n"
        "the enum does not mark which ones are sticky, and four sticky codes (226 CONTAINED, 721\n"
        "TENSOR_MEMORY_LEAK, 810 MPS_CLIENT_TERMINATED, 911 EXTERNAL_DEVICE) are not in it at all: they\n"
        "arrive as UnknownError (tutorial 05a lists the codes cust lacks)."
    )
    t.say(
        "what to do, with either: a sticky error cannot be cleared, not even by a fresh context -- save what\n"
        "you can and start a new process (or, as here, run risky kernels in a child process from the start).\n"
        "To find the guilty kernel run with RAWCUDA_SYNC_LAUNCHES=1 (each launch waits for the GPU, so the\n"
        "error appears at its own launch) or under compute-sanitizer, which names the faulting instruction."
    )

    t.step("meanwhile, this process is unharmed")
    dc.fill(NAN32)
    ops.vector_add(dc, da, db)
    t.check(bool(np.array_equal(dc.to_array(), a + b)), "vector_add in the parent still gives every sum exactly")
    t.check(ctx.poisoned is None, "the parent's context was never poisoned")
    for buf in (da, db, dc):
        buf.close()


if __name__ == "__main__":
    run(main, "Tutorial 05f: sticky errors -- one faulting kernel ends CUDA for the whole process")
