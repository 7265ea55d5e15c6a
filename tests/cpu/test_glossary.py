"""docs/glossary.md: every term the tutorials use before teaching it is defined, in the shape
tutorials/_glossary.py reads, and the tutorials' ``t.term(...)`` calls define each word the learning path
uses -- in the first tutorial that prints it, at the step that first prints it.

The tutorials are read, not run (``ast``): what a tutorial prints is the string literals of its
``t.step``/``t.say``/``t.check``/``t.term`` calls -- f-string pieces included, and the text of a module-level
constant a call names (``t.say(SHUFFLE_TREE)``) -- with line breaks read as spaces. Text a tutorial prints from
data (a kernel's source, a table from rawcuda) is out of sight; where such text uses a term, the tutorial's
own ``t.term`` call there is what prints the word, and so what this test sees.
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

# Terms the tutorials use before they teach them; each must be in the glossary under its name or another one.
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
# The words the learning path uses: each must be defined by a t.term call in some tutorial. With the
# rules below, that is the first tutorial (in file order: 00a, 00b, 01, 02, 03a ... 14) that prints it.
INTRODUCED = [
    "CUresult",
    "NVRTC",
    "context",
    "primary context",
    "current context",
    "kernel",
    "PTX",
    "grid",
    "block",
    "shared memory",
    "stream",
    "legacy default stream",
    "SM",
    "compute capability",
    "pageable memory",
    "JIT",
    "register",
    "warp",
    "lane",
    "bank conflict",
    "coalescing",
    "occupancy",
    "sticky error",
    "event",
    "pinned memory",
    "unified memory",
    "L2",
    "graph",
    "capture",
    "page fault",
    "cubin",
    "VMM",
    "CAI",
    "soname",
    "errcheck",
    "grid-stride loop",
    "dynamic shared memory",
    "name mangling",
    "wave",
    "launch bounds",
    "copy engine",
    "UVA",
    "tensor core",
    "TF32",
]


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def calls(path: Path, methods: set[str]) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(parse(path))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
    ]


def constants(path: Path) -> dict[str, str]:
    """The module-level names bound to text (``SHUFFLE_TREE = \"\"\"...\"\"\"``): printing the name prints it."""
    named = {}
    for node in parse(path).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        pieces = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for target in targets:
            if isinstance(target, ast.Name) and pieces and node.value is not None:
                named[target.id] = "\n".join(pieces)
    return named


def call_text(call: ast.Call, named: dict[str, str]) -> str:
    """What one printing call prints, as far as its source says, with every run of whitespace one space (a
    message may break a term across two lines)."""
    pieces = []
    for arg in call.args:
        for node in ast.walk(arg):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                pieces.append(node.value)
            elif isinstance(node, ast.Name) and node.id in named:
                pieces.append(named[node.id])
    return " ".join(" ".join(pieces).split())


def printed_text(path: Path) -> str:
    """Everything a tutorial prints through the frame, as far as its source says, joined."""
    named = constants(path)
    return "\n".join(call_text(call, named) for call in calls(path, PRINTING_METHODS))


def run_order(path: Path, methods: frozenset[str] = frozenset(PRINTING_METHODS)) -> list[ast.Call]:
    """The printing calls of a tutorial in the order a run reaches them, as far as the source says: ``main``'s
    body in order (the module's, for a file without one), each call of another function of the file followed
    into it, both branches of an ``if``, a loop's body once, a call's arguments before the call."""
    tree = parse(path)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    found: list[ast.Call] = []

    def visit(node: ast.AST, inside: frozenset[str]) -> None:
        for child in ast.iter_child_nodes(node):
            visit(child, inside)
            if not isinstance(child, ast.Call):
                continue
            if method(child) in methods:
                found.append(child)
            elif isinstance(child.func, ast.Name) and child.func.id in functions and child.func.id not in inside:
                visit(functions[child.func.id], inside | {child.func.id})  # not into itself: no recursion

    visit(functions.get("main", tree), frozenset({"main"}))
    return found


def method(call: ast.Call) -> str:
    """``step`` for ``t.step(...)``; empty for a call that is not a method call."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def term_name(call: ast.Call, path: Path) -> str:
    """The glossary entry a t.term call names (its first argument must be a string literal, to be checked)."""
    first = call.args[0] if call.args else None
    assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
        f"{path.name}:{call.lineno}: t.term's first argument must be a string literal, so this test can check it"
    )
    return glossary.lookup(first.value).name


def introduced(path: Path) -> dict[str, str]:
    """The glossary entries a tutorial's t.term calls introduce: {entry name: the name the call used}."""
    found = {}
    for call in calls(path, {"term"}):
        found[term_name(call, path)] = ast.literal_eval(call.args[0])
    return found


def listed_words(path: Path) -> list[str]:
    """The glossary entries a tutorial's ``t.words(...)`` block names (each argument a string literal)."""
    found = []
    for call in calls(path, {"words"}):
        for arg in call.args:
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
                f"{path.name}:{call.lineno}: t.words takes string literals, so this test can check them"
            )
            found.append(glossary.lookup(arg.value).name)
    return found


