"""Tool: nvcc -- finding it, asking its version, the options that decide the PTX, compiling one kernel.

Used by :mod:`rawcuda.tools.kernelbuild` (which decides *what* to compile and caches the results) and by
``python -m rawcuda doctor``. What each option is for:

* ``-arch=compute_80`` (the default), a *virtual* architecture: ``compute_XY`` names a PTX feature
  level, not a chip. The PTX says ``.target sm_80``: "runs on sm_80 and everything newer" (A100, L40,
  H100/H200 via JIT). Raising it unlocks newer instructions and drops older GPUs; the default is the
  oldest architecture with the features the kernels use.
* ``-lineinfo`` (default): line tables for Nsight Compute and compute-sanitizer to map instructions back
  to source lines. It does not change the generated code. ``--no-lineinfo`` drops it.
* ``--use_fast_math`` is opt-in: it flushes denormals to zero and swaps ``sinf``, ``expf``, ``tanhf``,
  division and square roots for approximations meant to be faster, which changes results -- a decision,
  not a default. The seed passes it for "speed at a little precision". Both halves are measured -- speed
  and error, of a compute-bound and a memory-bound kernel, each built both ways (kernels/transcendentals.cu
  and transcendentals_fast.cu; bench/progressions.py, tutorials/03d_fast_math.py).
* One source may turn an option on for itself alone, on a line of its own: ``// rawcuda-build: fast_math``
  (:func:`source_options`). That is how one kernel is built both ways: a second source that
  includes the first and asks for the flag. The manifest records each source's own options.
  ``// rawcuda-build: arch=compute_90`` names the oldest architecture a source needs (clusters, the
  programmatic launch): the build's arch is raised to it for that source, never lowered, so a build for a
  newer GPU stays one. The rest of the kernels keep the default and still run on an A100.
* ``NVCC_PATH`` chooses the compiler. If it is set, it is the only one tried: silently using another nvcc
  would hide the mistake you are debugging.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checked.errors import RawCudaError

NVCC_ENV = "NVCC_PATH"
CUDA_HOME_ENV = "CUDA_HOME"
DEFAULT_CUDA_NVCC = "/usr/local/cuda/bin/nvcc"
DEFAULT_ARCH = "compute_80"

_RELEASE = re.compile(r"release\s+([^\n]+)")
_SOURCE_DIRECTIVE = re.compile(r"^//[ \t]*rawcuda-build:(.*)$", re.M)  # a whole line, from its first column
#: The words a ``// rawcuda-build:`` line may say: each turns on the BuildOptions field of that name.
SOURCE_OPTION_WORDS = ("fast_math",)
#: ``arch=compute_XY`` on such a line: the oldest virtual architecture the source needs.
SOURCE_ARCH_WORD = "arch="
_VIRTUAL_ARCH = re.compile(r"^compute_(\d+)([af]?)$")


class KernelBuildError(RawCudaError):
    """nvcc is missing or failed. The message has nvcc's own output, the ``.cu`` file and the command."""

    def __init__(
        self, message: str, *, source: Path | None = None, command: Sequence[str] = (), output: str = ""
    ) -> None:
        self.source = source
        self.command = list(command)
        self.output = output
        super().__init__(message)


@dataclass(frozen=True)
class BuildOptions:
    """What changes the generated PTX, apart from the source and the compiler."""

    arch: str = DEFAULT_ARCH
    fast_math: bool = False
    lineinfo: bool = True

    def flags(self) -> list[str]:
        """nvcc's flags for these options (without ``-o`` and the input file)."""
        flags = ["--ptx", f"-arch={self.arch}"]
        if self.lineinfo:
            flags.append("-lineinfo")
        if self.fast_math:
            flags.append("--use_fast_math")
        return flags

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildOptions:
        return cls(arch=str(data["arch"]), fast_math=bool(data["fast_math"]), lineinfo=bool(data["lineinfo"]))


