/* A libcuda look-alike whose "device" is the host: tutorials 00a and 00b, end to end, without a GPU.
 *
 * Why a second fake? tests/fakecuda/fakecuda.c scripts the error paths of rawcuda's layers 0 and 1 (a stub
 * library, out of memory, unknown codes); it has one fixed device address and no copies. Tutorials 00a
 * and 00b write the glue by hand -- restype, argtypes, byref, the void** kernelParams array -- and the
 * mistakes that glue invites (a size passed as a 32-bit int, a kernelParams entry pointing at the wrong
 * object, a copy the wrong way round) give wrong numbers, not error codes. So this fake does the work for
 * real:
 *
 *  - device memory is host memory (malloc), at 64-bit addresses, and every copy and free checks that the
 *    address lies inside an allocation (else CUDA_ERROR_INVALID_VALUE, as the driver answers);
 *  - allocating without a current context fails with CUDA_ERROR_INVALID_CONTEXT, as on a GPU;
 *  - the one kernel, vector_add(float *c, const float *a, const float *b, size_t n), is computed on the
 *    host from kernelParams exactly as the GPU reads it: kernelParams[i] points at argument i's bytes;
 *  - cuGetProcAddress answers "cuMemAlloc" with cuMemAlloc_v2 for CUDA >= 3.2 and with the plain 32-bit
 *    cuMemAlloc before, like the driver.
 *
 * Only the functions tutorials 00a and 00b (and rawcuda's error path in 00a's last step) call are here,
 * with the real C signatures of cuda.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    NOT_INITIALIZED = 3,
    NO_DEVICE = 100,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    INVALID_CONTEXT = 201,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    ILLEGAL_ADDRESS = 700,
};

static const int DRIVER_VERSION = 13000;
static const int CUDA_3_2 = 3020;                        /* the _v2 (64-bit) ABI of cuMemAlloc */
static const size_t MAX_ALLOCATION = 1ull << 30;         /* "device memory": larger requests are OOM */
enum { MAX_ALLOCATIONS = 64, VECTOR_ADD_PARAMS = 4 };

static int initialized;
static int primary_refs;
static void *current_context;
static char primary_context;                              /* its address is the context handle */
static char vector_add_module, vector_add_function;      /* likewise */

struct allocation { CUdeviceptr base; size_t size; };
static struct allocation allocations[MAX_ALLOCATIONS];

static const char *error_name(CUresult code) {
    switch (code) {
    case SUCCESS: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    *text = error_name(error);
    return *text ? SUCCESS : INVALID_VALUE;   /* the driver's answer for a code it does not know */
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    *text = error_name(error) ? "(fake host driver: see the name)" : NULL;
    return *text ? SUCCESS : INVALID_VALUE;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return INVALID_VALUE;
    initialized = 1;
    return SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return INVALID_VALUE;
    *version = DRIVER_VERSION;
    return SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return NOT_INITIALIZED;
    *count = 1;
    return SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return NOT_INITIALIZED;
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    static const char NAME[] = "fake host device (tests/fakecuda/fakehost.c)";
    if (dev != 0) return INVALID_DEVICE;
    if (!name || len <= 0) return INVALID_VALUE;
    strncpy(name, NAME, (size_t)len - 1);
    name[len - 1] = '\0';
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice dev) {
    if (dev != 0) return INVALID_DEVICE;
    primary_refs++;
    *ctx = &primary_context;
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (dev != 0) return INVALID_DEVICE;
    if (primary_refs == 0) return INVALID_CONTEXT;
    primary_refs--;
    return SUCCESS;
}

CUresult cuCtxSetCurrent(void *ctx) {
    if (ctx && ctx != &primary_context) return INVALID_CONTEXT;
    current_context = ctx;
    return SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    return current_context ? SUCCESS : INVALID_CONTEXT;
}

/* The allocation that holds [address, address + size), or NULL. */
static struct allocation *find(CUdeviceptr address, size_t size) {
    for (int i = 0; i < MAX_ALLOCATIONS; i++) {
        struct allocation *a = &allocations[i];
        if (a->base && address >= a->base && size <= a->size && address - a->base <= a->size - size) return a;
    }
    return NULL;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (!current_context) return INVALID_CONTEXT;
    if (!dptr || bytesize == 0) return INVALID_VALUE;
    if (bytesize > MAX_ALLOCATION) return OUT_OF_MEMORY;
    for (int i = 0; i < MAX_ALLOCATIONS; i++) {
        if (!allocations[i].base) {
            void *memory = malloc(bytesize);
            if (!memory) return OUT_OF_MEMORY;
            allocations[i].base = (CUdeviceptr)(uintptr_t)memory;
            allocations[i].size = bytesize;
            *dptr = allocations[i].base;
            return SUCCESS;
        }
    }
    return OUT_OF_MEMORY;
}

/* The plain, 32-bit-era symbol, exported (as by the real driver) so that `hasattr(lib, "cuMemAlloc")` is true.
 * Tutorial 00a never calls it: it only asks whether it is there. */
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize) {
    (void)dptr; (void)bytesize;
    return INVALID_VALUE;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (!current_context) return INVALID_CONTEXT;
    struct allocation *a = find(dptr, 0);
    if (!a || a->base != dptr) return INVALID_VALUE;
    free((void *)(uintptr_t)a->base);
    a->base = 0;
    a->size = 0;
    return SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    if (!current_context) return INVALID_CONTEXT;
    if (!src || !find(dst, bytes)) return INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    if (!current_context) return INVALID_CONTEXT;
    if (!dst || !find(src, bytes)) return INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return SUCCESS;
}

