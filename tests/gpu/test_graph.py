"""CUDA graphs on a real GPU: replay, kernel nodes, parameter updates, explicit nodes, and lifetimes.

rawcuda.graphs.graph with the two files behind it (graphexec.py, kernelnode.py); the graphs are captured or built
node by node. What capture records and forbids is in test_streamcapture.py.

Every test uses fresh random data, poisons every output with NaN before the work that should fill it, and
compares every element. A graph replay must give *bit for bit* what the same launches give on a stream
(same kernels, same inputs, deterministic kernels); the pipeline is also checked against a float64 numpy
reference with a tolerance 100x above the float32 error of a 10-matmul chain.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, GraphError, Module, Stream, ops
from rawcuda.checked.errors import ClosedError
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.ffi.constants import StreamCaptureStatus
from rawcuda.graphs.graph import Graph, GraphExec, KernelNode
from rawcuda.graphs.streamcapture import capture, capture_status
from rawcuda.ops import sgemm
from tests.helpers import grid_for

pytestmark = pytest.mark.gpu

WARM_UP_KERNELS = True  # conftest's vector_add is launched once before the tests capture it
NAN = np.float32(np.nan)
BLOCK = ops.BLOCK
N = 100_003  # not a multiple of any block size
TOKENS, HIDDEN = 96, 160  # not multiples of matmul's 128-wide tile: the edges are exercised
MATMUL = ops.MATMUL_KERNEL  # the kernel ops.matmul runs here: whole buffers, N and K multiples of 4
LAYERS = 5  # each layer: matmul, activation, matmul -> 10 matmuls + 5 element-wise kernels
KERNELS = 3 * LAYERS
TOLERANCE = 1e-4  # of max |reference|; a float32 chain of 10 matmuls is off by about 1e-6 of it
REPLAYS = 37


def poison(stream: Stream, *buffers: DeviceBuffer) -> None:
    for buf in buffers:
        buf.fill(NAN, stream=stream)


def gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class Pipeline:
    """The seed's transformer-like step: per layer ``h = act(x @ Wa) @ Wb`` -- 10 matmuls, 5 activations."""

    def __init__(self, rng: np.random.Generator, tokens: int = TOKENS, hidden: int = HIDDEN) -> None:
        self.rng = rng
        self.shape = (tokens, hidden)
        self.x_host = rng.standard_normal(self.shape, dtype=np.float32)
        self.w_host = [self.weight() for _ in range(2 * LAYERS)]
        self.b_host = [rng.standard_normal(hidden).astype(np.float32) for _ in range(LAYERS)]
        self.x = DeviceBuffer.from_array(self.x_host)
        self.w = [DeviceBuffer.from_array(w) for w in self.w_host]
        self.b = [DeviceBuffer.from_array(b) for b in self.b_host]
        self.outs = [DeviceBuffer.empty(self.shape) for _ in range(KERNELS)]  # one per kernel: all checkable

    def weight(self) -> np.ndarray:
        hidden = self.shape[1]
        return (self.rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)

    def run(self, stream: Stream, w: list[DeviceBuffer] | None = None) -> None:
        w = self.w if w is None else w
        h, k = self.x, 0
        for layer in range(LAYERS):
            t, u, nxt = self.outs[k], self.outs[k + 1], self.outs[k + 2]
            ops.matmul(t, h, w[2 * layer], stream=stream)
            if layer % 2 == 0:
                ops.bias_relu(u, t, self.b[layer], stream=stream)
            else:
                ops.gelu(u, t, stream=stream)
            ops.matmul(nxt, u, w[2 * layer + 1], stream=stream)
            h, k = nxt, k + 3

    def reference(self, x: np.ndarray, w: list[np.ndarray] | None = None) -> np.ndarray:
        w = self.w_host if w is None else w
        h = x.astype(np.float64)
        for layer in range(LAYERS):
            t = h @ w[2 * layer].astype(np.float64)
            u = np.maximum(t + self.b_host[layer], 0.0) if layer % 2 == 0 else gelu64(t)
            h = u @ w[2 * layer + 1].astype(np.float64)
        return h

    def results(self, stream: Stream) -> list[np.ndarray]:
        return [out.to_array(stream=stream) for out in self.outs]

    def close(self) -> None:
        for buf in (self.x, *self.w, *self.b, *self.outs):
            buf.close()


def assert_close_to(got: np.ndarray, expected: np.ndarray) -> None:
    assert not np.isnan(got).any()
    assert np.max(np.abs(got - expected)) <= TOLERANCE * np.max(np.abs(expected))


