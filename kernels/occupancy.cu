// occupancy.cu -- a copy with exactly one element per thread, for measuring what the block size does.
//
// copy_one_per_thread(out, in, n): thread i copies in[i] to out[i], and the grid is ceil(n / block):
// no grid-stride loop, so the block size decides how the work is cut into blocks, and a block's threads
// are all the memory requests it can have in flight. bench/progressions.py and tutorials/03c_block_size.py
// sweep the block size from 32 to 1024 and print, for each, the occupancy the driver reports
// (cuOccupancyMaxActiveBlocksPerMultiprocessor: how many such blocks one SM holds at once) beside the
// bandwidth achieved.
//
// What limits the blocks per SM here is not registers or shared memory (this kernel needs little of
// either) but the two hardware limits per SM: resident threads (2048 on sm_80 and sm_90) and resident
// blocks (32 on sm_80 and sm_90). 32-thread blocks hit the block limit first: 32 blocks x 32 threads =
// 1024 threads, half of what the SM could hold. From 64 threads on, the thread limit decides.
//
// Launch configuration: block = any size from 1 to 1024 (a multiple of 32 wastes no lanes);
// grid = ceil(n / block) (at most 2^31 - 1 blocks: n up to ~2^41 at 1024 threads); dynamic shared
// memory = 0. Indices are size_t and blockIdx.x is widened before the multiply: n may pass 2^31.
//
// copy_grid_stride(out, in, n): the same copy as a grid-stride loop -- each thread starts at its global
// index and steps by the grid's thread count -- so any grid covers any n, and a block copies many
// elements instead of blockDim.x. tutorials/03c_block_size.py launches it with small blocks and a grid
// of one wave (as many blocks as fit at once): the work no longer decides how many blocks there are.
// Launch configuration: any block and any grid of at least one block; dynamic shared memory = 0.

#include <cstddef>

extern "C" __global__ void copy_one_per_thread(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i];
    }
}

extern "C" __global__ void copy_grid_stride(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    const size_t threads = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += threads) {
        out[i] = in[i];
    }
}
