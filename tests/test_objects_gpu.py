"""Layer 2 on a real GPU: devices, contexts, buffers, streams, events, modules and checked launches."""

from __future__ import annotations

import ctypes
import gc
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import run_python

import rawcuda
from rawcuda import Context, Device, DeviceBuffer, Event, ManagedBuffer, Module, PinnedBuffer, Stream
from rawcuda.context import default_context
from rawcuda.ffi.attributes import DeviceAttribute, FunctionAttribute
from rawcuda.ffi.constants import CtxFlag, HostAllocFlag, StreamFlag
from rawcuda.kernelargs import ArgumentError

pytestmark = pytest.mark.gpu

BLOCK = 256
MIB = 1 << 20
NAN32 = np.float32(np.nan)


def grid_for(n: int, block: int = BLOCK) -> int:
    return max((n + block - 1) // block, 1)


@pytest.fixture(scope="module")
def vector_add() -> rawcuda.Function:
    return Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def run_vector_add(fn: rawcuda.Function, a: np.ndarray, b: np.ndarray, stream: Stream | None = None) -> np.ndarray:
    n = a.size
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.empty(n, np.float32)
    dc.fill(NAN32)
    fn.launch(grid_for(n), BLOCK, dc, da, db, n, stream=stream)
    out = dc.to_array(stream=stream)
    for buf in (da, db, dc):
        buf.close()
    return out


# --- Device / Context ------------------------------------------------------------------------------------
def test_device_queries() -> None:
    dev = Device(0)
    assert Device.count() >= 1 and dev == Device(0) and hash(dev) == hash(Device(0))
    assert dev.name and dev.compute_capability >= (7, 0) and dev.total_memory > 1 << 30
    assert dev.uuid.int != 0 and ":" in dev.pci_bus_id
    assert dev.attribute(DeviceAttribute.WARP_SIZE) == 32 == dev.attributes()["WARP_SIZE"]
    assert dev.multiprocessor_count > 0 and dev.max_threads_per_block == 1024
    with pytest.raises(ValueError, match="no GPU with ordinal 99"):
        Device(99)


def test_default_context_is_the_primary_context() -> None:
    ctx = default_context()
    assert ctx.is_primary and not ctx.closed and ctx is default_context()
    free, total = ctx.mem_info()
    assert 0 < free <= total == ctx.device.total_memory
    least, greatest = ctx.stream_priority_range
    assert greatest <= least


def test_with_context_restores_the_previous_context_even_on_error() -> None:
    outer = default_context()
    created = Context.create(0, CtxFlag.MAP_HOST | CtxFlag.SCHED_BLOCKING_SYNC)
    try:
        assert created.flags & CtxFlag.MAP_HOST and created.flags & CtxFlag.SCHED_BLOCKING_SYNC
        outer.activate()  # reading created.flags made `created` current (methods activate their context)
        current = ctypes.c_void_p()
        with pytest.raises(RuntimeError, match="boom"), created:
            rawcuda.cu.cuCtxGetCurrent(ctypes.byref(current))
            assert current.value == created.handle
            raise RuntimeError("boom")
        rawcuda.cu.cuCtxGetCurrent(ctypes.byref(current))
        assert current.value == outer.handle
    finally:
        created.close()
    assert created.closed
    created.close()  # idempotent


def test_closing_a_context_closes_its_children_first(rng: np.random.Generator) -> None:
    ctx = Context.create(0)
    buf = DeviceBuffer.from_array(rng.standard_normal(1000, dtype=np.float32), context=ctx)
    stream, event = Stream(ctx), Event(ctx)
    module = Module(rawcuda.kernels.ptx_path("vector_add"), context=ctx)
    fn = module.function("vector_add")
    pinned = PinnedBuffer(16, np.float32, context=ctx)
    assert set(ctx.children) >= {buf, stream, event, module, pinned}
    ctx.close()
    for obj in (buf, stream, event, module, pinned, fn):
        assert obj.closed, obj
    with pytest.raises(rawcuda.ClosedError):
        buf.to_array()
    with pytest.raises(rawcuda.ClosedError):
        fn.launch(1, 1, buf, buf, buf, 0)
    with pytest.raises(rawcuda.ClosedError):
        DeviceBuffer(10, context=ctx)
    with pytest.raises(rawcuda.ClosedError):
        stream.synchronize()


def test_exceptions_inside_with_blocks_free_everything() -> None:
    ctx = default_context()
    ctx.synchronize()
    before, _ = ctx.mem_info()
    with pytest.raises(KeyError), DeviceBuffer(256 * MIB, np.uint8) as big, Stream() as s, Event() as e:
        e.record(s)
        raise KeyError("inside")
    assert big.closed and s.closed and e.closed
    after, _ = ctx.mem_info()
    assert abs(after - before) < 64 * MIB  # the 256 MiB came back


def test_every_class_works_from_a_second_thread(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n = 100_003
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)  # made on the main thread
    results: dict[str, object] = {}

    def worker() -> None:
        try:
            s, start, end = Stream(), Event(), Event()
            dc = DeviceBuffer.empty(n)
            dc.fill(NAN32, stream=s)
            start.record(s)
            vector_add.launch(grid_for(n), BLOCK, dc, da, db, n, stream=s)
            end.record(s)
            results["out"] = dc.to_array(stream=s)
            results["ms"] = start.elapsed_ms(end)
            pinned = PinnedBuffer(n, np.float32)
            dc.copy_to(pinned, stream=s)
            s.synchronize()
            results["pinned"] = pinned.array.copy()
            for obj in (dc, s, start, end, pinned):
                obj.close()
        except BaseException as exc:  # surface it in the main thread
            results["error"] = exc

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in results, results.get("error")
    np.testing.assert_array_equal(results["out"], a + b)
    np.testing.assert_array_equal(results["pinned"], a + b)
    assert results["ms"] >= 0
    da.close()
    db.close()


# --- memory ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 1, 1_000_003])
def test_vector_add_with_classes(vector_add: rawcuda.Function, rng: np.random.Generator, n: int) -> None:
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_array_equal(run_vector_add(vector_add, a, b), a + b)
    with Stream(flags=StreamFlag.NON_BLOCKING) as s:
        np.testing.assert_array_equal(run_vector_add(vector_add, a, b, stream=s), a + b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int32, np.int64, np.complex64])
