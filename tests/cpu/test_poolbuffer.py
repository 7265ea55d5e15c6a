"""PoolBuffer over the fake driver (bench/fake/fakelaunch.c keeps the stream of the last stream-ordered allocation
and free, and the last cross-stream wait): allocated on the stream asked for, freed after its pending work --
on the last stream that used it, made to wait for the others -- and its wrong arguments refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CHILD_REFUSED, over_fake_launch

SCRIPT = (
    CHILD_REFUSED
    + r"""
import ctypes, gc, json, sys
import numpy as np
import rawcuda
from rawcuda import MemoryPool, PoolBuffer, Stream

fake = ctypes.CDLL(sys.argv[1])
for name in ("last_alloc_stream", "last_free_stream", "last_waiter", "last_waited_for"):
    getattr(fake, "fakelaunch_" + name).restype = ctypes.c_void_p
alloc_on = lambda: fake.fakelaunch_last_alloc_stream() or 0
freed_on = lambda: fake.fakelaunch_last_free_stream() or 0
out = {}
a, b = Stream(), Stream()
default = MemoryPool.default()

buf = PoolBuffer((4, 4), stream=a)
out["allocated_on_a"] = alloc_on() == a.handle
out["used"] = default.used
out["same_default"] = buf.pool is default and MemoryPool.default() is default
host = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
buf.copy_from(host, stream=a)
view = buf[1:3]
view.fill(7.0, stream=b)  # through a view: the record is the memory's
buf.close()
out["freed_on_b_after_a"] = [freed_on() == b.handle, fake.fakelaunch_last_waiter() == b.handle,
                             fake.fakelaunch_last_waited_for() == a.handle]
out["view_closed"] = view.closed
out["used_after"] = default.used

legacy = PoolBuffer(16)
out["legacy_alloc"] = alloc_on()
legacy.to_array()  # synchronous: nothing pending after it
legacy.close()
out["legacy_free"] = freed_on()

frees = fake.fakelaunch_async_frees()
dropped = PoolBuffer.from_array(host, stream=b)
out["copied"] = bool(np.array_equal(dropped.to_array(), host))
gc.disable()
del dropped
out["collected_frees"] = fake.fakelaunch_async_frees() - frees
gc.enable()

allocations = fake.fakelaunch_async_allocations()
empty = PoolBuffer(0, stream=a)
out["empty"] = [empty.ptr, fake.fakelaunch_async_allocations() - allocations]
empty.close()

own = MemoryPool()
zeros = PoolBuffer.zeros(8, np.int32, pool=own, stream=b)
out["own_pool"] = [zeros.pool is own, own.used, zeros.to_array().tolist()]
out["refused"] = {
    "pool_type": refused(lambda: PoolBuffer(4, pool="default")),
    "stream_int": refused(lambda: PoolBuffer(4, stream=2)),
    "stream_positional": refused(lambda: PoolBuffer(4, np.float32, a)),
    "shape": refused(lambda: PoolBuffer(-1, stream=a)),
    "overflow": refused(lambda: PoolBuffer((2**32, 2**32), np.float32, stream=a)),
    "gpu_array": refused(lambda: PoolBuffer.from_array(zeros)),
}
early = MemoryPool()
held = PoolBuffer(4, pool=early, stream=a)
out["pool_closed_early"] = refused(early.close)
held.close()
early.close()
out["pool_closed_after"] = early.closed
frees = fake.fakelaunch_async_frees()
destroyed = fake.fakelaunch_pools_destroyed()
rawcuda.default_context().close()
out["context_close"] = [
    zeros.closed, fake.fakelaunch_async_frees() - frees, fake.fakelaunch_pools_destroyed() - destroyed
]
print(json.dumps(out))
"""
)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_a_pool_buffer_is_freed_after_its_pending_work_on_the_last_stream_that_used_it(tmp_path: Path) -> None:
    out: dict[str, Any] = over_fake_launch(SCRIPT, tmp_path)
    assert out["allocated_on_a"] and out["same_default"]
    assert out["used"] == 64  # 16 floats, counted by the pool
    assert out["freed_on_b_after_a"] == [True, True, True]  # b waited for a's copy, then freed
    assert out["view_closed"] and out["used_after"] == 0
    assert out["legacy_alloc"] == 0 and out["legacy_free"] == 0  # stream=None: the legacy default stream
    assert out["copied"] and out["collected_frees"] == 1  # dropped unclosed, the cyclic GC off: freed all the same
    assert out["empty"] == [0, 0]  # nothing asked of the driver for no bytes
    assert out["own_pool"] == [True, 32, [0] * 8]
    refused = out["refused"]
    assert refused["pool_type"].startswith("TypeError: pool must be a rawcuda MemoryPool or None")
    assert refused["stream_int"].startswith("TypeError: stream must be a rawcuda Stream, another library's stream")
    assert refused["stream_positional"].startswith("TypeError: ")  # a Stream where the context goes
    assert "Stream" in refused["stream_positional"]
    assert refused["shape"].startswith("ValueError: ")
    assert refused["overflow"].startswith("ValueError: ")
    assert refused["gpu_array"].startswith("TypeError: from_array copies host arrays")
    # A pool destroyed under its open buffer crashed the H200 at the buffer's next use: refused, by name.
    assert (
        out["pool_closed_early"].startswith("ValueError: <MemoryPool new")
        and "close them first" in out["pool_closed_early"]
    )
    assert out["pool_closed_after"]
    assert out["context_close"] == [True, 1, 1]  # the buffer freed, then its pool destroyed
