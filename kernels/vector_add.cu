// vector_add.cu -- c[i] = a[i] + b[i]: the "hello world" of GPU programming, written the way that scales.
//
// Why it is written this way:
//
// * extern "C": the kernel's PTX name is exactly "vector_add", so cuModuleGetFunction(module,
//   "vector_add") finds it. Without it C++ name mangling would call it _Z10vector_addPfPKfS1_m.
// * A grid-stride loop instead of "one thread per element": any grid covers any n, so the launch can
//   size the grid for the GPU (a few waves of blocks) rather than for the data, and n larger than
//   gridDim.x * blockDim.x (or than 2^31) still works.
// * size_t indices: with int, i would overflow past 2^31 elements (8 GiB of float) -- a silent bug.
// * const float *__restrict__ inputs: the compiler may then read them through the read-only
//   (non-coherent) data path (ld.global.nc) and reorder loads freely. c may be a or b exactly (in
//   place): each element is read and then written by the one thread that owns it.
//
// Launch configuration (any grid is correct; this one is fast):
//   block = VECTOR_ADD_BLOCK (256) threads
//   grid  = min(ceil(n / 256), a few waves, e.g. 32 * number of SMs); at least 1
//   dynamic shared memory = 0

#include <cstddef>

// The block size the launch is documented (and tuned) for. Not enforced with __launch_bounds__: a
// grid-stride loop is correct for every block size, so a caller may choose another.
constexpr unsigned VECTOR_ADD_BLOCK = 256;
constexpr unsigned WARP_SIZE = 32;
static_assert(VECTOR_ADD_BLOCK % WARP_SIZE == 0, "a block should be a whole number of warps");

extern "C" __global__ void
vector_add(float *__restrict__ c, const float *__restrict__ a, const float *__restrict__ b, size_t n)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
}
