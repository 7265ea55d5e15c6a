// transpose.cu -- out = in^T for a row-major float matrix: in is rows x cols, out is cols x rows.
//
// Three versions of the same kernel, so that two separate lessons can each be measured against a
// device-to-device copy of the same bytes (bench/progressions.py, tutorials/03b_transpose.py):
//
// * transpose_naive reads `in` along rows (coalesced: a warp reads 32 consecutive floats) but writes
//   `out` down a column: the 32 threads of a warp write 32 floats `rows` floats apart, 32 separate
//   memory transactions where one would do. It uses no shared memory at all.
// * transpose_unpadded stages a 32x32 tile in shared memory: it reads a tile of `in` row by row
//   (coalesced), then writes the tile's *columns* as rows of `out` (coalesced too). naive -> unpadded is
//   the coalescing lesson. The transpose now happens in shared memory, which has 32 banks of 4 bytes
//   (consecutive floats in consecutive banks: bank = float index % 32). A 32-float-wide tile puts a whole
//   column in one bank, so reading a column is a 32-way bank conflict, served one float at a time.
// * transpose_padded is transpose_unpadded with one change: the tile is TILE_DIM x (TILE_DIM + 1). The
//   extra column shifts each row by one bank, a column's 32 elements land in 32 different banks, and the
//   column read is conflict-free. unpadded -> padded is the bank-conflict lesson. Both kernels are one
//   template, transpose_tiled<PAD>, so the padding is the only difference between them.
//
//     bank of tile[r][c], 32 columns (PAD 0):        33 columns (PAD 1):
//              c=0  c=1  c=2 ... c=31                        c=0  c=1  c=2 ... c=31
//       r=0     0    1    2       31                  r=0     0    1    2       31
//       r=1     0    1    2       31                  r=1     1    2    3        0
//       r=2     0    1    2       31                  r=2     2    3    4        1
//       ...                                           ...
//       r=31    0    1    2       31                  r=31   31    0    1       30
//     a column (fixed c) is one bank: 32-way          a column is 32 different banks: conflict-free
//
// Launch configuration (all three kernels; they rely on the block shape):
//   block = (TILE_DIM, BLOCK_ROWS, 1) = (32, 8, 1): 256 threads; each thread handles
//           TILE_DIM / BLOCK_ROWS = 4 rows of a 32x32 tile (fewer threads than elements, so each
//           thread's index arithmetic is reused 4 times)
//   grid  = (ceil(cols / 32), min(ceil(rows / 32), 65535), 1)
//   dynamic shared memory = 0 (the tiles are static: 32 * 32 * 4 = 4096 bytes unpadded, 32 * 33 * 4 =
//   4224 padded)
// Any rows and cols work: elements outside the matrix are neither read nor written.
//
// Sizes past 2^31 (why everything that counts elements is size_t):
//
// * An H200 holds a 1 x 2^31 float matrix (8 GiB) with room to spare. With `int rows, cols` (as these
//   kernels once took), cols = 2^31 arrived as a negative int, `col >= cols` held for every thread,
//   and the launch returned normally having written nothing. rows, cols and every index and offset
//   derived from them are size_t; block indices are widened *before* they are multiplied, since
//   blockIdx.x * TILE_DIM is a 32-bit unsigned product.
// * gridDim.y is at most 65535, so one block per tile row would stop at 65535 * 32 rows (2,097,120):
//   a block walks the tile rows blockIdx.y, blockIdx.y + gridDim.y, ... (a grid-stride loop over
//   tiles), and any number of rows works. The loop's bounds are the same for every thread of a block,
//   so the __syncthreads inside it are reached by all of them. gridDim.x allows 2^31 - 1 tiles, more
//   columns than any GPU holds (2^36 floats, 256 GiB); rawcuda.ops refuses a wider matrix.

#include <cstddef>

