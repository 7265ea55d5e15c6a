"""Core guard: one count that moves whenever a launch may no longer skip its bookkeeping.

A launch records its stream on its buffers' memory (:mod:`rawcuda.core.guards.pending`), and a launch on a
capturing stream hands what it uses to the graph. Both are needed only when something changed: the same
pack on the same stream again, with nothing forgotten and no capture begun since, has nothing to do. So each
pack remembers this count's value when it last did them, and a launch compares one integer.

docs/hazards.md, "Pending work"
"""

from __future__ import annotations

import itertools


class ForgetCount:
    """Counts the moments a launch's bookkeeping may have become stale.

    It moves when some PendingStream may have stopped listing a stream it listed: an entry forgotten (a
    synchronous operation, a finished stream swept) or a waiter's snapshot taken (after which a launch must
    renumber its entry, or the waiter forgets it). It moves when a stream starts being captured: a launch
    there must hand its function and arguments to the graph. Adding an entry, or moving one to the end, never
    moves it -- so two streams taking turns cost what one stream costs.
    """

    __slots__ = ("_numbers", "value")

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self.value = 0

    def move(self) -> None:
        """Take a value never held before.

        ``next()`` of a count is one step under the GIL; ``value += 1`` is a read and a write that two threads
        could interleave, losing a move that a pack would then miss.
        """
        self.value = next(self._numbers)


#: The one count, read by every launch after its driver call.
forgets = ForgetCount()
