"""The raw-ctypes halves of the tutorials, checked without a GPU.

Tutorials 00a and 00b write the driver glue by hand (00a the declarations, 00b a kernel launch), and
tutorials 09, 10 and 13 write their struct or callback by hand before using rawcuda's class. Hand-written
glue is exactly what goes wrong silently, so here:

* 00a imports nothing of rawcuda before its last step, 00b nothing at all, and neither does the helper
  module they share, tutorials/_handmade.py (read from their syntax trees); every ``restype``/``argtypes``
  either declares is proven against cuda.h by the same checker as rawcuda's table, and a function both
  declare is declared the same way in both;
* 00a prints every declaration it makes (the point of the tutorial: the learner sees them);
* both run end to end against ``tests/fakecuda/fakehost.c`` -- a libcuda look-alike whose device is the
  host and whose vector_add reads ``kernelParams`` as the GPU does -- and verify their results, every
  check of theirs printed once; both skip in one line against the stub look-alike and without any libcuda;
* the structs written out in 09 (CUDA_KERNEL_NODE_PARAMS) and 13 (CUmemAllocationProp) have the sizes and
  field offsets of the C compiler's layout of cuda.h, and of rawcuda's own definitions;
* 10's callback type is rawcuda's CUhostFn, and its lifetime demonstration really shows a callback
  object freed the moment nothing references it.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from rawcuda.ffi import types as rawtypes
from rawcuda.ffi.cuda import TABLE
from rawcuda.ffi.decl import Decl
from rawcuda.testing import gpu_unavailable_reason
from rawcuda.tools import cheader, headercheck
from tests.cpu import test_tutorials_content as content
from tests.helpers import (
    EXIT_NO_GPU,
    ROOT,
    TESTS_DIR,
    build_shared_library,
    python_env,
    run_tutorial,
    tutorial_module,
)

TUTORIALS = ROOT / "tutorials"
DECLARATIONS = "00a_declarations_by_hand.py"  # restype/argtypes, CUresults, the row and the errcheck; then rawcuda's
KERNEL = "00b_kernel_by_hand.py"  # context, memory, PTX, kernelParams, launch: no rawcuda at all
RAW = (DECLARATIONS, KERNEL)
STEPS = {DECLARATIONS: 9, KERNEL: 9}
HANDMADE = TUTORIALS / "_handmade.py"  # what both share: C types, codes, errcheck, skip
HEADER = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"
needs_header = pytest.mark.skipif(not HEADER.exists(), reason=f"no CUDA header at {HEADER} (set CUDA_HOME)")
needs_compiler = pytest.mark.skipif(headercheck.find_compiler() is None, reason="no C compiler to lay out structs")
TIMEOUT_S = 120
STDLIB_AND_FRAME = set(sys.stdlib_module_names) | {"_tutorial"}  # what _handmade.py may import


def load_tutorial(name: str) -> ModuleType:
    """Import tutorials/NAME as a module (its ``main`` does not run: only ``__main__`` runs it)."""
    if str(TUTORIALS) not in sys.path:
        sys.path.insert(0, str(TUTORIALS))  # for `from _tutorial import ...` and `from _handmade import ...`
    spec = importlib.util.spec_from_file_location(f"tutorial_{Path(name).stem}", TUTORIALS / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def declarations() -> ModuleType:
    return load_tutorial(DECLARATIONS)


@pytest.fixture(scope="module")
def handmade() -> ModuleType:
    return tutorial_module("_handmade")


@pytest.fixture(scope="module")
def header() -> cheader.Header:
    return cheader.parse(str(HEADER))


@pytest.fixture(scope="module")
def fake_host_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fakehost") / "libfakehost.so"
    return build_shared_library(TESTS_DIR / "fakecuda" / "fakehost.c", out, "the host-memory fake libcuda")


def run_raw(name: str, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """Tutorial NAME as a learner runs it (from a neutral directory, no PYTHONPATH), with ``env`` added."""
    environment = python_env(**env)
    environment.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, str(TUTORIALS / name), *args],
        cwd=ROOT.parent,
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def main_of(tree: ast.Module) -> ast.FunctionDef:
    return next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")


def method_calls(tree: ast.AST, method: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
    ]


# --- tutorials 00a and 00b: the shape of each file ---------------------------------------------------------------
@pytest.mark.parametrize("name", RAW)
@pytest.mark.parametrize(
    "check",
    [
        content.test_tutorial_exists_with_docstring,
        content.test_tutorial_uses_the_shared_frame,
        content.test_tutorial_help_offers_step,
        content.test_tutorial_is_listed_in_the_readme,
    ],
    ids=lambda check: check.__name__,
)
def test_raw_tutorial_has_the_shape_of_every_tutorial(check: Any, name: str) -> None:
    check(name)  # the same checks as tutorials 05a-08 (tests/cpu/test_tutorials_content.py)


def rawcuda_imports(tree: ast.AST) -> list[ast.stmt]:
    return [
        node
        for node in ast.walk(tree)
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rawcuda")
        or (isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "rawcuda" for alias in node.names))
    ]


def test_00a_imports_no_rawcuda_before_its_last_step() -> None:
    tree = parse(TUTORIALS / DECLARATIONS)
    top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert not rawcuda_imports(ast.Module(body=top_level, type_ignores=[])), "no module-level rawcuda import"
    main = main_of(tree)
    steps = [node.lineno for node in method_calls(main, "step")]
    imports = rawcuda_imports(main)
    assert imports, "the last step shows rawcuda's table row: it imports rawcuda there"
    assert min(node.lineno for node in imports) > max(steps), "rawcuda is imported only after the last t.step()"
    others = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef) and node is not main]
    assert not any(rawcuda_imports(node) for node in others), "no helper of tutorial 00a imports rawcuda"


def test_00b_imports_no_rawcuda_at_all() -> None:
    assert not rawcuda_imports(parse(TUTORIALS / KERNEL)), "every driver call of 00b is bare ctypes"


def test_the_shared_helpers_are_bare_too() -> None:
    """_handmade.py imports the standard library and the frame only -- no rawcuda, no numpy -- and both
    tutorials take their shared pieces from it (not from rawcuda under the same names)."""
    tree = parse(HANDMADE)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} <= STDLIB_AND_FRAME, imported
    for name in RAW:
        sources = {node.module for node in parse(TUTORIALS / name).body if isinstance(node, ast.ImportFrom)}
        assert "_handmade" in sources, f"{name} takes the shared C types and errcheck from _handmade.py"


# --- tutorials 00a and 00b: the declarations, proven against cuda.h ----------------------------------------------
class Recorder:
    """Stands in for a CDLL: ``declare(lib)`` sets restype/argtypes on whatever ``lib.cuX`` returns."""

    def __getattr__(self, name: str) -> SimpleNamespace:
        fn = SimpleNamespace(restype=None, argtypes=None)
        setattr(self, name, fn)
        return fn


def declared(tutorial: ModuleType) -> dict[str, SimpleNamespace]:
    lib = Recorder()
    tutorial.declare(lib)
    return dict(vars(lib))


@pytest.mark.parametrize("name", RAW)
def test_raw_tutorial_declares_exactly_its_symbol_list(name: str) -> None:
    tutorial = load_tutorial(name)
    assert sorted(declared(tutorial)) == sorted(tutorial.SYMBOLS)  # the errcheck loop covers what was declared
    count = f"for {len(tutorial.SYMBOLS)} functions"  # what the docstring and the README row promise
    rows = [line for line in (TUTORIALS / "README.md").read_text().splitlines() if f"| `{name}` |" in line]
    assert count in " ".join(tutorial.__doc__.split()) and len(rows) == 1 and count in rows[0]


@needs_header
@pytest.mark.parametrize("name", RAW)
def test_every_hand_declaration_matches_cuda_h(name: str, header: cheader.Header) -> None:
    by_symbol = {row.symbol: row for row in TABLE.values()}
    for symbol, fn in declared(load_tutorial(name)).items():
        row = by_symbol[symbol]  # the table knows the header prototype for this exported symbol
        assert fn.restype is ctypes.c_int, f"{symbol} returns CUresult: restype c_int"
        mine = Decl(row.prototype, symbol, tuple(fn.argtypes))
        assert headercheck.check_decl(mine, header) == [], symbol


def test_a_function_both_declare_is_declared_the_same(declarations: ModuleType) -> None:
    first, second = declared(declarations), declared(load_tutorial(KERNEL))
    both = sorted(set(first) & set(second))
    assert "cuMemAlloc_v2" in both and "cuGetErrorName" in both  # the row's function; the errcheck's
    for symbol in both:
        assert (first[symbol].restype, first[symbol].argtypes) == (second[symbol].restype, second[symbol].argtypes)


def test_the_row_is_the_declaration_and_the_tables(declarations: ModuleType) -> None:
    prototype, symbol, restype, argtypes = declarations.CU_MEM_ALLOC_ROW
    assert declared(declarations)[symbol].argtypes == list(argtypes)
    row = TABLE["cuMemAlloc"]
    assert (row.prototype, row.symbol, row.restype, row.argtypes) == (prototype, symbol, restype, argtypes)


# --- tutorials 00a and 00b: run end to end on the fakes -------------------------------------------------------------
def check_count(name: str) -> int:
    """How many t.check calls main makes: in 00a and 00b each runs once (none sits in a loop or a branch)."""
    return len(method_calls(main_of(parse(TUTORIALS / name)), "check"))


@pytest.mark.parametrize("name", RAW)
def test_raw_tutorial_runs_end_to_end_on_the_host_fake(name: str, fake_host_libcuda: Path) -> None:
    proc = run_raw(name, RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert f"== step {STEPS[name]}:" in proc.stdout and f"== step {STEPS[name] + 1}:" not in proc.stdout
    assert "every step verified" in proc.stdout
    assert proc.stdout.count("   ok: ") == check_count(name) > 0, output  # every check ran, and passed


def test_00a_shows_every_declaration_and_both_errchecks(declarations: ModuleType, fake_host_libcuda: Path) -> None:
    proc = run_raw(DECLARATIONS, RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    step3 = proc.stdout.split("== step 3:")[1].split("== step 4:")[0]
    for symbol in declarations.SYMBOLS:  # the point of 00a: the learner reads each line it declares
        assert f"lib.{symbol}.restype = CUresult" in step3 and f"lib.{symbol}.argtypes = [" in step3, symbol
    assert "raises DriverError: cuDeviceGet returned 101 (CUDA_ERROR_INVALID_DEVICE)" in proc.stdout
    assert "cu.cuDeviceGet(&dev, 99) raises DeviceError" in proc.stdout  # rawcuda's own errcheck, last step


def test_00b_adds_on_the_host_fake(fake_host_libcuda: Path) -> None:
    proc = run_raw(KERNEL, RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    assert "all 1,048,579 sums equal numpy's a + b exactly" in proc.stdout, proc.stdout + proc.stderr
    assert "cuMemAlloc_v2(&p, 1 TiB) -> 2 (CUDA_ERROR_OUT_OF_MEMORY)" in proc.stdout  # raised by the errcheck


@pytest.mark.parametrize("name", RAW)
def test_raw_tutorial_step_mode_on_the_host_fake(name: str, fake_host_libcuda: Path) -> None:
    proc = run_raw(name, "--step", stdin="\n" * (STEPS[name] + 1), RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[Enter: run step") == STEPS[name]  # the frame's pause prompt (tutorials/_tutorial.py)


@pytest.mark.parametrize("name", RAW)
def test_raw_tutorial_skips_on_the_stub(name: str, fake_libcuda: Path) -> None:
    proc = run_raw(name, RAWCUDA_LIBCUDA=str(fake_libcuda), FAKECUDA_MODE="stub")  # cuInit answers 34, as a stub
    output = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_NO_GPU and "Traceback" not in output, output
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
    why = "cuInit returned 34: the toolkit's stub libcuda"
    assert skipped == [f"skipped: no usable GPU here ({why}){recording_note(name)}"], output


def recording_note(name: str) -> str:
    """What 00a's and 00b's skip line ends with: where the run recorded on a GPU is, for a reader without one."""
    recorded = f"tutorials/output/{Path(name).stem}.txt"
    assert (ROOT / recorded).is_file(), f"{recorded} is missing"
    return f"; what it prints on a GPU: {recorded}"


@pytest.mark.parametrize("name", RAW)
def test_raw_tutorial_skips_without_a_libcuda(name: str, tmp_path: Path) -> None:
    proc = run_raw(name, RAWCUDA_LIBCUDA=str(tmp_path / "libcuda.so.1"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_NO_GPU and "Traceback" not in output, output
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 1 and skipped[0].startswith("skipped: no usable GPU here (OSError: "), output
    assert skipped[0].endswith(recording_note(name)), output  # the reader without a GPU starts here


# --- tutorial 00a: the demonstrations without a driver --------------------------------------------------------------
def test_an_undeclared_int_argument_is_cut_to_32_bits() -> None:
    bare_abs = ctypes.CDLL(None)["abs"]
    try:
        got: object = bare_abs((1 << 32) + 5)
    except (ctypes.ArgumentError, OverflowError) as exc:  # a 32-bit C long refuses instead
        got = exc
    assert got != (1 << 32) + 5  # what tutorial 00a's step 6 checks: never passed through intact


def bare_llabs() -> Any:
    """libc's ``long long llabs(long long)`` with its restype declared and its argtypes left out."""
    llabs = ctypes.CDLL(None)["llabs"]
    llabs.restype = ctypes.c_longlong
    return llabs


