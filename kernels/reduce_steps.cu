// reduce_steps.cu -- the classic reduction progression: eight sums of a float array, each one change
// away from the one before, so that what each change buys can be measured (bench/progressions.py,
// tutorials/03a_reduction_steps.py). The ninth step is the seed article's warp_reduce_sum
// (kernels/reduce.cu), which rawcuda.ops.sum runs.
//
// Every kernel here has the same contract: out[blockIdx.x] = the sum of this block's share of in[0, n).
// A full sum is several passes over ever smaller arrays of partial sums (pass 1: n elements -> one
// partial per block; pass 2: those partials -> fewer; ... until one block is left). The host drives the
// passes; rawcuda/ops/reduce_steps.py holds each step's launch (block, grid, shared memory) in one table.
//
// Launch configuration (every step):
//   block = REDUCE_STEPS_BLOCK (256) threads. Steps 1-5 also work for any power of two from 64 to 256
//           (their loops read blockDim.x); steps 6-8 *require* exactly 256: their block size is a
//           compile-time constant, which is the point of step 6. __launch_bounds__ refuses larger blocks.
//   grid  = steps 1-3: ceil(n / 256) (one element per thread); steps 4-6: ceil(n / 512) (two per thread);
//           steps 7-8: at most a few blocks per SM, each thread looping over many elements.
//   dynamic shared memory = steps 1-7: blockDim.x floats (one per thread); step 8: one float per warp.
// Any n works, including 0 (the block writes 0) and n not a multiple of anything: threads past the end
// contribute 0. n and every element index are size_t, and blockIdx.x is widened *before* it is multiplied
// (a 32-bit product wraps past 2^32): an H200 holds arrays of more than 2^31 floats.
//
// The text between "// -- begin NAME" and "// -- end NAME" is what tutorial 03a prints for each step.

#include <cstddef>

constexpr unsigned REDUCE_STEPS_BLOCK = 256;   // threads per block (steps 6-8 are compiled for it)
constexpr unsigned WARP_SIZE = 32;
constexpr unsigned FULL_WARP_MASK = 0xffffffffu;  // every lane of the warp takes part
constexpr unsigned LOADS_PER_THREAD = 2;       // steps 4-8: elements each thread adds while loading
static_assert(REDUCE_STEPS_BLOCK % WARP_SIZE == 0, "a block must be a whole number of warps");
static_assert((REDUCE_STEPS_BLOCK & (REDUCE_STEPS_BLOCK - 1)) == 0, "the tree halves the block: a power of two");
static_assert(REDUCE_STEPS_BLOCK >= 2 * WARP_SIZE, "the unrolled last warp reads s[tid + 32]");

// The first element of this block's share when each thread loads `per_thread` elements.
__device__ __forceinline__ size_t block_start(unsigned per_thread)
{
    return static_cast<size_t>(blockIdx.x) * blockDim.x * per_thread;
}

// -- begin reduce_01_interleaved_divergent
// Step 1: one element per thread into shared memory, then a tree: at stride s, every thread whose
// index is a multiple of 2s adds its neighbour s away. Correct, and slow: the active threads are
// scattered over every warp, so all warps keep running while most of their lanes idle (divergence),
// and `%` is an integer division.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_01_interleaved_divergent(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    const size_t i = block_start(1) + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[blockIdx.x] = s[0];
    }
}
// -- end reduce_01_interleaved_divergent

// -- begin reduce_02_interleaved_bank_conflicts
// Step 2: the same tree, but the first threads of the block do the work (index = 2 * s * tid), so
// whole warps finish early instead of idling lane by lane. New problem: at stride s the threads of a
// warp touch shared memory 2s floats apart, and shared memory has 32 banks of 4 bytes: addresses 32
// floats apart share a bank, so a warp's accesses collide (2-way at s = 1, 4-way at s = 2, ...) and
// are served one after another.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_02_interleaved_bank_conflicts(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    const size_t i = block_start(1) + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
        const unsigned index = 2 * stride * tid;
        if (index < blockDim.x) {
            s[index] += s[index + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[blockIdx.x] = s[0];
    }
}
// -- end reduce_02_interleaved_bank_conflicts

// -- begin reduce_03_sequential_addressing
// Step 3: fold the upper half onto the lower half: thread t adds s[t + stride], stride halving from
// blockDim.x / 2. A warp reads 32 consecutive floats -- 32 different banks, no conflict -- and the
// working threads stay contiguous. Still wasteful: half the threads only load, then idle at once.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_03_sequential_addressing(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    const size_t i = block_start(1) + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[blockIdx.x] = s[0];
    }
}
// -- end reduce_03_sequential_addressing

// -- begin load_two
// Steps 4-6 load two elements per thread and add them on the way into shared memory: the first level
// of the tree costs no shared memory and no __syncthreads, and the grid needs half the blocks.
__device__ __forceinline__ float load_two(const float *__restrict__ in, size_t n)
{
    const size_t i = block_start(LOADS_PER_THREAD) + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    if (i + blockDim.x < n) {
        v += in[i + blockDim.x];
    }
    return v;
}
// -- end load_two

// -- begin reduce_04_add_during_load
// Step 4: step 3's tree over partial sums of two elements each.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_04_add_during_load(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    s[tid] = load_two(in, n);
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[blockIdx.x] = s[0];
    }
}
// -- end reduce_04_add_during_load

