"""Layer 0, driver table section: start-up, versions, error strings, and looking up entry points by version."""

from __future__ import annotations

from ctypes import POINTER, c_char_p, c_int, c_uint

from ..decl import decl
from ..types import VOIDPP, P, cuuint64_t, enum

ENTRIES = [
    # Must be the first call into the driver; Flags must be 0. The toolkit's *stub* libcuda answers
    # CUDA_ERROR_STUB_LIBRARY (34) here, which is how rawcuda tells a stub from a driver.
    decl("CUresult cuInit(unsigned int Flags)", "cuInit", c_uint),
    # 13000 means CUDA 13.0: the newest CUDA (and so PTX ISA) this driver understands.
    decl("CUresult cuDriverGetVersion(int *driverVersion)", "cuDriverGetVersion", P(c_int)),
    # Both hand back a pointer to a static string owned by the driver: never free it.
    decl("CUresult cuGetErrorName(CUresult error, const char **pStr)", "cuGetErrorName", enum, POINTER(c_char_p)),
    decl("CUresult cuGetErrorString(CUresult error, const char **pStr)", "cuGetErrorString", enum, POINTER(c_char_p)),
    # What the CUDA runtime uses instead of dlsym: "give me cuMemAlloc as it was in CUDA 11.0".
    decl(
        "CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, "
        "CUdriverProcAddressQueryResult *symbolStatus)",
        "cuGetProcAddress_v2",
        c_char_p,
        VOIDPP,
        c_int,
        cuuint64_t,
        P(enum),
    ),
]
