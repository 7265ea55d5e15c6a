"""DLPack without a GPU: the structs against dlpack.h, both halves of the protocol against numpy's own C code.

numpy is a DLPack producer and consumer written in C, so it checks rawcuda's ctypes layout from the other side:
rawcuda reads numpy's capsules field by field, and numpy reads rawcuda's (made over host memory that says it is
pinned -- numpy reads kDLCUDAHost in place). The lifetime rules are checked by counting: each export is given
back exactly once, whether the consumer calls the deleter or drops the capsule unconsumed.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import sysconfig
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rawcuda
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.guards import contextregistry
from rawcuda.protocols import dlpack, dlpackread
from rawcuda.protocols import dlpackabi as ffi
from rawcuda.protocols.dlpackabi import DLDataTypeCode, DLDeviceType, DLPackFlag
from rawcuda.protocols.loans import Loan, Loans
from rawcuda.testing import leaks
from rawcuda.testing.leaks import LeakCheck
from tests.helpers import MAPPED_STREAM_NUMBER as STREAM

HOST = DLDeviceType.CUDA_HOST


# --- the structs: sizes and offsets as dlpack.h lays them out on a 64-bit machine -------------------------------------
@pytest.mark.parametrize(
    ("struct", "size", "offsets"),
    [
        (ffi.DLDevice, 8, {"device_type": 0, "device_id": 4}),
        (ffi.DLDataType, 4, {"code": 0, "bits": 1, "lanes": 2}),
        (
            ffi.DLTensor,
            48,
            {"data": 0, "device": 8, "ndim": 16, "dtype": 20, "shape": 24, "strides": 32, "byte_offset": 40},
        ),
        (ffi.DLManagedTensor, 64, {"dl_tensor": 0, "manager_ctx": 48, "deleter": 56}),
        (ffi.DLPackVersion, 8, {"major": 0, "minor": 4}),
        (
            ffi.DLManagedTensorVersioned,
            80,
            {"version": 0, "manager_ctx": 8, "deleter": 16, "flags": 24, "dl_tensor": 32},
        ),
    ],
)
def test_struct_layout(struct: Any, size: int, offsets: dict[str, int]) -> None:
    assert ctypes.sizeof(ctypes.c_void_p) == 8, "the offsets below are a 64-bit machine's"
    assert ctypes.sizeof(struct) == size
    assert {name: getattr(struct, name).offset for name, _ in struct._fields_} == offsets


def test_constants_are_dlpack_h_s() -> None:
    assert [
        int(k) for k in (DLDeviceType.CPU, DLDeviceType.CUDA, DLDeviceType.CUDA_HOST, DLDeviceType.CUDA_MANAGED)
    ] == [
        1,
        2,
        3,
        13,
    ]
    assert [int(c) for c in DLDataTypeCode] == [0, 1, 2, 3, 4, 5, 6]
    assert (int(DLPackFlag.READ_ONLY), int(DLPackFlag.IS_COPIED)) == (1, 2)
    assert (ffi.STREAM_LEGACY, ffi.STREAM_PER_THREAD, ffi.STREAM_NO_SYNC, ffi.STREAM_AMBIGUOUS) == (1, 2, -1, 0)


def test_the_capsule_api_rows_name_real_functions() -> None:
    names = [row.name for row in ffi.CAPSULE_API]
    assert names == [
        "PyCapsule_New",
        "PyCapsule_GetPointer",
        "PyCapsule_IsValid",
        "PyCapsule_SetName",
        "PyCapsule_GetName",
        "Py_IncRef",
    ]
    for row in ffi.CAPSULE_API:
        assert hasattr(ctypes.pythonapi, row.name)
        assert len(row.argtypes) == row.prototype.count(",") + 1  # one ctypes type per C parameter
    # Bound as fresh function objects: the shared ctypes.pythonapi attribute keeps whatever others set on it.
    assert ffi.capsule_new is not ctypes.pythonapi.PyCapsule_New


def c_types(params: str) -> list[str]:
    """``"PyObject *capsule, const char *name"`` -> ``["PyObject*", "constchar*"]``: the types, names dropped."""
    types = []
    for param in params.split(","):
        tokens = re.findall(r"\w+|\*", param)
        if len(tokens) >= 2 and tokens[-1] != "*":
            tokens.pop()  # the parameter's name
        types.append("".join(tokens))
    return types


def test_the_capsule_api_rows_match_the_python_headers() -> None:
    # Like the driver table against cuda.h: each row's C prototype is the one the interpreter was built with.
    include = Path(sysconfig.get_paths()["include"])
    headers = " ".join(p.read_text() for p in (include / "pycapsule.h", include / "object.h") if p.is_file())
    if "PyCapsule_New" not in headers:
        pytest.skip(f"no Python C headers under {include}")
    pointer_types = (ctypes.c_void_p, ctypes.c_char_p, ctypes.py_object)
    for row in ffi.CAPSULE_API:
        found = re.search(rf"PyAPI_FUNC\(([^)]*)\)\s*{row.name}\s*\(([^)]*)\)", headers)
        assert found is not None, row.name
        ours = re.match(rf"(.*?)\b{row.name}\s*\((.*)\)", row.prototype)
        assert ours is not None
        assert found.group(1).replace(" ", "") == ours.group(1).replace(" ", ""), row.name
        assert c_types(found.group(2)) == c_types(ours.group(2)), row.name
        for c_type, ctype in zip(c_types(ours.group(2)), row.argtypes, strict=True):
            assert (ctype in pointer_types) == c_type.endswith("*") or c_type == "PyCapsule_Destructor", row.name


def test_capsule_names_are_immortal() -> None:
    # C code keeps the name's address: the bytes object must never be freed (one reference is never given back).
    for names in (ffi.VERSIONED_NAMES, ffi.LEGACY_NAMES):
        for name in (names.unused, names.used):
            assert sys.getrefcount(name) >= 3


# --- reading numpy's capsules (rawcuda as the consumer) ---------------------------------------------------------------
def test_reading_numpy_s_versioned_capsule() -> None:
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    tensor = dlpackread.read(a.__dlpack__(max_version=(1, 0)))
    assert tensor.ptr == a.ctypes.data
    assert (tensor.shape, tensor.dtype, tensor.device) == ((2, 3, 4), np.dtype(np.float64), (int(DLDeviceType.CPU), 0))
    assert tensor.versioned and not tensor.read_only and not tensor.copied
    assert tensor.nbytes == a.nbytes


def test_reading_numpy_s_legacy_capsule_and_the_read_only_flag() -> None:
    a = np.arange(5, dtype=np.int16)
    assert not dlpackread.read(a.__dlpack__()).versioned
    a.flags.writeable = False
    assert dlpackread.read(a.__dlpack__(max_version=(1, 0))).read_only


def test_byte_offset_and_c_contiguous_slices() -> None:
    a = np.arange(40, dtype=np.int32).reshape(10, 4)
    assert dlpackread.read(a[3:7].__dlpack__(max_version=(1, 0))).ptr == a[3:7].ctypes.data
    assert dlpackread.read(np.ones((3, 1))[:, :].__dlpack__(max_version=(1, 0))).shape == (3, 1)


@pytest.mark.parametrize("view", [lambda a: a[:, ::2], lambda a: a.T, lambda a: a[::2]])
def test_strided_arrays_are_refused(view: Any) -> None:
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(BufferError, match=r"not C-contiguous .*contiguous\(\)"):
        dlpackread.read(view(a).__dlpack__(max_version=(1, 0)))


ELEMENT_TYPES = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
ELEMENT_TYPES += (np.float16, np.float32, np.float64, np.complex64, np.complex128)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
def test_every_element_type_round_trips(dtype: Any) -> None:
    dt = np.dtype(dtype)
    assert dlpackread.numpy_dtype(dlpack.dl_data_type(dt)) == dt
    assert dlpackread.read(np.zeros(3, dt).__dlpack__(max_version=(1, 0))).dtype == dt


@pytest.mark.parametrize(
    ("code", "bits", "lanes", "match"),
    [
        (DLDataTypeCode.BFLOAT, 16, 1, "bfloat16 has no numpy dtype"),
        (DLDataTypeCode.FLOAT, 32, 4, "4 lanes"),
        (DLDataTypeCode.INT, 128, 1, "code 0 with 128 bits"),
        (DLDataTypeCode.OPAQUE_HANDLE, 64, 1, "code 3"),
        (DLDataTypeCode.FLOAT, 128, 1, "IEEE binary128"),  # not numpy's float128 (x87 extended on x86-64)
        (DLDataTypeCode.COMPLEX, 0, 1, "code 5 with 0 bits"),  # what clongdouble's 256 bits wrap to in a uint8
        (DLDataTypeCode.COMPLEX, 256, 1, "code 5 with 0 bits"),  # (ctypes wraps 256 to 0 as C does)
        (DLDataTypeCode.INT, 12, 1, "code 0 with 12 bits"),
    ],
)
def test_element_types_numpy_lacks_are_refused(code: int, bits: int, lanes: int, match: str) -> None:
    with pytest.raises(BufferError, match=match):
        dlpackread.numpy_dtype(ffi.DLDataType(code, bits, lanes))


@pytest.mark.parametrize("dtype", [[("x", "<f4"), ("y", "<i4")], "M8[s]", ">f4", "S3"])
def test_dtypes_dlpack_cannot_describe_are_refused_on_export(dtype: Any) -> None:
    with pytest.raises(BufferError, match="DLPack"):
        dlpack.dl_data_type(np.dtype(dtype))


_CODES = {"f": DLDataTypeCode.FLOAT, "c": DLDataTypeCode.COMPLEX}


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_long_double_is_refused_both_ways(dtype: Any) -> None:
    dt = np.dtype(dtype)
    if dt.itemsize <= np.dtype(np.float64 if dt.kind == "f" else np.complex128).itemsize:
        pytest.skip(f"{dt} is a plain double on this platform: DLPack describes it faithfully")
    with pytest.raises(BufferError, match="no faithful DLPack type"):
        dlpack.dl_data_type(dt)
    with pytest.raises(BufferError):  # what the export would have claimed: refused on adoption too
        dlpackread.numpy_dtype(ffi.DLDataType(DLDataTypeCode(_CODES[dt.kind]), (dt.itemsize * 8) % 256, 1))


# --- crafted capsules: what numpy would never make ------------------------------------------------------------------
class Crafted:
    """A versioned tensor built by hand, its deleter counting calls."""

    def __init__(
        self,
        *,
        major: int = 1,
        ndim: int = 1,
        shape: tuple[int, ...] | None = (4,),
        dtype: Any = None,
        byte_offset: int = 16,
    ) -> None:
        self.calls = 0
        self.extents = (ctypes.c_int64 * max(len(shape or ()), 1))(*(shape or ()))
        self.callback = ffi.DELETER(self._deleted)
        tensor = ffi.DLTensor(
            data=0x7000_0000,
            device=ffi.DLDevice(DLDeviceType.CUDA, 0),
            ndim=ndim,
            dtype=dtype or ffi.DLDataType(DLDataTypeCode.FLOAT, 32, 1),
            shape=ctypes.cast(self.extents if shape is not None else None, ctypes.POINTER(ctypes.c_int64)),
            strides=None,
            byte_offset=byte_offset,
        )
        deleter = ctypes.cast(self.callback, ctypes.c_void_p).value
        self.struct = ffi.DLManagedTensorVersioned(ffi.DLPackVersion(major, 0), None, deleter, 0, tensor)
        self.capsule = ffi.capsule_new(ctypes.addressof(self.struct), ffi.VERSIONED_NAMES.unused, None)

    def _deleted(self, address: int) -> None:
        assert address == ctypes.addressof(self.struct)
        self.calls += 1


def test_a_crafted_tensor_is_read_with_its_byte_offset() -> None:
    crafted = Crafted(shape=(4,))
    tensor = dlpackread.read(crafted.capsule)
    assert (tensor.ptr, tensor.shape, tensor.device) == (0x7000_0000 + 16, (4,), (int(DLDeviceType.CUDA), 0))


@pytest.mark.parametrize(
    ("crafted", "match"),
    [
        (lambda: Crafted(major=2), "DLPack 2.0 tensor"),
        (lambda: Crafted(ndim=100), "ndim=100"),
        (lambda: Crafted(shape=(-3,)), "negative extent"),
        (lambda: Crafted(shape=None), "NULL shape pointer"),  # (before: ctypes' ValueError, NULL pointer access)
        (lambda: Crafted(byte_offset=(1 << 64) - 8), "past any 64-bit address"),
        (lambda: Crafted(dtype=ffi.DLDataType(DLDataTypeCode.BFLOAT, 16, 1)), "bfloat16"),
    ],
)
def test_a_bad_tensor_is_refused_and_left_unconsumed(crafted: Any, match: str) -> None:
    made = crafted()
    with pytest.raises(BufferError, match=match):
        dlpackread.read(made.capsule)
    assert ffi.capsule_get_name(made.capsule) == ffi.VERSIONED_NAMES.unused and made.calls == 0


def test_taking_renames_the_capsule_and_the_deleter_runs_exactly_once() -> None:
    crafted = Crafted()
    loan = dlpackread.take(crafted.capsule)
    assert ffi.capsule_get_name(crafted.capsule) == b"used_dltensor_versioned" and crafted.calls == 0
    with pytest.raises(BufferError, match="consumed already"):
        dlpackread.read(crafted.capsule)
    loan.end()
    loan.end()
    assert crafted.calls == 1 and loan.ended


def test_taking_numpy_s_capsule_holds_the_array_until_the_loan_ends() -> None:
    a = np.arange(1000.0)
    before = sys.getrefcount(a)
    capsule = a.__dlpack__(max_version=(1, 0))
    loan = dlpackread.take(capsule)
    del capsule  # consumed: dropping it must not release numpy's hold (its destructor sees the new name)
    assert sys.getrefcount(a) == before + 1
    loan.end()
    assert sys.getrefcount(a) == before


def test_a_refused_capsule_is_released_by_its_producer() -> None:
    a = np.arange(10.0)
    before = sys.getrefcount(a)
    with pytest.raises(BufferError, match="host memory"):
        rawcuda.from_dlpack(a.__dlpack__(max_version=(1, 0)))  # (no driver is needed to refuse it)
    gc.collect()
    assert sys.getrefcount(a) == before


def test_not_a_capsule() -> None:
    with pytest.raises(TypeError, match="DLPack capsule"):
        dlpackread.names_of(object())
    with pytest.raises(BufferError, match="not a DLPack capsule"):
        dlpackread.names_of(ffi.capsule_new(0x1000, b"something_else", None))


# --- rawcuda's capsules read by numpy (rawcuda as the producer) -------------------------------------------------------
class FakeContext:
    """What Loans needs of a Context: hold() and call_held() (and what __dlpack_device__ reads: the device, and
    what an export asks: check_usable())."""

    device = type("FakeDevice", (), {"ordinal": 0})()

    def __init__(self) -> None:
        self.holds = 0

    def hold(self) -> None:
        self.holds += 1

    def call_held(self, release: Any, *args: Any) -> None:
        release(*args)
        self.holds -= 1

    def check_usable(self) -> None:  # an export asks first (a forked child's memory is the parent's)
        pass


class FakePending:
    def __init__(self) -> None:
        self.host_waits: int = 0
        self.device_waits: list[int] = []

    def synchronize(self) -> None:
        self.host_waits += 1

    def order_before(self, consumer: int) -> None:
        self.device_waits.append(consumer)


class HostMemory(dlpack.Exportable):
    """Host memory dressed as a rawcuda buffer (numpy owns it), exported through rawcuda's real code path."""

    def __init__(self, a: np.ndarray, kind: DLDeviceType = HOST) -> None:
        self.a, self.ptr, self.shape, self.dtype = a, a.ctypes.data, a.shape, a.dtype
        self.dlpack_device_type = kind
        self.pending, self.context, self.loans = FakePending(), FakeContext(), Loans()

    def check_open(self) -> None:
        pass

    def lend(self) -> Loan:
        return self.loans.lend(self.context)

    def dlpack_host_wait(self) -> Any:
        return self.pending.synchronize if self.dlpack_device_type != DLDeviceType.CUDA else None


