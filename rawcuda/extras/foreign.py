"""Extras: another library's GPU array as a rawcuda buffer, without a copy -- ``rawcuda.adopt`` and ``from_dlpack``.

``rawcuda.adopt(torch_tensor)`` returns a :class:`ForeignBuffer`: a DeviceBuffer over memory torch (or CuPy,
JAX, numba ...) allocated. It launches, copies and exports like any buffer, and it is **non-owning**: it
allocates nothing and ``close()`` frees nothing -- it only gives back its claim on the producer's memory.
What that claim is depends on the way in:

* **DLPack** (preferred; ``from_dlpack``): rawcuda passes *its* stream in ``__dlpack__(stream=...)`` --
  the rawcuda stream you give, or 1 (the legacy default stream) for None -- and the producer makes that
  stream wait for its own pending work: the protocol's direction. The claim is the capsule's tensor; ending
  it calls the producer's deleter, once (rawcuda.protocols.dlpackread).
* **The CUDA Array Interface** (for objects without DLPack, e.g. numba's): the interface names the
  producer's stream, and rawcuda makes its own wait (rawcuda.protocols.cai). The interface has no deleter, so the
  claim is the object itself, held until close.

Ordering happens once, at adoption, for that one stream: work you queue later on it is ordered after the
producer's; work on another stream is yours to order (rawcuda's synchronous copies wait for the whole
context anyway). Refused, each with its fix: host memory (``DeviceBuffer.from_array`` copies it), strided
or masked arrays, element types numpy lacks, a read-only array (unless ``read_only=True``: nothing can stop
a kernel writing it), memory of another device or context.

Which context? The memory must belong to the one the buffer works in, or kernels there cannot touch it:
``cuPointerGetAttribute(CONTEXT)`` is compared with it. By default that is the device's primary context --
the one torch and CuPy use. (Memory mapped with the VMM API names no context, and passes.)
"""

from __future__ import annotations

import functools
import math
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
from typing import Any

from rawcuda.checked import cu
from rawcuda.checked.errors import CudaError
from rawcuda.core.context import Context, default_context, resolve
from rawcuda.core.devicebuffer import DeviceBuffer
from rawcuda.core.elements import normalize_dtype, normalize_shape
from rawcuda.core.guards.capturedeferral import capture_deferral
from rawcuda.core.guards.foreignorder import order_after
from rawcuda.core.stream import Stream
from rawcuda.core.streamargs import as_stream, context_for, stream_handle
from rawcuda.ffi.attributes import PointerAttribute
from rawcuda.ffi.types import CUdeviceptr
from rawcuda.protocols.cai import NO_INTERFACE, foreign_pointer, read_interface
from rawcuda.protocols.dlpackabi import DLPACK_VERSION, STREAM_LEGACY, DLDeviceType
from rawcuda.protocols.dlpackargs import int_pair
from rawcuda.protocols.dlpackread import Tensor, is_capsule, read, take
from rawcuda.protocols.loans import Loan

#: The DLPack device types whose memory a kernel of a rawcuda context can use.
_DEVICE_KINDS = frozenset({DLDeviceType.CUDA, DLDeviceType.CUDA_MANAGED})
_HOST_KINDS = frozenset({DLDeviceType.CPU, DLDeviceType.CUDA_HOST})


