"""Leaks: thousands of create/destroy cycles of every kind of object, and objects nobody closed.

After each loop, device memory (``cuMemGetInfo``, after a synchronize and a garbage collection) must be
back at its baseline within a small tolerance -- the driver's pools may keep a page or two -- and the
number of open objects in the context must be exactly what it was. Pinned memory is host memory, so for
it the process's resident set size is the measure. A leak of one object per cycle would show as
megabytes to gigabytes here, far beyond the tolerances.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, Event, ManagedBuffer, Module, PinnedBuffer, Stream, kernels, ops
from rawcuda.core.context import default_context

pytestmark = pytest.mark.gpu

MIB = 1 << 20
DEVICE_TOLERANCE = 4 * MIB
HOST_TOLERANCE = 64 * MIB  # resident set size also moves with Python's own allocations
ALLOC_CYCLES = 10_000
MODULE_CYCLES = 1_000
STREAM_CYCLES = 1_000
EVENT_CYCLES = 1_000
PINNED_CYCLES = 1_000
PINNED_BYTES = MIB  # 1,000 leaked MiB would be unmistakable
ALLOC_SIZES = (1, 4097, MIB, 3 * MIB + 5)  # bytes: sub-allocated, page-sized and odd
DROPPED = 64  # objects of each kind dropped without close()
DROPPED_BYTES = 16 * MIB  # each dropped device buffer: 1 GiB in all, if the finalizers failed
CONTEXT_CYCLES = 20
SUM_CYCLES = 500  # ops.sum allocates and frees two scratch buffers per call
PAGE = 4096


@dataclass
class Baseline:
    free: int
    open: Counter[str]  # the open objects of the context, by repr
    rss: int


def resident_bytes() -> int:
    """The process's resident set size, from /proc/self/statm (pages)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE


def open_objects() -> Counter[str]:
    return Counter(repr(child) for child in default_context().children)


def settle() -> None:
    gc.collect()
    default_context().synchronize()


@pytest.fixture
def baseline() -> Iterator[Callable[[], Baseline]]:
    """Measure before the test; the test calls the returned function to check it is back there."""
    ctx = default_context()
    for stem, name in (("vector_add", "vector_add"), ("reduce", "warp_reduce_sum")):
        ops.kernel(stem, name, ctx)  # loaded before the baseline: these stay loaded for the session
    settle()
    start = Baseline(ctx.mem_info()[0], open_objects(), resident_bytes())

    def check() -> Baseline:
        settle()
        now = Baseline(ctx.mem_info()[0], open_objects(), resident_bytes())
        # No new open object may remain. (Fewer is fine: an object of an earlier test may die meanwhile, e.g.
        # a module kept alive only by the context's last_launch until another kernel is launched.)
        leaked = now.open - start.open
        assert not leaked, f"objects left open: {sorted(leaked.elements())}"
        assert now.free >= start.free - DEVICE_TOLERANCE, (
            f"device memory not returned: {(start.free - now.free) / MIB:.1f} MiB missing"
        )
        return now

    yield check


def test_alloc_free_cycles(baseline: Callable[[], Baseline]) -> None:
    for i in range(ALLOC_CYCLES):
        DeviceBuffer.empty(ALLOC_SIZES[i % len(ALLOC_SIZES)], np.uint8).close()
    baseline()


def test_module_load_unload_cycles(baseline: Callable[[], Baseline]) -> None:
    image = kernels.ptx_path("vector_add").read_bytes()
    for _ in range(MODULE_CYCLES):
        module = Module(image)
        module.function("vector_add")  # a looked-up function must not keep anything alive either
        module.close()
    baseline()


def test_stream_and_event_cycles(baseline: Callable[[], Baseline]) -> None:
    for _ in range(STREAM_CYCLES):
        Stream().close()
    for i in range(EVENT_CYCLES):
        Event(timing=bool(i % 2)).record().close()
    baseline()


def test_pinned_alloc_free_cycles(baseline: Callable[[], Baseline]) -> None:
    start = resident_bytes()
    for _ in range(PINNED_CYCLES):
        pinned = PinnedBuffer(PINNED_BYTES, np.uint8)
        pinned.array[::PAGE] = 1  # touch every page, so a leak would be resident
        pinned.close()
    baseline()
    grown = resident_bytes() - start
    assert grown < HOST_TOLERANCE, f"resident memory grew by {grown / MIB:.0f} MiB over {PINNED_CYCLES} cycles"


