"""Tutorial 09 -- CUDA graphs: capture the seed's transformer step, replay it, change one kernel, time it.

The seed article: "when the number of kernel calls reaches the hundreds, the launch overhead adds up (each
~5-10 us). CUDA Graphs capture the whole launch sequence as a graph and replay it as a single operation
... in a typical transformer inference pipeline (10 matmul kernels + 5 element-wise operations) the
end-to-end latency drops by 15%-25%." cust has no public wrapper for graphs (its ``graph`` module is
private and unfinished), so the seed falls back to hand-written FFI. rawcuda's is four files --
``rawcuda/graphs/streamcapture.py`` (capture), ``rawcuda/graphs/graph.py``, ``rawcuda/graphs/kernelnode.py`` and
``rawcuda/graphs/graphexec.py`` -- over the rows of ``rawcuda/ffi/cuda/graph.py``.

It starts where the seed says you must: by hand. The first steps write ``CUDA_KERNEL_NODE_PARAMS`` as a
raw ``ctypes.Structure`` (fields, sizes, padding), add one vector_add node with a hand-bound
``cuGraphAddKernelNode_v2``, and prove who owns the ``kernelParams`` array (the driver copies it, and the
values it points to, during the call); then the same node through rawcuda's ``Graph.add_kernel``.

Then it builds exactly that pipeline -- 5 layers of ``act(x @ Wa) @ Wb`` -- runs it with ordinary
launches, captures the *same Python code* into a graph, replays it, proves the replay computes the same
thing bit for bit, changes the weights of one kernel inside the executable graph, shows what capture
forbids, and times launches against replay. bench/graphs.py measures the seed's claim at several sizes.

Run:  python tutorials/09_graphs.py [--step]
"""

from __future__ import annotations

import ctypes
import statistics
import time
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

import numpy as np
from _tutorial import Tutorial, run

from rawcuda import Device, DeviceBuffer, Graph, Module, Stream, StreamCaptureError, kernels, ops
from rawcuda.checked import cu, raise_for
from rawcuda.ffi.constants import StreamCaptureStatus
from rawcuda.ffi.types import CUDA_KERNEL_NODE_PARAMS
from rawcuda.graphs.streamcapture import capture, capture_status

TOKENS = 64  # rows of activations: a small batch, where launch overhead matters most
HIDDEN = 256
LAYERS = 5  # each: matmul -> activation -> matmul: 10 matmuls + 5 element-wise kernels
KERNELS = 3 * LAYERS
THIRD = 2  # index of the kernel whose arguments a later step changes (the 2nd matmul of layer 0)
TOLERANCE = 1e-4  # of max |reference|: a float32 chain of 10 matmuls is off by about 1e-6 of it
WARMUP = 20
REPS = 200
US_PER_S = 1_000_000
NAN = np.float32(np.nan)
RAW_N = 100_003  # elements of the hand-built node's vector add (not a multiple of 4 or 256)
BLOCK = 256
GRAPH_FLAGS = 0  # cuGraphCreate / cuGraphInstantiateWithFlags: no flags


class KernelNodeParams(ctypes.Structure):
    """cuda.h's CUDA_KERNEL_NODE_PARAMS (= CUDA_KERNEL_NODE_PARAMS_v2), written out by hand."""

    _fields_ = [
        ("func", c_void_p),  # CUfunction: the kernel to run
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),  # dynamic shared memory per block
        ("kernelParams", POINTER(c_void_p)),  # void **: entry i points at argument i, as for cuLaunchKernel
        ("extra", POINTER(c_void_p)),  # void **: the other way to pass arguments; NULL when kernelParams is used
        ("kern", c_void_p),  # CUkernel: used only when func is NULL
        ("ctx", c_void_p),  # CUcontext: NULL = the current one (ignored when func is set)
    ]


def layout(struct: type[ctypes.Structure]) -> list[tuple[str, int, int]]:
    """(field, offset, size) of every field of a ctypes Structure."""
    return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_]


