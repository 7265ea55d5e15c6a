"""Launches record their stream on the memory of the rawcuda buffers they are passed (core.guards.pending), on the CPU.

A launch returns before the kernel runs, so a consumer given the buffer afterwards -- ``__dlpack__(stream=...)``,
the CUDA Array Interface's ``stream`` -- must be made to wait for it (without that, on the H200, ``cupy.from_dlpack(y)``
read every element of ``y`` before a rawcuda kernel had written it). Here without a driver: a real Function over a
stand-in context with the launch call itself replaced, real buffers over an address nobody allocated, and a
stand-in ``cu`` that notes the waits PendingStream asks for. On a GPU, the consumers really waiting:
tests/gpu/test_launch_pending.py.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rawcuda import ClosedError, ForkedProcessError
from rawcuda.core import boundlaunch, function, kernelargs, launchcall, packhistory
from rawcuda.core.closecounter import closes
from rawcuda.core.context import Context
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.function import Function
from rawcuda.core.guards import pending
from rawcuda.core.guards.forgetcount import forgets
from rawcuda.core.guards.pending import LEGACY_HANDLE, LegacyStream, PendingStream, legacy_stream
from rawcuda.core.kernelargs import ArgPacker
from rawcuda.core.paramspec import ParamSpec
from rawcuda.core.stream import Stream
from rawcuda.ffi.constants import STREAM_LEGACY, STREAM_PER_THREAD

ADDRESS = 0x7F00_0000_0000  # where the stand-in buffers "are" (nothing reads it)
CONTEXT_HANDLE = 0xC000
KERNEL_HANDLE = 0xF000
STREAM_A, STREAM_B = 0xA000, 0xB000  # the stand-in streams' CUstreams
CONSUMER = 0xD000  # a consumer's stream (torch's, CuPy's), as __dlpack__(stream=...) would name it
N = 8
POINTER = ParamSpec("int", 8, "u64")
SPECS = [POINTER] * 4  # k(float *c, float *a, float *b, size_t n), as vector_add
LIMITS = {"block": [1024, 1024, 64], "grid": [2**31 - 1, 65535, 65535], "threads": 1024, "static_shared": 0}
LIMITS["optin_shared"] = 227 * 1024


class StandInContext(Context):
    """What a launch, a buffer and a PendingStream read of a Context -- no driver behind it.

    A Context subclass, because a ``context`` argument must be one. Its class attributes shadow the properties
    that would read a driver handle, and its __init__ makes none.
    """

    raw_handle = CONTEXT_HANDLE
    closed = False

    def __init__(self, primary: bool = True) -> None:
        self.cache: dict[str, Any] = {}
        self.unusable: str | None = None
        self.raw_handle = CONTEXT_HANDLE
        self.is_primary = primary
        self.closed = False
        self.last_launch_ref: Any = lambda: None

    def activate(self) -> None:
        pass

    def check_usable(self) -> None:
        pass

    def adopt(self, child: Any) -> None:
        pass

    def forget(self, child: Any) -> None:
        pass

    def __repr__(self) -> str:
        return "<stand-in context>"


class StandInBuffer(DeviceBuffer):
    """A real DeviceBuffer (its PendingStream, views, interface) over an address nobody allocated -- through
    the two hooks ForeignBuffer uses."""

    def _allocate(self, ctx: Any, nbytes: int) -> int:
        return ADDRESS

    def _take_ownership(self, ptr: int) -> None:
        pass


class StandInDriver:
    """The calls PendingStream makes (rawcuda.core.guards.pending's ``cu``): each wait noted as (waiter, producer)."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, int]] = []
        self.synchronized: list[int] = []
        self.recorded_on = -1

    def cuEventCreate(self, event: Any, flags: int) -> None:
        pass

    def cuEventRecord(self, event: Any, stream: int) -> None:
        self.recorded_on = stream

    def cuStreamWaitEvent(self, waiter: int, event: Any, flags: int) -> None:
        self.waits.append((waiter, self.recorded_on))

    def cuEventDestroy(self, event: Any) -> None:
        pass

    def cuStreamSynchronize(self, stream: int) -> None:
        self.synchronized.append(stream)


@pytest.fixture
def ctx() -> StandInContext:
    return StandInContext()


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> StandInDriver:
    fake = StandInDriver()
    monkeypatch.setattr(pending, "cu", fake)
    return fake


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    """cuLaunchKernelEx replaced: every launch is noted, and succeeds."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(launchcall.launch_kernel, "call", lambda *args: calls.append(args) or 0)
    yield calls


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[tuple[PendingStream, Any]]:
    """Every call of PendingStream.record that gets past the launch's own ``last() is stream`` check."""
    calls: list[tuple[PendingStream, Any]] = []
    real = PendingStream.record

    def noted(self: PendingStream, stream: Any) -> None:
        calls.append((self, stream))
        real(self, stream)

    monkeypatch.setattr(PendingStream, "record", noted)
    return calls


def stand_in_stream(ctx: StandInContext, handle: int) -> Stream:
    """A real Stream object (a launch checks the type) that no driver created."""
    s = Stream.__new__(Stream)
    s.context, s._closed, s._handle = ctx, False, handle
    return s


def stand_in_function(ctx: StandInContext) -> Function:
    module = SimpleNamespace(context=ctx, closed=False, name="stand-in", ptx_info=None)  # ptx_info: as for a cubin
    fn = Function(module, "k", KERNEL_HANDLE, list(SPECS))
    fn._limit_cache = dict(LIMITS)  # what _limits() would ask the device
    return fn


def recorded(p: PendingStream) -> list[Any]:
    return [ref() for ref in p.streams]


class Marker:
    """A stream as PendingStream sees one (weakly referenced, ``closed``, ``handle``), for the record's own rules."""

    def __init__(self) -> None:
        self.closed = False
        self.handle = id(self)


# --- the pack ----------------------------------------------------------------------------------------------------
def test_a_pack_lists_the_record_of_each_memory_once(ctx: StandInContext) -> None:
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    view = a.view(2)
    assert view.pending is a.pending, "a view shares its base's record"
    packer = ArgPacker("k", SPECS, ctx)
    listed = packer.pack((c, view, a, N)).pending
    assert len(listed) == 2 and listed[0] is c.pending and listed[1] is a.pending
    assert packer.pack((1, 2, 3, N)).pending == (), "bare addresses are not rawcuda memory: nothing to record"
    # An object passed through its interface that carries rawcuda's record -- as a GrowableBuffer does.
    through_interface = SimpleNamespace(pending=PendingStream())
    through_interface.__cuda_array_interface__ = {"shape": (N,), "typestr": "<f4", "data": (ADDRESS, False)}
    through_interface.__cuda_array_interface__.update(version=3, stream=None)
    listed = ArgPacker("k", [POINTER], ctx).pack((through_interface,)).pending
    assert len(listed) == 1 and listed[0] is through_interface.pending


# --- the record --------------------------------------------------------------------------------------------------
def test_recording_the_same_stream_again_changes_nothing() -> None:
    p = PendingStream()
    first, second, third = Marker(), Marker(), Marker()
    assert p.last() is None and p.streams == []
    p.record(first)
    kept = p.last
    p.record(first)
    assert p.last is kept and recorded(p) == [first], "the fast path: the same stream again changes nothing"
    p.record(second)
    assert recorded(p) == [first, second] and p.last() is second
    p.record(first)
    assert recorded(p) == [second, first] and p.last() is first, "moved to the end, never listed twice"
    second.closed = True  # a closed stream has finished its work (close() waits) ...
    closes.generation += 1  # ... and moved the close count, as every close and stream death does
    p.record(third)
    assert recorded(p) == [first, third]
    gc.disable()  # reference counting alone frees it: nothing else holds it
    try:
        del first
        closes.generation += 1  # (a real stream's release moves it)
        p.record(second := Marker())
    finally:
        gc.enable()
    assert recorded(p) == [third, second], "a collected stream is forgotten (its finalizer waited for its work)"
    p.record(None)  # a synchronous operation: it waited for everything
    assert p.streams == [] and p.last() is None


def test_closed_streams_are_forgotten_at_the_next_record_of_a_listed_stream() -> None:
    # Before: only a *new* stream's record forgot finished ones, so 50 streams closed while launches went on
    # on a listed one stayed in the record until the next export (53 entries after).
    p = PendingStream()
    kept, many = Marker(), [Marker() for _ in range(50)]
    for s in [kept, *many]:
        p.record(s)
    assert len(p.streams) == 51
    for s in many:
        s.closed = True
    closes.generation += 1  # (each close moves it)
    p.record(kept)  # listed already, not last: the locked path
    assert recorded(p) == [kept]


def test_the_legacy_stream_is_one_per_context_and_holds_it_weakly(driver: StandInDriver) -> None:
    ctx = StandInContext()
    marker = legacy_stream(ctx)
    assert isinstance(marker, LegacyStream) and marker is legacy_stream(ctx) and marker.handle == LEGACY_HANDLE
    assert marker.context is ctx and not marker.closed and marker.capturing is None
    marker.synchronize()
    assert driver.synchronized == [LEGACY_HANDLE]
    pending.capture_deferral.begin()  # a capture open anywhere: a legacy-stream wait would invalidate it
    try:
        with pytest.raises(BufferError, match="while a graph capture is open"):
            marker.synchronize()
    finally:
        pending.capture_deferral.end()
    assert driver.synchronized == [LEGACY_HANDLE], "refused before the driver was asked"
    p = PendingStream()
    p.record(marker)
    ctx.closed = True  # Context.close() synchronized the context: the legacy stream's work is over
    assert marker.closed and p.handle() is None and p.streams == []
    alive = weakref.ref(ctx)
    gc.disable()
    try:
        del ctx
        assert alive() is None, "the legacy stream must not keep its context alive (the context's cache holds it)"
    finally:
        gc.enable()
    assert marker.closed
    with pytest.raises(ClosedError, match="context of this legacy default stream is gone"):
        marker.context  # noqa: B018 (the property is what is tested)


# --- launches ----------------------------------------------------------------------------------------------------
def test_a_launch_records_its_stream_on_each_memory_once(
    ctx: StandInContext, launches: list[Any], records: list[Any], driver: StandInDriver
) -> None:
    # Before: Function.launch recorded nothing, so the interface said None while the kernel still ran.
    fn, s, other = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), stand_in_stream(ctx, STREAM_B)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    view = a.view(2)
    fn.launch(1, 32, c, view, a, N, stream=s)
    assert records == [(c.pending, s), (a.pending, s)] and len(launches) == 1
    fn.launch(1, 32, c, view, a, N, stream=s)
    assert len(records) == 2 and len(launches) == 2, "the same stream again: no record call at all"
    assert c.__cuda_array_interface__["stream"] == STREAM_A and view.__cuda_array_interface__["stream"] == STREAM_A
    fn.launch(1, 32, c, view, a, N, stream=other)
    assert recorded(a.pending) == [s, other]
    assert a.__cuda_array_interface__["stream"] == STREAM_B  # the last stream, made to wait for the first
    assert driver.waits == [(STREAM_B, STREAM_A)] and recorded(a.pending) == [other]


