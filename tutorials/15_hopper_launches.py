"""Tutorial 15 -- Hopper's own launches: thread-block clusters, cooperative grids, programmatic dependent launch.

Compute capability 9.0 (the H100 and H200) can launch a kernel in ways ``cuLaunchKernel``'s 11 arguments have
no place for. Each is a *launch attribute*: one row of the ``CUlaunchAttribute`` array that
``cuLaunchKernelEx`` reads from its ``CUlaunchConfig`` -- an id, and a 64-byte union read as the member that
id names:

* ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``: blocks grouped into clusters that run at the same time and read
  each other's shared memory (``kernels/cluster_reduce.cu``);
* ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``: a grid whose blocks are all resident at once, so that it may wait for
  itself as a whole (``kernels/grid_reduce.cu``);
* ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``: a kernel that may start before the one ahead of
  it in its stream has ended, and waits inside itself for that one's data (``kernels/dependent_launch.cu``).

Step 1 writes the structs out with ctypes and launches through a hand-bound ``cuLaunchKernelEx``; step 2
launches the same with ``fn.options(cluster=4)`` and shows what rawcuda refuses before the driver is asked.
Steps 3-5 measure what each feature buys. Every answer is checked exactly (small whole numbers, which
float32 adds exactly); every time is printed and compared in words computed from the numbers.
Step 6 reads what cust offers for them, from its source.

Run:  python tutorials/15_hopper_launches.py [--step]
"""

from __future__ import annotations

import ctypes
import itertools
import json
import re
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from ctypes import POINTER, byref, c_char, c_int, c_uint, c_uint64, c_void_p
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import Context, DeviceBuffer, Function, Module, Stream, time_ms
from rawcuda.checked import cu
from rawcuda.core.launchattrs import LaunchOptions, attribute_array
from rawcuda.core.launchconfig import launch_config
from rawcuda.ffi.attributes import FunctionAttribute
from rawcuda.ffi.constants import LaunchAttributeID
from rawcuda.ffi.results import Result
from rawcuda.ffi.types import CUlaunchAttribute, CUlaunchAttributeValue, CUlaunchConfig
from rawcuda.graphs.streamcapture import capture

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "kernels"  # the checkout's kernels/*.cu, whose `// -- begin NAME` parts are printed

# cuda.h, enum CUlaunchAttributeID: the three ids this tutorial writes by hand.
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
ATTRIBUTE_VALUE_BYTES = 64  # cuda.h: char pad[64] -- the union is 64 bytes, whichever member is read
ID_BYTES = ctypes.sizeof(c_int)  # CUlaunchAttributeID is an enum: a 4-byte int
VALUE_OFFSET = 8  # cuda.h: char pad[8 - sizeof(CUlaunchAttributeID)] puts the value at offset 8
CUDA_SUCCESS = 0

HOPPER = (9, 0)  # compute capability of the H100 and H200: the first with clusters
WARP = 32
BLOCK = 256  # kernels/reduce.cu's REDUCE_BLOCK, and the chain's block
FLOAT_BYTES = 4
SHARED = BLOCK // WARP * FLOAT_BYTES  # one float per warp: the dynamic shared memory reduce.cu's kernels take
REDUCE_BLOCKS_PER_SM = 4  # reduce.cu's pass-1 grid: this many blocks per SM, one wave
RANKS_BLOCKS = 64  # blocks of each cluster_ranks launch
RANKS_THREADS = WARP  # cluster_ranks writes from thread 0 only: one warp per block is plenty
CLUSTER = 4
PORTABLE_CLUSTER = 8  # blocks per cluster every GPU with clusters takes without the kernel opting in
LARGE_CLUSTER = 16  # past the portable 8: the H200 takes it once the kernel opts in
TOO_LARGE_CLUSTER = 32
RAGGED_GRID = RANKS_BLOCKS - 1  # not a whole number of clusters of 4
COMPILED_CLUSTER = (2, 1, 1)  # kernels/cluster_reduce.cu: __cluster_dims__(COMPILED_CLUSTER_X = 2, 1, 1)
POISON = 0xDEADBEEF  # what the rank buffers hold before a launch: a launch that writes nothing cannot pass
SHOWN_BLOCKS = 12  # blocks whose rank is printed
ROW_BYTES_SHOWN = VALUE_OFFSET + 3 * ID_BYTES  # id, pad, then clusterDim's x, y and z

VALUE_RANGE = 8  # data: whole numbers -8..8 stored as float32, so every partial sum is exact (tutorial 03a)
SIZES = (1 << 18, 1 << 26)  # 1 MiB of floats, where the launches weigh; 256 MiB, where memory bandwidth decides
CLUSTERS = (2, 4, 8, 16)
INNER = 10  # reductions per timed run: the time a launch takes to reach an idle GPU, spread over ten
REPS = 30  # timed runs, each between two events; the median is printed
SAME_WITHIN = 0.05  # two times within 5% of each other are "about the same": runs spread about that much

LINKS = 100  # add_one launches in one chain: each adds 1, so the chain adds LINKS
CHAIN_SIZES = (1 << 8, 1 << 20)  # one block per kernel, where the gap between kernels is all there is; 4,096
CHAIN_REPS = 20
HOST_BOUND_SHARE = 0.8  # the host's launch calls "set the pace" when they take this share of a link's time

US_PER_MS = 1000
US_PER_S = 1_000_000
BYTES_PER_GB = 1e9
MIB = 1 << 20
NAN = np.float32(np.nan)
MESSAGE_WIDTH = 104  # rawcuda's one-line messages, wrapped to the width of the rest of the output

CHILD_BLOCKS = 4  # the grid of the plain grid_sum launch in a child process: any grid traps
CHILD_FLOATS = 1024
CHILD_TIMEOUT_S = 120
# The child: grid_sum launched plainly through a hand-bound cuLaunchKernelEx, which rawcuda never sees.
# Its arguments: the checkout, blocks, threads, dynamic shared bytes, floats. It prints the three CUresults.
CHILD = """\
import ctypes, json, os, sys
root, blocks, threads, shared, floats = sys.argv[1], *map(int, sys.argv[2:])
sys.path.insert(0, root)
import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.checked import cu
from rawcuda.ffi.types import CUlaunchConfig

fn = Module(rawcuda.kernels.ptx_path("grid_reduce")).function("grid_sum")
data, partials, total = DeviceBuffer.zeros(floats), DeviceBuffer.empty(blocks), DeviceBuffer.empty(1)
driver = cu.library().handle  # fresh, untyped pointers: nothing of rawcuda checks these three calls
launch, sync, alloc = driver["cuLaunchKernelEx"], driver["cuCtxSynchronize"], driver["cuMemAlloc_v2"]
launch.restype = sync.restype = alloc.restype = ctypes.c_int
launch.argtypes = [ctypes.POINTER(CUlaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
sync.argtypes = []
alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
config = CUlaunchConfig(gridDimX=blocks, gridDimY=1, gridDimZ=1, blockDimX=threads, blockDimY=1, blockDimZ=1,
                        sharedMemBytes=shared)  # numAttrs = 0: a plain launch
values = [ctypes.c_uint64(v) for v in (total.ptr, partials.ptr, data.ptr, floats)]
params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
fn.context.activate()
codes = {"launch": launch(ctypes.byref(config), fn.handle, params, None)}
codes["sync"] = sync()
codes["after"] = alloc(ctypes.byref(ctypes.c_uint64()), floats)
print(json.dumps(codes), flush=True)
os._exit(0)  # no teardown: in a lost context every call would report the error again
"""

