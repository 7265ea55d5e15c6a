"""Ops data: the SGEMM kernels of ``kernels/sgemm.cu`` -- how to launch each one, in one table.

``kernels/sgemm.cu`` builds an fp32 matrix multiply ``C = A @ B`` (row-major) one idea at a time, from a
naive kernel to double-buffered warp tiles, and instantiates its last step at several tile sizes. Every
kernel there takes ``(C, A, B, M, N, K)`` with ``size_t`` extents and any M, N, K; what differs is how it
must be launched and which inputs it can take. This table says both, once, for ``ops.matmul``, the tests,
the benchmark and the tutorial::

    >>> from rawcuda import sgemm
    >>> k = sgemm.KERNELS["sgemm_07_warptile"]
    >>> k.block, k.tile, k.vector
    ((256, 1), (128, 128), True)
    >>> k.grid(1000, 300)  # (column tiles, row tiles)
    (3, 8)

* ``block`` -- threads (x, y): the kernel's ``__launch_bounds__`` and its index arithmetic assume exactly
  this shape.
* ``tile`` -- (rows, columns) of C one block computes. The grid is (ceil(N / columns), min(ceil(M / rows),
  65535)): every kernel walks its row tiles in a loop (blockIdx.y, blockIdx.y + gridDim.y, ...), so y is
  capped and any M is covered; x is not looped over, so N is at most (2^31 - 1) * columns (``max_n``).
* ``vector`` -- the kernel moves float4s (16 bytes) to and from global memory: A, B and C must start on
  16-byte boundaries and N and K must be multiples of 4, so that every row starts aligned and a float4 is
  wholly inside a matrix or wholly outside it. ``refusal()`` says why a kernel cannot take given inputs.
  Each tuned float4 kernel ``sgemm_tune_*`` has an any-input twin ``sgemm_any_*`` for the rest.
* ``shared_bytes`` -- static shared memory per block (none of these kernels takes dynamic shared memory).
* ``tf32`` -- step 09 multiplies on tensor cores with TF32 inputs: it is *not* an fp32 kernel, and
  ``ops.matmul`` never picks it unless asked by name. ``error_bound`` says how far each kernel may be from
  the exact product.

The tuned kernels are named after their tiles, ``sgemm_tune_<BM>x<BN>x<BK>_<WM>x<WN>_<TM>x<TN>``: block
tile, K-step, warp tile, thread tile (``kernels/sgemm_tile.cuh`` explains each). Which one ``ops.matmul``
runs is ``ops.MATMUL_KERNEL`` (and ``ops.MATMUL_ANY_KERNEL``), chosen by ``bench/sgemm.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

STEM = "sgemm"  # kernels/sgemm.cu -> rawcuda/kernels/sgemm.ptx
WARP = 32
FLOAT_BYTES = 4
VECTOR_FLOATS = 4  # a float4
VECTOR_ALIGN = VECTOR_FLOATS * FLOAT_BYTES  # bytes a float4 load or store must be aligned to
MAX_GRID_X = 2**31 - 1  # CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X since compute capability 3.0
MAX_GRID_Y = 65535
TILED_A_PAD = 4  # kernels/sgemm_tile.cuh: A_PAD, extra floats per row of the transposed A tile
TILED_STAGES = 2  # ... STAGES: the double buffer
EPS32 = 2.0**-23  # float32's machine epsilon: twice its unit roundoff u = 2^-24
TF32_INPUT_ERROR = 2.0**-9  # TF32 keeps 10 mantissa bits (u = 2^-11); a product of two rounded inputs is off
#                           by up to 2u + u^2 relative to the exact one: 2^-9 is twice that, rounded up


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


@dataclass(frozen=True)
class SgemmKernel:
    """One kernel of kernels/sgemm.cu: its name, what it teaches, and how it must be launched."""

    name: str
    summary: str  # what this kernel does differently (one line)
    block: tuple[int, int]  # threads (x, y)
    tile: tuple[int, int]  # (rows, columns) of C per block
    vector: bool  # float4 global loads and stores (aligned pointers, N and K multiples of 4)
    shared_bytes: int  # static shared memory per block
    tf32: bool = False  # tensor cores on TF32 inputs, fp32 sums (step 09)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1]

    @property
    def max_n(self) -> int:
        """The widest C one launch covers: one block per ``tile[1]`` columns, and gridDim.x stops at 2^31 - 1."""
        return MAX_GRID_X * self.tile[1]

    def grid(self, m: int, n: int) -> tuple[int, int]:
        """(x, y) blocks for an M x N result: every column tile, and the row tiles up to gridDim.y's limit."""
        return max(1, _ceil(n, self.tile[1])), max(1, min(_ceil(m, self.tile[0]), MAX_GRID_Y))

    def error_bound(self, k: int) -> float:
        """The factor e with |C - A @ B| <= e * (|A| @ |B|), element by element, for a K-term product.

        fp32 kernels: each output is a K-term dot product summed in float32 with fused multiply-adds, whose
        rounding error is at most gamma_K = K u / (1 - K u) (u = 2^-24) times the sum of the terms'
        magnitudes; K * eps32 = 2 K u covers it while K u <= 1/2 (K up to 2^23). tf32 (step 09): the inputs
        are rounded to TF32 first (TF32_INPUT_ERROR per product), then summed in float32 inside and across
        the tensor-core instructions, whose adders need not round to nearest: 2 K eps32 for those.
        """
        if self.tf32:
            return TF32_INPUT_ERROR + 2 * k * EPS32
        return k * EPS32

    def refusal(self, n: int, k: int, pointers: Iterable[int]) -> str | None:
        """Why this kernel cannot compute C[M,N] = A[M,K] @ B[K,N] at these addresses; None if it can."""
        if n > self.max_n:
            return f"N = {n} is more than {self.max_n}: one block per {self.tile[1]} columns, and gridDim.x stops"
        if not self.vector:
            return None
        odd = [f"{what} = {value}" for what, value in (("N", n), ("K", k)) if value % VECTOR_FLOATS]
        if odd:
            return f"{self.name} moves float4s and needs N and K to be multiples of {VECTOR_FLOATS}; " + ", ".join(odd)
        misaligned = [f"{ptr:#x}" for ptr in pointers if ptr % VECTOR_ALIGN]
        if misaligned:
            return f"{self.name} moves float4s and needs {VECTOR_ALIGN}-byte aligned buffers; {', '.join(misaligned)}"
        return None


