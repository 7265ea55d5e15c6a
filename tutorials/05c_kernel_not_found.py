"""Tutorial 05c -- a kernel name the module lacks: CUDA_ERROR_NOT_FOUND, and the C++ name mangling behind it.

A kernel is found by its name in the PTX. nvcc compiles a ``__global__`` function as C++, so unless it is
declared ``extern "C"`` its PTX name is *mangled* -- ``vector_add(float*, const float*, const float*,
unsigned long)`` becomes ``_Z10vector_addPfPKfS1_m`` -- and asking for ``"vector_add"`` fails with
``CUDA_ERROR_NOT_FOUND`` (500). This tutorial loads such a module (the shipped vector_add PTX with its
entry renamed to what nvcc emits without ``extern "C"``) and asks for the plain name, three ways:

1. by hand, through ctypes: ``cuModuleGetFunction`` returns the bare 500; ``cuModuleGetFunctionCount``,
   ``cuModuleEnumerateFunctions`` and ``cuFuncGetName`` list what the module does hold;
2. with rawcuda: ``module.function("vector_add")`` raises ``NotFoundError`` (also a ``LookupError``)
   whose message lists the module's kernels and spots the mangled one;
3. with cust: ``module.get_function("vector_add")`` returns ``Err(CudaError::NotFound)``, and nothing
   says what the module holds instead.

Then it launches the kernel under its mangled name and checks every sum against numpy.

Run:  python tutorials/05c_kernel_not_found.py [--step]
"""

from __future__ import annotations

import ctypes
import re
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, Module, kernels
from rawcuda.checked import cu
from rawcuda.ffi.results import Result

