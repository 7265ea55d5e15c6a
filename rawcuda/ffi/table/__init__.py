"""Layer 0: THE declaration table -- every driver function rawcuda calls, declared by hand.

One row per function (see :class:`~rawcuda.ffi.table.decl.Decl`): the C prototype from cuda.h, the
symbol libcuda really exports, and the ctypes type of each argument. The rows are grouped by topic in
the files beside this one, in the order a program meets them::

    init     cuInit, versions, error strings, cuGetProcAddress
    device   counting devices, names, attributes, memory size
    context  primary context, created contexts, the context stack, limits
    memory   device / pinned / managed memory, copies, memsets, pointer attributes, prefetch & advise
    module   PTX / cubin / fatbin modules, functions and their attributes, the JIT linker
    launch   cuLaunchKernel and friends, host functions, occupancy
    stream   streams and events
    graph    stream capture, graphs, executable graphs
    vmm      virtual memory management (reserve / create / map / set access)

Nothing here calls the driver. :mod:`rawcuda.checked` binds the rows to libcuda, lazily, and
:mod:`rawcuda.ffi.headercheck` proves them against cuda.h.
"""

from __future__ import annotations

from . import context, device, graph, init, launch, memory, module, stream, vmm
from .decl import Decl

SECTIONS: dict[str, list[Decl]] = {
    "init": init.ENTRIES,
    "device": device.ENTRIES,
    "context": context.ENTRIES,
    "memory": memory.ENTRIES,
    "module": module.ENTRIES,
    "launch": launch.ENTRIES,
    "stream": stream.ENTRIES,
    "graph": graph.ENTRIES,
    "vmm": vmm.ENTRIES,
}


def _index(sections: dict[str, list[Decl]]) -> dict[str, Decl]:
    table: dict[str, Decl] = {}
    for entries in sections.values():
        for entry in entries:
            if entry.name in table:
                raise ValueError(f"{entry.name} is declared twice in the table")
            table[entry.name] = entry
    return table


#: Header name -> declaration. ``TABLE["cuMemAlloc"].symbol == "cuMemAlloc_v2"``.
TABLE: dict[str, Decl] = _index(SECTIONS)

__all__ = ["SECTIONS", "TABLE", "Decl"]
