"""Tutorial 10 -- asyncio: ``await stream`` keeps the event loop alive; ``stream.synchronize()`` freezes it.

The seed article's warning, for Tokio: "CUDA stream semantics differ from Rust's Future.
``Stream::synchronize()`` is blocking -- it blocks the current OS thread. Using it in Tokio's async context
blocks the reactor thread." Python's asyncio has the same shape: one thread runs every coroutine, so one
coroutine that blocks in ``stream.synchronize()`` stops all of them.

rawcuda's ``await stream`` (``rawcuda/extras/aio.py``) asks the driver to call a tiny host function when the
stream reaches it (``cuLaunchHostFunc``); that function only wakes the loop
(``loop.call_soon_threadsafe``). No thread blocks anywhere. cust has the same tool, which the seed does not
mention: ``Stream::add_callback`` (``cuStreamAddCallback``) runs a closure when the stream gets there, and
that closure can wake a Tokio future -- no thread pool needed.

The callback is written by hand first: the C function-pointer type as a raw ``ctypes.CFUNCTYPE``, the
trap that comes with it (a CFUNCTYPE object is code made at run time and freed with the object: if it is
collected before the driver calls it, the driver jumps into freed memory -- shown here on an object that
no C code holds, never on one the driver holds), and ``cuLaunchHostFunc`` bound and called by hand. Then
rawcuda's ``await stream``, which keeps one such object alive for the life of the process.

To *see* the difference, the GPU must be busy for a known time: ``kernels/spin.cu`` busy-waits on the GPU's
nanosecond clock (``%globaltimer``) for as long as it is told. A ticker coroutine ticks every 10 ms and
records the longest gap between ticks: that gap is how long the loop was unavailable.

Last, 100 kernels on 100 streams, all awaited at once, take far longer than the longest of them: the
driver has only ``CUDA_DEVICE_MAX_CONNECTIONS`` hardware work queues (8 unless set), and streams that share
one wait for each other. The same kernels run again in a fresh process with 32 queues.

Run:  python tutorials/10_asyncio.py [--step]
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from ctypes import c_int, c_void_p

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import Event, Function, Module, Stream
from rawcuda.checked import cu, raise_for
from rawcuda.extras import aio

NS_PER_S = 1_000_000_000
MS_PER_S = 1000
SPIN_S = 1.0  # the GPU is busy this long in each experiment
TICK_S = 0.010
RESPONSIVE_S = 0.1  # a loop that never blocks keeps every gap far below this
CONCURRENT = 100
SPIN_RANGE_S = (0.05, 0.25)  # the 100 concurrent kernels' durations
EARLY_S = 0.02  # clock granularity: a wait may end this much before the nominal duration
RAW_SPIN_S = 0.2  # the kernel the hand-bound host function waits behind
CONCURRENTS_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"  # CUDA C++ Programming Guide, "CUDA Environment Variables"
DEFAULT_CONNECTIONS = 8  # the driver's work queues per device unless the variable says otherwise
MAX_CONNECTIONS = 32  # the most it accepts
CHILD_TIMEOUT_S = 120.0
# The fresh process: this file imported as a module (its main does not run), then the awaits, as JSON.
CHILD = """
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
spec = importlib.util.spec_from_file_location("tutorial_10", sys.argv[1])
tutorial = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tutorial)
print(json.dumps(tutorial.child_run(json.loads(sys.argv[2]))))
"""
HOST_FN_TIMEOUT_S = 30.0  # far longer than RAW_SPIN_S: only a host function that never runs gets near it
USER_TOKEN = 42  # userData for the hand-bound call: an integer, not a pointer to anything

#: typedef void (CUDA_CB *CUhostFn)(void *userData);  -- written by hand: returns nothing, takes one void *
HostFn = ctypes.CFUNCTYPE(None, c_void_p)

host_calls: list[tuple[int | None, int]] = []  # (userData, thread id) of each call of on_host
host_called = threading.Event()


def on_host(user_data: int | None) -> None:
    """Runs on a driver thread when the stream gets here. It must not call CUDA and must not raise (an
    exception cannot travel back into C), so it only records the call and wakes the waiting thread."""
    with contextlib.suppress(BaseException):
        host_calls.append((user_data, threading.get_ident()))
        host_called.set()


#: Module level, like rawcuda's own (rawcuda/extras/aio.py): alive for as long as the driver might call it.
ON_HOST = HostFn(on_host)


def freed_when_unreferenced() -> tuple[bool, bool]:
    """A CFUNCTYPE object and the Python function it wraps: (alive while referenced, freed as soon as not).

    Harmless here -- no C code holds this pointer. Passed inline to cuLaunchHostFunc,
    ``cuLaunchHostFunc(stream, HostFn(callback), None)``, the object's only reference is the call itself:
    it is freed when the call returns, and the driver later calls freed memory.
    """
    freed: list[bool] = []

    def callback(user_data: int | None) -> None:  # never called
        pass

    weakref.finalize(callback, freed.append, True)
    thunk = HostFn(callback)
    del callback  # now only the CFUNCTYPE object holds the function
    alive = not freed
    del thunk  # the last reference: CPython frees it at once (and the code the driver would jump to)
    return alive, bool(freed)


async def ticker(stop: asyncio.Event) -> float:
    """Tick every TICK_S until ``stop``; return the longest gap between two ticks, in seconds."""
    longest, last = 0.0, time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(TICK_S)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return longest


async def with_ticker(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Run ``work`` while the ticker runs: (seconds the work took, the ticker's longest gap)."""
    stop = asyncio.Event()
    ticks = asyncio.ensure_future(ticker(stop))
    await asyncio.sleep(TICK_S)  # the ticker is running before the GPU work starts
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    stop.set()
    return elapsed, await ticks


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "stream", "event")
    t.step("raw ctypes first: the callback type by hand, and the callback-lifetime trap")
    alive, freed = freed_when_unreferenced()
    t.say(
        "HostFn = ctypes.CFUNCTYPE(None, c_void_p)   # void (*)(void *userData): cuda.h's CUhostFn\n"
        "HostFn(python_function) makes a C function pointer at run time: a small piece of executable code\n"
        "(libffi's closure) that enters the interpreter and calls the Python function. That code belongs to\n"
        "the Python object -- it is freed with it -- and ctypes keeps an argument alive only *during* a call.\n"
        "cuLaunchHostFunc returns at once; the driver calls the pointer later, from its own thread. So the\n"
        "object must stay referenced until the driver has called it and returned. Proof of the freeing, on a\n"
        f"pointer no C code holds: alive while referenced: {alive}; freed the moment it was not: {freed}"
    )
    t.check(alive and freed, "a CFUNCTYPE object lives exactly as long as Python references it")

    t.step("a kernel of known duration: spin(ns) busy-waits on the GPU's %globaltimer")
    t.term("globaltimer")
    spin = load_spin()  # the first launch loads the kernel: done before anything is timed
    t.say(f"{spin!r}: one thread, launched as spin<<<1, 1>>>({round(SPIN_S * NS_PER_S)}) for {SPIN_S:g} s")
    stream = Stream()

    def busy(seconds: float, on: Stream) -> None:
        spin.launch(1, 1, round(seconds * NS_PER_S), stream=on)

    t.step(f"cuLaunchHostFunc by hand: Python called on a driver thread once a {RAW_SPIN_S:g} s kernel is done")
    launch_host_func = cu.library().handle["cuLaunchHostFunc"]  # a fresh, untyped pointer to the symbol
    launch_host_func.restype = c_int  # CUresult
    launch_host_func.argtypes = [c_void_p, HostFn, c_void_p]  # (CUstream hStream, CUhostFn fn, void *userData)
    busy(RAW_SPIN_S, stream)
    marker = Event(timing=False).record(stream)  # done exactly when the kernel is
    host_called.clear()
    code = launch_host_func(stream.handle, ON_HOST, USER_TOKEN)
    if code:
        raise_for(code, "cuLaunchHostFunc", (stream.handle, ON_HOST, USER_TOKEN))
    queued_done = marker.query()
    ran = host_called.wait(HOST_FN_TIMEOUT_S)
    stream.synchronize()  # the host function is stream work: wait for the stream before going on
    token, thread = host_calls[-1] if host_calls else (None, 0)
    t.say(
        f"right after cuLaunchHostFunc returned the kernel was {'done' if queued_done else 'still running'}; "
        f"on_host ran with userData={token} on thread {thread:#x} (this one is {threading.get_ident():#x})\n"
        "ON_HOST is module-level, so it outlives every call. userData is the integer 42, not a pointer to a\n"
        "Python object: nothing else has to stay alive for the C side. rawcuda/extras/aio.py does the same with one\n"
        "module-level CUhostFn (rawcuda.ffi.types.CUhostFn, this same type) for every `await`, an integer token\n"
        "as userData, and a registry from token to the waiting Future.\n"
        "cust: Stream::add_callback(Box<FnOnce(CudaResult<()>) + Send>) calls cuStreamAddCallback with\n"
        "callback_wrapper::<T>, a Rust function of the C calling convention compiled into the program (it\n"
        "never dies), and the boxed closure as userData via Box::into_raw: the driver owns the closure until\n"
        "callback_wrapper rebuilds the Box, calls it once (inside catch_unwind: no panic crosses into C) and\n"
        "drops it. Python has no compiled code to point at, so the object itself must be kept. (cuda.h:\n"
        "cuStreamAddCallback is 'slated for eventual deprecation'; it suggests cuLaunchHostFunc.)"
    )
    t.check(
        ran and token == USER_TOKEN and thread != threading.get_ident() and marker.query(),
        "the driver called on_host on its own thread, with our userData, after the kernel had finished",
    )
    marker.close()

    t.step(
        f"the right way: `await stream` while a {SPIN_S:g} s kernel runs, a ticker ticking every "
        f"{TICK_S * MS_PER_S:.0f} ms"
    )

    async def awaiting() -> None:
        busy(SPIN_S, stream)
        await stream  # cuLaunchHostFunc(stream, host_fn, token); host_fn -> loop.call_soon_threadsafe

    elapsed, gap = asyncio.run(with_ticker(awaiting))
    t.say(f"the await took {elapsed:.3f} s; the longest gap between ticks was {gap * MS_PER_S:.1f} ms")
    t.check(elapsed >= SPIN_S - EARLY_S and stream.query(), "the await returned only after the kernel finished")
    t.check(gap < RESPONSIVE_S, f"the loop kept ticking (every gap < {RESPONSIVE_S * MS_PER_S:.0f} ms)")

    t.step("the trap: `stream.synchronize()` inside a coroutine (the seed's Tokio warning)")

    async def blocking() -> None:
        busy(SPIN_S, stream)
        stream.synchronize()  # cuStreamSynchronize: this OS thread -- the whole event loop -- waits here

    elapsed, gap = asyncio.run(with_ticker(blocking))
    t.say(f"the wait took {elapsed:.3f} s; the longest gap between ticks was {gap * MS_PER_S:.1f} ms")
    t.check(gap >= SPIN_S - EARLY_S, "the loop froze for the whole kernel: no coroutine ran meanwhile")
    t.say(
        "the seed's fix for Tokio is a dedicated thread pool; in Python that is\n"
        "`await asyncio.to_thread(stream.synchronize)` -- correct, but each pending wait holds a pool thread.\n"
        "cust's Stream::add_callback (cuStreamAddCallback) is the Rust counterpart of `await stream`."
    )

    t.step("events too: `await event` waits for the work recorded before it, not for the whole stream")

    async def awaiting_event() -> None:
        busy(SPIN_S / 2, stream)
        half = Event().record(stream)
        busy(SPIN_S / 2, stream)
        start = time.perf_counter()
        await half  # cuStreamWaitEvent on an internal stream, then the same host function
        waited = time.perf_counter() - start
        t.say(
            f"`await event` returned after {waited:.3f} s, while the stream still had "
            f"{'no' if stream.query() else 'more'} work"
        )
        t.check(half.query() and not stream.query(), "the event was done, the rest of the stream was not")
        await stream
        half.close()

    asyncio.run(awaiting_event())

    t.step(f"{CONCURRENT} concurrent awaits, each on its own stream with its own kernel")
    durations = [float(d) for d in np.random.default_rng().uniform(*SPIN_RANGE_S, CONCURRENT)]
    elapsed, right = concurrent_awaits(spin, durations)
    t.say(
        f"{CONCURRENT} awaits completed in {elapsed:.3f} s (kernels of {SPIN_RANGE_S[0]:g}-{SPIN_RANGE_S[1]:g} s, "
        f"{sum(durations):.1f} s if run one after another)"
    )
    t.check(right, f"all {CONCURRENT} awaits returned, each after its own kernel, and no wait is left registered")
    stream.close()

    t.step(f"why not {max(durations):.2f} s, the longest kernel? {CONCURRENTS_ENV}: a stream is not a hardware queue")
    queues = int(os.environ.get(CONCURRENTS_ENV, DEFAULT_CONNECTIONS))
    t.say(
        f"The driver feeds the GPU through {CONCURRENTS_ENV} work queues ({DEFAULT_CONNECTIONS} unless set, "
        f"at most\n{MAX_CONNECTIONS}; set it before the process's first CUDA call) and spreads the streams over "
        "them. A queue runs\nin order, so work of different streams that share a queue can wait for each other: a "
        "false dependency, "
        f"which no\nstream asked for. With {queues} queues, dealt round-robin, the busiest queue holds "
        f"{busiest(durations, queues):.2f} s of kernels (an estimate:\nthe driver's assignment is its own)."
    )
    again = in_a_fresh_process(durations, MAX_CONNECTIONS)
    t.say(
        f"The same {CONCURRENT} kernels in a fresh process with {CONCURRENTS_ENV}={MAX_CONNECTIONS}: "
        f"{again['seconds']:.3f} s\n(estimate {busiest(durations, MAX_CONNECTIONS):.2f} s; here {elapsed:.3f} s with "
        f"{queues}). Set it in the environment before the\nfirst CUDA call of the process: the driver reads it "
        "once, when it starts."
    )
    t.check(bool(again["right"]), f"with {MAX_CONNECTIONS} queues too, every await returned after its own kernel")


