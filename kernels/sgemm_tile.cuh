// sgemm_tile.cuh -- the tuned fp32 SGEMM, C[M,N] = A[M,K] @ B[K,N], row-major: one template, many tiles.
//
// This is the last step of the progression in kernels/sgemm.cu (step 08, "double buffer"), written once
// with its tile sizes as template parameters so that one device run can measure several configurations
// (sgemm.cu instantiates them as sgemm_tune_<BM>x<BN>x<BK>_<WM>x<WN>_<TM>x<TN>) and rawcuda.ops can use
// the fastest. Steps 01-07 in sgemm.cu explain each idea on its own; this file puts them together.
//
// The parameters (every one a multiple of 4, the float4 width):
//   BM x BN  the tile of C one block computes          BK       the depth of one step along K
//   WM x WN  the tile of C one warp computes           TM x TN  the outputs one thread keeps in registers
// so a block has (BM / WM) x (BN / WN) warps, and a warp's 32 lanes form a (WM / TM) x (WN / TN) grid.
//
// Launch configuration:
//   block = (THREADS, 1, 1), THREADS = (BM / WM) * (BN / WN) * 32
//   grid  = (ceil(N / BN), min(ceil(M / BM), 65535), 1): a block walks the row tiles blockIdx.y,
//           blockIdx.y + gridDim.y, ... so any M is covered; x is not looped over (N <= (2^31 - 1) * BN)
//   dynamic shared memory = 0 (the two stages are static: 2 * BK * (BM + A_PAD + BN) * 4 bytes)
//
// What each block does, per row tile:
//   1. Two shared-memory stages. While the block computes on stage s, the loads of the next K-step are
//      already in flight (global -> registers, issued before the arithmetic), and they are written to
//      stage s^1 after it. One __syncthreads per K-step instead of two (steps 03-07 need one before the
//      arithmetic and one after it), and the load latency hides behind 2 * BM * BN * BK flops.
//      Why one barrier is enough: step t writes stage s^1, which step t-1 read; the barrier that ended
//      step t-1 separates the two. Step t+1 reads s^1 after the barrier that ends step t, which follows
//      the writes.
//   2. The A tile is stored transposed (As[k][m]): for one k, a thread's TM values of A are then
//      contiguous, read as TM/4 float4s, like its TN values of B in Bs[k][n]. A_PAD floats per row shift
//      the transposed store's rows by 16 banks (4 * (BM + 4) = 16 mod 32 for BM a multiple of 8), so the
//      two halves of a warp's store (BK = 8: 16 rows at k and at k + 4) do not meet in a bank. (With
//      BK = 16 a warp's store spans four k-groups, and k and k + 8 still share banks: a 2-way conflict on
//      stores that are a small part of the shared-memory traffic; no padding that is a multiple of 4 --
//      what keeps the float4 reads aligned -- separates all four.)
//   3. Warp tiling. A thread's TM x TN outputs are not one contiguous block but (TM/4) x (TN/4) blocks of
//      4 x 4, one per strip of the warp tile: rows warp_row + i * (WM / (TM/4)) + lane_row + 0..3. Then
//      for each float4 read, the lanes of a warp read consecutive 16-byte pieces of one shared row (lanes
//      of one lane-row share an address: a broadcast), and no two pieces fall in the same bank.
//   4. Register blocking: per k, TM/4 + TN/4 float4 shared loads feed TM * TN fused multiply-adds.
//
// Global memory: VECTOR = true reads A and B and writes C in float4s (16 bytes, one instruction). That
// needs 16-byte aligned A, B and C and N and K multiples of 4 (so every row starts aligned, and a float4
// is wholly inside the matrix or wholly outside it). rawcuda/ops/sgemm.py refuses other inputs for these
// kernels; VECTOR = false (sgemm_any_*) reads and writes single floats, each checked, and takes any
// pointer and any N, K. Outside the matrices the tiles are filled with zeros, which add nothing, and
// stores outside C are skipped: no size needs to be a multiple of a tile, and K = 0 gives C = 0.
//
// 64-bit indexing: M, N, K and every global row, column and offset are size_t (a 1 x 2^31 B fits on an
// H200); block indices are widened before they are multiplied. Indices inside a tile stay int.

