"""Tutorial 06d -- the legacy-stream race: a synchronous cuMemcpyDtoH does not wait for a NON_BLOCKING stream.

A synchronous copy such as ``cuMemcpyDtoH`` runs on the *legacy default stream* (stream 0, or NULL). That
stream waits for every *blocking* stream of its context, and they for it -- but a stream created with
``CU_STREAM_NON_BLOCKING`` opts out ("does not synchronize with stream 0", says cuda.h). So a program that
queues a kernel on a NON_BLOCKING stream and then reads the result with a plain ``cuMemcpyDtoH`` can read
it before the kernel has run. The seed's case 1 asks for exactly that stream:
``Stream::new(StreamFlags::NON_BLOCKING, None)``. This tutorial shows the race and its fixes, three ways:

1. by hand, through ctypes: ``cuStreamCreate`` with the flag, ``cuStreamGetFlags`` and ``cuStreamGetCtx``
   to read it back, then the racing ``cuMemcpyDtoH_v2`` itself, from bare ctypes;
2. with rawcuda: ``Stream(flags=StreamFlag.NON_BLOCKING)`` really is non-blocking (``Stream()`` is not),
   and three orderings that are correct, each checked on every element;
3. with cust: ``Stream::new`` *removes* ``NON_BLOCKING`` (Rust-CUDA issue 15), so the seed's stream is an
   ordinary blocking one and cust's synchronous ``copy_to`` cannot race it.

Tutorial 06e shows rawcuda's other answer: copies without a stream that synchronize the whole context.

Run:  python tutorials/06d_legacy_stream_race.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, Stream, ops
from rawcuda.checked import cu
from rawcuda.ffi.constants import StreamFlag

CUDA_SUCCESS = 0
NAN32 = np.float32(np.nan)  # poison: a value the kernel has not written yet stays NaN
LEGACY_STREAM = None  # CUstream 0 (NULL): for cuStreamGetCtx, "the context current to the calling thread"
DEFAULT_PRIORITY = 0  # what cust's Stream::new passes for priority None

# DELAY_LAUNCHES saxpys on scratch memory keep a stream busy for milliseconds before its last kernel writes
# the output; the host queues them in a fraction of that.
RACE_N = 1 << 22
DELAY_N = 1 << 25
DELAY_LAUNCHES = 100
DELAY_ALPHA = 1e-3  # scratch arithmetic only: keeps the scratch values finite over all the launches
SCRATCH_VALUE = np.float32(1.0)  # the scratch data's content does not matter, only the time it takes
PROBE = 4096  # elements read back from the *end* of the output: the last blocks of the kernel write them


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "kernel",
        "context",
        "current context",
        "CUresult",
        "stream",
        "legacy default stream",
        "non-blocking stream",
    )
    t.step("a GPU, and the data: out = a + b, written last after milliseconds of other work")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    rng = np.random.default_rng()
    a, b = rng.standard_normal(RACE_N, dtype=np.float32), rng.standard_normal(RACE_N, dtype=np.float32)
    truth = (a + b)[-PROBE:]
    a_dev, b_dev = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    out = DeviceBuffer.empty(RACE_N, np.float32)
    tail = out[RACE_N - PROBE :]  # a view of the last PROBE elements
    delay_x, delay_y = DeviceBuffer.empty(DELAY_N, np.float32), DeviceBuffer.empty(DELAY_N, np.float32)
    delay_x.fill(SCRATCH_VALUE)
    delay_y.fill(SCRATCH_VALUE)
    t.say(f"device 0: {ctx.device.name}; out has {RACE_N:,} floats, the last {PROBE} are read back")

    t.step("by hand: cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), and what the driver says about s")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuStreamCreate = declare(libcuda, "cuStreamCreate", POINTER(c_void_p), c_uint)
    cuStreamCreateWithPriority = declare(libcuda, "cuStreamCreateWithPriority", POINTER(c_void_p), c_uint, c_int)
    cuStreamGetFlags = declare(libcuda, "cuStreamGetFlags", c_void_p, POINTER(c_uint))
    cuStreamGetCtx = declare(libcuda, "cuStreamGetCtx", c_void_p, POINTER(c_void_p))
    cuStreamDestroy = declare(libcuda, "cuStreamDestroy_v2", c_void_p)
    # cuda.h #defines cuMemcpyDtoH to cuMemcpyDtoH_v2: synchronous, on the legacy default stream.
    cuMemcpyDtoH = declare(libcuda, "cuMemcpyDtoH_v2", c_void_p, c_uint64, c_size_t)
    handle, flags, owner, current = c_void_p(), c_uint(), c_void_p(), c_void_p()
    create_rc = cuStreamCreate(byref(handle), StreamFlag.NON_BLOCKING)
    flags_rc = cuStreamGetFlags(handle, byref(flags))
    owner_rc = cuStreamGetCtx(handle, byref(owner))
    current_rc = cuStreamGetCtx(LEGACY_STREAM, byref(current))
    destroy_rc = cuStreamDestroy(handle)
    t.say(
        "CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);\n"
        "CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags);\n"
        "CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);\n"
        f"  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING = {int(StreamFlag.NON_BLOCKING)}) -> {create_rc}\n"
        f"  cuStreamGetFlags(s, &flags)   -> {flags_rc}, flags = {flags.value}\n"
        f"  cuStreamGetCtx(s, &ctx)       -> {owner_rc}, the context current when s was made\n"
        f"  cuStreamGetCtx(NULL, &ctx)    -> {current_rc}, for stream 0: the thread's current context\n"
        f"  cuStreamDestroy_v2(s)         -> {destroy_rc}\n"
        "s itself is an opaque pointer the driver made up; what can be checked is what the driver says of it:"
    )
    t.check(
        create_rc == flags_rc == destroy_rc == CUDA_SUCCESS and flags.value == StreamFlag.NON_BLOCKING,
        "the stream reads back as NON_BLOCKING (1)",
    )
    t.check(
        owner_rc == current_rc == CUDA_SUCCESS and owner.value == current.value == ctx.handle,
        "cuStreamGetCtx names the same CUcontext rawcuda made current, for s and for stream 0",
    )

    t.step("rawcuda: queue work on a NON_BLOCKING stream, then read with the bare cuMemcpyDtoH at once")
    fast = Stream(flags=StreamFlag.NON_BLOCKING)
    fast_ctx = c_void_p()
    t.check(
        fast.flags == StreamFlag.NON_BLOCKING
        and cuStreamGetCtx(fast.handle, byref(fast_ctx)) == CUDA_SUCCESS
        and fast_ctx.value == ctx.handle,
        "Stream(flags=StreamFlag.NON_BLOCKING) is non-blocking, in this context",
    )
    probe = np.empty(PROBE, np.float32)

    def queue_slow_write(on: Stream) -> None:
        """Poison `out`, then queue milliseconds of unrelated work and, last, the kernel that writes `out`."""
        out.fill(NAN32)  # stream-less: finished before anything below starts
        for _ in range(DELAY_LAUNCHES):
            ops.saxpy(delay_y, DELAY_ALPHA, delay_x, stream=on)
        ops.vector_add(out, a_dev, b_dev, stream=on)

    def raw_read() -> np.ndarray:
        """cuMemcpyDtoH_v2 from bare ctypes: synchronous, on the legacy default stream."""
        ctx.activate()  # raw calls use the thread's current context
        rc = cuMemcpyDtoH(probe.ctypes.data, tail.ptr, probe.nbytes)
        if rc != CUDA_SUCCESS:
            raise TutorialCheckError(f"cuMemcpyDtoH(host, tail, {probe.nbytes}) returned {rc}")
        return probe.copy()

    queue_slow_write(fast)  # warm-up: the kernels' modules are loaded before anything is raced
    fast.synchronize()

    queue_slow_write(fast)
    racy = raw_read()
    fast.synchronize()
    stale = int(np.count_nonzero(~(racy == truth)))  # NaN poison compares unequal, so it counts as stale
    t.say(
        f"{DELAY_LAUNCHES} saxpys and then vector_add queued on the NON_BLOCKING stream, then cuMemcpyDtoH at once:\n"
        f"{stale} of {PROBE} values read were stale ({int(np.isnan(racy).sum())} still the NaN poison)"
    )
    t.say(
        "(a race: it shows on most runs because the host queues the work far faster than the GPU runs it,\n"
        "but nothing guarantees either outcome -- which is exactly the problem)"
        if stale
        else "(no stale value this time -- the race is still there: nothing ordered the copy after the kernel)"
    )
    t.check(bool(np.array_equal(tail.to_array(stream=fast), truth)), "after fast.synchronize() the data is right")

    t.say("correct ways, each checked on every element read back:")
    queue_slow_write(fast)
    t.check(
        bool(np.array_equal(tail.to_array(stream=fast), truth)),
        "1. copy on the same stream (tail.to_array(stream=fast): cuMemcpyDtoHAsync on `fast`, then wait for it)",
    )
    queue_slow_write(fast)
    fast.synchronize()
    t.check(bool(np.array_equal(raw_read(), truth)), "2. synchronize the stream first, then the bare cuMemcpyDtoH")
    blocking = Stream()  # StreamFlag.DEFAULT
    t.check(blocking.flags == StreamFlag.DEFAULT, "Stream() is a blocking stream (flags 0)")
    queue_slow_write(blocking)
    t.check(
        bool(np.array_equal(raw_read(), truth)),
        "3. a *blocking* stream: the same bare cuMemcpyDtoH is correct, because stream 0 waits for it",
    )

    t.step("cust: Stream::new removes NON_BLOCKING -- the seed's stream is case 3")
    requested = StreamFlag.NON_BLOCKING  # what the seed asks for
    kept = requested & ~StreamFlag.NON_BLOCKING  # cust: flags.remove(StreamFlags::NON_BLOCKING)
    cust_like = c_void_p()
    cust_rc = cuStreamCreateWithPriority(byref(cust_like), int(kept), DEFAULT_PRIORITY)
    cust_flags = c_uint()
    cust_flags_rc = cuStreamGetFlags(cust_like, byref(cust_flags))
    cust_destroy_rc = cuStreamDestroy(cust_like)
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/stream.rs):\n"
        "  pub fn new(mut flags: StreamFlags, priority: Option<i32>) -> CudaResult<Self> {\n"
        "      // NOTE(RDambrosio016): See https://github.com/Rust-GPU/Rust-CUDA/issues/15\n"
        "      flags.remove(StreamFlags::NON_BLOCKING);\n"
        "      ... cuStreamCreateWithPriority(&mut stream.inner, flags.bits(), priority.unwrap_or(0)) ...\n"
        "So Stream::new(StreamFlags::NON_BLOCKING, None) is, by hand:\n"
        f"  cuStreamCreateWithPriority(&s, 0, 0) -> {cust_rc}; cuStreamGetFlags -> {cust_flags_rc}, "
        f"flags = {cust_flags.value}; cuStreamDestroy_v2 -> {cust_destroy_rc}\n"
        "and stream.get_flags() returns StreamFlags::DEFAULT. cust's synchronous copies (copy_to: cuMemcpyDtoH,\n"
        "on the legacy stream) then wait for it, as in case 3 -- the race cannot happen with cust's own streams.\n"
        "(cust's doc comment on the flag: 'temporarily disabled because of soundness concerns'.)"
    )
    t.check(
        cust_rc == cust_flags_rc == cust_destroy_rc == CUDA_SUCCESS and cust_flags.value == StreamFlag.DEFAULT,
        "the stream cust makes reads back as flags 0: blocking",
    )
    for obj in (fast, blocking, a_dev, b_dev, out, delay_x, delay_y):
        obj.close()


if __name__ == "__main__":
    run(main, "Tutorial 06d: the legacy-stream race, by hand, in rawcuda, and why cust cannot have it")
