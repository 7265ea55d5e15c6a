"""The public API is what ``help(rawcuda)``, ``dir(rawcuda)`` and ``__all__`` show -- all of it, and nothing else.

Before: ``__all__`` listed only the exceptions, so ``from rawcuda import *`` then ``DeviceBuffer`` was a
NameError, help() documented 23 exception classes and no DeviceBuffer, and dir() showed this file's own
imports (``Any``, ``annotations``, ``importlib``). None of it may touch the driver: these run without one.
"""

from __future__ import annotations

import pydoc
from pathlib import Path

import rawcuda
from tests.helpers import ROOT, run_python

CORE = ("DeviceBuffer", "Module", "Function", "Stream", "Event", "Context", "PinnedBuffer", "init", "trace", "ops")


def test_star_import_gives_every_public_name_without_a_driver() -> None:
    proc = run_python(
        "from rawcuda import *\n"
        "import rawcuda\n"
        "missing = [n for n in rawcuda.__all__ if n not in globals()]\n"
        "print('missing', missing)\n"
        "print(DeviceBuffer.__name__, Module.__name__, Stream.__name__, init.__name__)\n",
        RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1",
    )
    assert proc.returncode == 0, proc.stderr
    assert "missing []" in proc.stdout and "DeviceBuffer Module Stream init" in proc.stdout


def test_dir_shows_the_public_names_and_nothing_internal() -> None:
    names = dir(rawcuda)
    assert set(CORE) <= set(names)
    assert sorted(names) == sorted(rawcuda.__all__)
    internal = [
        n
        for n in names
        if n in ("Any", "annotations", "importlib", "typing") or (n.startswith("_") and n != "__version__")
    ]
    assert internal == []


def test_help_documents_the_classes_and_functions() -> None:
    text = pydoc.render_doc(rawcuda, renderer=pydoc.plaintext)
    for name in ("class DeviceBuffer", "class Module", "class Stream", "class Context", "class Event"):
        assert name in text, name
    for function in ("init(", "trace(", "capture(", "default_context("):
        assert function in text, function


def test_import_touches_no_driver_and_no_numpy() -> None:
    # What it loads, not how long it takes: bench/imports.py measures the time.
    proc = run_python(
        "import sys\nimport rawcuda\nprint('numpy' in sys.modules, 'rawcuda.checked.binding' in sys.modules)\n",
        RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1",
    )
    assert proc.stdout.split() == ["False", "False"], proc.stdout + proc.stderr


def test_nvrtc_loads_what_compiling_needs_and_not_the_launch_stack() -> None:
    # `rawcuda.nvrtc` once loaded Module, Function, the argument packer and numpy just to compile a string.
    proc = run_python(
        "import sys\nimport rawcuda\nrawcuda.nvrtc\n"
        "print(*(name in sys.modules for name in ('numpy', 'rawcuda.core.module', 'rawcuda.core.function')))\n",
        RAWCUDA_LIBCUDA="/nonexistent/libcuda.so.1",
    )
    assert proc.stdout.split() == ["False", "False", "False"], proc.stdout + proc.stderr


def test_the_package_says_it_is_typed_and_licensed() -> None:
    assert (Path(rawcuda.__file__).parent / "py.typed").is_file(), "PEP 561: type checkers read the hints"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"py.typed"' in pyproject, "py.typed must ship in the wheel (package-data)"
    assert 'license = "MIT"' in pyproject and (ROOT / "LICENSE").is_file()
    assert "MIT License" in (ROOT / "LICENSE").read_text()
