"""Kernels rawcuda launches are pending work on the buffers they were passed: torch and CuPy wait for them.

Each test holds a stream with the spin kernel, queues a kernel behind it that writes a NaN-poisoned buffer, and
hands the buffer to torch or CuPy on a NON_BLOCKING stream of theirs (which nothing orders with rawcuda's streams,
nor with the legacy stream, implicitly). A consumer that was not made to wait reads the poison -- every element
wrong, checked element by element against numpy. Before the fix a launch recorded nothing on the buffer: the
export asked no stream to wait and the interface named no stream, so every test below failed there (each says how).

Each test also checks that the kernel was still pending when the consumer was handed the buffer (an event
queried then), or it would prove nothing; the garbage collector is off meanwhile, since a collection freeing
unrelated memory (cuMemFree may wait for the device) could end the spin early.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Event, Stream, ops
from rawcuda.ffi.constants import STREAM_LEGACY, StreamCaptureMode, StreamFlag
from rawcuda.protocols.dlpack import sweep
from tests.helpers import BLOCK, NAN32, grid_for

WARM_UP_KERNELS = True  # conftest's vector_add is launched once first: loading is nothing a capture can hold
N = 1 << 20
DELAY_NS = 500_000_000  # 0.5 s of spinning: far longer than the host takes to queue, export and read
STILL_PENDING = "the kernel had finished before the consumer was handed the buffer: nothing was tested"


# --- fixtures (spin and vector_add: tests/conftest.py; torch and cupy, warmed up: tests/gpu/conftest.py) ---------
@pytest.fixture
def producer() -> Iterator[Stream]:
    # NON_BLOCKING, as torch's and CuPy's side streams are: nothing orders it with the legacy stream implicitly.
    s = Stream(flags=StreamFlag.NON_BLOCKING)
    yield s
    s.close()


def inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, DeviceBuffer, DeviceBuffer, DeviceBuffer]:
    """Fresh random a and b on the device, and c poisoned with NaN -- all written synchronously (nothing pending)."""
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    return a, b, DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.from_array(np.full(N, NAN32))


def while_pending(spin: Any, stream: Stream | None, write: Callable[[], None], read: Callable[[], Any]) -> Any:
    """Spin on ``stream``, ``write()`` behind the spin, then ``read()`` while the write is still pending; returns
    what was read (after checking the write really was pending when ``read`` began)."""
    gc.disable()
    try:
        spin.launch(1, 1, DELAY_NS, stream=stream)
        write()
        written = Event(timing=False).record(stream)
        pending = not written.query()
        seen = read()
    finally:
        gc.enable()
    assert pending, STILL_PENDING
    written.synchronize()
    written.close()
    return seen


# --- DLPack: __dlpack__(stream=the consumer's) makes that stream wait for the launch ------------------------------
@pytest.mark.parametrize("how", ["launch", "bound", "view", "ops"])
def test_torch_reads_what_a_launch_on_a_rawcuda_stream_wrote(
    torch: Any, spin: Any, vector_add: Any, producer: Stream, rng: np.random.Generator, how: str
) -> None:
    # Before: c's record was empty (its copies were synchronous), so torch's stream was made to wait for nothing,
    # and t.cpu() copied c on it while the kernel still waited behind the spin: all N elements NaN.
    a, b, da, db, dc = inputs(rng)
    ops.vector_add(dc, da, db)  # ops loads its module on first use: done here, outside the window
    dc.fill(NAN32)
    grid = grid_for(N)
    writes = {
        "launch": lambda: vector_add.launch(grid, BLOCK, dc, da, db, N, stream=producer),
        "bound": vector_add.bind(grid, BLOCK, dc, da, db, N, stream=producer),
        "view": lambda: vector_add.launch(grid, BLOCK, dc[:], da, db, N, stream=producer),  # read through the base
        "ops": lambda: ops.vector_add(dc, da, db, stream=producer),
    }
    side = torch.cuda.Stream()  # a pool stream: created NON_BLOCKING by torch

    def read() -> np.ndarray:
        with torch.cuda.stream(side):  # torch.from_dlpack passes side's handle to __dlpack__
            return torch.from_dlpack(dc).cpu().numpy()

    seen = while_pending(spin, producer, writes[how], read)
    np.testing.assert_array_equal(seen, a + b)


def test_cupy_reads_what_a_launch_on_a_rawcuda_stream_wrote(
    cupy: Any, spin: Any, vector_add: Any, producer: Stream, rng: np.random.Generator
) -> None:
    # Before: as for torch -- CuPy's stream was made to wait for nothing, and .get() on it read the poison.
    a, b, da, db, dc = inputs(rng)
    side = cupy.cuda.Stream(non_blocking=True)

    def read() -> np.ndarray:
        with side:  # cupy.from_dlpack passes side's handle to __dlpack__
            seen = cupy.from_dlpack(dc).get(stream=side)  # on the consumer's stream, the one rawcuda made wait
            side.synchronize()
        return seen

    seen = while_pending(
        spin, producer, lambda: vector_add.launch(grid_for(N), BLOCK, dc, da, db, N, stream=producer), read
    )
    np.testing.assert_array_equal(seen, a + b)


def test_torch_reads_what_a_launch_on_the_legacy_stream_wrote(
    torch: Any, spin: Any, vector_add: Any, rng: np.random.Generator
) -> None:
    # stream=None is the legacy stream, asynchronous too. Before: not recorded, so the export made torch's
    # NON_BLOCKING stream wait for nothing (and a non-blocking stream does not wait for the legacy one by itself):
    # all N elements NaN. Now the export records an event on stream 0 and makes torch's stream wait for it.
    a, b, da, db, dc = inputs(rng)
    side = torch.cuda.Stream()

    def read() -> np.ndarray:
        with torch.cuda.stream(side):
            return torch.from_dlpack(dc).cpu().numpy()

    seen = while_pending(spin, None, lambda: vector_add.launch(grid_for(N), BLOCK, dc, da, db, N), read)
    np.testing.assert_array_equal(seen, a + b)


# --- the CUDA Array Interface: "stream" names the launch's stream, and CuPy synchronizes it ----------------------
@pytest.mark.parametrize("on", ["rawcuda stream", "legacy stream"])
def test_cupy_asarray_is_told_the_stream_of_a_launch(
    cupy: Any, spin: Any, vector_add: Any, producer: Stream, rng: np.random.Generator, on: str
) -> None:
    # Before: the interface said stream=None, so CuPy (which synchronizes the stream it is given) waited for
    # nothing, and .get() on a NON_BLOCKING CuPy stream read the poison; and the stream asserted below was None.
    a, b, da, db, dc = inputs(rng)
    stream = producer if on == "rawcuda stream" else None
    side = cupy.cuda.Stream(non_blocking=True)

    def read() -> np.ndarray:
        with side:
            seen = cupy.asarray(dc).get(stream=side)
            side.synchronize()
        return seen

    seen = while_pending(
        spin, stream, lambda: vector_add.launch(grid_for(N), BLOCK, dc, da, db, N, stream=stream), read
    )
    np.testing.assert_array_equal(seen, a + b)
    expected = producer.handle if stream is not None else STREAM_LEGACY  # 0 is forbidden: 1 names the legacy one
    assert dc.__cuda_array_interface__["stream"] == expected
    assert dc[N // 2 :].__cuda_array_interface__["stream"] == expected, "a view names the stream of its memory"


# --- capture: a captured launch runs at replay, so it is not pending now --------------------------------------------
def test_work_pending_on_a_capturing_stream_is_refused_not_exported_into_the_capture(
    vector_add: Any, producer: Stream, rng: np.random.Generator
) -> None:
    # Before: the export recorded an event on the capturing stream (captured itself, pulling the consumer's stream
    # into the graph) -- here a clear BufferError instead, and the capture goes on unharmed.
    a, b, da, db, dc = inputs(rng)
    consumer = Stream(flags=StreamFlag.NON_BLOCKING)
    vector_add.launch(grid_for(N), BLOCK, dc, da, db, N, stream=producer)  # pending on producer: recorded
    sweep()  # (dropped capsules of earlier tests ended now: nothing of theirs is released inside the capture)
    with rawcuda.capture(producer) as graph:
        with pytest.raises(BufferError, match="being captured into a graph"):
            dc.__cuda_array_interface__  # noqa: B018 (the property is what is tested)
        with pytest.raises(BufferError, match="after the capture ends"):
            dc.__dlpack__(stream=consumer.handle)
        vector_add.launch(grid_for(N), BLOCK, dc, dc, db, N, stream=producer)  # c = (a + b) + b, at replay
    assert dc.__cuda_array_interface__["stream"] == producer.handle, "the launch before the capture is still pending"
    producer.synchronize()
    np.testing.assert_array_equal(dc.to_array(), a + b, "the capture ran nothing yet")
    with graph.instantiate() as replay:
        replay.launch(producer)
        producer.synchronize()
    np.testing.assert_array_equal(dc.to_array(), (a + b) + b, "the capture survived the refused exports")
    graph.close()
    consumer.close()
    for buf in (da, db, dc):
        buf.close()


def test_a_stream_collected_during_a_capture_is_refused_until_its_release_waited(
    spin: Any, vector_add: Any, producer: Stream, rng: np.random.Generator
) -> None:
    # Before: the dead stream's weak entry was dropped as finished, but its release (which waits for its work)
    # was deferred to the capture's end: the interface said None and a consumer read all N elements unwritten.
    a, b, da, db, dc = inputs(rng)
    consumer = Stream(flags=StreamFlag.NON_BLOCKING)
    sweep()
    gc.disable()  # the stream dies at `del`, by reference counting, inside the capture
    try:
        doomed = Stream(flags=StreamFlag.NON_BLOCKING)
        spin.launch(1, 1, DELAY_NS, stream=doomed)
        vector_add.launch(grid_for(N), BLOCK, dc, da, db, N, stream=doomed)
        written = Event(timing=False).record(doomed)
        with rawcuda.capture(producer, StreamCaptureMode.RELAXED):
            gone = weakref.ref(doomed)
            del doomed
            gc.collect()  # (with the GC off, only this collects: the release waits for the capture's end)
            assert gone() is None, "the stream was collected inside the capture"
            pending = not written.query()
            with pytest.raises(BufferError, match="garbage-collected while a capture is open"):
                dc.__cuda_array_interface__  # noqa: B018 (the property is what is tested)
            with pytest.raises(BufferError, match="after the capture ends"):
                dc.__dlpack__(stream=consumer.handle)
            vector_add.launch(grid_for(N), BLOCK, db, db, db, N, stream=producer)  # (a capture needs a node)
    finally:
        gc.enable()
    assert pending, STILL_PENDING
    assert written.query(), "the capture's end ran the deferred release, which waited for the stream's work"
    assert dc.__cuda_array_interface__["stream"] is None, "nothing is pending once the release waited"
    np.testing.assert_array_equal(dc.to_array(stream=consumer), a + b)
    written.close()
    consumer.close()
    for buf in (da, db, dc):
        buf.close()


def test_a_captured_launch_leaves_no_pending_record(
    vector_add: Any, producer: Stream, rng: np.random.Generator
) -> None:
    # Before: the first assertion failed (an uncaptured launch recorded nothing, so the interface said None).
    a, b, da, db, dc = inputs(rng)
    vector_add.launch(grid_for(N), BLOCK, dc, da, db, N, stream=producer)
    assert dc.__cuda_array_interface__["stream"] == producer.handle, "an ordinary launch is pending work"
    np.testing.assert_array_equal(dc.to_array(), a + b)  # (a synchronous copy: nothing pending on dc after it)
    a2, b2, da2, db2, dc2 = inputs(rng)
    with rawcuda.capture(producer) as graph:
        vector_add.launch(grid_for(N), BLOCK, dc2, da2, db2, N, stream=producer)
        dc2.fill(NAN32, stream=producer)  # a captured copy (a memset) is not pending either
        vector_add.launch(grid_for(N), BLOCK, dc2, da2, db2, N, stream=producer)
    for buf in (dc2, da2, db2, dc2[1:]):
        assert buf.__cuda_array_interface__["stream"] is None, f"{buf!r}: a captured launch ran nothing yet"
    np.testing.assert_array_equal(dc2.to_array(), np.full(N, NAN32), "the capture ran nothing")
    with graph.instantiate() as replay:
        replay.launch(producer)
        producer.synchronize()  # a replay is not recorded on the buffers: its stream is waited for by hand
    np.testing.assert_array_equal(dc2.to_array(), a2 + b2)
    graph.close()
    for buf in (da, db, dc, da2, db2, dc2):
        buf.close()
