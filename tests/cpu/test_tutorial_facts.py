"""What the GPU-only tutorials state about cuda.h, the driver and rawcuda's messages, checked without a GPU.

A tutorial that needs a GPU skips here, so the helpers that compute what it prints are imported and run
directly, against the cuda.h of this machine when there is one, and the messages it shows are built the
way rawcuda builds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rawcuda.checked.errors import ModuleLoadError
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.results import Result
from rawcuda.tools import cheader
from tests.cpu.test_tutorial_raw import load_tutorial
from tests.helpers import ROOT

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


MPS_CODES = range(805, 811)  # CUDA_ERROR_MPS_CONNECTION_FAILED .. CUDA_ERROR_MPS_CLIENT_TERMINATED
MPS_TEXTS = ("tutorials/13_growable_buffer.py", "tutorials/README.md", "docs/cust_mapping.md")


@needs_header
def test_the_mps_api_the_docs_name_is_in_cuda_h() -> None:
    """MPS is a daemon, and also driver API: an attribute, SM-count execution affinity, six error codes."""
    header = cheader.parse(str(HEADER))
    assert header.enumerators["CU_DEVICE_ATTRIBUTE_MPS_ENABLED"] == DeviceAttribute.MPS_ENABLED
    assert "CU_EXEC_AFFINITY_TYPE_SM_COUNT" in header.enumerators
    assert {"cuCtxGetExecAffinity", "cuDeviceGetExecAffinitySupport"} <= set(header.prototypes)
    assert (
        header.symbol_for("cuCtxCreate") == "cuCtxCreate_v4"
        and "CUctxCreateParams *ctxCreateParams" in (header.prototypes["cuCtxCreate"])
    )
    assert "CUexecAffinityParam *execAffinityParams;" in HEADER.read_text()  # a field of CUctxCreateParams
    mps_codes = {value for name, value in header.enumerators.items() if name.startswith("CUDA_ERROR_MPS_")}
    assert mps_codes == set(MPS_CODES) == {code for code in MPS_CODES if Result(code).name.startswith("ERROR_MPS")}
    for text in MPS_TEXTS:
        said = " ".join((ROOT / text).read_text(encoding="utf-8").split())
        assert "CU_DEVICE_ATTRIBUTE_MPS_ENABLED" in said and "cuCtxGetExecAffinity" in said, text
        assert "no binding wraps" not in said and "not an API" not in said, text


def test_the_invalid_ptx_hint_points_up_at_the_log_printed_above_it() -> None:
    """05b prints a ModuleLoadError: the JIT's log is one of its details, and the hint comes after them."""
    log = "ptxas application ptx input, line 26; error   : Unknown symbol '%f3'"
    error = ModuleLoadError(Result.ERROR_INVALID_PTX, call="cuModuleLoadDataEx").with_details(
        ["module: broken.ptx (ptx)", f"JIT error log:\n    {log}"]
    )
    message = str(error)
    hint = next(line for line in message.splitlines() if line.strip().startswith("hint:"))
    assert message.index(log) < message.index(hint), message
    assert "log above" in hint and "below" not in hint, hint
