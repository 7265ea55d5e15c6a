"""Layer 2: contexts -- and the lifetime rules that keep every other object safe.

A CUDA context owns everything you create: memory, modules, streams, events. Destroy it and every
handle it issued dangles. The seed article's warning (section "RAII") is that Rust's drop order can
destroy the Context before its DeviceBuffers, so ``cudaFree`` fails. rawcuda makes that impossible:
every child holds a **strong reference** to its Context, so the context outlives them; ``close()`` is
explicit and idempotent (``weakref.finalize`` is only the fallback, and never calls into a closed,
poisoned or forked context, or a dying interpreter); ``Context.close()`` closes the children first.

Which context? By default the device's **primary context** (the one the CUDA runtime, CuPy and torch
use); ``Context.create()`` makes a private one with explicit flags.

Which context is *current*? The driver keeps one per thread. Every rawcuda method makes its object's
context current first (like ``cudaSetDevice``), so objects work from any thread; a per-thread cache makes
that free when it is already current. ``with ctx:`` pushes the context and pops it on exit -- even when
the body raises -- restoring what was current before (also when the body closed the context).

A **sticky** error (a kernel faulted) leaves the context unusable. rawcuda marks it *poisoned*: every
later use raises :class:`~rawcuda.checked.errors.ContextPoisonedError` naming the error and the last
launch; ``RAWCUDA_SYNC_LAUNCHES=1`` synchronizes after every launch so the error points at the guilty kernel.
The whole story, with the close order, is in docs/architecture.md ("Lifetimes", "Close order").
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable
from ctypes import byref, c_int, c_size_t, c_uint, c_void_p
from enum import IntEnum
from types import TracebackType
from typing import Any

from . import checked
from .checked import cu
from .checked.errors import ClosedError, ContextPoisonedError, CudaError, ForkedProcessError, KernelFaultError
from .checked.process import env_flag
from .device import Device
from .ffi.constants import CtxFlag, Limit
from .ffi.results import Result

#: Synchronize after every launch so a faulting kernel is reported by its own launch (debugging aid).
SYNC_LAUNCHES = env_flag("RAWCUDA_SYNC_LAUNCHES")


class CloseOrder(IntEnum):
    """The order in which :meth:`Context.close` closes what it still owns: each before what it uses.

    One table, so that no class has to know another's place. Every child class names its row
    (``close_order = CloseOrder.STREAM``); lower closes first.
    """

    EXECUTABLE_GRAPH = 1  # uses the graph it was instantiated from
    GRAPH = 2  # its nodes refer to kernels (modules) and buffers
    MODULE = 3  # launches in flight were synchronized by Context.close() before anything closes
    OTHER = 4  # a child that names no row
    STREAM = 5  # closing waits for its queued work, which may still read events and memory
    EVENT = 6
    DEVICE_MEMORY = 7  # buffers, and views of them (which own nothing)
    GROWABLE_MEMORY = 8  # after the DeviceBuffer views it handed out
    HOST_MEMORY = 9  # last: async copies from pinned memory have drained with their streams


class _ThreadState(threading.local):
    handle: int | None = None  # the context handle rawcuda last made current on this thread


_tls = _ThreadState()
_live: dict[int, weakref.WeakSet[Context]] = {}  # handle -> live Context objects (to poison them all)
_live_lock = threading.Lock()


class Context:
    """A CUDA context. Make one with :meth:`primary` (the default) or :meth:`create`."""

    def __init__(self, handle: int, device: Device, *, primary: bool) -> None:
        # Private: use Context.primary() or Context.create(), which own the handle they pass in.
        self._handle = handle
        self.device = device
        self.is_primary = primary
        self._children: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.RLock()
        self._unusable: str | None = None  # why it can no longer be used (closed / poisoned), or None
        self._poison: CudaError | None = None
        self._closed = False
        self._pid = os.getpid()
        self.last_launch: Any = None  # the Function launched last (named in the poisoned-context error)
        # What higher layers keep per Context object (rawcuda.ops: its Modules), living exactly as long as it.
        self.cache: dict[str, Any] = {}
        self._enter_stack = threading.local()
        with _live_lock:
            _live.setdefault(handle, weakref.WeakSet()).add(self)
        release = _release_primary if primary else _destroy_created
        self._finalizer = weakref.finalize(self, _finalize_context, handle, device.handle, release, self._pid)
        self._finalizer.atexit = False  # at interpreter exit the process teardown frees it; calling in is risky

    # --- making contexts -----------------------------------------------------------------------------
    @classmethod
    def primary(cls, device: Device | int = 0) -> Context:
        """Retain the device's primary context (shared with the runtime API, CuPy, torch)."""
        dev = device if isinstance(device, Device) else Device(device)
        handle = c_void_p()
        cu.cuDevicePrimaryCtxRetain(byref(handle), dev.handle)
        return cls(handle.value or 0, dev, primary=True)

    @classmethod
    def create(cls, device: Device | int = 0, flags: CtxFlag = CtxFlag.SCHED_AUTO) -> Context:
        """A new private context with explicit flags (cuCtxCreate_v4). cuCtxCreate also pushes it onto this
        thread's stack; it is popped again, so creating one changes nothing current (``with ctx:`` does that)."""
        dev = device if isinstance(device, Device) else Device(device)
        handle = c_void_p()
        cu.cuCtxCreate(byref(handle), None, int(flags), dev.handle)
        popped = c_void_p()
        cu.cuCtxPopCurrent(byref(popped))
        _tls.handle = None
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
        return self._unusable is None and os.getpid() == self._pid

    def check_usable(self) -> None:
        """Raise the reason (ClosedError, ContextPoisonedError, ForkedProcessError) when it is not usable."""
        if self._unusable is not None:
            self._raise_unusable()

    def activate(self) -> None:
        """Make this the thread's current context (free when it already is). Every method of every object
        calls this before its first driver call; so do the launch paths, once per launch."""
        if self._unusable is not None:
            self._raise_unusable()
        if _tls.handle != self._handle:
            cu.cuCtxSetCurrent(self._handle)
            _tls.handle = self._handle

    def _raise_unusable(self) -> None:
        if self._unusable == _FORKED:
            raise ForkedProcessError(f"{self!r} belongs to the parent process")
        if self._poison is not None:
            raise ContextPoisonedError(
                self._poison.code,
                description="this context was poisoned by an earlier sticky error and can no longer be used",
                details=[
                    f"poisoned by: {str(self._poison).splitlines()[0]}",
                    f"last kernel launched in it: {_describe_launch(self.last_launch)}",
                    "start a new process; run with RAWCUDA_SYNC_LAUNCHES=1 to catch the faulting launch",
                ],
            )
        raise ClosedError(
            f"{self!r} is closed: {self._unusable}; create a new context (Context.primary() or "
            "Context.create()) and the objects you need in it"
        )

    def __enter__(self) -> Context:
        self.check_usable()
        cu.cuCtxPushCurrent(self._handle)
        stack = getattr(self._enter_stack, "items", None)
        if stack is None:
            stack = self._enter_stack.items = []
        stack.append(_tls.handle)
        _tls.handle = self._handle
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        previous = self._enter_stack.items.pop()
        if getattr(self._enter_stack, "popped_by_destroy", False):  # closed inside the block: already popped
            self._enter_stack.popped_by_destroy = False
            _tls.handle = previous
            return
        popped = c_void_p()
        try:
            cu.cuCtxPopCurrent(byref(popped))
        finally:
            _tls.handle = previous

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
        """(least, greatest) stream priority; numerically *lower* is *higher* priority, e.g. (0, -5)."""
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
        cu.cuCtxGetLimit(byref(value), int(limit))
        return value.value

    def set_limit(self, limit: Limit, value: int) -> None:
        self.activate()
        cu.cuCtxSetLimit(int(limit), value)

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
        """Synchronize, close every child still open, then release (primary) or destroy (created) it."""
        with self._lock:
            if self._closed:
                return
            errors: list[BaseException] = []
            if self._poison is None and os.getpid() == self._pid:
                try:
                    self.synchronize()
                except CudaError as exc:  # a sticky error surfacing now: stop calling into the context
                    errors.append(exc)
                for child in sorted(self._children, key=lambda c: getattr(c, "close_order", CloseOrder.OTHER)):
                    try:
                        child.close()
                    except Exception as exc:  # keep closing the others; report the first afterwards
                        errors.append(exc)
            self.cache.clear()  # what higher layers kept here was among the children just closed
            self._finalizer.detach()
            self._closed = True
            self._unusable = "the context was closed"
            if self._poison is None and os.getpid() == self._pid:
                if not self.is_primary and _current_handle() == self._handle:
                    # cuCtxDestroy pops a context that is current on the calling thread (cuda.h): a
                    # `with ctx:` around this close must not pop it a second time (see __exit__).
                    self._enter_stack.popped_by_destroy = True
                release = _release_primary if self.is_primary else _destroy_created
                release(self._handle, self.device.handle)
            if _tls.handle == self._handle:
                _tls.handle = None
            _forget_default(self)
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        kind = "primary" if self.is_primary else "created"
        state = " poisoned" if self._poison else (" closed" if self._unusable else "")
        return f"<Context {kind} {self._handle:#x} on device {self.device.ordinal}{state}>"


