"""Tool: prove the hand-written tables against cuda.h: the check that makes "hand-written" trustworthy.

For every row of the declaration table:

* the function is declared in cuda.h, and its prototype matches the row's prototype string;
* the row binds the symbol cuda.h maps the name to (``cuMemAlloc`` -> ``cuMemAlloc_v2``), unless the row
  explains in ``older=`` why it binds an older one;
* it has as many ctypes argtypes as C parameters, and each argtype has the *kind* (integer, float,
  pointer, struct) and *size* of the C type -- signedness too, and for pointers, what they point to;

and for every named constant: each enum member and ``#define`` has cuda.h's value, and the CUresult table
holds every code the header declares. With a C compiler, :func:`struct_layout_problems` also compares
each ctypes ``Structure``'s size and field offsets with what the compiler lays out.

Run it: ``python -m rawcuda.tools.headercheck [path/to/cuda.h]`` (``--help`` says what it takes).

NVRTC's table (:mod:`rawcuda.ffi.nvrtc`) gets the same proof against nvrtc.h, plus a check of each
function's *return* type (``nvrtcGetErrorString`` returns ``const char *``, not a result code, so its
ctypes ``restype`` must be a pointer): ``python -m rawcuda.tools.headercheck --nvrtc [path/to/nvrtc.h]``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from typing import Any

from ..ffi import attributes, constants, nvrtc, results
from ..ffi.constants import C_DEFINES, C_ENUMS, NOT_IN_HEADER
from ..ffi.cuda import TABLE, Decl
from ..ffi.results import NEWER_RESULTS, RESULT_PREFIX, NvrtcResult, Result
from ..ffi.types import STRUCTS
from . import cheader, cli
from .cheader import CType, Header

#: The modules whose enums are checked: each registers its classes in constants.C_ENUMS as it defines them.
ENUM_MODULES = (constants, attributes, results)

_FUNCTION_POINTER_BASE = ctypes.CFUNCTYPE(None).__mro__[1]  # ctypes' private _CFuncPtr


def describe_ctypes(t: Any) -> CType:
    """Reduce a ctypes type to the same :class:`CType` vocabulary as the header side."""
    if t is None:
        return CType("void", 0)
    if isinstance(t, type) and issubclass(t, _FUNCTION_POINTER_BASE):
        return CType("pointer", ctypes.sizeof(ctypes.c_void_p), pointee=CType("void", 0, name="function"))
    if t is ctypes.c_void_p:
        return CType("pointer", ctypes.sizeof(t), pointee=CType("void", 0))
    if t is ctypes.c_char_p:
        return CType("pointer", ctypes.sizeof(t), pointee=CType("int", 1, True, "char"))
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return CType("pointer", ctypes.sizeof(t), pointee=describe_ctypes(t._type_))
    if isinstance(t, type) and issubclass(t, ctypes.Structure | ctypes.Union):
        return CType("struct", ctypes.sizeof(t), name=getattr(t, "_c_name_", t.__name__))
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return CType("pointer", ctypes.sizeof(ctypes.c_void_p), pointee=describe_ctypes(t._type_))
    code = getattr(t, "_type_", None)
    if isinstance(code, str):
        if code in "fdg":
            return CType("float", ctypes.sizeof(t), True, t.__name__)
        if code == "c":
            return CType("int", 1, True, "char")
        return CType("int", ctypes.sizeof(t), code.islower(), t.__name__)
    raise TypeError(f"cannot describe ctypes type {t!r}")


def _compatible(c: CType, py: CType, header: Header, depth: int = 0) -> str | None:
    """None if a value of ctypes type ``py`` can be passed where C expects ``c``; else why not."""
    if c.kind == "pointer":
        if py.kind != "pointer":
            return f"C has {c}, ctypes has {py}"
        if c.pointee is None or py.pointee is None or depth > 0:
            return None
        if py.pointee.kind == "void" and py.pointee.name != "function":  # c_void_p: an untyped address
            return None
        if c.pointee.kind == "void" and c.pointee.name != "function":
            return None if py.pointee.name != "function" else f"C has {c}, ctypes has a function pointer"
        if c.pointee.name == "function" or py.pointee.name == "function":
            return None if c.pointee.name == py.pointee.name else f"C has {c}, ctypes has {py}"
        inner = _compatible(c.pointee, py.pointee, header, depth + 1)
        return None if inner is None else f"pointee differs: {inner}"
    if c.kind == "enum":
        ok = py.kind == "int" and py.size == cheader.ENUM_SIZE
        return None if ok else f"C has {c}, ctypes has {py}"
    if c.kind == "struct":
        if py.kind != "struct":
            return f"C has {c}, ctypes has {py}"
        try:
            mine = header.resolve(py.name)
        except ValueError:
            return f"ctypes struct names {py.name!r}, which cuda.h does not declare"
        return None if mine.name == c.name else f"C has {c}, ctypes mirrors {py.name} ({mine.name})"
    if c.kind != py.kind or c.size != py.size:
        return f"C has {c}, ctypes has {py}"
    if c.kind == "int" and c.signed != py.signed:
        return f"C has {c}, ctypes has {py}"
    return None


def _tokens(c_text: str) -> list[str]:
    return re.findall(r"\w+|[^\s\w]", c_text)


def check_decl(decl: Decl, header: Header) -> list[str]:
    """Every way one table row disagrees with cuda.h (empty when it agrees)."""
    where = f"{decl.name} [{decl.symbol}]"
    params = header.prototypes.get(decl.name)
    if params is None:
        return [f"{where}: not declared in {header.path}"]
    problems = []
    expected = header.symbol_for(decl.name)
    if decl.symbol != expected and not decl.older:
        problems.append(
            f"{where}: cuda.h maps {decl.name} to {expected}, the table binds {decl.symbol} "
            "(bind the header's symbol, or explain the older choice in older=)"
        )
    if [_tokens(p) for p in params] != [_tokens(p) for p in decl.params]:
        problems.append(
            f"{where}: prototype differs from cuda.h:\n"
            f"    table:  ({', '.join(decl.params)})\n    cuda.h: ({', '.join(params)})"
        )
    if len(params) != len(decl.argtypes):
        problems.append(f"{where}: cuda.h has {len(params)} parameters, the table {len(decl.argtypes)} argtypes")
        return problems
    for i, (param, argtype) in enumerate(zip(params, decl.argtypes, strict=True)):
        c_type = header.resolve(_param_type(param))
        why = _compatible(c_type, describe_ctypes(argtype), header)
        if why:
            problems.append(f"{where}: argument {i} ({param}): {why}")
    return problems


def _param_type(param: str) -> str:
    """``'const char **pStr'`` -> ``'const char **'`` (drop the parameter name)."""
    name = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", param)
    if name is None:
        return param
    return param[: name.start(1)] + (name.group(2) or "")


def check_table(header: Header, table: Iterable[Decl] | None = None) -> list[str]:
    problems: list[str] = []
    for decl in table if table is not None else TABLE.values():
        problems += check_decl(decl, header)
    return problems


def check_constants(
    header: Header, enums: dict[type, tuple[str, str]] | None = None, defines: dict[str, int] | None = None
) -> list[str]:
    """Every enum member and ``#define`` against cuda.h; CUresult must be complete as well."""
    problems: list[str] = []
    for cls, (c_type, prefix) in (enums if enums is not None else C_ENUMS).items():
        members = None if c_type == "#define" else header.enum_of(c_type)
        if c_type != "#define" and members is None:
            problems.append(f"{cls.__name__}: cuda.h has no enum {c_type}")
            continue
        for name, member in cls.__members__.items():
            if f"{cls.__name__}.{name}" in NOT_IN_HEADER:
                continue
            c_name = prefix + name
            value = header.integer_define(c_name) if members is None else members.get(c_name)
            if value is None:
                problems.append(f"{cls.__name__}.{name}: {c_name} is not in cuda.h ({c_type})")
            elif value != int(member):
                problems.append(f"{cls.__name__}.{name}: cuda.h says {c_name} = {value}, rawcuda {int(member)}")
    results = header.enum_of("CUresult") or {}
    known = {"CUDA_" + r.name for r in Result}
    for c_name in sorted(set(results) - known):
        problems.append(f"Result: cuda.h declares {c_name} = {results[c_name]}, missing from rawcuda's table")
    for c_name, mine in (defines if defines is not None else C_DEFINES).items():
        value = header.integer_define(c_name)
        if value != mine:
            problems.append(f"#define {c_name}: cuda.h says {value}, rawcuda {mine}")
    return problems


