"""CPU checks of the learning path's lettered tutorials, 07-08 and 14: present, documented, built on the shared frame.

tests/cpu/test_tutorials.py runs every tutorial end to end (exit 0 on a GPU host). These checks are the part
that means something on a machine without a GPU: each file exists, explains itself in a module docstring,
runs through ``tutorials/_tutorial.py`` (so ``--step`` and the exit statuses work), and without a GPU says
so in exactly one ``skipped:`` line, with status 77 and no traceback -- also when stepping with ``--step``.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, ROOT, run_tutorial

TUTORIAL_DIR = ROOT / "tutorials"
# 05 and 06 are split into lettered parts, one idea each; a part's number is "05a", "06c" ...
NEW_TUTORIALS = [
    "03a_reduction_steps.py",
    "03b_transpose.py",
    "03c_block_size.py",
    "03d_fast_math.py",
    "03e_kernel_resources.py",
    "05a_error_codes.py",
    "05b_jit_error_log.py",
    "05c_kernel_not_found.py",
    "05d_argument_checks.py",
    "05e_out_of_memory.py",
    "05f_sticky_errors.py",
    "06a_events_timing.py",
    "06b_pinned_copies.py",
    "06c_overlap_streams.py",
    "06d_legacy_stream_race.py",
    "06e_streamless_copies.py",
    "07a_contexts.py",
    "07b_lifetimes.py",
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


def number(name: str) -> str:
    """``07b_lifetimes.py`` -> ``07b``: the number, with the letter of a part when a topic is split."""
    return name.split("_", 1)[0]


def parse(name: str) -> ast.Module:
    return ast.parse((TUTORIAL_DIR / name).read_text(), filename=name)


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_exists_with_docstring(name: str) -> None:
    path = TUTORIAL_DIR / name
    assert path.is_file(), f"{path} is part of the learning path"
    doc = ast.get_docstring(parse(name))
    assert doc and len(doc.splitlines()) > 3, f"{name} needs a module docstring that explains what it teaches"
    assert doc.startswith(f"Tutorial {number(name)} -- "), "the docstring's first line names the tutorial"
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
    assert "[Enter: run step 1, q: quit]" in proc.stdout, "--step pauses before the first step"
    assert proc.returncode == EXIT_NO_GPU, output
    assert sum(line.startswith("skipped:") for line in proc.stdout.splitlines()) == 1, output


@pytest.mark.parametrize("name", NEW_TUTORIALS)
def test_tutorial_is_listed_in_the_readme(name: str) -> None:
    readme = (TUTORIAL_DIR / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith(f"| {number(name)} | `{name}` |")]
    assert len(rows) == 1, f"tutorials/README.md needs one table row for {name}"
    assert rows[0].count(" | ") >= 4, "the row says what it teaches, the seed concept and the cust item"


# The lettered parts teach one idea each, shown three ways in this order: the raw ctypes lines,
# then rawcuda's class, then the real cust code.
# Why not 03a-03d? They teach the kernel's CUDA C, step by step; the launch glue is the same in each, and 03e
# (a kernel's attributes and occupancy, asked of the driver) is the part of topic 03 that shows it by hand.
KERNEL_PROGRESSIONS = ("03a", "03b", "03c", "03d")
SPLIT_PARTS = [n for n in NEW_TUTORIALS if number(n)[-1].isalpha() and not n.startswith(KERNEL_PROGRESSIONS)]
# The three ways, in order; the by-hand steps are titled "by hand:" or "raw:", rawcuda's "rawcuda: ..." or
# "rawcuda rule N: ...".
TRIPLE = (("by hand:", "raw:"), ("rawcuda",), ("cust:",))


def step_titles(name: str) -> list[str]:
    """The text of each t.step(...) call's first argument, in source order (f-strings unparsed)."""
    titles = []
    for node in ast.walk(parse(name)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            arg = node.args[0]
            titles.append(arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg).lstrip("f").strip("'\""))
    return titles


@pytest.mark.parametrize("name", SPLIT_PARTS)
def test_split_part_shows_raw_then_rawcuda_then_cust(name: str) -> None:
    titles = step_titles(name)
    firsts = []
    for prefix in TRIPLE:
        matching = [i for i, title in enumerate(titles) if title.startswith(prefix)]
        assert matching, f"{name}: no step titled {' or '.join(prefix)}... (steps: {titles})"
        firsts.append(matching[0])
    assert firsts == sorted(firsts), f"{name}: the steps must go by hand, rawcuda, cust (steps: {titles})"
    source = (TUTORIAL_DIR / name).read_text()
    assert ".argtypes" in source and "ctypes.CDLL(" in source, f"{name}: the by-hand step declares its own calls"
    assert "crates/cust/src/" in source, f"{name}: the cust code names the cust source it was read from"
