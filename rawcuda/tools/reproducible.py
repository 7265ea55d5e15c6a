"""Tool: PTX that does not depend on where the checkout (or the toolkit) lives.

The same ``kernels/*.cu``, the same nvcc and the same flags must give the same PTX bytes in every checkout:
then ``build.py --force`` in a fresh clone changes nothing, a diff of the committed PTX shows only real
changes, and the wheel carries no path of the machine that built it. Two things nvcc writes into PTX built
with ``-lineinfo`` depend on paths (both found by building one kernel in two folders and diffing):

``.file`` directives -- the line table's file names.
    cicc (nvcc's device front end) records each source and header by absolute path: a relative input name
    is joined to the working directory, so ``cd kernels && nvcc saxpy.cu`` records
    ``/home/you/rawcuda/kernels/saxpy.cu`` just the same. nvcc 13 has no ``-ffile-prefix-map`` (its
    ``--help`` lists only the Windows ``--drive-prefix`` options), so :func:`relocate_files` rewrites the
    directives after compiling: a kernel source becomes ``kernels/saxpy.cu`` (relative to the checkout
    root) and a toolkit header the name it is included by, ``crt/math_functions.hpp`` (relative to the
    include directory nvcc itself passes, as ``nvcc --dryrun`` shows).

    The trade-off: tools that show source -- Nsight Compute's source view, compute-sanitizer's
    ``file:line`` in an error report -- still get every line number and a readable name, but a relative
    name names no file until it is resolved against a folder. Run from the checkout root and
    ``kernels/saxpy.cu`` is the file; from elsewhere, point the tool at the checkout (and, for the toolkit's
    headers, at its ``include`` directory). An absolute path resolves with no help, on one machine only.

A hash of the source path in internal names.
    Functions with internal linkage (the toolkit's ``static`` device functions such as ``__ldg`` and
    ``min``) get names like ``_INTERNAL_716aa6c6_9_reduce_cu_...``, so that relocatable device code from
    two translation units never collides; the first hash is computed from the path nvcc hands cicc as
    ``--orig_src_path_name`` -- the absolute path of the input. With ``-lineinfo`` these names land in the
    PTX's ``.debug_str``. :func:`source_path_flags` passes the option again, through ``-Xcicc``, with the
    checkout-relative name; cicc takes the last one given. This is an option of cicc's, not a documented
    nvcc one (``nvcc --dryrun`` shows nvcc passing it): if a future nvcc refuses it, the up-front option
    check (:func:`rawcuda.tools.nvcc.check_options`) fails with nvcc's message, and if one ignored it,
    the CPU test that builds a copy of the checkout at another path and compares bytes would fail.

What else could differ, and does not: the header nvcc writes (``Compiler Build ID``, ``release 13.0``)
changes only with the compiler, which is in the cache key; the temporary file names nvcc and the build use
never reach the PTX; the manifest holds file names relative to its folder, the flags and ``nvcc --version``
(whose ``Built on`` date is the compiler's build, not this one), and no time stamps.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .nvcc import Compiler

#: cicc's option naming the source; the last one on its command line is the one it uses.
ORIG_SRC_PATH_OPTION = "--orig_src_path_name"

#: ``.file 1 "/abs/path.cu"`` -- and the optional ``, timestamp, size`` the PTX ISA allows after the name.
_FILE_DIRECTIVE = re.compile(r'^(?P<head>[ \t]*\.file[ \t]+\d+[ \t]+)"(?P<name>[^"]*)"', re.M)

#: The lines of ``nvcc --dryrun`` that list the toolkit's include directories.
_DRYRUN_INCLUDES = re.compile(r"^#\$ (?:SYSTEM_)?INCLUDES=(.*)$", re.M)


def recorded_name(source: Path, src_dir: Path) -> str:
    """The name the PTX records for ``source``: relative to the checkout root, ``kernels/saxpy.cu``."""
    root = src_dir.resolve()  # resolved first: `--src .` has no name of its own
    return (Path(root.name) / source.resolve().relative_to(root)).as_posix()


def source_path_flags(name: str) -> list[str]:
    """nvcc flags that make cicc hash ``name`` instead of the input's absolute path (see the module docs)."""
    return ["-Xcicc", ORIG_SRC_PATH_OPTION, "-Xcicc", name]


def toolkit_include_dirs(compiler: Compiler) -> list[str]:
    """The include directories nvcc adds by itself, as ``nvcc --dryrun`` prints them (empty if it cannot say).

    Asked of nvcc rather than derived from its path: ``nvcc`` on PATH may be a wrapper script elsewhere.
    """
    try:
        done = subprocess.run(
            [compiler.path, "--dryrun", "--ptx", "rawcuda_include_probe.cu"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return []
    found: list[str] = []
    for value in _DRYRUN_INCLUDES.findall(done.stdout + done.stderr):
        words = shlex.split(value)
        for i, word in enumerate(words):
            if word.startswith("-I") and len(word) > len("-I"):
                found.append(word[len("-I") :])
            elif word in ("-I", "-isystem") and i + 1 < len(words):
                found.append(words[i + 1])
    return found


def relocations(src_dir: Path, include_dirs: Sequence[str]) -> list[tuple[str, str]]:
    """(absolute folder, recorded prefix) pairs for :func:`relocate_files`, most specific folder first."""
    # Both spellings of the source folder: cicc joins a relative name to the physical working directory,
    # but records an absolute one as given, symbolic links and all.
    prefix = src_dir.resolve().name + "/"
    pairs = {os.path.normpath(os.path.abspath(src_dir)): prefix, str(src_dir.resolve()): prefix}
    for directory in include_dirs:
        pairs.setdefault(os.path.normpath(directory), "")
    return sorted(pairs.items(), key=lambda pair: len(pair[0]), reverse=True)


def relocate_files(ptx_text: str, pairs: Sequence[tuple[str, str]]) -> str:
    """``ptx_text`` with every ``.file`` name under one of ``pairs``' folders made relative to it.

    Names under no folder are left as they are (a test asserts the committed PTX has none).
    """

    def rewrite(match: re.Match[str]) -> str:
        name = match.group("name")
        normal = os.path.normpath(name)
        for folder, prefix in pairs:
            if normal.startswith(folder + os.sep):
                name = prefix + Path(os.path.relpath(normal, folder)).as_posix()
                break
        return f'{match.group("head")}"{name}"'

    return _FILE_DIRECTIVE.sub(rewrite, ptx_text)


def file_names(ptx_text: str) -> list[str]:
    """Every name a ``.file`` directive records, in order."""
    return [m.group("name") for m in _FILE_DIRECTIVE.finditer(ptx_text)]


__all__ = [
    "ORIG_SRC_PATH_OPTION",
    "file_names",
    "recorded_name",
    "relocate_files",
    "relocations",
    "source_path_flags",
    "toolkit_include_dirs",
]
