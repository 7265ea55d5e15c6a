"""Awaitable streams and events without a driver (CPU only): rawcuda.extras.aio's host-function registry and wait().

The host function -- the part that runs on a driver thread and must never raise into C -- is driven here
through the very ctypes function pointer the driver would call, from threads of our own; and ``wait()`` is
driven with a stand-in for the GPU side. On a GPU: tests/gpu/test_aio.py.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable

import pytest

from rawcuda.checked.errors import CudaError
from rawcuda.extras import aio
from rawcuda.ffi.results import Result
from tests.helpers import longest_gap_while

TICK_S = 0.005
MAX_GAP_S = 0.05  # a loop that never blocks wakes a 5 ms ticker well within this, even on a busy CI machine
FIRE_AFTER_S = 0.3
CONCURRENT = 100


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


def test_host_function_after_a_cancelled_wait_does_nothing(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
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


def test_host_function_never_raises_into_c(loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]) -> None:
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


def test_wait_keeps_the_loop_ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, FIRE_AFTER_S)

    async def main() -> tuple[float, float]:
        start = time.perf_counter()
        waiting = asyncio.ensure_future(aio.wait(FakeTarget()))  # type: ignore[arg-type]
        gap = await longest_gap_while(waiting, TICK_S)
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


def test_wait_refuses_what_only_looks_like_an_event() -> None:
    # aio once recognised events by their attributes: a MagicMock (which has every attribute) reached
    # cuStreamWaitEvent with a made-up handle and crashed the interpreter. Only rawcuda's own types pass.
    from unittest.mock import MagicMock

    for thing in (MagicMock(), object(), None):
        with pytest.raises(TypeError, match="rawcuda Stream or Event"):
            asyncio.run(aio.wait(thing))  # type: ignore[arg-type]
