"""rawcuda.core.elements without a driver (CPU only): which fill values a dtype holds exactly, which are refused."""

from __future__ import annotations

import numpy as np
import pytest

from rawcuda.core.elements import exact_element


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        (np.uint8, 255, 255),
        (np.uint16, 65535, 65535),
        (np.int32, -7, -7),
        (np.int64, -(1 << 40), -(1 << 40)),
        (np.bool_, True, True),
        (np.float32, 0.1, np.float32(0.1)),
        (np.float64, 3, 3.0),
        (np.complex64, 1 + 2j, 1 + 2j),
        (np.uint8, np.uint8(200), 200),
        (np.float32, np.float64(2.5), 2.5),
        (np.int16, np.array(3, np.int16), 3),
        (np.complex64, np.array(3, np.complex64), 3),
    ],
)
def test_fill_values_that_fit(dtype: type, value: object, expected: object) -> None:
    element = exact_element(value, np.dtype(dtype))
    assert element.dtype == np.dtype(dtype) and element[0] == expected


@pytest.mark.parametrize(
    ("dtype", "value", "match"),
    [
        (np.int32, 1.5, "holds only integers"),
        (np.int32, 1 << 40, r"holds the integers -2147483648\.\.2147483647"),
        (np.uint8, -1, r"holds the integers 0\.\.255"),
        (np.uint8, 256, r"0\.\.255"),
        (np.float32, 1e40, "would become inf"),
        (np.float32, 1 + 1j, "holds real numbers"),
        (np.int8, "3", "holds only"),
        (np.float64, "3", "holds numbers"),
    ],
)
def test_fill_values_that_do_not_fit(dtype: type, value: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        exact_element(value, np.dtype(dtype))
