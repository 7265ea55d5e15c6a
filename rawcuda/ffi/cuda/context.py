"""Layer 0, driver table section: contexts -- the primary context, created contexts, the per-thread stack."""

from __future__ import annotations

from ctypes import c_int, c_size_t, c_uint, c_ulonglong

from ..decl import decl
from ..types import CUcontext, CUctxCreateParams, CUdevice, P, enum

ENTRIES = [
    # The primary context is the one the runtime API, CuPy and torch share: one per device,
    # reference-counted by retain/release. rawcuda defaults to it.
    decl(
        "CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)",
        "cuDevicePrimaryCtxRetain",
        P(CUcontext),
        CUdevice,
    ),
    decl("CUresult cuDevicePrimaryCtxRelease(CUdevice dev)", "cuDevicePrimaryCtxRelease_v2", CUdevice),
    decl(
        "CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)",
        "cuDevicePrimaryCtxGetState",
        CUdevice,
        P(c_uint),
        P(c_int),
    ),
    decl(
        "CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)",
        "cuDevicePrimaryCtxSetFlags_v2",
        CUdevice,
        c_uint,
    ),
    decl("CUresult cuDevicePrimaryCtxReset(CUdevice dev)", "cuDevicePrimaryCtxReset_v2", CUdevice),
    # CUDA 13: cuCtxCreate *is* cuCtxCreate_v4, with a params struct (NULL = no extras) before the flags.
    # The old cuCtxCreate_v2(CUcontext*, unsigned, CUdevice) has a different argument list: binding the
    # plain name from an old tutorial would pass the flags where the struct pointer goes.
    decl(
        "CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)",
        "cuCtxCreate_v4",
        P(CUcontext),
        P(CUctxCreateParams),
        c_uint,
        CUdevice,
    ),
    decl("CUresult cuCtxDestroy(CUcontext ctx)", "cuCtxDestroy_v2", CUcontext),
    decl("CUresult cuCtxPushCurrent(CUcontext ctx)", "cuCtxPushCurrent_v2", CUcontext),
    decl("CUresult cuCtxPopCurrent(CUcontext *pctx)", "cuCtxPopCurrent_v2", P(CUcontext)),
    decl("CUresult cuCtxSetCurrent(CUcontext ctx)", "cuCtxSetCurrent", CUcontext),
    decl("CUresult cuCtxGetCurrent(CUcontext *pctx)", "cuCtxGetCurrent", P(CUcontext)),
    decl("CUresult cuCtxGetDevice(CUdevice *device)", "cuCtxGetDevice", P(CUdevice)),
    decl("CUresult cuCtxGetFlags(unsigned int *flags)", "cuCtxGetFlags", P(c_uint)),
    decl("CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)", "cuCtxGetId", CUcontext, P(c_ulonglong)),
    decl(
        "CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)", "cuCtxGetApiVersion", CUcontext, P(c_uint)
    ),
    decl("CUresult cuCtxSynchronize(void)", "cuCtxSynchronize"),
    # Lower number = higher priority: the range comes back as (least, greatest), e.g. (0, -5).
    decl(
        "CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)",
        "cuCtxGetStreamPriorityRange",
        P(c_int),
        P(c_int),
    ),
    decl("CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)", "cuCtxGetLimit", P(c_size_t), enum),
    decl("CUresult cuCtxSetLimit(CUlimit limit, size_t value)", "cuCtxSetLimit", enum, c_size_t),
]