@pytest.fixture(autouse=True)
def nothing_left_outstanding() -> Any:
    dlpack.sweep()
    before = dlpack.outstanding()
    yield
    gc.collect()
    dlpack.sweep()
    assert dlpack.outstanding() == before, "an export was never given back"


def test_numpy_reads_a_rawcuda_capsule_in_place(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 5)).astype(np.float32)
    memory = HostMemory(a)
    seen = np.from_dlpack(memory)
    assert seen.ctypes.data == a.ctypes.data and seen.flags.writeable and seen.shape == (3, 5)
    np.testing.assert_array_equal(seen, a)
    seen[1, 2] = 7.0
    assert a[1, 2] == 7.0
    assert memory.pending.host_waits == 1, "numpy is on the host: the producer must wait for pending copies first"
    assert memory.loans.outstanding == 1 and memory.context.holds == 1
    del seen  # numpy calls the deleter
    assert memory.loans.outstanding == 0 and memory.context.holds == 0


def test_zero_d_and_empty_exports() -> None:
    for a in (np.array(2.5), np.zeros((0, 3), np.int64)):
        seen = np.from_dlpack(HostMemory(a))
        assert seen.shape == a.shape and seen.dtype == a.dtype
        np.testing.assert_array_equal(seen, a)


def test_a_legacy_export_for_a_consumer_without_max_version() -> None:
    memory = HostMemory(np.arange(4.0))
    capsule = memory.__dlpack__()
    assert ffi.capsule_get_name(capsule) == b"dltensor"
    tensor = dlpackread.read(capsule)
    assert not tensor.versioned and tensor.ptr == memory.ptr


