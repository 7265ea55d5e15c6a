"""A user's mistake at a command line gets one clear line and an exit status, never a traceback.

Each test runs the command as a user would, in a child process: the header check given ``--help``, a
missing path or a directory; ``python -m rawcuda demo | head -1``; Ctrl-C in each command line; the
benchmarks on a machine without a GPU; ``build.py`` given an architecture nvcc does not know or a job
count below one; a tutorial given a flag it does not have. Two more are API mistakes a learner makes:
``ptx.parse(None)``, and reading a trace or an error where an enum argument was only a number.
"No GPU" is simulated as the other CPU tests do: ``RAWCUDA_LIBCUDA`` names a file that is not there.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rawcuda.core import ptx
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.tools import headercheck
from tests.helpers import EXIT_NO_GPU, ROOT, python_env, run_python, run_tutorial

NO_DRIVER = "/nonexistent/libcuda.so.1"  # RAWCUDA_LIBCUDA alone is tried when set: this machine has no GPU
EXIT_USAGE = 2  # argparse's status for a command line it refuses


def run_script(path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python PATH ARGS`` (build.py, bench/run_all.py) from the checkout."""
    return subprocess.run(
        [sys.executable, str(path), *args],
        cwd=ROOT,
        env=python_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert "Exception ignored" not in output, output  # what the interpreter prints for an error at exit


# --- the header check -------------------------------------------------------------------------------------------
HEADER = Path("/usr/local/cuda/include/cuda.h")
needs_header = pytest.mark.skipif(not HEADER.is_file(), reason=f"no cuda.h at {HEADER}")


def run_module(module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` from the source tree, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=python_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_headercheck_help_prints_usage() -> None:
    proc = run_module("rawcuda.tools.headercheck", "--help")
    assert_no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stdout + proc.stderr
    assert "--nvrtc" in proc.stdout


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["/nonexistent/cuda.h"], "/nonexistent/cuda.h: no such file"),
        (["/"], "/: is a directory"),
        (["--nvrtc", "/nonexistent/nvrtc.h"], "/nonexistent/nvrtc.h: no such file"),
    ],
)
def test_headercheck_refuses_a_path_that_is_not_a_header(args: list[str], why: str) -> None:
    proc = run_module("rawcuda.tools.headercheck", *args)
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert proc.stderr.startswith("usage:") and why in proc.stderr


@needs_header
def test_headercheck_struct_probe_includes_the_header_it_was_given(tmp_path: Path) -> None:
    if headercheck.find_compiler() is None:
        pytest.skip("no C compiler: the struct probe does not run")
    renamed = tmp_path / "my_cuda_13.h"  # a copy under another name: the probe must include this file
    shutil.copy(HEADER, renamed)
    proc = run_module("rawcuda.tools.headercheck", str(renamed))
    assert_no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "OK", proc.stdout + proc.stderr


# --- broken pipes and Ctrl-C ------------------------------------------------------------------------------------
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a program whose reader went away


@pytest.mark.parametrize("command", ["demo", "doctor"])
def test_a_reader_that_went_away_is_no_error(command: str) -> None:
    # `python -m rawcuda demo | head -1`, made deterministic: the reading end is closed before the command
    # writes anything, so its first write meets a broken pipe however fast or slow either process is.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rawcuda", command],
            cwd=ROOT,
            env=python_env(RAWCUDA_LIBCUDA=NO_DRIVER),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == EXIT_BROKEN_PIPE


# Each program interrupts itself from inside its main work with a real SIGINT, as Ctrl-C sends: patched into
# the function the command line calls, so the signal lands after start-up, deterministically.
INTERRUPT = "lambda *a, **k: (os.kill(os.getpid(), signal.SIGINT), time.sleep(60))"
INTERRUPTED_PROGRAMS = {
    "python -m rawcuda doctor": f"""
        import rawcuda.tools.doctor as target
        target.main = {INTERRUPT}
        sys.argv = ["rawcuda", "doctor"]
        runpy.run_module("rawcuda", run_name="__main__", alter_sys=True)
    """,
    "headercheck": f"""
        import rawcuda.tools.cheader as target
        target.parse = {INTERRUPT}
        sys.argv = ["headercheck", sys.argv[2]]  # a header that is there: the check refuses one that is not
        runpy.run_module("rawcuda.tools.headercheck", run_name="__main__", alter_sys=True)
    """,
    "build.py": f"""
        import rawcuda.tools.kernelbuild as target
        target.build = {INTERRUPT}
        sys.argv = ["build.py", "--out", sys.argv[1]]
        runpy.run_path({str(ROOT / "build.py")!r}, run_name="__main__")
    """,
}


@pytest.mark.parametrize("program", sorted(INTERRUPTED_PROGRAMS))
def test_ctrl_c_exits_130_in_one_line(program: str, tmp_path: Path) -> None:
    # Python keeps SIGINT ignored when it starts ignored -- as in a job a shell put in the background -- and the
    # interrupt would then do nothing: restore Ctrl-C's own handler first, as an interactive start has it.
    code = "import os, runpy, signal, sys, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    code += textwrap.dedent(INTERRUPTED_PROGRAMS[program])
    header = tmp_path / "cuda.h"  # never read: the program is interrupted before it parses anything
    header.touch()
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out"), str(header)],
        cwd=ROOT,
        env=python_env(RAWCUDA_LIBCUDA=NO_DRIVER),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_INTERRUPTED, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["interrupted (Ctrl-C)"]


# --- the benchmarks without a GPU -------------------------------------------------------------------------------
def test_bench_without_a_gpu_skips_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run_script(ROOT / "bench" / "run_all.py", "--out", str(out), RAWCUDA_LIBCUDA=NO_DRIVER)
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_NO_GPU, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: no usable GPU here (DriverNotFoundError:"), lines
    assert not out.exists(), "nothing is written when nothing was measured"


# --- build.py ---------------------------------------------------------------------------------------------------
def test_build_refuses_an_unknown_arch_once_and_writes_nothing(nvcc: str, tmp_path: Path) -> None:
    out = tmp_path / "fresh"
    proc = run_script(ROOT / "build.py", "--arch", "sm_99x", "--out", str(out), NVCC_PATH=nvcc)
    assert_no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("sm_99x") >= 1 and proc.stderr.count("Unsupported gpu architecture") == 1, proc.stderr
    assert "compute_80" in proc.stderr, "the message lists the architectures this nvcc knows"
    assert "FAILED" not in proc.stdout and "compiled" not in proc.stdout, "nothing was built"
    assert not out.exists(), "a failed build leaves no empty manifest behind"


@pytest.mark.parametrize("jobs", ["0", "-3", "many"])
def test_build_refuses_a_job_count_below_one(jobs: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_script(ROOT / "build.py", "-j", jobs, "--out", str(out))
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert proc.stderr.startswith("usage:") and "-j/--jobs" in proc.stderr and "positive" in proc.stderr
    assert not out.exists()


# --- the tutorials ------------------------------------------------------------------------------------------------
def test_tutorial_refuses_an_unknown_flag() -> None:
    proc = run_tutorial(ROOT / "tutorials" / "01_raw_vector_add.py", "--stpe")
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert proc.stderr.startswith("usage:") and "unrecognized arguments: --stpe" in proc.stderr
    assert "== step 1" not in proc.stdout, "nothing runs on a command line the tutorial does not understand"


# --- API mistakes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("wrong", [None, Path("kernel.ptx"), 42])
def test_ptx_parse_names_what_it_takes(wrong: object) -> None:
    with pytest.raises(TypeError) as caught:
        ptx.parse(wrong)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("ptx.parse takes PTX text (str) or bytes"), message
    assert type(wrong).__name__ in message and "ptx.parse_file" in message


ENUM_SCRIPT = """
import ctypes, io, json, rawcuda
from rawcuda.checked import cu
cu.cuInit(0)
out, value = io.StringIO(), ctypes.c_int()
with rawcuda.trace(file=out):
    cu.cuDeviceGetAttribute(ctypes.byref(value), 16, 0)  # how Device.attribute passes it: a plain int
    cu.cuDeviceGetAttribute(ctypes.byref(value), 99999, 0)  # no such attribute: the number alone
try:
    cu.cuDeviceGetAttribute(ctypes.byref(value), 16, 7)  # no device 7: the fake driver refuses
    error = ""
except rawcuda.CudaError as exc:
    error = str(exc)
print(json.dumps({"trace": out.getvalue().splitlines(), "error": error, "value": value.value}))
"""


def test_enum_arguments_are_shown_by_name_in_traces_and_errors(fake_libcuda: Path) -> None:
    proc = run_python(ENUM_SCRIPT, RAWCUDA_LIBCUDA=str(fake_libcuda))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    shown = f"attrib={DeviceAttribute.MULTIPROCESSOR_COUNT.name}({int(DeviceAttribute.MULTIPROCESSOR_COUNT)})"
    first, second = result["trace"]
    assert first.startswith(f"[rawcuda] cuDeviceGetAttribute(pi=&c_int, {shown}, dev=0)"), first
    assert "attrib=99999, dev=0)" in second, second
    assert f"cuDeviceGetAttribute(pi=&c_int, {shown}, dev=7)" in result["error"], result["error"]


def test_enum_arguments_by_name_without_a_driver() -> None:
    from rawcuda.checked.describe import format_arguments
    from rawcuda.ffi.cuda import TABLE

    row = TABLE["cuDeviceGetAttribute"]
    value = ctypes.c_int()
    text = format_arguments(row, (ctypes.byref(value), DeviceAttribute.MULTIPROCESSOR_COUNT, 0))
    assert text == f"pi=&c_int, attrib=MULTIPROCESSOR_COUNT({int(DeviceAttribute.MULTIPROCESSOR_COUNT)}), dev=0"
    # An int parameter is an int, even when its number is also some enum's value.
    assert format_arguments(TABLE["cuInit"], (0,)) == "Flags=0"
