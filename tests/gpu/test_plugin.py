"""rawcuda's pytest plugin on a GPU: the fixtures, leaks caught (and none invented), assert_device_equal's diff.

The leak checks that must *fail* run in child sessions (pytester's ``runpytest_subprocess``): a leaking test
there is a test of the plugin, not a failure of this suite, and a fresh process measures from a clean
device. Each child first warms up what the driver allocates once per process -- the first module load
and launch (rawcuda/testing/leaks.py says why) -- as a user's suite would, in a module-scoped fixture.
What runs in this session uses the plugin that tests/conftest.py loads, as any GPU test here may.
"""

from __future__ import annotations

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, ManagedBuffer, Module, PinnedBuffer, StreamFlag, ops
from rawcuda.testing import LeakCheck, assert_device_equal, open_objects
from tests.helpers import BLOCK, NAN32, grid_for, python_env, readme_python_block, tracemalloc_places_objects

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.gpu

PLUGIN = "rawcuda.testing.plugin"
N = 4099  # not a multiple of the block: the tail block is partly idle
MIB = 1 << 20
#: For checks that are about objects only: the driver's one-off allocations (a module's code, its pools) stay out.
OBJECTS_ONLY = 256 * MIB
WARM_UP_KERNELS = True  # the vector_add fixture launches once before any test here (lazy loading)


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The child session imports rawcuda (and tests.*) from this checkout."""
    for name, value in python_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return monkeypatch


def run_child(pytester: pytest.Pytester, source: str) -> tuple[pytest.RunResult, list[str]]:
    """Run ``source`` as test_child.py with the plugin; the result and the file's lines (for line numbers)."""
    path = pytester.makepyfile(test_child=source)
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", "-rA")
    return result, path.read_text().splitlines()


def line_of(lines: list[str], tag: str) -> int:
    """The 1-based number of the line that carries ``# tag``."""
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {tag}"))


# --- the fixtures ---------------------------------------------------------------------------------------------------
def test_the_fixtures_give_the_default_context_its_device_and_a_fresh_stream(
    cuda_context: Context, cuda_device: rawcuda.Device, cuda_stream: rawcuda.Stream, rng: np.random.Generator
) -> None:
    assert cuda_context is rawcuda.default_context() and cuda_context.is_primary
    assert cuda_device == cuda_context.device and cuda_device.ordinal == 0
    assert cuda_stream.context is cuda_context and not cuda_stream.closed
    assert cuda_stream.flags & StreamFlag.NON_BLOCKING
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(NAN32)  # poisoned: a kernel that writes nothing cannot pass
        ops.vector_add(dc, da, db, stream=cuda_stream)
        assert_device_equal(dc, a + b)  # one float32 addition per element: exactly numpy's


FIXTURES_CHILD = """
import pytest
import rawcuda
from rawcuda import StreamFlag

STREAMS = []

@pytest.mark.gpu
def test_a_gpu_test_runs_where_there_is_a_gpu():
    assert rawcuda.Device.count() >= 1

def test_first(cuda_stream, cuda_context):
    assert cuda_stream.context is cuda_context and cuda_stream.flags & StreamFlag.NON_BLOCKING
    STREAMS.append(cuda_stream)

def test_second(cuda_stream, cuda_context):
    assert STREAMS[0].closed, "the first test's stream was not closed after it"
    assert cuda_stream is not STREAMS[0] and not cuda_stream.closed
    assert cuda_context is STREAMS[0].context is rawcuda.default_context()  # one context for every test
"""


def test_streams_are_fresh_per_test_and_the_context_is_shared(
    pytester: pytest.Pytester, child_env: pytest.MonkeyPatch
) -> None:
    result, _ = run_child(pytester, FIXTURES_CHILD)
    result.assert_outcomes(passed=3)