def test_a_launch_on_no_stream_records_the_legacy_stream(
    ctx: StandInContext, launches: list[Any], driver: StandInDriver
) -> None:
    # Before: nothing was recorded; and record(None) -- a synchronous operation -- would have cleared the record.
    fn = stand_in_function(ctx)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, a, a, N)
    legacy = legacy_stream(ctx)
    assert recorded(c.pending) == [legacy] and recorded(a.pending) == [legacy]
    c.pending.order_before(CONSUMER)  # __dlpack__(stream=CONSUMER): an event on stream 0, waited for there
    assert driver.waits == [(CONSUMER, LEGACY_HANDLE)]
    c.pending.order_before(STREAM_LEGACY)  # the consumer is on the legacy stream itself: already in order
    c.pending.order_before(STREAM_PER_THREAD)
    assert driver.waits == [(CONSUMER, LEGACY_HANDLE), (STREAM_PER_THREAD, LEGACY_HANDLE)]
    assert c.__cuda_array_interface__["stream"] == STREAM_LEGACY, "0 is forbidden in the interface: 1 names it"
    assert driver.synchronized == [], "nothing waited on the host"
    s = stand_in_stream(ctx, STREAM_A)
    fn.launch(1, 32, a, c, c, N, stream=s)
    fn.launch(1, 32, a, c, c, N)
    assert recorded(a.pending) == [s, legacy]
    assert a.__cuda_array_interface__["stream"] == STREAM_LEGACY
    assert driver.waits[-1] == (LEGACY_HANDLE, STREAM_A), "the legacy stream made to wait for the other"


