"""What a twin made by ``Function.options`` shares with its kernel, and what no launch leaves behind.

A twin is a Function of the same CUfunction: the driver's dynamic shared-memory opt-in is one per CUfunction, so
a twin asking for less must not lower what its base already validated (on the H200 the base's next launch was
refused with CUDA_ERROR_INVALID_VALUE). And launch configurations and argument packs are made without reference
cycles: with the cyclic GC off (``gc.disable()``), each would have stayed in memory for good.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from rawcuda.core import launchattrs
from rawcuda.core.kernelargs import ArgPacker
from rawcuda.core.launchconfig import launch_config
from rawcuda.ffi.attributes import FunctionAttribute
from tests.cpu.test_launch_pending import SPECS, StandInContext, stand_in_function

KIB = 1024


def test_a_twin_never_lowers_the_shared_memory_its_kernel_opted_into(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = StandInContext()
    base = stand_in_function(ctx)
    set_to: list[int] = []

    def record(self: Any, which: FunctionAttribute, value: int) -> None:
        if which == FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES:
            set_to.append(value)

    monkeypatch.setattr(type(base), "set_attribute", record)
    twin = base.options(cooperative=True)
    assert twin.base is base and twin.shared_optin is base.shared_optin
    base.configure(1, 256, 100 * KIB)
    twin._limit_cache = dict(base._limit_cache or {})
    twin.configure(1, 256, 60 * KIB)  # within what the kernel already allows: no call at all
    base.configure(2, 256, 100 * KIB)
    twin.configure(1, 256, 120 * KIB)  # more: raised for both
    assert set_to == [100 * KIB, 120 * KIB]


def test_launch_configurations_with_attributes_make_no_reference_cycles() -> None:
    options = launchattrs.LaunchOptions((2, 1, 1), False, True)
    launch_config((8, 1, 1, 256, 1, 1, 0), None, launchattrs.attribute_array(options))  # makes the array type once
    gc.collect()
    gc.disable()
    try:
        for _ in range(50):
            launch_config((8, 1, 1, 256, 1, 1, 0), None, launchattrs.attribute_array(options))
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_argument_packers_make_no_reference_cycles() -> None:
    ctx = StandInContext()
    gc.collect()
    gc.disable()
    try:
        for _ in range(50):
            ArgPacker("k", SPECS, ctx)
        assert gc.collect() == 0
    finally:
        gc.enable()
