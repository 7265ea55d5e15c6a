"""Layer 0 for NVRTC: the runtime CUDA C++ compiler's functions, declared by hand like the driver's.

NVRTC (``libnvrtc``) is a library, not a program: hand it CUDA C++ source *as a string*, get PTX (or a
cubin) back, then load that with ``cuModuleLoadData`` like any nvcc output. Any language with a C FFI can
call it -- which is why the seed article's "Rust cannot generate CUDA kernels at run time" is not a limit
of Rust: compiling Rust *source* to GPU code at run time is not something the toolkit offers, but
generating CUDA C++ text and compiling it with NVRTC is a C call away, from Rust as from Python.

The rows follow :mod:`rawcuda.ffi.table` (prototype string, symbol, ctypes argument types), with two
differences that are the reason this file exists beside it:

* the functions return ``nvrtcResult``, whose codes are NVRTC's own (``NVRTC_ERROR_COMPILATION`` is 6,
  which in CUresult terms would mean something else entirely), so they are not mixed into the driver's
  table or its error classes;
* one function, ``nvrtcGetErrorString``, returns ``const char *`` -- a pointer, not a result code. Its
  ``restype`` must be ``c_char_p``: left at ctypes' default ``c_int`` it would truncate the pointer to 32
  bits (and a result-code check would misread every non-NULL string as a failure). So each row says
  what it returns, and ``rawcuda.ffi.headercheck --nvrtc`` proves that too.

``nvrtcProgram`` is ``typedef struct _nvrtcProgram *nvrtcProgram``: an opaque handle, so ``c_void_p``.
Nothing here opens libnvrtc; :mod:`rawcuda.nvrtc` does that, lazily.
"""

from __future__ import annotations

import re
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .table.decl import param_name, split_params

#: Where the toolkit puts the header (``python -m rawcuda.ffi.headercheck --nvrtc PATH`` takes another).
DEFAULT_HEADER = "/usr/local/cuda/include/nvrtc.h"

# Spelled as in nvrtc.h, so a row's argtypes read like its prototype.
nvrtcProgram = c_void_p  # noqa: N816  typedef struct _nvrtcProgram *nvrtcProgram;  (an opaque handle)
nvrtcResult = c_int  # noqa: N816  typedef enum { NVRTC_SUCCESS = 0, ... } nvrtcResult;  (4 bytes, as C enums are)
P = POINTER
STRINGS = POINTER(c_char_p)  # const char * const * : an array of C strings (options, header sources)

_PROTOTYPE = re.compile(r"^\s*(nvrtcResult|const\s+char\s*\*)\s*(nvrtc\w+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class NvrtcDecl:
    """One NVRTC function: C prototype, exported symbol, ctypes argument types and return type.

    ``returns`` (parsed from the prototype) is the C return type; ``restype`` is its ctypes spelling:
    ``c_int`` for ``nvrtcResult`` (and then every call is checked), ``c_char_p`` for the one function
    that returns a string. ``older`` exists so the header check can treat these rows like the driver's.
    """

    prototype: str
    symbol: str
    argtypes: tuple[Any, ...]
    restype: Any = nvrtcResult
    older: str | None = None
    name: str = field(init=False)
    returns: str = field(init=False)
    params: tuple[str, ...] = field(init=False)
    param_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        m = _PROTOTYPE.match(self.prototype)
        if m is None:
            raise ValueError(f"not an 'nvrtcResult name(params)' or 'const char *name(params)' prototype: "
                             f"{self.prototype!r}")
        params = split_params(m.group(3))
        object.__setattr__(self, "returns", " ".join(m.group(1).split()))
        object.__setattr__(self, "name", m.group(2))
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "param_names", tuple(param_name(p) for p in params))
        if len(params) != len(self.argtypes):
            raise ValueError(f"{self.name}: the prototype has {len(params)} parameters but {len(self.argtypes)} "
                             "ctypes argtypes were given")
        if (self.returns == "nvrtcResult") != (self.restype is nvrtcResult):
            raise ValueError(f"{self.name} returns {self.returns}: its restype must be "
                             f"{'c_int' if self.returns == 'nvrtcResult' else 'a pointer type'}, not {self.restype}")

    @property
    def checked(self) -> bool:
        """True when the function returns an nvrtcResult that must be turned into an exception."""
        return self.returns == "nvrtcResult"


def decl(prototype: str, symbol: str, *argtypes: Any, **options: Any) -> NvrtcDecl:
    """Shorthand, as in the driver table: ``decl("nvrtcResult nvrtcX(int a)", "nvrtcX", c_int)``."""
    return NvrtcDecl(prototype, symbol, tuple(argtypes), **options)


