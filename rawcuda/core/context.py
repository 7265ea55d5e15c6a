"""Core: contexts -- and the lifetime rules that keep every other object safe.

A CUDA context owns everything you create: memory, modules, streams, events. Destroy it and every handle it issued
dangles. The seed article warns (section "RAII") that Rust's drop order can destroy the Context before its
DeviceBuffers, so ``cudaFree`` fails. In rawcuda every child holds a **strong reference** to its Context, and
``Context.close()`` closes the children first.

Which context? By default the device's **primary context**, shared with the CUDA runtime, CuPy and torch.
``Context.create()`` makes a private one. Which is *current*? Other libraries change it, so every method makes its
context current first (:mod:`rawcuda.core.guards.current`). ``with ctx:`` pushes and pops, even if the body raises.

Numpy views of host memory cannot be revoked, so the CUcontext goes with the last one. A **sticky** error (a kernel
faulted) *poisons* every context: each later use raises :class:`~rawcuda.checked.errors.ContextPoisonedError`.
More in docs/architecture.md, "Lifetimes".
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable
from ctypes import byref, c_int, c_size_t, c_uint, c_void_p
from types import TracebackType
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError, ContextPoisonedError, CudaError, ForkedProcessError
from rawcuda.checked.process import env_flag
from rawcuda.core.guards.current import make_current
from rawcuda.ffi.constants import CtxFlag, Limit

from .closecounter import closes
from .closeorder import CloseOrder
from .device import Device
from .guards import contextregistry, contextstack
from .integers import integer

#: Synchronize after every launch so a faulting kernel is reported by its own launch (debugging aid).
SYNC_LAUNCHES = env_flag("RAWCUDA_SYNC_LAUNCHES")


class Context:
    """A CUDA context. Make one with :meth:`primary` (the default) or :meth:`create`."""

    def __init__(self, handle: int, device: Device, *, primary: bool) -> None:
        # Private: use Context.primary() or Context.create(), which own the handle they pass in.
        self._handle = handle
        self.device = device
        self.is_primary = primary
        self._children: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.RLock()
        # Why it can no longer be used ("closed", "poisoned", forked), or None. Public so that a launch can test
        # it without a method call (Function.launch); only this class writes it.
        self.unusable: str | None = None
        self._poison: CudaError | None = None
        self._closed = False
        self._pid = os.getpid()
        # The Function launched last, named in the poisoned-context error; every launch sets it. Weak: a Function
        # holds its module, which holds this context.
        self.last_launch_ref: Callable[[], Any] = lambda: None
        # What higher layers keep per Context object (rawcuda.ops: its Modules), living exactly as long as it.
        self.cache: dict[str, Any] = {}
        self._holds, self._release_deferred = 0, False  # host views alive (hold()); close() waiting for them
        self._hold_lock = threading.Lock()
        poisoned = contextregistry.register(self, handle)
        if poisoned is not None:  # a sticky error already ended CUDA in this process
            # Why: docs/hazards.md, "A sticky error poisons every context".
            self.poison(poisoned)
        # (A dead Context has no `with` block open: the with statement holds the object it entered.)
        release = _release_primary if primary else contextstack.destroy
        self._finalizer = weakref.finalize(self, _finalize_context, handle, device.handle, release, self._pid)
        self._finalizer.atexit = False  # at interpreter exit the process teardown frees it; calling in is risky

    # --- making contexts -----------------------------------------------------------------------------
    @classmethod
    def primary(cls, device: Device | int = 0) -> Context:
        """Retain the device's primary context (shared with the runtime API, CuPy, torch)."""
        dev = device if isinstance(device, Device) else Device(device)
        handle = c_void_p()
        cu.cuDevicePrimaryCtxRetain(byref(handle), dev.handle)
        contextstack.created(handle.value or 0)
        return cls(handle.value or 0, dev, primary=True)

    @classmethod
    def create(cls, device: Device | int = 0, flags: CtxFlag = CtxFlag.SCHED_AUTO) -> Context:
        """A new private context with explicit flags (cuCtxCreate_v4).

        cuCtxCreate also pushes it onto this thread's stack. It is popped again, so creating one changes nothing
        current; ``with ctx:`` does that.
        """
        dev = device if isinstance(device, Device) else Device(device)
        handle = c_void_p()
        cu.cuCtxCreate(byref(handle), None, integer(flags, "flags"), dev.handle)
        contextstack.created(handle.value or 0)
        cu.cuCtxPopCurrent(byref(c_void_p()))
        return cls(handle.value or 0, dev, primary=False)

    # --- being current ---------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        self.check_usable()
        return self._handle

    @property
    def raw_handle(self) -> int:
        """The CUcontext, without checking that it is still usable: to compare contexts, or as a key."""
        return self._handle

    @property
    def usable(self) -> bool:
        """True while calls into the context are safe: not closed, not poisoned, not inherited by fork."""
        return self.unusable is None and os.getpid() == self._pid

    def check_usable(self) -> None:
        """Raise the reason (ClosedError, ContextPoisonedError, ForkedProcessError) when it is not usable."""
        if self.unusable is not None:
            self._raise_unusable()

    def activate(self) -> None:
        """Make this the thread's current context, or raise the reason it is unusable.

        It costs one cuCtxGetCurrent when it already is current. Every method calls it first. A launch calls it
        only when the driver said the wrong context was current (see rawcuda.core.guards.current).
        """
        if self.unusable is not None:
            self._raise_unusable()
        make_current(self._handle)

    def _raise_unusable(self) -> None:
        if self.unusable == _FORKED:
            raise ForkedProcessError(f"{self!r} belongs to the parent process")
        if self._poison is not None:
            raise ContextPoisonedError(
                self._poison.code,
                description="this context was poisoned by an earlier sticky error and can no longer be used",
                details=[
                    f"poisoned by: {str(self._poison).splitlines()[0]}",
                    f"last kernel launched in it: {_describe_launch(self.last_launch)}",
                    "a new context does not help (the sticky error holds for the whole process): start a new "
                    "process; run with RAWCUDA_SYNC_LAUNCHES=1 to catch the faulting launch",
                ],
            )
        raise ClosedError(f"{self!r} is closed; create a new context (Context.primary(), Context.create())")

    def __enter__(self) -> Context:
        self.check_usable()
        cu.cuCtxPushCurrent(self._handle)
        contextstack.enter_block(self._handle, self)  # this thread's open blocks, in order
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        # Closed: the entry may name a destroyed context. Forked: every driver call fails there
        # (CUDA_ERROR_NOT_INITIALIZED), and a block ending there, say by sys.exit(), must not raise.
        if not contextstack.end_block(self._handle, pop=not self.forked, quiet=self._closed):
            raise RuntimeError(
                f"{self!r}.__exit__ on a thread that did not enter it: a `with ctx:` block pushes onto the stack "
                "of the thread that entered it, and only that thread's matching __exit__ may pop (once per enter)"
            )

    # --- using it -----------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all work in this context."""
        self.activate()
        cu.cuCtxSynchronize()

    @property
    def flags(self) -> CtxFlag:
        self.activate()
        value = c_uint()
        cu.cuCtxGetFlags(byref(value))
        return CtxFlag(value.value)

    @property
    def api_version(self) -> int:
        value = c_uint()
        cu.cuCtxGetApiVersion(self.handle, byref(value))
        return value.value

    @property
    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest) stream priority, for example (0, -5). Numerically *lower* is *higher* priority."""
        self.activate()
        least, greatest = c_int(), c_int()
        cu.cuCtxGetStreamPriorityRange(byref(least), byref(greatest))
        return least.value, greatest.value

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory, as cuMemGetInfo reports them."""
        self.activate()
        free, total = c_size_t(), c_size_t()
        cu.cuMemGetInfo(byref(free), byref(total))
        return free.value, total.value

    def get_limit(self, limit: Limit) -> int:
        self.activate()
        value = c_size_t()
        cu.cuCtxGetLimit(byref(value), integer(limit, "limit"))
        return value.value

    def set_limit(self, limit: Limit, value: int) -> None:
        self.activate()
        cu.cuCtxSetLimit(integer(limit, "limit"), integer(value, "value"))

    @property
    def last_launch(self) -> Any:
        """The Function launched last in this context (while it is alive), or None."""
        return self.last_launch_ref()

    # --- lifetime ------------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> CudaError | None:
        """The sticky error that made this context unusable, or None."""
        return self._poison

    def adopt(self, child: Any) -> None:
        """Track ``child`` (a Resource), so that :meth:`close` closes it first."""
        self.check_usable()
        with self._lock:
            self._children.add(child)

    def forget(self, child: Any) -> None:
        """Stop tracking ``child`` (it was closed)."""
        with self._lock:
            self._children.discard(child)

    @property
    def children(self) -> list[Any]:
        """The objects created in this context that are still open."""
        with self._lock:
            return [c for c in self._children if not getattr(c, "closed", True)]

    def close(self) -> None:
        """Synchronize, close every child still open, then release (primary) or destroy (created) the context.

        The thread's current context is left as it was, unless it was this one (rawcuda.core.guards.contextstack).
        A failing child does not stop the others: the first error is raised at the end. Calling it twice is safe.
        A poisoned context, or one inherited through fork(), is marked closed without calling the driver.
        """
        with self._lock:
            if self._closed:
                return
            errors: list[BaseException] = []
            if self._poison is None and os.getpid() == self._pid:
                # Pushed, not activated: activate() would replace what this thread had current.
                with contextstack.pushed(self._handle, errors) as here:
                    self._close_children(errors, synchronize=here)
            self.cache.clear()
            self._finalizer.detach()
            self._closed = True
            self._mark_unusable("the context was closed")
            _forget_default(self)
            with self._hold_lock:  # if a host view still points into it, the last view releases it
                self._release_deferred = self._holds > 0
            if not self._release_deferred:
                self._release_handle()
            elif not self.is_primary and self._poison is None and not self.forked:
                # Nothing may run in it now, though it lives on a while.
                contextstack.leave(self._handle, self.device.handle)
        if errors:
            raise errors[0]

    def _close_children(self, errors: list[BaseException], *, synchronize: bool) -> None:
        try:
            if synchronize:
                cu.cuCtxSynchronize()
        except CudaError as exc:  # a sticky error surfacing now: stop calling into the context
            errors.append(exc)
        # Children in close order, then what higher layers cached that closes (foreignorder's event).
        children = sorted(self._children, key=lambda c: getattr(c, "close_order", CloseOrder.OTHER))
        for child in [*children, *(v for v in self.cache.values() if hasattr(v, "close"))]:
            try:
                child.close()
            except Exception as exc:  # keep closing the others; report the first afterwards
                errors.append(exc)

    def _release_handle(self) -> None:
        if self._poison is not None or os.getpid() != self._pid:
            return  # never call into a poisoned context, or the parent's from a forked child
        if self.is_primary:
            _release_primary(self._handle, self.device.handle)  # (never pops: the thread keeps what it had)
        else:
            contextstack.destroy(self._handle, self.device.handle)

    # --- host views: memory that numpy may still read after close() --------------------------------------------
    def hold(self) -> None:
        """Keep the CUcontext alive, even past :meth:`close`, until the matching :meth:`call_held`.

        It is for numpy views of pinned and managed memory. cuCtxDestroy, or the last primary release, would free
        that memory. Raises the reason when the context is unusable.
        """
        self.check_usable()
        with self._hold_lock:
            self._holds += 1

    def call_held(self, release: Callable[..., None], *args: Any) -> None:
        """Run ``release(*args)`` in this context, also after close(), then end one :meth:`hold`.

        A finalizer calls it, on any thread. It never raises. It leaves the thread's current context as it found it.
        """
        # It takes _hold_lock, never self._lock. Why: docs/hazards.md, "Host views release under their own lock".
        if self.forked:
            return  # the memory was never mapped in a forked child
        with contextlib.suppress(Exception):
            if self._poison is None and not sys.is_finalizing():
                with contextstack.pushed(self._handle, []) as here:
                    if here:
                        release(*args)  # before the count drops: the last one may destroy the context next
        with self._hold_lock:
            self._holds -= 1
            last = self._holds == 0 and self._release_deferred
            self._release_deferred = self._release_deferred and not last
        if last:
            with contextlib.suppress(Exception):
                self._release_handle()

    def poison(self, error: CudaError) -> None:
        """Mark this context unusable after a sticky error. contextregistry calls it for every context."""
        if self._poison is None:
            self._poison = error
            self._mark_unusable("poisoned")

    def _mark_unusable(self, reason: str) -> None:
        """Set the reason every use now raises, and move the close count: a cached launch checks only that."""
        # Why: docs/hazards.md, "An unusable context moves the close count".
        self.unusable = reason
        closes.generation += 1

    def mark_forked(self) -> None:
        """Called in a forked child. Every use then raises ForkedProcessError. Locks lost threads held are replaced."""
        self._mark_unusable(_FORKED)
        self._lock, self._hold_lock = threading.RLock(), threading.Lock()

    @property
    def forked(self) -> bool:
        """True in a child process that inherited this object through fork(). Its CUDA state is not here."""
        return os.getpid() != self._pid

    def __repr__(self) -> str:
        kind = "primary" if self.is_primary else "created"
        state = " poisoned" if self._poison else " forked" if self.forked else " closed" if self.unusable else ""
        return f"<Context {kind} {self._handle:#x} on device {self.device.ordinal}{state}>"


