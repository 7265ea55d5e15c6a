"""Graphs: executable graphs -- replay a recorded graph with one call, and change it without rebuilding.

``graph.instantiate()`` turns a :class:`~rawcuda.graphs.graph.Graph` into a ``GraphExec``: the driver validates and
lays out every node once, so that each ``launch(stream)`` submits all of the graph's work with a single
``cuGraphLaunch``. Two ways to change what it computes without paying for a new instantiation:

* ``exec.set_kernel_args(node, *args)`` -- one kernel node's arguments (``cuGraphExecKernelNodeSetParams``);
* ``exec.update(graph2)`` -- every node's parameters from a graph of the same shape (``cuGraphExecUpdate``),
  with a :class:`~rawcuda.checked.errors.GraphError` that names the driver's reason when the shapes differ.

A replay reads the buffers a graph was given *now*: a buffer closed while an executable graph still uses it
would be a use-after-free on the GPU, so ``launch`` refuses to run once one was closed. "Still uses" follows
the changes: the executable graph keeps its own record of what each kernel node uses, taken from the graph
at ``instantiate()``, replaced for one node by ``set_kernel_args`` and for all of them by ``update(graph2)``.
What was replaced is neither held nor checked any more -- close it, and the replays go on with the new
arguments; what is still in use, closed, makes ``launch`` raise :class:`~rawcuda.checked.errors.ClosedError`.

One case rawcuda cannot follow exactly: ``cuGraphExecUpdate`` pairs the nodes of ``graph2`` with the
executable's without saying how. When both graphs have a sole order (a chain, as one stream's capture is),
the pairing can only be position by position, and rawcuda follows it. Otherwise (a fork, a join) a later
``set_kernel_args(node, ...)`` cannot tell which of ``graph2``'s arguments it replaced, so those stay checked
until the next ``update`` -- the safe side: a needless ``ClosedError``, never a launch on freed memory.
"""

from __future__ import annotations

from ctypes import byref, c_void_p
from typing import TYPE_CHECKING, Any

from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError, CudaError, GraphError
from rawcuda.core.closecounter import closes
from rawcuda.core.context import SYNC_LAUNCHES, CloseOrder
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.function import Function
from rawcuda.core.integers import integer
from rawcuda.core.kernelargs import MEMORY_VIEWS
from rawcuda.core.resource import Resource
from rawcuda.core.stream import Stream
from rawcuda.core.streamargs import stream_handle
from rawcuda.ffi.constants import GraphExecUpdateResult, GraphInstantiateFlag
from rawcuda.ffi.types import CUgraphExecUpdateResultInfo

from .kernelnode import KernelNode, kernel_node_params

if TYPE_CHECKING:
    # graph.py imports this file (Graph.instantiate makes a GraphExec); here a Graph is only used, never made.
    from .graph import Graph

#: Why cuGraphExecUpdate refused, in words, for every CUgraphExecUpdateResult.
UPDATE_REASONS: dict[GraphExecUpdateResult, str] = {
    GraphExecUpdateResult.SUCCESS: "the update succeeded",
    GraphExecUpdateResult.ERROR: "the driver refused the update without naming a reason (an invalid argument?)",
    GraphExecUpdateResult.ERROR_TOPOLOGY_CHANGED: (
        "the new graph has a different number of nodes or different edges: only parameters can be updated, "
        "so instantiate the new graph instead"
    ),
    GraphExecUpdateResult.ERROR_NODE_TYPE_CHANGED: "a node changed its type (e.g. a kernel became a memcpy)",
    GraphExecUpdateResult.ERROR_FUNCTION_CHANGED: "a kernel node runs a different function",
    GraphExecUpdateResult.ERROR_PARAMETERS_CHANGED: (
        "a node's parameters changed in a way that cannot be updated (e.g. a copy between other memory types "
        "or contexts)"
    ),
    GraphExecUpdateResult.ERROR_NOT_SUPPORTED: "a node's type or configuration does not support updates",
    GraphExecUpdateResult.ERROR_UNSUPPORTED_FUNCTION_CHANGE: (
        "a kernel node's function changed in an unsupported way (another context, or dynamic parallelism)"
    ),
    GraphExecUpdateResult.ERROR_ATTRIBUTES_CHANGED: "a node's attributes (e.g. its priority) changed",
}

