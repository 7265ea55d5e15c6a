"""The tutorials' frame (tutorials/_tutorial.py), driven through small stand-in tutorials that need no GPU.

What a learner meets: plain runs print titles, says and checks, and no code; ``--step`` shows each step's
title, then the lines it is about to run, then pauses; ``--from N`` runs the steps before N quietly; ``q``
stops; end-of-file stops the pausing; Ctrl-C (at a pause or in a step) ends with one line and 130; a closed
pipe ends quietly with 141; a bad ``--from`` ends with the usage and 2. The real tutorials get the same
frame: without a GPU, ``--step`` still shows the code of step 1 before it fails to find a driver.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import (
    EXIT_NO_GPU,
    ROOT,
    TUTORIAL_DIR,
    python_env,
    run_tutorial,
    tutorial_module,
)

frame = tutorial_module("_tutorial")
stepsource = tutorial_module("_stepsource")

TIMEOUT_S = 60
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
PROMPT = "[Enter: run step {}, q: quit]"
SAID = "\n   said in step {}\n"  # the say line as printed; --step also shows it as code: "9 | t.say(...)"
TUTORIALS = sorted(TUTORIAL_DIR.glob("[0-9][0-9]*_*.py"))
ENTER_PRESSES = "\n" * 100  # more than any tutorial has steps

# A stand-in tutorial: three steps, a say and a check in each, one step title over two lines.
STAND_IN = """
import os
import sys

sys.path.insert(0, {tutorials!r})
from _tutorial import Tutorial, run


def main(t: Tutorial) -> None:
    t.words("kernel", "stream", "kernel")
    t.step("first step")
    value = 1
    t.say("said in step one")
    t.check(value == 1, "value is 1 after 3.25 ms")

    t.step(
        "second step, "
        "written over two lines"
    )
    if os.environ.get("STAND_IN_INTERRUPT") == "2":
        raise KeyboardInterrupt
    t.say("said in step two")
    t.check(os.environ.get("STAND_IN_FAIL") != "2", "step two's check")

    t.step("third step")
    t.say("said in step three")
    for i in range(int(os.environ.get("STAND_IN_LINES", "0"))):
        t.say(f"line {{i}}")


run(main, "Stand-in tutorial 99")
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("frame") / "99_stand_in.py"
    path.write_text(STAND_IN.format(tutorials=str(TUTORIAL_DIR)))
    return path


