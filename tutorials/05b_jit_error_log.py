"""Tutorial 05b -- bad PTX: the driver's JIT compiler refuses it, and only its error log says why.

PTX is compiled a second time when it is loaded: ``cuModuleLoadDataEx`` hands it to the driver's JIT
compiler (ptxas inside libcuda), and a mistake in it is reported as ``CUDA_ERROR_INVALID_PTX`` (218) --
one number for every possible mistake. *Which* mistake, and on which line, the JIT writes into an error-log
buffer, but only if the caller passed one in the load options. This tutorial loads a kernel with a mistake
a person makes when writing PTX by hand (``.reg .f32 %f<3>`` declares %f0, %f1 and %f2, and the code
writes %f3), three ways:

1. by hand, through ctypes: ``cuModuleLoadDataEx`` with an error-log buffer and its size, passed *by
   value* in the option array -- the bare 218, and the log;
2. with rawcuda: ``Module(ptx)`` always passes both log buffers, and raises ``ModuleLoadError`` whose
   message (and ``.jit_log``) is that log;
3. with cust: ``Module::from_ptx(ptx, &[])`` returns ``Err(CudaError::InvalidPtx)``; its
   ``ModuleJitOption`` list has no log-buffer option, so the reason is not available.

Then it fixes the declaration and checks the kernel's results against numpy.

Run:  python tutorials/05b_jit_error_log.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int, c_uint, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, TutorialCheckError, run

import rawcuda
from rawcuda import DeviceBuffer, Module
from rawcuda.checked import cu
from rawcuda.core import ptx
from rawcuda.ffi.constants import JitOption
from rawcuda.ffi.results import Result
from rawcuda.tools import cheader

CUDA_SUCCESS = 0
LOG_BYTES = 8192  # capacity of each JIT log buffer
N = 100_003  # elements: not a multiple of the block size, so the kernel's bounds check is exercised too
BLOCK = 256
JIT_OPTIONS_PARAM = "CUjit_option *"  # the keys' parameter; its values come in a void ** right after it
# What CUDA 13.0's cuda.h declares with such keys, for a machine without the header.
CUDA_13_JIT_OPTION_TAKERS = (
    "cuModuleLoadDataEx",
    "cuLinkCreate",
    "cuLinkAddData",
    "cuLinkAddFile",
    "cuLibraryLoadData",
    "cuLibraryLoadFromFile",
)

# A kernel that doubles x[i] for i < n, written by hand with one mistake: %f<3> declares three registers,
# %f0..%f2, and the `add` writes %f3. rawcuda's PTX reader reads only the header and the signature (it
# accepts this); the JIT compiler reads every instruction and refuses it.
FIXED_DECLARATION = ".reg .f32   %f<4>;"
BROKEN_DECLARATION = ".reg .f32   %f<3>;"
FIXED_PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry double_it(
    .param .u64 double_it_param_0,
    .param .u32 double_it_param_1
)
{
    .reg .pred  %p<2>;
    .reg .f32   %f<4>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<5>;
    ld.param.u64        %rd1, [double_it_param_0];
    ld.param.u32        %r1, [double_it_param_1];
    mov.u32             %r2, %ctaid.x;
    mov.u32             %r3, %ntid.x;
    mov.u32             %r4, %tid.x;
    mad.lo.s32          %r5, %r2, %r3, %r4;
    setp.ge.u32         %p1, %r5, %r1;
    @%p1 bra            DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32        %rd3, %r5, 4;
    add.s64             %rd4, %rd2, %rd3;
    ld.global.f32       %f1, [%rd4];
    add.f32             %f3, %f1, %f1;
    st.global.f32       [%rd4], %f3;
DONE:
    ret;
}
"""
BROKEN_PTX = FIXED_PTX.replace(FIXED_DECLARATION, BROKEN_DECLARATION)


def declare(libcuda: ctypes.CDLL, symbol: str, *argtypes: Any) -> Any:
    """One driver function by hand: a fresh ctypes function pointer that returns the bare CUresult."""
    fn = libcuda[symbol]  # indexing (not getattr) makes a new pointer: our argtypes stay ours
    fn.restype = c_int  # CUresult is a C enum, so an int
    fn.argtypes = list(argtypes)
    return fn


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def jit_option_takers() -> tuple[list[str], str]:
    """The driver functions whose cuda.h prototype takes ``CUjit_option *`` keys, and where that was read."""
    header = cheader.DEFAULT_HEADER
    try:
        prototypes = cheader.parse(header).prototypes
    except OSError:  # no toolkit here: what CUDA 13.0's header declares
        return list(CUDA_13_JIT_OPTION_TAKERS), f"(no {header} here) CUDA 13.0's cuda.h"
    takers = [name for name, params in prototypes.items() if any(JIT_OPTIONS_PARAM in p for p in params)]
    return takers, header


