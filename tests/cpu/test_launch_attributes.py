"""Launch attributes (rawcuda/core/launchattrs.py) without a GPU: what a launch with options passes, and refuses.

The pure checks are called directly. The launches run in a child interpreter over bench/fake/fakelaunch.c,
a libcuda look-alike that answers as an H200 does (compute capability 9.0, 132 SMs, clusters up to 16 blocks)
and keeps the ``CUlaunchConfig`` of its last ``cuLaunchKernelEx``: the test reads the attributes back through
it, byte for byte as cuda.h lays them out. The GPU tests launch the same options on the H200.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rawcuda.core import launchattrs
from rawcuda.core.launchconfig import launch_config
from rawcuda.core.ptx import parse
from rawcuda.ffi.constants import LaunchAttributeID
from tests.helpers import CHILD_REFUSED, over_fake_launch

CLUSTERED_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry clustered(.param .u64 p)
.reqnctapercluster 2, 1, 1
{
    ret;
}
"""


# --- the options and the attribute array -----------------------------------------------------------------------
def test_options_are_checked_for_their_own_sake() -> None:
    options = launchattrs.launch_options(cluster=(2, 2), cooperative=np.bool_(True))
    assert options == launchattrs.LaunchOptions((2, 2, 1), True, False) and options.cluster_blocks == 4
    assert launchattrs.launch_options() == launchattrs.NO_OPTIONS and not launchattrs.NO_OPTIONS.any
    with pytest.raises(TypeError, match="cooperative must be True or False, got 1"):
        launchattrs.launch_options(cooperative=1)
    with pytest.raises(TypeError, match="programmatic must be True or False"):
        launchattrs.launch_options(programmatic="yes")
    with pytest.raises(TypeError, match="cluster must be an int or a tuple of 1 to 3 ints"):
        launchattrs.launch_options(cluster=(2, 1, 1, 1))
    with pytest.raises(ValueError, match="every cluster dimension must be >= 1"):
        launchattrs.launch_options(cluster=(0, 1))


def test_the_attribute_array_is_what_cuda_h_lays_out() -> None:
    array = launchattrs.attribute_array(launchattrs.LaunchOptions((4, 2, 1), True, True))
    assert [row.id for row in array] == [
        LaunchAttributeID.CLUSTER_DIMENSION,
        LaunchAttributeID.COOPERATIVE,
        LaunchAttributeID.PROGRAMMATIC_STREAM_SERIALIZATION,
    ]
    dim = array[0].value.clusterDim
    assert (dim.x, dim.y, dim.z) == (4, 2, 1)
    assert array[1].value.cooperative == 1 and array[2].value.programmaticStreamSerializationAllowed == 1
    cfg = launch_config((8, 2, 1, 128, 1, 1, 0), None, array)
    assert cfg.numAttrs == 3 and cfg.attrs[0].value.clusterDim.x == 4 and cfg.kept_attrs is array
    plain = launch_config((8, 2, 1, 128, 1, 1, 0), None)
    assert plain.numAttrs == 0 and not plain.attrs


def test_each_refusal_names_the_limit_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"grid dimension x = 10 is not a multiple of the cluster's 4 .* grid of 12"):
        launchattrs.check_cluster_grid("k", (10, 1, 1), (4, 1, 1))
    launchattrs.check_cluster_grid("k", (12, 3, 1), (4, 3, 1))
    with pytest.raises(ValueError, match=r"compiled with __cluster_dims__\(2, 1, 1\) .* not \(4, 1, 1\)"):
        launchattrs.check_compiled_cluster("k", (2, 1, 1), (4, 1, 1))
    launchattrs.check_compiled_cluster("k", None, (4, 1, 1))
    with pytest.raises(ValueError, match=r"all 2000 blocks resident at once, and at most 1056 fit \(8 per SM x 132"):
        launchattrs.check_cooperative("k", 2000, 8, 132)
    launchattrs.check_cooperative("k", 1056, 8, 132)
    with pytest.raises(ValueError, match=r"needs compute capability 9\.0 or newer; 'k' runs on a 8\.0 GPU"):
        launchattrs.check_capability("k", "a cluster launch", (8, 0), (9, 0))
    with pytest.raises(ValueError, match=r"32 blocks\) cannot be resident .* largest cluster .* is 16 blocks"):
        launchattrs.check_clusters_fit("k", (32, 1, 1), 0, 16)


def test_a_kernel_compiled_with_cluster_dims_is_read_from_its_ptx() -> None:
    entry = parse(CLUSTERED_PTX.encode()).entries["clustered"]
    assert launchattrs.compiled_cluster(entry) == (2, 1, 1)
    assert launchattrs.compiled_cluster(None) is None


