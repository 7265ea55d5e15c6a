"""Stream capture on a real GPU: what a capture records, what it forbids, and what rawcuda says then.

rawcuda.graphs.streamcapture: copies and memsets are recorded (and replayed with new host contents); the legacy
stream cannot capture; a forbidden call inside a capture raises StreamCaptureError saying what to do, and
leaves nothing half-captured; an exception in the body ends the capture; a graph is usable only after its
capture. Replaying captured graphs is in test_graph.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, PinnedBuffer, Stream, StreamCaptureError, ops
from rawcuda.checked.errors import ClosedError
from rawcuda.ffi.constants import StreamCaptureStatus
from rawcuda.graphs.streamcapture import capture, capture_status
from tests.helpers import grid_for

pytestmark = pytest.mark.gpu

WARM_UP_KERNELS = True  # conftest's vector_add is launched once before the tests capture it
NAN = np.float32(np.nan)
BLOCK = ops.BLOCK
N = 100_003  # not a multiple of any block size


# --- what capture records -----------------------------------------------------------------------------------
def test_async_copies_and_memsets_are_recorded(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    host_in = PinnedBuffer(N, np.float32)
    host_out = PinnedBuffer(N, np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    da, db, dc = DeviceBuffer.empty(N), DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    with capture(stream) as graph:
        dc.fill(NAN, stream=stream)
        da.copy_from(host_in, stream=stream)
        vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
        dc.copy_to(host_out, stream=stream)
    exec_ = graph.instantiate()
    for _ in range(2):  # the graph reads the pinned input at every replay: new contents, new result
        a = rng.standard_normal(N, dtype=np.float32)
        host_in.array[:] = a
        host_out.array[:] = NAN
        exec_.launch(stream)
        stream.synchronize()
        np.testing.assert_array_equal(host_out.array, a + b)
    exec_.close()
    graph.close()
    for buf in (da, db, dc, host_in, host_out):
        buf.close()


# --- what capture forbids -----------------------------------------------------------------------------------
def test_the_legacy_stream_cannot_capture() -> None:
    with pytest.raises(ValueError, match="legacy default stream"), capture(None):  # type: ignore[arg-type]
        pass


FORBIDDEN = {
    "synchronous copy": lambda buf, host, fn, stream: buf.copy_from(host),
    "to_array without stream": lambda buf, host, fn, stream: buf.to_array(),
    "launch on the legacy stream": lambda buf, host, fn, stream: fn.launch(grid_for(N, BLOCK), BLOCK, buf, buf, buf, N),
    "stream.synchronize": lambda buf, host, fn, stream: stream.synchronize(),
}


@pytest.mark.parametrize("action", sorted(FORBIDDEN))
def test_forbidden_calls_inside_capture_say_what_to_do(
    action: str, rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    host = rng.standard_normal(N, dtype=np.float32)
    buf = DeviceBuffer.from_array(host)
    with pytest.raises(StreamCaptureError) as caught, capture(stream) as graph:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, buf, buf, buf, N, stream=stream)
        FORBIDDEN[action](buf, host, vector_add, stream)
    assert "stream=" in str(caught.value) and "buf.copy_from(a)" in str(caught.value)
    assert graph.closed and capture_status(stream) == StreamCaptureStatus.NONE
    # Nothing is left half-captured: the stream works, and captures again.
    buf.copy_from(host, stream=stream)
    with capture(stream) as again:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, buf, buf, buf, N, stream=stream)
    again.instantiate().launch(stream)
    np.testing.assert_array_equal(buf.to_array(stream=stream), host + host)
    buf.close()


def test_an_exception_in_the_body_ends_the_capture_and_propagates(stream: Stream, vector_add: rawcuda.Function) -> None:
    buf = DeviceBuffer.zeros(N)
    mistake = KeyError("in the body")
    with pytest.raises(KeyError) as caught, capture(stream) as graph:
        vector_add.launch(grid_for(N, BLOCK), BLOCK, buf, buf, buf, N, stream=stream)
        raise mistake
    assert caught.value is mistake
    assert graph.closed and capture_status(stream) == StreamCaptureStatus.NONE
    with pytest.raises(ClosedError):
        graph.instantiate()
    stream.synchronize()  # usable again
    buf.close()


def test_a_graph_is_usable_only_after_its_capture(stream: Stream) -> None:
    with capture(stream) as graph:
        with pytest.raises(RuntimeError, match="still being captured"):
            graph.instantiate()
        with pytest.raises(RuntimeError, match="already capturing"), capture(stream):
            pass
    assert graph.kernel_nodes() == []
    graph.close()


def test_closing_the_stream_inside_its_capture_is_an_error_not_a_crash(vector_add: rawcuda.Function) -> None:
    # Before the restructure, Capture.__exit__ passed the destroyed stream's handle to cuStreamEndCapture,
    # and the real driver killed the interpreter (SIGSEGV on the H200). The end of the
    # capture now asks the stream for its handle first: ClosedError, and the partial graph is discarded.
    # Run in a child interpreter, so that a crash is a failed test rather than a dead test run.
    from tests.helpers import run_python

    script = (
        "import numpy as np, rawcuda\n"
        "from rawcuda import DeviceBuffer, Module, Stream, capture\n"
        "fn = Module(rawcuda.kernels.ptx_path('vector_add')).function('vector_add')\n"
        "buf = DeviceBuffer.zeros(256)\n"
        "fn.launch(1, 256, buf, buf, buf, 256)\n"
        "s = Stream()\n"
        "try:\n"
        "    with capture(s) as graph:\n"
        "        fn.launch(1, 256, buf, buf, buf, 256, stream=s)\n"
        "        s.close()\n"
        "except rawcuda.ClosedError as exc:\n"
        "    print('RAISED', type(exc).__name__, graph.closed)\n"
        "with Stream() as t:\n"  # capture still works afterwards
        "    with capture(t) as again:\n"
        "        fn.launch(1, 256, buf, buf, buf, 256, stream=t)\n"
        "    again.instantiate().launch(t)\n"
        "    t.synchronize()\n"
        "print('AFTER ok')\n"
    )
    proc = run_python(script)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "RAISED ClosedError True" in proc.stdout and "AFTER ok" in proc.stdout, proc.stdout + proc.stderr


# --- the garbage collector inside a capture -------------------------------------------------------------------
class _Cycle:
    """Holds rawcuda objects in a reference cycle: only the cyclic GC frees them."""

    def __init__(self, stream: Stream) -> None:
        self.me = self
        self.buffer = DeviceBuffer.empty(1 << 20)  # 4 MiB: its cuMemFree is what capture forbids
        self.stream = Stream()  # its cuStreamSynchronize + cuStreamDestroy too
        self.event = rawcuda.Event()


def test_garbage_collected_inside_a_capture_is_released_after_it(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    # Seen on the H200: test_streamcapture failed after other test files had left cycles behind -- the GC ran
    # inside a capture, a finalizer called cuMemFree on the capturing thread, and the driver invalidated the
    # capture. rawcuda.core.guards.capturedeferral.CaptureDeferral holds such releases until the capture ends.
    import gc
    import weakref

    from rawcuda.core.guards.capturedeferral import capture_deferral

    a, b = (rng.standard_normal(N, dtype=np.float32) for _ in range(2))
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    dc.fill(NAN)
    gc.disable()
    try:
        garbage = _Cycle(stream)
        gone = weakref.ref(garbage.buffer)
        del garbage
        with capture(stream) as graph:
            vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
            gc.collect()  # the cycle dies here, inside the capture
            assert gone() is None
            assert capture_deferral.pending() >= 3, "the buffer, stream and event wait for the capture's end"
        assert capture_deferral.pending() == 0, "the capture's end ran the deferred releases"
    finally:
        gc.enable()
    exec_ = graph.instantiate()
    exec_.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(dc.to_array(), a + b)
    exec_.close()
    graph.close()
    for buf in (da, db, dc):
        buf.close()


SIDE_BUSY_NS = 200_000_000  # 0.2 s: the side stream's fill is certainly pending while the capture is open


class _InterfaceOnly:
    """Another library's array reduced to its __cuda_array_interface__, naming the stream its data is written on."""

    def __init__(self, buf: DeviceBuffer, stream: Stream) -> None:
        self.__cuda_array_interface__ = {
            "shape": buf.shape,
            "typestr": buf.dtype.str,
            "data": (buf.ptr, False),
            "version": 3,
            "stream": stream.handle,
        }


