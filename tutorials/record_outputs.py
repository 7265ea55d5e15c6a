"""Record what every tutorial prints on a GPU host, into tutorials/output/<stem>.txt, for readers without one.

Run on a machine with a GPU, from anywhere:

    python3 tutorials/record_outputs.py                           # every tutorial
    python3 tutorials/record_outputs.py --only 06c_overlap_streams  # one (repeat --only for more)

Each tutorial runs as a learner runs it (tests/helpers.run_tutorial does the same): alone, in its own
interpreter, from the folder above the checkout, with no PYTHONPATH, so it must find rawcuda by itself.
Its standard output is written behind a header that says when, on which GPU and driver, and with which
command it was recorded, then a marker line. A tutorial that fails (any status but 0) is reported and its
old recording is kept; the recorder then exits with 1. Without a GPU nothing runs and nothing is written:
one line says why, status 77. Recording every tutorial also deletes the recordings of tutorials that no
longer exist (renamed or split), so the folder holds exactly one file per tutorial.

tests/cpu/test_tutorials.py compares each fresh run on a GPU with its recording -- only the *structure*:
the step titles and check lines, numbers masked (``_tutorial.structure``) -- and fails with a diff and this
command when they differ, so a recording cannot silently go stale.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import _tutorial
from _tutorial import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, EXIT_USAGE, NO_GPU_ERRORS, OUTPUT_DIR, ROOT, structure

from rawcuda.tools import cli

TUTORIAL_DIR = Path(__file__).resolve().parent
TUTORIAL_PATTERN = "[0-9][0-9]*_*.py"  # NN_name.py and NNa_name.py, as tests/cpu/test_tutorials.py collects them
OUTPUT_MARKER = "--- output ---"  # the header ends at this line; the tutorial's own output follows it
#: How a tutorial is recorded: each step's code before its output, unpaused (tutorials/_tutorial.py, --code).
#: A reader without a GPU then reads a recording as a learner with one reads ``--step``.
RECORDED_FLAGS = ("--code",)
TIMEOUT_S = 600  # per tutorial: generous, so only a hung tutorial hits it (reported as failed, not waited on)
TAIL_LINES = 15  # of a failed tutorial's output, shown in the summary
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")  # Linux: "NVRM version: ... Kernel Module  580.159 ..."
_KERNEL_MODULE_VERSION = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d[\w.-]*)")


def tutorials(folder: Path = TUTORIAL_DIR) -> list[Path]:
    return sorted(folder.glob(TUTORIAL_PATTERN))


def command_for(script: Path) -> str:
    """The command a learner types for ``script``, relative to the checkout."""
    try:
        shown = script.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a script outside the checkout (the recorder's own tests)
        shown = str(script)
    return " ".join(["python3", shown, *RECORDED_FLAGS])


# --- the machine ------------------------------------------------------------------------------------------------
def driver_release() -> str:
    """The NVIDIA driver's release (``580.159``): from the kernel module's version file, else nvidia-smi."""
    try:
        found = _KERNEL_MODULE_VERSION.search(DRIVER_VERSION_FILE.read_text())
        if found:
            return found[1]
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            lines = proc.stdout.split()
            if proc.returncode == 0 and lines:
                return lines[0]
        except (OSError, subprocess.SubprocessError):
            pass
    return "unknown"


def machine() -> dict[str, str]:
    """What the header says about the machine. Raises one of NO_GPU_ERRORS where there is no GPU."""
    import numpy as np

    import rawcuda

    device = rawcuda.Device(0)
    major, minor = device.compute_capability
    cuda_major, cuda_minor = rawcuda.driver_version()
    return {
        "gpu": f"{device.name} (compute capability {major}.{minor}, {device.multiprocessor_count} SMs)",
        "driver": f"{driver_release()} (CUDA {cuda_major}.{cuda_minor})",
        "python": f"{platform.python_version()}, numpy {np.__version__}",
    }


# --- the file format ------------------------------------------------------------------------------------------
def header(info: dict[str, str], script: Path, when: datetime.datetime) -> str:
    """``key: value`` lines -- when, the machine, the command -- ending with the marker line."""
    fields = {
        "recorded": when.strftime("%Y-%m-%d %H:%M:%S %Z").strip(),
        **info,
        "command": command_for(script),
        "regenerate": f"python3 tutorials/record_outputs.py --only {script.stem}  (on a GPU host)",
        "note": "timings, addresses and sizes change from run to run; the tests compare step titles and checks",
    }
    width = max(len(key) for key in fields) + 1
    lines = [f"{key + ':':<{width}} {value}" for key, value in fields.items()]
    return "\n".join([*lines, OUTPUT_MARKER]) + "\n"


def split_recording(text: str) -> tuple[dict[str, str], str]:
    """A recording's header fields and the tutorial's output; ValueError if the marker line is missing."""
    head, marker, output = text.partition(f"\n{OUTPUT_MARKER}\n")
    if not marker:
        raise ValueError(f"no {OUTPUT_MARKER!r} line: not a recording made by tutorials/record_outputs.py")
    fields = {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields, output


def structure_diff(recording: str, output: str, recorded_name: str) -> str:
    """A unified diff from the recording's structure to ``output``'s; empty when they agree."""
    _, recorded_output = split_recording(recording)
    lines = difflib.unified_diff(
        structure(recorded_output), structure(output), f"{recorded_name} (committed)", "this run", lineterm=""
    )
    return "\n".join(lines)


# --- recording --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    script: Path
    status: int
    seconds: float
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == EXIT_OK


def run_one(script: Path, timeout: float = TIMEOUT_S) -> Result:
    """Run ``script`` as a learner would: its own interpreter, a neutral folder, no PYTHONPATH."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("RAWCUDA_LIBCUDA", None)  # the real driver, as tests/helpers.python_env runs the tutorials
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), *RECORDED_FLAGS],
            cwd=ROOT.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        status, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        status = EXIT_FAILED
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = f"timed out after {timeout:.0f} s"
    return Result(script, status, time.perf_counter() - started, stdout, stderr)


