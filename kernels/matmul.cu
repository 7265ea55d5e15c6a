// matmul.cu -- C[M,N] = A[M,K] @ B[K,N], float32, row-major: shared-memory tiling + register blocking.
//
// Launch configuration (the kernel relies on it):
//   block = (MATMUL_THREADS_X, MATMUL_THREADS_Y, 1) = (16, 16, 1): 256 threads
//   grid  = (ceil(N / MATMUL_BLOCK_N), min(ceil(M / MATMUL_BLOCK_M), 65535), 1)
//         = (ceil(N / 64), min(ceil(M / 64), 65535), 1)
//   dynamic shared memory = 0 (the tiles are static: about 8.3 KiB per block)
//   M and N must be >= 1 (an empty grid is not a launch); K may be 0 (C becomes zeros).
//
// Why it is written this way:
//
// * The naive kernel (one thread per C element, K loads from A and K from B per element) is bound by
//   memory: 2 loads per multiply-add. Tiling fixes that in two levels:
//   1. Shared memory. A block computes a 64x64 tile of C. For each step of MATMUL_BLOCK_K (16) along
//      K, the block loads a 64x16 tile of A and a 16x64 tile of B into shared memory once, and every
//      value loaded is then used 64 times from there.
//   2. Registers. Each thread computes a 4x4 micro-tile of C, kept in 16 registers. Per step of k it
//      reads 4 values of A and 4 of B from shared memory and does 4 x 4 = 16 multiply-adds: 2 FMAs per
//      shared load instead of the 1/2 of the naive kernel.
// * The A tile is stored transposed (As[k][m]) so that a thread's 4 A values for one k are contiguous
//   (one 16-byte shared load), like its 4 B values in Bs[k][n]. The transposed store would put 16
//   threads of a warp on one bank; MATMUL_A_PAD (4 floats) staggers the rows, and a multiple of 4
//   keeps each row 16-byte aligned for the vector loads.
// * Global loads are coalesced: consecutive threads read consecutive columns of A and of B.
// * Edges: any M, N, K. Loads outside A or B put zeros in the tiles (zeros add nothing to the dot
//   products) and stores outside C are skipped, so no size needs to be a multiple of a tile; K = 1 is
//   one partial tile.
// * Sizes past 2^31: M, N, K and every global row, column and offset are size_t. An H200 holds a
//   1 x 2^31 B (8 GiB); with `int N` (as this kernel once took) N = 2^31 arrived negative, `col < N`
//   never held, and C was left unwritten; K = 2^31 made the k loop run zero times. Block indices are
//   widened before they are multiplied (blockIdx.x * 64 is a 32-bit unsigned product). What indexes a
//   tile or a thread's micro-tile (at most 64) stays int: it never grows with the matrices.
// * gridDim.y is at most 65535, so one block per row tile would stop at M = 65535 * 64 (4,194,240
//   rows, e.g. a 4.2M x 1000 A of 16 GiB): a block walks the row tiles blockIdx.y, blockIdx.y +
//   gridDim.y, ... (a grid-stride loop over tiles), so any M works. The loop's bounds are the same for
//   every thread of a block, so each __syncthreads inside it is reached by all of them. gridDim.x
//   allows 2^31 - 1 column tiles (N up to ~1.4e11, far past any GPU's memory); rawcuda.ops refuses more.
// * __launch_bounds__(256) lets the compiler budget registers for exactly this block size (and makes a
//   launch with more threads fail loudly instead of computing garbage).

#include <cstddef>

constexpr int MATMUL_BLOCK_M = 64;   // rows of C per block
constexpr int MATMUL_BLOCK_N = 64;   // columns of C per block
constexpr int MATMUL_BLOCK_K = 16;   // depth of the A and B tiles held in shared memory per step
constexpr int MATMUL_THREAD_M = 4;   // rows of C per thread (register micro-tile)
constexpr int MATMUL_THREAD_N = 4;   // columns of C per thread
constexpr int MATMUL_THREADS_X = MATMUL_BLOCK_N / MATMUL_THREAD_N;  // 16 = blockDim.x
constexpr int MATMUL_THREADS_Y = MATMUL_BLOCK_M / MATMUL_THREAD_M;  // 16 = blockDim.y
constexpr int MATMUL_THREADS = MATMUL_THREADS_X * MATMUL_THREADS_Y;  // 256
constexpr int MATMUL_A_PAD = 4;      // extra floats per row of the transposed A tile (see above)