FAULT_CHILD = """
from rawcuda import Module
from tests.gpu.test_sticky import FAULT_PTX, ILLEGAL_ADDRESS, KERNEL

KEPT = []  # the module stays loaded: unloading it under the queued kernel would meet the fault first

def test_queues_a_faulting_kernel(cuda_context):
    module = Module(FAULT_PTX, name="poke.ptx")
    KEPT.append(module)
    module.function(KERNEL).launch(1, 1, ILLEGAL_ADDRESS)  # returns before the kernel runs

def test_next():
    pass
"""


def test_a_fault_is_reported_by_the_test_that_queued_the_work(
    pytester: pytest.Pytester, child_env: pytest.MonkeyPatch
) -> None:
    # The launch returns at once; the fault surfaces at the next synchronize: cuda_context's, at teardown.
    result, _ = run_child(pytester, FAULT_CHILD)
    result.assert_outcomes(passed=2, errors=1)
    text = result.stdout.str()
    assert "ERROR at teardown of test_queues_a_faulting_kernel" in text, text
    assert "KernelFaultError" in text and "CUDA_ERROR_ILLEGAL_ADDRESS" in text, text


def test_the_readme_example_passes(pytester: pytest.Pytester, child_env: pytest.MonkeyPatch) -> None:
    result, _ = run_child(pytester, readme_python_block("### Testing your own kernels"))
    result.assert_outcomes(passed=1)


# --- leaks ----------------------------------------------------------------------------------------------------------
LEAK_CHILD = """
import ctypes

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, Module, kernels
from rawcuda.testing import assert_device_equal

MIB = 1 << 20
N = 1 << 20  # float32 elements: 4 MiB
KEPT = []
RAW = []


@pytest.fixture(scope="module", autouse=True)
def warm_up():
    # What the driver allocates once per process and keeps -- a first module and launch -- happens here.
    with Module(kernels.ptx_path("vector_add")) as module:
        fn = module.function("vector_add")
        fn.launch(1, 256, 0, 0, 0, 0)  # n = 0: does nothing
        fn.context.synchronize()


def raw_alloc(nbytes):
    rawcuda.default_context().activate()
    ptr = ctypes.c_uint64()
    rawcuda.cu.cuMemAlloc(ctypes.byref(ptr), nbytes)  # memory no rawcuda object owns
    RAW.append(ptr.value)


@pytest.mark.no_leaks
def test_keeps_a_buffer():
    KEPT.append(DeviceBuffer.from_array(np.arange(1024, dtype=np.float32)))  # LEAK


@pytest.mark.no_leaks
def test_closes_everything(cuda_stream):
    rng = np.random.default_rng()
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    with Module(kernels.ptx_path("vector_add")) as module, DeviceBuffer.from_array(a) as da, \\
            DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N, np.float32) as dc:
        dc.fill(np.float32(np.nan))
        module.function("vector_add").launch(N // 256, 256, dc, da, db, N, stream=cuda_stream)
        assert_device_equal(dc, a + b)


@pytest.mark.no_leaks
def test_drops_a_buffer_without_closing_it():
    buffer = DeviceBuffer.from_array(np.ones(N, np.float32))
    assert buffer.size == N  # dropped at return: reference counting frees it, no collector needed


def test_a_reference_cycle_keeps_a_buffer(cuda_leak_check):
    class Holder:
        pass

    holder = Holder()
    holder.me = holder
    holder.buffer = DeviceBuffer(N, np.float32)  # CYCLE


def test_what_the_test_keeps_on_purpose(cuda_leak_check):
    KEPT.append(cuda_leak_check.ignore(DeviceBuffer(16, np.float32)))


@pytest.mark.no_leaks
def test_raw_memory():
    raw_alloc(64 * MIB)


@pytest.mark.no_leaks(memory_tolerance=256 * MIB)
def test_raw_memory_within_the_tolerance():
    raw_alloc(64 * MIB)


@pytest.mark.no_leaks
def test_fails_and_leaks():
    KEPT.append(DeviceBuffer(16, np.float32))
    assert False, "its own failure"
"""


