"""The launch fast path taken apart: the same steps as ``Function.launch``, added one at a time.

Why? To say where a launch's host time goes. Each method below is the one before it plus one step of
``rawcuda.core.function.Function.launch`` (docs/architecture.md, "The launch path"), on a pack and a
configuration prepared through the Function's public ``prepare`` and ``pack``. The time one step adds is the
difference between neighbours, measured in the same rounds (bench/fake/launch_fake.py).

    signature      a method with launch's signature that only makes the driver call: any Python API's floor
    config         + the pack's last launch on this stream looked up (one dict lookup by id) and its
                   configuration compared
    arguments      + the close count compared and the identity check of the arguments (a generated lambda)
    context        + the two notes a launch leaves (the context's last launch, the Function's last record);
                   the usable check costs nothing here: an unusable context moves the close count
    record         + the one integer compared that stands for the pending-work record: the whole fast path

Each method repeats the one before it on purpose: a shared helper would add a call to every step, and the
call is part of what is measured.
"""

from __future__ import annotations

from typing import Any

from rawcuda.core.closecounter import closes
from rawcuda.core.guards.forgetcount import forgets
from rawcuda.core.launchcall import launch_kernel

BLOCK = 256


class Anatomy:
    """The state a Function's fast path reads, prepared once for one configuration and one set of arguments."""

    def __init__(self, fn: Any, stream: Any, args: tuple[Any, ...]) -> None:
        prepared = fn.prepare(1, BLOCK, 0, stream)
        self.packed = fn.pack(args)
        call = (*prepared, self.packed.array, None)
        self.packed.launches[id(stream)] = (1, BLOCK, 0, prepared, forgets.value, call)  # as a first launch leaves it
        self.only = call
        self.context = fn.context
        self.ref = fn.ref
        self.last_launch: Any = None
        launch_kernel.call(*call)  # binds the slot

    def signature(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        launch_kernel.call(*self.only)

    def config(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        packed = self.packed
        last = packed.launches[id(stream)]
        if not (
            (last[0] is grid or (last[0] == grid) is True)
            and (last[1] is block or (last[1] == block) is True)
            and (last[2] is shared_mem or (last[2] == shared_mem) is True)
        ):
            raise RuntimeError("the anatomy's configuration does not match")
        launch_kernel.call(*last[5])

    def arguments(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        packed = self.packed
        last = packed.launches[id(stream)]
        if not (
            (last[0] is grid or (last[0] == grid) is True)
            and (last[1] is block or (last[1] == block) is True)
            and (last[2] is shared_mem or (last[2] == shared_mem) is True)
            and packed.generation == closes.generation
            and packed.same(args)
        ):
            raise RuntimeError("the anatomy's pack no longer matches: something was closed")
        launch_kernel.call(*last[5])

    def context_notes(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        packed = self.packed
        last = packed.launches[id(stream)]
        if not (
            (last[0] is grid or (last[0] == grid) is True)
            and (last[1] is block or (last[1] == block) is True)
            and (last[2] is shared_mem or (last[2] == shared_mem) is True)
            and packed.generation == closes.generation
            and packed.same(args)
        ):
            raise RuntimeError("the anatomy's pack no longer matches: something was closed")
        rc = launch_kernel.call(*last[5])
        if rc:
            raise RuntimeError(f"launch failed: {rc}")
        self.context.last_launch_ref = self.ref
        self.last_launch = last

    def record(self, grid: Any, block: Any, *args: Any, shared_mem: int = 0, stream: Any = None) -> None:
        packed = self.packed
        last = packed.launches[id(stream)]
        if not (
            (last[0] is grid or (last[0] == grid) is True)
            and (last[1] is block or (last[1] == block) is True)
            and (last[2] is shared_mem or (last[2] == shared_mem) is True)
            and packed.generation == closes.generation
            and packed.same(args)
        ):
            raise RuntimeError("the anatomy's pack no longer matches: something was closed")
        rc = launch_kernel.call(*last[5])
        if rc:
            raise RuntimeError(f"launch failed: {rc}")
        self.context.last_launch_ref = self.ref
        self.last_launch = last
        if last[4] != forgets.value:  # an export measured before moved it: seen again
            packed.launches[id(stream)] = (*last[:4], forgets.value, last[5])


#: The steps in order, each one the one before plus one step of the fast path.
STEPS = ("signature", "config", "arguments", "context_notes", "record")
