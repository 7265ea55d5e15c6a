// elementwise.cu -- two activation kernels of a neural-network layer: bias + ReLU, and GELU.
//
// Why they are written this way:
//
// * Both are memory bound (a few flops per element), so the structure is the one that keeps memory
//   busy: coalesced accesses (consecutive threads touch consecutive floats) and grid-stride loops,
//   which make every grid correct and let the launch size the grid for the GPU, not for the data.
// * bias_relu is 2-D: x runs over columns, y over rows. A thread's column is fixed through its loop
//   over rows, so bias[c] is loaded once per column rather than once per element, and there is no
//   per-element division to recover the column from a flat index.
// * gelu uses the tanh approximation
//       gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//   evaluated exactly in this order in float32, so a numpy reference can use the same formula
//   (np.tanh on float32). The results agree to a few ulps, not bit for bit: nvcc contracts a * b + c
//   into one fused multiply-add (one rounding instead of two), and tanhf is not numpy's tanh. Without
//   --fast-math tanhf is accurate to a couple of ulps; with it, tanhf becomes a hardware
//   approximation and the tolerance must grow.
// * fmaxf(v, 0) returns 0 for a NaN v (IEEE maxNum), where np.maximum would propagate the NaN.
// * size_t for every extent, index and stride, so any shape an H200 holds works: rows, cols, n and
//   rows * cols may each pass 2^31 (8 GiB of float32). With `int c` (as this kernel once had) a
//   launch with rows = 2 and cols = 1,200,000,000 faulted: c + col_stride passed 2^31, wrapped to a
//   negative index, and bias[c] read far outside the buffer; cols >= 2^31 arrived as a negative int
//   and nothing was written at all. The strides are widened *before* they are multiplied:
//   blockDim.x * gridDim.x is a product of two 32-bit unsigned values and wraps past 2^32 otherwise.
//
// Launch configuration (any grid is correct; these are fast):
//   bias_relu: block = (ELEMENTWISE_BLOCK_X, ELEMENTWISE_BLOCK_Y, 1) = (32, 8, 1)
//              grid  = (min(ceil(cols / 32), 2^31 - 1), min(ceil(rows / 8), 65535), 1): the loops cover
//              the rest, so the grid's limits bound no shape
//   gelu:      block = GELU_BLOCK (256) threads
//              grid  = min(ceil(n / 256), a few waves, e.g. 32 * number of SMs); at least 1
//   dynamic shared memory = 0 for both

#include <cstddef>

constexpr unsigned ELEMENTWISE_BLOCK_X = 32;  // a warp spans 32 consecutive columns: coalesced
constexpr unsigned ELEMENTWISE_BLOCK_Y = 8;   // rows per block (256 threads in all)
constexpr unsigned GELU_BLOCK = 256;          // threads per block of the documented gelu launch
constexpr unsigned WARP_SIZE = 32;

static_assert(ELEMENTWISE_BLOCK_X == WARP_SIZE, "one warp per row of a block keeps the accesses coalesced");
constexpr unsigned MAX_THREADS_PER_BLOCK = 1024;
static_assert(ELEMENTWISE_BLOCK_X * ELEMENTWISE_BLOCK_Y <= MAX_THREADS_PER_BLOCK, "too many threads per block");
static_assert(GELU_BLOCK % WARP_SIZE == 0, "a block should be a whole number of warps");

constexpr float GELU_SQRT_2_OVER_PI = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float GELU_CUBIC = 0.044715f;                     // the cubic term's coefficient

extern "C" __global__ void
bias_relu(float *__restrict__ out, const float *__restrict__ in, const float *__restrict__ bias, size_t rows,
          size_t cols)
{
    const size_t col_stride = static_cast<size_t>(blockDim.x) * gridDim.x;
    const size_t row_stride = static_cast<size_t>(blockDim.y) * gridDim.y;
    for (size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += col_stride) {
        const float b = __ldg(bias + c);
        for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += row_stride) {
            const size_t i = r * cols + c;
            out[i] = fmaxf(__ldg(in + i) + b, 0.0f);
        }
    }
}

extern "C" __global__ void gelu(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = __ldg(in + i);
        const float inner = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(inner));
    }
}
