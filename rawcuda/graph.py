"""Layer 2: CUDA graphs -- record a sequence of GPU work once, then replay all of it with one call.

Why graphs? Every ``cuLaunchKernel`` costs the host a few microseconds (the seed article says 5-10 us;
bench/launch_overhead.py measures rawcuda's). A pipeline of many small kernels -- the seed's transformer
step of 10 matmuls and 5 element-wise kernels -- can spend longer *launching* than computing, and the GPU
idles between kernels while the host queues the next one. A graph hands the driver the whole sequence
at once: it validates and lays out every launch at ``instantiate()``, and each ``launch()`` afterwards
submits all of it in one call. cust has no wrapper for this (the seed falls back to hand-written FFI);
here it is a few context managers over the table rows in ``rawcuda/ffi/table/graph.py``.

Two ways to build a graph::

    with stream.capture() as graph:           # 1. capture: run your code, but record instead of executing
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
  one of them was closed. A *captured* graph holds the host arrays of the copies recorded into it (the
  stream hands them over), but it cannot see the buffers behind captured launches: keep those alive
  yourself (or hand them to ``graph.keep_alive(...)``).
* **Changing arguments without re-instantiating.** ``exec.set_kernel_args(node, *args)`` swaps one kernel
  node's arguments in the executable graph (``cuGraphExecKernelNodeSetParams``); ``exec.update(graph2)``
  takes every node's parameters from a graph of the same shape (``cuGraphExecUpdate``) and raises
  :class:`~rawcuda.errors.GraphError` naming the driver's reason when the shapes differ. Both are much
  cheaper than a new ``instantiate()``. The nodes of a captured graph, in launch order, come from
  ``graph.kernel_nodes()`` -- so "change the weights of the 3rd kernel" is
  ``exec.set_kernel_args(graph.kernel_nodes()[2], ...)``.

What capture forbids (and how rawcuda says so):

* **The legacy default stream.** It synchronizes implicitly with every blocking stream, so its work has no
  place in a graph; ``capture(None)`` is a ``ValueError`` before the driver is asked.
* **Anything that waits for the GPU or runs outside the stream.** While a stream captures, nothing has
  run yet, so waiting is meaningless: ``cuCtxSynchronize``, ``cuStreamSynchronize`` and synchronous
  ``cuMemcpy`` fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture. rawcuda's
  convenience calls *without* ``stream=`` (``buf.copy_from(a)``, ``buf.to_array()``, ``buf.fill(v)``, a
  launch on the legacy stream) synchronize the context or use the legacy stream -- inside a capture each
  raises :class:`~rawcuda.errors.StreamCaptureError`, to which this module adds what to do instead:
  pass ``stream=`` so the copy or launch is *recorded*. Copies to or from host memory inside a graph
  should use pinned memory (:class:`~rawcuda.hostmem.PinnedBuffer`): the graph touches it at every replay.
* **Loading code.** A first launch may load code: ``ops`` loads a module on first use, and CUDA's lazy
  loading loads each kernel at its first launch. That is host-side work a graph cannot hold, so run the
  work once before capturing it (tutorial 09 and the tests do) -- which is also how you know it works.
* **The mode.** ``THREAD_LOCAL`` (the default here) makes *this* thread's unsafe calls errors while it
  captures, and leaves other threads alone; ``GLOBAL`` also fails unsafe calls made by other threads;
  ``RELAXED`` refuses only what necessarily conflicts with capture (see cuThreadExchangeStreamCaptureMode).

If the body of ``with stream.capture()`` raises, the capture is ended, the partial graph destroyed, and
the original exception propagates unchanged (with the capture hint added when it is a capture error).
"""

from __future__ import annotations

import ctypes
import heapq
import struct
from collections.abc import Iterable, Sequence
from ctypes import byref, c_size_t, c_void_p
from types import TracebackType
from typing import Any

from .checked import cu
from .context import SYNC_LAUNCHES, Context, resolve
from .errors import ClosedError, CudaError, StreamCaptureError
from .ffi.constants import (
    STREAM_LEGACY,
    GraphInstantiateFlag,
    GraphNodeType,
    StreamCaptureMode,
    StreamCaptureStatus,
)
from .ffi.types import CUDA_KERNEL_NODE_PARAMS, VOIDPP, CUgraphNode
from .function import Function
from .launch import Packed, ParamSpec
from .module import Module
from .resource import Resource
from .stream import Stream

