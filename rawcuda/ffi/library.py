"""Layer 0: find libcuda and open it -- lazily, and with an error that says what was tried.

Why lazily? ``import rawcuda`` must work on a laptop, in CI and in a docs build, none of which has a
GPU. So nothing here runs at import: the first driver call opens the library (``dlopen``), and only then.
PyCUDA's habit of creating a context at import time is exactly what we avoid.

Where do we look, and why in this order?

1. ``$RAWCUDA_LIBCUDA`` -- a path you chose. If it is set it is the *only* candidate: silently falling
   back to another libcuda would hide the mistake you are trying to debug (a test pointing at the
   toolkit stub, a container with two drivers).
2. ``libcuda.so.1`` -- the driver's soname. This is what ldconfig registers when the driver is installed,
   so the dynamic loader finds the *real* driver, not the toolkit's stub.
3. ``libcuda.so`` -- the unversioned name; often only the toolkit's ``stubs/`` directory has it, which is
   why it comes after the soname.
4. ``/usr/lib/wsl/lib/libcuda.so.1`` -- where WSL2 mounts the Windows driver's libcuda.

(On Windows the driver library is ``nvcuda.dll``.)
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass

from ..errors import DriverNotFoundError

ENV_VAR = "RAWCUDA_LIBCUDA"
SONAME = "libcuda.so.1"
UNVERSIONED = "libcuda.so"
WSL_PATH = "/usr/lib/wsl/lib/libcuda.so.1"
WINDOWS_NAME = "nvcuda.dll"


@dataclass(frozen=True)
class Driver:
    """The opened library: the ctypes handle, the name we asked for, and the file it really is."""

    handle: ctypes.CDLL
    requested: str
    path: str


def candidates() -> list[str]:
    """The names or paths we will try, in order (see the module docstring for why this order)."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        return [chosen]
    if sys.platform == "win32":
        return [WINDOWS_NAME]
    return [SONAME, UNVERSIONED, WSL_PATH]


_lock = threading.Lock()
_driver: Driver | None = None


def load() -> Driver:
    """Open libcuda once per process; later calls return the same :class:`Driver`."""
    global _driver
    if _driver is not None:
        return _driver
    with _lock:
        if _driver is None:
            _driver = _open_first(candidates())
    return _driver


def loaded() -> Driver | None:
    """The driver if it has been opened already, else None (never opens it)."""
    return _driver


NO_FILE = "no such file"
NO_DIRECTORY = "no such directory"


def open_first(names: list[str], symbol: str) -> tuple[Driver | None, list[tuple[str, str]]]:
    """dlopen the first of ``names`` that opens; also every (name, why it failed) before it.

    Shared by libcuda and libnvrtc. ``symbol`` is one the library exports, used to find its real path.
    """
    tried: list[tuple[str, str]] = []
    for name in names:
        folder = os.path.dirname(name)
        if folder and not os.path.exists(name):  # a path: say plainly what is missing, without dlopen's echo
            tried.append((name, NO_FILE if os.path.isdir(folder) else NO_DIRECTORY))
            continue
        try:
            handle = ctypes.CDLL(name)
        except OSError as exc:
            why = str(exc) or type(exc).__name__
            tried.append((name, why.removeprefix(f"{name}: ")))  # dlerror() starts with the name again
            continue
        return Driver(handle=handle, requested=name, path=resolved_path(handle, name, symbol)), tried
    return None, tried


def _open_first(names: list[str]) -> Driver:
    driver, tried = open_first(names, "cuInit")
    if driver is None:
        raise DriverNotFoundError(tried, env_var=ENV_VAR, env_set=bool(os.environ.get(ENV_VAR)))
    return driver


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def resolved_path(handle: ctypes.CDLL, fallback: str, symbol: str = "cuInit") -> str:
    """The file the dynamic loader actually opened (``libcuda.so.1`` -> ``/usr/lib/.../libcuda.so.580``).

    Why bother? "Which libcuda did I get?" is the first question when the stub or a forward-compat copy
    shadows the driver. ``dladdr`` on one of the library's own symbols answers it.
    """
    if sys.platform == "win32":
        return fallback
    try:
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p)
        info = _DlInfo()
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode(errors="replace"))
    except (AttributeError, OSError):
        pass
    return fallback