def main(t: Tutorial) -> None:
    t.words("cust", "kernel", "compute capability", "context", "primary context", "CUresult", "PTX", "JIT", "ptxas")
    t.step("the GPU and its primary context")
    ctx = rawcuda.default_context()
    ctx.activate()  # raw calls below act on the thread's current context: this one
    t.say(f"device 0: {ctx.device.name}, compute capability {'.'.join(map(str, ctx.device.compute_capability))}")
    t.say("the kernel, with its mistake:\n" + BROKEN_PTX.rstrip())
    info = ptx.parse(BROKEN_PTX)
    t.check(
        list(info.entries) == ["double_it"] and [p.type for p in info.entries["double_it"].params] == ["u64", "u32"],
        "rawcuda's PTX reader accepts it: it reads the header and the signature double_it(.u64, .u32), not the body",
    )

    t.step("by hand: cuModuleLoadDataEx with an error-log buffer -> 218 and the JIT's log")
    libcuda = ctypes.CDLL(cu.library().path)  # the same libcuda rawcuda opened
    cuModuleLoadDataEx = declare(
        libcuda, "cuModuleLoadDataEx", POINTER(c_void_p), c_void_p, c_uint, POINTER(c_int), POINTER(c_void_p)
    )
    cuModuleUnload = declare(libcuda, "cuModuleUnload", c_void_p)
    error_log = ctypes.create_string_buffer(LOG_BYTES)
    info_log = ctypes.create_string_buffer(LOG_BYTES)
    keys = (c_int * 4)(
        JitOption.ERROR_LOG_BUFFER,
        JitOption.ERROR_LOG_BUFFER_SIZE_BYTES,
        JitOption.INFO_LOG_BUFFER,
        JitOption.INFO_LOG_BUFFER_SIZE_BYTES,
    )
    # Each option's value travels *by value* in a void*: the buffer's address, and the size itself cast to a
    # pointer -- not a pointer to the size. cuda.h gives each option's type; the step below lists who else
    # takes options this way.
    values = (c_void_p * 4)(ctypes.addressof(error_log), LOG_BYTES, ctypes.addressof(info_log), LOG_BYTES)
    image = BROKEN_PTX.encode() + b"\0"  # the JIT reads PTX as a C string
    module = c_void_p()
    rc = cuModuleLoadDataEx(byref(module), image, len(keys), keys, values)
    raw_log = error_log.value.decode(errors="replace").strip()
    t.say(
        "CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,\n"
        "                            CUjit_option *options, void **optionValues);\n"
        f"  rc = cuModuleLoadDataEx(byref(module), ptx, 4, keys, values)  -> {rc}\n"
        f"  JIT error log ({len(raw_log)} characters):\n    " + (raw_log.replace("\n", "\n    ") or "(empty)")
    )
    if rc == CUDA_SUCCESS:  # the driver accepted it after all: unload before failing, leave nothing behind
        cuModuleUnload(module)
    t.check(
        rc in (Result.ERROR_INVALID_PTX, Result.ERROR_INVALID_IMAGE),
        f"the driver answered {rc} (CUDA_ERROR_INVALID_PTX is 218): one number for every mistake",
    )
    t.check(bool(raw_log), "the JIT wrote its reasons (line and cause) into our error-log buffer")
    takers, source = jit_option_takers()
    t.say(
        f"The same pairs -- CUjit_option keys, and a void ** whose entries hold the values themselves -- are\n"
        f"not cuModuleLoadDataEx's alone. {source} declares {len(takers)} functions that take them:\n"
        f"  {', '.join(takers)}\n"
        "and documents what each entry holds: 'Option type: char *' for CU_JIT_ERROR_LOG_BUFFER, 'Option type:\n"
        "unsigned int' for CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES -- the size itself, in the pointer-sized slot."
    )
    t.check(
        "cuModuleLoadDataEx" in takers and len(takers) > 1,
        f"{len(takers) - 1} more driver functions take CUjit_option keys with a void ** of values",
    )

    t.step("rawcuda: Module(ptx) passes the log buffers itself -> ModuleLoadError carrying the log")
    try:
        Module(BROKEN_PTX, name="broken.ptx")
    except rawcuda.ModuleLoadError as exc:
        error = exc
    else:
        raise TutorialCheckError("Module(BROKEN_PTX) raised nothing")
    t.say('Module(BROKEN_PTX, name="broken.ptx")\n  -> ModuleLoadError: ' + str(error).replace("\n", "\n     "))
    t.check(error.code == rc, f"the same code as by hand: {error.name} ({error.code})")
    t.check(bool(error.jit_log) and "JIT error log" in str(error), "the JIT's log is in .jit_log and in the message")

    t.step("cust: Module::from_ptx returns Err(CudaError::InvalidPtx), without the log")
    t.say(
        "cust at Rust-CUDA ac2674f (crates/cust/src/module.rs):\n"
        "  let module = Module::from_ptx(ptx, &[]);   // cuModuleLoadDataEx with the options given, here none\n"
        f'  // -> Err(CudaError::InvalidPtx), which prints as "{error.description}"\n'
        "The options cust can pass are ModuleJitOption::{MaxRegisters, OptLevel, DetermineTargetFromContext,\n"
        "Target, Fallback, GenenerateDebugInfo, GenerateLineInfo} (GenenerateDebugInfo is cust's spelling):\n"
        "no ERROR_LOG_BUFFER among them, so the log above never reaches a cust program. Its only clue is the\n"
        "code -- or running ptxas on the PTX by hand. (module.rs's comment calls the by-value option values 'a\n"
        "SINGLE exception in the entire driver API'; step 2 listed the other functions that take them.)"
    )

    t.step(f"the fix: declare {FIXED_DECLARATION!r} -- and check the kernel against numpy")
    fixed = Module(FIXED_PTX, name="fixed.ptx")
    double_it = fixed.function("double_it")
    x = np.random.default_rng().standard_normal(N, dtype=np.float32)
    # The kernel works in place, so the input is its own poison: a kernel that did nothing would leave x, and
    # x + x differs from x in every element (a standard normal draw is never exactly 0).
    t.check(bool(np.all(x + x != x)), "every expected value differs from the input: an idle kernel cannot pass")
    with DeviceBuffer.from_array(x) as dx:
        double_it.launch(grid_for(N), BLOCK, dx, N)
        t.check(bool(np.array_equal(dx.to_array(), x + x)), f"all {N:,} values doubled exactly (x + x in float32)")
    fixed.close()


if __name__ == "__main__":
    run(main, "Tutorial 05b: bad PTX -- the JIT's error log, by hand, in rawcuda, and absent in cust")
