"""Core: read a PTX module's header and kernel signatures -- no driver, no GPU, no CUDA toolkit needed.

PTX is the GPU's portable assembly. nvcc compiles CUDA C++ to it.
The driver's JIT compiles it to the machine code of whatever GPU it runs on.
It is plain text, and the part rawcuda needs is small: :class:`Entry` shows it.

Why does a Python package parse it? ``cuLaunchKernel`` trusts its array of argument pointers completely.
So a launch checks its arguments against the signature read here, before the driver is called.
The same signatures go into the kernel build manifest.
:func:`parse` says what the parser reads, and what it deliberately ignores.
"""
# Why: docs/hazards.md, "Kernel arguments are checked at launch time".

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from .ptxtext import (
    PtxParseError,
    as_text,
    line_of,
    parse_address_size,
    parse_targets,
    parse_version,
    strip_comments,
    without_strings,
)

#: Bytes per element of every PTX type a parameter can have. ``.pred`` is counted as one byte: PTX
#: gives it no memory size, and a one-byte slot is what a C ``bool`` would use.
TYPE_SIZES: dict[str, int] = {
    "b8": 1,
    "s8": 1,
    "u8": 1,
    "b16": 2,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "b32": 4,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "f16x2": 4,
    "bf16x2": 4,
    "tf32": 4,
    "b64": 8,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "b128": 16,
    "pred": 1,
}

#: Directives that may sit between a kernel's parameter list and its body.
PERFORMANCE_DIRECTIVES = frozenset(
    {
        "maxntid",
        "reqntid",
        "minnctapersm",
        "maxnctapersm",
        "maxnreg",
        "noreturn",
        "pragma",
        "explicitcluster",
        "reqnctapercluster",
        "maxclusterrank",
        "blocksareclusters",
        "abi_preserve",
        "abi_preserve_control",
    }
)


@dataclass(frozen=True)
class Param:
    """One kernel parameter as PTX declares it.

    ``size`` is the bytes the kernel reads for it: the size of the value a launch must pass.
    For arrays it is the element size times ``count``.
    ``align`` is the parameter's own alignment: an explicit ``.param .align N``, or else the element size.
    For a ``.ptr`` parameter, the ``.align N`` after the state space is the alignment of the memory *pointed to*.
    So it is kept apart, as ``pointee_align``.
    """

    name: str
    type: str
    size: int
    align: int
    count: int | None
    pointer: bool
    state_space: str | None
    pointee_align: int | None = None

    def describe(self) -> str:
        """PTX-like text for messages: ``.u64 .ptr .global x`` or ``.align 8 .b8 s[16]``."""
        parts = [f".align {self.align}"] if self.count is not None else []
        parts.append("." + self.type)
        if self.pointer:
            parts.append(".ptr")
            if self.state_space:
                parts.append(self.state_space)
        name = self.name if self.count is None else f"{self.name}[{self.count}]"
        return " ".join([*parts, name])


