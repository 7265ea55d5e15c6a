"""Core: the one driver call every launch makes, ``cuLaunchKernelEx``, and what happens when it fails.

The row is bound without argtypes (a hot slot), so a launch costs close to a bare ctypes call.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rawcuda import checked
from rawcuda.core.guards.current import WRONG_CONTEXT_CODES, make_current

# The argtypes-free binding of cuLaunchKernelEx used by every launch path (bound at the first launch; a
# slot rather than the function itself, so that tracing can swap a traced wrapper in and out).
LAUNCH_ROW = "cuLaunchKernelEx"


launch_kernel = checked.hot_slot(LAUNCH_ROW)


def launch_failed(rc: int, ctx: Any, call: tuple[Any, ...]) -> None:
    """After a launch returned ``rc``: launch again if the thread's current context was the wrong one, else
    raise. Why retry rather than check first? The check costs a driver call on every launch; the driver
    refuses a launch in the wrong context without running anything (core.guards.current), so the rare case pays."""
    if rc in WRONG_CONTEXT_CODES:
        ctx.activate()
        rc = launch_kernel.call(*call)
        if not rc:
            return
    with contextlib.suppress(Exception):  # the error's observers look at the current context to poison it
        make_current(ctx.raw_handle)
    checked.raise_for(rc, LAUNCH_ROW, call)
