"""Core: a kernel -- its attributes, its occupancy, and launching it with checked arguments.

Three ways to launch, from the most forgiving to the fastest:

* ``fn.launch(grid, block, *args, shared_mem=0, stream=None)`` checks each configuration once.
  It checks the arguments whenever they are not the very same objects as last time.
  Its host cost is close to a bare ctypes launch (bench/results/).
* ``launch = fn.bind(grid, block, *args, ...)`` checks everything once; ``launch()`` repeats it, for hot loops.
* a CUDA graph (:mod:`rawcuda.graphs.graph`) replays many launches with one call.

A launch returns before the kernel runs. So the first two record their stream (None: the legacy one) on
every rawcuda buffer passed (:mod:`rawcuda.core.guards.pending`). DLPack and CUDA Array Interface consumers
wait on it. Graphs do not. The launch path, step by step: docs/architecture.md ("The launch path").
"""

from __future__ import annotations

import weakref
from ctypes import byref, c_int, c_void_p
from typing import TYPE_CHECKING, Any

from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError
from rawcuda.core.guards.foreignorder import order_after
from rawcuda.core.guards.forgetcount import forgets
from rawcuda.core.guards.pending import legacy_stream, record_on
from rawcuda.ffi.attributes import DeviceAttribute as A
from rawcuda.ffi.attributes import FunctionAttribute

from .boundlaunch import BoundLaunch
from .closecounter import closes
from .context import SYNC_LAUNCHES
from .integers import integer
from .kernelargs import EMPTY_PACK, NO_LAUNCH, UNSEEN, ArgPacker, Packed
from .launchattrs import (
    NO_OPTIONS,
    LaunchOptions,
    attributes_for,
    check_compiled_in,
    compiled_cluster,
    twin_of,
)
from .launchcall import launch_failed, launch_kernel
from .launchconfig import LaunchConfig, config_summary, dims, hashable, integral, launch_config
from .packhistory import PackHistory
from .paramspec import ParamSpec, with_read_only
from .stream import Stream
from .streamargs import BorrowedStream, as_stream, stream_handle

# Shared memory a block may use in all, static plus dynamic, without an opt-in.
# Why: docs/hazards.md, "Dynamic shared memory above 48 KiB needs an opt-in, static included".
DEFAULT_SHARED_LIMIT = 48 * 1024
_MAX_CONFIGS = 256  # launch configurations remembered per function (validated once each)


if TYPE_CHECKING:
    from .module import Module


