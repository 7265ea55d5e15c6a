"""GrowableBuffer on a real GPU: reserve once, map chunks, grow without moving or losing contents."""

from __future__ import annotations

import gc
from ctypes import byref, c_ulonglong

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, ops
from rawcuda.checked import cu
from rawcuda.core.context import default_context
from rawcuda.extras.growable import CapacityError, GrowableBuffer, allocation_granularity, copy_grow, round_up
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.constants import MemAccessFlag, MemGranularity, MemLocationType
from rawcuda.ffi.types import CUmemLocation

pytestmark = pytest.mark.gpu

MIB = 1 << 20
CAPACITY = 256 * MIB  # address space only: costs no memory until mapped
NAN32 = np.float32(np.nan)


@pytest.fixture(scope="module")
def granularity() -> int:
    if not rawcuda.Device(0).attribute(DeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED):
        pytest.skip("this GPU does not support virtual memory management")
    return allocation_granularity()


def test_granularity_is_a_power_of_two_and_no_larger_than_recommended(granularity: int) -> None:
    assert granularity > 0 and granularity & (granularity - 1) == 0
    assert allocation_granularity(which=MemGranularity.RECOMMENDED) % granularity == 0


def test_grow_keeps_the_address_and_the_contents(granularity: int, rng: np.random.Generator) -> None:
    per_chunk = granularity // 4  # float32 elements in one granularity unit
    sizes = [1, per_chunk - 1, per_chunk, per_chunk + 1, 3 * per_chunk + 12_345, 7 * per_chunk]
    with GrowableBuffer(CAPACITY, np.float32) as buf:
        assert buf.size == 0 and buf.mapped_bytes == 0 and buf.chunks == []
        base = buf.ptr
        reference = np.empty(0, np.float32)
        for n in sizes:
            fresh = rng.standard_normal(n - reference.size, dtype=np.float32)
            buf.extend(fresh)
            reference = np.concatenate([reference, fresh])
            assert buf.ptr == base and buf.buffer.ptr == base, "the address must never change"
            assert buf.size == n and buf.mapped_bytes == round_up(n * 4, granularity)
            np.testing.assert_array_equal(buf.to_array(), reference)  # every element, old and new
        offsets = [offset for offset, _ in buf.chunks]
        assert offsets == sorted(offsets) and offsets[0] == 0
        assert all(a + s == b for (a, s), (b, _) in zip(buf.chunks, buf.chunks[1:], strict=False)), "contiguous"
        assert buf.__cuda_array_interface__["data"] == (base, False)
        assert buf.__cuda_array_interface__["shape"] == (sizes[-1],)