def load_spin() -> Function:
    """kernels/spin.cu's spin(ns), loaded and launched once (the first launch loads it: not part of a timing)."""
    spin = Module(rawcuda.kernels.ptx_path("spin")).function("spin")
    spin.launch(1, 1, 0)
    spin.context.synchronize()
    return spin


def concurrent_awaits(spin: Function, durations: list[float]) -> tuple[float, bool]:
    """One spin kernel per stream, all awaited at once: (seconds until the last returned, all of them right)."""
    streams = [Stream() for _ in durations]

    async def one(on: Stream, seconds: float) -> bool:
        spin.launch(1, 1, round(seconds * NS_PER_S), stream=on)
        marker = Event(timing=False).record(on)
        await on
        # The kernel (and the marker after it) must be done when the await returns. The stream itself may
        # still be busy for a moment: the host function that woke us up is part of it and may not have
        # returned yet -- so ask the marker, not stream.query().
        finished = marker.query()
        marker.close()
        return finished

    async def all_of_them() -> list[bool]:
        return await asyncio.gather(*(one(on, seconds) for on, seconds in zip(streams, durations, strict=True)))

    start = time.perf_counter()
    done = asyncio.run(all_of_them())
    elapsed = time.perf_counter() - start
    for on in streams:
        on.close()
    return elapsed, len(done) == len(durations) and all(done) and aio.pending() == 0


def busiest(durations: list[float], queues: int) -> float:
    """The longest queue's total if the streams were dealt to ``queues`` queues in turn."""
    return max(sum(durations[q::queues]) for q in range(queues))


def child_run(durations: list[float]) -> dict[str, float | bool]:
    """What the fresh process runs: the concurrent awaits, reported as JSON."""
    elapsed, right = concurrent_awaits(load_spin(), durations)
    return {"seconds": elapsed, "right": right}


def in_a_fresh_process(durations: list[float], connections: int) -> dict[str, float | bool]:
    """The concurrent awaits in a new interpreter whose driver starts with ``connections`` work queues."""
    env = {**os.environ, CONCURRENTS_ENV: str(connections)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, __file__, json.dumps(durations)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=CHILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    run(main, "Tutorial 10: awaiting the GPU from asyncio without blocking the event loop")
