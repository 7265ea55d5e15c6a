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
// what the barrier orders -- which is what the kernels rely on.
#pragma once

#include <barrier>
#include <cmath>
#include <cstddef>
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
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
template <class T> inline T __ldg(const T *p) { return *p; }

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *block_barrier;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }

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