#pragma once

#include <cstddef>

namespace sgemm {

constexpr int WARP_SIZE = 32;
constexpr int VEC = 4;                   // floats in a float4
constexpr int A_PAD = 4;                 // extra floats per row of the transposed A tile (see 2. above)
constexpr int STAGES = 2;                // shared-memory buffers: one computed on, one being filled
constexpr int STATIC_SHARED_LIMIT = 48 * 1024;  // static __shared__ bytes a kernel may declare

__host__ __device__ constexpr int threads(int bm, int bn, int wm, int wn) { return (bm / wm) * (bn / wn) * WARP_SIZE; }

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, bool VECTOR>
__device__ __forceinline__ void tiled(float *__restrict__ C, const float *__restrict__ A,
                                      const float *__restrict__ B, size_t M, size_t N, size_t K)
{
    constexpr int THREADS = threads(BM, BN, WM, WN);
    constexpr int WARPS_N = BN / WN;
    constexpr int LANES_N = WN / TN;                 // lanes along a warp tile's row
    constexpr int STRIPS_M = TM / VEC;               // 4-row blocks a thread owns
    constexpr int STRIPS_N = TN / VEC;               // 4-column blocks a thread owns
    constexpr int STRIP_M = (WM / TM) * VEC;         // rows from one of a thread's row blocks to the next
    constexpr int STRIP_N = LANES_N * VEC;           // columns from one column block to the next
    constexpr int A_STRIDE = BM + A_PAD;
    constexpr int A_LOADS = BM * BK / VEC / THREADS;  // float4s of A each thread loads per K-step
    constexpr int B_LOADS = BK * BN / VEC / THREADS;
    constexpr int A_ROWS_PER_LOAD = THREADS / (BK / VEC);  // rows of the A tile one pass of the block covers
    constexpr int B_ROWS_PER_LOAD = THREADS / (BN / VEC);

    static_assert(BM % VEC == 0 && BN % VEC == 0 && BK % VEC == 0 && TM % VEC == 0 && TN % VEC == 0,
                  "every tile side is a whole number of float4s");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % TM == 0 && WN % TN == 0, "tiles nest evenly");
    static_assert((WM / TM) * (WN / TN) == WARP_SIZE, "a warp tile is one output block per lane");
    static_assert(THREADS % (BK / VEC) == 0 && (BM * BK / VEC) % THREADS == 0, "the A tile splits evenly");
    static_assert(THREADS % (BN / VEC) == 0 && (BK * BN / VEC) % THREADS == 0, "the B tile splits evenly");
    static_assert(STAGES * BK * (A_STRIDE + BN) * sizeof(float) <= STATIC_SHARED_LIMIT, "static shared memory");

    __shared__ __align__(16) float As[STAGES][BK][A_STRIDE];  // A tiles, transposed: As[s][k][m]
    __shared__ __align__(16) float Bs[STAGES][BK][BN];

    const int tid = threadIdx.x;
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int warp_row = (warp / WARPS_N) * WM, warp_col = (warp % WARPS_N) * WN;
    const int lane_row = (lane / LANES_N) * VEC, lane_col = (lane % LANES_N) * VEC;

    // Who loads what: thread tid reads 4 consecutive k of row a_row (+ A_ROWS_PER_LOAD per further load)
    // and 4 consecutive columns of row b_row of the B tile. Consecutive threads read consecutive 16 bytes.
    const int a_k = (tid % (BK / VEC)) * VEC, a_row = tid / (BK / VEC);
    const int b_col = (tid % (BN / VEC)) * VEC, b_row = tid / (BN / VEC);

