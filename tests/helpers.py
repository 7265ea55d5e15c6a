"""What more than one test file needs, other than fixtures (those are in tests/conftest.py).

Paths, running code in a fresh interpreter (fresh driver state), running the command line and the tutorials
as a user does, importing the tutorials' frame, the README's code examples, building a C file into a shared
library (the fake libcuda, the fake libnvrtc), the launch-grid arithmetic, and the event-loop ticker of the
asyncio tests. Importing this module touches no driver. (Why there is no GPU, in one line, is
rawcuda.testing.gpu_unavailable_reason: the plugin's.)
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    from rawcuda import Function, Stream

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
CPU_DIR = TESTS_DIR / "cpu"  # tests that need no GPU: they run everywhere
GPU_DIR = TESTS_DIR / "gpu"  # tests that need one: conftest.py marks every test collected from here `gpu`
TUTORIAL_DIR = ROOT / "tutorials"
EXIT_NO_GPU = 77  # the documented exit status of the demo and the tutorials on a machine without a GPU
BLOCK = 256  # threads per block of the tests' 1-D launches
# A number that stands for a foreign CUstream in tests where no driver ever sees it: the address of live
# memory, since rawcuda refuses stream numbers it cannot read memory at (rawcuda.protocols.hostmap).
_STREAM_STAND_IN = ctypes.create_string_buffer(64)
MAPPED_STREAM_NUMBER = ctypes.addressof(_STREAM_STAND_IN)
NAN32 = np.float32(np.nan)

needs_fork = pytest.mark.skipif(sys.platform == "win32", reason="fork() is a POSIX call")


# --- child interpreters ---------------------------------------------------------------------------------------
def python_env(**extra: str) -> dict[str, str]:
    """The environment for a child interpreter that imports rawcuda from this source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RAWCUDA_LIBCUDA", None)
    env.update(extra)
    return env


def run_python(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (fresh driver state) and capture what it printed."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=python_env(**env), capture_output=True, text=True, timeout=timeout
    )


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m rawcuda ARGS``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rawcuda", *args],
        cwd=ROOT,
        env=python_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_tutorial(
    path: Path, *args: str, stdin: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a tutorial as a learner would: alone, from a neutral directory, without PYTHONPATH (the tutorial
    must find rawcuda by itself). ``stdin`` None leaves standard input alone; a string is fed to it."""
    env = python_env()
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, str(path), *args],
        cwd=ROOT.parent,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tutorial_module(name: str) -> ModuleType:
    """tutorials/NAME.py imported into this process (the frame ``_tutorial``, the recorder ``record_outputs``),
    found by name from tutorials/ as the tutorials themselves find it. Importing them touches no driver."""
    if str(TUTORIAL_DIR) not in sys.path:
        sys.path.insert(0, str(TUTORIAL_DIR))
    return importlib.import_module(name)


def build_shared_library(source: Path, out: Path, what: str) -> Path:
    """Compile the C file ``source`` into the shared library ``out``; without a C compiler, skip the test that
    needs ``what``."""
    from rawcuda.tools import headercheck

    compiler = headercheck.find_compiler()
    if compiler is None:
        pytest.skip(f"no C compiler to build {what}")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


FAKE_LAUNCH_SOURCE = ROOT / "bench" / "fake" / "fakelaunch.c"  # the libcuda look-alike whose launch does nothing


#: For a child script: ``refused(call)`` is the message of the TypeError or ValueError ``call()`` raised, or None.
CHILD_REFUSED = """
def refused(call):
    try:
        call()
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
"""


def over_fake_launch(script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``script`` in a child over bench/fake/fakelaunch.c, built here (its path is the script's first
    argument); what the script's last line printed, as JSON."""
    library = tmp_path / "libfakelaunch.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(FAKE_LAUNCH_SOURCE)], check=True)
    env = {**os.environ, "RAWCUDA_LIBCUDA": str(library), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", script, str(library), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def tracemalloc_places_objects() -> bool:
    """Whether tracemalloc can say where an ordinary object was allocated (Python 3.11's cannot: it answers
    None for objects whose attributes live inside them), i.e. whether a leak report can name the line."""

    class Probe:
        def __init__(self) -> None:
            self.value = 1

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        probe = Probe()
        return tracemalloc.get_object_traceback(probe) is not None
    finally:
        if started:
            tracemalloc.stop()


def readme_python_block(heading: str) -> str:
    """The first ```python block of README.md after ``heading`` (the README's examples are run as tests)."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(heading) :]
    start = after.index("```python\n") + len("```python\n")
    return after[start : after.index("```", start)]


# --- launches ---------------------------------------------------------------------------------------------------
def grid_for(n: int, block: int = BLOCK) -> int:
    """Blocks of ``block`` threads that cover ``n`` elements (at least one)."""
    return max((n + block - 1) // block, 1)


def run_vector_add(fn: Function, a: np.ndarray, b: np.ndarray, stream: Stream | None = None) -> np.ndarray:
    """``fn`` (a vector_add kernel) on fresh device copies of a and b, into a NaN-poisoned output."""
    from rawcuda import DeviceBuffer

    n = a.size
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.empty(n, np.float32)
    dc.fill(NAN32)
    fn.launch(grid_for(n), BLOCK, dc, da, db, n, stream=stream)
    out = dc.to_array(stream=stream)
    for buf in (da, db, dc):
        buf.close()
    return out


# --- asyncio ------------------------------------------------------------------------------------------------------
async def longest_gap_while(work: asyncio.Future[None] | asyncio.Task[None], tick_s: float) -> float:
    """Tick every ``tick_s`` until ``work`` is done; the longest time between two ticks. A loop that is never
    blocked keeps it near ``tick_s``; a loop blocked by ``work`` shows how long it was blocked."""
    longest, last = 0.0, time.perf_counter()
    while not work.done():
        await asyncio.sleep(tick_s)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    await work
    return longest
