// rawcuda-build: arch=compute_90
// tma_copy.cu -- a tile copy through Hopper's Tensor Memory Accelerator (TMA), from a tensor map the host built.
//
// tma_tile_copy(src, out, rows, cols): each block asks the TMA for one TILE_ROWS x TILE_COLS tile of the
// row-major float matrix `src` describes, into shared memory, in one instruction issued by one thread; then
// the block writes the tile to `out` (the same shape) with ordinary stores. A test checks out == the matrix.
// tma_tile_copy_both(src, dst): the same tile in through the TMA and out through it too, from one thread.
// tile_copy_plain(src, out, rows, cols): the same tiles with ordinary loads and stores, to measure against.
//
// Launch configuration: grid = (ceil(cols / TILE_COLS), ceil(rows / TILE_ROWS)) for all three; block =
// TILE_THREADS, except tma_tile_copy_both: BOTH_THREADS; no dynamic shared memory. `src` and `dst` are
// rawcuda.extras.tensormap.TensorMaps over the matrices with box = (TILE_ROWS, TILE_COLS), passed as their
// .descriptor (128 bytes).
//
// Why it is written this way:
// * `const __grid_constant__ CUtensorMap`: the descriptor must stay in parameter space (PTX `.param .align 64
//   .b8 [128]`), where the TMA reads it by its generic address; a plain by-value copy would be moved to
//   registers or local memory, and its address would mean nothing to the TMA.
// * An mbarrier counts the bytes: one thread arrives on it "expecting" TILE_BYTES, the copy completes those
//   bytes on it, and every thread waits for phase 0 to finish before it reads the tile.
// * fence.proxy.async after the init: the barrier was written by ordinary stores, and the TMA (the "async
//   proxy") must see it initialised.
// * Out-of-bounds parts of an edge tile arrive as zeros (the tensor map's fill), and are not written out:
//   tma_tile_copy skips them itself; a TMA store writes only what lies inside its tensor.
// * Before a TMA store reads the tile, fence.proxy.async.shared::cta again: the store is the async proxy
//   reading what the waiting thread has seen arrive. The block may end only when the store has read the tile
//   (cp.async.bulk.wait_group.read 0): its shared memory is gone at exit.

#include <cuda.h>

#include <cstddef>

constexpr unsigned TILE_ROWS = 32;
constexpr unsigned TILE_COLS = 32;  // 128 bytes of floats: a multiple of 16, as a box row must be
constexpr unsigned TILE_THREADS = 256;  // the documented block
static_assert(TILE_THREADS % 32 == 0, "a block of whole warps");
constexpr unsigned TILE_BYTES = TILE_ROWS * TILE_COLS * sizeof(float);
constexpr unsigned TMA_ALIGN = 128;  // the shared-memory destination of a tensor copy
constexpr unsigned BOTH_THREADS = 32;  // tma_tile_copy_both: one thread issues both copies; one warp is the least

// One thread asks the TMA for the tile at (x0, y0) of `map` into `tile_at`, counted on the mbarrier at `bar_at`
// (initialised here for one arrival: this thread's, which also says how many bytes to expect).
__device__ __forceinline__ void tma_load_tile(const CUtensorMap *map, unsigned tile_at, unsigned bar_at, int x0, int y0)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_at) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_at), "r"(TILE_BYTES) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(tile_at), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x0), "r"(y0), "r"(bar_at)
        : "memory");
}

// Wait until phase 0 of the mbarrier at `bar_at` completes: every expected byte has landed.
__device__ __forceinline__ void wait_for_tile(unsigned bar_at)
{
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar_at)
            : "memory");
    }
}

// -- begin tma_tile_copy
extern "C" __global__ void tma_tile_copy(const __grid_constant__ CUtensorMap src, float *out, size_t rows, size_t cols)
{
    __shared__ alignas(TMA_ALIGN) float tile[TILE_ROWS][TILE_COLS];
    __shared__ alignas(8) unsigned long long arrived;  // the mbarrier
    const unsigned tile_at = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned bar_at = static_cast<unsigned>(__cvta_generic_to_shared(&arrived));
    const int x0 = blockIdx.x * TILE_COLS;  // the tensor map's coordinates: innermost (columns) first
    const int y0 = blockIdx.y * TILE_ROWS;

    if (threadIdx.x == 0) {
        tma_load_tile(&src, tile_at, bar_at, x0, y0);
    }
    __syncthreads();  // the barrier is initialised before any thread waits on it
    wait_for_tile(bar_at);
    for (unsigned i = threadIdx.x; i < TILE_ROWS * TILE_COLS; i += blockDim.x) {
        const size_t r = y0 + i / TILE_COLS, c = x0 + i % TILE_COLS;
        if (r < rows && c < cols) {
            out[r * cols + c] = tile[i / TILE_COLS][i % TILE_COLS];
        }
    }
}
// -- end tma_tile_copy

// -- begin tma_tile_copy_both
extern "C" __global__ void __launch_bounds__(BOTH_THREADS) tma_tile_copy_both(const __grid_constant__ CUtensorMap src, const __grid_constant__ CUtensorMap dst)
{
    __shared__ alignas(TMA_ALIGN) float tile[TILE_ROWS][TILE_COLS];
    __shared__ alignas(8) unsigned long long arrived;  // the mbarrier
    if (threadIdx.x != 0) {
        return;  // one thread drives both copies; nothing below waits for the others
    }
    const unsigned tile_at = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned bar_at = static_cast<unsigned>(__cvta_generic_to_shared(&arrived));
    const int x0 = blockIdx.x * TILE_COLS;
    const int y0 = blockIdx.y * TILE_ROWS;

    tma_load_tile(&src, tile_at, bar_at, x0, y0);
    wait_for_tile(bar_at);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
        ::"l"(reinterpret_cast<unsigned long long>(&dst)), "r"(x0), "r"(y0), "r"(tile_at)
        : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// -- end tma_tile_copy_both

// -- begin tile_copy_plain
extern "C" __global__ void tile_copy_plain(const float *__restrict__ src, float *__restrict__ out, size_t rows, size_t cols)
{
    __shared__ float tile[TILE_ROWS][TILE_COLS];
    const size_t x0 = static_cast<size_t>(blockIdx.x) * TILE_COLS;
    const size_t y0 = static_cast<size_t>(blockIdx.y) * TILE_ROWS;
    for (unsigned i = threadIdx.x; i < TILE_ROWS * TILE_COLS; i += blockDim.x) {
        const size_t r = y0 + i / TILE_COLS, c = x0 + i % TILE_COLS;
        tile[i / TILE_COLS][i % TILE_COLS] = (r < rows && c < cols) ? src[r * cols + c] : 0.0f;
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < TILE_ROWS * TILE_COLS; i += blockDim.x) {
        const size_t r = y0 + i / TILE_COLS, c = x0 + i % TILE_COLS;
        if (r < rows && c < cols) {
            out[r * cols + c] = tile[i / TILE_COLS][i % TILE_COLS];
        }
    }
}
// -- end tile_copy_plain
