"""rawcuda.ffi.hostmap: "is anything mapped at this address?" answered by mincore(2), never by reading it."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from rawcuda.ffi.hostmap import ADDRESS_LIMIT, PAGE_SIZE, is_mapped

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore(2) is Linux's")


def test_live_memory_is_mapped() -> None:
    buffer = ctypes.create_string_buffer(16)
    assert is_mapped(ctypes.addressof(buffer)) is True
    assert is_mapped(ctypes.addressof(buffer) + 15) is True, "an address inside a page, not only its start"
    assert is_mapped(id(buffer)) is True, "a Python object lives in mapped memory"


@pytest.mark.parametrize("address", [0, 3, PAGE_SIZE - 1, 0xDEAD_BEEF_000, 0x7FFF_FFFF_FFFF_FFFF, -1, ADDRESS_LIMIT])
def test_numbers_that_point_at_nothing_are_not_mapped(address: int) -> None:
    assert is_mapped(address) is False


def test_a_page_unmapped_again_is_seen_as_unmapped() -> None:
    # The case a stale handle makes: memory that was real and has been given back to the kernel.
    region = mmap.mmap(-1, 4 * PAGE_SIZE)
    view = ctypes.c_char.from_buffer(region)
    address = ctypes.addressof(view)
    assert is_mapped(address + 3 * PAGE_SIZE) is True
    del view
    region.close()
    assert is_mapped(address) is False and is_mapped(address + 3 * PAGE_SIZE) is False
