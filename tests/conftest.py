"""Shared test machinery: which tests are `gpu` tests, and the fixtures more than one test file uses.

tests/cpu/ holds the tests that need no GPU; tests/gpu/ the ones that do. The folder is the marker: every
test collected from tests/gpu/ is marked ``gpu`` here (an explicit ``@pytest.mark.gpu`` as well is harmless),
so ``-m gpu`` and ``-m "not gpu"`` select by folder. What the marker *does* is rawcuda's pytest plugin's
(rawcuda/testing/plugin.py, loaded below -- the same one users get): on a machine without a usable driver
and GPU, gpu-marked tests are skipped, and the skip reason is the first line of the error rawcuda itself
raised (so ``pytest -rs`` shows *why*). The plugin's fixtures (``cuda_context``, ``cuda_stream``, ...) and
its ``no_leaks`` marker are there for these tests too. Helpers that are not fixtures are in
tests/helpers.py; tests/cpu/test_layout.py checks that every test file sits in one of the two folders and
carries the marker its folder says.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.helpers import GPU_DIR, TESTS_DIR, build_shared_library

if TYPE_CHECKING:  # rawcuda is imported where a fixture needs it, so that a broken rawcuda fails tests, not this
    from rawcuda import Function, Stream

FAKE_SOURCE = TESTS_DIR / "fakecuda" / "fakecuda.c"

# The plugin, by the name its entry point has: where rawcuda is installed (CI: pip install -e .) pytest has
# loaded it already under this name, and this finds it there instead of registering it twice.
pytest_plugins = ["rawcuda.testing.plugin"]


@functools.cache
def in_gpu_dir(path: Path) -> bool:
    return path.resolve().is_relative_to(GPU_DIR)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects, and before the plugin skips what is marked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if in_gpu_dir(item.path):
            item.add_marker(pytest.mark.gpu)


# --- without a GPU ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fakecuda/fakecuda.c built as a shared library (skips when there is no C compiler)."""
    out = tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so"
    return build_shared_library(FAKE_SOURCE, out, "the fake libcuda")


@pytest.fixture(scope="module")
def nvcc() -> str:
    """The nvcc that rawcuda.tools.nvcc finds (skips the tests that compile when there is none)."""
    from rawcuda.tools import nvcc as nvcc_tool

    try:
        return nvcc_tool.find_nvcc()
    except nvcc_tool.KernelBuildError as exc:
        pytest.skip(f"nvcc is not available, so nothing can be compiled: {str(exc).splitlines()[0]}")


# --- on the GPU ---------------------------------------------------------------------------------------------------
@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


@pytest.fixture
def stream() -> Iterator[Stream]:
    """A fresh rawcuda.Stream on the default context, closed after the test."""
    from rawcuda import Stream

    s = Stream()
    yield s
    s.close()


@pytest.fixture(scope="module")
def vector_add(request: pytest.FixtureRequest) -> Function:
    """kernels/vector_add as a rawcuda.Function, loaded once per test module.

    A module that sets ``WARM_UP_KERNELS = True`` gets it launched once first, outside any capture: a first
    launch may load the kernel (lazy loading), and loading is not work a capture can record. The launch has
    n = 0 (every parameter zero), so it does nothing.
    """
    from rawcuda import Module, kernels, ops

    fn = Module(kernels.ptx_path("vector_add")).function("vector_add")
    if getattr(request.module, "WARM_UP_KERNELS", False):
        fn.launch(1, ops.BLOCK, *[0] * len(fn.params))
        fn.context.synchronize()
    return fn


@pytest.fixture(scope="module")
def spin() -> Function:
    """kernels/spin as a rawcuda.Function -- ``spin.launch(1, 1, ns)`` keeps a stream busy for ``ns``
    nanoseconds -- loaded and launched once first (lazy loading: not inside a delay or a timed run). The
    module is not closed at the end: a test may leave a spin running, and the context closes it at exit."""
    from rawcuda import Module, kernels

    fn = Module(kernels.ptx_path("spin")).function("spin")
    fn.launch(1, 1, 0)
    fn.context.synchronize()
    return fn
