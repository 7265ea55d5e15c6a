"""Stream and Event on a real GPU: priorities checked against the device's range, and the rules of events."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Event, Module, PinnedBuffer, Stream
from rawcuda.core.context import default_context

pytestmark = pytest.mark.gpu


def test_stream_priority_is_validated_against_the_device_range() -> None:
    least, greatest = default_context().stream_priority_range
    with Stream(priority=greatest) as s:
        assert s.priority == greatest
    with pytest.raises(ValueError, match="outside this device's range"):
        Stream(priority=least + 1)


def test_event_rules() -> None:
    e = Event()
    with pytest.raises(ValueError, match="never recorded"):
        e.synchronize()
    quiet = Event(timing=False).record()
    with pytest.raises(ValueError, match="timing=False"):
        quiet.elapsed_ms(Event().record())
    start = Event().record()
    end = Event().record()
    assert end.query() is True or end.synchronize() is None
    assert start.elapsed_ms(end) >= 0
    for ev in (e, quiet, start, end):
        ev.close()


def test_a_collected_stream_waits_for_its_pending_copies_before_letting_go() -> None:
    # close() waited for pending async copies; garbage collection did not: the finalizer destroyed the
    # stream and released the host arrays at once, with the copy still queued -- a use-after-free of host
    # memory. Now the finalizer synchronizes first. The copy is held back by an event of another stream
    # (a kernel launch on s would do as well: launch caches key streams by id, and do not hold them).
    spin = Module(rawcuda.kernels.ptx_path("spin")).function("spin")
    spin.launch(1, 1, 0)
    n = 1 << 20
    with DeviceBuffer.from_array(np.arange(n, dtype=np.float32)) as device, Stream() as other:
        spin.launch(1, 1, 300_000_000, stream=other)  # 0.3 s of GPU time ...
        gate = Event(timing=False).record(other)
        s = Stream()
        s.wait(gate)  # ... that the copy on s waits for
        host = PinnedBuffer(n, np.float32)
        device.copy_to(host.array, stream=s)  # pending; the stream holds host's array until it has run
        done = Event(timing=False).record(s)
        assert not done.query()
        was_gc = gc.isenabled()
        gc.disable()
        try:
            del s  # no close(): reference count zero, so the finalizer runs now
            assert done.query(), "the stream was destroyed with its copy still pending"
        finally:
            if was_gc:
                gc.enable()
        assert (host.array == np.arange(n, dtype=np.float32)).all()
        host.close()


SPIN_TIMED_NS = 50_000_000  # 50 ms: far longer than launching the second kernel takes


def test_spin_timed_records_its_interval_and_two_streams_overlap_one_does_not() -> None:
    """kernels/spin.cu's spin_timed: [start, end] on the GPU's clock, at least the time asked for; kernels of
    two streams overlap, two kernels of one stream follow each other."""
    fn = Module(rawcuda.kernels.ptx_path("spin")).function("spin_timed")
    times = DeviceBuffer.empty(4, np.uint64)
    times.fill(np.uint64(0))
    with times.view(0, 2) as first, times.view(2, 2) as second, Stream() as s1, Stream() as s2:
        for one, other in ((s1, s2), (s1, s1)):
            fn.launch(1, 1, SPIN_TIMED_NS, first, stream=one)
            fn.launch(1, 1, SPIN_TIMED_NS, second, stream=other)
            rawcuda.default_context().synchronize()
            (a0, a1), (b0, b1) = times.to_array().reshape(2, 2).tolist()
            assert a1 - a0 >= SPIN_TIMED_NS and b1 - b0 >= SPIN_TIMED_NS
            overlap = min(a1, b1) - max(a0, b0)
            assert (overlap > 0) == (one is not other), (one, other, overlap)
    times.close()