    const size_t col0 = static_cast<size_t>(blockIdx.x) * BN;
    const size_t b_gcol = col0 + b_col;
    const size_t row_step = static_cast<size_t>(gridDim.y) * BM;
    const size_t k_steps = (K + BK - 1) / BK;

    for (size_t row0 = static_cast<size_t>(blockIdx.y) * BM; row0 < M; row0 += row_step) {
        float acc[TM][TN] = {};
        float4 ra[A_LOADS], rb[B_LOADS];  // the next K-step's tiles, on their way to shared memory

        // Where this thread's loads of K-step 0 start, and which of its rows of A are inside A. A load
        // l of A is a_pass further on; K-step k0 adds k0 to the A pointers and k0 * N to the B ones.
        const float *a_src = A + (row0 + a_row) * K + a_k;
        const size_t a_pass = static_cast<size_t>(A_ROWS_PER_LOAD) * K;
        const float *b_src = B + static_cast<size_t>(b_row) * N + b_gcol;
        bool a_in[A_LOADS];
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            a_in[l] = row0 + a_row + l * A_ROWS_PER_LOAD < M;
        }

        // Global -> registers, zeros outside the matrices.
        auto fetch = [&](size_t k0) {
            const size_t k = k0 + a_k;
#pragma unroll
            for (int l = 0; l < A_LOADS; ++l) {
                const float *p = a_src + l * a_pass + k0;
                if constexpr (VECTOR) {
                    ra[l] = (a_in[l] && k < K) ? __ldg(reinterpret_cast<const float4 *>(p)) : make_float4(0, 0, 0, 0);
                } else {
                    ra[l].x = (a_in[l] && k < K) ? __ldg(p) : 0.0f;
                    ra[l].y = (a_in[l] && k + 1 < K) ? __ldg(p + 1) : 0.0f;
                    ra[l].z = (a_in[l] && k + 2 < K) ? __ldg(p + 2) : 0.0f;
                    ra[l].w = (a_in[l] && k + 3 < K) ? __ldg(p + 3) : 0.0f;
                }
            }
#pragma unroll
            for (int l = 0; l < B_LOADS; ++l) {
                const size_t kb = k0 + l * B_ROWS_PER_LOAD;  // + b_row: the row of B this load reads
                const float *p = b_src + kb * N;
                const bool in = kb + b_row < K;
                if constexpr (VECTOR) {
                    rb[l] = (in && b_gcol < N) ? __ldg(reinterpret_cast<const float4 *>(p)) : make_float4(0, 0, 0, 0);
                } else {
                    rb[l].x = (in && b_gcol < N) ? __ldg(p) : 0.0f;
                    rb[l].y = (in && b_gcol + 1 < N) ? __ldg(p + 1) : 0.0f;
                    rb[l].z = (in && b_gcol + 2 < N) ? __ldg(p + 2) : 0.0f;
                    rb[l].w = (in && b_gcol + 3 < N) ? __ldg(p + 3) : 0.0f;
                }
            }
        };
        // Registers -> shared stage s: A transposed (four 4-byte stores), B as one 16-byte store.
        auto stash = [&](int s) {
#pragma unroll
            for (int l = 0; l < A_LOADS; ++l) {
                const int m = a_row + l * A_ROWS_PER_LOAD;
                As[s][a_k + 0][m] = ra[l].x;
                As[s][a_k + 1][m] = ra[l].y;
                As[s][a_k + 2][m] = ra[l].z;
                As[s][a_k + 3][m] = ra[l].w;
            }
#pragma unroll
            for (int l = 0; l < B_LOADS; ++l) {
                *reinterpret_cast<float4 *>(&Bs[s][b_row + l * B_ROWS_PER_LOAD][b_col]) = rb[l];
            }
        };

