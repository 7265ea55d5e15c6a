"""Layer 1: which exception class each CUresult code raises -- grouped by what you would do about it.

:func:`error_class` is what :func:`rawcuda.checked.describe.make_error` asks for every failed call. Codes
with no group raise plain :class:`~rawcuda.checked.errors.CudaError`; every sticky code (after which the
context is lost) raises :class:`~rawcuda.checked.errors.KernelFaultError`.
"""

from __future__ import annotations

from ..ffi.results import STICKY, Result
from .errors import (
    ContextError,
    CudaError,
    DeviceError,
    GraphError,
    InvalidHandleError,
    InvalidValueError,
    KernelFaultError,
    LaunchError,
    ModuleLoadError,
    NoDeviceError,
    NotFoundError,
    NotInitializedError,
    NotReadyError,
    NotSupportedError,
    OutOfMemoryError,
    StreamCaptureError,
    StubLibraryError,
)

R = Result  # short alias for the table below

_CLASS_BY_CODE: dict[int, type[CudaError]] = {
    R.ERROR_INVALID_VALUE: InvalidValueError,
    R.ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    R.ERROR_NOT_INITIALIZED: NotInitializedError,
    R.ERROR_DEINITIALIZED: NotInitializedError,
    R.ERROR_STUB_LIBRARY: StubLibraryError,
    R.ERROR_DEVICE_UNAVAILABLE: DeviceError,
    R.ERROR_NO_DEVICE: NoDeviceError,
    R.ERROR_INVALID_DEVICE: DeviceError,
    R.ERROR_DEVICE_NOT_LICENSED: DeviceError,
    R.ERROR_INVALID_CONTEXT: ContextError,
    R.ERROR_CONTEXT_ALREADY_CURRENT: ContextError,
    R.ERROR_CONTEXT_ALREADY_IN_USE: ContextError,
    R.ERROR_PRIMARY_CONTEXT_ACTIVE: ContextError,
    R.ERROR_CONTEXT_IS_DESTROYED: ContextError,
    R.ERROR_INVALID_IMAGE: ModuleLoadError,
    R.ERROR_NO_BINARY_FOR_GPU: ModuleLoadError,
    R.ERROR_INVALID_PTX: ModuleLoadError,
    R.ERROR_JIT_COMPILER_NOT_FOUND: ModuleLoadError,
    R.ERROR_UNSUPPORTED_PTX_VERSION: ModuleLoadError,
    R.ERROR_JIT_COMPILATION_DISABLED: ModuleLoadError,
    R.ERROR_INVALID_SOURCE: ModuleLoadError,
    R.ERROR_FILE_NOT_FOUND: ModuleLoadError,
    R.ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: ModuleLoadError,
    R.ERROR_SHARED_OBJECT_INIT_FAILED: ModuleLoadError,
    R.ERROR_INVALID_HANDLE: InvalidHandleError,
    R.ERROR_ILLEGAL_STATE: InvalidHandleError,
    R.ERROR_NOT_FOUND: NotFoundError,
    R.ERROR_NOT_READY: NotReadyError,
    R.ERROR_LAUNCH_OUT_OF_RESOURCES: LaunchError,
    R.ERROR_LAUNCH_INCOMPATIBLE_TEXTURING: LaunchError,
    R.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: LaunchError,
    R.ERROR_INVALID_CLUSTER_SIZE: LaunchError,
    R.ERROR_NOT_PERMITTED: NotSupportedError,
    R.ERROR_NOT_SUPPORTED: NotSupportedError,
    R.ERROR_SYSTEM_NOT_READY: NotSupportedError,
    R.ERROR_SYSTEM_DRIVER_MISMATCH: NotSupportedError,
    R.ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: NotSupportedError,
    R.ERROR_STREAM_CAPTURE_UNSUPPORTED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_INVALIDATED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_MERGE: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_UNMATCHED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_UNJOINED: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_ISOLATION: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_IMPLICIT: StreamCaptureError,
    R.ERROR_CAPTURED_EVENT: StreamCaptureError,
    R.ERROR_STREAM_CAPTURE_WRONG_THREAD: StreamCaptureError,
    R.ERROR_GRAPH_EXEC_UPDATE_FAILURE: GraphError,
}
_CLASS_BY_CODE.update(dict.fromkeys(STICKY, KernelFaultError))


def error_class(code: int) -> type[CudaError]:
    """The exception class for a CUresult (plain :class:`CudaError` for codes with no category)."""
    return _CLASS_BY_CODE.get(code, CudaError)


__all__ = ["error_class"]
