"""Tutorial 00a -- the declarations by hand: libcuda through bare ctypes, restype and argtypes written out.

Every other tutorial calls the driver through rawcuda, which has already chosen the symbol, declared the
types and turned failures into exceptions. This one does what the seed article says a binding must do by
hand -- and shows where each piece of rawcuda comes from:

* ``ctypes.CDLL("libcuda.so.1")`` -- the driver's soname, not ``libcuda.so``;
* a bare call: what ctypes assumes when nobody declared anything, and the integer CUresult it returns;
* ``restype`` and ``argtypes`` written out for 8 functions, ``byref`` out-parameters, a failure code and
  ``cuGetErrorName``;
* what goes wrong without ``argtypes``/``restype``: an int cut to 32 bits on the way in, a pointer cut to
  32 bits on the way out (shown on harmless libc calls -- never on a call that could crash);
* why ``cuMemAlloc`` is really ``cuMemAlloc_v2`` (cuda.h's ``#define``, and the driver's own answer);
* the hand-written lines as one *row* of a table plus one ``errcheck`` -- which is what rawcuda is;
* last, the same declaration as rawcuda's table holds it, rawcuda's errcheck, and the cust code.

Tutorial 00b goes on from here with the same bare ctypes: a context, device memory, the ``void**``
kernelParams array built by hand, a launch checked against numpy.

The declarations are here, in ``declare()``, and step 3 prints them; what 00a and 00b share (cuda.h's
types in ctypes, the CUresult numbers, the errcheck, the no-GPU exit) is in ``tutorials/_handmade.py``,
as bare. Nothing in this file imports rawcuda before the last step, and no driver call here goes through
it. (The shared frame ``tutorials/_tutorial.py`` imports rawcuda to recognise its no-GPU errors; that
touches no driver.) No libcuda, the toolkit's stub, or no device -> one ``skipped:`` line, status 77; the
line names this tutorial's run recorded on a GPU (``tutorials/output/00a_declarations_by_hand.txt``).

``$RAWCUDA_LIBCUDA``, when set, names the file to open instead of the soname (rawcuda's own override).
The CPU tests point it at ``tests/fakecuda/fakehost.c``, a look-alike whose "device" is the host.

Run:  python tutorials/00a_declarations_by_hand.py [--step]
"""

from __future__ import annotations

import ctypes
import inspect
import textwrap
from ctypes import POINTER, byref, c_char_p, c_int, c_longlong, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

from _handmade import (
    CUDA_ERROR_INVALID_DEVICE,
    CUDA_SUCCESS,
    LOW_32_BITS,
    NO_GPU_CODES,
    SONAME,
    CUdevice,
    CUdeviceptr,
    CUresult,
    expect_failure,
    header_lines,
    library_name,
    make_errcheck,
    mapped_file,
    skip,
)
from _tutorial import Tutorial, TutorialCheckError, run

CU_GET_PROC_ADDRESS_DEFAULT = 0  # cuGetProcAddress flags: the default search
CUDA_3_1 = 3010  # the last CUDA whose cuMemAlloc took 32-bit sizes and pointers
NAME_BYTES = 256  # buffer for cuDeviceGetName
BAD_ORDINAL = 99  # a device this machine does not have
TOO_BIG_FOR_INT = (1 << 32) + 5  # 4 GiB + 5: the size a 32-bit int cannot hold
SIGN_BIT_SET = (1 << 32) - 5  # 0xfffffffb: as a 32-bit C int, -5
LIBC_BUFFER_BYTES = 16
VERSION_MAJOR, VERSION_MINOR = 1000, 10  # CUDA versions are major * 1000 + minor * 10: 13000 is 13.0

#: Every symbol declare() gives types to -- the symbols libcuda exports, not always cuda.h's names.
SYMBOLS = (
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuGetProcAddress_v2",
    "cuMemAlloc_v2",
)


