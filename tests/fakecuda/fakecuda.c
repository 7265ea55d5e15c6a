/* A fake libcuda for CPU-only tests of rawcuda's layers 0 and 1.
 *
 * Why? CI has no GPU and no driver, yet the loading, binding and error paths deserve real tests: that
 * a stub library is recognised, that a CUresult becomes the right exception with the right fields, that
 * an out-of-memory error reports requested and available bytes, that a symbol the driver lacks gives a
 * clear error. This library exports a handful of driver symbols with the real C signatures and answers
 * them in scripted ways. FAKECUDA_MODE=stub makes it behave like the toolkit's stub (every call 34).
 */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    STUB_LIBRARY = 34,
    INVALID_DEVICE = 101,
};

enum { MULTIPROCESSOR_COUNT = 16 };  /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
static const int FAKE_SM_COUNT = 132;

static const unsigned long long FREE_BYTES = 1ull << 30;   /* what cuMemGetInfo reports as free */
static const unsigned long long TOTAL_BYTES = 2ull << 30;
static const CUdeviceptr FAKE_ADDRESS = 0x7f0000000000ull;

static int stub_mode(void) {
    const char *mode = getenv("FAKECUDA_MODE");
    return mode && strcmp(mode, "stub") == 0;
}

CUresult cuInit(unsigned int flags) {
    if (stub_mode()) return STUB_LIBRARY;
    return flags == 0 ? SUCCESS : INVALID_VALUE;
}

CUresult cuDriverGetVersion(int *version) {
    if (stub_mode()) return STUB_LIBRARY;
    *version = 13000;
    return SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (stub_mode()) return STUB_LIBRARY;
    switch (error) {
    case OUT_OF_MEMORY: *text = "out of memory (fake driver)"; return SUCCESS;
    case INVALID_VALUE: *text = "invalid argument (fake driver)"; return SUCCESS;
    default: *text = NULL; return INVALID_VALUE;   /* what the real driver does for unknown codes */
    }
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    (void)error;
    *text = NULL;
    return stub_mode() ? STUB_LIBRARY : INVALID_VALUE;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    if (stub_mode()) return STUB_LIBRARY;
    *free_bytes = FREE_BYTES;
    *total_bytes = TOTAL_BYTES;
    return SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (stub_mode()) return STUB_LIBRARY;
    if (bytesize > FREE_BYTES) return OUT_OF_MEMORY;
    *dptr = FAKE_ADDRESS;
    return SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    return dptr == FAKE_ADDRESS ? SUCCESS : INVALID_VALUE;
}

/* One device, 0, with 132 SMs and every other attribute 0: another ordinal gives a refused call whose
 * error message shows an enum argument (tests/cpu/test_cli_edges.py). */
CUresult cuDeviceGetAttribute(int *pi, int attrib, int dev) {
    if (stub_mode()) return STUB_LIBRARY;
    if (dev != 0) return INVALID_DEVICE;
    *pi = attrib == MULTIPROCESSOR_COUNT ? FAKE_SM_COUNT : 0;
    return SUCCESS;
}

/* Answers whatever FAKECUDA_SYNC_RESULT says: lets a test provoke any code, known or not. */
CUresult cuCtxSynchronize(void) {
    const char *result = getenv("FAKECUDA_SYNC_RESULT");
    return result ? atoi(result) : SUCCESS;
}

/* The plain, 32-bit-era name: exported (as by real drivers) so tests can show the table never binds it. */
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize) {
    (void)dptr; (void)bytesize;
    return INVALID_VALUE;
}

/* Accepts any launch: lets a CPU test (and a profiler) exercise rawcuda's launch path without a GPU. */
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    return f && params ? SUCCESS : INVALID_VALUE;
}

/* The launch path's row (rawcuda/core/launchcall.py): the same acceptance as cuLaunchKernel above. */
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    (void)extra;
    return config && f && params ? SUCCESS : INVALID_VALUE;
}