constexpr int TILE_DIM = 32;     // a tile is TILE_DIM x TILE_DIM elements; blockDim.x == TILE_DIM
constexpr int BLOCK_ROWS = 8;    // blockDim.y: each thread covers TILE_DIM / BLOCK_ROWS rows of its tile
constexpr int TILE_PAD = 1;      // transpose_padded's +1 column that removes the bank conflicts
constexpr int TRANSPOSE_THREADS = TILE_DIM * BLOCK_ROWS;
// Blocks per SM for full occupancy on sm_80/sm_90 (2048 threads / 256). A copy is memory bound and
// needs every resident warp to keep loads in flight; the 64-bit indices cost registers, and without this
// hint ptxas used 44 per thread on sm_90, which fits only 5 blocks. With it: 31-32, no spills.
constexpr int TRANSPOSE_MIN_BLOCKS_PER_SM = 8;

static_assert(TILE_DIM % BLOCK_ROWS == 0, "each thread must cover a whole number of tile rows");

// -- begin transpose_naive
extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS, TRANSPOSE_MIN_BLOCKS_PER_SM)
transpose_naive(float *__restrict__ out, const float *__restrict__ in, size_t rows, size_t cols)
{
    const size_t col = static_cast<size_t>(blockIdx.x) * TILE_DIM + threadIdx.x;
    if (col >= cols) {
        return;  // no __syncthreads below: a thread may leave early
    }
    const size_t tile_step = static_cast<size_t>(gridDim.y) * TILE_DIM;
    for (size_t tile_row = static_cast<size_t>(blockIdx.y) * TILE_DIM; tile_row < rows; tile_row += tile_step) {
#pragma unroll
        for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
            const size_t row = tile_row + threadIdx.y + j;
            if (row < rows) {
                out[col * rows + row] = __ldg(in + row * cols + col);
            }
        }
    }
}
// -- end transpose_naive

// -- begin transpose_tiled
// The tiled transpose; PAD extra columns per tile row (0: transpose_unpadded, TILE_PAD: transpose_padded).
template <int PAD>
__device__ __forceinline__ void transpose_tiled(float *__restrict__ out, const float *__restrict__ in, size_t rows,
                                                size_t cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + PAD];

    const size_t in_col = static_cast<size_t>(blockIdx.x) * TILE_DIM + threadIdx.x;
    const size_t out_row0 = static_cast<size_t>(blockIdx.x) * TILE_DIM + threadIdx.y;  // an index into `in`'s columns
    const size_t tile_step = static_cast<size_t>(gridDim.y) * TILE_DIM;
    for (size_t tile_row = static_cast<size_t>(blockIdx.y) * TILE_DIM; tile_row < rows; tile_row += tile_step) {
        // Read a tile of `in`: thread (x, y) reads rows y, y + 8, y + 16, y + 24 of the tile at column x.
#pragma unroll
        for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
            const size_t row = tile_row + threadIdx.y + j;
            if (row < rows && in_col < cols) {
                tile[threadIdx.y + j][threadIdx.x] = __ldg(in + row * cols + in_col);
            }
        }
        __syncthreads();

        // Write the tile transposed: the tile at (tile_row, bx) of `in` is the tile at (bx, tile_row) of
        // `out`. Thread (x, y) now writes row y + j of the output tile, column x, which is column y + j,
        // row x of `tile`.
        const size_t out_col = tile_row + threadIdx.x;  // an index into `in`'s rows
#pragma unroll
        for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
            const size_t row = out_row0 + j;
            if (row < cols && out_col < rows) {
                out[row * rows + out_col] = tile[threadIdx.x][threadIdx.y + j];
            }
        }
        __syncthreads();  // every thread has read the tile before the next tile row overwrites it
    }
}
// -- end transpose_tiled

// -- begin transpose_unpadded
extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS, TRANSPOSE_MIN_BLOCKS_PER_SM)
transpose_unpadded(float *__restrict__ out, const float *__restrict__ in, size_t rows, size_t cols)
{
    transpose_tiled<0>(out, in, rows, cols);  // tile[32][32]: a column is one bank
}
// -- end transpose_unpadded

// -- begin transpose_padded
extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS, TRANSPOSE_MIN_BLOCKS_PER_SM)
transpose_padded(float *__restrict__ out, const float *__restrict__ in, size_t rows, size_t cols)
{
    transpose_tiled<TILE_PAD>(out, in, rows, cols);  // tile[32][33]: a column is 32 banks
}
// -- end transpose_padded