@dataclass(frozen=True)
class Entry:
    """A kernel: its name (what ``cuModuleGetFunction`` takes) and its parameters in order.

    ``directives`` holds the performance directives in source order.
    ``__launch_bounds__(256, 2)`` gives ``(("maxntid", (256, 1, 1)), ("minnctapersm", (2,)))``.
    This is all of a module the parser reads (the comments say what each line is)::

        .version 9.0                  // PTX ISA version: the driver must understand at least this one.
        .target sm_80                 // The oldest GPU architecture the code may run on.
        .address_size 64              // Pointers are 64 bits.

        .visible .entry vector_add(   // A kernel: what cuModuleGetFunction looks up by name.
            .param .u64 vector_add_param_0,              // float *c. A pointer is just a 64-bit integer.
            .param .f32 vector_add_param_1,              // float a.
            .param .align 8 .b8 vector_add_param_2[16]   // struct {double d; int i;} passed by value.
        )
        .maxntid 256, 1, 1            // From __launch_bounds__(256): launching more threads fails.
        { ... }
    """

    name: str
    params: tuple[Param, ...]
    directives: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: The body, or a device function it calls, reads the driver's grid workspace (``%envreg1``/``%envreg2``):
    #: cooperative_groups' ``this_grid().sync()`` does, and traps when the launch was not cooperative.
    grid_workspace: bool = False
    #: The body, or a device function it calls, waits for the grids it depends on (``griddepcontrol.wait``,
    #: ``cudaGridDependencySynchronize``): only then may a programmatic dependent launch start it early.
    dependency_wait: bool = False

    def directive(self, name: str) -> tuple[int, ...] | None:
        """The values of a performance directive, or None: ``"maxntid"`` gives ``(256, 1, 1)``."""
        for key, values in self.directives:
            if key == name.lstrip("."):
                return values
        return None

    @property
    def param_bytes(self) -> int:
        """Bytes of the parameter block, with every parameter at its alignment.

        The driver's limit is 4 KiB before CUDA 12.1, and 32 KiB after on Volta and newer.
        """
        offset = 0
        for p in self.params:
            offset = -(-offset // p.align) * p.align + p.size
        return offset


@dataclass(frozen=True)
class PtxInfo:
    """What a PTX module declares: ISA version, target(s), address size, and its kernels by name."""

    version: tuple[int, int]
    target: str
    targets: tuple[str, ...]
    address_size: int
    entries: dict[str, Entry]

    @property
    def version_text(self) -> str:
        """The ISA version as PTX writes it: ``"9.0"``."""
        return f"{self.version[0]}.{self.version[1]}"


# ---------------------------------------------------------------------------------------------------------
# Kernels

# The keyword, not a prefix of a longer one, and not part of an instruction like "ld.param.entry".
_ENTRY = re.compile(r"(?<![\w.$%])\.entry\b")
_IDENTIFIER = re.compile(r"[A-Za-z][\w$]*|[_$%][\w$]+")
# The two shapes a kernel parameter takes (the PTX ISA's ".param" variable declarations):
#   .param [.align N] .type name[N]...                 scalars and by-value aggregates (byte arrays)
#   .param .type .ptr [.space] [.align N] name         pointers annotated with what they point to
_PARAM = re.compile(
    r"""\s*\.param
        (?:\s+\.align\s+(?P<align>\d+))?
        \s+\.(?P<type>[a-z]\w*)
        (?:\s+(?P<ptr>\.ptr)
           (?:\s+(?P<space>\.global|\.const|\.local|\.shared))?
           (?:\s+\.align\s+(?P<pointee_align>\d+))?)?
        \s+(?P<name>[A-Za-z][\w$]*|[_$%][\w$]+)
        (?P<dims>(?:\s*\[\s*\d+\s*\])*)\s*""",
    re.X,
)
_PARAM_FORMS = "'.param .u32 x', '.param .align 8 .b8 x[16]', '.param .u64 .ptr .global .align 4 x'"
_DIRECTIVE = re.compile(r"\.([A-Za-z_]\w*)")
# cooperative_groups/details/driver_abi.h: "Interpret the address from envreg 1 and 2 as the driver's grid workspace".
_GRID_WORKSPACE = re.compile(r"%envreg[12](?!\d)")
_DEPENDENCY_WAIT = re.compile(r"\bgriddepcontrol\.wait\b")
_FUNC = re.compile(r"(?<![\w.$%])\.func\b\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$%][\w$]*)")
_NUMBERS = re.compile(r"[\s\d,]*")


def _entries(text: str) -> Iterator[Entry]:
    """Every kernel with a body, in file order."""
    masked = without_strings(text)
    funcs = _device_functions(masked)
    for m in _ENTRY.finditer(masked):
        entry = _parse_entry(text, masked, m.end(), funcs)
        if entry is not None:
            yield entry


def _device_functions(masked: str) -> dict[str, str]:
    """Each ``.func`` with a body: its body's text (a declaration ending in ``;`` has none)."""
    found: dict[str, str] = {}
    for m in _FUNC.finditer(masked):
        opening = min((i for i in (masked.find("{", m.end()), masked.find(";", m.end())) if i >= 0), default=-1)
        if opening >= 0 and masked[opening] == "{":
            found[m.group(1)] = masked[opening : _body_end(masked, opening)]
    return found


def _reaches(body: str, funcs: dict[str, str], pattern: re.Pattern[str]) -> bool:
    """Whether ``body``, or a device function it calls (directly or not), matches ``pattern``."""
    pending, seen = [body], set()
    while pending:
        text = pending.pop()
        if pattern.search(text):
            return True
        for name in _CALL.findall(text):
            if name in funcs and name not in seen:
                seen.add(name)
                pending.append(funcs[name])
    return False


def _parse_entry(text: str, masked: str, pos: int, funcs: dict[str, str]) -> Entry | None:
    """Parse one ``.entry`` from just after the keyword; None for a declaration without a body."""
    line = line_of(text, pos)
    name_match = _IDENTIFIER.match(masked, _skip_space(masked, pos))
    if name_match is None:
        raise PtxParseError(f"line {line}: .entry without a kernel name")
    name = name_match.group(0)
    pos = _skip_space(masked, name_match.end())
    params: tuple[Param, ...] = ()
    if pos < len(masked) and masked[pos] == "(":
        close = masked.find(")", pos)
        if close < 0:
            raise PtxParseError(f"line {line}: the parameter list of .entry {name} has no closing ')'")
        params = _parse_params(masked[pos + 1 : close], name, line)
        pos = close + 1
    directives, body = _parse_directives(masked, pos, name, line)
    if body is None:
        return None
    text_of_body = masked[body : _body_end(masked, body)]
    return Entry(
        name=name,
        params=params,
        directives=directives,
        grid_workspace=_reaches(text_of_body, funcs, _GRID_WORKSPACE),
        dependency_wait=_reaches(text_of_body, funcs, _DEPENDENCY_WAIT),
    )


def _body_end(masked: str, start: int) -> int:
    """Where the body that opens at ``start`` (its ``{``) closes; PTX nests ``{ }`` scopes inside it.

    An unclosed body runs to the end: the driver's JIT reports a truncated module, with its log.
    """
    depth = 0
    for m in re.finditer(r"[{}]", masked[start:]):
        depth += 1 if m.group(0) == "{" else -1
        if depth == 0:
            return start + m.end()
    return len(masked)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _parse_directives(
    masked: str, pos: int, kernel: str, line: int
) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int | None]:
    """Read the directives between ``)`` and the body. Also say where the body's ``{`` is.

    None means a ``;``: an ``.extern .entry`` declaration, whose kernel is defined in another module.
    """
    found: list[tuple[str, tuple[int, ...]]] = []
    while True:
        pos = _skip_space(masked, pos)
        if pos >= len(masked):
            raise PtxParseError(f"line {line}: .entry {kernel} has neither a body '{{ ... }}' nor a ';'")
        if masked[pos] in "{;":
            return tuple(found), pos if masked[pos] == "{" else None
        m = _DIRECTIVE.match(masked, pos)
        if m is None or m.group(1) not in PERFORMANCE_DIRECTIVES:
            what = masked[pos : pos + 40].split("\n")[0]
            raise PtxParseError(f"line {line}: unexpected {what!r} between .entry {kernel}'s ')' and '{{'")
        key = m.group(1)
        if key == "pragma":  # .pragma "nounroll"; -- the string is masked, the ';' ends it
            end = masked.find(";", m.end())
            if end < 0:
                raise PtxParseError(f"line {line}: .pragma without ';' after .entry {kernel}")
            found.append((key, ()))
            pos = end + 1
            continue
        args = _NUMBERS.match(masked, m.end())
        assert args is not None  # the pattern matches the empty string
        found.append((key, tuple(int(v) for v in re.findall(r"\d+", args.group(0)))))
        pos = args.end()


