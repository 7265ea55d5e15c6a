"""rawcuda: the CUDA Driver API from Python, through hand-written ctypes declarations.

Three layers, visible in the file names::

    layer 2  objects   device.py context.py stream.py memory.py module.py launch.py ...
                       (context managers with deterministic close(); no manual glue)
    layer 1  checked   checked.py   -- table rows bound to libcuda; CUresult -> exception
                       errors.py    -- the exceptions, with hints
    layer 0  ffi       ffi/library.py (find + lazily dlopen libcuda)  ffi/types.py  ffi/constants.py
                       ffi/results.py  ffi/table/ (THE declaration table)  ffi/headercheck.py

``import rawcuda`` never touches the driver: libcuda is opened on the first call that needs it, so the
package imports on machines without a GPU. Heavier submodules are imported on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import (
    ClosedError,
    ContextError,
    ContextPoisonedError,
    CudaError,
    DeviceError,
    DriverNotFoundError,
    ForkedProcessError,
    GraphError,
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
    "ptx": "rawcuda.ptx",
    "kernels": "rawcuda.kernels",
    "trace": "rawcuda.tracing",
    "ops": "rawcuda.ops",
    "Device": "rawcuda.device",
    "Context": "rawcuda.context",
    "default_context": "rawcuda.context",
    "Stream": "rawcuda.stream",
    "Event": "rawcuda.event",
    "DeviceBuffer": "rawcuda.memory",
    "PinnedBuffer": "rawcuda.hostmem",
    "ManagedBuffer": "rawcuda.managed",
    "Module": "rawcuda.module",
    "Function": "rawcuda.function",
    "BoundLaunch": "rawcuda.function",
    "ArgumentError": "rawcuda.launch",
    "Graph": "rawcuda.graph",
    "GraphExec": "rawcuda.graph",
    "KernelNode": "rawcuda.graph",
    "capture": "rawcuda.graph",
    "graph": "rawcuda.graph",
    "aio": "rawcuda.aio",
    "GrowableBuffer": "rawcuda.vmm",
    "CapacityError": "rawcuda.vmm",
    "nvrtc": "rawcuda.nvrtc",
    "NvrtcError": "rawcuda.nvrtc",
    "NvrtcNotFoundError": "rawcuda.nvrtc",
    "proc_address": "rawcuda.procaddress",
    "table_address": "rawcuda.procaddress",
    "StreamCaptureMode": "rawcuda.ffi.constants",
    "GraphInstantiateFlag": "rawcuda.ffi.constants",
    "CtxFlag": "rawcuda.ffi.constants",
    "StreamFlag": "rawcuda.ffi.constants",
    "EventFlag": "rawcuda.ffi.constants",
    "HostAllocFlag": "rawcuda.ffi.constants",
    "DeviceAttribute": "rawcuda.ffi.constants",
    "FunctionAttribute": "rawcuda.ffi.constants",
    "MemAdvise": "rawcuda.ffi.constants",
    "JitOption": "rawcuda.ffi.constants",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'rawcuda' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ClosedError",
    "ContextError",
    "ContextPoisonedError",
    "CudaError",
    "DeviceError",
    "DriverNotFoundError",
    "ForkedProcessError",
    "GraphError",
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
