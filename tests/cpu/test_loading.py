"""Finding libcuda, binding the table, and turning CUresults into exceptions -- without a GPU.

Each scenario runs in a fresh interpreter (the driver is opened once per process, as in real use).
Most use tests/fakecuda/fakecuda.c, a tiny libcuda look-alike with the real C signatures, so the
paths that matter most when something is wrong -- stub library, out of memory, unknown codes, missing
symbols -- are tested on every CI run, not only on a GPU host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rawcuda.checked.errors import DriverNotFoundError
from rawcuda.ffi import library
from tests.helpers import build_shared_library, run_python

FAKE_OOM_FREE = 1 << 30  # what the fake's cuMemGetInfo reports as free


def run_json(code: str, **env: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter and parse that line."""
    proc = run_python(code, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_never_touches_the_driver(fake_libcuda: Path) -> None:
    result = run_json(
        "import json, rawcuda, rawcuda.checked, rawcuda.ffi.cuda\n"
        "from rawcuda.ffi import library\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(json.dumps({'loaded': library.LIBCUDA.loaded() is not None, 'mapped': 'fakecuda' in maps}))",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert result == {"loaded": False, "mapped": False}


def test_candidates_follow_the_documented_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(library.LIBCUDA.env_var, raising=False)
    assert library.LIBCUDA.candidates() == ["libcuda.so.1", "libcuda.so", "/usr/lib/wsl/lib/libcuda.so.1"]
    monkeypatch.setenv(library.LIBCUDA.env_var, "/opt/driver/libcuda.so.1")
    assert library.LIBCUDA.candidates() == ["/opt/driver/libcuda.so.1"]  # an explicit choice is the only one


def test_driver_not_found_lists_every_candidate_and_why() -> None:
    with pytest.raises(library.LibraryNotFoundError) as info:  # layer 0 says what happened ...
        library.LIBCUDA.open_first(["/nonexistent/libcuda.so.1", "libdefinitely-not-cuda.so"])
    err = DriverNotFoundError.from_search(info.value)  # ... layer 1 says how to fix it
    assert isinstance(err, OSError) and err.tried == info.value.tried
    assert [name for name, _ in err.tried] == ["/nonexistent/libcuda.so.1", "libdefinitely-not-cuda.so"]
    text = str(err)
    assert "/nonexistent/libcuda.so.1: " in text and "No such file" in text
    assert "libdefinitely-not-cuda.so: " in text
    assert "RAWCUDA_LIBCUDA" in text and "install the NVIDIA driver" in text


def test_first_call_without_a_driver_raises_driver_not_found() -> None:
    proc = run_python(
        "import rawcuda\ntry:\n    rawcuda.init()\nexcept rawcuda.DriverNotFoundError as e:\n    print('RAISED', e)\n",
        RAWCUDA_LIBCUDA="/nonexistent/dir/libcuda.so.1",
    )
    assert "RAISED could not load the NVIDIA driver library" in proc.stdout
    assert "/nonexistent/dir/libcuda.so.1" in proc.stdout and "RAWCUDA_LIBCUDA is set" in proc.stdout


def test_stub_library_is_recognised_and_explained(fake_libcuda: Path) -> None:
    result = run_json(
        "import json, rawcuda\n"
        "try:\n    rawcuda.init()\n"
        "except rawcuda.StubLibraryError as e:\n"
        "    print(json.dumps({'code': e.code, 'name': e.name, 'call': e.call, 'text': str(e)}))\n",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
        FAKECUDA_MODE="stub",
    )
    assert result["code"] == 34 and result["name"] == "CUDA_ERROR_STUB_LIBRARY" and result["call"] == "cuInit"
    assert f"libcuda: {fake_libcuda}" in result["text"]
    assert "stub" in result["text"] and "RAWCUDA_LIBCUDA" in result["text"] and "libcuda.so.1" in result["text"]


def test_out_of_memory_reports_requested_and_available(fake_libcuda: Path) -> None:
    result = run_json(
        "import ctypes, json, rawcuda\n"
        "from rawcuda import cu\n"
        "ptr = ctypes.c_uint64()\n"
        "try:\n    cu.cuMemAlloc(ctypes.byref(ptr), 1 << 40)\n"
        "except rawcuda.OutOfMemoryError as e:\n"
        "    print(json.dumps({'req': e.requested, 'avail': e.available, 'memory': isinstance(e, MemoryError),\n"
        "                      'desc': e.description, 'text': str(e)}))\n",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert result["req"] == 1 << 40 and result["avail"] == FAKE_OOM_FREE and result["memory"] is True
    assert result["desc"] == "out of memory (fake driver)"  # taken from the driver's cuGetErrorString
    assert "requested 1.00 TiB (1099511627776 bytes)" in result["text"]
    assert "available: 1.00 GiB" in result["text"]
    assert "cuMemAlloc [cuMemAlloc_v2](dptr=&" in result["text"]


def test_table_binds_the_versioned_symbol_not_the_plain_name(fake_libcuda: Path) -> None:
    # The fake exports both: cuMemAlloc (the 32-bit ABI, always fails) and cuMemAlloc_v2 (works).
    result = run_json(
        "import ctypes, json\n"
        "from rawcuda import cu\n"
        "ptr = ctypes.c_uint64()\n"
        "cu.cuMemAlloc(ctypes.byref(ptr), 4096)\n"
        "print(json.dumps({'ptr': ptr.value, 'cached': cu.cuMemAlloc is cu.cuMemAlloc}))",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert result == {"ptr": 0x7F0000000000, "cached": True}


@pytest.mark.parametrize(
    ("code", "cls", "name", "builtin"),
    [
        (1, "InvalidValueError", "CUDA_ERROR_INVALID_VALUE", "ValueError"),
        (700, "KernelFaultError", "CUDA_ERROR_ILLEGAL_ADDRESS", "Exception"),
        (500, "NotFoundError", "CUDA_ERROR_NOT_FOUND", "LookupError"),
        (12345, "CudaError", "CUresult 12345", "Exception"),
    ],
)
def test_each_code_becomes_its_exception(fake_libcuda: Path, code: int, cls: str, name: str, builtin: str) -> None:
    result = run_json(
        "import json, rawcuda\n"
        "try:\n    rawcuda.cu.cuCtxSynchronize()\n"
        "except rawcuda.CudaError as e:\n"
        f"    print(json.dumps({{'cls': type(e).__name__, 'code': e.code, 'name': e.name, 'builtin': "
        f"isinstance(e, {builtin}), 'text': str(e)}}))\n",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
        FAKECUDA_SYNC_RESULT=str(code),
    )
    assert (result["cls"], result["code"], result["name"], result["builtin"]) == (cls, code, name, True)
    assert result["text"].startswith(f"cuCtxSynchronize() failed: {name} ({code})")
    if code == 700:
        assert "sticky" in result["text"]
    if code == 12345:
        assert "does not know" in result["text"]


def test_missing_symbol_names_the_function_the_symbol_and_the_fix(fake_libcuda: Path) -> None:
    proc = run_python(
        "import rawcuda\n"
        "try:\n    rawcuda.cu.cuCtxCreate\n"
        "except rawcuda.MissingSymbolError as e:\n    print('RAISED', e)\n",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert "RAISED cuCtxCreate:" in proc.stdout and "does not export cuCtxCreate_v4" in proc.stdout
    assert "Update the NVIDIA driver" in proc.stdout


def test_a_name_outside_the_table_is_an_attribute_error() -> None:
    from rawcuda.checked import cu

    with pytest.raises(AttributeError, match="not in rawcuda's declaration table"):
        cu.cuNoSuchFunction  # noqa: B018  (the attribute access is the test)


def test_resolved_path_names_the_real_file(fake_libcuda: Path) -> None:
    result = run_json(
        "import json\nfrom rawcuda.checked import cu\nd = cu.library()\n"
        "print(json.dumps({'path': d.path, 'requested': d.requested}))",
        RAWCUDA_LIBCUDA=str(fake_libcuda),
    )
    assert result == {"path": str(fake_libcuda.resolve()), "requested": str(fake_libcuda)}


def test_driver_version_decodes_major_minor(fake_libcuda: Path) -> None:
    result = run_json(
        "import json, rawcuda\nprint(json.dumps(rawcuda.driver_version()))", RAWCUDA_LIBCUDA=str(fake_libcuda)
    )
    assert result == [13, 0]


@pytest.mark.parametrize("other", ["libm.so.6", "fake_nvrtc_stand_in"])
def test_a_library_that_is_not_libcuda_is_not_taken_for_the_driver(other: str, tmp_path: Path) -> None:
    # RAWCUDA_LIBCUDA pointing at another library (libm, libcudart, a typo) used to open "successfully" and
    # then fail every call with MissingSymbolError and the advice to update the NVIDIA driver.
    if other == "fake_nvrtc_stand_in":
        source = tmp_path / "other.c"
        source.write_text("int nvrtcVersion(int *a, int *b) { *a = 1; *b = 0; return 0; }\n")
        other = str(build_shared_library(source, tmp_path / "libother.so", "a library that is not libcuda"))
    proc = run_python(
        "import rawcuda\ntry:\n    rawcuda.init()\nexcept rawcuda.DriverNotFoundError as e:\n    print('RAISED', e)\n",
        RAWCUDA_LIBCUDA=other,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{other}: not libcuda: it does not export cuInit" in proc.stdout, proc.stdout
    assert "RAWCUDA_LIBCUDA is set" in proc.stdout and "update the NVIDIA driver" not in proc.stdout


def test_a_namespace_copies_and_pickles_as_itself() -> None:
    # One namespace per table per process. copy.copy(cu) once recursed forever (__getattr__ asked for the
    # table of a half-built copy); now a copy, a deep copy or an unpickled cu is cu itself.
    import copy
    import pickle

    from rawcuda.checked import cu, nv

    for namespace in (cu, nv):
        assert copy.copy(namespace) is namespace and copy.deepcopy(namespace) is namespace
        assert pickle.loads(pickle.dumps(namespace)) is namespace