# --- struct layouts, with a C compiler ----------------------------------------------------------------
def _field_paths(cls: Any, prefix: str = "", base: int = 0) -> list[tuple[str, int, int]]:
    """(dotted C path, offset, size) for every field, recursing into nested structs and unions.

    A union's members are proven too (each at offset 0 of it, with its own size and inner offsets): a launch
    attribute's payload is read by the driver through the member its id names.
    """
    rows = []
    for name, ftype, *_ in cls._fields_:
        offset = base + getattr(cls, name).offset
        path = prefix + name
        rows.append((path, offset, ctypes.sizeof(ftype)))
        if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure | ctypes.Union):
            rows += _field_paths(ftype, path + ".", offset)
    return rows


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def struct_layout_problems(
    header_path: str, structs: Iterable[Any] = STRUCTS, compiler: str | None = None
) -> list[str]:
    """Compile a probe against cuda.h and compare sizeof/offsetof with every ctypes struct."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc/gcc/clang, or $CC) to lay out the structs")
    expected: dict[str, int] = {}
    # The header by its own name, found through -I its folder: a copy named other than cuda.h is probed too.
    include, name = os.path.split(os.path.abspath(header_path))
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{name}"', "int main(void) {"]
    for cls in structs:
        c_name = cls._c_name_
        expected[f"sizeof {c_name}"] = ctypes.sizeof(cls)
        lines.append(f'  printf("sizeof {c_name} %zu\\n", sizeof({c_name}));')
        for path, offset, size in _field_paths(cls):
            expected[f"offsetof {c_name}.{path}"] = offset
            expected[f"sizeof {c_name}.{path}"] = size
            lines.append(f'  printf("offsetof {c_name}.{path} %zu\\n", offsetof({c_name}, {path}));')
            lines.append(f'  printf("sizeof {c_name}.{path} %zu\\n", sizeof((({c_name} *)0)->{path}));')
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        build = subprocess.run([compiler, "-std=c11", "-I", include, src, "-o", exe], capture_output=True, text=True)
        if build.returncode != 0:
            return [f"struct probe failed to compile:\n{build.stderr}"]
        run = subprocess.run([exe], capture_output=True, text=True, check=True)
    actual = {}
    for line in run.stdout.splitlines():
        key, _, value = line.rpartition(" ")
        actual[key] = int(value)
    return [
        f"{key}: C says {actual.get(key)}, ctypes {value}"
        for key, value in expected.items()
        if actual.get(key) != value
    ]


# --- NVRTC: the same proof for nvrtc.h -------------------------------------------------------------------
def check_return(decl: Any, header: Header) -> list[str]:
    """The row's return type against the header's, and its ctypes ``restype`` against that C type."""
    declared = header.returns.get(decl.name)
    if declared is None:
        return []  # not declared at all: check_decl already says so
    where = f"{decl.name} [{decl.symbol}]"
    problems = []
    if _tokens(declared) != _tokens(decl.returns):
        problems.append(f"{where}: returns {decl.returns} in the table, {declared} in {header.path}")
    why = _compatible(header.resolve(declared), describe_ctypes(decl.restype), header)
    if why:
        problems.append(f"{where}: return type: {why}")
    return problems


def check_nvrtc(header: Header, table: Iterable[Any] | None = None, results: type | None = None) -> list[str]:
    """Every NVRTC table row (arguments and return type) and every nvrtcResult code against nvrtc.h."""
    problems: list[str] = []
    for decl in table if table is not None else nvrtc.TABLE.values():
        problems += check_decl(decl, header) + check_return(decl, header)
    cls = results if results is not None else NvrtcResult
    prefix = RESULT_PREFIX
    for name, member in cls.__members__.items():
        value = header.enumerators.get(prefix + name)
        if value is None:
            if name not in NEWER_RESULTS:
                problems.append(f"{cls.__name__}.{name}: {prefix}{name} is not in {header.path}")
        elif value != int(member):
            problems.append(f"{cls.__name__}.{name}: nvrtc.h says {prefix}{name} = {value}, rawcuda {int(member)}")
    # nvrtcResult is an anonymous enum, so its members are found by their prefix: every error code and SUCCESS.
    codes = {n: v for n, v in header.enumerators.items() if n.startswith(prefix + "ERROR_") or n == prefix + "SUCCESS"}
    for c_name in sorted(set(codes) - {prefix + n for n in cls.__members__}):
        problems.append(f"{cls.__name__}: nvrtc.h declares {c_name} = {codes[c_name]}, missing from rawcuda's table")
    return problems


def main_nvrtc(path: str) -> int:
    header = cheader.parse(path, prototype=cheader.NVRTC_PROTOTYPE)
    problems = check_nvrtc(header)
    print(f"{path}: {len(nvrtc.TABLE)} NVRTC functions, {len(NvrtcResult)} result codes checked")
    for p in problems:
        print("MISMATCH", p)
    print("OK" if not problems else f"{len(problems)} mismatches")
    return 1 if problems else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; a path that is not a readable file is refused here, with the usage."""
    parser = argparse.ArgumentParser(
        prog="python -m rawcuda.tools.headercheck",
        description="Prove rawcuda's hand-written driver table against cuda.h (with --nvrtc: NVRTC's "
        "table against nvrtc.h): prototypes, symbols, argument types, enum values and struct layouts.",
    )
    parser.add_argument("header", nargs="?", help=f"the cuda.h to check against (default {cheader.DEFAULT_HEADER})")
    parser.add_argument(
        "--nvrtc",
        nargs="?",
        const=nvrtc.DEFAULT_HEADER,
        metavar="NVRTC_H",
        help=f"check NVRTC's table instead, against this nvrtc.h (default {nvrtc.DEFAULT_HEADER})",
    )
    args = parser.parse_args(argv)
    if args.header is not None and args.nvrtc is not None:
        parser.error("give either a cuda.h or --nvrtc [nvrtc.h], not both")
    path = args.nvrtc if args.nvrtc is not None else args.header or cheader.DEFAULT_HEADER
    # Refused here, not where cheader opens it: open()'s FileNotFoundError would reach the user as a traceback.
    if os.path.isdir(path):
        parser.error(f"{path}: is a directory; give the header file in it (cuda.h, nvrtc.h)")
    if not os.path.isfile(path):
        parser.error(
            f"{path}: no such file (a CUDA toolkit has its headers in include/, e.g. {cheader.DEFAULT_HEADER})"
        )
    if not os.access(path, os.R_OK):
        parser.error(f"{path}: not readable")
    args.path = path
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.nvrtc is not None:
        return main_nvrtc(args.path)
    path = args.path
    header = cheader.parse(path)
    problems = check_table(header) + check_constants(header)
    members = sum(len(cls.__members__) for cls in C_ENUMS)
    print(f"{path}: {len(TABLE)} functions, {len(C_ENUMS)} enums ({members} members), {len(C_DEFINES)} defines checked")
    compiler = find_compiler()
    if compiler:
        problems += struct_layout_problems(path)
        print(f"struct layouts of {len(STRUCTS)} structs checked with {compiler}")
    else:
        print("no C compiler: struct layouts not checked")
    for p in problems:
        print("MISMATCH", p)
    print("OK" if not problems else f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    cli.run(main)

__all__ = [
    "check_constants",
    "check_decl",
    "check_nvrtc",
    "check_return",
    "check_table",
    "constants",
    "describe_ctypes",
    "struct_layout_problems",
]
