"""What the docs and the tutorials' own texts point at exists, and sizes carry the unit they are in.

The tutorials were split into lettered parts (03 into 03a-03e, and so on), so a reference to "tutorial 06"
leads nowhere: a reference names the part. The same holds for a command that records a tutorial. And the
GPU's memory sizes are powers of two: 228 KiB of shared memory is 233,472 bytes, not 228,000.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

TUTORIAL_DIR = ROOT / "tutorials"
TEXTS = sorted(
    [
        *TUTORIAL_DIR.glob("*.py"),
        *TUTORIAL_DIR.glob("*.md"),
        TUTORIAL_DIR / "output" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
    ]
)
DECIMAL_KILOBYTES = re.compile(r"\b\d+(?:\.\d+)? KB\b")


def shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


@pytest.mark.parametrize("path", TEXTS, ids=shown)
def test_sizes_in_kilobytes_are_kib(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [f"{shown(path)}:{line_of(text, m.start())}: {m[0]}" for m in DECIMAL_KILOBYTES.finditer(text)]
    assert not found, f"the GPU's sizes are binary: write KiB (1,024 bytes), not KB: {found}"
