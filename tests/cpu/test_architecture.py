"""The architecture of docs/architecture.md, enforced: folders, imports, the guard seam, private names, sizes.

Everything here reads the source with :mod:`ast` (nothing is imported or run), so it holds on any machine:

* **no import cycles** among rawcuda's modules, counting imports inside functions (``TYPE_CHECKING``
  blocks excepted), with the documented exceptions: ``await stream`` / ``await event`` import extras/aio;
* **folders import downward only**: ffi/ nothing outside itself; checked/ ffi/; protocols/ those two;
  core/ (with core/guards/) those three; graphs/ and extras/ core and below; ops/ all of these;
  testing/ every layer but tools (the kernels package data is anyone's);
* **the guard seam**: every name a module outside core/guards/ takes from it is listed in GUARD_SEAM, and
  every listed name is really taken, so a new call into the machinery is a decision, not an accident;
* **private names stay in their file**: no ``from rawcuda.x import _name``, and no ``obj._attr`` whose
  ``_attr`` is not defined in the same file;
* **the driver table tells the truth**: each row is called by rawcuda or listed in NOT_CALLED_BY_RAWCUDA
  with its reason, never both;
* **files hold one concept and say what it is**: at most MAX_CODE_LINES lines of code (docstrings and
  comments not counted) and a docstring naming the folder's role; in core/, a module docstring of at most
  MAX_CORE_DOC_LINES lines, and docstrings of at most MAX_CORE_WORDS_PER_SENTENCE words a sentence on average.

Each rule is a function of plain data (edges, files), and each is also tested on a small bad example, so
that a rule which could never fail would be noticed.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rawcuda.ffi.cuda import NOT_CALLED_BY_RAWCUDA
from rawcuda.ffi.cuda import TABLE as CUDA_TABLE
from rawcuda.ffi.nvrtc import TABLE as NVRTC_TABLE

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "rawcuda"
MAX_CODE_LINES = 300  # lines holding code: a docstring or a comment is never squeezed by the cap
MAX_CORE_DOC_LINES = 15  # a core module's docstring: what it is and why (the history is in docs/hazards.md)
MAX_CORE_WORDS_PER_SENTENCE = 16  # averaged over every docstring in core/ (layers 0 and 1 read at about 15)

#: The imports inside functions that are allowed, each with its reason (they would otherwise be cycles).
ALLOWED_LAZY_IMPORTS = {
    # aio (an extra) creates Streams and waits on Events, so it sits above both; `await stream` and `await
    # event` reach up to it only when a program awaits. Documented in Stream.__await__ and docs/architecture.md.
    ("rawcuda.core.stream", "rawcuda.extras.aio"),
    ("rawcuda.core.event", "rawcuda.extras.aio"),
    # event.py imports stream.py (an Event records on a Stream); Stream.wait() checks that it was given an Event.
    ("rawcuda.core.stream", "rawcuda.core.event"),
    # A downward import made late: compiling needs none of the launch stack (nor numpy), only loading the result.
    # Documented in Program.load and docs/architecture.md.
    ("rawcuda.extras.nvrtc", "rawcuda.core.module"),
}

#: Every name taken from core/guards/ by a module outside it: (importer, "guard.name"). A guard module imported
#: whole (``from .guards import contextstack``) counts by the attributes read of it. docs/architecture.md lists
#: the same calls ("The guard seam"); what each guard answers is in docs/hazards.md.
GUARD_SEAM = {
    ("rawcuda.core.context", "contextregistry.register"),
    ("rawcuda.core.context", "contextregistry.is_poisoned"),
    ("rawcuda.core.streamargs", "contextregistry.live_contexts"),
    ("rawcuda.core.context", "contextstack.created"),
    ("rawcuda.core.context", "contextstack.destroy"),
    ("rawcuda.core.context", "contextstack.enter_block"),
    ("rawcuda.core.context", "contextstack.end_block"),
    ("rawcuda.core.context", "contextstack.leave"),
    ("rawcuda.core.context", "contextstack.pushed"),
    ("rawcuda.core.context", "current.make_current"),
    ("rawcuda.core.launchcall", "current.WRONG_CONTEXT_CODES"),
    ("rawcuda.core.launchcall", "current.make_current"),
    ("rawcuda.core.resource", "capturedeferral.finalize_child"),
    ("rawcuda.core.resource", "capturedeferral.finalize_weak_child"),
    ("rawcuda.core.stream", "capturedeferral.capture_deferral"),
    ("rawcuda.core.devicebuffer", "pending.PendingStream"),
    ("rawcuda.core.pinned", "pending.PendingStream"),
    ("rawcuda.core.kernelargs", "pending.PendingStream"),
    ("rawcuda.core.function", "pending.legacy_stream"),
    ("rawcuda.core.function", "pending.record_on"),
    ("rawcuda.core.function", "forgetcount.forgets"),
    ("rawcuda.core.boundlaunch", "pending.record_on"),
    ("rawcuda.core.boundlaunch", "forgetcount.forgets"),
    ("rawcuda.core.stream", "forgetcount.forgets"),
    ("rawcuda.core.function", "foreignorder.order_after"),
    ("rawcuda.core.boundlaunch", "foreignorder.order_after"),
    ("rawcuda.graphs.streamcapture", "capturedeferral.EVERYWHERE"),
    ("rawcuda.graphs.streamcapture", "capturedeferral.LegacyHazard"),
    ("rawcuda.graphs.streamcapture", "capturedeferral.capture_deferral"),
    ("rawcuda.extras.foreign", "capturedeferral.capture_deferral"),
    ("rawcuda.extras.foreign", "foreignorder.order_after"),
    ("rawcuda.extras.growable", "pending.PendingStream"),
    ("rawcuda.core.poolbuffer", "pending.PendingStream"),
    ("rawcuda.core.poolbuffer", "pending.LEGACY_HANDLE"),
    ("rawcuda.core.poolbuffer", "pending.legacy_stream"),
    ("rawcuda.core.poolbuffer", "capturedeferral.capture_deferral"),
    ("rawcuda.testing.leaks", "contextregistry.live_contexts"),
}
GUARDS = "rawcuda.core.guards"

#: ctypes' own API is spelled with underscores (``_fields_``, ``_type_``, ``_SimpleCData``, ``_Pointer``,
#: byref's ``_obj``): reading them is using ctypes, not reaching into another file's privates.
CTYPES_NAMES = frozenset({"_fields_", "_type_", "_obj", "_SimpleCData", "_Pointer", "_c_name_", "_length_"})


# --- reading the package -----------------------------------------------------------------------------------
@dataclass
class Module:
    name: str  # rawcuda.checked.binding
    path: Path
    tree: ast.Module
    is_package: bool  # an __init__.py
    top_imports: set[str] = field(default_factory=set)  # modules imported at module level (or in a class body)
    lazy_imports: set[str] = field(default_factory=set)  # modules imported inside a function


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_package(root: Path = PACKAGE_DIR) -> dict[str, Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
    for module in modules.values():
        for node, in_function in walk_imports(module.tree):
            for target in resolve(node, module, modules):
                (module.lazy_imports if in_function else module.top_imports).add(target)
    return modules


def walk_imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it is inside a function; ``if TYPE_CHECKING:`` bodies skipped."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (pair for other in child.orelse for pair in visit_one(other, in_function))
                continue
            yield from visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function
        yield from visit(node, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    yield from visit(tree, False)


def resolve(node: ast.Import | ast.ImportFrom, importer: Module, modules: dict[str, Module]) -> set[str]:
    """The rawcuda modules an import statement loads (``from . import x`` loads the submodule x if it is one)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if node.level:
        package = importer.name if importer.is_package else importer.name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in modules:
        return set()
    submodules = {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules}
    if len(submodules) == len(node.names):
        return submodules  # `from . import a, b`: the submodules (their package is already being imported)
    return {base, *submodules} - {importer.name}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search with three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


