#!/usr/bin/env python3
"""Compile kernels/*.cu to PTX in rawcuda/kernels/ -- only what changed -- and write the manifest.

    python build.py                    # build what is stale (content hash of source + flags + nvcc)
    python build.py --force            # rebuild everything
    python build.py --list             # what the manifest says: kernels, entries, parameters, PTX ISA
    python build.py --check            # CI: exit 1 if the committed PTX is out of date

This file is only the command line; the logic (and the essay on why PTX, why a virtual architecture,
why the nvcc version is part of the cache key) is in rawcuda/kernelbuild.py.
"""

from __future__ import annotations

import sys

from rawcuda.kernelbuild import main

if __name__ == "__main__":
    sys.exit(main())
