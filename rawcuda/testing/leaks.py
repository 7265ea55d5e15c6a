"""Testing: did this code leave rawcuda objects open, or device memory allocated? -- the leak check.

``with LeakCheck(): run_my_kernel()`` (or, under pytest, ``@pytest.mark.no_leaks``) raises AssertionError
listing every rawcuda object the code left open -- type, size, repr, and the line that allocated it -- and
says so when the device's free memory fell by more than a tolerance although no object was left open.

Two measures, because each misses what the other sees:

* **Open objects** -- exact. rawcuda already keeps weak sets of every live Context (contextregistry) and of
  each one's open children (``Context.children``), so :func:`open_objects` costs nothing until asked. An
  object counts when it was opened during the check and is still open at its end. Objects rawcuda keeps for
  itself until the context closes (``Resource.internal``: rawcuda.ops' modules, rawcuda.extras.aio's wait streams)
  do not count; nor does anything passed to :meth:`LeakCheck.ignore`.
* **Free device memory** (``cuMemGetInfo``, after synchronizing) -- coarse, but it sees memory that no rawcuda
  object owns: raw ``cu.cuMemAlloc`` calls, another library's allocations. It needs a tolerance:
  the driver hands out memory in pages (2 MiB for cuMemAlloc), so one small buffer moves it by 0 or 2 MiB,
  and the driver itself allocates on first use and keeps it -- a kernel's code when the kernel is first
  looked up or launched (lazy loading, the default on Linux since CUDA 12.2), local memory when a kernel
  needs a bigger stack.
  Those are not leaks, but look exactly like one the first time. Warm such kernels up before the check (a
  fixture that launches them once), or raise ``memory_tolerance``. Free memory is the device's: another
  process allocating meanwhile shows here too.

**The cyclic garbage collector is off during the check.** A dropped object is then freed at once by
reference counting -- its finalizer frees the memory -- *unless* a reference cycle holds it. Then it keeps
its device memory until some later collection, at a moment nobody chose: that counts as a leak, and with
the collector off it is seen every time, not only when a collection happens not to run. Close objects (or
use ``with``) and the question never arises. (A DLPack capsule dropped unconsumed is no leak: the check
sweeps rawcuda.protocols.dlpack's registry before it counts, as a collection would.)

Where each leaked object was allocated comes from :mod:`tracemalloc`, started for the check
(``trace_allocations=False`` turns it off: it slows Python's allocations while it runs). Python 3.11's
tracemalloc cannot place an object whose attributes live inside it (``get_object_traceback`` answers None;
3.10 and 3.12 answer): there the report leaves the line out.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
import weakref
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rawcuda.core.context import Context, default_context
from rawcuda.core.guards import contextregistry
from rawcuda.protocols.dlpack import sweep as sweep_dropped_exports

MIB = 1 << 20
#: Allowed fall in free device memory: four of cuMemAlloc's 2 MiB pages -- what the driver may keep after the
#: first module load and launch in a context (its code heap, its pools) and a pool keeps after frees. A leaked
#: rawcuda object is caught by the object count whatever its size; this bounds only memory nobody owns.
DEFAULT_MEMORY_TOLERANCE = 8 * MIB
#: Frames tracemalloc keeps per allocation: enough to climb out of rawcuda to the caller's line.
ALLOCATION_FRAMES = 16
#: rawcuda/ (every folder of the package): frames in it are rawcuda's, not the caller's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def open_objects(*, include_internal: bool = False) -> list[Any]:
    """Every open rawcuda object of this process: each open Context, then its open children.

    ``include_internal`` adds what rawcuda keeps for itself until the context closes (``Resource.internal``).
    """
    found: list[Any] = []
    for context in contextregistry.live_contexts():
        found.append(context)
        found.extend(c for c in context.children if include_internal or not getattr(c, "internal", False))
    return found


@dataclass(frozen=True)
class Leak:
    """One object left open: what it is, how many bytes it holds (None if it holds none), where it was made."""

    kind: str
    text: str
    nbytes: int | None
    allocated_at: str | None

    def describe(self) -> str:
        size = "" if self.nbytes is None else f", {_mib(self.nbytes)}"
        where = "" if self.allocated_at is None else f", allocated at {self.allocated_at}"
        return f"{self.kind}{size}: {self.text}{where}"


@dataclass
class LeakReport:
    """What a check found; false (``bool(report)``) when nothing leaked."""

    leaks: list[Leak] = field(default_factory=list)
    memory_drop: int = 0  # bytes by which the device's free memory fell (negative: it rose)
    memory_tolerance: int = DEFAULT_MEMORY_TOLERANCE

    @property
    def memory_leaked(self) -> bool:
        return self.memory_drop > self.memory_tolerance

    def __bool__(self) -> bool:
        return bool(self.leaks) or self.memory_leaked

    @property
    def message(self) -> str:
        """The AssertionError's text (empty when nothing leaked)."""
        if not self:
            return ""
        fell = f"device free memory fell by {_mib(self.memory_drop)} (tolerance {_mib(self.memory_tolerance)})"
        if not self.leaks:
            return (
                f"rawcuda leak check: {fell}, and no rawcuda object was left open. Memory allocated outside "
                "rawcuda (a raw cu.cuMemAlloc, another library's allocator) -- or by the driver on first use: "
                "a kernel's code when first used (lazy loading) or local memory for its stack. Warm such "
                "kernels up before the test, or raise the tolerance: @pytest.mark.no_leaks(memory_tolerance=N)"
            )
        also = f"; {fell}" if self.memory_leaked else ""
        lines = [f"rawcuda leak check: {len(self.leaks)} object(s) left open{also}"]
        lines += [f"  {leak.describe()}" for leak in self.leaks]
        lines.append(
            "close them (or use `with`). The check runs with the cyclic garbage collector off: an object dropped "
            "without close() is freed at once, unless a reference cycle keeps it -- then it keeps its memory "
            "until some later collection, and counts as left open."
        )
        return "\n".join(lines)


