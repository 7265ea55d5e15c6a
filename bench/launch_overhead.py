"""Host time per kernel launch: rawcuda against the C floor, bare ctypes and the peers, in one process.

What is measured: the host-side cost of *queuing* one launch of a 4-argument kernel (``vector_add`` with
n = 0, so the GPU side is trivial and never the bottleneck). Each variant queues ``LAUNCHES`` launches
in a tight loop, timed with ``perf_counter_ns``; that is repeated ``ROUNDS`` times, every variant once per
round (synchronizing between rounds, outside the timed region), and the median per-launch time is
reported with the median of its per-round ratio to the first variant.

Why is the C floor measured *here*, from Python? The host's speed drifts by 20-30 % between runs (the
same variant measured 4.5-5.7 us on different days); a C program run at another moment cannot be compared
to within 5 %. bench/c/launch_loop.c is built as a shared library and called once per round.

Variants:
  c_launch_kernel       C: cuLaunchKernel in a loop (11 arguments)           -- the floor
  c_launch_kernel_ex    C: cuLaunchKernelEx with a prebuilt CUlaunchConfig
  bare_ctypes           a fresh ctypes pointer to cuLaunchKernel, no argtypes, every argument prebuilt
  bare_ctypes_argtypes  the same with argtypes declared, Python ints passed (ctypes converts each)
  bare_ctypes_ex        cuLaunchKernelEx, no argtypes: &config, f, params, NULL prebuilt (rawcuda's call)
  table                 rawcuda.checked.cu.cuLaunchKernel (argtypes + errcheck), arguments prebuilt
  rawcuda_launch        Function.launch(grid, block, c, a, b, n): checked arguments, cached packing
  rawcuda_bound         Function.bind(grid, block, c, a, b, n)(): checked once, then only a close check
  cuda_bindings         cuda.bindings.driver.cuLaunchKernel with a prebuilt kernelParams address
  cuda_bindings_values  the same, arguments given as Python values and ctypes types (converted per call)
  cuda_core             cuda.core.launch(stream, LaunchConfig, kernel, *args)
  cupy_rawmodule        cupy.RawModule(...).get_function(...)(grid, block, args)
  python_floor          a Python function with Function.launch's signature that only makes rawcuda's driver call:
                        what any Python launch API of this shape costs at least

Two streams and many buffers (each loop alternates two launches, so it has the shape of the one-stream loop):
  bare_ctypes_ex_two_streams      the bare call on two streams taking turns: the driver's own cost of switching
  bare_ctypes_ex_none_and_stream  the bare call on the legacy stream (handle 0) taking turns with a stream: the
                                  driver's own cost of that (the legacy stream waits on every blocking stream)
  bare_ctypes_ex_ping_pong        the bare call with two kernelParams arrays taking turns: the driver's own cost
                                  of two argument sets
  rawcuda_launch_two_streams      Function.launch, two streams taking turns
  rawcuda_launch_none             Function.launch(..., stream=None): the legacy default stream
  rawcuda_launch_none_and_stream  stream=None taking turns with a stream
  rawcuda_launch_new_ints         a count past 256 computed at every call (a new int object each time)
  rawcuda_launch_ping_pong        two argument sets taking turns on one kernel (c <- a, then a <- c): a chain, or
                                  the two passes of a reduction
  rawcuda_bound_two_streams       two bound launches, one per stream, taking turns
  bare_ctypes_ex_wide, rawcuda_launch_wide, rawcuda_launch_wide_two_streams, rawcuda_bound_wide_two_streams
                                  the same with a kernel of 8 buffers and a count
  ops_vector_add                  rawcuda.ops.vector_add(c, a, b, stream): its checks, then Function.launch

The penalties (``penalties`` in the JSON) are medians of per-round differences, in µs per launch: a two-stream
loop minus its one-stream loop, measured in the same round. The targets are differences of the same kind:
Function.launch minus cuda.core's launch, and the bound launch minus cuda.bindings with prebuilt kernelParams.

Usage: python bench/launch_overhead.py [--out DIR]   (writes launch_overhead.json / .md there)
"""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import DeviceBuffer, Module, Stream
from rawcuda.checked import cu
from rawcuda.ffi.types import CUlaunchConfig

