"""Core: a launch checked and packed once, repeated by calling it -- ``Function.bind``'s result.

For hot loops. A call compares one integer to see that nothing was closed since.
Then it calls the driver and records its stream on its buffers.
Another library's arrays and GrowableBuffers are read again at each call: their address can move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rawcuda.core.closecounter import closes
from rawcuda.core.context import SYNC_LAUNCHES
from rawcuda.core.guards.foreignorder import order_after
from rawcuda.core.guards.forgetcount import forgets
from rawcuda.core.guards.pending import record_on
from rawcuda.core.kernelargs import UNSEEN
from rawcuda.core.launchcall import launch_failed, launch_kernel
from rawcuda.core.streamargs import BorrowedStream, as_stream

REREAD = -1  # the close count a bound launch that reads its arguments again at every call compares with

if TYPE_CHECKING:
    from rawcuda.core.function import Function
    from rawcuda.core.stream import Stream


class BoundLaunch:
    """A launch with its configuration and arguments checked and packed once: ``launch()`` repeats it.

    Made by :meth:`Function.bind`. The object keeps its arguments alive.
    If anything was closed since it was bound (a buffer, the stream), the next call re-checks everything first.
    So a closed buffer is a ClosedError, never a launch on freed memory.
    """

    def __init__(
        self, fn: Function, grid: Any, block: Any, args: tuple[Any, ...], shared_mem: int, stream: Stream | None
    ) -> None:
        self.function = fn
        # Another library's stream is borrowed once, here: a bound launch keeps its handle, and its object alive.
        self._spec = (grid, block, shared_mem, as_stream(stream, fn.context))
        self._borrowed = type(self._spec[3]) is BorrowedStream  # its owner is asked again at every call
        self.args = args
        self._bind()

    def _bind(self) -> None:
        """Check and pack the configuration and the arguments, and build the driver call."""
        fn = self.function
        grid, block, shared_mem, stream = self._spec
        bound_at = closes.generation  # before anything is read: a close while binding makes the next call bind again
        prepared = fn.prepare(grid, block, shared_mem, stream)
        packed = fn.pack(self.args)
        self._call = (*prepared, packed.array, None)  # every driver argument, as ctypes objects
        self._as_launch = (grid, block, shared_mem, prepared, UNSEEN, self._call)  # the Function's last_launch then
        self._packed = packed  # keeps the slots the array points into alive
        self._reread = not packed.key and bool(self.args)  # not reusable: bytes or another library's array
        self._bound_at = bound_at
        # What a call compares with the close count. A pack read again at every call never matches, so that one
        # comparison is all a call pays for that case too.
        self._generation = REREAD if self._reread or self._borrowed else self._bound_at
        self._target = fn.legacy if stream is None else stream  # where its buffers' work is pending
        self._context = fn.context
        self._ref = fn.ref
        self._seen = UNSEEN  # as a pack's record: forgets.value when its buffers' memory all listed its stream

    def _refresh(self) -> None:
        """Before a call: bind again if anything closed; read a foreign array again; wait for its stream."""
        self.function.check_open()  # first: a closed module says which kernel, and to load it again
        self._context.check_usable()  # a call skips it: an unusable context moved the close count
        if self._borrowed:
            self._spec[3].check_owner()  # another library's stream it closed: refused, not launched on
        if self._bound_at != closes.generation:
            self._bind()
        elif self._reread:  # a foreign array: its address and stream are read again at every launch
            packed = self._packed = self.function.pack(self.args)  # (the configuration stays as prepared)
            self._call = (*self._call[:-2], packed.array, None)
            self._seen = UNSEEN
        if self._packed.waits:  # (only a foreign array's pack has any: a reread one)
            self._context.activate()
            order_after(self._packed.waits, self._spec[3], self._context)

    def __call__(self) -> None:
        """Launch again; re-check first if anything was closed since."""
        if self._generation != closes.generation:  # (it also moves when the context becomes unusable)
            self._refresh()
        rc = launch_kernel.call(*self._call)
        if rc:
            launch_failed(rc, self._context, self._call)
        self._context.last_launch_ref = self._ref
        self.function.last_launch = self._as_launch
        if self._seen != forgets.value:  # as in Function.launch: nothing to record most of the time
            self._record()
        if SYNC_LAUNCHES:
            self._context.synchronize()

    def _record(self) -> None:
        """As ``Function._record``: the stream recorded on the buffers' memory, or the use handed to the graph."""
        count = forgets.value
        target = self._target
        if target.capturing is not None:  # a replay runs it: the graph holds what it uses
            target.capturing.record_launch(target, self.function, self.args)
            return
        if self._packed.pending:
            count = record_on(self._packed.pending, target)
        self._seen = count

    def update(self, *args: Any) -> None:
        """New arguments for the same configuration, checked and packed now.

        If they are refused, the launch keeps its old arguments, and keeps them alive.
        """
        # Why: docs/hazards.md, "A refused update keeps the old arguments alive".
        old = self.args
        self.args = args
        try:
            self._bind()
        except BaseException:
            self.args = old
            raise
