#!/usr/bin/env python3
"""Compile kernels/*.cu to PTX in rawcuda/kernels/ -- only what changed -- and write the manifest.

    python build.py                    # build what is stale (content hash of source + flags + nvcc)
    python build.py --force            # rebuild everything
    python build.py --list             # what the manifest says: kernels, entries, parameters, PTX ISA
    python build.py --check            # CI: exit 1 if the committed PTX is out of date

This file is the command line; the logic is in rawcuda/tools/kernelbuild.py (with the essay on why PTX and
why the nvcc version is part of the cache key) and rawcuda/tools/nvcc.py (finding nvcc; why a virtual
architecture, and the other options), so the demo and the tests can build on demand without it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rawcuda.kernels import load_manifest
from rawcuda.tools import cli
from rawcuda.tools.kernelbuild import KERNEL_DIR, SOURCE_DIR, build, plan
from rawcuda.tools.nvcc import (
    CUDA_HOME_ENV,
    DEFAULT_ARCH,
    DEFAULT_CUDA_NVCC,
    NVCC_ENV,
    BuildOptions,
    KernelBuildError,
    probe,
)

# ---------------------------------------------------------------------------------------------------------
# Listing


def describe_param(param: Mapping[str, Any]) -> str:
    """A manifest parameter as PTX-like text without its name: ``.u64``, ``.align 8 .b8[16]``."""
    if param.get("count") is not None:
        return f".align {param['align']} .{param['type']}[{param['count']}]"
    text = "." + param["type"]
    if param.get("pointer"):
        text += " .ptr" + (" " + param["state_space"] if param.get("state_space") else "")
    return text


def format_listing(manifest: Mapping[str, Any]) -> str:
    """Each kernel source with its PTX ISA version, target, flags and entries (for ``build.py --list``)."""
    lines = []
    for stem, record in manifest.get("kernels", {}).items():
        lines.append(
            f"{stem}: {record['source']} -> {record['ptx']}  (PTX ISA {record['ptx_version']}, "
            f".target {record['target']}, {' '.join(record['flags'][1:])}, nvcc {record['nvcc_release']})"
        )
        for name, entry in record["entries"].items():
            params = ", ".join(describe_param(p) for p in entry["params"])
            directives = "".join(f"  .{k} {','.join(map(str, v))}" for k, v in entry["directives"].items())
            lines.append(f"    {name}({params}){directives}")
    return "\n".join(lines) if lines else "(no kernels in the manifest)"


# ---------------------------------------------------------------------------------------------------------
# Command line (python build.py ...)


def positive_int(text: str) -> int:
    """argparse's ``type`` for ``-j``: 0 or -3 parallel compilers is a typo, not a request for a default."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), not {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="build.py",
        description="Compile kernels/*.cu to PTX with nvcc (only what changed) and write the manifest.",
        epilog=f"{NVCC_ENV} overrides the compiler (default: nvcc on PATH, then ${CUDA_HOME_ENV}/bin/nvcc, "
        f"then {DEFAULT_CUDA_NVCC}).",
    )
    parser.add_argument(
        "--arch",
        default=DEFAULT_ARCH,
        help=f"virtual architecture for the PTX (default {DEFAULT_ARCH}: sm_80 and newer)",
    )
    parser.add_argument(
        "--fast-math", action="store_true", help="pass --use_fast_math for every kernel (changes numerics)"
    )
    parser.add_argument("--no-lineinfo", action="store_true", help="omit -lineinfo (source lines for profilers)")
    parser.add_argument("--force", action="store_true", help="rebuild every kernel, even if up to date")
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the kernels, entries and parameters recorded in the manifest; build nothing",
    )
    parser.add_argument(
        "--check", action="store_true", help="compile nothing; exit 1 if any PTX is out of date with its source"
    )
    parser.add_argument("--out", type=Path, default=KERNEL_DIR, help=f"PTX output directory (default {KERNEL_DIR})")
    parser.add_argument("--src", type=Path, default=SOURCE_DIR, help=f"kernel sources (default {SOURCE_DIR})")
    parser.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel nvcc processes, 1 or more (default: CPUs)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``build.py`` command line; returns the exit status (errors are printed, never a traceback)."""
    args = parse_args(argv)
    options = BuildOptions(arch=args.arch, fast_math=args.fast_math, lineinfo=not args.no_lineinfo)
    try:
        if args.list:
            print(format_listing(load_manifest(args.out)))
            return 0
        if args.check:
            return _check(args.src, args.out, options)
        result = build(args.src, args.out, options, force=args.force, jobs=args.jobs, log=None if args.quiet else print)
    except (KernelBuildError, FileNotFoundError) as exc:
        print(f"build.py: error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{len(result.built)} compiled, {len(result.cached)} up to date -> {result.manifest}")
    return 0


def _check(src_dir: Path, out_dir: Path, options: BuildOptions) -> int:
    stale = [p for p in plan(src_dir, out_dir, options, probe()) if p.stale]
    for p in stale:
        print(f"out of date: {p.source.name}: {p.reason}")
    if stale:
        print("run `python build.py` and commit the PTX and manifest", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    cli.run(main)  # Ctrl-C and a closed pipe end it in one line (rawcuda/tools/cli.py)