def source_options(source: Path, options: BuildOptions) -> BuildOptions:
    """``options`` plus what ``source`` asks for itself on ``// rawcuda-build: WORD ...`` lines.

    Only the source's own lines count, not those of the files it includes: including a kernel must not
    change how the includer is built behind its back. A word that is not in SOURCE_OPTION_WORDS (or an
    ``arch=compute_XY``) is a KernelBuildError naming the file and the words there are, not a flag silently
    ignored.
    """
    text = source.read_text(encoding="utf-8", errors="replace")
    words = [word for line in _SOURCE_DIRECTIVE.findall(text) for word in line.replace(",", " ").split()]
    arches = [word[len(SOURCE_ARCH_WORD) :] for word in words if word.startswith(SOURCE_ARCH_WORD)]
    words = [word for word in words if not word.startswith(SOURCE_ARCH_WORD)]
    unknown = sorted(set(words) - set(SOURCE_OPTION_WORDS))
    if unknown:
        raise KernelBuildError(
            f"{source}: `// rawcuda-build:` asks for {', '.join(unknown)}, which is not a build option a source "
            f"can set; it can say: {', '.join(SOURCE_OPTION_WORDS)}, {SOURCE_ARCH_WORD}compute_XY",
            source=source,
        )
    if len(arches) > 1:
        what = f"{source}: `// rawcuda-build:` names {len(arches)} architectures; give one"
        raise KernelBuildError(what, source=source)
    if arches:
        options = dataclasses.replace(options, arch=newer_arch(source, options.arch, arches[0]))
    return dataclasses.replace(options, **dict.fromkeys(words, True)) if words else options


def newer_arch(source: Path, build: str, needed: str) -> str:
    """The build's arch raised to the one ``source`` needs; ``compute_90a`` (Hopper-only instructions) wins
    outright, since no other architecture has them."""
    asked = _VIRTUAL_ARCH.match(needed)
    if asked is None:
        raise KernelBuildError(
            f"{source}: `// rawcuda-build: {SOURCE_ARCH_WORD}{needed}` is not a virtual architecture; write "
            f"{SOURCE_ARCH_WORD}compute_XY (compute_90 for clusters), as nvcc --list-gpu-arch names them",
            source=source,
        )
    have = _VIRTUAL_ARCH.match(build)
    if asked.group(2) or have is None or int(have.group(1)) < int(asked.group(1)):
        return needed
    return build


@dataclass(frozen=True)
class Compiler:
    """An nvcc: its path and its full ``nvcc --version`` text (part of every cache key)."""

    path: str
    version: str

    @property
    def release(self) -> str:
        """The short version, e.g. ``"13.0, V13.0.88"`` (the whole text if it has no release line)."""
        m = _RELEASE.search(self.version)
        return m.group(1).strip() if m else self.version.strip()


def nvcc_candidates(env: Mapping[str, str] | None = None) -> list[str]:
    """Where nvcc is looked for, in order: $NVCC_PATH alone if set; else PATH, $CUDA_HOME/bin, /usr/local/cuda."""
    env = os.environ if env is None else env
    chosen = env.get(NVCC_ENV)
    if chosen:
        return [chosen]
    found = [shutil.which("nvcc", path=env.get("PATH")) or "nvcc (on PATH)"]
    if env.get(CUDA_HOME_ENV):
        found.append(str(Path(env[CUDA_HOME_ENV]) / "bin" / "nvcc"))
    found.append(DEFAULT_CUDA_NVCC)
    return found


def find_nvcc(env: Mapping[str, str] | None = None) -> str:
    """The nvcc to use; KernelBuildError listing every place tried when there is none."""
    env = os.environ if env is None else env
    tried = nvcc_candidates(env)
    for candidate in tried:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    lines = ["nvcc (the CUDA compiler) was not found; tried:", *(f"  {c}" for c in tried)]
    if env.get(NVCC_ENV):
        lines.append(f"fix: {NVCC_ENV} is set, so only that path was tried; point it at an nvcc, or unset it")
    else:
        lines.append(f"fix: install the CUDA toolkit, put its bin/ on PATH, or set {NVCC_ENV} to nvcc's path")
    lines.append("(the committed PTX in rawcuda/kernels/ works without nvcc; only rebuilding needs it)")
    raise KernelBuildError("\n".join(lines))


