"""Ops: the shipped kernels as functions -- each with the launch configuration its source documents.

A kernel's grid and block are part of its contract (each SGEMM kernel *requires* its block shape; the
reduction needs one float of dynamic shared memory per warp). Writing them out at every call site invites
the mistake the source comments warn about, so they live here once (the SGEMM kernels' in one table of
their own, :mod:`rawcuda.ops.sgemm`)::

    total = ops.sum(x)                 # two passes of warp_reduce_sum
    ops.matmul(c, a, b)                # c = a @ b, float32 (the fastest measured SGEMM kernel)
    ops.matmul(c, a, b, kernel="sgemm_05_reg2d")   # ... or any step of kernels/sgemm.cu
    ops.transpose(out, x)              # through a padded shared-memory tile; variant="unpadded" | "naive"

Every function checks shapes and dtypes before launching (the elementwise ones once for the very same
buffers: :mod:`rawcuda.ops.lastcheck`), runs on ``stream`` (the legacy default stream
when None) and returns before the GPU finishes, except ``sum``, which returns a Python float.

Sizes. Every kernel takes its extents as ``size_t`` and indexes in 64 bits, so any buffer a GPU can hold
works -- an H200 holds a 1 x 2^31 float matrix easily, and with ``int`` sizes that one wraps.
What is left to bound is the grid: ``gridDim.y`` is at most 65535 and ``gridDim.x`` 2^31 - 1. Where a
kernel walks its tiles or elements in a loop, the grid is capped and the loop covers the rest (bias_relu
in x and y; transpose and the SGEMM kernels in y); where it does not, the entry point refuses the size with a
``ValueError`` naming the limit before anything is launched (transpose's columns, matmul's N, the
reduction's ``blocks``). Those limits are beyond any GPU's memory today, but a launch that cannot cover
its data must say so, not wrap.

Modules. Each context loads a shipped PTX file once, on first use. The loaded Modules are kept in the
:class:`Context` object's ``cache`` -- not in a dict here: a module-level dict would keep every context
that ever ran an op alive forever (the Module holds its context), and a dict keyed by the handle *value*
could hand a reused handle another context's module. Held by the Context, a module is closed with it
(``Context.close()``) and collected with it; :meth:`Resource.hold_context_weakly` keeps the module's
own fallback finalizer from holding the context alive in turn.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from rawcuda import kernels
from rawcuda.core.closecounter import closes
from rawcuda.core.context import Context
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.function import Function
from rawcuda.core.integers import integer
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.core.module import Module
from rawcuda.core.stream import Stream

from . import sgemm
from .lastcheck import LastCheck

BLOCK = 256  # 1-D kernels: a multiple of the warp size (the seed's choice; bench/progressions.py sweeps 32..1024)
WAVES = 32  # grid-stride kernels: at most this many blocks per SM (more adds nothing but scheduling)
WARP = 32
REDUCE_BLOCKS_PER_SM = 4  # one full wave of 256-thread reduction blocks (see kernels/reduce.cu)
# The SGEMM kernel ops.matmul runs when the buffers allow float4 access (16-byte aligned, N and K multiples of
# 4), and the one it runs for every other input: entries of rawcuda.ops.sgemm.KERNELS. Chosen by measurement --
# bench/sgemm.py times every configuration next to torch.matmul; put the fastest float4 kernel and the
# fastest any-input kernel here (the names are the whole choice: grid and block come from the table).
# Chosen by bench/sgemm.py on the H200 (bench/results/2026-12-01-NVIDIA_H200-sgemm.md): the one config that is
# within 2 % of the best at both shapes -- 44.1 TFLOP/s at 4096^3 (87 % of torch, TF32 off; the best, 256x128,
# 45.3) and 38.1 at 32768x64x4096 (87 %, the best there). For inputs float4 cannot take: 33.9 / 17.6 vs
# 30.6 / 28.6 TFLOP/s -- the 64x64 twin loses 10 % on squares and gains 60 % on the tall shape.
MATMUL_KERNEL = "sgemm_tune_128x64x16_64x32_8x8"
MATMUL_ANY_KERNEL = "sgemm_any_64x64x16_32x32_8x4"
TRANSPOSE_TILE = 32  # block (32, 8), each thread covers 4 rows of a 32x32 tile
TRANSPOSE_THREADS = (32, 8)
#: ops.transpose's variants -> the kernel in kernels/transpose.cu. "naive" -> "unpadded" is the coalescing
#: lesson, "unpadded" -> "padded" the bank-conflict lesson (tutorials/03b_transpose.py measures both).
TRANSPOSE_VARIANTS = {"naive": "transpose_naive", "unpadded": "transpose_unpadded", "padded": "transpose_padded"}
ELEMENTWISE_THREADS = (32, 8)
MAX_GRID_X = 2**31 - 1  # CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X on every GPU since compute capability 3.0
MAX_GRID_Y = 65535  # ... and MAX_GRID_DIM_Y
# One block per tile of C columns, in x (no loop over x): the narrower tile of the two kernels sets the limit.
MATMUL_MAX_N = min(sgemm.KERNELS[name].max_n for name in (MATMUL_KERNEL, MATMUL_ANY_KERNEL))
TRANSPOSE_MAX_COLS = MAX_GRID_X * TRANSPOSE_TILE  # one block per 32 columns of x, in x (no loop over x)
F32 = np.dtype(np.float32)

_CACHE_KEY = __name__  # this module's entry in Context.cache: {stem: Module, (stem, name): Function}
_lock = threading.Lock()


def kernel(stem: str, name: str, context: Context) -> Function:
    """``name`` from the shipped ``kernels/<stem>.cu``, loaded once per Context object (see Modules, above).

    The Function is kept too, not only its Module: a Module knows its Functions weakly (module.py), and a
    Function made afresh per call would look the kernel up and check every configuration again.
    """
    cache = context.cache.get(_CACHE_KEY)
    fn = None if cache is None else cache.get((stem, name))
    if fn is None or fn.closed:
        with _lock:
            cache = context.cache.setdefault(_CACHE_KEY, {})
            module = cache.get(stem)
            if module is None or module.closed:
                module = Module(kernels.ptx_path(stem), context)
                module.hold_context_weakly()  # the context holds the module: the module must not hold it back
                module.internal = True  # kept on purpose until the context closes: not a leak
                cache[stem] = module
            fn = cache[(stem, name)] = module.function(name)
    return fn


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


def _at_most(what: str, value: int, limit: int, why: str, fix: str) -> None:
    """Refuse ``value`` above ``limit`` with a ValueError naming both, the reason and the way out."""
    if value > limit:
        raise ValueError(f"{what} = {value} is more than {limit}: {why}; {fix}")


def _grid_1d(n: int, ctx: Context) -> int:
    return max(1, min(_ceil(n, BLOCK), WAVES * ctx.device.multiprocessor_count))


def _f32(*bufs: DeviceBuffer) -> None:
    for buf in bufs:
        if isinstance(buf, np.ndarray):
            raise ArgumentError(
                "a host numpy array where a device pointer is expected: the GPU cannot read host memory through "
                "it; copy it first with rawcuda.DeviceBuffer.from_array(array)"
            )
        if not isinstance(buf, DeviceBuffer):  # ops reads shapes and contexts: a bare pointer has neither
            raise ArgumentError(
                f"ops functions take rawcuda DeviceBuffers, not {type(buf).__name__}: copy into one, or launch the "
                "kernel yourself with Function.launch, which takes other libraries' arrays"
            )
        buf.context.check_usable()  # closed, poisoned or forked: say so before any driver call
        if buf.dtype != F32:
            raise TypeError(f"{buf!r}: this kernel works on float32 buffers")
        # A shape assigned by hand can claim more than the memory holds: the kernel would run past its end.
        described = math.prod(buf.shape) * buf.dtype.itemsize
        if described != buf.nbytes:
            raise ValueError(
                f"{buf!r}: its shape {buf.shape} describes {described} bytes, and it has {buf.nbytes}: a shape "
                "assigned by hand? make a view of the shape you want instead, buf.view(0, shape)"
            )


def _no_overlap(out: DeviceBuffer, *inputs: DeviceBuffer, in_place: bool) -> None:
    """Refuse an output that shares bytes with an input -- unless it *is* that input and the kernel works in
    place (``in_place``: element i is read before element i is written, by the same thread). Why refuse? A
    view shifted by one element makes every thread read what another may already have written: a result
    that is silently wrong, differently at every run (seen: 16 of 2^20 elements differed)."""
    lo, hi = out.ptr, out.ptr + out.nbytes
    for x in inputs:
        start, end = x.ptr, x.ptr + x.nbytes
        if start < hi and lo < end and not (in_place and (start, end) == (lo, hi)):
            exact = "" if in_place else " (this kernel cannot work in place at all)"
            raise ValueError(
                f"the output {out!r} overlaps the input {x!r}{exact}: write into a separate buffer"
                + (", or into that very input (same start, same size)" if in_place else "")
            )


def _same_size(*bufs: DeviceBuffer) -> int:
    sizes = {b.size for b in bufs}
    if len(sizes) != 1:
        raise ValueError(f"the buffers must have the same number of elements, got {[b.size for b in bufs]}")
    return sizes.pop()


def _one_d(last: LastCheck, stem: str, name: str, out: DeviceBuffer, *inputs: DeviceBuffer) -> Any:
    """The checks of a 1-D elementwise op writing ``out`` from ``inputs`` (in place allowed), made once for the
    very same buffers (:mod:`rawcuda.ops.lastcheck`): its kernel (None for no elements), grid and size."""
    found = last.recall(out, *inputs)
    if found is None:
        since = closes.generation  # before the checks: a close while they run leaves what they found stale
        _f32(out, *inputs)
        n = _same_size(out, *inputs)
        _no_overlap(out, *inputs, in_place=True)
        fn = kernel(stem, name, out.context) if n else None
        found = last.remember(since, fn, (_grid_1d(n, out.context), n), out, *inputs)
    return found


_VECTOR_ADD, _SAXPY, _GELU, _BIAS_RELU = LastCheck(), LastCheck(), LastCheck(), LastCheck()


def vector_add(c: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, stream: Stream | None = None) -> None:
    """c = a + b."""
    fn, (grid, n) = _one_d(_VECTOR_ADD, "vector_add", "vector_add", c, a, b)
    if n:
        fn.launch(grid, BLOCK, c, a, b, n, stream=stream)


def saxpy(y: DeviceBuffer, alpha: float, x: DeviceBuffer, stream: Stream | None = None) -> None:
    """y = alpha * x + y, in place."""
    fn, (grid, n) = _one_d(_SAXPY, "saxpy", "saxpy", y, x)
    if isinstance(alpha, str | bytes | bytearray):  # float() would read "2.0" as a number: a text is a mistake
        raise TypeError(f"saxpy's alpha is a number, not the {type(alpha).__name__} {alpha!r}")
    if n:
        fn.launch(grid, BLOCK, y, float(alpha), x, n, stream=stream)


def sum_partials(out: DeviceBuffer, x: DeviceBuffer, blocks: int, stream: Stream | None = None) -> None:
    """One pass of warp_reduce_sum: ``blocks`` partial sums of ``x`` into out[0:blocks]."""
    _f32(out, x)
    blocks = integer(blocks, "blocks")  # (True and 4.0 would launch as 1 and 4 blocks)
    if blocks < 1:
        raise ValueError(f"blocks is the number of partial sums (one per block), at least 1; got {blocks!r}")
    _at_most("blocks", blocks, MAX_GRID_X, "one block per partial sum, and gridDim.x stops there", "ask for fewer")
    if out.size < blocks:
        raise ValueError(f"out has {out.size} elements; {blocks} partial sums need that many")
    fn = kernel("reduce", "warp_reduce_sum", x.context)
    fn.launch(blocks, BLOCK, out, x, x.size, shared_mem=BLOCK // WARP * F32.itemsize, stream=stream)


def sum(x: DeviceBuffer, stream: Stream | None = None) -> float:  # named after numpy.sum
    """The float32 sum of every element: two passes of the seed's warp-shuffle reduction."""
    _f32(x)
    blocks = REDUCE_BLOCKS_PER_SM * x.context.device.multiprocessor_count
    with DeviceBuffer.empty(blocks, F32, x.context) as partials, DeviceBuffer.empty(1, F32, x.context) as total:
        sum_partials(partials, x, blocks, stream)
        sum_partials(total, partials, 1, stream)
        return float(total.to_array(stream=stream)[0])


