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

#: What an entry holds besides its buffers: the close count it was made at, the kernel (weakly), the findings.
_HEAD = 3


class LastCheck:
    """One op's last check: ``recall(*bufs)`` gives its kernel and findings again, or None when they must be
    made anew."""

    __slots__ = ("entry",)

    def __init__(self) -> None:
        # (close count, weak kernel or None, findings, (weak buffer, shape, dtype) per buffer): replaced whole, so
        # that a thread reading it never sees half of another's.
        self.entry: tuple[Any, ...] | None = None

    def recall(self, *bufs: Any) -> tuple[Any, tuple[Any, ...]] | None:
        """(kernel, findings) of the last check if it was of these very buffers, its kernel is alive and nothing
        closed since; else None."""
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
        kernel = entry[1]
        if kernel is not None:
            kernel = kernel()
            if kernel is None:  # its module went with its context: look it up again
                return None
        return kernel, entry[2]

    def remember(self, generation: int, kernel: Any, findings: tuple[Any, ...], *bufs: Any) -> tuple[Any, Any]:
        """Keep ``kernel`` (weakly: it holds its context) and ``findings`` of ``bufs``, checked from close count
        ``generation`` on; returns ``(kernel, findings)``.

        ``generation`` is read before the checks began: a close while they ran leaves the entry stale. A buffer
        whose shape is not a tuple (a list assigned by hand could change in place) is not remembered.
        """
        if all(type(buf) is DeviceBuffer and type(buf.shape) is tuple for buf in bufs):
            ref = None if kernel is None else weakref.ref(kernel)
            self.entry = (generation, ref, findings, *((weakref.ref(b), b.shape, b.dtype) for b in bufs))
        return kernel, findings
