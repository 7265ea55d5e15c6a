"""CUDA graphs without a driver (CPU only): rawcuda.graphs.graph and the two files behind it (graphexec, kernelnode).

The modules import without a driver; the node-type table matches cuda.h; every GraphExecUpdateResult has an
explanation; node ordering (and when it is the only one); decoding a kernel node's argument bytes; who holds
whom -- a node its graph only weakly, a graph being captured its stream only weakly, a closed graph nothing --
on stand-in objects that never reach a driver. Capture is in test_streamcapture.py; on a GPU, the lifetimes
are in tests/gpu/test_graph_lifetimes.py.
"""

from __future__ import annotations

import gc
import os
import struct
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rawcuda.checked.errors import ClosedError
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.kernelargs import MEMORY_VIEWS
from rawcuda.core.paramspec import ParamSpec
from rawcuda.core.resource import Resource
from rawcuda.core.stream import Stream
from rawcuda.ffi.constants import GraphExecUpdateResult, GraphNodeType
from rawcuda.graphs import graph, graphexec, kernelnode
from rawcuda.tools import cheader, headercheck
from tests.helpers import run_python

HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"


def test_modules_import_without_a_driver() -> None:
    code = (
        "import rawcuda.graphs.graph, rawcuda.extras.aio\n"
        "from rawcuda.ffi import library\n"
        "print('loaded:', library.LIBCUDA.loaded())\n"
    )
    proc = run_python(code, RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "loaded: None"


@pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER}")
def test_node_types_match_cuda_h() -> None:
    header = cheader.parse(str(HEADER))
    enums = {GraphNodeType: ("CUgraphNodeType", "CU_GRAPH_NODE_TYPE_")}
    assert headercheck.check_constants(header, enums=enums, defines={}) == []
    names = {"CU_GRAPH_NODE_TYPE_" + name for name in GraphNodeType.__members__}
    assert set(header.enum_of("CUgraphNodeType") or {}) == names  # complete: a new node type shows up here


def test_every_update_result_is_explained() -> None:
    assert set(graphexec.UPDATE_REASONS) == set(GraphExecUpdateResult)
    assert all(len(text) > 15 for text in graphexec.UPDATE_REASONS.values())


def test_topological_order() -> None:
    assert graph.topological_order([3, 2, 1], [(1, 2), (2, 3)]) == [1, 2, 3]  # a chain listed backwards
    assert graph.topological_order([5, 6, 7], []) == [5, 6, 7]  # no edges: the listing order
    diamond = graph.topological_order([40, 30, 20, 10], [(10, 20), (10, 30), (20, 40), (30, 40)])
    assert diamond == [10, 30, 20, 40]  # 30 and 20 are both ready after 10: listing order breaks the tie
    with pytest.raises(ValueError, match="cycle"):
        graph.topological_order([1, 2], [(1, 2), (2, 1)])


def test_decode_arg() -> None:
    address = 0x7F12_3456_7800
    assert kernelnode.decode_arg(address.to_bytes(8, "little"), ParamSpec("int", 8, "u64")) == address
    assert kernelnode.decode_arg((-5).to_bytes(4, "little", signed=True), ParamSpec("int", 4, "s32")) == -5
    assert kernelnode.decode_arg((2**32 - 5).to_bytes(4, "little"), ParamSpec("int", 4, "u32")) == 2**32 - 5
    assert kernelnode.decode_arg(struct.pack("<f", 1.5), ParamSpec("float", 4, "f32")) == 1.5
    assert kernelnode.decode_arg(struct.pack("<d", -0.25), ParamSpec("float", 8, "f64")) == -0.25
    assert kernelnode.decode_arg(b"\x01\x02\x03", ParamSpec("bytes", 3, "b8[3]")) == b"\x01\x02\x03"


def test_is_only_order() -> None:
    assert graph.is_only_order([1, 2, 3], [(1, 2), (2, 3)])  # a chain: one stream's capture
    assert graph.is_only_order([1, 2, 3], [(1, 2), (2, 3), (1, 3)])  # a shortcut edge does not add an order
    assert not graph.is_only_order([1, 2, 3], [(1, 2), (1, 3)])  # a fork: 2 and 3 could swap
    assert not graph.is_only_order([1, 2], [])  # two roots
    assert graph.is_only_order([7], []) and graph.is_only_order([], [])


# --- who holds whom (stand-ins: nothing here reaches a driver) ------------------------------------------------
class StandInContext:
    """Just enough of a Context for graphs that never call the driver: not usable, so a finalizer leaks."""

    usable = False
    raw_handle = 0

    def adopt(self, child: Any) -> None:
        pass

    def forget(self, child: Any) -> None:
        pass


