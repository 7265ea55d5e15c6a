"""Function without a driver (CPU only): launch dimensions, checked and normalized before any launch."""

from __future__ import annotations

import numpy as np
import pytest

from rawcuda.core.launchconfig import dims as _dims


def test_launch_dimensions() -> None:
    assert _dims("grid", 5) == (5, 1, 1) and _dims("grid", (2, 3)) == (2, 3, 1)
    assert _dims("grid", [np.int64(4)]) == (4, 1, 1)
    # Whole numbers of any type are the same dimension (a value-keyed cache cannot tell 2.0 from 2 anyway).
    assert _dims("grid", 2.0) == _dims("grid", np.float64(2.0)) == _dims("grid", (2,)) == (2, 1, 1)
    assert _dims("grid", True) == (1, 1, 1)
    for bad in (1.5, (1, 2.5), (1, 2, 3, 4), (), "8", None):
        with pytest.raises(TypeError, match="int or a tuple of 1 to 3 ints"):
            _dims("grid", bad)
    with pytest.raises(ValueError, match=">= 1"):
        _dims("block", (32, 0))
