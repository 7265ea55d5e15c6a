// sgemm_on_cpu.cpp -- kernels/sgemm.cu built for the CPU (tests/kernels/cuda_on_cpu.h), behind one C function.
//
// tests/cpu/test_sgemm_on_cpu.py compiles this with AddressSanitizer and UBSan and writes
// sgemm_kernels.inc beside the build: one {"name", name} line per kernel of rawcuda.sgemm.KERNELS, so a
// name in the table that the source does not define fails to compile. tests/kernels/sgemm_on_cpu.py
// calls run() for each case.
#include "cuda_on_cpu.h"

#include "../../kernels/sgemm.cu"

#include <cstring>
#include <limits>
#include <new>

namespace {

struct Entry {
    const char *name;
    SgemmKernel kernel;
};

const Entry KERNELS[] = {
#include "sgemm_kernels.inc"
};

constexpr int OK = 0, NOT_FOUND = -1, WROTE_BEFORE_C = -2;
constexpr std::align_val_t ALIGN{16};  // like a cuMemAlloc pointer (256 there; 16 is what float4 needs)
constexpr float NaN = std::numeric_limits<float>::quiet_NaN();

// `count` floats at `offset` floats past a 16-byte aligned start, in an allocation of exactly that size:
// the sanitizer reports any access past the end; the `offset` floats before the start are NaN.
float *allocate(size_t count, unsigned offset)
{
    float *base = new (ALIGN) float[count + offset];
    for (unsigned i = 0; i < offset; ++i) {
        base[i] = NaN;
    }
    return base + offset;
}

void release(float *p, unsigned offset) { operator delete[](p - offset, ALIGN); }

}  // namespace

// C_out = A_in @ B_in by the kernel `name`, launched with the given grid and block. A, B and C are copied
// into allocations of their exact size at `offset` floats past an aligned start; C is poisoned with NaN.
extern "C" int run(const char *name, unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y,
                   float *C_out, const float *A_in, const float *B_in, size_t M, size_t N, size_t K, unsigned offset)
{
    SgemmKernel kernel = nullptr;
    for (const Entry &e : KERNELS) {
        if (std::strcmp(e.name, name) == 0) {
            kernel = e.kernel;
        }
    }
    if (kernel == nullptr) {
        return NOT_FOUND;
    }
    float *A = allocate(M * K, offset), *B = allocate(K * N, offset), *C = allocate(M * N, offset);
    std::memcpy(A, A_in, M * K * sizeof(float));
    std::memcpy(B, B_in, K * N * sizeof(float));
    for (size_t i = 0; i < M * N; ++i) {
        C[i] = NaN;
    }
    emulate(kernel, dim3{grid_x, grid_y, 1}, dim3{block_x, block_y, 1}, C, A, B, M, N, K);
    std::memcpy(C_out, C, M * N * sizeof(float));
    int status = OK;
    for (unsigned i = 1; i <= offset; ++i) {
        if (!std::isnan(C[-static_cast<ptrdiff_t>(i)])) {
            status = WROTE_BEFORE_C;
        }
    }
    release(A, offset);
    release(B, offset);
    release(C, offset);
    return status;
}