def declare(lib: Any) -> None:
    """The hand-written half of the glue: for each function, what it returns and what it takes.

    ``lib.cuX`` is created on first access and cached by the CDLL, so these settings stick to it.
    """
    # CUresult cuInit(unsigned int Flags)
    lib.cuInit.restype = CUresult
    lib.cuInit.argtypes = [c_uint]
    # CUresult cuDriverGetVersion(int *driverVersion)
    lib.cuDriverGetVersion.restype = CUresult
    lib.cuDriverGetVersion.argtypes = [POINTER(c_int)]
    # CUresult cuGetErrorName(CUresult error, const char **pStr) -- *pStr: a static string the driver owns
    lib.cuGetErrorName.restype = CUresult
    lib.cuGetErrorName.argtypes = [CUresult, POINTER(c_char_p)]
    # CUresult cuDeviceGetCount(int *count)
    lib.cuDeviceGetCount.restype = CUresult
    lib.cuDeviceGetCount.argtypes = [POINTER(c_int)]
    # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    lib.cuDeviceGet.restype = CUresult
    lib.cuDeviceGet.argtypes = [POINTER(CUdevice), c_int]
    # CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
    lib.cuDeviceGetName.restype = CUresult
    lib.cuDeviceGetName.argtypes = [c_char_p, c_int, CUdevice]
    # CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    #                           CUdriverProcAddressQueryResult *symbolStatus)       (#define'd to _v2)
    lib.cuGetProcAddress_v2.restype = CUresult
    lib.cuGetProcAddress_v2.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
    # CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)                        (#define'd to _v2)
    lib.cuMemAlloc_v2.restype = CUresult
    lib.cuMemAlloc_v2.argtypes = [POINTER(CUdeviceptr), c_size_t]


#: The same declaration as data: prototype, exported symbol, restype, argtypes. A list of these is a table.
CU_MEM_ALLOC_ROW = (
    "CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)",
    "cuMemAlloc_v2",
    CUresult,
    (POINTER(CUdeviceptr), c_size_t),
)