#: cuGraphCreate's flags argument: "Graph creation flags, must be 0" (cuda.h).
GRAPH_CREATE_FLAGS = 0





#: Added to every StreamCaptureError raised inside ``with stream.capture()``.
CAPTURE_HINT = (
    "inside `with stream.capture()`, queue everything on the capturing stream: rawcuda calls without "
    "stream= (buf.copy_from(a), buf.to_array(), buf.fill(v), ops.*(...), fn.launch(...)) synchronize the "
    "context or use the legacy default stream, which capture forbids -- pass stream=<the capturing stream> "
    "so the copy or launch is recorded, and read results after exec.launch(stream)"
)

LEGACY_STREAM_REFUSAL = (
    "stream capture needs a stream you created (rawcuda.Stream()): the legacy default stream (None / "
    "handle 0) cannot be captured -- it synchronizes implicitly with every blocking stream of the context, "
    "so its work has no place in a graph, and the driver refuses it"
)

_FLOAT_FORMATS = {4: "<f", 8: "<d"}  # little-endian IEEE float32 / float64, as the GPU stores them
_LEGACY_HANDLES = frozenset({0, STREAM_LEGACY})  # NULL and CU_STREAM_LEGACY both name the legacy stream

def _destroy_graph(handle: int) -> None:
    cu.cuGraphDestroy(handle)


# --- capture -------------------------------------------------------------------------------------------
def capture(stream: Stream, mode: StreamCaptureMode = StreamCaptureMode.THREAD_LOCAL) -> Capture:
    """``with capture(stream) as graph:`` -- the same as ``with stream.capture() as graph:``."""
    if stream is None or (isinstance(stream, int) and stream in _LEGACY_HANDLES):
        raise ValueError(LEGACY_STREAM_REFUSAL)
    if not isinstance(stream, Stream):
        raise TypeError(f"capture() takes a rawcuda.Stream, not {type(stream).__name__}")
    return Capture(stream, StreamCaptureMode(mode))


def capture_status(stream: Stream) -> StreamCaptureStatus:
    """Whether ``stream`` is capturing now: NONE, ACTIVE or INVALIDATED (cuStreamIsCapturing)."""
    stream.context.activate()
    status = ctypes.c_int()
    cu.cuStreamIsCapturing(stream.handle, byref(status))
    return StreamCaptureStatus(status.value)


class Capture:
    """The context manager behind ``stream.capture()``: begins capture on enter, ends it on exit.

    ``__enter__`` returns the :class:`Graph` that will hold the recorded work; it becomes usable when the
    ``with`` block ends without an exception.
    """

    def __init__(self, stream: Stream, mode: StreamCaptureMode) -> None:
        self.stream = stream
        self.mode = mode
        self.graph: Graph | None = None

    def __enter__(self) -> Graph:
        stream = self.stream
        stream._check_open()
        if stream._handle in _LEGACY_HANDLES:
            raise ValueError(LEGACY_STREAM_REFUSAL)
        if SYNC_LAUNCHES:
            raise RuntimeError("RAWCUDA_SYNC_LAUNCHES=1 synchronizes after every launch, which stream capture "
                               "forbids: unset it to capture graphs")
        if stream._capturing is not None:
            raise RuntimeError(f"{stream!r} is already capturing into {stream._capturing!r}: end that capture first")
        ctx = stream.context
        ctx.activate()
        graph = Graph._for_capture(ctx, stream)
        try:
            cu.cuStreamBeginCapture(stream._handle, int(self.mode))
        except BaseException:
            graph._discard()
            raise
        stream._capturing = graph
        self.graph = graph
        return graph

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        stream, graph = self.stream, self.graph
        if graph is None:
            raise RuntimeError("Capture.__exit__ without a successful __enter__")
        stream._capturing = None
        graph._capture_stream = None
        handle = c_void_p()
        try:
            stream.context.activate()
            cu.cuStreamEndCapture(stream._handle, byref(handle))
        except (CudaError, ClosedError) as end_error:  # invalidated by an illegal call; a poisoned/closed context
            _destroy_quietly(graph.context, handle.value or 0)
            graph._discard()
            if error is not None:
                _add_capture_hint(error)
                return  # the body's own exception is the one to see; the end error is its consequence
            raise _add_capture_hint(end_error) from None
        if error is not None:
            _destroy_quietly(graph.context, handle.value or 0)
            graph._discard()
            _add_capture_hint(error)
            return  # returning None re-raises the body's exception unchanged
        graph._take(handle.value or 0)