def test_an_unconsumed_capsule_is_given_back_by_the_sweep() -> None:
    memory = HostMemory(np.arange(4.0))
    capsule = memory.__dlpack__(max_version=(1, 0))
    assert dlpack.sweep() == 0, "still held by the caller: it may yet be consumed"
    del capsule
    assert dlpack.sweep() == 1 and memory.loans.outstanding == 0


def test_a_garbage_collection_sweeps_too() -> None:
    memory = HostMemory(np.arange(4.0))
    del_me = memory.__dlpack__(max_version=(1, 0))
    del del_me
    gc.collect()  # rawcuda.protocols.dlpack sweeps after each collection
    assert memory.loans.outstanding == 0


class LeakContext(FakeContext):
    """A FakeContext the leak check can ask (rawcuda.testing.leaks): its open children and free memory."""

    closed, usable = False, True

    def __init__(self) -> None:
        super().__init__()
        self.objects: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def children(self) -> list[Any]:
        return list(self.objects)

    def synchronize(self) -> None:
        pass

    def mem_info(self) -> tuple[int, int]:
        return 1 << 30, 2 << 30


def test_the_leak_check_sweeps_a_capsule_dropped_unconsumed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check runs with the collector off, so no collection sweeps: without its own sweep, the dropped
    # capsule's export would keep the buffer -- and the check report a buffer nobody holds.
    context = LeakContext()
    monkeypatch.setattr(contextregistry, "live_contexts", lambda: [context])
    monkeypatch.setattr(leaks, "default_context", lambda: context)
    check = LeakCheck(trace_allocations=False)
    check.start()
    memory = HostMemory(np.arange(4.0), DLDeviceType.CUDA)
    memory.context = context
    context.objects.add(memory)
    alive = weakref.ref(memory)
    capsule = memory.__dlpack__(stream=-1, max_version=(1, 0))
    del capsule, memory
    assert alive() is not None, "the export holds the buffer until a sweep"
    report = check.stop()
    assert alive() is None and not report.leaks, report.message
    assert gc.isenabled()
    # And a buffer the code really keeps is still reported.
    check.start()
    kept = HostMemory(np.arange(4.0), DLDeviceType.CUDA)
    context.objects.add(kept)
    assert len(check.stop().leaks) == 1


