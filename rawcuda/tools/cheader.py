"""Tool: read cuda.h the way a C compiler would -- enough of it to check the declaration table.

cuda.h is not a flat list of prototypes. It ``#define``s plain names to versioned symbols
(``cuMemAlloc`` -> ``cuMemAlloc_v2``), routes some through macros (``__CUDA_API_PTSZ(cuMemPrefetchAsync_v2)``),
picks typedefs by platform (``CUdeviceptr`` is 64-bit only under ``__LP64__``), and at the end re-declares
the *old* ABI inside ``#if defined(__CUDA_API_VERSION_INTERNAL)``. A regex over the raw text would find
those old prototypes too. So this module runs a small preprocessor first (conditionals evaluated for a
64-bit Linux C compiler, macros recorded), then parses what is left: prototypes, typedefs and enums.

No compiler is needed, so the check runs anywhere the header is. (Struct layouts, which need real
alignment rules, are checked with a C compiler by :mod:`rawcuda.tools.headercheck` when one exists.)

The same reader also takes NVRTC's ``nvrtc.h`` (``parse(path, prototype=NVRTC_PROTOTYPE)``): a plainer
header, whose functions return ``nvrtcResult`` (or, for ``nvrtcGetErrorString``, ``const char *``) and
may carry a deprecation attribute in front. Only the pattern that recognises a prototype differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ffi.decl import split_params  # the same splitter the tables use

DEFAULT_HEADER = "/usr/local/cuda/include/cuda.h"

#: What a C compiler on 64-bit Linux predefines, as far as cuda.h asks. Everything else is undefined:
#: _WIN32/_MSC_VER, __cplusplus, and the API-internal and per-thread-default-stream switches.
PREDEFINED: dict[str, str] = {
    "__GNUC__": "12",
    "__LP64__": "1",
    "__linux__": "1",
    "__x86_64__": "1",
    "__STDC_VERSION__": "201112L",
}

_BUILTIN_SIZES: dict[str, tuple[str, int, bool]] = {
    # name -> (kind, size in bytes, signed)
    "void": ("void", 0, False),
    "char": ("int", 1, True),
    "signed char": ("int", 1, True),
    "unsigned char": ("int", 1, False),
    "short": ("int", 2, True),
    "unsigned short": ("int", 2, False),
    "int": ("int", 4, True),
    "unsigned int": ("int", 4, False),
    "unsigned": ("int", 4, False),
    "long": ("int", 8, True),
    "unsigned long": ("int", 8, False),
    "long long": ("int", 8, True),
    "unsigned long long": ("int", 8, False),
    "float": ("float", 4, True),
    "double": ("float", 8, True),
    "size_t": ("int", 8, False),
    "int32_t": ("int", 4, True),
    "uint32_t": ("int", 4, False),
    "int64_t": ("int", 8, True),
    "uint64_t": ("int", 8, False),
}
POINTER_SIZE = 8
ENUM_SIZE = 4


@dataclass(frozen=True)
class CType:
    """A C type reduced to what matters for calling it: kind, size, signedness (and pointee/tag)."""

    kind: str  # "int" | "float" | "enum" | "pointer" | "struct" | "void"
    size: int
    signed: bool = False
    name: str = ""  # the struct/union/enum tag, or the builtin name
    pointee: CType | None = None

    def __str__(self) -> str:
        if self.kind == "pointer":
            return f"pointer to {self.pointee}"
        if self.kind == "int":
            return f"{'signed' if self.signed else 'unsigned'} {self.size}-byte int"
        if self.kind in ("struct", "enum"):
            return f"{self.kind} {self.name} ({self.size} bytes)" if self.size else f"{self.kind} {self.name}"
        if self.kind == "void":
            return self.name or "void"
        return f"{self.size}-byte {self.kind}"


@dataclass
class Header:
    """What cuda.h declares on this platform, after preprocessing."""

    path: str
    defines: dict[str, str] = field(default_factory=dict)
    function_macros: dict[str, tuple[list[str], str]] = field(default_factory=dict)
    prototypes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    typedefs: dict[str, str] = field(default_factory=dict)  # name -> the type it aliases, as text
    enum_members: dict[str, dict[str, int]] = field(default_factory=dict)  # enum tag -> members
    enumerators: dict[str, int] = field(default_factory=dict)
    struct_tags: set[str] = field(default_factory=set)
    function_pointer_types: set[str] = field(default_factory=set)
    returns: dict[str, str] = field(default_factory=dict)  # function name -> its return type, as text

    # --- names and symbols
    def symbol_for(self, name: str) -> str:
        """The symbol a C program calling ``name`` links against (follows ``#define`` chains)."""
        seen = set()
        while name not in seen:
            seen.add(name)
            text = self.defines.get(name)
            if text is None:
                return name
            call = re.fullmatch(r"(\w+)\s*\(\s*(\w+)\s*\)", text.strip())
            if call and call.group(1) in self.function_macros:
                params, body = self.function_macros[call.group(1)]
                expanded = re.sub(rf"\b{re.escape(params[0])}\b", call.group(2), body).strip()
                name = expanded
            elif re.fullmatch(r"\w+", text.strip()):
                name = text.strip()
            else:
                return name
        return name

    def integer_define(self, name: str) -> int | None:
        """The value of an integer ``#define`` (casts like ``((CUstream)0x1)`` are looked through)."""
        text = self.defines.get(name)
        if text is None:
            return None
        text = re.sub(r"\(\s*\w+\s*\*?\s*\)", " ", text)  # drop casts: (CUstream) (void*)
        text = text.replace("(", " ").replace(")", " ").strip()
        try:
            return _eval_int(text, self)
        except (ValueError, SyntaxError, NameError, TypeError):
            return None

    def enum_of(self, type_name: str) -> dict[str, int] | None:
        """The members of an enum named by typedef (``CUresult``) or tag (``cudaError_enum``)."""
        try:
            resolved = self.resolve(type_name)
        except ValueError:
            return None
        if resolved.kind != "enum":
            return None
        return self.enum_members.get(resolved.name)

    # --- types
    def resolve(self, type_text: str) -> CType:
        """Reduce a C type as written in a parameter list to a :class:`CType`."""
        text = re.sub(r"\b(const|volatile|CUDA_CB|__restrict__|restrict)\b", " ", type_text)
        stars = text.count("*") + text.count("[")
        text = re.sub(r"\[[^\]]*\]", " ", text).replace("*", " ")
        base = " ".join(text.split())
        if stars:
            pointee = self.resolve(base)
            for _ in range(stars - 1):
                pointee = CType("pointer", POINTER_SIZE, pointee=pointee)
            return CType("pointer", POINTER_SIZE, pointee=pointee)
        return self._resolve_base(base)

    def _resolve_base(self, base: str, depth: int = 0) -> CType:
        if depth > 32:
            raise ValueError(f"typedef loop at {base!r}")
        if base in _BUILTIN_SIZES:
            kind, size, signed = _BUILTIN_SIZES[base]
            return CType(kind, size, signed, base)
        # A tag is a name, or the placeholder "<anonymous enum>" for `typedef enum { ... } name;` (nvrtc.h
        # declares nvrtcResult that way; the table never names an anonymous cuda.h type).
        m = re.fullmatch(r"(struct|union|enum)\s+(\w+|<anonymous \w+>)", base)
        if m:
            if m.group(1) == "enum":
                return CType("enum", ENUM_SIZE, True, m.group(2))
            return CType("struct", 0, name=m.group(2))
        if base in self.function_pointer_types:
            return CType("pointer", POINTER_SIZE, pointee=CType("void", 0, name="function"))
        if base in self.typedefs:
            return (
                self.resolve(self.typedefs[base])
                if "*" in self.typedefs[base]
                else self._resolve_base(self.typedefs[base], depth + 1)
            )
        raise ValueError(f"unknown C type {base!r}")


# --- the preprocessor -------------------------------------------------------------------------------
_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', re.S)


def _strip_comments(text: str) -> str:
    return _TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)


