"""Core: kernel arguments -- the ``void **kernelParams`` array, checked and packed safely, and only once.

``cuLaunchKernel`` takes an array of N pointers, the i-th pointing at the value of argument i.
It trusts the array blindly: one argument too few, or four bytes for eight, and the kernel reads garbage.
So :class:`ArgPacker` checks each argument against the kernel's real signature first.
The signature comes from the PTX ``.entry`` (types and sizes), or from ``cuFuncGetParamInfo`` (sizes only).
A bad argument raises :class:`ArgumentError`, a ``TypeError``, before the driver is called.
:class:`ArgPacker` lists what each kind of parameter takes.

Arguments are checked and packed only when they change. The very same objects as last time reuse the packed
block, unless something was closed since. The pack holds buffers weakly (:func:`identity_key`).
It lists their PendingStreams (``Packed.pending``), where the launch records its stream.
A packed block is never rewritten, so two threads launching one kernel never see each other's arguments.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rawcuda.checked.errors import ClosedError
from rawcuda.core.guards.pending import PendingStream
from rawcuda.protocols.cai import NO_INTERFACE, ForeignArrayError, foreign_pointer, read_interface

from .closecounter import closes
from .devicebuffer import DeviceBuffer
from .paramspec import BITS_PER_BYTE, FLOAT_SLOT, POINTER_SIZE, UINT_SLOT, ParamSpec, out_of_range

# Why: docs/hazards.md, "Kernel arguments are checked at launch time".

#: Checks one argument and stores it in its slot. It appends any stream the launch must wait for to the list.
#: It returns whether the packed block may be reused for the very same object next time.
Setter = Callable[[Any, Any, list[int]], bool]


#: rawcuda memory classes defined above core (a GrowableBuffer) -> the DeviceBuffer they stand for now.
#: A table, because core must not import extras/: each such class registers itself here.
MEMORY_VIEWS: dict[type, Callable[[Any], DeviceBuffer]] = {}


def memory_view(value: Any) -> DeviceBuffer | None:
    """The DeviceBuffer a registered memory object stands for now, or None for anything else."""
    for kind, view in MEMORY_VIEWS.items():
        if isinstance(value, kind):
            return view(value)
    return None


class ArgumentError(TypeError):
    """A kernel argument that does not fit its parameter (raised before the launch)."""


def _numpy_scalar(value: Any, spec: ParamSpec) -> Any:
    """The raw bits of a numpy scalar of exactly the parameter's width, or raise."""
    if value.dtype.itemsize != spec.size:
        raise ArgumentError(
            f"wrong width: {value.dtype} is {value.dtype.itemsize} bytes, the parameter is {spec.describe()}"
        )
    return value


_POINTER_ARRAYS: dict[int, Any] = {}


def pointer_array(count: int) -> Any:
    """``c_void_p * count``, made once per count and held: ctypes keeps an array type only while something holds
    it, and a type made again and again is garbage with reference cycles (left for good under gc.disable())."""
    made = _POINTER_ARRAYS.get(count)
    if made is None:
        made = _POINTER_ARRAYS[count] = ctypes.c_void_p * count
    return made


def put_buffer(slot: Any, value: DeviceBuffer, context: Any) -> None:
    """A buffer's address into ``slot``, checked: the kernel's context, and open.

    The common case costs one property (ptr) and one identity check; it runs for every buffer argument whenever
    a launch's arguments change. A function of its own, not a branch that ``put`` reaches by calling itself: a
    closure that names itself is a reference cycle, one per kernel parameter.
    """
    if context is not None and value.context is not context and value.context.raw_handle != context.raw_handle:
        raise ArgumentError(
            f"{value!r} belongs to {value.context!r}, but the kernel was loaded in "
            f"{context!r}: pass a buffer of the same context (or load the module there)"
        )
    try:
        slot.value = value.ptr
    except ClosedError:
        raise ClosedError(
            f"{value!r} is closed and cannot be passed to a kernel: allocate a new one "
            "(a closed buffer cannot be reopened)"
        ) from None


