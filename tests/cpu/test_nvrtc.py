"""NVRTC without a GPU: the table against nvrtc.h, finding libnvrtc, errors, and compile() on a fake libnvrtc.

* The declaration table is proven against the toolkit's nvrtc.h when it is installed (skipped otherwise),
  and always against a small header written in nvrtc.h's own style below -- which also proves the checker
  notices wrong rows, return types and result codes.
* A fake libnvrtc (C source below, built with the system compiler) answers like the real one in the ways
  compile() depends on: sizes then contents, logs, lowered names, failures. So the glue runs on every CI
  run; tests/gpu/test_nvrtc.py runs the real compiler.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

import pytest

import rawcuda
from rawcuda.checked import nv
from rawcuda.checked.errors import NvrtcNotFoundError
from rawcuda.extras import nvrtc
from rawcuda.ffi import library
from rawcuda.ffi import nvrtc as nvrtc_table
from rawcuda.ffi.decl import Decl, index
from rawcuda.ffi.library import LIBNVRTC
from rawcuda.ffi.nvrtc import TABLE, decl
from rawcuda.ffi.results import NvrtcResult
from rawcuda.tools import cheader, headercheck
from tests.helpers import build_shared_library, run_python

REAL_HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "nvrtc.h"

# --- a header in nvrtc.h's style: macros, a deprecation attribute, an anonymous enum, C++ only at the end ----
STYLE_HEADER = r"""
#ifndef __NVRTC_H__
#define __NVRTC_H__
#ifdef __cplusplus
extern "C" {
#endif /* __cplusplus */
#include <stdlib.h>
typedef enum {
  NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1, NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  NVRTC_ERROR_INVALID_INPUT = 3, NVRTC_ERROR_INVALID_PROGRAM = 4, NVRTC_ERROR_INVALID_OPTION = 5,
  NVRTC_ERROR_COMPILATION = 6, NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
  NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8, NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
  NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10, NVRTC_ERROR_INTERNAL_ERROR = 11,
  NVRTC_ERROR_TIME_FILE_WRITE_FAILED = 12, NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED = 13,
  NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED = 14, NVRTC_ERROR_PCH_CREATE = 15, NVRTC_ERROR_CANCELLED = 16,
  NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED = 17
} nvrtcResult;
/** \brief returns a string, e.g. NVRTC_SUCCESS to "NVRTC_SUCCESS". */
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
#if __has_attribute(nonnull)
nvrtcResult nvrtcVersion(int wrong);  /* a compiler built-in in #if: treated as 0, so this is skipped */
#endif
nvrtcResult nvrtcGetNumSupportedArchs(int* numArchs);
nvrtcResult nvrtcGetSupportedArchs(int* supportedArchs);
typedef struct _nvrtcProgram *nvrtcProgram;
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog,
                               const char *src,
                               const char *name,
                               int numHeaders,
                               const char * const *headers,
                               const char * const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog,
                                int numOptions, const char * const *options);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
#if defined(_WIN32)
# define __DEPRECATED__(msg) __declspec(deprecated(msg))
#elif (defined(__GNUC__))
# define __DEPRECATED__(msg) __attribute__((deprecated(msg)))
#else
# define __DEPRECATED__(msg)
#endif
__DEPRECATED__("This function will be removed in a future release. Please use nvrtcGetLTOIRSize instead")
nvrtcResult nvrtcGetNVVMSize(nvrtcProgram prog, size_t *nvvmSizeRet);
#undef __DEPRECATED__
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog,
                                   const char * const name_expression);
nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog,
                                const char *const name_expression,
                                const char** lowered_name);