def test_the_legacy_stream_of_a_created_context_is_waited_for_on_the_host(
    launches: list[Any], driver: StandInDriver
) -> None:
    # A consumer's 1 (or the interface's 1) means the legacy stream of the context current on *its* side -- the
    # primary one, for torch and CuPy -- so work on a created context's legacy stream cannot be named that way.
    ctx = StandInContext(primary=False)
    fn, c = stand_in_function(ctx), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, c, c, N)
    c.pending.order_before(STREAM_LEGACY)
    assert driver.synchronized == [LEGACY_HANDLE] and driver.waits == []
    c.pending.order_before(CONSUMER)  # a stream by its handle: cuStreamWaitEvent takes another context's event
    assert driver.waits == [(CONSUMER, LEGACY_HANDLE)]
    assert c.__cuda_array_interface__["stream"] is None and driver.synchronized == [LEGACY_HANDLE] * 2
    assert c.pending.streams == []


def test_a_bound_launch_records_as_a_launch_does(ctx: StandInContext, launches: list[Any], records: list[Any]) -> None:
    fn, s = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    on_stream, on_legacy = fn.bind(1, 32, c, a, a, N, stream=s), fn.bind(1, 32, a, c, c, N)
    assert records == [], "binding launches nothing, so it records nothing"
    on_stream()
    on_stream()
    assert records == [(c.pending, s), (a.pending, s)] and len(launches) == 2
    on_legacy()
    assert recorded(a.pending) == [s, legacy_stream(ctx)] and recorded(c.pending) == [s, legacy_stream(ctx)]


