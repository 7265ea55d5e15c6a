"""One object per allocation (rawcuda.core.allocation), on the CPU: a view shares its base's state, never a copy.

The memory's state -- the pending record, the loans, the views that close with it, its DLPack device type -- is
one :class:`~rawcuda.core.allocation.Allocation`, created by the owner and held by every view. Here without a
driver: real buffers over an address nobody allocated (through the hooks ForeignBuffer uses) and a stand-in
context that notes what would be freed. On a GPU: tests/gpu/test_devicebuffer.py, test_dlpack.py, test_growable.py.
"""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rawcuda.core import resource
from rawcuda.core.allocation import Allocation
from rawcuda.core.context import Context
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.guards.pending import PendingStream
from rawcuda.core.kernelargs import ArgPacker
from rawcuda.core.paramspec import ParamSpec
from rawcuda.extras.foreign import ForeignBuffer
from rawcuda.extras.growable import _MappedView
from rawcuda.extras.managed import ManagedBuffer
from rawcuda.protocols.dlpackabi import DLDeviceType
from rawcuda.protocols.loans import Loan

ADDRESS = 0x7F00_0000_0000  # where the stand-in buffers "are" (nothing reads it)
N = 8
POINTER = ParamSpec("int", 8, "u64")
FREED: list[int] = []  # the addresses the stand-in buffers "freed"


class StandInContext(Context):
    """What a buffer, its close() and its loans read of a Context -- no driver behind it.

    A Context subclass, because a ``context`` argument must be one; the class attributes shadow the properties
    that would read a driver handle.
    """

    usable = True
    unusable = None  # (an export asks check_usable() first: a forked child's memory is the parent's)
    raw_handle = 0xC000

    def __init__(self) -> None:
        self.holds = 0

    def activate(self) -> None:
        pass

    def adopt(self, child: Any) -> None:
        pass

    def forget(self, child: Any) -> None:
        pass

    def hold(self) -> None:
        self.holds += 1

    def call_held(self, fn: Any, *args: Any) -> None:
        fn(*args)
        self.holds -= 1

    def __repr__(self) -> str:
        return "<stand-in context>"


class StandInBuffer(DeviceBuffer):
    """A real DeviceBuffer over an address nobody allocated; its "free" is noted in FREED."""

    def _allocate(self, ctx: Any, nbytes: int) -> int:
        return ADDRESS

    def _take_ownership(self, ptr: int) -> None:
        self._own(FREED.append, ptr)


class StandInManaged(ManagedBuffer):
    """A real ManagedBuffer (its kind, its host wait) over an address nobody allocated, with no host view."""

    def _allocate(self, ctx: Any, nbytes: int) -> int:
        return ADDRESS

    def _take_ownership(self, ptr: int) -> None:
        pass


class Marker:
    """A stream as PendingStream sees one: weakly referenced, ``closed``, ``handle``, ``capturing``."""

    closed = False
    capturing = None

    def __init__(self) -> None:
        self.handle = id(self)