constexpr int A_TILE_LOADS = MATMUL_BLOCK_M * MATMUL_BLOCK_K / MATMUL_THREADS;  // 4 per thread
constexpr int B_TILE_LOADS = MATMUL_BLOCK_K * MATMUL_BLOCK_N / MATMUL_THREADS;  // 4 per thread

static_assert(MATMUL_BLOCK_M * MATMUL_BLOCK_K % MATMUL_THREADS == 0, "A tile must split evenly over threads");
static_assert(MATMUL_BLOCK_K * MATMUL_BLOCK_N % MATMUL_THREADS == 0, "B tile must split evenly over threads");
static_assert(MATMUL_A_PAD % 4 == 0, "padding must keep the A tile rows 16-byte aligned");

extern "C" __global__ void __launch_bounds__(MATMUL_THREADS)
matmul(float *__restrict__ C, const float *__restrict__ A, const float *__restrict__ B, size_t M, size_t N, size_t K)
{
    __shared__ __align__(16) float As[MATMUL_BLOCK_K][MATMUL_BLOCK_M + MATMUL_A_PAD];  // A tile, transposed
    __shared__ __align__(16) float Bs[MATMUL_BLOCK_K][MATMUL_BLOCK_N];

    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int tx = tid % MATMUL_THREADS_X;  // which 4 columns of the block tile this thread computes
    const int ty = tid / MATMUL_THREADS_X;  // which 4 rows
    const size_t block_col = static_cast<size_t>(blockIdx.x) * MATMUL_BLOCK_N;
    const size_t row_step = static_cast<size_t>(gridDim.y) * MATMUL_BLOCK_M;

    for (size_t block_row = static_cast<size_t>(blockIdx.y) * MATMUL_BLOCK_M; block_row < M; block_row += row_step) {
        float acc[MATMUL_THREAD_M][MATMUL_THREAD_N] = {};

        for (size_t k0 = 0; k0 < K; k0 += MATMUL_BLOCK_K) {
            // Cooperative, coalesced tile loads; zeros outside the matrices.
#pragma unroll
            for (int l = 0; l < A_TILE_LOADS; ++l) {
                const int idx = tid + l * MATMUL_THREADS;
                const int r = idx / MATMUL_BLOCK_K, c = idx % MATMUL_BLOCK_K;
                const size_t row = block_row + r, col = k0 + c;
                As[c][r] = (row < M && col < K) ? __ldg(A + row * K + col) : 0.0f;
            }
#pragma unroll
            for (int l = 0; l < B_TILE_LOADS; ++l) {
                const int idx = tid + l * MATMUL_THREADS;
                const int r = idx / MATMUL_BLOCK_N, c = idx % MATMUL_BLOCK_N;
                const size_t row = k0 + r, col = block_col + c;
                Bs[r][c] = (row < K && col < N) ? __ldg(B + row * N + col) : 0.0f;
            }
            __syncthreads();

            // The register micro-tile: per k, 4 + 4 shared loads feed 16 FMAs.
#pragma unroll
            for (int k = 0; k < MATMUL_BLOCK_K; ++k) {
                float a[MATMUL_THREAD_M], b[MATMUL_THREAD_N];
#pragma unroll
                for (int i = 0; i < MATMUL_THREAD_M; ++i) {
                    a[i] = As[k][ty * MATMUL_THREAD_M + i];
                }
#pragma unroll
                for (int j = 0; j < MATMUL_THREAD_N; ++j) {
                    b[j] = Bs[k][tx * MATMUL_THREAD_N + j];
                }
#pragma unroll
                for (int i = 0; i < MATMUL_THREAD_M; ++i) {
#pragma unroll
                    for (int j = 0; j < MATMUL_THREAD_N; ++j) {
                        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                    }
                }
            }
            __syncthreads();  // everyone is done reading the tiles before the next step overwrites them
        }

#pragma unroll
        for (int i = 0; i < MATMUL_THREAD_M; ++i) {
            const size_t row = block_row + ty * MATMUL_THREAD_M + i;
            if (row >= M) {
                break;
            }
#pragma unroll
            for (int j = 0; j < MATMUL_THREAD_N; ++j) {
                const size_t col = block_col + tx * MATMUL_THREAD_N + j;
                if (col < N) {
                    C[row * N + col] = acc[i][j];
                }
            }
        }
    }
}
