"""Copies between overlapping ranges of one buffer give numpy's answer: what the source held before.

``cuMemcpyDtoD`` on overlapping ranges is undefined, and on the H200 shifting 16 Mi floats by one element
left up to 960,720 of them stale. rawcuda stages such a copy through a temporary (rawcuda/core/overlap.py).
Each case starts from fresh random data and compares every element with numpy's overlapping assignment,
with and without a stream, in both directions, for shifts below and above a page of elements, and inside a
captured graph.
"""

from __future__ import annotations

import numpy as np
import pytest

from rawcuda import DeviceBuffer, Stream
from rawcuda.ffi.constants import StreamFlag
from rawcuda.graphs.graph import GraphExec
from rawcuda.graphs.streamcapture import capture

pytestmark = pytest.mark.gpu

N = 16 << 20  # 16 Mi floats: large enough that the driver splits the copy, which is where overlap shows
SHIFTS = [1, 4097, N // 2 - 1]


def expected_after(a: np.ndarray, dst: slice, src: slice) -> np.ndarray:
    out = a.copy()
    out[dst] = a[src]  # numpy copies overlapping ranges as if through a temporary
    return out


@pytest.mark.parametrize("on_stream", [False, True], ids=["no stream", "stream"])
@pytest.mark.parametrize("direction", ["down", "up"])
@pytest.mark.parametrize("shift", SHIFTS)
def test_an_overlapping_copy_gives_numpys_answer(
    rng: np.random.Generator, shift: int, direction: str, on_stream: bool
) -> None:
    a = rng.standard_normal(N, dtype=np.float32)
    low, high = slice(0, N - shift), slice(shift, N)
    dst, src = (low, high) if direction == "down" else (high, low)
    buf = DeviceBuffer.from_array(a)
    stream = Stream(flags=StreamFlag.NON_BLOCKING) if on_stream else None
    buf[dst].copy_from(buf[src], stream=stream)
    got = buf.to_array(stream=stream)
    np.testing.assert_array_equal(got, expected_after(a, dst, src))
    buf.close()
    if stream is not None:
        stream.close()


def test_copy_to_an_overlapping_view_and_onto_itself(rng: np.random.Generator) -> None:
    a = rng.standard_normal(N, dtype=np.float32)
    buf = DeviceBuffer.from_array(a)
    buf[1:].copy_to(buf[: N - 1])
    np.testing.assert_array_equal(buf.to_array(), expected_after(a, slice(0, N - 1), slice(1, N)))
    before = buf.to_array()
    buf.copy_from(buf)  # the very same bytes: nothing changes
    np.testing.assert_array_equal(buf.to_array(), before)
    buf.close()


def test_an_overlapping_copy_captured_into_a_graph_replays_right(rng: np.random.Generator) -> None:
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    buf = DeviceBuffer.empty(N, np.float32)
    with capture(stream) as graph:
        buf[: N - 1].copy_from(buf[1:], stream=stream)
    exec_ = GraphExec(graph)
    second = GraphExec(graph)  # no memory nodes in it: a graph may have more than one executable
    second.close()
    for _ in range(2):  # each replay shifts what the buffer holds now
        a = rng.standard_normal(N, dtype=np.float32)
        buf.copy_from(a, stream=stream)
        exec_.launch(stream)
        np.testing.assert_array_equal(buf.to_array(stream=stream), expected_after(a, slice(0, N - 1), slice(1, N)))
    for obj in (exec_, graph, buf, stream):
        obj.close()


def test_a_managed_buffer_copied_to_and_from_its_own_shifted_host_view(rng: np.random.Generator) -> None:
    # The host view of managed memory is the same memory: such a copy overlaps as well.
    from rawcuda.extras.managed import ManagedBuffer

    m = ManagedBuffer(N, np.float32)
    for direction in ("to", "from"):
        a = rng.standard_normal(N, dtype=np.float32)
        m.array[...] = a
        if direction == "to":
            m[: N - 1].copy_to(m.array[1:])
            expected = expected_after(a, slice(1, N), slice(0, N - 1))
        else:
            m[1:].copy_from(m.array[: N - 1])
            expected = expected_after(a, slice(1, N), slice(0, N - 1))
        np.testing.assert_array_equal(m.to_array(), expected)
    m.close()