CLUSTER_TEXT = """\
A thread-block cluster is a group of blocks of one grid that the GPU starts at the same time on SMs of
one GPU processing cluster (GPC). Inside a cluster the blocks can read and write each other's shared
memory and wait for each other (cluster.sync()); a block learns its place from cluster.block_rank().
cluster_ranks (kernels/cluster_reduce.cu) writes, for each block, its rank and its cluster's size, so
the shape the GPU used can be read back. cuLaunchKernel cannot ask for clusters: the launch goes through
cuLaunchKernelEx, whose one argument CUlaunchConfig carries a pointer to an array of launch attributes."""

CUST_TEXT = """\
Read from Rust-CUDA ac2674f (cust 0.3.2 by its Cargo.toml), crates/cust. This search
  git grep -n -i "cluster\\|cooperative\\|cuLaunchKernelEx\\|LaunchAttribute\\|programmatic" HEAD -- crates/cust
finds one line in the whole crate:
  HEAD:crates/cust/src/graph_dotfile.rs:18://     writeln!(dot, "  subgraph cluster_1 {{");
-- a Graphviz subgraph in commented-out code, not a thread-block cluster. A search for
"tensormap\\|griddep\\|cuLaunchCooperative" finds nothing. So cust has no API for clusters, cooperative
launches or PDL, nor for the hardware tile copies of tutorial 16.

What a launch is in cust: the launch! macro (crates/cust/src/function.rs:586) expands to the hidden
unsafe fn Stream::launch (crates/cust/src/stream.rs:259), which calls driver_sys::cuLaunchKernel
(stream.rs:274) with the 11 arguments of tutorial 00b and ptr::null_mut() as `extra`: no CUlaunchConfig,
no attributes. FunctionAttribute (function.rs:225) ends at CacheModeCa = 7: no REQUIRED_CLUSTER_WIDTH,
no NON_PORTABLE_CLUSTER_SIZE_ALLOWED. CudaError (crates/cust/src/error.rs) has LaunchFailed = 719 but no
720: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE arrives as CudaError::UnknownError.

The raw declarations: crates/cust_raw/src/driver_sys.rs holds, after three #![allow(...)] lines, only
include!(concat!(env!("OUT_DIR"), "/driver_sys.rs")): bindgen writes the bindings when cust_raw is built,
from the toolkit's cuda.h, with allowlist_function("^cu.*") and allowlist_type("^CU.*")
(crates/cust_raw/build/main.rs:134-140). Built against CUDA 12 they declare cuLaunchKernelEx,
CUlaunchConfig and CUlaunchAttribute -- yet no file of the tree names any of them (a git grep of the
whole tree for "cuLaunchKernelEx\\|cuLaunchCooperativeKernel\\|CUlaunchAttribute" finds nothing), and no
safe API of cust uses them; crates/cust/src/lib.rs re-exports no sys module. A Rust program asks for a
cluster the way step 1 did: cust_raw added beside cust, a CUlaunchConfig and its attribute rows filled
by hand, Function::to_raw() and Stream::as_inner() for the two handles, and the call in an unsafe block."""


