"""Core: the text of a PTX module before its kernels are read -- comments, strings, the header lines.

:mod:`rawcuda.core.ptx` parses kernel signatures. This file prepares the text for it.
It also reads the three header directives every module has: ``.version``, ``.target``, ``.address_size``.
One regular expression removes comments, and it matches string literals too.
So ``//`` inside ``.file 1 "/a//b.cu"`` is not taken for a comment.
Binary images are refused with a message that says what they are.
A cubin is ELF, and a fatbin starts with 0xBA55ED50.
"""

from __future__ import annotations

import re

from rawcuda.checked.errors import RawCudaError

DEFAULT_ADDRESS_SIZE = 32  # what the PTX ISA says a module without .address_size uses


class PtxParseError(RawCudaError, ValueError):
    """The text is not PTX this parser understands. The message says what is missing or malformed."""


# One alternation so that string literals are consumed whole: a "//" inside a string is not a comment.
_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)
_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"  # 0xBA55ED50, little-endian


def strip_comments(text: str) -> str:
    """Remove ``//`` and ``/* */`` comments, keeping string literals and the line structure."""

    def keep_lines(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith('"'):
            return token
        return "\n" * token.count("\n") or " "

    stripped = _COMMENT_OR_STRING.sub(keep_lines, text)
    if "/*" in without_strings(stripped):
        line = stripped[: without_strings(stripped).index("/*")].count("\n") + 1
        raise PtxParseError(f"unterminated /* comment starting on line {line}")
    return stripped


def without_strings(text: str) -> str:
    """The text with each string literal blanked out, so that every offset stays where it was."""
    return re.sub(r'"(?:\\.|[^"\\\n])*"', lambda m: " " * len(m.group(0)), text)


def as_text(data: str | bytes) -> str:
    """PTX as text, without a trailing NUL. A cubin, a fatbin or data that is not UTF-8 is refused."""
    if isinstance(data, str):
        return data.rstrip("\0")
    head = bytes(data[:4])
    if head == _ELF_MAGIC:
        raise PtxParseError("this is an ELF file (a cubin), not PTX text; only PTX has a text header to parse")
    if head == _FATBIN_MAGIC:
        raise PtxParseError("this is a fatbin (binary), not PTX text; extract the PTX with cuobjdump -ptx")
    try:
        return bytes(data).decode("utf-8").rstrip("\0")
    except UnicodeDecodeError as exc:
        raise PtxParseError(f"not PTX: the data is not text (byte {exc.start} is not UTF-8)") from exc


# --- the module header ---------------------------------------------------------------------------------
_VERSION = re.compile(r"(?m)^[ \t]*\.version[ \t]+(\S+)[ \t]*$")
_TARGET = re.compile(r"(?m)^[ \t]*\.target[ \t]+([^\n]*?)[ \t]*$")
_ADDRESS_SIZE = re.compile(r"(?m)^[ \t]*\.address_size[ \t]+(\S+)[ \t]*$")
_VERSION_VALUE = re.compile(r"(\d+)\.(\d+)")
_TARGET_TOKEN = re.compile(r"[A-Za-z_][\w]*")


def line_of(text: str, pos: int) -> int:
    """The line number (from 1) of offset ``pos``, for messages."""
    return text.count("\n", 0, pos) + 1


def parse_version(text: str) -> tuple[int, int]:
    """The ``.version`` directive as (major, minor). Every PTX module has one."""
    m = _VERSION.search(text)
    if m is None:
        raise PtxParseError(
            "not PTX: no '.version X.Y' directive (every PTX module starts with one, e.g. '.version 9.0')"
        )
    value = _VERSION_VALUE.fullmatch(m.group(1))
    if value is None:
        raise PtxParseError(
            f"line {line_of(text, m.start())}: malformed .version {m.group(1)!r}: expected MAJOR.MINOR, e.g. 9.0"
        )
    return int(value.group(1)), int(value.group(2))


def parse_targets(text: str) -> tuple[str, ...]:
    """The tokens of the ``.target`` directive, such as ``("sm_80", "debug")``."""
    m = _TARGET.search(text)
    if m is None:
        raise PtxParseError("no '.target' directive: expected a line like '.target sm_80' after .version")
    tokens = tuple(t.strip() for t in m.group(1).split(","))
    if not tokens or not all(_TARGET_TOKEN.fullmatch(t) for t in tokens):
        raise PtxParseError(f"line {line_of(text, m.start())}: malformed .target {m.group(1)!r}")
    return tokens


def parse_address_size(text: str) -> int:
    """The ``.address_size`` directive: 32 or 64, and 32 when absent."""
    m = _ADDRESS_SIZE.search(text)
    if m is None:
        return DEFAULT_ADDRESS_SIZE
    if m.group(1) not in ("32", "64"):
        raise PtxParseError(f"line {line_of(text, m.start())}: .address_size must be 32 or 64, not {m.group(1)!r}")
    return int(m.group(1))


__all__ = [
    "DEFAULT_ADDRESS_SIZE",
    "PtxParseError",
    "as_text",
    "line_of",
    "parse_address_size",
    "parse_targets",
    "parse_version",
    "strip_comments",
    "without_strings",
]
