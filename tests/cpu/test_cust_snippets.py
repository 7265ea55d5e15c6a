"""The cust code the tutorials and docs show belongs to one named tree, and says so.

Two codebases carry the number cust 0.3.2. The tree the project quotes is Rust-GPU/Rust-CUDA at commit
ac2674f: its cust calls ``cust_raw::driver_sys``, bindings bindgen writes when cust_raw is built, and
``crates/cust/src/lib.rs`` re-exports no ``sys``. The crates.io release of February 2022 is older code: it
has ``pub use cust_raw as sys;``, bindings generated once from CUDA 11.4 (``crates/cust_raw/src/cuda.rs``)
and calls such as ``cuda::cuMemAlloc_v2``. A spelling of that release is therefore shown only beside the
word crates.io; a bare "cust 0.3.2" names the tree it was read from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

CITED_TREE = "ac2674f"
CRATES_IO = "crates.io"
# What only the crates.io release has: shown elsewhere, it is code the cited tree does not compile.
CRATES_IO_ONLY = ("cust::sys", "pub use cust_raw as sys", "cust_raw/src/cuda.rs", "cuda::cuMemAlloc_v2")
NEAR_CHARS = 400  # "beside": within this many characters, about five lines of a tutorial's output
TEXTS = sorted(
    [
        *(ROOT / "tutorials").glob("[0-9][0-9]*_*.py"),
        ROOT / "tutorials" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
    ]
)


def shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def around(text: str, start: int, end: int) -> str:
    return text[max(0, start - NEAR_CHARS) : end + NEAR_CHARS]


@pytest.mark.parametrize("path", TEXTS, ids=shown)
def test_a_crates_io_spelling_is_shown_beside_the_word_crates_io(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    bare = [
        f"{shown(path)}:{text.count(chr(10), 0, found.start()) + 1}: {spelling}"
        for spelling in CRATES_IO_ONLY
        for found in re.finditer(re.escape(spelling), text)
        if CRATES_IO not in around(text, found.start(), found.end())
    ]
    assert not bare, f"only crates.io's cust 0.3.2 has these; the cited tree {CITED_TREE} does not: {bare}"


@pytest.mark.parametrize("path", TEXTS, ids=shown)
def test_cust_0_3_2_names_the_tree_it_was_read_from(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    unnamed = [
        f"{shown(path)}:{text.count(chr(10), 0, found.start()) + 1}"
        for found in re.finditer(r"cust 0\.3\.2|Cargo\.toml(?: says|:) 0\.3\.2", text)
        if CITED_TREE not in around(text, found.start(), found.end())
        and CRATES_IO not in around(text, found.start(), found.end())
    ]
    assert not unnamed, f"say which cust 0.3.2: Rust-CUDA at {CITED_TREE}, or the crates.io release: {unnamed}"
