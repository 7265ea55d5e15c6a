"""Layer 1: the hints -- for each error people actually hit, the likely cause and the fix, in words.

Text only, kept apart from the exception classes (:mod:`rawcuda.checked.errors`) so that each file reads in
one sitting. Every hint is written for a reader who has never seen the code before.
"""

from __future__ import annotations

from ..ffi.results import NvrtcResult, Result

R = Result  # short alias for the tables below

#: The likely cause and the fix, for the codes people hit. Written for a reader who has never seen
#: the code before.
HINTS: dict[int, str] = {
    R.ERROR_INVALID_VALUE: (
        "an argument is out of range or NULL where a value is required: check sizes (bytes vs "
        "elements), flags, and that handles belong to the current context"
    ),
    R.ERROR_OUT_OF_MEMORY: (
        "free what you no longer need (close() buffers, or drop references and run gc.collect()), "
        "allocate less, or look for other processes holding GPU memory with nvidia-smi"
    ),
    R.ERROR_NOT_INITIALIZED: (
        "cuInit(0) has not been called in this process: rawcuda's classes call it for you; when you call "
        "the table directly, call cuInit(0) first"
    ),
    R.ERROR_DEINITIALIZED: "the driver is shutting down (interpreter exit): no more CUDA calls can succeed",
    R.ERROR_STUB_LIBRARY: (
        "the libcuda that was loaded is the CUDA toolkit's *stub*, which exists only so programs can link "
        "on machines without a driver; every call into it fails. Install the NVIDIA driver, or point "
        "RAWCUDA_LIBCUDA at the real libcuda.so.1 (`ldconfig -p | grep libcuda` lists it) and remove the "
        "toolkit's lib64/stubs directory from LD_LIBRARY_PATH"
    ),
    R.ERROR_CALL_REQUIRES_NEWER_DRIVER: "this call needs a newer NVIDIA driver than the one installed",
    R.ERROR_DEVICE_UNAVAILABLE: (
        "the GPU is busy or exclusive to another process (compute mode EXCLUSIVE_PROCESS?); check nvidia-smi"
    ),
    R.ERROR_NO_DEVICE: (
        "the driver loaded but sees no GPU: check nvidia-smi, CUDA_VISIBLE_DEVICES (empty or wrong?), and "
        "that the container was started with GPU access (e.g. docker --gpus all)"
    ),
    R.ERROR_INVALID_DEVICE: "no GPU with that ordinal: rawcuda.Device.count() says how many this process sees",
    R.ERROR_INVALID_IMAGE: (
        "the module image is not valid PTX, cubin or fatbin: a truncated file, a binary read as text, or "
        "PTX without its terminating NUL byte"
    ),
    R.ERROR_INVALID_CONTEXT: (
        "no context is current on this thread (or the handle is not a context): make one current with "
        "`with ctx:` -- rawcuda's objects do this for every call they make"
    ),
    R.ERROR_CONTEXT_IS_DESTROYED: (
        "the context was destroyed while something still used it -- the seed's RAII-order trap: free "
        "buffers, modules and streams *before* destroying their context (rawcuda's objects keep their "
        "context alive to prevent this)"
    ),
    R.ERROR_NO_BINARY_FOR_GPU: (
        "the image has no machine code for this GPU and no PTX to compile: rebuild for this GPU's "
        "architecture (nvcc -arch=sm_XY, see Device.compute_capability) or ship PTX (nvcc --ptx)"
    ),
    R.ERROR_INVALID_PTX: (
        "the driver's JIT rejected the PTX: the JIT error log above says where (rawcuda's Module asks the "
        "driver for one; a bare cuModuleLoadData gets none); regenerate it with nvcc --ptx and check that "
        "its .target is not newer than this GPU"
    ),
    R.ERROR_UNSUPPORTED_PTX_VERSION: (
        "the PTX was written by a newer CUDA toolkit than this driver understands (its .version is higher "
        "than the driver's PTX ISA). Fix 1: update the NVIDIA driver. Fix 2: compile with a toolkit no "
        "newer than the driver (compare `nvcc --version` with cuDriverGetVersion), or ship a cubin for "
        "this GPU instead of PTX"
    ),
    R.ERROR_JIT_COMPILER_NOT_FOUND: "the driver's PTX JIT library is missing: reinstall the NVIDIA driver",
    R.ERROR_FILE_NOT_FOUND: "the module file does not exist: check the path (relative to the working directory?)",
    R.ERROR_INVALID_HANDLE: (
        "a handle (stream, event, module, function, graph) is invalid: destroyed already, never created, "
        "or from another context; rawcuda's objects raise ClosedError before this can happen"
    ),
    R.ERROR_NOT_FOUND: (
        "no symbol of that name in the module: check the spelling, and remember that C++ kernels are "
        'name-mangled (_Z...) unless declared extern "C"'
    ),
    R.ERROR_NOT_READY: "the work has not finished yet: a status, not a failure (query() returns False)",
    R.ERROR_ILLEGAL_ADDRESS: (
        "a kernel read or wrote memory it does not own: an index past the end, a freed buffer, or a host "
        "pointer passed where a device pointer goes. Find it with compute-sanitizer"
    ),
    R.ERROR_LAUNCH_OUT_OF_RESOURCES: (
        "the kernel needs more registers or shared memory than one block of this size can have: use a "
        "smaller block (Function.max_threads_per_block) or limit registers (__launch_bounds__)"
    ),
    R.ERROR_LAUNCH_TIMEOUT: "the kernel ran longer than the display watchdog allows: split the work",
    R.ERROR_ASSERT: "a device-side assert() failed in a kernel",
    R.ERROR_MISALIGNED_ADDRESS: "a kernel accessed memory at an address not aligned to the access size",
    R.ERROR_LAUNCH_FAILED: "a kernel faulted (an exception on the GPU); compute-sanitizer will say where",
    R.ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: (
        "a cooperative grid must fit on the GPU at once: at most (blocks per SM from the occupancy API) "
        "x (number of SMs) blocks"
    ),
    R.ERROR_NOT_SUPPORTED: "this device or driver does not support the operation (check the device attribute)",
    R.ERROR_SYSTEM_DRIVER_MISMATCH: (
        "libcuda and the kernel driver are different versions: often a forward-compatibility libcuda "
        "(cuda-compat) on a GPU it does not support, or a driver update without a reboot"
    ),
    R.ERROR_STREAM_CAPTURE_UNSUPPORTED: (
        "not allowed while a stream is being captured into a graph: no synchronous copies, no "
        "synchronize, no legacy-stream work -- rawcuda calls without stream= (copy_from, to_array, fill, "
        "launch) synchronize the context, so pass stream=<the capturing stream> to record them instead"
    ),
    R.ERROR_STREAM_CAPTURE_INVALIDATED: (
        "an earlier illegal call invalidated the capture: end it, discard the graph and capture again"
    ),
    R.ERROR_STREAM_CAPTURE_IMPLICIT: (
        "the legacy default stream cannot take part in capture: capture on a stream you created"
    ),
    R.ERROR_GRAPH_EXEC_UPDATE_FAILURE: (
        "the new graph differs in topology or node types from the instantiated one: instantiate it instead"
    ),
}

