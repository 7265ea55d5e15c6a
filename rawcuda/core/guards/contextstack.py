"""Core guard: what closing a context leaves current on the thread -- exactly what it found, minus itself.

The driver keeps a stack of contexts per thread. ``cuCtxSetCurrent`` replaces its top, and ``cuCtxDestroy``
pops only a context on top of the caller's stack. A close that activated its context therefore left the
thread with the wrong context, or with none: CuPy's next kernel failed.

So a close does its work with the context pushed (:func:`pushed`). Then :func:`leave` takes every entry
of the closing context off this thread's stack and keeps the others in order. This module keeps the
thread's open ``with`` blocks (:func:`enter_block`, :func:`end_block`), so that it knows whose slot each
entry is. A destroyed context is never pushed back: the pop that follows would crash the process. Where
nothing is left current, the primary context comes back if someone holds it (:func:`put_primary_back`).

docs/hazards.md, "What a close leaves current"
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from ctypes import byref, c_int, c_uint, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError

from .current import peek_current

NOTHING_CURRENT = 0  # what cuCtxGetCurrent writes when the thread has no context (NULL)
#: How deep :func:`leave` walks a thread's stack at most: a guard against a driver that never runs empty, far
#: beyond any real nesting (each entry is one open block or push). Not 4096: 5000 nested blocks (an ExitStack
#: in a loop) are legal, and a walk cut short pushes its entries back above the ones it never saw, so the
#: blocks' slots are misread (the destroyed context stayed current).
MAX_STACK_WALK = 1 << 20


class _Block:
    """One open ``with ctx:`` block on this thread.

    It keeps the handle it pushed and its Context, weakly: a block never keeps a context alive. ``gone``
    says that a close took its entry off the stack; its exit then pops nothing.
    """

    __slots__ = ("gone", "handle", "in_walk", "owner")

    def __init__(self, handle: int, owner: Any) -> None:
        self.handle = handle
        self.owner = weakref.ref(owner)
        self.gone = False
        # Entered by a finalizer inside a walk of this thread's stack: its push and its pop both happen on the
        # half-walked stack, balanced, so its pop is never deferred (a deferred one found it pushed back lower)
        self.in_walk = _blocks.leaving is not None

    def closed(self) -> bool:
        owner = self.owner()
        return owner is None or bool(owner.closed)


class _Blocks(threading.local):
    """This thread's open ``with ctx:`` blocks, outermost first."""

    def __init__(self) -> None:
        self.open: list[_Block] = []
        # While leave() walks this thread's stack: the handles of contexts closed or collected meanwhile (a
        # finalizer ran inside the walk -- the GC may run at any allocation), whose entries the walk takes off too.
        self.leaving: set[int] | None = None
        # ... and what such finalizers would have done to the half-popped stack -- a destroy (cuCtxDestroy pops
        # the context if it is on top), a suspended generator's `with` block ending (it pops the top) -- done
        # once the walk has put the stack back (done at once, they left nothing current, or the wrong context).
        self.after_walk: list[Callable[[], None]] = []


_blocks = _Blocks()

#: Created contexts rawcuda destroyed, by handle -- on any thread. One may still lie on another thread's stack
#: (cuCtxDestroy pops only the caller's), and a walk there must never push it back: the driver takes the push
#: of a destroyed context, and the pop that follows crashes the process (a segfault in cuCtxPopCurrent on the
#: H200, driver 580). A handle leaves the set when a new context gets the same address (:func:`created`).
_destroyed: set[int] = set()


def created(handle: int) -> None:
    """``cuCtxCreate`` or a primary retain returned ``handle``: a live context now.

    This holds even if a destroyed context had that address before.
    """
    _destroyed.discard(handle)


def enter_block(handle: int, owner: Any) -> None:
    """A ``with`` block of ``owner`` pushed ``handle`` on this thread (Context.__enter__, after its push)."""
    _blocks.open.append(_Block(handle, owner))


def end_block(handle: int, *, pop: bool, quiet: bool) -> bool:
    """A ``with`` block of ``handle`` ends on this thread (Context.__exit__).

    Its record goes, and its entry is popped. Nothing is popped when a close took the entry off already
    (:func:`leave`), or when ``pop`` is False: a forked child's driver is unusable. ``quiet`` suppresses the
    driver's error, since the entry may name a destroyed context. Returns False, doing nothing, when this
    thread has no open block of ``handle``: an exit without an enter here.

    A generator suspended in the block may be collected inside a walk of this thread's stack. The pop then
    waits for the walk to put the stack back. It is done then only if the block's context is on top, where
    its entry is, and the walk did not take that entry off.
    """
    blocks = _blocks.open
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].handle == handle:
            block = blocks.pop(i)
            break
    else:
        return False
    if block.gone or not pop:
        return True
    if _blocks.leaving is not None and not block.in_walk:
        _blocks.after_walk.append(functools.partial(_pop_if_on_top, block))
        return True
    with contextlib.suppress(CudaError) if quiet else contextlib.nullcontext():
        cu.cuCtxPopCurrent(byref(c_void_p()))
    return True


def _pop_if_on_top(block: _Block) -> None:
    if not block.gone and peek_current() == block.handle:
        cu.cuCtxPopCurrent(byref(c_void_p()))


@contextlib.contextmanager
def pushed(handle: int, errors: list[BaseException]) -> Iterator[bool]:
    """``handle`` pushed for the body and popped after it; yields whether the push succeeded.

    A failed push is appended to ``errors``, and nothing is popped. A closing context reports it at the end.
    """
    try:
        cu.cuCtxPushCurrent(handle)
    except CudaError as exc:
        errors.append(exc)
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(CudaError):  # (a sticky error here has poisoned every context already)
            cu.cuCtxPopCurrent(byref(c_void_p()))