def layout_text(struct: type[ctypes.Structure]) -> str:
    lines, end = [], 0
    for name, offset, size in layout(struct):
        if offset > end:
            lines.append(f"  {end:3}  {offset - end:2} bytes of padding (the next field is 8-byte aligned)")
        lines.append(f"  {offset:3}  {size:2}  {name}")
        end = offset + size
    return "offset size field\n" + "\n".join(lines) + f"\nsizeof = {ctypes.sizeof(struct)}"


def checked(code: int, name: str, *args: Any) -> None:
    """A hand-bound call's CUresult: rawcuda's exception for it when it is not 0 (rawcuda.checked.raise_for)."""
    if code:
        raise_for(code, name, args)


def gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class Pipeline:
    """Device buffers for the pipeline, one output buffer per kernel (so every step's result is checkable)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.x_host = rng.standard_normal((TOKENS, HIDDEN), dtype=np.float32)
        self.w_host = [self.new_weight() for _ in range(2 * LAYERS)]
        self.b_host = [rng.standard_normal(HIDDEN).astype(np.float32) for _ in range(LAYERS)]
        self.x = DeviceBuffer.from_array(self.x_host)
        self.w = [DeviceBuffer.from_array(w) for w in self.w_host]
        self.b = [DeviceBuffer.from_array(b) for b in self.b_host]
        self.outs = [DeviceBuffer.empty((TOKENS, HIDDEN)) for _ in range(KERNELS)]

    def new_weight(self) -> np.ndarray:
        # Scaled by 1/sqrt(HIDDEN) so activations keep their size through 10 matmuls.
        return (self.rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)

    def run(self, stream: Stream) -> None:
        """The forward pass: 15 launches on ``stream``. The same code runs it *or* records it."""
        h, k = self.x, 0
        for layer in range(LAYERS):
            t, u, nxt = self.outs[k : k + 3]
            ops.matmul(t, h, self.w[2 * layer], stream=stream)
            if layer % 2 == 0:
                ops.bias_relu(u, t, self.b[layer], stream=stream)
            else:
                ops.gelu(u, t, stream=stream)
            ops.matmul(nxt, u, self.w[2 * layer + 1], stream=stream)
            h, k = nxt, k + 3

    def reference(self, x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
        h = x.astype(np.float64)
        for layer in range(LAYERS):
            t = h @ weights[2 * layer].astype(np.float64)
            u = np.maximum(t + self.b_host[layer], 0.0) if layer % 2 == 0 else gelu64(t)
            h = u @ weights[2 * layer + 1].astype(np.float64)
        return h

    def poison(self, stream: Stream) -> None:
        for out in self.outs:
            out.fill(NAN, stream=stream)

    def results(self, stream: Stream) -> list[np.ndarray]:
        return [out.to_array(stream=stream) for out in self.outs]


def close_to(got: np.ndarray, expected: np.ndarray) -> bool:
    return not np.isnan(got).any() and float(np.max(np.abs(got - expected))) <= TOLERANCE * np.max(np.abs(expected))


def wall_us(work: object, stream: Stream) -> float:
    """Median host microseconds from queuing ``work`` to the stream being idle again (end-to-end latency)."""
    for _ in range(WARMUP):
        work()
    stream.synchronize()
    times = []
    for _ in range(REPS):
        start = time.perf_counter()
        work()
        stream.synchronize()
        times.append((time.perf_counter() - start) * US_PER_S)
    return statistics.median(times)


def raw_kernel_node(t: Tutorial, rng: np.random.Generator) -> None:
    """Steps 1-3: the struct by hand, one node added with it by hand, then the same node with rawcuda's class."""
    t.step("raw ctypes first: CUDA_KERNEL_NODE_PARAMS written out as a ctypes.Structure")
    t.term("graph")  # the struct describes one kernel node of one
    t.say(layout_text(KernelNodeParams))
    t.check(
        ctypes.sizeof(KernelNodeParams) == ctypes.sizeof(CUDA_KERNEL_NODE_PARAMS)
        and layout(KernelNodeParams) == layout(CUDA_KERNEL_NODE_PARAMS),
        "the size and every field offset equal rawcuda's CUDA_KERNEL_NODE_PARAMS (which headercheck proves "
        "against the C compiler)",
    )

    t.step("one kernel node by hand: a hand-bound cuGraphAddKernelNode_v2 -- and who owns kernelParams")
    module = Module(kernels.ptx_path("vector_add"))
    vector_add = module.function("vector_add")
    stream = Stream()
    a, b = rng.standard_normal(RAW_N, dtype=np.float32), rng.standard_normal(RAW_N, dtype=np.float32)
    d_a, d_b = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    d_c, d_decoy = DeviceBuffer.empty(RAW_N), DeviceBuffer.empty(RAW_N)
    for out in (d_c, d_decoy):
        out.fill(NAN)  # poison both: only the buffer the node really names may change
    # vector_add(float *c, const float *a, const float *b, size_t n): four 8-byte values, one pointer to each
    values = [c_uint64(d_c.ptr), c_uint64(d_a.ptr), c_uint64(d_b.ptr), c_uint64(RAW_N)]
    kernel_params = (c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    grid = (RAW_N + BLOCK - 1) // BLOCK
    params = KernelNodeParams(
        vector_add.handle, grid, 1, 1, BLOCK, 1, 1, 0, ctypes.cast(kernel_params, POINTER(c_void_p)), None, None, None
    )
    driver = cu.library().handle  # the libcuda rawcuda opened; handle[symbol] gives a fresh, untyped pointer
    add_node = driver["cuGraphAddKernelNode_v2"]  # cuda.h: #define cuGraphAddKernelNode cuGraphAddKernelNode_v2
    add_node.restype = c_int
    # (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies,
    #  const CUDA_KERNEL_NODE_PARAMS *nodeParams)
    add_node.argtypes = [POINTER(c_void_p), c_void_p, POINTER(c_void_p), c_size_t, POINTER(KernelNodeParams)]
    get_params = driver["cuGraphKernelNodeGetParams_v2"]
    get_params.restype = c_int
    get_params.argtypes = [c_void_p, POINTER(KernelNodeParams)]  # (CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *)

    vector_add.context.activate()  # the driver calls below act on the current context
    graph, node, graph_exec = c_void_p(), c_void_p(), c_void_p()
    cu.cuGraphCreate(byref(graph), GRAPH_FLAGS)
    checked(add_node(byref(node), graph, None, 0, byref(params)), "cuGraphAddKernelNode")
    values[0].value = d_decoy.ptr  # after the call: change argument 0 in OUR copy to the decoy buffer
    stored = KernelNodeParams()
    checked(get_params(node, byref(stored)), "cuGraphKernelNodeGetParams", node)
    t.check(bool(stored.kernelParams), "the node hands back its arguments as a kernelParams array")
    stored_c = c_uint64.from_address(stored.kernelParams[0]).value  # read-only: that memory is the node's
    cu.cuGraphInstantiate(byref(graph_exec), graph, GRAPH_FLAGS)
    cu.cuGraphLaunch(graph_exec, stream.handle)
    stream.synchronize()
    t.say(
        f"our kernelParams array at {ctypes.addressof(kernel_params):#x}; the node's (cuGraphKernelNodeGetParams) "
        f"at {ctypes.cast(stored.kernelParams, c_void_p).value or 0:#x}\n"
        f"after the call we pointed our argument 0 at the decoy {d_decoy.ptr:#x}; the node still holds "
        f"{stored_c:#x} (c)\n"
        "cuda.h, cuGraphAddKernelNode: 'The kernelParams or extra array, as well as the argument values it\n"
        "points to, are copied during this call.' So our array and values need to live only until it returns\n"
        "(cuGraphKernelNodeGetParams's copy belongs to the node: read it, never write or free it). What must\n"
        "outlive the graph is what those values *name*: the buffers. The graph stores addresses, not data."
    )
    t.check(
        stored_c == d_c.ptr
        and bool(np.array_equal(d_c.to_array(), a + b))
        and bool(np.isnan(d_decoy.to_array()).all()),
        "the replay wrote c = a + b and left the decoy untouched: the node kept its own copy of the arguments",
    )
    cu.cuGraphExecDestroy(graph_exec)
    cu.cuGraphDestroy(graph)

    t.step("the same node with the class: Graph.add_kernel checks, packs, and keeps the arguments alive")
    d_c.fill(NAN)
    with_class = Graph()
    kernel_node = with_class.add_kernel(vector_add, grid, BLOCK, d_c, d_a, d_b, RAW_N)  # checked against the PTX
    exec_ = with_class.instantiate()
    exec_.launch(stream)
    t.check(bool(np.array_equal(d_c.to_array(stream=stream), a + b)), "the class's node computes the same c = a + b")
    t.say(
        f"{kernel_node!r}: raw_args() = ({', '.join(f'{v:#x}' for v in kernel_node.raw_args())})\n"
        "add_kernel fills rawcuda's CUDA_KERNEL_NODE_PARAMS (graphs/kernelnode.py) from the packed arguments and\n"
        "keeps (function, args, packed block) with the node -- not for the driver, which copied the values, but\n"
        "for the GPU: the buffers must outlive every replay, and a replay is refused once one of them is closed.\n"
        "cust (Rust-CUDA at ac2674f): no API for this. Its graph module is private (lib.rs: `mod graph;`) and\n"
        "unfinished -- its kernel_invocation! macro builds the argument-pointer array, then passes an empty one.\n"
        "The seed's fallback in Rust is cust_raw::driver_sys (bindgen over all of cuda.h): unsafe\n"
        "cuGraphAddKernelNode with a driver_sys::CUDA_KERNEL_NODE_PARAMS -- this step's first half, in Rust.\n"
        "(crates.io's cust 0.3.2, the 2022 code, has these bindings too, as cust::sys, generated from CUDA 11.4.)"
    )
    exec_.close()
    with_class.close()
    for obj in (d_a, d_b, d_c, d_decoy, module, stream):
        obj.close()


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel", "grid", "block", "stream")
    rng = np.random.default_rng()
    raw_kernel_node(t, rng)
    dev = Device(0)
    stream = Stream()

    t.step(
        f"the seed's pipeline: {LAYERS} layers of act(x @ Wa) @ Wb = {2 * LAYERS} matmuls + {LAYERS} "
        "element-wise kernels"
    )
    p = Pipeline(rng)
    t.say(f"x: {TOKENS} tokens x {HIDDEN} hidden; activations alternate bias+ReLU and GELU; on {dev.name}")

    t.step("run it with ordinary launches on a stream and check it against numpy (float64)")
    p.poison(stream)
    p.run(stream)  # also the warm-up: first launches load the kernels, which a capture could not record
    launched = p.results(stream)
    t.check(
        close_to(launched[-1], p.reference(p.x_host, p.w_host)),
        f"the output matches numpy within {TOLERANCE:g} of its largest value",
    )

    t.step("capture: the same Python code inside `with capture(stream) as graph:` records instead of running")
    t.term("capture")
    p.poison(stream)
    stream.synchronize()
    with capture(stream) as graph:  # cuStreamBeginCapture ... cuStreamEndCapture
        p.run(stream)
    t.check(all(np.isnan(r).all() for r in p.results(stream)), "nothing ran: every output is still NaN")
    nodes = graph.kernel_nodes()  # cuGraphGetNodes + cuGraphGetEdges, kernel nodes via cuGraphNodeGetType
    t.say("\n".join(f"node {i:2}: {n.name:9} grid={n.grid} block={n.block}" for i, n in enumerate(nodes)))
    t.check(len(nodes) == KERNELS, f"the graph holds the {KERNELS} kernels, in launch order")

    t.step("instantiate once (validate + lay out), then replay: one cuGraphLaunch for all 15 kernels")
    exec_ = graph.instantiate()  # cuGraphInstantiateWithFlags
    exec_.upload(stream)  # cuGraphUpload: the first launch then costs no more than the others
    exec_.launch(stream)  # cuGraphLaunch
    replayed = p.results(stream)
    t.check(
        all(np.array_equal(r, s) for r, s in zip(replayed, launched, strict=True)),
        "all 15 outputs equal the stream launches' bit for bit",
    )

    t.step("a graph stores addresses, not values: new data in the same input buffer, same graph")
    fresh = rng.standard_normal((TOKENS, HIDDEN), dtype=np.float32)
    p.x.copy_from(fresh, stream=stream)  # outside the capture: an ordinary async copy
    p.poison(stream)
    exec_.launch(stream)
    t.check(close_to(p.results(stream)[-1], p.reference(fresh, p.w_host)), "the replay processed the new input")
    t.say(
        "the flip side: free a buffer a graph uses and the replay writes freed memory -- rawcuda refuses to\n"
        "replay a graph once a buffer or kernel it uses was closed, whether captured or built with add_kernel()"
    )

    t.step(f"change kernel #{THIRD} (a matmul) to new weights inside the executable graph")
    third = nodes[THIRD]
    before = third.raw_args()  # the argument values the node holds, read back with cuGraphKernelNodeGetParams
    t.say(f"{third.name}(C, A, B, M, N, K) holds B = {before[2]:#x} (= W1 at {p.w[1].ptr:#x})")
    w1_new = p.new_weight()
    d_w1_new = DeviceBuffer.from_array(w1_new)
    exec_.set_kernel_args(third, p.outs[THIRD], p.outs[THIRD - 1], d_w1_new, TOKENS, HIDDEN, HIDDEN)
    t.say(
        "exec.set_kernel_args(node, ...): cuGraphExecKernelNodeSetParams with a full CUDA_KERNEL_NODE_PARAMS\n"
        "(same function, grid, block; new kernelParams) -- no re-capture, no re-instantiation"
    )
    p.poison(stream)
    exec_.launch(stream)
    updated = p.results(stream)[-1]
    weights = [*p.w_host]
    weights[1] = w1_new
    t.check(close_to(updated, p.reference(fresh, weights)), "the replay now uses the new weights")
    t.check(not close_to(updated, p.reference(fresh, p.w_host)), "... and the result changed")

    t.step("what capture forbids: the legacy stream, and anything that waits for the GPU")
    refused: list[str] = []
    try:
        capture(None)  # type: ignore[arg-type]
    except ValueError as exc:
        refused.append(f"capture(None) -> ValueError: {exc}")
    try:
        with capture(stream):
            p.x.copy_from(fresh)  # no stream=: rawcuda synchronizes the context around it
    except StreamCaptureError as exc:
        first, hint = str(exc).splitlines()[:2]
        refused.append(f"a copy without stream= inside the capture ->\n  {first}\n  {hint.strip()}")
    t.say("\n".join(refused))
    t.check(len(refused) == 2, "both were refused with an explanation")
    t.check(capture_status(stream) == StreamCaptureStatus.NONE, "the failed capture was ended; the stream works")

    t.step("time one forward pass: 15 launches vs 1 replay (host clock, queue to idle, median)")
    p.x.copy_from(p.x_host, stream=stream)
    launch_us = wall_us(lambda: p.run(stream), stream)
    replay_us = wall_us(lambda: exec_.launch(stream), stream)
    t.say(
        f"stream launches: {launch_us:7.1f} us   graph replay: {replay_us:7.1f} us   "
        f"({(1 - replay_us / launch_us) * 100:.0f}% lower than these launches)"
    )
    t.say(
        "not the seed's comparison: these launches include rawcuda's per-call checks in Python, the seed's\n"
        "15-25% is against bare launches. bench/graphs.py makes that one (its 'bound' launches cost about a\n"
        "bare cuLaunchKernel): 12% at hidden 64, 5% at 256, 2% at 1024, 0% at 4096, 128 tokens\n"
        "(bench/results/2026-12-02-NVIDIA_H200.md)"
    )
    # Printed, not asserted: a time depends on the machine's load, and a lesson must not fail on a busy host.
    verdict = "faster than" if replay_us < launch_us else "NOT faster than (a busy host?)"
    t.say(f"this run: the replay was {verdict} launching the 15 kernels one by one")
    exec_.close()
    graph.close()
    for buf in (p.x, *p.w, *p.b, *p.outs, d_w1_new):
        buf.close()
    stream.close()


if __name__ == "__main__":
    run(main, "Tutorial 09: CUDA graphs -- capture, replay, update, and what they save")