class ForeignBuffer(DeviceBuffer):
    """A DeviceBuffer over another library's memory: it holds the producer's claim (``owner`` is the
    producer's object) and frees nothing. ``close()`` -- or garbage collection -- ends the claim."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, context: Context, claim: Loan, owner: Any) -> None:
        self._borrowed_ptr = ptr
        self._claim = claim
        self._owner = owner
        super().__init__(shape, dtype, context)
        if not self._ptr:
            claim.end()  # an empty array: nothing to keep

    def _allocate(self, ctx: Context, nbytes: int) -> int:
        return self._borrowed_ptr if nbytes else 0

    def _take_ownership(self, ptr: int) -> None:
        # Released like memory is (Resource): by close(), or by the garbage collector as a fallback -- but what
        # is released is the claim (a deleter call, or a reference), never the memory.
        self._own(_give_back, self._claim)

    @property
    def owner(self) -> Any:
        """The producer's object this memory came from (None for a bare capsule, and once closed)."""
        return None if self._closed else self._owner

    def close(self) -> None:
        """Give the producer's memory back (the deleter runs now -- or after the last DLPack export of this
        buffer is given back); the memory itself is the producer's to free.

        Like ``cuMemFree``, this waits for the context's work first: torch's and CuPy's caching allocators
        may hand the memory to their next allocation at once, ordered after *their* streams only, so no
        kernel of ours may still be using it."""
        super().close()
        self._owner = None

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        origin = type(self._owner).__name__ if self._owner is not None else "a capsule"
        return f"<ForeignBuffer {self.shape} {self.dtype} at {self._ptr:#x} from {origin}{state}>"


def _give_back(claim: Loan) -> None:
    """The release of a ForeignBuffer (its context is current): wait for the GPU, then end the claim."""
    cu.cuCtxSynchronize()
    claim.end()


# --- DLPack -------------------------------------------------------------------------------------------------------
def from_dlpack(
    obj: Any, *, stream: Stream | None = None, context: Context | None = None, read_only: bool = False
) -> ForeignBuffer:
    """Wrap a DLPack producer's array (or a bare DLPack capsule) as a non-owning buffer, without a copy.

    ``stream`` is where you will use it: the producer makes it wait for its pending work (None: the legacy
    default stream). A bare capsule carries no stream: ordering it is then up to you.
    """
    if is_capsule(obj):
        return _adopt_capsule(obj, None, context, read_only)
    capsule, ctx = _export(obj, stream, context)
    return _adopt_capsule(capsule, obj, ctx, read_only)


def _export(obj: Any, stream: Stream | None, context: Context | None) -> tuple[Any, Context]:
    """The producer's capsule, made for ``stream`` -- after asking where the array is (host memory is refused
    before anything is exported) -- and the context the buffer will work in."""
    exporter = getattr(obj, "__dlpack__", None)
    if exporter is None:
        raise TypeError(
            f"from_dlpack takes an object with __dlpack__ (torch, CuPy, JAX ...) or a DLPack capsule, not "
            f"{type(obj).__name__}; rawcuda.adopt also takes __cuda_array_interface__ objects"
        )
    ordinal = 0
    device_of = getattr(obj, "__dlpack_device__", None)
    if device_of is not None:
        said = device_of()
        pair = int_pair(said)  # ints only, as a consumer's dl_device must be: int() would read 2.9 and '2'
        if pair is None:
            raise BufferError(
                f"{type(obj).__name__}.__dlpack_device__() returned {said!r}, not a (device_type, device_id) "
                "pair of ints: its producer is broken, so where the array lives is unknown"
            )
        kind, ordinal = pair
        _check_kind(kind, type(obj).__name__)
    ctx, stream = _context(context, stream, ordinal)
    if stream is not None and stream.capturing is not None:
        raise ValueError(
            f"{stream!r} is being captured: the producer's wait would be recorded into the graph; adopt the "
            "array before the capture begins"
        )
    if stream is None:  # the producer will make the legacy stream wait: that would invalidate an open capture
        capture_deferral.refuse_legacy("adopting an array for stream=None", ctx.raw_handle)
    handle = stream_handle(stream, ctx) or STREAM_LEGACY  # 0 is forbidden in the protocol: None means legacy
    try:
        return exporter(stream=handle, max_version=DLPACK_VERSION), ctx
    except TypeError:
        return exporter(stream=handle), ctx  # a producer from before DLPack 1.0 (no max_version)