def stand_in_stream() -> Stream:
    stream = Stream.__new__(Stream)
    stream.context = StandInContext()  # type: ignore[assignment]
    stream._closed = False
    stream._handle = 0x1234
    return stream


def stand_in_graph(handle: int = 0x5678) -> graph.Graph:
    """A Graph that owns a made-up handle: what a capture hands over, without a driver."""
    made = graph.Graph.for_capture(stand_in_stream())
    made.receive_capture(handle)
    return made


@pytest.fixture
def cyclic_gc_off() -> Iterator[None]:
    """Only reference counting frees anything in the test: a cycle would keep its objects."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


def test_a_node_holds_its_graph_weakly_and_is_closed_once_it_is_gone(cyclic_gc_off: None) -> None:
    # The graph holds its nodes; a node held its graph: a cycle that kept both (and the buffers the graph held)
    # until the cyclic GC ran. A node works while its graph lives, and is a clear ClosedError after.
    owner = stand_in_graph()
    node = kernelnode.Node(owner, 0x42, GraphNodeType.EMPTY)
    assert node.graph is owner and node.belongs_to(owner) and node.handle == 0x42
    owner_ref = weakref.ref(owner)
    del owner
    assert owner_ref() is None, "the node kept its graph alive"
    with pytest.raises(ClosedError, match="garbage-collected"):
        node.handle  # noqa: B018 (the property is the test)
    with pytest.raises(ClosedError, match="garbage-collected"):
        node.graph  # noqa: B018
    assert not node.belongs_to(stand_in_graph())
    closed = stand_in_graph()
    other = kernelnode.Node(closed, 0x43, GraphNodeType.EMPTY)
    closed.close()
    with pytest.raises(ClosedError, match="closed"):
        other.handle  # noqa: B018


def test_a_graph_being_captured_holds_its_stream_weakly(cyclic_gc_off: None) -> None:
    # While a stream captures, it holds its graph (stream.capturing) and the graph held the stream: a cycle for
    # as long as a capture is left unfinished (an __enter__ without __exit__), which pinned all the graph kept.
    stream = stand_in_stream()
    captured = graph.Graph.for_capture(stream)
    stream.capturing = captured  # what Capture.__enter__ does
    assert captured.capture_stream is stream
    kept = np.ones(4)
    captured.keep_alive(kept)
    refs = [weakref.ref(obj) for obj in (stream, captured, kept)]
    del stream, captured, kept
    assert [ref() for ref in refs] == [None, None, None]


@pytest.mark.parametrize("ending", ["closed", "failed capture"])
def test_a_graph_that_can_no_longer_run_lets_go_of_what_it_kept(ending: str) -> None:
    # A closed graph (or a capture that failed) will never replay: it need not keep host memory or buffers.
    if ending == "closed":
        finished = stand_in_graph()
        finished.keep_alive(kept := np.ones(4))
        finished.close()
    else:
        finished = graph.Graph.for_capture(stand_in_stream())
        finished.keep_alive(kept := np.ones(4))
        finished.receive_capture(0)
    assert finished.closed and finished.held == ()
    kept_ref = weakref.ref(kept)
    del kept
    assert kept_ref() is None


class _Closed:
    """A closed object of ``kind``, made without a driver: what a replay's check reads is ``closed`` and repr."""

    @staticmethod
    def of(kind: type) -> Any:
        item = kind.__new__(kind)
        item._closed = True
        return item


class _OtherMemory(Resource):
    def __repr__(self) -> str:
        return "<other memory>"


class _SomethingElse(Resource):
    def __repr__(self) -> str:
        return "<a stream, an event, a pinned buffer ...>"


def test_a_replay_refuses_what_it_refused_before_and_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    # A replay checks the device memory and the kernels its graph uses: a DeviceBuffer, memory registered for
    # launches (a GrowableBuffer, through core's table) and a Function. Other objects kept alive with the graph
    # (a stream, an event, a pinned buffer) were never checked, and still are not.
    monkeypatch.setitem(MEMORY_VIEWS, _OtherMemory, lambda memory: None)
    buffer = _Closed.of(DeviceBuffer)
    buffer.shape, buffer.dtype, buffer._ptr, buffer._base = (4,), np.dtype(np.float32), 0x1000, None

    def replay_of(*kept: Any) -> Any:
        replay = graphexec.GraphExec.__new__(graphexec.GraphExec)
        replay._closed, replay._handle, replay.graph = False, 0x2000, "<graph>"
        replay._kept, replay._in_use, replay._unpaired = list(kept), {}, []
        return replay

    for refused in (buffer, _Closed.of(_OtherMemory)):
        with pytest.raises(ClosedError, match="replaying would touch freed memory"):
            replay_of((1, [refused]))._check_arguments_open()
    replay_of(_Closed.of(_SomethingElse))._check_arguments_open()  # not refused
