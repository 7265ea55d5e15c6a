"""rawcuda's pytest plugin without a GPU: the skips and their reason, loading it, registering it once, the messages.

Sessions run in child processes (pytester's ``runpytest_subprocess``), because which driver a process loads --
none, the fake libcuda, the fake in stub mode -- is decided once per process. What needs a GPU to show (the
fixtures, a leak caught) is tests/gpu/test_plugin.py; the messages are built from plain data and numpy here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rawcuda import testing
from rawcuda.ffi import library
from rawcuda.testing import compare, leaks
from rawcuda.testing.leaks import Leak, LeakCheck, LeakReport
from tests.helpers import ROOT, python_env, readme_python_block, run_python, tracemalloc_places_objects

pytest_plugins = ["pytester"]

PLUGIN = "rawcuda.testing.plugin"
MISSING_DRIVER = "/nonexistent/libcuda.so.1"

#: One test of each kind that needs a GPU, and one that does not.
NEEDS_GPU = """
import pytest

@pytest.mark.gpu
def test_marked_gpu():
    raise AssertionError("ran without a GPU")

@pytest.mark.no_leaks
def test_marked_no_leaks():
    raise AssertionError("ran without a GPU")

def test_context(cuda_context):
    raise AssertionError("ran without a GPU")

def test_stream(cuda_stream):
    raise AssertionError("ran without a GPU")

def test_device(cuda_device):
    raise AssertionError("ran without a GPU")

def test_leak_fixture(cuda_leak_check):
    raise AssertionError("ran without a GPU")

def test_plain():
    pass
"""
GPU_TESTS = 6


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The inner session imports rawcuda from this checkout and loads plugins as pytest would."""
    for name, value in python_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return monkeypatch


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-rs", *args)


def skip_reasons(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("SKIPPED")]


# --- skipping where there is no GPU -----------------------------------------------------------------------------
def test_every_kind_of_gpu_test_skips_with_rawcudas_reason(pytester: pytest.Pytester, child_env: pytest.MonkeyPatch):
    child_env.setenv(library.LIBCUDA_ENV_VAR, MISSING_DRIVER)
    pytester.makepyfile(test_inner=NEEDS_GPU)
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, skipped=GPU_TESTS)
    reasons = skip_reasons(result)
    assert reasons, result.stdout.str()
    for line in reasons:  # the first line of rawcuda's own DriverNotFoundError, naming what it tried
        assert "no usable GPU: DriverNotFoundError: could not load the NVIDIA driver library" in line, line
        assert MISSING_DRIVER in line, line


def test_the_reason_names_a_stub_library(
    pytester: pytest.Pytester, child_env: pytest.MonkeyPatch, fake_libcuda: Path
) -> None:
    child_env.setenv(library.LIBCUDA_ENV_VAR, str(fake_libcuda))
    child_env.setenv("FAKECUDA_MODE", "stub")  # cuInit answers 34, as the toolkit's stub does
    pytester.makepyfile(test_inner=NEEDS_GPU)
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, skipped=GPU_TESTS)
    assert all("no usable GPU: StubLibraryError" in line for line in skip_reasons(result)), result.stdout.str()


def test_the_readme_example_skips_without_a_gpu(pytester: pytest.Pytester, child_env: pytest.MonkeyPatch) -> None:
    child_env.setenv(library.LIBCUDA_ENV_VAR, MISSING_DRIVER)
    pytester.makepyfile(test_readme=readme_python_block("### Testing your own kernels"))
    result = run_inner(pytester)
    result.assert_outcomes(skipped=1)  # (tests/gpu/test_plugin.py runs it where there is a GPU)
    assert "no usable GPU: DriverNotFoundError" in "\n".join(skip_reasons(result))


# --- loading the plugin touches nothing --------------------------------------------------------------------------
DRIVER_STATE = """
import os
from rawcuda.ffi import library

def test_driver_state(request):
    assert request.config.pluginmanager.get_plugin("rawcuda.testing.plugin") is not None
    expected = os.environ["EXPECT_DRIVER_LOADED"] == "1"
    assert (library.LIBCUDA.loaded() is not None) == expected

{gpu_test}
"""
A_GPU_TEST = """
import pytest

@pytest.mark.gpu
def test_on_gpu():
    pass
"""