STICKY_HINT = (
    "this error is *sticky*: CUDA is now unusable in this whole process -- every later call fails with the "
    "same code, in this context and in any new one (Context.create and Context.primary fail too); only a new "
    "process recovers, so run risky kernels in a child process (tutorial 05f). To find the guilty kernel, "
    "synchronize after each launch (RAWCUDA_SYNC_LAUNCHES=1)"
)

#: Likely cause and fix for the codes people hit.
NVRTC_HINTS: dict[int, str] = {
    NvrtcResult.ERROR_COMPILATION: "the source does not compile: the log above names the file, line and reason",
    NvrtcResult.ERROR_INVALID_OPTION: (
        "NVRTC refused an option: check its spelling (options are separate strings, e.g. '-arch=compute_90', "
        "'--std=c++17', '-DN=4'); rawcuda.extras.nvrtc.supported_archs() lists the architectures this NVRTC knows"
    ),
    NvrtcResult.ERROR_NAME_EXPRESSION_NOT_VALID: (
        "a name expression must name a __global__ function or a __device__/__constant__ variable the source "
        "defines, written as C++ would refer to it: 'scale<float>', 'ns::kernel', '&table'"
    ),
    NvrtcResult.ERROR_BUILTIN_OPERATION_FAILURE: (
        "NVRTC could not run one of its built-in steps, often because libnvrtc-builtins.so is missing or of "
        "another version than libnvrtc: install both from the same toolkit"
    ),
    NvrtcResult.ERROR_INVALID_INPUT: "NULL or an out-of-range value where NVRTC needs one (a bug in the caller)",
}


__all__ = ["HINTS", "NVRTC_HINTS", "STICKY_HINT"]