def _adopt_capsule(capsule: Any, owner: Any, context: Context | None, read_only: bool) -> ForeignBuffer:
    tensor = read(capsule)  # refusals from here on leave the capsule unconsumed: its producer cleans up
    name = type(owner).__name__ if owner is not None else "DLPack tensor"
    _check_kind(tensor.device[0], name)
    if tensor.read_only and not read_only:
        raise BufferError(_read_only_message(name))
    ctx = resolve(context) if context is not None else default_context(_ordinal(tensor))
    _check_memory(tensor.ptr, tensor.nbytes, ctx, name)
    claim = take(capsule)
    try:
        return ForeignBuffer(tensor.ptr, tensor.shape, tensor.dtype, ctx, claim, owner)
    except BaseException:
        claim.end()
        raise


def _ordinal(tensor: Tensor) -> int:
    return tensor.device[1] if tensor.device[0] == DLDeviceType.CUDA else 0  # managed memory says 0 (dlpack.h)


# --- the CUDA Array Interface -------------------------------------------------------------------------------------
def adopt(
    obj: Any, *, stream: Stream | None = None, context: Context | None = None, read_only: bool = False
) -> ForeignBuffer:
    """Wrap another library's GPU array as a non-owning buffer, without a copy: through DLPack when the object
    has it (torch, CuPy, JAX, a rawcuda buffer), else through ``__cuda_array_interface__`` (numba ...).
    Work queued on ``stream`` (None: the legacy default stream) is ordered after the producer's. A producer
    whose ``__dlpack__`` refuses (BufferError) is adopted through its interface, if it has one."""
    if is_capsule(obj):
        return _adopt_capsule(obj, None, context, read_only)
    cai: Any = NO_INTERFACE  # read once (interop.read_interface says why)
    if hasattr(obj, "__dlpack__"):
        try:
            capsule, ctx = _export(obj, stream, context)
        except BufferError:  # (refused for the legacy stream in a capture: the interface's wait is refused too)
            cai = read_interface(obj)
            if cai is NO_INTERFACE:
                raise
        else:
            return _adopt_capsule(capsule, obj, ctx, read_only)
    if cai is NO_INTERFACE:
        cai = read_interface(obj)
    if cai is NO_INTERFACE:
        raise TypeError(
            f"adopt takes a GPU array with __dlpack__ or __cuda_array_interface__, not {type(obj).__name__}; "
            "host memory is copied with rawcuda.DeviceBuffer.from_array(a)"
        )
    name = type(obj).__name__
    waits: list[int] = []
    ptr = foreign_pointer(obj, True, waits, cai)  # malformed, strided, masked, stream 0: ForeignArrayError
    shape, dtype = normalize_shape(tuple(cai["shape"])), normalize_dtype(cai["typestr"])
    if cai["data"][1] and not read_only:
        raise BufferError(_read_only_message(name))
    ctx, stream = _context(context, stream, _device_of(ptr) if context is None and stream is None else 0)
    _check_memory(ptr, math.prod(shape) * dtype.itemsize, ctx, name)
    stream_handle(stream, ctx)  # a stream of another context: ValueError
    ctx.activate()
    order_after(waits, stream, ctx)
    return ForeignBuffer(ptr, shape, dtype, ctx, Loan(functools.partial(_hold, obj)), obj)


def _hold(obj: Any) -> None:
    """Nothing to do when the claim ends: holding ``obj`` until then was the claim (the interface has no
    deleter)."""


# --- checks shared by both ways in --------------------------------------------------------------------------------
def _check_kind(kind: int, name: str) -> None:
    if kind in _HOST_KINDS:
        raise BufferError(
            f"this {name} is in host memory (DLPack device type {kind}); a ForeignBuffer wraps GPU memory: copy "
            "it with rawcuda.DeviceBuffer.from_array(np.from_dlpack(x)), or keep it pinned in a PinnedBuffer"
        )
    if kind not in _DEVICE_KINDS:
        raise BufferError(f"this {name} is on DLPack device type {kind}; rawcuda adopts CUDA memory only (2, 13)")


def _read_only_message(name: str) -> str:
    return (
        f"this {name} is read-only, and a rawcuda buffer is writable -- nothing could stop a kernel, a copy or a "
        "fill writing memory its owner promised would not change: pass a writable array, or read_only=True if "
        "you will only read it (or pass the object itself to a kernel with fn.declare_read_only)"
    )


