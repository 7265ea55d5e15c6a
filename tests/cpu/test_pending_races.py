"""PendingStream under threads and captures (rawcuda.core.guards.pending), on the CPU with stand-in streams and driver.

Three ways the record could let a consumer read memory a kernel was still writing, each guarded here:
a launch recorded on one thread while another thread waited (``handle()``, ``synchronize()``) was dropped when
the waiter overwrote the record; exporting while a pending stream was capturing recorded an event *into* the
capture; and re-recording a stream already listed rebuilt the whole list on every launch. Each test below
failed before the fix.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from rawcuda.core.guards import pending
from rawcuda.core.guards.pending import PendingStream

THREADS = 6  # recording threads, each alternating between two streams of its own
LAUNCHES = 400  # per thread and round
ROUNDS = 4
SWITCH_INTERVAL_S = 1e-5  # switch threads often, so that records land inside a waiter's wait
CONSUMER = 0xD000  # a consumer's stream, as __dlpack__(stream=...) would name it


class WorkStream:
    """A stand-in stream that counts the work queued on it and how much of it a wait has covered."""

    def __init__(self, handle: int, context: Any) -> None:
        self.handle = handle
        self.context = context
        self.closed = False
        self.capturing: Any = None
        self.queued = 0  # launches queued so far
        self.covered = 0  # of those, how many a host wait or an event has been ordered after

    def synchronize(self) -> None:
        self.covered = self.queued  # a host wait covers what was queued when it began
        threading.Event().wait(0)  # let other threads run while "waiting"

    def __repr__(self) -> str:
        return f"<WorkStream {self.handle:#x}>"


class CoveringDriver:
    """rawcuda.core.guards.pending's ``cu``: an event recorded on a stream covers the work queued there so far."""

    def __init__(self) -> None:
        self.by_handle: dict[int, WorkStream] = {}
        self.events: list[int] = []

    def cuEventCreate(self, event: Any, flags: int) -> None:
        pass

    def cuEventRecord(self, event: Any, stream: int) -> None:
        self.events.append(stream)
        if stream in self.by_handle:
            self.by_handle[stream].covered = self.by_handle[stream].queued

    def cuStreamWaitEvent(self, waiter: int, event: Any, flags: int) -> None:
        pass

    def cuEventDestroy(self, event: Any) -> None:
        pass

    def cuStreamSynchronize(self, stream: int) -> None:
        pass


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> CoveringDriver:
    fake = CoveringDriver()
    monkeypatch.setattr(pending, "cu", fake)
    return fake


@pytest.fixture
def often() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    yield
    sys.setswitchinterval(old)


def context() -> Any:
    return SimpleNamespace(is_primary=True, activate=lambda: None)


def launch(p: PendingStream, stream: WorkStream) -> None:
    """What Function.launch does for one buffer: queue the work, then record (its lock-free check first)."""
    stream.queued += 1
    if p.last() is not stream:
        p.record(stream)


@pytest.mark.parametrize("waiter", ["synchronize", "handle"])
def test_no_record_is_lost_to_a_concurrent_wait(waiter: str, driver: CoveringDriver, often: None) -> None:
    # Before: the waiter overwrote the record after its wait, dropping streams recorded meanwhile.
    ctx = context()
    for round_ in range(ROUNDS):
        p = PendingStream()
        streams = [WorkStream(0x1000 * (i + 1) + round_, ctx) for i in range(2 * THREADS)]
        driver.by_handle = {s.handle: s for s in streams}
        done = threading.Event()

        def record_loop(mine: list[WorkStream], p: PendingStream = p) -> None:
            for i in range(LAUNCHES):
                launch(p, mine[i % 2])

        def wait_loop(p: PendingStream = p, done: threading.Event = done) -> None:
            while not done.is_set():
                getattr(p, waiter)()

        recorders = [threading.Thread(target=record_loop, args=(streams[2 * i : 2 * i + 2],)) for i in range(THREADS)]
        waiting = threading.Thread(target=wait_loop)
        waiting.start()
        for t in recorders:
            t.start()
        for t in recorders:
            t.join()
        done.set()
        waiting.join()
        listed = {id(ref()) for ref in p.streams}
        lost = [s for s in streams if s.covered < s.queued and id(s) not in listed]
        assert not lost, f"round {round_}: work queued on {lost} is neither waited for nor recorded"
        assert p.last() in [ref() for ref in p.streams] + [None], "last is always a recorded stream (or none)"


def test_a_waiter_keeps_what_was_recorded_during_its_wait(driver: CoveringDriver) -> None:
    # The same race made deterministic: a launch lands while synchronize() waits on the first stream.
    ctx = context()
    p = PendingStream()
    first, second = WorkStream(0xA000, ctx), WorkStream(0xB000, ctx)
    launch(p, first)
    real = first.synchronize

    def meanwhile() -> None:
        real()
        launch(p, second)  # another thread's launch, while this wait runs
        launch(p, first)  # and one on the stream being waited for: queued after the wait began

    first.synchronize = meanwhile  # type: ignore[method-assign]
    p.synchronize()
    assert [ref() for ref in p.streams] == [second, first], "both launches made during the wait are still pending"
    assert p.last() is first
    first.synchronize = real  # type: ignore[method-assign]
    p.synchronize()
    assert p.streams == [] and p.last() is None


