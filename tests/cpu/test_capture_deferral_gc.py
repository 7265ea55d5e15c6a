"""The capture deferral's lock must let a finalizer that the GC runs under it reach it again.

An allocation while the deferral's lock is held (a list growing in begin(), end() or defer()) may run the
cyclic GC, and a collected rawcuda object's finalizer calls ``defer()`` on the same thread. With a plain
lock that was a deadlock: on the H200 a loop of captures that made cyclic garbage hung in ``defer``.
"""

from __future__ import annotations

import gc
import threading
from types import SimpleNamespace
from typing import Any

from rawcuda.core.guards.capturedeferral import EVERYWHERE, CaptureDeferral

WAIT_S = 5.0


class Cycle:
    """Garbage only the cyclic GC frees; its finalizer reaches the deferral, as a rawcuda child's does."""

    def __init__(self, deferral: CaptureDeferral, queued: list[bool]) -> None:
        self.me = self
        self.deferral, self.queued = deferral, queued

    def __del__(self) -> None:
        # A context nothing may call into: the queued release, run at the capture's end, does nothing.
        self.queued.append(self.deferral.defer(SimpleNamespace(usable=False), print, ()))  # type: ignore[arg-type]


class CollectingList(list):
    """The deferral's list of hazards, made to run the GC where the list grows: as an allocation may."""

    def extend(self, items: Any) -> None:
        gc.collect()
        super().extend(items)


def test_a_finalizer_run_by_the_gc_inside_the_deferral_does_not_deadlock() -> None:
    deferral, queued = CaptureDeferral(), []
    deferral._hazards = CollectingList()  # (the GC running inside begin()'s locked section, made certain)
    finished = threading.Event()

    def capture_loop() -> None:
        for _ in range(3):
            Cycle(deferral, queued)  # garbage the next collection finds
            deferral.begin((EVERYWHERE,))
            deferral.end((EVERYWHERE,))
        finished.set()

    worker = threading.Thread(target=capture_loop, daemon=True)  # daemon: a deadlock must not hang pytest
    worker.start()
    assert finished.wait(WAIT_S), "begin() deadlocked on a finalizer that called defer() under its lock"
    assert queued == [True, True, True] and deferral.open_captures == 0
