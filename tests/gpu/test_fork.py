"""fork() after CUDA was initialized on a real GPU: the child gets a clear error that says to use 'spawn'.

The parent holds device memory; a child forked from it tries four things (read the buffer, allocate, make a
stream, synchronize): each must raise a rawcuda error that says to use 'spawn', and the parent's buffer must
be unharmed. Without a GPU (the fake libcuda): tests/cpu/test_fork.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import needs_fork, run_python

pytestmark = [pytest.mark.gpu, needs_fork]


GPU_SCRIPT = """
import json, multiprocessing as mp, numpy as np, rawcuda
buf = rawcuda.DeviceBuffer.from_array(np.arange(16, dtype=np.float32))   # CUDA is now initialized

def child(queue):
    outcomes = []
    for attempt in (lambda: buf.to_array(), lambda: rawcuda.DeviceBuffer.empty(4),
                    lambda: rawcuda.Stream(), lambda: rawcuda.cu.cuCtxSynchronize()):
        try:
            attempt()
            outcomes.append("no error")
        except rawcuda.RawCudaError as exc:
            outcomes.append(type(exc).__name__ + ": " + str(exc))
    queue.put(outcomes)

if __name__ == "__main__":
    fork = mp.get_context("fork")
    queue = fork.Queue()
    p = fork.Process(target=child, args=(queue,))
    p.start()
    outcomes = queue.get(timeout=120)
    p.join(120)
    ok = bool((buf.to_array() == np.arange(16)).all())   # the parent is unharmed
    print(json.dumps({"outcomes": outcomes, "exitcode": p.exitcode, "parent_ok": ok}))
"""


def test_forked_child_on_the_gpu(tmp_path: Path) -> None:
    script = tmp_path / "fork_child.py"
    script.write_text(GPU_SCRIPT)
    proc = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exitcode"] == 0 and result["parent_ok"] is True
    for outcome in result["outcomes"]:
        assert "spawn" in outcome, outcome
    assert result["outcomes"][0].startswith("ForkedProcessError")


BLOCK_ENDS_IN_A_FORKED_CHILD = """
import os, sys
import rawcuda
from rawcuda import Context
primary = rawcuda.default_context()
a = Context.create()
with primary:
    with a:
        pid = os.fork()
        if pid == 0:
            sys.exit(5)  # both blocks end in the child on the way out
        _, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status))
a.close()
"""


def test_with_blocks_ending_in_a_forked_child_raise_nothing() -> None:
    # Before: each block's __exit__ popped through the child's unusable driver --
    # NotInitializedError out of the exit, so sys.exit(5) became status 1, with a traceback on stderr.
    proc = run_python(BLOCK_ENDS_IN_A_FORKED_CHILD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "child status 5"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
