"""CUDA graphs against stream launches: the seed's "15-25% lower latency" claim, and the replay cost per kernel.

(a) The seed's claim. "In a typical transformer inference pipeline (10 matmul kernels + 5 element-wise
    operations) the graph approach lowers end-to-end latency by 15%-25%." The pipeline here is exactly
    that: 5 layers of ``act(x @ Wa) @ Wb`` (ops.matmul; ops.bias_relu and ops.gelu alternating) on
    TOKENS rows, at several hidden sizes. One sample is one forward pass, from the first launch call to the
    stream being idle again (host ``perf_counter``: the end-to-end latency a caller sees) and between two
    CUDA events around it (GPU time: how long the GPU timeline was occupied). Three ways to run it,
    interleaved round by round so machine noise hits all alike:

      ops    ``ops.matmul(...)`` ... : rawcuda's checked calls (shape checks + Function.launch), 15 launches
      bound  the same 15 launches as ``Function.bind`` objects: close to bare cuLaunchKernel cost -- the
             setting of the seed's Rust code, where launching costs what the driver costs
      graph  the same 15 launches captured once; one ``exec.launch`` per forward pass

    Every variant's 15 outputs are checked equal, bit for bit, before timing.

(b) Replay cost per kernel. A graph of KERNELS_B launches of a kernel with nothing to do (vector_add, n = 0)
    is replayed; GPU time per kernel = event time of one replay / KERNELS_B (reference on this project's
    H200: 0.88 us). Next to it: the same launches queued one by one (host time per launch, and the GPU
    timeline they produce), and replays queued back to back (the steady-state GPU cost per kernel).

Usage: python bench/graphs.py [--out DIR] [--sizes 64 256 1024 4096] [--tokens 128] [--rounds 101]
       (writes graphs.json / graphs.md to DIR, default bench/results)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rawcuda
from rawcuda import BoundLaunch, DeviceBuffer, Event, Module, Stream, capture, ops
from rawcuda.graphs.graph import Graph, GraphExec

HIDDEN_SIZES = (64, 256, 1024, 4096)
TOKENS = 128  # rows of activations (a batch of tokens)
LAYERS = 5  # matmul -> activation -> matmul per layer: 10 matmuls + 5 element-wise kernels
KERNELS = 3 * LAYERS
ROUNDS = 101  # samples per variant (odd: the median is a sample)
WARMUP = 10
CLAIM = (15.0, 25.0)  # the seed's "15%-25% lower end-to-end latency"
KERNELS_B = 100
REPLAYS_B = 20  # replays queued back to back for the steady-state figure
REFERENCE_US_PER_KERNEL = 0.88  # replayed graph of 100 launches, on this project's H200
BLOCK = 256
US_PER_MS = 1000
US_PER_S = 1_000_000


class Pipeline:
    """The seed's step at one hidden size: weights, biases and one output buffer per kernel."""

    def __init__(self, rng: np.random.Generator, tokens: int, hidden: int) -> None:
        scale = 1 / np.sqrt(hidden)  # keeps activations of unit size through 10 matmuls
        self.x = DeviceBuffer.from_array(rng.standard_normal((tokens, hidden), dtype=np.float32))
        self.w = [
            DeviceBuffer.from_array((rng.standard_normal((hidden, hidden)) * scale).astype(np.float32))
            for _ in range(2 * LAYERS)
        ]
        self.b = [DeviceBuffer.from_array(rng.standard_normal(hidden).astype(np.float32)) for _ in range(LAYERS)]
        self.outs = [DeviceBuffer.empty((tokens, hidden)) for _ in range(KERNELS)]

    def run(self, stream: Stream) -> None:
        h, k = self.x, 0
        for layer in range(LAYERS):
            t, u, nxt = self.outs[k : k + 3]
            ops.matmul(t, h, self.w[2 * layer], stream=stream)
            if layer % 2 == 0:
                ops.bias_relu(u, t, self.b[layer], stream=stream)
            else:
                ops.gelu(u, t, stream=stream)
            ops.matmul(nxt, u, self.w[2 * layer + 1], stream=stream)
            h, k = nxt, k + 3

    def outputs(self, stream: Stream) -> list[np.ndarray]:
        return [out.to_array(stream=stream) for out in self.outs]

    def poison(self, stream: Stream) -> None:
        for out in self.outs:
            out.fill(np.float32(np.nan), stream=stream)

    def close(self) -> None:
        for buf in (self.x, *self.w, *self.b, *self.outs):
            buf.close()


def bound_from_graph(graph: Graph, stream: Stream) -> list[BoundLaunch]:
    """The graph's own kernel launches, one BoundLaunch each: identical functions, grids and arguments."""
    launches = []
    for node in graph.kernel_nodes():
        fn = node.function
        if fn is None:
            raise RuntimeError(f"{node!r}: no rawcuda Function found for a captured kernel")
        launches.append(fn.bind(node.grid, node.block, *node.raw_args(), shared_mem=node.shared_mem, stream=stream))
    return launches


