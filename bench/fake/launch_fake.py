"""The Python share of a launch, measured without a GPU: rawcuda's launch paths on a driver whose launch is a no-op.

Why? On the H200 the driver's own ``cuLaunchKernelEx`` is most of a launch's host time, so what Python adds is
a small difference of two large numbers, and a change to the launch path could only be judged on the GPU.
Here (bench/fake/fakelaunch.c) every driver call is a few C instructions: each variant's time above the bare
ctypes call *is* the Python side. ``bench/launch_overhead.py`` on the GPU stays the number to trust; this one
says, on any machine, whether a change moved it.

How: every variant is a generated loop of two statements (so that two streams taking turns has the loop shape
of one stream), timed with ``perf_counter_ns``. Each round times every variant right beside a block of the bare
``cuLaunchKernelEx`` call through a fresh ctypes pointer (which goes first is random), in a shuffled order: a
shared machine's load moves in bursts, and two blocks a few milliseconds apart see the same load. A variant's
figure is the median over rounds of its time minus its neighbour's, per launch: the nanoseconds Python adds.

    python bench/fake/launch_fake.py [--rounds 15] [--n 20000] [--only a,b] [--json out.json] [--real]

It builds the fake with the system's C compiler and runs itself again with ``RAWCUDA_LIBCUDA`` pointing at it.
With ``--real`` it runs over the real driver instead (on a GPU host), synchronizing after each timed block:
the anatomy rows (bench/fake/anatomy.py) then say where a real launch's host time goes.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(ROOT / "bench"))

from anatomy import STEPS, Anatomy  # noqa: E402 (after the path it is found on)
from launch_overhead import PTX_WIDE  # noqa: E402 (the kernel of eight pointers the GPU bench uses too)

FAKE_SOURCE = Path(__file__).resolve().parent / "fakelaunch.c"
FAKE_ENV = "RAWCUDA_LIBCUDA"
BLOCK = 256
BIG_N = 1 << 20  # an element count past CPython's small-int cache: `a.size` is then a new int object per call
BUFFERS_WIDE = 8  # the many-buffer case


L3 = "fn.launch(1, 256, c, a, b, n, stream={s})"
L8 = "wide.launch(1, 256, q0, q1, q2, q3, q4, q5, q6, q7, n, stream={s})"
#: name -> the loop's two statements. The reference, bare_ctypes_ex, is the call rawcuda itself makes.
VARIANTS: dict[str, tuple[str, str]] = {
    "bare_ctypes_ex": ("raw_ex(config_ref, f_arg, params, None)",) * 2,
    "launch3": (L3.format(s="s1"),) * 2,
    "launch3_two_streams": (L3.format(s="s1"), L3.format(s="s2")),
    "launch3_none": ("fn.launch(1, 256, c, a, b, n)",) * 2,
    "launch3_none_and_stream": ("fn.launch(1, 256, c, a, b, n)", L3.format(s="s1")),
    # Two argument sets taking turns: a ping-pong chain, or pass 1 and pass 2 of a reduction on one kernel.
    "launch3_ping_pong": (L3.format(s="s1"), "fn.launch(1, 256, a, c, b, n, stream=s1)"),
    "launch3_new_ints": ("fn.launch((big.size + 255) // 256, 256, c, big, big, big.size, stream=s1)",) * 2,
    "launch3_new_float": ("saxpy.launch(1, 256, c, alpha + 0.0, a, n, stream=s1)",) * 2,
    "ops_vector_add": ("ops.vector_add(big, big, big, stream=s1)",) * 2,
    "launch8": (L8.format(s="s1"),) * 2,
    "launch8_two_streams": (L8.format(s="s1"), L8.format(s="s2")),
    "bound3": ("b3()",) * 2,
    "bound3_two_streams": ("b3()", "b3x()"),
    "bound8_two_streams": ("b8()", "b8x()"),
    "launch3_then_export": (L3.format(s="s1"), "c.__cuda_array_interface__"),
    # Async copies of 1 KiB: what rawcuda adds around cuMemcpyHtoDAsync, beside the bare call (no launch).
    "bare_copy_async": ("raw_htod(a_ptr, host_ptr, nbytes, s1_arg)",) * 2,
    "copy_from_async": ("a.copy_from(host, stream=s1)",) * 2,
    "copy_to_async": ("a.copy_to(out, stream=s1)",) * 2,
    # The fast path taken apart (bench/fake/anatomy.py): each step adds one piece; launch3 is the whole.
    **{f"anatomy_{step}": (f"anatomy.{step}(1, 256, c, a, b, n, stream=s1)",) * 2 for step in STEPS},
}
REFERENCE = "bare_ctypes_ex"


def build_fake() -> Path:
    """The fake libcuda, compiled into a temporary directory."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("launch_fake.py needs a C compiler (cc) to build bench/fake/fakelaunch.c")
    out = Path(tempfile.mkdtemp(prefix="rawcuda-fakelaunch-")) / "libfakelaunch.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(FAKE_SOURCE)], check=True)
    return out