@pytest.mark.parametrize(
    ("gpu_test", "args", "loaded"),
    [
        ("", (), "0"),  # no test needs a GPU: the driver is never opened
        (A_GPU_TEST, ("-k", "driver_state"), "0"),  # one would, but -k deselected it
        (A_GPU_TEST, (), "1"),  # one does: the driver was asked at collection (the check can see a load)
    ],
    ids=["no-gpu-test", "gpu-test-deselected", "gpu-test-selected"],
)
def test_the_driver_is_opened_only_when_a_selected_test_needs_it(
    pytester: pytest.Pytester,
    child_env: pytest.MonkeyPatch,
    fake_libcuda: Path,
    gpu_test: str,
    args: tuple[str, ...],
    loaded: str,
) -> None:
    # The fake libcuda opens fine: a driver not loaded is one nobody asked for, not one that failed to load.
    child_env.setenv(library.LIBCUDA_ENV_VAR, str(fake_libcuda))
    child_env.setenv("EXPECT_DRIVER_LOADED", loaded)
    pytester.makepyfile(test_inner=DRIVER_STATE.format(gpu_test=gpu_test))
    result = run_inner(pytester, *args)
    assert result.ret == 0, result.stdout.str()  # test_driver_state asserts the state, inside
    assert result.parseoutcomes()["passed"] == 1


def test_importing_the_plugin_imports_no_numpy_no_driver_table_and_no_objects() -> None:
    proc = run_python(
        "import sys\n"
        "import rawcuda.testing.plugin\n"
        "from rawcuda.ffi import library\n"
        "heavy = ['numpy', 'rawcuda.checked.binding', 'rawcuda.core.context', 'rawcuda.core.devicebuffer']\n"
        "print([m for m in heavy if m in sys.modules], library.LIBCUDA.loaded())\n",
        RAWCUDA_LIBCUDA=MISSING_DRIVER,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "None"], proc.stdout


# --- registered once, by entry point or by name ---------------------------------------------------------------------
REGISTERED = """
import sys

def test_registered_once(request):
    module = sys.modules.get("rawcuda.testing.plugin")
    names = [name for name, plugin in request.config.pluginmanager.list_name_plugin() if plugin is module]
    print("REGISTERED", module is not None and names)
"""


def fake_installation(site: Path) -> Path:
    """A dist-info that declares the plugin's entry point as pyproject.toml does (rawcuda need not be installed)."""
    info = site / "rawcuda_plugin_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rawcuda-plugin-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{PLUGIN} = {PLUGIN}\n")
    return site


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), f"REGISTERED ['{PLUGIN}']"),  # the entry point alone
        (("-p", PLUGIN), f"REGISTERED ['{PLUGIN}']"),  # the entry point and -p
        (("-p", f"no:{PLUGIN}"), "REGISTERED False"),  # turned off: not even the conftest loads it
    ],
    ids=["entry-point", "entry-point-and-p", "turned-off"],
)
def test_the_entry_point_and_a_conftest_register_it_once(
    pytester: pytest.Pytester, child_env: pytest.MonkeyPatch, args: tuple[str, ...], expected: str
) -> None:
    site = fake_installation(pytester.path / "site")
    child_env.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    child_env.setenv(library.LIBCUDA_ENV_VAR, MISSING_DRIVER)
    pytester.makeconftest(f"pytest_plugins = [{PLUGIN!r}]\n")  # as tests/conftest.py does
    pytester.makepyfile(test_inner=REGISTERED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *args)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert expected in result.stdout.str(), result.stdout.str()


def test_pyproject_declares_the_entry_point_under_the_plugins_own_name() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        points = tomllib.loads(text)["project"]["entry-points"]["pytest11"]
        assert points == {PLUGIN: PLUGIN}
    else:  # no TOML reader in the standard library: the line, as written
        assert f'"{PLUGIN}" = "{PLUGIN}"' in text


