"""Package data: the kernels rawcuda ships, as PTX -- compiled from ``kernels/*.cu`` by ``python build.py``.

This directory is package data. It holds one ``<stem>.ptx`` per kernel source ``kernels/<stem>.cu``
and ``manifest.json``, which says for each: the cache key it was built with, the PTX ISA version, the
target architecture, and every kernel (``.entry``) with its parameter list.

Why commit generated PTX? So that ``pip install rawcuda`` on a GPU host -- or a cluster node with a
driver but no CUDA toolkit -- can load the kernels without nvcc: the driver compiles PTX to the GPU's
machine code itself (JIT). The sources stay the truth: a CPU test rebuilds them and checks that the
committed PTX is up to date.

    >>> from rawcuda import kernels
    >>> kernels.ptx_path("vector_add").name
    'vector_add.ptx'
    >>> kernels.load_manifest()["kernels"]["vector_add"]["target"]
    'sm_80'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Where the built PTX and the manifest live (inside the installed package).
KERNEL_DIR: Path = Path(__file__).resolve().parent
MANIFEST_NAME = "manifest.json"
PTX_SUFFIX = ".ptx"

_HOW_TO_BUILD = "run `python build.py` in the rawcuda source tree (needs nvcc) to compile kernels/*.cu"


def ptx_path(stem: str) -> Path:
    """The PTX file built from ``kernels/<stem>.cu``; FileNotFoundError says how to build it if missing."""
    if not stem or Path(stem).name != stem or stem.endswith((PTX_SUFFIX, ".cu")):
        raise ValueError(f"expected a kernel source stem like 'vector_add', not {stem!r}")
    path = KERNEL_DIR / (stem + PTX_SUFFIX)
    if not path.is_file():
        known = ", ".join(available()) or "none"
        raise FileNotFoundError(
            f"no PTX for kernel {stem!r}: {path} does not exist in {KERNEL_DIR} (built kernels: {known}); "
            f"{_HOW_TO_BUILD}"
        )
    return path


def available() -> list[str]:
    """The stems of every PTX file present, sorted."""
    return sorted(p.stem for p in KERNEL_DIR.glob("*" + PTX_SUFFIX))


def load_manifest(directory: Path | None = None) -> dict[str, Any]:
    """The build manifest (see :mod:`rawcuda.tools.kernelbuild` for its layout)."""
    path = (directory or KERNEL_DIR) / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"no kernel manifest: {path} does not exist; {_HOW_TO_BUILD}") from None
    data: dict[str, Any] = json.loads(text)
    return data
