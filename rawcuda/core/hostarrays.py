"""Core: the host side of a copy -- a numpy array, or the numpy view of a PinnedBuffer or a ManagedBuffer.

A copy takes host memory in these forms and no other. Device memory offered as host memory is refused with
a TypeError that says how to wrap or copy it, as is anything else.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def host_array(obj: Any, action: str) -> np.ndarray:
    """``obj`` as the numpy array a copy reads or writes; a TypeError naming ``action`` for anything else."""
    if isinstance(obj, np.ndarray):
        return obj
    array = getattr(obj, "array", None)  # PinnedBuffer / ManagedBuffer expose their host view here
    if isinstance(array, np.ndarray):
        return array
    if hasattr(obj, "__cuda_array_interface__"):
        raise TypeError(f"{action}: {type(obj).__name__} is device memory; wrap it or copy it to the host first")
    raise TypeError(f"{action} takes a numpy array, a PinnedBuffer or a DeviceBuffer, not {type(obj).__name__}")


__all__ = ["host_array"]