def test_a_consumer_s_refusal_keeps_its_own_message() -> None:
    # numpy refuses a CUDA tensor *after* __dlpack__ returned, and drops the capsule with its exception set. A
    # ctypes capsule destructor would turn that into "SystemError: returned NULL without setting an exception"
    # (see the next test); rawcuda's capsules have none, and the sweep gives the export back.
    memory = HostMemory(np.arange(4.0), DLDeviceType.CUDA)
    with pytest.raises(Exception, match=r"(?i)device") as info:
        np.from_dlpack(memory)
    assert not isinstance(info.value, SystemError), info.value
    assert memory.loans.outstanding == 1
    dlpack.sweep()
    assert memory.loans.outstanding == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the failure this test shows
def test_why_rawcuda_s_capsules_have_no_destructor() -> None:
    # The lesson, shown: a ctypes callback entered while an exception is pending cannot run -- its first call fails
    # with a SystemError -- and CPython drops the pending exception: the consumer's message is lost, and the
    # cleanup is cut short.
    finished: list[int] = []

    def destroy(capsule: int) -> None:
        len(finished)  # any call fails here: "returned a result with an exception set"
        finished.append(capsule)

    destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(destroy)
    struct = ffi.DLManagedTensor(
        ffi.DLTensor(None, ffi.DLDevice(DLDeviceType.CUDA, 0), 0, ffi.DLDataType(2, 32, 1), None, None, 0), None, None
    )
    address, pointer = ctypes.addressof(struct), ctypes.cast(destructor, ctypes.c_void_p).value

    class Producer:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return ffi.capsule_new(address, ffi.LEGACY_NAMES.unused, pointer)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    with pytest.raises(SystemError):
        np.from_dlpack(Producer())
    assert finished == []


