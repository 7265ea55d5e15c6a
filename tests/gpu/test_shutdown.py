"""Shutdown: processes that exit with live objects, in every order, must exit cleanly.

Each case is a child process that creates objects of several kinds in a given order and then simply ends
-- normally, by ``sys.exit`` half-way, by an uncaught exception half-way, or after closing its context
early -- with work still queued on a stream. rawcuda's finalizers must neither crash nor print: at
interpreter exit they leak (the process teardown returns everything) rather than call into a driver that
may already be gone. So every child must exit with status 0 and an EMPTY stderr -- except the ones that
raise on purpose, which must exit with status 1 and print exactly that one traceback.

The orders are a seeded sample of the permutations of the kinds, plus a few chosen by hand.
tests/cpu/test_shutdown.py checks on any machine that the sample covers every kind and ending.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass

import pytest

from tests.helpers import run_python

pytestmark = pytest.mark.gpu

KINDS = (
    "buffer",
    "view",
    "pinned",
    "managed",
    "stream-with-work",
    "event",
    "module",
    "function",
    "created-context",
    "default-context",
)
PER_CASE = 5  # kinds per child
SAMPLED = 24  # permutations drawn at random (seeded)
SEED = 2024
ENDINGS = ("normal", "exit-midway", "raise-midway", "close-context-early")
RAISED = "RuntimeError: deliberate failure half-way through"
TIMEOUT_S = 180

# The child: create the kinds in order (in a created context or the default one), then end as told.
CHILD = """
import json, sys
import numpy as np
import rawcuda
from rawcuda import Context, DeviceBuffer, Event, ManagedBuffer, Module, PinnedBuffer, Stream, kernels, ops

spec = json.loads({spec!r})
ctx = Context.create(0) if spec["created"] else rawcuda.default_context()
live = []
WORK = 1 << 24  # floats per saxpy, and LAUNCHES of them: milliseconds of work, queued in far less, so
LAUNCHES = 200  # the process usually exits while the stream is still busy

def make(kind, ctx):
    if kind == "buffer":
        return DeviceBuffer.from_array(np.arange(1000, dtype=np.float32), context=ctx)
    if kind == "view":
        return DeviceBuffer.from_array(np.arange(1000, dtype=np.float32), context=ctx)[100:200]
    if kind == "pinned":
        pinned = PinnedBuffer.from_array(np.arange(1000, dtype=np.float32), context=ctx)
        return [pinned, pinned.array[10:20]]  # an outside numpy view keeps the pinned memory alive
    if kind == "managed":
        managed = ManagedBuffer(1000, context=ctx)
        managed.array[:] = 1.0
        return managed
    if kind == "stream-with-work":
        stream = Stream(ctx)
        x = DeviceBuffer.zeros(WORK, context=ctx, stream=stream)
        y = DeviceBuffer.zeros(WORK, context=ctx, stream=stream)
        for _ in range(LAUNCHES):
            ops.saxpy(y, 0.5, x, stream=stream)
        y.copy_from(np.ones(WORK, np.float32), stream=stream)  # a pageable async copy, kept alive by the stream
        return [stream, x, y]
    if kind == "event":
        return Event(ctx).record()
    if kind == "module":
        return Module(kernels.ptx_path("vector_add"), context=ctx)
    if kind == "function":
        function = Module(kernels.ptx_path("saxpy"), context=ctx).function("saxpy")  # keeps its module alive
        x, y = DeviceBuffer.zeros(1000, context=ctx), DeviceBuffer.zeros(1000, context=ctx)
        function.launch(4, 256, y, 2.0, x, 1000)
        return [function, x, y]
    if kind == "created-context":
        other = Context.create(0)
        return [other, DeviceBuffer.zeros(1000, context=other), Stream(other)]
    if kind == "default-context":
        default = rawcuda.default_context()
        return [default, DeviceBuffer.zeros(1000, context=default)]
    raise ValueError(kind)

