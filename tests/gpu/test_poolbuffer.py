"""PoolBuffer on the H200: kernels on pool memory against numpy, a free that never races the kernel still using
the memory (the pool hands the same bytes to another stream at once), a loop that leaks nothing with the cyclic GC
off, a DLPack export that outlives close(), captures refused, and a context closing its pool buffers first."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import MemoryPool, Module, PoolBuffer, Stream, StreamFlag, capture

pytestmark = pytest.mark.gpu

N = 1 << 20
NS_PER_S = 1_000_000_000
SPIN_S = 0.2  # the kernel still using the memory when it is closed: long enough to outlast every host step
LOOP = 2000
POISON = np.float32(np.nan)


@pytest.fixture(scope="module")
def spin() -> rawcuda.Function:
    return Module(rawcuda.kernels.ptx_path("spin")).function("spin")


def test_kernels_on_pool_memory_match_numpy_on_every_element(rng: np.random.Generator) -> None:
    stream = Stream()
    a_host, b_host = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    a = PoolBuffer.from_array(a_host, stream=stream)
    b = PoolBuffer.from_array(b_host, stream=stream)
    c = PoolBuffer.empty(N, stream=stream)
    c.fill(POISON, stream=stream)
    rawcuda.ops.vector_add(c, a, b, stream=stream)
    got = c.to_array(stream)
    np.testing.assert_array_equal(got, a_host + b_host)
    for buf in (a, b, c):
        buf.close()
    stream.synchronize()
    assert MemoryPool.default().used == 0


def test_a_closed_buffer_is_freed_after_the_kernel_still_using_it_on_another_stream(spin: rawcuda.Function) -> None:
    """Closed while a write is still queued behind a long kernel on ``busy``: the pool may hand the same bytes to
    ``other`` at once, and they must not be overwritten by that late write. (Whether it does is the driver's
    choice: two non-blocking streams did not share the bytes on the H200, so this guards, it does not prove.)"""
    pool = MemoryPool()
    busy, other = Stream(flags=StreamFlag.NON_BLOCKING), Stream(flags=StreamFlag.NON_BLOCKING)
    first = PoolBuffer.empty(N, pool=pool, stream=busy)
    spin.launch(1, 1, round(SPIN_S * NS_PER_S), stream=busy)
    first.fill(1.0, stream=busy)  # queued after the spin: it runs once the spin ends
    first.close()
    second = PoolBuffer.empty(N, pool=pool, stream=other)
    second.fill(2.0, stream=other)
    other.synchronize()
    busy.synchronize()
    got = second.to_array()
    assert (got == 2.0).all(), f"{np.count_nonzero(got != 2.0)} elements overwritten by the freed buffer's last write"
    second.close()
    pool.close()


@pytest.mark.no_leaks
def test_allocating_in_a_loop_with_the_cyclic_gc_off_leaves_the_pool_empty(rng: np.random.Generator) -> None:
    stream, pool = Stream(), MemoryPool()
    pool.release_threshold = 2**64 - 1  # keep freed memory: the loop is served from the pool after the first turn
    host = rng.standard_normal(1024).astype(np.float32)
    was = gc.isenabled()
    gc.disable()
    try:
        for turn in range(LOOP):
            buf = PoolBuffer.from_array(host, pool=pool, stream=stream)
            if turn % 500 == 0:
                np.testing.assert_array_equal(buf.to_array(stream), host)
            del buf  # dropped, not closed: its finalizer frees it, no cycle involved
        stream.synchronize()
        assert pool.used == 0
        assert pool.reserved > 0  # kept by the threshold
    finally:
        if was:
            gc.enable()
    pool.trim(0)
    assert pool.reserved == 0
    stream.close()
    pool.close()


def test_a_dlpack_export_keeps_the_memory_after_close(torch: Any, rng: np.random.Generator) -> None:
    stream = Stream()
    host = rng.standard_normal(N).astype(np.float32)
    buf = PoolBuffer.from_array(host, stream=stream)
    tensor = torch.from_dlpack(buf)
    buf.close()  # the export holds a loan: the free waits for it
    np.testing.assert_array_equal(tensor.cpu().numpy(), host)
    used = MemoryPool.default().used
    del tensor
    stream.synchronize()
    torch.cuda.synchronize()
    assert MemoryPool.default().used <= used - host.nbytes


def test_allocating_or_freeing_inside_a_capture_is_refused_and_the_capture_survives(rng: np.random.Generator) -> None:
    stream = Stream()
    host = rng.standard_normal(N).astype(np.float32)
    kept = PoolBuffer.from_array(host, stream=stream)
    with capture(stream) as graph:
        with pytest.raises(ValueError, match="being captured"):
            PoolBuffer.empty(N, stream=stream)
        kept.fill(3.0, stream=stream)
        with pytest.raises(ValueError, match="after the capture ends"):
            kept.close()
    assert not kept.closed
    graph.instantiate().launch(stream)
    np.testing.assert_array_equal(kept.to_array(stream), np.full(N, 3.0, np.float32))
    kept.close()


def test_a_closing_context_frees_its_pool_buffers_before_the_pool() -> None:
    ctx = rawcuda.Context.create(0)
    pool = MemoryPool(ctx)
    stream = Stream(ctx)
    bufs = [PoolBuffer.zeros(N, context=ctx, pool=pool, stream=stream) for _ in range(3)]
    default_buf = PoolBuffer.empty(N, context=ctx, stream=stream)
    ctx.close()
    assert all(b.closed for b in bufs) and default_buf.closed and pool.closed


def test_wrong_arguments_are_refused_by_name() -> None:
    ctx = rawcuda.Context.create(0)
    try:
        with pytest.raises(ValueError, match="take a pool of the same context"):
            PoolBuffer(4, context=rawcuda.default_context(), pool=MemoryPool(ctx))
        with pytest.raises(ValueError, match="use a stream of the same context"):
            PoolBuffer(4, stream=Stream(ctx), context=rawcuda.default_context())
    finally:
        ctx.close()
