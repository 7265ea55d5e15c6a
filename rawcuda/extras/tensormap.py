"""Extras: TensorMap -- a TMA tensor-map descriptor over a DeviceBuffer, every rule the driver checks checked first.

Hopper's Tensor Memory Accelerator copies a whole tile ("box") between global and shared memory in one
instruction, from a 128-byte descriptor the host encodes with ``cuTensorMapEncodeTiled``. The driver refuses a bad
descriptor with a bare CUDA_ERROR_INVALID_VALUE; the rules behind it are in cuda.h above the prototype. Each is
checked here first, in numpy's order (shape and box outermost first; the driver wants innermost first), with a
message naming the parameter. A kernel takes the descriptor by value as a ``const __grid_constant__ CUtensorMap``
parameter (``.param .align 64 .b8 x[128]``): pass ``tmap.descriptor``, the 128 bytes.

Why the map keeps its buffer: the descriptor holds the buffer's address, so it is only valid while the buffer is
open, and ``descriptor`` refuses once it is closed (a TMA copy from freed memory would be silent).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.ffi.constants import (
    TensorMapDataType,
    TensorMapInterleave,
    TensorMapL2Promotion,
    TensorMapOobFill,
    TensorMapSwizzle,
)
from rawcuda.ffi.types import cuuint32_t, cuuint64_t

DESCRIPTOR_BYTES = 128  # CU_TENSOR_MAP_NUM_QWORDS (16) x 8
DESCRIPTOR_ALIGN = 64  # "tensorMap address must be aligned to 64 bytes"
ADDRESS_ALIGN = 16  # globalAddress
STRIDE_ALIGN = 16  # globalStrides, in bytes
MAX_STRIDE = 1 << 40  # globalStrides < 2^40
MAX_RANK = 5
MAX_EXTENT = 1 << 32  # globalDim <= 2^32
MAX_BOX = 256  # boxDim <= 256
MAX_ELEMENT_STRIDE = 8  # elementStrides <= 8
BOX_ROW_ALIGN = 16  # boxDim[0] x element size: a multiple of 16 bytes (no interleave)

#: numpy dtype -> the tensor map's element type (TF32 and BF16 have no numpy dtype: pass data_type= for them).
DATA_TYPES = {
    np.dtype(np.uint8): TensorMapDataType.UINT8,
    np.dtype(np.uint16): TensorMapDataType.UINT16,
    np.dtype(np.uint32): TensorMapDataType.UINT32,
    np.dtype(np.int32): TensorMapDataType.INT32,
    np.dtype(np.uint64): TensorMapDataType.UINT64,
    np.dtype(np.int64): TensorMapDataType.INT64,
    np.dtype(np.float16): TensorMapDataType.FLOAT16,
    np.dtype(np.float32): TensorMapDataType.FLOAT32,
    np.dtype(np.float64): TensorMapDataType.FLOAT64,
}
FLOAT_TYPES = {t for t in TensorMapDataType if t.name.startswith(("FLOAT", "BFLOAT", "TFLOAT"))}
#: swizzle= in bytes -> the driver's mode, and the widest box row (in bytes) each allows.
SWIZZLES = {0: TensorMapSwizzle.SWIZZLE_NONE, 32: TensorMapSwizzle.SWIZZLE_32B}
SWIZZLES |= {64: TensorMapSwizzle.SWIZZLE_64B, 128: TensorMapSwizzle.SWIZZLE_128B}
L2_PROMOTIONS = {0: TensorMapL2Promotion.NONE, 64: TensorMapL2Promotion.L2_64B}
L2_PROMOTIONS |= {128: TensorMapL2Promotion.L2_128B, 256: TensorMapL2Promotion.L2_256B}


def _whole(name: str, value: Any, low: int, high: int) -> int:
    """An int (numpy's too, never a bool or a float) in [low, high], or a message naming ``name``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {int(value)}")
    return int(value)


def _ints(name: str, values: Any, count: int, low: int, high: int) -> list[int]:
    if isinstance(values, int | np.integer) and not isinstance(values, bool | np.bool_):
        values = (values,)
    if not isinstance(values, Sequence | np.ndarray) or len(values) != count:
        raise ValueError(f"{name} must have {count} entries (one per dimension of shape), got {values!r}")
    return [_whole(f"{name}[{i}]", v, low, high) for i, v in enumerate(values)]


class TensorMap:
    """A tiled tensor map of ``buffer``: ``shape`` elements (default: the buffer's), ``strides`` in bytes (default:
    C order), tiles of ``box`` elements, landing in shared memory with ``swizzle`` (0, 32, 64 or 128 bytes)."""

    def __init__(
        self,
        buffer: DeviceBuffer,
        box: Sequence[int],
        *,
        shape: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        element_strides: Sequence[int] | None = None,
        swizzle: int = 0,
        l2_promotion: int = 0,
        nan_fill: bool = False,
        data_type: TensorMapDataType | None = None,
    ) -> None:
        if not isinstance(buffer, DeviceBuffer):
            raise TypeError(f"buffer must be a rawcuda DeviceBuffer, got {type(buffer).__name__}")
        dtype, item = np.dtype(buffer.dtype), np.dtype(buffer.dtype).itemsize
        kind = data_type if data_type is not None else DATA_TYPES.get(dtype)
        if kind is None:
            raise TypeError(f"a tensor map cannot move {dtype} elements; pass data_type= (e.g. BFLOAT16 on uint16)")
        shape = tuple(buffer.shape) if shape is None else tuple(shape)
        rank = len(shape)
        _whole("len(shape)", rank, 1, MAX_RANK)
        dims = _ints("shape", shape, rank, 1, MAX_EXTENT)
        if strides is None:  # C order: each dimension's stride is the product of the extents inside it
            strides = [int(np.prod(dims[i + 1 :])) * item for i in range(rank)]
        steps = _ints("strides", strides, rank, 1, MAX_STRIDE - 1)
        if steps[-1] != item:
            raise ValueError(
                f"strides[-1] must be the element size, {item} bytes: TMA cannot stride its inner dimension"
            )
        for i in range(rank - 1):
            if steps[i] % STRIDE_ALIGN:
                raise ValueError(f"strides[{i}] = {steps[i]} bytes must be a multiple of {STRIDE_ALIGN}: pad the rows")
            if steps[i] < steps[i + 1] * dims[i + 1]:
                raise ValueError(
                    f"strides[{i}] = {steps[i]} bytes overlaps dimension {i + 1} ({dims[i + 1]} x {steps[i + 1]})"
                )
        boxes = _ints("box", box, rank, 1, MAX_BOX)
        if boxes[-1] * item % BOX_ROW_ALIGN:
            raise ValueError(f"box[-1] x {item} bytes = {boxes[-1] * item} must be a multiple of {BOX_ROW_ALIGN} bytes")
        if swizzle not in SWIZZLES:
            raise ValueError(f"swizzle must be one of {sorted(SWIZZLES)} (bytes), got {swizzle!r}")
        if swizzle and boxes[-1] * item > swizzle:
            raise ValueError(
                f"a box row of {boxes[-1] * item} bytes is wider than swizzle={swizzle}: use a narrower box"
            )
        if l2_promotion not in L2_PROMOTIONS:
            raise ValueError(f"l2_promotion must be one of {sorted(L2_PROMOTIONS)} (bytes), got {l2_promotion!r}")
        if nan_fill and kind not in FLOAT_TYPES:
            raise ValueError(f"nan_fill=True needs a floating-point element type, not {kind.name}")
        walks = _ints(
            "element_strides", [1] * rank if element_strides is None else element_strides, rank, 1, MAX_ELEMENT_STRIDE
        )
        if buffer.ptr % ADDRESS_ALIGN:
            raise ValueError(
                f"the buffer's address {buffer.ptr:#x} must be {ADDRESS_ALIGN}-byte aligned (a view at an odd offset?)"
            )
        extent = sum((d - 1) * s for d, s in zip(dims, steps, strict=True)) + item
        if extent > buffer.nbytes:
            raise ValueError(
                f"shape {tuple(dims)} with strides {tuple(steps)} reaches {extent} bytes; "
                f"the buffer has {buffer.nbytes}"
            )
        self.buffer, self.shape, self.strides, self.box = buffer, tuple(dims), tuple(steps), tuple(boxes)
        self.data_type, self.swizzle = kind, swizzle
        # The driver's order is innermost first, and its strides leave out the innermost (the element size).
        self._storage = (ctypes.c_ubyte * (DESCRIPTOR_BYTES + DESCRIPTOR_ALIGN))()
        self._offset = -ctypes.addressof(self._storage) % DESCRIPTOR_ALIGN
        buffer.context.activate()
        cu.cuTensorMapEncodeTiled(
            ctypes.addressof(self._storage) + self._offset,
            int(kind),
            rank,
            buffer.ptr,
            (cuuint64_t * rank)(*reversed(dims)),
            (cuuint64_t * max(rank - 1, 1))(*reversed(steps[:-1])),
            (cuuint32_t * rank)(*reversed(boxes)),
            (cuuint32_t * rank)(*reversed(walks)),
            int(TensorMapInterleave.INTERLEAVE_NONE),
            int(SWIZZLES[swizzle]),
            int(L2_PROMOTIONS[l2_promotion]),
            int(TensorMapOobFill.NAN_REQUEST_ZERO_FMA if nan_fill else TensorMapOobFill.NONE),
        )

    @property
    def descriptor(self) -> bytes:
        """The 128 bytes a kernel takes as its ``__grid_constant__ CUtensorMap`` parameter."""
        if self.buffer.closed:
            raise ClosedError(f"{self!r}: its buffer is closed, and the descriptor still holds the freed address")
        return bytes(self._storage[self._offset : self._offset + DESCRIPTOR_BYTES])

    def __repr__(self) -> str:
        return f"<TensorMap {self.data_type.name} shape={self.shape} box={self.box} swizzle={self.swizzle}>"