def assert_all_equal(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert not np.isnan(g).any(), f"output {i} was never written"
        np.testing.assert_array_equal(g, e, err_msg=f"output {i}")


# --- capture and replay ---------------------------------------------------------------------------------
def test_replay_gives_exactly_what_stream_launches_give(rng: np.random.Generator, stream: Stream) -> None:
    p = Pipeline(rng)
    poison(stream, *p.outs)
    p.run(stream)
    launched = p.results(stream)
    assert_close_to(launched[-1], p.reference(p.x_host))

    poison(stream, *p.outs)
    stream.synchronize()
    with capture(stream) as graph:
        p.run(stream)
    assert all(np.isnan(r).all() for r in p.results(stream)), "capture must record the work, not run it"
    assert capture_status(stream) == StreamCaptureStatus.NONE

    exec_ = graph.instantiate()
    exec_.launch(stream)
    assert_all_equal(p.results(stream), launched)

    # The graph holds addresses: new data in the same input buffer is processed by the same graph.
    fresh = rng.standard_normal(p.shape, dtype=np.float32)
    p.x.copy_from(fresh, stream=stream)
    poison(stream, *p.outs)
    exec_.launch(stream)
    replayed = p.results(stream)
    poison(stream, *p.outs)
    p.run(stream)
    assert_all_equal(replayed, p.results(stream))
    assert_close_to(replayed[-1], p.reference(fresh))
    exec_.close()
    graph.close()
    p.close()


def test_captured_kernel_nodes_in_launch_order(rng: np.random.Generator, stream: Stream) -> None:
    p = Pipeline(rng)
    p.run(stream)  # warm-up outside the capture (loads the kernels)
    with capture(stream) as graph:
        p.run(stream)
    nodes = graph.kernel_nodes()
    expected = []
    for layer in range(LAYERS):
        expected += [MATMUL, "bias_relu" if layer % 2 == 0 else "gelu", MATMUL]
    assert [n.name for n in nodes] == expected
    assert all(isinstance(n, KernelNode) and n.function is not None for n in nodes)
    assert nodes[0].raw_args() == (p.outs[0].ptr, p.x.ptr, p.w[0].ptr, TOKENS, HIDDEN, HIDDEN)
    assert nodes[1].raw_args() == (p.outs[1].ptr, p.outs[0].ptr, p.b[0].ptr, TOKENS, HIDDEN)
    assert nodes[0].block == (*sgemm.KERNELS[MATMUL].block, 1) and graph.kernel_nodes()[0] is nodes[0]
    graph.close()
    p.close()


def test_updating_the_third_kernel_changes_the_result(rng: np.random.Generator, stream: Stream) -> None:
    p = Pipeline(rng)
    p.run(stream)  # warm-up outside the capture (loads the kernels)
    with capture(stream) as graph:
        p.run(stream)
    exec_ = graph.instantiate()
    third = exec_.kernel_nodes()[2]  # matmul(outs[2], outs[1], W1)
    assert third.name == MATMUL and third.raw_args()[2] == p.w[1].ptr
    w1_new = p.weight()
    d_w1_new = DeviceBuffer.from_array(w1_new)
    exec_.set_kernel_args(third, p.outs[2], p.outs[1], d_w1_new, TOKENS, HIDDEN, HIDDEN)
    assert third.raw_args()[2] == p.w[1].ptr, "the Graph's own node is unchanged; only the executable is"

    poison(stream, *p.outs)
    exec_.launch(stream)
    updated = p.results(stream)
    swapped = [*p.w]
    swapped[1] = d_w1_new
    poison(stream, *p.outs)
    p.run(stream, swapped)
    assert_all_equal(updated, p.results(stream))
    weights = [*p.w_host]
    weights[1] = w1_new
    assert_close_to(updated[-1], p.reference(p.x_host, weights))
    assert not np.allclose(updated[-1], p.reference(p.x_host), atol=TOLERANCE), "the update must change the result"
    with pytest.raises(ArgumentError):
        exec_.set_kernel_args(third, p.outs[2], p.outs[1])  # too few: checked like a launch
    exec_.close()
    d_w1_new.close()
    p.close()


def test_set_kernel_args_on_a_simple_graph(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    a, b, d = (rng.standard_normal(N, dtype=np.float32) for _ in range(3))
    da, db, dd = (DeviceBuffer.from_array(v) for v in (a, b, d))
    dc = DeviceBuffer.empty(N)
    with capture(stream) as graph:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
    exec_ = graph.instantiate()
    poison(stream, dc)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + b)
    (node,) = graph.kernel_nodes()
    exec_.set_kernel_args(node, dc, da, dd, N)
    poison(stream, dc)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + d)
    for buf in (da, db, dd, dc):
        buf.close()


