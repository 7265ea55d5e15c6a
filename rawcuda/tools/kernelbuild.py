"""Tool: compile ``kernels/*.cu`` to PTX with nvcc: the seed article's ``build.rs``, done in Python.

In the seed article, Cargo runs ``build.rs`` before compiling the crate; it calls ``nvcc --ptx`` on the
kernels and the Rust code embeds the PTX. Python has no build step, so this module is called instead
by ``python build.py`` (its command line), by the tests, and by anything that wants to build on demand.

Why PTX, and not a cubin (machine code)?
    A cubin runs only within the major architecture it was compiled for, on the same or a later minor
    revision: an ``sm_80`` cubin runs on sm_86 and sm_89 GPUs, but not on an ``sm_90`` H200. PTX is the
    GPU's portable assembly: the driver's JIT compiles it, when the module is loaded, for whatever GPU is
    there -- including GPUs newer than the compiler.

Which architecture, and the other nvcc options: :mod:`rawcuda.tools.nvcc`.

Why hash ``nvcc --version`` into the cache key?
    Two nvcc releases produce different PTX from the same source -- and a newer one writes a newer PTX
    ISA ``.version``, which an older driver refuses (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222). Caching
    on the source alone would keep PTX from the wrong compiler. The key is a SHA-256 of the source
    bytes, the local headers it includes, the flags and the full ``nvcc --version`` text, so exactly the
    kernels whose inputs changed are rebuilt. Content, not modification times: ``git checkout`` and CI
    caches scramble mtimes, and a timestamp says nothing about the compiler.

PTX is written atomically (temporary file, then rename): an interrupted build never leaves a half-written
PTX for the driver to choke on. It is also reproducible: the same inputs give the same bytes in any
checkout, because no absolute path reaches it (how, and what that costs: :mod:`rawcuda.tools.reproducible`).

The manifest (``manifest.json`` beside the PTX) records, per kernel source -- with the options that
source was built with, which are the build's plus any its own ``// rawcuda-build:`` line asks for::

    "vector_add": {"source": "vector_add.cu", "ptx": "vector_add.ptx", "cache_key": "<sha256>",
                   "options": {"arch": "compute_80", "fast_math": false, "lineinfo": true},
                   "flags": [...], "nvcc_release": "13.0, V13.0.88", "ptx_version": "9.0",
                   "target": "sm_80", "address_size": 64,
                   "entries": {"vector_add": {"params": [{"name": ..., "type": "u64", "size": 8, ...}],
                                              "directives": {}}}}
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rawcuda.core import ptx

from ..kernels import KERNEL_DIR, MANIFEST_NAME, PTX_SUFFIX
from . import reproducible
from .nvcc import (
    BuildOptions,
    Compiler,
    KernelBuildError,
    check_options,
    compile_kernel,
    indent,
    probe,
    source_options,
    temporary_beside,
)

SOURCE_SUFFIX = ".cu"
MANIFEST_FORMAT = 1
# Bump to invalidate every cache key after a change in here. 2: the PTX records no absolute paths
# (rawcuda.tools.reproducible), so PTX built before that is stale even where its inputs are not.
CACHE_KEY_SALT = b"rawcuda-kernelbuild-2"

#: The kernel sources of a source checkout (an installed package has none: it ships the PTX).
SOURCE_DIR: Path = Path(__file__).resolve().parents[2] / "kernels"  # rawcuda/tools/ -> the checkout

_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)

Log = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------------
# Sources and cache keys


def kernel_sources(src_dir: Path) -> list[Path]:
    """Every ``*.cu`` directly in ``src_dir``, sorted by name."""
    if not src_dir.is_dir():
        raise KernelBuildError(
            f"no kernel source directory {src_dir} (an installed package has no sources; build from a checkout)"
        )
    sources = sorted(src_dir.glob("*" + SOURCE_SUFFIX))
    if not sources:
        raise KernelBuildError(f"no *{SOURCE_SUFFIX} files in {src_dir}")
    return sources


def local_includes(source: Path, src_dir: Path) -> list[Path]:
    """The headers ``source`` includes with ``#include "..."``, transitively, found beside the including file.

    Inside ``src_dir`` or not: ``#include "../shared/x.cuh"`` decides the PTX as much as a header next to the
    source, and one left out of the key left the PTX stale after an edit. ``<...>`` includes are system and
    toolkit headers; they change with the toolkit, which the nvcc version in the cache key already covers.
    """
    found: dict[Path, None] = {}
    pending = [source.resolve()]
    while pending:
        current = pending.pop()
        for name in _LOCAL_INCLUDE.findall(current.read_text(encoding="utf-8", errors="replace")):
            header = (current.parent / name).resolve()
            if header.is_file() and header not in found:
                found[header] = None
                pending.append(header)
    return sorted(found)


def cache_key(source: Path, src_dir: Path, options: BuildOptions, compiler: Compiler) -> str:
    """SHA-256 of everything that decides the PTX: source, local headers, flags, ``nvcc --version``."""
    digest = hashlib.sha256()

    def feed(label: str, data: bytes) -> None:
        # Length-prefixed, so that no two different inputs can concatenate to the same bytes.
        digest.update(label.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    feed("salt", CACHE_KEY_SALT)
    feed("source", source.read_bytes())
    root = src_dir.resolve()
    for header in local_includes(source, src_dir):
        # Named relative to the kernel folder ("../shared/x.cuh" too), so any checkout gets the same key.
        feed("include " + Path(os.path.relpath(header, root)).as_posix(), header.read_bytes())
    feed("flags", "\0".join(options.flags()).encode())
    feed("nvcc", compiler.version.encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Planning: what is stale


UP_TO_DATE = "up to date"


@dataclass(frozen=True)
class KernelPlan:
    """One kernel source, its options (the build's plus its own: nvcc.source_options) and whether it must be
    compiled (``reason`` says why, or ``"up to date"``)."""

    stem: str
    source: Path
    ptx: Path
    key: str
    reason: str
    options: BuildOptions

    @property
    def stale(self) -> bool:
        return self.reason != UP_TO_DATE


def plan(
    src_dir: Path,
    out_dir: Path,
    options: BuildOptions,
    compiler: Compiler,
    *,
    force: bool = False,
    manifest: Mapping[str, Any] | None = None,
) -> list[KernelPlan]:
    """Decide, for every kernel source, whether it needs compiling. Compiles nothing."""
    known = (read_manifest(out_dir) if manifest is None else manifest).get("kernels", {})
    plans = []
    for source in kernel_sources(src_dir):
        stem, own = source.stem, source_options(source, options)
        key = cache_key(source, src_dir, own, compiler)
        out = out_dir / (stem + PTX_SUFFIX)
        plans.append(KernelPlan(stem, source, out, key, _why_stale(known.get(stem), key, out, force), own))
    return plans


def _why_stale(recorded: Mapping[str, Any] | None, key: str, out: Path, force: bool) -> str:
    if force:
        return "forced (--force)"
    if recorded is None:
        return "new (not in the manifest)"
    if not out.is_file():
        return f"{out.name} is missing"
    if recorded.get("cache_key") != key:
        return "changed (source, an included header, the flags or nvcc)"
    return UP_TO_DATE


# ---------------------------------------------------------------------------------------------------------
# The manifest


def read_manifest(out_dir: Path) -> dict[str, Any]:
    """The manifest in ``out_dir``, or an empty one if there is none yet."""
    path = out_dir / MANIFEST_NAME
    if not path.is_file():
        return {"format": MANIFEST_FORMAT, "kernels": {}}
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise KernelBuildError(f"{path} is not valid JSON ({exc}); delete it and rebuild with --force") from exc
    if data.get("format") != MANIFEST_FORMAT:
        return {"format": MANIFEST_FORMAT, "kernels": {}}  # an older layout: rebuild everything
    return data


def kernel_record(p: KernelPlan, compiler: Compiler, info: ptx.PtxInfo) -> dict[str, Any]:
    """The manifest's record of one built kernel source (with its own options: see KernelPlan)."""
    return {
        "source": p.source.name,
        "ptx": p.ptx.name,
        "cache_key": p.key,
        "options": p.options.to_json(),
        "flags": p.options.flags(),
        "nvcc_release": compiler.release,
        "ptx_version": info.version_text,
        "target": info.target,
        "address_size": info.address_size,
        "entries": {name: entry_record(entry) for name, entry in info.entries.items()},
    }


def entry_record(entry: ptx.Entry) -> dict[str, Any]:
    """One kernel's parameters (as :mod:`rawcuda.core.ptx` parses them) and performance directives."""
    return {
        "params": [dataclasses.asdict(param) for param in entry.params],
        "directives": {key: list(values) for key, values in entry.directives},
    }


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a rename within one
    directory is atomic, so a reader sees the old file or the new one, never half of it."""
    tmp = temporary_beside(path)
    try:
        with tmp.open("xb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_manifest(out_dir: Path, manifest: Mapping[str, Any]) -> bool:
    """Write the manifest if its content changed; True when it did."""
    path = out_dir / MANIFEST_NAME
    data = (json.dumps(manifest, indent=2) + "\n").encode()
    if path.is_file() and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


# ---------------------------------------------------------------------------------------------------------
# Building


@dataclass
class BuildResult:
    """What a build did: which stems were compiled, which were up to date, which stale PTX was removed."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    warnings: dict[str, str] = field(default_factory=dict)
    manifest: Path | None = None


def build(
    src_dir: Path | None = None,
    out_dir: Path | None = None,
    options: BuildOptions | None = None,
    *,
    force: bool = False,
    nvcc: str | None = None,
    jobs: int | None = None,
    log: Log | None = None,
) -> BuildResult:
    """Compile every stale ``src_dir/*.cu`` to ``out_dir/<stem>.ptx`` and update the manifest.

    Options nvcc refuses (an unknown ``arch``) are found first, by one small compile
    (:func:`~rawcuda.tools.nvcc.check_options`), and fail before anything is written. Kernels that fail
    to compile keep their previous PTX and manifest record; after every other kernel is built and
    recorded, one :class:`KernelBuildError` reports all the failures.
    """
    src_dir = Path(src_dir or SOURCE_DIR)
    out_dir = Path(out_dir or KERNEL_DIR)
    options = options or BuildOptions()
    say = log or (lambda _message: None)
    compiler = probe(nvcc)
    manifest = read_manifest(out_dir)
    plans = plan(src_dir, out_dir, options, compiler, force=force, manifest=manifest)
    stale = [p for p in plans if p.stale]
    pairs: list[tuple[str, str]] = []
    if stale:
        # Before out_dir exists: options nvcc refuses leave nothing behind.
        probe_flags = reproducible.source_path_flags(f"{src_dir.name}/probe{SOURCE_SUFFIX}")
        for own in dict.fromkeys(p.options for p in stale):
            check_options(compiler, own, probe_flags)
        pairs = reproducible.relocations(src_dir, reproducible.toolkit_include_dirs(compiler))
    out_dir.mkdir(parents=True, exist_ok=True)

    result = BuildResult()
    kernels: dict[str, Any] = manifest.setdefault("kernels", {})
    result.removed = _prune(kernels, {p.stem for p in plans}, out_dir, say)
    for p in plans:
        if not p.stale:
            result.cached.append(p.stem)
            say(f"up to date  {p.source.name}")
    failures = _compile_all(stale, _Setup(src_dir, compiler, pairs), kernels, result, jobs, say)

    write_manifest(
        out_dir,
        {
            "format": MANIFEST_FORMAT,
            "generator": "rawcuda.kernelbuild (python build.py)",
            "nvcc_version": compiler.version,
            "kernels": dict(sorted(kernels.items())),
        },
    )
    result.manifest = out_dir / MANIFEST_NAME
    if failures:
        raise _combine(failures)
    return result


@dataclass(frozen=True)
class _Setup:
    """What every compile of one build shares (the options are each source's own: KernelPlan.options)."""

    src_dir: Path
    compiler: Compiler
    relocations: list[tuple[str, str]]


def _compile_all(
    stale: list[KernelPlan],
    setup: _Setup,
    kernels: dict[str, Any],
    result: BuildResult,
    jobs: int | None,
    say: Log,
) -> list[KernelBuildError]:
    """Compile the stale kernels in parallel (nvcc is a separate process per file)."""
    workers = max(1, min(len(stale), jobs or os.cpu_count() or 1))
    failures: list[KernelBuildError] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(p, pool.submit(_build_one, p, setup)) for p in stale]
        for p, future in futures:
            try:
                record, warnings, seconds = future.result()
            except KernelBuildError as exc:
                failures.append(exc)
                say(f"FAILED      {p.source.name}")
                continue
            kernels[p.stem] = record
            result.built.append(p.stem)
            say(f"compiled    {p.source.name} -> {p.ptx.name} ({seconds:.1f} s; {p.reason})")
            if warnings:
                result.warnings[p.stem] = warnings
                say(indent(warnings))
    return failures