class LeakCheck:
    """Measure open rawcuda objects and free device memory around some code; report what stayed.

    ``context``: where free memory is measured (the default context when None; it is made first, so its
    own creation is not counted). Use as ``with LeakCheck(): ...`` (AssertionError on a leak, unless the
    block raised), or call :meth:`start` and :meth:`stop` (which returns the :class:`LeakReport`).
    """

    def __init__(
        self,
        context: Context | None = None,
        *,
        memory_tolerance: int = DEFAULT_MEMORY_TOLERANCE,
        trace_allocations: bool = True,
    ) -> None:
        if isinstance(memory_tolerance, bool) or not isinstance(memory_tolerance, int) or memory_tolerance < 0:
            raise ValueError(f"memory_tolerance is a number of bytes, 0 or more, not {memory_tolerance!r}")
        self.context = context
        self.memory_tolerance = memory_tolerance
        self.trace_allocations = trace_allocations
        self._ignored: weakref.WeakSet[Any] = weakref.WeakSet()
        self._before: weakref.WeakSet[Any] = weakref.WeakSet()
        self._free_before = 0
        self._gc_was_enabled = False
        self._tracing = False  # True when this check started tracemalloc (and so must stop it)
        self._running = False

    def ignore(self, obj: Any) -> Any:
        """Do not count ``obj`` (something the code keeps on purpose, e.g. a module cached for later); returns it."""
        self._ignored.add(obj)
        return obj

    def start(self) -> None:
        """Collect garbage, measure, then turn the cyclic collector off (and start tracemalloc)."""
        if self._running:
            raise RuntimeError("this LeakCheck is already running; stop() it first (or make a new one)")
        ctx = self._measured()
        gc.collect()  # garbage of earlier code goes now, not in the middle of the check
        ctx.synchronize()
        self._free_before = ctx.mem_info()[0]
        self._before = weakref.WeakSet(open_objects())
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        if self.trace_allocations and not tracemalloc.is_tracing():
            tracemalloc.start(ALLOCATION_FRAMES)
            self._tracing = True
        self._running = True

    def stop(self) -> LeakReport:
        """Measure again and say what leaked; the collector (and tracemalloc) are back as they were, always."""
        if not self._running:
            raise RuntimeError("stop() without start()")
        self._running = False
        try:
            # With the collector off, the sweep that follows each collection never ran: a DLPack capsule the
            # code dropped unconsumed would still hold its buffer, open, and be counted as a leak.
            sweep_dropped_exports()
            report = LeakReport(memory_tolerance=self.memory_tolerance)
            new = [obj for obj in open_objects() if obj not in self._before and obj not in self._ignored]
            report.leaks = [_leak(obj) for obj in new]
            ctx = self._measured()
            if ctx.usable:  # (a poisoned context cannot say: the code failed anyway)
                ctx.synchronize()
                report.memory_drop = self._free_before - ctx.mem_info()[0]
            return report
        finally:
            if self._tracing:
                tracemalloc.stop()
                self._tracing = False
            if self._gc_was_enabled:
                gc.enable()

    def _measured(self) -> Context:
        if self.context is not None and not self.context.closed:
            return self.context
        return default_context()  # (also when the code closed the default one: the next is as good to ask)

    def __enter__(self) -> LeakCheck:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        report = self.stop()
        if kind is None and report:  # an exception from the block is the news; its frames hold objects
            raise AssertionError(report.message)


def _leak(obj: Any) -> Leak:
    nbytes = getattr(obj, "nbytes", None)
    return Leak(type(obj).__name__, repr(obj), nbytes if isinstance(nbytes, int) else None, _allocated_at(obj))


def _allocated_at(obj: Any) -> str | None:
    """The innermost line outside rawcuda that allocated ``obj`` (tracemalloc), or None when not traced."""
    trace = tracemalloc.get_object_traceback(obj) if tracemalloc.is_tracing() else None
    if trace is None:
        return None
    for frame in reversed(trace):  # (tracemalloc orders a traceback from the oldest frame to the newest)
        if not os.path.abspath(frame.filename).startswith(PACKAGE_DIR):
            return f"{_relative(frame.filename)}:{frame.lineno}"
    return f"{_relative(trace[-1].filename)}:{trace[-1].lineno}"


def _relative(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


def _mib(nbytes: int) -> str:
    return f"{nbytes / MIB:.1f} MiB" if abs(nbytes) >= MIB else f"{nbytes} bytes"


__all__ = ["ALLOCATION_FRAMES", "DEFAULT_MEMORY_TOLERANCE", "Leak", "LeakCheck", "LeakReport", "open_objects"]
