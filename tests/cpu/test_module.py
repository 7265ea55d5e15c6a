"""Module without a driver (CPU only): telling PTX, cubin and fatbin images apart; the driver-to-PTX-ISA table."""

from __future__ import annotations

from rawcuda.core.module import image_kind, max_ptx_isa


def test_image_kinds_and_ptx_isa_table() -> None:
    assert image_kind(b"\x7fELF....") == "cubin"
    assert image_kind((0xBA55ED50).to_bytes(4, "little") + b"rest") == "fatbin"
    assert image_kind(b"//\n.version 9.0") == "ptx"
    assert max_ptx_isa((13, 0)) == (9, 0) and max_ptx_isa((12, 8)) == (8, 7) and max_ptx_isa((12, 6)) == (8, 5)
    assert max_ptx_isa((11, 4)) == (7, 4) and max_ptx_isa((99, 0)) is None