def _describe_launch(fn: Any) -> str:
    if fn is None:
        return "none recorded"
    grid, block, shared_mem, stream = fn.last_config
    return f"{fn.name} grid={grid} block={block} shared_mem={shared_mem} stream={stream!r}"


def _current_handle() -> int:
    """The context current on this thread as the driver says; 0 for none, or when it cannot say. Never raises:
    the poisoning hook asks while an error is being built."""
    current = c_void_p()
    getter = checked.quiet("cuCtxGetCurrent")
    if getter is None or getter(byref(current)) != 0:
        return 0
    return current.value or 0


def _release_primary(handle: int, device: int) -> None:
    cu.cuDevicePrimaryCtxRelease(device)


def _destroy_created(handle: int, device: int) -> None:
    cu.cuCtxDestroy(handle)


def _finalize_context(handle: int, device: int, release: Callable[[int, int], None], pid: int) -> None:
    if sys.is_finalizing() or os.getpid() != pid or handle in _poisoned_handles:
        return  # leak rather than call into a dying interpreter, a forked child, or a poisoned context
    with contextlib.suppress(Exception):  # a finalizer must never raise
        release(handle, device)


# --- poisoning: sticky errors mark every Context object of the faulting context --------------------------
_poisoned_handles: set[int] = set()