def matmul_kernel(c: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer) -> sgemm.SgemmKernel:
    """The kernel ``matmul(c, a, b)`` runs: MATMUL_KERNEL if it can take these buffers, else MATMUL_ANY_KERNEL."""
    chosen = sgemm.KERNELS[MATMUL_KERNEL]
    fits = chosen.refusal(b.shape[-1], a.shape[-1], (a.ptr, b.ptr, c.ptr)) is None
    return chosen if fits else sgemm.KERNELS[MATMUL_ANY_KERNEL]


def matmul(
    c: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, stream: Stream | None = None, *, kernel: str | None = None
) -> None:
    """c[M,N] = a[M,K] @ b[K,N] in float32 (row-major).

    ``kernel`` names an entry of :data:`rawcuda.ops.sgemm.KERNELS` to run instead (a step of the progression in
    kernels/sgemm.cu, or a tuning configuration; ``sgemm_09_tf32`` computes on TF32 tensor cores, less
    exactly than fp32 -- see its ``error_bound``); one that cannot take these buffers -- a float4 kernel
    given an unaligned view, or N or K not a multiple of 4 -- is refused with a ValueError saying why.
    """
    _f32(a, b, c)
    if a.ndim != 2 or b.ndim != 2 or c.ndim != 2 or a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"matmul needs a[M,K], b[K,N], c[M,N]; got {a.shape}, {b.shape}, {c.shape}")
    m, k = a.shape
    n = b.shape[1]
    if kernel is not None and kernel not in sgemm.KERNELS:
        raise ValueError(f"no SGEMM kernel {kernel!r}; rawcuda.ops.sgemm.KERNELS has {', '.join(sgemm.KERNELS)}")
    if kernel is None:
        _at_most(
            "matmul's N",
            n,
            MATMUL_MAX_N,
            "one block per tile of C's columns, and gridDim.x stops at 2^31 - 1",
            "no GPU holds such a c (M x N floats); split the product by columns into buffers of their own",
        )
    if not (m and n):
        return  # an empty C: nothing to launch (and no buffer address is read)
    if kernel is None:
        spec = matmul_kernel(c, a, b)
    else:
        spec = sgemm.KERNELS[kernel]
        why = spec.refusal(n, k, (a.ptr, b.ptr, c.ptr))
        if why is not None:
            raise ValueError(
                f"{kernel} cannot compute this product: {why} (ops.matmul without kernel= takes any input)"
            )
    _no_overlap(c, a, b, in_place=False)
    _launch_sgemm(spec, c, a, b, stream)


