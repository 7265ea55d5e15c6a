"""Misuse of streams, captures and contexts on a real GPU: each is refused or repaired, never a crash or a leak.

* ``__dlpack__(stream=3)`` with work pending on the buffer: the number went to ``cuStreamWaitEvent``, the
  driver read it as a pointer, and the process died of SIGSEGV. A CUDA Array Interface naming such a stream
  did the same at a launch.
* A ``Capture`` whose ``__exit__`` was called twice took two off the count of open captures: from then on
  every garbage-collected buffer was queued for a capture end that would never come (256 MiB never freed).
* Closing a created context that a rawcuda call had made current left the thread with no context at all, and
  CuPy's next kernel failed with CUDA_ERROR_INVALID_CONTEXT.
"""

from __future__ import annotations

import gc
import textwrap

import numpy as np
import pytest

import rawcuda
from rawcuda import Context, DeviceBuffer, Stream
from rawcuda.core.guards.capturedeferral import capture_deferral
from rawcuda.core.guards.current import current_handle
from rawcuda.graphs.streamcapture import capture
from tests.helpers import BLOCK, grid_for, run_python

pytestmark = pytest.mark.gpu

N = 1 << 16
NOT_STREAMS = (3, 0xDEAD_BEEF_000, 0x7FFF_FFFF_FFFF_FFFF)

BOGUS_STREAMS_CHILD = textwrap.dedent(
    f"""
    import numpy as np
    from rawcuda import DeviceBuffer, Module, PinnedBuffer, Stream, kernels
    from rawcuda.ffi.constants import StreamFlag
    spin = Module(kernels.ptx_path("spin")).function("spin")
    add = Module(kernels.ptx_path("vector_add")).function("vector_add")
    producer = Stream(flags=StreamFlag.NON_BLOCKING)
    host = PinnedBuffer.from_array(np.ones({N}, np.float32))
    out = DeviceBuffer.empty({N})
    for bogus in {NOT_STREAMS!r}:
        buf = DeviceBuffer.empty({N})
        spin.launch(1, 1, 20_000_000, stream=producer)
        buf.copy_from(host, stream=producer)  # pending: an accepted number would go to cuStreamWaitEvent
        try:
            buf.__dlpack__(stream=bogus)
            print("DLPACK ACCEPTED", hex(bogus))
        except ValueError as exc:
            print("DLPACK REFUSED", "cannot read memory at that address" in str(exc))

        class Foreign:
            __cuda_array_interface__ = {{
                "shape": ({N},), "typestr": "<f4", "data": (buf.ptr, False), "version": 3, "stream": bogus,
            }}

        try:
            add.launch({grid_for(N, BLOCK)}, {BLOCK}, out, Foreign(), Foreign(), {N})
            print("CAI ACCEPTED", hex(bogus))
        except TypeError as exc:  # rawcuda.core.kernelargs.ArgumentError, carrying cai's ForeignArrayError text
            print("CAI REFUSED", "cannot read memory at that address" in str(exc))
        producer.synchronize()
    print("DONE")
    """
)


def test_stream_numbers_that_point_at_nothing_raise_instead_of_crashing() -> None:
    result = run_python(BOGUS_STREAMS_CHILD, timeout=60)
    assert result.returncode == 0, f"the child died (rc {result.returncode}):\n{result.stdout}\n{result.stderr[-2000:]}"
    lines = result.stdout.splitlines()
    assert lines.count("DLPACK REFUSED True") == len(NOT_STREAMS), result.stdout
    assert lines.count("CAI REFUSED True") == len(NOT_STREAMS), result.stdout
    assert lines[-1] == "DONE"


def test_a_capture_exited_twice_is_refused_and_leaves_the_count_alone(
    rng: np.random.Generator, stream: Stream, vector_add: rawcuda.Function
) -> None:
    a, b = (rng.standard_normal(N, dtype=np.float32) for _ in range(2))
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(N)
    assert capture_deferral.open_captures == 0
    cap = capture(stream)
    graph = cap.__enter__()
    vector_add.launch(grid_for(N, BLOCK), BLOCK, dc, da, db, N, stream=stream)
    cap.__exit__(None, None, None)
    try:
        with pytest.raises(RuntimeError, match="ended already"):
            cap.__exit__(None, None, None)
        assert capture_deferral.open_captures == 0, "a second __exit__ must not end the capture again"
        gc.disable()
        try:

            class Cycle:
                def __init__(self) -> None:
                    self.me, self.buf = self, DeviceBuffer.empty(N)

            garbage = Cycle()
            del garbage
            gc.collect()
            assert capture_deferral.pending() == 0, "with no capture open, the GC's release runs at once"
        finally:
            gc.enable()
        dc.fill(np.nan)
        with graph.instantiate() as runnable:  # the graph of the first __exit__ is intact
            runnable.launch(stream)
            stream.synchronize()
        np.testing.assert_array_equal(dc.to_array(), a + b)
    finally:
        if capture_deferral.open_captures != 0:  # (old code: put the process right for the tests after)
            capture_deferral.open_captures = 0
            capture_deferral.begin()
            capture_deferral.end()
        graph.close()
        for buf in (da, db, dc):
            buf.close()


def test_closing_a_created_context_made_current_by_a_call_leaves_the_primary_current() -> None:
    primary = rawcuda.default_context()
    primary.activate()
    created = Context.create()
    buf = DeviceBuffer.empty(16, context=created)  # a call into it: activate() made it current
    assert current_handle() == created.raw_handle
    buf.close()
    created.close()
    assert current_handle() == primary.raw_handle, "the thread must not be left without any context"


def test_a_with_block_around_the_close_still_restores_what_it_found() -> None:
    primary = rawcuda.default_context()
    primary.activate()
    created = Context.create()
    with created:
        DeviceBuffer.empty(16, context=created).close()
        created.close()  # cuCtxDestroy pops it: what was under it (the primary) is current again
    assert current_handle() == primary.raw_handle