def _parse_params(text: str, kernel: str, line: int) -> tuple[Param, ...]:
    """The parameters between ``(`` and ``)``, in order."""
    declarations = [d.strip() for d in text.split(",")]
    if declarations == [""]:
        return ()
    return tuple(_parse_param(d, kernel, line, i) for i, d in enumerate(declarations))


def _parse_param(decl: str, kernel: str, line: int, index: int) -> Param:
    """One parameter declaration, or a PtxParseError that names the forms it may take."""
    m = _PARAM.fullmatch(decl)
    where = f"line {line}: .entry {kernel}, parameter {index} {' '.join(decl.split())!r}"
    if m is None:
        raise PtxParseError(f"{where}: not a kernel parameter; expected one of: {_PARAM_FORMS}")
    type_ = m["type"]
    if type_ not in TYPE_SIZES:
        raise PtxParseError(f"{where}: unknown type .{type_} (known: {', '.join('.' + t for t in TYPE_SIZES)})")
    element = TYPE_SIZES[type_]
    dims = [int(d) for d in re.findall(r"\d+", m["dims"])]
    count = math.prod(dims) if dims else None
    return Param(
        name=m["name"],
        type=type_,
        size=element * (count or 1),
        align=int(m["align"]) if m["align"] else element,
        count=count,
        pointer=m["ptr"] is not None,
        state_space=m["space"],
        pointee_align=int(m["pointee_align"]) if m["pointee_align"] else None,
    )