def probe(nvcc: str | None = None) -> Compiler:
    """Find nvcc (unless given) and ask it for ``--version``."""
    path = nvcc or find_nvcc()
    command = [path, "--version"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise KernelBuildError(f"could not run {shlex.join(command)}: {exc}", command=command) from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise KernelBuildError(
            f"{shlex.join(command)} failed with exit status {done.returncode}:\n{output}",
            command=command,
            output=output,
        )
    return Compiler(path=path, version=done.stdout.strip())


# --- compiling one kernel ---------------------------------------------------------------------------------
def compile_kernel(
    compiler: Compiler,
    source: Path,
    out: Path,
    options: BuildOptions,
    *,
    extra_flags: Sequence[str] = (),
    transform: Callable[[str], str] | None = None,
) -> str:
    """Run nvcc on one source and atomically replace ``out``; returns nvcc's warnings (often empty).

    ``extra_flags`` go after the options' flags; ``transform`` rewrites the PTX text before it replaces
    ``out`` (:mod:`rawcuda.tools.reproducible` uses both to keep paths out of the PTX).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(out)  # nvcc creates it (so the umask applies); renamed over `out` on success
    command = [compiler.path, *options.flags(), *extra_flags, "-o", str(tmp), str(source)]
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise KernelBuildError(
                f"could not run nvcc for {source}: {exc}\ncommand: {shlex.join(command)}",
                source=source,
                command=command,
            ) from exc
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise KernelBuildError(
                f"nvcc failed to compile {source} (exit status {done.returncode})\n"
                f"command: {shlex.join(command)}\n"
                f"nvcc output:\n{indent(output or '(nothing)')}",
                source=source,
                command=command,
                output=output,
            )
        if transform is not None:
            tmp.write_text(transform(tmp.read_text(encoding="utf-8")), encoding="utf-8")
        os.replace(tmp, out)
        return output
    finally:
        tmp.unlink(missing_ok=True)


#: What :func:`check_options` compiles: the smallest source for which nvcc writes PTX.
_PROBE_SOURCE = 'extern "C" __global__ void rawcuda_probe() {}\n'


def check_options(compiler: Compiler, options: BuildOptions, extra_flags: Sequence[str] = ()) -> None:
    """Compile a one-line kernel with ``options`` in a temporary folder; KernelBuildError if nvcc refuses.

    Why first: an option nvcc does not know (``--arch sm_99x``) fails every kernel the same way, and seven
    copies of ``Unsupported gpu architecture`` bury the one fact that matters. Asked once, up front, the
    answer is one message -- with the architectures this nvcc knows -- and nothing is written anywhere.
    """
    with tempfile.TemporaryDirectory(prefix="rawcuda-nvcc-") as tmp:
        source, out = Path(tmp) / "probe.cu", Path(tmp) / "probe.ptx"
        source.write_text(_PROBE_SOURCE)
        command = [compiler.path, *options.flags(), *extra_flags, "-o", str(out), str(source)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise KernelBuildError(f"could not run {shlex.join(command)}: {exc}", command=command) from exc
    if done.returncode == 0:
        return
    output = (done.stdout + done.stderr).strip()
    lines = [
        f"nvcc ({compiler.release}) refuses these options, so no kernel was compiled: "
        f"{' '.join([*options.flags(), *extra_flags])}",
        f"nvcc output:\n{indent(output or '(nothing)')}",
    ]
    known = known_architectures(compiler)
    if known:
        lines.append(
            f"virtual architectures this nvcc knows (nvcc --list-gpu-arch; each one's sm_XY works too): "
            f"{' '.join(known)}"
        )
    raise KernelBuildError("\n".join(lines), command=command, output=output)


def known_architectures(compiler: Compiler) -> list[str]:
    """The virtual architectures ``nvcc --list-gpu-arch`` names (empty when it cannot say)."""
    try:
        done = subprocess.run([compiler.path, "--list-gpu-arch"], capture_output=True, text=True, check=False)
    except OSError:
        return []
    return done.stdout.split() if done.returncode == 0 else []


def indent(text: str, prefix: str = "    ") -> str:
    """Every line of ``text`` indented (nvcc's output inside an error message)."""
    return "\n".join(prefix + line for line in text.splitlines())


def temporary_beside(path: Path) -> Path:
    """A fresh hidden name in ``path``'s directory (same file system, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")


__all__ = [
    "DEFAULT_ARCH",
    "NVCC_ENV",
    "SOURCE_ARCH_WORD",
    "SOURCE_OPTION_WORDS",
    "BuildOptions",
    "Compiler",
    "KernelBuildError",
    "check_options",
    "compile_kernel",
    "find_nvcc",
    "indent",
    "known_architectures",
    "nvcc_candidates",
    "probe",
    "source_options",
    "temporary_beside",
]