def _add_capture_hint(error: BaseException) -> BaseException:
    """Add :data:`CAPTURE_HINT` to a StreamCaptureError (same object, so `raise` keeps its traceback)."""
    if isinstance(error, StreamCaptureError) and CAPTURE_HINT not in error.details:
        error.details.append(CAPTURE_HINT)
        error.args = (error._message(),)
    return error


def _destroy_quietly(context: Context, handle: int) -> None:
    """Destroy a graph we are discarding; errors here must not hide the error that made us discard it."""
    if not handle:
        return
    try:
        context.activate()
        cu.cuGraphDestroy(handle)
    except CudaError:
        pass  # a poisoned context: the graph goes with the process


# --- graphs and nodes ----------------------------------------------------------------------------------
class Graph(Resource):
    """A CUDA graph: nodes (kernels, copies ...) and the dependencies between them. Not runnable itself:
    :meth:`instantiate` makes a :class:`GraphExec` that is.

    ``Graph(context=None)`` is an empty graph to add nodes to; ``stream.capture()`` makes one from work.
    """

    _close_rank = -20  # before modules (-10) and buffers (30): a graph refers to both

    def __init__(self, context: Context | None = None) -> None:
        ctx = resolve(context)
        ctx.activate()
        handle = c_void_p()
        cu.cuGraphCreate(byref(handle), GRAPH_CREATE_FLAGS)
        self._setup(ctx)
        self._take(handle.value or 0)

    @classmethod
    def _for_capture(cls, context: Context, stream: Stream) -> Graph:
        graph = cls.__new__(cls)
        graph._setup(context)
        graph._capture_stream = stream
        return graph

    def _setup(self, context: Context) -> None:
        Resource.__init__(self, context)
        self._handle = 0
        self._capture_stream: Stream | None = None
        self._nodes: dict[int, Node] = {}  # handle -> Node, so asking twice gives the same objects
        self._held: list[Any] = []  # arguments and host memory the recorded work uses at every replay

    def _take(self, handle: int) -> None:
        self._handle = handle
        self._own(_destroy_graph, handle)

    def _discard(self) -> None:
        """A capture that failed: nothing to destroy (the caller did), just closed from now on."""
        self._closed = True
        self.context._forget(self)

    @property
    def handle(self) -> int:
        return self._ready()

    def _ready(self) -> int:
        self._check_open()
        if self._capture_stream is not None:
            raise RuntimeError(f"{self!r} is still being captured: use it after the `with stream.capture()` block")
        return self._handle

    def keep_alive(self, *objects: Any) -> None:
        """Hold ``objects`` (buffers, host arrays) as long as this graph -- and executables made from it -- live."""
        self._held.extend(objects)

    # --- explicit nodes ----------------------------------------------------------------------------------
    def add_kernel(self, fn: Function, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any,
                   shared_mem: int = 0, depends_on: Iterable[Node] = ()) -> KernelNode:
        """A kernel node: ``fn<<<grid, block, shared_mem>>>(*args)`` after every node in ``depends_on``.

        Arguments are checked against the kernel's signature exactly as in ``fn.launch`` (before the driver
        sees them) and kept alive with the graph.
        """
        handle = self._ready()
        fn._check_open()
        if fn.context._handle != self.context._handle:
            raise ValueError(f"{fn!r} belongs to {fn.context!r}, the graph to {self.context!r}: use one context")
        config = fn._configure(grid, block, shared_mem)  # the checks of a launch: dimensions, shared memory
        packed = fn._packer.pack(args)
        deps = self._dependencies(depends_on)
        params = _node_params(fn, config, packed)
        node = c_void_p()
        self.context.activate()
        cu.cuGraphAddKernelNode(byref(node), handle, deps, len(deps), byref(params))
        self._held.append((fn, args, packed))
        kernel = KernelNode(self, node.value or 0, fn._handle, config, fn)
        kernel.args = args
        self._nodes[kernel._handle] = kernel
        return kernel

    def add_empty(self, depends_on: Iterable[Node] = ()) -> Node:
        """A node that does nothing: a join point (``depends_on`` many) or a fork point for later nodes."""
        handle = self._ready()
        deps = self._dependencies(depends_on)
        node = c_void_p()
        self.context.activate()
        cu.cuGraphAddEmptyNode(byref(node), handle, deps, len(deps))
        empty = Node(self, node.value or 0, GraphNodeType.EMPTY)
        self._nodes[empty._handle] = empty
        return empty

    def _dependencies(self, nodes: Iterable[Node]) -> Any:
        deps = list(nodes)
        for dep in deps:
            if not isinstance(dep, Node) or dep.graph is not self:
                raise ValueError(f"depends_on takes nodes of this graph; {dep!r} is not one")
        if len({d._handle for d in deps}) != len(deps):
            raise ValueError("depends_on lists a node twice (the driver refuses duplicate dependencies)")
        return (CUgraphNode * len(deps))(*[d._handle for d in deps])

    # --- reading a graph ------------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """Every node, in an order that respects the dependencies (for a capture: the order of the calls)."""
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
        if edges.value:
            cu.cuGraphGetEdges(handle, sources, targets, None, byref(edges))
        pairs = [(a or 0, b or 0) for a, b in zip(sources[: edges.value], targets[: edges.value], strict=True)]
        return [self._node(h) for h in topological_order(handles, pairs)]

    def kernel_nodes(self) -> list[KernelNode]:
        """The kernel nodes in dependency order: ``graph.kernel_nodes()[2]`` is the 3rd kernel launched."""
        return [n for n in self.nodes() if isinstance(n, KernelNode)]

    def _node(self, handle: int) -> Node:
        node = self._nodes.get(handle)
        if node is None:
            kind = ctypes.c_int()
            cu.cuGraphNodeGetType(handle, byref(kind))
            try:
                node_type: GraphNodeType | int = GraphNodeType(kind.value)
            except ValueError:  # a node type newer than this table: keep the number
                node_type = kind.value
            if node_type == GraphNodeType.KERNEL:
                node = KernelNode._from_driver(self, handle)
            else:
                node = Node(self, handle, node_type)
            self._nodes[handle] = node
        return node

    def instantiate(self, flags: GraphInstantiateFlag = GraphInstantiateFlag.NONE) -> GraphExec:
        """Validate and lay out the whole graph once (the expensive step); the result replays cheaply."""
        from .graphexec import GraphExec

        return GraphExec(self, flags)

    def __repr__(self) -> str:
        if self._capture_stream is not None:
            return f"<Graph capturing on {self._capture_stream!r}>"
        state = " closed" if self._closed else ""
        return f"<Graph {self._handle:#x}{state}>"