def test_rawcuda_reads_and_takes_its_own_capsule() -> None:
    # The two halves against each other: the consumer calls the producer's deleter -- a ctypes thunk -- through
    # a function pointer, as C code would.
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    memory = HostMemory(a)
    capsule = memory.__dlpack__(max_version=(1, 0))
    tensor = dlpackread.read(capsule)
    assert (tensor.ptr, tensor.shape, tensor.dtype) == (a.ctypes.data, (2, 3), a.dtype)
    assert tensor.device == (int(HOST), 0) and tensor.versioned and not tensor.read_only
    loan = dlpackread.take(capsule)
    del capsule
    assert dlpack.sweep() == 0 and memory.loans.outstanding == 1, "consumed: only the deleter may end it"
    loan.end()
    assert memory.loans.outstanding == 0


def test_a_consumer_that_copies_or_asks_for_another_device_is_refused() -> None:
    memory = HostMemory(np.arange(4.0))
    with pytest.raises(BufferError, match="never copies"):
        memory.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="another device"):
        memory.__dlpack__(dl_device=(DLDeviceType.CUDA, 0))
    seen = np.from_dlpack(memory, device="cpu")  # dl_device=(kDLCPU, 0): pinned memory is host memory
    assert seen.ctypes.data == memory.ptr


