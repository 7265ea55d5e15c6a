"""PinnedBuffer on a real GPU: page-locked host memory whose numpy view outlives close()."""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import PinnedBuffer
from rawcuda.ffi.constants import HostAllocFlag

pytestmark = pytest.mark.gpu


def test_pinned_buffer_numpy_view_survives_close() -> None:
    p = PinnedBuffer((4, 4), np.float32, flags=HostAllocFlag.PORTABLE)
    view = p.array
    view[...] = 7.0
    p.close()
    assert view.sum() == 7.0 * 16  # still valid memory: freed only when the view dies
    with pytest.raises(rawcuda.ClosedError):
        p.array  # noqa: B018
