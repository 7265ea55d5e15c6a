"""Layer 1: cuGetProcAddress -- asking the driver for an entry point *by CUDA version*, instead of by symbol name.

rawcuda binds each table row by its exported symbol (``dlsym(libcuda, "cuMemAlloc_v2")``): the symbol
cuda.h maps the name to. The CUDA runtime does something else. It asks the driver::

    cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status)

"give me cuMemAlloc *as a program built against CUDA 12.0 means it*". The driver keeps, per function, a
list of ABI versions (the original ``cuMemAlloc`` took a 32-bit size; ``cuMemAlloc_v2`` of CUDA 3.2 a
``size_t``) and answers with the one that version of cuda.h would have selected. Why bother?

* **No symbol names to get wrong.** The ``_v2`` suffixes, and the ``_ptds``/``_ptsz`` variants for the
  per-thread default stream (selected with :attr:`ProcAddressFlag.PER_THREAD_DEFAULT_STREAM`), are the
  driver's business, not the caller's.
* **Old binaries keep working**: a program that asks with its own (old) version gets the old ABI, even
  from a driver whose header now means something else by the same name.
* **It is what everyone else does**: the CUDA runtime (and so CuPy and torch) reaches the driver this way,
  so this is the address *their* calls go to.

The two answers agree -- :func:`proc_address` for the driver's own version and :func:`table_address`
(the table's symbol through dlsym) are the same address -- *when you ask for the right name*. The lookup
knows the driver's function names and their versions, not cuda.h's macros. Mostly that is the same thing
(``cuMemAlloc`` -> ``cuMemAlloc_v2`` is a newer version of one function), but CUDA 12 made cuda.h say
``#define cuGraphInstantiate cuGraphInstantiateWithFlags``: a *different* function. cudaTypedefs.h lists
only two versions of ``cuGraphInstantiate`` itself, 10.0 and 11.0, both with the old five arguments
(error node, log buffer, size) -- so asking for "cuGraphInstantiate" at 13.0 answers with that old
function, not the three-argument one a CUDA 13 program calls. :func:`driver_function_name` gives the name
to ask for; ``tests/gpu/test_procaddress.py`` checks both answers, naming each address with ``dladdr``.
"""

from __future__ import annotations

import ctypes
import re
from ctypes import byref, c_int, c_void_p

from ..ffi.constants import ProcAddressFlag, ProcAddressQueryResult
from ..ffi.cuda import TABLE
from ..ffi.library import LIBCUDA, dladdr
from ..ffi.results import Result
from .binding import cu, decode_version, init
from .errors import CudaError, NotFoundError


def format_version(cuda_version: int) -> str:
    """``12080`` -> ``'12.8'``."""
    return "{}.{}".format(*decode_version(cuda_version))


class ProcAddressError(NotFoundError):
    """cuGetProcAddress found no entry point: no such function, or none as old as the version asked for.

    ``status`` is the driver's :class:`ProcAddressQueryResult` (SYMBOL_NOT_FOUND or VERSION_NOT_SUFFICIENT),
    ``function`` the name asked for and ``cuda_version`` the version it was asked for.
    """

    def __init__(
        self,
        code: int,
        *,
        function: str = "",
        cuda_version: int = 0,
        status: ProcAddressQueryResult | int = ProcAddressQueryResult.SYMBOL_NOT_FOUND,
        **kwargs: object,
    ) -> None:
        self.function = function
        self.cuda_version = cuda_version
        self.status = ProcAddressQueryResult(status)
        super().__init__(code, **kwargs)  # type: ignore[arg-type]

    def _message(self) -> str:
        self.hint = ""  # the generic hint for code 500 is about kernels missing from a module; details say more
        return super()._message()


def driver_cuda_version() -> int:
    """The driver's CUDA version as an integer (``13000``) -- the default version to ask for."""
    init()
    version = c_int()
    cu.cuDriverGetVersion(byref(version))
    return version.value


