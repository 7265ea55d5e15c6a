"""Tutorial 12b -- which function does a name mean? Exported symbols, CUDA versions, and cuGetProcAddress.

``cuMemAlloc`` is not one function. cuda.h says ``#define cuMemAlloc cuMemAlloc_v2``: the plain exported
symbol ``cuMemAlloc`` is the CUDA 3.1 ABI (32-bit sizes), kept so that old binaries still run, and a program
compiled against a newer cuda.h calls ``cuMemAlloc_v2``. Whoever binds libcuda must pick the right symbol:

1. by hand: dlsym both symbols with ctypes, then ask the driver itself with ``cuGetProcAddress_v2`` --
   "cuMemAlloc as CUDA 13.0 means it", "as CUDA 3.1 meant it" -- and compare the addresses (dladdr names
   them); a name the driver does not have comes back as CUDA_ERROR_NOT_FOUND with a status saying why;
2. rawcuda: the declaration table binds the symbol cuda.h selects (``TABLE["cuMemAlloc"].symbol``) and a
   header check proves it in CI; ``rawcuda.proc_address`` asks the driver the runtime's way; the two agree
   -- except for a name cuda.h redirects to a *different* function (``cuGraphInstantiate``);
3. cust (Rust-CUDA at commit ac2674f): cust_raw fixes every link name when it is built, from the macros of
   the cuda.h it finds. crates.io's cust 0.3.2 (2022) calls bindings generated once, by their _v2 names.

Run:  python tutorials/12b_driver_entry_points.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_uint64, c_void_p

from _tutorial import Tutorial, run

from rawcuda.checked import VERSION_MAJOR, VERSION_MINOR, cu, raise_for
from rawcuda.checked.procaddress import describe, driver_function_name, proc_address, table_address
from rawcuda.ffi.constants import ProcAddressFlag, ProcAddressQueryResult
from rawcuda.ffi.cuda import TABLE
from rawcuda.ffi.results import Result, c_name

CUDA_3_1 = 3010  # a CUDA version before 64-bit sizes (cuMemAlloc_v2 arrived in 3.2)
NO_SUCH_FUNCTION = "cuNoSuchFunction"


def expect_success(t: Tutorial, code: int, call: str) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here."""
    t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "CUresult", "name mangling")
    t.step("raw: dlsym by hand -- libcuda exports both cuMemAlloc and cuMemAlloc_v2")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1").
    libcuda = ctypes.CDLL(cu.library().path)
    cuInit = libcuda.cuInit  # CUresult cuInit(unsigned int Flags)
    cuInit.argtypes, cuInit.restype = [c_uint], c_int
    cuDriverGetVersion = libcuda.cuDriverGetVersion  # CUresult cuDriverGetVersion(int *driverVersion)
    cuDriverGetVersion.argtypes, cuDriverGetVersion.restype = [POINTER(c_int)], c_int
    # cuda.h 13: #define cuGetProcAddress cuGetProcAddress_v2, declared as
    # CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    #                           CUdriverProcAddressQueryResult *symbolStatus)
    cuGetProcAddress = libcuda.cuGetProcAddress_v2
    cuGetProcAddress.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
    cuGetProcAddress.restype = c_int

    code = cuInit(0)
    if code != Result.SUCCESS:  # no device, or the toolkit's stub: rawcuda's exception says so (and we skip)
        raise_for(code, "cuInit", (0,))
    expect_success(t, code, "cuInit(0)")
    version = c_int()
    expect_success(t, cuDriverGetVersion(byref(version)), "cuDriverGetVersion(&version)")
    exported = {name: ctypes.cast(libcuda[name], c_void_p).value or 0 for name in ("cuMemAlloc", "cuMemAlloc_v2")}
    for name, address in exported.items():
        t.say(f"dlsym(libcuda, {name!r:16}) -> {describe(address)}")
    t.check(exported["cuMemAlloc"] != exported["cuMemAlloc_v2"], "two symbols, two different functions")

    t.step('raw: ask the driver -- cuGetProcAddress("cuMemAlloc", &fn, version, DEFAULT, &status)')

    def ask(name: str, cuda_version: int) -> tuple[int, int, int]:
        fn, status = c_void_p(), c_int(ProcAddressQueryResult.SUCCESS)
        code = cuGetProcAddress(name.encode(), byref(fn), cuda_version, ProcAddressFlag.DEFAULT, byref(status))
        return code, fn.value or 0, status.value

    for cuda_version, expected in ((version.value, "cuMemAlloc_v2"), (CUDA_3_1, "cuMemAlloc")):
        code, address, status = ask("cuMemAlloc", cuda_version)
        expect_success(t, code, f'cuGetProcAddress("cuMemAlloc", &fn, {cuda_version}, DEFAULT, &status)')
        spelled = f"{cuda_version // VERSION_MAJOR}.{cuda_version % VERSION_MAJOR // VERSION_MINOR}"
        t.say(f"  cuMemAlloc as CUDA {spelled} means it: {describe(address)}")
        t.check(
            address == exported[expected] and status == ProcAddressQueryResult.SUCCESS,
            f"the driver's answer for CUDA {spelled} is the exported {expected}",
        )
    code, address, status = ask(NO_SUCH_FUNCTION, version.value)
    t.say(
        f'cuGetProcAddress("{NO_SUCH_FUNCTION}", ..) -> {code} ({c_name(code)}), status '
        f"{ProcAddressQueryResult(status).name}, fn {describe(address)}"
    )
    # Measured on the H200 (driver 580.159): the same call returned CUDA_ERROR_NOT_FOUND in one process and
    # CUDA_SUCCESS in another -- the status and the NULL pointer were the same both times. So the status is
    # the answer to read; the code alone does not say whether a function was found.
    t.say("the code may be CUDA_ERROR_NOT_FOUND or CUDA_SUCCESS (both seen on one driver): read the status")
    t.check(
        code in (Result.SUCCESS, Result.ERROR_NOT_FOUND)
        and status == ProcAddressQueryResult.SYMBOL_NOT_FOUND
        and not address,
        "an unknown name: no function, and the status says which kind of not found",
    )

    t.step("rawcuda: the table binds the symbol cuda.h selects; proc_address asks the driver")
    for name in ("cuMemAlloc", "cuCtxCreate", "cuLaunchKernel"):
        got, bound = proc_address(name), table_address(name)
        t.say(f"{name:16} table symbol {TABLE[name].symbol!r:26} -> {describe(bound)}")
        t.say(f"{'':16} cuGetProcAddress                   -> {describe(got)}")
        t.check(got == bound, f"{name}: the driver's answer for its own CUDA version is the symbol the table binds")
    old = proc_address("cuMemAlloc", CUDA_3_1)
    t.check(old == exported["cuMemAlloc"], "proc_address at CUDA 3.1 finds the same old entry point as by hand")
    by_macro_name = proc_address("cuGraphInstantiate")
    target = driver_function_name("cuGraphInstantiate")
    t.say(
        f"cuda.h: #define cuGraphInstantiate {target} -- a different function, not a newer version.\n"
        f"The driver knows functions, not macros: 'cuGraphInstantiate' -> {describe(by_macro_name)};\n"
        f"'{target}' -> {describe(proc_address(target))}"
    )
    t.check(
        proc_address(target) == table_address("cuGraphInstantiate"),
        f"asking for {target} finds what the table binds for cuGraphInstantiate",
    )
    t.say(
        "why both? The table is what rawcuda calls, proven against cuda.h by rawcuda/tools/headercheck.py;\n"
        "cuGetProcAddress is how the CUDA runtime (and so CuPy and torch) reaches the driver, so comparing\n"
        "the two shows rawcuda calls the very entry points the rest of the process does."
    )

    t.step("cust: names fixed when cust_raw is built (shown, not run)")
    t.say(
        "// what cust_raw's generated bindings amount to for cuMemAlloc:\n"
        'extern "C" {\n'
        '    #[link_name = "cuMemAlloc_v2"]\n'
        "    pub fn cuMemAlloc(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult;\n"
        "}\n"
        "// cust calls driver_sys::cuMemAlloc(...) and the linker binds cuMemAlloc_v2 (-lcuda)"
    )
    t.say(
        "Checked in Rust-CUDA (commit ac2674f, 2025-08-23): crates/cust_raw/build/callbacks.rs records every\n"
        "cu* macro bindgen meets, expands them by running the C preprocessor over a small file against cuda.h,\n"
        "and gives each generated function its plain cuda.h name and the expanded symbol as its link name\n"
        "(cuMemAlloc links cuMemAlloc_v2). So the symbols are the ones the build machine's cuda.h selects,\n"
        "fixed at build time; cust does not wrap cuGetProcAddress. crates.io's cust 0.3.2 is the 2022 code: its\n"
        "cust_raw has no such build step but bindings generated once from CUDA 11.4's cuda.h, where the\n"
        "preprocessor had already renamed each function, so the Rust name is the versioned one and cust calls\n"
        "cuda::cuMemAlloc_v2(...) itself."
    )


if __name__ == "__main__":
    run(main, "Tutorial 12b: driver entry points -- symbols, versions, cuGetProcAddress")