def test_an_installed_rawcuda_offers_the_plugin() -> None:
    from importlib import metadata

    try:
        dist = metadata.distribution("rawcuda")
    except metadata.PackageNotFoundError:
        pytest.skip(
            "rawcuda is not installed here (CI installs it with pip install -e .); the fake installation "
            "above tests the mechanism"
        )
    names = {ep.name: ep.value for ep in dist.entry_points if ep.group == "pytest11"}
    assert names == {PLUGIN: PLUGIN}


def test_a_bad_no_leaks_argument_stops_the_session_naming_the_test(
    pytester: pytest.Pytester, child_env: pytest.MonkeyPatch
) -> None:
    child_env.setenv(library.LIBCUDA_ENV_VAR, MISSING_DRIVER)
    pytester.makepyfile(test_inner="import pytest\n\n@pytest.mark.no_leaks(tolerance=5)\ndef test_typo():\n    pass\n")
    result = run_inner(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    text = result.stdout.str() + result.stderr.str()
    assert "test_inner.py::test_typo" in text and "takes only memory_tolerance=<bytes>, not tolerance" in text


# --- the leak check around a test, with a fake context --------------------------------------------------------
#: A stand-in for rawcuda's object layer: one context whose children are "buffers" that take free memory and
#: give it back when closed or freed. The inner conftest puts it where the leak check looks.
FAKE_LAYER = """
import weakref

import rawcuda.testing
from rawcuda.core.guards import contextregistry
from rawcuda.testing import leaks


class FakeContext:
    closed = False
    usable = True

    def __init__(self):
        self.objects = weakref.WeakSet()
        self.free = 1 << 30
        self.late_error = None  # raised by the next synchronize, as a kernel fault is

    @property
    def children(self):
        return [c for c in self.objects if not c.closed]

    def synchronize(self):
        error, self.late_error = self.late_error, None
        if error is not None:
            raise error

    def mem_info(self):
        return self.free, 2 << 30


CONTEXT = FakeContext()


def give_back(nbytes):
    CONTEXT.free += nbytes


class FakeBuffer:
    def __init__(self, nbytes):
        self.nbytes, self.closed = nbytes, False
        CONTEXT.objects.add(self)
        CONTEXT.free -= nbytes
        self._finalizer = weakref.finalize(self, give_back, nbytes)  # as rawcuda's Resource does

    def close(self):
        self.closed = True
        self._finalizer()

    def __repr__(self):
        return f"<FakeBuffer {self.nbytes}>"


contextregistry.live_contexts = lambda: [CONTEXT]
leaks.default_context = lambda: CONTEXT
rawcuda.testing.gpu_unavailable_reason = lambda: None  # "there is a GPU"
"""

FAKE_TESTS = """
import gc
import pytest
from conftest import CONTEXT, FakeBuffer

KEPT = []

@pytest.mark.no_leaks
def test_kept():
    KEPT.append(FakeBuffer(4096))  # KEPT-LINE

@pytest.mark.no_leaks
def test_closed():
    FakeBuffer(1 << 20).close()

@pytest.mark.no_leaks
def test_dropped():
    FakeBuffer(1 << 20)  # no close: reference counting frees it at once

def test_cycle(cuda_leak_check):
    assert not gc.isenabled()  # the check turned the collector off for the body
    holder = [FakeBuffer(64)]
    holder.append(holder)

def test_ignored(cuda_leak_check):
    KEPT.append(cuda_leak_check.ignore(FakeBuffer(64)))

@pytest.mark.no_leaks
def test_memory_nobody_owns():
    CONTEXT.free -= 64 << 20

@pytest.mark.no_leaks(memory_tolerance=128 << 20)
def test_memory_within_tolerance():
    CONTEXT.free -= 64 << 20

@pytest.mark.no_leaks
def test_its_own_failure():
    KEPT.append(FakeBuffer(64))
    assert False, "the test's own failure"

@pytest.mark.no_leaks
def test_fault_found_by_the_checks_synchronize():
    CONTEXT.late_error = RuntimeError("a kernel fault, reported late")

def test_collector_is_back():
    assert gc.isenabled()
"""


def test_the_leak_check_around_the_body_of_a_test(pytester: pytest.Pytester, child_env: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_LAYER)
    path = pytester.makepyfile(test_inner=FAKE_TESTS)
    result = run_inner(pytester, "-rA")
    text = result.stdout.str()
    outcomes = {
        line.split("::")[1].split(" ")[0]: line.split(" ")[0]
        for line in result.outlines
        if line.startswith(("PASSED test_inner.py::", "FAILED test_inner.py::"))
    }
    assert outcomes == {
        "test_kept": "FAILED",
        "test_closed": "PASSED",
        "test_dropped": "PASSED",
        "test_cycle": "FAILED",
        "test_ignored": "PASSED",
        "test_memory_nobody_owns": "FAILED",
        "test_memory_within_tolerance": "PASSED",
        "test_its_own_failure": "FAILED",
        "test_fault_found_by_the_checks_synchronize": "FAILED",
        "test_collector_is_back": "PASSED",
    }, text
    kept_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "KEPT-LINE" in line)
    where = f", allocated at test_inner.py:{kept_line}" if tracemalloc_places_objects() else "\n"
    assert f"FakeBuffer, 4096 bytes: <FakeBuffer 4096>{where}" in text
    assert "FakeBuffer, 64 bytes: <FakeBuffer 64>" in text  # the cycle's buffer
    assert "device free memory fell by 64.0 MiB (tolerance 8.0 MiB), and no rawcuda object was left open" in text
    assert "the test's own failure" in text
    assert "RuntimeError: a kernel fault, reported late" in text
    assert text.count("rawcuda leak check:") == 3 + 3  # three failures, each in its section and its summary line
    assert "Traceback (most recent call last)" not in text and "_callers.py" not in text  # the message alone


