// cuda_on_cpu.h -- just enough CUDA to run kernels/sgemm.cu on the CPU, one std::thread per CUDA thread.
//
// Why: the SGEMM kernels are index arithmetic over tiles, edges and strides, and a wrong index shows on a
// GPU only as a wrong number (or not at all: an out-of-bounds read of a neighbour's memory). Compiled as
// C++ with AddressSanitizer and UBSan, every byte read or written outside A, B or C is reported, and so is
// every float4 access that is not 16-byte aligned -- on a machine without a GPU
// (tests/cpu/test_sgemm_on_cpu.py).
//
// What it models: a block is blockDim threads that really run at once and share the function's
// __shared__ arrays (here `static`, so one copy, which the block's threads share); __syncthreads is a
// std::barrier over them. Blocks run one after another, each thread stepping through every block of the
// grid in the same order with a barrier between blocks (the next block reuses the shared arrays). What it
// does not model: warps (nothing here uses warp-level operations), timing, and the memory model beyond
// what the barrier orders -- which is what the kernels rely on. The one warp-level operation there is,
// the tensor-core step's mma.sync (and its cvt.rna.tf32.f32), is emulated from the PTX ISA's description of
// its fragments: the 32 lanes of a warp post their fragments, meet at a per-warp barrier, and each
// computes its own four results from the whole 16 x 8 x 8 product.
#pragma once

#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};
struct alignas(16) float4 {  // CUDA's float4 is 16-byte aligned: UBSan reports a misaligned one
    float x, y, z, w;
};
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
template <class T> inline T __ldg(const T *p) { return *p; }

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *block_barrier;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }

// --- the warp-level tensor-core operations of kernels/sgemm.cu's step 09 --------------------------------------
constexpr unsigned WARP = 32;
struct WarpScratch {  // where a warp's lanes post their mma fragments
    uint32_t a[WARP][4], b[WARP][2];
    std::barrier<> meet{WARP};
};
inline std::vector<std::unique_ptr<WarpScratch>> warp_scratch;

inline float from_bits(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// cvt.rna.tf32.f32: round to 10 mantissa bits, to nearest, ties away from zero (the low 13 bits become 0).
inline uint32_t emulated_cvt_rna_tf32(float x)
{
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return (u + 0x1000u) & 0xFFFFE000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, d -- fragments as the PTX ISA lays them out,
// with groupID g = lane / 4 and threadID_in_group t = lane % 4:
//   A (16 x 8): a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]
//   B (8 x 8):  b0 = B[t][g], b1 = B[t + 4][g]
//   D (16 x 8): d_q = D[g + 8 * (q / 2)][2 * t + q % 2]
inline void emulated_mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    WarpScratch &w = *warp_scratch[tid / WARP];
    const unsigned lane = tid % WARP;
    std::memcpy(w.a[lane], a, sizeof a);
    std::memcpy(w.b[lane], b, sizeof b);
    w.meet.arrive_and_wait();
    float A[16][8], B[8][8];
    for (unsigned l = 0; l < WARP; ++l) {
        const unsigned g = l / 4, t = l % 4;
        A[g][t] = from_bits(w.a[l][0]);
        A[g + 8][t] = from_bits(w.a[l][1]);
        A[g][t + 4] = from_bits(w.a[l][2]);
        A[g + 8][t + 4] = from_bits(w.a[l][3]);
        B[t][g] = from_bits(w.b[l][0]);
        B[t + 4][g] = from_bits(w.b[l][1]);
    }
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned q = 0; q < 4; ++q) {
        const unsigned row = g + 8 * (q / 2), col = 2 * t + q % 2;
        for (unsigned k = 0; k < 8; ++k) {
            d[q] = std::fma(A[row][k], B[k][col], d[q]);
        }
    }
    w.meet.arrive_and_wait();  // every lane has read the fragments: the next mma may post its own
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

using SgemmKernel = void (*)(float *, const float *, const float *, size_t, size_t, size_t);

inline void emulate(SgemmKernel kernel, dim3 grid, dim3 block, float *C, const float *A, const float *B, size_t M,
                    size_t N, size_t K)
{
    gridDim = grid;
    blockDim = block;
    const unsigned threads = block.x * block.y * block.z;
    std::barrier<> barrier(threads);
    block_barrier = &barrier;
    warp_scratch.clear();
    for (unsigned w = 0; w < (threads + WARP - 1) / WARP; ++w) {
        warp_scratch.push_back(std::make_unique<WarpScratch>());
    }
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([=, &barrier] {
            threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            for (unsigned by = 0; by < grid.y; ++by) {
                for (unsigned bx = 0; bx < grid.x; ++bx) {
                    blockIdx = uint3{bx, by, 0};
                    kernel(C, A, B, M, N, K);
                    barrier.arrive_and_wait();  // this block's shared arrays are the next block's
                }
            }
        });
    }
    for (std::thread &th : pool) {
        th.join();
    }
}
