"""Captured graphs hold and check what they use, as explicit graphs do; a fork inside a capture is seen.

A replay reads and writes the addresses its launches and copies were given. So a buffer closed while a
captured graph still uses it must make the replay refuse (``ClosedError``), not write freed memory, and a
buffer the program dropped must stay alive as long as the graph. A stream that joins the capture by
waiting on an event records into the same graph, and leaves it with the capture, good or failed.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Event, Module, Stream
from rawcuda.checked.errors import ClosedError, StreamCaptureError
from rawcuda.ffi.constants import StreamCaptureStatus, StreamFlag
from rawcuda.graphs.graph import GraphExec
from rawcuda.graphs.streamcapture import capture, capture_status
from tests.helpers import grid_for

pytestmark = pytest.mark.gpu

N = 1 << 20
BLOCK = 256
NAN = np.float32(np.nan)


def add(fn: rawcuda.Function, out: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, stream: Stream) -> None:
    fn.launch(grid_for(N, BLOCK), BLOCK, out, a, b, N, stream=stream)


def test_a_replay_refuses_once_a_captured_launch_buffer_was_closed(
    rng: np.random.Generator, vector_add: rawcuda.Function
) -> None:
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N, np.float32)
    with capture(stream) as graph:
        add(vector_add, dc, da, db, stream)
    exec_ = GraphExec(graph)
    dc.fill(NAN)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + b)
    dc.close()
    bystander = DeviceBuffer.empty(N, np.float32)  # may well land at the freed address
    sentinel = rng.standard_normal(N, dtype=np.float32)
    bystander.copy_from(sentinel)
    with pytest.raises(ClosedError, match=r"was closed, but .* still uses it"):
        exec_.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(bystander.to_array(), sentinel)  # nothing wrote into it
    for obj in (exec_, graph, da, db, bystander, stream):
        obj.close()


def test_a_replay_refuses_once_the_captured_kernel_module_was_unloaded(rng: np.random.Generator) -> None:
    module = Module(rawcuda.kernels.ptx_path("vector_add"))
    fn = module.function("vector_add")
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    a = rng.standard_normal(N, dtype=np.float32)
    da, dc = DeviceBuffer.from_array(a), DeviceBuffer.empty(N, np.float32)
    add(fn, dc, da, da, stream)  # loaded before the capture (lazy loading)
    stream.synchronize()
    with capture(stream) as graph:
        add(fn, dc, da, da, stream)
    exec_ = GraphExec(graph)
    module.close()
    with pytest.raises(ClosedError, match="still uses it"):
        exec_.launch(stream)
    for obj in (exec_, graph, da, dc, stream):
        obj.close()


@pytest.mark.parametrize("closed", ["source", "destination"])
def test_a_replay_refuses_once_either_end_of_a_captured_copy_was_closed(rng: np.random.Generator, closed: str) -> None:
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    a = rng.standard_normal(N, dtype=np.float32)
    src, dst = DeviceBuffer.from_array(a), DeviceBuffer.empty(N, np.float32)
    with capture(stream) as graph:
        dst.copy_from(src, stream=stream)
    exec_ = GraphExec(graph)
    dst.fill(NAN)
    exec_.launch(stream)
    np.testing.assert_array_equal(dst.to_array(stream=stream), a)
    (src if closed == "source" else dst).close()
    with pytest.raises(ClosedError, match="still uses it"):
        exec_.launch(stream)
    for obj in (exec_, graph, src, dst, stream):
        obj.close()


def test_a_captured_graph_keeps_the_buffers_its_launches_use_alive(
    rng: np.random.Generator, vector_add: rawcuda.Function
) -> None:
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    dc = DeviceBuffer.empty(N, np.float32)

    def record() -> GraphExec:
        da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)  # dropped when this returns
        with capture(stream) as graph:
            add(vector_add, dc, da, db, stream)
        return GraphExec(graph)

    exec_ = record()
    gc.collect()
    dc.fill(NAN)
    exec_.launch(stream)
    np.testing.assert_array_equal(dc.to_array(stream=stream), a + b)
    for obj in (exec_, dc, stream):
        obj.close()


def test_a_fork_inside_a_capture_records_the_joined_stream_into_the_same_graph(
    rng: np.random.Generator, vector_add: rawcuda.Function
) -> None:
    main, side = Stream(flags=StreamFlag.NON_BLOCKING), Stream(flags=StreamFlag.NON_BLOCKING)
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc, dd, de = (DeviceBuffer.empty(N, np.float32) for _ in range(3))
    fork, join = Event(timing=False), Event(timing=False)
    with capture(main) as graph:
        fork.record(main)
        side.wait(fork)  # side joins the capture
        assert side.capturing is graph
        add(vector_add, dc, da, db, main)  # c = a + b   (main)
        add(vector_add, dd, da, da, side)  # d = a + a   (side, alongside)
        join.record(side)
        main.wait(join)
        add(vector_add, de, dc, dd, main)  # e = c + d
    assert side.capturing is None and capture_status(side) == StreamCaptureStatus.NONE
    recorded = [ref() for ref in dd.pending.streams]
    assert side not in recorded, "a captured launch on the joined stream was taken for work running now"
    exec_ = GraphExec(graph)
    for buf in (dc, dd, de):
        buf.fill(NAN)
    exec_.launch(main)
    np.testing.assert_array_equal(de.to_array(stream=main), (a + b) + (a + a))
    dd.close()
    with pytest.raises(ClosedError, match="still uses it"):  # held like the origin stream's launches
        exec_.launch(main)
    for obj in (exec_, graph, da, db, dc, de, fork, join, main, side):
        obj.close()


def test_a_failed_fork_join_capture_leaves_both_streams_usable(rng: np.random.Generator) -> None:
    main, side = Stream(flags=StreamFlag.NON_BLOCKING), Stream(flags=StreamFlag.NON_BLOCKING)
    host = rng.standard_normal(N, dtype=np.float32)
    buf = DeviceBuffer.empty(N, np.float32)
    fork = Event(timing=False)
    with pytest.raises(StreamCaptureError), capture(main):
        fork.record(main)
        side.wait(fork)
        buf.copy_from(host, stream=side)  # recorded on the joined stream
        buf.copy_from(host)  # no stream: synchronizes the context, which the capture refuses
    assert capture_status(main) == StreamCaptureStatus.NONE
    assert capture_status(side) == StreamCaptureStatus.NONE and side.capturing is None
    for stream in (side, main):
        fresh = rng.standard_normal(N, dtype=np.float32)
        buf.fill(NAN, stream=stream)
        buf.copy_from(fresh, stream=stream)
        np.testing.assert_array_equal(buf.to_array(stream=stream), fresh)
    for obj in (buf, fork, main, side):
        obj.close()


def test_set_kernel_args_on_a_captured_node_lets_go_of_the_replaced_buffers(
    rng: np.random.Generator, vector_add: rawcuda.Function
) -> None:
    # The captured launch's arguments belong to its node, as an explicit node's do: replaced, they are
    # neither held nor checked, so closing them must not stop the replays.
    stream = Stream(flags=StreamFlag.NON_BLOCKING)
    a, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    old_a, old_c = DeviceBuffer.from_array(a), DeviceBuffer.empty(N, np.float32)
    with capture(stream) as graph:
        add(vector_add, old_c, old_a, old_a, stream)
    exec_ = GraphExec(graph)
    new_a, new_b, new_c = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N, np.float32)
    (node,) = graph.kernel_nodes()
    exec_.set_kernel_args(node, new_c, new_a, new_b, N)
    old_a.close()
    old_c.close()
    new_c.fill(NAN)
    exec_.launch(stream)
    np.testing.assert_array_equal(new_c.to_array(stream=stream), a + b)
    new_b.close()
    with pytest.raises(ClosedError, match="still uses it"):  # the new arguments are held and checked
        exec_.launch(stream)
    for obj in (exec_, graph, new_a, new_c, stream):
        obj.close()


def test_an_event_recorded_in_a_capture_says_so_when_used_outside_it(stream: Stream) -> None:
    inside = Event(timing=False)
    other = Stream(flags=StreamFlag.NON_BLOCKING)
    with capture(stream) as graph:
        inside.record(stream)
    for use in (inside.query, inside.synchronize, lambda: other.wait(inside)):
        with pytest.raises(ValueError, match="last recorded inside a stream capture"):
            use()
    inside.record(other)  # recorded again outside: an ordinary event
    other.synchronize()
    assert inside.query()
    for obj in (graph, inside, other):
        obj.close()