# --- the messages -----------------------------------------------------------------------------------------------
def test_equal_arrays_give_no_message() -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal(1000).astype(np.float32)
    assert compare.array_mismatch(a, a.copy()) is None
    assert compare.array_mismatch(a, a * (1 + 1e-7), rtol=1e-6) is None
    assert compare.array_mismatch(np.zeros((2, 3), np.int32), 0) is None  # a scalar: every element
    assert compare.array_mismatch(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) is None  # NaN matches NaN
    assert compare.array_mismatch(np.empty((0, 4), np.float32), np.empty((0, 4), np.float32)) is None


def test_a_mismatch_is_counted_located_and_shown() -> None:
    rng = np.random.default_rng()
    expected = rng.uniform(1, 2, size=(50, 20)).astype(np.float32)
    got = expected.copy()
    got[3, 4] += np.float32(0.5)
    got[7, 0] = np.nan
    got[40, 19] = expected[40, 19] * np.float32(1.25)
    message = compare.array_mismatch(got, expected, rtol=1e-6, what="DeviceBuffer (50, 20) float32")
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == (
        "DeviceBuffer (50, 20) float32 differs from the expected array: 3 of 1000 elements (0.3%) are not within "
        "atol=0 + rtol=1e-06 * |expected|"
    )
    # (Each difference is exact in float32: the two values are within a factor of 2 -- Sterbenz.)
    worst_abs = max(float(abs(got[i] - expected[i])) for i in ((3, 4), (40, 19)))
    assert lines[1].startswith("max abs error ") and "max rel error " in lines[1]
    assert f"{worst_abs:.6g}" in lines[1]
    assert lines[2] == "first mismatches (index: got, expected, abs error):"
    # Row-major order, each with what was there, what should have been, and how far apart.
    # (str() of a float32 is its shortest exact form: 1.7241728, not float64's 1.724172830581665.)
    err = float(abs(got[3, 4] - expected[3, 4]))
    assert lines[3] == f"  (3, 4): {got[3, 4]!s}, {expected[3, 4]!s}, {err:.6g}"
    assert lines[4] == f"  (7, 0): nan, {expected[7, 0]!s}, nan"
    assert lines[5].startswith("  (40, 19): ")
    assert len(lines) == 6


