"""TensorMap (rawcuda/extras/tensormap.py) without a GPU: what it asks cuTensorMapEncodeTiled, and what it refuses.

The driver answers a bad tensor map with a bare CUDA_ERROR_INVALID_VALUE; each rule cuda.h states above the
prototype is checked here first, with the parameter named. A stand-in ``cu`` records the call: the dimensions
reversed into the driver's innermost-first order, the strides without the innermost, the descriptor's address
64-byte aligned. On the H200 a kernel copies tiles with it (tests/gpu).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from rawcuda import ClosedError
from rawcuda.extras import tensormap
from rawcuda.extras.tensormap import TensorMap
from rawcuda.ffi.constants import TensorMapDataType, TensorMapSwizzle
from tests.cpu.test_launch_pending import StandInBuffer, StandInContext


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def cuTensorMapEncodeTiled(self, out: int, kind: int, rank: int, address: int, *rest: Any) -> None:
        dims, strides, box, walks, interleave, swizzle, l2, oob = rest
        self.calls.append(
            {
                "aligned": out % tensormap.DESCRIPTOR_ALIGN == 0,
                "kind": kind,
                "rank": rank,
                "dims": list(dims),
                "strides": list(strides)[: rank - 1],
                "box": list(box),
                "walks": list(walks),
                "interleave": interleave,
                "swizzle": swizzle,
                "l2": l2,
                "oob": oob,
            }
        )
        ctypes.memset(out, 0xAB, tensormap.DESCRIPTOR_BYTES)  # what the driver would have written


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    fake = Recorder()
    monkeypatch.setattr(tensormap, "cu", fake)
    return fake


def matrix(rows: int, cols: int, dtype: Any = np.float32) -> StandInBuffer:
    return StandInBuffer((rows, cols), dtype, context=StandInContext())


def test_the_driver_is_asked_innermost_first(driver: Recorder) -> None:
    tmap = TensorMap(matrix(1024, 512), box=(64, 32), swizzle=128)
    (call,) = driver.calls
    assert call == {
        "aligned": True,
        "kind": TensorMapDataType.FLOAT32,
        "rank": 2,
        "dims": [512, 1024],
        "strides": [512 * 4],
        "box": [32, 64],
        "walks": [1, 1],
        "interleave": 0,
        "swizzle": TensorMapSwizzle.SWIZZLE_128B,
        "l2": 0,
        "oob": 0,
    }
    assert tmap.descriptor == b"\xab" * 128 and tmap.box == (64, 32)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"box": (64, 30)}, ValueError, r"box\[-1\] x 4 bytes = 120 must be a multiple of 16"),
        ({"box": (300, 32)}, ValueError, r"box\[0\] must be in \[1, 256\], got 300"),
        ({"box": (64,)}, ValueError, "box must have 2 entries"),
        ({"box": (64, 64), "swizzle": 128}, ValueError, "box row of 256 bytes is wider than swizzle=128"),
        ({"box": (64, 32), "swizzle": 16}, ValueError, "swizzle must be one of"),
        ({"box": (64, 32), "strides": (2052, 4)}, ValueError, r"strides\[0\] = 2052 bytes must be a multiple of 16"),
        ({"box": (64, 32), "strides": (1024, 4)}, ValueError, r"strides\[0\] = 1024 bytes overlaps dimension 1"),
        ({"box": (64, 32), "strides": (2048, 8)}, ValueError, r"strides\[-1\] must be the element size"),
        ({"box": (64, 32), "shape": (2048, 512)}, ValueError, "reaches 4194304 bytes; the buffer has 2097152"),
        ({"box": (64, 32), "shape": (0, 512)}, ValueError, r"shape\[0\] must be in \[1, 4294967296\]"),
        ({"box": (64, True)}, TypeError, r"box\[1\] must be an int, got True"),
        ({"box": (64, 32.0)}, TypeError, r"box\[1\] must be an int"),
        ({"box": (64, 32), "element_strides": (1, 9)}, ValueError, r"element_strides\[1\] must be in \[1, 8\]"),
        ({"box": (64, 32), "l2_promotion": 512}, ValueError, "l2_promotion must be one of"),
    ],
)
def test_each_rule_the_driver_checks_is_checked_first(
    driver: Recorder, kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        TensorMap(matrix(1024, 512), **kwargs)
    assert driver.calls == []  # refused before the driver was asked


def test_numpy_scalars_count_as_ints_and_other_element_types_need_a_name(driver: Recorder) -> None:
    TensorMap(matrix(1024, 512), box=(np.int64(64), np.uint32(32)))
    assert driver.calls[-1]["box"] == [32, 64]
    with pytest.raises(ValueError, match="nan_fill=True needs a floating-point element type, not INT32"):
        TensorMap(matrix(64, 64, np.int32), box=(8, 8), nan_fill=True)
    with pytest.raises(TypeError, match="cannot move complex64 elements; pass data_type="):
        TensorMap(matrix(64, 64, np.complex64), box=(8, 8))
    TensorMap(matrix(64, 64, np.uint16), box=(8, 8), data_type=TensorMapDataType.BFLOAT16)
    assert driver.calls[-1]["kind"] == TensorMapDataType.BFLOAT16
    with pytest.raises(TypeError, match="buffer must be a rawcuda DeviceBuffer, got ndarray"):
        TensorMap(np.zeros((64, 64), np.float32), box=(8, 8))  # type: ignore[arg-type]


def test_a_map_refuses_its_descriptor_once_its_buffer_is_closed(driver: Recorder) -> None:
    buf = matrix(64, 64)
    tmap = TensorMap(buf, box=(8, 8))
    buf.close()
    with pytest.raises(ClosedError, match="its buffer is closed"):
        _ = tmap.descriptor


GRID_CONSTANT_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry tile_copy(.param .align 64 .b8 tile_copy_param_0[128], .param .u64 out)
{
    ret;
}
"""


def test_the_descriptor_is_what_a_grid_constant_parameter_takes(driver: Recorder) -> None:
    """``const __grid_constant__ CUtensorMap`` is ``.param .align 64 .b8 x[128]``: the packer copies the 128 bytes."""
    from rawcuda.core import ptx
    from rawcuda.core.kernelargs import ArgPacker, ArgumentError
    from rawcuda.core.paramspec import ParamSpec

    specs = [ParamSpec.from_ptx(p) for p in ptx.parse(GRID_CONSTANT_PTX).entries["tile_copy"].params]
    packer = ArgPacker("tile_copy", specs)
    tmap = TensorMap(matrix(64, 64), box=(8, 8))
    packed = packer.pack((tmap.descriptor, 0))
    assert ctypes.string_at(packed.array[0], tensormap.DESCRIPTOR_BYTES) == tmap.descriptor
    with pytest.raises(ArgumentError, match=r"64 bytes given for b8\[128\]"):
        packer.pack((tmap.descriptor[:64], 0))