class Node:
    """One node of a :class:`Graph` (valid while the graph is open)."""

    def __init__(self, graph: Graph, handle: int, kind: GraphNodeType | int) -> None:
        self.graph = graph
        self._handle = handle
        self.kind = kind

    @property
    def handle(self) -> int:
        self.graph._check_open()
        return self._handle

    def __repr__(self) -> str:
        kind = self.kind.name if isinstance(self.kind, GraphNodeType) else f"type {self.kind}"
        return f"<Node {kind} {self._handle:#x}>"


class KernelNode(Node):
    """A kernel launch frozen into a graph: function, grid, block, shared memory and argument values.

    ``function`` is the rawcuda :class:`~rawcuda.function.Function` it runs when rawcuda can find it (the
    kernel was launched through a rawcuda Function of a module that is still open), else None. ``args`` is
    the Python arguments for nodes made by ``add_kernel`` (None for captured nodes: rawcuda did not see
    them); :meth:`raw_args` reads the values the node really holds.
    """

    def __init__(self, graph: Graph, handle: int, function_handle: int, config: Sequence[int],
                 function: Function | None) -> None:
        super().__init__(graph, handle, GraphNodeType.KERNEL)
        self.function_handle = function_handle
        self.function = function
        self.grid = tuple(config[0:3])
        self.block = tuple(config[3:6])
        self.shared_mem = config[6]
        self.args: tuple[Any, ...] | None = None

    @classmethod
    def _from_driver(cls, graph: Graph, handle: int) -> KernelNode:
        params = CUDA_KERNEL_NODE_PARAMS()
        cu.cuGraphKernelNodeGetParams(handle, byref(params))
        func = params.func or 0
        config = (params.gridDimX, params.gridDimY, params.gridDimZ, params.blockDimX, params.blockDimY,
                  params.blockDimZ, params.sharedMemBytes)
        return cls(graph, handle, func, config, find_function(graph.context, func))

    @property
    def name(self) -> str:
        return self.function.name if self.function is not None else f"<function {self.function_handle:#x}>"

    def _require_function(self) -> Function:
        if self.function is None:
            raise ValueError(f"{self!r}: rawcuda does not know which Function this node runs (launched outside "
                             "rawcuda, or its module was closed), so it cannot check or pack arguments for it")
        self.function._check_open()
        return self.function

    def raw_args(self) -> tuple[Any, ...]:
        """The argument values stored in the node, decoded by the kernel's signature (a buffer is its address)."""
        fn = self._require_function()
        params = CUDA_KERNEL_NODE_PARAMS()
        self.graph.context.activate()
        cu.cuGraphKernelNodeGetParams(self.handle, byref(params))
        if not params.kernelParams and fn.params:
            raise ValueError(f"{self!r} holds its arguments as one packed `extra` buffer, not as kernelParams")
        values = []
        for i, spec in enumerate(fn.params):
            address = params.kernelParams[i]  # points at argument i's bytes, owned by the node
            if not address:
                raise ValueError(f"{self!r}: the driver returned no value for argument {i}")
            values.append(decode_arg(ctypes.string_at(address, spec.size), spec))
        return tuple(values)

    def set_args(self, *args: Any) -> None:
        """New arguments for this node *in the graph* (later instantiations and ``exec.update(graph)`` see them;
        executables already made do not -- use ``exec.set_kernel_args`` for those)."""
        fn = self._require_function()
        packed = fn._packer.pack(args)
        params = _node_params(fn, (*self.grid, *self.block, self.shared_mem), packed)
        self.graph.context.activate()
        cu.cuGraphKernelNodeSetParams(self.handle, byref(params))
        self.graph._held.append((args, packed))
        self.args = args

    def __repr__(self) -> str:
        return f"<KernelNode {self.name} grid={self.grid} block={self.block} {self._handle:#x}>"