def test_the_leak_check_fails_leaks_and_passes_the_rest(pytester: pytest.Pytester, child_env: pytest.MonkeyPatch):
    result, lines = run_child(pytester, LEAK_CHILD)
    text = result.stdout.str()
    outcomes = {name: outcome for outcome, name in _outcome_lines(text)}
    assert outcomes == {
        "test_keeps_a_buffer": "FAILED",
        "test_closes_everything": "PASSED",
        "test_drops_a_buffer_without_closing_it": "PASSED",
        "test_a_reference_cycle_keeps_a_buffer": "FAILED",
        "test_what_the_test_keeps_on_purpose": "PASSED",
        "test_raw_memory": "FAILED",
        "test_raw_memory_within_the_tolerance": "PASSED",
        "test_fails_and_leaks": "FAILED",
    }, text
    kept = _failure(text, "test_keeps_a_buffer")
    assert "rawcuda leak check: 1 object(s) left open" in kept
    assert "DeviceBuffer, 4096 bytes: <DeviceBuffer (1024,) float32 at 0x" in kept
    cycle = _failure(text, "test_a_reference_cycle_keeps_a_buffer")
    assert "1 object(s) left open" in cycle
    if tracemalloc_places_objects():  # (not on Python 3.11: rawcuda/testing/leaks.py)
        assert f"allocated at test_child.py:{line_of(lines, 'LEAK')}" in kept
        assert f"allocated at test_child.py:{line_of(lines, 'CYCLE')}" in cycle
    assert "DeviceBuffer, 4.0 MiB: <DeviceBuffer (1048576,) float32" in cycle
    raw = _failure(text, "test_raw_memory")
    assert "device free memory fell by" in raw and "no rawcuda object was left open" in raw
    own = _failure(text, "test_fails_and_leaks")
    assert "its own failure" in own and "rawcuda leak check" not in own


def _outcome_lines(text: str) -> list[tuple[str, str]]:
    """(PASSED/FAILED, test name) from the -rA summary."""
    found = []
    for line in text.splitlines():
        for outcome in ("PASSED", "FAILED"):
            prefix = f"{outcome} test_child.py::"
            if line.startswith(prefix):
                found.append((outcome, line[len(prefix) :].split(" ")[0]))
    return found


def _failure(text: str, name: str) -> str:
    """The failure section pytest printed for test ``name`` (up to the next section)."""
    start = text.index(f"_ {name} _")
    rest = text[start + len(name) + 2 :]
    ends = [i for i in (rest.find("\n___"), rest.find("\n=====")) if i >= 0]
    return rest[: min(ends)] if ends else rest


