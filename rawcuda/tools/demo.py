"""Tool: ``python -m rawcuda demo`` -- the main job, end to end, with every driver call on screen.

It makes sure the kernels' PTX is there (rebuilding what changed when run from a source checkout with
nvcc), runs vector add on GPU 0 with tracing on, and checks every element against numpy. Exit status:
0 verified, 1 wrong result, 77 no usable GPU (one line says why) -- the same rules as the tutorials.
"""

from __future__ import annotations

import sys

import numpy as np

from rawcuda.core.device import Device
from rawcuda.core.devicebuffer import DeviceBuffer

from .. import kernels, ops
from ..checked import tracing
from ..checked.errors import DriverNotFoundError, NoDeviceError, StubLibraryError
from . import kernelbuild
from .nvcc import KernelBuildError

N = 1_000_003  # a prime: no block size divides it, so the kernel's bounds check is exercised
EXIT_OK, EXIT_WRONG, EXIT_NO_GPU = 0, 1, 77


def ensure_ptx() -> str:
    """Rebuild stale PTX when the sources and nvcc are here; otherwise use the PTX the package ships."""
    if not kernelbuild.SOURCE_DIR.is_dir():
        return f"using the shipped PTX in {kernels.KERNEL_DIR}"
    try:
        result = kernelbuild.build(kernelbuild.SOURCE_DIR, kernels.KERNEL_DIR)
    except KernelBuildError as exc:
        return f"using the shipped PTX ({str(exc).splitlines()[0]})"
    return f"PTX: built {result.built or 'nothing'}, up to date {len(result.cached)} kernel source(s)"


def main() -> int:
    print(ensure_ptx())
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    try:
        print(f"running vector add of {N:,} floats with every driver call traced:\n")
        with tracing.trace(file=sys.stdout):
            dev = Device(0)
            da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
            dc = DeviceBuffer.empty(N)
            dc.fill(np.float32(np.nan))  # poison: a kernel that does nothing cannot pass
            ops.vector_add(dc, da, db)
            c = dc.to_array()
            for buf in (da, db, dc):
                buf.close()
    except (DriverNotFoundError, StubLibraryError, NoDeviceError) as exc:
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        return EXIT_NO_GPU
    if not np.array_equal(c, a + b):
        bad = int(np.count_nonzero(c != a + b))
        print(f"\nWRONG: {bad:,} of {N:,} elements differ from numpy")
        return EXIT_WRONG
    print(f"\nverified on {dev.name}: all {N:,} elements equal numpy's a + b")
    return EXIT_OK
