"""Graphs: CUDA graphs -- record a sequence of GPU work once, then replay all of it with one call.

Why graphs? Every ``cuLaunchKernel`` costs the host a few microseconds (the seed article says 5-10 us;
bench/launch_overhead.py measures rawcuda's). A pipeline of many small kernels -- the seed's transformer
step of 10 matmuls and 5 element-wise kernels -- can spend longer *launching* than computing, and the GPU
idles between kernels while the host queues the next one. A graph hands the driver the whole sequence
at once: it validates and lays out every launch at ``instantiate()``, and each ``launch()`` afterwards
submits all of it in one call. cust has no public wrapper for this (its ``graph`` module is private and
unfinished; the seed falls back to hand-written FFI); here it is a few context managers over the table
rows in ``rawcuda/ffi/cuda/graph.py``.

Two ways to build a graph::

    with capture(stream) as graph:            # 1. capture: run your code, but record instead of executing
        ops.matmul(h, x, w, stream=stream)
        ops.gelu(y, h, stream=stream)
    exec = graph.instantiate()                 # validate + lay out once (the expensive step)
    exec.launch(stream)                        # replay: one call for the whole sequence

    graph = Graph()                            # 2. explicit nodes, with explicit dependencies
    a = graph.add_kernel(fn, grid, block, c, x, y, n)
    b = graph.add_kernel(fn, grid, block, d, c, y, n, depends_on=[a])

What a graph records, and what that means for you:

* **Addresses, not values.** A kernel node stores its argument *values* -- for a buffer that is its device
  address. Replaying reads whatever those buffers hold *now*: copy new input into the same buffer and
  replay to process it. A buffer freed while a graph still uses it is a use-after-free on the GPU, so
  graphs built with ``add_kernel`` keep their arguments alive, and ``exec.launch()`` refuses to run once
  one of them was closed. A *captured* graph does the same for what rawcuda recorded into it: the
  function and arguments of every captured launch, and both ends of every captured copy (the stream
  hands them over, a stream that joined the capture too). Memory a launch reaches only through a raw
  address (an int argument) is invisible to it: hand such buffers to ``graph.keep_alive(...)``.
* **Ownership without cycles.** Drop a graph (and its executables and nodes) and reference counting alone
  frees it and everything it held -- no wait for the cyclic garbage collector, and nothing kept for ever
  under ``gc.disable()``. Every reference points one way: an executable graph holds its graph, a graph its
  nodes, a node its arguments; what points back (a node to its graph, a graph being captured to its
  stream) is a weak reference. So keep the graph (or an executable made from it) while you use its nodes:
  a node of a graph that is gone raises :class:`~rawcuda.checked.errors.ClosedError`.
* **Changing arguments without re-instantiating.** ``exec.set_kernel_args(node, *args)`` swaps one kernel
  node's arguments in the executable graph (``cuGraphExecKernelNodeSetParams``); ``exec.update(graph2)``
  takes every node's parameters from a graph of the same shape (``cuGraphExecUpdate``) and raises
  :class:`~rawcuda.checked.errors.GraphError` naming the driver's reason when the shapes differ. Both are much
  cheaper than a new ``instantiate()``. The nodes of a captured graph, in launch order, come from
  ``graph.kernel_nodes()`` -- so "change the weights of the 3rd kernel" is
  ``exec.set_kernel_args(graph.kernel_nodes()[2], ...)``.

What capture forbids, and what rawcuda says then, is in :mod:`rawcuda.graphs.streamcapture`.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import weakref
from collections.abc import Iterable, Sequence
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import TYPE_CHECKING, Any

from rawcuda.checked import cu
from rawcuda.core.context import CloseOrder, Context, resolve
from rawcuda.core.function import Function
from rawcuda.core.resource import Resource
from rawcuda.ffi.constants import GraphInstantiateFlag, GraphNodeType
from rawcuda.ffi.types import CUgraphEdgeData, CUgraphNode

from .graphexec import GraphExec
from .kernelnode import KernelNode, Node, kernel_node_params, node_attributes, set_node_attributes

if TYPE_CHECKING:
    from rawcuda.core.stream import Stream

#: cuGraphCreate's flags argument: "Graph creation flags, must be 0" (cuda.h).
GRAPH_CREATE_FLAGS = 0


def _destroy_graph(handle: int) -> None:
    cu.cuGraphDestroy(handle)


class Graph(Resource):
    """A CUDA graph: nodes (kernels, copies ...) and the dependencies between them. Not runnable itself:
    :meth:`instantiate` makes a :class:`GraphExec` that is.

    ``Graph(context=None)`` is an empty graph to add nodes to; ``capture(stream)`` makes one from work.
    """

    close_order = CloseOrder.GRAPH

    def __init__(self, context: Context | None = None) -> None:
        ctx = resolve(context)
        ctx.activate()
        handle = c_void_p()
        cu.cuGraphCreate(byref(handle), GRAPH_CREATE_FLAGS)
        self._setup(ctx)
        self._take(handle.value or 0)

    @classmethod
    def for_capture(cls, stream: Stream) -> Graph:
        """A graph that will hold what ``stream`` records; usable once :meth:`receive_capture` gave it the
        result (``rawcuda.capture(stream)`` does both)."""
        graph = cls.__new__(cls)
        graph._setup(stream.context)
        # Weak: the stream holds the graph while it captures (stream.capturing), and the Capture holds the
        # stream; a strong reference back would make a cycle for as long as a capture is left unfinished.
        graph._capture_stream = weakref.ref(stream)
        return graph

    def receive_capture(self, handle: int) -> None:
        """End of a capture: own the CUgraph ``handle`` it produced -- or, for 0, a failed capture whose
        partial graph the caller destroyed: closed from now on, owning nothing."""
        if self._capture_stream is None:
            raise RuntimeError(f"{self!r} is not being captured")
        self._capture_stream = None
        if handle:
            self._take(handle)
        else:
            self._closed = True
            self._kept = []  # the recorded work was discarded: nothing needs what it would have used
            self._captured_uses = {}
            self.context.forget(self)

    def record_launch(self, stream: Stream, fn: Function, args: tuple[Any, ...]) -> None:
        """A launch was just captured on ``stream``: its kernel node uses ``fn`` and ``args`` at every replay.

        The capturing stream's dependencies are now that one node (cuStreamGetCaptureInfo), so the use is
        kept for that node: ``set_kernel_args`` replaces it as it does an explicit node's. When the driver
        does not say (not one kernel node), the graph keeps it for its whole life instead.
        """
        status, deps, count = c_int(), ctypes.POINTER(CUgraphNode)(), c_size_t()
        cu.cuStreamGetCaptureInfo(stream.handle, byref(status), None, None, byref(deps), None, byref(count))
        if count.value == 1 and deps[0]:
            self._captured_uses[deps[0]] = (fn, args)
        else:
            self._kept.append((fn, args))

    def join(self, stream: Stream) -> None:
        """``stream`` waited on an event recorded into this capture: the driver captures it too, until the end.

        It records into this graph from now on (``stream.capturing``), so what it queues is held, and its
        launches are not taken for work running now. The capture's end lets it go again.
        """
        if self._capture_stream is None:
            return  # the capture ended: the wait was on a finished capture's event (the driver refuses it)
        stream.capturing = self
        self._joined.add(stream)

    def end_joins(self) -> None:
        """The capture ended: every stream that joined it records its own work again."""
        for stream in list(self._joined):
            if stream.capturing is self:
                stream.capturing = None
        self._joined.clear()

    @property
    def capture_stream(self) -> Stream | None:
        """The stream recording into this graph, or None once the capture has ended."""
        return self._capture_stream() if self._capture_stream is not None else None

    def _setup(self, context: Context) -> None:
        Resource.__init__(self, context)
        self._handle = 0
        # Set (a weak reference) from for_capture() until receive_capture(): "being captured".
        self._capture_stream: weakref.ref[Stream] | None = None
        self._nodes: dict[int, Node] = {}  # handle -> Node, so asking twice gives the same objects
        self._kept: list[Any] = []  # what keep_alive() was given: host memory of captured copies ...
        self._captured_uses: dict[int, tuple[Any, ...]] = {}  # kernel node handle -> (function, args) captured
        # Streams that joined the capture (a fork). Weak: a stream dropped mid-capture is no one's to reset.
        self._joined: weakref.WeakSet[Stream] = weakref.WeakSet()

    def _take(self, handle: int) -> None:
        self._handle = handle
        self._own(_destroy_graph, handle)

    @property
    def handle(self) -> int:
        return self._ready()

    def _ready(self) -> int:
        self.check_open()
        if self._capture_stream is not None:
            raise RuntimeError(f"{self!r} is still being captured: use it after the `with capture(stream)` block")
        return self._handle

    def keep_alive(self, *objects: Any) -> None:
        """Hold ``objects`` (buffers, host arrays) as long as this graph -- and executables whose parameters
        come from it -- live; an executable's ``launch()`` refuses to run once a buffer among them was closed."""
        self._kept.extend(objects)

    @property
    def kept(self) -> list[Any]:
        """What :meth:`keep_alive` was given, as a live list: an executable graph shares it while its
        parameters come from this graph, so objects kept after ``instantiate()`` are held and checked too."""
        return self._kept

    def node_arguments(self) -> dict[int, tuple[Any, ...]]:
        """Node handle -> what that kernel node's launch uses now (``KernelNode.in_use``), for the kernel
        nodes whose arguments rawcuda packed: a copy, which an executable graph takes as its own."""
        uses = dict(self._captured_uses)  # a node given new arguments since (KernelNode.set_args) overrides
        uses.update({h: node.in_use for h, node in self._nodes.items() if isinstance(node, KernelNode) and node.in_use})
        return uses

    @property
    def held(self) -> tuple[Any, ...]:
        """What the graph keeps alive: what its kernel nodes use (function, arguments, packed block), and
        what :meth:`keep_alive` was given (host memory of captured copies ...)."""
        return (*self.node_arguments().values(), *self._kept)

    # --- explicit nodes ----------------------------------------------------------------------------------
    def add_kernel(
        self,
        fn: Function,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        *args: Any,
        shared_mem: int = 0,
        depends_on: Iterable[Node] = (),
    ) -> KernelNode:
        """A kernel node: ``fn<<<grid, block, shared_mem>>>(*args)`` after every node in ``depends_on``.

        Arguments are checked against the kernel's signature exactly as in ``fn.launch`` (before the driver
        sees them) and kept alive with the graph. A Function with options (``fn.options(cluster=...,
        cooperative=True)``) gives the node those launch attributes, checked as a launch checks them; a
        dependent launch (``programmatic=True``) is an edge of an explicit graph, not a node's: capture it.
        """
        handle = self._ready()
        if not isinstance(fn, Function):
            raise TypeError(f"add_kernel's first argument is a rawcuda Function, not {type(fn).__name__} {fn!r}")
        fn.check_open()
        if fn.context.raw_handle != self.context.raw_handle:
            raise ValueError(f"{fn!r} belongs to {fn.context!r}, the graph to {self.context!r}: use one context")
        config = fn.configure(grid, block, shared_mem)  # the checks of a launch: dimensions, shared memory
        packed = fn.pack(args)
        deps = self._dependencies(depends_on)
        params = kernel_node_params(fn, config, packed)
        node = c_void_p()
        self.context.activate()
        attrs = node_attributes(fn, config)  # checked before the node exists: a refusal leaves the graph as it was
        cu.cuGraphAddKernelNode(byref(node), handle, deps, len(deps), byref(params))
        if attrs is not None:
            set_node_attributes(node.value or 0, attrs)
        kernel = KernelNode(self, node.value or 0, fn.handle, config, fn)
        kernel.args, kernel.packed = args, packed  # the node holds what its launch uses (and the graph the node)
        self._nodes[kernel.handle] = kernel
        return kernel

    def add_empty(self, depends_on: Iterable[Node] = ()) -> Node:
        """A node that does nothing: a join point (``depends_on`` many) or a fork point for later nodes."""
        handle = self._ready()
        deps = self._dependencies(depends_on)
        node = c_void_p()
        self.context.activate()
        cu.cuGraphAddEmptyNode(byref(node), handle, deps, len(deps))
        empty = Node(self, node.value or 0, GraphNodeType.EMPTY)
        self._nodes[empty.handle] = empty
        return empty

    def _dependencies(self, nodes: Iterable[Node]) -> Any:
        deps = list(nodes)
        for dep in deps:
            if not isinstance(dep, Node) or not dep.belongs_to(self):
                raise ValueError(f"depends_on takes nodes of this graph; {dep!r} is not one")
        if len({d.handle for d in deps}) != len(deps):
            raise ValueError("depends_on lists a node twice (the driver refuses duplicate dependencies)")
        return (CUgraphNode * len(deps))(*[d.handle for d in deps])

    # --- reading a graph ------------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """Every node, in an order that respects the dependencies (for a capture: the order of the calls)."""
        handles, edges = self._listing()
        return [self.node(h) for h in topological_order(handles, edges)]

    def sole_order(self) -> list[Node] | None:
        """Every node in the one order its dependencies allow -- or None when they allow more than one (two
        nodes that do not depend on each other, as in a fork). A capture on one stream has a sole order."""
        handles, edges = self._listing()
        order = topological_order(handles, edges)
        return [self.node(h) for h in order] if is_only_order(order, edges) else None

    def _listing(self) -> tuple[list[int], list[tuple[int, int]]]:
        """The driver's node handles and (from, to) dependency edges, in the driver's order."""
        handle = self._ready()
        self.context.activate()
        count = c_size_t()
        cu.cuGraphGetNodes(handle, None, byref(count))
        listed = (CUgraphNode * count.value)()
        if count.value:  # a second call with a zero-length (non-NULL) array is INVALID_VALUE, not a no-op
            cu.cuGraphGetNodes(handle, listed, byref(count))
        handles = [h or 0 for h in listed[: count.value]]
        edges = c_size_t()
        cu.cuGraphGetEdges(handle, None, None, None, byref(edges))
        sources, targets = (CUgraphNode * edges.value)(), (CUgraphNode * edges.value)()
        # Each edge's data too: a graph with a programmatic edge (a captured programmatic launch) refuses to list
        # its edges without it, CUDA_ERROR_LOSSY_QUERY. The order of the nodes needs only the pairs.
        kinds = (CUgraphEdgeData * edges.value)()
        if edges.value:
            cu.cuGraphGetEdges(handle, sources, targets, kinds, byref(edges))
        pairs = [(a or 0, b or 0) for a, b in zip(sources[: edges.value], targets[: edges.value], strict=True)]
        return handles, pairs

    def kernel_nodes(self) -> list[KernelNode]:
        """The kernel nodes in dependency order: ``graph.kernel_nodes()[2]`` is the 3rd kernel launched."""
        return [n for n in self.nodes() if isinstance(n, KernelNode)]

    def node(self, handle: int) -> Node:
        """The Node (a KernelNode for kernels) with driver handle ``handle``: the same object every time."""
        self.check_open()  # a closed graph has let go of its nodes: never ask the driver about a destroyed one
        node = self._nodes.get(handle)
        if node is None:
            kind = c_int()
            cu.cuGraphNodeGetType(handle, byref(kind))
            try:
                node_type: GraphNodeType | int = GraphNodeType(kind.value)
            except ValueError:  # a node type newer than this table: keep the number
                node_type = kind.value
            if node_type == GraphNodeType.KERNEL:
                node = KernelNode.from_driver(self, handle)
            else:
                node = Node(self, handle, node_type)
            self._nodes[handle] = node
        return node

    def instantiate(self, flags: GraphInstantiateFlag = GraphInstantiateFlag.NONE) -> GraphExec:
        """Validate and lay out the whole graph once (the expensive step); the result replays cheaply."""
        return GraphExec(self, flags)

    def close(self) -> None:
        """Destroy the graph and let go of its nodes and what they held. Executables made from it keep
        working: they hold their own copy of what they use (so these are new containers, not cleared ones)."""
        if self._closed:
            return
        super().close()
        self._nodes = {}
        self._kept = []
        self._captured_uses = {}

    def __repr__(self) -> str:
        if self._capture_stream is not None:
            return f"<Graph capturing on {self.capture_stream!r}>"
        state = " closed" if self._closed else ""
        return f"<Graph {self._handle:#x}{state}>"