def write_recording(result: Result, info: dict[str, str], out_dir: Path, when: datetime.datetime) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{result.script.stem}.txt"
    partial = target.with_suffix(".txt.partial")  # written whole, then renamed: never half a recording
    body = result.stdout if result.stdout.endswith("\n") else result.stdout + "\n"
    partial.write_text(header(info, result.script, when) + body, encoding="utf-8")
    partial.replace(target)
    return target


def stale_recordings(scripts: Iterable[Path], out_dir: Path) -> list[Path]:
    """Recordings in ``out_dir`` whose tutorial no longer exists."""
    stems = {script.stem for script in scripts}
    return sorted(path for path in out_dir.glob("*.txt") if path.stem not in stems)


def summary_line(result: Result) -> str:
    steps = sum(line.startswith(_tutorial.STEP_PREFIX) for line in structure(result.stdout))
    checks = sum(line.startswith(_tutorial.CHECK_PREFIX) for line in structure(result.stdout))
    verdict = "ok    " if result.ok else f"FAILED (status {result.status})"
    return f"{verdict} {result.script.stem}: {steps} steps, {checks} checks, {result.seconds:.1f} s"


def record(
    scripts: Sequence[Path],
    out_dir: Path,
    info: dict[str, str],
    *,
    every: Sequence[Path] | None = None,
    timeout: float = TIMEOUT_S,
) -> int:
    """Run and record each script; print one line each and a summary. The exit status: 0, or 1 if any failed.
    ``every``: all the tutorials there are, when ``scripts`` is all of them: recordings of others are deleted."""
    when = datetime.datetime.now(datetime.timezone.utc)
    failed: list[Result] = []
    for script in scripts:
        print(f"running {command_for(script)} ...", flush=True)
        result = run_one(script, timeout)
        if result.ok:
            write_recording(result, info, out_dir, when)
        else:
            failed.append(result)
        print(summary_line(result), flush=True)
        if result.stderr.strip() and result.ok:
            print(f"  (it also wrote to stderr, not recorded: {result.stderr.strip().splitlines()[-1]})")
    if every is not None:
        for path in stale_recordings(every, out_dir):
            path.unlink()
            print(f"deleted {path.name}: no tutorial {path.stem}.py any more")
    shown = _shown(out_dir)
    print(f"\nrecorded {len(scripts) - len(failed)} of {len(scripts)} tutorials into {shown}/ on {info['gpu']}")
    for result in failed:
        tail = (result.stdout + result.stderr).rstrip().splitlines()[-TAIL_LINES:]
        print(f"\n{result.script.stem} failed (status {result.status}); its recording was left as it was:")
        print("\n".join("  | " + line for line in tail))
    return EXIT_FAILED if failed else EXIT_OK


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def select(only: Sequence[str], available: Sequence[Path]) -> list[Path]:
    """The scripts ``--only`` names (a stem, ``01_raw_vector_add``, or a file name); ValueError naming the
    valid stems for a name that is neither."""
    by_name = {script.stem: script for script in available} | {script.name: script for script in available}
    unknown = [name for name in only if Path(name).name not in by_name]
    if unknown:
        stems = ", ".join(script.stem for script in available)
        raise ValueError(f"no tutorial {', '.join(unknown)}; the tutorials are: {stems}")
    chosen = {by_name[Path(name).name] for name in only}
    return [script for script in available if script in chosen]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="STEM", help="record this tutorial only")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR, help="folder of the recordings (%(default)s)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per tutorial (%(default)s)")
    args = parser.parse_args(argv)
    available = tutorials()
    try:
        scripts = select(args.only, available) if args.only else available
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        info = machine()
    except NO_GPU_ERRORS as exc:
        first = (str(exc).splitlines() or [""])[0]
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {first}); record on a GPU host. Nothing written.")
        return EXIT_NO_GPU
    every = None if args.only else available
    return record(scripts, args.output, info, every=every, timeout=args.timeout)


if __name__ == "__main__":
    cli.run(main)