def _int_setter(spec: ParamSpec, context: Any = None) -> Setter:
    low, high = spec.int_range()
    mask = (1 << (BITS_PER_BYTE * spec.size)) - 1
    pointer_sized = spec.size == POINTER_SIZE
    signed = spec.signed
    takes_bool = spec.size == 1  # a C bool is one byte: True fits a .u8, and is a mistake for a size or a count

    def put(slot: Any, value: Any, waits: list[int]) -> bool:
        kind = type(value)
        if kind is int or (kind is bool and takes_bool):
            if not low <= value <= high:
                raise ArgumentError(out_of_range(value, spec))
            slot.value = value & mask
            return True
        if pointer_sized and isinstance(value, DeviceBuffer):
            put_buffer(slot, value, context)
            return True
        if isinstance(value, np.integer):
            number = int(_numpy_scalar(value, spec))
            if signed and number > high:  # e.g. np.uint32(3e9) for an .s32: its bits would arrive negative
                raise ArgumentError(
                    f"{value!r} does not fit {spec.describe()}: the parameter is signed, and its bits would "
                    "arrive as a negative number; declare the kernel's parameter unsigned or wider"
                )
            slot.value = number & mask
            return True
        if isinstance(value, np.ndarray):
            raise ArgumentError(
                "a host numpy array where a device pointer is expected: the GPU cannot read host memory through "
                "it; copy it first with rawcuda.DeviceBuffer.from_array(array)"
                if pointer_sized
                else f"a numpy array cannot be passed as {spec.describe()}"
            )
        if pointer_sized and (view := memory_view(value)) is not None:  # rawcuda memory: its view, not its interface
            put_buffer(slot, view, context)
            return False  # (uncached: a GrowableBuffer's grow() makes a new view)
        if pointer_sized and (cai := read_interface(value)) is not NO_INTERFACE:
            try:
                slot.value = foreign_pointer(value, spec.read_only, waits, cai)
            except ForeignArrayError as exc:
                raise ArgumentError(str(exc)) from None
            # Another library's object: its address may change, and every launch must wait for its stream.
            # So it is read again each time, never cached.
            return False
        if isinstance(value, float | np.floating):
            raise ArgumentError(f"a float ({value!r}) where the kernel expects {spec.describe()}")
        raise ArgumentError(f"{type(value).__name__} cannot be passed as {spec.describe()}")

    return put


def _float_setter(spec: ParamSpec) -> Setter:
    def put(slot: Any, value: Any, waits: list[int]) -> bool:
        kind = type(value)
        if kind is float or kind is int:
            _put_finite(slot, value, spec)
            return True
        if isinstance(value, np.floating):
            slot.value = float(_numpy_scalar(value, spec))
            return True
        if isinstance(value, np.integer):
            raise ArgumentError(
                f"a numpy integer ({value.dtype}) where the kernel expects {spec.describe()}; "
                "pass a Python number or a numpy float of that width"
            )
        if isinstance(value, DeviceBuffer | np.ndarray):
            raise ArgumentError(f"an array where the kernel expects {spec.describe()}")
        raise ArgumentError(f"{type(value).__name__} cannot be passed as {spec.describe()}")

    return put


#: The numpy type of each float parameter size, for its largest finite value.
_FLOAT_DTYPES = {4: np.float32, 8: np.float64}


def _put_finite(slot: Any, number: float, spec: ParamSpec) -> None:
    """Store a Python number in a float slot, refusing one that only fits as infinity.

    ctypes stores 1e39 in a ``c_float`` as inf without a word; ``fill()`` refuses it, and so does a launch.
    """
    try:
        slot.value = number
    except OverflowError:  # an int past any double
        raise ArgumentError(f"{number} is beyond every finite {spec.describe()}") from None
    if math.isinf(slot.value) and not math.isinf(number):
        largest = float(np.finfo(_FLOAT_DTYPES[spec.size]).max)
        raise ArgumentError(
            f"{number!r} would arrive as inf in {spec.describe()} (the largest finite value is {largest:.6g}); "
            "pass inf itself if that is what you mean"
        )