def topological_order(nodes: Sequence[int], edges: Iterable[tuple[int, int]]) -> list[int]:
    """``nodes`` ordered so that every edge (a, b) puts a before b; ties keep the order of ``nodes``.

    The driver lists a graph's nodes in no documented order; the edges are the truth. For a capture on
    one stream the edges form a chain, so this is exactly the order of the captured calls.
    """
    position = {handle: i for i, handle in enumerate(nodes)}
    waiting = dict.fromkeys(nodes, 0)
    after: dict[int, list[int]] = {handle: [] for handle in nodes}
    for a, b in edges:
        after[a].append(b)
        waiting[b] += 1
    ready = [position[h] for h in nodes if waiting[h] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        handle = nodes[heapq.heappop(ready)]
        order.append(handle)
        for nxt in after[handle]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, position[nxt])
    if len(order) != len(nodes):
        raise ValueError("the edges form a cycle: not a graph the driver could have made")
    return order


def is_only_order(order: Sequence[int], edges: Iterable[tuple[int, int]]) -> bool:
    """Whether ``order`` (a topological order of a graph with ``edges``) is its *only* one.

    It is exactly when each node depends directly on the one before it: if some neighbours a, b had no edge
    a -> b, nothing would force a before b, and swapping them would give another valid order. Why it
    matters: ``cuGraphExecUpdate`` pairs the new graph's nodes with the executable's without saying how;
    when both graphs have one order, a pairing that keeps every dependency can only be position by position.
    """
    linked = set(edges)
    return all((a, b) in linked for a, b in itertools.pairwise(order))


__all__ = ["Graph", "GraphExec", "is_only_order", "topological_order"]
