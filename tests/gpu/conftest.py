"""Fixtures the GPU tests share: torch and CuPy, started and warmed up once per test module.

Why warm up? Their first CUDA call takes seconds (a context, a module load, a JIT compile), and a test that
holds a stream with a spin or delay kernel must never have that happen inside its window: the spin would end
first, and the test would prove nothing. Each fixture skips with a reason where the library is absent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rawcuda import DeviceBuffer

WARM_UP_ELEMENTS = 4  # a tiny buffer: the first calls load and compile, nothing else


@pytest.fixture(scope="module")
def torch() -> Any:
    """torch, with a DLPack import and a copy to the host already done, and a pool stream made."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    with DeviceBuffer.zeros(WARM_UP_ELEMENTS) as warm:
        torch.from_dlpack(warm).cpu()
    torch.cuda.Stream()
    torch.cuda.synchronize()
    return torch


@pytest.fixture(scope="module")
def cupy() -> Any:
    """CuPy, with both ways in (DLPack, the interface), a copy to the host on a side stream and an elementwise
    kernel already compiled and loaded."""
    cupy = pytest.importorskip("cupy")
    with DeviceBuffer.zeros(WARM_UP_ELEMENTS) as warm:
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            cupy.from_dlpack(warm).get(stream=side)
            cupy.asarray(warm).get(stream=side)
        side.synchronize()
    (cupy.zeros(WARM_UP_ELEMENTS, np.float32) * 2.0).get()
    cupy.cuda.Device().synchronize()
    return cupy