def test_round_trip_fill_and_memset(rng: np.random.Generator, dtype: type) -> None:
    host = (rng.standard_normal((37, 11)) * 50).astype(dtype)
    buf = DeviceBuffer.from_array(host)
    np.testing.assert_array_equal(buf.to_array(), host)
    value = np.array(3, dtype)
    buf.fill(value)
    np.testing.assert_array_equal(buf.to_array(), np.full(host.shape, value))
    buf.memset(0)
    np.testing.assert_array_equal(buf.to_array(), np.zeros(host.shape, dtype))
    z = DeviceBuffer.zeros(5, dtype)
    np.testing.assert_array_equal(z.to_array(), np.zeros(5, dtype))
    buf.close()
    z.close()


def test_copies_are_checked_before_moving_a_byte(rng: np.random.Generator) -> None:
    buf = DeviceBuffer.from_array(rng.standard_normal(10, dtype=np.float32))
    with pytest.raises(TypeError, match="holds float32"):
        buf.copy_from(np.zeros(10, np.float64))
    with pytest.raises(ValueError, match=r"shape \(11,\)"):
        buf.copy_from(np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="C-contiguous, writeable"):
        buf.copy_to(np.zeros(20, np.float32)[::2])
    with pytest.raises(TypeError, match="cannot fill"):
        DeviceBuffer.empty(3, np.int32).fill(1.5)
    with pytest.raises(ValueError, match="extents must be >= 0"):
        DeviceBuffer.empty(-1)
    buf.close()