# --- __dlpack__'s arguments -------------------------------------------------------------------------------------------
CUDA, CPU = DLDeviceType.CUDA, int(DLDeviceType.CPU)


def plan(kind: DLDeviceType = CUDA, host_accessible: bool = False, **kwargs: Any) -> dlpack.Plan:
    args = {"stream": None, "max_version": None, "dl_device": None, "copy": None, **kwargs}
    return dlpack.negotiate(kind, 3, host_accessible=host_accessible, **args)


def test_the_stream_a_device_consumer_names() -> None:
    assert plan().sync == ffi.STREAM_LEGACY, "None: the producer must assume the legacy default stream"
    assert plan(stream=1).sync == 1 and plan(stream=2).sync == 2 and plan(stream=STREAM).sync == STREAM
    assert plan(stream=-1).sync is None, "-1: no synchronization at all"
    assert plan(HOST, host_accessible=True).sync == dlpack.HOST, "host memory, consumer unknown: the host waits"
    assert plan(HOST, host_accessible=True, stream=STREAM).sync == STREAM


def test_a_numpy_integer_stream_is_taken_as_the_int_it_holds() -> None:
    # Before: stream=np.int64(h) was refused, though the CUDA Array Interface takes numpy integers.
    for kind in (np.int64, np.uint64, np.intp):
        chosen = plan(stream=kind(STREAM)).sync
        assert chosen == STREAM and type(chosen) is int
    assert plan(stream=np.int64(-1)).sync is None and plan(stream=np.int32(2)).sync == 2
    for wrong in (True, np.bool_(True), 1.0, np.float64(1.0), "1"):
        with pytest.raises(TypeError, match="stream must be None or an int"):
            plan(stream=wrong)


