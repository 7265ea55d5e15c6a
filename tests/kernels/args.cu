// Test kernels for argument packing: every scalar width and a struct passed by value.
//
// Each kernel writes what it received into `out`, so a test can check that every byte of every
// argument arrived where the kernel expected it.
#include <cstdint>

struct Affine {      // 16 bytes, 8-byte aligned: PTX passes it as `.param .align 8 .b8 p[16]`
    double scale;
    int32_t offset;
};

extern "C" __global__ void affine(float *out, const float *in, Affine p, unsigned long long n)
{
    const unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = static_cast<float>(in[i] * p.scale + p.offset);
    }
}

extern "C" __global__ void widths(double *out, int8_t a, uint16_t b, int32_t c, int64_t d, float e, double f,
                                  unsigned char g)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = a;
        out[1] = b;
        out[2] = c;
        out[3] = static_cast<double>(d);
        out[4] = e;
        out[5] = f;
        out[6] = g;
    }
}
