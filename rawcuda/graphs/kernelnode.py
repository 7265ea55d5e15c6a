"""Graphs: the nodes of a CUDA graph -- above all kernel nodes, a launch frozen with its argument values.

A :class:`Node` is a handle inside a :class:`~rawcuda.graphs.graph.Graph`, valid while the graph is open. A
:class:`KernelNode` also knows what it runs: the function, grid, block, shared memory, and the argument
*values* the driver stored (``CUDA_KERNEL_NODE_PARAMS``: for a buffer, its device address). It can read
them back (:meth:`KernelNode.raw_args`, decoded by the kernel's signature) and change them in the graph
(:meth:`KernelNode.set_args`). :func:`kernel_node_params` builds the C struct from a packed launch; the
graph and the executable graph both use it.

Who holds whom: the graph holds its nodes (so that asking twice gives the same objects), and a kernel node
holds the arguments its launch uses (:attr:`KernelNode.in_use`) -- so the graph holds them through its
nodes. A node points back at its graph only *weakly*: a strong reference back would make a cycle, and the
graph, its nodes and every buffer they hold would wait for the cyclic garbage collector (with
``gc.disable()``, forever). So a node works while its graph is alive -- referenced by you, or by an
executable graph made from it -- and raises :class:`~rawcuda.checked.errors.ClosedError` once the graph is
closed or gone (its driver handle would name a destroyed graph).
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from collections.abc import Sequence
from ctypes import byref
from typing import TYPE_CHECKING, Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError
from rawcuda.core.context import Context
from rawcuda.core.function import Function
from rawcuda.core.kernelargs import Packed
from rawcuda.core.launchattrs import attributes_for
from rawcuda.core.launchconfig import LaunchConfig
from rawcuda.core.module import Module
from rawcuda.core.paramspec import ParamSpec
from rawcuda.ffi.constants import GraphNodeType, LaunchAttributeID
from rawcuda.ffi.types import CUDA_KERNEL_NODE_PARAMS, VOIDPP, CUlaunchAttributeValue

if TYPE_CHECKING:
    from .graph import Graph

_FLOAT_FORMATS = {4: "<f", 8: "<d"}  # little-endian IEEE float32 / float64, as the GPU stores them


class Node:
    """One node of a :class:`Graph` (valid while the graph is open, and alive: see the module docstring)."""

    def __init__(self, graph: Graph, handle: int, kind: GraphNodeType | int) -> None:
        # Weak: the graph holds its nodes, so a strong reference back would be a cycle (module docstring).
        self._graph = weakref.ref(graph)
        self._handle = handle
        self.kind = kind

    @property
    def graph(self) -> Graph:
        """The graph this node belongs to; ClosedError once nothing holds that graph any more."""
        graph = self._graph()
        if graph is None:
            raise ClosedError(
                f"{self!r} belongs to a graph that was garbage-collected (nothing referenced it any more), "
                "so its driver handle is gone: keep the Graph, or a GraphExec made from it, while you use its nodes"
            )
        return graph

    def belongs_to(self, graph: Graph) -> bool:
        """True when this node is a node of ``graph`` (False, not an error, when its own graph is gone)."""
        return self._graph() is graph

    @property
    def handle(self) -> int:
        """The CUgraphNode (checks that its graph is still alive and open)."""
        self.graph.check_open()
        return self._handle

    def __repr__(self) -> str:
        kind = self.kind.name if isinstance(self.kind, GraphNodeType) else f"type {self.kind}"
        return f"<Node {kind} {self._handle:#x}>"


class KernelNode(Node):
    """A kernel launch frozen into a graph: function, grid, block, shared memory and argument values.

    ``function`` is the rawcuda :class:`~rawcuda.core.function.Function` it runs when rawcuda can find it (the
    kernel was launched through a rawcuda Function of a module that is still open), else None. ``args`` is
    the Python arguments for nodes made by ``add_kernel`` or given by :meth:`set_args` (None for captured
    nodes: rawcuda did not see them), and ``packed`` the packed block they were written into; :meth:`raw_args`
    reads the values the node really holds.
    """

    def __init__(
        self, graph: Graph, handle: int, function_handle: int, config: Sequence[int], function: Function | None
    ) -> None:
        super().__init__(graph, handle, GraphNodeType.KERNEL)
        self.function_handle = function_handle
        self.function = function
        self.grid = tuple(config[0:3])
        self.block = tuple(config[3:6])
        self.shared_mem = config[6]
        self.args: tuple[Any, ...] | None = None
        self.packed: Packed | None = None

    @property
    def in_use(self) -> tuple[Any, ...]:
        """What every launch of this node uses, as far as rawcuda knows: ``(function, args, packed)`` for
        arguments rawcuda packed (``add_kernel``, :meth:`set_args`), ``()`` for a captured node. The graph
        holds it (through this node), and an executable graph takes a copy of it when it takes the node's
        parameters; a replay refuses to run once something in it was closed."""
        if self.args is None:
            return ()
        return (self.function, self.args, self.packed)

    @property
    def config(self) -> LaunchConfig:
        """(grid x, y, z, block x, y, z, shared memory): what a node's launch parameters hold besides arguments."""
        return (*self.grid, *self.block, self.shared_mem)  # type: ignore[return-value]

    @classmethod
    def from_driver(cls, graph: Graph, handle: int) -> KernelNode:
        """The node as the driver describes it (for nodes rawcuda did not add itself: captured ones)."""
        params = CUDA_KERNEL_NODE_PARAMS()
        cu.cuGraphKernelNodeGetParams(handle, byref(params))
        func = params.func or 0
        config = (
            params.gridDimX,
            params.gridDimY,
            params.gridDimZ,
            params.blockDimX,
            params.blockDimY,
            params.blockDimZ,
            params.sharedMemBytes,
        )
        return cls(graph, handle, func, config, find_function(graph.context, func))

    @property
    def name(self) -> str:
        return self.function.name if self.function is not None else f"<function {self.function_handle:#x}>"

    def require_function(self) -> Function:
        """The open Function this node runs; ValueError when rawcuda does not know it."""
        if self.function is None:
            raise ValueError(
                f"{self!r}: rawcuda does not know which Function this node runs (launched outside "
                "rawcuda, or its module was closed), so it cannot check or pack arguments for it"
            )
        self.function.check_open()
        return self.function

    def launch_attribute(self, which: LaunchAttributeID) -> CUlaunchAttributeValue:
        """The value the node carries for launch attribute ``which`` (``cuGraphKernelNodeGetAttribute``): for
        ``CLUSTER_DIMENSION`` read ``.clusterDim.x``, for ``COOPERATIVE`` ``.cooperative``. A node made without it
        reads as zeros; a captured launch's node carries what the launch passed."""
        value = CUlaunchAttributeValue()
        self.graph.context.activate()
        cu.cuGraphKernelNodeGetAttribute(self.handle, LaunchAttributeID(which), byref(value))
        return value

    def raw_args(self) -> tuple[Any, ...]:
        """The argument values stored in the node, decoded by the kernel's signature (a buffer is its address)."""
        fn = self.require_function()
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
        fn = self.require_function()
        packed = fn.pack(args)
        params = kernel_node_params(fn, self.config, packed)
        self.graph.context.activate()
        cu.cuGraphKernelNodeSetParams(self.handle, byref(params))
        # The old arguments are the graph's no longer (executables made before keep their own copy of them).
        self.args, self.packed = args, packed

    def __repr__(self) -> str:
        return f"<KernelNode {self.name} grid={self.grid} block={self.block} {self._handle:#x}>"


