// rawcuda-build: arch=compute_90
// cluster_reduce.cu -- thread-block clusters (Hopper, compute capability 9.0): blocks that read each
// other's shared memory.
//
// cluster_sum(out, in, n): pass 1 of the reduction in reduce.cu, with one change. There, every block
// writes its partial sum to global memory and a second launch adds all G of them. Here the blocks of
// one cluster (launched with fn.options(cluster=(C, 1, 1))) add their C partial sums through
// *distributed shared memory* (DSMEM): block rank 0 reads the others' shared variables directly, over
// the SM-to-SM network of their GPU processing cluster, and writes one sum per cluster. Pass 2 then adds
// G / C values instead of G.
//
//     pass 1:  grid = G blocks in clusters of C     -> out1[0, G / C)
//     pass 2:  warp_reduce_sum, 1 block over out1   -> out2[0]      (the total)
//
// Launch configuration:
//   block = REDUCE_BLOCK (256) threads (any multiple of 32 up to 1024); a 1-D grid, a 1-D cluster of C
//   blocks (C divides G; C <= 8 is portable, up to 16 with the non-portable opt-in rawcuda makes itself);
//   dynamic shared memory = (blockDim.x / 32) * sizeof(float), as warp_reduce_sum
//
// Why it is written this way:
// * The same thread_sum and warp_sum as reduce.cu (included, so the only difference measured is the
//   combine); the include also brings warp_reduce_sum into this module for pass 2.
// * cluster.sync() before the reads: a barrier across the cluster with release/acquire order, so each
//   block's block_total is written and visible to rank 0 before rank 0 reads it.
// * cluster.sync() again before exiting: a block's shared memory is gone once the block exits, and a
//   read of an exited block's DSMEM is undefined. Rank 0 must finish reading before anyone leaves.
// * map_shared_rank(&x, r) turns the address of x in this block's shared memory into the address of
//   the same variable in block r of the cluster (PTX mapa); the load is then an ordinary ld.shared::cluster.

#include <cooperative_groups.h>

#include "reduce.cu"

namespace cg = cooperative_groups;

// -- begin cluster_sum
extern "C" __global__ void cluster_sum(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    extern __shared__ float warp_partials[];  // blockDim.x / WARP_SIZE floats (dynamic shared memory)
    __shared__ float block_total;             // what the other blocks of the cluster read
    const cg::cluster_group cluster = cg::this_cluster();

    const unsigned lane = threadIdx.x % WARP_SIZE;
    const unsigned warp = threadIdx.x / WARP_SIZE;
    const float sum = warp_sum(thread_sum(in, n));
    if (lane == 0) {
        warp_partials[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        const float total = warp_sum(lane < blockDim.x / WARP_SIZE ? warp_partials[lane] : 0.0f);
        if (lane == 0) {
            block_total = total;
        }
    }

    cluster.sync();  // every block's block_total written, and visible across the cluster
    if (cluster.block_rank() == 0 && warp == 0) {
        const unsigned blocks = cluster.num_blocks();
        float v = 0.0f;
        for (unsigned rank = lane; rank < blocks; rank += WARP_SIZE) {
            v += *cluster.map_shared_rank(&block_total, rank);  // another block's shared memory
        }
        v = warp_sum(v);
        if (lane == 0) {
            out[blockIdx.x / blocks] = v;  // one value per cluster (1-D grid and cluster)
        }
    }
    cluster.sync();  // no block leaves while rank 0 may still read its shared memory
}
// -- end cluster_sum

// cluster_ranks(rank, size): each block writes where the GPU placed it -- its rank in its cluster and the
// cluster's size -- so a test sees the cluster shape the launch asked for was the one the GPU used.
extern "C" __global__ void cluster_ranks(unsigned *rank, unsigned *size)
{
    const cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) {
        const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        rank[block] = cluster.block_rank();
        size[block] = cluster.num_blocks();
    }
}

// cluster_ranks_compiled: the same, with its cluster fixed at compile time. __cluster_dims__ puts
// .reqnctapercluster 2, 1, 1 into the PTX; a launch with any other cluster shape fails (rawcuda reads the
// directive and says so before the driver is asked).
constexpr unsigned COMPILED_CLUSTER_X = 2;
extern "C" __global__ void __cluster_dims__(COMPILED_CLUSTER_X, 1, 1) cluster_ranks_compiled(unsigned *rank, unsigned *size)
{
    const cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) {
        rank[blockIdx.x] = cluster.block_rank();
        size[blockIdx.x] = cluster.num_blocks();
    }
}
