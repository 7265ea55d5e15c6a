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


NUMBERS = {path.stem.split("_", 1)[0] for path in TUTORIAL_DIR.glob("[0-9][0-9]*_*.py")}  # "00a", "08", ...
NUMBER = r"\d\d[a-z]?\b"
# "tutorial 06", "Tutorials 02, 07", "tutorials 05 and 07b", "tutorial 03a-03c": each number must exist.
REFERENCE = re.compile(rf"\b[Tt]utorials? ({NUMBER}(?:(?:, | and | or |-|/){NUMBER})*)")


def references(text: str) -> list[tuple[int, str]]:
    """(offset, number) of every tutorial number the text refers to."""
    return [(found.start(), number) for found in REFERENCE.finditer(text) for number in re.findall(NUMBER, found[1])]


def test_the_reference_pattern_reads_lists() -> None:
    text = "tutorial 06's race; tutorials 02, 07b and 13; Tutorial 03a-03c"
    assert [number for _, number in references(text)] == ["06", "02", "07b", "13", "03a", "03c"]


@pytest.mark.parametrize("path", TEXTS, ids=shown)
def test_every_tutorial_referred_to_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    missing = [f"{shown(path)}:{line_of(text, at)}: {n}" for at, n in references(text) if n not in NUMBERS]
    assert not missing, f"no tutorial has these numbers (split topics have lettered parts): {missing}"


def test_the_glossary_lists_tutorials_by_their_own_numbers() -> None:
    glossary = ROOT / "docs" / "glossary.md"
    lines = [line for line in glossary.read_text(encoding="utf-8").splitlines() if "*Tutorials:*" in line]
    listed = [(line, n) for line in lines for n in re.findall(NUMBER, line.split("*Tutorials:*", 1)[1])]
    missing = sorted({n for _, n in listed if n not in NUMBERS})
    assert listed and not missing, f"docs/glossary.md lists tutorials that do not exist: {missing}"


STEMS = {path.stem for path in TUTORIAL_DIR.glob("[0-9][0-9]*_*.py")}
ONLY = re.compile(r"record_outputs\.py --only (\w+)")


@pytest.mark.parametrize("path", [*TEXTS, TUTORIAL_DIR / "record_outputs.py"], ids=shown)
def test_every_recording_command_names_a_tutorial(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    wrong = [f"{shown(path)}:{line_of(text, m.start())}: {m[1]}" for m in ONLY.finditer(text) if m[1] not in STEMS]
    assert not wrong, f"--only takes a tutorial's file name without .py; no tutorial is called: {wrong}"
