"""Graph lifetimes on a real GPU: ownership without cycles, and executable graphs that follow their updates.

Two promises of rawcuda.graphs (graph, graphexec and kernelnode; docs/architecture.md, "Lifetimes"):

* **No cycles.** Dropping a graph -- with its executable graph and its nodes -- frees it and every buffer it
  kept alive by reference counting alone. Before, ``Graph._nodes`` and ``node.graph`` pointed at each other,
  so the graph and the buffers its kernel nodes held waited for the cyclic garbage collector, and with
  ``gc.disable()`` were never freed. The leak tests run with the cyclic collector off, drop 256 MiB a round
  (far above the driver's own noise) and measure device memory with ``cuMemGetInfo``; they also check with
  ``weakref`` that the buffer objects are gone. A node whose graph is gone raises ClosedError.
* **What a replay checks follows the changes.** ``set_kernel_args`` and ``update`` replace what the
  executable graph uses: closing the replaced buffers must not stop its replays (before, every ``launch()``
  raised ClosedError asking for exactly what had been done), while closing a buffer still in use must.

Every result is compared with numpy on fresh random data; every output is poisoned with NaN first, and a
refused launch must leave it NaN (nothing ran on freed memory).
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Stream
from rawcuda.checked.errors import ClosedError
from rawcuda.core.context import default_context
from rawcuda.graphs.graph import Graph, KernelNode
from rawcuda.graphs.streamcapture import capture
from tests.helpers import BLOCK, NAN32, grid_for

pytestmark = pytest.mark.gpu

WARM_UP_KERNELS = True  # conftest's vector_add is launched once first (lazy loading is not capturable work)
MIB = 1 << 20
BIG = 256 * MIB  # dropped per round: far above what the driver's pools move by
BIG_ELEMENTS = BIG // np.dtype(np.float32).itemsize
ROUNDS = 4
N = 100_003  # not a multiple of the block size
GRID = grid_for(N, BLOCK)


def poison(stream: Stream, *buffers: DeviceBuffer) -> None:
    for buf in buffers:
        buf.fill(NAN32, stream=stream)


def assert_refused(exec_: Any, stream: Stream, out: DeviceBuffer) -> None:
    """A replay that would read a closed buffer raises ClosedError, and runs nothing (``out`` stays poisoned)."""
    poison(stream, out)
    with pytest.raises(ClosedError, match="freed"):
        exec_.launch(stream)
    assert np.isnan(out.to_array(stream=stream)).all(), "a refused launch must not run"


def random_buffers(rng: np.random.Generator, count: int) -> tuple[list[np.ndarray], list[DeviceBuffer]]:
    host = [rng.standard_normal(N, dtype=np.float32) for _ in range(count)]
    return host, [DeviceBuffer.from_array(h) for h in host]


def free_device_bytes() -> int:
    ctx = default_context()
    ctx.synchronize()
    return ctx.mem_info()[0]


@contextlib.contextmanager
def cyclic_gc_off() -> Iterator[None]:
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --- no cycles: dropping is freeing ---------------------------------------------------------------------------
def explicit_round(fn: rawcuda.Function, stream: Stream, rng: np.random.Generator) -> weakref.ref[DeviceBuffer]:
    """A graph with a kernel node (and an empty node after it) over a 256 MiB input, instantiated and replayed;
    everything is dropped when this returns -- no close(), and no cyclic collector to break a cycle."""
    b = rng.standard_normal(N, dtype=np.float32)
    big = DeviceBuffer.zeros(BIG_ELEMENTS, np.float32)  # the kernel reads its first N zeros: c = 0 + b
    db, dc = DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    graph = Graph()
    node = graph.add_kernel(fn, GRID, BLOCK, dc, big, db, N)
    graph.add_empty(depends_on=[node])
    exec_ = graph.instantiate()
    poison(stream, dc)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), b)
    return weakref.ref(big)


def captured_round(fn: rawcuda.Function, stream: Stream, rng: np.random.Generator) -> weakref.ref[DeviceBuffer]:
    """A captured copy out of a 256 MiB buffer (the graph keeps its source alive), its nodes read back (which
    made the cycle), instantiated and replayed; everything is dropped when this returns."""
    a = rng.standard_normal(N, dtype=np.float32)
    big = DeviceBuffer.zeros(BIG_ELEMENTS, np.float32)
    big[:N].copy_from(a)
    dst = DeviceBuffer.empty(N)
    with capture(stream) as graph:
        dst.copy_from(big[:N], stream=stream)  # the stream hands the source view to the graph
    assert graph.nodes()  # reading the nodes back is what made the graph and its nodes a cycle
    exec_ = graph.instantiate()
    poison(stream, dst)
    exec_.launch(stream)
    np.testing.assert_array_equal(dst.to_array(stream=stream), a)
    return weakref.ref(big)


ROUND: dict[str, Callable[[rawcuda.Function, Stream, np.random.Generator], weakref.ref[DeviceBuffer]]] = {
    "explicit": explicit_round,
    "captured": captured_round,
}


@pytest.mark.parametrize("kind", sorted(ROUND))
def test_a_dropped_graph_frees_its_buffers_without_the_cyclic_gc(
    kind: str, rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    # The graph held its nodes and each node its graph: the graph, and the buffers it kept alive, waited for
    # the cyclic GC -- with gc.disable(), 256 MiB were lost a round. Nodes point back weakly now.
    with cyclic_gc_off():
        before = free_device_bytes()
        refs = [ROUND[kind](vector_add, stream, rng) for _ in range(ROUNDS)]
        leaked = before - free_device_bytes()
        alive = sum(ref() is not None for ref in refs)
    assert alive == 0, f"{alive} of {ROUNDS} dropped 256 MiB buffers are still alive without the cyclic GC"
    assert leaked < BIG // 2, f"{leaked / MIB:.0f} MiB still held after dropping {ROUNDS} x {BIG // MIB} MiB"


def test_a_node_works_while_its_graph_lives_and_is_closed_once_it_is_gone(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    (_, b), (da, db) = random_buffers(rng, 2)
    dc = DeviceBuffer.empty(N)
    graph = Graph()
    node = graph.add_kernel(vector_add, GRID, BLOCK, dc, da, db, N)
    exec_ = graph.instantiate()
    graph_ref = weakref.ref(graph)
    del graph  # the executable graph holds it: the node keeps working
    assert node.raw_args() == (dc.ptr, da.ptr, db.ptr, N)
    exec_.set_kernel_args(node, dc, db, db, N)
    poison(stream, dc)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), b + b)

    del exec_  # nothing holds the graph now: reference counting destroys it at once, its nodes' handles with it
    assert graph_ref() is None, "a node must not keep its graph alive (the pair was a cycle)"
    uses: list[Callable[[], object]] = [lambda: node.handle, node.raw_args, lambda: node.set_args(dc, da, db, N)]
    for use in uses:
        with pytest.raises(ClosedError, match="garbage-collected"):
            use()  # a clear error before any driver call -- never a call with a destroyed graph's node
    other = Graph()
    with pytest.raises(ValueError, match="nodes of this graph"):
        other.add_empty(depends_on=[node])
    other.close()
    for buf in (da, db, dc):
        buf.close()


# --- what a replay checks follows set_kernel_args and update ---------------------------------------------------
def test_set_kernel_args_lets_go_of_the_replaced_buffers(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    (x, _, y2, y3), (dx, dy1, dy2, dy3) = random_buffers(rng, 4)
    dc1, dc2 = DeviceBuffer.empty(N), DeviceBuffer.empty(N)
    graph = Graph()
    node = graph.add_kernel(vector_add, GRID, BLOCK, dc1, dx, dy1, N)  # A: c1 = x + y1
    exec_ = graph.instantiate()
    exec_.set_kernel_args(node, dc2, dx, dy2, N)  # B: c2 = x + y2 (x stays in use)
    dc1.close()
    dy1.close()  # used by A only: the replays do not need them any more
    poison(stream, dc2)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc2.to_array(stream=stream), x + y2)

    dy2.close()  # used by B: replaying would read freed memory
    assert_refused(exec_, stream, dc2)

    exec_.set_kernel_args(node, dc2, dx, dy3, N)  # what the error says to do
    exec_.launch(stream)
    np.testing.assert_array_equal(dc2.to_array(stream=stream), x + y3)
    dx.close()  # in use from the start, and still
    with pytest.raises(ClosedError, match="freed"):
        exec_.launch(stream)
    exec_.close()
    graph.close()
    for buf in (dc2, dy3):
        buf.close()


def test_update_takes_the_new_graphs_buffers_and_lets_go_of_the_old_ones(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    (x, _, y2), (dx, dy1, dy2) = random_buffers(rng, 3)
    dc1, dc2 = DeviceBuffer.empty(N), DeviceBuffer.empty(N)
    first, second = Graph(), Graph()
    first.add_kernel(vector_add, GRID, BLOCK, dc1, dx, dy1, N)  # c1 = x + y1
    second.add_kernel(vector_add, GRID, BLOCK, dc2, dx, dy2, N)  # c2 = x + y2 (x in both)
    exec_ = first.instantiate()
    exec_.update(second)
    second_ref = weakref.ref(second)
    del second  # the driver copied its parameters; the executable holds what they use, not the graph
    assert second_ref() is None
    dc1.close()
    dy1.close()  # the first graph's own: not used by the replays any more
    poison(stream, dc2)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc2.to_array(stream=stream), x + y2)

    dy2.close()  # the second graph's: in use
    assert_refused(exec_, stream, dc2)
    exec_.close()
    first.close()
    for buf in (dx, dc2):
        buf.close()


def test_update_of_a_captured_graph_follows_the_copies_it_keeps(rng: np.random.Generator, stream: Stream) -> None:
    (_, b), (src1, src2) = random_buffers(rng, 2)
    dst = DeviceBuffer.empty(N)
    with capture(stream) as first:
        dst.copy_from(src1, stream=stream)  # the graph keeps src1 (the stream hands it over)
    with capture(stream) as second:
        dst.copy_from(src2, stream=stream)
    exec_ = first.instantiate()
    exec_.update(second)
    del second
    src1.close()  # what the first graph copied from: no longer read by the replays
    poison(stream, dst)
    exec_.launch(stream)
    np.testing.assert_array_equal(dst.to_array(stream=stream), b)

    src2.close()
    assert_refused(exec_, stream, dst)
    exec_.close()
    first.close()
    dst.close()


@pytest.mark.parametrize("shape", ["chain", "fork"])
def test_set_kernel_args_after_update(
    shape: str, rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    # Two kernel nodes; the second reads the first's output in a chain, only x in a fork (no dependency).
    (x, _, y2), (dx, dy1, dy2) = random_buffers(rng, 3)
    dc1, dd1, dc2, dd2, dd3 = (DeviceBuffer.empty(N) for _ in range(5))

    def build(dc: DeviceBuffer, dy: DeviceBuffer, dd: DeviceBuffer) -> tuple[Graph, KernelNode]:
        graph = Graph()
        first = graph.add_kernel(vector_add, GRID, BLOCK, dc, dx, dy, N)  # c = x + y
        if shape == "chain":
            return graph, graph.add_kernel(vector_add, GRID, BLOCK, dd, dc, dx, N, depends_on=[first])  # d = c + x
        return graph, graph.add_kernel(vector_add, GRID, BLOCK, dd, dx, dx, N)  # d = x + x

    graph1, second_node = build(dc1, dy1, dd1)
    graph2, _ = build(dc2, dy2, dd2)
    exec_ = graph1.instantiate()
    exec_.update(graph2)
    middle = dc2 if shape == "chain" else dx
    exec_.set_kernel_args(second_node, dd3, middle, dx, N)  # d3 instead of graph2's d2
    for buf in (dc1, dy1, dd1):
        buf.close()  # graph1's own: replaced by the update
    poison(stream, dc2, dd3)
    exec_.launch(stream)
    if shape == "chain":
        np.testing.assert_array_equal(dc2.to_array(stream=stream), x + y2)
        np.testing.assert_array_equal(dd3.to_array(stream=stream), (x + y2) + x)
    else:
        np.testing.assert_array_equal(dd3.to_array(stream=stream), x + x)

    dd2.close()  # replaced by set_kernel_args
    if shape == "chain":
        # A chain has one order: the driver paired node i with node i, so rawcuda knows d2 is not used.
        exec_.launch(stream)
        stream.synchronize()
        dy2.close()  # still in use by the first node
    # A fork's nodes could be paired either way, so rawcuda cannot tell which of graph2's arguments
    # set_kernel_args replaced: they stay checked until the next update (a needless error, never a crash).
    assert_refused(exec_, stream, dd3)
    for obj in (exec_, graph1, graph2, dx, dy2, dc2, dd3):
        obj.close()