def sample(work: Callable[[], object], stream: Stream, start: Event, end: Event) -> tuple[float, float]:
    """One run of ``work``: (host microseconds from the first call to an idle stream, GPU microseconds)."""
    t0 = time.perf_counter()
    start.record(stream)
    work()
    end.record(stream)
    stream.synchronize()
    wall = (time.perf_counter() - t0) * US_PER_S
    return wall, start.elapsed_ms(end) * US_PER_MS


def interleaved(variants: dict[str, Callable[[], object]], stream: Stream, rounds: int) -> dict[str, dict[str, float]]:
    start, end = Event(), Event()
    for work in variants.values():
        for _ in range(WARMUP):
            work()
    stream.synchronize()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, work in variants.items():
            samples[name].append(sample(work, stream, start, end))
    start.close()
    end.close()
    return {
        name: {"wall_us": statistics.median(w for w, _ in values), "gpu_us": statistics.median(g for _, g in values)}
        for name, values in samples.items()
    }


def reduction(base: float, graph: float) -> float:
    """How much lower the graph's figure is, in percent of the base figure."""
    return (1 - graph / base) * 100


def verdict(percent: float) -> str:
    low, high = CLAIM
    if percent < low:
        return "below the claim"
    return "within the claim" if percent <= high else "above the claim"


def pipeline_case(rng: np.random.Generator, stream: Stream, tokens: int, hidden: int, rounds: int) -> dict[str, object]:
    p = Pipeline(rng, tokens, hidden)
    p.run(stream)  # warm-up outside the capture: loads the kernels
    with capture(stream) as graph:
        p.run(stream)
    exec_ = graph.instantiate()
    exec_.upload(stream)
    bound = bound_from_graph(graph, stream)

    def run_bound() -> None:
        for launch in bound:
            launch()

    variants: dict[str, Callable[[], object]] = {
        "ops": lambda: p.run(stream),
        "bound": run_bound,
        "graph": lambda: exec_.launch(stream),
    }
    outputs = {}
    for name, work in variants.items():
        p.poison(stream)
        work()
        outputs[name] = p.outputs(stream)
    verified = all(not np.isnan(o).any() for o in outputs["ops"]) and all(
        np.array_equal(a, b) for name in ("bound", "graph") for a, b in zip(outputs["ops"], outputs[name], strict=True)
    )
    if not verified:
        raise RuntimeError(f"hidden {hidden}: the three variants disagree; not timing a wrong computation")
    timings = interleaved(variants, stream, rounds)
    row: dict[str, object] = {
        "tokens": tokens,
        "hidden": hidden,
        "verified": verified,
        **{f"{name}_{metric}": value for name, figures in timings.items() for metric, value in figures.items()},
    }
    for base in ("ops", "bound"):
        for metric in ("wall_us", "gpu_us"):
            row[f"graph_vs_{base}_{metric}_pct"] = reduction(timings[base][metric], timings["graph"][metric])
    exec_.close()
    graph.close()
    p.close()
    return row


def tiny_case(stream: Stream, rounds: int) -> dict[str, float]:
    fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    a, b, c = (DeviceBuffer.zeros(BLOCK) for _ in range(3))
    launch = fn.bind(1, BLOCK, c, a, b, 0, stream=stream)  # n = 0: the kernel starts and returns
    launch()
    stream.synchronize()
    with capture(stream) as graph:
        for _ in range(KERNELS_B):
            launch()
    exec_: GraphExec = graph.instantiate()
    exec_.upload(stream)
    if len(graph.kernel_nodes()) != KERNELS_B:
        raise RuntimeError(f"expected a graph of {KERNELS_B} kernel nodes")

    def one_by_one() -> None:
        for _ in range(KERNELS_B):
            launch()

    def replays() -> None:
        for _ in range(REPLAYS_B):
            exec_.launch(stream)

    host_launch, host_replay = [], []
    for _ in range(rounds):  # host time to *queue* (no synchronization inside the timed region)
        t0 = time.perf_counter()
        one_by_one()
        host_launch.append((time.perf_counter() - t0) * US_PER_S / KERNELS_B)
        stream.synchronize()
        t0 = time.perf_counter()
        exec_.launch(stream)
        host_replay.append((time.perf_counter() - t0) * US_PER_S)
        stream.synchronize()
    timed = interleaved(
        {"stream": one_by_one, "graph": lambda: exec_.launch(stream), "graph_back_to_back": replays}, stream, rounds
    )
    result = {
        "kernels": KERNELS_B,
        "graph_gpu_us_per_kernel": timed["graph"]["gpu_us"] / KERNELS_B,
        "graph_wall_us_per_kernel": timed["graph"]["wall_us"] / KERNELS_B,
        "graph_back_to_back_gpu_us_per_kernel": timed["graph_back_to_back"]["gpu_us"] / (KERNELS_B * REPLAYS_B),
        "graph_host_us_per_replay_call": statistics.median(host_replay),
        "stream_gpu_us_per_kernel": timed["stream"]["gpu_us"] / KERNELS_B,
        "stream_wall_us_per_kernel": timed["stream"]["wall_us"] / KERNELS_B,
        "stream_host_us_per_launch_call": statistics.median(host_launch),
        "reference_graph_us_per_kernel": REFERENCE_US_PER_KERNEL,
    }
    exec_.close()
    graph.close()
    for buf in (a, b, c):
        buf.close()
    return result