ENTRIES = [
    # --- errors and versions
    # Returns a pointer to a static string ("NVRTC_ERROR_COMPILATION"): never free it. Not a result code.
    decl("const char *nvrtcGetErrorString(nvrtcResult result)", "nvrtcGetErrorString", nvrtcResult,
         restype=c_char_p),
    # The NVRTC version (e.g. 13.0) -- which may differ from the driver's: the PTX it writes must not be
    # newer than the driver understands (rawcuda.Module checks before loading).
    decl("nvrtcResult nvrtcVersion(int *major, int *minor)", "nvrtcVersion", P(c_int), P(c_int)),
    # The architectures this NVRTC can target, as numbers (75, 80, 90 ...): ask for the count, then the list.
    decl("nvrtcResult nvrtcGetNumSupportedArchs(int* numArchs)", "nvrtcGetNumSupportedArchs", P(c_int)),
    decl("nvrtcResult nvrtcGetSupportedArchs(int* supportedArchs)", "nvrtcGetSupportedArchs", P(c_int)),
    # --- a program: source in, compile, results out, destroy
    # headers/includeNames: sources of "#include"-able files given as strings (numHeaders of them, or NULL).
    decl("nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders, "
         "const char * const *headers, const char * const *includeNames)", "nvrtcCreateProgram",
         P(nvrtcProgram), c_char_p, c_char_p, c_int, STRINGS, STRINGS),
    # Takes a *pointer to* the handle, and sets it to NULL: destroying twice is then harmless.
    decl("nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)", "nvrtcDestroyProgram", P(nvrtcProgram)),
    # Options are command-line words ("-arch=compute_90", "--std=c++17"), each its own C string.
    decl("nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options)",
         "nvrtcCompileProgram", nvrtcProgram, c_int, STRINGS),
    # Every "get bytes" pair works the same way: ask the size (which counts the trailing NUL for text),
    # allocate that many bytes, then ask for the contents.
    decl("nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)", "nvrtcGetPTXSize",
         nvrtcProgram, P(c_size_t)),
    decl("nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)", "nvrtcGetPTX", nvrtcProgram, c_char_p),
    # A cubin exists only when -arch names a real GPU (sm_90); for a virtual one (compute_90) the size is 0.
    decl("nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet)", "nvrtcGetCUBINSize",
         nvrtcProgram, P(c_size_t)),
    decl("nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)", "nvrtcGetCUBIN", nvrtcProgram, c_char_p),
    # The compiler's messages (errors *and* warnings): ask for it after every compile, failed or not.
    decl("nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)", "nvrtcGetProgramLogSize",
         nvrtcProgram, P(c_size_t)),
    decl("nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)", "nvrtcGetProgramLog",
         nvrtcProgram, c_char_p),
    # --- C++ names: a template instance ("scale<float>") has a mangled symbol ("_Z5scaleIfEvPT_..."). Register
    # the expression *before* compiling, ask its lowered name *after*, while the program still exists (the
    # string belongs to the program).
    decl("nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char * const name_expression)",
         "nvrtcAddNameExpression", nvrtcProgram, c_char_p),
    decl("nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression, "
         "const char** lowered_name)", "nvrtcGetLoweredName", nvrtcProgram, c_char_p, P(c_char_p)),
]


def _index(entries: list[NvrtcDecl]) -> dict[str, NvrtcDecl]:
    table: dict[str, NvrtcDecl] = {}
    for entry in entries:
        if entry.name in table:
            raise ValueError(f"{entry.name} is declared twice in the NVRTC table")
        table[entry.name] = entry
    return table


#: Header name -> declaration.
TABLE: dict[str, NvrtcDecl] = _index(ENTRIES)

#: The C names of NvrtcResult members are this prefix plus the member name.
RESULT_PREFIX = "NVRTC_"


class NvrtcResult(IntEnum):
    """nvrtcResult: NVRTC's own result codes (not CUresult's -- the numbers overlap, the meanings do not)."""

    SUCCESS = 0
    ERROR_OUT_OF_MEMORY = 1
    ERROR_PROGRAM_CREATION_FAILURE = 2
    ERROR_INVALID_INPUT = 3
    ERROR_INVALID_PROGRAM = 4
    ERROR_INVALID_OPTION = 5
    ERROR_COMPILATION = 6
    ERROR_BUILTIN_OPERATION_FAILURE = 7
    ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8
    ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9
    ERROR_NAME_EXPRESSION_NOT_VALID = 10
    ERROR_INTERNAL_ERROR = 11
    ERROR_TIME_FILE_WRITE_FAILED = 12
    ERROR_NO_PCH_CREATE_ATTEMPTED = 13  # CUDA 12.8: precompiled headers
    ERROR_PCH_CREATE_HEAP_EXHAUSTED = 14
    ERROR_PCH_CREATE = 15
    ERROR_CANCELLED = 16
    ERROR_TIME_TRACE_FILE_WRITE_FAILED = 17
    ERROR_BUSY = 18  # newer than CUDA 13.0's header; kept so a newer libnvrtc's code still has a name


#: Members a CUDA 13.0 nvrtc.h does not declare yet (the header check accepts their absence).
NEWER_RESULTS = frozenset({"ERROR_BUSY"})


def result_name(code: int) -> str:
    """``6`` -> ``'NVRTC_ERROR_COMPILATION'`` (a code this table does not know keeps its number)."""
    try:
        return RESULT_PREFIX + NvrtcResult(code).name
    except ValueError:
        return f"NVRTC result {code}"


__all__ = ["DEFAULT_HEADER", "ENTRIES", "NEWER_RESULTS", "TABLE", "NvrtcDecl", "NvrtcResult", "decl", "result_name"]