        // [pipeline]
        fetch(0);
        stash(0);
        __syncthreads();
        for (size_t t = 0; t < k_steps; ++t) {
            const int s = static_cast<int>(t & 1);
            const bool more = t + 1 < k_steps;
            if (more) {
                fetch((t + 1) * BK);  // in flight during the arithmetic below
            }
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float a[TM], b[TN];
#pragma unroll
                for (int i = 0; i < STRIPS_M; ++i) {
                    const float4 v = *reinterpret_cast<const float4 *>(&As[s][k][warp_row + i * STRIP_M + lane_row]);
                    a[i * VEC + 0] = v.x, a[i * VEC + 1] = v.y, a[i * VEC + 2] = v.z, a[i * VEC + 3] = v.w;
                }
#pragma unroll
                for (int j = 0; j < STRIPS_N; ++j) {
                    const float4 v = *reinterpret_cast<const float4 *>(&Bs[s][k][warp_col + j * STRIP_N + lane_col]);
                    b[j * VEC + 0] = v.x, b[j * VEC + 1] = v.y, b[j * VEC + 2] = v.z, b[j * VEC + 3] = v.w;
                }
#pragma unroll
                for (int m = 0; m < TM; ++m) {
#pragma unroll
                    for (int n = 0; n < TN; ++n) {
                        acc[m][n] = fmaf(a[m], b[n], acc[m][n]);
                    }
                }
            }
            if (more) {
                stash(s ^ 1);
            }
            __syncthreads();  // the stage just written is complete; the one just read may be overwritten
        }
        // [end pipeline]

        // Registers -> C: a thread's 4 x 4 blocks, row by row; a float4 per row and block when VECTOR.
#pragma unroll
        for (int i = 0; i < STRIPS_M; ++i) {
#pragma unroll
            for (int r = 0; r < VEC; ++r) {
                const size_t row = row0 + warp_row + i * STRIP_M + lane_row + r;
                if (row >= M) {
                    continue;
                }
#pragma unroll
                for (int j = 0; j < STRIPS_N; ++j) {
                    const size_t col = col0 + warp_col + j * STRIP_N + lane_col;
                    const float *v = &acc[i * VEC + r][j * VEC];
                    float *p = C + row * N + col;
                    if constexpr (VECTOR) {
                        if (col < N) {
                            *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
                        }
                    } else {
#pragma unroll
                        for (int c = 0; c < VEC; ++c) {
                            if (col + c < N) {
                                p[c] = v[c];
                            }
                        }
                    }
                }
            }
        }
    }
}

}  // namespace sgemm

// One extern "C" kernel per configuration: the name carries the tile sizes, so a measurement names the
// configuration it measured (sgemm_tune_* move float4s, their any-input twins sgemm_any_* single floats);
// SGEMM_KERNEL_AS gives a configuration a name of its own (sgemm_08_double_buffer).
// MIN_BLOCKS goes to __launch_bounds__: ptxas then keeps each thread within 65536 / (THREADS * MIN_BLOCKS)
// registers (at most 255), so that MIN_BLOCKS blocks fit on an SM. Each instantiation's choice and what
// ptxas made of it (registers, spills) are listed in kernels/sgemm.cu.
#define SGEMM_KERNEL_AS(NAME, VECTOR, BM, BN, BK, WM, WN, TM, TN, MIN_BLOCKS)                            \
    extern "C" __global__ void __launch_bounds__(sgemm::threads(BM, BN, WM, WN), MIN_BLOCKS)              \
        NAME(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M,     \
             size_t N, size_t K)                                                                          \
    {                                                                                                     \
        sgemm::tiled<BM, BN, BK, WM, WN, TM, TN, VECTOR>(C, A, B, M, N, K);                               \
    }
#define SGEMM_KERNEL(PREFIX, VECTOR, BM, BN, BK, WM, WN, TM, TN, MIN_BLOCKS)                              \
    SGEMM_KERNEL_AS(PREFIX##_##BM##x##BN##x##BK##_##WM##x##WN##_##TM##x##TN, VECTOR, BM, BN, BK, WM, WN, TM, \
                    TN, MIN_BLOCKS)
