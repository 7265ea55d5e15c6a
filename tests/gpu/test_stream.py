"""Stream and Event on a real GPU: priorities checked against the device's range, and the rules of events."""

from __future__ import annotations

import pytest

from rawcuda import Event, Stream
from rawcuda.context import default_context

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
