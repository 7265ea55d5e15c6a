"""Memory pools on the H200: the release threshold decides whether freed stream-ordered memory stays in the pool,
and trim() gives it back -- read from the pool's own figures around cuMemAllocAsync / cuMemFreeAsync."""

from __future__ import annotations

from ctypes import byref, c_uint64

import pytest

import rawcuda
from rawcuda import MemoryPool, Stream
from rawcuda.checked import cu

pytestmark = pytest.mark.gpu

CHUNK = 64 << 20  # 64 MiB: far above any granularity the pool rounds to


def allocate_and_free(stream: Stream) -> int:
    """One stream-ordered allocation from the default pool, freed on the same stream; its size as used."""
    ptr = c_uint64()
    rawcuda.default_context().activate()
    cu.cuMemAllocAsync(byref(ptr), CHUNK, stream.handle)
    used = MemoryPool.default().used
    cu.cuMemFreeAsync(ptr.value, stream.handle)
    stream.synchronize()
    return used


def test_the_release_threshold_keeps_freed_memory_in_the_pool_and_trim_gives_it_back() -> None:
    pool, stream = MemoryPool.default(), Stream()
    before = pool.release_threshold
    try:
        pool.release_threshold = 0
        assert allocate_and_free(stream) >= CHUNK
        assert pool.used == 0 and pool.reserved == 0  # threshold 0: all of it went back at the synchronize
        pool.release_threshold = 2**64 - 1  # keep everything
        allocate_and_free(stream)
        assert pool.used == 0 and pool.reserved >= CHUNK  # freed, and still the pool's
        pool.trim(0)
        assert pool.reserved == 0
        reserved_high, used_high = pool.high_watermarks(reset=True)
        assert reserved_high >= CHUNK and used_high >= CHUNK
        assert pool.high_watermarks() == (0, 0)
    finally:
        pool.release_threshold = before


def test_a_new_pool_is_its_own_and_closes_with_its_context() -> None:
    ctx = rawcuda.Context.create(0)
    pool = MemoryPool(ctx)
    assert pool.handle != MemoryPool.default(ctx).handle
    pool.release_threshold = 1 << 30
    assert pool.release_threshold == 1 << 30 and pool.reserved == 0
    ctx.close()
    assert pool.closed
