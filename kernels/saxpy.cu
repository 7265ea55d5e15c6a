// saxpy.cu -- y = a * x + y, in place (BLAS level 1 "single-precision a times x plus y").
//
// Why it is written this way:
//
// * extern "C" keeps the PTX name "saxpy" (no C++ mangling), so the module lookup by name works.
// * The scalar a is passed by value: cuLaunchKernel copies the 4 bytes into the kernel's parameter
//   space, which is why the caller must hand it a *float32* (4 bytes), not a Python float (8 bytes).
//   The PTX says so: ".param .f32 saxpy_param_1".
// * fmaf computes a*x + y with a single rounding (one FFMA instruction), which is what the GPU does
//   anyway; writing it out documents the rounding a host reference should expect (numpy rounds
//   twice, so compare with a tolerance of a few ulps, not for equality).
// * A grid-stride loop with size_t indices: any grid covers any n, including n > 2^31.
// * y is read and written by the same thread only, so the in-place update needs no synchronization;
//   x is const __restrict__ (read-only path); x must not overlap y.
//
// Launch configuration (any grid is correct; this one is fast):
//   block = SAXPY_BLOCK (256) threads
//   grid  = min(ceil(n / 256), a few waves, e.g. 32 * number of SMs); at least 1
//   dynamic shared memory = 0

#include <cstddef>

// The block size the launch is documented (and tuned) for. Not enforced with __launch_bounds__: a
// grid-stride loop is correct for every block size, so a caller may choose another.
constexpr unsigned SAXPY_BLOCK = 256;
constexpr unsigned WARP_SIZE = 32;
static_assert(SAXPY_BLOCK % WARP_SIZE == 0, "a block should be a whole number of warps");

extern "C" __global__ void
saxpy(float *__restrict__ y, float a, const float *__restrict__ x, size_t n)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = fmaf(a, x[i], y[i]);
    }
}
