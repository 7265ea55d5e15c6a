"""Argument packing on the GPU: every scalar width and a by-value struct arrive byte for byte.

tests/kernels/args.cu is compiled with nvcc at test time (skipped without nvcc), to PTX (packing from
the `.entry` signature, including `.param .align 8 .b8 p[16]`) and to a fatbin (sizes only, from
cuFuncGetParamInfo).
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rawcuda import ArgumentError, Device, DeviceBuffer, Module
from tests.helpers import TESTS_DIR

pytestmark = pytest.mark.gpu
SOURCE = TESTS_DIR / "kernels" / "args.cu"
N = 1000
BLOCK = 128


class Affine(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_double), ("offset", ctypes.c_int32)]  # 16 bytes with tail padding


AFFINE_DTYPE = np.dtype({"names": ["scale", "offset"], "formats": [np.float64, np.int32], "itemsize": 16})


def compile_kernels(tmp: Path, kind: str, nvcc: str) -> Path:
    major, minor = Device(0).compute_capability
    out = tmp / f"args.{kind}"
    flags = ["--ptx", "-arch=compute_80"] if kind == "ptx" else ["-fatbin", f"-arch=sm_{major}{minor}"]
    subprocess.run([nvcc, *flags, "-o", str(out), str(SOURCE)], check=True)
    return out


@pytest.fixture(scope="module")
def ptx_module(tmp_path_factory: pytest.TempPathFactory, nvcc: str) -> Module:
    return Module(compile_kernels(tmp_path_factory.mktemp("args"), "ptx", nvcc))


@pytest.mark.parametrize("how", ["ctypes", "bytes", "numpy"])
def test_struct_by_value(ptx_module: Module, how: str) -> None:
    fn = ptx_module.function("affine")
    assert [p.size for p in fn.params] == [8, 8, 16, 8]
    rng = np.random.default_rng()
    x = rng.standard_normal(N, dtype=np.float32)
    scale, offset = float(rng.uniform(1, 3)), int(rng.integers(-100, 100))
    value = Affine(scale, offset)
    arg = {"ctypes": value, "bytes": bytes(value), "numpy": np.array((scale, offset), AFFINE_DTYPE)}[how]
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(N) as out:
        out.fill(np.float32(np.nan))
        fn.launch((N + BLOCK - 1) // BLOCK, BLOCK, out, dx, arg, N)
        expected = (x.astype(np.float64) * scale + offset).astype(np.float32)
        np.testing.assert_array_equal(out.to_array(), expected)


def test_struct_of_the_wrong_size_is_refused(ptx_module: Module) -> None:
    fn = ptx_module.function("affine")
    with DeviceBuffer.zeros(4) as buf, pytest.raises(ArgumentError, match="12 bytes given"):
        fn.launch(1, 1, buf, buf, b"\0" * 12, 4)


def test_every_scalar_width(ptx_module: Module) -> None:
    fn = ptx_module.function("widths")
    # int64_t d is `.param .u64` (nvcc writes .u64 for every 64-bit integer and pointer), where a negative
    # Python int is refused as a size gone below zero: a signed 64-bit value says so with np.int64.
    values = (-5, 65000, -123456789, np.int64(-(1 << 40) - 7), 1.5, 2.0**-30, 250)
    with DeviceBuffer.empty(7, np.float64) as out:
        out.fill(np.nan)
        fn.launch(1, 1, out, *values)
        np.testing.assert_array_equal(out.to_array(), np.array(values, np.float64))
        fn.launch(
            1,
            1,
            out,
            np.int8(-5),
            np.uint16(65000),
            np.int32(-7),
            np.int64(9),
            np.float32(0.25),
            np.float64(0.125),
            np.uint8(3),
        )
        np.testing.assert_array_equal(out.to_array(), [-5, 65000, -7, 9, 0.25, 0.125, 3])


@pytest.mark.parametrize(
    ("index", "bad", "match"),
    [
        (1, 300, "does not fit"),  # int8 parameter
        (2, np.int32(1), "wrong width"),  # uint16 parameter given 4 bytes
        (3, 1 << 40, "does not fit"),  # int32 parameter
        (4, 1.5, "a float"),  # int64 parameter
        (4, -7, r"pass np\.int64\(-7\)"),  # int64 parameter (.u64): a negative Python int reads as a bad size
        (5, np.float64(1.0), "wrong width"),  # float parameter given a double
        (6, np.int64(1), "numpy integer"),  # double parameter given an integer
    ],
)
def test_wrong_widths_are_refused(ptx_module: Module, index: int, bad: object, match: str) -> None:
    fn = ptx_module.function("widths")
    args: list[object] = [0, 0, 0, 0, 0.0, 0.0, 0]
    args[index - 1] = bad
    with DeviceBuffer.zeros(7, np.float64) as out, pytest.raises(ArgumentError, match=match):
        fn.launch(1, 1, out, *args)


def test_fatbin_parameters_come_from_the_driver(tmp_path: Path, nvcc: str) -> None:
    module = Module(compile_kernels(tmp_path, "fatbin", nvcc))
    assert module.kind == "fatbin" and sorted(module.entry_names()) == ["affine", "widths"]
    fn = module.function("affine")
    assert [p.size for p in fn.params] == [8, 8, 16, 8]
    x = np.arange(N, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(N) as out:
        out.fill(np.float32(np.nan))
        fn.launch((N + BLOCK - 1) // BLOCK, BLOCK, out, dx, Affine(2.0, 1), np.uint64(N))
        np.testing.assert_array_equal(out.to_array(), x * 2 + 1)
    widths = module.function("widths")
    with DeviceBuffer.zeros(7, np.float64) as out, pytest.raises(ArgumentError, match="ambiguous"):
        widths.launch(1, 1, out, 1, 2, 3, 4, 5.0, 6.0, 7)  # a cubin has no types: say np.int32(...) etc.
    module.close()
