"""Launch attributes on the H200: clusters, cooperative grids and programmatic dependent launch, each checked.

Every kernel here (kernels/cluster_reduce.cu, grid_reduce.cu, dependent_launch.cu) reports what the GPU did:
where each block sat in its cluster, a sum exact against numpy, a chain of dependent launches that adds one
per launch. Refused configurations are refused before the driver sees them, leave their outputs untouched and
the context healthy.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Module, Stream
from rawcuda.core.context import default_context
from rawcuda.ffi.constants import LaunchAttributeID

pytestmark = pytest.mark.gpu

BLOCK = 256
WARP = 32
SHARED = BLOCK // WARP * 4  # one float per warp, as reduce.cu's kernels take
POISON = 0xDEADBEEF
HOPPER = (9, 0)


@pytest.fixture(scope="module", autouse=True)
def hopper() -> None:
    capability = default_context().device.compute_capability
    if capability < HOPPER:
        pytest.skip(f"clusters and dependent launch need compute capability 9.0; this GPU is {capability}")


def module(stem: str) -> Module:
    return Module(rawcuda.kernels.ptx_path(stem))


def small_integers(n: int, seed: int) -> np.ndarray:
    """Whole numbers in [-8, 8]: every partial sum stays far below 2^24, so float32 adds them exactly."""
    return np.random.default_rng(seed).integers(-8, 9, n).astype(np.float32)


def placements(fn: rawcuda.Function, grid: tuple[int, int, int], blocks: int) -> tuple[np.ndarray, np.ndarray]:
    rank, size = DeviceBuffer.zeros(blocks, np.uint32), DeviceBuffer.zeros(blocks, np.uint32)
    rank.fill(np.uint32(POISON))
    size.fill(np.uint32(POISON))
    fn.launch(grid, WARP, rank, size)
    return rank.to_array(), size.to_array()


def test_the_gpu_places_blocks_in_the_clusters_asked_for() -> None:
    ranks = module("cluster_reduce").function("cluster_ranks")
    rank, size = placements(ranks.options(cluster=4), (64, 1, 1), 64)
    np.testing.assert_array_equal(rank, np.arange(64) % 4)
    np.testing.assert_array_equal(size, np.full(64, 4))
    # A 2 x 2 cluster over a 4 x 6 grid: a block's rank is x + 2 y within its cluster.
    rank, size = placements(ranks.options(cluster=(2, 2)), (4, 6, 1), 24)
    x, y = np.meshgrid(np.arange(4), np.arange(6))
    np.testing.assert_array_equal(rank, ((x % 2) + 2 * (y % 2)).ravel())
    np.testing.assert_array_equal(size, np.full(24, 4))
    # 16 blocks is past the portable 8: the launch opts the kernel in, and the H200 takes it.
    rank, size = placements(ranks.options(cluster=16), (32, 1, 1), 32)
    np.testing.assert_array_equal(rank, np.arange(32) % 16)
    np.testing.assert_array_equal(size, np.full(32, 16))
    # Without the option, every block is a cluster of one.
    rank, size = placements(ranks, (8, 1, 1), 8)
    np.testing.assert_array_equal(rank, np.zeros(8))
    np.testing.assert_array_equal(size, np.ones(8))


def test_refused_cluster_launches_run_nothing_and_leave_the_context_healthy() -> None:
    ranks = module("cluster_reduce").function("cluster_ranks")
    rank, size = DeviceBuffer.zeros(64, np.uint32), DeviceBuffer.zeros(64, np.uint32)
    rank.fill(np.uint32(POISON))
    with pytest.raises(ValueError, match=r"grid dimension x = 9 is not a multiple of the cluster's 4"):
        ranks.options(cluster=4).launch(9, WARP, rank, size)
    with pytest.raises(ValueError, match=r"largest cluster this kernel can launch with is \d+ blocks"):
        ranks.options(cluster=32).launch(64, WARP, rank, size)
    default_context().synchronize()
    np.testing.assert_array_equal(rank.to_array(), np.full(64, POISON, np.uint32))
    rank_again, size_again = placements(ranks.options(cluster=2), (8, 1, 1), 8)
    np.testing.assert_array_equal(rank_again, np.arange(8) % 2)
    np.testing.assert_array_equal(size_again, np.full(8, 2))


def test_a_cluster_compiled_in_is_read_from_the_ptx() -> None:
    fixed = module("cluster_reduce").function("cluster_ranks_compiled")
    assert fixed.compiled_cluster == (2, 1, 1)
    rank, size = placements(fixed, (8, 1, 1), 8)  # no option: the compiled cluster applies
    np.testing.assert_array_equal(rank, np.arange(8) % 2)
    np.testing.assert_array_equal(size, np.full(8, 2))
    rank, size = placements(fixed.options(cluster=2), (8, 1, 1), 8)  # the same shape, said again: fine
    np.testing.assert_array_equal(size, np.full(8, 2))
    buf = DeviceBuffer.zeros(8, np.uint32)
    with pytest.raises(ValueError, match=r"compiled with __cluster_dims__\(2, 1, 1\)"):
        fixed.options(cluster=4).launch(8, WARP, buf, buf)
    with pytest.raises(ValueError, match=r"grid dimension x = 7 is not a multiple of the cluster's 2"):
        fixed.launch(7, WARP, buf, buf)


@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_the_cluster_sum_adds_through_distributed_shared_memory(cluster: int) -> None:
    mod = module("cluster_reduce")
    pass1, pass2 = mod.function("cluster_sum").options(cluster=cluster), mod.function("warp_reduce_sum")
    n = (1 << 22) + 3  # a tail past the last float4
    host = small_integers(n, seed=cluster)
    data = DeviceBuffer.from_array(host)
    grid = 4 * default_context().device.multiprocessor_count // cluster * cluster
    partials, total = DeviceBuffer.empty(grid // cluster), DeviceBuffer.empty(1)
    partials.fill(np.float32(np.nan))
    total.fill(np.float32(np.nan))
    pass1.launch(grid, BLOCK, partials, data, n, shared_mem=SHARED)
    pass2.launch(1, BLOCK, total, partials, grid // cluster, shared_mem=SHARED)
    assert total.to_array()[0] == host.astype(np.int64).sum()  # exact: whole numbers far below 2^24
    # Each cluster's value is the sum of its blocks' grid-stride shares.
    per_block = DeviceBuffer.empty(grid)
    mod.function("warp_reduce_sum").launch(grid, BLOCK, per_block, data, n, shared_mem=SHARED)
    expected = per_block.to_array().reshape(-1, cluster).sum(axis=1)
    np.testing.assert_array_equal(partials.to_array(), expected)


def test_a_cooperative_grid_sum_is_one_kernel_and_a_too_large_grid_is_refused() -> None:
    grid_sum = module("grid_reduce").function("grid_sum")
    cooperative = grid_sum.options(cooperative=True)
    most = grid_sum.max_active_blocks_per_sm(BLOCK, SHARED) * default_context().device.multiprocessor_count
    n = (1 << 23) + 1
    host = small_integers(n, seed=7)
    data, partials, total = DeviceBuffer.from_array(host), DeviceBuffer.empty(most + 1), DeviceBuffer.empty(1)
    for grid in (1, 132, most):
        total.fill(np.float32(np.nan))
        cooperative.launch(grid, BLOCK, total, partials, data, n, shared_mem=SHARED)
        assert total.to_array()[0] == host.astype(np.int64).sum(), f"grid of {grid}"
    total.fill(np.float32(np.nan))
    with pytest.raises(ValueError, match=rf"all {most + 1} blocks resident at once, and at most {most} fit"):
        cooperative.launch(most + 1, BLOCK, total, partials, data, n, shared_mem=SHARED)
    with pytest.raises(ValueError, match=r"synchronizes its whole grid .*\.options\(cooperative=True\)"):
        grid_sum.launch(4, BLOCK, total, partials, data, n, shared_mem=SHARED)  # would trap: refused first
    default_context().synchronize()
    assert np.isnan(total.to_array()[0])  # neither ran
    cooperative.bind(most, BLOCK, total, partials, data, n, shared_mem=SHARED)()
    assert total.to_array()[0] == host.astype(np.int64).sum()


@pytest.mark.parametrize("stream_kind", ["none", "stream"])
def test_a_chain_of_dependent_launches_still_sees_each_result(stream_kind: str) -> None:
    add_one = module("dependent_launch").function("add_one")
    early = add_one.options(programmatic=True)
    n, links = 1 << 20, 200
    host = small_integers(n, seed=11)
    ping, pong = DeviceBuffer.from_array(host), DeviceBuffer.empty(n)
    pong.fill(np.float32(np.nan))
    stream = Stream() if stream_kind == "stream" else None
    grid = -(-n // BLOCK)
    for link in range(links):
        src, dst = (ping, pong) if link % 2 == 0 else (pong, ping)
        (early if link % 3 else add_one).launch(grid, BLOCK, dst, src, n, stream=stream)  # mixed with plain ones
    out = ping.to_array(stream) if links % 2 == 0 else pong.to_array(stream)
    np.testing.assert_array_equal(out, host + links)


def test_a_twin_asking_for_less_shared_memory_leaves_its_kernel_able_to_use_more() -> None:
    # Before: the twin set the kernel's opt-in down to 60 KiB, and the base's next 100 KiB launch was refused.
    base = module("grid_reduce").function("grid_sum")
    twin = base.options(cooperative=True)
    n = 1 << 16
    host = small_integers(n, seed=5)
    data, partials, total = DeviceBuffer.from_array(host), DeviceBuffer.empty(64), DeviceBuffer.empty(1)
    for shared in (100 * 1024, 60 * 1024, 100 * 1024, 120 * 1024, 50 * 1024, 120 * 1024):
        total.fill(np.float32(np.nan))
        twin.launch(8, BLOCK, total, partials, data, n, shared_mem=shared)
        assert total.to_array()[0] == host.astype(np.int64).sum(), f"{shared} bytes"


def test_a_programmatic_launch_of_a_kernel_that_never_waits_is_refused() -> None:
    # Before: accepted, and the kernel read its predecessor's output early (a sum of NaN on the H200).
    reduce_sum = module("cluster_reduce").function("warp_reduce_sum")
    buf = DeviceBuffer.zeros(1024)
    with pytest.raises(ValueError, match=r"never waits for it \(no griddepcontrol\.wait"):
        reduce_sum.options(programmatic=True).launch(4, BLOCK, buf, buf, 1024, shared_mem=SHARED)


def test_a_captured_programmatic_chain_lists_its_nodes_and_replays_exactly() -> None:
    # Before: listing the graph's nodes failed with CUDA_ERROR_LOSSY_QUERY (its programmatic edges).
    from rawcuda.graphs.streamcapture import capture

    add_one = module("dependent_launch").function("add_one")
    early = add_one.options(programmatic=True)
    n, links = 1 << 12, 6
    host = small_integers(n, seed=13)
    ping, pong = DeviceBuffer.from_array(host), DeviceBuffer.empty(n)
    stream = Stream()
    with capture(stream) as graph:
        for link in range(links):
            src, dst = (ping, pong) if link % 2 == 0 else (pong, ping)
            early.launch(-(-n // BLOCK), BLOCK, dst, src, n, stream=stream)
    assert len(graph.kernel_nodes()) == links
    nodes = graph.kernel_nodes()
    assert all(node.function is not None and node.function.name == "add_one" for node in nodes)
    exe = graph.instantiate()
    exe.launch(stream)
    np.testing.assert_array_equal(ping.to_array(stream), host + links)


def test_explicit_graph_nodes_run_clusters_and_cooperative_grids_as_launches_do() -> None:
    # Before: add_kernel refused any Function with options (a node's params carry no attributes).
    from rawcuda.graphs.graph import Graph

    mod = module("cluster_reduce")
    cluster = 8
    clustered, finish = mod.function("cluster_sum").options(cluster=cluster), mod.function("warp_reduce_sum")
    cooperative = module("grid_reduce").function("grid_sum").options(cooperative=True)
    n = (1 << 22) + 5
    host = small_integers(n, seed=29)
    expected = host.astype(np.int64).sum()
    data = DeviceBuffer.from_array(host)
    grid = 2 * default_context().device.multiprocessor_count // cluster * cluster
    partials, total, coop_partials, coop_total = (DeviceBuffer.empty(k) for k in (grid // cluster, 1, grid, 1))
    ranks = mod.function("cluster_ranks").options(cluster=4)
    rank, size = DeviceBuffer.empty(16, np.uint32), DeviceBuffer.empty(16, np.uint32)
    graph = Graph()
    first = graph.add_kernel(clustered, grid, BLOCK, partials, data, n, shared_mem=SHARED)
    graph.add_kernel(finish, 1, BLOCK, total, partials, grid // cluster, shared_mem=SHARED, depends_on=[first])
    coop_node = graph.add_kernel(cooperative, grid, BLOCK, coop_total, coop_partials, data, n, shared_mem=SHARED)
    graph.add_kernel(ranks, 16, WARP, rank, size)
    dims = first.launch_attribute(LaunchAttributeID.CLUSTER_DIMENSION).clusterDim
    assert (dims.x, dims.y, dims.z) == (cluster, 1, 1)
    assert coop_node.launch_attribute(LaunchAttributeID.COOPERATIVE).cooperative == 1
    exe = graph.instantiate()
    for replay in range(3):  # each replay from poisoned outputs
        for buf in (total, coop_total):
            buf.fill(np.float32(np.nan))
        for buf in (rank, size):
            buf.fill(np.uint32(POISON))
        exe.launch()
        default_context().synchronize()
        assert total.to_array()[0] == expected, f"replay {replay}: the cluster sum"
        assert coop_total.to_array()[0] == expected, f"replay {replay}: the cooperative sum"
        np.testing.assert_array_equal(rank.to_array(), np.tile(np.arange(4, dtype=np.uint32), 4))
        np.testing.assert_array_equal(size.to_array(), np.full(16, 4, np.uint32))
    with pytest.raises(ValueError, match="CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC"):
        graph.add_kernel(
            module("dependent_launch").function("add_one").options(programmatic=True), 1, BLOCK, data, data, 1
        )
    assert len(graph.kernel_nodes()) == 4  # the refused node was never added


def test_a_captured_cluster_launch_makes_a_node_that_carries_its_cluster() -> None:
    from rawcuda.graphs.streamcapture import capture

    ranks = module("cluster_reduce").function("cluster_ranks").options(cluster=(2, 2))
    rank, size = DeviceBuffer.empty(24, np.uint32), DeviceBuffer.empty(24, np.uint32)
    stream = Stream()
    with capture(stream) as graph:
        ranks.launch((4, 6, 1), WARP, rank, size, stream=stream)
    [node] = graph.kernel_nodes()
    dims = node.launch_attribute(LaunchAttributeID.CLUSTER_DIMENSION).clusterDim
    assert (dims.x, dims.y, dims.z) == (2, 2, 1)
    rank.fill(np.uint32(POISON))
    size.fill(np.uint32(POISON))
    graph.instantiate().launch(stream)
    x, y = np.meshgrid(np.arange(4), np.arange(6))
    np.testing.assert_array_equal(rank.to_array(stream), ((x % 2) + 2 * (y % 2)).ravel())
    np.testing.assert_array_equal(size.to_array(stream), np.full(24, 4))
