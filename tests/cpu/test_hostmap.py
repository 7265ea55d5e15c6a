"""rawcuda.protocols.hostmap: "can this process read the byte at this address?" -- answered by the kernel (a write
of that byte into a pipe), never by touching the memory, so a wrong answer is a False, not a crash."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from rawcuda.ffi.constants import ADDRESS_LIMIT
from rawcuda.protocols import hostmap
from rawcuda.protocols.hostmap import is_bad_stream, is_readable
from tests.helpers import needs_fork, run_python

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the probe writes into a POSIX pipe")

PAGE = mmap.PAGESIZE
THREADS = 8
PROT_NONE = 0  # <sys/mman.h>: no access at all (Python's mmap module names PROT_READ and PROT_WRITE only)
ROUNDS = 500


@pytest.fixture
def pages() -> Iterator[tuple[int, ctypes.CDLL]]:
    """Two fresh anonymous pages straight from libc's mmap (their address, and libc for mprotect/munmap)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = libc.mmap(None, 2 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), "mmap failed"
    yield address, libc
    libc.munmap(address, 2 * PAGE)


def test_live_memory_is_readable() -> None:
    buffer = ctypes.create_string_buffer(16)
    assert is_readable(ctypes.addressof(buffer)) is True
    assert is_readable(ctypes.addressof(buffer) + 15) is True, "an address inside a page, not only its start"
    assert is_readable(id(buffer)) is True, "a Python object lives in readable memory"


@pytest.mark.parametrize("address", [0, 1, 3, PAGE - 1, 0xDEAD_BEEF_000, 0x7FFF_FFFF_FFFF_FFFF, -1, ADDRESS_LIMIT])
def test_numbers_that_point_at_nothing_are_not_readable(address: int) -> None:
    assert is_readable(address) is False


def test_a_page_mapped_with_no_access_is_not_readable(pages: tuple[int, ctypes.CDLL]) -> None:
    # The shape of the driver's reservation behind every device pointer (---p in /proc/self/maps): mapped,
    # yet any read faults. A "is it mapped?" check (mincore) said yes here, and the driver crashed.
    address, libc = pages
    assert libc.mprotect(address + PAGE, PAGE, PROT_NONE) == 0
    assert is_readable(address) is True and is_readable(address + PAGE) is False
    assert libc.mprotect(address + PAGE, PAGE, mmap.PROT_READ) == 0
    assert is_readable(address + PAGE) is True, "read-only memory is readable"


def test_a_page_unmapped_again_is_not_readable(pages: tuple[int, ctypes.CDLL]) -> None:
    address, libc = pages
    assert libc.munmap(address + PAGE, PAGE) == 0  # (the fixture's munmap of both pages still succeeds)
    assert is_readable(address) is True and is_readable(address + PAGE) is False


