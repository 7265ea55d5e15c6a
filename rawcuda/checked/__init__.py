"""Layer 1: checked calls -- the tables bound to their libraries, every failure a clear exception.

What each file holds:

    binding.py      the namespaces ``cu`` (libcuda) and ``nv`` (libnvrtc): rows bound lazily, each
                    result code checked; hot-path slots; init()
    describe.py     building the exception for a failed call (arguments, driver description, OOM sizes)
    errors.py       the exception classes;   hints.py  the cause-and-fix text for the common codes
    tracing.py      ``rawcuda.trace()`` and ``RAWCUDA_TRACE=1``: every driver call printed
    procaddress.py  cuGetProcAddress: entry points by CUDA version instead of by symbol
    intranges.py    every integer argument checked against its C type's range (ctypes would mask it)
    process.py      initialized? forked? -- the two facts about this process the others need

Layer 1 imports layer 0 (:mod:`rawcuda.ffi`) and nothing above it. ``from rawcuda.checked import cu`` is
the usual way in. The names below are imported on first use (PEP 562), like rawcuda's own: so that
``import rawcuda`` -- which needs only the exception classes -- does not build the tables.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the file of this package that defines it.
_PUBLIC: dict[str, str] = {
    **dict.fromkeys(
        [
            "VERSION_MAJOR",
            "VERSION_MINOR",
            "HotSlot",
            "Namespace",
            "cu",
            "decode_version",
            "driver_version",
            "hot_slot",
            "init",
            "nv",
            "nvrtc_error_string",
            "raise_for",
            "unchecked",
        ],
        "binding",
    ),
    **dict.fromkeys(["error_observers", "format_arguments", "format_value", "make_error", "quiet"], "describe"),
    **dict.fromkeys(["initialized"], "process"),
    **dict.fromkeys(["set_tracer", "tracer"], "tracing"),
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rawcuda.checked' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = sorted(_PUBLIC)
