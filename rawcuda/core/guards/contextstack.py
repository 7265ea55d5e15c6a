"""Core guard: what closing a context leaves current on the thread -- exactly what it found, minus itself.

The driver keeps a *stack* of contexts per thread, and four calls move it differently (cuda.h):
``cuCtxPushCurrent`` pushes, ``cuCtxPopCurrent`` pops, ``cuCtxSetCurrent`` **replaces the top** (that is
what ``Context.activate()`` uses, so that a method leaves no extra entry behind), and ``cuCtxDestroy`` pops
the context if it is current on the calling thread -- only there: on other threads it stays current,
destroyed. A primary release (``cuDevicePrimaryCtxRelease``) never pops anything.

Closing used to *activate* the context to synchronize it and close its children. That replaced whatever
was on top -- another created context, the primary CuPy works in -- and the destroy then popped the
closing context, leaving the thread with what lay below, often nothing: CuPy's next kernel failed with
``CUDA_ERROR_INVALID_CONTEXT`` (attack scripts on the H200). So the rule is now:

* the work a close does *in* the context (synchronize, close the children, a host view's last free) runs
  with the context **pushed**, and it is popped after: the slot is the closer's own, and whatever a child
  or a finalizer makes current in between stays in that slot (:func:`pushed`);
* the closing context itself leaves the thread (:func:`leave`): **every** entry of it on this thread's
  stack is removed, wherever it lies -- before ``cuCtxDestroy``, which pops only a context on top and
  leaves one lower down where it is, destroyed (cuda.h) -- and every other entry stays, in its order. So a
  close that *waits* for host views takes the closed context off the thread just the same (nothing may run
  in a context rawcuda has closed). Each open ``with`` block on this thread whose entry went is marked
  (this module keeps the thread's blocks: :func:`enter_block`, :func:`end_block`), and its ``__exit__``
  pops nothing;
* an entry that no block of the closing context accounts for was made current by a call: ``activate()``
  put it *in place of* what was on top. Where that was another context's open ``with`` block on this
  thread, the block's own context takes the entry back -- its ``__exit__`` pops it as the block expects
  (``with a: b_buffer.copy...; b.close()`` left the thread with nothing under CuPy's primary otherwise: a's
  exit popped the primary). Which block? Every block pushed one entry, in order, so the open blocks of this
  thread whose entries are still there are the topmost entries of the stack, one each. A *closed* block's
  context is never pushed back (it is destroyed): its entry goes, and that block is marked too. Below
  every block, the replaced entry cannot be known: if nothing lies below it, the device's primary context
  takes its place, **if it is active** (:func:`put_primary_back`). (A block's own entry, with nothing
  below, is simply removed: its ``__exit__`` would have left nothing, as the thread began.)

Why only if active? ``cuDevicePrimaryCtxGetState`` says whether anyone holds the primary: rawcuda's
``default_context()``, the CUDA runtime under CuPy or torch. If someone does, it is the context those
libraries work in, and retaining it costs only a count: rawcuda retains it, makes it current and
releases it at once, so the lifetime stays its holders' (rawcuda keeps no reference nobody asked for).
If nobody does, nothing in the process uses it: creating it would cost device memory and time for no
one, and a runtime call that needs a context finds none current and selects, initializes and makes
current the primary by itself (CUDA Runtime API, "Interactions with the CUDA Driver API") -- so the thread
is left with nothing, as it most likely began. (CuPy failed all the same because it launches kernels
through the driver API, cuLaunchKernel, which selects nothing, once the runtime has set the primary up.)
A holder's last release between the two calls would make the retain create it and the release reset it:
the thread is then left with a reset primary, which the next call reports. No library releases the
primary while it uses it, so this is left as it is.

What cannot be helped: a context closed on thread B stays current, destroyed, on thread A -- only A can
change A's stack. rawcuda's own next call on A asks the driver and switches (rawcuda.core.guards.current); another
library's gets ``CUDA_ERROR_CONTEXT_IS_DESTROYED``. Close a context on the thread that uses it. What rawcuda
does see to: a walk on A (another close there) never pushes such an entry back -- the driver accepts the
push, and the pop that follows crashes the process -- and A's block of it then pops nothing. (Known only by
address: another library's context created at the address of one rawcuda destroyed is taken for the dead
one, and a close walking A's stack drops it. Addresses are reused, so this can happen; it needs a library
that creates contexts of its own, not the primary context CuPy and torch use.)
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
#: blocks' slots are misread (attack a10, round 7: the destroyed context stayed current).
MAX_STACK_WALK = 1 << 20


class _Block:
    """One open ``with ctx:`` block on this thread: the handle it pushed, its Context (weakly: a block never
    keeps a context alive), and whether a close took its entry off the stack (then its exit pops nothing)."""

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
        # once the walk has put the stack back (attack a01, round 7: nothing, or the wrong context, was left).
        self.after_walk: list[Callable[[], None]] = []


_blocks = _Blocks()

#: Created contexts rawcuda destroyed, by handle -- on any thread. One may still lie on another thread's stack
#: (cuCtxDestroy pops only the caller's), and a walk there must never push it back: the driver takes the push
#: of a destroyed context, and the pop that follows crashes the process (a segfault in cuCtxPopCurrent on the
#: H200, driver 580). A handle leaves the set when a new context gets the same address (:func:`created`).
_destroyed: set[int] = set()


def created(handle: int) -> None:
    """``cuCtxCreate`` or a primary retain returned ``handle``: a live context now, even if a destroyed one had
    that address."""
    _destroyed.discard(handle)


def enter_block(handle: int, owner: Any) -> None:
    """A ``with`` block of ``owner`` pushed ``handle`` on this thread (Context.__enter__, after its push)."""
    _blocks.open.append(_Block(handle, owner))


def end_block(handle: int, *, pop: bool, quiet: bool) -> bool:
    """A ``with`` block of ``handle`` ends on this thread (Context.__exit__): its record goes, and its entry is
    popped -- unless a close took it off already (contextstack.leave), or ``pop`` is False (a forked child's
    driver is unusable). ``quiet``: suppress the driver's error (the entry may name a destroyed context).
    False, doing nothing, if this thread has no open block of ``handle`` (an exit without an enter here).

    Inside a walk of this thread's stack (a generator suspended in the block, collected meanwhile), the pop
    waits for the walk to put the stack back, and is done then only if the block's context is on top, where
    its entry is -- and not if the walk took that entry off meanwhile."""
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
    """``handle`` pushed for the body, popped after it; yields whether the push succeeded. A failed push is
    appended to ``errors`` (a closing context reports it at the end) and nothing is popped."""
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
    """Take every entry of ``handle`` off this thread's stack, keeping all the others in their order, and mark
    each open ``with`` block whose entry went, so that its ``__exit__`` pops nothing. Never raises: it runs
    while a context is being closed.

    Why the whole stack, not only its top? Entries of the closing context can lie anywhere in it: ``with C:
    with C:`` pushed two, ``C.synchronize(); with C:`` has one made by a call under one made by the block, and
    a ``with P:`` block may sit above a C that a call made current. The driver shows only the top, so the
    stack is popped down to the bottom, and every other entry is pushed back where it was. The topmost
    entries are the open blocks' slots, one each (see the module): an entry of C in a block of C's slot is
    that block's own; in another block's slot, a call made C current in place of that block's context,
    which takes its slot back; below every block, what it replaced cannot be known: where nothing lies
    below it, the primary takes its place (:func:`put_primary_back`)."""
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
    """Make ``device``'s primary context current if nothing is, and someone holds it (it is active)."""
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
    """``cuCtxDestroy`` of a created context, having taken it off this thread first (:func:`leave`). Raises
    what the destroy raises -- but inside a walk of this thread's stack (a finalizer ran there) it runs once
    the walk is over, and a failure then has nobody to be reported to."""
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