def test_views_at_an_offset(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n, start, length = 1000, 100, 300
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(n)
    dc.fill(NAN32)
    part = dc[start:start + length]
    assert part.shape == (length,) and part.ptr == dc.ptr + start * 4
    vector_add.launch(grid_for(length), BLOCK, part, da.view(start), db.view(start, length), length)
    out = dc.to_array()
    np.testing.assert_array_equal(out[start:start + length], (a + b)[start:start + length])
    assert np.isnan(out[:start]).all() and np.isnan(out[start + length:]).all()
    with pytest.raises(ValueError, match="needs"):
        dc.view(900, 200)
    dc.close()
    assert part.closed
    with pytest.raises(rawcuda.ClosedError):
        vector_add.launch(1, 1, part, da, db, 1)
    da.close()
    db.close()


def test_async_copies_keep_the_host_array_alive(rng: np.random.Generator) -> None:
    n = 4 * MIB
    with Stream() as s:
        buf = DeviceBuffer.empty(n)
        host = rng.standard_normal(n, dtype=np.float32)
        expected = host.copy()
        buf.copy_from(host, stream=s)
        del host  # only the stream's hold keeps it alive now
        gc.collect()
        np.testing.assert_array_equal(buf.to_array(stream=s), expected)
        iface = buf.__cuda_array_interface__
        assert iface["stream"] == s.handle and iface["data"] == (buf.ptr, False) and iface["version"] == 3
        buf.close()


def test_pinned_buffer_numpy_view_survives_close() -> None:
    p = PinnedBuffer((4, 4), np.float32, flags=HostAllocFlag.PORTABLE)
    view = p.array
    view[...] = 7.0
    p.close()
    assert view.sum() == 7.0 * 16  # still valid memory: freed only when the view dies
    with pytest.raises(rawcuda.ClosedError):
        p.array  # noqa: B018


def test_managed_buffer_host_and_kernel(vector_add: rawcuda.Function, rng: np.random.Generator) -> None:
    n = 10_007
    a, b, c = ManagedBuffer(n), ManagedBuffer(n), ManagedBuffer(n)
    a.array[:] = rng.standard_normal(n, dtype=np.float32)
    b.array[:] = rng.standard_normal(n, dtype=np.float32)
    c.array[:] = NAN32
    a.prefetch(Device(0))
    vector_add.launch(grid_for(n), BLOCK, c, a, b, n)
    default_context().synchronize()
    np.testing.assert_array_equal(c.array, a.array + b.array)
    for m in (a, b, c):
        m.close()


# --- streams and events ----------------------------------------------------------------------------------
def test_stream_priority_is_validated_against_the_device_range() -> None:
    least, greatest = default_context().stream_priority_range
    with Stream(priority=greatest) as s:
        assert s.priority == greatest
    with pytest.raises(ValueError, match="outside this device's range"):
        Stream(priority=least + 1)


def test_event_rules() -> None:
    e = Event()
    with pytest.raises(ValueError, match="never recorded"):
        e.synchronize()
    quiet = Event(timing=False).record()
    with pytest.raises(ValueError, match="timing=False"):
        quiet.elapsed_ms(Event().record())
    start = Event().record()
    end = Event().record()
    assert end.query() is True or end.synchronize() is None
    assert start.elapsed_ms(end) >= 0
    for ev in (e, quiet, start, end):
        ev.close()


# --- modules and launches --------------------------------------------------------------------------------
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


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("c", "a", "b"), ArgumentError, "takes 4 argument"),
        (("c", "a", "b", 10, 11), ArgumentError, "takes 4 argument"),
        (("c", "host", "b", 10), ArgumentError, "host numpy array"),
        (("c", "a", "b", 1.5), ArgumentError, "float"),
        (("c", "a", "b", np.int32(10)), ArgumentError, "wrong width"),
        (("c", "a", "b", -(1 << 64)), ArgumentError, "does not fit"),
        (("closed", "a", "b", 10), rawcuda.ClosedError, "closed"),
    ],
)
def test_bad_launch_arguments_are_caught_before_the_launch(vector_add: rawcuda.Function, args: tuple,
                                                           error: type, match: str) -> None:
    n = 10
    bufs = {"a": DeviceBuffer.zeros(n), "b": DeviceBuffer.zeros(n), "c": DeviceBuffer.zeros(n),
            "closed": DeviceBuffer.zeros(n), "host": np.zeros(n, np.float32)}
    bufs["closed"].close()
    bufs["c"].fill(NAN32)
    real = tuple(bufs.get(a, a) if isinstance(a, str) else a for a in args)
    with pytest.raises(error, match=match):
        vector_add.launch(1, BLOCK, *real)
    default_context().synchronize()
    assert np.isnan(bufs["c"].to_array()).all()  # nothing ran


