"""torch, CuPy and cuda.core streams as ``stream=`` on the H200 (rawcuda/core/streamargs.py).

Each library's stream gets a long spin kernel and then a vector_add from rawcuda. Their stream reports busy
while the spin runs (the work is on *their* queue), their own synchronize waits for both, and the sum is
exact on fresh random data written over a poisoned output. A library whose stream lacks ``__cuda_stream__``
is passed through a three-line adapter over its handle, as a user would write it (CuPy 14 has the
protocol; the adapter also wraps a rawcuda Stream of a created context below).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import BorrowedStream, Context, DeviceBuffer, Module, PoolBuffer, Stream
from rawcuda.checked.errors import ClosedError
from rawcuda.extras.growable import GrowableBuffer

pytestmark = pytest.mark.gpu

N = 1 << 20
BLOCK = 256
SPIN_NS = 100_000_000  # 0.1 s of GPU time: the stream is surely still busy when the host looks


class Adapter:
    """What a user writes for a stream without the protocol: its handle, in the protocol's shape."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def protocol(stream: Any, handle: int) -> Any:
    return stream if hasattr(type(stream), "__cuda_stream__") else Adapter(handle)


def run_on(theirs: Any, busy: Callable[[], bool], wait: Callable[[], object]) -> None:
    rng = np.random.default_rng()
    a_host, b_host = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    a, b = DeviceBuffer.from_array(a_host), DeviceBuffer.from_array(b_host)
    c = DeviceBuffer.empty(N)
    c.fill(np.float32(np.nan))
    spin = Module(rawcuda.kernels.ptx_path("spin")).function("spin")
    add = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    spin.launch(1, 1, SPIN_NS, stream=theirs)
    add.launch((N + BLOCK - 1) // BLOCK, BLOCK, c, a, b, N, stream=theirs)
    assert busy(), "the spin kernel was queued on their stream: it must still be running there"
    wait()  # their own synchronize: it waits for rawcuda's work, so it was queued on their stream
    np.testing.assert_array_equal(c.to_array(), a_host + b_host)


def test_a_torch_stream(torch: Any) -> None:
    s = torch.cuda.Stream()
    run_on(protocol(s, s.cuda_stream), lambda: not s.query(), s.synchronize)


def test_a_cupy_stream(cupy: Any) -> None:
    s = cupy.cuda.Stream(non_blocking=False)
    run_on(protocol(s, s.ptr), lambda: not s.done, s.synchronize)


def test_a_cuda_core_stream() -> None:
    core = pytest.importorskip("cuda.core")
    device = core.Device(0)
    device.set_current()  # the primary context, which rawcuda's default context is too
    s = device.create_stream()
    # (cuda.core's stream has no query: an event recorded after rawcuda's work tells whether it is done)
    run_on(s, lambda: not s.record().is_done, s.sync)


def test_a_bound_launch_and_a_copy_on_a_kept_borrowed_stream(torch: Any) -> None:
    s = torch.cuda.Stream()
    kept = BorrowedStream.of(protocol(s, s.cuda_stream))
    assert kept is not None and kept.handle == s.cuda_stream
    rng = np.random.default_rng()
    host = rng.standard_normal(N).astype(np.float32)
    a = DeviceBuffer.empty(N)
    a.fill(np.float32(np.nan))
    a.copy_from(host, stream=kept)
    c = DeviceBuffer.empty(N)
    c.fill(np.float32(np.nan))
    add = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    bound = add.bind((N + BLOCK - 1) // BLOCK, BLOCK, c, a, a, N, stream=kept)
    bound()
    s.synchronize()
    np.testing.assert_array_equal(c.to_array(), host + host)


def test_a_stream_of_another_context_is_refused_before_anything_is_queued(torch: Any) -> None:
    s = torch.cuda.Stream()  # in the primary context
    with Context.create() as other:
        add = Module(rawcuda.kernels.ptx_path("vector_add"), context=other).function("vector_add")
        c = DeviceBuffer.zeros(BLOCK, context=other)
        with pytest.raises(ValueError, match="belongs to context"):
            add.launch(1, BLOCK, c, c, c, BLOCK, stream=protocol(s, s.cuda_stream))


def test_torch_default_stream_is_the_legacy_stream(torch: Any) -> None:
    s = torch.cuda.default_stream()
    assert BorrowedStream.of(protocol(s, s.cuda_stream)) is None  # handle 0: what stream=None means


def test_an_export_waits_for_work_on_a_borrowed_stream_evicted_and_dropped(torch: Any) -> None:
    # The evicted stream's release once let go without waiting: the pending record holds streams weakly and
    # counted the dead one as done, and torch read the output before the kernel had written it.
    rng = np.random.default_rng()
    a_host = rng.standard_normal(N).astype(np.float32)
    a, c = DeviceBuffer.from_array(a_host), DeviceBuffer.empty(N)
    c.fill(np.float32(np.nan))
    spin = Module(rawcuda.kernels.ptx_path("spin")).function("spin")
    add = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    first = torch.cuda.Stream()
    spin.launch(1, 1, SPIN_NS, stream=first)
    add.launch((N + BLOCK - 1) // BLOCK, BLOCK, c, a, a, N, stream=first)
    others = [torch.cuda.Stream() for _ in range(20)]  # more than a context keeps: the first is evicted
    for other in others:
        add.launch(1, BLOCK, c, a, a, 0, stream=other)
    del first, others
    gc.collect()
    np.testing.assert_array_equal(torch.from_dlpack(c).cpu().numpy(), a_host + a_host)


def test_a_closed_cuda_core_stream_is_refused_not_launched_on() -> None:
    # A bound launch and a kept BorrowedStream on a cuda.core stream its owner closed: the launch on the
    # destroyed handle crashed the driver (signal 11). Now the owner is asked, and the answer has changed.
    core = pytest.importorskip("cuda.core")
    device = core.Device(0)
    device.set_current()
    s = device.create_stream()
    c = DeviceBuffer.zeros(BLOCK)
    add = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
    kept = BorrowedStream.of(s)
    bound = add.bind(1, BLOCK, c, c, c, BLOCK, stream=s)
    bound()
    add.launch(1, BLOCK, c, c, c, BLOCK, stream=kept)
    s.sync()
    s.close()
    with pytest.raises(ClosedError, match=r"closed or replaced it|no longer answers __cuda_stream__"):
        bound()
    with pytest.raises(ClosedError, match=r"closed or replaced it|no longer answers __cuda_stream__"):
        add.launch(1, BLOCK, c, c, c, BLOCK, stream=kept)


def test_a_refused_stream_leaves_a_growable_buffer_as_it_was() -> None:
    grown = GrowableBuffer(1 << 24, np.float32)
    with pytest.raises(TypeError, match="stream must be"):
        grown.extend(np.ones(8, np.float32), stream=7)
    assert grown.size == 0
    grown.close()


def test_calls_without_a_context_use_the_one_a_foreign_stream_is_in() -> None:
    with Context.create() as other:
        theirs = Stream(other)
        adapter = Adapter(theirs.handle)
        assert len(rawcuda.time_ms(lambda: None, reps=2, warmup=0, stream=adapter).times) == 2
        buf = PoolBuffer(BLOCK, stream=adapter)
        assert buf.context is other
        buf.close()
        theirs.synchronize()
