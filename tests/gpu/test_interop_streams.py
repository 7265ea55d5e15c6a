"""The CUDA Array Interface's ``stream``, both ways, on a real GPU -- with a producer delayed on purpose.

A spin kernel (kernels/spin.cu) holds a stream for a fraction of a second; the copy or kernel queued behind it
on that stream is then still pending when the other side reads. If the consumer does not order itself after
the producer's stream, it reads stale memory -- every element wrong, which the tests check element by element.
Each test failed before the fix (the comments say how). torch and CuPy tests skip where they are absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, GrowableBuffer, Module, PinnedBuffer, Stream, kernels
from rawcuda.core.kernelargs import ArgumentError
from rawcuda.ffi.constants import StreamFlag
from tests.helpers import BLOCK, NAN32, grid_for

N = 1 << 20
DELAY_NS = 200_000_000  # 0.2 s of spinning: far longer than the host takes to queue and read


@pytest.fixture(scope="module")
def vector_add() -> rawcuda.Function:
    return Module(kernels.ptx_path("vector_add")).function("vector_add")


class Foreign:
    """Another library's array, reduced to its interface: rawcuda memory, described as a stranger would."""

    def __init__(self, buf: DeviceBuffer, stream: int | None, read_only: bool = False, strides: Any = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": buf.shape,
            "typestr": buf.dtype.str,
            "data": (buf.ptr, read_only),
            "strides": strides,
            "version": 3,
            "stream": stream,
        }


@pytest.fixture
def streams() -> Iterator[tuple[Stream, Stream]]:
    # NON_BLOCKING, as CuPy's and torch's side streams are: a blocking producer would be waited for by the
    # legacy default stream anyway, and a launch there could not show whether rawcuda orders itself.
    producer, consumer = Stream(flags=StreamFlag.NON_BLOCKING), Stream(flags=StreamFlag.NON_BLOCKING)
    yield producer, consumer
    producer.close()
    consumer.close()