def bind(lib: Any, row: tuple[str, str, Any, tuple[Any, ...]], errcheck: Any) -> Any:
    """A function for one row: a *fresh* pointer to the symbol (lib[...] is not cached), typed and checked."""
    _prototype, symbol, restype, argtypes = row
    fn = lib[symbol]
    fn.restype, fn.argtypes, fn.errcheck = restype, list(argtypes), errcheck
    return fn


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw")
    t.step(f"dlopen the driver by its soname: ctypes.CDLL({SONAME!r})")
    t.term("soname")
    requested = library_name()  # SONAME, unless $RAWCUDA_LIBCUDA names another file (the CPU tests' fake)
    try:
        lib = ctypes.CDLL(requested)
    except OSError as exc:
        skip(f"OSError: {str(exc).splitlines()[0]}")
    t.say(
        f"opened {requested!r} -> {mapped_file(requested)}\n"
        f"Why {SONAME} and not libcuda.so? The driver installs libcuda.so.<version>, and the loader finds it by\n"
        "its soname, libcuda.so.1. The bare libcuda.so is a name for *linking* (-lcuda); on a machine with\n"
        "only the toolkit, the file of that name is the toolkit's stub (lib64/stubs/libcuda.so), whose every\n"
        "function returns CUDA_ERROR_STUB_LIBRARY (34). Nothing is declared yet: ctypes knows only names."
    )

    t.step("a bare call before any declaration: cuInit(0)")
    result = lib.cuInit(0)
    t.term("CUresult")
    t.say(
        f"lib.cuInit(0) -> {result!r} (a Python int: the CUresult; 0 is CUDA_SUCCESS)\n"
        "It works undeclared only because ctypes' guesses happen to be right here: with no argtypes every\n"
        "Python int is passed as a C int, and with no restype the result is read as a C int. cuInit takes an\n"
        "unsigned int and returns an enum (4 bytes): both guesses fit. For most functions they do not."
    )
    if result in NO_GPU_CODES:
        skip(f"cuInit returned {result}: {NO_GPU_CODES[result]}")
    t.check(result == CUDA_SUCCESS, "cuInit(0) returned 0")

    t.step("declare the functions by hand: restype (what comes back) and argtypes (what goes in)")
    declare(lib)
    body = inspect.getsource(declare).split('"""')[-1].rstrip()
    t.say(f"def declare(lib):{body}")
    t.say(
        "Out-parameters are pointers: `byref(x)` passes the address of the ctypes object x, and the driver\n"
        "writes the answer into it. Handles (CUcontext, CUmodule ...) are opaque pointers: c_void_p. Device\n"
        "addresses (CUdeviceptr) are 64-bit *numbers*: c_uint64, never c_void_p (whose 0 reads back as None).\n"
        "CUresult = c_int, CUdevice = c_int, CUdeviceptr = c_uint64: cuda.h's typedefs, spelled in ctypes in\n"
        "tutorials/_handmade.py. Tutorial 00b declares the functions of a launch the same way."
    )

    t.step("call them, and read each CUresult by hand")
    version, count, dev = c_int(), c_int(), CUdevice()
    name = ctypes.create_string_buffer(NAME_BYTES)
    results = {
        "cuDriverGetVersion(&version)": lib.cuDriverGetVersion(byref(version)),
        "cuDeviceGetCount(&count)": lib.cuDeviceGetCount(byref(count)),
        "cuDeviceGet(&dev, 0)": lib.cuDeviceGet(byref(dev), 0),
        f"cuDeviceGetName(name, {NAME_BYTES}, dev)": lib.cuDeviceGetName(name, NAME_BYTES, dev),
    }
    t.say("\n".join(f"{call:<36} -> {rc}" for call, rc in results.items()))
    if results["cuDeviceGetCount(&count)"] == CUDA_SUCCESS and count.value < 1:
        skip("the driver reports no CUDA device")
    t.check(all(rc == CUDA_SUCCESS for rc in results.values()), "every call returned 0 (CUDA_SUCCESS)")
    t.say(
        f"driver supports CUDA {version.value // VERSION_MAJOR}.{version.value % VERSION_MAJOR // VERSION_MINOR} "
        f"({version.value}); "
        f"{count.value} device(s); device 0 is {name.value.decode()!r}"
    )

    t.step(f"a failure is just a number: cuDeviceGet(&dev, {BAD_ORDINAL}), named with cuGetErrorName")
    bad = CUdevice()
    failed = lib.cuDeviceGet(byref(bad), BAD_ORDINAL)
    text = c_char_p()  # the out-parameter: the driver points it at a static string the driver owns
    named = lib.cuGetErrorName(failed, byref(text))
    failed_name = text.value.decode() if named == CUDA_SUCCESS and text.value else "an unknown code"
    t.term("errcheck")
    t.say(
        f"cuDeviceGet(&dev, {BAD_ORDINAL}) -> {failed}; cuGetErrorName({failed}, &str) -> {failed_name!r}\n"
        "Nothing was raised: ignore the integer and the program carries on with a garbage device. The seed's\n"
        "case 4 is about exactly this -- the codes must become errors somewhere; a later step makes them.\n"
        "(error_name() in tutorials/_handmade.py is these three lines, for that later step's errcheck.)"
    )
    t.check(
        failed == CUDA_ERROR_INVALID_DEVICE and failed_name == "CUDA_ERROR_INVALID_DEVICE",
        f"code {CUDA_ERROR_INVALID_DEVICE}, CUDA_ERROR_INVALID_DEVICE",
    )

    t.step("what goes wrong WITHOUT argtypes and restype (shown on harmless libc calls)")
    libc = ctypes.CDLL(None)  # the C library already in this process
    bare_abs = libc["abs"]  # int abs(int): lib[...] gives a fresh, undeclared function pointer
    try:
        outcome = f"-> {bare_abs(TOO_BIG_FOR_INT)}"
    except (ctypes.ArgumentError, OverflowError) as exc:
        outcome = f"refused: {type(exc).__name__}: {exc}"
    t.say(
        f"in:  undeclared abs({TOO_BIG_FOR_INT:#x}) {outcome}\n"
        "     With no argtypes a Python int travels as a 32-bit C int: on 64-bit Linux the high bits are\n"
        "     silently dropped (a 32-bit `long`, as on Windows, raises instead)."
    )
    t.check(outcome != f"-> {TOO_BIG_FOR_INT}", "an undeclared call does not pass a 33-bit int through intact")
    # A 64-bit parameter shows what fills the upper half: llabs hands back the magnitude of what arrived.
    bare_llabs = libc["llabs"]  # long long llabs(long long): argtypes left out, as for abs
    bare_llabs.restype = c_longlong  # the result declared, so all 64 bits that arrived come back
    small, negative = bare_llabs(TOO_BIG_FOR_INT), bare_llabs(SIGN_BIT_SET)
    low, as_int = TOO_BIG_FOR_INT & LOW_32_BITS, c_int(SIGN_BIT_SET).value  # what a C int keeps of each
    t.say(
        f"     undeclared llabs({TOO_BIG_FOR_INT:#x}) -> {small}; undeclared llabs({SIGN_BIT_SET:#x}) -> {negative}\n"
        "     llabs takes 8 bytes, and ctypes gave it a 4-byte int. The x86-64 ABI leaves the upper half of\n"
        "     such an argument unspecified; ctypes (libffi) sign-extends the int to 64 bits, so what arrives\n"
        f"     is not garbage: {TOO_BIG_FOR_INT:#x} arrives as exactly {low}, and {SIGN_BIT_SET:#x} (the C int "
        f"{as_int}) as {as_int},\n"
        f"     not {SIGN_BIT_SET:,}. Undeclared, cuMemAlloc_v2(&p, 4 GiB + 5) would ask the driver for exactly\n"
        f"     {low} bytes, and a size of {SIGN_BIT_SET:#x} would arrive as 2**64 - {-as_int}: wrong sizes, "
        "never random ones."
    )
    t.check(
        small == low and negative == -as_int,
        "an undeclared int reaches a 64-bit parameter sign-extended: its low 32 bits, nothing left over",
    )
    buf = ctypes.create_string_buffer(LIBC_BUFFER_BYTES)
    address = ctypes.addressof(buf)
    memset_int = libc["memset"]  # void *memset(void *s, int c, size_t n): returns s
    memset_int.argtypes = [c_void_p, c_int, c_size_t]  # arguments declared, restype left at its default
    memset_ptr = libc["memset"]
    memset_ptr.argtypes, memset_ptr.restype = [c_void_p, c_int, c_size_t], c_void_p
    as_int, as_ptr = memset_int(buf, 0, len(buf)), memset_ptr(buf, 0, len(buf))
    t.say(
        f"out: memset(buf at {address:#x}, 0, {len(buf)}) returns buf's address;\n"
        f"     restype left at c_int   -> {as_int} ({as_int & LOW_32_BITS:#x}: the low 32 bits, read as signed)\n"
        f"     restype = c_void_p      -> {as_ptr:#x}\n"
        "     A pointer read through the default restype is cut in half; using it would touch someone else's\n"
        "     memory. Driver functions return CUresult, so their pointers come back through out-parameters --\n"
        "     but NVRTC's nvrtcGetErrorString returns a const char *, and needs restype = c_char_p."
    )
    t.term("NVRTC")
    t.check(as_ptr == address and as_int == c_int(address).value, "c_void_p keeps the pointer; c_int cuts it")

    t.step("why cuMemAlloc is really cuMemAlloc_v2")
    t.say(
        header_lines(r"#define cuMemAlloc\s", "#define cuMemAlloc  cuMemAlloc_v2")
        + "\n"
        + header_lines(
            r"cuMemAlloc\(CUdeviceptr_v1|typedef unsigned int CUdeviceptr_v1",
            "typedef unsigned int CUdeviceptr_v1; CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)",
        )
    )
    exports = {symbol: hasattr(lib, symbol) for symbol in ("cuMemAlloc", "cuMemAlloc_v2")}
    listed = ", ".join(f"{symbol}: {'yes' if found else 'no'}" for symbol, found in exports.items())
    t.say(
        f"this libcuda exports -- {listed}\n"
        "CUDA 3.2 widened device pointers and sizes to 64 bits. The old functions kept the plain names (so old\n"
        "binaries still link) and the new ones got _v2; cuda.h #defines the plain name to the new one, so C\n"
        "code never notices. ctypes never reads cuda.h: lib.cuMemAlloc is the 32-bit-era symbol. A binding\n"
        "must look up the symbol the header maps the name to -- or ask the driver, as the CUDA runtime does:"
    )
    t.check(exports["cuMemAlloc_v2"], "libcuda exports cuMemAlloc_v2")
    pfn, status = c_void_p(), c_int()
    lib.cuGetProcAddress_v2(b"cuMemAlloc", byref(pfn), version.value, CU_GET_PROC_ADDRESS_DEFAULT, byref(status))
    v2_address = ctypes.cast(lib.cuMemAlloc_v2, c_void_p).value
    old = c_void_p()
    old_rc = lib.cuGetProcAddress_v2(b"cuMemAlloc", byref(old), CUDA_3_1, CU_GET_PROC_ADDRESS_DEFAULT, byref(status))
    plain_address = ctypes.cast(lib.cuMemAlloc, c_void_p).value if exports["cuMemAlloc"] else None
    t.say(
        f'cuGetProcAddress("cuMemAlloc", &pfn, {version.value}, DEFAULT, &status) -> {pfn.value or 0:#x}; '
        f"dlsym(cuMemAlloc_v2) = {v2_address or 0:#x}\n"
        f'cuGetProcAddress("cuMemAlloc", &pfn, {CUDA_3_1} = CUDA 3.1, ...) -> result {old_rc}, {old.value or 0:#x}'
        f"{'' if plain_address is None else f'; dlsym(cuMemAlloc) = {plain_address:#x}'}\n"
        "(tutorial 12b and rawcuda/checked/procaddress.py follow this road further)"
    )
    t.check(pfn.value == v2_address, "asked by name and version, the driver answers with cuMemAlloc_v2")

    t.step("the hand-written lines as a table row, and one errcheck for every function")
    errcheck = make_errcheck(lib)
    t.say(
        f"CU_MEM_ALLOC_ROW = {CU_MEM_ALLOC_ROW!r}\n"
        "(64-bit Linux has one 8-byte unsigned type under three names: ctypes shows c_uint64 and c_size_t as\n"
        "c_ulong, so POINTER(CUdeviceptr) prints as LP_c_ulong)\n\n"
        + "tutorials/_handmade.py (00b attaches the same one):\n"
        + inspect.getsource(make_errcheck)
        + "\nand this file's bind():\n"
        + inspect.getsource(bind).rstrip()
    )
    cu_mem_alloc = bind(lib, CU_MEM_ALLOC_ROW, errcheck)
    t.check(
        cu_mem_alloc.argtypes == lib.cuMemAlloc_v2.argtypes and cu_mem_alloc.restype is lib.cuMemAlloc_v2.restype,
        "the row binds exactly what step 3 declared by hand",
    )
    for symbol in SYMBOLS:
        if symbol != "cuGetErrorName":  # errcheck itself calls it: a failure there must not recurse
            getattr(lib, symbol).errcheck = errcheck
    raised = expect_failure(lambda: lib.cuDeviceGet(byref(bad), BAD_ORDINAL), "cuDeviceGet of a missing device")
    t.say(f"the same bad call again: lib.cuDeviceGet(&dev, {BAD_ORDINAL}) raises DriverError: {raised}")
    t.check(raised.code == CUDA_ERROR_INVALID_DEVICE, "from now on a failing call raises instead of returning")
    t.say(
        "That is all a binding's core is: a table of such rows, bound once each, and one errcheck. rawcuda's\n"
        "table (rawcuda/ffi/cuda/) holds a row like this for every function it calls, proven against cuda.h;\n"
        "its errcheck builds richer exceptions. The last step shows both."
    )

    t.step("where rawcuda comes from: the same row in its table, its errcheck -- and the cust code")
    # The first import of rawcuda's own code in this file.
    from rawcuda import CudaError
    from rawcuda.checked import Namespace, cu
    from rawcuda.ffi.cuda import TABLE, memory

    row = TABLE["cuMemAlloc"]
    source = inspect.getsource(memory).splitlines()
    at = next(i for i, line in enumerate(source) if f'"{row.symbol}"' in line)
    start = max(i for i in range(at) if "decl(" in source[i])
    end = next(i for i in range(at, len(source)) if source[i].strip() == "),")
    t.say("rawcuda/ffi/cuda/memory.py:\n" + "\n".join(source[start : end + 1]))
    t.check(
        row.symbol == CU_MEM_ALLOC_ROW[1]
        and row.restype is CU_MEM_ALLOC_ROW[2]
        and [ctypes.sizeof(x) for x in row.argtypes] == [ctypes.sizeof(x) for x in CU_MEM_ALLOC_ROW[3]],
        "rawcuda's row binds the same symbol with the same types as ours",
    )
    bind_source = inspect.getsource(Namespace.bind).splitlines()
    first = next(i for i, line in enumerate(bind_source) if "def errcheck" in line)
    last = next(i for i, line in enumerate(bind_source) if "fn.errcheck = errcheck" in line)
    errcheck_source = textwrap.dedent("\n".join(bind_source[first : last + 1]))
    t.say(
        f"rawcuda/checked/binding.py, Namespace.bind: attached to each of the table's {len(TABLE)} rows when it is\n"
        f"first used:\n{errcheck_source}"
    )
    try:
        cu.cuDeviceGet(byref(bad), BAD_ORDINAL)
    except CudaError as exc:
        rawcuda_error = exc
    else:
        raise TutorialCheckError(f"rawcuda's cuDeviceGet({BAD_ORDINAL}) should have raised")
    t.say(f"cu.cuDeviceGet(&dev, {BAD_ORDINAL}) raises {type(rawcuda_error).__name__}:\n  {rawcuda_error}")
    t.check(rawcuda_error.code == CUDA_ERROR_INVALID_DEVICE, "rawcuda's errcheck raised for the same code")
    t.say(
        "cust, the seed's library, has the same two halves, generated instead of hand-written:\n"
        "  let d_a = DeviceBuffer::from_slice(&host_a)?;             // cuda_malloc + copy_from\n"
        "  let d_c = unsafe { DeviceBuffer::<f32>::uninitialized(n)? };\n"
        "In Rust-CUDA at commit ac2674f (Cargo.toml: 0.3.2), cust::memory::cuda_malloc calls\n"
        "driver_sys::cuMemAlloc(&mut ptr, size).to_result()?: the row comes from bindgen over cuda.h (crate\n"
        "cust_raw), whose build script expands cuda.h's #defines with the C preprocessor so that the Rust name\n"
        "cuMemAlloc links to the symbol cuMemAlloc_v2; to_result() is the errcheck, a match from CUresult to\n"
        "CudaError (CudaError::OutOfMemory carries no sizes: the seed's OutOfMemory { requested, available } is\n"
        "the seed's own type). crates.io's cust 0.3.2 (2022) is older code: its rows were generated once, from\n"
        "CUDA 11.4's cuda.h, and it calls the versioned name itself, cuda::cuMemAlloc_v2(&mut ptr, size).\n"
        "Tutorial 00b goes on, as bare as this, to a launch: kernelParams built by hand, the array cust's\n"
        "launch! builds."
    )


if __name__ == "__main__":
    run(main, "Tutorial 00a: libcuda through bare ctypes -- the declarations written by hand")