def loop(env: dict[str, Any], statements: tuple[str, str], launches: int) -> Any:
    """``for _ in range(launches // 2): A; B`` compiled once, reading the names of ``env``."""
    source = f"def block():\n    for _ in range({launches // 2}):\n        {statements[0]}\n        {statements[1]}\n"
    scope = dict(env)
    exec(source, scope)  # the harness's own templates, never input
    return scope["block"]


def objects() -> dict[str, Any]:
    """Real rawcuda objects over the fake driver, and the bare ctypes pieces of the reference call."""
    import rawcuda
    from rawcuda import DeviceBuffer, Module, Stream, ops
    from rawcuda.checked import cu
    from rawcuda.ffi.types import CUlaunchConfig

    s1, s2 = Stream(), Stream()
    fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    saxpy = Module(rawcuda.kernels.ptx_path("saxpy")).function("saxpy")
    wide = Module(PTX_WIDE).function("wide")
    a, b, c = (DeviceBuffer.zeros(BLOCK) for _ in range(3))
    big = DeviceBuffer.zeros(BIG_N)
    many = [DeviceBuffer.zeros(BLOCK) for _ in range(BUFFERS_WIDE)]
    host, out = np.ones(BLOCK, np.float32), np.empty(BLOCK, np.float32)
    n = 0
    values = [ctypes.c_uint64(c.ptr), ctypes.c_uint64(a.ptr), ctypes.c_uint64(b.ptr), ctypes.c_size_t(n)]
    params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    config = CUlaunchConfig(1, 1, 1, BLOCK, 1, 1, 0, s1.handle, None, 0)
    return {
        "raw_ex": cu.library().handle["cuLaunchKernelEx"],  # a fresh pointer: no argtypes, no errcheck
        "config_ref": ctypes.byref(config),
        "f_arg": ctypes.c_void_p(fn.handle),
        "params": params,
        "keep": (values, config),
        **{"fn": fn, "saxpy": saxpy, "wide": wide, "ops": ops, "s1": s1, "s2": s2},
        **{"a": a, "b": b, "c": c, "big": big, "n": n, "alpha": 2.0},
        **{f"q{i}": q for i, q in enumerate(many)},
        "b3": fn.bind(1, BLOCK, c, a, b, n, stream=s1),
        "b3x": fn.bind(1, BLOCK, c, a, b, n, stream=s2),
        "b8": wide.bind(1, BLOCK, *many, n, stream=s1),
        "b8x": wide.bind(1, BLOCK, *many, n, stream=s2),
        "anatomy": Anatomy(fn, s1, (c, a, b, n)),
        "raw_htod": cu.library().handle["cuMemcpyHtoDAsync_v2"],
        **{"a_ptr": ctypes.c_uint64(a.ptr), "host_ptr": ctypes.c_void_p(host.ctypes.data)},
        **{"nbytes": ctypes.c_size_t(a.nbytes), "s1_arg": ctypes.c_void_p(s1.handle), "host": host, "out": out},
        # Each stream's synchronize also lets go of the host arrays its copies held (the context's does not).
        "sync": lambda: (s1.synchronize(), s2.synchronize(), rawcuda.default_context().synchronize()),
    }


