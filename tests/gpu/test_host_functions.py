"""Host functions on the H200: Stream.launch_host_func runs a Python callable in stream order, after the kernel
before it and before the copy after it, and what it raises comes back at result() or the next synchronize()."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rawcuda
from rawcuda import DeviceBuffer, HostFunctionError, Module, Stream

pytestmark = pytest.mark.gpu

SPIN_NS = 200_000_000  # 0.2 s of GPU time before the host function: long enough to see it wait


def spin() -> rawcuda.Function:
    return Module(rawcuda.kernels.ptx_path("spin")).function("spin")


def test_a_host_function_runs_after_the_kernel_before_it_on_a_driver_thread() -> None:
    stream = Stream()
    threads: list[int] = []
    spin().launch(1, 1, SPIN_NS, stream=stream)
    call = stream.launch_host_func(lambda: threads.append(threading.get_ident()) or "ran")
    assert not call.done, "queued behind a 0.2 s kernel, it cannot have run yet"
    stream.synchronize()
    assert call.done and call.result() == "ran"
    assert threads and threads[0] != threading.get_ident()  # the driver's thread, not ours


def test_the_work_after_a_host_function_waits_for_it() -> None:
    # The host function fills host memory that the copy after it uploads: the copy must see every value.
    stream = Stream()
    host = rawcuda.PinnedBuffer(1 << 20, np.float32)
    values = np.random.default_rng(5).standard_normal(1 << 20).astype(np.float32)
    host.array[:] = np.nan
    dev = DeviceBuffer.empty(1 << 20)
    dev.fill(np.float32(np.nan))
    spin().launch(1, 1, SPIN_NS // 4, stream=stream)
    stream.launch_host_func(np.copyto, host.array, values)
    dev.copy_from(host, stream=stream)
    np.testing.assert_array_equal(dev.to_array(stream), values)


def test_what_a_host_function_raises_comes_back_once() -> None:
    stream = Stream()

    def fails() -> None:
        raise ZeroDivisionError("on the driver's thread")

    stream.launch_host_func(fails)
    with pytest.raises(HostFunctionError, match="ZeroDivisionError: on the driver's thread") as caught:
        stream.synchronize()
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    stream.synchronize()  # reported once
    assert stream.launch_host_func(int, "7").result(timeout=10) == 7  # the stream is healthy


def test_cuda_core_takes_a_rawcuda_stream_through_the_stream_protocol() -> None:
    core = pytest.importorskip("cuda.core")
    stream = Stream()
    device = core.Device(0)
    device.set_current()
    borrowed = device.create_stream(stream)  # reads stream.__cuda_stream__()
    assert int(borrowed.handle) == stream.handle
    done: list[int] = []
    spin().launch(1, 1, SPIN_NS // 4, stream=stream)
    stream.launch_host_func(done.append, 1)
    borrowed.sync()  # cuda.core waits on the very same CUstream: the kernel and the host function before it
    assert done == [1]