def test_a_captured_launch_records_nothing(ctx: StandInContext, launches: list[Any]) -> None:
    # Inside rawcuda.capture(s) the launch runs at each replay, not now; and an event recorded later on the capturing
    # stream (to order a consumer) would be captured itself -- pulling the consumer's stream into the graph.
    fn, s = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A)
    c = StandInBuffer(N, context=ctx)
    bound = fn.bind(1, 32, c, c, c, N, stream=s)

    class StandInGraph:  # what rawcuda.capture sets: the Graph being recorded into
        def __init__(self) -> None:
            self.kept: list[Any] = []

        def record_launch(self, stream: Any, fn: Any, args: tuple[Any, ...]) -> None:
            self.kept.extend((fn, args))

    graph = StandInGraph()
    s.capturing = graph
    fn.launch(1, 32, c, c, c, N, stream=s)
    bound()
    assert len(launches) == 2 and c.pending.streams == []
    # The graph holds what each replay uses, and checks it at replay: the function and the arguments.
    assert graph.kept == [fn, (c, c, c, N), fn, (c, c, c, N)]
    s.capturing = None  # the capture ended
    bound()
    assert recorded(c.pending) == [s]


def test_a_failed_launch_records_nothing(
    ctx: StandInContext, monkeypatch: pytest.MonkeyPatch, records: list[Any]
) -> None:
    class RefusedError(Exception):
        pass

    def refuse(rc: int, context: Any, call: Any) -> None:
        raise RefusedError(rc)

    monkeypatch.setattr(launchcall.launch_kernel, "call", lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(function, "launch_failed", refuse)
    monkeypatch.setattr(boundlaunch, "launch_failed", refuse)
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    with pytest.raises(RefusedError):
        fn.launch(1, 32, c, c, c, N, stream=s)
    with pytest.raises(RefusedError):
        fn.bind(1, 32, c, c, c, N)()
    assert records == [] and c.pending.streams == []


def test_the_stand_ins_are_what_a_launch_reads(ctx: StandInContext, launches: list[Any]) -> None:
    # The tests above mean something only if the launch really went through: the kernel, the packed address.
    fn, c = stand_in_function(ctx), StandInBuffer(N, np.float32, ctx)
    fn.launch(1, 32, c, c, c, N)
    (_config, kernel, params, extra) = launches[0]
    assert kernel.value == KERNEL_HANDLE and extra is None and params[0] is not None
    assert fn.last_config == ((1, 1, 1), (32, 1, 1), 0, 0)


def test_a_captured_memset_records_nothing_either(ctx: StandInContext, monkeypatch: pytest.MonkeyPatch) -> None:
    # Copies and memsets record their stream too (DeviceBuffer._transfer); inside a capture they run at replay.
    from rawcuda.core import devicebuffer

    queued: list[int] = []
    driver = SimpleNamespace(
        cuMemsetD32Async=lambda *args: queued.append(args[-1]), cuMemsetD32=None
    )  # (both looked up)
    monkeypatch.setattr(devicebuffer, "cu", driver)
    held: list[Any] = []
    s, c = stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    s.capturing = SimpleNamespace(keep_alive=held.append)  # what rawcuda.capture sets: the Graph being recorded into
    c.fill(1.0, stream=s)
    assert queued == [STREAM_A], "the memset was queued (captured) on the stream"
    assert held == [None, c], "the graph holds the memset's buffer: a replay writes it"
    assert c.pending.streams == []


# --- skipping the record: the pack remembers the count it last recorded at (core.guards.forgetcount) -------------
def test_two_streams_taking_turns_record_once_per_memory_and_stream(
    ctx: StandInContext, launches: list[Any], records: list[Any]
) -> None:
    # Before: each turn moved every buffer's entry to the end under its lock -- four record calls per pair of
    # launches, +2 to +8 us per launch on the H200 with 3 and 8 buffers.
    fn, s, t = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), stand_in_stream(ctx, STREAM_B)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    for _ in range(10):
        fn.launch(1, 32, c, a, a, N, stream=s)
        fn.launch(1, 32, c, a, a, N, stream=t)
    assert len(launches) == 20
    assert records == [(c.pending, s), (a.pending, s), (c.pending, t), (a.pending, t)]
    assert recorded(a.pending) == [s, t] and recorded(c.pending) == [s, t]
    on_s, on_t = fn.bind(1, 32, c, a, a, N, stream=s), fn.bind(1, 32, c, a, a, N, stream=t)
    for _ in range(10):
        on_s()
        on_t()
    # Each bound launch's first call records (it has not seen its stream yet), then never again.
    assert len(records) == 8 and len(launches) == 40
    fn.launch(1, 32, c, a, a, N)  # stream=None alternating with a stream: the legacy stream is one more entry
    fn.launch(1, 32, c, a, a, N, stream=s)
    fn.launch(1, 32, c, a, a, N)
    assert len(records) == 10 and recorded(c.pending) == [s, t, legacy_stream(ctx)]


