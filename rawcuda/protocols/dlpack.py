"""Protocols: rawcuda's buffers as DLPack producers -- what ``__dlpack__`` promises, and how it keeps the promise.

``torch.from_dlpack(buf)`` calls ``buf.__dlpack_device__()`` (which GPU?), then ``buf.__dlpack__(stream=s,
max_version=(1, 0))``, and gets a capsule (rawcuda.protocols.dlpackabi draws who owns what). Each argument is a
promise the producer must keep or refuse (rawcuda.protocols.dlpackargs checks them into a ``Plan`` first):

* ``stream`` -- the *consumer's* stream, on which it will use the memory (CUDA: 1 is the legacy default
  stream, 2 the per-thread one, anything above a CUstream; None means legacy; -1 means "do not synchronize";
  0 is forbidden as ambiguous). Async rawcuda work may still be writing the memory (rawcuda.core.guards.pending): the
  consumer's stream is made to wait for it on the GPU, the host never blocks. A consumer on the *host*
  (numpy reading pinned or managed memory) has no stream, so the host waits instead.
* ``max_version`` -- the newest DLPack the consumer reads. ``(1, x)`` or later gets the versioned struct and
  capsule name; None (an old consumer) the legacy ones.
* ``dl_device`` -- where the consumer wants the data: the buffer's own device, or ``(kDLCPU, 0)`` for memory
  the host can read as it is (pinned, managed). Anything else would need a copy: ``BufferError``.
* ``copy`` -- rawcuda exports the memory as it is and never copies: ``copy=True`` is a ``BufferError`` saying
  how to copy first. rawcuda's buffers are writable, so the READ_ONLY flag is never set.

Lifetime: the export holds the buffer object and a **loan** on its memory (rawcuda.protocols.loans), so ``close()``
of the buffer or its context frees the memory only after the consumer calls the deleter. The deleter is one
module-level, immortal ``CFUNCTYPE`` thunk; it finds its export by the struct's address in a registry and
ends it -- exactly once, whichever thread calls, and never raising into C.

No capsule destructor (rawcuda.protocols.dlpackabi says why: it cannot run Python safely): the registry holds every
capsule until it is consumed, and :func:`sweep` ends the exports of capsules dropped unconsumed -- a capsule
only the registry still references, still bearing its unused name, can never be consumed. Sweeps run at each
export, when a lent buffer closes, after each garbage collection, and on demand.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
import sys
from collections.abc import Callable
from ctypes import POINTER, c_int64, c_void_p
from typing import Any

import numpy as np

from .dlpackabi import (
    BITS_PER_BYTE,
    DELETER,
    DLPACK_VERSION,
    FAITHFUL_BITS,
    LEGACY_NAMES,
    NUMPY_KIND_CODES,
    VERSIONED_NAMES,
    CapsuleNames,
    DLDataType,
    DLDataTypeCode,
    DLDevice,
    DLDeviceType,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackVersion,
    DLTensor,
    capsule_is_valid,
    capsule_new,
    immortal,
)
from .dlpackargs import HOST, Plan, negotiate


# --- element types ------------------------------------------------------------------------------------------------
def dl_data_type(dtype: np.dtype) -> DLDataType:
    """The DLPack type of a numpy dtype (BufferError for one DLPack cannot describe)."""
    if dtype.kind == "b":
        return DLDataType(DLDataTypeCode.BOOL, BITS_PER_BYTE, 1)  # one byte of storage per bool
    code = NUMPY_KIND_CODES.get(dtype.kind)
    if code is None or dtype.fields is not None or dtype.subdtype is not None:
        raise BufferError(f"dtype {dtype} has no DLPack type (only bool, integers, floats and complex numbers do)")
    if not dtype.isnative:
        raise BufferError(f"dtype {dtype} is not in this machine's byte order; DLPack data always is")
    bits = dtype.itemsize * BITS_PER_BYTE
    if bits not in FAITHFUL_BITS[code]:
        raise BufferError(
            f"dtype {dtype} ({dtype.itemsize} bytes) has no faithful DLPack type: numpy's long double is not "
            "IEEE binary128 (what kDLFloat with 128 bits means); convert first, e.g. a.astype(np.float64)"
        )
    return DLDataType(code, bits, 1)


# --- the registry: every export not yet given back --------------------------------------------------------------
class _Export:
    """One export: the struct C code reads, the buffer and loan it keeps, and (until consumed) the capsule."""

    __slots__ = ("buffer", "capsule", "extents", "loan", "names", "struct")

    def end(self) -> None:
        loan, self.loan = self.loan, None
        self.buffer = self.capsule = None
        if loan is not None:
            loan.end()


_exports: dict[int, _Export] = {}  # struct address -> export


def _make_deleter(exports: dict[int, _Export]) -> Callable[[int | None], None]:
    # The thunk outlives this module's globals at exit, so the body reaches nothing through them.
    def deleter(address: int | None) -> None:
        with contextlib.suppress(Exception):  # a C caller cannot take an exception
            entry = exports.pop(address or 0, None)
            if entry is not None:
                entry.end()

    return deleter


_DELETER = immortal(DELETER(_make_deleter(_exports)))
_DELETER_ADDRESS: int = ctypes.cast(_DELETER, c_void_p).value or 0


def _capsule_refs(entry: _Export) -> int:
    return sys.getrefcount(entry.capsule)


def _orphan_refs() -> int:
    """What :func:`_capsule_refs` says when only the registry holds the capsule (measured, not assumed:
    how many references a call adds differs between Python versions)."""
    probe = _Export()
    probe.capsule = object()
    return _capsule_refs(probe)


_ORPHAN_REFS = _orphan_refs()


def sweep() -> int:
    """End the exports whose capsules were dropped without being consumed; returns how many."""
    ended = 0
    for address in list(_exports):
        entry = _exports.get(address)
        if entry is None or entry.capsule is None:
            continue
        # References first: when nobody else holds the capsule, nobody can rename it any more.
        if _capsule_refs(entry) > _ORPHAN_REFS:
            continue
        if not capsule_is_valid(entry.capsule, entry.names.unused):
            entry.capsule = None  # consumed, then dropped: the consumer holds the struct and will call the deleter
            continue
        if _exports.pop(address, None) is entry:
            entry.end()
            ended += 1
    return ended


def outstanding() -> int:
    """How many exports have not been given back yet (consumed ones whose deleter has not run, and capsules
    not yet swept)."""
    return len(_exports)


def _sweep_after_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and _exports:
        sweep()


gc.callbacks.append(_sweep_after_collection)


# --- the methods every rawcuda buffer shares ------------------------------------------------------------------
class Exportable:
    """``__dlpack__`` and ``__dlpack_device__`` for a rawcuda buffer, which provides ``ptr``, ``shape``,
    ``dtype``, ``context``, ``pending``, ``lend()`` and ``check_open()``, and names its memory's kind in
    ``dlpack_device_type``."""

    dlpack_device_type: DLDeviceType = DLDeviceType.CUDA

    def __dlpack_device__(self: Any) -> tuple[DLDeviceType, int]:
        """``(kDLCUDA, device ordinal)``; ``(kDLCUDAManaged, 0)`` or ``(kDLCUDAHost, 0)`` for managed or pinned
        memory, whose device id dlpack.h says is 0."""
        kind = self.dlpack_device_type
        return kind, self.context.device.ordinal if kind == DLDeviceType.CUDA else 0

    def __dlpack__(
        self: Any, *, stream: int | None = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """A DLPack capsule over this memory, without a copy: ``stream`` is the consumer's, made to wait for async
        rawcuda work still pending here, and the memory stays until the consumer's deleter runs."""
        self.check_open()
        self.context.check_usable()  # in a forked child, the address and any stream are the parent's
        kind, ordinal = self.__dlpack_device__()
        return export(
            self,
            kind,
            ordinal,
            stream=stream,
            max_version=max_version,
            dl_device=dl_device,
            copy=copy,
            host_wait=self.dlpack_host_wait(),
        )

    def dlpack_host_wait(self) -> Callable[[], None] | None:
        """How the host waits before it reads this memory itself; None when it cannot read it (device memory)."""
        return None