def kernel_node_params(fn: Function, config: LaunchConfig, packed: Packed) -> CUDA_KERNEL_NODE_PARAMS:
    """The full CUDA_KERNEL_NODE_PARAMS for a launch of ``fn``; kern and ctx stay NULL (current context)."""
    return CUDA_KERNEL_NODE_PARAMS(fn.handle, *config, ctypes.cast(packed.array, VOIDPP), None, None, None)


def node_attributes(fn: Function, config: LaunchConfig) -> Any:
    """The launch attributes of ``fn.launch_options`` (clusters, a cooperative grid) for a kernel node, checked
    against ``config`` and the GPU exactly as a launch checks them; None for a Function without options.

    A dependent launch is refused: in an explicit graph it is an edge, not an attribute of the node.
    The graph's context is current.
    """
    options = fn.launch_options
    if not options.any:
        return None
    if options.programmatic:
        raise ValueError(
            f"{fn.name!r} has programmatic=True: in an explicit graph a dependent launch is a kind of edge "
            "(CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC), not an attribute of the kernel node, and add_kernel makes "
            "plain edges; capture the launches instead (with capture(stream): fn.launch(...)): the capture turns "
            "each dependent launch into such an edge"
        )
    return attributes_for(fn, config, None)


def set_node_attributes(node: int, attrs: Any) -> None:
    """Give kernel node ``node`` the attributes :func:`node_attributes` made, one call each.

    Why one by one: CUDA_KERNEL_NODE_PARAMS has no room for attributes, so a node takes each as a
    CUlaunchAttributeValue, the value a launch's CUlaunchAttribute carries. If the driver refuses one, the node
    is destroyed: a node without its attributes would run another launch than the one asked for.
    """
    try:
        for row in attrs:
            cu.cuGraphKernelNodeSetAttribute(node, row.id, byref(row.value))
    except BaseException:
        cu.cuGraphDestroyNode(node)
        raise


def find_function(context: Context, handle: int) -> Function | None:
    """The rawcuda Function with driver handle ``handle`` among the open modules of ``context``, or None."""
    if not handle:
        return None
    for child in context.children:
        if isinstance(child, Module):
            for fn in child.loaded_functions():
                if fn.handle == handle:
                    return fn
    return None


def decode_arg(raw: bytes, spec: ParamSpec) -> Any:
    """One kernel argument's bytes as a Python value: ints (addresses included), floats, or the bytes."""
    if spec.kind == "float":
        return struct.unpack(_FLOAT_FORMATS[spec.size], raw)[0]
    if spec.kind in ("int", "word"):
        return int.from_bytes(raw, "little", signed=spec.ptx_type.startswith("s"))
    return raw


__all__ = [
    "KernelNode",
    "Node",
    "decode_arg",
    "find_function",
    "kernel_node_params",
    "node_attributes",
    "set_node_attributes",
]
