"""The leak check names the caller's line, never a line inside rawcuda -- whichever folder of rawcuda it is.

A leaked buffer's report says where it was allocated: the innermost frame outside the package. Every folder
counts as inside (core/, core/guards/, extras/ ...), so a buffer made through ``DeviceBuffer.zeros`` is reported
at the test's line, not at ``core/devicebuffer.py``.
"""

from __future__ import annotations

import os
import tracemalloc
from types import SimpleNamespace

import pytest

import rawcuda
from rawcuda.testing import leaks

ROOT = os.path.dirname(os.path.abspath(rawcuda.__file__))


def test_the_package_dir_is_the_whole_package() -> None:
    assert ROOT + os.sep == leaks.PACKAGE_DIR


@pytest.mark.parametrize("inner", ["core/devicebuffer.py", "core/guards/pending.py", "extras/growable.py"])
def test_an_allocation_is_placed_at_the_callers_line(monkeypatch: pytest.MonkeyPatch, inner: str) -> None:
    caller = os.path.join(os.getcwd(), "test_child.py")
    inside = os.path.join(ROOT, inner)
    frames = [SimpleNamespace(filename=caller, lineno=34), SimpleNamespace(filename=inside, lineno=9)]
    monkeypatch.setattr(tracemalloc, "is_tracing", lambda: True)
    monkeypatch.setattr(tracemalloc, "get_object_traceback", lambda obj: frames)
    assert leaks._allocated_at(object()) == "test_child.py:34"
