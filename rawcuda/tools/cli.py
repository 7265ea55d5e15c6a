"""Tool: how every rawcuda command line ends -- with a status and at most one line, never a traceback.

Two things stop a command-line program that are not its own errors, and Python answers both with a
traceback of code the user never wrote:

* **Ctrl-C.** The terminal sends SIGINT, and Python raises ``KeyboardInterrupt`` wherever the program
  happens to be. Here that prints one line and exits with 130 (128 + SIGINT), the status a shell reports
  for a program that SIGINT ended, so a script calling the command can tell "interrupted" from "failed".
* **A reader that went away.** In ``python -m rawcuda demo | head -1``, ``head`` exits after one line and
  the pipe closes. A C program would get SIGPIPE and end quietly; Python ignores SIGPIPE, so its next
  write raises ``BrokenPipeError`` -- and so does the final flush of ``sys.stdout`` when the interpreter
  exits, unless stdout is pointed somewhere else first (the recipe in the documentation of Python's
  ``signal`` module, "Note on SIGPIPE"). Nobody is left to read the rest, so it goes to the null device,
  and the status is 141 (128 + SIGPIPE), what the shell reports for the C program.

``python -m rawcuda``, ``python -m rawcuda.tools.headercheck`` and ``build.py`` end through :func:`run`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

_SHELL_SIGNAL_BASE = 128  # a shell reports "ended by signal N" as the status 128 + N
_POSIX_SIGPIPE = 13  # SIGPIPE's number on Linux and macOS; Windows' signal module has no SIGPIPE at all

EXIT_INTERRUPTED = _SHELL_SIGNAL_BASE + signal.SIGINT
EXIT_BROKEN_PIPE = _SHELL_SIGNAL_BASE + getattr(signal, "SIGPIPE", _POSIX_SIGPIPE)
INTERRUPTED = "interrupted (Ctrl-C)"


def run(main: Callable[[], int]) -> NoReturn:
    """Call ``main`` and exit with its status; Ctrl-C and a closed stdout end it as the docstring says."""
    try:
        status = main()
        # Output still in the buffer meets a closed pipe here, where it is handled, instead of in the
        # interpreter's exit, which would print "Exception ignored ... BrokenPipeError".
        sys.stdout.flush()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        status = EXIT_INTERRUPTED
    except BrokenPipeError:
        discard_stdout()
        status = EXIT_BROKEN_PIPE
    sys.exit(status)


def discard_stdout() -> None:
    """Point file descriptor 1 at the null device, so that the interpreter's last flush has somewhere to go."""
    try:
        target = sys.stdout.fileno()
    except (OSError, ValueError):  # stdout replaced by an object without a descriptor: nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, target)
    finally:
        os.close(devnull)


__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "INTERRUPTED", "discard_stdout", "run"]
