"""Testing: tools for testing code that uses rawcuda -- your tests, and the project's own.

What each file holds::

    compare.py  assert_device_equal(buf, expected): a device buffer against a numpy reference, with a diff
    leaks.py    LeakCheck, open_objects(): rawcuda objects left open, device memory not given back
    gpu.py      gpu_unavailable_reason(): why this machine cannot run GPU tests, in one line
    plugin.py   the pytest plugin: the ``gpu`` and ``no_leaks`` markers and the ``cuda_*`` fixtures

Where it sits: on top of core, graphs, extras and ops, beside the tools -- it uses the objects (Context, Stream,
DeviceBuffer) through their public names, and nothing in the layers imports it. pytest imports the plugin in
every session once rawcuda is installed (an entry point), so this package must cost nothing to import: it
touches no driver and imports neither numpy nor the driver tables; the names below are imported on first use
(PEP 562), as rawcuda's own are. The README shows a test of one's own kernel with all of it.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the file of this package that defines it.
_PUBLIC: dict[str, str] = {
    **dict.fromkeys(["DEFAULT_ATOL", "DEFAULT_RTOL", "array_mismatch", "assert_device_equal", "host_copy"], "compare"),
    **dict.fromkeys(["DEFAULT_MEMORY_TOLERANCE", "Leak", "LeakCheck", "LeakReport", "open_objects"], "leaks"),
    **dict.fromkeys(["gpu_unavailable_reason"], "gpu"),
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rawcuda.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_PUBLIC)


def __dir__() -> list[str]:
    return list(__all__)