def markdown(meta: dict[str, object], rows: list[dict[str, object]], tiny: dict[str, float]) -> str:
    lines = [
        f"# CUDA graphs vs stream launches ({meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']})",
        "",
        f"## (a) The seed's pipeline: {2 * LAYERS} matmul + {LAYERS} element-wise kernels, {meta['tokens']} tokens",
        "",
        f"Median of {meta['rounds']} interleaved samples; one sample = one forward pass. *wall* = host clock "
        "from the first launch call to an idle stream (end-to-end latency); *GPU* = CUDA events around the pass. "
        "Outputs of all three variants verified bit-identical first.",
        "",
        "| hidden | ops wall µs | bound wall µs | graph wall µs | graph vs ops | graph vs bound | "
        "ops GPU µs | bound GPU µs | graph GPU µs | seed's 15–25% (vs bound, wall) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['hidden']} | {r['ops_wall_us']:.1f} | {r['bound_wall_us']:.1f} | {r['graph_wall_us']:.1f} | "
            f"{r['graph_vs_ops_wall_us_pct']:.0f}% | {r['graph_vs_bound_wall_us_pct']:.0f}% | {r['ops_gpu_us']:.1f} | "
            f"{r['bound_gpu_us']:.1f} | {r['graph_gpu_us']:.1f} | {verdict(float(r['graph_vs_bound_wall_us_pct']))} |"
        )
    lines += [
        "",
        "*graph vs X*: how much lower the graph's end-to-end latency is. *ops* includes rawcuda's per-call "
        "checks in Python; *bound* launches cost about what a bare cuLaunchKernel costs (the seed's setting).",
        "",
        f"## (b) Replay cost per kernel: a graph of {tiny['kernels']} launches of vector_add with n = 0",
        "",
        "| measure | µs per kernel |",
        "|---|---:|",
        f"| graph, one replay, GPU time (reference {tiny['reference_graph_us_per_kernel']:.2f}) | "
        f"{tiny['graph_gpu_us_per_kernel']:.3f} |",
        f"| graph, one replay, wall clock incl. launch + sync | {tiny['graph_wall_us_per_kernel']:.3f} |",
        f"| graph, {REPLAYS_B} replays back to back, GPU time | {tiny['graph_back_to_back_gpu_us_per_kernel']:.3f} |",
        f"| stream launches one by one, GPU time | {tiny['stream_gpu_us_per_kernel']:.3f} |",
        f"| stream launches one by one, wall clock incl. sync | {tiny['stream_wall_us_per_kernel']:.3f} |",
        f"| stream launches: host time per launch call | {tiny['stream_host_us_per_launch_call']:.3f} |",
        "",
        f"Host time of one cuGraphLaunch call (all {tiny['kernels']} kernels): "
        f"{tiny['graph_host_us_per_replay_call']:.2f} µs.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(HIDDEN_SIZES))
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = rawcuda.Device(0)
    rng = np.random.default_rng()
    stream = Stream()
    rows = []
    for hidden in args.sizes:
        row = pipeline_case(rng, stream, args.tokens, hidden, args.rounds)
        rows.append(row)
        print(
            f"hidden {hidden}: ops {row['ops_wall_us']:.1f} us, bound {row['bound_wall_us']:.1f} us, "
            f"graph {row['graph_wall_us']:.1f} us per forward pass (wall)",
            flush=True,
        )
    tiny = tiny_case(stream, args.rounds)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": dev.name,
        "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tokens": args.tokens,
        "rounds": args.rounds,
        "claim_pct": CLAIM,
    }
    (args.out / "graphs.json").write_text(json.dumps({"meta": meta, "pipeline": rows, "tiny": tiny}, indent=2))
    text = markdown(meta, rows, tiny)
    (args.out / "graphs.md").write_text(text)
    print(text)
    stream.close()


if __name__ == "__main__":
    main()