def test_a_launch_during_a_wait_is_not_skipped_by_the_lock_free_check(driver: CoveringDriver) -> None:
    # The launch's own check (last() is stream) must not skip a stream that a waiter is about to forget.
    ctx = context()
    p = PendingStream()
    s = WorkStream(0xA000, ctx)
    launch(p, s)
    real = s.synchronize

    def meanwhile() -> None:
        real()
        launch(p, s)  # queued after the wait began: must be recorded again, not skipped

    s.synchronize = meanwhile  # type: ignore[method-assign]
    p.synchronize()
    assert [ref() for ref in p.streams] == [s] and p.last() is s


class CountingStream:
    """A stream whose ``closed`` counts its reads: how much of the record a re-record looks at."""

    def __init__(self) -> None:
        self.reads = 0
        self.handle = id(self)

    @property
    def closed(self) -> bool:
        self.reads += 1
        return False


def test_re_recording_a_listed_stream_looks_at_no_other() -> None:
    # Before: two streams taking turns rebuilt the whole list (reading every stream's state) at every launch.
    p = PendingStream()
    streams = [CountingStream() for _ in range(4)]
    for s in streams:
        p.record(s)
    for s in streams:
        s.reads = 0
    for _ in range(10):
        p.record(streams[0])
        p.record(streams[1])
    assert [s.reads for s in streams] == [0, 0, 0, 0]
    assert [ref() for ref in p.streams] == [streams[2], streams[3], streams[0], streams[1]]


# --- captures ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("export", ["order_before", "handle", "synchronize"])
def test_pending_work_on_a_capturing_stream_is_refused_clearly(export: str, driver: CoveringDriver) -> None:
    # Before: an event was recorded on the capturing stream -- captured itself, joining the consumer's stream
    # into the graph -- or the stream was synchronized, which invalidates the capture.
    ctx = context()
    p = PendingStream()
    idle, capturing = WorkStream(0xA000, ctx), WorkStream(0xB000, ctx)
    driver.by_handle = {idle.handle: idle, capturing.handle: capturing}
    launch(p, capturing)
    launch(p, idle)
    capturing.capturing = object()  # what rawcuda.capture sets: the Graph being recorded into
    call = {"order_before": lambda: p.order_before(CONSUMER), "handle": p.handle, "synchronize": p.synchronize}
    with pytest.raises(BufferError, match=r"being captured into a graph on <WorkStream 0xb000>.*after the capture"):
        call[export]()
    assert driver.events == [] and capturing.covered == 0 and idle.covered == 0, "nothing was waited for"
    assert [ref() for ref in p.streams] == [capturing, idle] and p.last() is idle, "the record is unchanged"
    capturing.capturing = None  # the capture ended: now it exports
    call[export]()
    assert capturing.covered == 1


