"""fork() after CUDA was initialized: the child gets a clear error that says to use 'spawn'.

CUDA state (contexts, memory, streams) does not survive fork(). A forked child that touches rawcuda
must fail loudly with advice, never crash or hang, and never free the parent's handles from its copy.
Here the parent initializes the fake libcuda (tests/fakecuda/); on a GPU: tests/gpu/test_fork.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import needs_fork, run_python

pytestmark = needs_fork


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
