"""Layer 0: find a shared library and open it -- lazily, remembering what was tried and why it failed.

One loader serves both libraries rawcuda talks to: the driver (``libcuda``) and the runtime compiler
(``libnvrtc``). Each is a :class:`Library` -- where to look, which environment variable overrides that,
and one symbol the library must export -- opened on first use, once per process.

Why lazily? ``import rawcuda`` must work on a laptop, in CI and in a docs build, none of which has a
GPU. So nothing here runs at import: the first call that needs the library opens it (``dlopen``), and
only then. PyCUDA's habit of creating a context at import time is exactly what we avoid.

Where do we look for libcuda, and why in this order?

1. ``$RAWCUDA_LIBCUDA`` -- a path you chose. If it is set it is the *only* candidate: silently falling
   back to another libcuda would hide the mistake you are trying to debug (a test pointing at the
   toolkit stub, a container with two drivers).
2. ``libcuda.so.1`` -- the driver's soname. This is what ldconfig registers when the driver is installed,
   so the dynamic loader finds the *real* driver, not the toolkit's stub.
3. ``libcuda.so`` -- the unversioned name; often only the toolkit's ``stubs/`` directory has it, which is
   why it comes after the soname.
4. ``/usr/lib/wsl/lib/libcuda.so.1`` -- where WSL2 mounts the Windows driver's libcuda.

(On Windows the driver library is ``nvcuda.dll``.) libnvrtc: ``$RAWCUDA_LIBNVRTC`` alone when set; else
its sonames newest first (the soname carries the CUDA major version, and one process may see several),
first through the loader's own search, then in the toolkit's library directories (``$CUDA_HOME/lib64``,
``/usr/local/cuda/...``), which the loader often does not know about.

A library that opens but does not export the probe symbol (``cuInit``, ``nvrtcVersion``) is some other
library -- libcudart, libm, a mistyped path -- and counts as a failed candidate, not as the driver. When
no candidate opens, :class:`LibraryNotFoundError` lists each one and why it failed. Layer 1 turns that into
the error a user reads (``DriverNotFoundError``, ``NvrtcNotFoundError``), which says how to fix it; this
layer only knows what happened.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

NO_FILE = "no such file"
NO_DIRECTORY = "no such directory"

LIBCUDA_ENV_VAR = "RAWCUDA_LIBCUDA"
SONAME = "libcuda.so.1"
UNVERSIONED = "libcuda.so"
WSL_PATH = "/usr/lib/wsl/lib/libcuda.so.1"
WINDOWS_NAME = "nvcuda.dll"

NVRTC_ENV_VAR = "RAWCUDA_LIBNVRTC"
NVRTC_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
NVRTC_WINDOWS_NAMES = ("nvrtc64_130_0.dll", "nvrtc64_120_0.dll")
#: Where toolkits put their libraries when the loader's search path does not include them.
TOOLKIT_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")


class Opened(NamedTuple):
    """An opened library: the ctypes handle, the name we asked for, and the file it really is."""

    handle: ctypes.CDLL
    requested: str
    path: str


class LibraryNotFoundError(OSError):
    """No candidate of a :class:`Library` could be opened; ``tried`` is (candidate, why) for each."""

    def __init__(self, library: Library, tried: Sequence[tuple[str, str]], env_set: bool) -> None:
        self.library = library
        self.tried = list(tried)
        self.env_set = env_set
        super().__init__(f"could not load {library.name} (tried {', '.join(name for name, _ in self.tried)})")


class Library:
    """A shared library opened on first use: ``LIBCUDA.load()`` opens it once; later calls return the same."""

    def __init__(self, name: str, env_var: str, probe: str, search: Callable[[], list[str]]) -> None:
        self.name = name
        self.env_var = env_var
        self.probe = probe  # a symbol it exports: dladdr of it names the file that was really opened
        self._search = search
        self._lock = threading.Lock()
        self._opened: Opened | None = None

    def candidates(self) -> list[str]:
        """The names or paths to try, in order: the environment variable alone when set."""
        chosen = os.environ.get(self.env_var)
        return [chosen] if chosen else self._search()

    def load(self) -> Opened:
        """Open the library (once per process); :class:`LibraryNotFoundError` when no candidate opens."""
        opened = self._opened
        if opened is not None:
            return opened
        with self._lock:
            if self._opened is None:
                self._opened = self.open_first(self.candidates())
            return self._opened

    def loaded(self) -> Opened | None:
        """The library if it has been opened already, else None (never opens it)."""
        return self._opened

    def reset(self) -> None:
        """Forget the opened library, so that the next :meth:`load` searches again (tests point the
        environment variable elsewhere; ctypes cannot really unload a library, so nothing is closed)."""
        with self._lock:
            self._opened = None

    def open_first(self, names: Sequence[str]) -> Opened:
        """dlopen the first of ``names`` that opens, or raise with every (name, why it failed)."""
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
            if not hasattr(handle, self.probe):
                # It opened, but it is some other library (libcudart, libm, a typo'd path): every call would fail
                # as a "missing symbol" and advise a driver update. Say what it is not, and try the next one.
                tried.append((name, f"not {self.name}: it does not export {self.probe}"))
                continue
            return Opened(handle=handle, requested=name, path=resolved_path(handle, name, self.probe))
        raise LibraryNotFoundError(self, tried, env_set=bool(os.environ.get(self.env_var)))

    def __repr__(self) -> str:
        return f"<Library {self.name} ({'opened ' + self._opened.path if self._opened else 'not opened'})>"


def _libcuda_names() -> list[str]:
    if sys.platform == "win32":
        return [WINDOWS_NAME]
    return [SONAME, UNVERSIONED, WSL_PATH]


def toolkit_dirs() -> list[str]:
    """Library directories of a CUDA toolkit: ``$CUDA_HOME/lib64`` first, then the usual install places."""
    dirs = []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        dirs.append(os.path.join(cuda_home, "lib64"))
    dirs += [d for d in TOOLKIT_DIRS if d not in dirs]
    return dirs


def _libnvrtc_names() -> list[str]:
    if sys.platform == "win32":
        return list(NVRTC_WINDOWS_NAMES)
    return [*NVRTC_SONAMES, *(os.path.join(folder, name) for folder in toolkit_dirs() for name in NVRTC_SONAMES)]


#: The NVIDIA driver: every CUDA Driver API call goes here.
LIBCUDA = Library("libcuda", LIBCUDA_ENV_VAR, "cuInit", _libcuda_names)
#: NVRTC, the runtime CUDA C++ compiler (ships with the toolkit, not the driver).
LIBNVRTC = Library("libnvrtc", NVRTC_ENV_VAR, "nvrtcVersion", _libnvrtc_names)


# --- which file is it? ---------------------------------------------------------------------------------
class DlInfo(ctypes.Structure):
    """``Dl_info`` from <dlfcn.h>: what ``dladdr`` says about an address."""

    _fields_ = [
        ("dli_fname", ctypes.c_char_p),  # the file of the shared object that contains the address
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),  # the nearest exported symbol at or below the address
        ("dli_saddr", ctypes.c_void_p),
    ]


def dladdr(address: int) -> DlInfo | None:
    """``dladdr(address)``: which loaded file and exported symbol contain it (None if none, or on Windows)."""
    if sys.platform == "win32" or not address:
        return None
    try:
        function = ctypes.CDLL(None).dladdr
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    function.restype = ctypes.c_int
    info = DlInfo()
    return info if function(address, ctypes.byref(info)) else None


def resolved_path(handle: ctypes.CDLL, fallback: str, symbol: str) -> str:
    """The file the dynamic loader actually opened (``libcuda.so.1`` -> ``/usr/lib/.../libcuda.so.580``).

    Why bother? "Which libcuda did I get?" is the first question when the stub or a forward-compat copy
    shadows the driver. ``dladdr`` on one of the library's own symbols answers it.
    """
    try:
        address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value
    except AttributeError:
        return fallback
    info = dladdr(address or 0)
    if info is None or not info.dli_fname:
        return fallback
    return os.path.realpath(info.dli_fname.decode(errors="replace"))


__all__ = [
    "LIBCUDA",
    "LIBNVRTC",
    "NO_DIRECTORY",
    "NO_FILE",
    "DlInfo",
    "Library",
    "LibraryNotFoundError",
    "Opened",
    "dladdr",
    "resolved_path",
    "toolkit_dirs",
]