def test_a_kernel_that_syncs_its_grid_is_read_from_its_ptx() -> None:
    """cooperative_groups' grid.sync() reads the grid workspace from %envreg1/2; nothing else here does."""
    import rawcuda.kernels

    entries = parse(rawcuda.kernels.ptx_path("grid_reduce").read_bytes()).entries
    assert entries["grid_sum"].grid_workspace and not entries["warp_reduce_sum"].grid_workspace
    assert not parse(CLUSTERED_PTX.encode()).entries["clustered"].grid_workspace
    with pytest.raises(ValueError, match=r"'k' synchronizes its whole grid .* k\.options\(cooperative=True\)"):
        launchattrs.check_grid_sync("k", True, launchattrs.NO_OPTIONS)
    launchattrs.check_grid_sync("k", True, launchattrs.LaunchOptions(cooperative=True))
    launchattrs.check_grid_sync("k", False, launchattrs.NO_OPTIONS)


# --- launches over the fake driver ----------------------------------------------------------------------------------
SCRIPT = (
    CHILD_REFUSED
    + r"""
import ctypes, json, sys
import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.ffi.types import CUlaunchConfig

fake = ctypes.CDLL(sys.argv[1])
fake.fakelaunch_last_config.restype = ctypes.c_void_p
fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
a = DeviceBuffer.zeros(1024)

def attrs():
    cfg = ctypes.cast(fake.fakelaunch_last_config(), ctypes.POINTER(CUlaunchConfig)).contents
    rows = [cfg.attrs[i] for i in range(cfg.numAttrs)]
    return {"grid": [cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ],
            "ids": [r.id for r in rows],
            "cluster": [[r.value.clusterDim.x, r.value.clusterDim.y, r.value.clusterDim.z] for r in rows if r.id == 4],
            "cooperative": [r.value.cooperative for r in rows if r.id == 2],
            "programmatic": [r.value.programmaticStreamSerializationAllowed for r in rows if r.id == 6]}


out = {}
fn.launch(8, 256, a, a, a, 0)
out["plain"] = attrs()
dep = Module(rawcuda.kernels.ptx_path("dependent_launch")).function("add_one")  # it waits: griddepcontrol.wait
clustered = dep.options(cluster=(2, 1, 1), programmatic=True)
clustered.launch(8, 256, a, a, 0)
out["clustered"] = attrs()
clustered.bind(16, 256, a, a, 0)()
out["bound"] = attrs()
out["no_wait"] = refused(lambda: fn.options(programmatic=True).launch(8, 256, a, a, a, 0))
out["same_twin"] = fn.options(cluster=2) is fn.options(cluster=(2, 1, 1)) and fn.options() is fn
added = dep.options(cluster=2).options(programmatic=True)
out["added"] = [list(added.launch_options.cluster), added.launch_options.programmatic, added is clustered]
out["bool_cluster"] = refused(lambda: fn.options(cluster=True))
out["seventeen"] = refused(lambda: fn.options(cluster=17).launch(34, 128, a, a, a, 0))
big = fn.options(cluster=16)
big.launch(32, 128, a, a, a, 0)
out["sixteen"] = attrs()
coop = fn.options(cooperative=True)  # kept: the fake reads its CUlaunchConfig after the launch
coop.launch(1056, 256, a, a, a, 0)
out["cooperative"] = attrs()
out["odd_grid"] = refused(lambda: clustered.launch(9, 256, a, a, 0))
out["too_big"] = refused(lambda: fn.options(cluster=32).launch(64, 128, a, a, a, 0))
out["not_resident"] = refused(lambda: fn.options(cooperative=True).launch(1057, 256, a, a, a, 0))
out["positional"] = refused(lambda: fn.options((2, 1, 1)))
grid_sum = Module(rawcuda.kernels.ptx_path("grid_reduce")).function("grid_sum")
out["grid_sync_plain"] = refused(lambda: grid_sum.launch(4, 256, a, a, a, 1024, shared_mem=32))
out["grid_sync_bound"] = refused(lambda: grid_sum.bind(4, 256, a, a, a, 1024, shared_mem=32))
grid_coop = grid_sum.options(cooperative=True)
grid_coop.launch(4, 256, a, a, a, 1024, shared_mem=32)
out["grid_sync_cooperative"] = attrs()
fn.launch(8, 256, a, a, a, 0)
out["plain_again"] = attrs()
print(json.dumps(out))
"""
)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_launches_with_options_pass_their_attributes_and_plain_launches_none(tmp_path: Path) -> None:
    out = over_fake_launch(SCRIPT, tmp_path)
    assert out["plain"]["ids"] == [] and out["plain_again"]["ids"] == []  # no options: exactly the plain launch
    assert out["clustered"] == {
        "grid": [8, 1, 1],
        "ids": [4, 6],
        "cluster": [[2, 1, 1]],
        "cooperative": [],
        "programmatic": [1],
    }
    assert out["bound"]["grid"] == [16, 1, 1] and out["bound"]["ids"] == [4, 6]  # bind prepares the same way
    assert out["sixteen"]["cluster"] == [[16, 1, 1]]  # past the portable 8: the launch opted the kernel in
    assert out["cooperative"]["ids"] == [2] and out["cooperative"]["cooperative"] == [1]
    assert "grid dimension x = 9 is not a multiple of the cluster's 2" in out["odd_grid"]
    assert "largest cluster this kernel can launch with is 16 blocks" in out["too_big"]
    assert "all 1057 blocks resident at once, and at most 1056 fit" in out["not_resident"]
    for refused in out["grid_sync_plain"], out["grid_sync_bound"]:  # a plain grid.sync() would trap the context
        assert "synchronizes its whole grid" in refused and "options(cooperative=True)" in refused
    assert out["grid_sync_cooperative"]["ids"] == [2]
    assert "never waits for it (no griddepcontrol.wait" in out["no_wait"]  # it would read its input early
    assert out["same_twin"] is True  # one twin per set of options: an inline options().launch() is cached
    assert out["added"] == [[2, 1, 1], True, True]  # a twin's options() adds to its options
    assert out["bool_cluster"].startswith("TypeError: cluster takes blocks per cluster")
    assert "largest cluster this kernel can launch with is 16 blocks" in out["seventeen"]
    assert out["positional"].startswith("TypeError")  # options are keywords: a tuple cannot land in cluster by position