LAUNCHES = 2000
ROUNDS = 21
BLOCK = 256
NEW_INT_COUNT = 300  # past CPython's shared small ints (up to 256): `count + 0` is a new object at every call
WIDE_BUFFERS = 8
LEGACY_HANDLE = 0  # the CUstream rawcuda passes for stream=None: the legacy default stream

#: A kernel of eight pointers and a count that returns at once: the many-buffer rows (JIT-compiled at load).
PTX_WIDE = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry wide(
    .param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3,
    .param .u64 p4, .param .u64 p5, .param .u64 p6, .param .u64 p7, .param .u64 n
)
{
    ret;
}
"""

#: (name, a variant, the variant it is compared with round by round): the penalties, then the targets.
PENALTIES = (
    ("driver: two streams taking turns", "bare_ctypes_ex_two_streams", "bare_ctypes_ex"),
    ("Function.launch: two streams taking turns, 3 buffers", "rawcuda_launch_two_streams", "rawcuda_launch"),
    ("Function.launch: two streams taking turns, 8 buffers", "rawcuda_launch_wide_two_streams", "rawcuda_launch_wide"),
    ("driver: the legacy stream taking turns with a stream", "bare_ctypes_ex_none_and_stream", "bare_ctypes_ex"),
    ("Function.launch: stream=None taking turns with a stream", "rawcuda_launch_none_and_stream", "rawcuda_launch"),
    ("bound launch: two streams taking turns, 3 buffers", "rawcuda_bound_two_streams", "rawcuda_bound"),
    ("bound launch: two streams taking turns, 8 buffers", "rawcuda_bound_wide_two_streams", "rawcuda_bound_wide"),
    ("Function.launch: a new int object for the count at every call", "rawcuda_launch_new_ints", "rawcuda_launch"),
    ("driver: two kernelParams arrays taking turns", "bare_ctypes_ex_ping_pong", "bare_ctypes_ex"),
    ("Function.launch: two argument sets taking turns", "rawcuda_launch_ping_pong", "rawcuda_launch"),
    # The targets, as differences measured round by round: the host's speed drifts between rounds, and a
    # difference of two neighbours in one round does not.
    ("Function.launch minus cuda.core's launch", "rawcuda_launch", "cuda_core"),
    ("bound launch minus cuda.bindings with prebuilt kernelParams", "rawcuda_bound", "cuda_bindings"),
    ("Function.launch minus python_floor (the checks)", "rawcuda_launch", "python_floor"),
    ("bound launch minus the bare ctypes call", "rawcuda_bound", "bare_ctypes_ex"),
)
C_SOURCE = Path(__file__).resolve().parent / "c" / "launch_loop.c"


def c_loop() -> ctypes.CDLL | str:
    """bench/c/launch_loop.c built and loaded (it links the libcuda this process already uses), or why not."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        return "not run: no nvcc to build bench/c/launch_loop.c"
    lib = Path(tempfile.mkdtemp(prefix="rawcuda-bench-")) / "liblaunchloop.so"
    cmd = [nvcc, "-O2", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(C_SOURCE), "-lcuda"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    if build.returncode != 0:
        return f"not run: building the C loop failed: {build.stderr.strip()[-300:]}"
    loop = ctypes.CDLL(str(lib))
    loop.launch_loop.restype = ctypes.c_int
    loop.launch_loop.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_uint, ctypes.c_int, ctypes.c_int]
    return loop


Variant = tuple[Callable[[], object], Callable[[], object]]  # (queue LAUNCHES launches, wait for them)


def repeat(launch: Callable[[], object]) -> Callable[[], None]:
    """LAUNCHES calls of ``launch`` -- the loop a Python user writes, so its cost counts for every Python variant."""

    def block() -> None:
        for _ in range(LAUNCHES):
            launch()

    return block


