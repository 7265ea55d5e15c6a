"""Core: launch attributes -- thread-block clusters, cooperative grids, programmatic dependent launch.

A plain launch passes no attributes. ``fn.options(cluster=(2, 1, 1))`` (or ``cooperative=True``,
``programmatic=True``) is a Function of the same kernel whose launches pass them in the ``CUlaunchConfig``,
each checked before the driver sees it: a cluster must divide the grid, match the dimensions the kernel
was compiled with and fit the GPU; a cooperative grid must be able to be resident all at once.
Why a Function of its own, not keywords of ``launch``? The attributes belong to the configuration, which a
Function checks once per configuration: ``launch`` itself stays exactly as it was (docs/architecture.md).
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int
from dataclasses import dataclass
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.ffi.attributes import FunctionAttribute
from rawcuda.ffi.constants import LaunchAttributeID
from rawcuda.ffi.types import CUlaunchAttribute

from .integers import shown
from .launchconfig import LaunchConfig, dims, launch_config

#: Blocks in a cluster that every GPU with clusters supports (CUDA C++ Programming Guide, "Thread Block
#: Clusters"). Larger ones need the kernel's NON_PORTABLE_CLUSTER_SIZE_ALLOWED set, which a launch does itself.
PORTABLE_CLUSTER_BLOCKS = 8
#: Clusters and programmatic dependent launch arrived with compute capability 9.0.
MIN_CLUSTER_CAPABILITY = (9, 0)
MIN_PROGRAMMATIC_CAPABILITY = (9, 0)
AXES = "xyz"
#: The array types of 0 to 3 attributes, made once: ctypes keeps an array type only while something holds it,
#: and a type made again for every configuration is garbage with reference cycles (left for good under gc.disable()).
ATTRIBUTE_ARRAYS = tuple(CUlaunchAttribute * count for count in range(4))


@dataclass(frozen=True)
class LaunchOptions:
    """What a launch asks of the driver beyond grid, block, shared memory and stream."""

    cluster: tuple[int, int, int] | None = None  # blocks per cluster in x, y, z
    cooperative: bool = False  # every block resident at once, so a grid-wide sync is allowed
    programmatic: bool = False  # may start before the previous kernel of its stream has finished

    @property
    def any(self) -> bool:
        return self.cluster is not None or self.cooperative or self.programmatic

    @property
    def cluster_blocks(self) -> int:
        x, y, z = self.cluster or (1, 1, 1)
        return x * y * z


NO_OPTIONS = LaunchOptions()


def _flag(name: str, value: Any) -> bool:
    """A yes/no option: True or False (numpy's too), nothing that merely converts to one."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {shown(value)}")


def launch_options(cluster: Any = None, cooperative: Any = False, programmatic: Any = False) -> LaunchOptions:
    """The options checked for their own sake: a cluster of 1 to 3 whole dimensions >= 1, and two flags."""
    parts = cluster if isinstance(cluster, tuple | list) else (cluster,)
    if any(isinstance(part, bool | np.bool_) for part in parts):  # an int to Python, never a block count here
        raise TypeError(f"cluster takes blocks per cluster (an int or a tuple of 1 to 3 ints), got {shown(cluster)}")
    return LaunchOptions(
        None if cluster is None else dims("cluster", cluster),
        _flag("cooperative", cooperative),
        _flag("programmatic", programmatic),
    )


def merged_options(options: LaunchOptions, cluster: Any, cooperative: Any, programmatic: Any) -> LaunchOptions:
    """``options`` with what is given (not None) replaced, each checked: a twin's twin adds to its options."""
    return launch_options(
        options.cluster if cluster is None else cluster,
        options.cooperative if cooperative is None else cooperative,
        options.programmatic if programmatic is None else programmatic,
    )


def twin_of(fn: Any, cluster: Any, cooperative: Any, programmatic: Any) -> Any:
    """The Function of ``fn``'s kernel with these options (``Function.options``), made once per set of options.

    Once: ``fn.options(...).launch(...)`` written inline would otherwise validate, and ask the occupancy, at
    every call. The twin holds its base (so the module's table and a graph node find the kernel) and shares
    its shared-memory opt-in; the base holds its twins weakly, so no cycle keeps either alive.
    """
    base = fn.base or fn
    options = merged_options(fn.launch_options, cluster, cooperative, programmatic)
    if options == base.launch_options:
        return base
    twin = base.twins.get(options)
    if twin is None:
        twin = type(base)(base.module, base.name, base.handle, list(base.params))
        twin.launch_options, twin.base, twin.shared_optin = options, base, base.shared_optin
        base.twins[options] = twin
    return twin


def attribute_array(options: LaunchOptions) -> ctypes.Array[CUlaunchAttribute]:
    """The ``CUlaunchAttribute`` array for ``options``, in the layout cuda.h gives it (each id, then its value)."""
    rows = []
    if options.cluster is not None:
        row = CUlaunchAttribute(id=LaunchAttributeID.CLUSTER_DIMENSION)
        row.value.clusterDim.x, row.value.clusterDim.y, row.value.clusterDim.z = options.cluster
        rows.append(row)
    if options.cooperative:
        row = CUlaunchAttribute(id=LaunchAttributeID.COOPERATIVE)
        row.value.cooperative = 1
        rows.append(row)
    if options.programmatic:
        row = CUlaunchAttribute(id=LaunchAttributeID.PROGRAMMATIC_STREAM_SERIALIZATION)
        row.value.programmaticStreamSerializationAllowed = 1
        rows.append(row)
    return ATTRIBUTE_ARRAYS[len(rows)](*rows)


def check_cluster_grid(name: str, grid: tuple[int, int, int], cluster: tuple[int, int, int]) -> None:
    """Each grid dimension a multiple of the cluster's: the driver launches whole clusters only."""
    for axis, (g, c) in enumerate(zip(grid, cluster, strict=True)):
        if g % c:
            raise ValueError(
                f"{name!r}: grid dimension {AXES[axis]} = {g} is not a multiple of the cluster's {c} "
                f"(cluster {cluster}): use a grid of {-(-g // c) * c} there, or a cluster that divides {g}"
            )


def check_compiled_cluster(name: str, required: tuple[int, int, int] | None, cluster: tuple[int, int, int]) -> None:
    """A kernel compiled with ``__cluster_dims__`` (PTX ``.reqnctapercluster``) launches with exactly those."""
    if required is not None and cluster != required:
        raise ValueError(
            f"{name!r} was compiled with __cluster_dims__{required} (.reqnctapercluster in its PTX): launch it "
            f"with cluster={required} or with no cluster option, not {cluster}"
        )


def check_grid_sync(name: str, grid_workspace: bool, options: LaunchOptions) -> None:
    """A kernel that syncs its whole grid (its PTX reads the grid workspace) launches cooperatively only.

    Why here, not the driver: launched plainly, ``this_grid().sync()`` finds no workspace and executes
    ``trap``, which ruins the context (docs/hazards.md, "A grid-wide sync traps unless the launch was cooperative").
    """
    if grid_workspace and not options.cooperative:
        raise ValueError(
            f"{name!r} synchronizes its whole grid (cooperative_groups this_grid(); its PTX reads the grid "
            f"workspace, %envreg1/%envreg2): launch it through {name}.options(cooperative=True), with a grid "
            f"whose blocks all fit on the GPU at once; a plain launch would trap and ruin the context"
        )


def check_compiled_in(fn: Any, grid: tuple[int, int, int]) -> None:
    """What a kernel's PTX demands of every launch, options or not: whole compiled-in clusters, and a
    cooperative launch for a grid-wide sync. Checked once per configuration (``Function.configure``)."""
    if fn.compiled_cluster is not None:
        check_cluster_grid(fn.name, grid, fn.compiled_cluster)
    check_grid_sync(fn.name, fn.grid_workspace, fn.launch_options)


def check_dependency_wait(name: str, waits: bool) -> None:
    """A programmatic launch may start before its predecessor ends: the kernel must wait before reading its data.

    Why refuse: without ``griddepcontrol.wait`` the kernel reads the previous kernel's output early, and the
    answer is silently wrong (seen on the H200: a sum of NaN).
    """
    if not waits:
        raise ValueError(
            f"programmatic=True lets {name!r} start before the previous kernel of its stream has finished, but its "
            f"PTX never waits for it (no griddepcontrol.wait, which cudaGridDependencySynchronize() compiles to): "
            f"it would read that kernel's output before it is written. Call cudaGridDependencySynchronize() "
            f"before the first such read, or launch it without programmatic"
        )


def check_capability(name: str, what: str, capability: tuple[int, int], needed: tuple[int, int]) -> None:
    if capability < needed:
        raise ValueError(
            f"{what} needs compute capability {needed[0]}.{needed[1]} or newer; {name!r} runs on a "
            f"{capability[0]}.{capability[1]} GPU: launch it without that option"
        )


def check_cooperative(name: str, blocks: int, per_sm: int, multiprocessors: int) -> None:
    """A cooperative grid must fit on the GPU at once: at most (blocks per SM) x (SMs) blocks."""
    most = per_sm * multiprocessors
    if blocks > most:
        raise ValueError(
            f"a cooperative launch of {name!r} needs all {blocks} blocks resident at once, and at most {most} fit "
            f"({per_sm} per SM x {multiprocessors} SMs, for this block size and shared memory): use a grid of at "
            f"most {most} blocks and loop over the work inside the kernel"
        )


def check_clusters_fit(name: str, cluster: tuple[int, int, int], active: int, largest: int) -> None:
    """cuOccupancyMaxActiveClusters found room for no cluster of this shape: the driver would refuse it."""
    if active < 1:
        raise ValueError(
            f"a cluster {cluster} of {name!r} ({cluster[0] * cluster[1] * cluster[2]} blocks) cannot be resident "
            f"on one GPU processing cluster with this block size and shared memory; the largest cluster this "
            f"kernel can launch with is {largest} blocks (cuOccupancyMaxPotentialClusterSize)"
        )


def compiled_cluster(entry: Any) -> tuple[int, int, int] | None:
    """The cluster a PTX kernel was compiled with (``.reqnctapercluster x, y, z``), or None."""
    values = entry.directive("reqnctapercluster") if entry is not None else None
    return (*values, *(1,) * (3 - len(values))) if values else None  # type: ignore[return-value]


def attributes_for(fn: Any, config: LaunchConfig, h_stream: int | None) -> ctypes.Array[CUlaunchAttribute]:
    """``fn.launch_options`` checked against this configuration and the GPU, as the attribute array to pass.

    ``fn`` is the Function (rawcuda.core.function) whose launch this is; its context is current.
    """
    options, name = fn.launch_options, fn.name
    grid, threads = config[:3], config[3] * config[4] * config[5]
    device = fn.context.device
    if options.cluster is not None:
        check_capability(name, "a cluster launch", device.compute_capability, MIN_CLUSTER_CAPABILITY)
        check_compiled_cluster(name, fn.compiled_cluster, options.cluster)
        if options.cluster_blocks > PORTABLE_CLUSTER_BLOCKS:  # the opt-in a larger cluster needs, made here
            fn.set_attribute(FunctionAttribute.NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        largest, active = c_int(), c_int()
        # The size first, asked of the configuration without a cluster (the driver answers for a cluster that
        # does not divide the grid with INVALID_CLUSTER_SIZE): the active-clusters query said "fits" for 17.
        cu.cuOccupancyMaxPotentialClusterSize(byref(largest), fn.handle, byref(launch_config(config, h_stream)))
        if options.cluster_blocks <= largest.value:
            check_cluster_grid(name, grid, options.cluster)
            probe = launch_config(config, h_stream, attribute_array(LaunchOptions(cluster=options.cluster)))
            cu.cuOccupancyMaxActiveClusters(byref(active), fn.handle, byref(probe))
        check_clusters_fit(name, options.cluster, active.value, largest.value)
    if options.cooperative:
        blocks = grid[0] * grid[1] * grid[2]
        per_sm = fn.max_active_blocks_per_sm(threads, config[6])
        check_cooperative(name, blocks, per_sm, device.multiprocessor_count)
    if options.programmatic:
        check_capability(name, "programmatic dependent launch", device.compute_capability, MIN_PROGRAMMATIC_CAPABILITY)
        check_dependency_wait(name, fn.dependency_wait)
    return attribute_array(options)