#ifdef __cplusplus
}
#endif /* __cplusplus */
#if NVRTC_GET_TYPE_NAME || __DOXYGEN_ONLY__
#include <string>
template <typename T> nvrtcResult nvrtcGetTypeName(std::string *result) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcGetLoweredName(int wrong);
#endif
#endif /* __NVRTC_H__ */
"""


@pytest.fixture(scope="module")
def style_header(tmp_path_factory: pytest.TempPathFactory) -> cheader.Header:
    path = tmp_path_factory.mktemp("nvrtc") / "nvrtc.h"
    path.write_text(STYLE_HEADER)
    return cheader.parse(str(path), prototype=cheader.NVRTC_PROTOTYPE)


def test_style_header_parses_like_nvrtc_h(style_header: cheader.Header) -> None:
    assert set(TABLE) <= set(style_header.prototypes)
    assert style_header.returns["nvrtcGetErrorString"] == "const char *"
    assert style_header.returns["nvrtcVersion"] == "nvrtcResult"
    # The deprecation attribute in front of a prototype does not hide it ...
    assert style_header.prototypes["nvrtcGetNVVMSize"] == ("nvrtcProgram prog", "size_t *nvvmSizeRet")
    # ... and the C++-only block at the end (not compiled by a C compiler) is skipped, as is a block
    # behind a compiler built-in (__has_attribute) the reader cannot evaluate.
    assert len(style_header.prototypes["nvrtcGetLoweredName"]) == 3
    assert style_header.prototypes["nvrtcVersion"] == ("int *major", "int *minor")
    assert style_header.enumerators["NVRTC_ERROR_COMPILATION"] == 6
    assert style_header.resolve("nvrtcProgram").kind == "pointer"
    assert style_header.resolve("nvrtcResult").size == 4


def test_every_row_matches_the_style_header(style_header: cheader.Header) -> None:
    assert headercheck.check_nvrtc(style_header) == []


WRONG_ROWS = [
    (
        decl(
            "nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)",
            "nvrtcGetPTXSize",
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_uint),
        ),
        "pointee differs",
    ),
    (
        decl(
            "nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size)",
            "nvrtcGetPTXSize",
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
        ),
        "prototype differs",
    ),
    (
        decl(
            "nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options)",
            "nvrtcCompileProgram",
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_char_p),
        ),
        "signed 8-byte",
    ),
    (
        decl("nvrtcResult nvrtcGetErrorString(nvrtcResult result)", "nvrtcGetErrorString", ctypes.c_int),
        "returns nvrtcResult in the table, const char *",
    ),
    (
        decl(
            "const char *nvrtcGetErrorString(nvrtcResult result)",
            "nvrtcGetErrorString",
            ctypes.c_int,
            restype=ctypes.c_void_p,
        ),
        None,
    ),  # void* for a string: an untyped address, acceptable
    (decl("nvrtcResult nvrtcNoSuchThing(int x)", "nvrtcNoSuchThing", ctypes.c_int), "not declared"),
]


@pytest.mark.parametrize(("row", "expected"), WRONG_ROWS)
def test_checker_reports_a_wrong_row(style_header: cheader.Header, row: Decl, expected: str | None) -> None:
    problems = headercheck.check_nvrtc(style_header, table=[row])
    if expected is None:
        assert problems == []
    else:
        assert len(problems) >= 1 and expected in problems[0], problems


def test_checker_reports_wrong_and_missing_result_codes(style_header: cheader.Header) -> None:
    class Wrong(IntEnum):
        SUCCESS = 0
        ERROR_COMPILATION = 7  # really 6
        ERROR_MADE_UP = 99

    text = "\n".join(headercheck.check_nvrtc(style_header, table=[], results=Wrong))
    assert "NVRTC_ERROR_COMPILATION = 6, rawcuda 7" in text
    assert "NVRTC_ERROR_MADE_UP is not in" in text
    assert "declares NVRTC_ERROR_INVALID_OPTION = 5, missing" in text


def test_a_row_must_say_what_it_returns() -> None:
    with pytest.raises(ValueError, match="restype must be a pointer type"):
        decl("const char *nvrtcGetErrorString(nvrtcResult result)", "nvrtcGetErrorString", ctypes.c_int)
    with pytest.raises(ValueError, match="2 parameters but 1"):
        decl("nvrtcResult nvrtcVersion(int *major, int *minor)", "nvrtcVersion", ctypes.POINTER(ctypes.c_int))
    with pytest.raises(ValueError, match="not a function of the NVRTC table"):
        index([decl("CUresult cuInit(unsigned int Flags)", "cuInit", ctypes.c_uint)], "NVRTC", nvrtc_table.RETURNS)
    assert TABLE["nvrtcGetErrorString"].restype is ctypes.c_char_p and not TABLE["nvrtcGetErrorString"].checked
    assert all(row.checked for name, row in TABLE.items() if name != "nvrtcGetErrorString")


@pytest.mark.skipif(not REAL_HEADER.exists(), reason=f"no nvrtc.h at {REAL_HEADER} (set CUDA_HOME)")
@pytest.mark.parametrize("name", sorted(TABLE))
def test_table_row_matches_the_real_nvrtc_h(name: str) -> None:
    header = _real_header()
    row = TABLE[name]
    assert headercheck.check_decl(row, header) + headercheck.check_return(row, header) == []


@pytest.mark.skipif(not REAL_HEADER.exists(), reason=f"no nvrtc.h at {REAL_HEADER} (set CUDA_HOME)")
def test_result_codes_match_the_real_nvrtc_h(capsys: pytest.CaptureFixture[str]) -> None:
    assert headercheck.check_nvrtc(_real_header()) == []
    assert headercheck.main(["--nvrtc", str(REAL_HEADER)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("OK")


_parsed: list[cheader.Header] = []


def _real_header() -> cheader.Header:
    if not _parsed:
        _parsed.append(cheader.parse(str(REAL_HEADER), prototype=cheader.NVRTC_PROTOTYPE))
    return _parsed[0]


def test_cuda_h_parsing_is_unchanged_by_the_nvrtc_pattern() -> None:
    # The pattern is a parameter: parsing nvrtc-style text with the default (cuda.h) pattern finds no
    # prototypes, and cuda.h rows still record CUresult as their return type.
    header = cheader.Header(path="<text>")
    cheader._parse_statement("CUresult CUDAAPI cuInit(unsigned int Flags)", header)
    cheader._parse_statement("nvrtcResult nvrtcVersion(int *major, int *minor)", header)
    assert header.prototypes == {"cuInit": ("unsigned int Flags",)} and header.returns == {"cuInit": "CUresult"}


# --- finding libnvrtc ------------------------------------------------------------------------------------------
def test_candidates_follow_the_documented_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LIBNVRTC.env_var, raising=False)
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-x")
    names = LIBNVRTC.candidates()
    assert names[:3] == ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    assert names[3:6] == [f"/opt/cuda-x/lib64/{n}" for n in library.NVRTC_SONAMES]
    assert "/usr/local/cuda/lib64/libnvrtc.so.13" in names
    assert "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13" in names
    monkeypatch.setenv(LIBNVRTC.env_var, "/somewhere/libnvrtc.so.13")
    assert LIBNVRTC.candidates() == ["/somewhere/libnvrtc.so.13"]  # an explicit choice is the only one


def test_not_found_lists_every_candidate_and_why(tmp_path: Path) -> None:
    bad = tmp_path / "libnvrtc.so.13"
    bad.write_text("not a shared library")
    names = ["libdefinitely-not-nvrtc.so", str(bad), "/no/such/dir/libnvrtc.so.13", "/no/such/dir/libnvrtc.so"]
    with pytest.raises(library.LibraryNotFoundError) as info:
        LIBNVRTC.open_first(names)
    err = NvrtcNotFoundError.from_search(info.value)
    assert isinstance(err, rawcuda.RawCudaError) and isinstance(err, OSError)
    assert [name for name, _ in err.tried] == names
    text = str(err)
    assert "libdefinitely-not-nvrtc.so: " in text and f"{bad}: " in text
    assert "/no/such/dir/{libnvrtc.so.13, libnvrtc.so}: no such directory" in text  # one line per directory
    assert "RAWCUDA_LIBNVRTC" in text


def test_first_use_without_libnvrtc_raises_not_found() -> None:
    proc = run_python(
        "import json, rawcuda, rawcuda.extras.nvrtc as nv\n"
        "out = {}\n"
        "for what, call in (('compile', lambda: nv.compile('__global__ void k() {}')), ('version', nv.version)):\n"
        "    try:\n        call()\n"
        "    except rawcuda.NvrtcNotFoundError as e:\n        out[what] = str(e)\n"
        "print(json.dumps(out))\n",
        RAWCUDA_LIBNVRTC="/nonexistent/libnvrtc.so.13",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for text in out.values():
        assert text.startswith("could not load NVRTC") and "/nonexistent/libnvrtc.so.13" in text
        assert "RAWCUDA_LIBNVRTC is set, so only that path was tried" in text
    assert set(out) == {"compile", "version"}


def test_a_library_that_is_not_nvrtc_is_not_taken_for_it(fake_libcuda: Path) -> None:
    # Once this was a MissingSymbolError ("this libnvrtc is older than the table"): wrong advice for a
    # library that is not NVRTC at all. The loader now checks the probe symbol and moves on.
    proc = run_python(
        "import rawcuda, rawcuda.extras.nvrtc as nv\n"
        "try:\n    nv.version()\n"
        "except rawcuda.NvrtcNotFoundError as e:\n    print('RAISED', e)\n",
        RAWCUDA_LIBNVRTC=str(fake_libcuda),
    )
    assert f"{fake_libcuda}: not libnvrtc: it does not export nvrtcVersion" in proc.stdout, proc.stdout + proc.stderr


# --- errors and architectures ---------------------------------------------------------------------------------
def test_error_carries_code_name_log_and_hint() -> None:
    err = rawcuda.NvrtcError(
        NvrtcResult.ERROR_COMPILATION,
        call="nvrtcCompileProgram",
        description="NVRTC_ERROR_COMPILATION",
        log='k.cu(3): error: identifier "x" is undefined',
        details=["program: k.cu"],
    )
    text = str(err)
    assert text.startswith("nvrtcCompileProgram() failed: NVRTC_ERROR_COMPILATION (6)")
    assert "NVRTC_ERROR_COMPILATION (6): NVRTC_ERROR_COMPILATION" not in text  # the name is not repeated
    assert "compile log:\n    k.cu(3): error: identifier" in text and "program: k.cu" in text and "hint:" in text
    assert err.result is NvrtcResult.ERROR_COMPILATION and err.log.startswith("k.cu(3)")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is rawcuda.NvrtcError and again.code == 6 and again.log == err.log and str(again) == text
    unknown = rawcuda.NvrtcError(1234, call="nvrtcX")
    assert unknown.result is None and "NVRTC result 1234 (1234)" in str(unknown)


@pytest.mark.parametrize(
    ("capability", "supported", "expected"),
    [
        ((9, 0), [75, 80, 86, 89, 90, 100, 120], "compute_90"),
        ((12, 1), [75, 80, 90, 100, 120], "compute_120"),  # NVRTC older than the GPU: its newest arch
        ((8, 6), [80, 90], "compute_80"),
        ((9, 0), [], "compute_90"),  # NVRTC could not say: trust the device
        (None, [75, 80], "compute_80"),  # no GPU
    ],
)
def test_choose_arch(capability: tuple[int, int] | None, supported: list[int], expected: str) -> None:
    assert nvrtc.choose_arch(capability, supported) == expected


def test_default_arch_without_a_driver_is_the_fallback() -> None:
    proc = run_python(
        "import rawcuda.extras.nvrtc as nv; print(nv.default_arch())", RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1"
    )
    assert proc.stdout.strip() == nvrtc.FALLBACK_ARCH == "compute_80", proc.stderr


# --- compile() against a fake libnvrtc ------------------------------------------------------------------------------
FAKE_NVRTC = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int nvrtcResult;
typedef struct {
    char *src; char name[256]; char arch[64]; char log[1024]; char ptx[4096]; int compiled; int headers;
    int nexpr; char expr[8][128]; char lowered[8][160];
} Prog;
static int live = 0;
int fake_live_programs(void) { return live; }

const char *nvrtcGetErrorString(nvrtcResult r) {
    switch (r) {
    case 0: return "NVRTC_SUCCESS";
    case 5: return "NVRTC_ERROR_INVALID_OPTION";
    case 6: return "NVRTC_ERROR_COMPILATION";
    case 8: return "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case 10: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    default: return "NVRTC_ERROR unknown";
    }
}
nvrtcResult nvrtcVersion(int *major, int *minor) { *major = 12; *minor = 34; return 0; }
nvrtcResult nvrtcGetNumSupportedArchs(int *n) { *n = 3; return 0; }
nvrtcResult nvrtcGetSupportedArchs(int *a) { a[0] = 75; a[1] = 80; a[2] = 90; return 0; }
nvrtcResult nvrtcCreateProgram(Prog **prog, const char *src, const char *name, int numHeaders,
                               const char *const *headers, const char *const *includeNames) {
    if (!prog || !src) return 3;
    Prog *p = calloc(1, sizeof(Prog));
    p->src = strdup(src);
    snprintf(p->name, sizeof p->name, "%s", name ? name : "default_program");
    p->headers = numHeaders;
    for (int i = 0; i < numHeaders; i++) if (!headers[i] || !includeNames[i]) return 3;
    *prog = p;
    live++;
    return 0;
}
nvrtcResult nvrtcDestroyProgram(Prog **prog) {
    if (!prog || !*prog) return 4;
    free((*prog)->src); free(*prog); *prog = NULL; live--;
    return 0;
}
nvrtcResult nvrtcAddNameExpression(Prog *p, const char *const e) {
    if (p->compiled) return 8;
    snprintf(p->expr[p->nexpr++], 128, "%s", e);
    return 0;
}
nvrtcResult nvrtcCompileProgram(Prog *p, int n, const char *const *options) {
    for (int i = 0; i < n; i++) {
        if (strncmp(options[i], "-arch=", 6) == 0) snprintf(p->arch, sizeof p->arch, "%s", options[i] + 6);
        if (strncmp(options[i], "--bogus", 7) == 0) {
            snprintf(p->log, sizeof p->log, "nvrtc: error: invalid option %s\n", options[i]);
            return 5;
        }
    }
    if (strstr(p->src, "#error")) {
        snprintf(p->log, sizeof p->log, "%s(1): error: fake failure\n\n1 error detected in the compilation.\n",
                 p->name);
        return 6;
    }
    if (strstr(p->src, "warn")) snprintf(p->log, sizeof p->log, "%s(2): warning: fake warning\n", p->name);
    for (int i = 0; i < p->nexpr; i++) {
        snprintf(p->lowered[i], 160, "_lowered_%s", p->expr[i]);
        for (char *c = p->lowered[i]; *c; c++) if (*c == '<' || *c == '>') *c = '_';
    }
    snprintf(p->ptx, sizeof p->ptx, "// fake PTX of %s for %s with %d header(s)\n", p->name, p->arch, p->headers);
    p->compiled = 1;
    return 0;
}
nvrtcResult nvrtcGetPTXSize(Prog *p, size_t *size) { *size = strlen(p->ptx) + 1; return 0; }
nvrtcResult nvrtcGetPTX(Prog *p, char *out) { memcpy(out, p->ptx, strlen(p->ptx) + 1); return 0; }
static const char CUBIN[] = "\x7f" "ELF\0fake";  /* a NUL inside: binary data must survive */
nvrtcResult nvrtcGetCUBINSize(Prog *p, size_t *size) {
    *size = strncmp(p->arch, "sm_", 3) == 0 ? sizeof CUBIN - 1 : 0;
    return 0;
}
nvrtcResult nvrtcGetCUBIN(Prog *p, char *out) { memcpy(out, CUBIN, sizeof CUBIN - 1); return 0; }
nvrtcResult nvrtcGetProgramLogSize(Prog *p, size_t *size) { *size = strlen(p->log) + 1; return 0; }
nvrtcResult nvrtcGetProgramLog(Prog *p, char *out) { memcpy(out, p->log, strlen(p->log) + 1); return 0; }
nvrtcResult nvrtcGetLoweredName(Prog *p, const char *const e, const char **lowered) {
    for (int i = 0; i < p->nexpr; i++)
        if (strcmp(p->expr[i], e) == 0) { *lowered = p->lowered[i]; return 0; }
    return 10;
}
"""