def measure(blocks: dict[str, Any], rounds: int, launches: int, seed: int, sync: Any) -> dict[str, dict[str, float]]:
    """Per variant: median ns per launch above the reference timed beside it, its quartiles, and the ratio.

    ``sync`` runs after every timed block, outside the timing: on a real GPU the queue must not fill up.
    """
    for block in blocks.values():
        block()  # warm-up: configurations validated, arguments packed
        sync()
    reference = blocks[REFERENCE]
    added: dict[str, list[float]] = {name: [] for name in blocks if name != REFERENCE}
    ratios: dict[str, list[float]] = {name: [] for name in added}
    floor: list[float] = []
    rng = random.Random(seed)
    names = list(added)
    clock = time.perf_counter_ns
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            pair = [(name, blocks[name]), (REFERENCE, reference)]
            rng.shuffle(pair)
            spent = {}
            for label, block in pair:
                start = clock()
                block()
                spent[label] = clock() - start
                sync()
            added[name].append((spent[name] - spent[REFERENCE]) / launches)
            ratios[name].append(spent[name] / spent[REFERENCE])
            floor.append(spent[REFERENCE] / launches)
    out = {REFERENCE: {"ns": statistics.median(floor), "added_ns": 0.0, "q1": 0.0, "q3": 0.0, "ratio": 1.0}}
    for name, values in added.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        ratio = statistics.median(ratios[name])
        out[name] = {"added_ns": statistics.median(values), "q1": q1, "q3": q3, "ratio": ratio}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=20000, help="launches per timed block")
    parser.add_argument("--only", default="", help="comma-separated variant names (the reference is always kept)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--real", action="store_true", help="the real driver (a GPU host), not the fake")
    args = parser.parse_args()
    if not args.real and FAKE_ENV not in os.environ:  # run again over the fake: the library is chosen once
        env = {**os.environ, FAKE_ENV: str(build_fake())}
        raise SystemExit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)
    env = objects()
    wanted = {REFERENCE, *args.only.split(",")} if args.only else set(VARIANTS)
    chosen = {name: statements for name, statements in VARIANTS.items() if name in wanted}
    blocks = {name: loop(env, statements, args.n) for name, statements in chosen.items()}
    gc.collect()
    count = lambda: 0  # noqa: E731 (a real driver does not count)
    if not args.real:
        fake = ctypes.CDLL(os.environ[FAKE_ENV])
        fake.fakelaunch_count.restype = ctypes.c_ulonglong
        count = fake.fakelaunch_count
    before = count()
    results = measure(blocks, args.rounds, args.n, args.seed, env["sync"])
    reached = count() - before  # every loop really launched (an export variant launches half)
    driver = "the real driver" if args.real else "bench/fake/fakelaunch.c"
    lines = [
        f"Python {platform.python_version()}, {args.rounds} rounds of {args.n} launches, over {driver}",
        f"{REFERENCE}: {results[REFERENCE]['ns']:.0f} ns per call",
        "",
        "| variant | ns added per launch (median [q1, q3]) | ratio to bare_ctypes_ex |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {name} | {r['added_ns']:.0f} [{r['q1']:.0f}, {r['q3']:.0f}] | {r['ratio']:.2f}x |"
        for name, r in results.items()
        if name != REFERENCE
    ]
    print("\n".join(lines))
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "driver": driver}
        meta |= {"rounds": args.rounds, "launches_per_block": args.n, "launches_reaching_the_driver": reached}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