def is_device_array(obj: Any) -> bool:
    """True for another library's GPU array (CUDA Array Interface, or DLPack on a CUDA device); False for host
    memory -- pinned and managed buffers too, whose ``.array`` is the host's view."""
    if isinstance(getattr(obj, "array", None), np.ndarray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        kind = device()[0]
    except Exception:  # the producer's own failure: np.asarray will report on the object
        return False
    return kind in (DLDeviceType.CUDA, DLDeviceType.CUDA_MANAGED)


# --- making the capsule -----------------------------------------------------------------------------------------
def export(
    memory: Any,
    kind: DLDeviceType,
    ordinal: int,
    *,
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: Any = None,
    host_wait: Callable[[], None] | None = None,
) -> Any:
    """The body of every rawcuda ``__dlpack__``: a capsule over ``memory`` (``ptr``, ``shape``, ``dtype``,
    ``context``, ``pending``, ``lend()``). ``host_wait``, for memory the host can read, makes it safe to."""
    plan = negotiate(
        kind,
        ordinal,
        stream=stream,
        max_version=max_version,
        dl_device=dl_device,
        copy=copy,
        host_accessible=host_wait is not None,
    )
    dtype = dl_data_type(memory.dtype)  # (refusals before anything waits or is lent)
    sweep()
    if plan.sync == HOST:
        if host_wait is not None:
            host_wait()
    elif isinstance(plan.sync, int):
        memory.pending.order_before(plan.sync)
    entry = _Export()
    entry.buffer, entry.loan, entry.capsule = memory, memory.lend(), None
    try:
        return _publish(entry, memory.ptr, memory.shape, dtype, plan)
    except BaseException:
        entry.end()
        raise


def _publish(entry: _Export, ptr: int, shape: tuple[int, ...], dtype: DLDataType, plan: Plan) -> Any:
    ndim = len(shape)
    strides = [math.prod(shape[i + 1 :]) for i in range(ndim)]  # C order, counted in elements
    entry.extents = (c_int64 * (2 * ndim))(*shape, *strides)  # one array: the shape, then the strides
    base = ctypes.addressof(entry.extents)
    tensor = DLTensor(
        data=ptr or None,  # NULL for an empty tensor
        device=DLDevice(*plan.device),
        ndim=ndim,
        dtype=dtype,
        shape=ctypes.cast(base, POINTER(c_int64)) if ndim else None,
        strides=ctypes.cast(base + ndim * ctypes.sizeof(c_int64), POINTER(c_int64)) if ndim else None,
        byte_offset=0,
    )
    names: CapsuleNames
    if plan.versioned:
        version = DLPackVersion(*DLPACK_VERSION)
        entry.struct = DLManagedTensorVersioned(version, None, _DELETER_ADDRESS, 0, tensor)  # flags: writable
        names = VERSIONED_NAMES
    else:
        entry.struct = DLManagedTensor(tensor, None, _DELETER_ADDRESS)
        names = LEGACY_NAMES
    entry.names = names
    address = ctypes.addressof(entry.struct)
    _exports[address] = entry
    try:
        capsule = capsule_new(address, names.unused, None)  # no destructor: see the module docstring
    except BaseException:
        _exports.pop(address, None)
        raise
    entry.capsule = capsule  # (held by this frame too, until the caller has it: no sweep can see an orphan)
    return capsule


__all__ = [
    "HOST",
    "Exportable",
    "Plan",
    "dl_data_type",
    "export",
    "is_device_array",
    "negotiate",
    "outstanding",
    "sweep",
]
