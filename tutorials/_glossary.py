"""docs/glossary.md read as data: each term's names, its one-paragraph definition, the tutorials that teach it.

``t.term("occupancy")`` prints the definition from here the first time a tutorial run uses the term, so
the glossary is the one place a definition is written. The file keeps a small fixed shape, which
tests/cpu/test_glossary.py holds it to::

    ## A topic                               <- level 2 only groups terms
    ### occupancy                            <- one level-3 heading per term: its name

    The definition: one short paragraph. This is the text ``t.term`` prints.

    Any further paragraphs: details, numbers for the H200, where the driver API shows it.

    *Also called:* another name, a third. *Tutorials:* 03 (taught), 01.

The names after *Also called:* find the same entry (``t.term("page-locked memory")``), matched without
regard to case. *Tutorials:* lists tutorial numbers (``06``, or ``05a`` for a lettered part), the one that
teaches the term first.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"
GLOSSARY_LINK = "docs/glossary.md"  # how the tutorials' output points at it: relative to the checkout

_TERM_HEADING = "### "
_SECTION_HEADING = "## "
_ALSO = re.compile(r"\*Also called:\*\s*(?P<names>[^*]*?)\.?\s*(?=\*|$)")
_TUTORIALS = re.compile(r"\*Tutorials:\*\s*(?P<list>.*)$")
_TUTORIAL_NUMBER = re.compile(r"\b\d\d[a-z]?\b")
_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]")  # GitHub's heading anchors keep letters, digits, _, - and spaces


@dataclass(frozen=True)
class Term:
    name: str
    definition: str
    aliases: tuple[str, ...]
    tutorials: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def link(self) -> str:
        """Where the full entry is: ``docs/glossary.md#occupancy``."""
        return f"{GLOSSARY_LINK}#{anchor(self.name)}"


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return _NOT_IN_ANCHOR.sub("", heading.strip().lower()).replace(" ", "-")


def parse(text: str) -> list[Term]:
    """Every term of a glossary in the format above, in file order."""
    terms: list[Term] = []
    for name, body in _entries(text):
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", body) if p.strip()]
        meta = [p for p in paragraphs if p.startswith(("*Also called:*", "*Tutorials:*"))]
        prose = [p for p in paragraphs if p not in meta]
        aliases: tuple[str, ...] = ()
        tutorials: tuple[str, ...] = ()
        for line in meta:
            if found := _ALSO.search(line):
                aliases = tuple(a.strip().strip("`") for a in found["names"].split(",") if a.strip())
            if found := _TUTORIALS.search(line):
                tutorials = tuple(_TUTORIAL_NUMBER.findall(found["list"]))
        terms.append(Term(name, prose[0] if prose else "", aliases, tutorials))
    return terms


def _entries(text: str) -> list[tuple[str, str]]:
    """(heading, body) for each level-3 heading; a body ends at the next heading of level 2 or 3."""
    entries: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(_TERM_HEADING):
            entries.append((line[len(_TERM_HEADING) :].strip(), []))
        elif line.startswith(_SECTION_HEADING) or line.startswith("# "):
            entries.append(("", []))  # a section heading closes the entry before it
        elif entries:
            entries[-1][1].append(line)
    return [(name, "\n".join(body)) for name, body in entries if name]


@functools.cache
def terms() -> dict[str, Term]:
    """docs/glossary.md, by every name of every term (case-folded)."""
    return {name.casefold(): term for term in parse(GLOSSARY.read_text(encoding="utf-8")) for name in term.names}


def lookup(name: str) -> Term:
    """The glossary entry called ``name`` (or one of its other names); KeyError naming the file if none."""
    try:
        return terms()[name.casefold()]
    except KeyError:
        raise KeyError(f"{name!r} is not a term in {GLOSSARY}: add a '### {name}' entry there") from None


__all__ = ["GLOSSARY", "GLOSSARY_LINK", "Term", "anchor", "lookup", "parse", "terms"]