# --- a stream collected while a capture is open ----------------------------------------------------------------------
@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The handles whose release a capture has deferred, as rawcuda.core.stream.release_deferred answers (the
    stand-in: add a handle to defer its release, clear the set to end the capture)."""
    handles: set[int] = set()
    # raising=False: on the code before the fix the name did not exist, and the test must fail on its assertion
    monkeypatch.setattr(pending, "release_deferred", handles.__contains__, raising=False)
    return handles


def test_a_stream_collected_while_its_release_is_deferred_refuses_export(
    driver: CoveringDriver, deferred: set[int]
) -> None:
    # Before: a dead entry was dropped as finished, although a capture had deferred the release that waits for
    # the stream's work -- the export waited for nothing. Here the dead stream's handle is looked up instead.
    ctx = context()
    p = PendingStream()
    doomed, other = WorkStream(0xA000, ctx), WorkStream(0xB000, ctx)
    p.record(doomed)
    p.record(other)
    deferred.add(0xA000)
    del doomed  # (reference counting frees it at once)
    for waiter in (p.handle, lambda: p.order_before(CONSUMER), p.synchronize):
        with pytest.raises(BufferError, match="garbage-collected while a capture is open"):
            waiter()
    assert len(p.streams) == 2, "the collected stream's entry stays while its release waits"
    newcomer = WorkStream(0xC000, ctx)  # a new stream -- the moment finished entries are forgotten
    p.record(newcomer)
    assert len(p.streams) == 3, "a deferred release keeps its entry when other streams are recorded"
    deferred.clear()  # the capture ended: the release ran, and waited for the stream's work
    assert p.handle() == newcomer.handle
    assert [ref() for ref in p.streams] == [newcomer], "released: the entry goes with the others waited for"


def test_a_record_of_a_stream_closed_meanwhile_keeps_the_dead_entry_under_its_id(
    driver: CoveringDriver, deferred: set[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: record() popped the entry under the closed stream's id (a collected stream's, still running)
    # before asking the handle, then returned on ClosedError: the dead stream's work was forgotten.
    ctx = context()
    p = PendingStream()
    doomed = WorkStream(0xA000, ctx)
    p.record(doomed)
    key = id(doomed)
    deferred.add(0xA000)
    del doomed

    class Closed:
        closed = True

        @property
        def handle(self) -> int:
            raise pending.ClosedError("closed")

    newcomer = Closed()
    monkeypatch.setattr(pending, "id", lambda obj: key if obj is newcomer else id(obj), raising=False)
    p.record(newcomer)
    with pytest.raises(BufferError, match="garbage-collected while a capture is open"):
        p.handle()


def test_a_deferred_release_counts_as_held_until_it_has_run() -> None:
    # Before: end() emptied the queue, then ran the releases (a stream's waits for its work): meanwhile
    # holds() said False, and an export on another thread forgot the stream.
    from rawcuda.core.guards import capturedeferral

    deferral = capturedeferral.CaptureDeferral()
    seen: list[bool] = []
    context = SimpleNamespace(usable=True, raw_handle=0)

    def release(handle: int) -> None:
        seen.append(deferral.holds(release, handle))

    deferral.begin()
    assert deferral.defer(context, release, (0xA000,))  # type: ignore[arg-type]
    assert deferral.holds(release, 0xA000)
    real = capturedeferral.finalize_child
    try:
        capturedeferral.finalize_child = lambda ctx, rel, *args: rel(*args)  # type: ignore[assignment]
        deferral.end()
    finally:
        capturedeferral.finalize_child = real
    assert seen == [True], "while the release ran, the handle still counted as held"
    assert not deferral.holds(release, 0xA000)


def test_waiting_through_the_legacy_stream_while_a_capture_is_open_is_refused(
    driver: CoveringDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the export recorded an event on the legacy stream (or made it wait) while a blocking stream of
    # the context was capturing: the driver invalidated the user's capture (seen on the H200).
    from rawcuda.ffi.constants import STREAM_LEGACY

    ctx = context()
    legacy, side = WorkStream(pending.LEGACY_HANDLE, ctx), WorkStream(0xB000, ctx)
    p, q = PendingStream(), PendingStream()
    p.record(legacy)
    q.record(side)
    pending.capture_deferral.begin()  # a capture rawcuda knows nothing of: a hazard everywhere
    try:
        assert p.handle() == STREAM_LEGACY, "naming the legacy stream makes no driver call: allowed"
        for wait in (lambda: p.order_before(CONSUMER), lambda: q.order_before(STREAM_LEGACY)):
            with pytest.raises(BufferError, match="legacy default stream while a graph capture is open"):
                wait()  # an event on the legacy stream; the legacy stream made to wait
        assert driver.events == [], "refused before any event was recorded"
        q.order_before(CONSUMER)  # neither side is the legacy stream: allowed
        assert driver.events == [0xB000]
    finally:
        pending.capture_deferral.end()
    p.order_before(CONSUMER)
    assert driver.events == [0xB000, pending.LEGACY_HANDLE]


def test_a_capture_refuses_the_legacy_stream_only_where_it_could_break() -> None:
    # Before: any open capture refused every legacy-stream wait in the process -- a
    # CuPy array on CuPy's default stream could not be passed to a rawcuda kernel while another thread captured
    # a non-blocking stream, which the legacy stream never synchronizes with.
    from concurrent.futures import ThreadPoolExecutor

    from rawcuda.core.guards.capturedeferral import EVERYWHERE, CaptureDeferral, LegacyHazard

    def refused(deferral: CaptureDeferral, context: int | None) -> bool:
        try:
            deferral.refuse_legacy("a wait", context)
        except BufferError:
            return True
        return False

    with ThreadPoolExecutor(max_workers=1) as other:  # one worker thread, alive (its ident unique) throughout
        here, elsewhere = threading.get_ident(), other.submit(threading.get_ident).result()
        ctx, other_ctx = 0xC000, 0xD000
        cases = {  # the capture's hazards -> the (context, thread) pairs refused
            (LegacyHazard(ctx, None),): {(ctx, here), (ctx, elsewhere), (None, here), (None, elsewhere)},  # blocking
            (LegacyHazard(None, elsewhere),): {(c, elsewhere) for c in (ctx, other_ctx, None)},  # THREAD_LOCAL there
            (EVERYWHERE,): {(c, t) for c in (ctx, other_ctx, None) for t in (here, elsewhere)},  # GLOBAL, unknown
            (): set(),  # RELAXED, non-blocking
        }
        for hazards, expected in cases.items():
            deferral = CaptureDeferral()
            deferral.begin(hazards)
            seen = {
                (context, thread)
                for context in (ctx, other_ctx, None)
                for thread in (here, elsewhere)
                if (refused(deferral, context) if thread == here else other.submit(refused, deferral, context).result())
            }
            assert seen == expected, hazards
            deferral.end(hazards)
            assert not refused(deferral, ctx), "the capture is over: nothing refused"
