"""A catalogue of bad inputs and faults: the one place that lists every way to misuse rawcuda, and what it says.

Each case is a row of :data:`CASES`: an id, a function that provokes the mistake, the exception it must
raise, and two regular expressions its message must match -- one naming the *problem*, one naming the
*fix* (what to do, or the valid range). Cases whose ``error`` is None are inputs that look suspicious but
are allowed (zero-size buffers, a second close()): the function checks that they really work.

One test runs every row. Around each, the ``kit`` fixture checks that nothing leaked: free device memory
(``cuMemGetInfo`` after a synchronize and a garbage collection, within a small tolerance for the driver's
own allocations) and the number of open objects in the default context. A case that refuses its input
must also not have launched anything: the default context's last launch is unchanged.

Some rows describe what rawcuda does *not* do well today. They carry a ``gap``: the failure they currently
produce (:class:`NotCaughtError`, :class:`WrongTypeError`, :class:`WrongMessageError` or
:class:`MissingHintError`) and the change to rawcuda that would fix it; they are strict xfails, so fixing
rawcuda turns them into failures that ask for the ``gap`` to be removed. docs/reliability.md lists them.

Other test files check many of these inputs too, next to the feature they belong to; this file repeats
them on purpose, systematically, in one table. tests/cpu/test_catalogue.py checks the table itself (unique
ids, a problem and a fix for every refusal) on any machine.
"""

from __future__ import annotations

import contextlib
import gc
import io
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rawcuda import (
    ArgumentError,
    ClosedError,
    Context,
    Device,
    DeviceBuffer,
    Event,
    ManagedBuffer,
    Module,
    ModuleLoadError,
    NotFoundError,
    OutOfMemoryError,
    PinnedBuffer,
    Stream,
    checked,
    kernels,
    ops,
)
from rawcuda.checked.tracing import trace
from rawcuda.core.context import default_context
from rawcuda.core.function import Function
from rawcuda.core.module import max_ptx_isa
from rawcuda.core.ptxtext import PtxParseError

pytestmark = pytest.mark.gpu

MIB = 1 << 20
ONE_TIB = 1 << 40
LEAK_TOLERANCE = 4 * MIB  # the driver may keep a page or two of its own (pools, module code) between cases
N = 1000  # elements of the buffers most cases use
BLOCK = 256
MANGLED = "_Z10vector_addPfPKfS1_m"  # vector_add(float*, const float*, const float*, unsigned long) in C++
BAD_PTX = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken()\n{\n    bogus.instruction;\n}\n"
# A C `int` parameter, as nvcc declares it: the shipped kernels take every size as size_t (an `int` wraps past 2^31).
INT_PARAM_PTX = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry takes_int(.param .u32 n)\n{ ret; }\n"
GRID_Y_LIMIT = 65535  # the grid's y extent on every GPU since Kepler
BLOCK_Z_LIMIT = 64
TOO_MUCH_SHARED = 10 * MIB
ELF_GARBAGE = b"\x7fELF" + bytes(60)  # an ELF magic number and nothing a cubin needs after it


# --- what a case is ------------------------------------------------------------------------------------------
class NotCaughtError(AssertionError):
    """rawcuda accepted an input it should have refused."""


class WrongTypeError(AssertionError):
    """rawcuda refused the input, but not with the documented exception type."""


class WrongMessageError(AssertionError):
    """The exception has the right type, but its message does not name the problem."""


class MissingHintError(AssertionError):
    """The message names the problem but not the fix."""


class WronglyRefusedError(AssertionError):
    """rawcuda refused an input that is allowed (a case whose ``error`` is None raised)."""


@dataclass(frozen=True)
class Gap:
    """What rawcuda gets wrong today (``failure``) and the change proposed to fix it (``proposal``)."""

    failure: type[AssertionError]
    proposal: str


@dataclass(frozen=True)
class Case:
    id: str
    provoke: Callable[[Kit], object]
    error: type[BaseException] | tuple[type[BaseException], ...] | None  # None: allowed, must work
    problem: str = ""  # regex: what is wrong
    fix: str = ""  # regex: what to do about it, or the valid range
    check: Callable[[Any], None] | None = None  # more assertions on the exception
    gap: Gap | None = None
    launches: bool = False  # provoke() launches a valid kernel first (so the last launch may change)

    @property
    def pattern(self) -> str:
        """Both regexes as one: a message matches it when it names the problem *and* the fix."""
        return rf"(?s)(?=.*{self.problem})(?=.*{self.fix})"


@dataclass
class Kit:
    """What a case gets: the default context, kernels loaded once, fresh data, and a stack of things to close."""

    ctx: Context
    rng: np.random.Generator
    stack: contextlib.ExitStack
    functions: dict[str, Function] = field(default_factory=dict)  # the shipped kernels, by name

    def keep(self, obj: Any) -> Any:
        """Close ``obj`` when the case ends (before the leak check)."""
        self.stack.callback(obj.close)
        return obj

    def dev(self, shape: int | tuple[int, ...] = N, dtype: Any = np.float32, context: Context | None = None) -> Any:
        """A buffer of fresh random data (integers for integer dtypes)."""
        host = (self.rng.standard_normal(shape) * 100).astype(dtype)
        return self.keep(DeviceBuffer.from_array(host, context=context))

    def closed(self, shape: int = N) -> Any:
        buf = self.dev(shape)
        buf.close()
        return buf

    def foreign(self) -> Context:
        """A second (created) context: destroyed when the case ends."""
        return self.keep(Context.create(0))

    @property
    def vector_add(self) -> Function:
        return self.functions["vector_add"]

    @property
    def saxpy(self) -> Function:
        return self.functions["saxpy"]

    @property
    def transpose(self) -> Function:
        return self.functions["transpose_naive"]

    @property
    def matmul(self) -> Function:
        return self.functions["matmul"]

    def abc(self) -> tuple[Any, Any, Any]:
        return self.dev(), self.dev(), self.dev()

    def module(self, source: Any = None, name: str | None = None) -> Module:
        return self.keep(Module(kernels.ptx_path("vector_add") if source is None else source, name=name))


def vector_add_text() -> str:
    return kernels.ptx_path("vector_add").read_text()