def _describe_launch(fn: Any) -> str:
    if fn is None:
        return "none recorded"
    grid, block, shared_mem, stream = fn.last_config
    grid, block = (d[0] if d[1:] == (1, 1) else d for d in (grid, block))  # (4, 1, 1) reads as 4
    return f"{fn.name} grid={grid} block={block} shared_mem={shared_mem} stream={stream:#x}"


def _release_primary(handle: int, device: int) -> None:  # (the release functions take the same two arguments)
    cu.cuDevicePrimaryCtxRelease(device)


def _finalize_context(handle: int, device: int, release: Callable[[int, int], object], pid: int) -> None:
    if sys.is_finalizing() or os.getpid() != pid or contextregistry.is_poisoned(handle):
        return  # leak rather than call into a dying interpreter, a forked child, or a poisoned context
    with contextlib.suppress(Exception):  # a finalizer must never raise
        release(handle, device)


_FORKED = "inherited through fork()"


# --- the default context: what `context=None` means ------------------------------------------------------
_default: dict[int, Context] = {}
_default_lock = threading.Lock()


def default_context(device: int = 0) -> Context:
    """Device ``device``'s primary context, retained once per process: what ``context=None`` means.

    A closed one, or one from before a fork, is replaced by a new retain. A poisoned one is still handed out.
    """
    ctx = _default.get(device)
    if ctx is not None and ctx._pid == os.getpid() and ctx.unusable is None:
        return ctx
    with _default_lock:
        ctx = _default.get(device)
        if ctx is not None and ctx._poison is not None and ctx._pid == os.getpid():
            return ctx  # keep handing out the poisoned one: every use then says why
        if ctx is None or ctx.unusable is not None or ctx._pid != os.getpid():
            ctx = _default[device] = Context.primary(device)
        return ctx


