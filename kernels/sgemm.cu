// sgemm.cu -- fp32 matrix multiply C[M,N] = A[M,K] @ B[K,N] (row-major) as a measured progression.
//
// Each extern "C" kernel is one step, and each step changes one thing, said in its comment; bench/sgemm.py
// measures them all in one run next to torch.matmul, and tutorials/14_sgemm_progression.py walks them.
// The host-side launch description of every kernel (block, grid, what inputs it accepts) is one table:
// rawcuda/ops/sgemm.py. Every kernel takes (C, A, B, M, N, K) with size_t extents, handles any M, N, K (tiles
// past the edges are filled with zeros, stores outside C are skipped) and walks its row tiles in a
// grid-stride loop (blockIdx.y, blockIdx.y + gridDim.y, ...), so gridDim.y may be capped at 65535 and any
// M still works. Offsets are size_t: M * K passes 2^31 long before memory runs out.
//
// The arithmetic intensity is the thread of the whole story. An H200 does ~67 TFLOP/s of fp32 FMAs but
// moves ~4.8 TB/s from memory and ~128 bytes per clock per SM from shared memory; a kernel is fast only
// when each value it loads feeds many multiply-adds.
//
//   01 naive       one thread per C element; consecutive threads walk down a column of C: their A reads
//                  are K floats apart and their C writes N floats apart (uncoalesced)
//   02 coalesced   the same, with consecutive threads along a row of C: B reads and C writes coalesce
//   03 smem        32 x 32 tiles of A and B in shared memory: each value loaded from memory is used 32 times
//   04 reg1d       each thread computes 8 outputs of a column: one B value from shared feeds 8 FMAs
//   05 reg2d       each thread computes an 8 x 8 block: 16 shared loads feed 64 FMAs
//   06 float4      16-byte global loads and stores, A stored transposed so shared reads are float4 too
//   07 warptile    a warp's threads own interleaved 4 x 4 blocks of a 32 x 64 warp tile: shared reads
//                  without bank conflicts; the transposed A tile padded so its stores are conflict-free
//   08 double      two shared stages, next tile's loads in flight during the arithmetic, one barrier per
//      buffer      K-step (kernels/sgemm_tile.cuh, a template; sgemm_tune_* are its configurations)
//   09 tf32        tensor cores: mma.sync on TF32 inputs (10-bit mantissas), fp32 sums -- not fp32 any more,
//                  so measured against torch.matmul with TF32 allowed, and checked with a TF32 bound
//
// Steps 06 to 09 and sgemm_tune_* move float4s: they need 16-byte aligned A, B, C and N, K multiples of 4
// (rawcuda/ops/sgemm.py refuses other inputs for them). sgemm_any_* are the any-input twins of the tuned
// kernels (single-float loads and stores, each checked), which rawcuda.ops uses for everything else.
//
// The markers "// [step NN]" and "// [end NN]" delimit each step for the tutorial, which prints them.

#include <cstddef>
#include <cstdint>

#include "sgemm_tile.cuh"

// [step 01]
// One thread per element of C, each a K-long dot product read straight from global memory. Block
// (32, 8): threadIdx.x picks the *row*, so the 32 lanes of a warp hold 32 rows of one column. Their A
// loads are 32 addresses K floats apart (32 memory transactions for 128 useful bytes), their B loads all
// hit one address, and their C stores are N floats apart.
constexpr int NAIVE_ROWS = 32;  // rows of C per block (blockDim.x)
constexpr int NAIVE_COLS = 8;   // columns of C per block (blockDim.y)

extern "C" __global__ void __launch_bounds__(NAIVE_ROWS * NAIVE_COLS)
sgemm_01_naive(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
               size_t K)
{
    const size_t col = static_cast<size_t>(blockIdx.x) * NAIVE_COLS + threadIdx.y;
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * NAIVE_ROWS; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * NAIVE_ROWS) {
        const size_t row = row0 + threadIdx.x;
        if (row < M && col < N) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; ++k) {
                acc = fmaf(A[row * K + k], B[k * N + col], acc);
            }
            C[row * N + col] = acc;
        }
    }
}
// [end 01]