@pytest.mark.parametrize("number", [3, 0xDEAD_BEEF_000, 0x7FFF_FFFF_FFFF_FFFF], ids=["3", "unmapped", "2^63-1"])
def test_a_consumer_stream_this_process_cannot_read_is_refused(number: int) -> None:
    # cuStreamWaitEvent reads the number as a pointer: before the check, __dlpack__(stream=3) with work
    # pending on the buffer killed the process (SIGSEGV in the driver, on the H200).
    with pytest.raises(ValueError, match="no CUstream: this process cannot read memory at that address"):
        plan(stream=number)
    assert plan(HOST, host_accessible=True, dl_device=(CPU, 0)).sync == dlpack.HOST


@pytest.mark.parametrize("kind", [CUDA, HOST, DLDeviceType.CUDA_MANAGED])
def test_stream_minus_one_exports_without_any_wait(kind: DLDeviceType) -> None:
    # The whole export, not only the plan: neither the host nor any stream is made to wait.
    memory = HostMemory(np.arange(4.0), kind)
    for max_version in (None, (1, 0)):
        capsule = memory.__dlpack__(stream=-1, max_version=max_version)
        assert memory.pending.host_waits == 0 and memory.pending.device_waits == []
        del capsule


def test_the_versions_and_devices_a_consumer_asks_for() -> None:
    assert not plan().versioned and plan(max_version=(1, 0)).versioned and plan(max_version=(2, 3)).versioned
    assert not plan(max_version=(0, 8)).versioned
    assert plan().device == (int(CUDA), 3) and plan(dl_device=(2, 3)).device == (2, 3)
    assert plan(HOST, host_accessible=True, dl_device=(CPU, 0)).device == (CPU, 0)
    assert plan(copy=False).device == (int(CUDA), 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stream": 0}, ValueError, "stream=0 is forbidden"),
        ({"stream": -2}, ValueError, "not a CUstream"),
        ({"stream": 1 << 64}, ValueError, "not a CUstream"),
        ({"stream": "1"}, TypeError, "stream must be None or an int"),
        ({"stream": True}, TypeError, "stream must be None or an int"),
        ({"copy": True}, BufferError, "never copies"),
        ({"copy": "yes"}, TypeError, "copy must be"),
        ({"max_version": 1}, TypeError, "max_version"),
        ({"dl_device": (CPU, 0)}, BufferError, r"exported to \(2, 3\) only"),
        ({"dl_device": (2, 0)}, BufferError, "another device"),
        ({"dl_device": "cuda"}, TypeError, "dl_device must be"),
        ({"dl_device": (2.7, 0)}, TypeError, "dl_device must be"),  # (before: int() read it as (2, 0))
        ({"max_version": ("1", "0")}, TypeError, "max_version"),  # (before: int() read the strings)
    ],
)
def test_malformed_or_impossible_requests(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plan(**kwargs)
    with pytest.raises(ValueError, match="the host has no stream"):
        plan(HOST, host_accessible=True, dl_device=(CPU, 0), stream=1)


# --- loans: close() waits for the last one ----------------------------------------------------------------------------
def test_a_release_waits_for_the_last_loan_and_runs_once() -> None:
    loans, context, released = Loans(), FakeContext(), []
    first, second = loans.lend(context), loans.lend(context)
    loans.release_after(context, released.append, ("memory",))  # close() while two exports are out
    assert released == [] and context.holds == 3
    first.end()
    first.end()
    assert released == []
    second.end()
    assert released == ["memory"] and context.holds == 0 and loans.outstanding == 0


def test_a_release_with_no_loan_out_runs_at_once() -> None:
    loans, context, released = Loans(), FakeContext(), []
    loans.lend(context).end()
    loans.release_after(context, released.append, ("memory",))
    assert released == ["memory"] and context.holds == 0


# --- the public API and its refusals without a GPU -----------------------------------------------------------------
def test_the_public_names() -> None:
    assert {"adopt", "from_dlpack", "ForeignBuffer"} <= set(rawcuda.__all__)
    assert rawcuda.from_dlpack.__module__ == "rawcuda.extras.foreign"
    assert hasattr(rawcuda.DeviceBuffer, "__dlpack__") and hasattr(rawcuda.PinnedBuffer, "__dlpack_device__")


def test_host_arrays_and_strangers_are_refused_before_any_driver_call() -> None:
    with pytest.raises(BufferError, match=r"host memory .*from_array"):
        rawcuda.from_dlpack(np.arange(3.0))
    with pytest.raises(BufferError, match="host memory"):
        rawcuda.adopt(np.arange(3.0))
    with pytest.raises(TypeError, match="__dlpack__"):
        rawcuda.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        rawcuda.adopt(object())


class CudaArray:
    """A GPU array as torch describes it, reduced to its interface."""

    def __init__(self) -> None:
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x7000_0000, False), "version": 3}


class DLPackCudaArray:
    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


@pytest.mark.parametrize("array", [CudaArray(), DLPackCudaArray()])
def test_from_array_copies_host_memory_only_and_says_how_to_adopt(array: Any) -> None:
    # Before: torch's "can't convert cuda:0 device type tensor to numpy", or an object-dtype refusal.
    with pytest.raises(TypeError, match=r"GPU memory: rawcuda\.adopt\(x\) wraps it"):
        DeviceBuffer.from_array(array)


@pytest.mark.parametrize("said", [(2.9, 0.7), ("2", "0"), (2, 0, 0), None, (True, 0)])
def test_a_producers_malformed_dlpack_device_is_refused_before_any_driver_call(said: Any) -> None:
    # Before: int() read (2.9, 0.7) and ('2', '0') as CUDA device 0, and
    # (2, 0, 0) ended in "too many values to unpack". A consumer's dl_device must be two ints; so must this.
    class Broken:
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise AssertionError("never asked: where the array lives is unknown")

        def __dlpack_device__(self) -> Any:
            return said

    with pytest.raises(BufferError, match=r"__dlpack_device__\(\) returned .*pair of ints"):
        rawcuda.adopt(Broken())