def _context(context: Context | None, stream: Any, ordinal: int) -> tuple[Context, Stream | None]:
    """The context to adopt into, and the stream as a Stream (another library's borrowed there).

    A stream or context of the wrong type is a TypeError naming it.
    """
    if stream is not None and not isinstance(stream, Stream):
        ctx = context_for(stream, context, ordinal)  # (with no context: the one the driver says it is in)
        return ctx, as_stream(stream, ctx)  # (its context checked: it must be the one adopted into)
    if context is not None:
        return resolve(context), stream
    return (stream.context if stream is not None else default_context(ordinal)), stream


def _device_of(ptr: int) -> int:
    """The ordinal of the GPU an address belongs to (asked in device 0's primary context)."""
    if not ptr:
        return 0
    default_context(0).activate()
    ordinal = c_int()
    try:
        cu.cuPointerGetAttribute(byref(ordinal), PointerAttribute.DEVICE_ORDINAL, ptr)
    except CudaError:
        return 0  # _check_memory will say what is wrong with the address
    return ordinal.value


def _check_memory(ptr: int, nbytes: int, context: Context, name: str) -> None:
    """The memory must belong to ``context`` (or to no context, as VMM memory does)."""
    if not nbytes:
        return
    context.activate()
    owner = c_void_p()
    try:
        cu.cuPointerGetAttribute(byref(owner), PointerAttribute.CONTEXT, ptr)
    except CudaError as exc:
        if _mapped(ptr):
            return  # mapped with the VMM API (cuMemMap): such memory belongs to no context
        raise BufferError(
            f"this {name}'s address {ptr:#x} is not memory CUDA knows ({exc.name}): it cannot be a rawcuda buffer"
        ) from None
    if owner.value and owner.value != context.raw_handle:
        raise ValueError(
            f"this {name}'s memory belongs to CUDA context {owner.value:#x}, not to {context!r}: a kernel there "
            "cannot use it; pass context= the context it belongs to (torch and CuPy use the primary context, "
            "rawcuda's default)"
        )
    if owner.value:
        _check_extent(ptr, nbytes, name)


def _check_extent(ptr: int, nbytes: int, name: str) -> None:
    """The array must end inside the allocation it starts in.

    Why? Only the shape says how far the memory goes, and a wrong one -- a crafted capsule, a producer's bug --
    would make every copy and kernel read or write past the end: into a neighbour's memory, silently, or
    into an unmapped page, as a sticky fault that kills the context. The driver knows each allocation's
    extent (cuMemGetAddressRange); an array inside a bigger block -- a view, torch's caching allocator --
    passes. Memory mapped with the VMM API is not checked: one array may span several mapped allocations;
    nor is mapped pinned host memory, which the driver gives no extent for.
    """
    base, size = CUdeviceptr(), c_size_t()
    try:
        cu.cuMemGetAddressRange(byref(base), byref(size), ptr)
    except CudaError:
        # Mapped pinned host memory (numba's mapped_array has an interface) has a context and no device
        # allocation to measure: a kernel may use it, and its extent cannot be checked here -- as before.
        return
    end = base.value + size.value
    if ptr + nbytes > end:
        raise BufferError(
            f"this {name} claims {nbytes} bytes at {ptr:#x}, but the allocation there ends {end - ptr} bytes "
            f"later (at {end:#x}): its shape runs past its memory -- a kernel or a copy would touch memory that is "
            "not its own; its producer's shape, strides or byte_offset are wrong"
        )


def _mapped(ptr: int) -> bool:
    value = c_uint64(0)  # the driver writes a small boolean into the low bytes
    try:
        cu.cuPointerGetAttribute(byref(value), PointerAttribute.MAPPED, ptr)
    except CudaError:
        return False
    return value.value != 0


__all__ = ["ForeignBuffer", "adopt", "from_dlpack"]