def test_a_grow_within_the_mapped_bytes_maps_nothing(granularity: int) -> None:
    with GrowableBuffer(CAPACITY, np.float32) as buf:
        buf.grow(10)
        chunks = buf.chunks
        buf.grow(granularity // 4)  # still fits the first chunk
        assert buf.chunks == chunks and buf.size == granularity // 4
        buf.grow(granularity // 4)  # same size: nothing happens
        with pytest.raises(ValueError, match="only grows"):
            buf.grow(5)


def test_kernels_run_across_chunk_boundaries(granularity: int, rng: np.random.Generator) -> None:
    n = 2 * (granularity // 4) + 777  # spans three chunks when grown in steps
    a_host, b_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    bufs = [GrowableBuffer(CAPACITY, np.float32) for _ in range(3)]
    a, b, c = bufs
    try:
        for step in (n // 3, 2 * n // 3, n):  # grow in steps so the arrays really are several mappings
            a.extend(a_host[a.size : step])
            b.extend(b_host[b.size : step])
            c.grow(step)
        assert len(a.chunks) == 3
        c.buffer.fill(NAN32)
        ops.vector_add(c.buffer, a.buffer, b.buffer)
        np.testing.assert_array_equal(c.to_array(), a_host + b_host)
    finally:
        for buf in bufs:
            buf.close()


def test_a_growable_buffer_is_a_kernel_argument_as_rawcuda_memory_also_in_a_capture(
    vector_add: rawcuda.Function, rng: np.random.Generator
) -> None:
    # Before: a GrowableBuffer argument went through its __cuda_array_interface__ at every launch, whose
    # pending-stream check refused inside a capture once eager work on the capturing stream was recorded
    # (BufferError instead of a captured launch).
    n = 4096
    a_host, b_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    s = rawcuda.Stream()
    bufs = [GrowableBuffer(CAPACITY, np.float32) for _ in range(3)]
    a, b, c = bufs
    try:
        a.extend(a_host, stream=s)
        b.extend(b_host, stream=s)
        c.extend(np.full(n, NAN32), stream=s)  # eager work on s: recorded as pending on each
        grid = (n + 255) // 256
        vector_add.launch(grid, 256, c, a, b, n, stream=s)
        assert c.pending.streams and c.pending.streams[-1]() is s, "the launch recorded s on c's memory"
        s.synchronize()
        np.testing.assert_array_equal(c.to_array(), a_host + b_host)
        c.buffer.fill(NAN32)
        vector_add.launch(grid, 256, c, a, b, n, stream=s)  # pending on s again, eagerly
        with rawcuda.capture(s) as graph:
            vector_add.launch(grid, 256, c, c, b, n, stream=s)  # c = (a + b) + b, at each replay
        s.synchronize()
        np.testing.assert_array_equal(c.to_array(), a_host + b_host, "the capture ran nothing yet")
        with graph.instantiate() as replay:
            replay.launch(s)
            s.synchronize()
        np.testing.assert_array_equal(c.to_array(), (a_host + b_host) + b_host)
        graph.close()
    finally:
        for buf in bufs:
            buf.close()
        s.close()


def test_the_device_may_read_and_write_every_mapped_chunk(granularity: int) -> None:
    with GrowableBuffer(CAPACITY, np.uint8) as buf:
        buf.grow(granularity)
        buf.grow(3 * granularity)
        loc = CUmemLocation(MemLocationType.DEVICE, default_context().device.handle)
        default_context().activate()
        for offset, _ in buf.chunks:
            flags = c_ulonglong()
            cu.cuMemGetAccess(byref(flags), byref(loc), buf.ptr + offset)
            assert flags.value == MemAccessFlag.PROT_READWRITE


def test_growth_beyond_the_reservation_is_refused_and_changes_nothing(granularity: int) -> None:
    with GrowableBuffer(2 * granularity, np.float32) as buf:
        assert buf.capacity_bytes == 2 * granularity and buf.capacity == 2 * granularity // 4
        buf.grow(buf.capacity)  # exactly full is fine
        buf.buffer.fill(np.float32(3.0))
        chunks = buf.chunks
        with pytest.raises(CapacityError, match="reserve more") as info:
            buf.grow(buf.capacity + 1)
        assert isinstance(info.value, ValueError)
        assert buf.size == buf.capacity and buf.chunks == chunks
        assert (buf.to_array() == 3.0).all()
    with GrowableBuffer(8, np.float64) as tiny:  # one element, rounded up to one granularity unit
        assert tiny.capacity_bytes == granularity


def test_close_returns_the_memory_and_closes_the_views(granularity: int) -> None:
    ctx = default_context()
    gc.collect()  # earlier tests' garbage is freed now, not inside the measurement
    ctx.synchronize()
    free_before, _ = ctx.mem_info()
    buf = GrowableBuffer(CAPACITY, np.float32)
    view = buf.grow(16 * granularity // 4)  # 16 granularity units of physical memory
    free_during, _ = ctx.mem_info()
    assert free_before - free_during >= 16 * granularity - 2 * granularity  # the driver really mapped memory
    buf.close()
    buf.close()  # idempotent
    free_after, _ = ctx.mem_info()
    assert abs(free_after - free_before) <= 2 * granularity
    assert buf.closed and view.closed
    with pytest.raises(rawcuda.ClosedError):
        view.to_array()
    with pytest.raises(rawcuda.ClosedError):
        buf.grow(1)


def test_garbage_collected_buffer_is_torn_down(granularity: int) -> None:
    ctx = default_context()
    gc.collect()  # earlier tests' garbage is freed now, not inside the measurement
    ctx.synchronize()
    free_before, _ = ctx.mem_info()
    buf = GrowableBuffer(CAPACITY, np.float32)
    buf.grow(8 * granularity // 4)
    view = buf.buffer
    del buf
    gc.collect()
    assert not view.closed  # the view keeps its GrowableBuffer (and so the mapping) alive
    view.fill(np.float32(1.0))
    del view
    gc.collect()
    free_after, _ = ctx.mem_info()
    assert abs(free_after - free_before) <= 2 * granularity


def test_closing_a_created_context_closes_the_buffer_first(granularity: int) -> None:
    ctx = Context.create(0)
    buf = GrowableBuffer(CAPACITY, np.int32, ctx)
    buf.extend(np.arange(1000, dtype=np.int32))
    np.testing.assert_array_equal(buf.to_array(), np.arange(1000, dtype=np.int32))
    view = buf.buffer
    ctx.close()  # synchronize, close children (views, then the buffer: unmap, release, free), destroy
    assert buf.closed and view.closed


def test_extend_refuses_another_dtype_before_growing(granularity: int) -> None:
    with GrowableBuffer(CAPACITY, np.float32) as buf:
        with pytest.raises(TypeError, match="never converts"):
            buf.extend(np.arange(10, dtype=np.float64))
        assert buf.size == 0 and buf.chunks == []


def test_copy_grow_moves_and_copies(rng: np.random.Generator) -> None:
    data = rng.standard_normal(1000, dtype=np.float32)
    old = DeviceBuffer.from_array(data)
    old_ptr = old.ptr
    new = copy_grow(old, 5000)
    try:
        assert old.closed and new.size == 5000
        assert new.ptr != old_ptr  # both existed during the copy, so the data had to move
        np.testing.assert_array_equal(new.to_array()[:1000], data)
    finally:
        new.close()


def test_a_replay_over_a_closed_growable_buffer_is_refused(
    granularity: int, vector_add: rawcuda.Function, rng: np.random.Generator
) -> None:
    # Before: the replay check knew DeviceBuffer and Function only, so a graph
    # holding a closed GrowableBuffer (add_kernel's argument, or keep_alive) ran on unmapped memory: a sticky
    # CUDA_ERROR_ILLEGAL_ADDRESS. (Refused before the launch, so this process's context stays usable.)
    n = 4096
    a_host, b_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    grid = (n + 255) // 256
    with DeviceBuffer.from_array(a_host) as a, DeviceBuffer.from_array(b_host) as b, rawcuda.Stream() as s:
        added, kept = GrowableBuffer(CAPACITY, np.float32), GrowableBuffer(CAPACITY, np.float32)
        for g in (added, kept):
            g.extend(np.full(n, NAN32))
        graph = rawcuda.Graph()
        graph.add_kernel(vector_add, grid, 256, added, a, b, n)
        with rawcuda.capture(s) as captured:
            vector_add.launch(grid, 256, kept, a, b, n, stream=s)
        captured.keep_alive(kept)
        with graph, captured, graph.instantiate() as first, captured.instantiate() as second:
            for replay, g in ((first, added), (second, kept)):
                replay.launch(s)
                s.synchronize()
                np.testing.assert_array_equal(g.to_array(), a_host + b_host)
                g.close()
                with pytest.raises(rawcuda.ClosedError, match="was closed"):
                    replay.launch(s)
        s.synchronize()  # nothing ran on the unmapped memory: no sticky fault to report
