"""fork() after CUDA was initialized: the child gets a clear error that says to use 'spawn'.

CUDA state (contexts, memory, streams) does not survive fork(). A forked child that touches rawcuda
must fail loudly with advice, never crash or hang, and never free the parent's handles from its copy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_python

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork() is a POSIX call")

CPU_SCRIPT = """
import json, os, rawcuda
rawcuda.init()                                  # the parent initializes CUDA (here: the fake libcuda)
read, write = os.pipe()
pid = os.fork()
if pid == 0:                                    # the child
    os.close(read)
    try:
        rawcuda.init()
        outcome = "no error"
    except rawcuda.ForkedProcessError as exc:
        outcome = str(exc)
    os.write(write, outcome.encode())
    os._exit(0)
os.close(write)
message = os.read(read, 4096).decode()
_, status = os.waitpid(pid, 0)
print(json.dumps({"message": message, "status": status, "parent_still_works": rawcuda.driver_version()}))
"""


def test_forked_child_is_told_to_use_spawn(fake_libcuda: Path) -> None:
    proc = run_python(CPU_SCRIPT, RAWCUDA_LIBCUDA=str(fake_libcuda))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 0 and result["parent_still_works"] == [13, 0]
    assert "forked from one that had already initialized CUDA" in result["message"]
    assert "set_start_method('spawn')" in result["message"]


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


@pytest.mark.gpu
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