def _launch_sgemm(
    spec: sgemm.SgemmKernel, c: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, stream: Stream | None
) -> None:
    # A function of its own because matmul's keyword ``kernel`` hides this module's kernel() inside matmul.
    # Every SGEMM kernel walks its row tiles (kernels/sgemm.cu), so y is capped and any M is covered.
    (m, k), n = a.shape, b.shape[1]
    fn = kernel(sgemm.STEM, spec.name, c.context)
    fn.launch(spec.grid(m, n), spec.block, c, a, b, m, n, k, stream=stream)


def transpose(
    out: DeviceBuffer,
    x: DeviceBuffer,
    *,
    variant: str | None = None,
    padded: bool | None = None,
    stream: Stream | None = None,
) -> None:
    """out = x.T for a 2-D float32 buffer.

    ``variant`` picks the kernel: ``"padded"`` (the default: a 32x33 shared-memory tile, coalesced and free
    of bank conflicts), ``"unpadded"`` (the same tile at 32x32: a column read is a 32-way bank conflict) or
    ``"naive"`` (no tile: each warp writes down a column, uncoalesced). ``padded=True``/``False`` is the older
    spelling of ``"padded"``/``"naive"``.
    """
    name = _transpose_kernel(variant, padded)
    _f32(out, x)
    if x.ndim != 2 or out.shape != x.shape[::-1]:
        raise ValueError(f"transpose needs x[R,C] and out[C,R]; got {x.shape} and {out.shape}")
    rows, cols = x.shape
    _at_most(
        "transpose's column count",
        cols,
        TRANSPOSE_MAX_COLS,
        f"one block per {TRANSPOSE_TILE} columns of x, and gridDim.x stops at {MAX_GRID_X}",
        "no GPU holds such an x; transpose it in column blocks copied into buffers of their own",
    )
    if rows and cols:
        _no_overlap(out, x, in_place=False)
        # The kernels walk their tile rows (kernels/transpose.cu), so y is capped and any row count is covered.
        grid = (_ceil(cols, TRANSPOSE_TILE), min(_ceil(rows, TRANSPOSE_TILE), MAX_GRID_Y))
        kernel("transpose", name, x.context).launch(grid, TRANSPOSE_THREADS, out, x, rows, cols, stream=stream)


