"""Core: the one driver call every launch makes, ``cuLaunchKernelEx``, and what happens when it fails.

Why the Ex form and not ``cuLaunchKernel``? Both end in the same driver code.
But ``cuLaunchKernel`` takes 11 arguments, and ctypes converts each one on every call.
``cuLaunchKernelEx`` takes 4: a ``CUlaunchConfig`` (grid, block, shared memory, stream) built once per
configuration, the function, ``kernelParams`` and ``extra``.
The row is bound without argtypes (a hot slot), so a launch costs close to a bare ctypes call.
The figures: docs/hazards.md, "Why launches call cuLaunchKernelEx".
"""

from __future__ import annotations

import contextlib
from typing import Any

from rawcuda import checked
from rawcuda.core.guards.current import WRONG_CONTEXT_CODES, make_current

LAUNCH_ROW = "cuLaunchKernelEx"  # the table row every launch path calls

# The argtypes-free binding of that row, bound at the first launch.
# A slot rather than the function itself, so that tracing can swap a traced wrapper in and out.
launch_kernel = checked.hot_slot(LAUNCH_ROW)


def launch_failed(rc: int, ctx: Any, call: tuple[Any, ...]) -> None:
    """Handle a failed launch: ``rc`` is its result, ``call`` its driver arguments, ``ctx`` its context.

    If the thread's current context was the wrong one, make ``ctx`` current and launch once more.
    Anything else, or a second failure, raises the error that ``cu.cuLaunchKernelEx`` would raise.
    """
    # Why: docs/hazards.md, "A launch in the wrong context is retried once".
    if rc in WRONG_CONTEXT_CODES:
        ctx.activate()
        rc = launch_kernel.call(*call)
        if not rc:
            return
    with contextlib.suppress(Exception):  # the error's observers look at the current context to poison it
        make_current(ctx.raw_handle)
    checked.raise_for(rc, LAUNCH_ROW, call)