def test_bad_launch_configurations(vector_add: rawcuda.Function) -> None:
    buf = DeviceBuffer.zeros(4)
    with pytest.raises(ValueError, match="exceeds the device limit 1024"):
        vector_add.launch(1, 2048, buf, buf, buf, 4)
    with pytest.raises(ValueError, match="2048 threads is too large"):
        vector_add.launch(1, (32, 32, 2), buf, buf, buf, 4)
    with pytest.raises(ValueError, match=">= 1"):
        vector_add.launch(0, BLOCK, buf, buf, buf, 4)
    with pytest.raises(TypeError, match="tuple of 1 to 3"):
        vector_add.launch(1.5, BLOCK, buf, buf, buf, 4)
    vector_add.launch(1, BLOCK, buf, buf, buf, 4)
    with pytest.raises(TypeError, match="tuple of 1 to 3"):
        vector_add.launch(1.5, BLOCK, buf, buf, buf, 4)  # still refused once grid=1 is cached
    # Whole numbers of any type mean the same launch (a value-keyed cache could not tell them apart).
    vector_add.launch(np.int64(1), (np.int32(BLOCK),), buf, buf, buf, 4)
    vector_add.launch(1.0, float(BLOCK), buf, buf, buf, 4, shared_mem=0.0)
    with pytest.raises(ValueError, match="exceed"):
        vector_add.launch(1, BLOCK, buf, buf, buf, 4, shared_mem=10 * MIB)
    buf.close()


def test_reduction_with_more_than_48k_dynamic_shared_memory(rng: np.random.Generator) -> None:
    fn = Module(rawcuda.kernels.ptx_path("reduce")).function("warp_reduce_sum")
    n = 1_000_003
    x = rng.standard_normal(n, dtype=np.float32)
    dx, partial, total = DeviceBuffer.from_array(x), DeviceBuffer.empty(1), DeviceBuffer.empty(1)
    partial.fill(NAN32)
    shared = 64 * 1024  # more than the reduction needs, and more than the 48 KiB default limit
    fn.launch(1, BLOCK, partial, dx, n, shared_mem=shared)
    expected = x.astype(np.float64).sum()
    assert abs(float(partial.to_array()[0]) - expected) <= 1e-4 * np.abs(x).sum()
    total.close()


def test_repeated_launches_reuse_the_packed_block(vector_add: rawcuda.Function) -> None:
    buf = DeviceBuffer.zeros(8)
    vector_add.launch(1, 32, buf, buf, buf, 8)
    packed = vector_add._packed
    vector_add.launch(1, 32, buf, buf, buf, 8)
    assert vector_add._packed is packed and packed.args is not None  # same objects: the same block, unchanged
    other = DeviceBuffer.zeros(8)
    vector_add.launch(1, 32, other, buf, buf, 8)
    assert vector_add._packed is not packed and packed.array[0] == ctypes.addressof(packed.slots[0])  # old one intact
    buf.close()
    with pytest.raises(rawcuda.ClosedError):
        vector_add.launch(1, 32, buf, other, other, 8)  # a close invalidates every cached pack
    other.close()


def test_cubin_parameters_come_from_the_driver(tmp_path: Path, rng: np.random.Generator) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is needed to build a cubin")
    major, minor = Device(0).compute_capability
    cubin = tmp_path / "vector_add.cubin"
    source = Path(__file__).resolve().parent.parent / "kernels" / "vector_add.cu"
    subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", "-o", str(cubin), str(source)], check=True)
    m = Module(cubin)
    fn = m.function("vector_add")
    assert m.kind == "cubin" and [p.size for p in fn.params] == [8, 8, 8, 8]
    n = 5000
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_array_equal(run_vector_add(fn, a, b), a + b)
    m.close()


