"""What the GPU-only tutorials state about cuda.h and the driver, checked where it can be without a GPU.

A tutorial that needs a GPU skips here, so the helpers that compute what it prints are imported and run
directly, against the cuda.h of this machine when there is one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rawcuda.tools import cheader
from tests.cpu.test_tutorial_raw import load_tutorial

HEADER = Path(cheader.DEFAULT_HEADER)  # where the tutorials read cuda.h
needs_header = pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER}")


@needs_header
def test_05b_finds_every_function_that_takes_jit_options_by_value() -> None:
    """cuModuleLoadDataEx is not the only one: the linker and the library loaders take the same pairs."""
    tutorial = load_tutorial("05b_jit_error_log.py")
    takers, source = tutorial.jit_option_takers()
    assert source == str(HEADER)
    assert takers[0] == "cuModuleLoadDataEx" and len(takers) > 1
    assert {"cuLinkCreate", "cuLinkAddData", "cuLinkAddFile", "cuLibraryLoadData"} <= set(takers)
    assert set(tutorial.CUDA_13_JIT_OPTION_TAKERS) <= set(takers)  # the fallback list is the header's
