"""CUDA graphs without a driver (CPU only): rawcuda.graph and the two files behind it, graphexec.py and kernelnode.py.

The modules import without a driver; the node-type table matches cuda.h; every GraphExecUpdateResult has an
explanation; node ordering (and when it is the only one); decoding a kernel node's argument bytes. Capture is
in test_streamcapture.py; on a GPU, the lifetimes are in tests/gpu/test_graph_lifetimes.py.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from rawcuda import graph, graphexec, kernelnode
from rawcuda.ffi.constants import GraphExecUpdateResult, GraphNodeType
from rawcuda.kernelargs import ParamSpec
from rawcuda.tools import cheader, headercheck
from tests.helpers import run_python

HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"


def test_modules_import_without_a_driver() -> None:
    code = (
        "import rawcuda.graph, rawcuda.aio\n"
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
