"""Core: the state of one allocation, one object shared by its owner and every view of it.

A view is another DeviceBuffer over the same memory. Some state belongs to the memory, not to one buffer:
the streams whose work may still be pending on it, and the loans that delay its free. So do the views that
close with it, and its DLPack device type. The owner creates that state once. Every view holds the same
object, and nothing is copied. So work recorded through one view is seen through all of them.
"""

from __future__ import annotations

import weakref
from typing import Any

from rawcuda.protocols.dlpackabi import DLDeviceType
from rawcuda.protocols.loans import Loans


class Allocation:
    """What some memory's owner and all its views share: ``pending``, ``loans``, ``views`` and ``kind``."""

    __slots__ = ("kind", "loans", "pending", "views")

    def __init__(self, pending: Any, kind: DLDeviceType) -> None:
        """``pending`` is the owner's PendingStream, ``kind`` the memory's DLPack device type.

        The owner passes its record in. Each view a GrowableBuffer hands out gets its own Allocation, all
        over the grower's one record.
        """
        # Typed Any: PendingStream is in core/guards/, which this file does not import (docs/architecture.md,
        # "The guard seam").
        self.pending = pending  # the streams whose work may still touch this memory
        self.loans = Loans()  # the exports still held outside: the memory is freed after the last one ends
        # Weak: a view holds its base, so a strong set would make a cycle that only the cyclic GC frees.
        # Why: docs/hazards.md, "A base holds its views weakly".
        self.views: weakref.WeakSet[Any] = weakref.WeakSet()
        self.kind = kind  # a view of managed memory is managed memory


__all__ = ["Allocation"]