# --- sharing and leaks ---------------------------------------------------------------------------------------
def test_torch_and_cupy_share_rawcuda_memory(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    host = rng.standard_normal(1000, dtype=np.float32)
    buf = DeviceBuffer.from_array(host)
    t = torch.as_tensor(buf, device="cuda")
    c = cupy.asarray(buf)
    assert t.data_ptr() == buf.ptr == c.data.ptr
    t.mul_(2.0)  # write through torch ...
    torch.cuda.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(c), host * 2)  # ... read through CuPy
    c += 1.0  # write through CuPy ...
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(buf.to_array(), host * 2 + 1)  # ... read through rawcuda
    del t, c
    buf.close()


def test_alloc_free_and_module_cycles_return_to_baseline() -> None:
    ctx = default_context()
    ctx.synchronize()
    gc.collect()
    before, _ = ctx.mem_info()
    for _ in range(10_000):
        DeviceBuffer.empty(MIB, np.uint8).close()
    image = rawcuda.kernels.ptx_path("vector_add").read_bytes()
    for _ in range(1_000):
        Module(image).close()
    gc.collect()
    after, _ = ctx.mem_info()
    assert abs(after - before) <= 2 * MIB, (before, after)


SHUTDOWN_SCRIPT = """
import numpy as np, rawcuda
from rawcuda import Context, DeviceBuffer, Stream, Event, Module, PinnedBuffer, ManagedBuffer
order = {order!r}
ctx = Context.create(0) if "created" in order else rawcuda.default_context()
objs = {{
    "buffer": lambda: DeviceBuffer.from_array(np.arange(1000, dtype=np.float32), context=ctx),
    "stream": lambda: Stream(ctx),
    "event": lambda: Event(ctx).record(),
    "module": lambda: Module(rawcuda.kernels.ptx_path("vector_add"), context=ctx),
    "pinned": lambda: PinnedBuffer(100, context=ctx),
    "managed": lambda: ManagedBuffer(100, context=ctx),
}}
live = [objs[name]() for name in order if name in objs]
fn = live[-1].function("vector_add") if order[-1] == "module" else None
if "close-context" in order:
    ctx.close()
print("exiting with", len(live), "live objects")
"""


@pytest.mark.parametrize("order", [
    ["buffer", "stream", "event", "module", "pinned", "managed"],
    ["module", "pinned", "event", "stream", "buffer"],
    ["created", "buffer", "stream", "module"],
    ["created", "managed", "event", "close-context"],
    ["created", "pinned", "buffer", "close-context", "module"],
])
def test_exit_with_live_objects_is_clean(order: list[str]) -> None:
    if order[-1] == "module" and "close-context" in order:
        order = [o for o in order if o != "module"]
    proc = run_python(SHUTDOWN_SCRIPT.format(order=order))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "exiting with" in proc.stdout


def test_bound_launch_repeats_and_rechecks_after_a_close(vector_add: rawcuda.Function,
                                                         rng: np.random.Generator) -> None:
    n = 4099
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b), DeviceBuffer.empty(n)
    dc.fill(NAN32)
    launch = vector_add.bind(grid_for(n), BLOCK, dc, da, db, n)
    launch()
    np.testing.assert_array_equal(dc.to_array(), a + b)
    launch.update(dc, dc, db, n)  # c = c + b
    launch()
    launch()
    np.testing.assert_array_equal(dc.to_array(), a + b + b + b)
    with pytest.raises(ArgumentError, match="takes 4 argument"):
        launch.update(dc, da)
    launch.update(dc, da, db, n)
    db.close()
    with pytest.raises(rawcuda.ClosedError):
        launch()  # re-checked after the close: never a launch on freed memory
    da.close()
    dc.close()