# ---------------------------------------------------------------------------------------------------------
# Public entry points


def parse(text: str | bytes) -> PtxInfo:
    """Parse PTX text into a :class:`PtxInfo`. Bytes work too, such as a module image with its trailing NUL.

    Raises :class:`PtxParseError` naming what is missing or malformed.
    Raises TypeError for something that is not text at all (None, a path: ``parse_file`` reads a file).

    What the parser understands, and what it deliberately ignores:

    * ``//`` and ``/* */`` comments anywhere, but not inside string literals (``.file 1 "/a//b.cu"``).
    * ``.version``, ``.target`` and ``.address_size``. All of ``.target``'s comma-separated tokens are kept,
      as in ``sm_80, debug``. ``.address_size`` is 32 when absent, as the PTX ISA specifies.
    * every ``.entry``, ``.visible`` or not, mangled or ``extern "C"``, in file order.
      ``.func`` device functions are not kernels, and are skipped.
      An ``.extern .entry`` declaration (no body) is skipped too: the kernel is not in this module.
    * each kernel parameter in every form nvcc and LLVM emit. Scalars: ``.param .u32 x``.
      Pointers with their state space and pointee alignment: ``.param .u64 .ptr .global .align 4 x``.
      By-value aggregates as byte arrays: ``.param .align 8 .b8 x[16]``.
    * performance directives between ``)`` and ``{`` (``.maxntid``, ``.reqntid``, ``.minnctapersm`` ...).
      They are kept as :attr:`Entry.directives`.
    * instruction bodies are not interpreted: only the ``.entry`` headers are read, and whether a body
      reads the cooperative grid workspace (:attr:`Entry.grid_workspace`).
      So new instructions in a future PTX ISA cannot break the parser.
    """
    if not isinstance(text, str | bytes | bytearray | memoryview):
        # Without this, None fails deep inside as "'NoneType' object is not subscriptable".
        raise TypeError(
            f"ptx.parse takes PTX text (str) or bytes (bytes, bytearray, memoryview), not "
            f"{type(text).__name__}; for a .ptx file use ptx.parse_file(path)"
        )
    source = strip_comments(as_text(text))
    if not source.strip():
        raise PtxParseError(
            "not PTX: the text is empty (or only comments); pass PTX text as nvcc --ptx writes "
            "it, or the path of a .ptx file"
        )
    version = parse_version(source)
    targets = parse_targets(source)
    address_size = parse_address_size(source)
    entries: dict[str, Entry] = {}
    for entry in _entries(source):
        if entry.name in entries:
            raise PtxParseError(f".entry {entry.name} is defined twice")
        entries[entry.name] = entry
    return PtxInfo(version=version, target=targets[0], targets=targets, address_size=address_size, entries=entries)


def parse_file(path: str | PathLike[str]) -> PtxInfo:
    """Parse the PTX file at ``path``; a parse error names the file."""
    p = Path(path)
    try:
        return parse(p.read_bytes())
    except PtxParseError as exc:
        raise PtxParseError(f"{p}: {exc}") from exc
