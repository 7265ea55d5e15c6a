"""NVRTC for real: compile CUDA C++ strings at run time, load the result, launch it, check against numpy.

Kernels are compiled with ``--fmad=false``: otherwise the compiler may fuse ``alpha * x + y`` into one
fused multiply-add (one rounding instead of numpy's two) and the last bit could differ. With it, every
element must equal numpy's exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

import rawcuda
from rawcuda import Device, DeviceBuffer, Module
from rawcuda.extras import nvrtc
from rawcuda.ffi.results import NvrtcResult
from tests.helpers import BLOCK, grid_for

pytestmark = pytest.mark.gpu

N = 100_003
EXACT = ("--fmad=false",)

TEMPLATED = r"""
template <typename T>
__global__ void scale_add(T *out, const T *x, const T *y, T alpha, size_t n) {
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = alpha * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def nvrtc_available() -> str:
    try:
        return nvrtc.library_path()
    except rawcuda.NvrtcNotFoundError as exc:
        pytest.skip(f"no libnvrtc: {str(exc).splitlines()[0]}")


@pytest.fixture(scope="module")
def templated(nvrtc_available: str) -> Iterator[tuple[nvrtc.CompileResult, Module]]:
    result = nvrtc.compile(
        TEMPLATED, name="scale_add.cu", options=EXACT, name_expressions=("scale_add<float>", "scale_add<double>")
    )
    module = Module(result.ptx, name="scale_add.cu")
    yield result, module
    module.close()


def test_version_and_library(nvrtc_available: str) -> None:
    assert os.path.exists(nvrtc_available)
    assert nvrtc.version() >= (12, 0)
    archs = nvrtc.supported_archs()
    assert archs == sorted(archs) and 80 in archs


def test_default_arch_is_the_devices(nvrtc_available: str) -> None:
    major, minor = Device(0).compute_capability
    capability = major * 10 + minor
    archs = nvrtc.supported_archs()
    expected = capability if capability in archs else max(a for a in archs if a <= capability)
    assert nvrtc.default_arch() == f"compute_{expected}"


@pytest.mark.parametrize(("expression", "dtype"), [("scale_add<float>", np.float32), ("scale_add<double>", np.float64)])
def test_templated_kernel_by_lowered_name(
    templated: tuple[nvrtc.CompileResult, Module], rng: np.random.Generator, expression: str, dtype: type
) -> None:
    result, module = templated
    lowered = result.lowered_names[expression]
    assert lowered.startswith("_Z") and "scale_add" in lowered  # the C++ mangled symbol
    assert lowered.encode() in result.ptx and not result.ptx.endswith(b"\0")
    assert result.options[0].startswith("-arch=compute_") and result.cubin is None
    x, y = rng.standard_normal(N).astype(dtype), rng.standard_normal(N).astype(dtype)
    alpha = dtype(rng.standard_normal())
    dx, dy, dout = DeviceBuffer.from_array(x), DeviceBuffer.from_array(y), DeviceBuffer.empty(N, dtype)
    dout.fill(dtype(np.nan))  # poison: a kernel that writes nothing cannot pass
    module.function(lowered).launch(grid_for(N), BLOCK, dout, dx, dy, alpha, N)
    np.testing.assert_array_equal(dout.to_array(), alpha * x + y)
    for buf in (dx, dy, dout):
        buf.close()


def test_source_generated_at_run_time(nvrtc_available: str, rng: np.random.Generator) -> None:
    # Coefficients known only now become literals in the kernel: the point of compiling at run time.
    coefficients = [float(c) for c in rng.integers(-9, 10, size=4)]
    terms = " + ".join(f"({c!r}f * p{k})" for k, c in enumerate(coefficients))
    powers = "".join(f"    float p{k} = p{k - 1} * v;\n" for k in range(1, len(coefficients)))
    source = (
        f'extern "C" __global__ void poly(float *out, const float *x, size_t n) {{\n'
        f"  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;\n"
        f"  if (i < n) {{\n    float v = x[i];\n    float p0 = 1.0f;\n{powers}    out[i] = {terms};\n  }}\n}}\n"
    )
    result = nvrtc.compile(source, name="poly.cu", options=EXACT)
    module = result.load()
    x = rng.standard_normal(N, dtype=np.float32)
    dx, dout = DeviceBuffer.from_array(x), DeviceBuffer.empty(N)
    dout.fill(np.float32(np.nan))
    module.function("poly").launch(grid_for(N), BLOCK, dout, dx, N)
    powers_host = [np.ones_like(x)]
    for _ in range(1, len(coefficients)):
        powers_host.append(powers_host[-1] * x)
    expected = np.zeros_like(x)
    for c, p in zip(coefficients, powers_host, strict=True):
        expected = expected + np.float32(c) * p  # the same order of float32 operations as the kernel
    np.testing.assert_array_equal(dout.to_array(), expected)
    for obj in (dx, dout, module):
        obj.close()


def test_headers_from_strings_and_a_cubin(nvrtc_available: str, rng: np.random.Generator) -> None:
    major, minor = Device(0).compute_capability
    source = (
        '#include "consts.h"\nextern "C" __global__ void times(int *out, const int *x, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = x[i] * FACTOR;\n}\n"
    )
    result = nvrtc.compile(
        source, name="times.cu", options=(f"-arch=sm_{major}{minor}",), headers={"consts.h": "#define FACTOR 7\n"}
    )
    assert result.cubin is not None and result.cubin.startswith(b"\x7fELF") and result.image is result.cubin
    module = result.load()
    assert module.kind == "cubin"
    x = rng.integers(-1000, 1000, N, dtype=np.int32)
    dx, dout = DeviceBuffer.from_array(x), DeviceBuffer.empty(N, np.int32)
    dout.fill(np.int32(-1))
    module.function("times").launch(grid_for(N), BLOCK, dout, dx, np.int32(N))
    np.testing.assert_array_equal(dout.to_array(), x * 7)
    for obj in (dx, dout, module):
        obj.close()


def test_compile_error_carries_the_log(nvrtc_available: str) -> None:
    source = "__global__ void broken(float *out) {\n  out[0] = undefined_thing;\n}\n"
    with pytest.raises(rawcuda.NvrtcError) as info:
        nvrtc.compile(source, name="broken.cu")
    err = info.value
    assert err.code == NvrtcResult.ERROR_COMPILATION and err.call == "nvrtcCompileProgram"
    assert "broken.cu(2)" in err.log and "undefined_thing" in err.log and "error" in err.log
    assert "compile log:" in str(err) and "program: broken.cu" in str(err)


def test_bad_option_is_refused(nvrtc_available: str) -> None:
    with pytest.raises(rawcuda.NvrtcError) as info:
        nvrtc.compile("__global__ void k() {}", options=("--definitely-not-an-option",))
    assert info.value.code == NvrtcResult.ERROR_INVALID_OPTION
    assert "--definitely-not-an-option" in str(info.value)


def test_invalid_name_expression_is_reported(nvrtc_available: str) -> None:
    with pytest.raises(rawcuda.NvrtcError) as info:
        nvrtc.compile(TEMPLATED, options=EXACT, name_expressions=("no_such_kernel<float>",))
    # NVRTC reports it while compiling (an error in the log) or when asked for the lowered name.
    assert info.value.code in (NvrtcResult.ERROR_COMPILATION, NvrtcResult.ERROR_NAME_EXPRESSION_NOT_VALID)
    assert "no_such_kernel" in str(info.value)