def _node_params(fn: Function, config: Sequence[int], packed: Packed) -> CUDA_KERNEL_NODE_PARAMS:
    """The full CUDA_KERNEL_NODE_PARAMS for a launch of ``fn``; kern and ctx stay NULL (current context)."""
    return CUDA_KERNEL_NODE_PARAMS(fn._handle, *config, ctypes.cast(packed[1], VOIDPP), None, None, None)


def find_function(context: Context, handle: int) -> Function | None:
    """The rawcuda Function with driver handle ``handle`` among the open modules of ``context``, or None."""
    if not handle:
        return None
    for child in context.children:
        if isinstance(child, Module):
            for fn in child._functions.values():
                if fn._handle == handle:
                    return fn
    return None


def decode_arg(raw: bytes, spec: ParamSpec) -> Any:
    """One kernel argument's bytes as a Python value: ints (addresses included), floats, or the bytes."""
    if spec.kind == "float":
        return struct.unpack(_FLOAT_FORMATS[spec.size], raw)[0]
    if spec.kind in ("int", "word"):
        return int.from_bytes(raw, "little", signed=spec.ptx_type.startswith("s"))
    return raw


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




__all__ = [
    "CAPTURE_HINT",
    "Capture",
    "Graph",
    "GraphNodeType",
    "KernelNode",
    "Node",
    "capture",
    "capture_status",
    "decode_arg",
    "find_function",
    "topological_order",
]


from .graphexec import GraphExec  # noqa: E402  (re-exported; graphexec imports this module)
