/* driver_bench.c -- the C reference for rawcuda's benchmarks: the same measurements, with no Python.
 *
 * Built and run by bench/run_all.py (nvcc -O2 driver_bench.c -lcuda). It measures, on GPU 0:
 *   launch  host time to queue one launch of the 4-argument vector_add kernel (n = 0), the same
 *           interleaving-free loop as bench/launch_overhead.py: median of ROUNDS rounds of LAUNCHES;
 *   copies  host->device and device->host bandwidth from pinned and pageable memory at several sizes,
 *           timed with CUDA events, median of COPY_REPS.
 * and prints one JSON object on stdout. Usage: driver_bench <vector_add.ptx>
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LAUNCHES = 2000, ROUNDS = 21, WARMUP = 2000, BLOCK = 256, COPY_REPS = 11, N_SIZES = 3 };
static const size_t COPY_SIZES[N_SIZES] = {1u << 20, 16u << 20, 256u << 20};  /* 1 MiB, 16 MiB, 256 MiB */

#define CHECK(call)                                                                  \
    do {                                                                             \
        CUresult rc_ = (call);                                                       \
        if (rc_ != CUDA_SUCCESS) {                                                   \
            const char *name_ = "?";                                                 \
            cuGetErrorName(rc_, &name_);                                             \
            fprintf(stderr, "%s failed: %s (%d)\n", #call, name_, (int)rc_);         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, f) != (size_t)size) { perror(path); exit(1); }
    text[size] = '\0';  /* the JIT reads PTX as a C string */
    fclose(f);
    return text;
}

/* Median GB/s of one copy direction: the copy is queued COPY_REPS times, each between two events. */
static double copy_gbps(CUdeviceptr dev, void *host, size_t bytes, int to_device, CUstream s)
{
    CUevent start, end;
    double gbps[COPY_REPS];
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    for (int r = 0; r < COPY_REPS; ++r) {
        float ms = 0;
        CHECK(cuEventRecord(start, s));
        if (to_device) CHECK(cuMemcpyHtoDAsync(dev, host, bytes, s));
        else CHECK(cuMemcpyDtoHAsync(host, dev, bytes, s));
        CHECK(cuEventRecord(end, s));
        CHECK(cuEventSynchronize(end));
        CHECK(cuEventElapsedTime(&ms, start, end));
        gbps[r] = (double)bytes / (ms * 1e-3) / 1e9;
    }
    CHECK(cuEventDestroy(start));
    CHECK(cuEventDestroy(end));
    return median(gbps, COPY_REPS);
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: %s vector_add.ptx\n", argv[0]); return 2; }
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    char *ptx = read_file(argv[1]);
    CHECK(cuModuleLoadData(&module, ptx));
    CHECK(cuModuleGetFunction(&fn, module, "vector_add"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_DEFAULT));

    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc(&a, BLOCK * sizeof(float)));
    CHECK(cuMemAlloc(&b, BLOCK * sizeof(float)));
    CHECK(cuMemAlloc(&c, BLOCK * sizeof(float)));
    size_t n = 0;
    void *params[] = {&c, &a, &b, &n};

    for (int i = 0; i < WARMUP; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, BLOCK, 1, 1, 0, stream, params, NULL));
    CHECK(cuStreamSynchronize(stream));
    double per_launch_us[ROUNDS];
    for (int r = 0; r < ROUNDS; ++r) {
        double t0 = now_ns();
        for (int i = 0; i < LAUNCHES; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, BLOCK, 1, 1, 0, stream, params, NULL));
        per_launch_us[r] = (now_ns() - t0) / LAUNCHES / 1000.0;
        CHECK(cuStreamSynchronize(stream));
    }
    printf("{\"launch_us\": %.4f, \"copies\": [", median(per_launch_us, ROUNDS));

    size_t biggest = COPY_SIZES[N_SIZES - 1];
    CUdeviceptr dbuf;
    void *pinned;
    void *pageable = malloc(biggest);
    CHECK(cuMemAlloc(&dbuf, biggest));
    CHECK(cuMemHostAlloc(&pinned, biggest, 0));
    memset(pinned, 1, biggest);    /* touch every page: no first-touch faults inside the timing */
    memset(pageable, 1, biggest);
    for (int i = 0; i < N_SIZES; ++i) {
        size_t bytes = COPY_SIZES[i];
        printf("%s{\"bytes\": %zu, \"pinned_htod\": %.2f, \"pinned_dtoh\": %.2f, \"pageable_htod\": %.2f, "
               "\"pageable_dtoh\": %.2f}", i ? ", " : "", bytes,
               copy_gbps(dbuf, pinned, bytes, 1, stream), copy_gbps(dbuf, pinned, bytes, 0, stream),
               copy_gbps(dbuf, pageable, bytes, 1, stream), copy_gbps(dbuf, pageable, bytes, 0, stream));
    }
    printf("]}\n");

    CHECK(cuMemFreeHost(pinned));
    free(pageable);
    CHECK(cuMemFree(dbuf));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK(cuMemFree(c));
    CHECK(cuStreamDestroy(stream));
    CHECK(cuModuleUnload(module));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(ptx);
    return 0;
}