def test_many_mismatches_are_summarised() -> None:
    got = np.arange(100, dtype=np.int64)
    expected = got.copy()
    expected[::2] += 1  # 50 wrong
    message = compare.array_mismatch(got, expected)
    assert message is not None
    lines = message.splitlines()
    assert lines[0].endswith("50 of 100 elements (50%) are not equal")  # integers: no tolerance
    assert lines[1] == "max abs error 1 at index (0,); max rel error 1 at index (0,)"
    shown = [line for line in lines if line.startswith("  (")]
    assert len(shown) == compare.SHOWN_MISMATCHES and shown[0] == "  (0,): 0, 1, 1"
    assert lines[-1] == f"  ... and {50 - compare.SHOWN_MISMATCHES} more"


def test_integers_get_no_tolerance_and_booleans_compare_exactly() -> None:
    assert compare.array_mismatch(np.array([1000], np.int32), np.array([1001], np.int32), rtol=0.1) is not None
    message = compare.array_mismatch(np.array([True, False]), np.array([True, True]))
    assert message is not None and "1 of 2 elements (50%) are not equal" in message
    assert "  (1,): False, True, 1" in message


def test_shape_and_dtype_mismatches_say_which_is_which() -> None:
    a = np.zeros(5, np.float32)
    assert compare.array_mismatch(a, np.zeros(6, np.float32), what="DeviceBuffer (5,) float32") == (
        "shape mismatch: the DeviceBuffer (5,) float32 has shape (5,), the expected array (6,)"
    )
    message = compare.array_mismatch(a, np.zeros(5, np.float64))
    assert message is not None and message.startswith(
        "dtype mismatch: the array holds float32, the expected array float64"
    )
    assert "expected.astype(np.float32)" in message
    assert compare.array_mismatch(a, [0, 0, 0, 0, 0]) is None  # a list takes the array's dtype


def test_errors_against_zero_and_nan_only() -> None:
    message = compare.array_mismatch(np.array([0.5], np.float32), np.array([0.0], np.float32))
    assert message is not None and "no relative error (every finite mismatch is against an expected 0)" in message
    message = compare.array_mismatch(np.array([np.nan], np.float32), np.array([1.0], np.float32))
    assert message is not None and "no finite error to report" in message
    message = compare.array_mismatch(np.array([np.nan]), np.array([np.nan]), equal_nan=False)
    assert message is not None


def test_complex_elements_use_the_modulus() -> None:
    message = compare.array_mismatch(np.array([1 + 1j]), np.array([1 + 4j]))
    assert message is not None and "max abs error 3 at index (0,)" in message


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="tolerances must be 0 or more"):
        compare.array_mismatch(np.zeros(1), np.zeros(1), rtol=-1)
    with pytest.raises(TypeError, match="not list"):
        testing.assert_device_equal([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="memory_tolerance is a number of bytes"):
        LeakCheck(memory_tolerance=-1)


def test_assert_device_equal_takes_a_host_array_too() -> None:
    testing.assert_device_equal(np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32))
    with pytest.raises(AssertionError, match=r"^array differs from the expected array: 1 of 4 elements"):
        testing.assert_device_equal(np.arange(4, dtype=np.float32), np.array([0, 1, 2, 4], np.float32))