// -- begin last_warp
// The last six levels of the tree (64 partials -> 1) by the first warp alone, without __syncthreads.
// The classic version relied on a warp's 32 lanes running in lockstep and a `volatile` pointer. Since
// Volta, lanes of a warp may be scheduled independently, so that version has a data race: a lane can
// read s[tid + offset] before its neighbour has written it. __syncwarp() orders the reads of each level
// before its writes, and the writes before the next level's reads -- for the warp only, which is cheap.
__device__ __forceinline__ float last_warp(float *s, unsigned tid)
{
    float v = s[tid];
#pragma unroll
    for (unsigned offset = WARP_SIZE; offset > 0; offset /= 2) {
        v += s[tid + offset];
        __syncwarp();
        s[tid] = v;
        __syncwarp();
    }
    return v;  // the block's sum, in lane 0
}
// -- end last_warp

// -- begin reduce_05_unroll_last_warp
// Step 5: step 4, with the tree stopping at 64 partials and the first warp finishing alone: from stride
// 32 down only that warp has work, and a block-wide __syncthreads per level is pure overhead.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_05_unroll_last_warp(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    s[tid] = load_two(in, n);
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > WARP_SIZE; stride /= 2) {
        if (tid < stride) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    if (tid < WARP_SIZE) {
        const float sum = last_warp(s, tid);
        if (tid == 0) {
            out[blockIdx.x] = sum;
        }
    }
}
// -- end reduce_05_unroll_last_warp

// -- begin block_tree
// Steps 6-7: the block size is a template parameter, so every loop bound is a compile-time constant:
// the compiler unrolls the whole tree (no loop counter, no loop branch), and the levels a smaller block
// would skip simply vanish. The price: one compiled kernel per block size.
template <unsigned BLOCK>
__device__ __forceinline__ float block_tree(float *s, unsigned tid)
{
    static_assert(BLOCK >= 2 * WARP_SIZE && (BLOCK & (BLOCK - 1)) == 0, "a power of two, at least 64");
#pragma unroll
    for (unsigned stride = BLOCK / 2; stride > WARP_SIZE; stride /= 2) {
        if (tid < stride) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    return tid < WARP_SIZE ? last_warp(s, tid) : 0.0f;  // valid in thread 0
}
// -- end block_tree

// -- begin reduce_06_complete_unroll
// Step 6: step 5 with the tree completely unrolled for blocks of REDUCE_STEPS_BLOCK threads.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_06_complete_unroll(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    s[tid] = load_two(in, n);
    __syncthreads();
    const float sum = block_tree<REDUCE_STEPS_BLOCK>(s, tid);
    if (tid == 0) {
        out[blockIdx.x] = sum;
    }
}
// -- end reduce_06_complete_unroll

// -- begin grid_stride_sum
// Steps 7-8: each thread adds many elements in registers before the tree -- a grid-stride loop, two
// loads per trip -- so a block's tree is paid once per thousands of elements instead of once per 512,
// and the grid can be one wave of resident blocks instead of millions of short-lived ones.
__device__ __forceinline__ float grid_stride_sum(const float *__restrict__ in, size_t n)
{
    const size_t span = static_cast<size_t>(REDUCE_STEPS_BLOCK) * LOADS_PER_THREAD;  // elements per block per trip
    const size_t stride = static_cast<size_t>(gridDim.x) * span;
    float v = 0.0f;
    for (size_t i = static_cast<size_t>(blockIdx.x) * span + threadIdx.x; i < n; i += stride) {
        v += in[i];
        if (i + REDUCE_STEPS_BLOCK < n) {
            v += in[i + REDUCE_STEPS_BLOCK];
        }
    }
    return v;
}
// -- end grid_stride_sum

// -- begin reduce_07_many_per_thread
// Step 7: step 6's tree over per-thread sums of many elements each.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_07_many_per_thread(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float s[];
    const unsigned tid = threadIdx.x;
    s[tid] = grid_stride_sum(in, n);
    __syncthreads();
    const float sum = block_tree<REDUCE_STEPS_BLOCK>(s, tid);
    if (tid == 0) {
        out[blockIdx.x] = sum;
    }
}
// -- end reduce_07_many_per_thread

// -- begin warp_sum
// Step 8's warp reduction, the seed article's: __shfl_down_sync hands a register from lane i + offset
// to lane i, so a warp adds its 32 values through registers -- no shared memory, no barrier. After
// offsets 16, 8, 4, 2, 1, lane 0 holds the warp's sum.
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (unsigned offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL_WARP_MASK, v, offset);
    }
    return v;
}
// -- end warp_sum

// -- begin reduce_08_warp_shuffle
// Step 8: step 7's per-thread sums, then shuffles instead of the shared-memory tree: each warp reduces
// itself, lane 0 of each writes one float to shared memory (8 for a 256-thread block), one
// __syncthreads, and the first warp reduces those 8 with shuffles again.
extern "C" __global__ void __launch_bounds__(REDUCE_STEPS_BLOCK)
reduce_08_warp_shuffle(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float warp_partials[];  // REDUCE_STEPS_BLOCK / WARP_SIZE floats
    const unsigned lane = threadIdx.x % WARP_SIZE;
    const unsigned warp = threadIdx.x / WARP_SIZE;
    constexpr unsigned WARPS = REDUCE_STEPS_BLOCK / WARP_SIZE;

    const float sum = warp_sum(grid_stride_sum(in, n));
    if (lane == 0) {
        warp_partials[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        const float block_sum = warp_sum(lane < WARPS ? warp_partials[lane] : 0.0f);
        if (lane == 0) {
            out[blockIdx.x] = block_sum;
        }
    }
}
// -- end reduce_08_warp_shuffle