#: Each folder's role (a module belongs to the prefix it starts with; anything else is an entry point).
LAYERS = (
    ("rawcuda.ffi", "ffi"),
    ("rawcuda.checked", "checked"),
    ("rawcuda.protocols", "protocols"),
    ("rawcuda.core", "core"),  # core/guards/ is part of core: the guard seam says how the rest reaches it
    ("rawcuda.graphs", "graphs"),
    ("rawcuda.extras", "extras"),
    ("rawcuda.ops", "ops"),
    ("rawcuda.kernels", "kernels"),
    ("rawcuda.tools", "tools"),
    ("rawcuda.testing", "testing"),
)


def layer(name: str) -> str:
    """The folder's role ("ffi" ... "ops", "kernels", "tools", "testing"), or "entry" (``rawcuda`` itself and
    ``python -m rawcuda``)."""
    for prefix, role in LAYERS:
        if name == prefix or name.startswith(prefix + "."):
            return role
    return "entry"


BELOW_CORE = {"ffi", "checked", "protocols", "kernels"}
#: What each folder may import (tools and the entry points may import anything). The testing tools are what a
#: user's tests load (the pytest plugin in every session): the layers and the front door, not the build tools.
MAY_IMPORT = {
    "ffi": {"ffi"},
    "checked": {"ffi", "checked"},
    "protocols": {"ffi", "checked", "protocols"},
    "core": BELOW_CORE | {"core"},
    "graphs": BELOW_CORE | {"core", "graphs"},
    "extras": BELOW_CORE | {"core", "extras"},
    "ops": BELOW_CORE | {"core", "graphs", "extras", "ops"},
    "kernels": {"kernels"},
    "testing": BELOW_CORE | {"core", "graphs", "extras", "ops", "entry", "testing"},
}


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for importer, targets in sorted(edges.items()):
        allowed = MAY_IMPORT.get(layer(importer))
        for target in sorted(targets):
            if allowed is not None and layer(target) not in allowed:
                problems.append(f"{importer} ({layer(importer)}) imports {target} ({layer(target)})")
    return problems


