// transcendentals.cu -- sinf, expf and logf in a compute-bound and a memory-bound kernel, built twice:
// as it is (precise math, the default), and by transcendentals_fast.cu, which #includes this file and is
// built with --use_fast_math. Same source, same kernel names, two modules: the only difference between
// the two is the compiler flag, so bench/progressions.py and tutorials/03d_fast_math.py can measure what
// the flag buys (speed) and what it costs (error) -- on the same kernel.
//
// What --use_fast_math changes (nvcc's documentation of the flag): it implies --ftz=true (denormals
// flushed to zero), --prec-div=false and --prec-sqrt=false (approximate float division and square root)
// and --fmad=true (the default anyway), and it turns sinf, cosf, expf, logf, powf... into their
// intrinsics __sinf, __expf, __logf..., which are one or two special-function-unit instructions
// (sin.approx, ex2.approx, lg2.approx in the PTX) instead of a range reduction and a polynomial.
// The CUDA Programming Guide's accuracy tables (maximum errors found by testing, not proven):
//   sinf 2 ulp, expf 2 ulp, logf 1 ulp over their full range;
//   __sinf: 2^-21.41 absolute for |x| <= pi, "larger otherwise" -- it grows with |x|;
//   __expf: 2 + floor(|1.173 x|) ulp; __logf: 2^-21.41 absolute on [0.5, 2], else 3 ulp.
//
// Kernels (grid-stride loops over size_t indices: any grid covers any n, past 2^31 too):
//
// * transcendental_chain(out, in, n, iterations): compute bound. For each element x, `iterations`
//   terms sin(t) e^-t + log(3 + t^2) at t = x + k / 64, averaged. Three transcendentals per term and
//   8 bytes of memory per element: at 64 iterations the memory is idle. The terms are summed in double:
//   a float sum of 64 terms would carry rounding errors as large as the functions' own, and it is the
//   functions' error this kernel shows. The sum costs a conversion and a double add per term in both
//   builds alike. With |x| <= 1 and iterations <= CHAIN_MAX_ITERATIONS, t stays in [-1, 2): inside
//   __sinf's accurate range; 3 + t^2 is in [3, 7], each term in [-0.91, 2.07] and their mean in [0.27, 1.88]
//   (never near 0, so a relative error means something).
// * exp_map(out, in, n): out[i] = expf(in[i]). Memory bound: 8 bytes moved per expf.
// * sin_map(out, in, n): out[i] = sinf(in[i]). For the accuracy of sinf against __sinf as |x| grows.
//
// Launch configuration (all three): block = TRANSCENDENTAL_BLOCK (256) threads; grid = min(ceil(n /
// 256), a few waves); dynamic shared memory = 0.

#include <cstddef>

constexpr unsigned TRANSCENDENTAL_BLOCK = 256;  // threads per block of the documented launch
constexpr float CHAIN_STEP = 1.0f / 64.0f;      // t = x + k * CHAIN_STEP: a power of two, so k * step is exact
constexpr float CHAIN_LOG_OFFSET = 3.0f;        // log(3 + t^2): keeps every term's mean away from 0
constexpr unsigned CHAIN_MAX_ITERATIONS = 64;   // the range the accuracy above is stated for: t < 1 + 64/64
constexpr unsigned WARP_SIZE = 32;
static_assert(TRANSCENDENTAL_BLOCK % WARP_SIZE == 0, "a block should be a whole number of warps");
static_assert(CHAIN_MAX_ITERATIONS * CHAIN_STEP <= 1.0f, "|x| <= 1 must keep t = x + k * step below 2");

extern "C" __global__ void
transcendental_chain(float *__restrict__ out, const float *__restrict__ in, size_t n, unsigned iterations)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = in[i];
        double sum = 0.0;
        for (unsigned k = 0; k < iterations; ++k) {
            const float t = x + static_cast<float>(k) * CHAIN_STEP;  // one rounding, as numpy's float32 x + k/64
            sum += static_cast<double>(sinf(t) * expf(-t) + logf(CHAIN_LOG_OFFSET + t * t));
        }
        out[i] = static_cast<float>(sum / iterations);  // double division: --use_fast_math leaves it exact
    }
}

extern "C" __global__ void exp_map(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = expf(in[i]);
    }
}

extern "C" __global__ void sin_map(float *__restrict__ out, const float *__restrict__ in, size_t n)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = sinf(in[i]);
    }
}