@pytest.fixture(scope="module")
def fake_nvrtc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fakenvrtc")
    (folder / "fakenvrtc.c").write_text(FAKE_NVRTC)
    return build_shared_library(folder / "fakenvrtc.c", folder / "libfakenvrtc.so", "the fake libnvrtc")


@pytest.fixture
def fake(fake_nvrtc: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ctypes.CDLL]:
    """rawcuda.extras.nvrtc pointed at the fake for one test (a fresh library handle and a fresh binding namespace)."""
    monkeypatch.setenv(LIBNVRTC.env_var, str(fake_nvrtc))
    nv.reset()  # a fresh library handle and fresh bindings, for this test only
    yield nv.library().handle
    live = nv.library().handle.fake_live_programs()
    nv.reset()
    assert live == 0, "a program was not destroyed"


def test_fake_version_and_archs(fake: ctypes.CDLL, fake_nvrtc: Path) -> None:
    assert nvrtc.version() == (12, 34)
    assert nvrtc.supported_archs() == [75, 80, 90]
    assert nvrtc.library_path() == str(fake_nvrtc)
    assert nvrtc.error_string(6) == "NVRTC_ERROR_COMPILATION"


def test_compile_returns_ptx_log_and_lowered_names(fake: ctypes.CDLL) -> None:
    result = nvrtc.compile(
        "__global__ void k() {} // warn",
        name="mine.cu",
        options=("-arch=compute_90", "-DN=4"),
        name_expressions=("scale<float>", "scale<double>"),
        headers={"a.h": "#define A 1"},
    )
    assert result.ptx == b"// fake PTX of mine.cu for compute_90 with 1 header(s)\n"  # no trailing NUL
    assert result.log == "mine.cu(2): warning: fake warning"
    assert result.lowered_names == {"scale<float>": "_lowered_scale_float_", "scale<double>": "_lowered_scale_double_"}
    assert result.cubin is None and result.image == result.ptx
    assert result.options == ("-arch=compute_90", "-DN=4") and result.name == "mine.cu"