def test_argument_sets_taking_turns_are_packed_once_each(
    ctx: StandInContext, launches: list[Any], records: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a Function kept only its latest pack, so a ping-pong chain (c <- a, then a <- c) or the two passes
    # of a reduction packed at every launch.
    packs: list[tuple[Any, ...]] = []
    real_pack = ArgPacker.pack
    monkeypatch.setattr(ArgPacker, "pack", lambda self, args: packs.append(args) or real_pack(self, args))
    fn, s = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    for _ in range(10):
        fn.launch(1, 32, c, a, a, N, stream=s)
        fn.launch(1, 32, a, c, c, N, stream=s)
    assert len(packs) == 2 and len(launches) == 20
    assert [launch[2] for launch in launches[:2]] * 10 == [launch[2] for launch in launches]  # each its own array
    assert len(records) == 2  # each memory recorded the stream once: the second set found it listed
    for _ in range(3):  # one set stays on (the other done): it reaches the fast path again
        fn.launch(1, 32, a, c, c, N, stream=s)
    assert fn._packed.same((a, c, c, N)) and len(packs) == 2
    t = stand_in_stream(ctx, STREAM_B)
    fn.launch(1, 32, c, a, a, N, stream=t)  # a recent set on a new stream: recorded there, not packed again
    assert len(packs) == 2 and recorded(c.pending) == [s, t]
    for _ in range(packhistory.RECENT_PACKS + 1):  # more sets than are remembered: the oldest is packed again
        fn.launch(1, 32, StandInBuffer(N, context=ctx), a, a, N, stream=s)
    fn.launch(1, 32, a, c, c, N, stream=s)
    assert len(packs) == 2 + packhistory.RECENT_PACKS + 1 + 1
    gone = StandInBuffer(N, context=ctx)
    fn.launch(1, 32, gone, a, a, N, stream=s)
    gone.close()  # a close forgets every remembered pack: a freed buffer's address is never launched again
    fn.launch(1, 32, a, c, c, N, stream=s)
    assert len(packs) == 2 + packhistory.RECENT_PACKS + 4


def test_argument_sets_in_strict_turns_leave_the_latest_pack_where_it_is(
    ctx: StandInContext, launches: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the turn path promoted the other set at every second turn, even with a launch of the latest in
    # between, so two launches in three missed the fast path instead of one in two.
    swaps: list[Any] = []
    real_swap = packhistory.PackHistory.swap
    monkeypatch.setattr(packhistory.PackHistory, "swap", lambda self, *p: swaps.append(p) or real_swap(self, *p))
    fn, s = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A)
    a, c = StandInBuffer(N, context=ctx), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, a, a, N, stream=s)
    fn.launch(1, 32, a, c, c, N, stream=s)
    latest = fn._packed
    for _ in range(10):
        fn.launch(1, 32, c, a, a, N, stream=s)
        fn.launch(1, 32, a, c, c, N, stream=s)
    assert swaps == [] and fn._packed is latest and len(launches) == 22
    fn.launch(1, 32, c, a, a, N, stream=s)  # the other set twice running: it becomes the latest
    fn.launch(1, 32, c, a, a, N, stream=s)
    assert len(swaps) == 1 and fn._packed.same((c, a, a, N))
    # An export before each launch makes it record its stream again (a new record); the run still counts.
    for _ in range(2):
        _ = c.__cuda_array_interface__
        fn.launch(1, 32, a, c, c, N, stream=s)
    assert len(swaps) == 2 and fn._packed.same((a, c, c, N))


