"""Layer 0, driver table section: streams (ordered queues of GPU work) and events (markers in them)."""

from __future__ import annotations

from ctypes import c_float, c_int, c_uint, c_ulonglong

from ..decl import decl
from ..types import CUcontext, CUevent, CUstream, P

ENTRIES = [
    decl("CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)", "cuStreamCreate", P(CUstream), c_uint),
    decl(
        "CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)",
        "cuStreamCreateWithPriority",
        P(CUstream),
        c_uint,
        c_int,
    ),
    # Destroying a stream with work still queued is legal: the work finishes, then resources go.
    decl("CUresult cuStreamDestroy(CUstream hStream)", "cuStreamDestroy_v2", CUstream),
    decl("CUresult cuStreamSynchronize(CUstream hStream)", "cuStreamSynchronize", CUstream),
    # CUDA_SUCCESS when idle, CUDA_ERROR_NOT_READY (600) while work is pending: 600 is not a failure.
    decl("CUresult cuStreamQuery(CUstream hStream)", "cuStreamQuery", CUstream),
    decl(
        "CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)",
        "cuStreamWaitEvent",
        CUstream,
        CUevent,
        c_uint,
    ),
    decl("CUresult cuStreamGetPriority(CUstream hStream, int *priority)", "cuStreamGetPriority", CUstream, P(c_int)),
    decl("CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)", "cuStreamGetFlags", CUstream, P(c_uint)),
    # The context a stream belongs to: asked of another library's stream before rawcuda queues work on it.
    decl("CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)", "cuStreamGetCtx", CUstream, P(CUcontext)),
    decl(
        "CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)",
        "cuStreamGetId",
        CUstream,
        P(c_ulonglong),
    ),
    # --- events
    decl("CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)", "cuEventCreate", P(CUevent), c_uint),
    decl("CUresult cuEventDestroy(CUevent hEvent)", "cuEventDestroy_v2", CUevent),
    decl("CUresult cuEventRecord(CUevent hEvent, CUstream hStream)", "cuEventRecord", CUevent, CUstream),
    decl("CUresult cuEventSynchronize(CUevent hEvent)", "cuEventSynchronize", CUevent),
    decl("CUresult cuEventQuery(CUevent hEvent)", "cuEventQuery", CUevent),
    # Milliseconds with about 0.5 us resolution. cuda.h 13 maps the plain name to _v2 (a driver too
    # old to export it gets a MissingSymbolError naming it). Both events must have completed.
    decl(
        "CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)",
        "cuEventElapsedTime_v2",
        P(c_float),
        CUevent,
        CUevent,
    ),
]
