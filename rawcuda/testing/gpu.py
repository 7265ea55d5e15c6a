"""Testing: can this machine run GPU tests? -- and if not, why not, in one line.

The answer is what a skipped test shows (``pytest -rs``): the first line of the error rawcuda itself raised
on the way to a GPU -- no driver library, the toolkit's stub instead of the driver, no device -- so the skip
reason is the diagnosis. Asking loads libcuda and calls cuInit, once per process (the answer is cached);
importing this file does neither.
"""

from __future__ import annotations

import functools

import rawcuda


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when the driver loads and sees at least one GPU; otherwise why not, in one line."""
    try:
        count = rawcuda.Device.count()  # cuInit, then cuDeviceGetCount
    except Exception as exc:  # any failure on the way to a GPU is the reason, shown as rawcuda worded it
        lines = str(exc).splitlines()
        return f"no usable GPU: {type(exc).__name__}: {lines[0] if lines else '(no message)'}"
    if count < 1:
        return "the NVIDIA driver loaded but reports no GPU"
    return None


__all__ = ["gpu_unavailable_reason"]
