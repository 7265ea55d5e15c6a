"""Core: the argument packs a Function made before its latest one, so that sets taking turns are packed once.

A ping-pong chain (``c <- a``, then ``a <- c``) or the two passes of a reduction launch one kernel with two
argument sets in turn. With only the latest pack kept, every such launch packed again (bench/fake/launch_fake.py,
launch3_ping_pong). Launch() checks the latest pack first, as before; only
when it does not match are these few looked at (docs/hazards.md, "Argument sets taking turns").
"""

from __future__ import annotations

from typing import Any

from .kernelargs import Packed

#: Argument sets remembered besides the latest one.
RECENT_PACKS = 4


class PackHistory:
    """The recent packs, newest first."""

    __slots__ = ("recent",)

    def __init__(self) -> None:
        self.recent: tuple[Packed, ...] = ()

    def clear(self) -> None:
        self.recent = ()

    def push(self, latest: Packed, generation: int) -> None:
        """``latest`` is being replaced by a new pack: remember it, unless a close has made it stale."""
        if latest.generation == generation:
            self.recent = (latest, *self.recent)[:RECENT_PACKS]

    def launch_on(
        self, sid: int, grid: Any, block: Any, shared_mem: int, args: tuple[Any, ...], generation: int
    ) -> tuple[tuple[Any, ...], Packed] | None:
        """A recent pack's launch record on stream ``sid`` for this configuration and these very arguments,
        checked as launch() checks the latest pack's; None if there is none."""
        for packed in self.recent:
            last = packed.launches.get(sid)
            try:
                again = (  # as launch() compares (function.py says why `is` first and `is True`)
                    last is not None
                    and (last[0] is grid or (last[0] == grid) is True)
                    and (last[1] is block or (last[1] == block) is True)
                    and (last[2] is shared_mem or (last[2] == shared_mem) is True)
                    and packed.generation == generation
                    and packed.same(args)
                )
            except Exception:  # (an array as the grid: the slow path says what is wrong)
                return None
            if again:
                return last, packed  # type: ignore[return-value]
        return None

    def recall(self, latest: Packed, args: tuple[Any, ...], generation: int) -> Packed | None:
        """A recent pack of these very arguments, made since the last close, swapped in for ``latest``; or None.

        The caller makes it its latest pack.
        """
        for packed in self.recent:
            if packed.generation == generation and packed.same(args):
                return self.swap(latest, packed)
        return None

    def swap(self, latest: Packed, packed: Packed) -> Packed:
        """``packed`` (a recent one) becomes the latest, which joins the recent ones; returns ``packed``.

        By identity, which is what a Packed compares by. Another thread may have changed
        the recent packs meanwhile; then only the latest is replaced.
        """
        recent = self.recent
        for i, p in enumerate(recent):
            if p is packed:
                self.recent = (latest, *recent[:i], *recent[i + 1 :])
                break
        return packed
