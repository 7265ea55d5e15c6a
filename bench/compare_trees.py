"""The launch path of two checkouts, measured alternately on one machine: did a change move it?

A change that should not touch the launch path (a restructure, a docstring pass) must leave it within noise.
Host speed drifts by 20-30 % between runs, so two separate bench runs cannot show a 2 % change. Here each
checkout is measured in its own child process, the two taking turns ``--pairs`` times, and each child times
rawcuda against a bare ctypes ``cuLaunchKernelEx`` in the same process: the ratio is what is compared.

Variants, each ``LAUNCHES`` launches of ``vector_add`` with n = 0 (so the GPU side is trivial):
  bare_ctypes_ex   cuLaunchKernelEx through a fresh ctypes pointer, every argument prebuilt (the floor)
  rawcuda_launch   Function.launch(grid, block, c, a, b, n, stream=s): checked, cached packing
  rawcuda_bound    Function.bind(...)(): checked once

Only public names are used (``rawcuda.Module``, ``DeviceBuffer``, ``Stream``, ``kernels.ptx_path``), so any
checkout since they existed can be compared.

Usage: python bench/compare_trees.py OLD_CHECKOUT NEW_CHECKOUT [--pairs 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PAIRS = 8  # old/new turns; each child takes about a second
CHILD = r"""
import ctypes, json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import rawcuda
from rawcuda import DeviceBuffer, Module, Stream
from rawcuda.checked import cu
from rawcuda.ffi.types import CUlaunchConfig

LAUNCHES, ROUNDS, BLOCK = 2000, 15, 256
stream = Stream()
fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
a, b, c = (DeviceBuffer.zeros(BLOCK) for _ in range(3))
values = [ctypes.c_uint64(c.ptr), ctypes.c_uint64(a.ptr), ctypes.c_uint64(b.ptr), ctypes.c_size_t(0)]
params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in values])
raw_ex = cu.library().handle["cuLaunchKernelEx"]
config = CUlaunchConfig(1, 1, 1, BLOCK, 1, 1, 0, stream.handle, None, 0)
config_ref, f_arg = ctypes.byref(config), ctypes.c_void_p(fn.handle)
bound = fn.bind(1, BLOCK, c, a, b, 0, stream=stream)

def bare():
    for _ in range(LAUNCHES):
        raw_ex(config_ref, f_arg, params, None)

def launch():
    for _ in range(LAUNCHES):
        fn.launch(1, BLOCK, c, a, b, 0, stream=stream)

def bind():
    for _ in range(LAUNCHES):
        bound()

variants = {"bare_ctypes_ex": bare, "rawcuda_launch": launch, "rawcuda_bound": bind}
for block in variants.values():
    block()
stream.synchronize()
samples = {name: [] for name in variants}
for _ in range(ROUNDS):
    for name, block in variants.items():
        start = time.perf_counter_ns()
        block()
        samples[name].append((time.perf_counter_ns() - start) / LAUNCHES / 1000)
        stream.synchronize()
floor = samples["bare_ctypes_ex"]
print(json.dumps({name: {"us": statistics.median(v), "ratio": statistics.median(x / f for x, f in zip(v, floor))}
                  for name, v in samples.items()}))
"""


def run_child(tree: Path) -> dict[str, dict[str, float]]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tree)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the child for {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"old": [], "new": []}
    for turn in range(args.pairs):
        order = ("old", "new") if turn % 2 == 0 else ("new", "old")  # neither always goes first
        for label in order:
            runs[label].append(run_child(trees[label]))
    variants = list(runs["old"][0])
    summary = {
        label: {
            name: {
                "us": statistics.median(r[name]["us"] for r in results),
                "ratio": statistics.median(r[name]["ratio"] for r in results),
                "ratio_min": min(r[name]["ratio"] for r in results),
                "ratio_max": max(r[name]["ratio"] for r in results),
            }
            for name in variants
        }
        for label, results in runs.items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "pairs": args.pairs, "trees": {k: str(v) for k, v in trees.items()}}
    (args.out / "compare_trees.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1))
    lines = [
        f"# Launch path, two checkouts taking turns ({args.pairs} pairs, {meta['date']})",
        "",
        "Per child process: the median of 15 interleaved rounds of 2000 launches; here the median over the",
        "children, and the ratio to bare ctypes cuLaunchKernelEx measured in the same child (min..max over children).",
        "",
        "| variant | old us | old ratio | new us | new ratio |",
        "|---|---|---|---|---|",
    ]
    for name in variants:
        o, n = summary["old"][name], summary["new"][name]
        lines.append(
            f"| {name} | {o['us']:.2f} | {o['ratio']:.3f} ({o['ratio_min']:.3f}..{o['ratio_max']:.3f}) "
            f"| {n['us']:.2f} | {n['ratio']:.3f} ({n['ratio_min']:.3f}..{n['ratio_max']:.3f}) |"
        )
    (args.out / "compare_trees.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
