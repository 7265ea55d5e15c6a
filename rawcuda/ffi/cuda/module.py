"""Layer 0, driver table section: modules (PTX / cubin / fatbin images), their functions and globals, and the linker.

A module is code loaded into one context. PTX is compiled by the driver's JIT at load time, which is
why cuModuleLoadDataEx takes option arrays: the only way to see *why* PTX failed to load is to hand the
JIT an error-log buffer (CU_JIT_ERROR_LOG_BUFFER) and read it afterwards. Option *values* travel in a
``void **`` array, each value cast to a pointer-sized integer, not pointed to.
"""

from __future__ import annotations

from ctypes import c_char_p, c_int, c_size_t, c_uint, c_void_p

from ..decl import decl
from ..types import VOIDPP, CUdeviceptr, CUfunction, CUlinkState, CUmodule, P, enum

ENTRIES = [
    decl("CUresult cuModuleLoadData(CUmodule *module, const void *image)", "cuModuleLoadData", P(CUmodule), c_void_p),
    decl(
        "CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, "
        "CUjit_option *options, void **optionValues)",
        "cuModuleLoadDataEx",
        P(CUmodule),
        c_void_p,
        c_uint,
        P(enum),
        VOIDPP,
    ),
    decl(
        "CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)",
        "cuModuleLoadFatBinary",
        P(CUmodule),
        c_void_p,
    ),
    decl("CUresult cuModuleUnload(CUmodule hmod)", "cuModuleUnload", CUmodule),
    # The name is the *symbol* name: a C++ kernel is mangled (_Z10vector_addPfPKfS1_m) unless extern "C".
    decl(
        "CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)",
        "cuModuleGetFunction",
        P(CUfunction),
        CUmodule,
        c_char_p,
    ),
    decl(
        "CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)",
        "cuModuleGetGlobal_v2",
        P(CUdeviceptr),
        P(c_size_t),
        CUmodule,
        c_char_p,
    ),
    decl(
        "CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)",
        "cuModuleGetFunctionCount",
        P(c_uint),
        CUmodule,
    ),
    decl(
        "CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)",
        "cuModuleEnumerateFunctions",
        P(CUfunction),
        c_uint,
        CUmodule,
    ),
    # --- functions
    decl(
        "CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)",
        "cuFuncGetAttribute",
        P(c_int),
        enum,
        CUfunction,
    ),
    decl(
        "CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)",
        "cuFuncSetAttribute",
        CUfunction,
        enum,
        c_int,
    ),
    decl(
        "CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)", "cuFuncSetCacheConfig", CUfunction, enum
    ),
    decl("CUresult cuFuncGetName(const char **name, CUfunction hfunc)", "cuFuncGetName", P(c_char_p), CUfunction),
    decl("CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)", "cuFuncGetModule", P(CUmodule), CUfunction),
    # The kernel's parameter layout straight from a cubin: how rawcuda packs arguments without PTX.
    decl(
        "CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)",
        "cuFuncGetParamInfo",
        CUfunction,
        c_size_t,
        P(c_size_t),
        P(c_size_t),
    ),
    # --- the JIT linker: several PTX/cubin/fatbin inputs -> one cubin
    decl(
        "CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues, "
        "CUlinkState *stateOut)",
        "cuLinkCreate_v2",
        c_uint,
        P(enum),
        VOIDPP,
        P(CUlinkState),
    ),
    decl(
        "CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, "
        "const char *name, unsigned int numOptions, CUjit_option *options, void **optionValues)",
        "cuLinkAddData_v2",
        CUlinkState,
        enum,
        c_void_p,
        c_size_t,
        c_char_p,
        c_uint,
        P(enum),
        VOIDPP,
    ),
    decl(
        "CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, "
        "unsigned int numOptions, CUjit_option *options, void **optionValues)",
        "cuLinkAddFile_v2",
        CUlinkState,
        enum,
        c_char_p,
        c_uint,
        P(enum),
        VOIDPP,
    ),
    # The cubin it hands back belongs to the link state: copy it before cuLinkDestroy.
    decl(
        "CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)",
        "cuLinkComplete",
        CUlinkState,
        VOIDPP,
        P(c_size_t),
    ),
    decl("CUresult cuLinkDestroy(CUlinkState state)", "cuLinkDestroy", CUlinkState),
]