# The argtypes-free binding of cuGraphLaunch (a slot, so that tracing can swap a traced wrapper in).
_graph_launch = checked.hot_slot("cuGraphLaunch")


def _destroy_exec(handle: int) -> None:
    cu.cuGraphExecDestroy(handle)


class GraphExec(Resource):
    """An instantiated graph: ``exec.launch(stream)`` replays all of its work with one driver call.

    It keeps the :class:`Graph` it was made from alive (its nodes identify what ``set_kernel_args``
    changes), and holds what its replays use: the arguments of each kernel node as they were when it took
    the node's parameters, and the objects kept by the graph its parameters come from (the module docstring
    says how that follows ``set_kernel_args`` and ``update``). Nothing points back at it: no cycles.
    """

    close_order = CloseOrder.EXECUTABLE_GRAPH

    def __init__(self, graph: Graph, flags: GraphInstantiateFlag = GraphInstantiateFlag.NONE) -> None:
        source = graph_handle(graph)  # ClosedError, or RuntimeError while it is still being captured
        ctx = graph.context
        ctx.activate()
        handle = c_void_p()
        cu.cuGraphInstantiate(byref(handle), source, integer(flags, "flags"))
        super().__init__(ctx)
        self._handle: int = handle.value or 0
        self._own(_destroy_exec, self._handle)
        self._c_handle = c_void_p(self._handle)
        self.graph = graph
        # What the replays use, the only things launch() checks. Keyed by handles of self.graph's nodes (ints,
        # not Nodes: nothing here points into a graph's node table); values are KernelNode.in_use tuples.
        self._in_use: dict[int, tuple[Any, ...]] = graph.node_arguments()
        self._unpaired: list[tuple[Any, ...]] = []  # in use, but not known for which node (see update)
        self._kept: list[Any] = graph.kept  # live: what that graph is given later is used (and checked) too
        self._generation = -1  # closes when the arguments were last known to be open

    @property
    def handle(self) -> int:
        self.check_open()
        return self._handle

    def launch(self, stream: Stream | None = None) -> None:
        """Queue one replay of the whole graph on ``stream`` (the legacy default stream for None)."""
        if self._closed:  # (the hot path: a method call only when it will raise)
            self.check_open()
        if self._generation != closes.generation:
            self._check_arguments_open()
            self._generation = closes.generation
        h_stream = stream_handle(stream, self.context)
        ctx = self.context
        ctx.activate()
        call = (self._c_handle, c_void_p(h_stream))
        rc = _graph_launch.call(*call)
        if rc:
            checked.raise_for(rc, "cuGraphLaunch", call)
        if SYNC_LAUNCHES:
            ctx.synchronize()

    def upload(self, stream: Stream | None = None) -> None:
        """Copy the graph's launch data to the GPU now, so the first ``launch`` is as cheap as the later ones."""
        self.check_open()
        self.context.activate()
        cu.cuGraphUpload(self._handle, stream_handle(stream, self.context))

    def kernel_nodes(self) -> list[KernelNode]:
        """The kernel nodes of the graph this was made from, in dependency order (see Graph.kernel_nodes)."""
        return self.graph.kernel_nodes()

    def set_kernel_args(self, node: KernelNode, *args: Any) -> None:
        """Replace one kernel node's arguments in this executable graph (future launches only).

        ``node`` is a node of the graph this was instantiated from. The grid, block and shared memory
        stay; the arguments are checked against the kernel's signature like a launch's.
        """
        self.check_open()
        if not isinstance(node, KernelNode) or not node.belongs_to(self.graph):
            raise ValueError(
                f"{node!r} is not a kernel node of {self.graph!r}, the graph this was instantiated "
                "from (take it from exec.kernel_nodes())"
            )
        fn = node.require_function()
        packed = fn.pack(args)
        params = kernel_node_params(fn, node.config, packed)
        self.context.activate()
        cu.cuGraphExecKernelNodeSetParams(self._handle, node.handle, byref(params))
        # The node's old arguments are not used any more: replaced, so no longer held nor checked.
        self._in_use[node.handle] = (fn, args, packed)
        self._generation = -1

    def update(self, graph: Graph) -> None:
        """Take every node's parameters from ``graph``, which must have the same shape (cuGraphExecUpdate).

        Cheaper than instantiating ``graph``. Raises :class:`GraphError` naming the driver's reason when the
        graphs differ in more than parameters (the executable graph is then unchanged).
        """
        self.check_open()
        graph_handle(graph)
        source = graph.handle
        if graph.context.raw_handle != self.context.raw_handle:
            raise ValueError(f"{graph!r} belongs to another context than {self!r}")
        # Worked out before the update: once the driver has switched to the new parameters, a failure here
        # would leave a record of the old ones, and the new buffers unchecked.
        in_use, unpaired = self._paired_with(graph)
        info = CUgraphExecUpdateResultInfo()
        self.context.activate()
        try:
            cu.cuGraphExecUpdate(self._handle, source, byref(info))
        except CudaError as exc:
            if info.result == GraphExecUpdateResult.SUCCESS:
                raise
            raise _update_error(exc, info, graph) from None
        # Every node has the new graph's parameters now: what the old ones used is not used any more (what
        # both use is in the new record). Not `graph` itself: the driver copied what it needs.
        self._in_use, self._unpaired, self._kept = in_use, unpaired, graph.kept
        self._generation = -1

    def _paired_with(self, graph: Graph) -> tuple[dict[int, tuple[Any, ...]], list[tuple[Any, ...]]]:
        """What ``graph``'s kernel nodes use, keyed by the node of ``self.graph`` each was paired with -- or,
        when rawcuda cannot know the driver's pairing, as a list for no node in particular."""
        arguments = graph.node_arguments()
        if graph is self.graph:
            return arguments, []
        mine = None if self.graph.closed else self.graph.sole_order()
        theirs = graph.sole_order()
        if mine is None or theirs is None or len(mine) != len(theirs):
            return {}, list(arguments.values())
        # Both have one order, and the update kept every dependency: node i was paired with node i.
        paired = {new.handle: old.handle for old, new in zip(mine, theirs, strict=True)}
        return {paired[handle]: used for handle, used in arguments.items()}, []

    def _check_arguments_open(self) -> None:
        """Refuse to replay a graph whose buffers (or kernels) were closed: the GPU would use freed memory."""
        pending: list[Any] = [list(self._kept), *self._in_use.values(), *self._unpaired]
        while pending:  # what is in use nests: (function, args, packed) tuples inside lists
            item = pending.pop()
            if isinstance(item, tuple | list):
                pending.extend(item)
            elif isinstance(item, (DeviceBuffer, Function, *MEMORY_VIEWS)) and item.closed:  # (a GrowableBuffer too)
                raise ClosedError(
                    f"{item!r} was closed, but {self!r} still uses it: replaying would touch freed "
                    "memory; give the graph new arguments (set_kernel_args / update) first"
                )

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<GraphExec {self._handle:#x} of {self.graph!r}{state}>"


def graph_handle(graph: Any) -> int:
    """``graph.handle``, or a TypeError for anything but a Graph (which imports this file, hence the duck test)."""
    if not callable(getattr(graph, "node_arguments", None)):
        raise TypeError(
            f"an executable graph is made from a rawcuda Graph (rawcuda.capture(stream) or Graph()), not "
            f"{type(graph).__name__} {graph!r}"
        )
    return int(graph.handle)


def _update_error(exc: CudaError, info: CUgraphExecUpdateResultInfo, graph: Graph) -> GraphError:
    try:
        result: GraphExecUpdateResult | int = GraphExecUpdateResult(info.result)
        reason = f"CU_GRAPH_EXEC_UPDATE_{result.name}: {UPDATE_REASONS[result]}"
    except ValueError:
        reason = f"CUgraphExecUpdateResult {info.result} (unknown to rawcuda's table)"
    details = [f"reason: {reason}"]
    for label, handle in (("at node", info.errorNode), ("dependency", info.errorFromNode)):
        if handle:
            details.append(f"{label}: {_describe_node(graph, handle)}")
    return GraphError(
        exc.code,
        call=exc.call,
        symbol=exc.symbol,
        arguments=exc.arguments,
        description=exc.description,
        details=[*exc.details, *details],
    )


def _describe_node(graph: Graph, handle: int) -> str:
    try:
        return repr(graph.node(handle))
    except CudaError:
        return f"{handle:#x}"


__all__ = ["UPDATE_REASONS", "GraphExec"]