def test_compile_adds_the_default_arch_only_when_none_is_given(
    fake: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvrtc, "default_arch", lambda: "compute_77")
    assert nvrtc.compile("x", options=("-lineinfo",)).options == ("-arch=compute_77", "-lineinfo")
    assert nvrtc.compile("x").options == ("-arch=compute_77",)
    given = nvrtc.compile("x", options=("--gpu-architecture=compute_80",))
    assert given.options == ("--gpu-architecture=compute_80",)


def test_a_single_string_is_not_taken_for_a_sequence(fake: ctypes.CDLL) -> None:
    with pytest.raises(TypeError, match=r"write \('-lineinfo',\)"):
        nvrtc.compile("x", options="-lineinfo")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name_expressions"):
        nvrtc.compile("x", name_expressions="k<float>")  # type: ignore[arg-type]


def test_real_architecture_gives_a_cubin_with_its_bytes_intact(fake: ctypes.CDLL) -> None:
    result = nvrtc.compile("x", options=("-arch=sm_90",))
    assert result.cubin == b"\x7fELF\0fake" and result.image == result.cubin
    assert result.ptx.startswith(b"// fake PTX")


def test_compile_error_carries_the_log_and_destroys_the_program(fake: ctypes.CDLL) -> None:
    with pytest.raises(rawcuda.NvrtcError) as info:
        nvrtc.compile("#error nope", name="broken.cu", options=("-arch=compute_80",))
    err = info.value
    assert err.code == NvrtcResult.ERROR_COMPILATION and err.call == "nvrtcCompileProgram"
    assert err.log.startswith("broken.cu(1): error: fake failure")
    text = str(err)
    assert "program: broken.cu" in text and "options: -arch=compute_80" in text and "compile log:" in text