def test_an_export_makes_the_next_launch_record_again(
    ctx: StandInContext, launches: list[Any], driver: StandInDriver
) -> None:
    fn, s, t = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), stand_in_stream(ctx, STREAM_B)
    c = StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, c, c, N, stream=s)
    fn.launch(1, 32, c, c, c, N, stream=t)
    assert c.__cuda_array_interface__["stream"] == STREAM_B and driver.waits == [(STREAM_B, STREAM_A)]
    assert recorded(c.pending) == [t], "the export joined s into t, and forgot s"
    fn.launch(1, 32, c, c, c, N, stream=s)  # the pack saw s listed before the export: it must not trust that now
    assert recorded(c.pending) == [t, s] and c.__cuda_array_interface__["stream"] == STREAM_A


def test_a_synchronous_operation_makes_the_next_launch_record_again(ctx: StandInContext, launches: list[Any]) -> None:
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    bound = fn.bind(1, 32, c, c, c, N, stream=s)
    fn.launch(1, 32, c, c, c, N, stream=s)
    bound()
    c.pending.record(None)  # what a synchronous copy does: it waited for everything
    fn.launch(1, 32, c, c, c, N, stream=s)
    assert recorded(c.pending) == [s]
    c.pending.record(None)
    bound()
    assert recorded(c.pending) == [s]


def test_a_launch_while_a_waiter_waits_is_kept_by_it(ctx: StandInContext, launches: list[Any]) -> None:
    # The waiter's snapshot moves the count, so a launch after it records under the lock and renumbers its
    # entry: the waiter then forgets only what it waited for. (A launch that read the count before the
    # snapshot was queued before it, and the waiter's event covers it.)
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, c, c, N, stream=s)
    before = forgets.value
    snapshot = c.pending._begin()
    assert forgets.value != before
    fn.launch(1, 32, c, c, c, N, stream=s)
    c.pending._end(snapshot)
    assert recorded(c.pending) == [s], "the launch made during the wait is still pending"


def test_the_count_never_returns_to_a_value_it_held() -> None:
    p, held = PendingStream(), set()
    for _ in range(5):
        held.add(forgets.value)
        p.record(None)
    assert len(held) == 5 and forgets.value not in held


def test_a_capture_begun_after_a_launch_still_gets_the_next_launch(ctx: StandInContext, launches: list[Any]) -> None:
    # The pack saw s listed, then s began capturing: the next launch must hand its use to the graph, not skip.
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    bound = fn.bind(1, 32, c, c, c, N, stream=s)
    fn.launch(1, 32, c, c, c, N, stream=s)
    bound()
    kept: list[Any] = []
    s.capturing = SimpleNamespace(record_launch=lambda stream, fn, args: kept.append(args))
    fn.launch(1, 32, c, c, c, N, stream=s)
    bound()
    fn.launch(1, 32, c, c, c, N, stream=s)
    assert kept == [(c, c, c, N)] * 3, "every launch of the capture, not only the first"
    s.capturing = None
    c.pending.record(None)
    fn.launch(1, 32, c, c, c, N, stream=s)
    assert recorded(c.pending) == [s] and len(kept) == 3