# --- explicit graph kernel nodes over the fake driver ---------------------------------------------------------------
GRAPH_SCRIPT = r"""
import ctypes, json, sys
import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.graphs.graph import Graph

fake = ctypes.CDLL(sys.argv[1])
fake.fakelaunch_node_attr_value.restype = ctypes.c_void_p

def node_attrs():
    rows = []
    for i in range(fake.fakelaunch_node_attr_count()):
        value = (ctypes.c_uint * 3).from_address(fake.fakelaunch_node_attr_value(i))
        rows.append([fake.fakelaunch_node_attr_id(i), list(value)])
    return rows

def refused(call):
    before = fake.fakelaunch_kernel_nodes()
    try:
        call()
    except (ValueError, TypeError) as exc:
        return [f"{type(exc).__name__}: {exc}", fake.fakelaunch_kernel_nodes() - before]
    return None

fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
dep = Module(rawcuda.kernels.ptx_path("dependent_launch")).function("add_one")
a = DeviceBuffer.zeros(1024)
g = Graph()
out = {}
g.add_kernel(fn, 8, 256, a, a, a, 0)
out["plain"] = node_attrs()
g.add_kernel(fn.options(cluster=(2, 1, 1)), 8, 256, a, a, a, 0)
out["cluster"] = node_attrs()
g.add_kernel(fn.options(cluster=16), 32, 128, a, a, a, 0)
out["sixteen"] = node_attrs()
g.add_kernel(fn.options(cooperative=True), 1056, 256, a, a, a, 0)
out["cooperative"] = node_attrs()
out["odd_grid"] = refused(lambda: g.add_kernel(fn.options(cluster=2), 9, 256, a, a, a, 0))
out["not_resident"] = refused(lambda: g.add_kernel(fn.options(cooperative=True), 1057, 256, a, a, a, 0))
out["programmatic"] = refused(lambda: g.add_kernel(dep.options(programmatic=True), 8, 256, a, a, 0))
grid_sum = Module(rawcuda.kernels.ptx_path("grid_reduce")).function("grid_sum")
out["grid_sync_plain"] = refused(lambda: g.add_kernel(grid_sum, 4, 256, a, a, a, 1024, shared_mem=32))
print(json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_graph_kernel_nodes_take_the_options_a_launch_takes_checked_alike(tmp_path: Path) -> None:
    out = over_fake_launch(GRAPH_SCRIPT, tmp_path)
    cluster, cooperative = LaunchAttributeID.CLUSTER_DIMENSION, LaunchAttributeID.COOPERATIVE
    assert out["plain"] == []  # no options: the node is exactly what it was
    assert out["cluster"] == [[cluster, [2, 1, 1]]]
    assert out["sixteen"] == [[cluster, [16, 1, 1]]]  # past the portable 8, opted in as a launch is
    assert out["cooperative"] == [[cooperative, [1, 0, 0]]]
    # Each refusal is the launch's own message, and no node was added for it.
    assert "grid dimension x = 9 is not a multiple of the cluster's 2" in out["odd_grid"][0] and out["odd_grid"][1] == 0
    assert "all 1057 blocks resident at once" in out["not_resident"][0] and out["not_resident"][1] == 0
    assert "CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC" in out["programmatic"][0] and out["programmatic"][1] == 0
    assert "capture the launches instead" in out["programmatic"][0]
    # A kernel that syncs its grid is refused as a node too: replayed without the attribute, it would trap.
    assert "synchronizes its whole grid" in out["grid_sync_plain"][0] and out["grid_sync_plain"][1] == 0