def test_every_replay_runs_once(stream: Stream) -> None:
    saxpy = ops.kernel("saxpy", "saxpy", rawcuda.default_context())
    saxpy.launch(1, BLOCK, 0, 0.0, 0, 0)  # warm-up outside the capture (n = 0: does nothing)
    ones = DeviceBuffer.from_array(np.ones(N, np.float32))
    y = DeviceBuffer.zeros(N, np.float32)
    with capture(stream) as graph:
        saxpy.launch(grid_for(N, BLOCK), BLOCK, y, 1.0, ones, N, stream=stream)  # y += 1
    exec_ = graph.instantiate()
    exec_.upload(stream)
    for _ in range(REPLAYS):
        exec_.launch(stream)
    np.testing.assert_array_equal(y.to_array(stream=stream), np.full(N, REPLAYS, np.float32))
    ones.close()
    y.close()


# --- explicit graphs and update --------------------------------------------------------------------------
def test_explicit_kernel_nodes_with_dependencies(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc, de, df, dg = (DeviceBuffer.empty(N) for _ in range(4))
    graph = Graph()
    g = grid_for(N, BLOCK)
    first = graph.add_kernel(vector_add, g, BLOCK, dc, da, db, N)  # c = a + b
    left = graph.add_kernel(vector_add, g, BLOCK, de, dc, da, N, depends_on=[first])  # e = c + a
    right = graph.add_kernel(vector_add, g, BLOCK, df, dc, db, N, depends_on=[first])  # f = c + b
    join = graph.add_empty(depends_on=[left, right])
    last = graph.add_kernel(vector_add, g, BLOCK, dg, de, df, N, depends_on=[join])  # g = e + f
    order = graph.kernel_nodes()
    assert order[0] is first and order[-1] is last and set(order[1:3]) == {left, right}
    assert first.args == (dc, da, db, N) and first.raw_args() == (dc.ptr, da.ptr, db.ptr, N)
    with pytest.raises(ArgumentError, match="host numpy array"):
        graph.add_kernel(vector_add, g, BLOCK, dc, a, db, N)  # checked before the driver sees it
    with pytest.raises(ValueError, match="twice"):
        graph.add_empty(depends_on=[first, first])
    exec_ = graph.instantiate()
    poison(stream, dc, de, df, dg)
    exec_.launch(stream)
    c = a + b
    np.testing.assert_array_equal(dg.to_array(stream=stream), (c + a) + (c + b))

    dc.close()  # a buffer the graph uses is gone: replaying would write freed memory
    with pytest.raises(ClosedError, match="freed"):
        exec_.launch(stream)
    exec_.close()
    graph.close()
    for buf in (da, db, de, df, dg):
        buf.close()


def test_exec_update_takes_a_same_shaped_graph_and_names_why_it_refuses(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    a, b, d = (rng.standard_normal(N, dtype=np.float32) for _ in range(3))
    da, db, dd = (DeviceBuffer.from_array(v) for v in (a, b, d))
    dc = DeviceBuffer.empty(N)
    with capture(stream) as first:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
    with capture(stream) as second:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, dd, N, stream=stream)
    with capture(stream) as longer:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, dc, dd, N, stream=stream)
    exec_ = first.instantiate()
    exec_.update(second)
    poison(stream, dc)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + d)

    with pytest.raises(GraphError, match="TOPOLOGY_CHANGED") as caught:
        exec_.update(longer)
    assert "instantiate the new graph" in str(caught.value)
    poison(stream, dc)
    exec_.launch(stream)  # a refused update leaves the executable graph as it was
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + d)
    for obj in (exec_, first, second, longer, da, db, dd, dc):
        obj.close()


# --- lifetimes ---------------------------------------------------------------------------------------------
def test_closing_the_context_closes_executables_and_graphs_first(rng: np.random.Generator) -> None:
    ctx = Context.create(0)
    fn = Module(rawcuda.kernels.ptx_path("vector_add"), ctx).function("vector_add")
    stream = Stream(ctx)
    a = rng.standard_normal(N, dtype=np.float32)
    da, dc = DeviceBuffer.from_array(a, ctx), DeviceBuffer.empty(N, np.float32, ctx)
    fn.launch(grid_for(N, BLOCK), BLOCK, dc, da, da, N, stream=stream)  # warm-up outside the capture
    with capture(stream) as graph:
        fn.launch(grid_for(N, BLOCK), BLOCK, dc, da, da, N, stream=stream)
    exec_ = GraphExec(graph)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + a)
    assert exec_.close_order < graph.close_order < fn.module.close_order < da.close_order
    ctx.close()
    assert exec_.closed and graph.closed and da.closed and stream.closed
    with pytest.raises(ClosedError):
        exec_.launch(stream)
    exec_.close()  # idempotent
    graph.close()
