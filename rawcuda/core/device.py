"""Core: a GPU as the driver sees it -- name, compute capability, memory, any attribute by name.

``Device(0)`` is cheap: it calls cuInit (once per process) and cuDeviceGet, nothing else. Everything
it knows comes from cuDeviceGetAttribute with a named :class:`~rawcuda.ffi.constants.DeviceAttribute`,
so ``dev.attribute(DeviceAttribute.L2_CACHE_SIZE)`` reads like the C it replaces.
"""

from __future__ import annotations

import ctypes
import functools
import uuid
from ctypes import byref, c_int, c_size_t

from rawcuda import checked
from rawcuda.checked import cu
from rawcuda.ffi.attributes import DeviceAttribute
from rawcuda.ffi.types import CUuuid

from .integers import integer, whole

_NAME_BYTES = 256
_PCI_ID_BYTES = 32


class Device:
    """One GPU. Equal devices compare equal; ``Device(0)`` twice is the same GPU.

    Raises ValueError for an ordinal this process cannot see.
    """

    def __init__(self, ordinal: int = 0) -> None:
        number = whole(ordinal)
        if number is None:
            raise TypeError(
                f"a device ordinal is an int (0 for the first GPU), not {type(ordinal).__name__} {ordinal!r}"
            )
        checked.init()
        n = Device.count()
        if not 0 <= number < n:
            raise ValueError(
                f"no GPU with ordinal {number}: this process sees {n} device(s), ordinals 0..{n - 1} "
                "(CUDA_VISIBLE_DEVICES changes which GPUs are visible and their order)"
            )
        handle = c_int()
        cu.cuDeviceGet(byref(handle), number)
        self.ordinal = number
        self.handle = handle.value

    @staticmethod
    def count() -> int:
        """How many GPUs this process can see."""
        checked.init()
        n = c_int()
        cu.cuDeviceGetCount(byref(n))
        return n.value

    @classmethod
    def all(cls) -> list[Device]:
        return [cls(i) for i in range(cls.count())]

    def attribute(self, which: DeviceAttribute | int) -> int:
        """Any cuDeviceGetAttribute value, by :class:`DeviceAttribute`."""
        value = c_int()
        cu.cuDeviceGetAttribute(byref(value), integer(which, "attribute"), self.handle)
        return value.value

    def attributes(self) -> dict[str, int]:
        """Every attribute rawcuda names, as a dict (handy for a report)."""
        return {a.name: self.attribute(a) for a in DeviceAttribute}

    @functools.cached_property
    def name(self) -> str:
        buf = ctypes.create_string_buffer(_NAME_BYTES)
        cu.cuDeviceGetName(buf, _NAME_BYTES, self.handle)
        return buf.value.decode(errors="replace")

    @functools.cached_property
    def compute_capability(self) -> tuple[int, int]:
        return (
            self.attribute(DeviceAttribute.COMPUTE_CAPABILITY_MAJOR),
            self.attribute(DeviceAttribute.COMPUTE_CAPABILITY_MINOR),
        )

    @functools.cached_property
    def total_memory(self) -> int:
        """Bytes of device memory (cuDeviceTotalMem_v2: the v1 symbol truncated this to 32 bits)."""
        total = c_size_t()
        cu.cuDeviceTotalMem(byref(total), self.handle)
        return total.value

    @functools.cached_property
    def uuid(self) -> uuid.UUID:
        raw = CUuuid()
        cu.cuDeviceGetUuid(byref(raw), self.handle)
        return uuid_of(raw)

    @functools.cached_property
    def pci_bus_id(self) -> str:
        buf = ctypes.create_string_buffer(_PCI_ID_BYTES)
        cu.cuDeviceGetPCIBusId(buf, _PCI_ID_BYTES, self.handle)
        return buf.value.decode()

    @functools.cached_property
    def multiprocessor_count(self) -> int:
        return self.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT)

    @property
    def max_threads_per_block(self) -> int:
        return self.attribute(DeviceAttribute.MAX_THREADS_PER_BLOCK)

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """The most dynamic+static shared memory one block may opt into (cuFuncSetAttribute)."""
        return self.attribute(DeviceAttribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(("Device", self.handle))

    def __repr__(self) -> str:
        major, minor = self.compute_capability
        return f"<Device {self.ordinal}: {self.name}, sm_{major}{minor}, {self.total_memory / 2**30:.1f} GiB>"


def uuid_of(raw: CUuuid) -> uuid.UUID:
    """The 16 bytes of a ``CUuuid`` as a UUID.

    Why not ``raw.bytes``: ctypes reads a ``char[16]`` field as a C string, cut at its first zero byte.
    """
    return uuid.UUID(bytes=ctypes.string_at(ctypes.addressof(raw), ctypes.sizeof(raw)))