def leave(handle: int, device: int) -> None:
    """Take every entry of ``handle`` off this thread's stack, keeping all the others in their order.

    Each open ``with`` block whose entry went is marked, so that its ``__exit__`` pops nothing. Never raises:
    it runs while a context is being closed. Re-entered from a finalizer during a walk, it adds ``handle`` to
    the walk under way.

    Why the whole stack, not only its top? Entries of the closing context C can lie anywhere in it. ``with
    C: with C:`` pushed two. ``C.synchronize(); with C:`` has an entry made by a call under the block's. A
    ``with P:`` block may sit above a C that a call made current. The driver shows only the top, so the
    stack is popped to the bottom, and every other entry is pushed back where it was.

    The topmost entries are the open blocks' slots, one each. An entry of C in the slot of a block of C is
    that block's own. In another block's slot, a call made C current in place of that block's context, which
    takes its slot back. Below every block, what C replaced cannot be known. Where nothing lies below it,
    the primary takes its place (:func:`put_primary_back`).
    """
    if _blocks.leaving is not None:  # re-entered from a finalizer, with the stack half popped: the walk
        _blocks.leaving.add(handle)  # under way takes this one's entries off as well
        return
    _blocks.leaving = set()
    try:
        _walk(handle, device, _blocks.leaving)
    finally:
        _blocks.leaving = None
        deferred, _blocks.after_walk = _blocks.after_walk, []
        for action in deferred:
            with contextlib.suppress(CudaError):  # (a finalizer's work: nobody to report to)
                action()


def _walk(handle: int, device: int, collected: set[int]) -> None:
    # The open blocks, taken before anything is popped: a block that a finalizer ends during the pops (its
    # record goes at once, its pop waits: end_block) still has its entry among those popped here.
    blocks = [block for block in _blocks.open if not block.gone]
    entries: list[int] = []
    while len(entries) < MAX_STACK_WALK and (top := peek_current()) != NOTHING_CURRENT:
        try:
            cu.cuCtxPopCurrent(byref(c_void_p()))
        except CudaError:
            break
        entries.append(top)
    entries.reverse()  # bottom first
    # The blocks' entries are the topmost, one each: entry i is block slot i - first (more blocks than entries
    # -- something popped behind rawcuda's back -- leaves the outermost ones without one).
    first = len(entries) - len(blocks)

    def slot(i: int) -> _Block | None:
        return blocks[i - first] if i >= first else None

    mine = [i for i, entry in enumerate(entries) if entry == handle]
    own = {i: block for i in mine if (block := slot(i)) is not None and block.handle == handle}
    # A block of C whose slot holds something else had an entry pushed above it (another library's push):
    # its own entry lies lower -- the topmost entries of C not matched yet, for the innermost such blocks.
    spare = [block for block in blocks if block.handle == handle and block not in own.values()]
    for i, block in zip(reversed([i for i in mine if i not in own]), reversed(spare), strict=False):
        own[i] = block
    for i, entry in enumerate(entries):
        block = slot(i)
        # Dead entries go as the closing context's do: one collected during this walk, one destroyed on
        # another thread (its own block, if it has one here, is then told, like a closing context's block)
        dead = entry in collected or entry in _destroyed
        if entry != handle and not dead:
            _push(entry)  # (lost only if the driver refuses a context it listed)
        elif i in own:  # a block's own entry: gone, and its exit will pop nothing
            own[i].gone = True
        elif dead and block is not None and block.handle == entry:
            block.gone = True
        elif block is not None and not block.closed():  # a call made C current inside another block, in place
            _push(block.handle)  # of the block's context: it takes its slot back
        elif block is not None:  # ... of a closed block's: nothing may be pushed back, and its exit pops nothing
            block.gone = True
        else:  # below every block, what the call replaced cannot be known
            with contextlib.suppress(CudaError):
                put_primary_back(device)  # (does nothing when something lies below)


def _push(handle: int) -> None:
    with contextlib.suppress(CudaError):
        cu.cuCtxPushCurrent(handle)


def put_primary_back(device: int) -> None:
    """Make ``device``'s primary context current if nothing is, and someone holds it (it is active).

    It is retained, made current and released at once: rawcuda keeps no reference nobody asked for.
    """
    if peek_current() != NOTHING_CURRENT:
        return
    flags, active = c_uint(), c_int()
    cu.cuDevicePrimaryCtxGetState(device, byref(flags), byref(active))
    if not active.value:
        return
    primary = c_void_p()
    cu.cuDevicePrimaryCtxRetain(byref(primary), device)
    created(primary.value or 0)  # (live, whatever rawcuda destroyed at its address before)
    try:
        cu.cuCtxSetCurrent(primary.value)
    finally:
        cu.cuDevicePrimaryCtxRelease(device)


def destroy(handle: int, device: int) -> None:
    """``cuCtxDestroy`` of a created context, after taking it off this thread (:func:`leave`).

    Raises what the destroy raises. Inside a walk of this thread's stack (a finalizer ran there), it runs
    once the walk is over instead. A driver error then has nobody to be reported to, and is dropped.
    """
    if _blocks.leaving is not None:  # its entries go with the walk's, and the destroy waits for the stack to
        _blocks.leaving.add(handle)  # be whole again: then a walk of its own, as if it came after
        _blocks.after_walk.append(functools.partial(destroy, handle, device))
        return
    leave(handle, device)
    _destroyed.add(handle)  # (before the destroy: another thread's walk must not push it back meanwhile)
    try:
        cu.cuCtxDestroy(handle)  # (pops nothing now: the context is on no entry of this thread's stack)
    except BaseException:
        _destroyed.discard(handle)
        raise
