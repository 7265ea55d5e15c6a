"""The little frame every tutorial shares: numbered steps, pauses that show the code, terms, clean exits.

A tutorial is ``main(t: Tutorial)`` calling ``t.step(title)`` before each part, ``t.say(text)`` for what
happened, ``t.check(ok, what)`` for each thing it verifies and ``t.term(name)`` where a word of the
glossary (docs/glossary.md) is first used, and ``t.words(...)`` before step 1 for the words an earlier
tutorial teaches (so each tutorial defines every term it prints); ``run(main, title)`` runs it. How a learner runs one:

* plain: every step's title (``== step N: title``), what it says, and one ``ok: ...`` line per check;
* ``--step``: before each step, its title, then the lines of the tutorial that the step is about to run
  (numbered as in the file), then a pause: Enter runs the step, ``q`` stops there;
* ``--code``: each step's code as ``--step`` shows it, without pausing -- the form of the recordings in
  tutorials/output/, so a reader without a GPU reads each step's code before its output;
* ``--from N``: steps 1..N-1 still run -- step N needs what they made -- but quietly, one line each, their
  ``say`` and ``ok`` lines left out (a failed check still stops the run); from step N on, as ``--step``.
  An N larger than the tutorial's number of steps is reported at the end (exit 2): a tutorial whose
  steps depend on the machine cannot know its count before it runs.

When standard input is closed (a pipe, CI), a pause carries on without pausing, for the rest of the run.

Exit statuses (documented in tutorials/README.md):

* 0   -- every step ran and the tutorial verified its own result (or ``q`` at a pause: you stopped it);
* 1   -- a check failed (wrong answer) or an unexpected error happened;
* 2   -- a flag the tutorial does not have, or a ``--from`` past its last step: argparse prints the usage;
* 77  -- skipped: no usable NVIDIA driver or GPU on this machine (77 is the "skipped" status of automake
  test harnesses). One line says why, and where a run recorded on a GPU is (tutorials/output/); no
  traceback;
* 130 -- Ctrl-C, at a pause or during a step: one line ``interrupted at step N``, no traceback;
* 141 -- the reader of the output went away (``python tutorials/01_raw_vector_add.py | head -1``): quietly.

The last two are rawcuda.tools.cli's rules, the ones every rawcuda command line follows.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _folder in (ROOT, HERE):  # rawcuda from a source checkout without installing; the frame's own helpers
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

import _glossary  # noqa: E402  (after the sys.path fix above)
import _stepsource  # noqa: E402

import rawcuda  # noqa: E402  (after the sys.path fix above)
from rawcuda.tools import cli  # noqa: E402

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 77
EXIT_INTERRUPTED = cli.EXIT_INTERRUPTED
EXIT_BROKEN_PIPE = cli.EXIT_BROKEN_PIPE

OUTPUT_DIR = HERE / "output"  # each tutorial's recorded run: record_outputs.py
STEP_PREFIX = "== step "
CHECK_PREFIX = "ok: "
INDENT = "   "
QUIT_ANSWERS = {"q", "quit"}

# The errors that mean "this machine cannot run CUDA", as opposed to a bug in the tutorial.
NO_GPU_ERRORS: tuple[type[BaseException], ...] = (
    rawcuda.DriverNotFoundError,
    rawcuda.StubLibraryError,
    rawcuda.NoDeviceError,
)


class TutorialCheckError(AssertionError):
    pass


class TutorialQuit(BaseException):
    """``q`` at a pause: the learner stopped the tutorial before step ``number``. A BaseException, as
    KeyboardInterrupt is, so that a tutorial's own ``except Exception`` around a step cannot swallow it."""

    def __init__(self, number: int) -> None:
        super().__init__(f"stopped before step {number}")
        self.number = number


def _step_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a step number (1, 2, ...), got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"steps are numbered from 1, got {number}")
    return number


