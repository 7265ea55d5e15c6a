"""Protocols: memory lent to another library -- why ``close()`` may free later than it is called.

``torch.from_dlpack(buf)`` gives torch a tensor over rawcuda's memory, and DLPack promises torch that the
memory stays until torch calls the deleter. Yet ``buf.close()`` -- or ``ctx.close()``, or a ``with`` block
ending -- frees it *now*: torch would read freed memory, and a later allocation could land under its
tensor. So an export is a **loan**: while one is out, closing the buffer makes it unusable to rawcuda at once
(``ClosedError``), but the ``cuMemFree`` waits for the last loan to end; the *context* is held the same way
(``Context.hold``), since destroying it would free the memory too. The same rule as pinned memory's numpy
views (rawcuda.core.pinned), for memory no numpy view can hold.

A loan may end on any thread (a consumer calls the deleter where it likes) and at the same moment as the
``close()`` on another: each step below is one atomic operation on a set or a list, so that exactly one of
the two frees, and exactly once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any


class Loan:
    """One outside holder's claim on some memory. :meth:`end` gives it back: the first call does, later ones
    (from any thread) do nothing."""

    __slots__ = ("_end",)

    def __init__(self, end: Callable[[], None]) -> None:
        self._end = [end]  # a list, so that taking the callable out is one atomic pop

    def end(self) -> None:
        try:
            end = self._end.pop()
        except IndexError:
            return  # ended already
        end()

    @property
    def ended(self) -> bool:
        return not self._end


class Loans:
    """The loans out on one allocation, and the release that waits for them.

    ``context`` is duck-typed (``hold()``, ``call_held(fn, *args)``: rawcuda.core.context.Context), so that the
    bookkeeping can be tested without a GPU.
    """

    __slots__ = ("_counter", "_deferred", "_out")

    def __init__(self) -> None:
        self._out: set[int] = set()
        self._deferred: list[Callable[[], None]] = []
        self._counter = itertools.count()

    @property
    def outstanding(self) -> int:
        """How many loans have not ended yet."""
        return len(self._out)

    def lend(self, context: Any) -> Loan:
        """A new loan: the context is held (it cannot be destroyed) until the loan ends."""
        context.hold()
        token = next(self._counter)
        self._out.add(token)
        # The end runs inside the context, pushed and popped (call_held), and drops the hold after.
        return Loan(lambda: context.call_held(self._give_back, token))

    def _give_back(self, token: int) -> None:
        self._out.discard(token)
        self._settle()

    def defer(self, release: Callable[[], None]) -> bool:
        """Called by ``close()``: True when loans are out and ``release`` will run when the last one ends;
        False when none is out (the caller releases now itself)."""
        if not self._out:
            return False
        self._deferred.append(release)
        self._settle()  # the last loan may have ended between the check and the append
        return True

    def release_after(self, context: Any, release: Callable[..., None], args: tuple[Any, ...]) -> None:
        """``release(*args)`` when the last loan ends -- or now, if none is out any more -- inside ``context``,
        which is held until then (also past its close())."""
        context.hold()
        if not self.defer(lambda: context.call_held(release, *args)):
            context.call_held(release, *args)

    def _settle(self) -> None:
        if self._out:
            return
        try:
            release = self._deferred.pop()  # whoever pops it (a closing thread, an ending loan) releases
        except IndexError:
            return
        release()


__all__ = ["Loan", "Loans"]