// [step 02]
// The same arithmetic with the thread roles swapped: threadIdx.x picks the *column*. A warp's B loads are
// now 32 consecutive floats (one 128-byte transaction), its A loads one broadcast address, and its C
// stores 32 consecutive floats. Nothing else changed.
constexpr int COALESCED_COLS = 32;  // blockDim.x
constexpr int COALESCED_ROWS = 8;   // blockDim.y

extern "C" __global__ void __launch_bounds__(COALESCED_COLS * COALESCED_ROWS)
sgemm_02_coalesced(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M,
                   size_t N, size_t K)
{
    const size_t col = static_cast<size_t>(blockIdx.x) * COALESCED_COLS + threadIdx.x;
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * COALESCED_ROWS; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * COALESCED_ROWS) {
        const size_t row = row0 + threadIdx.y;
        if (row < M && col < N) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; ++k) {
                acc = fmaf(A[row * K + k], B[k * N + col], acc);
            }
            C[row * N + col] = acc;
        }
    }
}
// [end 02]

// [step 03]
// Shared-memory tiles. A block of 32 x 32 threads computes a 32 x 32 tile of C. Per step of 32 along K it
// copies a 32 x 32 tile of A and one of B into shared memory (each thread one element of each, coalesced),
// waits, and then every thread reads its row of As and its column of Bs from there: each value fetched
// from global memory is used 32 times. Two barriers per step: the tiles are complete before anyone reads
// them, and nobody overwrites them while someone still reads.
constexpr int SMEM_TILE = 32;  // block (32, 32); tile side and K-step

extern "C" __global__ void __launch_bounds__(SMEM_TILE * SMEM_TILE)
sgemm_03_smem(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
              size_t K)
{
    __shared__ float As[SMEM_TILE][SMEM_TILE];
    __shared__ float Bs[SMEM_TILE][SMEM_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const size_t col = static_cast<size_t>(blockIdx.x) * SMEM_TILE + tx;
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * SMEM_TILE; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * SMEM_TILE) {
        const size_t row = row0 + ty;
        float acc = 0.0f;
        for (size_t k0 = 0; k0 < K; k0 += SMEM_TILE) {
            As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
            Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < SMEM_TILE; ++k) {
                acc = fmaf(As[ty][k], Bs[k][tx], acc);  // As: one address per warp (broadcast); Bs: 32 banks
            }
            __syncthreads();
        }
        if (row < M && col < N) {
            C[row * N + col] = acc;
        }
    }
}
// [end 03]

// [step 04]
// 1-D register blocking. Step 03 does one shared load per FMA, and shared memory, not arithmetic, sets
// its pace. Here each thread computes REG1D_TM = 8 outputs of one column, kept in registers: per k it
// reads one value of B and 8 of A (one address per warp: a broadcast) for 8 FMAs. Block tile 64 x 64,
// K-step 8, 512 threads; each thread loads one element of each tile.
constexpr int REG1D_BM = 64, REG1D_BN = 64, REG1D_BK = 8, REG1D_TM = 8;
constexpr int REG1D_THREADS = REG1D_BM * REG1D_BN / REG1D_TM;  // 512
static_assert(REG1D_BM * REG1D_BK == REG1D_THREADS && REG1D_BK * REG1D_BN == REG1D_THREADS, "one load each");

extern "C" __global__ void __launch_bounds__(REG1D_THREADS)
sgemm_04_reg1d(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
               size_t K)
{
    __shared__ float As[REG1D_BM][REG1D_BK];
    __shared__ float Bs[REG1D_BK][REG1D_BN];
    const int tid = threadIdx.x;
    const int tx = tid % REG1D_BN, ty = tid / REG1D_BN;  // this thread: column tx, rows ty*8 .. ty*8+7
    const int a_r = tid / REG1D_BK, a_c = tid % REG1D_BK;
    const int b_r = tid / REG1D_BN, b_c = tid % REG1D_BN;
    const size_t col0 = static_cast<size_t>(blockIdx.x) * REG1D_BN;
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * REG1D_BM; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * REG1D_BM) {
        float acc[REG1D_TM] = {};
        for (size_t k0 = 0; k0 < K; k0 += REG1D_BK) {
            const size_t ar = row0 + a_r, ak = k0 + a_c, bk = k0 + b_r, bc = col0 + b_c;
            As[a_r][a_c] = (ar < M && ak < K) ? A[ar * K + ak] : 0.0f;
            Bs[b_r][b_c] = (bk < K && bc < N) ? B[bk * N + bc] : 0.0f;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < REG1D_BK; ++k) {
                const float b = Bs[k][tx];
#pragma unroll
                for (int i = 0; i < REG1D_TM; ++i) {
                    acc[i] = fmaf(As[ty * REG1D_TM + i][k], b, acc[i]);
                }
            }
            __syncthreads();
        }
        const size_t col = col0 + tx;
