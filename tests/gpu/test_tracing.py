"""Call tracing on a real GPU: a traced vector add prints every driver call it makes."""

from __future__ import annotations

import pytest

from tests.helpers import run_python

pytestmark = pytest.mark.gpu


def test_trace_of_a_real_vector_add() -> None:
    proc = run_python(
        "import numpy as np, rawcuda\n"
        "a = np.random.default_rng().standard_normal(1000, dtype=np.float32)\n"
        "with rawcuda.trace():\n"
        "    da, db = rawcuda.DeviceBuffer.from_array(a), rawcuda.DeviceBuffer.from_array(a)\n"
        "    dc = rawcuda.DeviceBuffer.empty(1000)\n"
        "    rawcuda.ops.vector_add(dc, da, db)\n"
        "    assert (dc.to_array() == a + a).all()\n"
    )
    assert proc.returncode == 0, proc.stderr
    for symbol in ("cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuModuleLoadDataEx", "cuLaunchKernelEx", "cuMemcpyDtoH_v2"):
        assert f"[rawcuda] {symbol}(" in proc.stderr, symbol
