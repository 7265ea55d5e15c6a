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
//   blockIdx.x * blockDim.x is a 32-bit unsigned product, so it is widened before the multiply.
// * It is memory bound (one add per 12 bytes moved), so it is written for the memory system:
//   - float4 (16-byte) loads and stores when a, b and c are all 16-byte aligned (the usual case: cuMemAlloc
//     returns 256-byte aligned memory): a quarter of the memory instructions, full 512-byte requests
//     per warp. Views at odd offsets fall back to the scalar loop, which is always correct.
//   - VECTOR_ADD_UNROLL independent float4 pairs in flight per thread before any is used, so enough
//     bytes are in flight to cover DRAM latency (Little's law) without needing more threads.
// * const float *__restrict__ inputs: the compiler may read them through the read-only data path and
//   reorder the loads freely.
//
// Launch configuration (any grid is correct; this one is fast):
//   block = VECTOR_ADD_BLOCK (256) threads
//   grid  = min(ceil(n / 256), a few waves, e.g. 32 * number of SMs); at least 1
//   dynamic shared memory = 0

#include <cstddef>
#include <cstdint>

// The block size the launch is documented (and tuned) for. Not enforced with __launch_bounds__: a
// grid-stride loop is correct for every block size, so a caller may choose another.
constexpr unsigned VECTOR_ADD_BLOCK = 256;
constexpr unsigned WARP_SIZE = 32;
constexpr int VECTOR_ADD_UNROLL = 2;        // float4 pairs loaded per thread before any is added
constexpr size_t FLOATS_PER_VECTOR = 4;     // floats in a float4
constexpr uintptr_t VECTOR_ALIGN = 16;      // bytes: the alignment a float4 access needs
static_assert(VECTOR_ADD_BLOCK % WARP_SIZE == 0, "a block should be a whole number of warps");

__device__ __forceinline__ float4 add4(float4 x, float4 y)
{
    return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

__device__ __forceinline__ bool aligned16(const void *p)
{
    return reinterpret_cast<uintptr_t>(p) % VECTOR_ALIGN == 0;
}

extern "C" __global__ void
vector_add(float *__restrict__ c, const float *__restrict__ a, const float *__restrict__ b, size_t n)
{
    const size_t thread = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t threads = static_cast<size_t>(gridDim.x) * blockDim.x;

    size_t scalar_start = 0;
    if (aligned16(a) && aligned16(b) && aligned16(c)) {
        const float4 *__restrict__ a4 = reinterpret_cast<const float4 *>(a);
        const float4 *__restrict__ b4 = reinterpret_cast<const float4 *>(b);
        float4 *__restrict__ c4 = reinterpret_cast<float4 *>(c);
        const size_t vectors = n / FLOATS_PER_VECTOR;

        size_t i = thread;
        for (; i + (VECTOR_ADD_UNROLL - 1) * threads < vectors; i += VECTOR_ADD_UNROLL * threads) {
            float4 x[VECTOR_ADD_UNROLL], y[VECTOR_ADD_UNROLL];
#pragma unroll
            for (int u = 0; u < VECTOR_ADD_UNROLL; ++u) {
                x[u] = __ldg(a4 + i + u * threads);
                y[u] = __ldg(b4 + i + u * threads);
            }
#pragma unroll
            for (int u = 0; u < VECTOR_ADD_UNROLL; ++u) {
                c4[i + u * threads] = add4(x[u], y[u]);
            }
        }
        for (; i < vectors; i += threads) {
            c4[i] = add4(__ldg(a4 + i), __ldg(b4 + i));
        }
        scalar_start = vectors * FLOATS_PER_VECTOR;  // the last n % 4 elements, if any
    }
    for (size_t i = scalar_start + thread; i < n; i += threads) {
        c[i] = a[i] + b[i];
    }
}
