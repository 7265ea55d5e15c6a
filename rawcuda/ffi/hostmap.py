"""Layer 0: is anything mapped at this address? -- the check before a foreign stream handle reaches the driver.

A ``CUstream`` is a pointer into the driver's own memory, and the driver trusts it: give
``cuStreamWaitEvent`` the number 3, or a stale pointer from a library that miscounted, and it reads
address 3 -- a segmentation fault that takes the whole interpreter with it, no exception possible. rawcuda
makes its own streams, so their handles are sound; but DLPack's ``__dlpack__(stream=...)`` and the CUDA
Array Interface's ``"stream"`` hand it numbers from *other* code.

No driver call can ask "is this a stream?" without reading the pointer first. What the kernel can say
safely is whether the page under the address is mapped at all: ``mincore(2)`` fails with ``ENOMEM`` for an
unmapped range and never touches the memory. That refuses small integers, sign-extended garbage and freed
heap regions returned to the OS. It does **not** refuse a page that is mapped but unreadable -- and that
is where a device pointer lies (the driver's no-access reservation, ``---p`` in ``/proc/self/maps``):
a device pointer or a ``PROT_NONE`` page passed as a stream still crashes the driver (attack a02 on the
H200). Nor can any check refuse a pointer to some other readable object, or a stream destroyed a moment
ago. (Asking whether the byte is *readable* -- ``write(2)`` of it into a pipe fails with ``EFAULT`` --
closes the first gap; it is on branch next-verify, waiting for a device run.)

Linux only (the driver rawcuda loads is ``libcuda.so``); elsewhere the answer is "cannot tell" (None).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
from ctypes import POINTER, c_int, c_size_t, c_ubyte, c_void_p

#: mincore() wants a page-aligned start; the page size is the kernel's, not a constant of ours.
PAGE_SIZE = mmap.PAGESIZE
ADDRESS_LIMIT = 1 << 64  # a pointer on a 64-bit host


class _Mincore:
    """The libc function, declared once on first use (``int mincore(void *addr, size_t length,
    unsigned char *vec)``), with the one-byte vector it writes for one page."""

    def __init__(self) -> None:
        self.function = None
        self.vector = (c_ubyte * 1)()
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None, use_errno=True).mincore
            except (OSError, AttributeError):
                return
            function.argtypes = [c_void_p, c_size_t, POINTER(c_ubyte)]
            function.restype = c_int
            self.function = function


_mincore: _Mincore | None = None


def is_mapped(address: int) -> bool | None:
    """True if the page holding ``address`` is mapped in this process, False if not, None if this platform
    cannot tell. Never reads the memory."""
    global _mincore
    if not 0 < address < ADDRESS_LIMIT:
        return False
    if _mincore is None:
        _mincore = _Mincore()
    function = _mincore.function
    if function is None:
        return None
    page = address - address % PAGE_SIZE
    if function(page, 1, _mincore.vector) == 0:
        return True
    code = ctypes.get_errno()
    # ENOMEM: not mapped. (EINVAL would mean a bad start, which page alignment rules out; say "cannot tell".)
    return False if code == errno.ENOMEM else None


__all__ = ["ADDRESS_LIMIT", "PAGE_SIZE", "is_mapped"]
