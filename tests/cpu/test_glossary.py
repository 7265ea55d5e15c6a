"""docs/glossary.md: every term issue 13 named is defined, in the shape tutorials/_glossary.py reads, and the
tutorials' ``t.term(...)`` calls name its terms -- in the first tutorial that uses each.

The tutorials are read, not run (``ast``): the names a tutorial prints are the string literals of its
``t.step``/``t.say``/``t.check``/``t.term`` calls, f-string pieces included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import TUTORIAL_DIR, tutorial_module

glossary = tutorial_module("_glossary")

TUTORIALS = sorted(TUTORIAL_DIR.glob("[0-9][0-9]*_*.py"))
TERMS = glossary.parse(glossary.GLOSSARY.read_text(encoding="utf-8"))
DEFINITION_MAX_CHARS = 160  # t.term prints the definition as one line of a tutorial's output
PRINTING_METHODS = {"step", "say", "check", "term"}
NONE_YET = "none yet"

# Issue 13: "terms used before they are taught"; each must be in the glossary under its name or another one.
REQUIRED = [
    "legacy default stream",
    "per-thread default stream",
    "pageable memory",
    "pinned memory",
    "page-locked memory",
    "context",
    "primary context",
    "current context",
    "context stack",
    "PTX",
    "cubin",
    "SASS",
    "JIT",
    "SM",
    "warp",
    "lane",
    "block",
    "grid",
    "occupancy",
    "coalescing",
    "shared memory",
    "bank conflict",
    "register",
    "L2",
    "HBM",
    "stream",
    "event",
    "kernel",
    "launch configuration",
    "unified memory",
    "managed memory",
    "page fault",
    "page migration",
    "graph",
    "capture",
    "VMM",
    "CUresult",
    "sticky error",
    "DLPack",
    "CAI",
    "__cuda_array_interface__",
]


# --- the glossary itself ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REQUIRED)
def test_the_glossary_defines(name: str) -> None:
    assert name.casefold() in glossary.terms(), f"docs/glossary.md needs an entry (or an *Also called:*) for {name!r}"


def test_each_name_leads_to_one_entry() -> None:
    names = [name.casefold() for term in TERMS for name in term.names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    assert not repeated, f"names in more than one entry: {repeated}"
    anchors = [glossary.anchor(term.name) for term in TERMS]
    assert len(set(anchors)) == len(anchors), "two headings with the same link"


@pytest.mark.parametrize("term", TERMS, ids=[t.name for t in TERMS])
def test_each_entry_has_a_short_definition_and_its_tutorials(term: glossary.Term) -> None:
    definition = term.definition
    assert definition, f"{term.name}: no definition paragraph"
    assert len(definition) <= DEFINITION_MAX_CHARS, f"{term.name}: make the first paragraph one short sentence"
    assert definition.endswith("."), f"{term.name}: the definition is a sentence"
    entry = section_of(term.name)
    assert "*Tutorials:*" in entry, f"{term.name}: say which tutorials teach it (or {NONE_YET!r})"
    if not term.tutorials:
        assert NONE_YET in entry, f"{term.name}: *Tutorials:* lists no tutorial number"
    for number in term.tutorials:
        part = re.compile(rf"{number}[a-z]?_")  # 05 is 05_errors.py, or each of 05a_..., 05b_... once split
        assert any(part.match(p.stem) for p in TUTORIALS), f"{term.name}: there is no tutorial {number}"


def section_of(name: str) -> str:
    text = glossary.GLOSSARY.read_text(encoding="utf-8")
    start = text.index(f"\n### {name}\n")
    following = re.search(r"\n##+ ", text[start + 1 :])
    return text[start : start + 1 + following.start()] if following else text[start:]


def test_the_parser_reads_the_format() -> None:
    text = "# G\n\n## Topic\n\n### thing\n\nA thing.\n\nMore.\n\n*Also called:* `stuff`, item. *Tutorials:* 03, 05a.\n"
    (term,) = glossary.parse(text)
    assert (term.name, term.definition, term.aliases, term.tutorials) == (
        "thing",
        "A thing.",
        ("stuff", "item"),
        ("03", "05a"),
    )
    assert term.link == "docs/glossary.md#thing"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("legacy default stream", "legacy-default-stream"),
        ("CUresult", "curesult"),
        ("per-thread default stream", "per-thread-default-stream"),
    ],
)
def test_links_are_githubs_heading_anchors(heading: str, anchor: str) -> None:
    assert glossary.anchor(heading) == anchor


# --- the tutorials' t.term calls ---------------------------------------------------------------------------------
def calls(path: Path, methods: set[str]) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
    ]


def printed_text(path: Path) -> str:
    """The string literals a tutorial prints through the frame, joined."""
    pieces = [
        node.value
        for call in calls(path, PRINTING_METHODS)
        for arg in call.args
        for node in ast.walk(arg)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    return "\n".join(pieces)


def introduced(path: Path) -> dict[str, str]:
    """The glossary entries a tutorial's t.term calls introduce: {entry name: the name the call used}."""
    found: dict[str, str] = {}
    for call in calls(path, {"term"}):
        first = call.args[0] if call.args else None
        assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
            f"{path.name}:{call.lineno}: t.term's first argument must be a string literal, so this test can check it"
        )
        found[glossary.lookup(first.value).name] = first.value
    return found


def mentions(text: str, names: tuple[str, ...]) -> bool:
    for name in names:
        flags = 0 if any(c.isupper() for c in name) else re.IGNORECASE  # "SM" is not "sm_90"; "Warp" is "warp"
        if re.search(rf"(?<![\w-]){re.escape(name)}(?:e?s)?(?![\w-])", text, flags):
            return True
    return False


def first_use_problems(paths: list[Path]) -> list[str]:
    """For each term some tutorial introduces with t.term: the first tutorial (in order) that prints the term
    must be the one that introduces it. A term no tutorial introduces is not checked (yet)."""
    introduced_in = {path: introduced(path) for path in paths}
    problems = []
    for name in sorted({name for found in introduced_in.values() for name in found}):
        names = glossary.lookup(name).names
        first = next(path for path in paths if mentions(printed_text(path), names))
        if name not in introduced_in[first]:
            later = [path.name for path in paths if name in introduced_in[path]]
            problems.append(f"{name!r} is first printed by {first.name}, but introduced with t.term in {later}")
    return problems


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_every_term_a_tutorial_introduces_is_in_the_glossary(path: Path) -> None:
    introduced(path)  # raises, naming the term and the file, for a name the glossary lacks


def test_each_introduced_term_is_introduced_where_it_is_first_printed() -> None:
    assert not first_use_problems(TUTORIALS), "\n".join(first_use_problems(TUTORIALS))


def test_the_first_use_rule_catches_a_late_introduction(tmp_path: Path) -> None:
    early = tmp_path / "01_early.py"
    late = tmp_path / "02_late.py"
    early.write_text('t.step("launch 8 warps per block")\n')
    late.write_text('t.term("warp")\nt.say("a warp is 32 threads")\n')
    assert first_use_problems([early, late]) == [
        "'warp' is first printed by 01_early.py, but introduced with t.term in ['02_late.py']"
    ]
    early.write_text('t.step("launch 8 warps per block")\nt.term("warp")\n')
    assert first_use_problems([early, late]) == []
    early.write_text('t.say(f"{n} SMs on sm_90")\n')  # an f-string's pieces count; "sm_90" is not "SM"
    late.write_text('t.term("streaming multiprocessor")\n')
    assert first_use_problems([early, late]) == [
        "'SM' is first printed by 01_early.py, but introduced with t.term in ['02_late.py']"
    ]
