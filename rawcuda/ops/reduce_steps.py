"""Ops: the reduction progression -- each step's launch in one table, and the passes that finish a sum.

``kernels/reduce_steps.cu`` holds the classic steps of a GPU reduction, each one change away from the one
before; the seed's ``warp_reduce_sum`` (``kernels/reduce.cu``, what :func:`rawcuda.ops.sum` runs) is the
last. Every step's kernel writes one partial sum per block, so a whole sum is several *passes*: pass 1 reads
the n elements and writes one float per block; pass 2 reads those partials and writes fewer; and so on until
one block is left, whose float is the total. What differs between the steps, the host needs to know -- and
that is all of it, in :data:`STEPS`:

* ``block``: threads per block (256 for all; steps 6-9 are compiled for it and need exactly that);
* ``elements_per_thread``: how many elements each thread adds per block-sized stride (1 for steps 1-3, 2
  from step 4 on, 16 for warp_reduce_sum: four float4 loads);
* ``blocks_per_sm``: ``None`` when the grid grows with n (one block per ``block * elements_per_thread``
  elements: millions of short blocks); a number when the grid is capped at that many blocks per SM and each
  thread loops over the rest (steps 7-9);
* ``shared``: the dynamic shared memory, one float per thread (the shared-memory trees) or one per warp
  (the shuffle steps).

:class:`Reduction` plans the passes for one input once (grids, and two scratch buffers that the passes
alternate between: a pass must not overwrite the partials it is still reading) so that :meth:`~Reduction.run`
queues nothing but the launches -- which is what a benchmark times::

    with Reduction(STEPS[0], x) as r:
        total = r()                 # run every pass, then copy the one float back
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rawcuda import ops
from rawcuda.core.context import Context
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.function import Function
from rawcuda.core.stream import Stream

UNIT_ROUNDOFF = 2.0**-24  # float32: a rounded sum is within this fraction of the exact one
TREE_ADDITIONS = 24  # per pass, an upper bound on the additions after a thread's own loop (trees, shuffles)
STEPS_BLOCK = 256  # threads per block of every step (REDUCE_STEPS_BLOCK in kernels/reduce_steps.cu)
WARP = 32
STEPS_BLOCKS_PER_SM = 8  # steps 7-8: 8 x 256 = 2048 threads, a full SM of sm_80 and sm_90 (one wave)
SHARED_PER = ("thread", "warp")  # what one float of dynamic shared memory is kept for
F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class ReduceStep:
    """One step of the progression: which kernel, what it changes, and how it is launched."""

    number: int
    stem: str  # the kernel source: kernels/<stem>.cu
    kernel: str  # its extern "C" name
    change: str  # what this step changes, compared with the one before
    elements_per_thread: int  # elements a thread adds per block-sized stride through the input
    blocks_per_sm: int | None  # None: the grid covers the input; else it is capped and each thread loops
    shared: str  # "thread" or "warp": one float of dynamic shared memory per thread, or per warp
    block: int = STEPS_BLOCK

    @property
    def shared_bytes(self) -> int:
        per = self.block if self.shared == "thread" else self.block // WARP
        return per * F32.itemsize

    def grid(self, n: int, multiprocessors: int) -> int:
        """Blocks for one pass over ``n`` elements (at least 1: a block over nothing writes 0)."""
        covering = max(1, -(-n // (self.block * self.elements_per_thread)))
        if self.blocks_per_sm is not None:
            return min(covering, self.blocks_per_sm * multiprocessors)
        if covering > ops.MAX_GRID_X:
            raise ValueError(
                f"step {self.number} ({self.kernel}) needs one block per {self.block * self.elements_per_thread} "
                f"elements: {covering} blocks for n = {n}, more than gridDim.x allows ({ops.MAX_GRID_X}); "
                "use a step with a capped grid (7 and later)"
            )
        return covering

    def function(self, context: Context) -> Function:
        return ops.kernel(self.stem, self.kernel, context)


STEPS: tuple[ReduceStep, ...] = (
    ReduceStep(1, "reduce_steps", "reduce_01_interleaved_divergent", "a shared-memory tree, interleaved, `tid % 2s`",
               1, None, "thread"),
    ReduceStep(2, "reduce_steps", "reduce_02_interleaved_bank_conflicts", "contiguous threads: no divergence, "
               "but strided shared-memory accesses (bank conflicts)", 1, None, "thread"),
    ReduceStep(3, "reduce_steps", "reduce_03_sequential_addressing", "sequential addressing: no bank conflicts",
               1, None, "thread"),
    ReduceStep(4, "reduce_steps", "reduce_04_add_during_load", "two elements per thread, added while loading",
               2, None, "thread"),
    ReduceStep(5, "reduce_steps", "reduce_05_unroll_last_warp", "the last warp without __syncthreads",
               2, None, "thread"),
    ReduceStep(6, "reduce_steps", "reduce_06_complete_unroll", "the block size a compile-time constant: "
               "the tree unrolled", 2, None, "thread"),
    ReduceStep(7, "reduce_steps", "reduce_07_many_per_thread", "one wave of blocks; each thread loops over many "
               "elements", 2, STEPS_BLOCKS_PER_SM, "thread"),
    ReduceStep(8, "reduce_steps", "reduce_08_warp_shuffle", "warp shuffles instead of the shared-memory tree",
               2, STEPS_BLOCKS_PER_SM, "warp"),
    ReduceStep(9, "reduce", "warp_reduce_sum", "the seed's name, the project's body: float4 loads, four in flight",
               16, ops.REDUCE_BLOCKS_PER_SM, "warp"),
)  # fmt: skip


def pass_grids(step: ReduceStep, n: int, multiprocessors: int) -> list[int]:
    """The grid of each pass of ``step`` over ``n`` elements: pass k + 1 reads pass k's partial sums, and the
    last pass is one block (its one partial sum is the total)."""
    grids = [step.grid(n, multiprocessors)]
    while grids[-1] > 1:
        grids.append(step.grid(grids[-1], multiprocessors))
    return grids


def error_bound(step: ReduceStep, n: int, multiprocessors: int, abs_sum: float) -> float:
    """How far ``step``'s float32 total of n elements may be from their exact sum, given ``abs_sum`` = sum |x|.

    Each element's value passes through at most d float32 additions on its way into the total (its thread's
    loop, then the trees, in every pass), so the total is within gamma_d * sum |x| of the exact sum, where
    gamma_d = d u / (1 - d u) and u = 2^-24: the standard bound for a sum in any order (Higham, "Accuracy
    and Stability of Numerical Algorithms", chapter 4). d here is an upper bound, counted generously.
    """
    grids = pass_grids(step, n, multiprocessors)
    inputs = [n, *grids[:-1]]
    depth = sum(-(-size // (grid * step.block)) + TREE_ADDITIONS for grid, size in zip(grids, inputs, strict=True))
    return depth * UNIT_ROUNDOFF / (1 - depth * UNIT_ROUNDOFF) * abs_sum


class Reduction:
    """The whole sum of ``x`` by one step: passes planned and scratch allocated once; ``run()`` queues them.

    ``x`` must be a float32 DeviceBuffer; any size works, including 0. The result is the last pass's single
    partial sum, read by :meth:`result` (which waits for the stream). Close it, or use ``with``, to free the
    scratch buffers.
    """

    def __init__(self, step: ReduceStep, x: DeviceBuffer, stream: Stream | None = None) -> None:
        if not isinstance(x, DeviceBuffer) or x.dtype != F32:
            raise TypeError(f"a Reduction sums a float32 rawcuda DeviceBuffer, not {x!r}")
        x.context.check_usable()  # closed, poisoned or forked: say so before any driver call
        if step.shared not in SHARED_PER:
            raise ValueError(f"step {step.number}: shared must be one of {SHARED_PER}, not {step.shared!r}")
        self.step, self.stream = step, stream
        self.function = step.function(x.context)
        self.n, self._multiprocessors = x.size, x.context.device.multiprocessor_count
        self.grids = pass_grids(step, self.n, self._multiprocessors)
        sizes = [x.size, *self.grids]  # the input of each pass: n, then the partial sums of the one before
        # Pass k writes into scratch[k % 2]: the first pass's output is the largest, and each later pass's
        # output is smaller than its input, so two buffers (the first two grids' sizes) hold every pass.
        self._scratch = [DeviceBuffer.empty(g, F32, x.context) for g in self.grids[:2]]
        sources = [x, *(self._scratch[k % 2] for k in range(len(self.grids) - 1))]
        self._launches = [(grid, self._scratch[k % 2], sources[k], sizes[k]) for k, grid in enumerate(self.grids)]
        self._out = self._scratch[(len(self.grids) - 1) % 2]

    @property
    def passes(self) -> int:
        return len(self.grids)

    def error_bound(self, abs_sum: float) -> float:
        """How far this reduction's float32 total may be from the exact sum (see :func:`error_bound`)."""
        return error_bound(self.step, self.n, self._multiprocessors, abs_sum)

    def poison(self) -> None:
        """Fill the scratch buffers with NaN: a partial sum that a pass fails to write shows in the total."""
        for buf in self._scratch:
            buf.fill(np.float32(np.nan), stream=self.stream)

    def run(self) -> None:
        """Queue every pass on the stream; returns before the GPU finishes."""
        for grid, out, src, n in self._launches:
            self.function.launch(
                grid, self.step.block, out, src, n, shared_mem=self.step.shared_bytes, stream=self.stream
            )

    def result(self) -> float:
        """The total after :meth:`run` (waits for the stream)."""
        with self._out.view(0, 1) as total:
            return float(total.to_array(stream=self.stream)[0])

    def __call__(self) -> float:
        self.run()
        return self.result()

    def close(self) -> None:
        for buf in self._scratch:
            buf.close()

    def __enter__(self) -> Reduction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