def test_scratch_buffers_of_ops_are_returned(baseline: Callable[[], Baseline]) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal(10_007, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx:
        for _ in range(SUM_CYCLES):
            ops.sum(dx)
    baseline()


def test_created_context_cycles(baseline: Callable[[], Baseline]) -> None:
    for _ in range(CONTEXT_CYCLES):
        ctx = Context.create(0)
        children = [DeviceBuffer.empty(MIB, context=ctx), Stream(ctx), Event(ctx).record()]  # left open ...
        ctx.close()
        assert all(child.closed for child in children)  # ... Context.close() closed them first
    baseline()


def make_and_forget(image: bytes) -> list[object]:
    """One object of every kind, returned in a list that holds the only references to them."""
    buf = DeviceBuffer.empty(DROPPED_BYTES, np.uint8)
    return [
        buf,
        buf[: DROPPED_BYTES // 2],
        Stream(),
        Event().record(),
        PinnedBuffer(PAGE),
        ManagedBuffer(PAGE),
        Module(image),
    ]


def drop_a_round(image: bytes) -> int:
    """Make DROPPED objects of every kind, drop them without close(), and return how many were alive."""
    kept: list[object] = []
    for _ in range(DROPPED):
        kept += make_and_forget(image)
    settle()
    alive = len(default_context().children)
    kept.clear()  # no close(): weakref.finalize must release each (views make cycles: gc.collect breaks them)
    settle()
    return alive


def test_objects_dropped_without_close_are_freed_by_the_garbage_collector() -> None:
    ctx = default_context()
    image = kernels.ptx_path("vector_add").read_bytes()
    # A first round lets the driver grow its own pools for 64 live streams, events and modules (memory it
    # keeps for reuse after they are destroyed, as the device showed: ~30 MiB). Measure from after it.
    drop_a_round(image)
    free_before, open_before = ctx.mem_info()[0], open_objects()
    kept: list[object] = []
    for _ in range(DROPPED):
        kept += make_and_forget(image)
    settle()
    assert ctx.mem_info()[0] <= free_before - DROPPED * DROPPED_BYTES + DEVICE_TOLERANCE  # really allocated
    assert len(ctx.children) >= 7 * DROPPED
    kept.clear()
    settle()
    assert not (open_objects() - open_before), "objects left open after garbage collection"
    missing = free_before - ctx.mem_info()[0]
    assert missing <= DEVICE_TOLERANCE, f"device memory not returned: {missing / MIB:.1f} MiB missing"


def test_alloc_free_and_module_cycles_return_to_baseline() -> None:
    ctx = default_context()
    ctx.synchronize()
    gc.collect()
    before, _ = ctx.mem_info()
    for _ in range(10_000):
        DeviceBuffer.empty(MIB, np.uint8).close()
    image = rawcuda.kernels.ptx_path("vector_add").read_bytes()
    for _ in range(1_000):
        Module(image).close()
    gc.collect()
    after, _ = ctx.mem_info()
    assert abs(after - before) <= 2 * MIB, (before, after)


def _free_device_bytes() -> int:
    ctx = default_context()
    ctx.synchronize()
    return ctx.mem_info()[0]


@pytest.mark.parametrize("kind", ["view", "view of a view", "growable"])
def test_memory_with_views_is_freed_without_the_cyclic_gc(kind: str) -> None:
    # A view holds its base; the base held its views in a list, and a GrowableBuffer its current view: cycles,
    # so dropping both freed nothing until the cyclic GC ran -- and with gc.disable(), nothing at all (256 MiB
    # a round here). The references back are weak now: dropping the last reference frees the memory.
    from rawcuda import GrowableBuffer

    size = 256 * MIB
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = _free_device_bytes()
        for _ in range(4):
            if kind == "growable":
                owner = GrowableBuffer(size, np.uint8)
                owner.grow(size)
                view = owner.buffer[10:20]
            else:
                owner = DeviceBuffer.empty(size, np.uint8)
                view = owner[10:20] if kind == "view" else owner[10:20].view(2, 4)
            assert view.size and not view.closed
            del owner, view  # no close(), no gc.collect()
        leaked = before - _free_device_bytes()
    finally:
        if enabled:
            gc.enable()
    assert leaked < size // 2, f"{leaked / MIB:.0f} MiB still held after dropping 4 x {size // MIB} MiB"