def _word_setter(spec: ParamSpec, context: Any = None) -> Setter:
    # A parameter known only by its size (cubin/fatbin). Numpy scalars say their type: their bits are stored as is.
    # An 8-byte one is almost always a pointer, so it also takes what an 8-byte integer parameter takes.
    as_integer = _int_setter(spec, context) if spec.size == 8 else None

    def put(slot: Any, value: Any, waits: list[int]) -> bool:
        if isinstance(value, np.generic) and not isinstance(value, np.void):
            raw = np.asarray(_numpy_scalar(value, spec)).view(np.dtype(f"u{spec.size}"))
            slot.value = int(raw)
            return True
        if as_integer is not None and not isinstance(value, float):
            return as_integer(slot, value, waits)
        raise ArgumentError(
            f"{value!r} is ambiguous for a parameter known only by size ({spec.describe()}): "
            "pass e.g. np.int32(x) or np.float32(x)"
        )

    return put


def _bytes_setter(spec: ParamSpec) -> Setter:
    def put(slot: Any, value: Any, waits: list[int]) -> bool:
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
        elif isinstance(value, ctypes.Structure | ctypes.Union | ctypes.Array):
            data = bytes(value)  # type: ignore[arg-type]
        elif isinstance(value, np.generic | np.ndarray):
            data = np.ascontiguousarray(value).tobytes()
        else:
            raise ArgumentError(f"{type(value).__name__} cannot be passed as {spec.describe()}")
        if len(data) != spec.size:
            raise ArgumentError(f"{len(data)} bytes given for {spec.describe()}")
        ctypes.memmove(slot, data, spec.size)
        return False  # mutable sources: repack every time

    return put


def _slot_and_setter(spec: ParamSpec, context: Any = None) -> tuple[Any, Setter]:
    """The ctypes type holding one argument's value, and the function that checks and stores it."""
    if spec.kind == "int":
        return UINT_SLOT[spec.size], _int_setter(spec, context)
    if spec.kind == "float":
        return FLOAT_SLOT[spec.size], _float_setter(spec)
    if spec.kind == "word":
        return UINT_SLOT[spec.size], _word_setter(spec, context)
    return ctypes.c_byte * spec.size, _bytes_setter(spec)


#: How the identity check compares argument i with what the pack remembers (``_checker`` writes one term each).
BY_WEAK_REFERENCE = "weak"  # a buffer: ``k[i]() is a[i]``
BY_INT_VALUE = "int"  # a Python int: the same object, or an int equal to it
BY_FLOAT_VALUE = "float"  # a Python float: the same object, or a float of the same bits
BY_IDENTITY = "same"  # anything else: the very same object

#: One term per kind, comparing the launch's argument ``x{i}`` with the remembered ``k{i}``. An int equal to an
#: int has its bits; a float equal to a nonzero float has its bits too (the two zeros are equal but differ in
#: sign, and NaN equals nothing, so those repack). ``.__class__ is`` and not ``==`` alone: 1.0 == 1 == True,
#: and a float for an integer parameter must still be refused.
_TERMS = {
    BY_WEAK_REFERENCE: "k{i}() is x{i}",
    BY_INT_VALUE: "(k{i} is x{i} or (x{i}.__class__ is int and k{i} == x{i}))",
    BY_FLOAT_VALUE: "(k{i} is x{i} or (x{i}.__class__ is float and k{i} == x{i} and k{i} != 0.0))",
    BY_IDENTITY: "k{i} is x{i}",
}

#: The check's shape: the key is bound once per pack (closure cells read as fast as locals), and unpacking the
#: arguments both checks their number and names them, cheaper than ``len(a) == N`` and ``a[i]``.
_SOURCE = """
def bind({keys}):
    def same(a):
        try:
            {names}, = a
        except ValueError:
            return False
        return {terms}
    return same
"""


def _kind(value: Any) -> str:
    if isinstance(value, DeviceBuffer):
        return BY_WEAK_REFERENCE
    kind = type(value)
    return BY_INT_VALUE if kind is int else BY_FLOAT_VALUE if kind is float else BY_IDENTITY


