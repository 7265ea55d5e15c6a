"""Layer 0 for NVRTC: the runtime CUDA C++ compiler's functions, declared by hand like the driver's.

NVRTC (``libnvrtc``) is a library, not a program: hand it CUDA C++ source *as a string*, get PTX (or a
cubin) back, then load that with ``cuModuleLoadData`` like any nvcc output. Any language with a C FFI can
call it -- which is why the seed article's "Rust cannot generate CUDA kernels at run time" is not a limit
of Rust: compiling Rust *source* to GPU code at run time is not something the toolkit offers, but
generating CUDA C++ text and compiling it with NVRTC is a C call away, from Rust as from Python.

The rows are :class:`~rawcuda.ffi.decl.Decl` rows like the driver's (prototype string, symbol, ctypes
argument types, what the function returns), in a table of their own for two reasons:

* the functions return ``nvrtcResult``, whose codes are NVRTC's own (``NVRTC_ERROR_COMPILATION`` is 6,
  which in CUresult terms would mean something else entirely), so they are not mixed into the driver's
  table or its error classes (the codes are :class:`~rawcuda.ffi.results.NvrtcResult`);
* one function, ``nvrtcGetErrorString``, returns ``const char *`` -- a pointer, not a result code. Its
  ``restype`` must be ``c_char_p``: left at ctypes' default ``c_int`` it would truncate the pointer to 32
  bits (and a result-code check would misread every non-NULL string as a failure). So the row names its
  ``restype``, and ``python -m rawcuda.tools.headercheck --nvrtc`` proves the return types too.

``nvrtcProgram`` is ``typedef struct _nvrtcProgram *nvrtcProgram``: an opaque handle, so ``c_void_p``.
Nothing here opens libnvrtc: :mod:`rawcuda.ffi.library` knows where to look, and layer 1
(:mod:`rawcuda.checked`) binds these rows on first use, exactly as it binds the driver's.
"""

from __future__ import annotations

from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p

from .decl import Decl, decl, index

#: Where the toolkit puts the header (``python -m rawcuda.tools.headercheck --nvrtc PATH`` takes another).
DEFAULT_HEADER = "/usr/local/cuda/include/nvrtc.h"

# Spelled as in nvrtc.h, so a row's argtypes read like its prototype.
nvrtcProgram = c_void_p  # noqa: N816  typedef struct _nvrtcProgram *nvrtcProgram;  (an opaque handle)
nvrtcResult = c_int  # noqa: N816  typedef enum { NVRTC_SUCCESS = 0, ... } nvrtcResult;  (4 bytes, as C enums are)
P = POINTER
STRINGS = POINTER(c_char_p)  # const char * const * : an array of C strings (options, header sources)

ENTRIES = [
    # --- errors and versions
    # Returns a pointer to a static string ("NVRTC_ERROR_COMPILATION"): never free it. Not a result code.
    decl("const char *nvrtcGetErrorString(nvrtcResult result)", "nvrtcGetErrorString", nvrtcResult, restype=c_char_p),
    # The NVRTC version (e.g. 13.0) -- which may differ from the driver's: the PTX it writes must not be
    # newer than the driver understands (rawcuda.Module checks before loading).
    decl("nvrtcResult nvrtcVersion(int *major, int *minor)", "nvrtcVersion", P(c_int), P(c_int)),
    # The architectures this NVRTC can target, as numbers (75, 80, 90 ...): ask for the count, then the list.
    decl("nvrtcResult nvrtcGetNumSupportedArchs(int* numArchs)", "nvrtcGetNumSupportedArchs", P(c_int)),
    decl("nvrtcResult nvrtcGetSupportedArchs(int* supportedArchs)", "nvrtcGetSupportedArchs", P(c_int)),
    # --- a program: source in, compile, results out, destroy
    # headers/includeNames: sources of "#include"-able files given as strings (numHeaders of them, or NULL).
    decl(
        "nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders, "
        "const char * const *headers, const char * const *includeNames)",
        "nvrtcCreateProgram",
        P(nvrtcProgram),
        c_char_p,
        c_char_p,
        c_int,
        STRINGS,
        STRINGS,
    ),
    # Takes a *pointer to* the handle, and sets it to NULL: destroying twice is then harmless.
    decl("nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)", "nvrtcDestroyProgram", P(nvrtcProgram)),
    # Options are command-line words ("-arch=compute_90", "--std=c++17"), each its own C string.
    decl(
        "nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options)",
        "nvrtcCompileProgram",
        nvrtcProgram,
        c_int,
        STRINGS,
    ),
    # Every "get bytes" pair works the same way: ask the size (which counts the trailing NUL for text),
    # allocate that many bytes, then ask for the contents.
    decl(
        "nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)",
        "nvrtcGetPTXSize",
        nvrtcProgram,
        P(c_size_t),
    ),
    decl("nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)", "nvrtcGetPTX", nvrtcProgram, c_char_p),
    # A cubin exists only when -arch names a real GPU (sm_90); for a virtual one (compute_90) the size is 0.
    decl(
        "nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet)",
        "nvrtcGetCUBINSize",
        nvrtcProgram,
        P(c_size_t),
    ),
    decl("nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)", "nvrtcGetCUBIN", nvrtcProgram, c_char_p),
    # The compiler's messages (errors *and* warnings): ask for it after every compile, failed or not.
    decl(
        "nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)",
        "nvrtcGetProgramLogSize",
        nvrtcProgram,
        P(c_size_t),
    ),
    decl("nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)", "nvrtcGetProgramLog", nvrtcProgram, c_char_p),
    # --- C++ names: a template instance ("scale<float>") has a mangled symbol ("_Z5scaleIfEvPT_..."). Register
    # the expression *before* compiling, ask its lowered name *after*, while the program still exists (the
    # string belongs to the program).
    decl(
        "nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char * const name_expression)",
        "nvrtcAddNameExpression",
        nvrtcProgram,
        c_char_p,
    ),
    decl(
        "nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression, "
        "const char** lowered_name)",
        "nvrtcGetLoweredName",
        nvrtcProgram,
        c_char_p,
        P(c_char_p),
    ),
]


#: What an NVRTC function may return: a result code, or (nvrtcGetErrorString) a string.
RETURNS = frozenset({"nvrtcResult", "const char *"})

#: Header name -> declaration.
TABLE: dict[str, Decl] = index(ENTRIES, "NVRTC", RETURNS)

__all__ = ["DEFAULT_HEADER", "ENTRIES", "RETURNS", "TABLE", "decl"]
