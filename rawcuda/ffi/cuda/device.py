"""Layer 0, driver table section: devices -- enumerate them, name them, and ask what they can do."""

from __future__ import annotations

from ctypes import c_char_p, c_int, c_size_t

from ..decl import decl
from ..types import CUdevice, CUuuid, P, enum

ENTRIES = [
    decl("CUresult cuDeviceGetCount(int *count)", "cuDeviceGetCount", P(c_int)),
    # A CUdevice is a handle, not an index, even though today's drivers make them equal.
    decl("CUresult cuDeviceGet(CUdevice *device, int ordinal)", "cuDeviceGet", P(CUdevice), c_int),
    decl("CUresult cuDeviceGetName(char *name, int len, CUdevice dev)", "cuDeviceGetName", c_char_p, c_int, CUdevice),
    # _v2: the v1 symbol returned a different UUID for MIG instances.
    decl("CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)", "cuDeviceGetUuid_v2", P(CUuuid), CUdevice),
    # _v2: v1 wrote the size into a 32-bit unsigned int, which cannot hold 141 GB.
    decl("CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)", "cuDeviceTotalMem_v2", P(c_size_t), CUdevice),
    decl(
        "CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)",
        "cuDeviceGetAttribute",
        P(c_int),
        enum,
        CUdevice,
    ),
    decl(
        "CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)",
        "cuDeviceGetPCIBusId",
        c_char_p,
        c_int,
        CUdevice,
    ),
    decl(
        "CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)",
        "cuDeviceCanAccessPeer",
        P(c_int),
        CUdevice,
        CUdevice,
    ),
]
