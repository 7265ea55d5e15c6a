/* A libcuda look-alike that keeps each thread's context stack the way the driver does: CPU tests of what
 * Context.close(), `with ctx:` and the finalizer leave current.
 *
 * Why a third fake? tests/fakecuda/fakecuda.c scripts error codes and fakehost.c computes a kernel; neither
 * has contexts. What closing a context leaves on the thread is decided by a handful of stack rules, all in
 * cuda.h, and those are what this file models (one device, ordinal 0):
 *
 *  - cuCtxCreate pushes the new context; cuCtxPushCurrent pushes; cuCtxPopCurrent pops (an empty stack:
 *    CUDA_ERROR_INVALID_CONTEXT);
 *  - cuCtxSetCurrent *replaces* the top (pushes on an empty stack; NULL pops);
 *  - cuCtxDestroy pops the context if it is current (on top) on the calling thread; anywhere else -- lower
 *    in this thread's stack, or on other threads -- its entries stay, naming a destroyed context;
 *  - the primary context is reference counted (cuDevicePrimaryCtxRetain/Release): active while retained,
 *    reset at the last release -- which never pops it -- and the same handle again when retained anew;
 *  - a call that needs a context (cuCtxSynchronize, cuMemGetInfo) fails with CUDA_ERROR_INVALID_CONTEXT when
 *    none is current, and with CUDA_ERROR_CONTEXT_IS_DESTROYED when the current one was destroyed or reset.
 *
 * Tests read a thread's whole stack through fakectx_depth() and fakectx_entry(), count primary retains with
 * fakectx_primary_refs() and ask fakectx_destroyed(ctx): functions no driver has, which a test calls through
 * ctypes on the library rawcuda loaded (the same copy, so the same stacks).
 */
#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_DEVICE = 101,
    INVALID_CONTEXT = 201,
    CONTEXT_IS_DESTROYED = 709,
};

enum { MAX_CONTEXTS = 64, MAX_DEPTH = 64, DRIVER_VERSION = 13000 };
static const size_t FREE_BYTES = 1ull << 30;
static const size_t TOTAL_BYTES = 2ull << 30;

struct context { int used, destroyed; };
static struct context created[MAX_CONTEXTS];   /* a created context's handle is its slot's address */
static struct context primary;                 /* likewise; "destroyed" means reset (inactive) */
static int primary_refs;

static __thread CUcontext stack[MAX_DEPTH];
static __thread int depth;

static int is_created(CUcontext ctx) {
    return ctx >= (CUcontext)&created[0] && ctx < (CUcontext)&created[MAX_CONTEXTS];
}

static int known(CUcontext ctx) { return ctx == (CUcontext)&primary || is_created(ctx); }

/* What a call that works in the current context answers before it does anything. */
static CUresult current_usable(void) {
    if (depth == 0) return INVALID_CONTEXT;
    return ((struct context *)stack[depth - 1])->destroyed ? CONTEXT_IS_DESTROYED : SUCCESS;
}

CUresult cuInit(unsigned int flags) { return flags == 0 ? SUCCESS : INVALID_VALUE; }

CUresult cuDriverGetVersion(int *version) {
    *version = DRIVER_VERSION;
    return SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    (void)error;
    *text = NULL;
    return INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    (void)error;
    *text = NULL;
    return INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *count) {
    *count = 1;
    return SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (dev != 0) return INVALID_DEVICE;
    if (primary_refs++ == 0) primary.destroyed = 0;
    *pctx = &primary;
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (dev != 0) return INVALID_DEVICE;
    if (primary_refs == 0) return INVALID_CONTEXT;
    if (--primary_refs == 0) primary.destroyed = 1;   /* reset; still current wherever it was */
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    if (dev != 0) return INVALID_DEVICE;
    *flags = 0;
    *active = primary_refs > 0;
    return SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (!known(ctx)) return INVALID_VALUE;
    if (depth == MAX_DEPTH) return OUT_OF_MEMORY;
    stack[depth++] = ctx;
    return SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev) {
    (void)params; (void)flags;
    if (dev != 0) return INVALID_DEVICE;
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        if (!created[i].used) {
            created[i].used = 1;
            created[i].destroyed = 0;
            *pctx = &created[i];
            return cuCtxPushCurrent_v2(*pctx);
        }
    }
    return OUT_OF_MEMORY;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (depth == 0) return INVALID_CONTEXT;
    CUcontext top = stack[--depth];
    if (pctx) *pctx = top;
    return SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (ctx == NULL) {
        if (depth > 0) depth--;
        return SUCCESS;
    }
    if (!known(ctx)) return INVALID_VALUE;
    if (depth == 0) depth = 1;
    stack[depth - 1] = ctx;
    return SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    *pctx = depth ? stack[depth - 1] : NULL;
    return SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (!is_created(ctx) || !((struct context *)ctx)->used || ((struct context *)ctx)->destroyed)
        return INVALID_CONTEXT;
    ((struct context *)ctx)->destroyed = 1;   /* (the slot is never reused: a stale handle stays recognisable) */
    if (depth > 0 && stack[depth - 1] == ctx) depth--;
    return SUCCESS;
}

CUresult cuCtxSynchronize(void) { return current_usable(); }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    CUresult rc = current_usable();
    if (rc != SUCCESS) return rc;
    *free_bytes = FREE_BYTES;
    *total_bytes = TOTAL_BYTES;
    return SUCCESS;
}

/* --- for the tests: what no driver exports ------------------------------------------------------------ */
int fakectx_depth(void) { return depth; }

CUcontext fakectx_entry(int i) { return i >= 0 && i < depth ? stack[i] : NULL; }

int fakectx_primary_refs(void) { return primary_refs; }

int fakectx_destroyed(CUcontext ctx) { return known(ctx) && ((struct context *)ctx)->destroyed; }