# --- the structs, written out by hand ------------------------------------------------------------------------------
class ClusterDim(ctypes.Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class LaunchAttributeValue(ctypes.Union):
    """cuda.h's CUlaunchAttributeValue: 64 bytes, read as the member the row's id names.

    cuda.h's union has more members (an access-policy window, events, a priority ...), all inside the same 64
    bytes; the three this tutorial writes are spelled out, and ``pad`` gives the union its size.
    """

    _fields_ = [
        ("pad", c_char * ATTRIBUTE_VALUE_BYTES),
        ("cooperative", c_int),  # read for CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        ("clusterDim", ClusterDim),  # read for CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        ("programmaticStreamSerializationAllowed", c_int),  # read for ..._PROGRAMMATIC_STREAM_SERIALIZATION
    ]


class LaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: which attribute, then its value at offset 8."""

    _fields_ = [
        ("id", c_int),  # CUlaunchAttributeID
        ("pad", c_char * (VALUE_OFFSET - ID_BYTES)),
        ("value", LaunchAttributeValue),
    ]


class LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig: what cuLaunchKernelEx reads instead of cuLaunchKernel's separate arguments."""

    _fields_ = [
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("hStream", c_void_p),  # CUstream; NULL: the legacy default stream
        ("attrs", POINTER(LaunchAttribute)),  # the first row of the array
        ("numAttrs", c_uint),  # 0: a plain launch, as cuLaunchKernel's
    ]


# Each id, and the member of the union it reads (cuda.h's comments on CUlaunchAttributeValue).
MEMBERS = (
    ("CU_LAUNCH_ATTRIBUTE_COOPERATIVE", CU_LAUNCH_ATTRIBUTE_COOPERATIVE, "cooperative"),
    ("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, "clusterDim"),
    (
        "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        "programmaticStreamSerializationAllowed",
    ),
)
NOTES = {
    "id": "which attribute: a CUlaunchAttributeID",
    "pad": "char pad[8 - sizeof(CUlaunchAttributeID)]",
    "value": "CUlaunchAttributeValue, a union: 64 bytes read as the member id names",
    "hStream": "CUstream (8-byte aligned: 4 bytes of padding before it)",
    "attrs": "CUlaunchAttribute *: the first row",
}


def layout(struct: type, names: list[str] | None = None) -> list[tuple[str, int, int]]:
    """(field, offset, size) of ``names`` (every field of ``struct`` when None)."""
    names = names or [field[0] for field in struct._fields_]  # type: ignore[attr-defined]
    return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name in names]


def layout_text(title: str, struct: type) -> str:
    lines = [f"{title} ({ctypes.sizeof(struct)} bytes):", "  offset  bytes  field"]
    lines += [
        f"  {offset:6}  {size:5}  {name:<15} {NOTES.get(name, '')}".rstrip() for name, offset, size in layout(struct)
    ]
    return "\n".join(lines)


def members_text() -> str:
    width = max(len(name) for name, *_ in MEMBERS)
    lines = ["the member each id reads (every member starts at offset 0 of value):"]
    lines += [
        f"  {name:<{width}} = {value}  value.{member} ({getattr(LaunchAttributeValue, member).size} bytes)"
        for name, value, member in MEMBERS
    ]
    lines.append(
        "cooperative and programmaticStreamSerializationAllowed are ints, nonzero to ask (steps 4 and 5);\n"
        "clusterDim is the blocks per cluster in x, y and z (steps 1-3)."
    )
    return "\n".join(lines)


def same_layouts() -> bool:
    """The hand-written structs against rawcuda's (rawcuda.ffi.types, which its header check lays out with the C
    compiler): the same sizes, and the same offset and size for every field written out here."""
    pairs: tuple[tuple[Any, Any], ...] = (
        (LaunchAttribute, CUlaunchAttribute),
        (LaunchAttributeValue, CUlaunchAttributeValue),
        (LaunchConfig, CUlaunchConfig),
    )
    return all(
        ctypes.sizeof(mine) == ctypes.sizeof(theirs) and layout(mine) == layout(theirs, [n for n, *_ in mine._fields_])
        for mine, theirs in pairs
    )


def bind_launch_ex() -> Any:
    """cuLaunchKernelEx bound by hand on the libcuda rawcuda opened: a fresh pointer, its CUresult returned bare."""
    launch_ex = cu.library().handle["cuLaunchKernelEx"]  # handle[symbol]: a new pointer, not rawcuda's binding
    # CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
    launch_ex.restype = c_int
    launch_ex.argtypes = [POINTER(LaunchConfig), c_void_p, POINTER(c_void_p), POINTER(c_void_p)]
    return launch_ex


def hand_config(grid: int, block: int, shared: int, rows: Any) -> LaunchConfig:
    """A 1-D launch on the legacy default stream with the attribute ``rows`` (a ctypes array, or None for none).

    The config points at ``rows`` without owning them: the caller keeps them alive until the launch returns.
    """
    config = LaunchConfig(grid, 1, 1, block, 1, 1, shared, None, None, 0)
    if rows is not None:
        config.attrs, config.numAttrs = ctypes.cast(rows, POINTER(LaunchAttribute)), len(rows)
    return config


def kernel_params(*values: int) -> tuple[Any, list[c_uint64]]:
    """kernelParams by hand (tutorial 00b): an 8-byte value per argument, and the void* array pointing at each.

    Every argument of this tutorial's kernels is 8 bytes (a pointer or a size_t); the list keeps them alive.
    """
    held = [c_uint64(value) for value in values]
    return (c_void_p * len(held))(*[ctypes.addressof(value) for value in held]), held


def launch_by_hand(launch_ex: Any, config: LaunchConfig, fn: Function, params: Any) -> int:
    fn.context.activate()  # a bare call acts on the current context
    return int(launch_ex(byref(config), fn.handle, params, None))


def result_name(code: int) -> str:
    """cuda.h's name for a CUresult, from rawcuda's table of them."""
    try:
        return f"CUDA_{Result(code).name}"
    except ValueError:
        return "a code rawcuda does not name"


# --- helpers of the measured steps ---------------------------------------------------------------------------------
def excerpt(source: str, name: str) -> str:
    """The text of kernels/<source> between its `// -- begin NAME` and `// -- end NAME` lines."""
    path = SOURCES / source
    if not path.is_file():
        return f"(kernels/{source} is not beside this tutorial: it is in the rawcuda source tree)"
    text = path.read_text()
    begin, end = f"// -- begin {name}\n", f"// -- end {name}"
    return f"kernels/{source}:\n" + text[text.index(begin) + len(begin) : text.index(end)].rstrip()


def ptx_directive(ptx: str, entry: str, directive: str) -> str:
    """The line of ``.directive`` among ``entry``'s declarations in the PTX (between its name and its body)."""
    start = ptx.index(f".entry {entry}(")
    found = re.search(rf"\.{directive}[^\n]*", ptx[start : ptx.index("{", start)])
    return found[0] if found else f"(no .{directive})"


def wrapped(message: str) -> str:
    """A one-line message of rawcuda's as ``  -> ValueError: ...``, wrapped to the width of the rest."""
    return textwrap.fill(
        f"  -> ValueError: {message}", MESSAGE_WIDTH, subsequent_indent="     ", break_on_hyphens=False
    )


def refused(t: Tutorial, what: str, launch: Callable[[], object]) -> str:
    """Run ``launch``, which rawcuda must refuse with a ValueError before the driver: its message, printed."""
    try:
        launch()
    except ValueError as exc:
        t.say(f"{what}\n" + wrapped(str(exc)))
        return str(exc)
    raise TutorialCheckError(f"{what} should have been refused, and was not")


def poison(*buffers: DeviceBuffer) -> None:
    for buf in buffers:
        buf.fill(np.uint32(POISON))


def placements(fn: Function, grid: int, rank: DeviceBuffer, size: DeviceBuffer) -> tuple[np.ndarray, np.ndarray]:
    """Launch cluster_ranks (or a twin with options) over poisoned buffers: each block's rank and cluster size."""
    poison(rank, size)
    fn.launch(grid, RANKS_THREADS, rank, size)
    return rank.to_array(), size.to_array()


def small_integers(rng: np.random.Generator, n: int) -> tuple[np.ndarray, int]:
    """n whole numbers in [-8, 8] as float32, and their exact sum in int64."""
    host = rng.integers(-VALUE_RANGE, VALUE_RANGE + 1, n).astype(np.float32)
    return host, int(host.astype(np.int64).sum())


def power(n: int) -> str:
    return f"2^{n.bit_length() - 1}"


def timed_us(work: Callable[[], object], stream: Stream, inner: int = INNER) -> tuple[float, float]:
    """Median microseconds of one ``work()``: on the GPU (REPS runs of ``inner`` calls, each run between two
    events), and on the host (how long the same calls took to return: the launch calls themselves)."""
    host_s: list[float] = []

    def runs() -> None:
        began = time.perf_counter()
        for _ in range(inner):
            work()
        host_s.append(time.perf_counter() - began)

    gpu_ms = time_ms(runs, reps=REPS, stream=stream).median
    return gpu_ms * US_PER_MS / inner, statistics.median(host_s) * US_PER_S / inner


def total_of(work: Callable[[], object], total: DeviceBuffer, stream: Stream) -> float:
    """Run ``work`` once on a NaN-poisoned total and read the total back."""
    total.fill(NAN, stream=stream)
    work()
    return float(total.to_array(stream)[0])


def versus(us: float, base_us: float, base: str = "") -> str:
    """``us`` against ``base_us`` in words (against ``base``, when named): about the same time within SAME_WITHIN,
    else how much less or more time."""
    change = us / base_us - 1
    if abs(change) <= SAME_WITHIN:
        return f"about the same time{' as ' + base if base else ''} ({change:+.1%})"
    return f"{abs(change):.0%} {'less' if change < 0 else 'more'} time{' than ' + base if base else ''}"


def gb_per_s(n: int, us: float) -> float:
    return n * FLOAT_BYTES / (us / US_PER_S) / BYTES_PER_GB


@dataclass
class Row:
    """One reduction measured: its grid, the blocks that fit at once, what pass 2 reads, its median time."""

    label: str
    grid: int
    resident: int
    pass2_floats: int
    us: float
    host_us: float  # the host's time for the same launch calls


def rows_text(n: int, rows: list[Row]) -> str:
    base = rows[0].us
    width = max(len(row.label) for row in rows)
    lines = [
        f"{'variant':<{width}}  blocks  fit at once  pass 2 reads  us per sum    GB/s  host us  against two passes"
    ]
    lines += [
        f"{row.label:<{width}}  {row.grid:>6}  {row.resident:>11}  {row.pass2_floats:>5} floats  {row.us:>10.1f}  "
        f"{gb_per_s(n, row.us):>6.0f}  {row.host_us:>7.1f}  {'-' if i == 0 else versus(row.us, base)}"
        for i, row in enumerate(rows)
    ]
    return "\n".join(lines)


def clusters_at_once(fn: Function, grid: int, cluster: int, stream: Stream) -> int:
    """cuOccupancyMaxActiveClusters: how many clusters of ``cluster`` blocks the GPU holds at once, for this launch."""
    options = LaunchOptions(cluster=(cluster, 1, 1))
    config = launch_config((grid, 1, 1, BLOCK, 1, 1, SHARED), stream.handle, attribute_array(options))
    count = c_int()
    fn.context.activate()
    cu.cuOccupancyMaxActiveClusters(byref(count), fn.handle, byref(config))
    return count.value


def say_reduce_verdict(t: Tutorial, n: int, rows: list[Row]) -> None:
    """One size's table in words: the fastest and slowest cluster against two passes, grids past one wave, and
    whether the host's launch calls set the pace."""
    base, clustered = rows[0], rows[1:]
    best = min(clustered, key=lambda row: row.us)
    worst = max(clustered, key=lambda row: row.us)
    t.say(
        f"n = {power(n)}: the fastest, {best.label}, took {versus(best.us, base.us, 'two passes')};\n"
        f"the slowest, {worst.label}, {versus(worst.us, base.us, 'two passes')}."
    )
    for row in rows:
        if row.resident < row.grid:
            t.say(
                f"{row.label}: {row.grid} blocks, {row.resident} fit at once -- that grid runs in more than one wave."
            )
    bound = [row for row in rows if row.host_us >= HOST_BOUND_SHARE * row.us]
    if bound:
        shares = [row.host_us / row.us for row in bound]
        which = f"all {len(rows)}" if len(bound) == len(rows) else f"{len(bound)} of the {len(rows)}"
        t.say(
            f"For {which} variants the host's two launch calls took {min(shares):.0%} to {max(shares):.0%} of the "
            "measured time:\nat this size the host sets the pace, and the table compares launch calls more than "
            "kernels\n(step 5 takes the host out of the way)."
        )


def say_reduce_lesson(t: Tutorial, n: int, rows: list[Row]) -> None:
    """What the largest size says, in words computed from its rows."""
    base = rows[0]
    best = min(rows[1:], key=lambda row: row.us)
    read, combined = n * FLOAT_BYTES, base.pass2_floats * FLOAT_BYTES
    where = (
        f"Pass 1 reads {read / MIB:.0f} MiB from memory; what a cluster takes away is most of pass 2's "
        f"{combined:,} bytes\n({combined / read:.4%} of that), and none of the two launches."
    )
    clustered = rows[1:]
    slower = all(later.us > earlier.us for earlier, later in itertools.pairwise(clustered))
    fewer = clustered[-1].resident < clustered[0].resident
    if slower and fewer:
        t.say(
            f"The larger the cluster, the more time it took here, and the fewer blocks fit at once "
            f"({clustered[0].resident} -> {clustered[-1].resident}):\na cluster's blocks must all be placed "
            "together, on the SMs of one GPC, and each cluster.sync() waits\nfor the slowest of them."
        )
    if best.us >= base.us * (1 - SAME_WITHIN):
        t.say(
            f"At n = {power(n)} no cluster size took {SAME_WITHIN:.0%} less time than two passes;\n"
            f"the best, {best.label}, took {versus(best.us, base.us, 'two passes')}.\n{where}\n"
            "For a memory-bound reduction the combine is not where the time goes. Distributed shared memory pays\n"
            "where the blocks of a cluster exchange data many times during a kernel -- a stencil's halos, tiles\n"
            "a matrix multiply's blocks share -- not once at its end."
        )
    else:
        t.say(
            f"At n = {power(n)} {best.label} took {versus(best.us, base.us, 'two passes')}.\n{where}\n"
            "So this run's difference came from somewhere other than the bytes of the combine: the table's\n"
            "'fit at once' column and the spread of repeated runs are where to look."
        )


@dataclass
class Chain:
    """One chain measured: GPU microseconds per link on a stream and in a graph, host microseconds per launch."""

    stream_us: float
    host_us: float
    graph_us: float


def say_chain_verdict(t: Tutorial, n: int, plain: Chain, early: Chain) -> None:
    """One size's two chains: a table, then PDL against plain on the stream and in the graph, in words."""
    share = plain.host_us / plain.stream_us
    blocks = -(-n // BLOCK)
    t.say(
        f"n = {n:,} ({blocks:,} block{'' if blocks == 1 else 's'} per kernel), per link:\n"
        "          on a stream   host, per launch call   in a graph\n"
        f"  plain   {plain.stream_us:8.2f} us   {plain.host_us:18.2f} us   {plain.graph_us:7.2f} us\n"
        f"  PDL     {early.stream_us:8.2f} us   {early.host_us:18.2f} us   {early.graph_us:7.2f} us\n"
        f"PDL against plain: on a stream {early.stream_us - plain.stream_us:+.2f} us per link, "
        f"{versus(early.stream_us, plain.stream_us)};\nin a graph {early.graph_us - plain.graph_us:+.2f} us per link, "
        f"{versus(early.graph_us, plain.graph_us)}."
    )
    pace = (
        "the host sets the pace there, and the kernels wait for it"
        if share >= HOST_BOUND_SHARE
        else "the GPU, not the host, set the pace"
    )
    t.say(
        f"On the stream the host took {plain.host_us:.2f} us per launch call, {share:.0%} of a link's "
        f"{plain.stream_us:.2f} us:\n{pace}."
    )


def say_chain_lesson(t: Tutorial, chains: dict[int, dict[str, Chain]]) -> None:
    """Both sizes together: where PDL showed, and what it saved per link in the graph at each size."""
    n = CHAIN_SIZES[0]
    plain, early = chains[n]["plain"], chains[n]["PDL"]
    host_bound = min(plain.host_us / plain.stream_us, early.host_us / early.stream_us) >= HOST_BOUND_SHARE
    in_graph = early.graph_us < plain.graph_us * (1 - SAME_WITHIN)
    on_stream = early.stream_us < plain.stream_us * (1 - SAME_WITHIN)
    if host_bound:
        stream = (
            f"on the stream the host set the pace (its launch calls: {plain.host_us:.2f} us per link plain, "
            f"{early.host_us:.2f} us with PDL),\nso the stream's {early.stream_us - plain.stream_us:+.2f} us per link "
            "is the host's"
        )
    else:
        stream = f"on the stream PDL took {versus(early.stream_us, plain.stream_us)} per link"
    if in_graph:
        graph = (
            f"in the graph, with the host out of the way, PDL took {versus(early.graph_us, plain.graph_us)} per "
            f"link ({plain.graph_us - early.graph_us:.2f} us less)."
        )
        lesson = (
            "PDL hides the gap between dependent kernels, which only shows once the host is out of the way."
            if host_bound or not on_stream
            else "PDL hides the gap between dependent kernels; here it showed on the stream as well."
        )
    else:
        graph = (
            f"in the graph PDL took {versus(early.graph_us, plain.graph_us)} per link -- the gap it hides did not "
            "show above the spread of the runs."
        )
        lesson = ""
    t.say(f"At n = {n:,} {stream};\n{graph}" + (f"\n{lesson}" if lesson else ""))
    for size in CHAIN_SIZES:
        before, after = chains[size]["plain"].graph_us, chains[size]["PDL"].graph_us
        t.say(
            f"in the graph at n = {size:,}: {before:.2f} -> {after:.2f} us per link with PDL, {versus(after, before)}"
        )


# --- the steps ------------------------------------------------------------------------------------------------------
@dataclass
class Hopper:
    """What the steps share: the context, the cluster_reduce module, the rank buffers and the hand-bound launch."""

    ctx: Context
    stream: Stream
    module: Module
    ranks: Function
    rank: DeviceBuffer
    size: DeviceBuffer
    launch_ex: Any
    sms: int


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "cust_raw",
        "kernel",
        "grid",
        "block",
        "warp",
        "SM",
        "shared memory",
        "dynamic shared memory",
        "stream",
        "legacy default stream",
        "event",
        "graph",
        "capture",
        "PTX",
        "context",
        "CUresult",
        "compute capability",
        "wave",
        "memory-bound",
        "sticky error",
    )
    hopper = by_hand(t)
    with_options(t, hopper)
    cluster_reduction(t, hopper)
    cooperative(t, hopper)
    dependent(t, hopper)
    cust(t)


def by_hand(t: Tutorial) -> Hopper:
    t.step("by hand: a thread-block cluster, asked for with one CUlaunchAttribute row passed to cuLaunchKernelEx")
    t.term("thread-block cluster")
    t.say(CLUSTER_TEXT)
    t.term("launch attribute")
    t.say(layout_text("CUlaunchAttribute, written out with ctypes", LaunchAttribute) + "\n" + members_text())
    t.say(layout_text("CUlaunchConfig, written out with ctypes", LaunchConfig))
    t.check(
        same_layouts(),
        "the three structs have the sizes and field offsets of rawcuda's (rawcuda.ffi.types, laid out against "
        "cuda.h by its header check)",
    )
    t.check(
        all(LaunchAttributeID[name.removeprefix("CU_LAUNCH_ATTRIBUTE_")] == value for name, value, *_ in MEMBERS),
        f"the three ids are rawcuda's LaunchAttributeID values ({', '.join(str(v) for _, v, *_ in MEMBERS)}), "
        "which its header check compares with cuda.h's enum",
    )

    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    device = ctx.device
    major, minor = device.compute_capability
    t.say(f"{device.name}: compute capability {major}.{minor}, {device.multiprocessor_count} SMs")
    t.check(device.compute_capability >= HOPPER, "compute capability 9.0 or newer: this GPU has clusters")
    module = Module(rawcuda.kernels.ptx_path("cluster_reduce"))
    ranks = module.function("cluster_ranks")
    rank, size = DeviceBuffer.empty(RANKS_BLOCKS, np.uint32), DeviceBuffer.empty(RANKS_BLOCKS, np.uint32)
    launch_ex = bind_launch_ex()

    row = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    row.value.clusterDim.x, row.value.clusterDim.y, row.value.clusterDim.z = CLUSTER, 1, 1
    rows = (LaunchAttribute * 1)(row)
    config = hand_config(RANKS_BLOCKS, RANKS_THREADS, 0, rows)
    params, _held = kernel_params(rank.ptr, size.ptr)  # cluster_ranks(unsigned *rank, unsigned *size)
    t.say(
        f"the row's first {ROW_BYTES_SHOWN} bytes: {bytes(row)[:ROW_BYTES_SHOWN].hex(' ')}\n"
        f"  id = {CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION} | 4 bytes of pad | clusterDim x = {CLUSTER}, y = 1, z = 1 "
        f"(the other {ctypes.sizeof(LaunchAttribute) - ROW_BYTES_SHOWN} bytes: zeros)\n"
        f"CUlaunchConfig: grid {RANKS_BLOCKS}, block {RANKS_THREADS}, no shared memory, hStream NULL (the legacy "
        "default stream),\nattrs -> the row, numAttrs 1; kernelParams built as in tutorial 00b"
    )
    poison(rank, size)
    code = launch_by_hand(launch_ex, config, ranks, params)
    t.check(code == CUDA_SUCCESS, f"cuLaunchKernelEx's CUresult: {code} ({result_name(code)})")
    got_rank, got_size = rank.to_array(), size.to_array()  # a copy with no stream: the context finishes first
    t.say(
        f"block: {list(range(SHOWN_BLOCKS))} ...\nrank:  {got_rank[:SHOWN_BLOCKS].tolist()} ...\n"
        f"size:  {got_size[:SHOWN_BLOCKS].tolist()} ..."
    )
    t.check(
        bool(np.array_equal(got_rank, np.arange(RANKS_BLOCKS) % CLUSTER) and np.all(got_size == CLUSTER)),
        f"all {RANKS_BLOCKS} blocks: rank = block % {CLUSTER} in clusters of {CLUSTER}, the shape the row asked for",
    )
    poison(rank, size)
    code = launch_by_hand(launch_ex, hand_config(RANKS_BLOCKS, RANKS_THREADS, 0, None), ranks, params)
    got_rank, got_size = rank.to_array(), size.to_array()
    t.check(
        code == CUDA_SUCCESS and bool(np.all(got_rank == 0) and np.all(got_size == 1)),
        "the same launch with numAttrs = 0: every block is a cluster of one (rank 0, size 1)",
    )
    return Hopper(ctx, Stream(), module, ranks, rank, size, launch_ex, device.multiprocessor_count)


def with_options(t: Tutorial, h: Hopper) -> None:
    t.step(f"rawcuda: fn.options(cluster={CLUSTER}), and the cluster launches rawcuda refuses before the driver")
    four = h.ranks.options(cluster=CLUSTER)
    got_rank, got_size = placements(four, RANKS_BLOCKS, h.rank, h.size)
    t.say(
        f"four = ranks.options(cluster={CLUSTER}); four.launch({RANKS_BLOCKS}, {RANKS_THREADS}, rank, size) builds "
        "the row of step 1\n(rawcuda/core/launchattrs.py) and launches through cuLaunchKernelEx."
    )
    t.check(
        bool(np.array_equal(got_rank, np.arange(RANKS_BLOCKS) % CLUSTER) and np.all(got_size == CLUSTER)),
        f"rank = block % {CLUSTER}, clusters of {CLUSTER}: the placement of the launch by hand",
    )
    before = h.ranks.attribute(FunctionAttribute.NON_PORTABLE_CLUSTER_SIZE_ALLOWED)
    got_rank, got_size = placements(h.ranks.options(cluster=LARGE_CLUSTER), RANKS_BLOCKS, h.rank, h.size)
    after = h.ranks.attribute(FunctionAttribute.NON_PORTABLE_CLUSTER_SIZE_ALLOWED)
    t.say(
        f"cluster={LARGE_CLUSTER} is past the portable {PORTABLE_CLUSTER}: the kernel's\n"
        f"NON_PORTABLE_CLUSTER_SIZE_ALLOWED was {before} before the launch, {after} after it"
    )
    t.check(
        after == 1 and bool(np.array_equal(got_rank, np.arange(RANKS_BLOCKS) % LARGE_CLUSTER)),
        f"clusters of {LARGE_CLUSTER}: rawcuda opted the kernel in itself, and rank = block % {LARGE_CLUSTER}",
    )

    fixed = h.module.function("cluster_ranks_compiled")
    ptx = rawcuda.kernels.ptx_path("cluster_reduce").read_text()
    width = fixed.attribute(FunctionAttribute.REQUIRED_CLUSTER_WIDTH)
    t.say(
        f"cluster_ranks_compiled is declared __cluster_dims__{COMPILED_CLUSTER}; its PTX says "
        f"{ptx_directive(ptx, 'cluster_ranks_compiled', 'reqnctapercluster')}\n"
        f"rawcuda read it: compiled_cluster = {fixed.compiled_cluster}; the driver's REQUIRED_CLUSTER_WIDTH: {width}"
    )
    got_rank, got_size = placements(fixed, RANKS_BLOCKS, h.rank, h.size)
    t.check(
        fixed.compiled_cluster == COMPILED_CLUSTER
        and bool(np.array_equal(got_rank, np.arange(RANKS_BLOCKS) % COMPILED_CLUSTER[0])),
        f"compiled in as {COMPILED_CLUSTER}: a launch with no option runs in clusters of {COMPILED_CLUSTER[0]} "
        f"(rank = block % {COMPILED_CLUSTER[0]})",
    )

    t.say("three launches rawcuda refuses before the driver is asked, each with its message:")
    poison(h.rank, h.size)
    ragged = refused(
        t,
        f"four.launch({RAGGED_GRID}, ...): a grid that is not a whole number of clusters",
        lambda: four.launch(RAGGED_GRID, RANKS_THREADS, h.rank, h.size),
    )
    t.check(str(RAGGED_GRID) in ragged, f"refused, naming the grid of {RAGGED_GRID}")
    against = refused(
        t,
        f"cluster_ranks_compiled.options(cluster={CLUSTER}).launch(...): against its compiled clusters",
        lambda: fixed.options(cluster=CLUSTER).launch(RANKS_BLOCKS, RANKS_THREADS, h.rank, h.size),
    )
    t.check(str(COMPILED_CLUSTER) in against, f"refused, naming the compiled {COMPILED_CLUSTER} from the PTX")
    large = refused(
        t,
        f"ranks.options(cluster={TOO_LARGE_CLUSTER}).launch(...): a cluster larger than the GPU can hold",
        lambda: h.ranks.options(cluster=TOO_LARGE_CLUSTER).launch(RANKS_BLOCKS, RANKS_THREADS, h.rank, h.size),
    )
    t.check(
        "cuOccupancyMaxPotentialClusterSize" in large,
        "refused, naming cuOccupancyMaxPotentialClusterSize, the driver's answer for the largest cluster",
    )
    h.ctx.synchronize()
    t.check(
        bool(np.all(h.rank.to_array() == POISON) and np.all(h.size.to_array() == POISON)),
        "none of the three ran: both buffers still hold the poison",
    )


def two_pass(
    pass2: Function, grid: int, partials: DeviceBuffer, total: DeviceBuffer, data: DeviceBuffer, n: int, stream: Stream
) -> Callable[[], None]:
    """The two-pass warp-shuffle reduction of tutorial 03a: ``grid`` partial sums, then one block adds them."""

    def work() -> None:
        pass2.launch(grid, BLOCK, partials, data, n, shared_mem=SHARED, stream=stream)
        pass2.launch(1, BLOCK, total, partials, grid, shared_mem=SHARED, stream=stream)

    return work


def cluster_pass(
    fn: Function,
    pass2: Function,
    grid: int,
    cluster: int,
    buffers: tuple[DeviceBuffer, DeviceBuffer, DeviceBuffer],
    n: int,
    stream: Stream,
) -> Callable[[], None]:
    """cluster_sum over clusters of ``cluster`` blocks (one sum per cluster), then pass 2 over grid / cluster.

    ``buffers``: (partials, total, data).
    """
    partials, total, data = buffers

    def work() -> None:
        fn.launch(grid, BLOCK, partials, data, n, shared_mem=SHARED, stream=stream)
        pass2.launch(1, BLOCK, total, partials, grid // cluster, shared_mem=SHARED, stream=stream)

    return work


def cluster_reduction(t: Tutorial, h: Hopper) -> None:
    t.step("a cluster reduction through distributed shared memory, against the two-pass warp-shuffle reduction")
    t.term("distributed shared memory")
    t.say(excerpt("cluster_reduce.cu", "cluster_sum"))
    pass2 = h.module.function("warp_reduce_sum")  # reduce.cu's kernel, in this module: both passes, and pass 2
    cluster_sum = h.module.function("cluster_sum")
    grid = REDUCE_BLOCKS_PER_SM * h.sms
    twins = {cluster: cluster_sum.options(cluster=cluster) for cluster in CLUSTERS}
    one_wave = pass2.max_active_blocks_per_sm(BLOCK, SHARED) * h.sms
    t.say(
        f"two passes: warp_reduce_sum over {grid} blocks ({REDUCE_BLOCKS_PER_SM} per SM; a warp adds its {WARP}\n"
        f"threads' sums with shuffles), then once more over the {grid} partial sums in one block (one Function).\n"
        f"cluster of C: cluster_sum over {grid} // C * C blocks, rank 0 of each cluster adding the others' block\n"
        "totals from their shared memory, then warp_reduce_sum over one sum per cluster.\n"
        f"Times: time_ms, one event before and one after {INNER} reductions, median of {REPS} runs."
    )
    rng = np.random.default_rng()
    measured: dict[int, list[Row]] = {}
    for n in SIZES:
        host, exact = small_integers(rng, n)
        data = DeviceBuffer.from_array(host, stream=h.stream)
        partials, total = DeviceBuffer.empty(grid), DeviceBuffer.empty(1)
        works: list[tuple[str, Callable[[], None], int, int | None]] = [
            ("two passes", two_pass(pass2, grid, partials, total, data, n, h.stream), grid, None)
        ]
        for cluster, fn in twins.items():
            cgrid = grid // cluster * cluster
            work = cluster_pass(fn, pass2, cgrid, cluster, (partials, total, data), n, h.stream)
            works.append((f"cluster of {cluster} + pass 2", work, cgrid, cluster))
        totals = [total_of(work, total, h.stream) for _, work, _, _ in works]
        t.check(
            all(value == exact for value in totals),
            f"n = {power(n)}: all {len(works)} totals equal numpy's int64 sum, {exact:,}, exactly",
        )
        rows = []
        for label, work, wgrid, cluster in works:
            if cluster is None:
                rows.append(Row(label, wgrid, one_wave, wgrid, *timed_us(work, h.stream)))
            else:  # asked after its first launch, which opted a cluster of 16 in
                resident = clusters_at_once(twins[cluster], wgrid, cluster, h.stream) * cluster
                rows.append(Row(label, wgrid, resident, wgrid // cluster, *timed_us(work, h.stream)))
        measured[n] = rows
        t.say(f"n = {power(n)} floats ({n * FLOAT_BYTES / MIB:g} MiB):\n" + rows_text(n, rows))
        say_reduce_verdict(t, n, rows)
        for buf in (data, partials, total):
            buf.close()
    say_reduce_lesson(t, SIZES[-1], measured[SIZES[-1]])


def cooperative_sum(
    fn: Function, grid: int, buffers: tuple[DeviceBuffer, DeviceBuffer, DeviceBuffer], n: int, stream: Stream
) -> Callable[[], None]:
    """grid_sum in one cooperative launch of ``grid`` blocks; ``buffers``: (partials, total, data)."""
    partials, total, data = buffers

    def work() -> None:
        fn.launch(grid, BLOCK, total, partials, data, n, shared_mem=SHARED, stream=stream)

    return work


def plain_launch_in_child() -> dict[str, int]:
    """Run CHILD in a fresh interpreter: grid_sum launched plainly; the CUresults it printed."""
    args = [str(ROOT), str(CHILD_BLOCKS), str(BLOCK), str(SHARED), str(CHILD_FLOATS)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise TutorialCheckError(
            f"the child process printed no codes (status {proc.returncode}): {proc.stderr.strip()[-600:]}"
        ) from None


def cooperative(t: Tutorial, h: Hopper) -> None:
    t.step("a cooperative launch: grid_sum adds both passes in one kernel, across one grid.sync()")
    t.term("cooperative launch")
    t.term("grid-wide sync")
    t.say(excerpt("grid_reduce.cu", "grid_sum"))
    grid_sum = Module(rawcuda.kernels.ptx_path("grid_reduce")).function("grid_sum")
    together = grid_sum.options(cooperative=True)
    per_sm = grid_sum.max_active_blocks_per_sm(BLOCK, SHARED)
    most = per_sm * h.sms
    t.say(
        f"blocks of {BLOCK} threads with {SHARED} B of dynamic shared memory: {per_sm} fit on one SM\n"
        f"(cuOccupancyMaxActiveBlocksPerMultiprocessor) x {h.sms} SMs = {most} blocks, the largest grid whose\n"
        "blocks are all resident at once. grid_sum runs on exactly that many; two passes as in step 3."
    )
    pass2 = h.module.function("warp_reduce_sum")
    grid = REDUCE_BLOCKS_PER_SM * h.sms
    rng = np.random.default_rng()
    times = {}
    for n in SIZES:
        host, exact = small_integers(rng, n)
        data = DeviceBuffer.from_array(host, stream=h.stream)
        partials, total = DeviceBuffer.empty(most + 1), DeviceBuffer.empty(1)

        one = cooperative_sum(together, most, (partials, total, data), n, h.stream)
        two = two_pass(pass2, grid, partials, total, data, n, h.stream)
        got = (total_of(one, total, h.stream), total_of(two, total, h.stream))
        t.check(
            all(value == exact for value in got),
            f"n = {power(n)}: grid_sum's total and the two passes' equal numpy's int64 sum, {exact:,}, exactly",
        )
        times[n] = (timed_us(two, h.stream), timed_us(one, h.stream))
        if n != SIZES[-1]:
            for buf in (data, partials, total):
                buf.close()
    lines = [f"{'n':>5}  two passes   host    grid_sum, one launch   host    saved    against two passes"]
    lines += [
        f"{power(n):>5}  {two:7.1f} us  {two_host:5.1f} us  {one:17.1f} us  {one_host:5.1f} us  {two - one:+6.1f} us  "
        f"{versus(one, two)}"
        for n, ((two, two_host), (one, one_host)) in times.items()
    ]
    t.say("\n".join(lines))
    (small_two, small_host), (small_one, _) = times[SIZES[0]]
    (big_two, _), (big_one, _) = times[SIZES[-1]]
    saved = " and ".join(f"{two - one:+.1f} us of {two:.1f} at {power(n)}" for n, ((two, _), (one, _)) in times.items())
    if small_host >= HOST_BOUND_SHARE * small_two:
        t.say(
            f"One launch instead of two saved {saved}.\nAt {power(SIZES[0])} the host's two launch calls took "
            f"{small_host:.1f} us of the two passes' {small_two:.1f} us:\nthe host set the pace, and grid_sum makes "
            "half the launch calls."
        )
    elif small_one / small_two < big_one / big_two:
        t.say(
            f"One launch instead of two saved {saved}:\nwhat it saves -- a launch, and the gap before the "
            "second pass -- is a larger share of a short reduction than of a long one."
        )
    else:
        t.say(f"One launch instead of two: {saved}; no larger a share of the short reduction here.")

    too_many = most + 1
    row = LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
    row.value.cooperative = 1
    rows = (LaunchAttribute * 1)(row)
    params, _held = kernel_params(total.ptr, partials.ptr, data.ptr, SIZES[-1])  # grid_sum(out, partials, in, n)
    total.fill(NAN)
    code = launch_by_hand(h.launch_ex, hand_config(too_many, BLOCK, SHARED, rows), grid_sum, params)
    t.say(f"by hand: cuLaunchKernelEx(grid = {too_many}, one COOPERATIVE row) -> {code} ({result_name(code)})")
    t.check(
        code == Result.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        f"one block more than fit: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE "
        f"({Result.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:d}), from the call itself",
    )
    args = (total, partials, data, SIZES[-1])
    message = refused(
        t,
        f"grid_sum.options(cooperative=True).launch({too_many}, ...)",
        lambda: together.launch(too_many, BLOCK, *args, shared_mem=SHARED),
    )
    t.check(str(most) in message, f"rawcuda refuses it first, naming the limit: at most {most} blocks")
    message = refused(
        t,
        f"grid_sum.launch({most}, ...): no cooperative option",
        lambda: grid_sum.launch(most, BLOCK, *args, shared_mem=SHARED),
    )
    t.check(
        "cooperative=True" in message, "a plain launch of a kernel with a grid-wide sync is refused, naming the option"
    )
    h.ctx.synchronize()
    untouched = bool(np.isnan(total.to_array()[0]))
    again = total_of(lambda: together.launch(most, BLOCK, *args, shared_mem=SHARED, stream=h.stream), total, h.stream)
    t.check(
        untouched and again == exact,
        "none of the three ran (the total stayed NaN), and the context is healthy: the next cooperative launch "
        "summed exactly",
    )
    for buf in (data, partials, total):
        buf.close()

    codes = plain_launch_in_child()
    t.say(
        "what rawcuda's refusal spares you, shown in a child process (its own context): grid_sum launched plainly\n"
        "through a hand-bound cuLaunchKernelEx, each CUresult read bare:\n"
        f"  cuLaunchKernelEx  -> {codes['launch']} ({result_name(codes['launch'])})\n"
        f"  cuCtxSynchronize  -> {codes['sync']} ({result_name(codes['sync'])})\n"
        f"  cuMemAlloc_v2     -> {codes['after']} ({result_name(codes['after'])}), a call after it"
    )
    t.check(
        codes["sync"] == Result.ERROR_LAUNCH_FAILED and codes["after"] == Result.ERROR_LAUNCH_FAILED,
        f"the kernel trapped: CUDA_ERROR_LAUNCH_FAILED ({Result.ERROR_LAUNCH_FAILED:d}) at the synchronization, "
        "and from the next call too -- a sticky error: that context is lost",
    )


def chain(fn: Function, ping: DeviceBuffer, pong: DeviceBuffer, stream: Stream) -> None:
    """LINKS launches of add_one, each reading what the one before wrote: ping -> pong -> ping ..."""
    n = ping.size
    grid = -(-n // BLOCK)
    for link in range(LINKS):
        src, dst = (ping, pong) if link % 2 == 0 else (pong, ping)
        fn.launch(grid, BLOCK, dst, src, n, stream=stream)


def timed_chain(fn: Function, ping: DeviceBuffer, pong: DeviceBuffer, stream: Stream) -> Chain:
    """The chain's GPU time per link on ``stream`` and replayed from a graph, and the host's time per launch call."""
    host_s: list[float] = []

    def on_stream() -> None:
        began = time.perf_counter()
        chain(fn, ping, pong, stream)
        host_s.append(time.perf_counter() - began)

    stream_ms = time_ms(on_stream, reps=CHAIN_REPS, stream=stream).median
    with capture(stream) as graph:
        chain(fn, ping, pong, stream)
    replay = graph.instantiate()
    graph_ms = time_ms(lambda: replay.launch(stream), reps=CHAIN_REPS, stream=stream).median
    replay.close()
    graph.close()
    return Chain(
        stream_ms * US_PER_MS / LINKS, statistics.median(host_s) * US_PER_S / LINKS, graph_ms * US_PER_MS / LINKS
    )


def chain_right(fn: Function, ping: DeviceBuffer, pong: DeviceBuffer, host: np.ndarray, stream: Stream) -> bool:
    """The chain once on the stream and once replayed from a graph of it, on fresh data: x + LINKS both times."""
    ping.copy_from(host, stream=stream)
    chain(fn, ping, pong, stream)
    right = bool(np.array_equal(ping.to_array(stream), host + LINKS))
    with capture(stream) as graph:
        chain(fn, ping, pong, stream)
    replay = graph.instantiate()
    ping.copy_from(host, stream=stream)
    replay.launch(stream)
    right = right and len(graph.nodes()) == LINKS and bool(np.array_equal(ping.to_array(stream), host + LINKS))
    replay.close()
    graph.close()
    return right


def dependent(t: Tutorial, h: Hopper) -> None:
    t.step(f"programmatic dependent launch: {LINKS} add_one launches in a chain, on a stream and in a graph")
    t.term("programmatic dependent launch")
    t.say(excerpt("dependent_launch.cu", "add_one"))
    add_one = Module(rawcuda.kernels.ptx_path("dependent_launch")).function("add_one")
    variants = {"plain": add_one, "PDL": add_one.options(programmatic=True)}
    t.say(
        f"Each link adds 1, ping-ponging between two buffers: after {LINKS} links the first holds x + {LINKS}.\n"
        f"Times per link: time_ms on the whole chain, median of {CHAIN_REPS} runs, divided by {LINKS}; the\n"
        "graph is the same chain recorded with stream capture, replayed with one launch call."
    )
    rng = np.random.default_rng()
    chains: dict[int, dict[str, Chain]] = {}
    for n in CHAIN_SIZES:
        host, _ = small_integers(rng, n)
        ping, pong = DeviceBuffer.from_array(host, stream=h.stream), DeviceBuffer.empty(n)
        right = [chain_right(fn, ping, pong, host, h.stream) for fn in variants.values()]
        t.check(
            all(right),
            f"n = {n:,}: plain and PDL, on the stream and replayed from a graph of {LINKS} kernel nodes: "
            f"every element is x + {LINKS}, exactly",
        )
        chains[n] = {label: timed_chain(fn, ping, pong, h.stream) for label, fn in variants.items()}
        say_chain_verdict(t, n, chains[n]["plain"], chains[n]["PDL"])
        ping.close()
        pong.close()
    say_chain_lesson(t, chains)


def cust(t: Tutorial) -> None:
    t.step("cust: no clusters, no cooperative launch, no PDL -- read from Rust-CUDA ac2674f, crates/cust")
    t.say(CUST_TEXT)


if __name__ == "__main__":
    run(main, "Tutorial 15: Hopper's own launches -- clusters, cooperative grids, programmatic dependent launch")