def run_stand_in(path: Path, *args: str, stdin: str | None = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(path), *args],
        cwd=path.parent,
        env=python_env(**env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def source_lines(path: Path, first: int, last: int) -> list[str]:
    """Lines first..last of ``path`` as --step numbers them (before dedent: compared by their code)."""
    return path.read_text().splitlines()[first - 1 : last]


def line_of(path: Path, code: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if code in line)


# --- a plain run --------------------------------------------------------------------------------------------------
def test_a_plain_run_prints_titles_says_and_checks_but_no_code(stand_in: Path) -> None:
    proc = run_stand_in(stand_in)
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "# Stand-in tutorial 99"
    assert "== step 1: first step" in lines and "== step 2: second step, written over two lines" in lines
    assert "   said in step one" in lines and "   ok: value is 1 after 3.25 ms" in lines
    assert lines[-1].startswith("done in ") and lines[-1].endswith("every step verified.")
    assert " | " not in proc.stdout and "[Enter" not in proc.stdout, "no code and no pauses without --step"


def test_a_failed_check_exits_1_naming_it(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, STAND_IN_FAIL="2")
    assert_clean(proc)
    assert proc.returncode == 1
    assert "FAILED: step two's check" in proc.stdout and "== step 3" not in proc.stdout


# --- --step ---------------------------------------------------------------------------------------------------
def test_step_shows_the_title_then_the_code_then_pauses(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--step", stdin=ENTER_PRESSES)
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    first = line_of(stand_in, 't.step("first step")')
    second = line_of(stand_in, '"second step, "') - 1  # the line of step 2's "t.step("
    # Step 1: title, where the code is, the code itself, numbered as in the file, then the pause.
    title = out.index("== step 1: first step")
    where = out.index(f"99_stand_in.py, lines {first}-{second - 2}:")  # the blank line before step 2 is not shown
    code = out.index(f'{first} | t.step("first step")')
    check_line = out.index(f'{first + 3} | t.check(value == 1, "value is 1 after 3.25 ms")')
    prompt = out.index(PROMPT.format(1))
    said = out.index(SAID.format("one"))
    assert title < where < code < check_line < prompt < said, out
    # Step 2: a title over several lines is shown from its first line, with the code that follows it.
    assert f"{second} | t.step(" in out and f'{second + 1} |     "second step, "' in out
    assert out.index("== step 2:") < out.index(PROMPT.format(2)) < out.index(SAID.format("two"))
    # Step 3 runs to the end of main, and no further: run(main, ...) is not part of it.
    third = line_of(stand_in, 't.step("third step")')
    assert f"lines {third}-{third + 3}:" in out and "| run(main" not in out
    assert out.count("[Enter: run step") == 3


def test_step_code_is_dedented_with_the_file_line_numbers(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--step", stdin=ENTER_PRESSES)
    first = line_of(stand_in, 't.step("first step")')
    assert re.search(rf"^   {first} \| t\.step\(\"first step\"\)$", proc.stdout, re.M), proc.stdout
    assert re.search(rf"^   {first + 1} \| value = 1$", proc.stdout, re.M), "the function's indentation is removed"


def test_q_at_the_pause_stops_before_the_step(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--step", stdin="\nq\n")
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert SAID.format("one") in proc.stdout and SAID.format("two") not in proc.stdout
    assert "stopped before step 2" in proc.stdout and "--from 2" in proc.stdout
    assert "every step verified" not in proc.stdout


def test_end_of_input_at_the_pause_carries_on_without_pausing(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--step", stdin="")
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[Enter: run step") == 1, "after end-of-file, no more pauses"
    assert SAID.format("three") in proc.stdout and "every step verified" in proc.stdout


def test_code_shows_every_steps_code_without_pausing(stand_in: Path) -> None:
    """--code: how the recordings are made -- each step's numbered code, then its output, and no prompt."""
    proc = run_stand_in(stand_in, "--code", stdin="")
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert PROMPT.format(1) not in out and "[Enter" not in out
    for number, title, said in ((1, "first step", "one"), (3, "third step", "three")):
        line = line_of(stand_in, f't.step("{title}")')
        code = out.index(f'{line} | t.step("{title}")')
        assert out.index(f"== step {number}: {title}") < code < out.index(SAID.format(said)), out
    assert "every step verified" in out


def test_words_defines_each_word_once_before_step_one(stand_in: Path) -> None:
    glossary = tutorial_module("_glossary")
    for flags in ((), ("--from", "3")):  # --from skips into the middle: the words are shown all the same
        out = run_stand_in(stand_in, *flags, stdin=ENTER_PRESSES).stdout
        block = out[: out.index("== step 1")]
        assert "words used here" in block, out
        for name in ("kernel", "stream"):
            assert block.count(f"   {name} -- {glossary.lookup(name).definition}\n") == 1, block


# --- --from N -------------------------------------------------------------------------------------------------
def test_from_runs_the_earlier_steps_quietly_then_pauses(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--from", "2", stdin=ENTER_PRESSES)
    assert_clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "== step 1: first step  [quiet: --from 2]" in out, "one line for a quiet step"
    assert SAID.format("one") not in out and "ok: value is 1" not in out, "a quiet step's says and checks are hidden"
    assert PROMPT.format(1) not in out
    assert PROMPT.format(2) in out and PROMPT.format(3) in out and SAID.format("two") in out
    assert "every step verified" in out


def test_from_still_fails_on_a_quiet_steps_check(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--from", "3", stdin=ENTER_PRESSES, STAND_IN_FAIL="2")
    assert proc.returncode == 1 and "FAILED: step two's check" in proc.stdout


def test_from_past_the_last_step_says_so_at_the_end(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--from", "9", stdin=ENTER_PRESSES)
    assert_clean(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--from 9: this run had 3 steps" in proc.stderr and "from 1 to 3" in proc.stderr
    assert "[Enter" not in proc.stdout and "every step verified" not in proc.stdout


@pytest.mark.parametrize(("value", "message"), [("0", "numbered from 1"), ("-2", "numbered from 1"), ("x", "'x'")])
def test_from_refuses_what_is_not_a_step_number(stand_in: Path, value: str, message: str) -> None:
    proc = run_stand_in(stand_in, f"--from={value}")
    assert_clean(proc)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage:") and message in proc.stderr
    assert "== step" not in proc.stdout


def test_help_offers_step_and_from(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, "--help")
    assert proc.returncode == 0 and "--step" in proc.stdout and "--from N" in proc.stdout


# --- Ctrl-C and a closed pipe ---------------------------------------------------------------------------------
def test_ctrl_c_during_a_step_ends_with_one_line_and_130(stand_in: Path) -> None:
    proc = run_stand_in(stand_in, STAND_IN_INTERRUPT="2")
    assert_clean(proc)
    assert proc.returncode == EXIT_INTERRUPTED
    assert proc.stderr.strip() == "interrupted at step 2"


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_at_the_pause_ends_with_one_line_and_130(stand_in: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, str(stand_in), "--step"],
        cwd=stand_in.parent,
        env=python_env(),
        stdin=subprocess.PIPE,  # kept open: the child waits at the pause
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Python keeps SIGINT ignored when it starts ignored (a job a shell put in the background): start the
        # child with the default disposition, as an interactive start has it, so Python installs Ctrl-C's handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    seen, deadline = b"", time.monotonic() + TIMEOUT_S
    try:
        while PROMPT.format(1).encode() not in seen:  # input() flushes the prompt before it waits
            left = deadline - time.monotonic()
            readable, _, _ = select.select([child.stdout], [], [], max(left, 0))
            assert readable, f"no pause within {TIMEOUT_S} s: {seen!r}"
            chunk = os.read(child.stdout.fileno(), 4096)
            assert chunk, f"the child ended before pausing: {seen!r}"
            seen += chunk
        child.send_signal(signal.SIGINT)
        rest, err = child.communicate(timeout=TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    out = (seen + rest).decode()
    assert child.returncode == EXIT_INTERRUPTED, out + err.decode()
    assert err.decode().strip() == "interrupted at step 1" and "Traceback" not in out + err.decode()
    assert SAID.format("one") not in out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGPIPE is POSIX")
def test_a_reader_that_goes_away_ends_it_quietly_with_141(stand_in: Path) -> None:
    """``python tutorial.py | head -1``: head reads a line and exits while the tutorial still writes."""
    child = subprocess.Popen(
        [sys.executable, str(stand_in)],
        cwd=stand_in.parent,
        env=python_env(STAND_IN_LINES="200000"),  # megabytes: far more than a pipe holds
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()
    err = child.stderr.read()
    child.wait(timeout=TIMEOUT_S)
    assert first == b"# Stand-in tutorial 99\n"
    assert child.returncode == EXIT_BROKEN_PIPE and err == b"", err.decode()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGPIPE is POSIX")
def test_a_real_tutorial_piped_into_head_ends_without_a_traceback() -> None:
    proc = subprocess.run(
        f"{sys.executable} {TUTORIALS[0]} | head -1",
        shell=True,
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.stdout.startswith("# Tutorial"), proc.stdout
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


# --- the real tutorials ---------------------------------------------------------------------------------------
needs_no_gpu = pytest.mark.skipif(
    gpu_unavailable_reason() is None, reason="a GPU is present: tests/cpu/test_tutorials.py runs the tutorials for real"
)


@needs_no_gpu
@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_a_real_tutorials_step_mode_shows_its_code(path: Path) -> None:
    proc = run_tutorial(path, "--step", stdin=ENTER_PRESSES, timeout=TIMEOUT_S)
    assert_clean(proc)
    assert proc.returncode == EXIT_NO_GPU, proc.stdout + proc.stderr
    if "== step 1:" not in proc.stdout:
        return  # this tutorial touches the driver before its first step: nothing to show
    match = re.search(rf"{re.escape(path.name)}, lines (\d+)-(\d+):\n   +\1 \| (.*)", proc.stdout)
    assert match, f"--step shows where step 1's code is, and the code:\n{proc.stdout}"
    assert ".step(" in match[3], "the code shown starts at the step's own t.step(...) call"
    assert proc.stdout.index(match[0]) < proc.stdout.index(PROMPT.format(1))


# --- the pieces, in this process ------------------------------------------------------------------------------
def test_step_source_follows_the_function_not_the_file(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """\
        def main(t):
            t.step("a")
            x = 1

            def helper():
                t.step("inside helper")  # belongs to helper, not to main
                return 2

            if x:
                t.step(
                    "b"
                )
                y = helper()
            t.say(str(y))


        def other(t):
            t.step("c")
        """
    )
    path = tmp_path / "example.py"
    path.write_text(code)
    a = stepsource.find(str(path), 2)
    assert (a.first, a.last) == (2, 9), "from t.step('a') to just before the next step of main"
    assert a.lines[0] == 't.step("a")' and a.lines[-1] == "if x:"
    b = stepsource.find(str(path), 11)  # a line inside the call written over three lines
    assert (b.first, b.last) == (10, 14), "to the end of main: no step after it there"
    assert b.lines[0] == "    t.step(" and b.lines[-1] == "t.say(str(y))", "dedented together: the nesting shows"
    inner = stepsource.find(str(path), 6)
    assert (inner.first, inner.last) == (6, 7)
    assert stepsource.find(str(path), 18).lines == ('t.step("c")',)
    assert a.numbered()[0] == '2 | t.step("a")' and b.numbered()[-1] == "14 | t.say(str(y))"


def test_step_source_is_none_without_a_file() -> None:
    assert stepsource.find("<string>", 1) is None
    assert stepsource.find(str(ROOT / "no-such-file.py"), 3) is None


def test_term_defines_once_from_the_glossary(capsys: pytest.CaptureFixture[str]) -> None:
    t = frame.Tutorial("terms", [])
    t.term("warp")
    t.term("WARP")
    t.term("page-locked memory", "host memory the OS may not move")
    out = capsys.readouterr().out
    glossary = tutorial_module("_glossary")
    assert out.count("term: warp -- ") == 1, "a term is defined the first time only"
    assert glossary.lookup("warp").definition in out and "docs/glossary.md#warp" in out
    assert "term: page-locked memory -- host memory the OS may not move" in out
    assert "docs/glossary.md#pinned-memory" in out, "another name leads to the same entry"


def test_term_refuses_a_word_the_glossary_lacks() -> None:
    t = frame.Tutorial("terms", [])
    with pytest.raises(KeyError, match=r"not a term in .*glossary\.md"):
        t.term("flux capacitor")


def test_the_skip_line_points_at_a_recording(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(frame, "OUTPUT_DIR", tmp_path)
    error = RuntimeError("no libcuda here\nsecond line")
    assert frame.skip_line(error, Path("42_demo.py")) == "skipped: no usable GPU here (RuntimeError: no libcuda here)"
    (tmp_path / "42_demo.txt").write_text("recorded")
    line = frame.skip_line(error, Path("42_demo.py"))
    assert line.endswith(f"; what it prints on a GPU: {tmp_path / '42_demo.txt'}") and "\n" not in line


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("all 1,000,003 results match in 3.25 ms", "all # results match in # ms"),
        ("error -1.5e-07 at 0x7f3a00", "error # at #"),
        ("float32 on sm_90, 12.5x faster", "float# on sm_#, #x faster"),
        ("no numbers", "no numbers"),
    ],
)
def test_mask_numbers(text: str, masked: str) -> None:
    assert frame.mask_numbers(text) == masked


def test_structure_keeps_titles_and_checks_only() -> None:
    output = "# Title 1\n\n== step 1: copy 4 MiB\n   took 3 ms\n   ok: 4 MiB arrived\ndone in 1.0 s\n"
    assert frame.structure(output) == ["== step #: copy # MiB", "ok: # MiB arrived"]