def undefined_problems(path: Path) -> list[str]:
    """The glossary terms a tutorial prints without defining them itself, by t.term or in its t.words block:
    a learner may open any tutorial first. The block runs before step 1 and names no term the tutorial teaches."""
    printed = printed_text(path)
    taught, words = introduced(path), listed_words(path)
    problems = [
        f"{path.name} prints {term.name!r} but neither t.term nor t.words defines it"
        for term in TERMS
        if mentions(printed, term.names) and term.name not in taught and term.name not in words
    ]
    problems += [f"{path.name}: {name!r} is both taught (t.term) and in t.words" for name in words if name in taught]
    problems += [f"{path.name}: t.words names {name!r} twice" for name in sorted(set(words)) if words.count(name) > 1]
    problems += [
        f"{path.name}: t.words names {name!r}, which it never prints"
        for name in words
        if not mentions(printed, glossary.lookup(name).names)
    ]
    order = [method(call) for call in run_order(path, frozenset(PRINTING_METHODS | {"words"}))]
    if "words" in order and "step" in order[: order.index("words")]:
        problems.append(f"{path.name}: t.words runs after a step; call it before step 1")
    return problems


def mentions(text: str, names: tuple[str, ...]) -> bool:
    for name in names:
        flags = 0 if any(c.isupper() for c in name) else re.IGNORECASE  # "SM" is not "sm_90"; "Warp" is "warp"
        if re.search(rf"(?<![\w-]){re.escape(name)}(?:e?s)?(?![\w-])", text, flags):
            return True
    return False


def first_use_problems(paths: list[Path]) -> list[str]:
    """For each term some tutorial introduces with t.term: the first tutorial (in order) that prints the term
    must be the one that introduces it."""
    introduced_in = {path: introduced(path) for path in paths}
    printed = {path: printed_text(path) for path in paths}
    problems = []
    for name in sorted({name for found in introduced_in.values() for name in found}):
        names = glossary.lookup(name).names
        first = next(path for path in paths if mentions(printed[path], names))
        if name not in introduced_in[first]:
            later = [path.name for path in paths if name in introduced_in[path]]
            problems.append(f"{name!r} is first printed by {first.name}, but introduced with t.term in {later}")
    return problems


def placement_problems(path: Path) -> list[str]:
    """Within one tutorial, in run order: each term's t.term call runs in the step that first prints the term
    (after the title that uses it is fine), not one or more steps later."""
    order = run_order(path)
    named = constants(path)
    problems = []
    for name, used in introduced(path).items():
        names = glossary.lookup(name).names
        term_at = next((i for i, c in enumerate(order) if method(c) == "term" and term_name(c, path) == name), None)
        if term_at is None:
            problems.append(f"{path.name}: t.term({used!r}) is not reached from main (call it in a step's own code)")
            continue
        first = next(i for i, call in enumerate(order) if mentions(call_text(call, named), names))
        later_steps = [c for c in order[first + 1 : term_at + 1] if method(c) == "step"]
        if later_steps:
            problems.append(
                f"{path.name}: {name!r} is first printed at line {order[first].lineno}, but t.term({used!r}) at line "
                f"{order[term_at].lineno} runs {len(later_steps)} step(s) later"
            )
    return problems


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_every_term_a_tutorial_introduces_is_in_the_glossary(path: Path) -> None:
    introduced(path)  # raises, naming the term and the file, for a name the glossary lacks


