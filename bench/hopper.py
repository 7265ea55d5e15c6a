"""Hopper's own features, measured: clusters, a cooperative grid, dependent launches and TMA tile copies.

What tutorials 15 and 16 show step by step, timed here into a result file (every result checked first):

  clusters      a float sum of 2^26 whole numbers: two passes of warp_reduce_sum against cluster_sum (blocks of a
                cluster adding through distributed shared memory) with clusters of 2, 4, 8 and 16, then pass 2
  cooperative   grid_sum (both passes in one kernel, across grid.sync()) on one wave, against the two passes
  dependent     a chain of LINKS add_one launches, plain and programmatic, on a stream and replayed from a graph:
                microseconds per link
  tma           an 8192 x 8192 float matrix copied in 32 x 32 tiles: plain loads, the TMA in, the TMA in and out,
                against the device's own copy (cuMemcpyDtoDAsync), in GB/s

Times are CUDA events around the work (rawcuda.time_ms), the median of REPS runs.

Usage: python bench/hopper.py [--out DIR]   (writes hopper.json / hopper.md there, default bench/results)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import DeviceBuffer, Function, Module, Stream, capture, time_ms
from rawcuda.extras.tensormap import TensorMap
from rawcuda.testing import gpu_unavailable_reason

EXIT_OK, EXIT_NO_GPU = 0, 77  # 77: the status the demo, the tutorials and run_all use for "no usable GPU here"
HOPPER = (9, 0)
BLOCK = 256  # kernels/reduce.cu's block, and the chain's
WARP = 32
FLOAT_BYTES = 4
SHARED = BLOCK // WARP * FLOAT_BYTES  # one float per warp: reduce.cu's dynamic shared memory
BLOCKS_PER_SM = 4  # pass 1's grid: one wave of 256-thread blocks
SUM_N = 1 << 26  # 256 MiB of floats: memory decides
VALUE_RANGE = 8  # whole numbers in [-8, 8]: every partial sum is exact in float32
CLUSTERS = (2, 4, 8, 16)
LINKS = 100
CHAIN_N = 1 << 8  # one block per link: the gap between kernels is all there is
TILE = 32  # kernels/tma_copy.cu's tile
TILE_THREADS = 256
BOTH_THREADS = 32
COPY_N = 8192  # the matrix is COPY_N x COPY_N floats: 256 MiB
REPS = 30
US_PER_MS = 1000
MS_PER_S = 1000
BYTES_PER_GB = 1e9
NAN = np.float32(np.nan)


def module(stem: str) -> Module:
    return Module(rawcuda.kernels.ptx_path(stem))


def median_us(work: Callable[[], object], stream: Stream) -> float:
    return time_ms(work, reps=REPS, stream=stream).median * US_PER_MS


def checked(ok: bool, what: str) -> None:
    """A result is wrong: nothing after it would mean anything."""
    if not ok:
        raise SystemExit(f"bench/hopper.py: {what} came out wrong; no figure written")


def reductions(stream: Stream, sms: int) -> dict[str, Any]:
    """The sum of SUM_N whole numbers: two passes, clusters of each size, and one cooperative kernel."""
    reduce = module("cluster_reduce")
    pass2, cluster_sum = reduce.function("warp_reduce_sum"), reduce.function("cluster_sum")
    grid_sum = module("grid_reduce").function("grid_sum").options(cooperative=True)
    host = np.random.default_rng().integers(-VALUE_RANGE, VALUE_RANGE + 1, SUM_N).astype(np.float32)
    exact = int(host.astype(np.int64).sum())
    data = DeviceBuffer.from_array(host, stream=stream)
    grid = BLOCKS_PER_SM * sms
    wave = grid_sum.max_active_blocks_per_sm(BLOCK, SHARED) * sms  # the most blocks resident at once
    partials, total = DeviceBuffer.empty(max(grid, wave)), DeviceBuffer.empty(1)  # one partial sum per block

    def summed(first: Function, blocks: int, sums: int) -> Callable[[], None]:
        def work() -> None:
            first.launch(blocks, BLOCK, partials, data, SUM_N, shared_mem=SHARED, stream=stream)
            pass2.launch(1, BLOCK, total, partials, sums, shared_mem=SHARED, stream=stream)

        return work

    works = {"two passes": summed(pass2, grid, grid)}
    for size in CLUSTERS:
        blocks = grid // size * size
        works[f"cluster of {size} + pass 2"] = summed(cluster_sum.options(cluster=size), blocks, blocks // size)
    works[f"cooperative grid_sum, {wave} blocks"] = lambda: grid_sum.launch(
        wave, BLOCK, total, partials, data, SUM_N, shared_mem=SHARED, stream=stream
    )
    rows = {}
    for label, work in works.items():
        total.fill(NAN, stream=stream)
        work()
        checked(total.to_array(stream)[0] == exact, label)
        rows[label] = median_us(work, stream)
    return {"n": SUM_N, "exact": exact, "us": rows}


def chains(stream: Stream) -> dict[str, float]:
    """Microseconds per link of a chain of LINKS add_one launches, plain and programmatic, streamed and replayed."""
    add_one = module("dependent_launch").function("add_one")
    host = np.random.default_rng().integers(-VALUE_RANGE, VALUE_RANGE + 1, CHAIN_N).astype(np.float32)
    ping, pong = DeviceBuffer.from_array(host, stream=stream), DeviceBuffer.empty(CHAIN_N)
    grid = -(-CHAIN_N // BLOCK)
    rows = {}
    for label, fn in (("plain", add_one), ("PDL", add_one.options(programmatic=True))):

        def chain(fn: Function = fn) -> None:
            for link in range(LINKS):
                src, dst = (ping, pong) if link % 2 == 0 else (pong, ping)
                fn.launch(grid, BLOCK, dst, src, CHAIN_N, stream=stream)

        with capture(stream) as graph:
            chain()
        replay = graph.instantiate()
        for where, work in (("stream", chain), ("graph", lambda replay=replay: replay.launch(stream))):
            ping.copy_from(host, stream=stream)
            work()
            checked(np.array_equal(ping.to_array(stream), host + LINKS), f"{label} chain on a {where}")
            rows[f"{label}, {where}"] = median_us(work, stream) / LINKS
    return rows


def tile_copies(stream: Stream) -> dict[str, float]:
    """GB/s of each tile copy of a COPY_N x COPY_N float matrix (a read and a write of every byte)."""
    copies = module("tma_copy")
    host = np.random.default_rng().standard_normal((COPY_N, COPY_N)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host, stream=stream), DeviceBuffer.empty((COPY_N, COPY_N))
    src_map, out_map = TensorMap(src, box=(TILE, TILE)), TensorMap(out, box=(TILE, TILE))
    grid, n = (-(-COPY_N // TILE), -(-COPY_N // TILE)), COPY_N
    plain, tma_in, both = (copies.function(k) for k in ("tile_copy_plain", "tma_tile_copy", "tma_tile_copy_both"))
    works = {
        "plain loads and stores": lambda: plain.launch(grid, TILE_THREADS, src, out, n, n, stream=stream),
        "TMA in, plain stores": lambda: tma_in.launch(grid, TILE_THREADS, src_map.descriptor, out, n, n, stream=stream),
        "TMA in and out": lambda: both.launch(
            grid, BOTH_THREADS, src_map.descriptor, out_map.descriptor, stream=stream
        ),
        "cuMemcpyDtoDAsync (the ceiling)": lambda: out.copy_from(src, stream=stream),
    }
    rows = {}
    for label, work in works.items():
        out.fill(NAN, stream=stream)
        work()
        checked(np.array_equal(out.to_array(stream), host), label)
        rows[label] = 2 * host.nbytes / (median_us(work, stream) / US_PER_MS / MS_PER_S) / BYTES_PER_GB
    return rows


def markdown(meta: dict[str, Any], results: dict[str, Any]) -> str:
    sums, links, copies = results["reductions"], results["chains"], results["tile_copies"]
    two = sums["us"]["two passes"]
    ceiling = copies["cuMemcpyDtoDAsync (the ceiling)"]
    lines = [
        f"# Hopper features ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']})",
        "",
        f"Medians of {REPS} event-timed runs; every result checked before it was timed.",
        "",
        f"| sum of 2^{SUM_N.bit_length() - 1} floats | µs | against two passes |",
        "|---|---:|---:|",
        *(f"| {label} | {us:.1f} | {us / two:.2f}x |" for label, us in sums["us"].items()),
        "",
        f"| chain of {LINKS} add_one launches | µs per link |",
        "|---|---:|",
        *(f"| {label} | {us:.2f} |" for label, us in links.items()),
        "",
        f"| {COPY_N} x {COPY_N} float copy in {TILE} x {TILE} tiles | GB/s | of the ceiling |",
        "|---|---:|---:|",
        *(f"| {label} | {rate:.0f} | {rate / ceiling:.0%} |" for label, rate in copies.items()),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"skipped: no usable GPU here ({reason})")
        return EXIT_NO_GPU
    ctx = rawcuda.default_context()
    device = ctx.device
    if device.compute_capability < HOPPER:
        raise SystemExit(f"bench/hopper.py needs compute capability 9.0; {device.name} is {device.compute_capability}")
    stream = Stream()
    results = {
        "reductions": reductions(stream, device.multiprocessor_count),
        "chains": chains(stream),
        "tile_copies": tile_copies(stream),
    }
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": device.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "reps": REPS,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hopper.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    text = markdown(meta, results)
    (args.out / "hopper.md").write_text(text)
    print(text)
    return EXIT_OK


if __name__ == "__main__":
    from rawcuda.tools import cli

    cli.run(main)