def _build_one(p: KernelPlan, setup: _Setup) -> tuple[dict[str, Any], str, float]:
    start = time.perf_counter()
    warnings = compile_kernel(
        setup.compiler,
        p.source,
        p.ptx,
        p.options,
        extra_flags=reproducible.source_path_flags(reproducible.recorded_name(p.source, setup.src_dir)),
        transform=lambda text: reproducible.relocate_files(text, setup.relocations),
    )
    try:
        info = ptx.parse_file(p.ptx)
    except ptx.PtxParseError as exc:
        raise KernelBuildError(
            f"nvcc wrote PTX for {p.source} that rawcuda.core.ptx cannot parse: {exc}", source=p.source
        ) from exc
    return kernel_record(p, setup.compiler, info), warnings, time.perf_counter() - start


def _prune(kernels: dict[str, Any], stems: set[str], out_dir: Path, say: Log) -> list[str]:
    """Forget kernels whose source is gone, and delete the PTX this build once wrote for them."""
    removed = []
    for stem in sorted(set(kernels) - stems):
        record = kernels.pop(stem)
        (out_dir / Path(str(record.get("ptx", stem + PTX_SUFFIX))).name).unlink(missing_ok=True)
        removed.append(stem)
        say(f"removed     {stem}{PTX_SUFFIX} (no {stem}{SOURCE_SUFFIX} any more)")
    return removed


def _combine(failures: list[KernelBuildError]) -> KernelBuildError:
    if len(failures) == 1:
        return failures[0]
    message = f"{len(failures)} kernels failed to compile:\n\n" + "\n\n".join(str(f) for f in failures)
    first = failures[0]
    return KernelBuildError(message, source=first.source, command=first.command, output=first.output)