def test_the_leak_report_lists_each_object_and_the_memory() -> None:
    buffer = Leak("DeviceBuffer", "<DeviceBuffer (1024,) float32 at 0x7f0000000000>", 4096, "test_mine.py:12")
    stream = Leak("Stream", "<Stream 0x55>", None, None)
    report = LeakReport([buffer, stream], memory_drop=10 * leaks.MIB, memory_tolerance=leaks.DEFAULT_MEMORY_TOLERANCE)
    lines = report.message.splitlines()
    assert (
        lines[0] == "rawcuda leak check: 2 object(s) left open; device free memory fell by 10.0 MiB (tolerance 8.0 MiB)"
    )
    assert lines[1] == (
        "  DeviceBuffer, 4096 bytes: <DeviceBuffer (1024,) float32 at 0x7f0000000000>, allocated at test_mine.py:12"
    )
    assert lines[2] == "  Stream: <Stream 0x55>"
    assert "cyclic garbage collector off" in lines[3]
    memory_only = LeakReport([], memory_drop=64 * leaks.MIB)
    assert memory_only and memory_only.message.startswith(
        "rawcuda leak check: device free memory fell by 64.0 MiB (tolerance 8.0 MiB), "
        "and no rawcuda object was left open"
    )
    assert "lazy loading" in memory_only.message and "memory_tolerance=" in memory_only.message
    assert not LeakReport([], memory_drop=leaks.DEFAULT_MEMORY_TOLERANCE) and LeakReport([]).message == ""


def test_the_public_names_are_the_documented_ones() -> None:
    assert set(testing.__all__) >= {"assert_device_equal", "array_mismatch", "LeakCheck", "gpu_unavailable_reason"}
    for name in testing.__all__:
        assert getattr(testing, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = testing.nothing_here


@pytest.mark.parametrize(
    ("got", "expected"),
    [
        (np.ones(8, np.int32), 1.5),
        (np.ones(8, np.int32), [1.9] * 8),
        (np.ones(8, np.int64), np.float64(1.25)),  # a numpy scalar is no array: it is cast too
        (np.zeros(8, np.uint8), 0.75),
        (np.zeros(4, np.uint8), -1),
        (np.zeros(4, np.uint8), 256),
        (np.zeros(4, np.uint8), np.nan),
        (np.ones(8, bool), 2),
        (np.ones(8, bool), 0.5),
        (np.full(8, np.inf, np.float32), 1e40),  # 1e40 would become float32's inf
        (np.ones(3, np.float32), 1 + 1j),  # the imaginary part would be dropped
    ],
)
def test_a_scalar_or_list_that_the_dtype_cannot_hold_is_refused_not_cast(got: np.ndarray, expected: Any) -> None:
    with pytest.raises(ValueError, match=f"does not fit the buffer's dtype {got.dtype}"):
        compare.array_mismatch(got, expected)
    with pytest.raises(ValueError, match="the comparison would lie"):
        testing.assert_device_equal(got, expected)


def test_a_scalar_or_list_the_dtype_holds_still_compares() -> None:
    assert compare.array_mismatch(np.full(3, np.float32(0.1)), 0.1) is None  # rounding to float32 is no loss
    assert compare.array_mismatch(np.full(3, np.nan, np.float32), np.nan) is None
    assert compare.array_mismatch(np.ones(3, np.float32), 1 + 0j) is None
    assert compare.array_mismatch(np.ones(3, bool), [1, 1, 1]) is None
    assert compare.array_mismatch(np.ones(3, np.int16), [1.0, 1.0, 1.0]) is None
    message = compare.array_mismatch(np.ones(3, np.int16), [1, 2, 1])
    assert message is not None and "1 of 3 elements" in message
    with pytest.raises(TypeError, match="a number or a"):
        compare.array_mismatch(np.ones(3, np.int16), [1, None, 1])


def test_integer_errors_are_exact() -> None:
    message = compare.array_mismatch(np.array([2**53 + 1, 5], np.int64), np.array([2**53, 5], np.int64))
    assert message is not None and "max abs error 1 at index (0,)" in message  # float64 said 0
    assert "  (0,): 9007199254740993, 9007199254740992, 1" in message
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    message = compare.array_mismatch(np.array([top], np.int64), np.array([bottom], np.int64))
    assert message is not None and f"max abs error {2**64 - 1} at index (0,)" in message  # no overflow
    message = compare.array_mismatch(np.array([2**64 - 1], np.uint64), np.array([0], np.uint64))
    assert message is not None and f"max abs error {2**64 - 1} at index (0,)" in message