@dataclass(frozen=True)
class Tiles:
    """The template parameters of kernels/sgemm_tile.cuh: block tile, K-step, warp tile, thread tile."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    tm: int
    tn: int

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}_{self.wm}x{self.wn}_{self.tm}x{self.tn}"

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * WARP

    @property
    def shared_bytes(self) -> int:
        return TILED_STAGES * self.bk * (self.bm + TILED_A_PAD + self.bn) * FLOAT_BYTES

    def kernel(self, prefix: str, vector: bool, summary: str) -> SgemmKernel:
        return SgemmKernel(
            f"{prefix}_{self.label}", summary, (self.threads, 1), (self.bm, self.bn), vector, self.shared_bytes
        )


def _tiles(label: str) -> Tiles:
    """``"128x128x8_32x64_8x8"`` -> Tiles(128, 128, 8, 32, 64, 8, 8)."""
    block, warp, thread = label.split("_")
    return Tiles(*map(int, block.split("x")), *map(int, warp.split("x")), *map(int, thread.split("x")))


STEP_08_TILES = _tiles("128x128x8_32x64_8x8")

#: The progression, in order (kernels/sgemm.cu, "// [step NN]").
STEPS: tuple[SgemmKernel, ...] = (
    SgemmKernel(
        "sgemm_01_naive", "one thread per output; a warp walks down a column (uncoalesced)", (32, 8), (32, 8), False, 0
    ),
    SgemmKernel("sgemm_02_coalesced", "one thread per output; a warp walks along a row", (32, 8), (8, 32), False, 0),
    SgemmKernel(
        "sgemm_03_smem", "32 x 32 tiles of A and B in shared memory", (32, 32), (32, 32), False, 2 * 32 * 32 * 4
    ),
    SgemmKernel(
        "sgemm_04_reg1d",
        "8 outputs per thread (a column of registers)",
        (512, 1),
        (64, 64),
        False,
        (64 * 8 + 8 * 64) * 4,
    ),
    SgemmKernel(
        "sgemm_05_reg2d",
        "8 x 8 outputs per thread, 128 x 128 block tiles",
        (256, 1),
        (128, 128),
        False,
        2 * 128 * 8 * 4,
    ),
    SgemmKernel(
        "sgemm_06_float4",
        "float4 global loads and stores; A stored transposed",
        (256, 1),
        (128, 128),
        True,
        2 * 128 * 8 * 4,
    ),
    SgemmKernel(
        "sgemm_07_warptile",
        "warp tiles of interleaved 4 x 4 blocks: no bank conflicts",
        (256, 1),
        (128, 128),
        True,
        8 * (132 + 128) * 4,
    ),
    SgemmKernel(
        "sgemm_08_double_buffer",
        "two shared stages; the next K-step's loads in flight during the arithmetic",
        (STEP_08_TILES.threads, 1),
        (STEP_08_TILES.bm, STEP_08_TILES.bn),
        True,
        STEP_08_TILES.shared_bytes,
    ),
    SgemmKernel(
        "sgemm_09_tf32",
        "tensor cores (mma.sync m16n8k8) on TF32 inputs, fp32 sums: not fp32",
        (256, 1),
        (128, 128),
        True,
        TILED_STAGES * (128 * (16 + 4) + 16 * (128 + 8)) * FLOAT_BYTES,
        tf32=True,
    ),
)

#: The configurations of step 08 one benchmark run sweeps (kernels/sgemm.cu instantiates the same list).
TUNE_TILES: tuple[Tiles, ...] = tuple(
    _tiles(label)
    for label in (
        "128x128x8_32x64_8x8",
        "128x128x8_64x32_8x8",
        "128x128x16_32x64_8x8",
        "128x128x16_64x32_8x8",
        "128x64x16_64x32_8x8",
        "64x128x16_32x64_8x8",
        "64x64x16_32x32_8x4",
        "128x256x8_64x64_8x16",
        "256x128x8_64x64_16x8",
        "128x128x8_64x64_8x16",
        "128x128x16_64x64_8x16",
    )
)
#: The configurations that also have an any-input twin (single-float loads and stores, each checked).
ANY_TILES: tuple[Tiles, ...] = tuple(
    _tiles(label)
    for label in ("128x128x8_32x64_8x8", "128x128x8_64x32_8x8", "128x128x8_64x64_8x16", "64x64x16_32x32_8x4")
)

TUNE: tuple[SgemmKernel, ...] = tuple(t.kernel("sgemm_tune", True, f"step 08 at {t.label}") for t in TUNE_TILES)
ANY: tuple[SgemmKernel, ...] = tuple(
    t.kernel("sgemm_any", False, f"step 08 at {t.label}, single-float loads (any input)") for t in ANY_TILES
)

#: Every kernel of kernels/sgemm.cu by name.
KERNELS: dict[str, SgemmKernel] = {k.name: k for k in (*STEPS, *TUNE, *ANY)}
