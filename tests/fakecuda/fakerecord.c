/* A libcuda look-alike that records the sizes it is asked for, and backs no memory with anything.
 *
 * Why a third fake? tests/cpu/test_boundary_walk.py walks rawcuda's public API with sizes at 2^31, 2^32,
 * 2^63 and 2^64 and asks one question of every call: are the bytes the driver received the bytes the
 * Python object reports? ctypes masks an integer to its C type without a word, so a size that wraps
 * arrives small and valid-looking. A real driver cannot be asked for 2^63 bytes on a CI machine; this one
 * hands out addresses from a counter, copies nothing, and answers CUDA_ERROR_OUT_OF_MEMORY past a
 * pretend 141 GiB device, as a real one would.
 *
 * The log: fake_log_count() entries, each "name bytes" (fake_log_entry(i)), for every call that takes a
 * byte or element count. Only what that walk reaches is here, with the C signatures of cuda.h.
 */
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, NOT_FOUND = 500, NOT_READY = 600 };

#define DEVICE_BYTES (141ULL << 30)   /* what the pretend device holds */
#define FIRST_ADDRESS (1ULL << 40)    /* where its addresses start */
#define ALIGNMENT 512ULL              /* cuMemAlloc's alignment */
#define GRANULARITY (2ULL << 20)      /* cuMemGetAllocationGranularity's answer */
#define LOG_ENTRIES 4096
#define LOG_WIDTH 80

static char log_lines[LOG_ENTRIES][LOG_WIDTH];
static int log_count;
static CUdeviceptr next_address = FIRST_ADDRESS;
static unsigned long long in_use;
static int context_token, stream_token, event_token;
static CUcontext current;

static void record(const char *name, unsigned long long bytes) {
    if (log_count < LOG_ENTRIES)
        snprintf(log_lines[log_count++], LOG_WIDTH, "%s %llu", name, bytes);
}

int fake_log_count(void) { return log_count; }
const char *fake_log_entry(int i) { return i >= 0 && i < log_count ? log_lines[i] : ""; }
void fake_log_clear(void) { log_count = 0; }

static CUresult allocate(const char *name, CUdeviceptr *dptr, unsigned long long bytes) {
    record(name, bytes);
    if (bytes == 0) return INVALID_VALUE;
    if (bytes > DEVICE_BYTES - in_use) return OUT_OF_MEMORY;
    *dptr = next_address;
    next_address += (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    in_use += bytes;
    return SUCCESS;
}

CUresult cuInit(unsigned int flags) { return flags == 0 ? SUCCESS : INVALID_VALUE; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return SUCCESS; }
CUresult cuGetErrorName(CUresult error, const char **text) {
    *text = error == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_INVALID_VALUE";
    return SUCCESS;
}
CUresult cuGetErrorString(CUresult error, const char **text) {
    *text = error == OUT_OF_MEMORY ? "out of memory (recording fake)" : "invalid argument (recording fake)";
    return SUCCESS;
}
CUresult cuDeviceGetCount(int *count) { *count = 1; return SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev) { *value = 1; return SUCCESS; }
CUresult cuDeviceGetName(char *name, int len, CUdevice dev) { snprintf(name, len, "Recording Fake"); return SUCCESS; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) { *bytes = DEVICE_BYTES; return SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { *ctx = &context_token; return SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return SUCCESS; }
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    *flags = 0;
    *active = 1;
    return SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) { current = ctx; return SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *ctx) { *ctx = current; return SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) { current = ctx; return SUCCESS; }
CUresult cuCtxPopCurrent_v2(CUcontext *ctx) { if (ctx) *ctx = current; return SUCCESS; }
CUresult cuCtxSynchronize(void) { return SUCCESS; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return SUCCESS; }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = DEVICE_BYTES - in_use;
    *total_bytes = DEVICE_BYTES;
    return SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) { return allocate("cuMemAlloc", dptr, bytes); }
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s) { return allocate("cuMemAllocAsync", dptr, bytes); }
CUresult cuMemFree_v2(CUdeviceptr dptr) { return SUCCESS; }
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return SUCCESS; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { record("cuMemsetD8", n); return SUCCESS; }
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { record("cuMemsetD16", n); return SUCCESS; }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { record("cuMemsetD32", n); return SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { record("cuMemsetD8Async", n); return SUCCESS; }
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { record("cuMemsetD16Async", n); return SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { record("cuMemsetD32Async", n); return SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) { record("cuMemcpyHtoDAsync", n); return SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) { record("cuMemcpyDtoHAsync", n); return SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { record("cuMemcpyHtoD", n); return SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { record("cuMemcpyDtoH", n); return SUCCESS; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { record("cuMemcpyDtoD", n); return SUCCESS; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    record("cuMemcpyDtoDAsync", n);
    return SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const void *prop, int option) {
    *granularity = GRANULARITY;
    return SUCCESS;
}
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    record("cuMemAddressReserve", size);
    *ptr = next_address;
    next_address += size;
    return SUCCESS;
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return SUCCESS; }

CUresult cuStreamCreate(CUstream *s, unsigned int flags) { *s = &stream_token; return SUCCESS; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
    record("cuStreamCreateWithPriority", (unsigned long long)(long long)priority);
    *s = &stream_token;
    return SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s) { return SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { return SUCCESS; }
CUresult cuStreamQuery(CUstream s) { return SUCCESS; }
CUresult cuEventCreate(CUevent *e, unsigned int flags) { *e = &event_token; return SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { return SUCCESS; }
CUresult cuEventQuery(CUevent e) { return SUCCESS; }
CUresult cuEventDestroy_v2(CUevent e) { return SUCCESS; }