# --- the provocations that need more than one line -----------------------------------------------------------
def after_cached_launch(grid: Any = 1, shared_mem: Any = 0) -> Callable[[Kit], object]:
    """Launch vector_add validly (so its configuration is cached), then again with ``grid``/``shared_mem``."""

    def provoke(k: Kit) -> object:
        c, a, b = k.abc()
        k.vector_add.launch(1, BLOCK, c, a, b, N)
        k.vector_add.launch((1,), BLOCK, c, a, b, N)
        return k.vector_add.launch(grid, BLOCK, c, a, b, N, shared_mem=shared_mem)

    return provoke


def zero_size_is_allowed(k: Kit) -> None:
    empty = k.keep(DeviceBuffer.empty(0))
    assert empty.ptr == 0 and empty.nbytes == 0 and len(empty) == 0
    empty.copy_from(np.empty(0, np.float32))
    assert empty.to_array().shape == (0,)
    columns = k.keep(DeviceBuffer.from_array(np.empty((3, 0), np.int16)))
    columns.fill(5)
    columns.memset(1)
    out = columns.to_array()
    assert out.shape == (3, 0) and out.dtype == np.int16
    stream = k.keep(Stream())
    empty.copy_from(np.empty(0, np.float32), stream=stream)
    assert empty.to_array(stream=stream).shape == (0,)
    c = k.keep(DeviceBuffer.empty(0))
    ops.vector_add(c, empty, empty)
    ops.saxpy(c, 2.0, empty)
    assert ops.sum(empty) == 0.0
    ops.transpose(k.keep(DeviceBuffer.empty((5, 0))), k.keep(DeviceBuffer.empty((0, 5))))
    k.vector_add.launch(1, BLOCK, c, empty, empty, 0)  # n = 0: the kernel must touch nothing
    full = k.dev(10)
    assert full.view(10).shape == (0,) and full.view(10).to_array().size == 0  # a view at the very end
    assert full[7:3].shape == (0,)
    assert k.keep(PinnedBuffer(0)).array.shape == (0,)
    assert k.keep(ManagedBuffer(0)).array.shape == (0,)
    k.ctx.synchronize()


def fills_in_range(*pairs: tuple[Any, Any]) -> Callable[[Kit], None]:
    def provoke(k: Kit) -> None:
        for dtype, value in pairs:
            buf = k.keep(DeviceBuffer.empty(37, dtype))
            buf.fill(value)
            np.testing.assert_array_equal(buf.to_array(), np.full(37, value, dtype))

    return provoke


def strided_sources_are_allowed(k: Kit) -> None:
    host = k.rng.standard_normal(2 * N).astype(np.float32)
    buf = k.keep(DeviceBuffer.empty(N))
    buf.copy_from(host[::2])  # not contiguous: copied through a contiguous temporary
    np.testing.assert_array_equal(buf.to_array(), host[::2])
    fortran = np.asfortranarray(k.rng.standard_normal((40, 25)).astype(np.float32))
    grid = k.keep(DeviceBuffer.empty((40, 25)))
    grid.copy_from(fortran)
    np.testing.assert_array_equal(grid.to_array(), fortran)


def closing_a_view_keeps_its_base(k: Kit) -> None:
    base = k.dev(10)
    expected = base.to_array()
    view = base[2:5]
    view.close()
    view.close()  # idempotent
    assert view.closed and not base.closed
    np.testing.assert_array_equal(base.to_array(), expected)
    try:
        view.to_array()
    except ClosedError:
        return
    raise AssertionError("a closed view must refuse to be read")


def double_close_then_use(make: Callable[[Kit], Any], use: Callable[[Any], object]) -> Callable[[Kit], object]:
    """Close an object twice (both must be silent), then use it (which must raise)."""

    def provoke(k: Kit) -> object:
        obj = make(k)
        obj.close()
        obj.close()
        assert obj.closed
        return use(obj)

    return provoke


def in_closed_context(make: Callable[[Kit, Context], Any], use: Callable[[Any], object]) -> Callable[[Kit], object]:
    """Make an object in a created context, close the context (which closes the object), then use it."""

    def provoke(k: Kit) -> object:
        ctx = k.foreign()
        obj = make(k, ctx)
        ctx.close()
        return use(obj)

    return provoke


def function_of_closed_context(k: Kit, ctx: Context) -> Function:
    return Module(kernels.ptx_path("vector_add"), context=ctx).function("vector_add")


def launch_after_unload(k: Kit) -> object:
    module = Module(kernels.ptx_path("vector_add"))
    fn = module.function("vector_add")
    module.close()
    c, a, b = k.abc()
    return fn.launch(1, BLOCK, c, a, b, N)


def mangled_module(k: Kit) -> object:
    # The entry renamed to what nvcc calls it when the kernel is not extern "C" (as tutorial 05c does).
    text = re.sub(r"(?<![\w/$])vector_add(?=[\s(]|_param_)", MANGLED, vector_add_text())
    return k.module(text, name="mangled.ptx").function("vector_add")


def newer_ptx_version(k: Kit) -> object:
    newest = max_ptx_isa(checked.driver_version())
    version = f"{newest[0] + 1}.0" if newest else "99.9"
    return k.module(re.sub(r"\.version \d+\.\d+", f".version {version}", vector_add_text(), count=1))


def newer_target(k: Kit) -> object:
    major, _ = Device(0).compute_capability
    return k.module(re.sub(r"\.target sm_\d+", f".target sm_{(major + 1) * 10}", vector_add_text(), count=1))