def all_edges(modules: dict[str, Module], *, lazy: bool = True) -> dict[str, set[str]]:
    edges = {name: set(m.top_imports) for name, m in modules.items()}
    if lazy:
        for name, m in modules.items():
            edges[name] |= {t for t in m.lazy_imports if (name, t) not in ALLOWED_LAZY_IMPORTS}
    return edges


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return read_package()


# --- imports -------------------------------------------------------------------------------------------------
def test_the_package_is_read(modules: dict[str, Module]) -> None:
    assert {
        "rawcuda",
        "rawcuda.ffi.decl",
        "rawcuda.checked.binding",
        "rawcuda.core.function",
        "rawcuda.tools.nvcc",
    } <= set(modules)
    assert "rawcuda.ffi.cuda" in modules["rawcuda.checked.binding"].top_imports


def test_no_import_cycles(modules: dict[str, Module]) -> None:
    cycle = find_cycle(all_edges(modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_only_imports_inside_functions_are_the_documented_ones(modules: dict[str, Module]) -> None:
    lazy = {(name, target) for name, m in modules.items() for target in m.lazy_imports}
    assert lazy == ALLOWED_LAZY_IMPORTS


def test_layers_import_downward_only(modules: dict[str, Module]) -> None:
    assert layer_violations(all_edges(modules)) == []


def test_the_rules_can_fail() -> None:
    # A deliberately added cycle, a layer-0 file importing layer 1, and a lazy import that dodges a cycle.
    edges = {
        "rawcuda.core.stream": {"rawcuda.core.event"},
        "rawcuda.core.event": {"rawcuda.core.function"},
        "rawcuda.core.function": {"rawcuda.core.stream"},
        "rawcuda.ffi.library": {"rawcuda.checked.errors"},
        "rawcuda.core.kernelargs": {"rawcuda.extras.growable"},
    }
    assert find_cycle(edges) == [
        "rawcuda.core.event",
        "rawcuda.core.function",
        "rawcuda.core.stream",
        "rawcuda.core.event",
    ]
    assert layer_violations(edges) == [
        "rawcuda.core.kernelargs (core) imports rawcuda.extras.growable (extras)",
        "rawcuda.ffi.library (ffi) imports rawcuda.checked.errors (checked)",
    ]
    source = "def f():\n    from . import event\nif TYPE_CHECKING:\n    from . import module\n"
    fake = Module("rawcuda.core.stream", PACKAGE_DIR / "core" / "stream.py", ast.parse(source), False)
    names = {"rawcuda", "rawcuda.core", "rawcuda.core.stream", "rawcuda.core.event", "rawcuda.core.module"}
    known = {n: fake for n in names}
    for node, in_function in walk_imports(fake.tree):
        (fake.lazy_imports if in_function else fake.top_imports).update(resolve(node, fake, known))
    assert fake.lazy_imports == {"rawcuda.core.event"} and fake.top_imports == set()  # TYPE_CHECKING skipped


# --- the guard seam ---------------------------------------------------------------------------------------------
def resolve_base(node: ast.ImportFrom, importer: Module) -> str:
    """The module a ``from X import ...`` names, resolved against the importer (relative imports too)."""
    if not node.level:
        return node.module or ""
    package = importer.name if importer.is_package else importer.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def guard_uses(module: Module, modules: Iterable[str]) -> set[tuple[str, str]]:
    """(importer, "guard.name") for each name ``module`` takes from core/guards/ (outside guards only)."""
    if module.name.startswith(GUARDS):
        return set()
    uses = set()
    whole = {}  # local name -> guard module imported whole
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = resolve_base(node, module)
        for alias in node.names:
            if base.startswith(GUARDS + "."):
                uses.add((module.name, f"{base.rpartition('.')[2]}.{alias.name}"))
            elif base == GUARDS and f"{GUARDS}.{alias.name}" in modules:
                whole[alias.asname or alias.name] = alias.name
    for node in ast.walk(module.tree):
        named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in whole
        if named and not node.attr.startswith("__"):  # (a module's __file__ is no call)
            uses.add((module.name, f"{whole[node.value.id]}.{node.attr}"))
    return uses


def test_the_guard_seam_is_the_listed_one(modules: dict[str, Module]) -> None:
    used = set().union(*(guard_uses(m, modules) for m in modules.values()))
    assert sorted(used - GUARD_SEAM) == [], "a new call into core/guards/: list it in GUARD_SEAM and the docs"
    assert sorted(GUARD_SEAM - used) == [], "GUARD_SEAM lists a call nothing makes any more"


def test_the_guard_seam_rule_can_fail() -> None:
    source = "from .guards import contextstack\nfrom .guards.pending import PendingStream\ncontextstack.walk()\n"
    fake = Module("rawcuda.core.context", PACKAGE_DIR / "core" / "context.py", ast.parse(source), False)
    known = {"rawcuda.core.guards.contextstack", "rawcuda.core.guards.pending"}
    assert guard_uses(fake, known) == {
        ("rawcuda.core.context", "contextstack.walk"),
        ("rawcuda.core.context", "pending.PendingStream"),
    }


# --- private names -----------------------------------------------------------------------------------------------
def defined_private_names(tree: ast.AST) -> set[str]:
    """``_names`` this file defines: functions, classes, module globals, and attributes set on self/cls."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reach_ins(tree: ast.AST, where: str) -> list[str]:
    """``from x import _name`` and ``obj._attr`` with ``_attr`` defined in no place of this file."""
    own = defined_private_names(tree) | CTYPES_NAMES
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            problems += [
                f"{where}:{node.lineno}: imports {alias.name} from {node.module or '.'}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not on_self and node.attr not in own:
                problems.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return problems


def test_no_private_names_across_files(modules: dict[str, Module]) -> None:
    problems = [p for m in modules.values() for p in private_reach_ins(m.tree, str(m.path.relative_to(PACKAGE_DIR)))]
    assert problems == []


def test_the_private_name_rule_can_fail() -> None:
    source = (
        "from .context import _tls\n"
        "class A:\n    def __init__(self):\n        self._mine = 1\n"
        "    def f(self, other, ctx):\n        return other._mine, ctx._unusable, value._type_\n"
    )
    assert private_reach_ins(ast.parse(source), "x.py") == [
        "x.py:1: imports _tls from context",
        "x.py:6: ctx._unusable",
    ]


# --- the table tells the truth ---------------------------------------------------------------------------------
def called_rows(modules: dict[str, Module], table: Iterable[str]) -> set[str]:
    """Table rows rawcuda's layers 1 and 2 call: ``cu.X`` / ``nv.X``, or the row's name as a string constant
    (``hot_slot("cuLaunchKernel")``, ``getattr(cu, name)`` over a written-out list of names)."""
    names = set(table)
    used = set()
    for m in modules.values():
        if layer(m.name) in ("ffi", "tools"):
            continue  # the declarations themselves, and the header check, do not count as use
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Attribute) and node.attr in names:
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                used.add(node.value)
    return used


def test_every_driver_row_is_called_or_says_why_not(modules: dict[str, Module]) -> None:
    called = called_rows(modules, CUDA_TABLE)
    assert set(NOT_CALLED_BY_RAWCUDA) <= set(CUDA_TABLE), "NOT_CALLED_BY_RAWCUDA names a row the table lacks"
    assert sorted(set(CUDA_TABLE) - called - set(NOT_CALLED_BY_RAWCUDA)) == [], "rows nothing calls: list them"
    assert sorted(called & set(NOT_CALLED_BY_RAWCUDA)) == [], "rows listed as not called, but rawcuda calls them"
    assert all(len(why) > 20 for why in NOT_CALLED_BY_RAWCUDA.values())


def test_every_nvrtc_row_is_called(modules: dict[str, Module]) -> None:
    assert sorted(set(NVRTC_TABLE) - called_rows(modules, NVRTC_TABLE)) == []


# --- files -------------------------------------------------------------------------------------------------------
#: How each folder's module docstrings begin (a package's own __init__ says the same).
LAYER_WORDS = {
    "ffi": "Layer 0",
    "checked": "Layer 1",
    "protocols": "Protocols",
    "core": "Core",
    "graphs": "Graphs",
    "extras": "Extras",
    "ops": "Ops",
    "tools": "Tool",
    "testing": "Testing",
}
#: Tokens that are no code: a line holding only these (or a docstring) is not counted.
NOT_CODE = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
STATEMENT_START = (None, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)
OPENING, CLOSING = "([{", ")]}"


def code_lines(source: str) -> int:
    """Lines holding code: docstrings (any string standing alone as a statement) and comments do not count.

    A string that opens a line inside brackets is an argument, not a docstring: the bracket depth tells
    them apart. (Without it, Python 3.11 skipped a message's continuation lines that 3.12, which tokenizes
    f-strings apart, counts: a file passed here and failed on the GPU host.)
    """
    lines: set[int] = set()
    previous = None
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.OP and token.string in OPENING:
            depth += 1
        elif token.type == tokenize.OP and token.string in CLOSING:
            depth -= 1
        if token.type == tokenize.STRING and depth == 0 and previous in STATEMENT_START:
            previous = token.type
            continue
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
        previous = token.type
    return len(lines)


SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
CODE_SPAN = re.compile(r"``[^`]*``|`[^`]*`")


def words_and_sentences(text: str) -> tuple[int, int]:
    """Words, and sentences (ended by . ! ? or the text's end), of one docstring."""
    text = CODE_SPAN.sub("x", text)  # a code span is one word, whatever dots it holds
    sentences = [part for part in SENTENCE_END.split(text) if part.strip()]
    return sum(len(part.split()) for part in sentences), len(sentences)


def docstrings(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def core_sentence_length(modules: dict[str, Module]) -> float:
    """Words a sentence over every docstring in core/ (module, class and function docstrings alike)."""
    words = sentences = 0
    for m in modules.values():
        if layer(m.name) == "core":
            for doc in docstrings(m.tree):
                w, n = words_and_sentences(doc)
                words, sentences = words + w, sentences + n
    return words / max(sentences, 1)


def test_files_hold_one_concept(modules: dict[str, Module]) -> None:
    long = {m.name: n for m in modules.values() if (n := code_lines(m.path.read_text())) > MAX_CODE_LINES}
    assert long == {}, f"split these (one concept per file, at most {MAX_CODE_LINES} lines of code)"


def test_the_code_line_count_can_fail() -> None:
    source = '"""Doc\nstring."""\n# a comment\nx = 1\n\ndef f():\n    """Doc."""\n    return (x,\n            2)\n'
    assert code_lines(source) == 4  # x = 1, def f():, and the two lines of the return
    message = 'raise ValueError(\n    "a message"\n    "in two parts"\n)\n'
    assert code_lines(message) == 4  # the strings are arguments, on lines of their own


def test_core_module_docstrings_say_what_and_why_briefly(modules: dict[str, Module]) -> None:
    lengths = {m.name: len((ast.get_docstring(m.tree) or "").splitlines()) for m in modules.values()}
    long = {name: n for name, n in lengths.items() if layer(name) == "core" and n > MAX_CORE_DOC_LINES}
    assert long == {}, f"at most {MAX_CORE_DOC_LINES} lines: the history of a guard goes to docs/hazards.md"


def test_core_docstrings_use_short_sentences(modules: dict[str, Module]) -> None:
    assert core_sentence_length(modules) <= MAX_CORE_WORDS_PER_SENTENCE


def test_the_sentence_count_can_fail() -> None:
    assert words_and_sentences("One two three. Four five: six ``a.b c`` seven") == (8, 2)


def test_each_docstring_names_its_layer(modules: dict[str, Module]) -> None:
    missing = []
    for m in modules.values():
        doc = ast.get_docstring(m.tree) or ""
        first = doc.splitlines()[0] if doc else ""
        word = LAYER_WORDS.get(layer(m.name))
        if word is not None and not re.match(rf"{word}\b", first):
            missing.append(f"{m.name}: {first!r} should start with {word!r}")
    assert missing == []


def test_every_folder_is_a_package() -> None:
    # A folder without __init__.py still imports from a checkout (a namespace package), but setuptools'
    # find_packages leaves it out of a wheel: `pip install .` then ships rawcuda without rawcuda/tools/.
    folders = {p.parent for p in PACKAGE_DIR.rglob("*.py")}
    assert sorted(str(f.relative_to(PACKAGE_DIR.parent)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_the_architecture_page_names_every_file() -> None:
    # docs/architecture.md is the map a reader follows; a file it does not name is a file nobody finds.
    # (The driver table's sections are named by topic there, not one by one.)
    page = (PACKAGE_DIR.parent / "docs" / "architecture.md").read_text()
    files = [p for p in PACKAGE_DIR.rglob("*.py") if p.name != "__init__.py" and p.parent.name != "cuda"]
    assert sorted(str(p.relative_to(PACKAGE_DIR)) for p in files if p.name not in page) == []


def test_the_lazy_name_map_of_checked_agrees_with_each_files_all() -> None:
    # rawcuda/checked/__init__.py cannot import binding.py to read its __all__ (that would build both tables at
    # `import rawcuda`), so it writes the names out again: this holds the two lists together.
    import importlib

    from rawcuda import checked

    lazy = checked._PUBLIC
    for module_name in sorted(set(lazy.values())):
        module = importlib.import_module(f"rawcuda.checked.{module_name}")
        named_here = sorted(name for name, where in lazy.items() if where == module_name)
        exported = sorted(getattr(module, "__all__", named_here))
        assert set(named_here) <= set(exported), (module_name, named_here, exported)  # nothing private mapped
        if module_name == "binding":  # the list written out twice: both copies must be the same
            assert named_here == exported, (named_here, exported)
        missing = [name for name in named_here if not hasattr(module, name)]
        assert missing == [], (module_name, missing)


HAZARD_POINTER = re.compile(r'docs/hazards\.md, "([^"]+)"')


def test_every_hazard_pointer_names_an_entry(modules: dict[str, Module]) -> None:
    # Code keeps a one-line pointer where a guard's story used to be; a pointer to a missing title leads nowhere.
    page = (PACKAGE_DIR.parent / "docs" / "hazards.md").read_text()
    titles = set(re.findall(r"^#{1,2} (.+)$", page, re.MULTILINE))
    pointers = {(m.name, t) for m in modules.values() for t in HAZARD_POINTER.findall(m.path.read_text())}
    assert sorted(p for p in pointers if p[1] not in titles) == []
    assert len(pointers) > 20  # (the pattern finds the pointers at all)