def _eval_int(expr: str, header: Header) -> int:
    """Evaluate a preprocessor expression: defined(), integers, && || ! and comparisons."""
    expr = re.sub(
        r"\bdefined\s*\(\s*(\w+)\s*\)|\bdefined\s+(\w+)",
        lambda m: "1" if (m.group(1) or m.group(2)) in header.defines else "0",
        expr,
    )
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)

    def ident(m: re.Match[str]) -> str:
        word = m.group(0)
        if word in ("and", "or", "not"):
            return word
        value = header.defines.get(word)
        if value is not None and value.strip() and value.strip() != word:
            return "(" + str(_eval_int(value, header)) + ")"
        if word in header.enumerators:
            return str(header.enumerators[word])
        return "0"  # an undefined identifier is 0 in #if

    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    expr = re.sub(r"\b[A-Za-z_]\w*\b", ident, expr)
    expr = expr.replace("/", "//")
    return int(eval(expr, {"__builtins__": {}}, {}))  # by now: digits and operators only


def _eval_condition(expr: str, header: Header) -> int:
    """An ``#if``/``#elif`` condition. Compiler built-ins called like functions (``__has_attribute(x)``,
    which nvrtc.h-style headers may test) count as 0 -- "not available" -- as for an unknown identifier."""
    expr = re.sub(
        r"\bdefined\s*\(\s*(\w+)\s*\)|\bdefined\s+(\w+)",
        lambda m: "1" if (m.group(1) or m.group(2)) in header.defines else "0",
        expr,
    )
    expr = re.sub(r"\b[A-Za-z_]\w*\s*\([^()]*\)", "0", expr)
    return _eval_int(expr, header)