@pytest.mark.parametrize("producer", ["interface only", "rawcuda buffer"])
def test_adopting_for_the_legacy_stream_inside_a_capture_is_refused_and_the_capture_survives(
    vector_add: rawcuda.Function, spin: rawcuda.Function, rng: np.random.Generator, producer: str
) -> None:
    # Before: adopt(x) for stream=None made the legacy stream wait for x's stream
    # (cuStreamWaitEvent(0, ...)) -- directly for an interface-only x, and for a rawcuda buffer after its
    # refused DLPack export fell back to the interface. The driver then invalidated the user's capture of a
    # blocking stream: its cuStreamEndCapture failed with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
    a_host, b_host = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    with (
        DeviceBuffer.from_array(a_host) as a,
        DeviceBuffer.from_array(b_host) as b,
        DeviceBuffer.from_array(np.full(N, np.nan, np.float32)) as c,
        DeviceBuffer.from_array(rng.standard_normal(N, dtype=np.float32)) as elsewhere,
        Stream() as capturing,  # blocking: the kind a legacy-stream operation invalidates
        Stream() as side,
    ):
        spin.launch(1, 1, SIDE_BUSY_NS, stream=side)  # the fill after it is still pending during the capture
        elsewhere.fill(np.float32(1.5), stream=side)  # pending on the side stream: the interface names it
        x = _InterfaceOnly(elsewhere, side) if producer == "interface only" else elsewhere
        with capture(capturing) as graph:
            vector_add.launch(grid_for(N, BLOCK), BLOCK, c, a, b, N, stream=capturing)
            with pytest.raises(BufferError, match="graph capture is open"):
                rawcuda.adopt(x)
        assert capture_status(capturing) is StreamCaptureStatus.NONE
        with graph, graph.instantiate() as replay:
            replay.launch(capturing)
            capturing.synchronize()
        np.testing.assert_array_equal(c.to_array(), a_host + b_host)
