"""The reduction progression's host side, without a GPU: the step table, each pass's grid, the error bound,
and the transpose variants ops chooses between.

On the GPU, every step and every transpose variant is run and checked: tests/gpu/test_kernel_steps.py.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rawcuda import kernels, ops
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.ops.reduce_steps import STEPS, STEPS_BLOCK, ReduceStep, error_bound, pass_grids

SMS = 132  # an H200's multiprocessor count
SIZES = (0, 1, 31, 1_000_003, (1 << 24) + 7, (1 << 32) + 3)
COMPILED_FOR_ONE_BLOCK_SIZE = range(6, 10)  # steps whose block size is a compile-time constant


def test_the_steps_are_numbered_in_order_and_name_real_kernels() -> None:
    assert [s.number for s in STEPS] == list(range(1, len(STEPS) + 1))
    manifest = kernels.load_manifest()["kernels"]
    for step in STEPS:
        entry = manifest[step.stem]["entries"][step.kernel]
        assert [p["type"] for p in entry["params"]] == ["u64", "u64", "u64"], step  # (out, in, size_t n)
        assert step.block == STEPS_BLOCK
        if step.stem == "reduce_steps":  # __launch_bounds__(256): a bigger block is refused by the driver
            assert entry["directives"]["maxntid"] == [STEPS_BLOCK, 1, 1]
    assert STEPS[-1].kernel == "warp_reduce_sum", "the last step is the seed's kernel, the one ops.sum runs"
    assert len({s.kernel for s in STEPS}) == len(STEPS)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.kernel)
@pytest.mark.parametrize("n", SIZES)
def test_each_pass_covers_its_input_and_the_last_is_one_block(step: ReduceStep, n: int) -> None:
    grids = pass_grids(step, n, SMS)
    assert grids[-1] == 1 and all(1 <= g <= ops.MAX_GRID_X for g in grids)
    assert all(later < earlier for earlier, later in itertools.pairwise(grids)), grids
    for size, grid in zip([n, *grids[:-1]], grids, strict=True):
        if step.blocks_per_sm is None:  # one block per block * elements_per_thread elements, no loop
            assert grid * step.block * step.elements_per_thread >= size
        else:
            assert grid <= step.blocks_per_sm * SMS


def test_shared_memory_is_one_float_per_thread_or_per_warp() -> None:
    for step in STEPS:
        per = STEPS_BLOCK if step.shared == "thread" else STEPS_BLOCK // 32
        assert step.shared_bytes == per * 4


def test_a_grid_past_the_device_limit_is_refused_by_name() -> None:
    step = STEPS[0]
    n = (ops.MAX_GRID_X + 1) * step.block
    with pytest.raises(ValueError, match=r"step 1 .*gridDim\.x.*capped grid"):
        pass_grids(step, n, SMS)
    assert pass_grids(STEPS[6], n, SMS)[0] == STEPS[6].blocks_per_sm * SMS  # a capped grid loops instead


def test_the_error_bound_grows_with_the_additions_and_is_never_zero() -> None:
    for step in STEPS:
        small, large = (error_bound(step, n, SMS, 1.0) for n in (1000, 1 << 28))
        assert 0 < small < large < 1e-3  # 2^28 elements: still a small fraction of sum |x|
    # Steps 7-9 add hundreds of elements per thread in one register: their bound is the largest at 2^28.
    assert error_bound(STEPS[6], 1 << 28, SMS, 1.0) > error_bound(STEPS[2], 1 << 28, SMS, 1.0)


# --- ops.transpose: which kernel each variant runs -----------------------------------------------------------------
FAKE_BASE = 1 << 40  # where the stand-in buffers' fake device addresses start
FAKE_GAP = 256  # bytes between two stand-in buffers


class Recorder:
    """Stands in for ops.kernel: records the kernel name of each launch."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.next_address = FAKE_BASE
        self.context = SimpleNamespace(device=SimpleNamespace(multiprocessor_count=SMS), check_usable=lambda: None)

    def kernel(self, stem: str, name: str, context: Any) -> Any:
        return SimpleNamespace(launch=lambda *args, **kwargs: self.names.append(name))

    def buffer(self, shape: tuple[int, ...]) -> DeviceBuffer:
        buf = DeviceBuffer.__new__(DeviceBuffer)
        buf.shape, buf.dtype, buf.context = shape, np.dtype(np.float32), self.context
        # Its own address range, as a real buffer has (ops refuses an output that overlaps an input).
        buf.nbytes = int(np.prod(shape)) * buf.dtype.itemsize
        buf._closed, buf._ptr = False, self.next_address
        self.next_address += buf.nbytes + FAKE_GAP
        return buf


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(ops, "kernel", rec.kernel)
    return rec


@pytest.mark.parametrize(
    ("kwargs", "kernel"),
    [
        ({}, "transpose_padded"),
        ({"variant": "padded"}, "transpose_padded"),
        ({"variant": "unpadded"}, "transpose_unpadded"),
        ({"variant": "naive"}, "transpose_naive"),
        ({"padded": True}, "transpose_padded"),  # the older spelling still works
        ({"padded": False}, "transpose_naive"),
    ],
)
def test_transpose_variants_run_their_kernel(recorder: Recorder, kwargs: dict[str, Any], kernel: str) -> None:
    ops.transpose(recorder.buffer((5, 3)), recorder.buffer((3, 5)), **kwargs)
    assert recorder.names == [kernel]
    manifest = kernels.load_manifest()["kernels"]["transpose"]["entries"]
    assert set(ops.TRANSPOSE_VARIANTS.values()) == set(manifest)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"variant": "padded", "padded": True}, TypeError, "either variant= or padded=, not both"),
        ({"variant": "tiled"}, ValueError, r"'tiled' is not one of \['naive', 'padded', 'unpadded'\]"),
        ({"variant": ["naive"]}, ValueError, "is not one of"),
        ({"padded": "yes"}, TypeError, "padded must be True or False"),
    ],
)
def test_transpose_refuses_an_unclear_variant_before_launching(
    recorder: Recorder, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        ops.transpose(recorder.buffer((5, 3)), recorder.buffer((3, 5)), **kwargs)
    assert recorder.names == []
