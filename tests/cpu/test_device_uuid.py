"""A device's UUID is its 16 raw bytes, zero bytes included.

cuda.h declares ``CUuuid`` as ``char bytes[16]``; ctypes reads a ``c_char`` array field as a C string and stops
at its first zero byte, so a UUID with a 0x00 inside (an H200 had one at byte 10) came back short and
``uuid.UUID`` refused it. The bytes here are such a UUID's.
"""

from __future__ import annotations

import ctypes
import uuid

from rawcuda.core.device import uuid_of
from rawcuda.ffi.types import CUuuid

WITH_ZEROS = bytes.fromhex("f9c91a48eb5ba5f6ef01 00 3c7a9e1042".replace(" ", ""))
ALL_ZERO = bytes(16)


def test_a_uuid_with_zero_bytes_keeps_all_sixteen() -> None:
    raw = CUuuid()
    ctypes.memmove(ctypes.addressof(raw), WITH_ZEROS, len(WITH_ZEROS))  # as the driver writes it
    assert uuid_of(raw) == uuid.UUID(bytes=WITH_ZEROS)


def test_an_all_zero_uuid_is_the_nil_uuid() -> None:
    assert uuid_of(CUuuid()) == uuid.UUID(bytes=ALL_ZERO)