class Tutorial:
    """Prints numbered steps; with ``--step`` or ``--from N`` shows each step's code and waits for Enter."""

    def __init__(self, title: str, argv: list[str] | None = None, flags: dict[str, str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=title)
        for name, meaning in (flags or {}).items():  # a tutorial's own switches: --name, read as args.name
            parser.add_argument(f"--{name}", action="store_true", help=meaning)
        parser.add_argument(
            "--step", action="store_true", help="before each step, show its code and wait for Enter (q quits)"
        )
        parser.add_argument(
            "--from",
            dest="start",
            metavar="N",
            type=_step_number,
            help="run steps 1..N-1 quietly (one line each), then from step N on pause as --step does",
        )
        parser.add_argument(
            "--code", action="store_true", help="before each step, show its code, without pausing (as recorded)"
        )
        # parse_args, not parse_known_args: a mistyped --stpe must stop with the usage (status 2), not run
        # the whole tutorial without the pauses that were asked for.
        self.args = parser.parse_args(argv)
        self.title = title
        self.number = 0
        self.started = time.perf_counter()
        self.stdin_open = True  # until a pause reads end-of-file: then no more pauses
        self.at_prompt = False
        self.terms_seen: set[str] = set()

    @property
    def quiet(self) -> bool:
        """True during the steps that ``--from N`` runs without showing them (1..N-1)."""
        return self.args.start is not None and self.number < self.args.start

    @property
    def pausing(self) -> bool:
        wants = self.args.step or (self.args.start is not None and self.number >= self.args.start)
        return wants and self.stdin_open

    def step(self, text: str) -> None:
        self.number += 1
        if self.quiet:
            print(f"{STEP_PREFIX}{self.number}: {text}  [quiet: --from {self.args.start}]")
            return
        print(f"\n{STEP_PREFIX}{self.number}: {text}")
        pausing = self.pausing
        if pausing or self.args.code:
            self._show_source(inspect.currentframe())
        if pausing:
            self._pause()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(INDENT + text.replace("\n", "\n" + INDENT))

    def check(self, ok: bool, what: str) -> None:
        """A verification the tutorial makes about its own result; a failure exits with status 1."""
        if not ok:
            raise TutorialCheckError(what)
        if not self.quiet:
            print(f"{INDENT}{CHECK_PREFIX}{what}")

    def term(self, name: str, definition: str | None = None) -> None:
        """Define a glossary term where the tutorial first uses it: the first time in this run, one line with
        the definition (the glossary's, unless ``definition`` is given) and where the full entry is."""
        entry = _glossary.lookup(name)  # a term missing from docs/glossary.md is a bug in the tutorial
        key = entry.name.casefold()
        if key in self.terms_seen or self.quiet:  # a quiet step shows nothing: the term waits for a shown one
            return
        self.terms_seen.add(key)
        self.say(f"term: {name} -- {definition or entry.definition}\n      (more: {entry.link})")

    def words(self, *names: str) -> None:
        """The words this tutorial uses that an earlier one teaches, each defined in one line before step 1.

        Why: a learner may open any tutorial first; each one defines every term it prints (docs/glossary.md).
        Shown even with ``--from N``, which skips into the middle: the words are needed all the more there.
        """
        lines = []
        for name in names:
            entry = _glossary.lookup(name)  # a term missing from docs/glossary.md is a bug in the tutorial
            if entry.name.casefold() not in self.terms_seen:
                self.terms_seen.add(entry.name.casefold())
                lines.append(f"{INDENT}  {name} -- {entry.definition}")
        if lines:
            print(f"{INDENT}words used here (each one's full entry: {_glossary.GLOSSARY_LINK}):", *lines, sep="\n")

    def _show_source(self, here: FrameType | None) -> None:
        caller = here.f_back if here is not None else None
        source = _stepsource.find(caller.f_code.co_filename, caller.f_lineno) if caller is not None else None
        if source is None:
            print(f"{INDENT}(the code of this step is not available)")
            return
        print(f"{INDENT}{Path(source.filename).name}, lines {source.first}-{source.last}:")
        for line in source.numbered():
            print(INDENT + line)

    def _pause(self) -> None:
        self.at_prompt = True  # stays True if Ctrl-C ends the wait: the line "interrupted" then starts afresh
        try:
            answer = input(f"[Enter: run step {self.number}, q: quit] ")
        except EOFError:  # stdin closed (a pipe, CI): carry on without pausing, now and from here on
            self.stdin_open = False
            answer = ""
        self.at_prompt = False
        if not self.stdin_open or not _is_terminal(sys.stdin):  # a terminal echoed the Enter; else end the line
            print()
        if answer.strip().lower() in QUIT_ANSWERS:
            raise TutorialQuit(self.number)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # None (no stdin at all) or a closed file
        return False


# --- the recorded output's structure ---------------------------------------------------------------------------
_NUMBER = re.compile(r"(?:(?<![\w)])[-+])?(?:0[xX][0-9a-fA-F]+|\d+(?:[,_]\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?)")
NUMBER_MASK = "#"


def mask_numbers(text: str) -> str:
    """Every number in ``text`` (``1,000``, ``-3.5e-07``, ``0x7f00``, the 32 of ``float32``) as ``#``: a check
    text may carry a measured value, which changes from run to run while the check stays the same."""
    return _NUMBER.sub(NUMBER_MASK, text)


def structure(output: str) -> list[str]:
    """What must not change between two runs of a tutorial: its step titles and its check lines, in order,
    numbers masked. Timings, addresses and everything ``say`` printed are left out."""
    lines = [line.strip() for line in output.splitlines()]
    kept = [line for line in lines if line.startswith((STEP_PREFIX, CHECK_PREFIX))]
    return [mask_numbers(line) for line in kept]


# --- running one ----------------------------------------------------------------------------------------------------
def recorded_output(script: Path) -> Path:
    """Where tutorials/record_outputs.py keeps the recorded run of the tutorial ``script``."""
    return OUTPUT_DIR / f"{script.stem}.txt"


def skip_line(exc: BaseException, script: Path | None) -> str:
    """The one line a machine without a GPU prints, pointing at a recorded run when there is one."""
    first = (str(exc).splitlines() or [""])[0]
    return f"skipped: no usable GPU here ({type(exc).__name__}: {first})" + recording_note(script)


def recording_note(script: Path | None) -> str:
    """What a skip line adds for ``script``: where its run recorded on a GPU is, or nothing when none is."""
    recorded = recorded_output(script) if script is not None else None
    if recorded is not None and recorded.is_file():
        return f"; what it prints on a GPU: {_shown(recorded)}"
    return ""


def _shown(path: Path) -> str:
    """``path`` as the reader finds it: relative to the checkout when it is inside it."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def run(
    main: Callable[[Tutorial], None], title: str, argv: list[str] | None = None, flags: dict[str, str] | None = None
) -> NoReturn:
    """Run a tutorial's ``main`` with the shared exit statuses, Ctrl-C and closed-pipe rules included.

    ``flags``: the tutorial's own switches, name -> what it does (``--name`` on the command line).
    """
    cli.run(lambda: run_status(main, title, argv, flags))


def run_status(
    main: Callable[[Tutorial], None], title: str, argv: list[str] | None = None, flags: dict[str, str] | None = None
) -> int:
    """:func:`run` without the exit: the status it would end with."""
    try:
        tut = Tutorial(title, argv, flags)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2); returned, so cli.run flushes stdout
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    print(f"# {title}")
    try:
        main(tut)
    except NO_GPU_ERRORS as exc:
        print(skip_line(exc, _script_of(main)))
        return EXIT_NO_GPU
    except TutorialCheckError as exc:
        print(f"FAILED: {exc}")
        return EXIT_FAILED
    except TutorialQuit as stop:
        print(f"\nstopped before step {stop.number}, as asked; rerun with --from {stop.number} to go on from there")
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stdout.flush()
        where = f"at step {tut.number}" if tut.number else "before step 1"
        print(("\n" if tut.at_prompt else "") + f"interrupted {where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if tut.args.start is not None and tut.args.start > tut.number:
        print(
            f"--from {tut.args.start}: this run had {tut.number} steps, so it never paused; "
            f"give a step from 1 to {tut.number}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(f"\ndone in {time.perf_counter() - tut.started:.2f} s: every step verified.")
    return EXIT_OK


def _script_of(main: Callable[[Tutorial], None]) -> Path | None:
    try:
        return Path(inspect.getfile(main))
    except TypeError:  # a builtin or a callable object without a source file
        return None


__all__ = [
    "CHECK_PREFIX",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_GPU",
    "EXIT_OK",
    "EXIT_USAGE",
    "NO_GPU_ERRORS",
    "OUTPUT_DIR",
    "STEP_PREFIX",
    "Tutorial",
    "TutorialCheckError",
    "TutorialQuit",
    "mask_numbers",
    "recorded_output",
    "recording_note",
    "run",
    "run_status",
    "skip_line",
    "structure",
]