@pytest.fixture(autouse=True)
def releases_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collected stand-in is released by its stand-in release only, never through the driver.

    The real fallback pushes the buffer's context first. The stand-in context's handle is made up: on a GPU host
    a real driver would take the push and crash the process. An adopted buffer's release would synchronize.
    """

    def release_stand_ins(context: Any, release: Any, *args: Any) -> None:
        if release == FREED.append:
            release(*args)

    monkeypatch.setattr(resource, "finalize_child", release_stand_ins)


@pytest.fixture
def ctx() -> StandInContext:
    return StandInContext()


@pytest.fixture
def freed() -> Iterator[list[int]]:
    FREED.clear()
    yield FREED


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Reference counting alone: what the cyclic collector would free does not count."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_view_and_a_view_of_a_view_share_their_base_s_allocation(ctx: StandInContext) -> None:
    a = StandInBuffer(N, context=ctx)
    view = a.view(2)
    inner, rows = view.view(1, 3), a[1:4]
    shared = a.allocation
    assert isinstance(shared, Allocation)
    assert view.allocation is shared and inner.allocation is shared and rows.allocation is shared
    for buf in (a, view, inner, rows):
        assert buf.pending is shared.pending and buf.loans is shared.loans
        assert buf.dlpack_device_type == shared.kind == DLDeviceType.CUDA
    assert set(shared.views) == {view, inner, rows}, "a view of a view is its base's view, not its parent's"
    assert StandInBuffer(N, context=ctx).allocation is not shared, "another allocation, another state"


def test_work_recorded_through_a_view_is_seen_through_the_base(ctx: StandInContext) -> None:
    a = StandInBuffer(N, context=ctx)
    inner = a.view(2).view(1)
    # A launch records its stream on what the pack lists: for a view of a view, the base's record.
    assert ArgPacker("k", [POINTER], ctx).pack((inner,)).pending == (a.allocation.pending,)
    stream = Marker()
    inner.pending.record(stream)  # what a launch or an async copy through the view does
    assert a.allocation.pending.last() is stream
    assert a.__cuda_array_interface__["stream"] == stream.handle, "the base's consumer must wait for it"


def test_the_views_set_is_weak(ctx: StandInContext, no_gc: None) -> None:
    a = StandInBuffer(N, context=ctx)
    view = a.view(2)
    inner = view.view(1)
    gone = weakref.ref(view), weakref.ref(inner)
    assert len(a.allocation.views) == 2
    del view, inner
    assert gone[0]() is None and gone[1]() is None, "the allocation must not keep a view alive"
    assert len(a.allocation.views) == 0, "a dropped view leaves the set"
    base = weakref.ref(a)
    del a
    assert base() is None, "no cycle: the base goes with its last holder, before any cyclic GC"


def test_closing_the_base_closes_every_view_and_a_view_closes_only_itself(ctx: StandInContext) -> None:
    a = StandInBuffer(N, context=ctx)
    view = a.view(2)
    inner, sibling = view.view(1), a[0:2]
    view.close()
    assert view.closed and not inner.closed and not sibling.closed and not a.closed
    assert set(a.allocation.views) == {view, inner, sibling}
    a.close()
    assert inner.closed and sibling.closed and a.closed
    assert len(a.allocation.views) == 0


def test_a_loan_through_a_view_delays_the_base_s_free(ctx: StandInContext, freed: list[int]) -> None:
    a = StandInBuffer(N, context=ctx)
    inner = a.view(2).view(1)
    loan = inner.lend()
    assert a.allocation.loans.outstanding == 1, "a view lends its base's memory"
    a.close()
    assert a.closed and inner.closed and freed == [], "freed only after the last loan ends"
    loan.end()
    assert freed == [ADDRESS] and ctx.holds == 0


def test_a_view_of_managed_memory_is_managed_memory(ctx: StandInContext) -> None:
    m = StandInManaged(N, context=ctx)
    view = m.view(2)
    assert view.allocation is m.allocation and m.allocation.kind == DLDeviceType.CUDA_MANAGED
    assert type(view) is DeviceBuffer and view.__dlpack_device__() == (DLDeviceType.CUDA_MANAGED, 0)
    assert view.dlpack_host_wait() == m.dlpack_host_wait(), "the host waits as for the base"
    assert isinstance(view.lend(), Loan)


def test_an_adopted_array_s_views_share_its_allocation(ctx: StandInContext) -> None:
    ended: list[str] = []
    adopted = ForeignBuffer(ADDRESS, (N,), np.float32, ctx, Loan(functools.partial(ended.append, "claim")), None)
    view = adopted.view(4)
    assert view.allocation is adopted.allocation and view.pending is adopted.pending
    loan = view.lend()
    assert adopted.allocation.loans.outstanding == 1
    loan.end()
    assert adopted.allocation.loans.outstanding == 0 and ended == []


def test_a_growable_buffer_s_views_share_its_record_and_not_each_other_s_views(ctx: StandInContext) -> None:
    grower = SimpleNamespace(context=ctx, pending=PendingStream())  # what a mapped view reads of its GrowableBuffer
    first, second = _MappedView(grower, ADDRESS, N, np.float32), _MappedView(grower, ADDRESS, 2 * N, np.float32)
    rows = first[1:3]
    assert first.allocation.pending is grower.pending and second.allocation.pending is grower.pending
    assert rows.allocation is first.allocation and second.allocation is not first.allocation
    with pytest.raises(BufferError, match="cannot be exported with DLPack"):
        rows.lend()  # the mapped view refuses for its slices too
    first.close()
    assert rows.closed and not second.closed, "closing an old view leaves the current one open"
