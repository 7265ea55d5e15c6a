"""The little frame every tutorial shares: numbered steps, ``--step`` pauses, and a clean no-GPU exit.

Exit statuses (documented in tutorials/README.md):

* 0  -- every step ran and the tutorial verified its own result;
* 1  -- a check failed (wrong answer) or an unexpected error happened;
* 2  -- a flag the tutorial does not have: argparse prints the usage, and nothing runs;
* 77 -- skipped: no usable NVIDIA driver or GPU on this machine (77 is the "skipped" status of automake
  test harnesses). One line says why; no traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(ROOT))

import rawcuda  # noqa: E402  (after the sys.path fix above)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NO_GPU = 77

# The errors that mean "this machine cannot run CUDA", as opposed to a bug in the tutorial.
NO_GPU_ERRORS: tuple[type[BaseException], ...] = (
    rawcuda.DriverNotFoundError,
    rawcuda.StubLibraryError,
    rawcuda.NoDeviceError,
)


class Tutorial:
    """Prints numbered steps; with ``--step`` waits for Enter before each one."""

    def __init__(self, title: str, argv: list[str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=title)
        parser.add_argument("--step", action="store_true", help="pause before each step (press Enter)")
        # parse_args, not parse_known_args: a mistyped --stpe must stop with the usage (status 2), not run
        # the whole tutorial without the pauses that were asked for.
        self.args = parser.parse_args(argv)
        self.title = title
        self.number = 0
        self.started = time.perf_counter()

    def step(self, text: str) -> None:
        self.number += 1
        if self.args.step:
            try:
                input(f"\n[press Enter for step {self.number}] ")
            except EOFError:  # stdin closed (a pipe, CI): carry on without pausing
                self.args.step = False
        print(f"\n== step {self.number}: {text}")

    def say(self, text: str) -> None:
        print("   " + text.replace("\n", "\n   "))

    def check(self, ok: bool, what: str) -> None:
        """A verification the tutorial makes about its own result; a failure exits with status 1."""
        if not ok:
            raise TutorialCheckError(what)
        print(f"   ok: {what}")


class TutorialCheckError(AssertionError):
    pass


def run(main: Callable[[Tutorial], None], title: str) -> None:
    """Run a tutorial's ``main`` with the shared exit-status rules."""
    tut = Tutorial(title)
    print(f"# {title}")
    try:
        main(tut)
    except NO_GPU_ERRORS as exc:
        first = str(exc).splitlines()[0]
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {first})")
        sys.exit(EXIT_NO_GPU)
    except TutorialCheckError as exc:
        print(f"FAILED: {exc}")
        sys.exit(EXIT_FAILED)
    print(f"\ndone in {time.perf_counter() - tut.started:.2f} s: every step verified.")
    sys.exit(EXIT_OK)
