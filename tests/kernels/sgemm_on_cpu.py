"""Run one SGEMM kernel of kernels/sgemm.cu on the CPU (tests/kernels/cuda_on_cpu.h) and check it with numpy.

    python tests/kernels/sgemm_on_cpu.py LIBRARY KERNEL [--misaligned]

LIBRARY is the kernels compiled for the CPU by tests/cpu/test_sgemm_on_cpu.py (with AddressSanitizer and
UBSan, so this process must start with their runtimes preloaded: the test does that). The launch -- grid
and block -- comes from rawcuda.ops.sgemm's table, so a wrong row in the table fails here like a wrong index in
a kernel. Each case copies A and B into allocations of exactly their size (the sanitizer sees every byte
past them), poisons C with NaN, and compares every element with a float64 product within the kernel's
error_bound (rawcuda/ops/sgemm.py: K * eps * (|A| @ |B|) for fp32, more for the TF32 step). Prints
``N cases verified`` and exits 0, or what differed and 1.
``--misaligned`` runs one case 4 bytes past an aligned start whatever the kernel is -- for a float4 kernel
what the host refuses, and what UBSan must then stop (the test that the checks can fail).
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rawcuda.ops import sgemm  # noqa: E402  (after the sys.path fix; rawcuda.ops.sgemm is a table, no driver)

SHAPES = ((1, 1, 1), (17, 33, 9), (129, 65, 257), (70, 260, 12), (3, 5, 0))  # (M, N, K), none tile-sized
CAPPED = (129, 65, 257)  # also run with gridDim.y = 1: one block row walks every row tile
OFFSETS = (0, 1)  # floats past an aligned start; float4 kernels take only 0 (the host refuses the rest)
OK, NOT_FOUND, WROTE_BEFORE_C = 0, -1, -2  # run()'s results (tests/cpu/test_sgemm_on_cpu.py writes run())


def main(library: str, name: str, *flags: str) -> int:
    lib = ctypes.CDLL(library)
    lib.run.argtypes = [ctypes.c_char_p, *[ctypes.c_uint] * 4, *[ctypes.c_void_p] * 3, *[ctypes.c_size_t] * 3]
    lib.run.argtypes += [ctypes.c_uint]
    spec = sgemm.KERNELS[name]
    rng = np.random.default_rng()
    cases, failures = 0, []
    shapes, offsets = (SHAPES, OFFSETS) if "--misaligned" not in flags else ((SHAPES[1],), OFFSETS[1:])
    for m, n, k in shapes:
        if spec.vector:
            n, k = (-(-x // sgemm.VECTOR_FLOATS) * sgemm.VECTOR_FLOATS for x in (n, k))
        grids = [spec.grid(m, n)] + ([(spec.grid(m, n)[0], 1)] if (m, n, k) == CAPPED else [])
        for grid in grids:
            for offset in offsets[:1] if spec.vector else offsets:
                a = rng.standard_normal((m, k), dtype=np.float32)
                b = rng.standard_normal((k, n), dtype=np.float32)
                c = np.empty((m, n), np.float32)
                status = lib.run(
                    name.encode(), *grid, *spec.block, c.ctypes.data, a.ctypes.data, b.ctypes.data, m, n, k, offset
                )
                cases += 1
                what = f"{name} {m}x{n}x{k} grid={grid} offset={offset}"
                if status != OK:
                    failures.append(f"{what}: run() returned {status}")
                    continue
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                bad = ~(np.abs(c - a64 @ b64) <= spec.error_bound(k) * (np.abs(a64) @ np.abs(b64)) + 1e-30)
                if bad.any():
                    failures.append(f"{what}: {int(bad.sum())} of {bad.size} elements wrong or unwritten")
    for failure in failures:
        print("FAILED:", failure)
    print(f"{cases - len(failures)} of {cases} cases verified" if failures else f"{cases} cases verified")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