def _transpose_kernel(variant: str | None, padded: bool | None) -> str:
    if variant is not None and padded is not None:
        raise TypeError(f"give transpose either variant= or padded=, not both (got {variant!r} and {padded!r})")
    if padded is not None:
        if not isinstance(padded, bool | np.bool_):
            raise TypeError(f"padded must be True or False, not {padded!r}; or say variant='padded' or 'naive'")
        return TRANSPOSE_VARIANTS["padded" if padded else "naive"]
    if variant is None:
        return TRANSPOSE_VARIANTS["padded"]
    if not isinstance(variant, str) or variant not in TRANSPOSE_VARIANTS:
        raise ValueError(f"transpose variant {variant!r} is not one of {sorted(TRANSPOSE_VARIANTS)}")
    return TRANSPOSE_VARIANTS[variant]


def bias_relu(out: DeviceBuffer, x: DeviceBuffer, bias: DeviceBuffer, stream: Stream | None = None) -> None:
    """out[r, c] = max(x[r, c] + bias[c], 0)."""
    found = _BIAS_RELU.recall(out, x, bias)
    if found is None:
        since = closes.generation  # (as in _one_d)
        found = _BIAS_RELU.remember(since, *_check_bias_relu(out, x, bias), out, x, bias)
    fn, (grid, rows, cols) = found
    if rows and cols:
        fn.launch(grid, ELEMENTWISE_THREADS, out, x, bias, rows, cols, stream=stream)


