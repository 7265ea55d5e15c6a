"""A launch in a context that stopped being usable is refused before the driver, on the fast path too.

The fast path of ``Function.launch`` and of a bound launch reads no usable flag: a context that becomes
unusable (poisoned by a sticky error, closed, or inherited by a forked child) moves the close count, so the
next launch takes the checked path, which refuses it. These run in a child over bench/fake/fakelaunch.c and
count the launches that reached the driver: a refused launch must reach none.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import over_fake_launch

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the fake driver")

PREAMBLE = """
import ctypes, json, os, sys
import rawcuda
from rawcuda import DeviceBuffer, Module, Stream
from rawcuda.checked.errors import ContextPoisonedError, CudaError, ForkedProcessError
fake = ctypes.CDLL(sys.argv[1])
fake.fakelaunch_count.restype = ctypes.c_ulonglong
stream = Stream()
fn = Module(rawcuda.kernels.ptx_path("vector_add")).function("vector_add")
a, b, c = (DeviceBuffer.zeros(256) for _ in range(3))
bound = fn.bind(1, 256, c, a, b, 256, stream=stream)
for _ in range(3):  # the second and third take the fast paths
    fn.launch(1, 256, c, a, b, 256, stream=stream)
    bound()
before = fake.fakelaunch_count()

def refused(launch, kind):
    try:
        launch()
    except kind as exc:
        return type(exc).__name__
    return "launched"
"""

POISONED = (
    PREAMBLE
    + """
fn.context.poison(CudaError(700, call="cuStreamSynchronize"))  # what a sticky fault seen later does
got = [
    refused(lambda: fn.launch(1, 256, c, a, b, 256, stream=stream), ContextPoisonedError),
    refused(bound, ContextPoisonedError),
]
print(json.dumps({"got": got, "reached": fake.fakelaunch_count() - before}))
"""
)

FORKED = (
    PREAMBLE
    + """
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    got = [
        refused(lambda: fn.launch(1, 256, c, a, b, 256, stream=stream), ForkedProcessError),
        refused(bound, ForkedProcessError),
    ]
    os.write(write, json.dumps({"got": got, "reached": fake.fakelaunch_count() - before}).encode())
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
print(os.read(read, 4096).decode())
"""
)


def test_a_poisoned_context_refuses_a_cached_launch_and_a_bound_one(tmp_path: Path) -> None:
    result = over_fake_launch(POISONED, tmp_path)
    assert result == {"got": ["ContextPoisonedError", "ContextPoisonedError"], "reached": 0}


def test_a_forked_child_refuses_a_cached_launch_and_a_bound_one(tmp_path: Path) -> None:
    result = over_fake_launch(FORKED, tmp_path)
    assert result == {"got": ["ForkedProcessError", "ForkedProcessError"], "reached": 0}
