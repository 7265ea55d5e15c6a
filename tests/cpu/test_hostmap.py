"""rawcuda.ffi.hostmap: "can this process read the byte at this address?" -- answered by the kernel (a write
of that byte into a pipe), never by touching the memory, so a wrong answer is a False, not a crash."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from collections.abc import Iterator

import pytest

from rawcuda.ffi.hostmap import ADDRESS_LIMIT, is_readable

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