def test_threads_each_get_their_own_answer(pages: tuple[int, ctypes.CDLL]) -> None:
    address, libc = pages
    assert libc.mprotect(address + PAGE, PAGE, PROT_NONE) == 0
    wrong: list[str] = []

    def ask(readable: int, unreadable: int) -> None:
        for _ in range(ROUNDS):
            if is_readable(readable) is not True or is_readable(unreadable) is not False:
                wrong.append(threading.current_thread().name)
                return

    workers = [threading.Thread(target=ask, args=(address, address + PAGE)) for _ in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert wrong == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_asks_through_its_own_pipe() -> None:
    buffer = ctypes.create_string_buffer(8)
    assert is_readable(ctypes.addressof(buffer)) is True  # the parent's pipe exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: both answers right, then leave without running pytest's exit handlers
        ok = is_readable(ctypes.addressof(buffer)) is True and is_readable(3) is False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert is_readable(ctypes.addressof(buffer)) is True and is_readable(3) is False, "the parent's probe still works"


# --- the pipe itself: no descriptors, closed stdio, fork --------------------------------------------------------------
# Each runs in a fresh interpreter: the probe's pipe is made once per process, and these change the process.
PROBE_PREAMBLE = """
import ctypes, json, os, sys
from rawcuda.protocols import hostmap
live = ctypes.create_string_buffer(b"x")
LIVE, UNMAPPED = ctypes.addressof(live), 0xDEAD_BEEF_000
"""


def probe_script(body: str) -> dict:
    """Run PROBE_PREAMBLE + ``body``, which writes one JSON line to stderr (stdout may be closed there)."""
    proc = run_python(PROBE_PREAMBLE + textwrap.dedent(body))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_no_free_descriptor_means_cannot_tell() -> None:
    # Before: os.pipe() raised OSError (EMFILE) out of is_readable, and so out of __dlpack__(stream=h).
    result = probe_script(
        """
        import resource
        from rawcuda.protocols import dlpack
        from rawcuda.protocols.dlpackabi import DLDeviceType
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        out = {"live": hostmap.is_readable(LIVE)}
        plan = dlpack.negotiate(
            DLDeviceType.CUDA, 0, stream=LIVE, max_version=None, dl_device=None, copy=None, host_accessible=False
        )
        out["sync"] = plan.sync == LIVE
        os.close(held.pop())
        os.close(held.pop())
        out["with two free"] = hostmap.is_readable(LIVE)
        print(json.dumps(out), file=sys.stderr)
        """
    )
    assert result == {"live": None, "sync": True, "with two free": True}


def test_closed_stdio_does_not_give_the_pipe_to_stdout() -> None:
    # Before: with stdin and stdout closed the pipe became fds 0 and 1; what the program then wrote to stdout
    # filled it, and the probe's write failed with EAGAIN: live memory and bad addresses both read as None.
    result = probe_script(
        """
        os.close(0)
        os.close(1)
        first = hostmap.is_readable(LIVE)
        try:
            os.write(1, b"written to stdout " * 10000)
        except OSError:
            pass
        ends = (hostmap._probe.read_end, hostmap._probe.write_end)
        out = {"first": first, "live": hostmap.is_readable(LIVE), "bad": hostmap.is_readable(UNMAPPED)}
        out["ends above stdio"] = min(ends) >= 3
        out["close on exec"] = not any(os.get_inheritable(end) for end in ends)
        print(json.dumps(out), file=sys.stderr)
        """
    )
    assert result == {"first": True, "live": True, "bad": False, "ends above stdio": True, "close on exec": True}


def test_a_full_pipe_is_drained_and_the_probe_tried_again() -> None:
    # A byte left behind (a read that never came) must not turn the answers into "cannot tell" for good.
    result = probe_script(
        """
        hostmap.is_readable(LIVE)
        probe = hostmap._probe
        try:
            while True:
                os.write(probe.write_end, b"y" * 4096)
        except BlockingIOError:
            pass
        out = {"live": hostmap.is_readable(LIVE), "bad": hostmap.is_readable(UNMAPPED)}
        print(json.dumps(out), file=sys.stderr)
        """
    )
    assert result == {"live": True, "bad": False}


@needs_fork
def test_a_forked_child_never_closes_its_own_files_by_the_parents_numbers() -> None:
    # Before: the child's first probe closed the parent's pipe ends by number -- by then, the numbers of files
    # the child had opened itself (here after closing what it inherited, as a daemon does).
    result = probe_script(
        """
        hostmap.is_readable(LIVE)
        ends = (hostmap._probe.read_end, hostmap._probe.write_end)
        hostmap._probe_lock.acquire()  # held by this thread at fork: the child must get a free one
        pid = os.fork()
        if pid == 0:
            code = 0
            for end in ends:
                try:
                    os.close(end)
                except OSError:
                    pass
            mine = [os.open(os.devnull, os.O_WRONLY) for _ in ends]
            code |= 1 if sorted(mine) != sorted(ends) else 0  # (the lowest free numbers: the parent's ends)
            code |= 2 if hostmap.is_readable(LIVE) is not True else 0
            code |= 2 if hostmap.is_readable(UNMAPPED) is not False else 0
            for fd in mine:
                try:
                    os.write(fd, b"still mine")
                except OSError:
                    code |= 4
            code |= 8 if not hostmap._probe_lock.acquire(blocking=False) else 0
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        hostmap._probe_lock.release()
        print(json.dumps({"child exit": os.waitstatus_to_exitcode(status), "here": hostmap.is_readable(LIVE)}),
              file=sys.stderr)
        """
    )
    assert result == {"child exit": 0, "here": True}


def test_the_stream_check_names_the_default_streams_and_refuses_the_unreadable() -> None:
    # One check for DLPack and the CUDA Array Interface: 1 and 2 are names (never read), 3 is read and crashes.
    live = ctypes.create_string_buffer(8)
    assert is_bad_stream(1) is False and is_bad_stream(2) is False
    assert is_bad_stream(3) is True and is_bad_stream(0xDEAD_BEEF_000) is True
    assert is_bad_stream(ctypes.addressof(live)) is False


def test_a_pipe_that_cannot_be_made_closes_only_its_own_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: when moving the second end failed, both original numbers were closed again -- the second one
    # already closed, and possibly reused by then (here by another file of this process, which went with it).
    probe = hostmap._Probe()
    real, reused = hostmap._above_stdio, []

    def second_fails(fd: int) -> int:
        if not reused:
            reused.append(-1)
            return real(fd)
        os.close(fd)  # as _above_stdio does when its copy fails
        reused[0] = os.open(os.devnull, os.O_RDONLY)  # another file takes the lowest free number: fd's
        raise OSError(errno.EMFILE, "no free descriptor")

    monkeypatch.setattr(hostmap, "_above_stdio", second_fails)
    with pytest.raises(OSError, match="no free descriptor"):
        probe.pipe()
    try:
        os.fstat(reused[0])  # still open: the failed pipe closed only its own descriptors
    finally:
        os.close(reused[0])
