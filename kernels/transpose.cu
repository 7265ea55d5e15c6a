// transpose.cu -- out = in^T for a row-major float matrix: in is rows x cols, out is cols x rows.
//
// Two versions of the same kernel, to measure why shared memory matters:
//
// * transpose_naive reads `in` along rows (coalesced: a warp reads 32 consecutive floats) but writes
//   `out` down a column: the 32 threads of a warp write 32 floats `rows` floats apart, 32 separate
//   memory transactions where one would do.
// * transpose_padded stages a 32x32 tile in shared memory: it reads a tile of `in` row by row
//   (coalesced), then writes the tile's *columns* as rows of `out` (coalesced too). The transpose
//   happens in shared memory, where any access pattern is cheap -- except bank conflicts: shared
//   memory has 32 banks of 4 bytes, and a 32-float-wide tile puts a whole column in one bank, so
//   reading a column would be a 32-way conflict (serialized 32 times). The tile is therefore
//   TILE_DIM x (TILE_DIM + 1): the extra column shifts each row by one bank, a column's 32 elements
//   land in 32 different banks, and the column read is conflict-free.
//
// Launch configuration (both kernels; the kernels rely on the block shape):
//   block = (TILE_DIM, BLOCK_ROWS, 1) = (32, 8, 1): 256 threads; each thread handles
//           TILE_DIM / BLOCK_ROWS = 4 rows of a 32x32 tile (fewer threads than elements, so each
//           thread's index arithmetic is reused 4 times)
//   grid  = (ceil(cols / 32), ceil(rows / 32), 1)   (gridDim.y <= 65535, so rows <= 65535 * 32)
//   dynamic shared memory = 0 (the padded tile is static: 32 * 33 * 4 = 4224 bytes)
// Any rows and cols work: elements outside the matrix are neither read nor written.

#include <cstddef>

constexpr int TILE_DIM = 32;     // a tile is TILE_DIM x TILE_DIM elements; blockDim.x == TILE_DIM
constexpr int BLOCK_ROWS = 8;    // blockDim.y: each thread covers TILE_DIM / BLOCK_ROWS rows of its tile
constexpr int TILE_PAD = 1;      // the +1 column that removes shared-memory bank conflicts
constexpr int TRANSPOSE_THREADS = TILE_DIM * BLOCK_ROWS;

static_assert(TILE_DIM % BLOCK_ROWS == 0, "each thread must cover a whole number of tile rows");

extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS)
transpose_naive(float *__restrict__ out, const float *__restrict__ in, int rows, int cols)
{
    const int col = blockIdx.x * TILE_DIM + threadIdx.x;
    const int row0 = blockIdx.y * TILE_DIM + threadIdx.y;
    if (col >= cols) {
        return;
    }
#pragma unroll
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        const int row = row0 + j;
        if (row < rows) {
            out[static_cast<size_t>(col) * rows + row] = __ldg(in + static_cast<size_t>(row) * cols + col);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS)
transpose_padded(float *__restrict__ out, const float *__restrict__ in, int rows, int cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + TILE_PAD];

    // Read a tile of `in`: thread (x, y) reads rows y, y + 8, y + 16, y + 24 of the tile at column x.
    const int in_col = blockIdx.x * TILE_DIM + threadIdx.x;
    const int in_row0 = blockIdx.y * TILE_DIM + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        const int row = in_row0 + j;
        if (row < rows && in_col < cols) {
            tile[threadIdx.y + j][threadIdx.x] = __ldg(in + static_cast<size_t>(row) * cols + in_col);
        }
    }
    __syncthreads();

    // Write the tile transposed: the block's tile (by, bx) of `in` is tile (bx, by) of `out`. Thread
    // (x, y) now writes row y + j of the output tile, column x, which is column y + j, row x of `tile`.
    const int out_col = blockIdx.y * TILE_DIM + threadIdx.x;  // an index into `in`'s rows
    const int out_row0 = blockIdx.x * TILE_DIM + threadIdx.y; // an index into `in`'s columns
#pragma unroll
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        const int row = out_row0 + j;
        if (row < cols && out_col < rows) {
            out[static_cast<size_t>(row) * rows + out_col] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}