def _observe(error: CudaError) -> None:
    if error.code == Result.ERROR_INVALID_CONTEXT:
        _tls.handle = None  # our cache may be stale (someone changed the current context): re-check next time
    if not isinstance(error, KernelFaultError):
        return
    handle = _tls.handle or _current_handle()
    if not handle:
        return
    _poisoned_handles.add(handle)
    with _live_lock:
        victims = list(_live.get(handle, ()))
    for ctx in victims:
        ctx._poison = error
        ctx._unusable = "poisoned"


checked.error_observers.append(_observe)


# --- fork: a child inherits Context objects, but not the CUDA state behind them ----------------------------
_FORKED = "inherited through fork()"


def _mark_forked_contexts() -> None:
    _tls.handle = None
    for contexts in _live.values():
        for ctx in list(contexts):
            ctx._unusable = _FORKED  # every use now raises ForkedProcessError; finalizers see the pid and leak


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked_contexts)


# --- the default context: what `context=None` means ------------------------------------------------------
_default: dict[int, Context] = {}
_default_lock = threading.Lock()


def default_context(device: int = 0) -> Context:
    """Device ``device``'s primary context, retained once per process and shared by `context=None`."""
    ctx = _default.get(device)
    if ctx is not None and ctx._pid == os.getpid() and ctx._unusable is None:
        return ctx
    with _default_lock:
        ctx = _default.get(device)
        if ctx is not None and ctx._poison is not None and ctx._pid == os.getpid():
            return ctx  # keep handing out the poisoned one: every use then says why
        if ctx is None or ctx._unusable is not None or ctx._pid != os.getpid():
            ctx = _default[device] = Context.primary(device)
        return ctx


def resolve(context: Context | None) -> Context:
    """``context`` itself, or the default context when it is None."""
    return default_context() if context is None else context


def _forget_default(ctx: Context) -> None:
    for key, value in list(_default.items()):
        if value is ctx:
            del _default[key]