def _check_bias_relu(out: DeviceBuffer, x: DeviceBuffer, bias: DeviceBuffer) -> tuple[Any, tuple[Any, int, int]]:
    _f32(out, x, bias)
    if x.ndim != 2 or out.shape != x.shape or bias.shape != (x.shape[1],):
        raise ValueError(f"bias_relu needs x[R,C], out[R,C], bias[C]; got {x.shape}, {out.shape}, {bias.shape}")
    _no_overlap(out, x, in_place=True)
    _no_overlap(out, bias, in_place=False)
    rows, cols = x.shape
    if not (rows and cols):
        return None, (None, rows, cols)
    # Grid-stride in both directions (kernels/elementwise.cu): both are capped, and any shape is covered.
    grid = (
        min(_ceil(cols, ELEMENTWISE_THREADS[0]), MAX_GRID_X),
        min(_ceil(rows, ELEMENTWISE_THREADS[1]), MAX_GRID_Y),
    )
    return kernel("elementwise", "bias_relu", x.context), (grid, rows, cols)


def gelu(out: DeviceBuffer, x: DeviceBuffer, stream: Stream | None = None) -> None:
    """out = gelu(x), tanh approximation."""
    fn, (grid, n) = _one_d(_GELU, "elementwise", "gelu", out, x)
    if n:
        fn.launch(grid, BLOCK, out, x, n, stream=stream)
