"""An elementwise op checks its buffers once: a call on the very same buffers skips the checks, and anything
that could change what they found makes them run again (rawcuda.ops.lastcheck). On stand-in buffers, with
the launch recorded instead of made, so no driver is needed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rawcuda import ops
from rawcuda.core.closecounter import closes
from rawcuda.core.devicebuffer import DeviceBuffer
from tests.cpu.test_ops_limits import Recorder, stand_in

N = 1000  # elements: any size; what matters is that it is the same at every call

#: Each remembered op, called on its buffers (the output first).
OPS: dict[str, tuple[int, Callable[..., None]]] = {
    "vector_add": (3, lambda out, x, y: ops.vector_add(out, x, y)),
    "saxpy": (2, lambda out, x: ops.saxpy(out, 2.0, x)),
    "gelu": (2, lambda out, x: ops.gelu(out, x)),
}


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(ops, "kernel", rec.kernel)
    return rec


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times ops' dtype check ran: one per call whose checks were not skipped."""
    ran: list[int] = []
    real = ops._f32

    def counted(*bufs: Any) -> None:
        ran.append(len(bufs))
        real(*bufs)

    monkeypatch.setattr(ops, "_f32", counted)
    return ran


@pytest.mark.parametrize("op", OPS)
def test_the_very_same_buffers_are_checked_once_and_launched_alike(
    recorder: Recorder, checks: list[int], op: str
) -> None:
    count, call = OPS[op]
    bufs = recorder.buffers(*[(N,)] * count)
    call(*bufs)
    call(*bufs)
    call(*bufs)
    assert len(checks) == 1
    assert len(recorder.launches) == 3 and len(set(map(repr, recorder.launches))) == 1
    assert recorder.launches[0][3] == [N]  # the size the kernel was given, every time


@pytest.mark.parametrize("op", OPS)
def test_a_close_anywhere_makes_the_next_call_check_again(recorder: Recorder, checks: list[int], op: str) -> None:
    count, call = OPS[op]
    bufs = recorder.buffers(*[(N,)] * count)
    call(*bufs)
    closes.generation += 1  # what every close() does (rawcuda.core.resource)
    call(*bufs)
    assert len(checks) == 2


def test_another_buffer_is_checked_and_refused(recorder: Recorder) -> None:
    out, x, y = recorder.buffers((N,), (N,), (N,))
    ops.vector_add(out, x, y)
    wrong = stand_in((N,), recorder.context, x.ptr)
    wrong.dtype = np.dtype(np.float64)
    with pytest.raises(TypeError, match="float32"):
        ops.vector_add(out, wrong, y)


def test_a_shape_or_dtype_assigned_anew_is_checked_anew(recorder: Recorder) -> None:
    out, x, y = recorder.buffers((N,), (N,), (N,))
    ops.vector_add(out, x, y)
    x.shape = (N // 2,)  # not how a view is made, but it must not pass unchecked
    with pytest.raises(ValueError, match=r"its shape \(500,\) describes 2000 bytes, and it has 4000"):
        ops.vector_add(out, x, y)
    x.shape = (N,)
    ops.vector_add(out, x, y)
    x.dtype = np.dtype(np.float16)
    with pytest.raises(TypeError, match="float32"):
        ops.vector_add(out, x, y)


def test_a_refused_call_is_refused_again(recorder: Recorder) -> None:
    out, x = recorder.buffers((N,), (N,))
    y = stand_in((N,), recorder.context, out.ptr + 4)  # overlaps the output, shifted by one element
    y.nbytes = out.nbytes
    for _ in range(2):
        with pytest.raises(ValueError, match="overlaps"):
            ops.vector_add(out, x, y)
    assert recorder.launches == []


def test_remembering_keeps_no_buffer_alive(recorder: Recorder) -> None:
    out, x, y = recorder.buffers((N,), (N,), (N,))
    ops.vector_add(out, x, y)
    gone = weakref.ref(x)
    gc.disable()
    try:
        del x
        assert gone() is None  # freed by its reference count alone: the entry holds it weakly
    finally:
        gc.enable()


def test_only_plain_device_buffers_are_remembered(recorder: Recorder, checks: list[int]) -> None:
    class Moving(DeviceBuffer):
        """Like a growable or foreign buffer: what ops checked may change between calls."""

    out, y = recorder.buffers((N,), (N,))
    x = stand_in((N,), recorder.context, out.ptr + (1 << 50))
    x.__class__ = Moving
    ops.vector_add(out, x, y)
    ops.vector_add(out, x, y)
    assert len(checks) == 2


def test_no_elements_launch_nothing_and_look_no_kernel_up(recorder: Recorder) -> None:
    out, x, y = recorder.buffers((0,), (0,), (0,))
    ops.vector_add(out, x, y)
    ops.vector_add(out, x, y)
    assert recorder.launches == []


def test_a_shape_claiming_more_than_the_memory_is_refused(recorder: Recorder) -> None:
    # Before: every buffer given a shape 4x its allocation launched the kernel past the end of the memory.
    out, x, y = recorder.buffers((N,), (N,), (N,))
    for buf in (out, x, y):
        buf.shape = (4 * N,)
    with pytest.raises(ValueError, match=r"describes 16000 bytes, and it has 4000: a shape assigned by hand"):
        ops.vector_add(out, x, y)
    assert recorder.launches == []


def test_a_shape_that_can_change_in_place_is_checked_at_every_call(recorder: Recorder, checks: list[int]) -> None:
    out, x, y = recorder.buffers((N,), (N,), (N,))
    x.shape = [N]  # a list: the same object could hold another shape at the next call
    ops.vector_add(out, x, y)
    x.shape[0] = N // 2
    with pytest.raises(ValueError, match="describes 2000 bytes"):
        ops.vector_add(out, x, y)
    assert len(checks) == 2


def test_the_kernel_is_remembered_weakly(recorder: Recorder, checks: list[int]) -> None:
    # Before: the entry held the Function, which holds its module and context: a context dropped after an op
    # stayed alive, with its device memory, until the op ran on other buffers.
    out, x, y = recorder.buffers((N,), (N,), (N,))
    ops.vector_add(out, x, y)
    gone = weakref.ref(recorder.functions["vector_add"])
    gc.disable()
    try:
        recorder.functions.clear()  # what a context's cache does when the context goes
        assert gone() is None
        ops.vector_add(out, x, y)  # looked up again, and checked again
    finally:
        gc.enable()
    assert len(checks) == 2 and len(recorder.launches) == 2


@pytest.mark.parametrize("alpha", ["2.0", b"2.0"])
def test_saxpy_takes_no_text_for_alpha(recorder: Recorder, alpha: Any) -> None:
    # Before: float("2.0") made the text a scale factor.
    y, x = recorder.buffers((N,), (N,))
    with pytest.raises(TypeError, match="saxpy's alpha is a number"):
        ops.saxpy(y, alpha, x)
    assert recorder.launches == []