def identity_key(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], Callable[[tuple[Any, ...]], bool]]:
    """What a pack remembers of its arguments, and the function that tells whether a launch passes them again.

    Buffers are remembered by weak reference (``k()`` is the buffer). A buffer that has died never matches again.
    Python ints and floats match by value: ``a.size`` or ``float(alpha)`` is a new object at every call, and
    would otherwise repack every launch. Everything else must be the very same object.
    So a kernel object, which lives long, never keeps its last buffers alive.
    """
    # Why: docs/hazards.md, "A pack remembers buffers weakly".
    kinds = tuple(_kind(a) for a in args)
    key = tuple(weakref.ref(a) if k is BY_WEAK_REFERENCE else a for a, k in zip(args, kinds, strict=True))
    return key, _checker(kinds)(*key) if args else _no_arguments


_checkers: dict[tuple[str, ...], Callable[..., Callable[[tuple[Any, ...]], bool]]] = {}


def _checker(kinds: tuple[str, ...]) -> Callable[..., Callable[[tuple[Any, ...]], bool]]:
    """For one pattern of argument kinds: ``bind(k0, k1, ...)``, which returns the pack's ``same(args)``.

    ``same`` unpacks ``x0, x1, ... = args`` and compares each with its ``k``: ``k0() is x0 and k1 is x1 ...``.
    The check runs on every launch, and an unrolled expression is the fastest form of it.
    Its source is built from the fixed terms of :data:`_TERMS` alone, as namedtuple builds its classes.
    One function per pattern is made, once.
    """
    # Why: docs/hazards.md, "The argument identity check is generated code".
    bind = _checkers.get(kinds)
    if bind is None:
        count = range(len(kinds))
        source = _SOURCE.format(
            keys=", ".join(f"k{i}" for i in count),
            names=", ".join(f"x{i}" for i in count),
            terms=" and ".join(_TERMS[kind].format(i=i) for i, kind in enumerate(kinds)),
        )
        scope: dict[str, Any] = {}
        exec(source, scope)  # the fixed terms above, numbered: never any text from the arguments
        bind = _checkers[kinds] = scope["bind"]
    return bind


def _no_arguments(a: tuple[Any, ...]) -> bool:
    """The check of a kernel that takes no arguments: a launch passes none again."""
    return not a


def _never(a: tuple[Any, ...]) -> bool:
    """The check of a pack that must not be reused: it matches nothing."""
    return False


class Packed:
    """What :meth:`ArgPacker.pack` returns: one launch's arguments, packed. Never written once made.

    A class with slots, not a NamedTuple: a launch reads four of these fields, and a slot is read in a few
    nanoseconds where a NamedTuple's field costs a descriptor call.
    """

    # Why: docs/hazards.md, "Small savings on the launch path".

    __slots__ = ("array", "generation", "key", "launches", "pending", "same", "slots", "waits")

    def __init__(
        self,
        key: tuple[Any, ...],
        same: Callable[[tuple[Any, ...]], bool],
        array: Any,
        generation: int,
        slots: list[Any],
        waits: list[int],
        pending: tuple[PendingStream, ...],
        launches: dict[int, tuple[Any, ...]],
    ) -> None:
        self.key = key  # what identity_key remembers of the arguments (weak references to buffers)
        self.same = same  # same(args): the same arguments again (the key is bound into it)?
        self.array = array  # the kernelParams array: (void *) * N, the i-th pointing into slots[i]
        self.generation = generation  # closes.generation when the arguments were checked (a later close: stale)
        self.slots = slots  # the ctypes values the array points into (kept alive with the array)
        self.waits = waits  # streams of foreign arrays the launch must be ordered after (interop.order_after)
        self.pending = pending  # where the launch records its stream: the buffers', once each (views share)
        # id(stream) -> this pack's last launch there: (grid, block, shared_mem, the prepared driver arguments,
        # the forgets.value at which every entry of `pending` listed that stream or UNSEEN, and the whole
        # cuLaunchKernelEx argument tuple). function.py reads it.
        self.launches = launches


