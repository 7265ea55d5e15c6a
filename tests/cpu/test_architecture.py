"""The architecture of docs/architecture.md, enforced: layers, imports, private names, the table's truth.

Everything here reads the source with :mod:`ast` (nothing is imported or run), so it holds on any machine:

* **no import cycles** among rawcuda's modules, counting imports inside functions (``TYPE_CHECKING``
  blocks excepted), with one documented exception: ``Stream.__await__`` imports rawcuda.aio;
* **layers import downward only**: layer 0 (rawcuda/ffi/) imports nothing outside itself, layer 1
  (rawcuda/checked/) nothing above layer 0, layer 2 (rawcuda/*.py) no tools and no testing tools
  (rawcuda/testing/, which sit on top of layer 2 and may import any layer, but no tools);
* **private names stay in their file**: no ``from rawcuda.x import _name``, and no ``obj._attr`` whose
  ``_attr`` is not defined in the same file;
* **the driver table tells the truth**: each row is called by rawcuda or listed in NOT_CALLED_BY_RAWCUDA
  with its reason, never both;
* **files are short and say what they are**: at most MAX_LINES lines, a docstring naming the layer.

Each rule is a function of plain data (edges, files), and each is also tested on a small bad example, so
that a rule which could never fail would be noticed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rawcuda.ffi.cuda import NOT_CALLED_BY_RAWCUDA
from rawcuda.ffi.cuda import TABLE as CUDA_TABLE
from rawcuda.ffi.nvrtc import TABLE as NVRTC_TABLE

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "rawcuda"
MAX_LINES = 400

#: The imports inside functions that are allowed, each with its reason (they would otherwise be cycles).
ALLOWED_LAZY_IMPORTS = {
    # aio creates Streams (its internal wait streams), so it sits above stream.py; `await stream` reaches up
    # to it only when a program awaits. Documented in Stream.__await__ and docs/architecture.md.
    ("rawcuda.stream", "rawcuda.aio"),
}

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
    if node.module is None and len(submodules) == len(node.names):
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


def layer(name: str) -> str:
    """ "0", "1", "2", "testing", "tools" or "entry" (the package front door and ``python -m rawcuda``)."""
    if name.startswith("rawcuda.ffi"):
        return "0"
    if name.startswith("rawcuda.checked"):
        return "1"
    if name.startswith("rawcuda.tools"):
        return "tools"
    if name.startswith("rawcuda.testing"):
        return "testing"
    if name in ("rawcuda", "rawcuda.__main__"):
        return "entry"
    return "2"


#: What each layer may import (tools and the entry points may import anything). The testing tools are what a
#: user's tests load (the pytest plugin in every session): the layers and the front door, not the build tools.
MAY_IMPORT = {"0": {"0"}, "1": {"0", "1"}, "2": {"0", "1", "2"}, "testing": {"0", "1", "2", "entry", "testing"}}


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for importer, targets in sorted(edges.items()):
        allowed = MAY_IMPORT.get(layer(importer))
        for target in sorted(targets):
            if allowed is not None and layer(target) not in allowed:
                problems.append(f"{importer} (layer {layer(importer)}) imports {target} (layer {layer(target)})")
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
    assert {"rawcuda", "rawcuda.ffi.decl", "rawcuda.checked.binding", "rawcuda.function", "rawcuda.tools.nvcc"} <= set(
        modules
    )
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
        "rawcuda.stream": {"rawcuda.graph"},
        "rawcuda.graph": {"rawcuda.function"},
        "rawcuda.function": {"rawcuda.stream"},
        "rawcuda.ffi.library": {"rawcuda.checked.errors"},
    }
    assert find_cycle(edges) == ["rawcuda.function", "rawcuda.stream", "rawcuda.graph", "rawcuda.function"]
    assert layer_violations(edges) == ["rawcuda.ffi.library (layer 0) imports rawcuda.checked.errors (layer 1)"]
    source = "def f():\n    from . import graph\nif TYPE_CHECKING:\n    from . import module\n"
    fake = Module("rawcuda.stream", PACKAGE_DIR / "stream.py", ast.parse(source), False)
    names = {"rawcuda", "rawcuda.stream", "rawcuda.graph", "rawcuda.module"}
    known = {n: fake for n in names}
    for node, in_function in walk_imports(fake.tree):
        (fake.lazy_imports if in_function else fake.top_imports).update(resolve(node, fake, known))
    assert fake.lazy_imports == {"rawcuda.graph"} and fake.top_imports == set()  # TYPE_CHECKING skipped


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
        if layer(m.name) in ("0", "tools"):
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
LAYER_WORDS = {"0": "Layer 0", "1": "Layer 1", "2": "Layer 2", "tools": "Tool", "testing": "Testing"}


def test_files_are_short(modules: dict[str, Module]) -> None:
    long = {m.name: n for m in modules.values() if (n := len(m.path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these (one concept per file, at most {MAX_LINES} lines)"


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
