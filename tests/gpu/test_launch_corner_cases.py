"""Launch corner cases on a real GPU, one test each.

Each guards against a silent wrong answer or an unclear error: a launch through a dead stream's handle after a
capture deferred its release; a kernel with static shared memory that failed above 48 KiB *in all* because only
the dynamic part was compared with the limit; ``stream=2`` failing with an AttributeError from inside rawcuda; a
bound launch that, after a refused ``update()``, still pointed at arguments nobody held; an ``ops`` output
overlapping its input by one element, silently wrong.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import rawcuda
import rawcuda.extras.nvrtc
from rawcuda import DeviceBuffer, Module, Stream, ops
from rawcuda.core.closecounter import closes
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.graphs.streamcapture import capture
from tests.helpers import grid_for

pytestmark = pytest.mark.gpu

BLOCK = ops.BLOCK
N = 1 << 16
KIB = 1024
STATIC_FLOATS = 2048  # 8 KiB of static shared memory
DYNAMIC_BYTES = 44 * KIB  # under 48 KiB alone, over it with the static 8 KiB

STATIC_AND_DYNAMIC = r"""
extern "C" __global__ void both_shared(float *out, unsigned dynamic_floats) {
    __shared__ float fixed[2048];
    extern __shared__ float dynamic[];
    unsigned t = threadIdx.x;
    for (unsigned i = t; i < 2048; i += blockDim.x) fixed[i] = (float)i;
    for (unsigned i = t; i < dynamic_floats; i += blockDim.x) dynamic[i] = 2.0f * (float)i;
    __syncthreads();
    out[t] = fixed[(t * 7u) % 2048u] + dynamic[(t * 13u) % dynamic_floats];
}
"""


def test_a_release_deferred_by_a_capture_still_moves_the_close_counter(stream: Stream) -> None:
    # Launch caches key streams by id(); a stream collected during a capture has its release queued, and a
    # new Stream can get its id at once. Before the fix the counter moved only at the (deferred) release, so
    # a launch on the new stream went to the dead one's handle (100 launches of 100).
    gc.disable()
    try:

        class Cycle:
            def __init__(self) -> None:
                self.me, self.stream = self, Stream()

        garbage = Cycle()
        del garbage
        with capture(stream):
            before = closes.generation
            gc.collect()
            assert closes.generation > before, "a dead stream must invalidate the launch caches at once"
    finally:
        gc.enable()


def test_static_plus_dynamic_shared_memory_over_48_kib_opts_in() -> None:
    try:
        result = rawcuda.extras.nvrtc.compile(STATIC_AND_DYNAMIC, name="both_shared.cu")
    except rawcuda.NvrtcNotFoundError as exc:
        pytest.skip(f"no libnvrtc: {str(exc).splitlines()[0]}")
    with Module(result.ptx, name="both_shared.cu") as module:
        fn = module.function("both_shared")
        assert fn.shared_size_bytes == STATIC_FLOATS * 4
        dynamic_floats = DYNAMIC_BYTES // 4
        with DeviceBuffer.empty(BLOCK) as out:
            out.fill(np.nan)
            fn.launch(1, BLOCK, out, dynamic_floats, shared_mem=DYNAMIC_BYTES)
            got = out.to_array()
        t = np.arange(BLOCK)
        expected = ((t * 7) % STATIC_FLOATS + 2.0 * ((t * 13) % dynamic_floats)).astype(np.float32)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("bad", [1, 2, "stream", 0.5], ids=["legacy-int", "per-thread-int", "str", "float"])
def test_a_stream_that_is_not_a_rawcuda_stream_is_a_clear_type_error(vector_add: rawcuda.Function, bad: object) -> None:
    with DeviceBuffer.zeros(N) as a:
        with pytest.raises(TypeError, match="stream must be a rawcuda Stream, another library's stream"):
            vector_add.launch(grid_for(N, BLOCK), BLOCK, a, a, a, N, stream=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="stream must be a rawcuda Stream, another library's stream"):
            ops.vector_add(a, a, a, stream=bad)  # type: ignore[arg-type]


def test_a_refused_update_keeps_the_bound_launch_on_its_old_live_arguments(
    rng: np.random.Generator, vector_add: rawcuda.Function
) -> None:
    a, b = (rng.standard_normal(N, dtype=np.float32) for _ in range(2))
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    bound = vector_add.bind(grid_for(N, BLOCK), BLOCK, dc, da, db, N)
    old = bound.args
    with pytest.raises(ArgumentError):
        bound.update(dc, da)  # one argument too few: refused
    assert bound.args is old, "a refused update keeps (and keeps alive) the old arguments"
    del da, db  # only the bound launch holds them now
    dc.fill(np.nan)
    bound()
    np.testing.assert_array_equal(dc.to_array(), a + b)
    for buf in old:
        if isinstance(buf, DeviceBuffer):
            buf.close()


def test_ops_refuse_an_output_that_partly_overlaps_an_input(rng: np.random.Generator) -> None:
    x = rng.standard_normal(N + 1, dtype=np.float32)
    with DeviceBuffer.from_array(x) as whole:
        shifted, base = whole[1:], whole[:-1]
        with pytest.raises(ValueError, match="overlaps the input"):
            ops.vector_add(shifted, base, base)  # silently wrong before: threads read what others wrote
        with pytest.raises(ValueError, match="overlaps the input"):
            ops.gelu(shifted, base)
        ops.vector_add(base, base, base)  # exactly in place is fine: element i read, then written, by one thread
        np.testing.assert_array_equal(whole.to_array()[:-1], x[:-1] + x[:-1])
    with DeviceBuffer.from_array(rng.standard_normal((64, 64)).astype(np.float32)) as sq:
        with pytest.raises(ValueError, match="cannot work in place"):
            ops.transpose(sq, sq)
        with pytest.raises(ValueError, match="cannot work in place"):
            ops.matmul(sq, sq, sq)
