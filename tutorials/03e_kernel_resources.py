"""Tutorial 03e -- what a kernel asks of an SM: its attributes, and the shared memory a launch adds.

A kernel's cost to the multiprocessor is fixed in two places. The compiler fixes some of it: registers per
thread, static shared memory (``__shared__ float tile[32][33]``), local memory, and the largest block
``__launch_bounds__`` allows -- the driver reports each through ``cuFuncGetAttribute``. The launch adds the
rest: dynamic shared memory (``extern __shared__``), sized per launch, which changes how many blocks fit on an
SM (``cuOccupancyMaxActiveBlocksPerMultiprocessor``). Above 48 KiB a kernel must opt in first
(``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)``).

Three ways to ask, in order:

1. by hand: libcuda through plain ctypes -- the module loaded by hand, each call declared with its argtypes
   and restype, each integer CUresult checked -- the four attributes, the occupancy, the opt-in; the values
   compared with rawcuda's;
2. rawcuda: ``fn.num_regs``, ``fn.shared_size_bytes``, ... for the kernels of tutorials 03a-03c;
   ``fn.max_active_blocks_per_sm(block, shared)``; a launch above 48 KiB opts the kernel in by itself, and a
   request past what the device has is refused before the driver sees it;
3. cust as Rust-CUDA has it at commit ac2674f (its Cargo.toml says 0.3.2): ``Function::get_attribute`` and
   ``max_active_blocks_per_multiprocessor``, and the opt-in its safe API lacks, written as one raw call
   through ``cust_raw::driver_sys``, the bindings crate under cust.

Run:  python tutorials/03e_kernel_resources.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Function, FunctionAttribute, kernels, ops
from rawcuda.checked import cu
from rawcuda.ffi.results import Result, c_name
from rawcuda.ops.reduce_steps import STEPS, STEPS_BLOCK, ReduceStep, error_bound

KIB = 1024
DEFAULT_LIMIT = 48 * KIB  # dynamic shared memory every kernel may use without opting in
SHARED_SIZES = (1 * KIB, 16 * KIB, 32 * KIB, 48 * KIB)  # up to the limit every kernel has without opting in
BIG_SHARED = 64 * KIB
N = 1_000_003
KERNELS = [  # (source stem, kernel): a range of what the compiler decided
    ("reduce_steps", "reduce_03_sequential_addressing"),
    ("reduce_steps", "reduce_08_warp_shuffle"),
    ("reduce", "warp_reduce_sum"),
    ("transpose", "transpose_unpadded"),
    ("transpose", "transpose_padded"),
    ("occupancy", "copy_one_per_thread"),
    ("transcendentals", "transcendental_chain"),
]
# The attributes read by hand, with the rawcuda property that reads the same one.
HAND_READ = (
    (FunctionAttribute.NUM_REGS, "num_regs"),
    (FunctionAttribute.SHARED_SIZE_BYTES, "shared_size_bytes"),
    (FunctionAttribute.LOCAL_SIZE_BYTES, "local_size_bytes"),
    (FunctionAttribute.MAX_THREADS_PER_BLOCK, "max_threads_per_block"),
)


def occupancy(fn: Function, shared: int) -> str:
    """What the driver says about blocks of STEPS_BLOCK threads with ``shared`` bytes each, or its refusal."""
    try:
        return (
            f"at {shared // KIB} KiB the driver fits {fn.max_active_blocks_per_sm(STEPS_BLOCK, shared)} blocks per SM"
        )
    except rawcuda.CudaError as exc:  # the occupancy call may refuse a size past the kernel's current limit
        return f"at {shared // KIB} KiB the occupancy call refuses: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def expect_success(t: Tutorial, code: int, call: str) -> None:
    """A CUresult is a plain C int: 0 is CUDA_SUCCESS, anything else an error. Every raw call is checked here."""
    t.check(code == Result.SUCCESS, f"{call} -> {code} ({c_name(code)})")


def by_hand(t: Tutorial, ctx: rawcuda.Context, step: ReduceStep) -> None:
    """The driver calls behind rawcuda's Function properties, written with plain ctypes on a module loaded by
    hand: its own CUfunction, so that the opt-in set here does not touch the Function rawcuda uses later."""
    t.step(f"by hand: {step.kernel}'s attributes with cuFuncGetAttribute, through plain ctypes")
    # rawcuda's loader finds the file (and turns "no driver here" into a clean skip); by hand this line is
    # ctypes.CDLL("libcuda.so.1"). None of these six names is #defined to a versioned symbol in cuda.h.
    libcuda = ctypes.CDLL(cu.library().path)
    cuModuleLoadData = libcuda.cuModuleLoadData  # CUresult cuModuleLoadData(CUmodule *module, const void *image)
    cuModuleLoadData.argtypes, cuModuleLoadData.restype = [POINTER(c_void_p), c_void_p], c_int
    # CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
    cuModuleGetFunction = libcuda.cuModuleGetFunction
    cuModuleGetFunction.argtypes, cuModuleGetFunction.restype = [POINTER(c_void_p), c_void_p, c_char_p], c_int
    # CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
    cuFuncGetAttribute = libcuda.cuFuncGetAttribute
    cuFuncGetAttribute.argtypes, cuFuncGetAttribute.restype = [POINTER(c_int), c_int, c_void_p], c_int
    # CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
    cuFuncSetAttribute = libcuda.cuFuncSetAttribute
    cuFuncSetAttribute.argtypes, cuFuncSetAttribute.restype = [c_void_p, c_int, c_int], c_int
    # CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
    #                                                      size_t dynamicSMemSize)
    cuOccupancy = libcuda.cuOccupancyMaxActiveBlocksPerMultiprocessor
    cuOccupancy.argtypes, cuOccupancy.restype = [POINTER(c_int), c_void_p, c_int, c_size_t], c_int
    cuModuleUnload = libcuda.cuModuleUnload  # CUresult cuModuleUnload(CUmodule hmod)
    cuModuleUnload.argtypes, cuModuleUnload.restype = [c_void_p], c_int

    ctx.activate()  # the module goes into the current context: make it rawcuda's primary context
    image = ctypes.create_string_buffer(kernels.ptx_path(step.stem).read_bytes())  # PTX: a NUL-terminated string
    module, function = c_void_p(), c_void_p()  # CUmodule and CUfunction are opaque pointers
    expect_success(t, cuModuleLoadData(byref(module), image), f"cuModuleLoadData(&module, <{step.stem}.ptx>)")
    expect_success(
        t,
        cuModuleGetFunction(byref(function), module, step.kernel.encode()),
        f'cuModuleGetFunction(.., "{step.kernel}")',
    )

    def get(attribute: FunctionAttribute) -> int:
        value = c_int(-1)  # -1: not a value any of these attributes has, so an unwritten int would show
        expect_success(
            t, cuFuncGetAttribute(byref(value), attribute, function), f"cuFuncGetAttribute(&v, {attribute.name})"
        )
        return value.value

    fn = step.function(ctx)  # rawcuda's Function for the same kernel: the same PTX, loaded in its own module
    for attribute, prop in HAND_READ:
        by_hand_value, rawcuda_value = get(attribute), getattr(fn, prop)
        t.say(f"{attribute.name:<22} by hand {by_hand_value:>5}   rawcuda fn.{prop:<22} {rawcuda_value:>5}")
        t.check(by_hand_value == rawcuda_value, f"{attribute.name}: the same number both ways")

    t.step("by hand: cuOccupancyMaxActiveBlocksPerMultiprocessor, then cuFuncSetAttribute to go past 48 KiB")
    for shared in SHARED_SIZES:
        blocks = c_int(-1)
        rc = cuOccupancy(byref(blocks), function, STEPS_BLOCK, shared)
        expect_success(
            t, rc, f"cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, {STEPS_BLOCK}, {shared}): n = {blocks.value}"
        )
        t.check(
            blocks.value == fn.max_active_blocks_per_sm(STEPS_BLOCK, shared),
            f"rawcuda's fn.max_active_blocks_per_sm({STEPS_BLOCK}, {shared // KIB} KiB) says the same",
        )
    limit = get(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    per_block = ctx.device.attribute(rawcuda.DeviceAttribute.MAX_SHARED_MEMORY_PER_BLOCK)
    static = get(FunctionAttribute.SHARED_SIZE_BYTES)
    t.say(f"MAX_DYNAMIC_SHARED_SIZE_BYTES = {limit}: what a launch may ask for before opting in")
    t.check(
        limit == per_block - static,
        f"the default is the device's MAX_SHARED_MEMORY_PER_BLOCK ({per_block}) minus the static {static} (cuda.h)",
    )
    blocks = c_int(-1)
    rc = cuOccupancy(byref(blocks), function, STEPS_BLOCK, BIG_SHARED)
    t.say(f"occupancy at {BIG_SHARED // KIB} KiB before the opt-in -> {rc} ({c_name(rc)}), n = {blocks.value}")
    expect_success(
        t,
        cuFuncSetAttribute(function, FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, BIG_SHARED),
        f"cuFuncSetAttribute(f, MAX_DYNAMIC_SHARED_SIZE_BYTES, {BIG_SHARED})",
    )
    t.check(get(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES) == BIG_SHARED, "read back: the new limit")
    rc = cuOccupancy(byref(blocks), function, STEPS_BLOCK, BIG_SHARED)
    expect_success(t, rc, f"occupancy at {BIG_SHARED // KIB} KiB after the opt-in: n = {blocks.value} blocks per SM")
    t.check(blocks.value >= 1, f"blocks with {BIG_SHARED // KIB} KiB each now fit on an SM")
    optin = ctx.device.max_shared_memory_per_block_optin
    too_much = optin + KIB
    rc = cuFuncSetAttribute(function, FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, too_much)
    t.say(f"cuFuncSetAttribute(f, MAX_DYNAMIC_SHARED_SIZE_BYTES, {too_much}) -> {rc} ({c_name(rc)})")
    t.check(rc != Result.SUCCESS, f"more than the device's {optin} bytes: the driver refuses, with an int")
    t.check(
        fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES) == limit,
        "rawcuda's Function, another module's CUfunction, still has the default limit: attributes are per function",
    )
    expect_success(t, cuModuleUnload(module), "cuModuleUnload(module)")


def main(t: Tutorial) -> None:
    t.words(
        "cust",
        "cust_raw",
        "kernel",
        "grid",
        "block",
        "SM",
        "occupancy",
        "shared memory",
        "dynamic shared memory",
        "context",
        "primary context",
        "CUresult",
        "stream",
    )
    step = STEPS[2]  # reduce_03_sequential_addressing: __launch_bounds__(256) in kernels/reduce_steps.cu
    t.step("the GPU and its primary context (rawcuda opens libcuda and calls cuInit here)")
    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    t.say(f"device 0 is {ctx.device.name}; the kernel asked by hand is {step.kernel}")

    by_hand(t, ctx, step)

    t.step("rawcuda: what the compiler fixed -- each kernel's attributes, as the driver reports them")
    lines = ["kernel                             registers  static shared  local  max block"]
    for stem, name in KERNELS:
        fn = ops.kernel(stem, name, ctx)
        lines.append(
            f"{name:<34} {fn.num_regs:>9}  {fn.shared_size_bytes:>11} B  {fn.local_size_bytes:>3} B  "
            f"{fn.max_threads_per_block:>9}"
        )
    t.say("\n".join(lines))
    padded, unpadded = (ops.kernel("transpose", f"transpose_{v}", ctx) for v in ("padded", "unpadded"))
    t.check(
        padded.shared_size_bytes - unpadded.shared_size_bytes == 32 * 4,
        "the padded tile is one 32-float column (128 bytes) larger than the unpadded one",
    )
    fn = step.function(ctx)
    t.term("launch bounds")
    t.check(fn.max_threads_per_block == STEPS_BLOCK, f"__launch_bounds__({STEPS_BLOCK}) caps {step.kernel}'s block")

    t.step(
        f"rawcuda: what the launch adds: dynamic shared memory, and the blocks of {STEPS_BLOCK} threads that then fit"
    )
    device = ctx.device
    optin = device.max_shared_memory_per_block_optin
    per_sm = device.attribute(rawcuda.DeviceAttribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    t.say(f"{device.name}: up to {optin // KIB} KiB per block (opted in), {per_sm // KIB} KiB per SM")
    for shared in SHARED_SIZES:
        blocks = fn.max_active_blocks_per_sm(STEPS_BLOCK, shared)
        t.say(f"{shared // KIB:>4} KiB per block: {blocks} blocks per SM ({blocks * STEPS_BLOCK} threads)")

    t.step(
        f"rawcuda: above {DEFAULT_LIMIT // KIB} KiB -- a {BIG_SHARED // KIB} KiB launch makes rawcuda opt the kernel in"
    )
    before = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    t.say(f"before: MAX_DYNAMIC_SHARED_SIZE_BYTES = {before}; {occupancy(fn, BIG_SHARED)}")
    x = np.random.default_rng().standard_normal(N, dtype=np.float32)
    with DeviceBuffer.from_array(x) as dx, DeviceBuffer.empty(-(-N // STEPS_BLOCK)) as out:
        out.fill(np.float32(np.nan))
        grid = step.grid(N, device.multiprocessor_count)
        fn.launch(grid, STEPS_BLOCK, out, dx, N, shared_mem=BIG_SHARED)  # uses 1 KiB of it; the rest is reserved
        partials = out.to_array()
    after = fn.attribute(FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES)
    t.say(f"after:  MAX_DYNAMIC_SHARED_SIZE_BYTES = {after} (cuFuncSetAttribute, once); {occupancy(fn, BIG_SHARED)}")
    exact = float(x.astype(np.float64).sum())
    bound = error_bound(step, N, device.multiprocessor_count, float(np.abs(x.astype(np.float64)).sum()))
    t.check(after >= BIG_SHARED, "the kernel was opted in to the larger size")
    t.check(abs(float(partials.astype(np.float64).sum()) - exact) <= bound, "and its partial sums are right")

    t.step(f"rawcuda: more than the device has ({optin // KIB} KiB): refused before the driver is called")
    with DeviceBuffer.empty(STEPS_BLOCK) as dx, DeviceBuffer.empty(1) as out:
        try:
            fn.launch(1, STEPS_BLOCK, out, dx, STEPS_BLOCK, shared_mem=optin + KIB)
            refused = None
        except ValueError as exc:
            refused = exc
    t.say(f"ValueError: {refused}")
    t.check(refused is not None and str(optin) in str(refused), "the message names the device's limit")

    cust(t, step, fn)


def cust(t: Tutorial, step: ReduceStep, fn: Function) -> None:
    """cust read at its source, Rust-CUDA commit ac2674f: crates/cust/src/function.rs (FunctionAttribute,
    Function::get_attribute, max_active_blocks_per_multiprocessor), crates/cust/src/lib.rs (no ``sys``
    re-export: cust itself calls ``cust_raw::driver_sys``), crates/cust/src/error.rs (``pub(crate) trait
    ToResult``) and crates/cust_raw/src/driver_sys.rs (bindgen's output for cuda.h, included from OUT_DIR).
    crates.io's cust 0.3.2 (2022) is older code: ``pub use cust_raw as sys;`` and bindings generated once
    from CUDA 11.4's cuda.h, checked in as crates/cust_raw/src/cuda.rs."""
    t.step("cust: Function::get_attribute, max_active_blocks_per_multiprocessor -- and the opt-in it lacks")
    t.say(
        "cust at Rust-CUDA commit ac2674f (Cargo.toml: 0.3.2), crates/cust/src/function.rs:\n"
        "  use cust::function::{BlockSize, FunctionAttribute};\n"
        f'  let f = module.get_function("{step.kernel}")?;\n'
        f"  let regs = f.get_attribute(FunctionAttribute::NumRegisters)?;           // i32: {fn.num_regs}\n"
        f"  let fixed = f.get_attribute(FunctionAttribute::SharedMemorySizeBytes)?; // {fn.shared_size_bytes}\n"
        f"  let local = f.get_attribute(FunctionAttribute::LocalSizeBytes)?;        // {fn.local_size_bytes}\n"
        f"  let most = f.get_attribute(FunctionAttribute::MaxThreadsPerBlock)?;     // {fn.max_threads_per_block}\n"
        f"  let n = f.max_active_blocks_per_multiprocessor(BlockSize::x({STEPS_BLOCK}), 16 * 1024)?;  // u32: "
        f"{fn.max_active_blocks_per_sm(STEPS_BLOCK, 16 * KIB)}\n"
        "Each is one driver call and `.to_result()`, as by hand above. But cust's FunctionAttribute ends at\n"
        "CacheModeCa = 7: no MaxDynamicSharedSizeBytes (8); and Function has get_attribute but no set_attribute,\n"
        "so its safe API cannot opt a kernel in above 48 KiB. launch! passes the shared-memory size straight to\n"
        "cuLaunchKernel (its doc calls it 'bytes per thread'; the driver reads bytes per block), so a launch asking\n"
        "for more is refused by the driver. The way out is cust_raw, the bindgen crate cust is built on. cust\n"
        "does not re-export it (crates/cust/src/lib.rs has no `sys` module; cust itself calls\n"
        "cust_raw::driver_sys), so Cargo.toml names cust_raw too, from the same tree as cust, and one unsafe\n"
        "raw call goes through it:\n"
        "  use cust_raw::driver_sys::{cuFuncSetAttribute, CUfunction_attribute, CUresult};\n"
        "  let rc = unsafe {\n"
        "      cuFuncSetAttribute(f.to_raw(),\n"
        "          CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024)\n"
        "  };\n"
        "  assert_eq!(rc, CUresult::CUDA_SUCCESS);  // the bare CUresult: cust's ToResult is pub(crate)\n"
        f"  unsafe {{ launch!(f<<<grid, {STEPS_BLOCK}, 64 * 1024, stream>>>(out.as_device_ptr(), x.as_device_ptr(), "
        "n))? };\n"
        "Nothing remembers that the kernel was opted in, or checks the size against the device before the launch:\n"
        "that bookkeeping is what rawcuda's Function does above, with the check before the driver is called.\n"
        "crates.io's cust 0.3.2 (February 2022) is older code with the same version number: it does re-export its\n"
        "bindings (`pub use cust_raw as sys;`, generated once from CUDA 11.4's cuda.h), so there the same call\n"
        "is cust::sys::cuFuncSetAttribute, with no cust_raw line in Cargo.toml."
    )
    t.check(
        FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES == FunctionAttribute.CACHE_MODE_CA + 1,
        "MAX_DYNAMIC_SHARED_SIZE_BYTES (8) is the attribute right after cust's last one, CacheModeCa (7)",
    )


if __name__ == "__main__":
    run(main, "Tutorial 03e: a kernel's resources -- attributes, and shared memory at launch")
