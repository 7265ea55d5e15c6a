"""Ops: what an op found when it last checked its buffers, so that a call on the very same buffers skips the checks.

Why: an elementwise op's own checks (dtypes, sizes, overlap, the kernel's lookup, the grid) cost several times
the launch they guard (bench/results/2026-12-02-NVIDIA_H200.md, ops_vector_add against rawcuda_launch). Those
checks read only the buffers' shape, dtype, address and context, which a DeviceBuffer never changes. So the
very same buffers, with the same shape and dtype objects, and nothing closed anywhere since, pass them again.

The buffers are held weakly: remembering them must not keep their memory alive. Only plain DeviceBuffers are
remembered; a subclass (a managed, foreign or growable one) is checked at every call.
docs/hazards.md, "An elementwise op checks the very same buffers once".
"""

from __future__ import annotations

import weakref
from typing import Any

from rawcuda.core.closecounter import closes
from rawcuda.core.devicebuffer import DeviceBuffer

#: What an entry holds besides its buffers: the close count it was made at, and the op's findings.
_HEAD = 2


class LastCheck:
    """One op's last check: ``recall(*bufs)`` gives its findings again, or None when they must be made anew."""

    __slots__ = ("entry",)

    def __init__(self) -> None:
        # (close count, findings, (weak buffer, shape, dtype) per buffer): replaced whole, so that a thread
        # reading it never sees half of another's.
        self.entry: tuple[Any, ...] | None = None

    def recall(self, *bufs: Any) -> Any:
        """The findings of the last check if it was of these very buffers and nothing closed since; else None."""
        entry = self.entry
        if entry is None or entry[0] != closes.generation or len(entry) != _HEAD + len(bufs):
            return None
        at = _HEAD  # (an index, not zip(): this loop is most of what a call costs when nothing changed)
        for buf in bufs:
            ref, shape, dtype = entry[at]
            # `is`, not ==: a shape or dtype assigned anew is checked anew, whatever it equals.
            if ref() is not buf or buf.shape is not shape or buf.dtype is not dtype:
                return None
            at += 1
        return entry[1]

    def remember(self, generation: int, findings: Any, *bufs: Any) -> Any:
        """Keep ``findings`` of ``bufs``, checked from close count ``generation`` on; returns ``findings``.

        ``generation`` is read before the checks began: a close while they ran leaves the entry stale.
        """
        if all(type(buf) is DeviceBuffer for buf in bufs):
            self.entry = (generation, findings, *((weakref.ref(b), b.shape, b.dtype) for b in bufs))
        return findings
