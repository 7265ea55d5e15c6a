"""CUDA graphs and awaitable streams: everything that can be checked without a driver (CPU only).

rawcuda.graph: the legacy-stream refusal, the node-type table against cuda.h, node ordering, argument
decoding and the capture hint. rawcuda.aio: the host-function registry -- the part that runs on a driver
thread and must never raise into C -- driven here through the very ctypes function pointer the driver
would call, from threads of our own; and ``wait()`` with a stand-in for the GPU side.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_python

from rawcuda import aio, graph, graphexec, kernelnode, streamcapture
from rawcuda.checked.errors import ClosedError, CudaError, StreamCaptureError
from rawcuda.ffi.constants import GraphExecUpdateResult, GraphNodeType, StreamCaptureMode
from rawcuda.ffi.results import Result
from rawcuda.kernelargs import ParamSpec
from rawcuda.stream import Stream
from rawcuda.tools import cheader, headercheck

HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"
TICK_S = 0.005
MAX_GAP_S = 0.05  # a loop that never blocks wakes a 5 ms ticker well within this, even on a busy CI machine
FIRE_AFTER_S = 0.3
CONCURRENT = 100


# --- rawcuda.graph ---------------------------------------------------------------------------------------
def test_modules_import_without_a_driver() -> None:
    code = ("import rawcuda.graph, rawcuda.aio\n"
            "from rawcuda.ffi import library\n"
            "print('loaded:', library.LIBCUDA.loaded())\n")
    proc = run_python(code, RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "loaded: None"


@pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER}")
def test_node_types_match_cuda_h() -> None:
    header = cheader.parse(str(HEADER))
    enums = {GraphNodeType: ("CUgraphNodeType", "CU_GRAPH_NODE_TYPE_")}
    assert headercheck.check_constants(header, enums=enums, defines={}) == []
    names = {"CU_GRAPH_NODE_TYPE_" + name for name in GraphNodeType.__members__}
    assert set(header.enum_of("CUgraphNodeType") or {}) == names  # complete: a new node type shows up here


def test_every_update_result_is_explained() -> None:
    assert set(graphexec.UPDATE_REASONS) == set(GraphExecUpdateResult)
    assert all(len(text) > 15 for text in graphexec.UPDATE_REASONS.values())


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


def test_topological_order() -> None:
    assert graph.topological_order([3, 2, 1], [(1, 2), (2, 3)]) == [1, 2, 3]  # a chain listed backwards
    assert graph.topological_order([5, 6, 7], []) == [5, 6, 7]  # no edges: the listing order
    diamond = graph.topological_order([40, 30, 20, 10], [(10, 20), (10, 30), (20, 40), (30, 40)])
    assert diamond == [10, 30, 20, 40]  # 30 and 20 are both ready after 10: listing order breaks the tie
    with pytest.raises(ValueError, match="cycle"):
        graph.topological_order([1, 2], [(1, 2), (2, 1)])


def test_decode_arg() -> None:
    address = 0x7F12_3456_7800
    assert kernelnode.decode_arg(address.to_bytes(8, "little"), ParamSpec("int", 8, "u64")) == address
    assert kernelnode.decode_arg((-5).to_bytes(4, "little", signed=True), ParamSpec("int", 4, "s32")) == -5
    assert kernelnode.decode_arg((2**32 - 5).to_bytes(4, "little"), ParamSpec("int", 4, "u32")) == 2**32 - 5
    assert kernelnode.decode_arg(struct.pack("<f", 1.5), ParamSpec("float", 4, "f32")) == 1.5
    assert kernelnode.decode_arg(struct.pack("<d", -0.25), ParamSpec("float", 8, "f64")) == -0.25
    assert kernelnode.decode_arg(b"\x01\x02\x03", ParamSpec("bytes", 3, "b8[3]")) == b"\x01\x02\x03"


def test_capture_errors_get_the_stream_hint_once() -> None:
    error = StreamCaptureError(Result.ERROR_STREAM_CAPTURE_UNSUPPORTED, call="cuCtxSynchronize")
    assert streamcapture.CAPTURE_HINT not in str(error)
    assert streamcapture._add_capture_hint(error) is error
    streamcapture._add_capture_hint(error)
    assert str(error).count(streamcapture.CAPTURE_HINT) == 1 and "buf.copy_from(a)" in str(error)
    other = CudaError(Result.ERROR_INVALID_VALUE, call="cuX")
    assert streamcapture._add_capture_hint(other) is other and streamcapture.CAPTURE_HINT not in str(other)


# --- rawcuda.aio: the host function and its registry -------------------------------------------------------
@pytest.fixture
def loop() -> asyncio.AbstractEventLoop:
    new = asyncio.new_event_loop()
    yield new
    if not new.is_closed():
        new.close()


def fire_from_a_thread(token: int, delay_s: float = 0.0) -> threading.Thread:
    """Call the host function through its C pointer from another thread, as the driver would."""
    def fire() -> None:
        time.sleep(delay_s)
        aio._HOST_FN(token)

    thread = threading.Thread(target=fire)
    thread.start()
    return thread


def test_host_function_completes_the_future_on_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    future = loop.create_future()
    token = aio._register(loop, future, object())
    assert aio.pending() == 1
    fire_from_a_thread(token).join()
    assert aio.pending() == 0 and not future.done()  # completed by the loop, not by the driver thread
    loop.run_until_complete(asyncio.wait_for(future, timeout=5))
    assert future.result() is None


def test_host_function_after_a_cancelled_wait_does_nothing(loop: asyncio.AbstractEventLoop,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    future = loop.create_future()
    token = aio._register(loop, future, object())
    future.cancel()
    aio._forget(token)
    before = aio.orphaned()
    fire_from_a_thread(token).join()
    loop.run_until_complete(asyncio.sleep(0))
    assert aio.orphaned() == before + 1 and aio.pending() == 0 and future.cancelled()
    assert capfd.readouterr().err == ""  # nothing was raised into C (ctypes would print it)


def test_host_function_racing_a_cancellation_does_not_complete_it(loop: asyncio.AbstractEventLoop) -> None:
    future = loop.create_future()
    token = aio._register(loop, future, object())
    fire_from_a_thread(token).join()  # the entry is taken and the completion is queued on the loop ...
    future.cancel()  # ... but the task gave up first
    loop.run_until_complete(asyncio.sleep(0))
    assert future.cancelled()  # no InvalidStateError: _resolve saw the cancellation


def test_host_function_never_raises_into_c(loop: asyncio.AbstractEventLoop,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    future = loop.create_future()
    token = aio._register(loop, future, object())
    loop.close()  # call_soon_threadsafe on a closed loop raises RuntimeError
    fire_from_a_thread(token).join()
    aio._HOST_FN(None)  # a NULL userData
    aio._HOST_FN(2**62)  # a token nobody registered
    assert capfd.readouterr().err == "" and aio.pending() == 0


class FakeTarget:
    """Stands in for a Stream: ``query()`` answers from a script instead of the GPU."""

    def __init__(self, answers: Callable[[], bool] = lambda: False) -> None:
        self.answers = answers
        self.queries = 0

    def query(self) -> bool:
        self.queries += 1
        return self.answers()


def fake_gpu(monkeypatch: pytest.MonkeyPatch, delay_s: float | None) -> list[int]:
    """Replace the driver side of wait(): register the wait, and fire its host function after delay_s
    (never, for None) from a thread. Returns the tokens handed out."""
    tokens: list[int] = []

    def enqueue(target: object, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> tuple[int, None]:
        token = aio._register(loop, future, target)
        tokens.append(token)
        if delay_s is not None:
            fire_from_a_thread(token, delay_s)
        return token, None

    monkeypatch.setattr(aio, "_enqueue", enqueue)
    return tokens


async def ticking_while(work: asyncio.Future[None] | asyncio.Task[None]) -> float:
    """The longest gap between ticks of a TICK_S ticker while ``work`` runs."""
    longest, last = 0.0, time.perf_counter()
    while not work.done():
        await asyncio.sleep(TICK_S)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    await work
    return longest


def test_wait_keeps_the_loop_ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, FIRE_AFTER_S)

    async def main() -> tuple[float, float]:
        start = time.perf_counter()
        gap = await ticking_while(asyncio.ensure_future(aio.wait(FakeTarget())))  # type: ignore[arg-type]
        return gap, time.perf_counter() - start

    gap, elapsed = asyncio.run(main())
    assert elapsed >= FIRE_AFTER_S and gap < MAX_GAP_S and aio.pending() == 0


def test_cancelled_wait_leaves_nothing_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = fake_gpu(monkeypatch, None)

    async def main() -> None:
        task = asyncio.ensure_future(aio.wait(FakeTarget()))  # type: ignore[arg-type]
        await asyncio.sleep(TICK_S)
        assert aio.pending() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert aio.pending() == 0

    asyncio.run(main())
    before = aio.orphaned()
    aio._HOST_FN(tokens[0])  # the host function runs after all: it must find nothing to do
    assert aio.orphaned() == before + 1 and aio.pending() == 0


def test_wait_asks_the_target_when_no_callback_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, None)
    calls = iter([False, True])
    target = FakeTarget(lambda: next(calls))
    asyncio.run(aio.wait(target, check_interval_s=TICK_S))  # type: ignore[arg-type]
    assert target.queries == 2 and aio.pending() == 0

    def sticky() -> bool:
        raise CudaError(Result.ERROR_ILLEGAL_ADDRESS, call="cuStreamQuery")

    with pytest.raises(CudaError, match="ILLEGAL_ADDRESS"):
        asyncio.run(aio.wait(FakeTarget(sticky), check_interval_s=TICK_S))  # type: ignore[arg-type]
    assert aio.pending() == 0


def test_many_concurrent_waits_all_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens: list[int] = []

    def enqueue(target: object, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> tuple[int, None]:
        tokens.append(aio._register(loop, future, target))
        return tokens[-1], None

    monkeypatch.setattr(aio, "_enqueue", enqueue)

    async def main() -> list[None]:
        waits = [asyncio.ensure_future(aio.wait(FakeTarget())) for _ in range(CONCURRENT)]  # type: ignore[arg-type]
        await asyncio.sleep(0)
        order = tokens[:]
        random.shuffle(order)  # the driver completes streams in any order, from several threads
        threads = [fire_from_a_thread(token) for token in order]
        done = await asyncio.wait_for(asyncio.gather(*waits), timeout=10)
        for thread in threads:
            thread.join()
        return done

    assert len(asyncio.run(main())) == CONCURRENT and aio.pending() == 0


def test_wait_refuses_what_it_cannot_wait_for() -> None:
    with pytest.raises(TypeError, match="Stream or Event"):
        asyncio.run(aio.wait(42))  # type: ignore[arg-type]
    assert aio.pending() == 0
