"""The cust code the tutorials and docs show belongs to one named tree, and says so.

Two codebases carry the number cust 0.3.2. The tree the project quotes is Rust-GPU/Rust-CUDA at commit
ac2674f: its cust calls ``cust_raw::driver_sys``, bindings bindgen writes when cust_raw is built, and
``crates/cust/src/lib.rs`` re-exports no ``sys``. The crates.io release of February 2022 is older code: it
has ``pub use cust_raw as sys;``, bindings generated once from CUDA 11.4 (``crates/cust_raw/src/cuda.rs``)
and calls such as ``cuda::cuMemAlloc_v2``. A spelling of that release is therefore shown only beside the
word crates.io; a bare "cust 0.3.2" names the tree it was read from.
"""

from __future__ import annotations

import ast
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


# --- launch!: what compiles ------------------------------------------------------------------------------------
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]*_*.py"))
LAUNCH = "launch!("
UNSAFE_BLOCK = "unsafe {"


def literal_text(node: ast.AST) -> str:
    """The text a call's string arguments print: constants, f-string pieces (a placeholder for each value)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(literal_text(part) if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal_text(node.left) + literal_text(node.right)
    return ""


def printed_snippets(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every call whose string arguments show a launch! of cust."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call):
            text = "\n".join(literal_text(arg) for arg in node.args)
            if LAUNCH in text:
                found.append((node.lineno, text))
    return found


def test_the_tutorials_show_launch() -> None:
    assert sum(len(printed_snippets(path)) for path in TUTORIALS) > 1, "the search below finds the snippets"


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_every_launch_shown_is_inside_an_unsafe_block(path: Path) -> None:
    """launch! expands to a call of the unsafe fn Stream::launch: outside an unsafe block it is error E0133."""
    outside = [
        f"{path.name}:{line}"
        for line, text in printed_snippets(path)
        for found in re.finditer(re.escape(LAUNCH), text)
        if text.count(UNSAFE_BLOCK, 0, found.start()) == 0
    ]
    assert not outside, f"launch! outside `unsafe {{ ... }}` does not compile: {outside}"


def test_02_launches_with_device_pointers() -> None:
    """launch! takes DeviceCopy values; a DeviceBuffer is not one (and `&buf` would pass the struct's address)."""
    (line, text), *_ = printed_snippets(ROOT / "tutorials" / "02_classes_vector_add.py")
    arguments = text.split(">>>(", 1)[1]
    assert arguments.count(".as_device_ptr()") == 3, f"02_classes_vector_add.py:{line}: {text}"


def test_function_has_no_launch_method() -> None:
    """cust's Function has no launch: the launch! macro calls the hidden Stream::launch."""
    said = [shown(path) for path in TEXTS if "Function::launch" in path.read_text(encoding="utf-8")]
    assert not said, f"there is no Function::launch in cust: {said}"


def readme_row(path: Path) -> list[str]:
    """The cells of tutorials/README.md's table row for the tutorial ``path``."""
    readme = (ROOT / "tutorials" / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith(f"| {path.stem.split('_', 1)[0]} | ")]
    return [cell.strip() for cell in row.strip("|").split(" | ")]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_the_readme_claims_cust_code_only_where_the_tutorial_shows_it(path: Path) -> None:
    mirrored = readme_row(path)[-1]  # the last column: "cust item it mirrors"
    if "cust" not in path.read_text(encoding="utf-8"):
        assert mirrored.startswith("none"), f"{path.name} shows no cust code, but its README row lists: {mirrored}"