@pytest.mark.no_leaks
def test_a_leak_free_test_passes_the_marker(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    # The marker in this session, with the kernel loaded and launched once already (WARM_UP_KERNELS).
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(NAN32)
        vector_add.launch(grid_for(N), BLOCK, dc, da, db, N)
        assert_device_equal(dc, a + b)


def test_the_context_manager_names_the_object_and_the_line() -> None:
    kept: list[DeviceBuffer] = []
    with pytest.raises(AssertionError) as caught, LeakCheck(memory_tolerance=OBJECTS_ONLY):
        kept.append(DeviceBuffer(256, np.float32))
    message = str(caught.value)
    assert message.startswith("rawcuda leak check: 1 object(s) left open"), message
    assert "DeviceBuffer, 1024 bytes" in message
    if tracemalloc_places_objects():  # (relative to the working directory, or absolute)
        assert "allocated at " in message and "test_plugin.py:" in message, message
    kept[0].close()
    context_listed = r"1 object\(s\) left open\n  Context: <Context created"
    # (A huge tolerance: a new context's own memory is not the point here.)
    with pytest.raises(AssertionError, match=context_listed), LeakCheck(memory_tolerance=1 << 40):
        kept_context = Context.create()
    kept_context.close()


def test_a_capsule_dropped_unconsumed_is_no_leak() -> None:
    # The check turns the collector off, so only its own sweep (rawcuda.protocols.dlpack.sweep) ends these exports.
    with LeakCheck(memory_tolerance=OBJECTS_ONLY):
        closed = DeviceBuffer.zeros(N)
        capsule = closed.__dlpack__(stream=-1, max_version=(1, 0))
        del capsule
        closed.close()  # (close() sweeps)
        dropped = DeviceBuffer.zeros(N)
        capsule = dropped.__dlpack__(stream=-1)
        del capsule, dropped  # the export alone held the buffer; last, so that no later export sweeps it
    kept: list[DeviceBuffer] = []
    with pytest.raises(AssertionError, match=r"1 object\(s\) left open"), LeakCheck(memory_tolerance=OBJECTS_ONLY):
        kept.append(DeviceBuffer.zeros(N))  # a buffer really kept is still a leak
        capsule = kept[0].__dlpack__(stream=-1)
        del capsule
    kept[0].close()


def test_what_rawcuda_keeps_for_its_context_is_not_a_leak(rng: np.random.Generator) -> None:
    # A fresh context, so that rawcuda.ops loads its module for it inside the check.
    ctx = Context.create()
    try:
        a = rng.standard_normal(N).astype(np.float32)
        with (
            LeakCheck(ctx, memory_tolerance=OBJECTS_ONLY),  # entered first, left last: after the buffers close
            DeviceBuffer.from_array(a, ctx) as da,
            DeviceBuffer.empty(N, np.float32, ctx) as dc,
        ):
            dc.fill(NAN32)
            ops.vector_add(dc, da, da)
            assert_device_equal(dc, a + a)
        kept = [obj for obj in open_objects(include_internal=True) if obj in ctx.children]
        assert kept and all(isinstance(obj, Module) and obj.internal for obj in kept)
        assert not [obj for obj in open_objects() if obj in ctx.children]
    finally:
        ctx.close()


# --- assert_device_equal ----------------------------------------------------------------------------------------------
def test_assert_device_equal_reads_every_kind_of_buffer(rng: np.random.Generator) -> None:
    a = rng.standard_normal(N).astype(np.float32)
    with DeviceBuffer.from_array(a) as buf:
        assert_device_equal(buf, a)
        assert_device_equal(buf[10:20], a[10:20])  # a view
        assert_device_equal(buf.view(5, (7,)), a[5:12])
    with ManagedBuffer(N, np.float32) as managed:
        managed.copy_from(a)
        assert_device_equal(managed, a)
    with PinnedBuffer.from_array(a) as pinned, DeviceBuffer.from_array(a[::-1].copy()) as reversed_:
        reversed_.copy_to(pinned)  # the copy into pinned memory, then the read: in that order
        assert_device_equal(pinned, a[::-1])


def test_assert_device_equal_says_what_differs(rng: np.random.Generator) -> None:
    expected = rng.uniform(1, 2, 1000).astype(np.float32)
    wrong = expected.copy()
    wrong[17] += np.float32(0.5)
    wrong[901] = np.nan
    with DeviceBuffer.from_array(wrong) as buf:
        with pytest.raises(AssertionError) as caught:
            assert_device_equal(buf, expected, rtol=1e-6)
        lines = str(caught.value).splitlines()
        assert lines[0] == (
            "DeviceBuffer (1000,) float32 differs from the expected array: 2 of 1000 elements (0.2%) are not "
            "within atol=0 + rtol=1e-06 * |expected|"
        )
        err = float(abs(wrong[17] - expected[17]))
        assert lines[1].startswith(f"max abs error {err:.6g} at index (17,); max rel error ")
        assert lines[2:] == [
            "first mismatches (index: got, expected, abs error):",
            f"  (17,): {wrong[17]!s}, {expected[17]!s}, {err:.6g}",
            f"  (901,): nan, {expected[901]!s}, nan",
        ]
        with pytest.raises(AssertionError, match=r"^shape mismatch: the DeviceBuffer \(1000,\) float32 has shape"):
            assert_device_equal(buf, expected[:999])
        with pytest.raises(AssertionError, match=r"^dtype mismatch: the DeviceBuffer \(1000,\) float32 holds float32"):
            assert_device_equal(buf, wrong.astype(np.float64))
