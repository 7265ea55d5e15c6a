"""CPU checks of the learning path's tutorials 05-08 and 14: present, documented, built on the shared frame.

tests/cpu/test_tutorials.py runs every tutorial end to end (exit 0 on a GPU host). These checks are the part
that means something on a machine without a GPU: each file exists, explains itself in a module docstring,
runs through ``tutorials/_tutorial.py`` (so ``--step`` and the exit statuses work), and without a GPU says
so in exactly one ``skipped:`` line, with status 77 and no traceback -- also when stepping with ``--step``.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from tests.helpers import EXIT_NO_GPU, ROOT, gpu_unavailable_reason, run_tutorial

TUTORIAL_DIR = ROOT / "tutorials"
NEW_TUTORIALS = [
    "05_errors.py",
    "06_streams_events.py",
    "07_lifetimes.py",
    "08_when_not_to_use_the_gpu.py",
    "14_sgemm_progression.py",
]
TIMEOUT_S = 120
ENTER_PRESSES = "\n" * 100  # more than any tutorial has steps: --step reads one line per step

needs_no_gpu = pytest.mark.skipif(
    gpu_unavailable_reason() is None, reason="a GPU is present: tests/cpu/test_tutorials.py runs the tutorials for real"
)


def run_by_name(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run tutorials/NAME as a learner would (helpers.run_tutorial), with standard input ``stdin``."""
    return run_tutorial(TUTORIAL_DIR / name, *args, stdin=stdin, timeout=TIMEOUT_S)


def parse(name: str) -> ast.Module:
    return ast.parse((TUTORIAL_DIR / name).read_text(), filename=name)


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_exists_with_docstring(name: str) -> None:
    path = TUTORIAL_DIR / name
    assert path.is_file(), f"{path} is part of the learning path"
    doc = ast.get_docstring(parse(name))
    assert doc and len(doc.splitlines()) > 3, f"{name} needs a module docstring that explains what it teaches"
    assert doc.startswith(f"Tutorial {name[:2]} -- "), "the docstring's first line names the tutorial"
    assert f"python tutorials/{name} [--step]" in doc, "the docstring says how to run it"


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_uses_the_shared_frame(name: str) -> None:
    tree = parse(name)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "_tutorial"
        for alias in node.names
    }
    assert {"Tutorial", "run"} <= imported, "the tutorial must use tutorials/_tutorial.py (steps, --step, exit 77)"
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
    assert mains and mains[0].args.args[0].annotation is not None, "main(t: Tutorial) is the entry point"
    guard = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    assert guard and "run(main" in ast.unparse(guard[0]), "`if __name__ == '__main__': run(main, title)`"


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_help_offers_step(name: str) -> None:
    proc = run_by_name(name, "--help")  # argparse answers before any driver call: works everywhere
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--step" in proc.stdout


@needs_no_gpu
@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_without_gpu_skips_in_one_line(name: str) -> None:
    proc = run_by_name(name)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert proc.returncode == EXIT_NO_GPU, output
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 1 and "no usable GPU here" in skipped[0], output
    assert "== step 1:" in proc.stdout, "the first step is announced before the driver is touched"


@needs_no_gpu
@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_step_mode_without_gpu(name: str) -> None:
    proc = run_by_name(name, "--step", stdin=ENTER_PRESSES)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert "[press Enter for step 1]" in proc.stdout, "--step pauses before the first step"
    assert proc.returncode == EXIT_NO_GPU, output
    assert sum(line.startswith("skipped:") for line in proc.stdout.splitlines()) == 1, output


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_is_listed_in_the_readme(name: str) -> None:
    readme = (TUTORIAL_DIR / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith(f"| {name[:2]} | `{name}` |")]
    assert len(rows) == 1, f"tutorials/README.md needs one table row for {name}"
    assert rows[0].count(" | ") >= 4, "the row says what it teaches, the seed concept and the cust item"
