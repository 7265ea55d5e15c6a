"""Layer 0: the foreign-function interface -- declarations only, and the one loader.

``decl`` is the row type of both tables: ``cuda/`` (the driver's, by topic) and ``nvrtc`` (NVRTC's).
``types`` spells the C types in ctypes; ``constants``, ``attributes`` and ``results`` name every number
rawcuda sends or receives; ``library`` finds and opens libcuda and libnvrtc, lazily. Two libc calls live
here too, being declarations of C functions as well: ``dladdr`` (library: which file was opened) and
``write`` into a pipe (hostmap: is an address readable?). Nothing here calls a driver function, and nothing
here imports from outside ``rawcuda/ffi/``: layer 1 (:mod:`rawcuda.checked`) binds the rows, and
``python -m rawcuda.tools.headercheck`` proves them against the C headers.
"""