#pragma unroll
        for (int i = 0; i < REG1D_TM; ++i) {
            const size_t row = row0 + ty * REG1D_TM + i;
            if (row < M && col < N) {
                C[row * N + col] = acc[i];
            }
        }
    }
}
// [end 04]

// [step 05]
// 2-D register blocking. Each thread computes an 8 x 8 block of C: per k it reads 8 values of A and 8 of
// B from shared memory and does 64 FMAs with them (4 FMAs per shared load, where step 04 did 8/9 and step
// 03 one). Block tile 128 x 128 (each global value now serves 128 outputs), K-step 8, 256 threads in a
// 16 x 16 grid; each thread loads 4 elements of each tile.
constexpr int REG2D_BM = 128, REG2D_BN = 128, REG2D_BK = 8, REG2D_TM = 8, REG2D_TN = 8;
constexpr int REG2D_THREADS = (REG2D_BM / REG2D_TM) * (REG2D_BN / REG2D_TN);  // 256
constexpr int REG2D_LOADS = REG2D_BM * REG2D_BK / REG2D_THREADS;              // 4 of A, 4 of B
static_assert(REG2D_BK * REG2D_BN / REG2D_THREADS == REG2D_LOADS, "the tiles are the same size");

extern "C" __global__ void __launch_bounds__(REG2D_THREADS)
sgemm_05_reg2d(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
               size_t K)
{
    __shared__ float As[REG2D_BM][REG2D_BK];
    __shared__ float Bs[REG2D_BK][REG2D_BN];
    const int tid = threadIdx.x;
    const int tx = tid % (REG2D_BN / REG2D_TN), ty = tid / (REG2D_BN / REG2D_TN);
    const size_t col0 = static_cast<size_t>(blockIdx.x) * REG2D_BN;
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * REG2D_BM; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * REG2D_BM) {
        float acc[REG2D_TM][REG2D_TN] = {};
        for (size_t k0 = 0; k0 < K; k0 += REG2D_BK) {
#pragma unroll
            for (int l = 0; l < REG2D_LOADS; ++l) {
                const int idx = tid + l * REG2D_THREADS;
                const int ar = idx / REG2D_BK, ac = idx % REG2D_BK, br = idx / REG2D_BN, bc = idx % REG2D_BN;
                const size_t row = row0 + ar, ak = k0 + ac, bk = k0 + br, col = col0 + bc;
                As[ar][ac] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
                Bs[br][bc] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < REG2D_BK; ++k) {
                float a[REG2D_TM], b[REG2D_TN];
#pragma unroll
                for (int i = 0; i < REG2D_TM; ++i) {
                    a[i] = As[ty * REG2D_TM + i][k];
                }
#pragma unroll
                for (int j = 0; j < REG2D_TN; ++j) {
                    b[j] = Bs[k][tx * REG2D_TN + j];
                }
#pragma unroll
                for (int i = 0; i < REG2D_TM; ++i) {
#pragma unroll
                    for (int j = 0; j < REG2D_TN; ++j) {
                        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                    }
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < REG2D_TM; ++i) {
            const size_t row = row0 + ty * REG2D_TM + i;
#pragma unroll
            for (int j = 0; j < REG2D_TN; ++j) {
                const size_t col = col0 + tx * REG2D_TN + j;
                if (row < M && col < N) {
                    C[row * N + col] = acc[i][j];
                }
            }
        }
    }
}
// [end 05]

// [step 06]
// Vectors. The tiles and the 8 x 8 blocks of step 05, but global memory is read and written 16 bytes at
// a time (float4: a quarter of the load instructions), and the A tile is stored transposed, As[k][m], so
// that a thread's 8 values of A for one k are contiguous and come in two float4 shared loads, like its 8
// values of B. Needs 16-byte aligned pointers and N, K multiples of 4: then a float4 is wholly inside a
// matrix or wholly outside it, and one bounds check covers it. Each thread loads one float4 of each tile.
constexpr int F4_BM = 128, F4_BN = 128, F4_BK = 8, F4_TM = 8, F4_TN = 8;
constexpr int F4_THREADS = (F4_BM / F4_TM) * (F4_BN / F4_TN);  // 256
// Left to itself ptxas (sm_90) gave this kernel 128 registers and spilled 24 bytes to local memory; asked
// for one block per SM it takes 141 and spills nothing (and one block of 256 threads is what fits).
constexpr int F4_MIN_BLOCKS = 1;
static_assert(F4_BM * F4_BK / 4 == F4_THREADS && F4_BK * F4_BN / 4 == F4_THREADS, "one float4 each");

extern "C" __global__ void __launch_bounds__(F4_THREADS, F4_MIN_BLOCKS)
sgemm_06_float4(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
                size_t K)
{
    __shared__ __align__(16) float As[F4_BK][F4_BM];  // transposed
    __shared__ __align__(16) float Bs[F4_BK][F4_BN];
    const int tid = threadIdx.x;
    const int tx = tid % (F4_BN / F4_TN), ty = tid / (F4_BN / F4_TN);
    const int a_r = tid / (F4_BK / 4), a_c = (tid % (F4_BK / 4)) * 4;  // 4 consecutive k of one row of A
    const int b_r = tid / (F4_BN / 4), b_c = (tid % (F4_BN / 4)) * 4;  // 4 consecutive columns of B
    const size_t col0 = static_cast<size_t>(blockIdx.x) * F4_BN;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * F4_BM; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * F4_BM) {
        float acc[F4_TM][F4_TN] = {};
        for (size_t k0 = 0; k0 < K; k0 += F4_BK) {
            const size_t ar = row0 + a_r, ak = k0 + a_c, bk = k0 + b_r, bc = col0 + b_c;
            const float4 va = (ar < M && ak < K) ? *reinterpret_cast<const float4 *>(A + ar * K + ak) : zero;
            As[a_c + 0][a_r] = va.x;
            As[a_c + 1][a_r] = va.y;
            As[a_c + 2][a_r] = va.z;
            As[a_c + 3][a_r] = va.w;
            *reinterpret_cast<float4 *>(&Bs[b_r][b_c]) =
                (bk < K && bc < N) ? *reinterpret_cast<const float4 *>(B + bk * N + bc) : zero;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < F4_BK; ++k) {
                float a[F4_TM], b[F4_TN];
#pragma unroll
                for (int i = 0; i < F4_TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(&As[k][ty * F4_TM + i]);
                    a[i] = v.x, a[i + 1] = v.y, a[i + 2] = v.z, a[i + 3] = v.w;
                }
#pragma unroll
                for (int j = 0; j < F4_TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(&Bs[k][tx * F4_TN + j]);
                    b[j] = v.x, b[j + 1] = v.y, b[j + 2] = v.z, b[j + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < F4_TM; ++i) {
#pragma unroll
                    for (int j = 0; j < F4_TN; ++j) {
                        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                    }
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < F4_TM; ++i) {
            const size_t row = row0 + ty * F4_TM + i;
#pragma unroll
            for (int j = 0; j < F4_TN; j += 4) {
                const size_t col = col0 + tx * F4_TN + j;
                if (row < M && col < N) {
                    *reinterpret_cast<float4 *>(C + row * N + col) =
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
                }
            }
        }
    }
}
// [end 06]

// [step 07]
// Warp tiling and bank conflicts. In step 06 a warp is 2 x 16 threads, each owning 8 contiguous columns:
// its float4 reads of Bs start 32 bytes apart, so 16 lanes spread over 512 bytes and meet each other in
// the same banks (4 wavefronts for one instruction), and it reads 16 rows of A + 128 columns of B per k.
// Here the 8 warps of a block each own a 32 x 64 warp tile (4 x 2 of them), the 32 lanes of a warp form
// a 4 x 8 grid, and a thread's 8 x 8 outputs are four 4 x 4 blocks, one per quarter of the warp tile
// (rows lane_row + {0, 16}, columns lane_col + {0, 32}). Each float4 read of the warp then covers
// consecutive 16-byte pieces -- 8 of them (128 bytes, every bank once) for B, 4 for A, with lanes of a
// lane-row sharing an address -- and a warp reads 32 + 64 values per k instead of 16 + 128. The A tile
// gets WT_A_PAD floats per row: its transposed stores (16 rows at k and 16 at k + 4 per warp) would
// otherwise meet two by two in the same bank; 4 * (128 + 4) = 16 mod 32 puts the halves 16 banks apart,
// and a multiple of 4 keeps every row 16-byte aligned.
constexpr int WT_BM = 128, WT_BN = 128, WT_BK = 8, WT_WM = 32, WT_WN = 64, WT_TM = 8, WT_TN = 8;
constexpr int WT_WARPS_N = WT_BN / WT_WN;                                       // 2 (and 4 along M)
constexpr int WT_LANES_N = WT_WN / WT_TN;                                       // 8 (and 4 along M)
constexpr int WT_THREADS = (WT_BM / WT_WM) * WT_WARPS_N * 32;                   // 256
constexpr int WT_STRIP_M = (WT_WM / WT_TM) * 4, WT_STRIP_N = WT_LANES_N * 4;    // 16, 32
constexpr int WT_A_PAD = 4;
constexpr int WT_MIN_BLOCKS = 2;  // 128 registers per thread, no spills (ptxas -arch=sm_90): 16 warps per SM
static_assert(WT_BM * WT_BK / 4 == WT_THREADS && WT_BK * WT_BN / 4 == WT_THREADS, "one float4 each");
static_assert((WT_WM / WT_TM) * WT_LANES_N == 32, "one 8 x 8 block per lane");

extern "C" __global__ void __launch_bounds__(WT_THREADS, WT_MIN_BLOCKS)
sgemm_07_warptile(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
                  size_t K)
{
    __shared__ __align__(16) float As[WT_BK][WT_BM + WT_A_PAD];  // transposed, padded
    __shared__ __align__(16) float Bs[WT_BK][WT_BN];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / WT_WARPS_N) * WT_WM, warp_col = (warp % WT_WARPS_N) * WT_WN;
    const int lane_row = (lane / WT_LANES_N) * 4, lane_col = (lane % WT_LANES_N) * 4;
    const int a_r = tid / (WT_BK / 4), a_c = (tid % (WT_BK / 4)) * 4;
    const int b_r = tid / (WT_BN / 4), b_c = (tid % (WT_BN / 4)) * 4;
    const size_t col0 = static_cast<size_t>(blockIdx.x) * WT_BN;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * WT_BM; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * WT_BM) {
        float acc[WT_TM][WT_TN] = {};
        for (size_t k0 = 0; k0 < K; k0 += WT_BK) {
            const size_t ar = row0 + a_r, ak = k0 + a_c, bk = k0 + b_r, bc = col0 + b_c;
            const float4 va = (ar < M && ak < K) ? *reinterpret_cast<const float4 *>(A + ar * K + ak) : zero;
            As[a_c + 0][a_r] = va.x;
            As[a_c + 1][a_r] = va.y;
            As[a_c + 2][a_r] = va.z;
            As[a_c + 3][a_r] = va.w;
            *reinterpret_cast<float4 *>(&Bs[b_r][b_c]) =
                (bk < K && bc < N) ? *reinterpret_cast<const float4 *>(B + bk * N + bc) : zero;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < WT_BK; ++k) {
                float a[WT_TM], b[WT_TN];
#pragma unroll
                for (int i = 0; i < WT_TM / 4; ++i) {
                    const float4 v = *reinterpret_cast<const float4 *>(&As[k][warp_row + i * WT_STRIP_M + lane_row]);
                    a[4 * i] = v.x, a[4 * i + 1] = v.y, a[4 * i + 2] = v.z, a[4 * i + 3] = v.w;
                }
#pragma unroll
                for (int j = 0; j < WT_TN / 4; ++j) {
                    const float4 v = *reinterpret_cast<const float4 *>(&Bs[k][warp_col + j * WT_STRIP_N + lane_col]);
                    b[4 * j] = v.x, b[4 * j + 1] = v.y, b[4 * j + 2] = v.z, b[4 * j + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < WT_TM; ++i) {
#pragma unroll
                    for (int j = 0; j < WT_TN; ++j) {
                        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                    }
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < WT_TM; ++i) {
            const size_t row = row0 + warp_row + (i / 4) * WT_STRIP_M + lane_row + i % 4;
#pragma unroll
            for (int j = 0; j < WT_TN; j += 4) {
                const size_t col = col0 + warp_col + (j / 4) * WT_STRIP_N + lane_col;
                if (row < M && col < N) {
                    *reinterpret_cast<float4 *>(C + row * N + col) =
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
                }
            }
        }
    }
}
// [end 07]

// [step 08]
// Double buffering: step 07's tiles in a template (kernels/sgemm_tile.cuh) with two shared stages. The
// loads of K-step t+1 are issued before the arithmetic of step t and land in the other stage after it,
// so their latency hides behind the FMAs, and one barrier per K-step replaces two.
SGEMM_KERNEL_AS(sgemm_08_double_buffer, true, 128, 128, 8, 32, 64, 8, 8, 2)
// [end 08]

// [step 09]
// Tensor cores, TF32. Not an fp32 kernel: mma.sync.aligned.m16n8k8 multiplies a 16 x 8 tile of A by an 8 x 8
// tile of B in one warp-wide instruction, on TF32 inputs -- fp32's 8-bit exponent with 10 mantissa bits
// instead of 23 -- accumulating in fp32. Each input is rounded once, when it is staged in shared memory
// (cvt.rna.tf32.f32), so a product carries a relative error up to ~2^-10 where fp32's is 2^-24: what
// torch.matmul gives with allow_tf32 = True. The structure is step 08's: 128 x 128 block tiles, two
// shared stages, the next K-step's loads in flight during the arithmetic; 8 warps each own a 64 x 32 warp
// tile, 4 x 4 mma tiles of 16 x 8. The PTX ISA fixes which lane holds what (g = lane / 4, t = lane % 4):
// A's a0..a3 are A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; B's b0, b1 are B[t][g], B[t+4][g]; the four
// results are D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]. A is kept m-major (As[m][k]) and B k-major
// (Bs[k][n]); their row pitches, 20 and 136 floats, put the 32 lanes of every fragment read in 32 different
// banks (g * 20 + t and t * 136 + g, mod 32). Needs what the float4 kernels need.
constexpr int TC_BM = 128, TC_BN = 128, TC_BK = 16;
constexpr int TC_WM = 64, TC_WN = 32;                      // warp tile
constexpr int TC_MMA_M = 16, TC_MMA_N = 8, TC_MMA_K = 8;   // one mma.sync.m16n8k8
constexpr int TC_WARPS_N = TC_BN / TC_WN;                  // 4 (and 2 along M)
constexpr int TC_THREADS = (TC_BM / TC_WM) * TC_WARPS_N * 32;  // 256
constexpr int TC_TILES_M = TC_WM / TC_MMA_M, TC_TILES_N = TC_WN / TC_MMA_N;  // 4 x 4 mma tiles per warp
constexpr int TC_A_STRIDE = TC_BK + 4;  // As[m][k]: 20 floats per row (16-byte aligned rows, see above)
constexpr int TC_B_STRIDE = TC_BN + 8;  // Bs[k][n]: 136 floats per row
constexpr int TC_A_LOADS = TC_BM * TC_BK / 4 / TC_THREADS;  // float4s per thread per K-step: 2
constexpr int TC_B_LOADS = TC_BK * TC_BN / 4 / TC_THREADS;  // 2
constexpr int TC_MIN_BLOCKS = 2;
static_assert(TC_A_LOADS * 4 * TC_THREADS == TC_BM * TC_BK && TC_B_LOADS * 4 * TC_THREADS == TC_BK * TC_BN, "");
static_assert(TC_TILES_M * TC_MMA_M == TC_WM && TC_TILES_N * TC_MMA_N == TC_WN && TC_BK % TC_MMA_K == 0, "");

__device__ __forceinline__ uint32_t to_tf32(float x)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#else
    return emulated_cvt_rna_tf32(x);  // tests/kernels/cuda_on_cpu.h (the CPU test)
#endif
}

// d += a (16 x 8) @ b (8 x 8), one warp: each lane holds 4 values of a, 2 of b and 4 of d.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
#ifdef __CUDA_ARCH__
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emulated_mma_m16n8k8_tf32(d, a, b);
#endif
}

extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MIN_BLOCKS)
sgemm_09_tf32(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N,
              size_t K)
{
    __shared__ __align__(16) uint32_t As[2][TC_BM][TC_A_STRIDE];  // TF32 bits, m-major
    __shared__ __align__(16) uint32_t Bs[2][TC_BK][TC_B_STRIDE];  // TF32 bits, k-major
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int warp_row = (warp / TC_WARPS_N) * TC_WM, warp_col = (warp % TC_WARPS_N) * TC_WN;
    const int a_row = tid / (TC_BK / 4), a_k = (tid % (TC_BK / 4)) * 4;  // one float4: 4 k of a row of A
    const int b_row = tid / (TC_BN / 4), b_col = (tid % (TC_BN / 4)) * 4;
    constexpr int A_ROWS_PER_LOAD = TC_THREADS / (TC_BK / 4), B_ROWS_PER_LOAD = TC_THREADS / (TC_BN / 4);
    const size_t col0 = static_cast<size_t>(blockIdx.x) * TC_BN;
    const size_t k_steps = (K + TC_BK - 1) / TC_BK;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (size_t row0 = static_cast<size_t>(blockIdx.y) * TC_BM; row0 < M;
         row0 += static_cast<size_t>(gridDim.y) * TC_BM) {
        float acc[TC_TILES_M][TC_TILES_N][4] = {};
        float4 ra[TC_A_LOADS], rb[TC_B_LOADS];
        auto fetch = [&](size_t k0) {
#pragma unroll
            for (int l = 0; l < TC_A_LOADS; ++l) {
                const size_t row = row0 + a_row + l * A_ROWS_PER_LOAD, k = k0 + a_k;
                ra[l] = (row < M && k < K) ? __ldg(reinterpret_cast<const float4 *>(A + row * K + k)) : zero;
            }
#pragma unroll
            for (int l = 0; l < TC_B_LOADS; ++l) {
                const size_t k = k0 + b_row + l * B_ROWS_PER_LOAD, col = col0 + b_col;
                rb[l] = (k < K && col < N) ? __ldg(reinterpret_cast<const float4 *>(B + k * N + col)) : zero;
            }
        };
        auto stash = [&](int s) {  // rounded to TF32 once, here, not at every use
#pragma unroll
            for (int l = 0; l < TC_A_LOADS; ++l) {
                *reinterpret_cast<uint4 *>(&As[s][a_row + l * A_ROWS_PER_LOAD][a_k]) =
                    make_uint4(to_tf32(ra[l].x), to_tf32(ra[l].y), to_tf32(ra[l].z), to_tf32(ra[l].w));
            }
#pragma unroll
            for (int l = 0; l < TC_B_LOADS; ++l) {
                *reinterpret_cast<uint4 *>(&Bs[s][b_row + l * B_ROWS_PER_LOAD][b_col]) =
                    make_uint4(to_tf32(rb[l].x), to_tf32(rb[l].y), to_tf32(rb[l].z), to_tf32(rb[l].w));
            }
        };
        fetch(0);
        stash(0);
        __syncthreads();
        for (size_t step = 0; step < k_steps; ++step) {
            const int s = static_cast<int>(step & 1);
            const bool more = step + 1 < k_steps;
            if (more) {
                fetch((step + 1) * TC_BK);
            }
#pragma unroll
            for (int kk = 0; kk < TC_BK; kk += TC_MMA_K) {
                uint32_t af[TC_TILES_M][4], bf[TC_TILES_N][2];
#pragma unroll
                for (int i = 0; i < TC_TILES_M; ++i) {
                    const int r = warp_row + i * TC_MMA_M + g;
                    af[i][0] = As[s][r][kk + t];
                    af[i][1] = As[s][r + 8][kk + t];
                    af[i][2] = As[s][r][kk + t + 4];
                    af[i][3] = As[s][r + 8][kk + t + 4];
                }
#pragma unroll
                for (int j = 0; j < TC_TILES_N; ++j) {
                    const int c = warp_col + j * TC_MMA_N + g;
                    bf[j][0] = Bs[s][kk + t][c];
                    bf[j][1] = Bs[s][kk + t + 4][c];
                }
#pragma unroll
                for (int i = 0; i < TC_TILES_M; ++i) {
#pragma unroll
                    for (int j = 0; j < TC_TILES_N; ++j) {
                        mma_tf32(acc[i][j], af[i], bf[j]);
                    }
                }
            }
            if (more) {
                stash(s ^ 1);
            }
            __syncthreads();
        }
        // Each lane's results come in pairs of adjacent columns: one 8-byte store per pair (N even, so a
        // pair is wholly inside C or wholly outside it).
#pragma unroll
        for (int i = 0; i < TC_TILES_M; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const size_t row = row0 + warp_row + i * TC_MMA_M + g + 8 * half;
                if (row >= M) {
                    continue;
                }
#pragma unroll
                for (int j = 0; j < TC_TILES_N; ++j) {
                    const size_t col = col0 + warp_col + j * TC_MMA_N + 2 * t;
                    if (col < N) {
                        *reinterpret_cast<float2 *>(C + row * N + col) =
                            make_float2(acc[i][j][2 * half], acc[i][j][2 * half + 1]);
                    }
                }
            }
        }
    }
}
// [end 09]

