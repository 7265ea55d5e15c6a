"""What closing a context leaves current on the thread -- on tests/fakecuda/fakectx.c, without a GPU.

The rule (rawcuda/contextstack.py): ``close()`` and the garbage-collection fallback leave the thread's stack
as they found it, except for the closing context itself, which leaves the thread -- and when that leaves
nothing current outside a ``with`` block, the device's primary context is put back if someone holds it.
The fake keeps every thread's stack as cuda.h describes it (cuCtxSetCurrent replaces the top, cuCtxDestroy
pops a current context, a primary release never pops), and lets a test read the whole stack, not only its
top. Each scenario runs in a fresh interpreter (the driver is opened once per process). The same scenarios
on the H200: tests/gpu/test_context_stack.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.helpers import TESTS_DIR, build_shared_library, run_python

# Names the scenarios print instead of handles: each script maps the handles it knows to these.
PREAMBLE = """
import ctypes, gc, json, os, threading
import rawcuda
from rawcuda import Context
from rawcuda.checked import cu
fake = ctypes.CDLL(os.environ["RAWCUDA_LIBCUDA"])
fake.fakectx_entry.restype = ctypes.c_void_p
fake.fakectx_destroyed.argtypes = [ctypes.c_void_p]
names = {}

def stack():
    return [names.get(fake.fakectx_entry(i) or 0, "?") for i in range(fake.fakectx_depth())]

def name(**contexts):
    for key, ctx in contexts.items():
        names[ctx if isinstance(ctx, int) else ctx.raw_handle] = key

def other_library_primary():
    # What the CUDA runtime (CuPy, torch) does: retain the primary context and make it current, unseen by rawcuda.
    handle = ctypes.c_void_p()
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(handle), 0)
    cu.cuCtxSetCurrent(handle)
    name(primary=handle.value)
    return handle.value

out = {}
"""


@pytest.fixture(scope="module")
def fake_ctx_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fakectx") / "libfakectx.so"
    return build_shared_library(TESTS_DIR / "fakecuda" / "fakectx.c", out, "the fake libcuda with context stacks")


def scenario(library: Path, body: str) -> dict:
    """Run PREAMBLE + ``body`` (which fills the dict ``out``) with the fake driver; ``out`` comes back."""
    code = PREAMBLE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = run_python(code, RAWCUDA_LIBCUDA=str(library))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the fake itself ------------------------------------------------------------------------------------------------
def test_the_fake_keeps_the_stack_as_cuda_h_says(fake_ctx_libcuda: Path) -> None:
    result = scenario(
        fake_ctx_libcuda,
        """
        a, b = ctypes.c_void_p(), ctypes.c_void_p()
        cu.cuCtxCreate(ctypes.byref(a), None, 0, 0)
        cu.cuCtxCreate(ctypes.byref(b), None, 0, 0)
        name(a=a.value, b=b.value)
        out["created"] = stack()
        cu.cuCtxSetCurrent(a)
        out["set"] = stack()
        cu.cuCtxDestroy(a)
        out["destroyed"] = stack()
        cu.cuCtxDestroy(b)
        out["not current"] = stack()
        out["b destroyed"] = bool(fake.fakectx_destroyed(b))
        """,
    )
    assert result == {
        "created": ["a", "b"],  # cuCtxCreate pushes
        "set": ["a", "a"],  # cuCtxSetCurrent replaces the top
        "destroyed": ["a"],  # cuCtxDestroy popped the current one (the entry under it names it too)
        "not current": ["a"],  # b was not on top: nothing popped
        "b destroyed": True,
    }


# --- what cannot be helped ------------------------------------------------------------------------------------------
def test_a_context_closed_on_another_thread_stays_current_here_until_rawcuda_is_called(
    fake_ctx_libcuda: Path,
) -> None:
    # The driver keeps a current context per thread, and only that thread can change it: closing c on thread B
    # cannot take it off thread A. rawcuda's own next call on A asks the driver and switches; another library's
    # call there gets CUDA_ERROR_CONTEXT_IS_DESTROYED (docs/architecture.md, "Primary vs created").
    result = scenario(
        fake_ctx_libcuda,
        """
        primary = rawcuda.default_context()
        c = Context.create()
        name(primary=primary, c=c)
        primary.activate()
        c.mem_info()
        worker = threading.Thread(target=c.close)
        worker.start()
        worker.join()
        out["here"] = stack()
        out["destroyed"] = bool(fake.fakectx_destroyed(c.raw_handle))
        primary.mem_info()
        out["after a rawcuda call"] = stack()
        """,
    )
    assert result == {"here": ["c"], "destroyed": True, "after a rawcuda call": ["primary"]}
