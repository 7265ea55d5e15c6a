"""Protocols: can this process read the byte at this address? -- the check before a foreign stream handle
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
passed that test and crashed the driver (seen on the H200). A readable page refuses small integers,
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

if sys.platform != "win32":  # POSIX only (the probe is off on Windows), and importing rawcuda must work there
    import fcntl

from rawcuda.ffi.constants import ADDRESS_LIMIT, DEFAULT_STREAMS

_ONE_BYTE = 1


#: The lowest descriptor the probe pipe may use: 0, 1 and 2 are stdin, stdout and stderr. A process started
#: with them closed would get the pipe there, and a later ``print`` would write into it (see :meth:`_Probe.pipe`).
FIRST_FREE_FD = 3
#: How much :meth:`_Probe.drain` reads at a time.
PIPE_DRAIN_CHUNK = 4096


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
        """In a forked child, before any of its own code runs: close the parent's pipe ends now, while their
        numbers still name them (later the child may reuse those numbers for its own files, and closing by
        number would close those), and make :meth:`pipe` create a new one."""
        self.lock = threading.Lock()  # a thread of the parent may have held it: it does not exist here
        for end in (self.read_end, self.write_end):
            if end >= 0:
                with contextlib.suppress(OSError):
                    os.close(end)
        self.read_end = self.write_end = -1
        self.pid = -1

    def pipe(self) -> tuple[int, int]:
        """The pipe of this process, made on first use. Raises OSError when it cannot be made (no free
        descriptor: EMFILE)."""
        if self.pid != os.getpid():
            # A child forked without the at-fork hook (a fork from C) still holds the parent's ends: they are
            # left open, never closed by number -- the child may have reused those numbers for its own files.
            ends = list(os.pipe())
            try:
                for i, end in enumerate(ends):
                    ends[i] = -1  # handed to _above_stdio, which closes it if it fails
                    ends[i] = _above_stdio(end)
                    os.set_blocking(ends[i], False)
            except OSError:
                for end in ends:  # each still open (never one closed already: its number may be reused)
                    if end >= 0:
                        with contextlib.suppress(OSError):
                            os.close(end)
                raise
            self.read_end, self.write_end = ends
            self.pid = os.getpid()
        return self.read_end, self.write_end

    def drain(self) -> None:
        """Empty the pipe (a byte left by a write whose read never came: a signal, an error in between)."""
        with contextlib.suppress(OSError):  # BlockingIOError: empty now
            while os.read(self.read_end, PIPE_DRAIN_CHUNK):
                pass


def _above_stdio(fd: int) -> int:
    """``fd`` itself, or -- if it took the place of stdin, stdout or stderr -- a close-on-exec copy of it
    at 3 or above, the low one closed."""
    if fd >= FIRST_FREE_FD:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, FIRST_FREE_FD)
    finally:
        os.close(fd)
    return high


_probe: _Probe | None = None
_probe_lock = threading.Lock()


def _reset_probe_lock() -> None:
    global _probe_lock
    _probe_lock = threading.Lock()  # a thread of the parent may have held it at fork: it does not exist here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_probe_lock)


def is_readable(address: int) -> bool | None:
    """True if this process can read the byte at ``address``, False if not, None if this platform cannot
    tell (or cannot now: no descriptor is free for the pipe). The memory is read by the kernel on the
    process's behalf, never by the process itself."""
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
        try:
            read_end, write_end = probe.pipe()
        except OSError:
            return None  # EMFILE, ENFILE: "cannot tell", never an exception from a check
        for attempt in range(2):
            if probe.write(write_end, address, _ONE_BYTE) == _ONE_BYTE:
                with contextlib.suppress(OSError):
                    os.read(read_end, _ONE_BYTE)
                return True
            code = ctypes.get_errno()
            if code != errno.EAGAIN or attempt:
                break
            probe.drain()  # full (bytes left behind): empty it and try once more
    return False if code == errno.EFAULT else None


def is_bad_stream(number: int) -> bool:
    """True for a stream number that the driver would crash reading: not 1 or 2 (names, not pointers), and
    pointing at nothing this process can read. False when it may be a stream (or this platform cannot tell).
    The one check behind DLPack's ``stream=`` (rawcuda.protocols.dlpackargs) and the CUDA Array Interface's ``"stream"``
    (rawcuda.protocols.cai), which each raise their own error."""
    return number not in DEFAULT_STREAMS and is_readable(number) is False


__all__ = ["is_bad_stream", "is_readable"]