CUDA_SUCCESS = 0
N = 100_003  # elements: not a multiple of the block size, so the kernel's tail handling is exercised too
BLOCK = 256
NAN32 = np.float32(np.nan)  # the poison written into outputs before a kernel is supposed to fill them
PLAIN_NAME = "vector_add"
# What nvcc calls vector_add(float*, const float*, const float*, unsigned long) when it is not extern "C":
# _Z (a mangled name), 10vector_add (10 characters of name), then the parameter types Pf (float*),
# PKf (const float*), S1_ (the same type again) and m (unsigned long, which is size_t here).
MANGLED_NAME = "_Z10vector_addPfPKfS1_m"
# The kernel's name in the shipped PTX: in `.entry vector_add(` and in `vector_add_param_N`, but not inside
# longer names or file paths.
NAME_IN_PTX = re.compile(r"(?<![\w/$])vector_add(?=[\s(]|_param_)")


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "grid", "block", "CUresult", "stream", "PTX", "name mangling", "nvcc")
    t.step("the GPU, and a module whose kernel has its C++ (mangled) name")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    source = kernels.ptx_path(PLAIN_NAME).read_text()
    mangled_ptx = NAME_IN_PTX.sub(MANGLED_NAME, source)
    entry_lines = [line.strip() for line in mangled_ptx.splitlines() if ".entry" in line]
    t.say(f'device 0: {ctx.device.name}\nthe shipped PTX, renamed as nvcc names it without extern "C": {entry_lines}')
    t.check(
        f".entry {MANGLED_NAME}(" in mangled_ptx and f".entry {PLAIN_NAME}(" not in mangled_ptx,
        "the module's only kernel is now called by its mangled name",
    )

    t.step('by hand: cuModuleGetFunction(&fn, module, "vector_add") -> 500; then ask the module what it holds')
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuModuleLoadData = declare(libcuda, "cuModuleLoadData", POINTER(c_void_p), c_void_p)
    cuModuleGetFunction = declare(libcuda, "cuModuleGetFunction", POINTER(c_void_p), c_void_p, c_char_p)
    cuModuleGetFunctionCount = declare(libcuda, "cuModuleGetFunctionCount", POINTER(c_uint), c_void_p)
    cuModuleEnumerateFunctions = declare(libcuda, "cuModuleEnumerateFunctions", POINTER(c_void_p), c_uint, c_void_p)
    cuFuncGetName = declare(libcuda, "cuFuncGetName", POINTER(c_char_p), c_void_p)
    cuModuleUnload = declare(libcuda, "cuModuleUnload", c_void_p)
    module = c_void_p()
    load_rc = cuModuleLoadData(byref(module), mangled_ptx.encode() + b"\0")  # PTX is read as a C string
    t.check(load_rc == CUDA_SUCCESS, f"cuModuleLoadData returned {load_rc}: the PTX itself is fine")
    try:
        function = c_void_p()
        plain_rc = cuModuleGetFunction(byref(function), module, PLAIN_NAME.encode())
        count = c_uint()
        count_rc = cuModuleGetFunctionCount(byref(count), module)
        handles = (c_void_p * count.value)()
        enum_rc = cuModuleEnumerateFunctions(handles, count.value, module)
        names = []
        for handle in handles:
            name = c_char_p()
            name_rc = cuFuncGetName(byref(name), handle)
            names.append((name.value or b"").decode() if name_rc == CUDA_SUCCESS else f"<cuFuncGetName: {name_rc}>")
        mangled_rc = cuModuleGetFunction(byref(function), module, MANGLED_NAME.encode())
    finally:
        cuModuleUnload(module)
    t.say(
        "CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);\n"
        f'  cuModuleGetFunction(byref(fn), module, b"{PLAIN_NAME}")        -> {plain_rc}\n'
        f"  cuModuleGetFunctionCount(byref(count), module)              -> {count_rc}, count = {count.value}\n"
        f"  cuModuleEnumerateFunctions(handles, {count.value}, module) + cuFuncGetName -> {enum_rc}, {names}\n"
        f'  cuModuleGetFunction(byref(fn), module, b"{MANGLED_NAME}") -> {mangled_rc}'
    )
    t.check(plain_rc == Result.ERROR_NOT_FOUND, f"the plain name: {plain_rc}, CUDA_ERROR_NOT_FOUND (500)")
    t.check(count_rc == enum_rc == CUDA_SUCCESS and names == [MANGLED_NAME], "the driver lists one kernel, mangled")
    t.check(mangled_rc == CUDA_SUCCESS, "the mangled name is found")

    t.step('rawcuda: module.function("vector_add") -> NotFoundError, listing the kernels that are there')
    mangled = Module(mangled_ptx, name="vector_add_without_extern_C.ptx")
    t.say(f"the module's kernels, read from its PTX: {mangled.entry_names()}")
    try:
        mangled.function(PLAIN_NAME)
    except rawcuda.NotFoundError as exc:
        error = exc
    else:
        raise TutorialCheckError(f'module.function("{PLAIN_NAME}") raised nothing')
    t.say(f'mangled.function("{PLAIN_NAME}")\n  -> NotFoundError: ' + str(error).replace("\n", "\n     "))
    t.check(error.code == plain_rc, f"cuModuleGetFunction answered {error.name} ({error.code}), as by hand")
    t.check(error.entries == [MANGLED_NAME], "the exception's .entries lists what the module holds")
    t.check(
        MANGLED_NAME in str(error) and "extern" in str(error),
        'the message names the mangled kernel and suggests extern "C"',
    )
    t.check(isinstance(error, LookupError), "NotFoundError is also a LookupError (generic handlers work)")

    t.step('cust: module.get_function("vector_add") returns Err(CudaError::NotFound) -- and no list')
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/module.rs, function.rs):\n"
        f'  let f = module.get_function("{PLAIN_NAME}");   // cuModuleGetFunction -> Err(CudaError::NotFound)\n'
        f"  unsafe {{ launch!(module.{PLAIN_NAME}<<<grid, block, 0, stream>>>(...)) }}  // looks the name up the same\n"
        "                                                                          // way: the same Err, at run time\n"
        f'  printed: "{error.description}"\n'
        "cust wraps none of cuModuleGetFunctionCount / cuModuleEnumerateFunctions / cuFuncGetName, so a cust\n"
        "program learns only that the name is missing. The usual fix is in the .cu file:\n"
        '  extern "C" __global__ void vector_add(float *c, const float *a, const float *b, size_t n)\n'
        "(kernels/vector_add.cu is written that way; the shipped PTX's entry is plain vector_add)."
    )

    t.step("or ask for the mangled name: the kernel is there, and it adds correctly")
    rng = np.random.default_rng()
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(a) as da, DeviceBuffer.from_array(b) as db, DeviceBuffer.empty(N) as dc:
        dc.fill(NAN32)
        mangled.function(MANGLED_NAME).launch(grid_for(N), BLOCK, dc, da, db, N)
        t.check(bool(np.array_equal(dc.to_array(), a + b)), f"all {N:,} sums found as {MANGLED_NAME} equal a + b")
    mangled.close()


if __name__ == "__main__":
    run(main, "Tutorial 05c: a kernel that is not there -- NOT_FOUND, name mangling, and listing a module")