// The configurations one device run sweeps (bench/sgemm.py); rawcuda/ops/sgemm.py lists the same names.
// The last argument is the blocks per SM ptxas must leave room for (the register ceiling); what ptxas
// -arch=sm_90 made of each (registers per thread, bytes spilled to local memory) is in the comment.
// 8 x 8 per thread, 256 threads, 2 blocks (16 warps) per SM:
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 8, 32, 64, 8, 8, 2)    // 128 registers, no spills
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 8, 64, 32, 8, 8, 2)    // 128, none
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 16, 32, 64, 8, 8, 2)   // 128, 36 bytes (2 local loads per K-step)
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 16, 64, 32, 8, 8, 2)   // 128, 36 bytes
// 8 x 8 (or 8 x 4) per thread, 128 threads: smaller tiles, more blocks, for matrices too small or too
// narrow to give every SM two 128 x 128 tiles.
SGEMM_KERNEL(sgemm_tune, true, 128, 64, 16, 64, 32, 8, 8, 4)    // 128, 32 bytes
SGEMM_KERNEL(sgemm_tune, true, 64, 128, 16, 32, 64, 8, 8, 4)    // 128, 56 bytes
SGEMM_KERNEL(sgemm_tune, true, 64, 64, 16, 32, 32, 8, 4, 4)     //
// 8 x 16 or 16 x 8 per thread: 128 FMAs per 6 shared loads, but ~250 registers, so 8 warps per SM.
SGEMM_KERNEL(sgemm_tune, true, 128, 256, 8, 64, 64, 8, 16, 1)   // 255, none
SGEMM_KERNEL(sgemm_tune, true, 256, 128, 8, 64, 64, 16, 8, 1)   // 245, none
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 8, 64, 64, 8, 16, 2)   // 230, none
SGEMM_KERNEL(sgemm_tune, true, 128, 128, 16, 64, 64, 8, 16, 2)  // 255, none

// The any-input twins (single-float loads and stores, each bounds-checked) of four configurations: what
// rawcuda.ops runs when the float4 kernel cannot take the inputs (a pointer not 16-byte aligned, N or K
// not a multiple of 4). bench/sgemm.py measures them too, on the same aligned inputs.
SGEMM_KERNEL(sgemm_any, false, 128, 128, 8, 32, 64, 8, 8, 2)    // 128, none
SGEMM_KERNEL(sgemm_any, false, 128, 128, 8, 64, 32, 8, 8, 2)    // 128, none
SGEMM_KERNEL(sgemm_any, false, 128, 128, 8, 64, 64, 8, 16, 2)   // 254, none
SGEMM_KERNEL(sgemm_any, false, 64, 64, 16, 32, 32, 8, 4, 4)     //
