"""assert_device_equal's comparison (rawcuda.testing.compare.array_mismatch) on structured dtypes, without a GPU.

A record array is compared field by field: floats within rtol/atol, the rest exactly. Before, numpy's own
TypeError came out of the error arithmetic, and a float field was compared exactly whatever rtol said.
"""

from __future__ import annotations

import numpy as np
import pytest

from rawcuda.testing.compare import array_mismatch

RECORD = np.dtype([("id", np.int32), ("pos", np.float32, (3,)), ("meta", [("w", np.float64), ("flag", np.uint8)])])


def records(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.zeros(n, RECORD)
    out["id"] = rng.integers(1, 1000, n)
    out["pos"] = rng.standard_normal((n, 3))
    out["meta"]["w"] = rng.standard_normal(n)
    out["meta"]["flag"] = rng.integers(1, 255, n)
    return out


def test_equal_records_match() -> None:
    a = records(64, 1)
    assert array_mismatch(a.copy(), a) is None


def test_float_fields_follow_the_tolerances() -> None:
    a = records(64, 2)
    b = a.copy()
    b["pos"] *= 1 + 1e-6  # within rtol=1e-5, not within the default 1e-7
    assert array_mismatch(b, a, rtol=1e-5) is None
    message = array_mismatch(b, a)
    assert message is not None and "'pos'" in message and "'id'" not in message


def test_a_mismatch_names_its_fields_and_elements() -> None:
    a = records(64, 3)
    b = a.copy()
    b["id"][5] += 1
    b["meta"]["flag"][7] ^= 1
    message = array_mismatch(b, a, what="buffer")
    assert message is not None
    assert message.startswith("buffer differs from the expected array: 2 of 64 elements")
    assert "field 'id': 1 element" in message and "field 'meta.flag': 1 element" in message
    assert "(5,):" in message and "(7,):" in message


def test_a_nan_in_a_float_field_follows_equal_nan() -> None:
    a = records(8, 4)
    a["meta"]["w"][2] = np.nan
    assert array_mismatch(a.copy(), a) is None
    assert array_mismatch(a.copy(), a, equal_nan=False) is not None


def test_a_subarray_of_records_is_compared_field_by_field() -> None:
    # A field that is itself an array of records: its fields come back one dimension wider than the buffer.
    dt = np.dtype([("id", np.int32), ("v", [("x", np.float32), ("y", np.float32)], (3,))])
    got = np.zeros(64, dt)
    got["v"]["x"] = np.random.default_rng(3).random((64, 3), dtype=np.float32)
    want = got.copy()
    assert array_mismatch(got, want) is None
    want["v"]["x"][5, 1] += 1
    message = array_mismatch(got, want)
    assert message is not None and "1 of 64 elements" in message and "field 'v.x': 1 element" in message


def test_a_scalar_expected_for_records_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match=r"compared with a numpy array of its dtype.*np\.array\(records"):
        array_mismatch(np.zeros(4, [("a", np.int32)]), 0)
