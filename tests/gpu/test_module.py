"""Module on a real GPU: loading PTX from a path, text or bytes, and a cubin; the load errors, with their fixes.

A missing kernel lists the module's entries and spots C++ name mangling; PTX newer than the driver names
both versions and the fixes; invalid PTX carries the JIT's log in the message.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import rawcuda
from rawcuda import Device, Module
from rawcuda.ffi.attributes import FunctionAttribute
from tests.helpers import BLOCK, ROOT, run_vector_add

pytestmark = pytest.mark.gpu


def test_module_sources_and_attributes(vector_add: rawcuda.Function) -> None:
    path = rawcuda.kernels.ptx_path("vector_add")
    for source in (path, str(path), path.read_bytes(), path.read_text()):
        m = Module(source)
        assert m.kind == "ptx" and m.entry_names() == ["vector_add"]
        m.close()
    assert 0 < vector_add.num_regs < 256 and 0 < vector_add.max_threads_per_block <= 1024
    assert vector_add.attribute(FunctionAttribute.PTX_VERSION) > 0
    assert vector_add.max_active_blocks_per_sm(BLOCK) >= 1


def test_missing_kernel_lists_entries_and_spots_mangling() -> None:
    text = rawcuda.kernels.ptx_path("vector_add").read_text().replace("vector_add", "_Z10vector_addPfPKfS1_m")
    m = Module(text, name="mangled.ptx")
    with pytest.raises(rawcuda.NotFoundError) as info:
        m.function("vector_add")
    msg = str(info.value)
    assert "kernels in mangled.ptx: _Z10vector_addPfPKfS1_m" in msg and 'extern "C"' in msg
    assert info.value.entries == ["_Z10vector_addPfPKfS1_m"]
    assert m.function("_Z10vector_addPfPKfS1_m").name == "_Z10vector_addPfPKfS1_m"
    m.close()


def test_ptx_newer_than_the_driver_is_refused_with_both_versions_and_fixes() -> None:
    text = rawcuda.kernels.ptx_path("vector_add").read_text()
    newer = text.replace(".version 9.0", ".version 9.9")
    with pytest.raises(rawcuda.ModuleLoadError) as info:
        Module(newer)
    err = info.value
    assert err.code == 222 and ".version 9.9" in str(err) and "Fix 1" in str(err) and "Fix 2" in str(err)


def test_invalid_ptx_carries_the_jit_log() -> None:
    bad = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken()\n{\n  bogus.instruction;\n}\n"
    with pytest.raises(rawcuda.ModuleLoadError) as info:
        Module(bad)
    assert "JIT error log" in str(info.value) and info.value.code == rawcuda.Result.ERROR_INVALID_PTX
    log_lines = info.value.jit_log.splitlines()
    assert log_lines and all(line in str(info.value) for line in log_lines)  # the log is in the message


def test_cubin_parameters_come_from_the_driver(tmp_path: Path, rng: np.random.Generator, nvcc: str) -> None:
    major, minor = Device(0).compute_capability
    cubin = tmp_path / "vector_add.cubin"
    source = ROOT / "kernels" / "vector_add.cu"
    subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", "-o", str(cubin), str(source)], check=True)
    m = Module(cubin)
    fn = m.function("vector_add")
    assert m.kind == "cubin" and [p.size for p in fn.params] == [8, 8, 8, 8]
    n = 5000
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_array_equal(run_vector_add(fn, a, b), a + b)
    m.close()