for position, kind in enumerate(spec["order"]):
    if position == spec["midway"]:
        if spec["ending"] == "exit-midway":
            print("exiting half-way", flush=True)
            sys.exit(0)
        if spec["ending"] == "raise-midway":
            raise RuntimeError("deliberate failure half-way through")
        if spec["ending"] == "close-context-early":
            ctx.close()  # closes what it holds; the rest is created in the default context
            ctx = rawcuda.default_context()
    live.append(make(kind, ctx))
print("exiting with", len(live), "live groups", flush=True)
"""


@dataclass(frozen=True)
class Spec:
    order: tuple[str, ...]
    ending: str
    created: bool  # objects go into a created context (else the default, primary one)
    midway: int

    @property
    def id(self) -> str:
        context = "created" if self.created else "default"
        return f"{self.ending}-{context}-" + "+".join(self.order)

    def json(self) -> str:
        return json.dumps({"order": self.order, "ending": self.ending, "created": self.created, "midway": self.midway})


def specs() -> list[Spec]:
    rng = random.Random(SEED)
    orders = list(itertools.permutations(KINDS, PER_CASE))
    chosen = [tuple(order) for order in rng.sample(orders, SAMPLED)]
    cases = [
        Spec(order, ENDINGS[i % len(ENDINGS)], bool(i % 3 == 0), rng.randrange(1, PER_CASE))
        for i, order in enumerate(chosen)
    ]
    # By hand: every kind in both directions, in both contexts, and the context closed before anything.
    cases += [
        Spec(KINDS, "normal", False, len(KINDS)),
        Spec(KINDS[::-1], "normal", True, len(KINDS)),
        Spec(KINDS, "close-context-early", True, 1),
        Spec(KINDS[::-1], "close-context-early", False, len(KINDS) - 1),
        Spec(KINDS, "raise-midway", True, len(KINDS) - 1),
        Spec(KINDS[::-1], "exit-midway", False, len(KINDS) - 1),
    ]
    return cases


SPECS = specs()


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_exit_with_live_objects(spec: Spec) -> None:
    proc = run_python(CHILD.format(spec=spec.json()), timeout=TIMEOUT_S)
    if spec.ending == "raise-midway":
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.rstrip("\n").splitlines()
        assert lines[0] == "Traceback (most recent call last):" and lines[-1] == RAISED, proc.stderr
        assert proc.stderr.count("Traceback") == 1 and "Exception ignored" not in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, f"status {proc.returncode}\n{proc.stderr}"
    assert proc.stderr == "", proc.stderr
    expected = "exiting half-way" if spec.ending == "exit-midway" else "exiting with"
    assert expected in proc.stdout, proc.stdout


SHUTDOWN_SCRIPT = """
import numpy as np, rawcuda
from rawcuda import Context, DeviceBuffer, Stream, Event, Module, PinnedBuffer, ManagedBuffer
order = {order!r}
ctx = Context.create(0) if "created" in order else rawcuda.default_context()
objs = {{
    "buffer": lambda: DeviceBuffer.from_array(np.arange(1000, dtype=np.float32), context=ctx),
    "stream": lambda: Stream(ctx),
    "event": lambda: Event(ctx).record(),
    "module": lambda: Module(rawcuda.kernels.ptx_path("vector_add"), context=ctx),
    "pinned": lambda: PinnedBuffer(100, context=ctx),
    "managed": lambda: ManagedBuffer(100, context=ctx),
}}
live = [objs[name]() for name in order if name in objs]
fn = live[-1].function("vector_add") if order[-1] == "module" else None
if "close-context" in order:
    ctx.close()
print("exiting with", len(live), "live objects")
"""


@pytest.mark.parametrize(
    "order",
    [
        ["buffer", "stream", "event", "module", "pinned", "managed"],
        ["module", "pinned", "event", "stream", "buffer"],
        ["created", "buffer", "stream", "module"],
        ["created", "managed", "event", "close-context"],
        ["created", "pinned", "buffer", "close-context", "module"],
    ],
)
def test_exit_with_live_objects_is_clean(order: list[str]) -> None:
    if order[-1] == "module" and "close-context" in order:
        order = [o for o in order if o != "module"]
    proc = run_python(SHUTDOWN_SCRIPT.format(order=order))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "exiting with" in proc.stdout
