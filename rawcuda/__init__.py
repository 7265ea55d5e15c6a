"""rawcuda, the package: the CUDA Driver API from Python through hand-written ctypes declarations.

One folder per role, each importing only the folders below it (docs/architecture.md draws the map)::

    ops/        the shipped kernels as functions: ops.vector_add, ops.sum, ops.matmul ...
    graphs/     stream capture and CUDA graphs         extras/  aio, managed, growable, nvrtc, adopt
    core/       the objects: Context, Stream, Event, DeviceBuffer, Module, Function (the textbook)
    core/guards/  what keeps core right beside other libraries, threads and the GC
    protocols/  DLPack and the CUDA Array Interface as data
    checked/    layer 1: the tables bound to libcuda / libnvrtc; every result code -> an exception
    ffi/        layer 0: declarations only -- the driver table, NVRTC's, types, constants, the loader
    tools/      beside them: the header check, the kernel build, doctor, demo
    testing/    beside them: the pytest plugin, the leak check, assert_device_equal

``import rawcuda`` never touches the driver: libcuda is opened on the first call that needs it, so the
package imports on machines without a GPU. Heavier submodules are imported on first attribute access.
"""

import importlib as _importlib
import typing as _typing

from .checked.errors import (
    ClosedError,
    ContextError,
    ContextPoisonedError,
    CudaError,
    DeviceError,
    DriverNotFoundError,
    ForkedProcessError,
    GraphError,
    IntegerRangeError,
    InvalidHandleError,
    InvalidValueError,
    KernelFaultError,
    LaunchError,
    MissingSymbolError,
    ModuleLoadError,
    NoDeviceError,
    NotFoundError,
    NotInitializedError,
    NotReadyError,
    NotSupportedError,
    OutOfMemoryError,
    RawCudaError,
    StreamCaptureError,
    StubLibraryError,
)
from .ffi.results import Result

__version__ = "0.1.0"

# name -> module that defines it; imported on first access (PEP 562) to keep `import rawcuda` fast.
_LAZY: dict[str, str] = {
    "cu": "rawcuda.checked",
    "init": "rawcuda.checked",
    "driver_version": "rawcuda.checked",
    "constants": "rawcuda.ffi.constants",
    "ptx": "rawcuda.core.ptx",
    "kernels": "rawcuda.kernels",
    "trace": "rawcuda.checked.tracing",
    "ops": "rawcuda.ops",
    "Device": "rawcuda.core.device",
    "Context": "rawcuda.core.context",
    "default_context": "rawcuda.core.context",
    "Stream": "rawcuda.core.stream",
    "BorrowedStream": "rawcuda.core.streamargs",
    "Event": "rawcuda.core.event",
    "Timing": "rawcuda.core.event",
    "HostCall": "rawcuda.core.hostfunc",
    "MemoryPool": "rawcuda.core.mempool",
    "PoolBuffer": "rawcuda.core.poolbuffer",
    "HostFunctionError": "rawcuda.core.hostfunc",
    "time_ms": "rawcuda.core.event",
    "DeviceBuffer": "rawcuda.core.devicebuffer",
    "PinnedBuffer": "rawcuda.core.pinned",
    "ManagedBuffer": "rawcuda.extras.managed",
    "Module": "rawcuda.core.module",
    "Function": "rawcuda.core.function",
    "BoundLaunch": "rawcuda.core.boundlaunch",
    "ArgumentError": "rawcuda.core.kernelargs",
    "Graph": "rawcuda.graphs.graph",
    "GraphExec": "rawcuda.graphs.graphexec",
    "KernelNode": "rawcuda.graphs.kernelnode",
    "capture": "rawcuda.graphs.streamcapture",
    "graph": "rawcuda.graphs.graph",
    "capture_status": "rawcuda.graphs.streamcapture",
    "aio": "rawcuda.extras.aio",
    "GrowableBuffer": "rawcuda.extras.growable",
    "ForeignBuffer": "rawcuda.extras.foreign",
    "adopt": "rawcuda.extras.foreign",
    "from_dlpack": "rawcuda.extras.foreign",
    "CapacityError": "rawcuda.extras.growable",
    "nvrtc": "rawcuda.extras.nvrtc",
    "NvrtcError": "rawcuda.checked.errors",
    "NvrtcNotFoundError": "rawcuda.checked.errors",
    "proc_address": "rawcuda.checked.procaddress",
    "table_address": "rawcuda.checked.procaddress",
    "StreamCaptureMode": "rawcuda.ffi.constants",
    "GraphInstantiateFlag": "rawcuda.ffi.constants",
    "CtxFlag": "rawcuda.ffi.constants",
    "StreamFlag": "rawcuda.ffi.constants",
    "EventFlag": "rawcuda.ffi.constants",
    "HostAllocFlag": "rawcuda.ffi.constants",
    "DeviceAttribute": "rawcuda.ffi.attributes",
    "FunctionAttribute": "rawcuda.ffi.attributes",
    "MemAdvise": "rawcuda.ffi.constants",
    "JitOption": "rawcuda.ffi.constants",
}


def __getattr__(name: str) -> _typing.Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'rawcuda' has no attribute {name!r}")
    module = _importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


# What `from rawcuda import *`, dir() and help() show: the eager names (the exceptions, Result) and the lazy
# ones. Why list the lazy ones too? help() documents what __all__ names, and `import *` imports exactly that.
__all__ = [
    "ClosedError",
    "ContextError",
    "ContextPoisonedError",
    "CudaError",
    "DeviceError",
    "DriverNotFoundError",
    "ForkedProcessError",
    "GraphError",
    "IntegerRangeError",
    "InvalidHandleError",
    "InvalidValueError",
    "KernelFaultError",
    "LaunchError",
    "MissingSymbolError",
    "ModuleLoadError",
    "NoDeviceError",
    "NotFoundError",
    "NotInitializedError",
    "NotReadyError",
    "NotSupportedError",
    "OutOfMemoryError",
    "RawCudaError",
    "Result",
    "StreamCaptureError",
    "StubLibraryError",
    "__version__",
]
__all__ += sorted(_LAZY)


def __dir__() -> list[str]:
    # Only the public names: not the helpers this file imports for itself (importlib, typing).
    return list(__all__)
