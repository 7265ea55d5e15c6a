// reduce.cu -- sum of a float array: the seed article's "case 3", a warp-shuffle reduction.
//
// warp_reduce_sum(out, in, n): every block sums a grid-stride slice of in[0, n) and writes its
// partial sum to out[blockIdx.x]. A full reduction is two launches of the same kernel:
//
//     pass 1:  grid = G blocks over in[0, n)         -> out1[0, G)   (G partial sums)
//     pass 2:  grid = 1 block  over out1[0, G)       -> out2[0]      (the total)
//
// Launch configuration:
//   block = REDUCE_BLOCK (256) threads; any multiple of 32 up to 1024 is correct
//           (the shuffles assume whole warps)
//   grid  = pass 1: REDUCE_BLOCKS_PER_SM (4) * number of SMs -- one full wave of resident blocks,
//           each thread streaming ~n / (grid * block) elements; pass 2: 1 block
//   dynamic shared memory = (blockDim.x / 32) * sizeof(float) bytes: one partial per warp
//
// Why it is written this way -- it is memory bound, so everything serves the memory system:
//
// * Per-thread accumulation in registers over a grid-stride loop. Each element costs one load and one
//   add; no shared memory or synchronization until the very end, once per block.
// * float4 (16-byte) loads: a quarter of the load instructions of scalar loads, and each warp request
//   covers 512 contiguous bytes. They need 16-byte-aligned addresses, so alignment is checked at run
//   time: the (at most 3) elements before the first 16-byte boundary -- an offset view like in + 1 --
//   and the (at most 3) after the last whole float4 are read with scalar loads. Any n works,
//   including 0; `in` only has to be a float pointer (4-byte aligned).
// * REDUCE_UNROLL (4) independent float4 loads in flight per thread per iteration, into separate
//   accumulators. Little's law: bandwidth x latency bytes must be in flight to saturate HBM (about
//   4.8 TB/s x ~0.7 us = ~3.4 MB on an H200, ~25 KB per SM). 1024 threads per SM x 4 x 16 B = 64 KB.
// * __ldg: the read-only data path; `in` is never written during the kernel.
// * size_t for n and for every index and stride: an H200 holds well over 2^31 floats (8 GiB), and an
//   int index would wrap there. blockIdx.x * blockDim.x is a product of two 32-bit unsigned values, so
//   it is widened to size_t *before* the multiply (a 32-bit product would wrap at 2^32 threads).
// * The block's final sum: __shfl_down_sync adds within each warp through registers (5 steps, no
//   shared memory), lane 0 of each warp writes one partial to shared memory, and after one
//   __syncthreads the first warp reduces those partials with shuffles again.
//
// It is the last step of the reduction progression (kernels/reduce_steps.cu, tutorials/03a_reduction_steps.py):
// step 8 with float4 loads and REDUCE_UNROLL of them in flight. The "-- begin/end" lines mark what the
// tutorial prints.
//
// Accuracy: float32 sums with many partial sums (a tree, not one long running sum), so the error
// grows roughly with log(n) rather than n; compare against a float64 host sum with a relative
// tolerance.

#include <cstddef>
#include <cstdint>

constexpr unsigned REDUCE_BLOCK = 256;         // threads per block of the documented launch
constexpr unsigned REDUCE_BLOCKS_PER_SM = 4;   // pass-1 grid = this x number of SMs (documentation)
constexpr unsigned WARP_SIZE = 32;
constexpr unsigned FULL_WARP_MASK = 0xffffffffu;  // every lane takes part in the shuffle
constexpr int REDUCE_UNROLL = 4;               // float4 loads in flight per thread per iteration
constexpr size_t FLOATS_PER_VECTOR = sizeof(float4) / sizeof(float);  // 4
constexpr uintptr_t VECTOR_ALIGN = alignof(float4);                  // 16 bytes

static_assert(REDUCE_BLOCK % WARP_SIZE == 0, "a block must be a whole number of warps");
constexpr unsigned MIN_THREADS_PER_SM = 1536;   // the smallest per-SM thread limit of sm_80+ (sm_86, sm_89)
static_assert(REDUCE_BLOCKS_PER_SM * REDUCE_BLOCK <= MIN_THREADS_PER_SM,
              "the pass-1 grid must be resident all at once (one wave) on every sm_80+ GPU");

// Sum of v over the 32 lanes of a warp; the result is valid in lane 0.
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (unsigned offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL_WARP_MASK, v, offset);
    }
    return v;
}

// -- begin thread_sum
// Sum of this thread's grid-stride share of in[0, n): scalar head, float4 body, scalar tail.
__device__ __forceinline__ float thread_sum(const float *__restrict__ in, size_t n)
{
    const size_t thread = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t threads = static_cast<size_t>(gridDim.x) * blockDim.x;

    // Elements before the first 16-byte boundary (0..3), read one by one.
    const uintptr_t misalign = reinterpret_cast<uintptr_t>(in) % VECTOR_ALIGN;
    const size_t head_bytes = misalign == 0 ? 0 : VECTOR_ALIGN - misalign;
    const size_t head = min(head_bytes / sizeof(float), n);
    const float4 *__restrict__ body = reinterpret_cast<const float4 *>(in + head);
    const size_t vectors = (n - head) / FLOATS_PER_VECTOR;
    const size_t tail_start = head + vectors * FLOATS_PER_VECTOR;

    float acc[REDUCE_UNROLL] = {};
    if (thread < head) {
        acc[0] += __ldg(in + thread);
    }
    if (thread < n - tail_start) {
        acc[0] += __ldg(in + tail_start + thread);
    }

    // The aligned bulk: REDUCE_UNROLL independent loads issued before any of them is used.
    size_t i = thread;
    const size_t step = threads * REDUCE_UNROLL;
    for (; i + (REDUCE_UNROLL - 1) * threads < vectors; i += step) {
        float4 v[REDUCE_UNROLL];
#pragma unroll
        for (int u = 0; u < REDUCE_UNROLL; ++u) {
            v[u] = __ldg(body + i + u * threads);
        }
#pragma unroll
        for (int u = 0; u < REDUCE_UNROLL; ++u) {
            acc[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
        }
    }
    // The last partial round: fewer than REDUCE_UNROLL vectors left for this thread.
    for (; i < vectors; i += threads) {
        const float4 v = __ldg(body + i);
        acc[0] += (v.x + v.y) + (v.z + v.w);
    }

    float sum = acc[0];
#pragma unroll
    for (int u = 1; u < REDUCE_UNROLL; ++u) {
        sum += acc[u];
    }
    return sum;
}
// -- end thread_sum

// -- begin warp_reduce_sum
extern "C" __global__ void warp_reduce_sum(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float warp_partials[];  // blockDim.x / WARP_SIZE floats (dynamic shared memory)

    const unsigned lane = threadIdx.x % WARP_SIZE;
    const unsigned warp = threadIdx.x / WARP_SIZE;
    const unsigned warps = blockDim.x / WARP_SIZE;

    const float sum = warp_sum(thread_sum(in, n));
    if (lane == 0) {
        warp_partials[warp] = sum;
    }
    __syncthreads();

    if (warp == 0) {
        const float partial = lane < warps ? warp_partials[lane] : 0.0f;
        const float block_sum = warp_sum(partial);
        if (lane == 0) {
            out[blockIdx.x] = block_sum;
        }
    }
}
// -- end warp_reduce_sum
