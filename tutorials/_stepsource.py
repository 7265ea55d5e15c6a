"""Which lines of a tutorial a step runs -- what ``--step`` shows before it pauses.

A step has no body of its own: ``t.step("title")`` is one call in the middle of ``main``, and the step is
everything that runs after it until the next ``t.step(...)``. So the lines a step runs are found in the
source text, not at run time: parse the file that called ``step`` (``ast``), find the function the call is
in, list every ``<something>.step(...)`` call in that function, and take the lines from this call up to the
line before the next one (or to the end of the function). A ``t.step`` inside a nested ``def`` belongs to
that function, not to the one around it.

What that cut shows is the code in between, in source order: for a step inside ``if``/``try``/``for`` it may
end with the ``if compiler is not None:`` that decides whether the next step runs at all -- which is indeed
code that runs before the next step's title.
"""

from __future__ import annotations

import ast
import functools
import linecache
import textwrap
from dataclasses import dataclass

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)  # a nested one is not "this function"
_STEP_METHOD = "step"


@dataclass(frozen=True)
class StepSource:
    """Lines ``first``.. of ``filename``, dedented together (the relative indentation is kept)."""

    filename: str
    first: int
    lines: tuple[str, ...]

    @property
    def last(self) -> int:
        return self.first + len(self.lines) - 1

    def numbered(self) -> list[str]:
        """Each line as ``NN | code``, numbered as in the file, so the reader can find it in an editor."""
        width = len(str(self.last))
        return [f"{number:>{width}} | {text}".rstrip() for number, text in enumerate(self.lines, self.first)]


def find(filename: str, lineno: int) -> StepSource | None:
    """The step whose ``.step(...)`` call covers line ``lineno`` of ``filename``; None when the source is not
    available (code typed at ``python -c``, a file that has gone away) or no step call is there."""
    parsed = _parse(filename)
    if parsed is None:
        return None
    lines, tree = parsed
    scope, scope_end = _innermost_scope(tree, lineno, len(lines))
    calls = sorted(_step_calls(scope), key=lambda call: call.lineno)
    mine = _call_at(calls, lineno)
    if mine is None:
        return None
    later = [call.lineno for call in calls if call.lineno > (mine.end_lineno or mine.lineno)]
    end = (later[0] - 1) if later else scope_end
    block = lines[mine.lineno - 1 : end]
    while block and not block[-1].strip():  # the blank lines before the next step are not this step's code
        block.pop()
    text = textwrap.dedent("".join(block))
    return StepSource(filename, mine.lineno, tuple(text.splitlines()))


@functools.lru_cache(maxsize=16)
def _parse(filename: str) -> tuple[list[str], ast.Module] | None:
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        return lines, ast.parse("".join(lines), filename=filename)
    except (SyntaxError, ValueError):  # not Python we can read back: show no source rather than fail the tutorial
        return None


def _innermost_scope(tree: ast.Module, lineno: int, file_end: int) -> tuple[ast.AST, int]:
    """The innermost function around ``lineno`` and its last line; the module itself for top-level code."""
    best: ast.AST = tree
    best_start, best_end = 0, file_end
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= lineno <= end and node.lineno >= best_start:  # a later start is a nested def
                best, best_start, best_end = node, node.lineno, end
    return best, best_end


def _step_calls(scope: ast.AST) -> list[ast.Call]:
    """Every ``X.step(...)`` call in ``scope``'s own code, not inside a nested function or class."""
    found: list[ast.Call] = []
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == _STEP_METHOD:
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _call_at(calls: list[ast.Call], lineno: int) -> ast.Call | None:
    """The call spanning ``lineno`` (a call written over several lines reports one of them, which one depends
    on the Python version); else the last call that starts before it."""
    for call in calls:
        if call.lineno <= lineno <= (call.end_lineno or call.lineno):
            return call
    before = [call for call in calls if call.lineno <= lineno]
    return before[-1] if before else None


__all__ = ["StepSource", "find"]