def preprocess(text: str, header: Header) -> str:
    """Evaluate conditionals, record ``#define``s, and return the active non-directive text."""
    text = _strip_comments(text.replace("\\\n", " "))
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, some branch of this #if already taken)

    def active() -> bool:
        return all(a for a, _ in stack)

    for line in text.split("\n"):
        m = re.match(r"\s*#\s*(\w+)\s*(.*)", line)
        if not m:
            if active():
                out.append(line)
            continue
        directive, rest = m.group(1), m.group(2).strip()
        parent = all(a for a, _ in stack)
        if directive in ("if", "ifdef", "ifndef"):
            if directive == "if":
                cond = parent and bool(_eval_condition(rest, header))
            else:
                cond = parent and ((rest.split()[0] in header.defines) == (directive == "ifdef"))
            stack.append((cond, cond))
        elif directive == "elif":
            _, taken = stack.pop()
            outer = all(a for a, _ in stack)
            cond = outer and not taken and bool(_eval_condition(rest, header))
            stack.append((cond, taken or cond))
        elif directive == "else":
            _, taken = stack.pop()
            outer = all(a for a, _ in stack)
            stack.append((outer and not taken, True))
        elif directive == "endif":
            stack.pop()
        elif not parent:
            continue
        elif directive == "define":
            fm = re.match(r"(\w+)\(([^)]*)\)\s*(.*)", rest)
            if fm:
                header.function_macros[fm.group(1)] = ([p.strip() for p in fm.group(2).split(",")], fm.group(3))
                header.defines[fm.group(1)] = fm.group(3)
            else:
                parts = rest.split(None, 1)
                header.defines[parts[0]] = parts[1] if len(parts) > 1 else ""
        elif directive == "undef":
            header.defines.pop(rest.split()[0], None)
            header.function_macros.pop(rest.split()[0], None)
    return "\n".join(out)


