"""MemoryPool over the fake driver (bench/fake/fakelaunch.c, whose pools keep their attributes): the default pool
and new ones, the release threshold, the usage figures, trimming, and every value checked before the driver --
the high watermarks take only 0, the REUSE_* switches only 0 or 1, byte counts fit a cuuint64_t."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CHILD_REFUSED, over_fake_launch

SCRIPT = (
    CHILD_REFUSED
    + r"""
import ctypes, json, sys
import rawcuda
from rawcuda.core.mempool import MemoryPool
from rawcuda.ffi.constants import MemPoolAttribute as A

fake = ctypes.CDLL(sys.argv[1])
fake.fakelaunch_pool_trimmed_to.restype = ctypes.c_ulonglong
fake.fakelaunch_pool_trimmed_to.argtypes = [ctypes.c_void_p]


out = {}
pool = MemoryPool()
pool.release_threshold = 1 << 40
out["threshold"] = pool.release_threshold
pool.set_attribute(A.REUSE_ALLOW_OPPORTUNISTIC, 1)
out["reuse"] = pool.attribute(A.REUSE_ALLOW_OPPORTUNISTIC)
out["figures"] = [pool.reserved, pool.used, list(pool.high_watermarks(reset=True))]
pool.trim(4096)
out["trimmed_to"] = fake.fakelaunch_pool_trimmed_to(pool.handle)
out["refused"] = {
    "negative": refused(lambda: setattr(pool, "release_threshold", -1)),
    "past_u64": refused(lambda: setattr(pool, "release_threshold", 2**64)),
    "float": refused(lambda: setattr(pool, "release_threshold", 1.5)),
    "reuse_2": refused(lambda: pool.set_attribute(A.REUSE_FOLLOW_EVENT_DEPENDENCIES, 2)),
    "high_nonzero": refused(lambda: pool.set_attribute(A.USED_MEM_HIGH, 5)),
    "trim_negative": refused(lambda: pool.trim(-1)),
    "max_size": refused(lambda: MemoryPool(max_size=-4)),
    "no_such_attribute": refused(lambda: pool.attribute(99)),
    "read_only": refused(lambda: pool.set_attribute(A.USED_MEM_CURRENT, 7)),
    "bool_attribute": refused(lambda: pool.attribute(True)),
    "text_reset": refused(lambda: pool.set_attribute(A.USED_MEM_HIGH, "0")),
}
out["repr"] = repr(pool)
default = MemoryPool.default()
out["default_repr"] = repr(default)
pool.close()
default.close()
out["destroyed"] = [fake.fakelaunch_pools_created(), fake.fakelaunch_pools_destroyed()]
out["closed"] = refused(lambda: pool.release_threshold)
from rawcuda.core.closeorder import CloseOrder
kept = MemoryPool()
out["with_context"] = [kept in rawcuda.default_context().children, max(CloseOrder) is kept.close_order]
print(json.dumps(out))
"""
)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build bench/fake/fakelaunch.c")
def test_a_pool_reads_and_sets_its_attributes_and_refuses_what_the_driver_would(tmp_path: Path) -> None:
    out: dict[str, Any] = over_fake_launch(SCRIPT, tmp_path)
    assert out["threshold"] == 1 << 40
    assert out["reuse"] == 1
    assert out["figures"] == [0, 0, [0, 0]]
    assert out["trimmed_to"] == 4096
    refused = out["refused"]
    assert refused["negative"] == "ValueError: release_threshold must be in [0, 18446744073709551615], got -1"
    assert refused["past_u64"].startswith("ValueError: release_threshold must be in [0,")
    assert refused["float"].startswith("TypeError: release_threshold is an int")
    assert refused["reuse_2"] == "ValueError: reuse_follow_event_dependencies must be in [0, 1], got 2"
    assert refused["high_nonzero"] == "ValueError: USED_MEM_HIGH can only be reset, to 0 (cuda.h); got 5"
    assert refused["trim_negative"].startswith("ValueError: keep must be in [0,")
    assert refused["max_size"].startswith("ValueError: max_size must be in [0,")
    assert refused["no_such_attribute"].startswith("ValueError: 99 is not a valid MemPoolAttribute")
    assert refused["read_only"] == "ValueError: USED_MEM_CURRENT is what the pool measures: it can be read, not set"
    assert refused["bool_attribute"].startswith("TypeError: which is an int")
    assert refused["text_reset"].startswith("TypeError: used_mem_high is an int")
    assert out["repr"].startswith("<MemoryPool new 0x") and out["default_repr"].startswith("<MemoryPool default 0x")
    assert out["destroyed"] == [1, 1]  # the new pool destroyed; the device's default one never
    assert out["closed"] is not None and "closed" in out["closed"]
    assert out["with_context"] == [True, True]  # its context closes it, after every buffer
