"""Testing: rawcuda's pytest plugin -- GPU tests that skip with the reason, CUDA fixtures, a leak check.

Installed with rawcuda, it is loaded in every pytest session through its entry point (pyproject.toml,
``[project.entry-points.pytest11]``); from a source checkout, ``-p rawcuda.testing.plugin`` loads it (the
entry point has that same name, so loading it both ways registers it once; ``-p no:rawcuda.testing.plugin``
turns it off). Loading it costs an import of rawcuda's front door: no driver, no numpy, no tables.

Markers:

``@pytest.mark.gpu``
    The test needs a usable driver and a GPU. Where there is none, it is skipped, and the reason is the
    first line of the error rawcuda raised (``pytest -rs`` shows it: no libcuda, the stub library, no device).
    The driver is asked once, at collection, and only if a selected test needs it.
``@pytest.mark.no_leaks`` / ``@pytest.mark.no_leaks(memory_tolerance=N)``
    The test fails if it leaves a rawcuda object open, or the device's free memory falls by more than N bytes
    (default 8 MiB), measured around the test's body with the cyclic garbage collector off
    (:mod:`rawcuda.testing.leaks` explains both measures). Implies ``gpu``.

Fixtures (each skips without a GPU, as ``gpu`` does):

``cuda_context``
    Device 0's primary context -- the one ``context=None`` means, so the test's own objects and the fixture's
    mix freely. One per process, not one per test: creating a context costs far more than most tests, and a
    fresh one would free what a test leaked instead of showing it. After each test it is synchronized, so
    an error of work the test queued (a kernel fault) fails *that* test's teardown, not a later test.
``cuda_device``
    ``cuda_context.device``.
``cuda_stream``
    A fresh NON_BLOCKING stream in ``cuda_context``, synchronized and closed after the test.
``cuda_leak_check``
    The :class:`~rawcuda.testing.leaks.LeakCheck` of this test: requesting it turns the check on, as
    ``no_leaks`` does; the test may call ``cuda_leak_check.ignore(obj)`` for what it keeps on purpose.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

import rawcuda
import rawcuda.testing

if TYPE_CHECKING:
    from rawcuda import Context, Device, Stream
    from rawcuda.testing.leaks import LeakCheck

GPU_MARKER = "gpu"
LEAK_MARKER = "no_leaks"
LEAK_FIXTURE = "cuda_leak_check"
_LEAK_OPTIONS = ("memory_tolerance",)  # what no_leaks(...) accepts
_check_key: pytest.StashKey[LeakCheck] = pytest.StashKey()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{GPU_MARKER}: needs a usable NVIDIA driver and a GPU; skipped otherwise, with rawcuda's reason (plugin "
        "rawcuda.testing.plugin)",
    )
    config.addinivalue_line(
        "markers",
        f"{LEAK_MARKER}(memory_tolerance=bytes): fail if the test leaves rawcuda objects open or device memory "
        "allocated (implies gpu; plugin rawcuda.testing.plugin)",
    )


@pytest.hookimpl(trylast=True)  # after other plugins and conftests added their markers, after `-m` selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker(LEAK_MARKER) is not None:
            _leak_check(item)  # a bad no_leaks(...) stops the session now, naming the test
    needing = [item for item in items if needs_gpu(item)]
    if not needing:
        return  # no driver call in a session that needs none
    reason = rawcuda.testing.gpu_unavailable_reason()
    if reason:
        for item in needing:
            item.add_marker(pytest.mark.skip(reason=reason))


def needs_gpu(item: pytest.Item) -> bool:
    """True for a test marked ``gpu`` or ``no_leaks``."""
    return any(item.get_closest_marker(name) is not None for name in (GPU_MARKER, LEAK_MARKER))


def skip_without_gpu() -> None:
    """Skip the calling test (or fixture) with the reason, where there is no usable GPU."""
    reason = rawcuda.testing.gpu_unavailable_reason()
    if reason:
        pytest.skip(reason)


# --- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture
def cuda_context() -> Iterator[Context]:
    """Device 0's primary context (the default context), synchronized after the test."""
    skip_without_gpu()
    context: Context = rawcuda.default_context()
    yield context
    if context.usable:
        context.synchronize()  # the test's queued work fails here, in its own teardown


@pytest.fixture
def cuda_device(cuda_context: Context) -> Device:
    """The device of ``cuda_context``."""
    return cuda_context.device


@pytest.fixture
def cuda_stream(cuda_context: Context) -> Iterator[Stream]:
    """A fresh NON_BLOCKING stream, synchronized and closed after the test."""
    stream: Stream = rawcuda.Stream(cuda_context, flags=rawcuda.StreamFlag.NON_BLOCKING)
    try:
        yield stream
        if not stream.closed and cuda_context.usable:
            stream.synchronize()
    finally:
        stream.close()


@pytest.fixture
def cuda_leak_check(request: pytest.FixtureRequest) -> LeakCheck:
    """This test's leak check (requesting the fixture turns it on); it runs around the test's body."""
    skip_without_gpu()
    return _leak_check(request.node)


# --- the leak check around the body of a test -------------------------------------------------------------------
def _leak_check(item: pytest.Item) -> LeakCheck:
    """The item's LeakCheck, made once, with the options of its ``no_leaks`` marker."""
    check = item.stash.get(_check_key, None)
    if check is None:
        marker = item.get_closest_marker(LEAK_MARKER)
        options: dict[str, Any] = {} if marker is None else dict(marker.kwargs)
        unknown = sorted(set(options) - set(_LEAK_OPTIONS))
        if marker is not None and marker.args:
            unknown.append("positional arguments")
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.{LEAK_MARKER} takes only memory_tolerance=<bytes>, "
                f"not {', '.join(unknown)}"
            )
        try:
            check = rawcuda.testing.LeakCheck(**options)
        except ValueError as exc:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{LEAK_MARKER}: {exc}") from None
        item.stash[_check_key] = check
    return check


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """Measure after the fixtures are set up, run the body, measure again before they are torn down."""
    wanted = item.get_closest_marker(LEAK_MARKER) is not None or LEAK_FIXTURE in getattr(item, "fixturenames", ())
    if not wanted:
        yield
        return
    check = _leak_check(item)
    check.start()
    outcome = yield
    try:
        report = check.stop()  # always: it turns the garbage collector back on
    except Exception as exc:  # e.g. a kernel fault surfacing at the check's synchronize: the test failed
        if outcome.excinfo is None:
            _fail(outcome, exc)
        return
    if outcome.excinfo is not None or not report:
        return  # a failing test's traceback holds its objects: its own error is the news
    # pytest.fail's exception without a traceback: the message is the whole story (the frames would be pluggy's).
    _fail(outcome, pytest.fail.Exception(report.message, pytrace=False))


def _fail(outcome: Any, error: BaseException) -> None:
    """Make the test's call phase end with ``error``."""
    force = getattr(outcome, "force_exception", None)  # pluggy >= 1.1; raising here is what older ones expect
    if force is None:
        raise error
    force(error)


__all__ = ["GPU_MARKER", "LEAK_FIXTURE", "LEAK_MARKER", "needs_gpu", "skip_without_gpu"]
