"""Stream capture without a driver (CPU only): rawcuda.graphs.streamcapture's checks before any driver call.

The legacy default stream and things that are not a Stream are refused; the stream is checked first; a
capture error gets the stream hint exactly once. On a GPU: tests/gpu/test_streamcapture.py.
"""

from __future__ import annotations

import pytest

from rawcuda.checked.errors import ClosedError, CudaError, StreamCaptureError
from rawcuda.core.stream import Stream
from rawcuda.ffi.constants import StreamCaptureMode
from rawcuda.ffi.results import Result
from rawcuda.graphs import streamcapture


@pytest.mark.parametrize("legacy", [None, 0, 1])
def test_capture_refuses_the_legacy_stream(legacy: object) -> None:
    with pytest.raises(ValueError, match="legacy default stream"):
        streamcapture.capture(legacy)  # type: ignore[arg-type]


def test_capture_refuses_other_things() -> None:
    with pytest.raises(TypeError, match=r"rawcuda\.Stream"):
        streamcapture.capture("stream")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        streamcapture.capture(_stand_in_stream(), mode=7)  # type: ignore[arg-type]


def _stand_in_stream(*, closed: bool = True) -> Stream:
    """A Stream object that never met the driver: enough for checks that come before any driver call."""
    stream = Stream.__new__(Stream)
    stream._closed = closed
    stream._handle = 0x1234
    return stream


def test_capture_checks_the_stream_first() -> None:
    stream = _stand_in_stream()
    cap = streamcapture.capture(stream)
    assert isinstance(cap, streamcapture.Capture) and cap.stream is stream
    assert cap.mode == StreamCaptureMode.THREAD_LOCAL
    with pytest.raises(ClosedError, match="closed"), cap:
        pass


def test_capture_errors_get_the_stream_hint_once() -> None:
    error = StreamCaptureError(Result.ERROR_STREAM_CAPTURE_UNSUPPORTED, call="cuCtxSynchronize")
    assert streamcapture.CAPTURE_HINT not in str(error)
    assert streamcapture._add_capture_hint(error) is error
    streamcapture._add_capture_hint(error)
    assert str(error).count(streamcapture.CAPTURE_HINT) == 1 and "buf.copy_from(a)" in str(error)
    other = CudaError(Result.ERROR_INVALID_VALUE, call="cuX")
    assert streamcapture._add_capture_hint(other) is other and streamcapture.CAPTURE_HINT not in str(other)
