"""Tutorial 16 -- Hopper's Tensor Memory Accelerator: a tensor map built by hand, then by the class, and what it buys.

The TMA copies a whole tile between global and shared memory from one instruction that one thread issues.
Everything about the tensor -- its address, element type, extents, strides and the tile ("box") one copy
moves -- is in a 128-byte *tensor map* the host encodes with ``cuTensorMapEncodeTiled`` and passes to the
kernel by value, as a ``const __grid_constant__ CUtensorMap`` parameter.

Step 1 binds ``cuTensorMapEncodeTiled`` by hand with ctypes, encodes a map of a random matrix and copies it
tile by tile with ``kernels/tma_copy.cu``'s ``tma_tile_copy``; step 2 builds the same map with rawcuda's
``TensorMap`` (the same 128 bytes) and shows the maps rawcuda refuses before the driver, each with the rule
it breaks. Step 3 measures three tile copies of a 256 MiB matrix in GB/s against the device's own copy
(the copy ceiling): plain loads and stores through shared memory, the TMA in and plain stores out, and the
TMA both ways. Every copy is checked against the matrix, element for element, from a poisoned output.
Step 4 reads what cust offers for tensor maps, from its source.

Run:  python tutorials/16_tma_tensor_maps.py [--step]
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_int, c_uint32, c_uint64, c_void_p

import numpy as np
from _tutorial import Tutorial, run

import rawcuda
from rawcuda import DeviceBuffer, Module, Stream, time_ms
from rawcuda.checked import cu
from rawcuda.checked.errors import ClosedError
from rawcuda.extras.tensormap import TensorMap
from rawcuda.ffi.constants import (
    TensorMapDataType,
    TensorMapInterleave,
    TensorMapL2Promotion,
    TensorMapOobFill,
    TensorMapSwizzle,
)

# cuda.h's enums, as step 1 passes them (step 1 checks each against rawcuda's header-checked constants).
CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7  # UINT8, UINT16, UINT32, INT32, UINT64, INT64, FLOAT16, then FLOAT32
CU_TENSOR_MAP_INTERLEAVE_NONE = 0
CU_TENSOR_MAP_SWIZZLE_NONE = 0
CU_TENSOR_MAP_L2_PROMOTION_NONE = 0
CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0
CU_TENSOR_MAP_NUM_QWORDS = 16  # cuda.h: the map is cuuint64_t opaque[16], 128 bytes
MAP_BYTES = CU_TENSOR_MAP_NUM_QWORDS * 8
MAP_ALIGN = 64  # cuda.h, above cuTensorMapEncodeTiled: "tensorMap address must be aligned to 64 bytes"
CUDA_SUCCESS = 0

HOPPER = (9, 0)  # the first compute capability with a TMA
TILE = 32  # kernels/tma_copy.cu: TILE_ROWS = TILE_COLS = 32 floats, 4 KiB a tile
THREADS = 256  # TILE_THREADS: the block of tma_tile_copy and tile_copy_plain
BOTH_THREADS = 32  # tma_tile_copy_both: one thread issues both copies
FLOAT_BYTES = 4
SMALL = (1000, 200)  # step 1's matrix: not a whole number of tiles in either direction (edge tiles)
LARGE = 8192  # step 3's matrix is LARGE x LARGE floats: 256 MiB, several times any L2
REPS = 20
KIB = 1 << 10
BYTES_PER_GB = 1e9
MS_PER_S = 1e3
NEAR = 0.9  # "near the ceiling": at least this share of the device's own copy
NAN = np.float32(np.nan)
SHOWN_QWORDS = 4  # the map's first words printed
# Step 3's copies, as its table names them.
PLAIN = "plain loads and stores through shared memory"
TMA_IN = "TMA in, plain stores out"
TMA_BOTH = "TMA in and out (one thread per block)"
CEILING = "the device's own copy (cuMemcpyDtoDAsync): the ceiling"


def encode_by_hand(buf: DeviceBuffer, rows: int, cols: int) -> bytes:
    """cuTensorMapEncodeTiled through a ctypes pointer of our own: the arguments as cuda.h declares them."""
    encode = cu.library().handle["cuTensorMapEncodeTiled"]  # a fresh pointer: nothing of rawcuda checks it
    encode.restype = c_int
    encode.argtypes = [
        c_void_p,  # CUtensorMap *tensorMap (64-byte aligned)
        c_int,  # CUtensorMapDataType
        c_uint32,  # cuuint32_t tensorRank
        c_void_p,  # void *globalAddress
        POINTER(c_uint64),  # const cuuint64_t *globalDim: innermost (columns) first
        POINTER(c_uint64),  # const cuuint64_t *globalStrides: rank - 1 of them, in bytes, the innermost left out
        POINTER(c_uint32),  # const cuuint32_t *boxDim
        POINTER(c_uint32),  # const cuuint32_t *elementStrides
        c_int,  # CUtensorMapInterleave
        c_int,  # CUtensorMapSwizzle
        c_int,  # CUtensorMapL2promotion
        c_int,  # CUtensorMapFloatOOBfill
    ]
    storage = (ctypes.c_ubyte * (MAP_BYTES + MAP_ALIGN))()  # ctypes aligns to 16 at most: round up by hand
    at = ctypes.addressof(storage) + (-ctypes.addressof(storage) % MAP_ALIGN)
    code = encode(
        at,
        CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        2,
        buf.ptr,
        (c_uint64 * 2)(cols, rows),
        (c_uint64 * 1)(cols * FLOAT_BYTES),
        (c_uint32 * 2)(TILE, TILE),
        (c_uint32 * 2)(1, 1),
        CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_NONE,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if code != CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled returned {code}")
    return ctypes.string_at(at, MAP_BYTES)


def grid_of(rows: int, cols: int) -> tuple[int, int]:
    return (-(-cols // TILE), -(-rows // TILE))


def main(t: Tutorial) -> None:
    t.words("cust", "cust_raw", "kernel", "block", "warp", "compute capability", "memory-bound", "PTX")
    copies, host, src = by_hand(t)
    with_the_class(t, copies, host, src)
    measured(t, copies)
    cust(t)


def by_hand(t: Tutorial) -> tuple[Module, np.ndarray, DeviceBuffer]:
    t.step("by hand: a 128-byte tensor map from a hand-bound cuTensorMapEncodeTiled, and a tile copy that reads it")
    t.term("Tensor Memory Accelerator")
    t.term("tensor map")
    t.check(
        [CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE]
        == [TensorMapDataType.FLOAT32, TensorMapInterleave.INTERLEAVE_NONE, TensorMapSwizzle.SWIZZLE_NONE]
        and [CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE]
        == [TensorMapL2Promotion.NONE, TensorMapOobFill.NONE],
        "the five enum values passed are rawcuda's, which its header check compares with cuda.h",
    )
    ctx = rawcuda.default_context()  # the first driver call: without a GPU the tutorial stops here, status 77
    device = ctx.device
    t.say(f"{device.name}: compute capability {'.'.join(map(str, device.compute_capability))}")
    t.check(device.compute_capability >= HOPPER, "compute capability 9.0 or newer: this GPU has a TMA")
    rows, cols = SMALL
    host = np.random.default_rng(16).standard_normal((rows, cols)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((rows, cols))
    descriptor = encode_by_hand(src, rows, cols)
    words = np.frombuffer(descriptor, np.uint64)
    t.say(
        f"a {rows} x {cols} float matrix at {src.ptr:#x}; the map's extents go innermost first ({cols}, {rows}),\n"
        f"its one stride is a row's {cols * FLOAT_BYTES} bytes, its box {TILE} x {TILE} floats. The driver's answer, "
        f"128 bytes\nwhose layout cuda.h leaves opaque; the first {SHOWN_QWORDS} of its 16 words: "
        + " ".join(f"{w:#018x}" for w in words[:SHOWN_QWORDS])
    )
    t.check(len(descriptor) == MAP_BYTES and words.any(), f"cuTensorMapEncodeTiled filled {MAP_BYTES} bytes")
    t.term("__grid_constant__")
    t.term("mbarrier")
    t.say(
        "tma_tile_copy takes it as `const __grid_constant__ CUtensorMap src`: in the PTX a `.param .align 64\n"
        ".b8 [128]`, which rawcuda's packer fills with the 128 bytes. Thread 0 of each block inits an mbarrier,\n"
        "arrives on it expecting 4096 bytes, and issues cp.async.bulk.tensor.2d with the map's address and the\n"
        "tile's (column, row); every thread waits on the barrier, then writes the tile out with plain stores."
    )
    copies = Module(rawcuda.kernels.ptx_path("tma_copy"))
    out.fill(NAN)
    copies.function("tma_tile_copy").launch(grid_of(rows, cols), THREADS, descriptor, out, rows, cols)
    got = out.to_array()
    t.check(
        np.array_equal(got, host),
        f"all {rows * cols} elements copied exactly through the hand-made map, edge tiles included "
        f"({rows} and {cols} are not multiples of {TILE})",
    )
    return copies, host, src


def refusal(make: object) -> str:
    try:
        make()  # type: ignore[operator]
    except (ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


def with_the_class(t: Tutorial, copies: Module, host: np.ndarray, src: DeviceBuffer) -> None:
    t.step("rawcuda: TensorMap(src, box=(32, 32)) -- the same 128 bytes -- and the maps it refuses before the driver")
    rows, cols = host.shape
    tmap = TensorMap(src, box=(TILE, TILE))
    t.say(f"{tmap!r}: shape and box in numpy's order (rows first); it reverses them for the driver")
    t.check(tmap.descriptor == encode_by_hand(src, rows, cols), "byte for byte the map step 1 built by hand")
    padded = DeviceBuffer.empty((64, 30))  # rows of 120 bytes
    view = src.view(1, (rows * cols - 1,))  # 4 bytes past a 256-byte-aligned allocation
    cases = [
        ("rows of 120 bytes (30 floats)", lambda: TensorMap(padded, box=(8, 8)), "must be a multiple of 16"),
        ("a box of 512 rows", lambda: TensorMap(src, box=(512, TILE)), "must be in [1, 256]"),
        ("a box row of 3 floats (12 bytes)", lambda: TensorMap(src, box=(TILE, 3)), "multiple of 16 bytes"),
        ("a view 4 bytes in", lambda: TensorMap(view, box=(TILE,)), "16-byte aligned"),
        ("a 64-byte swizzle of 128-byte rows", lambda: TensorMap(src, box=(TILE, TILE), swizzle=64), "wider than"),
    ]
    for what, make, needle in cases:
        message = refusal(make)
        t.say(f"{what}:\n  {message}")
        t.check(needle in message, f"{what}: refused before the driver, naming the rule ({needle!r})")
    out = DeviceBuffer.empty((rows, cols))
    out.fill(NAN)
    copies.function("tma_tile_copy").launch(grid_of(rows, cols), THREADS, tmap.descriptor, out, rows, cols)
    t.check(np.array_equal(out.to_array(), host), "the class's map copies the matrix exactly too")
    src.close()
    t.check(gives_no_bytes(tmap), "once its buffer is closed the map gives no bytes: they hold the freed address")


def gives_no_bytes(tmap: TensorMap) -> bool:
    try:
        _ = tmap.descriptor
    except ClosedError:
        return True
    return False


def measured(t: Tutorial, copies: Module) -> None:
    t.step(f"a {LARGE} x {LARGE} float matrix (256 MiB) copied tile by tile, three ways, against the copy ceiling")
    n = LARGE
    host = np.random.default_rng(LARGE).standard_normal((n, n)).astype(np.float32)
    src, out = DeviceBuffer.from_array(host), DeviceBuffer.empty((n, n))
    src_map, out_map = TensorMap(src, box=(TILE, TILE)), TensorMap(out, box=(TILE, TILE))
    grid, stream = grid_of(n, n), Stream()
    plain, tma_in, both = (copies.function(k) for k in ("tile_copy_plain", "tma_tile_copy", "tma_tile_copy_both"))
    ways = {
        PLAIN: lambda: plain.launch(grid, THREADS, src, out, n, n, stream=stream),
        TMA_IN: lambda: tma_in.launch(grid, THREADS, src_map.descriptor, out, n, n, stream=stream),
        TMA_BOTH: lambda: both.launch(grid, BOTH_THREADS, src_map.descriptor, out_map.descriptor, stream=stream),
        CEILING: lambda: out.copy_from(src, stream=stream),
    }
    moved = 2 * host.nbytes  # each copy reads every byte once and writes it once
    rates = {}
    for what, copy in ways.items():
        out.fill(NAN, stream=stream)
        copy()
        t.check(np.array_equal(out.to_array(stream), host), f"{what}: every element copied, checked before timing")
        ms = time_ms(copy, reps=REPS, stream=stream).median
        rates[what] = moved / (ms / MS_PER_S) / BYTES_PER_GB
    ceiling = rates[CEILING]
    t.say(f"{'copy':<58} {'GB/s':>7}  of the ceiling")
    for what, rate in rates.items():
        t.say(f"{what:<58} {rate:>7.0f}  {rate / ceiling:>5.0%}")
    best = max((PLAIN, TMA_IN, TMA_BOTH), key=rates.__getitem__)
    plain_rate, tma_rate = rates[PLAIN], max(rates[TMA_IN], rates[TMA_BOTH])
    near = rates[best] >= NEAR * ceiling
    t.say(
        f"the fastest tile copy here: {best}, at {rates[best] / ceiling:.0%} of the device's own copy "
        f"({'near' if near else 'short of'} it, by the {NEAR:.0%} mark): a copy is memory-bound, and that copy is\n"
        "the most the memory gives. "
        f"The TMA copies run at {tma_rate / plain_rate:.2f}x the plain one's rate. Per tile, a plain block issues "
        f"{TILE * TILE} four-byte loads and as many\nstores, each with its index arithmetic; the TMA moves the "
        f"{TILE * TILE * FLOAT_BYTES // KIB} KiB tile with one request, and the block's threads are free meanwhile "
        "-- what the\nHopper GEMMs use it for: their warps issue tensor-core instructions while the next tile arrives."
    )
    t.check(all(rate > 0 for rate in rates.values()), "four rates measured, each from a copy checked exact")


CUST_TEXT = """\
Read from Rust-CUDA ac2674f (cust 0.3.2 by its Cargo.toml). This search of every crate
  git grep -n -i "tensormap\\|tensor_map\\|grid_constant\\|cp.async.bulk\\|mbarrier" ac2674f -- crates/
finds only crates/ptx (a PTX lexer: `mbarrier` is one of its instruction names, lexer_tests.rs:193 and
types.rs:388). cust has no tensor-map type and no call that encodes one; cuda_std, the crate for kernels
written in Rust, has no TMA copy. cust_raw's bindings are written by bindgen from the toolkit's cuda.h with
allowlist_function("^cu.*") (crates/cust_raw/build/main.rs:140), so built against CUDA 12 they declare
cuTensorMapEncodeTiled and CUtensorMap -- step 1's call, by hand, in an unsafe block. And the kernel side:
a Rust kernel would need the 128-byte parameter kept in parameter space, what __grid_constant__ says in
CUDA C++; nothing in the tree spells it."""


def cust(t: Tutorial) -> None:
    t.step("cust: no tensor maps -- read from Rust-CUDA ac2674f")
    t.say(CUST_TEXT)


if __name__ == "__main__":
    run(main, "Tutorial 16: Hopper's Tensor Memory Accelerator -- tensor maps by hand and by the class, measured")