CUPY_DELAY_SOURCE = """
extern "C" __global__ void delay(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""


# --- rawcuda as the consumer ----------------------------------------------------------------------------------
@pytest.mark.parametrize("launch_on", ["legacy", "stream", "bound"])
def test_a_launch_waits_for_the_stream_a_foreign_array_names(
    spin: Any, vector_add: Any, streams: tuple[Stream, Stream], rng: np.random.Generator, launch_on: str
) -> None:
    # Before: the packer read data[0] only; the kernel ran while the producer's copy was still queued behind
    # the spin, and every output was wrong.
    producer, consumer = streams
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    host_a = PinnedBuffer.from_array(a)  # pinned: the copy is truly asynchronous
    da, db = DeviceBuffer.from_array(np.full(N, NAN32)), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.from_array(np.full(N, NAN32))
    spin.launch(1, 1, DELAY_NS, stream=producer)
    da.copy_from(host_a, stream=producer)  # still pending for DELAY_NS
    foreign = Foreign(da, producer.handle)
    stream = None if launch_on == "legacy" else consumer
    if launch_on == "bound":
        vector_add.bind(grid_for(N), BLOCK, dc, foreign, db, N, stream=stream)()
    else:
        vector_add.launch(grid_for(N), BLOCK, dc, foreign, db, N, stream=stream)
    np.testing.assert_array_equal(dc.to_array(), a + b)
    host_a.close()


def test_a_read_only_foreign_array_is_refused_where_the_kernel_may_write(vector_add: Any) -> None:
    # Before: data[1] (read-only) was ignored; the kernel wrote into memory its owner promised would not change.
    fn = Module(kernels.ptx_path("vector_add")).function("vector_add")
    buf = DeviceBuffer.zeros(N)
    ro = Foreign(buf, None, read_only=True)
    with pytest.raises(ArgumentError, match=r"argument 0: .*read-only.*declare_read_only"):
        fn.launch(grid_for(N), BLOCK, ro, buf, buf, N)
    with pytest.raises(ArgumentError, match=r"argument 1: .*read-only"):
        fn.launch(grid_for(N), BLOCK, buf, ro, buf, N)
    fn.declare_read_only(1, 2)  # vector_add(c, a, b, n) only reads a and b
    fn.launch(grid_for(N), BLOCK, buf, ro, ro, N)
    with pytest.raises(ArgumentError, match="argument 0"):
        fn.launch(grid_for(N), BLOCK, ro, buf, buf, N)
    fn.module.close()
    saxpy = Module(kernels.ptx_path("saxpy")).function("saxpy")  # saxpy(y, float alpha, x, n)
    with pytest.raises(ValueError, match="not a pointer"):
        saxpy.declare_read_only(1)
    with pytest.raises(IndexError, match=r"parameters 0\.\.3"):
        saxpy.declare_read_only(4)
    saxpy.module.close()


def test_a_strided_foreign_array_is_refused(vector_add: Any) -> None:
    buf = DeviceBuffer.zeros((64, 64))
    transposed = Foreign(buf, None, strides=(4, 256))
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        vector_add.launch(1, BLOCK, buf, transposed, buf, 64)
    vector_add.launch(1, BLOCK, buf, Foreign(buf, None, strides=(256, 4)), buf, 64)  # C strides, spelled out


def test_torch_producer_on_its_own_stream(vector_add: Any, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    dc = DeviceBuffer.from_array(np.full(N, NAN32))
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(1e9))  # about half a second of GPU cycles on `side`
        produced = ta * 2.0  # queued behind the sleep
        interface = produced.__cuda_array_interface__
        if interface.get("version", 0) >= 3 and interface.get("stream") is not None:
            vector_add.launch(grid_for(N), BLOCK, dc, produced, tb, N)  # rawcuda waits for the named stream
        else:
            # torch exports version 2 of the interface, without a stream: it promises nothing about pending
            # work, and no consumer can order itself after it. Synchronizing is then the caller's job.
            side.synchronize()
            vector_add.launch(grid_for(N), BLOCK, dc, produced, tb, N)
    np.testing.assert_array_equal(dc.to_array(), a * 2.0 + b)
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        square = torch.zeros((256, 256), device="cuda")
        vector_add.launch(1, BLOCK, dc, square.t(), square, 256)


def test_cupy_producer_on_its_own_stream(spin: Any, vector_add: Any, rng: np.random.Generator) -> None:
    cupy = pytest.importorskip("cupy")
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    cupy.cuda.Device().synchronize()
    dc = DeviceBuffer.from_array(np.full(N, NAN32))
    side = cupy.cuda.Stream(non_blocking=True)
    delay = cupy.RawKernel(CUPY_DELAY_SOURCE, "delay")
    delay((1,), (1,), (np.uint64(0),))  # compile both kernels now: compiling after the delay is queued would
    _ = ca * 2.0  # take longer than the delay, and the producer would be done before rawcuda even looked
    cupy.cuda.Device().synchronize()
    with side:
        delay((1,), (1,), (np.uint64(DELAY_NS),))
        produced = ca * 2.0
        vector_add.launch(grid_for(N), BLOCK, dc, produced, cb, N)
    np.testing.assert_array_equal(dc.to_array(), a * 2.0 + b)


def test_inside_a_capture_a_foreign_stream_must_be_idle(
    spin: Any, vector_add: Any, streams: tuple[Stream, Stream], rng: np.random.Generator
) -> None:
    # Guards the capture: an event record / wait on a foreign stream would break it. A graph cannot wait for another
    # library's stream at replay time, so the stream must be idle when captured -- and busy is refused.
    producer, capturing = streams
    x = rng.standard_normal(N, dtype=np.float32)
    da, dc = DeviceBuffer.from_array(x), DeviceBuffer(N)
    foreign = Foreign(da, producer.handle)
    with rawcuda.capture(capturing) as graph:
        vector_add.launch(grid_for(N), BLOCK, dc, foreign, da, N, stream=capturing)  # producer idle: fine
    dc.fill(NAN32)
    with graph.instantiate() as replay:
        replay.launch(capturing)
        capturing.synchronize()
    np.testing.assert_array_equal(dc.to_array(), x + x)
    spin.launch(1, 1, DELAY_NS, stream=producer)
    with pytest.raises(TypeError, match="cannot be shown idle"), rawcuda.capture(capturing):
        vector_add.launch(grid_for(N), BLOCK, dc, foreign, da, N, stream=capturing)
    producer.synchronize()


# --- rawcuda as the producer ----------------------------------------------------------------------------------
def test_the_exported_stream_is_none_once_the_stream_is_closed(rng: np.random.Generator) -> None:
    # Before: the handle of the destroyed stream was exported (a consumer would wait on a dangling handle).
    buf = DeviceBuffer(N)
    with Stream() as s:
        buf.copy_from(rng.standard_normal(N, dtype=np.float32), stream=s)
        assert buf.__cuda_array_interface__["stream"] == s.handle
    assert buf.__cuda_array_interface__["stream"] is None


def test_views_and_slices_export_the_stream_of_work_pending_on_their_memory(
    spin: Any, streams: tuple[Stream, Stream], rng: np.random.Generator
) -> None:
    # Before: a view or slice of a buffer with a copy still pending said stream=None.
    producer, _ = streams
    host = PinnedBuffer.from_array(rng.standard_normal(N, dtype=np.float32))
    buf = DeviceBuffer(N)
    spin.launch(1, 1, DELAY_NS, stream=producer)
    buf.copy_from(host, stream=producer)
    for view in (buf[10:20], buf.view(4), buf[:][5:]):
        assert view.__cuda_array_interface__["stream"] == producer.handle
    producer.synchronize()
    buf.copy_from(host)  # synchronous: nothing pending any more
    assert buf[10:20].__cuda_array_interface__["stream"] is None
    host.close()


def test_two_views_written_on_two_streams_export_one_stream_that_waits_for_both(
    spin: Any, vector_add: Any, streams: tuple[Stream, Stream], rng: np.random.Generator
) -> None:
    # Before: the shared record kept only the last stream, so the half written on the
    # first (delayed) stream was read early by a consumer of the whole buffer.
    first, second = streams
    x = rng.standard_normal(N, dtype=np.float32)
    host = PinnedBuffer.from_array(x)
    buf = DeviceBuffer.from_array(np.full(N, NAN32))
    half = N // 2
    spin.launch(1, 1, DELAY_NS, stream=first)
    buf[:half].copy_from(host.array[:half], stream=first)
    buf[half:].copy_from(host.array[half:], stream=second)
    stream = buf.__cuda_array_interface__["stream"]
    assert stream in (first.handle, second.handle)
    dc = DeviceBuffer.from_array(np.full(N, NAN32))
    vector_add.launch(grid_for(N), BLOCK, dc, Foreign(buf, stream), Foreign(buf, stream), N)
    np.testing.assert_array_equal(dc.to_array(), x + x)
    host.close()


def test_growable_extend_exports_its_stream(streams: tuple[Stream, Stream], rng: np.random.Generator) -> None:
    # Before: extend() recorded the stream on a throwaway sub-view; the buffer said None.
    producer, _ = streams
    g = GrowableBuffer(1 << 30)
    g.extend(rng.standard_normal(N, dtype=np.float32), stream=producer)
    assert g.__cuda_array_interface__["stream"] == producer.handle
    assert g.buffer[3:].__cuda_array_interface__["stream"] == producer.handle
    g.close()


def test_cupy_reads_a_view_with_a_pending_copy_correctly(
    spin: Any, streams: tuple[Stream, Stream], rng: np.random.Generator
) -> None:
    # Before: CuPy was told stream=None for the view, did not wait, and read the stale contents.
    cupy = pytest.importorskip("cupy")
    producer, _ = streams
    x = rng.standard_normal(N, dtype=np.float32)
    host = PinnedBuffer.from_array(x)
    buf = DeviceBuffer.from_array(np.full(N, NAN32))
    spin.launch(1, 1, DELAY_NS, stream=producer)
    buf.copy_from(host, stream=producer)
    seen = cupy.asnumpy(cupy.asarray(buf[N // 2 :]))
    np.testing.assert_array_equal(seen, x[N // 2 :])
    host.close()