def test_a_launch_without_buffers_in_a_capture_is_handed_to_the_graph(ctx: StandInContext, launches: list[Any]) -> None:
    fn, s = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A)
    fn.launch(1, 32, 1, 2, 3, N, stream=s)  # bare addresses: nothing to record, and the pack notes it
    kept: list[Any] = []
    s.capturing = SimpleNamespace(record_launch=lambda stream, fn, args: kept.append(args))
    fn.launch(1, 32, 1, 2, 3, N, stream=s)
    assert kept == [(1, 2, 3, N)]


# --- a close that lands while a launch or a bind is packing ---------------------------------------------------------
def close_while_packing(monkeypatch: pytest.MonkeyPatch, stream: Stream) -> None:
    """Make the next pack close ``stream`` after reading the arguments, as another thread's close() could."""
    real = kernelargs.identity_key

    def closing(args: tuple[Any, ...]) -> Any:
        key = real(args)
        monkeypatch.setattr(kernelargs, "identity_key", real)
        stream._closed = True  # what close() does to the object, and to the count
        closes.generation += 1
        return key

    monkeypatch.setattr(kernelargs, "identity_key", closing)


def test_a_stream_closed_while_a_launch_packs_is_refused_at_the_next_launch(
    ctx: StandInContext, launches: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the pack took the count read at its end, after the close, so the next launch trusted the
    # configuration cached before it -- and launched on the destroyed stream, with no ClosedError.
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, c, c, N, stream=s)
    close_while_packing(monkeypatch, s)
    fn.launch(1, 32, c, c, c, N + 1, stream=s)  # new arguments: packed, and the close lands meanwhile
    with pytest.raises(ClosedError):
        fn.launch(1, 32, c, c, c, N + 1, stream=s)
    assert len(launches) == 2


def test_a_stream_closed_while_binding_is_refused_at_the_next_call(
    ctx: StandInContext, launches: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    close_while_packing(monkeypatch, s)
    bound = fn.bind(1, 32, c, c, c, N, stream=s)
    with pytest.raises(ClosedError):
        bound()
    assert launches == []


def test_a_forked_child_cannot_export_the_parents_memory(ctx: StandInContext, launches: list[Any]) -> None:
    # Before: in a forked child the interface handed out the parent's address and stream handle, no error.
    fn, s, c = stand_in_function(ctx), stand_in_stream(ctx, STREAM_A), StandInBuffer(N, context=ctx)
    fn.launch(1, 32, c, c, c, N, stream=s)

    def forked() -> None:
        raise ForkedProcessError("<stand-in context> belongs to the parent process")

    ctx.check_usable = forked  # what the context registry's fork hook makes every use of it do in the child
    with pytest.raises(ForkedProcessError):
        c.__cuda_array_interface__  # noqa: B018 (the property is what is tested)
    with pytest.raises(ForkedProcessError):
        c.__dlpack__(stream=CONSUMER)


def test_a_warm_launch_refuses_the_grid_a_cold_one_refuses(ctx: StandInContext, launches: list[Any]) -> None:
    # Before: after a launch with grid 4, np.array([4]) compared equal (a one-element array is truthy) and was
    # launched, where a new kernel object refuses it with a TypeError naming the grid.
    fn, c = stand_in_function(ctx), StandInBuffer(N, context=ctx)
    fn.launch(4, 32, c, c, c, N)
    for grid in (np.array([4]), np.array([4, 1])):
        with pytest.raises(TypeError, match="grid must be an int or a tuple"):
            fn.launch(grid, 32, c, c, c, N)
    with pytest.raises(TypeError, match="block must be an int or a tuple"):
        fn.launch(4, np.array([32]), c, c, c, N)
    fn.launch(np.int64(4), 32, c, c, c, N)  # a numpy integer is a whole number, warm or cold
    assert len(launches) == 2