def test_bad_option_is_an_invalid_option_error(fake: ctypes.CDLL) -> None:
    with pytest.raises(rawcuda.NvrtcError) as info:
        nvrtc.compile("x", options=("-arch=compute_80", "--bogus-flag"))
    assert info.value.code == NvrtcResult.ERROR_INVALID_OPTION
    assert "invalid option --bogus-flag" in info.value.log and "spelling" in str(info.value)


def test_unknown_name_expression_error_names_the_program(fake: ctypes.CDLL) -> None:
    # The fake refuses a lowered name it was not given; compile() asks for exactly the ones it registered,
    # so provoke the failure through the raw table row, as a user of `nv` could.
    prog = nvrtc.nvrtcProgram()
    nv.nvrtcCreateProgram(ctypes.byref(prog), b"x", b"p.cu", 0, None, None)
    try:
        nvrtc.nv.nvrtcCompileProgram(prog, 0, None)
        with pytest.raises(rawcuda.NvrtcError) as info:
            nvrtc.nv.nvrtcGetLoweredName(prog, b"never<added>", ctypes.byref(ctypes.c_char_p()))
        assert info.value.code == NvrtcResult.ERROR_NAME_EXPRESSION_NOT_VALID
        assert "nvrtcGetLoweredName(" in str(info.value) and "name_expression=b'never<added>'" in str(info.value)
    finally:
        nvrtc.nv.nvrtcDestroyProgram(ctypes.byref(prog))
