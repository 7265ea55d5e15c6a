"""DLPack on a real GPU, both ways, against torch, CuPy and numpy: the same address, the right data, the right order.

Zero-copy is checked by address (``data_ptr`` == ``buf.ptr``), data element by element on fresh random values.
The stream promise is checked as tests/gpu/test_interop_streams.py does: a producer held busy on purpose (the
spin kernel, ``torch.cuda._sleep``, a CuPy delay kernel) while the copy or kernel behind it is still pending,
on NON_BLOCKING streams that nothing orders implicitly; a consumer that did not wait would read the NaN
poison or garbage. Lifetimes are checked with the cyclic GC off, by weak reference and ``cuMemGetInfo``.
torch and CuPy tests skip where they are absent.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import (
    ClosedError,
    Context,
    DeviceBuffer,
    ForeignBuffer,
    GrowableBuffer,
    ManagedBuffer,
    PinnedBuffer,
    Stream,
    cu,
    ops,
)
from rawcuda.core.context import default_context
from rawcuda.ffi.constants import StreamFlag
from rawcuda.protocols import dlpack as producer_side
from rawcuda.protocols.dlpackabi import DLDeviceType
from tests.helpers import BLOCK, NAN32, grid_for

N = 1 << 20
BIG = 16 << 20  # float32 elements: 64 MiB, far above cuMemGetInfo's noise
BIG_BYTES = BIG * 4
DEVICE_TOLERANCE = 4 << 20
DELAY_NS = 200_000_000  # 0.2 s of spinning: far longer than the host takes to queue and read
TORCH_SLEEP_CYCLES = int(1e9)  # about half a second of GPU cycles
ROUNDS = 20

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


# --- fixtures (spin: tests/conftest.py; torch and cupy, warmed up: tests/gpu/conftest.py) ----------------------------
@pytest.fixture(scope="module")
def cupy_delay(cupy: Any) -> Any:
    """A CuPy kernel that holds its stream for a given number of nanoseconds, compiled ahead."""
    delay = cupy.RawKernel(CUPY_DELAY_SOURCE, "delay")
    delay((1,), (1,), (np.uint64(0),))
    cupy.cuda.Device().synchronize()
    return delay


@pytest.fixture
def streams() -> Iterator[tuple[Stream, Stream]]:
    # NON_BLOCKING, as CuPy's and torch's side streams are: nothing orders them with the legacy stream implicitly.
    producer, consumer = Stream(flags=StreamFlag.NON_BLOCKING), Stream(flags=StreamFlag.NON_BLOCKING)
    yield producer, consumer
    producer.close()
    consumer.close()


@pytest.fixture
def no_export_left() -> Iterator[None]:
    producer_side.sweep()
    before = producer_side.outstanding()
    yield
    gc.collect()
    producer_side.sweep()
    assert producer_side.outstanding() == before, "an export was never given back"


def free_bytes() -> int:
    gc.collect()
    ctx = default_context()
    ctx.synchronize()
    return ctx.mem_info()[0]


def pending_copy(spin: Any, producer: Stream, x: np.ndarray) -> DeviceBuffer:
    """A NaN-poisoned buffer whose copy of ``x`` is queued behind DELAY_NS of spinning on ``producer``."""
    host = PinnedBuffer.from_array(x)  # pinned: the copy is truly asynchronous (the stream keeps it alive)
    buf = DeviceBuffer.from_array(np.full(x.shape, NAN32))
    spin.launch(1, 1, DELAY_NS, stream=producer)
    buf.copy_from(host, stream=producer)
    return buf


class Foreign:
    """A producer that has only the CUDA Array Interface (numba's kind), over rawcuda memory."""

    def __init__(self, buf: DeviceBuffer, stream: int | None, read_only: bool = False) -> None:
        self.__cuda_array_interface__ = {
            "shape": buf.shape,
            "typestr": buf.dtype.str,
            "data": (buf.ptr, read_only),
            "strides": None,
            "version": 3,
            "stream": stream,
        }


# --- rawcuda -> torch, CuPy, numpy ------------------------------------------------------------------------------------
def test_torch_reads_and_writes_a_buffer_and_its_views_in_place(torch: Any, no_export_left: None, rng: Any) -> None:
    x = rng.standard_normal((64, 1000), dtype=np.float32)
    buf = DeviceBuffer.from_array(x)
    assert buf.__dlpack_device__() == (DLDeviceType.CUDA, 0)
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.ptr and t.is_cuda and tuple(t.shape) == x.shape and t.dtype == torch.float32
    np.testing.assert_array_equal(t.cpu().numpy(), x)
    t.mul_(2.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buf.to_array(), x * 2)
    view = buf[5:9]
    tv = torch.from_dlpack(view)
    assert tv.data_ptr() == view.ptr == buf.ptr + 5 * 1000 * 4 and tuple(tv.shape) == (4, 1000)
    np.testing.assert_array_equal(tv.cpu().numpy(), x[5:9] * 2)
    del t, tv


@pytest.mark.parametrize("on", ["default stream", "side stream"])
def test_torch_waits_for_a_rawcuda_copy_still_pending(
    torch: Any, spin: Any, streams: tuple[Stream, Stream], no_export_left: None, rng: Any, on: str
) -> None:
    # torch passes its current stream (1 for the default one) to __dlpack__; rawcuda makes that stream wait for
    # the copy queued behind the spin. Without it torch reads the NaN poison.
    x = rng.standard_normal(N, dtype=np.float32)
    side = torch.cuda.Stream() if on == "side stream" else torch.cuda.default_stream()
    buf = pending_copy(spin, streams[0], x)
    with torch.cuda.stream(side):
        t = torch.from_dlpack(buf)
        seen = t.cpu().numpy()
    np.testing.assert_array_equal(seen, x)
    del t


@pytest.mark.parametrize("on", ["null stream", "side stream"])
def test_cupy_reads_a_buffer_in_place_after_a_pending_copy(
    cupy: Any, spin: Any, streams: tuple[Stream, Stream], no_export_left: None, rng: Any, on: str
) -> None:
    x = rng.standard_normal(N, dtype=np.float32)
    stream = cupy.cuda.Stream(non_blocking=True) if on == "side stream" else cupy.cuda.Stream.null
    buf = pending_copy(spin, streams[0], x)
    with stream:
        c = cupy.from_dlpack(buf)
        assert c.data.ptr == buf.ptr and c.shape == (N,)
        seen = c.get(stream=stream)  # on the consumer's stream, the one rawcuda made wait
        stream.synchronize()
    np.testing.assert_array_equal(seen, x)
    del c


def test_stream_minus_one_waits_for_nothing(
    spin: Any, streams: tuple[Stream, Stream], no_export_left: None, rng: Any
) -> None:
    # stream=-1: the consumer has ordered things itself -- no host wait, no stream made to wait. The producer
    # stream must still be busy with the spin after each export (a query, not a time). The collector is off:
    # a collection freeing some unrelated memory (cuMemFree waits for the device) would blur what is measured.
    producer, _ = streams
    x = rng.standard_normal(N, dtype=np.float32)
    gc.disable()
    try:
        buf = pending_copy(spin, producer, x)
        busy_before = not producer.query()
        versioned = buf.__dlpack__(stream=-1, max_version=(1, 0))
        busy_after_versioned = not producer.query()
        legacy = buf[: N // 2].__dlpack__(stream=-1)  # a view, and the legacy struct
        busy_after_legacy = not producer.query()
    finally:
        gc.enable()
    producer.synchronize()
    del versioned, legacy
    assert busy_before, "the spin was over before the export was asked for: nothing below is measured"
    assert busy_after_versioned, "__dlpack__(stream=-1) waited for the pending copy (it must not synchronize)"
    assert busy_after_legacy, "__dlpack__(stream=-1) of a view (legacy struct) waited for the pending copy"
    np.testing.assert_array_equal(buf.to_array(), x)
    buf.close()


def test_numpy_reads_pinned_memory_in_place_after_a_pending_copy(
    spin: Any, streams: tuple[Stream, Stream], no_export_left: None, rng: Any
) -> None:
    # numpy is on the host (no stream): the export waits for the device-to-host copy recorded on the pinned buffer.
    producer, _ = streams
    x = rng.standard_normal(N, dtype=np.float32)
    pinned = PinnedBuffer.from_array(np.full(N, NAN32))
    assert pinned.__dlpack_device__() == (DLDeviceType.CUDA_HOST, 0)
    with DeviceBuffer.from_array(x) as buf:
        spin.launch(1, 1, DELAY_NS, stream=producer)
        buf.copy_to(pinned, stream=producer)
        arr = np.from_dlpack(pinned)
        assert arr.ctypes.data == pinned.ptr
        np.testing.assert_array_equal(arr, x)
    arr[:3] = 7.0
    assert (pinned.array[:3] == 7.0).all()
    pinned.close()  # the export holds the memory, as a numpy view would
    np.testing.assert_array_equal(arr[3:], x[3:])
    del arr


def test_numpy_and_cupy_read_managed_memory_in_place(no_export_left: None, rng: Any) -> None:
    x = rng.standard_normal(N, dtype=np.float32)
    managed = ManagedBuffer.from_array(x)
    assert managed.__dlpack_device__() == (DLDeviceType.CUDA_MANAGED, 0)
    arr = np.from_dlpack(managed)
    assert arr.ctypes.data == managed.ptr
    np.testing.assert_array_equal(arr, x)
    view = managed[10:20]
    assert view.__dlpack_device__() == (DLDeviceType.CUDA_MANAGED, 0), "a view of managed memory is managed"
    assert np.from_dlpack(view).ctypes.data == view.ptr
    del arr
    try:
        cupy = pytest.importorskip("cupy")
        c = cupy.from_dlpack(managed)
    except (TypeError, RuntimeError) as exc:  # a CuPy from before kDLCUDAManaged
        pytest.skip(f"this CuPy does not read managed memory through DLPack: {exc}")
    assert c.data.ptr == managed.ptr
    np.testing.assert_array_equal(cupy.asnumpy(c), x)
    del c


# --- torch, CuPy, CAI -> rawcuda --------------------------------------------------------------------------------------
def test_a_rawcuda_kernel_writes_into_an_adopted_torch_tensor(torch: Any, no_export_left: None, rng: Any) -> None:
    x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    ty = torch.from_numpy(y).cuda()
    fb = rawcuda.from_dlpack(ty)
    assert isinstance(fb, ForeignBuffer) and fb.ptr == ty.data_ptr() and fb.owner is ty
    assert (fb.shape, fb.dtype) == ((N,), np.dtype(np.float32))
    with DeviceBuffer.from_array(x) as dx:
        ops.saxpy(fb, 3.0, dx)  # the legacy stream, which torch's default stream is: ordered both ways
        expected = (3.0 * x.astype(np.float64) + y).astype(np.float32)
        np.testing.assert_allclose(ty.cpu().numpy(), expected, rtol=1e-6, atol=1e-5)  # fmaf: one rounding
    fb.close()
    assert fb.closed and fb.owner is None
    np.testing.assert_allclose(ty.cpu().numpy(), expected, rtol=1e-6, atol=1e-5)  # torch's tensor is untouched


def test_adopt_orders_rawcuda_after_a_torch_stream_still_writing(
    torch: Any, streams: tuple[Stream, Stream], vector_add: Any, no_export_left: None, rng: Any
) -> None:
    _, consumer = streams
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    ta = torch.from_numpy(a).cuda()
    db, dc = DeviceBuffer.from_array(b), DeviceBuffer.from_array(np.full(N, NAN32))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(TORCH_SLEEP_CYCLES)
        produced = ta * 2.0  # written after the sleep, on torch's side stream
        fb = rawcuda.adopt(produced, stream=consumer)  # torch makes `consumer` wait for its current stream
    assert fb.ptr == produced.data_ptr()
    vector_add.launch(grid_for(N), BLOCK, dc, fb, db, N, stream=consumer)
    np.testing.assert_array_equal(dc.to_array(stream=consumer), a * 2.0 + b)
    fb.close()


def test_from_dlpack_orders_rawcuda_after_a_cupy_stream_still_writing(
    cupy: Any, cupy_delay: Any, streams: tuple[Stream, Stream], vector_add: Any, no_export_left: None, rng: Any
) -> None:
    _, consumer = streams
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    ca = cupy.asarray(a)
    db, dc = DeviceBuffer.from_array(b), DeviceBuffer.from_array(np.full(N, NAN32))
    cupy.cuda.Device().synchronize()
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        cupy_delay((1,), (1,), (np.uint64(DELAY_NS),))
        produced = ca * 2.0
        fb = rawcuda.from_dlpack(produced, stream=consumer)
    assert fb.ptr == produced.data.ptr
    vector_add.launch(grid_for(N), BLOCK, dc, fb, db, N, stream=consumer)
    np.testing.assert_array_equal(dc.to_array(stream=consumer), a * 2.0 + b)
    again = cupy.from_dlpack(fb)  # and out again: an adopted buffer exports like any other
    assert again.data.ptr == produced.data.ptr
    del again
    fb.close()


def test_adopt_takes_the_cuda_array_interface_and_waits_for_its_stream(
    spin: Any, vector_add: Any, streams: tuple[Stream, Stream], no_export_left: None, rng: Any
) -> None:
    producer, consumer = streams
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    da = pending_copy(spin, producer, a)
    db, dc = DeviceBuffer.from_array(b), DeviceBuffer.from_array(np.full(N, NAN32))
    foreign = Foreign(da, producer.handle)
    fb = rawcuda.adopt(foreign, stream=consumer)
    assert isinstance(fb, ForeignBuffer) and fb.ptr == da.ptr and fb.owner is foreign
    vector_add.launch(grid_for(N), BLOCK, dc, fb, db, N, stream=consumer)
    np.testing.assert_array_equal(dc.to_array(stream=consumer), a + b)
    fb.close()
    assert fb.owner is None and not da.closed  # closing the adopted buffer frees nothing
    np.testing.assert_array_equal(da.to_array(), a)
    with pytest.raises(BufferError, match="read-only"):
        rawcuda.adopt(Foreign(da, None, read_only=True))
    rawcuda.adopt(Foreign(da, None, read_only=True), read_only=True).close()


def test_adopt_takes_a_numba_array_on_its_stream(
    streams: tuple[Stream, Stream], no_export_left: None, rng: Any
) -> None:
    # numba's device arrays are a real producer of the interface (version 3, naming their stream).
    numba_cuda = pytest.importorskip("numba.cuda")
    _, consumer = streams
    x = rng.standard_normal(N, dtype=np.float32)
    try:
        numba_stream = numba_cuda.stream()
        array = numba_cuda.to_device(x, stream=numba_stream)
    except Exception as exc:  # numba's own start-up, not rawcuda's: a numba that cannot run here
        pytest.skip(f"numba cannot use the GPU here: {type(exc).__name__}: {exc}")
    fb = rawcuda.adopt(array, stream=consumer)
    assert fb.ptr == array.__cuda_array_interface__["data"][0] and fb.owner is array
    np.testing.assert_array_equal(fb.to_array(stream=consumer), x)
    fb.close()


def test_a_growable_buffer_is_adopted_through_its_interface(no_export_left: None, rng: Any) -> None:
    # Its memory is mapped with the VMM API (no context owns it) and its close() unmaps it: DLPack export is
    # refused, so adopt falls back to the CUDA Array Interface.
    x = rng.standard_normal(N, dtype=np.float32)
    with GrowableBuffer(1 << 30) as g:
        g.extend(x)
        with pytest.raises(BufferError, match="GrowableBuffer"):
            g.buffer.__dlpack__()
        with rawcuda.adopt(g.buffer) as fb:
            assert fb.ptr == g.ptr
            np.testing.assert_array_equal(fb.to_array(), x)


# --- lifetimes: who keeps what alive -------------------------------------------------------------------------------
def test_an_export_keeps_the_buffer_until_torch_lets_go(torch: Any, no_export_left: None, rng: Any) -> None:
    x = rng.standard_normal(BIG, dtype=np.float32)
    before = free_bytes()
    gc.disable()  # reference counting alone must do it: no cycle may hold the buffer
    try:
        buf = DeviceBuffer.from_array(x)
        alive = weakref.ref(buf)
        t = torch.from_dlpack(buf)
        del buf
        assert alive() is not None, "the export must hold the buffer"
        np.testing.assert_array_equal(t.cpu().numpy(), x)
        del t  # torch calls the deleter: the buffer goes with it
        assert alive() is None
    finally:
        gc.enable()
    assert free_bytes() >= before - DEVICE_TOLERANCE


def test_close_while_torch_holds_an_export_frees_after_torch_lets_go(
    torch: Any, no_export_left: None, rng: Any
) -> None:
    x = rng.standard_normal(BIG, dtype=np.float32)
    buf = DeviceBuffer.from_array(x)
    t = torch.from_dlpack(buf)
    buf.close()
    assert buf.closed
    with pytest.raises(ClosedError):
        buf.to_array()
    lent = free_bytes()
    np.testing.assert_array_equal(t.cpu().numpy(), x)  # the memory is still there: lent, not freed
    del t
    assert free_bytes() >= lent + BIG_BYTES - DEVICE_TOLERANCE


def test_a_context_closed_under_an_export_goes_when_torch_lets_go(torch: Any, no_export_left: None, rng: Any) -> None:
    x = rng.standard_normal(BIG, dtype=np.float32)
    ctx = Context.primary(0)  # one more retain of the primary context torch uses
    buf = DeviceBuffer.from_array(x, context=ctx)
    t = torch.from_dlpack(buf)
    ctx.close()  # closes buf first; both the memory and the context wait for torch
    assert buf.closed and ctx.closed
    lent = free_bytes()
    np.testing.assert_array_equal(t.cpu().numpy(), x)
    del t
    assert free_bytes() >= lent + BIG_BYTES - DEVICE_TOLERANCE


def test_an_unconsumed_capsule_is_given_back_when_its_buffer_closes(no_export_left: None) -> None:
    before = free_bytes()
    gc.disable()
    try:
        buf = DeviceBuffer.empty(BIG)
        capsule = buf.__dlpack__(stream=-1)
        del capsule  # dropped unconsumed: no destructor runs (see rawcuda.protocols.dlpackabi) ...
        buf.close()  # ... close() sweeps it, and frees the memory now
    finally:
        gc.enable()
    assert free_bytes() >= before - DEVICE_TOLERANCE


def test_the_deleter_may_run_on_another_thread(torch: Any, no_export_left: None) -> None:
    buf = DeviceBuffer.zeros(N)
    alive = weakref.ref(buf)
    holder = [torch.from_dlpack(buf)]
    del buf
    worker = threading.Thread(target=holder.clear)  # torch drops the tensor there: the deleter runs there
    worker.start()
    worker.join()
    assert alive() is None


def test_an_adopted_torch_tensor_is_given_back_on_close_or_collection(torch: Any) -> None:
    for close in (True, False):
        t = torch.empty(BIG, device="cuda")
        allocated = torch.cuda.memory_allocated()
        fb = rawcuda.from_dlpack(t)
        del t
        assert torch.cuda.memory_allocated() == allocated, "the adopted buffer holds torch's memory"
        if close:
            fb.close()
        else:
            del fb  # the garbage-collection fallback calls the deleter too
        assert torch.cuda.memory_allocated() == allocated - BIG_BYTES


def test_no_leak_over_many_exports_and_adoptions(torch: Any, no_export_left: None) -> None:
    before = free_bytes()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            buf = DeviceBuffer.empty(BIG)
            t = torch.from_dlpack(buf)
            fb = rawcuda.from_dlpack(buf)
            again = rawcuda.from_dlpack(t)  # rawcuda -> torch -> rawcuda: the same memory, a chain of holds
            assert again.ptr == fb.ptr == buf.ptr
            buf.close()
            del t
            again.close()
            fb.close()
    finally:
        gc.enable()
    assert free_bytes() >= before - DEVICE_TOLERANCE


def test_empty_buffers_of_every_kind_export_an_empty_tensor(no_export_left: None) -> None:
    # ManagedBuffer(0) allocates nothing and so has no host view: its export once met AttributeError there.
    for make in (DeviceBuffer, PinnedBuffer, ManagedBuffer):
        for shape in (0, (0, 5)):
            buf = make(shape, np.float32)
            capsule = buf.__dlpack__(stream=-1, max_version=(1, 0))
            del capsule  # unconsumed: the sweep gives it back
            if make is not DeviceBuffer:  # memory the host reads: numpy takes it
                seen = np.from_dlpack(buf)
                assert seen.shape == buf.shape and seen.dtype == np.float32
                del seen
            if make is not PinnedBuffer:  # memory a kernel reads: rawcuda adopts it
                adopted = rawcuda.from_dlpack(buf)
                assert adopted.shape == buf.shape and adopted.dtype == np.float32 and adopted.ptr == 0
                assert adopted.to_array().shape == buf.shape
                adopted.close()
            buf.close()


# --- refusals, each with its fix -------------------------------------------------------------------------------------
def test_what_rawcuda_cannot_adopt_is_refused(torch: Any, no_export_left: None) -> None:
    square = torch.zeros((256, 256), device="cuda")
    with pytest.raises(BufferError, match=r"not C-contiguous .*x\.contiguous\(\)"):
        rawcuda.from_dlpack(square.t())
    with pytest.raises(BufferError, match="bfloat16"):
        rawcuda.adopt(torch.zeros(8, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(BufferError, match="host memory"):
        rawcuda.from_dlpack(torch.zeros(3))
    with pytest.raises(TypeError, match=r"rawcuda\.adopt\(x\)"):
        DeviceBuffer.from_array(square)
    other = Context.create(0)
    try:
        with pytest.raises(ValueError, match="belongs to CUDA context"):
            rawcuda.from_dlpack(square, context=other)
    finally:
        cu.cuCtxSetCurrent(default_context().raw_handle)  # torch works in whatever context is current
        other.close()
    np.testing.assert_array_equal(square.cpu().numpy(), 0.0)  # torch's tensor survived each refused export


def test_an_array_running_past_its_allocation_is_refused(torch: Any, no_export_left: None, rng: Any) -> None:
    # Before: only the first byte's context was asked; a shape 4096 times the allocation was adopted, and
    # to_array() read (or a kernel wrote) whatever lay behind it.
    x = rng.standard_normal(N, dtype=np.float32)
    buf = DeviceBuffer.from_array(x)

    def claim(ptr: int, shape: tuple[int, ...]) -> Foreign:
        fake = Foreign(buf, None)
        fake.__cuda_array_interface__.update(data=(ptr, False), shape=shape)
        return fake

    end = buf.ptr + buf.nbytes
    for what, ptr, shape in [
        ("16 GiB over 4 MiB", buf.ptr, (1 << 32,)),
        ("one element past the end", buf.ptr, (N + 1,)),
        ("a slice crossing the end", end - 64, (1024,)),
        ("a byte size past 2^64", buf.ptr, (1 << 40, 1 << 40)),
    ]:
        with pytest.raises(BufferError, match="runs past its memory"):
            rawcuda.adopt(claim(ptr, shape))
        print(what, "refused")
    with rawcuda.adopt(claim(end - 64, (16,))) as tail:  # the last 16 elements: inside, and taken
        np.testing.assert_array_equal(tail.to_array(), x[-16:])
    block = torch.empty(1 << 20, device="cuda")  # a slice of torch's caching block ends inside that block
    with rawcuda.from_dlpack(block[1000:2000]) as middle:
        assert middle.ptr == block[1000:].data_ptr() and middle.size == 1000
    buf.close()


def test_adopt_reads_a_producers_interface_once() -> None:
    # Before: the pointer came from one read of __cuda_array_interface__ and the shape from a second; a producer
    # that builds the dict at each read (as properties do) could hand over a pointer and a shape that disagree.
    buf = DeviceBuffer.from_array(np.arange(16, dtype=np.float32))

    class Changing:
        reads = 0

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            Changing.reads += 1
            shape = (16,) if Changing.reads == 1 else (8,)  # (a later read describes another array)
            return {"shape": shape, "typestr": "<f4", "data": (buf.ptr, False), "version": 3, "stream": None}

    with rawcuda.adopt(Changing()) as adopted:
        assert Changing.reads == 1 and adopted.shape == (16,)
        np.testing.assert_array_equal(adopted.to_array(), np.arange(16, dtype=np.float32))
    buf.close()


def test_what_rawcuda_cannot_export_is_refused(no_export_left: None) -> None:
    buf = DeviceBuffer.zeros(16)
    with pytest.raises(BufferError, match="never copies"):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="another device"):
        buf.__dlpack__(dl_device=(DLDeviceType.CPU, 0))
    with pytest.raises(ValueError, match="stream=0 is forbidden"):
        buf.__dlpack__(stream=0)
    with pytest.raises(Exception, match=r"(?i)device") as info:
        np.from_dlpack(buf)  # numpy refuses a CUDA tensor after __dlpack__: its own message must survive
    assert not isinstance(info.value, SystemError), info.value
    buf.close()
    with pytest.raises(ClosedError):
        buf.__dlpack__()