CUresult cuModuleLoadData(void **module, const void *image) {
    if (!current_context) return INVALID_CONTEXT;
    if (!module || !image) return INVALID_VALUE;
    /* PTX is text, read up to its NUL terminator -- as the driver reads it. */
    if (!strstr((const char *)image, ".entry vector_add(")) return INVALID_IMAGE;
    *module = &vector_add_module;
    return SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    if (module != &vector_add_module) return INVALID_HANDLE;
    if (!function || !name) return INVALID_VALUE;
    if (strcmp(name, "vector_add") != 0) return NOT_FOUND;
    *function = &vector_add_function;
    return SUCCESS;
}

CUresult cuModuleUnload(void *module) {
    return module == &vector_add_module ? SUCCESS : INVALID_HANDLE;
}

/* vector_add(float *c, const float *a, const float *b, size_t n): every parameter is 8 bytes, and
 * kernelParams[i] points at parameter i's bytes. Any grid is correct (the shipped kernel is a grid-stride
 * loop), but it must have at least one thread. */
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)stream;
    if (!current_context) return INVALID_CONTEXT;
    if (f != &vector_add_function) return INVALID_HANDLE;
    if (!params || extra || shared || !gx || !gy || !gz || !bx || !by || !bz) return INVALID_VALUE;
    for (int i = 0; i < VECTOR_ADD_PARAMS; i++) {
        if (!params[i]) return INVALID_VALUE;
    }
    CUdeviceptr c, a, b;
    uint64_t n;
    memcpy(&c, params[0], sizeof c);
    memcpy(&a, params[1], sizeof a);
    memcpy(&b, params[2], sizeof b);
    memcpy(&n, params[3], sizeof n);
    size_t bytes = (size_t)n * sizeof(float);
    if (n && (!find(c, bytes) || !find(a, bytes) || !find(b, bytes))) return ILLEGAL_ADDRESS;
    float *pc = (float *)(uintptr_t)c;
    const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
    for (uint64_t i = 0; i < n; i++) pc[i] = pa[i] + pb[i];
    return SUCCESS;
}

/* CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
 *                           CUdriverProcAddressQueryResult *symbolStatus)   -- only "cuMemAlloc" is known. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    enum { FOUND = 0, SYMBOL_NOT_FOUND = 1 };
    (void)flags;
    if (!symbol || !pfn) return INVALID_VALUE;
    if (strcmp(symbol, "cuMemAlloc") != 0) {
        *pfn = NULL;
        if (status) *status = SYMBOL_NOT_FOUND;
        return NOT_FOUND;
    }
    *pfn = version >= CUDA_3_2 ? (void *)cuMemAlloc_v2 : (void *)cuMemAlloc;
    if (status) *status = FOUND;
    return SUCCESS;
}
