// grid_reduce.cu -- a cooperative launch: the whole grid waits at one barrier, so one kernel does both
// passes of the reduction.
//
// grid_sum(out, partials, in, n): every block sums its grid-stride share of in[0, n) (thread_sum from
// reduce.cu) into partials[blockIdx.x]; then grid.sync(); then block 0 adds the G partials into out[0].
// Against reduce.cu's two launches it saves one launch and its gap; it costs a grid-wide barrier.
//
// Launch configuration -- only through fn.options(cooperative=True):
//   block = REDUCE_BLOCK (256) threads (a multiple of 32 up to 1024); 1-D grid of G blocks, where every
//   block must be resident at once: G <= (blocks per SM at this size) x (SMs). rawcuda checks this from
//   cuOccupancyMaxActiveBlocksPerMultiprocessor before the driver sees the launch.
//   dynamic shared memory = (blockDim.x / 32) * sizeof(float); partials holds G floats
//
// Why the grid must be co-resident, and why the launch must say "cooperative":
// * grid.sync() spins until every block of the grid has arrived. A block that is not yet running (waiting
//   for an SM to free up) can never arrive while the running ones spin: a deadlock. A cooperative launch
//   is the driver's promise that all blocks run at once, or the launch fails (CUDA_ERROR_COOPERATIVE_
//   LAUNCH_TOO_LARGE, 720).
// * The barrier's counter lives in a grid workspace the driver hands over only to a cooperative launch
//   (cooperative_groups reads it from %envreg1 and %envreg2). Launched plainly, there is none, and the
//   kernel executes `trap`: a launch failure (719, sticky) that ruins the context. rawcuda reads the %envreg use in
//   the PTX and refuses the plain launch first.
// * grid.sync() also orders memory: partials written before it are visible to block 0 after it.

#include <cooperative_groups.h>

#include "reduce.cu"

namespace cg = cooperative_groups;

// The block's total of v, valid in thread 0; warp_partials holds blockDim.x / WARP_SIZE floats.
__device__ __forceinline__ float block_sum(float v, float *warp_partials)
{
    const unsigned lane = threadIdx.x % WARP_SIZE;
    const unsigned warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) {
        warp_partials[warp] = v;
    }
    __syncthreads();
    v = warp == 0 ? warp_sum(lane < blockDim.x / WARP_SIZE ? warp_partials[lane] : 0.0f) : 0.0f;
    __syncthreads();  // warp_partials may be written again by the caller's next block_sum
    return v;
}

// -- begin grid_sum
extern "C" __global__ void grid_sum(float *__restrict__ out, float *partials, const float *__restrict__ in, size_t n)
{
    extern __shared__ float warp_partials[];
    const cg::grid_group grid = cg::this_grid();

    const float mine = block_sum(thread_sum(in, n), warp_partials);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = mine;
    }
    grid.sync();  // every block's partial written and visible; needs every block resident
    if (blockIdx.x == 0) {
        float v = 0.0f;
        for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
            v += partials[b];
        }
        const float total = block_sum(v, warp_partials);
        if (threadIdx.x == 0) {
            out[0] = total;
        }
    }
}
// -- end grid_sum