def test_an_undeclared_int_reaches_a_64_bit_parameter_sign_extended(fake_host_libcuda: Path) -> None:
    llabs = bare_llabs()
    assert llabs((1 << 32) + 5) == 5  # the upper half is zero: not whatever the register held
    assert llabs((1 << 32) - 5) == 5  # 0xfffffffb arrived as -5, not as 4,294,967,291
    proc = run_raw(DECLARATIONS, RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    step6 = proc.stdout.split("== step 6:")[1].split("== step 7:")[0]
    assert "undeclared llabs(0x100000005) -> 5; undeclared llabs(0xfffffffb) -> 5" in step6, proc.stdout
    assert "ok: an undeclared int reaches a 64-bit parameter sign-extended" in step6
    assert "whatever" not in step6  # the upper half is the int's sign, shown above


def test_an_undeclared_ctypes_object_is_passed_whole(fake_host_libcuda: Path) -> None:
    llabs, wide = bare_llabs(), (1 << 40) + 5
    assert llabs(ctypes.c_uint64(wide)) == wide  # a ctypes object brings its own C type: all 64 bits
    assert llabs(wide) == 5  # a plain int is passed as a C int
    proc = run_raw(KERNEL, RAWCUDA_LIBCUDA=str(fake_host_libcuda))
    step3 = proc.stdout.split("== step 3:")[1].split("== step 4:")[0]
    address = int(re.search(r"a at (0x[0-9a-f]+)", step3)[1], 16)
    whole = re.search(r"llabs\(a\)\s+-> (0x[0-9a-f]+)", step3)
    cut = re.search(r"llabs\(a\.value\) -> (0x[0-9a-f]+)", step3)
    assert whole and int(whole[1], 16) == address, step3  # the CUdeviceptr object, undeclared
    assert cut and int(cut[1], 16) == abs(ctypes.c_int(address).value) != address, step3  # a.value
    assert "cuMemFree_v2(a) would still free a" in step3


def test_the_errcheck_names_the_code(declarations: ModuleType, handmade: ModuleType, fake_host_libcuda: Path) -> None:
    lib = ctypes.CDLL(str(fake_host_libcuda))
    declarations.declare(lib)
    fn = declarations.bind(lib, declarations.CU_MEM_ALLOC_ROW, handmade.make_errcheck(lib))
    with pytest.raises(handmade.DriverError) as info:  # no current context yet: the fake answers as the driver does
        fn(ctypes.byref(ctypes.c_uint64()), 1)
    assert (info.value.code, info.value.name, info.value.call) == (201, "CUDA_ERROR_INVALID_CONTEXT", "cuMemAlloc_v2")
    assert handmade.error_name(lib, 12345) == "an unknown code"


# --- tutorials 09, 10, 13: the struct or callback written out before the class --------------------------------------
HAND_STRUCTS = [
    ("09_graphs.py", "KernelNodeParams", rawtypes.CUDA_KERNEL_NODE_PARAMS),
    ("13_growable_buffer.py", "MemAllocationProp", rawtypes.CUmemAllocationProp),
]


@pytest.mark.parametrize(("name", "struct", "theirs"), HAND_STRUCTS, ids=[s for _, s, _ in HAND_STRUCTS])
def test_hand_written_struct_is_laid_out_as_rawcudas(name: str, struct: str, theirs: type) -> None:
    mine = getattr(load_tutorial(name), struct)
    assert ctypes.sizeof(mine) == ctypes.sizeof(theirs)
    assert headercheck_paths(mine) == headercheck_paths(theirs)


def headercheck_paths(cls: type) -> list[tuple[str, int, int]]:
    """(dotted field, offset, size) of every field, nested structs included -- what the layout probe compares."""
    rows = []
    for name, ftype, *_ in cls._fields_:
        offset, size = getattr(cls, name).offset, ctypes.sizeof(ftype)
        rows.append((name, offset, size))
        if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
            rows += [(f"{name}.{sub}", offset + o, s) for sub, o, s in headercheck_paths(ftype)]
    return rows


@needs_header
@needs_compiler
@pytest.mark.parametrize(("name", "struct", "theirs"), HAND_STRUCTS, ids=[s for _, s, _ in HAND_STRUCTS])
def test_hand_written_struct_matches_the_c_compiler(name: str, struct: str, theirs: type) -> None:
    mine = getattr(load_tutorial(name), struct)
    probe = type(f"{struct}Probe", (mine,), {"_c_name_": theirs._c_name_})  # the C name to compare with
    assert headercheck.struct_layout_problems(str(HEADER), [probe]) == []


def test_hand_written_callback_type_is_rawcudas() -> None:
    tutorial = load_tutorial("10_asyncio.py")
    assert tutorial.HostFn._restype_ is rawtypes.CUhostFn._restype_ is None  # void
    assert tutorial.HostFn._argtypes_ == rawtypes.CUhostFn._argtypes_ == (ctypes.c_void_p,)
    assert tutorial.HostFn._flags_ == rawtypes.CUhostFn._flags_  # the same calling convention
    assert isinstance(tutorial.ON_HOST, tutorial.HostFn)  # module level: it outlives every call


def test_callback_lifetime_demonstration_is_real() -> None:
    tutorial = load_tutorial("10_asyncio.py")
    assert tutorial.freed_when_unreferenced() == (True, True)


def test_host_function_records_its_call_and_never_raises() -> None:
    tutorial = load_tutorial("10_asyncio.py")
    tutorial.host_called.clear()
    tutorial.ON_HOST(7)  # through the C pointer, as the driver calls it
    assert tutorial.host_called.is_set() and tutorial.host_calls[-1][0] == 7
    tutorial.host_calls = None  # break the recording: the host function must swallow the error, not raise
    try:
        tutorial.on_host(8)
    finally:
        tutorial.host_calls = []


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: test_tutorials.py runs them for real")
@pytest.mark.parametrize("name", ["09_graphs.py", "10_asyncio.py", "13_growable_buffer.py"])
def test_raw_first_step_runs_without_a_gpu(name: str) -> None:
    proc = run_tutorial(TUTORIALS / name, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_NO_GPU and "Traceback" not in output, output
    first = proc.stdout.split("== step 2:")[0]
    assert "== step 1: raw ctypes first" in first and "   ok: " in first, output  # verified with no driver