# --- declarations ----------------------------------------------------------------------------------
def _statements(text: str) -> list[str]:
    """Split on ';' at brace depth 0 (struct bodies keep their inner ';')."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            parts.append(" ".join(text[start:i].split()))
            start = i + 1
    return parts


#: A cuda.h prototype: ``CUresult CUDAAPI cuName(params)``. The named groups are what the parser reads:
#: ``name``, ``params`` and, when the pattern has it, ``ret`` (the return type; else CUresult).
_PROTOTYPE = re.compile(r"^(?:__CUDA_DEPRECATED\s+)?CUresult\s+CUDAAPI\s+(?P<name>\w+)\s*\((?P<params>.*)\)$", re.S)
CUDA_PROTOTYPE = _PROTOTYPE

#: An nvrtc.h prototype: ``nvrtcResult nvrtcName(params)`` or ``const char *nvrtcGetErrorString(...)``.
#: Anything before the return type (``__DEPRECATED__("...")`` expands to an attribute) is skipped.
NVRTC_PROTOTYPE = re.compile(
    r"^(?:.*?\s)?(?P<ret>nvrtcResult|const\s+char\s*\*)\s*(?P<name>nvrtc\w+)\s*\((?P<params>.*)\)$", re.S
)


def _parse_enum_body(tag: str, body: str, header: Header) -> None:
    members: dict[str, int] = {}
    value = -1
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, expr = item.partition("=")
        name = name.strip()
        value = _eval_int(expr, header) if expr.strip() else value + 1
        members[name] = value
        header.enumerators[name] = value
    header.enum_members[tag] = members


def _parse_statement(stmt: str, header: Header, prototype: re.Pattern[str] = _PROTOTYPE) -> None:

    m = prototype.match(stmt)
    if m:
        header.prototypes[m.group("name")] = split_params(m.group("params"))
        ret = m.groupdict().get("ret")
        header.returns[m.group("name")] = " ".join(ret.split()) if ret else "CUresult"
        return
    stmt = stmt.replace("__CUDA_DEPRECATED", "").strip()
    is_typedef = stmt.startswith("typedef ")
    body_stmt = stmt[len("typedef ") :] if is_typedef else stmt
    compound = re.match(r"(struct|union|enum)\s*(\w*)\s*\{(.*)\}\s*(.*)$", body_stmt, re.S)
    if compound:
        kind, tag, body, declarators = compound.groups()
        tag = tag or f"<anonymous {kind}>"
        if kind == "enum":
            _parse_enum_body(tag, body, header)
        else:
            header.struct_tags.add(tag)
        if is_typedef:
            for d in declarators.split(","):
                d = d.strip()
                if d:
                    stars = d.count("*")
                    header.typedefs[d.replace("*", "").strip()] = f"{kind} {tag}" + " *" * stars
        return
    if not is_typedef:
        return
    fp = re.match(r"(.*?)\(\s*(?:CUDA_CB\s*)?\*\s*(\w+)\s*\)\s*\(.*\)$", body_stmt, re.S)
    if fp:
        header.function_pointer_types.add(fp.group(2))
        return
    m = re.match(r"(.*?)(\w+)\s*(\[[^\]]*\])?$", body_stmt, re.S)
    if m:
        aliased = m.group(1).strip() + (" *" if m.group(3) else "")
        header.typedefs[m.group(2)] = aliased


def parse(path: str = DEFAULT_HEADER, prototype: re.Pattern[str] = _PROTOTYPE) -> Header:
    """Preprocess and parse cuda.h at ``path`` (or nvrtc.h, with ``prototype=NVRTC_PROTOTYPE``)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    header = Header(path=path, defines=dict(PREDEFINED))
    active = preprocess(text, header)
    active = re.sub(r'extern\s+"C"\s*\{', " ", active)  # C++ only; inactive for C, but be safe
    for stmt in _statements(active):
        if stmt:
            _parse_statement(stmt, header, prototype)
    return header