class Function:
    """A kernel of a Module. ``fn.launch(grid, block, *args, shared_mem=0, stream=None)``."""

    def __init__(self, module: Module, name: str, handle: int, specs: list[ParamSpec]) -> None:
        self.module = module
        self.context = module.context
        self.name = name
        self._handle = handle
        self.params = tuple(specs)
        self._configs: dict[tuple[Any, Any, int], LaunchConfig] = {}  # validated configurations
        self._prepared: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # ... and their ctypes driver arguments
        self._generation = closes.generation
        self._limit_cache: dict[str, Any] | None = None
        self._packer = ArgPacker(name, self.params, module.context)
        self._packed = EMPTY_PACK  # the latest packed arguments (see ArgPacker)
        self._history = PackHistory()  # the packs before it: argument sets taking turns are packed once
        # The dynamic bytes launches may use now (48 KiB - static until raised): one per CUfunction, shared with
        # its twins (options()), since the driver's opt-in is one per CUfunction and must never be lowered.
        self.shared_optin: list[int | None] = [None]
        self.base: Function | None = None  # the Function a twin was made from (options()); None for a base
        self.twins: weakref.WeakValueDictionary[LaunchOptions, Function] = weakref.WeakValueDictionary()
        # The last launch's record (grid, block, shared_mem, its driver arguments before kernelParams, count): ctypes
        # values, no Python objects, so the stream is not held. Its identity also tells _turn which pack it used.
        self.last_launch: tuple[Any, ...] = NO_LAUNCH
        self.ref = weakref.ref(self)  # what a launch leaves in context.last_launch_ref (made once, not per launch)
        self.legacy = legacy_stream(self.context)  # what a launch on no stream records (rawcuda.core.guards.pending)
        self.launch_options: LaunchOptions = NO_OPTIONS  # launch attributes (options() makes a Function with some)
        info = module.ptx_info  # None for a cubin or fatbin: no PTX to read directives from
        # A cluster compiled in (__cluster_dims__): every launch, with options or not, must give whole clusters.
        entry = info.entries.get(name) if info is not None else None
        self.compiled_cluster = compiled_cluster(entry)
        self.grid_workspace = entry is not None and entry.grid_workspace  # this_grid().sync(): cooperative only
        self.dependency_wait = entry is None or entry.dependency_wait  # griddepcontrol.wait (a cubin: unknown)

    @property
    def last_config(self) -> tuple[Any, ...]:
        """(grid, block, shared_mem, stream handle) of the last launch, as the driver was given them."""
        return config_summary(self.last_launch[3])

    @property
    def closed(self) -> bool:
        """True once its module is closed (a kernel lives exactly as long as the module it is in)."""
        return self.module.closed

    def check_open(self) -> None:
        """Raise ClosedError when the module was closed."""
        if self.module.closed:
            raise ClosedError(
                f"kernel {self.name!r} belongs to {self.module!r}, which is closed: load the module "
                "again (Module(...).function(name)) to launch it"
            )

    @property
    def handle(self) -> int:
        """The driver's ``CUfunction``; ClosedError once the module is closed."""
        self.check_open()
        return self._handle

    # --- attributes and occupancy -------------------------------------------------------------------------
    def attribute(self, which: FunctionAttribute) -> int:
        """One of the kernel's attributes, as ``cuFuncGetAttribute`` reads it."""
        self.check_open()
        self.context.activate()
        value = c_int()
        cu.cuFuncGetAttribute(byref(value), int(which), self._handle)
        return value.value

    def set_attribute(self, which: FunctionAttribute, value: int) -> None:
        """Set one of the kernel's attributes with ``cuFuncSetAttribute``."""
        self.check_open()
        self.context.activate()
        cu.cuFuncSetAttribute(self._handle, integer(which, "attribute"), integer(value, "value"))

    @property
    def num_regs(self) -> int:
        """The registers each thread of this kernel uses."""
        return self.attribute(FunctionAttribute.NUM_REGS)

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can launch with (registers and __launch_bounds__ permitting)."""
        return self.attribute(FunctionAttribute.MAX_THREADS_PER_BLOCK)

    @property
    def shared_size_bytes(self) -> int:
        """The static shared memory a block of this kernel uses, in bytes."""
        return self.attribute(FunctionAttribute.SHARED_SIZE_BYTES)

    @property
    def local_size_bytes(self) -> int:
        """The local memory each thread of this kernel uses, in bytes."""
        return self.attribute(FunctionAttribute.LOCAL_SIZE_BYTES)

    def max_active_blocks_per_sm(self, block_size: int, shared_mem: int = 0) -> int:
        """Occupancy: how many blocks of this size fit on one multiprocessor at once."""
        self.check_open()
        self.context.activate()
        blocks = c_int()
        cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            byref(blocks), self._handle, integer(block_size, "block_size"), integer(shared_mem, "shared_mem")
        )
        return blocks.value

    # --- launching -----------------------------------------------------------------------------------------
    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        *args: Any,
        shared_mem: int = 0,
        stream: Stream | None = None,
    ) -> None:
        """Queue the kernel on ``stream`` (the legacy default stream for None); return before it runs.

        The first launch with a given (grid, block, shared_mem, stream) validates the configuration.
        It builds every driver argument as a ctypes object.
        The first launch with given arguments checks and packs them.
        After that a launch is one dict lookup by stream, three comparisons of the configuration and one
        identity check of the arguments.
        Then one ``cuLaunchKernelEx`` through an argtypes-free binding: close to a bare ctypes call.
        Last, one integer compared: its buffers' memory already lists this stream.
        Several threads may launch one Function at once: packed blocks are never rewritten.
        """
        # This pack's last launch on this stream (keyed by id: the cache must keep no stream alive):
        # the same configuration again, and the same arguments, and nothing closed since -- the common case.
        # Why: docs/hazards.md, "The launch cache holds streams by id", "A launch checks its pack's own generation".
        packed = self._packed
        # `is` first: the same small int again is the common case, and an identity costs no comparison call.
        # `is True` after ==: an array's == answers an array (truthy for one element); the slow path refuses arrays.
        try:
            last = packed.launches[id(stream)]
            again = (
                (last[0] is grid or (last[0] == grid) is True)
                and (last[1] is block or (last[1] == block) is True)
                and (last[2] is shared_mem or (last[2] == shared_mem) is True)
                and packed.generation == closes.generation  # also moves when a context becomes unusable
                and packed.same(args)
            )
        except Exception:  # no launch on this stream yet, or a grid that cannot be compared: the slow path
            again = False
        if not again:  # (another library's stream always comes here: its handle is read again at each launch)
            last, packed, stream = self._turn(grid, block, shared_mem, stream, args)
        rc = launch_kernel.call(*last[5])  # (a tuple passed whole: ctypes builds no new one)
        if rc:
            launch_failed(rc, self.context, last[5])
        self.context.last_launch_ref = self.ref  # named in the error if a sticky fault ever poisons the context
        self.last_launch = last
        # Nothing to record while this pack's buffers all list this stream and no capture began since.
        # Why: docs/hazards.md, "Pending work" (one integer, however many buffers and streams take turns).
        if last[4] != forgets.value:
            self._record(stream, packed, args, last)
        if SYNC_LAUNCHES:
            self.context.synchronize()

    def _turn(
        self, grid: Any, block: Any, shared_mem: int, stream: Stream | None, args: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], Packed, Stream | None]:
        """Not the latest pack's launch: a recent pack's (argument sets taking turns), or else the slow path.

        Returns the launch record, its pack, and the stream as a Stream (another library's, borrowed).
        """
        history = self._history
        found = history.launch_on(id(stream), grid, block, shared_mem, args, closes.generation)
        if found is None:
            return self._checked(grid, block, shared_mem, stream, args)
        last, packed = found
        # Promoted only when the launch before this one was this very pack on this stream: a set that stays on
        # reaches the fast path at its second launch, and two sets taking turns leave the latest where it is.
        # Why: docs/hazards.md, "Argument sets taking turns".
        if self.last_launch is last:
            self._packed = history.swap(self._packed, packed)
        return last, packed, stream  # type: ignore[return-value]

    def _checked(
        self, grid: Any, block: Any, shared_mem: int, stream: Stream | None, args: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], Packed, Stream | None]:
        """The slow path of a launch: the configuration validated and the arguments packed, where needed.

        Returns the pack's new record of its launch on this stream, the pack, and the stream as a Stream.
        """
        self.check_open()  # first: a closed module says which kernel, and to load it again
        self.context.check_usable()  # the fast path skips it: an unusable context moved the close count
        stream = as_stream(stream, self.context)  # another library's stream: borrowed, its context checked
        generation = closes.generation
        key = (hashable(grid), hashable(block), shared_mem, id(stream))
        try:  # (a grid given as a list is cached as a tuple)
            prepared = self._prepared[key]
        except (KeyError, TypeError):
            prepared = None
        if prepared is None or self._generation != generation:
            prepared = self.prepare(grid, block, shared_mem, stream)  # when something closed: forgets packs too
        packed = self._packed
        # The pack's own generation too: another thread may have read or made it while a close ran.
        if packed.generation != generation or not packed.same(args):
            recalled = self._history.recall(packed, args, generation)  # a set from a few launches ago
            if recalled is None:
                packed = self._repack(args, stream)
            else:
                self._packed = packed = recalled
        # The record belongs to the pack and the stream, not the configuration: a new grid keeps it.
        before = packed.launches.get(id(stream))
        # The configuration as validated, a copy: a list given as the grid could change after this launch.
        count = UNSEEN if before is None else before[4]
        last = (key[0], key[1], shared_mem, prepared, count, (*prepared, packed.array, None))
        # Nothing closed meanwhile: the next launch may trust it all. Not on a borrowed stream, whose owner is
        # asked at each launch whether it still names that stream.
        # Why: docs/hazards.md, "A borrowed stream is never destroyed".
        if closes.generation == generation and type(stream) is not BorrowedStream:
            packed.launches[id(stream)] = last
        return last, packed, stream

    def _record(self, stream: Stream | None, packed: Packed, args: tuple[Any, ...], last: tuple[Any, ...]) -> None:
        """After a launch: its stream recorded on its buffers' memory, or its use handed to the capturing graph."""
        count = forgets.value  # before the capture check: a capture begun after it moves the count again
        if stream is not None and stream.capturing is not None:
            # A captured launch runs at every replay, not now: the graph holds (and checks) what it uses.
            # Why: docs/hazards.md, "A captured launch is held by its graph".
            stream.capturing.record_launch(stream, self, args)
            return  # (the pack stays unseen: every launch of the capture hands its use to the graph)
        if packed.pending:  # the buffers' memory it may still be writing (views share their base's)
            count = record_on(packed.pending, self.legacy if stream is None else stream)
        if packed.launches.get(id(stream)) is last:  # (not kept when a close came during the slow path)
            packed.launches[id(stream)] = renewed = (*last[:4], count, last[5])
            if self.last_launch is last:  # _turn reads the run of launches from it: the run goes on
                self.last_launch = renewed

    def _repack(self, args: tuple[Any, ...], stream: Stream | None) -> Packed:
        """Check and pack new arguments. Another library's arrays also make the stream wait for theirs."""
        self._history.push(self._packed, closes.generation)
        packed = self._packed = self._packer.pack(args)
        if packed.waits:  # never reused (its `same` is always false), so this runs before every such launch
            self.context.activate()
            order_after(packed.waits, stream, self.context)
        return packed

    def bind(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        *args: Any,
        shared_mem: int = 0,
        stream: Stream | None = None,
    ) -> BoundLaunch:
        """Check and pack a launch once. Calling the result repeats it at close to bare-driver cost."""
        self.check_open()
        return BoundLaunch(self, grid, block, args, shared_mem, stream)

    def options(self, *, cluster: Any = None, cooperative: Any = None, programmatic: Any = None) -> Function:
        """The same kernel, launched with attributes: thread-block clusters of ``cluster`` blocks (x, y, z), a
        ``cooperative`` grid (all blocks resident at once), ``programmatic`` dependent launch (it may start before
        the previous kernel of its stream ends). Each is checked when a configuration is first launched.
        An option not given keeps this Function's; the same options give the same Function again.
        """
        # Why: docs/hazards.md, "Launch attributes belong to the configuration".
        return twin_of(self, cluster, cooperative, programmatic)

    def pack(self, args: tuple[Any, ...]) -> Packed:
        """Check ``args`` against the kernel's signature and build a new ``kernelParams`` array for them."""
        return self._packer.pack(args)

    def declare_read_only(self, *indices: int) -> Function:
        """Say that the kernel only reads through these pointer parameters (0-based). Returns the function.

        Another library's read-only array (``__cuda_array_interface__`` data[1] = True) may then be passed there.
        Only you can say it: ``const`` is not part of a kernel's PTX signature.
        """
        self.params = with_read_only(self.name, self.params, indices)
        self._packer = ArgPacker(self.name, self.params, self.context)
        self._packed = EMPTY_PACK
        self._history.clear()
        return self

    def prepare(self, grid: Any, block: Any, shared_mem: int, stream: Stream | None) -> tuple[Any, ...]:
        """Validate once, then build the driver arguments before kernelParams: ``(&config, function)``.

        The ``CUlaunchConfig`` is new for every configuration and never written again.
        So a launch in another thread can never see it change. ``byref`` keeps it alive while the tuple is cached.
        """
        # Why: docs/hazards.md, "Launch arguments are never rewritten".
        self.check_open()
        if self._generation != closes.generation:
            # Something was closed: a cached stream handle might be stale, and a packed buffer freed.
            self._prepared.clear()
            self._packed = EMPTY_PACK
            self._history.clear()
            self._generation = closes.generation
        config = self.configure(grid, block, shared_mem)
        h_stream = stream_handle(stream, self.context)
        attrs = attributes_for(self, config, h_stream) if self.launch_options.any else None
        prepared = (byref(launch_config(config, h_stream, attrs)), c_void_p(self._handle))
        if len(self._prepared) < _MAX_CONFIGS:
            self._prepared[(hashable(grid), hashable(block), shared_mem, id(stream))] = prepared
        return prepared

    def configure(self, grid: Any, block: Any, shared_mem: int = 0) -> LaunchConfig:
        """Check a launch configuration against the device and the kernel (remembered once checked)."""
        key = (hashable(grid), hashable(block), shared_mem)
        try:
            config = self._configs.get(key)
        except TypeError:  # something unhashable: not a valid configuration, as the checks below will say
            config = None
        if config is not None:
            return config
        g, b = dims("grid", grid), dims("block", block)
        limits = self._limits()
        for axis, n in enumerate(b):
            if n > limits["block"][axis]:
                raise ValueError(
                    f"block dimension {'xyz'[axis]} = {n} exceeds the device limit {limits['block'][axis]}"
                )
        threads = b[0] * b[1] * b[2]
        if threads > limits["threads"]:
            raise ValueError(
                f"a block of {b} = {threads} threads is too large for {self.name!r}: at most "
                f"{limits['threads']} (the device allows 1024; registers or __launch_bounds__ may "
                "lower it)"
            )
        for axis, n in enumerate(g):
            if n > limits["grid"][axis]:
                raise ValueError(f"grid dimension {'xyz'[axis]} = {n} exceeds the device limit {limits['grid'][axis]}")
        self._configure_shared(shared_mem, limits)
        check_compiled_in(self, g)
        config: LaunchConfig = (*g, *b, int(shared_mem))
        if len(self._configs) < _MAX_CONFIGS:
            self._configs[key] = config
        return config

    def _limits(self) -> dict[str, Any]:
        """The device's and the kernel's limits on a launch, read once."""
        if self._limit_cache is None:
            dev = self.context.device
            self._limit_cache = {
                "block": [dev.attribute(a) for a in (A.MAX_BLOCK_DIM_X, A.MAX_BLOCK_DIM_Y, A.MAX_BLOCK_DIM_Z)],
                "grid": [dev.attribute(a) for a in (A.MAX_GRID_DIM_X, A.MAX_GRID_DIM_Y, A.MAX_GRID_DIM_Z)],
                "threads": self.max_threads_per_block,
                "static_shared": self.shared_size_bytes,
                "optin_shared": dev.max_shared_memory_per_block_optin,
            }
        return self._limit_cache

    def _configure_shared(self, shared_mem: int, limits: dict[str, Any]) -> None:
        """Check ``shared_mem`` against the device. Above the default limit, opt the kernel in."""
        if integral(shared_mem) is None or shared_mem < 0:
            raise ValueError(f"shared_mem must be a byte count >= 0, got {shared_mem!r}")
        shared_mem = int(shared_mem)
        static, optin = limits["static_shared"], limits["optin_shared"]
        if static + shared_mem > optin:
            raise ValueError(
                f"{shared_mem} bytes of dynamic shared memory plus {static} static exceed the "
                f"{optin} bytes a block can have on this device"
            )
        optin = self.shared_optin
        if optin[0] is None:
            optin[0] = max(DEFAULT_SHARED_LIMIT - static, 0)
        if shared_mem > optin[0]:
            # Above 48 KiB in all a kernel must opt in: raise its limit, then launches may use up to it.
            # Raised only, never lowered: a configuration this kernel (or a twin) validated stays valid.
            self.set_attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
            optin[0] = shared_mem

    def __repr__(self) -> str:
        sig = ", ".join(s.ptx_type for s in self.params)
        return f"<Function {self.name}({sig}) of {self.module.name!r}{' closed' if self.closed else ''}>"