def resolve(context: Context | None) -> Context:
    """``context`` itself, or the default context when it is None. Anything else is a TypeError."""
    if context is None:
        return default_context()
    if isinstance(context, Context):
        return context
    raise TypeError(not_a_context(context))


def described(value: Any) -> str:
    """A wrong argument in a message: its type, and its value when that is plain data (a repr may call the driver)."""
    plain = value is None or isinstance(value, int | float | str | bytes)
    return f"{type(value).__name__} {value!r}" if plain else type(value).__name__


def not_a_context(value: Any) -> str:
    """Why ``value`` cannot be a ``context`` argument, and the call that was meant."""
    problem = f"context must be a rawcuda Context or None (the primary context), not {described(value)}"
    if isinstance(value, Device):
        return f"{problem}: pass Context.primary({value.ordinal}) for the context of that device"
    if isinstance(getattr(value, "context", None), Context):  # a Stream, an Event ... in the context's place
        return f"{problem}: a {type(value).__name__} goes by its keyword, e.g. stream=..."
    if getattr(value, "__cuda_stream__", None) is not None:  # torch's, CuPy's, cuda.core's stream
        return f"{problem}: it is another library's stream, which goes by its keyword: stream=..."
    return problem


def _forget_default(ctx: Context) -> None:
    for key, value in list(_default.items()):
        if value is ctx:
            del _default[key]