def truncated_ptx(k: Kit) -> object:
    text = vector_add_text()
    return k.module(text[: len(text) // 2])


def launch_view_of_closed_buffer(k: Kit) -> object:
    base = k.dev()
    view = base.view(0, 10)
    base.close()  # closes its views too
    return k.vector_add.launch(1, BLOCK, k.dev(10), view, k.dev(10), 10)


def view_after_its_base_closed(k: Kit) -> object:
    base = k.dev()
    view = base.view(2)
    base.close()
    return view.to_array()


def bound_launch_after_close(k: Kit) -> object:
    c, a, b = k.abc()
    launch = k.vector_add.bind(1, BLOCK, c, a, b, N)
    b.close()
    return launch()


def foreign_buffer_to_kernel(k: Kit) -> object:
    # bind() checks and packs the arguments exactly like launch() but launches nothing: if a foreign buffer
    # got through, it would reach a kernel of the default context only when called -- which this never does.
    c, a = k.dev(), k.dev()
    return k.vector_add.bind(1, BLOCK, c, a, k.dev(context=k.foreign()), N)


def events_of_two_contexts(k: Kit) -> object:
    start = k.keep(Event()).record()
    end = k.keep(Event(k.foreign())).record()
    return start.elapsed_ms(end)


def priority_range() -> tuple[int, int]:
    return default_context().stream_priority_range


def check_oom(exc: OutOfMemoryError) -> None:
    assert exc.requested == ONE_TIB, exc.requested
    assert exc.available is not None and 0 < exc.available < ONE_TIB, exc.available
    assert isinstance(exc, MemoryError)


def check_code(*codes: int) -> Callable[[Any], None]:
    def check(exc: Any) -> None:
        assert exc.code in codes, (exc.code, codes)

    return check


def quietly(action: Callable[[], object]) -> object:
    with np.errstate(over="ignore"):  # the overflowing cast is the point; its warning is noise
        return action()


CLOSED_HINT = r"create a new one"
ARGS = r"(?:u64, ){3}u64"
GRID_TYPE = r"grid must be an int or a tuple of 1 to 3 ints"
SAME_CONTEXT = r"use a stream of the same context"

# --- the catalogue ---------------------------------------------------------------------------------------------
CASES: list[Case] = [
    # kernel arguments: count, width, kind -- checked against the PTX signature before cuLaunchKernel
    Case(
        "launch-too-few-arguments",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc()),
        ArgumentError,
        r"vector_add takes 4 argument\(s\)",
        rf"\({ARGS}\) but 3 were given",
    ),
    Case(
        "launch-too-many-arguments",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, N),
        ArgumentError,
        r"vector_add takes 4 argument\(s\)",
        rf"\({ARGS}\) but 5 were given",
    ),
    Case(
        "launch-no-arguments",
        lambda k: k.vector_add.launch(1, BLOCK),
        ArgumentError,
        r"vector_add takes 4 argument\(s\)",
        rf"\({ARGS}\) but 0 were given",
    ),
    Case(
        "launch-float64-for-f32",
        lambda k: k.saxpy.launch(1, BLOCK, k.dev(), np.float64(2.0), k.dev(), N),
        ArgumentError,
        r"saxpy argument 1: wrong width: float64 is 8 bytes",
        r"the parameter is f32: a 32-bit float",
    ),
    Case(
        "launch-int32-for-u64",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), np.int32(N)),
        ArgumentError,
        r"vector_add argument 3: wrong width: int32 is 4 bytes",
        r"u64: a device pointer \(DeviceBuffer\) or a 64",
    ),
    Case(
        "launch-int64-for-u32",
        lambda k: k.module(INT_PARAM_PTX, name="int.ptx").function("takes_int").launch(1, 1, np.int64(10)),
        ArgumentError,
        r"takes_int argument 0: wrong width: int64 is 8 bytes",
        r"u32: a 32-bit integer",
    ),
    Case(
        "launch-int32-for-size_t",
        lambda k: k.transpose.launch(1, (32, 8), k.dev(), k.dev(), np.int32(10), 100),
        ArgumentError,
        r"transpose_naive argument 2: wrong width: int32 is 4 bytes",
        r"u64: a device pointer \(DeviceBuffer\) or a 64",
    ),
    Case(
        "launch-negative-size",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), -1),
        ArgumentError,
        r"vector_add argument 3: -1 does not fit u64",
        r"np\.int64\(-1\)",
    ),
    Case(
        "launch-float-for-size",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), 1.5),
        ArgumentError,
        r"vector_add argument 3: a float \(1\.5\)",
        r"expects u64: a device pointer \(DeviceBuffer\) or a 64-bit",
    ),
    Case(
        "launch-u32-overflow",
        lambda k: k.module(INT_PARAM_PTX, name="int.ptx").function("takes_int").launch(1, 1, 1 << 32),
        ArgumentError,
        r"takes_int argument 0: 4294967296 does not fit",
        r"declare it size_t",
    ),
    Case(
        "launch-numpy-int-for-f32",
        lambda k: k.saxpy.launch(1, BLOCK, k.dev(), np.int32(2), k.dev(), N),
        ArgumentError,
        r"saxpy argument 1: a numpy integer \(int32\) where the kernel expects f32",
        r"pass a Python number or a numpy float of that width",
    ),
    Case(
        "launch-host-array-for-pointer",
        lambda k: k.vector_add.launch(1, BLOCK, k.dev(), np.zeros(N, np.float32), k.dev(), N),
        ArgumentError,
        r"vector_add argument 1: a host numpy array where a device pointer is expected",
        r"copy it first with rawcuda\.DeviceBuffer\.from_array\(array\)",
    ),
    Case(
        "launch-pinned-for-pointer",
        lambda k: k.vector_add.launch(1, BLOCK, k.dev(), k.keep(PinnedBuffer(N)), k.dev(), N),
        ArgumentError,
        r"vector_add argument 1: PinnedBuffer cannot be passed as u64",
        r"a device pointer \(DeviceBuffer\)",
    ),
    Case(
        "launch-str-for-size",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), "1000"),
        ArgumentError,
        r"vector_add argument 3: str cannot be passed as u64",
        r"a device pointer \(DeviceBuffer\) or a 64-bit",
    ),
    Case(
        "launch-none-for-pointer",
        lambda k: k.vector_add.launch(1, BLOCK, None, k.dev(), k.dev(), N),
        ArgumentError,
        r"vector_add argument 0: NoneType cannot be passed as u64",
        r"a device pointer \(DeviceBuffer\)",
    ),
    Case(
        "launch-buffer-for-f32",
        lambda k: k.saxpy.launch(1, BLOCK, k.dev(), k.dev(), k.dev(), N),
        ArgumentError,
        r"saxpy argument 1: an array where the kernel expects f32",
        r"f32: a 32-bit float",
    ),
    Case(
        "ops-host-array",
        lambda k: ops.vector_add(k.dev(), np.zeros(N, np.float32), k.dev()),
        ArgumentError,
        r"a host numpy array where a device pointer is expected",
        r"DeviceBuffer\.from_array",
    ),
    Case(
        "launch-closed-buffer",
        lambda k: k.vector_add.launch(1, BLOCK, k.dev(), k.closed(), k.dev(), N),
        ClosedError,
        r"is closed and cannot be passed to a kernel",
        r"allocate a new one",
    ),
    Case(
        "launch-view-of-closed-buffer",
        launch_view_of_closed_buffer,
        ClosedError,
        r"<view .* closed> is closed and cannot be passed to a kernel",
        r"allocate a new one",
    ),
    Case(
        "bound-launch-after-close",
        bound_launch_after_close,
        ClosedError,
        r"is closed and cannot be passed to a kernel",
        r"allocate a new one",
    ),
    Case(
        "bound-launch-update-wrong-count",
        lambda k: k.vector_add.bind(1, BLOCK, *k.abc(), N).update(k.dev()),
        ArgumentError,
        r"vector_add takes 4 argument\(s\)",
        rf"\({ARGS}\) but 1 were given",
    ),
    Case(
        "launch-buffer-of-another-context",
        foreign_buffer_to_kernel,
        (TypeError, ValueError),
        r"belongs to <Context created",
        r"same context",
    ),
    # launch configuration: checked once per configuration against the device and the kernel
    Case(
        "block-over-1024",
        lambda k: k.vector_add.launch(1, 2048, *k.abc(), N),
        ValueError,
        r"block dimension x = 2048 exceeds",
        r"the device limit 1024",
    ),
    Case(
        "block-over-1024-threads",
        lambda k: k.vector_add.launch(1, (32, 32, 2), *k.abc(), N),
        ValueError,
        r"a block of \(32, 32, 2\) = 2048 threads is too large for 'vector_add'",
        r"at most 1024",
    ),
    Case(
        "block-z-over-64",
        lambda k: k.vector_add.launch(1, (1, 1, BLOCK_Z_LIMIT + 1), *k.abc(), N),
        ValueError,
        r"block dimension z = 65 exceeds",
        rf"the device limit {BLOCK_Z_LIMIT}",
    ),
    Case(
        "block-over-launch-bounds",
        lambda k: k.matmul.launch(1, (32, 32), k.dev((4, 4)), k.dev((4, 4)), k.dev((4, 4)), 4, 4, 4),
        ValueError,
        r"= 1024 threads is too large for 'matmul'",
        r"at most 256",
    ),
    Case(
        "block-zero",
        lambda k: k.vector_add.launch(1, 0, *k.abc(), N),
        ValueError,
        r"every block dimension must be >= 1, got 0",
        r"skip the launch instead",
    ),
    Case(
        "grid-zero",
        lambda k: k.vector_add.launch(0, BLOCK, *k.abc(), N),
        ValueError,
        r"every grid dimension must be >= 1, got 0",
        r"skip the launch instead",
    ),
    Case(
        "grid-negative",
        lambda k: k.vector_add.launch((4, -1), BLOCK, *k.abc(), N),
        ValueError,
        r"every grid dimension must be >= 1, got \(4, -1\)",
        r"skip the launch instead",
    ),
    Case("grid-float", lambda k: k.vector_add.launch(1.5, BLOCK, *k.abc(), N), TypeError, r"got 1\.5", GRID_TYPE),
    Case(
        "grid-four-dimensions",
        lambda k: k.vector_add.launch((1, 1, 1, 1), BLOCK, *k.abc(), N),
        TypeError,
        r"got \(1, 1, 1, 1\)",
        GRID_TYPE,
    ),
    Case(
        "grid-y-over-limit",
        lambda k: k.vector_add.launch((1, GRID_Y_LIMIT + 1), BLOCK, *k.abc(), N),
        ValueError,
        r"grid dimension y = 65536 exceeds",
        rf"the device limit {GRID_Y_LIMIT}",
    ),
    Case("grid-float-equal-to-an-int-is-allowed", after_cached_launch(grid=1.0), None, launches=True),
    Case("grid-bool-equal-to-an-int-is-allowed", after_cached_launch(grid=True), None, launches=True),
    Case("grid-numpy-float-equal-to-an-int-is-allowed", after_cached_launch(grid=np.float64(1.0)), None, launches=True),
    Case("grid-float-tuple-equal-to-an-int-is-allowed", after_cached_launch(grid=(1.0,)), None, launches=True),
    Case("shared-mem-float-equal-to-an-int-is-allowed", after_cached_launch(shared_mem=0.0), None, launches=True),
    Case(
        "shared-mem-float",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, shared_mem=1.5),
        ValueError,
        r"shared_mem .* got 1\.5",
        r"a byte count >= 0",
    ),
    Case(
        "shared-mem-negative",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, shared_mem=-1),
        ValueError,
        r"shared_mem .* got -1",
        r"a byte count >= 0",
    ),
    Case(
        "shared-mem-too-large",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, shared_mem=TOO_MUCH_SHARED),
        ValueError,
        rf"{TOO_MUCH_SHARED} bytes of dynamic shared memory plus \d+ static exceed",
        r"the \d+ bytes a block can have on this device",
    ),
    Case(
        "launch-stream-of-another-context",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, stream=k.keep(Stream(k.foreign()))),
        ValueError,
        r"<Stream .*> belongs to <Context created .*>, not <Context primary",
        SAME_CONTEXT,
    ),
    Case(
        "launch-closed-stream",
        lambda k: k.vector_add.launch(1, BLOCK, *k.abc(), N, stream=double_closed(Stream())),
        ClosedError,
        r"<Stream .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "launch-after-module-unload",
        launch_after_unload,
        ClosedError,
        r"kernel 'vector_add' belongs to <Module .* closed>, which is closed",
        r"load the module again",
    ),
    # allocation
    Case(
        "alloc-1-tib",
        lambda k: k.keep(DeviceBuffer.empty(ONE_TIB, np.uint8)),
        OutOfMemoryError,
        r"CUDA_ERROR_OUT_OF_MEMORY \(2\)[\s\S]*requested 1\.00 TiB \(1099511627776 bytes\); device memory available",
        r"free what you no longer need",
        check=check_oom,
    ),
    Case(
        "alloc-negative",
        lambda k: k.keep(DeviceBuffer.empty(-1)),
        ValueError,
        r"shape -1",
        r"extents must be >= 0, got -1",
    ),
    Case(
        "alloc-negative-2d",
        lambda k: k.keep(DeviceBuffer.empty((4, -2))),
        ValueError,
        r"shape \(4, -2\)",
        r"extents must be >= 0, got -2",
    ),
    Case(
        "alloc-bool-extent",
        lambda k: k.keep(DeviceBuffer.empty(True)),
        TypeError,
        r"got bool",
        r"extents must be integers",
    ),
    Case(
        "alloc-float-shape",
        lambda k: k.keep(DeviceBuffer.empty(2.5)),
        TypeError,
        r"shape 2\.5",
        r"an int or a tuple of ints",
    ),
    Case(
        "alloc-object-dtype",
        lambda k: k.keep(DeviceBuffer.empty(4, object)),
        TypeError,
        r"dtype object holds Python objects",
        r"use a numeric dtype",
    ),
    Case("pinned-negative", lambda k: k.keep(PinnedBuffer(-5)), ValueError, r"shape -5", r"extents must be >= 0"),
    Case("zero-size-is-allowed", zero_size_is_allowed, None, launches=True),
    # copies: sizes, shapes and dtypes are checked before a byte moves
    Case(
        "copy-from-past-the-end",
        lambda k: k.dev(10).copy_from(np.zeros(11, np.float32)),
        ValueError,
        r"cannot copy from an array of shape \(11,\): this buffer has shape \(10,\)",
        r"reshape one of them or make a view",
    ),
    Case(
        "copy-from-short",
        lambda k: k.dev(10).copy_from(np.zeros(9, np.float32)),
        ValueError,
        r"cannot copy from an array of shape \(9,\)",
        r"reshape one of them or make a view",
    ),
    Case(
        "copy-to-small-array",
        lambda k: k.dev(10).copy_to(np.empty(9, np.float32)),
        ValueError,
        r"cannot copy into an array of shape \(9,\): this buffer has shape \(10,\)",
        r"reshape one of them",
    ),
    Case(
        "copy-same-size-other-shape",
        lambda k: k.dev(10).copy_from(np.zeros((2, 5), np.float32)),
        ValueError,
        r"shape \(2, 5\): this buffer has shape \(10,\)",
        r"reshape one of them or make a view",
    ),
    Case(
        "copy-from-wrong-dtype",
        lambda k: k.dev(10).copy_from(np.zeros(10, np.float64)),
        TypeError,
        r"cannot copy from a float64 array: this buffer holds float32",
        r"a\.astype\(np\.float32\)",
    ),
    Case(
        "copy-from-big-endian",
        lambda k: k.dev(10).copy_from(np.zeros(10, ">f4")),
        TypeError,
        r"cannot copy from a >f4 array: this buffer holds float32",
        r"a\.astype\(np\.float32\)",
    ),
    Case(
        "copy-to-wrong-dtype",
        lambda k: k.dev(10).copy_to(np.empty(10, np.int32)),
        TypeError,
        r"cannot copy into a int32 array: this buffer holds float32",
        r"convert first",
    ),
    Case(
        "copy-to-strided-array",
        lambda k: k.dev(10).copy_to(np.empty(20, np.float32)[::2]),
        ValueError,
        r"copy_to needs a C-contiguous, writeable array",
        r"np\.empty\(shape, dtype\) is one",
    ),
    Case(
        "copy-to-read-only-array",
        lambda k: k.dev(10).copy_to(np.frombuffer(bytes(40), np.float32)),
        ValueError,
        r"copy_to needs a C-contiguous, writeable array",
        r"np\.empty\(shape, dtype\) is one",
    ),
    Case(
        "copy-from-list",
        lambda k: k.dev(3).copy_from([1.0, 2.0, 3.0]),
        TypeError,
        r"copy_from takes .* not list",
        r"a numpy array, a PinnedBuffer or a DeviceBuffer",
    ),
    Case(
        "copy-device-past-the-end",
        lambda k: k.dev(10).copy_from(k.dev(12)),
        ValueError,
        r"cannot copy from device buffer an array of shape \(12,\)",
        r"reshape one of them or make a view",
    ),
    Case(
        "copy-device-wrong-dtype",
        lambda k: k.dev(10).copy_from(k.dev(10, np.float64)),
        TypeError,
        r"a float64 array: this buffer holds float32",
        r"convert first",
    ),
    Case(
        "copy-device-of-another-context",
        lambda k: k.dev(10).copy_from(k.dev(10, context=k.foreign())),
        ValueError,
        r"belong to different contexts",
        r"copy through the host or use buffers of one context",
    ),
    Case(
        "copy-on-stream-of-another-context",
        lambda k: k.dev(10).copy_from(np.zeros(10, np.float32), stream=k.keep(Stream(k.foreign()))),
        ValueError,
        r"belongs to <Context created",
        SAME_CONTEXT,
    ),
    Case(
        "copy-from-closed-buffer",
        lambda k: k.dev(10).copy_from(k.closed(10)),
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "copy-into-closed-buffer",
        lambda k: k.closed(10).copy_from(np.zeros(10, np.float32)),
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    Case("strided-sources-are-allowed", strided_sources_are_allowed, None),
    # views
    Case(
        "view-past-the-end",
        lambda k: k.dev(N).view(900, 200),
        ValueError,
        r"a view of shape \(200,\) float32 at element 900 needs 4400 bytes",
        r"the buffer has 4000",
    ),
    Case(
        "view-before-the-start",
        lambda k: k.dev(N).view(-1),
        ValueError,
        r"view offset -1 is outside",
        r"a buffer of 1000 elements",
    ),
    Case(
        "view-offset-past-the-end",
        lambda k: k.dev(N).view(N + 1),
        ValueError,
        r"view offset 1001 is outside",
        r"a buffer of 1000 elements",
    ),
    Case(
        "view-misaligned-dtype",
        lambda k: k.dev(N).view(1, dtype=np.float64),
        ValueError,
        r"byte offset 4 is not",
        r"a float64 view must start on a multiple of 8 bytes",
    ),
    Case(
        "view-partial-element",
        lambda k: k.dev(3).view(dtype=np.float64),
        ValueError,
        r"the remaining 12 bytes are not a whole number of float64 elements",
        r"pass shape=",
    ),
    Case("slice-with-step", lambda k: k.dev(N)[::2], ValueError, r"slices must be contiguous", r"\(step 1\)"),
    Case(
        "index-instead-of-slice",
        lambda k: k.dev(N)[3],
        TypeError,
        r"supports only contiguous slices of the first axis",
        r"copy to the host with to_array\(\)",
    ),
    Case("view-of-closed-buffer", lambda k: k.closed().view(0), ClosedError, r"closed> is closed", CLOSED_HINT),
    Case(
        "view-after-its-base-closed",
        view_after_its_base_closed,
        ClosedError,
        r"<view .* closed> is closed",
        CLOSED_HINT,
    ),
    Case("closing-a-view-keeps-its-base", closing_a_view_keeps_its_base, None),
    Case(
        "cuda-array-interface-of-closed-buffer",
        lambda k: k.closed().__cuda_array_interface__,
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    # memset / fill
    Case(
        "memset-256",
        lambda k: k.dev().memset(256),
        ValueError,
        r"memset takes a byte value 0\.\.255, got 256",
        r"use fill\(\) for element values",
    ),
    Case(
        "memset-negative",
        lambda k: k.dev().memset(-1),
        ValueError,
        r"memset takes a byte value 0\.\.255, got -1",
        r"use fill\(\) for element values",
    ),
    Case(
        "memset-float",
        lambda k: k.dev().memset(1.5),
        TypeError,
        r"memset's byte is an int \(or a numpy integer\), not float 1\.5",
        r"pass a whole number",
    ),
    Case(
        "fill-fraction-into-int",
        lambda k: k.dev(N, np.int32).fill(1.5),
        TypeError,
        r"cannot fill a int32 buffer with 1\.5",
        r"holds only integers",
    ),
    Case(
        "fill-overflowing-int",
        lambda k: k.dev(N, np.int32).fill(1 << 40),
        TypeError,
        r"cannot fill a int32 buffer with 1099511627776",
        r"holds the integers -2147483648\.\.2147483647",
    ),
    Case(
        "fill-overflowing-float",
        lambda k: quietly(lambda: k.dev(N, np.float32).fill(1e40)),
        TypeError,
        r"cannot fill a float32 buffer with 1e\+40",
        r"would become inf",
    ),
    Case(
        "fills-in-range-are-allowed",
        fills_in_range(
            (np.int8, -128),
            (np.int16, -3),
            (np.int64, -(1 << 40)),
            (np.float32, -2.5),
            (np.float64, 0.1),
            (np.complex64, 1 + 2j),
            (np.uint8, np.uint8(255)),
        ),
        None,
    ),
    Case("fill-unsigned-with-a-python-int", fills_in_range((np.uint8, 255), (np.uint16, 65535), (np.uint32, 7)), None),
    # modules: bad images, versions, names
    Case(
        "ptx-invalid",
        lambda k: k.module(BAD_PTX, name="broken.ptx"),
        ModuleLoadError,
        r"CUDA_ERROR_INVALID_PTX \(218\)[\s\S]*module: broken\.ptx[\s\S]*JIT error log",
        r"regenerate it with nvcc --ptx",
        check=check_code(218),
    ),
    Case(
        "ptx-truncated",
        truncated_ptx,
        ModuleLoadError,
        r"CUDA_ERROR_INVALID_(PTX \(218\)|IMAGE \(200\))",
        r"regenerate it with nvcc --ptx|a truncated file",
        check=check_code(218, 200),
    ),
    Case(
        "ptx-newer-than-the-driver",
        newer_ptx_version,
        ModuleLoadError,
        r"CUDA_ERROR_UNSUPPORTED_PTX_VERSION \(222\)[\s\S]*\.version \d+\.\d+",
        r"Fix 1: update the NVIDIA driver[\s\S]*Fix 2",
        check=check_code(222),
    ),
    Case(
        "ptx-target-newer-than-the-gpu",
        newer_target,
        ModuleLoadError,
        r"CUDA_ERROR_(INVALID_PTX \(218\)|NO_BINARY_FOR_GPU \(209\))",
        r"\.target is not newer than this GPU|rebuild for this GPU's architecture",
        check=check_code(218, 209),
    ),
    Case(
        "ptx-without-version",
        lambda k: k.module(".entry k() { ret; }"),
        PtxParseError,
        r"no '\.version X\.Y' directive",
        r"every PTX module starts with one",
    ),
    Case("ptx-empty", lambda k: k.module(b""), PtxParseError, r"not PTX: the text is empty", r"pass PTX text"),
    Case(
        "cubin-garbage",
        lambda k: k.module(ELF_GARBAGE, name="garbage.cubin"),
        ModuleLoadError,
        r"CUDA_ERROR_(INVALID_IMAGE \(200\)|NO_BINARY_FOR_GPU \(209\))[\s\S]*module: garbage\.cubin \(cubin\)",
        r"not valid PTX, cubin or fatbin|rebuild for this GPU's architecture",
        check=check_code(200, 209),
    ),
    Case(
        "missing-kernel",
        lambda k: k.module().function("vector_sub"),
        NotFoundError,
        r"CUDA_ERROR_NOT_FOUND \(500\)[\s\S]*kernels in vector_add\.ptx: vector_add",
        r'extern "C"',
    ),
    Case(
        "mangled-kernel-name",
        mangled_module,
        NotFoundError,
        rf"kernels in mangled\.ptx: {MANGLED}",
        rf"declare the kernel extern \"C\" to keep its plain name, or ask for '{MANGLED}'",
    ),
    Case(
        "kernel-name-not-a-str",
        lambda k: k.module().function(123),
        TypeError,
        r"kernel name is a str",
        r"module\.function\('vector_add'\)",
    ),
    Case(
        "module-nonexistent-path",
        lambda k: k.module(Path("/nonexistent/kernels.ptx")),
        FileNotFoundError,
        r"no module file at /nonexistent/kernels\.ptx",
        r"pass PTX text, bytes, or the path of a \.ptx",
    ),
    Case(
        "module-nonexistent-str-path",
        lambda k: k.module("/nonexistent/kernels.ptx"),
        FileNotFoundError,
        r"no module file at /nonexistent/kernels\.ptx",
        r"pass PTX text, bytes, or the path of a \.ptx",
    ),
    Case(
        "module-wrong-type",
        lambda k: k.module(12345),
        TypeError,
        r"not int",
        r"a module image is bytes, PTX text or a path",
    ),
    Case(
        "shipped-kernel-not-built",
        lambda k: kernels.ptx_path("no_such_kernel"),
        FileNotFoundError,
        r"no PTX for kernel 'no_such_kernel'",
        r"run `python build\.py`",
    ),
    # double close of every kind of object: silent, and the object then refuses to be used
    Case(
        "double-close-buffer",
        double_close_then_use(lambda k: k.dev(), lambda b: b.to_array()),
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-view",
        double_close_then_use(lambda k: k.dev()[10:20], lambda v: v.to_array()),
        ClosedError,
        r"<view .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-pinned",
        double_close_then_use(lambda k: PinnedBuffer(N), lambda p: p.array),
        ClosedError,
        r"<PinnedBuffer .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-managed",
        double_close_then_use(lambda k: ManagedBuffer(N), lambda m: m.array),
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-stream",
        double_close_then_use(lambda k: Stream(), lambda s: s.synchronize()),
        ClosedError,
        r"<Stream .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-event",
        double_close_then_use(lambda k: Event(), lambda e: e.record()),
        ClosedError,
        r"<Event .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-module",
        double_close_then_use(lambda k: Module(kernels.ptx_path("vector_add")), lambda m: m.function("vector_add")),
        ClosedError,
        r"<Module .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "double-close-context",
        double_close_then_use(lambda k: Context.create(0), lambda c: c.synchronize()),
        ClosedError,
        r"<Context created .* closed> is closed",
        r"create a new context",
    ),
    # objects used after their context was closed
    Case(
        "buffer-after-context-close",
        in_closed_context(lambda k, c: k.dev(context=c), lambda b: b.to_array()),
        ClosedError,
        r"closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "stream-after-context-close",
        in_closed_context(lambda k, c: Stream(c), lambda s: s.synchronize()),
        ClosedError,
        r"<Stream .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "event-after-context-close",
        in_closed_context(lambda k, c: Event(c), lambda e: e.record()),
        ClosedError,
        r"<Event .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "pinned-after-context-close",
        in_closed_context(lambda k, c: PinnedBuffer(N, context=c), lambda p: p.array),
        ClosedError,
        r"<PinnedBuffer .* closed> is closed",
        CLOSED_HINT,
    ),
    Case(
        "kernel-after-context-close",
        in_closed_context(function_of_closed_context, lambda f: f.launch(1, 1, 0, 0, 0, 0)),
        ClosedError,
        r"kernel 'vector_add' belongs to <Module .* closed>, which is closed",
        r"load the module again",
    ),
    Case(
        "new-buffer-in-closed-context",
        in_closed_context(lambda k, c: c, lambda c: DeviceBuffer(4, context=c)),
        ClosedError,
        r"<Context created .* closed> is closed",
        r"create a new context",
    ),
    # events
    Case(
        "event-never-recorded-synchronize",
        lambda k: k.keep(Event()).synchronize(),
        ValueError,
        r"cannot synchronize on <Event .* unrecorded>: it was never recorded",
        r"call event\.record\(stream\) first",
    ),
    Case(
        "event-never-recorded-query",
        lambda k: k.keep(Event()).query(),
        ValueError,
        r"cannot query <Event .* unrecorded>: it was never recorded",
        r"call event\.record\(stream\) first",
    ),
    Case(
        "event-never-recorded-elapsed",
        lambda k: k.keep(Event()).elapsed_ms(k.keep(Event()).record()),
        ValueError,
        r"cannot time <Event .* unrecorded>: it was never recorded",
        r"call event\.record\(stream\) first",
    ),
    Case(
        "event-without-timing-elapsed",
        lambda k: k.keep(Event(timing=False)).record().elapsed_ms(k.keep(Event()).record()),
        ValueError,
        r"was created with timing=False: it cannot be timed",
        r"create it with Event\(timing=True\)",
    ),
    Case(
        "event-interprocess-with-timing",
        lambda k: k.keep(Event(interprocess=True)),
        ValueError,
        r"an interprocess event cannot record timing",
        r"pass timing=False as well",
    ),
    Case(
        "event-record-on-stream-of-another-context",
        lambda k: k.keep(Event()).record(k.keep(Stream(k.foreign()))),
        ValueError,
        r"belongs to <Context created",
        SAME_CONTEXT,
    ),
    Case(
        "events-of-two-contexts-elapsed",
        events_of_two_contexts,
        ValueError,
        r"the two events belong to different contexts",
        r"same context",
    ),
    Case(
        "stream-waits-for-event-of-another-context",
        lambda k: k.keep(Stream()).wait(k.keep(Event(k.foreign())).record()),
        ValueError,
        r"objects of different contexts cannot be combined",
        r"create both in the same context",
    ),
    # streams
    Case(
        "stream-priority-too-low",
        lambda k: k.keep(Stream(priority=priority_range()[0] + 1)),
        ValueError,
        r"stream priority -?\d+ is outside this device's range",
        r"pass an int in that range or None for the default",
    ),
    Case(
        "stream-priority-too-high",
        lambda k: k.keep(Stream(priority=priority_range()[1] - 1)),
        ValueError,
        r"stream priority -?\d+ is outside this device's range",
        r"lower numbers run first",
    ),
    Case(
        "stream-priority-float",
        lambda k: k.keep(Stream(priority=-0.5)),
        TypeError,
        r"priority is an int \(or a numpy integer\), not float -0\.5",
        r"pass a whole number",
    ),
    # devices and contexts
    Case("device-99", lambda k: Device(99), ValueError, r"no GPU with ordinal 99", r"ordinals 0\.\.\d+"),
    Case("device-negative", lambda k: Device(-1), ValueError, r"no GPU with ordinal -1", r"ordinals 0\.\.\d+"),
    Case(
        "device-ordinal-as-str",
        lambda k: Device("0"),
        TypeError,
        r"a device ordinal is an int \(0 for the first GPU\)",
        r"not str '0'",
    ),
    Case(
        "context-on-device-99",
        lambda k: k.keep(Context.create(99)),
        ValueError,
        r"no GPU with ordinal 99",
        r"CUDA_VISIBLE_DEVICES",
    ),
    # pinned and managed memory
    Case(
        "pinned-device-pointer-without-devicemap",
        lambda k: k.keep(PinnedBuffer(N)).device_ptr,
        ValueError,
        r"has a device address",
        r"HostAllocFlag\.DEVICEMAP",
    ),
    Case(
        "managed-prefetch-to-nowhere",
        lambda k: k.keep(ManagedBuffer(N)).prefetch("gpu"),
        ValueError,
        r"not 'gpu'",
        r"a location is a Device, a device ordinal or 'host'",
    ),
    # the shipped kernels (ops) check shapes and dtypes before launching
    Case(
        "ops-wrong-dtype",
        lambda k: ops.vector_add(k.dev(), k.dev(), k.dev(N, np.float64)),
        TypeError,
        r"float64",
        r"this kernel works on float32 buffers",
    ),
    Case(
        "ops-wrong-size",
        lambda k: ops.vector_add(k.dev(10), k.dev(10), k.dev(11)),
        ValueError,
        r"got \[10, 10, 11\]",  # the sizes in the order the buffers were passed: c, a, b
        r"must have the same number of elements",
    ),
    Case(
        "ops-matmul-shapes",
        lambda k: ops.matmul(k.dev((4, 4)), k.dev((4, 3)), k.dev((4, 4))),
        ValueError,
        r"got \(4, 3\), \(4, 4\), \(4, 4\)",
        r"matmul needs a\[M,K\], b\[K,N\], c\[M,N\]",
    ),
    Case(
        "ops-transpose-shapes",
        lambda k: ops.transpose(k.dev((4, 5)), k.dev((4, 5))),
        ValueError,
        r"got \(4, 5\) and \(4, 5\)",
        r"transpose needs x\[R,C\] and out\[C,R\]",
    ),
    Case(
        "ops-sum-partials-too-small",
        lambda k: ops.sum_partials(k.dev(1), k.dev(), 4),
        ValueError,
        r"out has 1 elements",
        r"4 partial sums need that many",
    ),
]


def double_closed(obj: Any) -> Any:
    obj.close()
    obj.close()
    return obj


def param(case: Case) -> Any:
    marks = []
    if case.gap is not None:
        marks.append(pytest.mark.xfail(raises=case.gap.failure, strict=True, reason=case.gap.proposal))
    return pytest.param(case, id=case.id, marks=marks)


# --- running a case -------------------------------------------------------------------------------------------
def run_case(case: Case, kit: Kit) -> None:
    calls = io.StringIO()  # every driver call the case makes: a refused case must not reach cuLaunchKernel
    try:
        with trace(calls):
            case.provoke(kit)
    except Exception as exc:
        if case.error is None:  # an allowed input must work
            raise WronglyRefusedError(f"{case.id}: refused with {type(exc).__name__}: {exc}") from exc
        if not isinstance(exc, case.error):
            raise WrongTypeError(f"{case.id}: expected {case.error}, got {type(exc).__name__}: {exc}") from exc
        if not case.launches:
            # "cuLaunchKernel" matches both rows, cuLaunchKernel( and the cuLaunchKernelEx( launches use
            assert "cuLaunchKernel" not in calls.getvalue(), f"{case.id}: a kernel was launched before the error"
        text = str(exc)
        if not re.search(case.problem, text):
            raise WrongMessageError(
                f"{case.id}: the message does not name the problem /{case.problem}/:\n{text}"
            ) from exc
        if case.check is not None:
            case.check(exc)
        if not re.search(case.fix, text):
            raise MissingHintError(f"{case.id}: the message names no fix /{case.fix}/:\n{text}") from exc
        assert re.search(case.pattern, text)
        return
    if case.error is not None:
        raise NotCaughtError(f"{case.id}: expected {case.error}, but nothing was raised")


@dataclass(frozen=True)
class Snapshot:
    free: int
    children: list[str]


def snapshot(ctx: Context) -> Snapshot:
    gc.collect()  # objects dropped without close() free their memory through weakref.finalize
    ctx.synchronize()
    return Snapshot(ctx.mem_info()[0], sorted(repr(c) for c in ctx.children))


@pytest.fixture(scope="module")
def loaded() -> dict[str, Function]:
    """The shipped kernels, loaded once; and every kind of object made once, so first-use costs are paid."""
    ctx = default_context()
    fns = {
        name: ops.kernel(stem, name, ctx)
        for stem, name in [
            ("vector_add", "vector_add"),
            ("saxpy", "saxpy"),
            ("transpose", "transpose_naive"),
            ("transpose", "transpose_padded"),
            ("matmul", "matmul"),
            ("reduce", "warp_reduce_sum"),
            ("elementwise", "gelu"),
            ("elementwise", "bias_relu"),
        ]
    }
    for nbytes in (1, 4096, MIB):  # the driver's sub-allocator pools
        DeviceBuffer.empty(nbytes, np.uint8).close()
    for make in (lambda: PinnedBuffer(16), lambda: ManagedBuffer(16), Stream, Event, lambda: Context.create(0)):
        make().close()
    Module(kernels.ptx_path("vector_add")).close()
    return fns


@pytest.fixture
def kit(loaded: dict[str, Function]) -> Iterator[Kit]:
    ctx = default_context()
    before = snapshot(ctx)
    with contextlib.ExitStack() as stack:
        yield Kit(ctx, np.random.default_rng(), stack, loaded)
    after = snapshot(ctx)
    # New open objects are leaks. (Objects may also *disappear*: one made by an earlier test dies when the
    # last reference to it goes -- e.g. the context's last_launch moving on to another kernel.)
    leaked = Counter(after.children) - Counter(before.children)
    assert not leaked, f"objects left open: {sorted(leaked.elements())}"
    assert after.free >= before.free - LEAK_TOLERANCE, (
        f"device memory leaked: {(before.free - after.free) / MIB:.1f} MiB (free {before.free} -> {after.free})"
    )


@pytest.mark.parametrize("case", [param(case) for case in CASES])
def test_bad_input(case: Case, kit: Kit) -> None:
    run_case(case, kit)
