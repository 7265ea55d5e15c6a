"""Tool: ``python -m rawcuda doctor`` -- what this machine offers CUDA, and what to fix.

Each check is independent and never crashes the report: a machine without a driver still gets a full
report, with the missing driver as its first problem and the fix beside it. The exit status is 0 when
nothing is a problem, 1 otherwise (warnings do not count).
"""

from __future__ import annotations

import multiprocessing
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rawcuda.core.device import Device
from rawcuda.core.module import max_ptx_isa

from .. import __version__, checked, kernels
from ..checked.errors import CudaError, DriverNotFoundError, StubLibraryError
from ..ffi.attributes import DeviceAttribute
from .nvcc import KernelBuildError, probe

OK, WARN, PROBLEM = "ok", "warning", "PROBLEM"
GIB = 1 << 30


@dataclass
class Finding:
    status: str  # OK, WARN or PROBLEM
    topic: str
    detail: str
    fix: str = ""


def _versions() -> list[Finding]:
    return [
        Finding(
            OK,
            "rawcuda",
            f"{__version__} (Python {platform.python_version()}, numpy {np.__version__}, "
            f"{platform.system()} {platform.machine()})",
        )
    ]


def _driver() -> list[Finding]:
    try:
        driver = checked.cu.library()
    except DriverNotFoundError as exc:
        tried = "; ".join(f"{name}: {why}" for name, why in exc.tried)
        return [
            Finding(
                PROBLEM,
                "libcuda",
                f"not found (tried {tried})",
                "install the NVIDIA driver (nvidia-smi should work), or set RAWCUDA_LIBCUDA to the full "
                "path of libcuda.so.1",
            )
        ]
    findings = [Finding(OK, "libcuda", f"{driver.path} (opened as {driver.requested!r})")]
    try:
        checked.init()
    except StubLibraryError:
        findings.append(
            Finding(
                PROBLEM,
                "libcuda",
                "this is the CUDA toolkit's stub library, not a driver",
                "point RAWCUDA_LIBCUDA at the real libcuda.so.1 (`ldconfig -p | grep libcuda`) and "
                "take the toolkit's lib64/stubs directory out of LD_LIBRARY_PATH",
            )
        )
        return findings
    except CudaError as exc:
        hint = exc.hint or "see the error above"
        findings.append(Finding(PROBLEM, "cuInit", str(exc).splitlines()[0], hint))
        return findings
    major, minor = checked.driver_version()
    findings.append(Finding(OK, "driver", f"supports CUDA {major}.{minor}"))
    findings += _ptx_versions((major, minor))
    return findings


def _ptx_versions(driver: tuple[int, int]) -> list[Finding]:
    try:
        manifest = kernels.load_manifest()
    except FileNotFoundError as exc:
        return [Finding(WARN, "shipped PTX", str(exc), "run `python build.py` in the source tree")]
    shipped = max(tuple(int(p) for p in record["ptx_version"].split(".")) for record in manifest["kernels"].values())
    newest = max_ptx_isa(driver)
    text = f"shipped kernels need PTX ISA {shipped[0]}.{shipped[1]}"
    if newest is None:
        return [Finding(OK, "PTX ISA", f"{text}; this driver is newer than rawcuda's table and should accept it")]
    if shipped > newest:
        return [
            Finding(
                PROBLEM,
                "PTX ISA",
                f"{text}, but this driver accepts up to {newest[0]}.{newest[1]}",
                "update the NVIDIA driver, or rebuild the kernels with an nvcc no newer than the driver "
                "(python build.py --force)",
            )
        ]
    return [Finding(OK, "PTX ISA", f"{text}; the driver accepts up to {newest[0]}.{newest[1]}")]


def _devices() -> list[Finding]:
    if not checked.initialized():
        return []
    count = Device.count()
    if count == 0:
        return [
            Finding(
                PROBLEM,
                "devices",
                "the driver sees no GPU",
                "check nvidia-smi and CUDA_VISIBLE_DEVICES; a container needs GPU access (--gpus all)",
            )
        ]
    findings = []
    for dev in Device.all():
        major, minor = dev.compute_capability
        managed = dev.attribute(DeviceAttribute.CONCURRENT_MANAGED_ACCESS)
        vmm = dev.attribute(DeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        findings.append(
            Finding(
                OK,
                f"device {dev.ordinal}",
                f"{dev.name}, compute capability {major}.{minor}, {dev.multiprocessor_count} SMs, "
                f"{dev.total_memory / GIB:.1f} GiB, concurrent managed access: {bool(managed)}, "
                f"virtual memory management: {bool(vmm)}",
            )
        )
        if not managed:
            findings.append(
                Finding(
                    WARN,
                    f"device {dev.ordinal}",
                    "no concurrent managed access: the host must not touch managed memory while kernels run",
                    "synchronize before reading ManagedBuffer.array (rawcuda does this for you)",
                )
            )
    return findings


def _compilers() -> list[Finding]:
    try:
        compiler = probe()
        findings = [Finding(OK, "nvcc", f"{compiler.path} ({compiler.release})")]
    except KernelBuildError:
        findings = [
            Finding(
                WARN,
                "nvcc",
                "not found: the shipped PTX is used; kernels cannot be rebuilt",
                "install the CUDA toolkit or set NVCC_PATH to rebuild kernels (python build.py)",
            )
        ]
    header = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include", "cuda.h")
    if os.path.exists(header):
        findings.append(Finding(OK, "cuda.h", f"{header} (python -m rawcuda.tools.headercheck proves the table)"))
    else:
        findings.append(
            Finding(
                WARN, "cuda.h", f"not at {header}: the table cannot be checked here", "set CUDA_HOME to a CUDA toolkit"
            )
        )
    return findings


def _multiprocessing() -> list[Finding]:
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
    if method == "fork":
        return [
            Finding(
                WARN,
                "multiprocessing",
                "the start method is 'fork': a forked child cannot use CUDA once the parent has initialized it",
                "call multiprocessing.set_start_method('spawn') (or 'forkserver') before starting workers",
            )
        ]
    return [Finding(OK, "multiprocessing", f"start method {method!r}")]


CHECKS: list[Callable[[], list[Finding]]] = [_versions, _driver, _devices, _compilers, _multiprocessing]


def run_checks() -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            findings += check()
        except Exception as exc:  # the report must finish whatever one check hits
            findings.append(Finding(PROBLEM, check.__name__.strip("_"), f"{type(exc).__name__}: {exc}"))
    return findings


def main() -> int:
    findings = run_checks()
    width = max(len(f.topic) for f in findings)
    for f in findings:
        print(f"[{f.status:^7}] {f.topic:<{width}}  {f.detail}")
        if f.fix:
            print(f"{'':9}  {'':<{width}}  fix: {f.fix}")
    problems = sum(f.status == PROBLEM for f in findings)
    print(f"\n{problems} problem(s)" if problems else "\nno problems found")
    return 1 if problems else 0