def turns(first: Callable[[], object], second: Callable[[], object]) -> Callable[[], None]:
    """LAUNCHES calls, ``first`` and ``second`` taking turns: the loop of :func:`repeat`, two calls per pass."""

    def block() -> None:
        for _ in range(LAUNCHES // 2):
            first()
            second()

    return block


def checked_c(rc: int) -> None:
    if rc:
        raise RuntimeError(f"the C launch loop failed with CUresult {rc}")


def measure(variants: dict[str, Variant], samples: dict[str, list[float]] | None = None) -> dict[str, dict[str, float]]:
    """Interleaved rounds: every variant once per round, so machine noise hits all of them alike.

    Returns, per variant, the median microseconds per launch and the median of its per-round ratio to
    the first variant (the floor) -- a ratio taken within one round is steadier than a ratio of medians.
    """
    for block, sync in variants.values():
        block()  # warm-up: LAUNCHES launches, untimed
        sync()
    samples = {} if samples is None else samples  # the caller's, to take per-round differences from
    samples.update({name: [] for name in variants})
    for _ in range(ROUNDS):
        for name, (block, sync) in variants.items():
            start = time.perf_counter_ns()
            block()
            elapsed = time.perf_counter_ns() - start
            sync()
            samples[name].append(elapsed / LAUNCHES / 1000)
    floor = samples[next(iter(variants))]
    return {
        name: {
            "us": statistics.median(values),
            "ratio": statistics.median(v / f for v, f in zip(values, floor, strict=True)),
        }
        for name, values in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    dev = rawcuda.Device(0)
    stream = Stream()
    module = Module(rawcuda.kernels.ptx_path("vector_add"))
    fn = module.function("vector_add")
    a, b, c = (DeviceBuffer.zeros(BLOCK) for _ in range(3))
    n = 0
    values = [ctypes.c_uint64(c.ptr), ctypes.c_uint64(a.ptr), ctypes.c_uint64(b.ptr), ctypes.c_size_t(n)]
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in values])
    sync = stream.synchronize

    handle = cu.library().handle
    raw = handle["cuLaunchKernel"]  # a fresh pointer: no argtypes, no errcheck
    raw_ex = handle["cuLaunchKernelEx"]
    f_arg, s_arg = ctypes.c_void_p(fn.handle), ctypes.c_void_p(stream.handle)
    one, blk, zero = ctypes.c_uint(1), ctypes.c_uint(BLOCK), ctypes.c_uint(0)
    h_fn, h_stream = fn.handle, stream.handle
    typed = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)(
        ctypes.cast(raw, ctypes.c_void_p).value
    )
    addr = ctypes.addressof(params)
    config = CUlaunchConfig(1, 1, 1, BLOCK, 1, 1, 0, h_stream, None, 0)
    config_ref = ctypes.byref(config)
    variants: dict[str, Variant] = {}
    notes: dict[str, str] = {}
    loop = c_loop()
    if isinstance(loop, str):
        notes["c_launch_kernel"] = loop
    else:
        for name, use_ex in (("c_launch_kernel", 0), ("c_launch_kernel_ex", 1)):
            variants[name] = (
                lambda use_ex=use_ex: checked_c(loop.launch_loop(h_fn, h_stream, addr, BLOCK, LAUNCHES, use_ex)),
                sync,
            )
    variants.update(
        {
            "bare_ctypes": (repeat(lambda: raw(f_arg, one, one, one, blk, one, one, zero, s_arg, params, None)), sync),
            "bare_ctypes_argtypes": (repeat(lambda: typed(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, addr, None)), sync),
            "bare_ctypes_ex": (repeat(lambda: raw_ex(config_ref, f_arg, params, None)), sync),
            "table": (repeat(lambda: cu.cuLaunchKernel(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, params, None)), sync),
            "rawcuda_launch": (repeat(lambda: fn.launch(1, BLOCK, c, a, b, n, stream=stream)), sync),
        }
    )
    try:
        from cuda.bindings import driver

        cb_fn, cb_stream = driver.CUfunction(h_fn), driver.CUstream(h_stream)
        cb_values = ((c.ptr, a.ptr, b.ptr, n), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t))
        for name, kernel_params in (("cuda_bindings", addr), ("cuda_bindings_values", cb_values)):
            err = driver.cuLaunchKernel(cb_fn, 1, 1, 1, BLOCK, 1, 1, 0, cb_stream, kernel_params, 0)[0]
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"{name}: {err}")
            variants[name] = (
                repeat(lambda p=kernel_params: driver.cuLaunchKernel(cb_fn, 1, 1, 1, BLOCK, 1, 1, 0, cb_stream, p, 0)),
                sync,
            )
    except Exception as exc:  # a peer that is missing or changed its API is reported, not fatal
        notes["cuda_bindings"] = f"unavailable: {type(exc).__name__}: {exc}"
    try:
        import cupy

        kernel = cupy.RawModule(path=str(rawcuda.kernels.ptx_path("vector_add"))).get_function("vector_add")
        ca, cb_, cc = (cupy.zeros(BLOCK, cupy.float32) for _ in range(3))
        cn = np.uint64(0)
        cupy_stream = cupy.cuda.Stream(non_blocking=False)
        variants["cupy_rawmodule"] = (
            repeat(lambda: kernel((1,), (BLOCK,), (cc, ca, cb_, cn), stream=cupy_stream)),
            cupy_stream.synchronize,
        )
    except Exception as exc:
        notes["cupy_rawmodule"] = f"unavailable: {type(exc).__name__}: {exc}"
    try:
        from cuda.core import Device as CoreDevice
        from cuda.core import LaunchConfig, ObjectCode, launch

        core_device = CoreDevice(0)
        core_device.set_current()  # the primary context: the one rawcuda uses too
        core_stream = core_device.create_stream()
        core_kernel = ObjectCode.from_ptx(rawcuda.kernels.ptx_path("vector_add").read_bytes()).get_kernel("vector_add")
        core_config = LaunchConfig(grid=1, block=BLOCK)
        core_args = (np.uint64(c.ptr), np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(0))
        variants["cuda_core"] = (
            repeat(lambda: launch(core_stream, core_config, core_kernel, *core_args)),
            core_stream.sync,
        )
    except Exception as exc:
        notes["cuda_core"] = f"unavailable: {type(exc).__name__}: {exc}"
    variants["rawcuda_bound"] = (repeat(fn.bind(1, BLOCK, c, a, b, n, stream=stream)), sync)

    def python_floor(grid: object, block: object, *args: object, shared_mem: int = 0, stream: object = None) -> int:
        return raw_ex(config_ref, f_arg, params, None)

    variants["python_floor"] = (repeat(lambda: python_floor(1, BLOCK, c, a, b, n, stream=stream)), sync)
    variants.update(two_stream_variants(fn, stream, (c, a, b), config, raw_ex, f_arg, params))
    samples: dict[str, list[float]] = {}
    results = measure(variants, samples)
    penalties = {
        label: statistics.median(x - y for x, y in zip(samples[two], samples[one], strict=True))
        for label, two, one in PENALTIES
        if two in samples and one in samples
    }

    # Tracing must cost nothing once it is off: trace a few calls, turn it off, and measure again.
    with rawcuda.trace(file=io.StringIO()):
        fn.launch(1, BLOCK, c, a, b, n, stream=stream)
        cu.cuLaunchKernel(h_fn, 1, 1, 1, BLOCK, 1, 1, 0, h_stream, params, None)
    first = next(iter(variants))
    after = measure({name: variants[name] for name in (first, "table", "rawcuda_launch", "rawcuda_bound")})
    results.update({f"{name} (after a trace block)": value for name, value in after.items() if name != first})

    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "launches_per_round": LAUNCHES,
        "rounds": ROUNDS,
    }
    (args.out / "launch_overhead.json").write_text(
        json.dumps({"meta": meta, "results": results, "penalties": penalties, "notes": notes}, indent=2)
    )
    lines = [
        f"# Launch overhead ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']}, "
        f"Python {meta['python']})",
        "",
        f"Host time to queue one 4-argument launch; median of {ROUNDS} interleaved rounds of {LAUNCHES}.",
        "",
        f"| variant | µs per launch | ratio to {first} (median of per-round ratios) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {r['us']:.2f} | {r['ratio']:.2f}x |" for name, r in results.items()]
    lines += [f"| {name} | {why} | |" for name, why in notes.items()]
    lines += ["", "| penalty (median of per-round differences) | µs per launch |", "|---|---:|"]
    lines += [f"| {label} | {value:+.2f} |" for label, value in penalties.items()]
    (args.out / "launch_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for buf in (a, b, c):
        buf.close()


def two_stream_variants(
    fn: Any, stream: Stream, bufs: tuple[DeviceBuffer, ...], config: Any, raw_ex: Any, f_arg: Any, params: Any
) -> dict[str, Variant]:
    """The rows of two streams taking turns, stream=None, new ints and 8 buffers (see the module docstring)."""
    c, a, b = bufs
    other = Stream()
    ctx = fn.context
    both = lambda: (stream.synchronize(), other.synchronize())  # noqa: E731
    config2 = CUlaunchConfig(1, 1, 1, BLOCK, 1, 1, 0, other.handle, None, 0)
    legacy = CUlaunchConfig(1, 1, 1, BLOCK, 1, 1, 0, LEGACY_HANDLE, None, 0)
    ref1, ref2, ref0 = ctypes.byref(config), ctypes.byref(config2), ctypes.byref(legacy)
    swapped = [ctypes.c_uint64(a.ptr), ctypes.c_uint64(c.ptr), ctypes.c_uint64(b.ptr), ctypes.c_size_t(0)]
    params2 = (ctypes.c_void_p * len(swapped))(*[ctypes.addressof(v) for v in swapped])
    count = NEW_INT_COUNT
    big = [DeviceBuffer.zeros(NEW_INT_COUNT) for _ in range(3)]
    wide = Module(PTX_WIDE).function("wide")
    many = [DeviceBuffer.zeros(BLOCK) for _ in range(WIDE_BUFFERS)]
    values = [ctypes.c_uint64(q.ptr) for q in many] + [ctypes.c_uint64(0)]
    wide_params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    wide_f = ctypes.c_void_p(wide.handle)
    keep.extend(
        [config2, legacy, swapped, params2, values, wide_params, big, many, other]
    )  # alive for as long as the variants run
    on = {s: fn.bind(1, BLOCK, c, a, b, 0, stream=s) for s in (stream, other)}
    wide_on = {s: wide.bind(1, BLOCK, *many, 0, stream=s) for s in (stream, other)}
    return {
        "bare_ctypes_ex_two_streams": (
            turns(lambda: raw_ex(ref1, f_arg, params, None), lambda: raw_ex(ref2, f_arg, params, None)),
            both,
        ),
        "bare_ctypes_ex_none_and_stream": (
            turns(lambda: raw_ex(ref0, f_arg, params, None), lambda: raw_ex(ref1, f_arg, params, None)),
            ctx.synchronize,
        ),
        "bare_ctypes_ex_ping_pong": (
            turns(lambda: raw_ex(ref1, f_arg, params, None), lambda: raw_ex(ref1, f_arg, params2, None)),
            stream.synchronize,
        ),
        "rawcuda_launch_two_streams": (
            turns(
                lambda: fn.launch(1, BLOCK, c, a, b, 0, stream=stream),
                lambda: fn.launch(1, BLOCK, c, a, b, 0, stream=other),
            ),
            both,
        ),
        "rawcuda_launch_none": (repeat(lambda: fn.launch(1, BLOCK, c, a, b, 0)), ctx.synchronize),
        "rawcuda_launch_none_and_stream": (
            turns(lambda: fn.launch(1, BLOCK, c, a, b, 0), lambda: fn.launch(1, BLOCK, c, a, b, 0, stream=stream)),
            ctx.synchronize,
        ),
        "rawcuda_launch_new_ints": (
            repeat(lambda: fn.launch(1, BLOCK, big[0], big[1], big[2], count + 0, stream=stream)),
            stream.synchronize,
        ),
        "rawcuda_launch_ping_pong": (
            turns(
                lambda: fn.launch(1, BLOCK, c, a, b, 0, stream=stream),
                lambda: fn.launch(1, BLOCK, a, c, b, 0, stream=stream),
            ),
            stream.synchronize,
        ),
        "rawcuda_bound_two_streams": (turns(on[stream], on[other]), both),
        "bare_ctypes_ex_wide": (repeat(lambda: raw_ex(ref1, wide_f, wide_params, None)), stream.synchronize),
        "rawcuda_launch_wide": (repeat(lambda: wide.launch(1, BLOCK, *many, 0, stream=stream)), stream.synchronize),
        "rawcuda_launch_wide_two_streams": (
            turns(
                lambda: wide.launch(1, BLOCK, *many, 0, stream=stream),
                lambda: wide.launch(1, BLOCK, *many, 0, stream=other),
            ),
            both,
        ),
        "rawcuda_bound_wide": (repeat(wide_on[stream]), stream.synchronize),
        "rawcuda_bound_wide_two_streams": (turns(wide_on[stream], wide_on[other]), both),
        "ops_vector_add": (repeat(lambda: rawcuda.ops.vector_add(c, a, b, stream=stream)), stream.synchronize),
    }


#: Objects the variants' driver arguments point into, kept alive until the process ends.
keep: list[Any] = []


if __name__ == "__main__":
    main()
