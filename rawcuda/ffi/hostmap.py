"""Layer 0: can this process read the byte at this address? -- the check before a foreign stream handle
reaches the driver.

A ``CUstream`` is a pointer into the driver's own memory, and the driver trusts it: give
``cuStreamWaitEvent`` the number 3, or a device pointer mistaken for a stream, and it reads there -- a
segmentation fault that takes the whole interpreter with it, no exception possible. rawcuda makes its own
streams, so their handles are sound; but DLPack's ``__dlpack__(stream=...)`` and the CUDA Array Interface's
``"stream"`` hand it numbers from *other* code.

No driver call can ask "is this a stream?" without reading the pointer first. What the kernel can say
safely is whether one byte there is *readable*: ``write(2)`` of that byte into a pipe copies it inside
the kernel, which fails with ``EFAULT`` instead of faulting the process. Why not ``mincore(2)``, which
asks only whether a page is mapped? Because the likeliest wrong numbers are mapped: a device pointer lies
in the driver's address reservation, mapped with no access at all (``---p`` in ``/proc/self/maps``), and
passed that test and crashed the driver (attack a02 on the H200). A readable page refuses small integers,
device pointers, ``PROT_NONE`` guard pages and unmapped garbage -- though not a pointer to some other
readable object, nor a stream destroyed a moment ago whose memory the driver still holds: nothing short
of the driver could tell those apart, and it does not offer to.

Linux and other POSIX systems (the driver rawcuda loads is ``libcuda.so``); without libc's ``write`` the
answer is "cannot tell" (None).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import threading
from ctypes import c_size_t, c_ssize_t, c_void_p

ADDRESS_LIMIT = 1 << 64  # a pointer on a 64-bit host
_ONE_BYTE = 1


class _Probe:
    """libc's ``write`` (declared once: ``ssize_t write(int fd, const void *buf, size_t count)``) and a pipe
    only this process reads. The pipe is made again in a forked child: parent and child would otherwise
    share it, and one could read the byte the other wrote."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.write = None
        self.pid = -1
        self.read_end = self.write_end = -1
        if sys.platform == "win32":
            return
        try:
            write = ctypes.CDLL(None, use_errno=True).write
        except (OSError, AttributeError):
            return
        write.argtypes = [ctypes.c_int, c_void_p, c_size_t]
        write.restype = c_ssize_t
        self.write = write
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self.lock = threading.Lock()  # a thread of the parent may have held it: it does not exist here

    def pipe(self) -> tuple[int, int]:
        if self.pid != os.getpid():
            if self.pid != -1:  # a forked child: close its copies of the parent's ends
                for end in (self.read_end, self.write_end):
                    with contextlib.suppress(OSError):
                        os.close(end)
            self.read_end, self.write_end = os.pipe()  # (the parent's ends, in a child, are left to the parent)
            for end in (self.read_end, self.write_end):
                os.set_blocking(end, False)
            self.pid = os.getpid()
        return self.read_end, self.write_end


_probe: _Probe | None = None
_probe_lock = threading.Lock()


def is_readable(address: int) -> bool | None:
    """True if this process can read the byte at ``address``, False if not, None if this platform cannot
    tell. The memory is read by the kernel on the process's behalf, never by the process itself."""
    global _probe
    if not 0 < address < ADDRESS_LIMIT:
        return False
    if _probe is None:
        with _probe_lock:
            if _probe is None:
                _probe = _Probe()
    probe = _probe
    if probe.write is None:
        return None
    with probe.lock:  # one byte in the pipe at a time: each caller reads back its own
        read_end, write_end = probe.pipe()
        if probe.write(write_end, address, _ONE_BYTE) == _ONE_BYTE:
            os.read(read_end, _ONE_BYTE)
            return True
        code = ctypes.get_errno()
    return False if code == errno.EFAULT else None


__all__ = ["ADDRESS_LIMIT", "is_readable"]
