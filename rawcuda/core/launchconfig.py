"""Core: a launch configuration -- grid and block checked as whole numbers, and the struct the driver reads.

A launch needs a grid (how many blocks) and a block (how many threads each), each up to three dimensions. It
also needs the bytes of dynamic shared memory and a stream. Python callers write ``256``, ``(64, 4)`` or
``np.int64(8)``. :func:`dims` turns each into the ``(x, y, z)`` the driver takes, or says what is wrong.

``cuLaunchKernelEx`` reads all of it from one ``CUlaunchConfig`` struct; its layout is drawn above
:func:`launch_config`, which builds one per checked configuration. Why a struct rather than cuLaunchKernel's 11
arguments? ctypes converts every argument of every call. A struct built once is converted never (see
rawcuda.core.function).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from rawcuda.ffi.types import CUlaunchAttribute, CUlaunchConfig

#: A checked launch configuration: (gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes),
#: in the order cuLaunchKernel and CUDA_KERNEL_NODE_PARAMS take them.
LaunchConfig = tuple[int, int, int, int, int, int, int]


# The struct cuLaunchKernelEx reads (cuda.h):
#
#     struct CUlaunchConfig {             offset  size
#         unsigned gridDimX, Y, Z;            0    12
#         unsigned blockDimX, Y, Z;          12    12
#         unsigned sharedMemBytes;           24     4
#         CUstream hStream;                  32     8   (4 bytes of padding before it: 8-byte alignment)
#         CUlaunchAttribute *attrs;          40     8
#         unsigned numAttrs;                 48     4   (+4 padding: sizeof is 56)
#     };
def launch_config(config: LaunchConfig, h_stream: int | None, attrs: Any = None) -> CUlaunchConfig:
    """A ``CUlaunchConfig`` for a checked configuration on stream ``h_stream``.

    ``attrs`` is a ctypes array of ``CUlaunchAttribute`` (rawcuda.core.launchattrs), or None for a plain launch.
    The struct keeps the array alive: the driver reads it through the pointer at every launch.
    """
    cfg = CUlaunchConfig()
    (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) = config[:6]
    cfg.sharedMemBytes = config[6]
    cfg.hStream = h_stream
    if attrs:
        # From the address: a cast of the array itself would store it in the pointer's _objects, a reference cycle.
        cfg.attrs, cfg.numAttrs = ctypes.cast(ctypes.addressof(attrs), ctypes.POINTER(CUlaunchAttribute)), len(attrs)
        cfg.kept_attrs = attrs  # a pointer does not own what it points at
    else:
        cfg.attrs, cfg.numAttrs = None, 0  # no clusters, priorities or other attributes: a plain launch
    return cfg


def launch_config_of(call: tuple[Any, ...]) -> CUlaunchConfig:
    """The ``CUlaunchConfig`` a launch's driver arguments point at (``call[0]`` is its ``byref``)."""
    return call[0]._obj  # CArgObject._obj: the object byref() points at (ctypes' documented attribute)


def config_summary(call: tuple[Any, ...]) -> tuple[Any, ...]:
    """(grid, block, shared_mem, stream handle) of a launch's driver arguments, as the driver was given them.

    For no launch at all it is ``(0, 0, 0, None)``.
    """
    if not call:
        return (0, 0, 0, None)
    cfg = launch_config_of(call)
    return (
        (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
        (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
        cfg.sharedMemBytes,
        cfg.hStream or 0,
    )


def hashable(dims: Any) -> Any:
    """A grid or block as a cache key: a list (which dims accepts) becomes a tuple of the same numbers."""
    return tuple(dims) if isinstance(dims, list) else dims


def integral(value: Any) -> int | None:
    """``value`` as an int if it is a number equal to one (3, np.int64(3), 3.0, True), else None.

    Why accept 3.0? Launch configurations are cached by value, and 3.0 == 3 (with the same hash) in Python. A
    cache keyed by value cannot tell them apart, so the rule must not either. A number that is not a whole
    number (1.5) is refused. So is anything that is not a number ("8", None).
    """
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return int(value)
    return None


def dims(what: str, value: Any) -> tuple[int, int, int]:
    """(x, y, z) from an int or a tuple of 1 to 3 whole numbers.

    Raises TypeError for anything else, and ValueError for a dimension below 1. ``what`` names it in the message.
    """
    dims = tuple(value) if isinstance(value, tuple | list) else (value,)
    whole = [integral(d) for d in dims]
    if not 1 <= len(dims) <= 3 or any(d is None for d in whole):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 1 for d in whole):  # type: ignore[operator]
        raise ValueError(
            f"every {what} dimension must be >= 1, got {value!r} (a launch of zero threads does nothing; "
            "skip the launch instead)"
        )
    return (*whole, *(1,) * (3 - len(whole)))  # type: ignore[return-value]