#: What a pack's launch record holds for the count before its stream was recorded on all its buffers.
UNSEEN = -1  # forgets.value starts at 0 and only grows

#: The launch record of a kernel never launched: no configuration, no driver arguments.
NO_LAUNCH: tuple[Any, ...] = (None, None, 0, (), UNSEEN, ())

#: The pack a kernel starts with: it matches no arguments, so the first launch packs.
EMPTY_PACK = Packed((), _never, None, -1, [], [], (), {})


class ArgPacker:
    """Turns a tuple of Python arguments into the ``void **kernelParams`` array for one kernel.

    What each parameter takes:

    * An 8-byte integer (``.u64``, ``.s64``, ``.b64``) may be a pointer: PTX writes pointers and ``size_t`` alike.
      It takes a ``DeviceBuffer`` or ``GrowableBuffer`` (its address), a Python ``int`` or an 8-byte numpy integer.
      It also takes any object with ``__cuda_array_interface__``, such as a torch or CuPy array.
      :mod:`rawcuda.protocols.cai` reads it: its stream is waited for, read-only and strided arrays are refused.
      A host numpy array is refused.
    * Other integer parameters take a Python ``int`` or a numpy integer of exactly that width.
      :mod:`rawcuda.core.paramspec` says which ints fit. A numpy integer passes its bits as they are.
      But a ``.s`` parameter refuses an unsigned one above its signed maximum.
    * Float parameters take a Python ``float`` or ``int``, or a numpy float of exactly that width.
      ``np.float64(1.0)`` for an ``f32`` parameter is an error, never a silent narrowing.
    * A parameter known only by its size (a cubin) takes a numpy scalar of that width.
      An 8-byte one also takes what an 8-byte integer takes.
    * By-value structs (``.align N .b8 x[K]``) take ``bytes``, a ctypes ``Structure`` or a numpy record of K bytes.

    Each :meth:`pack` builds new slots and a new array, and returns them with the arguments they came from.
    A packed block is never rewritten, so threads may share it. The caller keeps the latest pack.
    It reuses it while the arguments are the very same objects (see ``Function.launch``).
    """

    # Why: docs/hazards.md, "Launch arguments are never rewritten".

    def __init__(self, kernel: str, specs: Sequence[ParamSpec], context: Any = None) -> None:
        self.kernel = kernel
        self.specs = tuple(specs)
        # With the kernel's context, buffers of another context are refused (their addresses mean nothing here).
        self._makers = [_slot_and_setter(s, context) for s in self.specs]
        self._array_type = pointer_array(len(self.specs))

    def pack(self, args: tuple[Any, ...]) -> Packed:
        """Check ``args`` and pack them into new slots and a new array."""
        # The close count before any address is read: a close while packing leaves the pack stale at once.
        generation = closes.generation
        if len(args) != len(self._makers):
            raise ArgumentError(
                f"{self.kernel} takes {len(self._makers)} argument(s) ({self.signature()}) but {len(args)} were given"
            )
        slots, cacheable, waits = [], True, []
        for i, ((make_slot, put), value) in enumerate(zip(self._makers, args, strict=True)):
            slot = make_slot()
            try:
                cacheable &= put(slot, value, waits)
            except ArgumentError as exc:
                raise ArgumentError(f"{self.kernel} argument {i}: {exc}") from None
            slots.append(slot)
        array = self._array_type(*[ctypes.addressof(s) for s in slots])
        # tuple.__new__ rather than Packed(...): it saves a Python call.
        # Why: docs/hazards.md, "Small savings on the launch path".
        key, same = identity_key(args) if cacheable else ((), _never)
        # rawcuda memory of any kind (buffers, views, managed, adopted, a GrowableBuffer), once each.
        # Listed once per pack, so that a launch only walks a short tuple. Views share their base's.
        pending = tuple(dict.fromkeys(p for a in args if isinstance(p := getattr(a, "pending", None), PendingStream)))
        return Packed(key, same, array, generation, slots, waits, pending, {})

    def signature(self) -> str:
        """The kernel's parameter types, for messages: ``u64, u64, u32``."""
        return ", ".join(s.ptx_type for s in self.specs)