def test_each_introduced_term_is_introduced_where_it_is_first_printed() -> None:
    assert not first_use_problems(TUTORIALS), "\n".join(first_use_problems(TUTORIALS))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_each_term_is_introduced_in_the_step_that_first_prints_it(path: Path) -> None:
    assert not placement_problems(path), "\n".join(placement_problems(path))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_each_tutorial_defines_every_term_it_prints(path: Path) -> None:
    assert not undefined_problems(path), "\n".join(undefined_problems(path))


def test_the_own_words_rule_catches_an_undefined_term(tmp_path: Path) -> None:
    path = tmp_path / "05_words.py"
    path.write_text("def main(t):\n    t.step('launch 8 warps per block')\n")
    assert sorted(undefined_problems(path)) == [
        "05_words.py prints 'block' but neither t.term nor t.words defines it",
        "05_words.py prints 'warp' but neither t.term nor t.words defines it",
    ]
    path.write_text("def main(t):\n    t.words('warp', 'block')\n    t.step('launch 8 warps per block')\n")
    assert undefined_problems(path) == []
    path.write_text("def main(t):\n    t.step('launch 8 warps per block')\n    t.words('warp', 'block')\n")
    assert undefined_problems(path) == ["05_words.py: t.words runs after a step; call it before step 1"]
    path.write_text("def main(t):\n    t.words('warp', 'block', 'stream')\n    t.step('launch 8 warps per block')\n")
    assert undefined_problems(path) == ["05_words.py: t.words names 'stream', which it never prints"]
    path.write_text("def main(t):\n    t.words('warp', 'block')\n    t.step('8 warps per block')\n    t.term('warp')\n")
    assert undefined_problems(path) == ["05_words.py: 'warp' is both taught (t.term) and in t.words"]


@pytest.mark.parametrize("name", INTRODUCED)
def test_every_word_of_the_path_is_introduced_by_some_tutorial(name: str) -> None:
    everywhere = {entry for path in TUTORIALS for entry in introduced(path)}
    assert glossary.lookup(name).name in everywhere, (
        f"no tutorial calls t.term({name!r}): add it where it is first used"
    )


def test_the_glossary_lists_the_tutorials_that_introduce_its_terms() -> None:
    missing = []
    for path in TUTORIALS:
        number = path.stem.split("_", 1)[0]  # "03e"; the glossary may list it as "03e" or as "03"
        for name in introduced(path):
            listed = glossary.lookup(name).tutorials
            if not any(number == n or (n.isdigit() and number[:2] == n) for n in listed):
                missing.append(f"{name}: *Tutorials:* {', '.join(listed) or NONE_YET} lacks {number}")
    assert not missing, "docs/glossary.md, " + "; ".join(missing)


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
    early.write_text('TREE = """lanes 0..31 of a\nwarp"""\nt.say(TREE)\n')  # a named constant; a broken line
    late.write_text('t.term("warp")\n')
    assert first_use_problems([early, late]) == [
        "'warp' is first printed by 01_early.py, but introduced with t.term in ['02_late.py']"
    ]


def test_the_placement_rule_follows_the_run(tmp_path: Path) -> None:
    path = tmp_path / "03_steps.py"
    path.write_text(
        "def main(t):\n"
        "    t.step('the launch: 8 warps per block')\n"
        "    later(t)\n"
        "def later(t):\n"
        "    t.step('what came back')\n"
        "    t.term('warp')\n"
    )
    assert placement_problems(path) == [
        "03_steps.py: 'warp' is first printed at line 2, but t.term('warp') at line 6 runs 1 step(s) later"
    ]
    path.write_text(
        "def main(t):\n"
        "    t.step('the launch')\n"
        "    first(t)\n"  # defined below main, but it runs here: the term is met in step 1
        "    t.step('8 warps per block, again')\n"
        "def first(t):\n"
        "    t.say('8 warps per block')\n"
        "    t.term('warp')\n"
    )
    assert placement_problems(path) == []