def proc_address(name: str, cuda_version: int | None = None, flags: ProcAddressFlag = ProcAddressFlag.DEFAULT) -> int:
    """The address of driver function ``name`` as CUDA ``cuda_version`` defines it (default: the driver's).

    ``name`` is the plain cuda.h name (``"cuMemAlloc"``, not ``"cuMemAlloc_v2"``). Raises
    :class:`ProcAddressError` when the driver has no such function (SYMBOL_NOT_FOUND) or had none yet at
    ``cuda_version`` (VERSION_NOT_SUFFICIENT).
    """
    version = driver_cuda_version() if cuda_version is None else int(cuda_version)
    pfn, status = c_void_p(), c_int(ProcAddressQueryResult.SUCCESS)
    try:
        cu.cuGetProcAddress(name.encode(), byref(pfn), version, int(flags), byref(status))
    except CudaError as exc:
        # The driver answers CUDA_ERROR_NOT_FOUND and says why in symbolStatus; keep both.
        if status.value == ProcAddressQueryResult.SUCCESS:
            raise
        raise _not_found(exc, name, version, status.value) from None
    if status.value != ProcAddressQueryResult.SUCCESS or not pfn.value:
        raise _not_found(None, name, version, status.value)
    return pfn.value


def _not_found(exc: CudaError | None, name: str, version: int, status: int) -> ProcAddressError:
    asked = f"{name} at CUDA {format_version(version)}"
    if status == ProcAddressQueryResult.VERSION_NOT_SUFFICIENT:
        why = (
            f"the driver has {name}, but not in a version as old as CUDA {format_version(version)}: "
            "the function is newer than that; ask with a newer cuda_version"
        )
    else:
        why = (
            f"the driver has no function called {name!r}: check the spelling, and ask for the plain cuda.h "
            "name (cuMemAlloc, not cuMemAlloc_v2); a function newer than this driver is not found either"
        )
    return ProcAddressError(
        exc.code if exc is not None else Result.ERROR_NOT_FOUND,
        function=name,
        cuda_version=version,
        status=status,
        call="cuGetProcAddress",
        symbol=TABLE["cuGetProcAddress"].symbol,
        arguments=f"symbol={name!r}, cudaVersion={version}",
        description=f"no entry point for {asked} ({ProcAddressQueryResult(status).name})",
        details=[why],
    )


_SYMBOL_SUFFIX = re.compile(r"(_v\d+)?(_ptds|_ptsz)?$")


def driver_function_name(name: str) -> str:
    """The name to ask cuGetProcAddress for, to reach what table row ``name`` binds.

    Usually the row's own name: ``cuMemAlloc`` is bound as ``cuMemAlloc_v2``, a *version* of the same
    function, and the version lookup picks it. But cuda.h sometimes ``#define``s a name to a *different*
    function -- ``cuGraphInstantiate`` to ``cuGraphInstantiateWithFlags`` -- and the driver's lookup knows
    nothing of cuda.h's macros: asked for "cuGraphInstantiate" it answers with the newest function of
    that name, the older signature. So: the bound symbol without its ``_vN``/``_ptds``/``_ptsz`` suffix.
    """
    return _SYMBOL_SUFFIX.sub("", TABLE[name].symbol)


def table_address(name: str) -> int:
    """The address of table row ``name``'s symbol in libcuda (``dlsym``): what rawcuda actually calls."""
    symbol = TABLE[name].symbol
    driver = cu.library()
    try:
        fn = driver.handle[symbol]
    except AttributeError:
        raise NotFoundError(
            Result.ERROR_NOT_FOUND,
            call="dlsym",
            symbol=symbol,
            arguments=repr(symbol),
            description=f"{driver.path} does not export {symbol}",
        ) from None
    return ctypes.cast(fn, c_void_p).value or 0


def symbol_at(address: int | None) -> str | None:
    """The exported name whose code contains ``address`` (``dladdr``), or None when it has none.

    ``dladdr`` only knows *exported* symbols: for an address inside an internal function it names the
    nearest exported symbol before it, so compare the answer with ``dlsym`` of that name before trusting it.
    """
    info = dladdr(address or 0)
    if info is None or not info.dli_sname:
        return None
    return info.dli_sname.decode(errors="replace")


def describe(address: int | None) -> str:
    """``0x7f..a0 = cuMemAlloc_v2`` or ``0x7f..a0 (inside/near cuFoo, not its start)``, for messages."""
    if not address:
        return "NULL"
    name = symbol_at(address)
    if name is None:
        return f"{address:#x} (no exported symbol)"
    driver = LIBCUDA.loaded()
    start = None
    if driver is not None:
        try:
            start = ctypes.cast(driver.handle[name], c_void_p).value
        except AttributeError:
            start = None
    if start == address:
        return f"{address:#x} = {name}"
    return f"{address:#x} (not an exported entry point; dladdr's nearest symbol is {name})"


__all__ = [
    "ProcAddressError",
    "describe",
    "driver_cuda_version",
    "driver_function_name",
    "format_version",
    "proc_address",
    "symbol_at",
    "table_address",
]
