/* A libcuda look-alike whose launch does nothing, for timing rawcuda's *host* launch path without a GPU.
 *
 * Why? A change to the launch path should be measurable on any machine before the GPU run. On the H200
 * the driver's own cuLaunchKernelEx is most of a launch, so what Python adds is a small difference of two
 * large numbers. Here every call is a few C instructions: the difference between two launch paths is
 * Python and ctypes alone. It answers just enough for rawcuda's real objects (Device, the primary Context,
 * Module, Function, Stream, Event, DeviceBuffer) to be built through rawcuda's own code. Memory is host
 * memory from malloc; nothing runs. bench/fake/launch_fake.py builds it and says how to use it.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, INVALID_CONTEXT = 201 };

/* Device attributes rawcuda reads (cuda.h's CUdevice_attribute numbers) and what an H200 answers. */
enum {
    ATTR_MAX_THREADS_PER_BLOCK = 1, ATTR_MAX_BLOCK_DIM_X = 2, ATTR_MAX_BLOCK_DIM_Y = 3, ATTR_MAX_BLOCK_DIM_Z = 4,
    ATTR_MAX_GRID_DIM_X = 5, ATTR_MAX_GRID_DIM_Y = 6, ATTR_MAX_GRID_DIM_Z = 7, ATTR_MULTIPROCESSOR_COUNT = 16,
    ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, ATTR_SHARED_OPTIN = 97,
};
enum { FUNC_MAX_THREADS_PER_BLOCK = 0 };   /* CUfunction_attribute */
#define STACK_DEPTH 64                      /* contexts a thread may push */
#define SM_COUNT 132
#define RESIDENT_THREADS 2048                /* per SM */
#define RESIDENT_BLOCKS 32                   /* per SM */
#define MAX_CLUSTER_BLOCKS 16                /* the non-portable cluster size an H100/H200 allows */
#define CONFIG_ATTRS_OFFSET 40               /* CUlaunchConfig.attrs (rawcuda/core/launchconfig.py draws it) */
#define CONFIG_NUM_ATTRS_OFFSET 48
#define ATTRIBUTE_BYTES 72                   /* sizeof(CUlaunchAttribute): id, padding, a 64-byte value */
#define ATTRIBUTE_VALUE_OFFSET 8
#define ATTRIBUTE_CLUSTER_DIMENSION 4        /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
#define DRIVER_VERSION 13000                /* CUDA 13.0 */
#define DEVICE_BYTES (141ULL << 30)
#define HANDLE_BYTES 16                     /* what a stream or an event handle points at */

static char primary, module_token, function_token;
static int primary_refs;
static unsigned long long launches;         /* every launch accepted: the harness checks its loops reached here */
static const void *last_config;             /* the CUlaunchConfig of the last cuLaunchKernelEx */
static __thread CUcontext stack[STACK_DEPTH];
static __thread int depth;

CUresult cuInit(unsigned int flags) { return flags == 0 ? SUCCESS : INVALID_VALUE; }
CUresult cuDriverGetVersion(int *v) { *v = DRIVER_VERSION; return SUCCESS; }
CUresult cuGetErrorString(CUresult e, const char **t) { (void)e; *t = NULL; return INVALID_VALUE; }
CUresult cuGetErrorName(CUresult e, const char **t) { (void)e; *t = NULL; return INVALID_VALUE; }
CUresult cuDeviceGetCount(int *c) { *c = 1; return SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal) return INVALID_DEVICE; *d = 0; return SUCCESS; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d; strncpy(name, "Fake Launch GPU", (size_t)len); return SUCCESS; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = DEVICE_BYTES; return SUCCESS; }
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
    if (dev) return INVALID_DEVICE;
    switch (attrib) {
    case ATTR_MAX_THREADS_PER_BLOCK: case ATTR_MAX_BLOCK_DIM_X: case ATTR_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case ATTR_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case ATTR_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case ATTR_MAX_GRID_DIM_Y: case ATTR_MAX_GRID_DIM_Z: *pi = 65535; break;
    case ATTR_MULTIPROCESSOR_COUNT: *pi = SM_COUNT; break;
    case ATTR_CC_MAJOR: *pi = 9; break;
    case ATTR_CC_MINOR: *pi = 0; break;
    case ATTR_SHARED_OPTIN: *pi = 232448; break;
    default: *pi = 1; break;
    }
    return SUCCESS;
}

/* The primary context and a per-thread stack, as the driver keeps them. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *p, CUdevice d) {
    if (d) return INVALID_DEVICE;
    primary_refs++;
    *p = &primary;
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; if (primary_refs) primary_refs--; return SUCCESS; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *a) {
    (void)d; *f = 0; *a = primary_refs > 0; return SUCCESS; }
/* Host functions, deferred (fakelaunch_defer_host_functions(1)): each runs later on one worker thread, as the
 * driver's own thread would, and a driver call made from inside one is counted (cuda.h forbids them). */
static __thread int in_host_function;
static int calls_inside_host_functions;
#define NOT_PERMITTED 800                   /* CUDA_ERROR_NOT_PERMITTED */
#define NOTE_CALL() do { if (in_host_function) calls_inside_host_functions++; } while (0)
int fakelaunch_calls_inside_host_functions(void) { return calls_inside_host_functions; }
static void wait_for_host_functions(CUstream s);

CUresult cuCtxPushCurrent_v2(CUcontext c) { NOTE_CALL(); if (depth == STACK_DEPTH) return OUT_OF_MEMORY; stack[depth++] = c; return SUCCESS; }
CUresult cuCtxPopCurrent_v2(CUcontext *p) {
    if (!depth) return INVALID_CONTEXT;
    CUcontext top = stack[--depth];
    if (p) *p = top;
    return SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c) {
    if (!c) { if (depth) depth--; return SUCCESS; }
    if (!depth) depth = 1;
    stack[depth - 1] = c; return SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *p) { *p = depth ? stack[depth - 1] : NULL; return SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return SUCCESS; }
CUresult cuCtxSynchronize(void) { return depth ? SUCCESS : INVALID_CONTEXT; }
CUresult cuCtxGetFlags(unsigned *f) { *f = 0; return SUCCESS; }
CUresult cuCtxGetApiVersion(CUcontext c, unsigned *v) { (void)c; *v = DRIVER_VERSION; return SUCCESS; }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = DEVICE_BYTES / 2; *total = DEVICE_BYTES; return SUCCESS; }

/* Memory: host memory, so that copies and memsets do what they say. */
CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) {
    void *p = malloc(n ? n : 1); if (!p) return OUT_OF_MEMORY; *d = (CUdeviceptr)(uintptr_t)p; return SUCCESS; }
CUresult cuMemFree_v2(CUdeviceptr d) { NOTE_CALL(); free((void *)(uintptr_t)d); return SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)(uintptr_t)d, v, n); return SUCCESS; }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
    unsigned *p = (unsigned *)(uintptr_t)d; for (size_t i = 0; i < n; i++) p[i] = v; return SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; return cuMemsetD8_v2(d, v, n); }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) { (void)s; return cuMemsetD32_v2(d, v, n); }
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) { (void)attr; (void)p; memset(data, 0, 8); return SUCCESS; }

/* Modules: every image loads, every name is the one function. */
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **ov) {
    (void)img; (void)n; (void)o; (void)ov; *m = &module_token; return SUCCESS; }
CUresult cuModuleLoadData(void **m, const void *img) { (void)img; *m = &module_token; return SUCCESS; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { (void)m; (void)name; *f = &function_token; return SUCCESS; }
CUresult cuModuleUnload(void *m) { (void)m; return SUCCESS; }
CUresult cuFuncGetAttribute(int *pi, int a, void *f) { (void)f; *pi = a == FUNC_MAX_THREADS_PER_BLOCK ? 1024 : 0; return SUCCESS; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { (void)f; (void)a; (void)v; return SUCCESS; }

/* Which stream each event was last recorded on, and the last cross-stream wait: the CPU tests read back how a
 * pool buffer's free was ordered (the stream waited on, then the stream freed on). */
static CUstream last_recorded_on, last_waiter, last_waited_for;
static CUevent last_recorded;
/* Streams and events: distinct handles, never busy. */
CUresult cuStreamCreate(CUstream *s, unsigned flags) { (void)flags; *s = malloc(HANDLE_BYTES); return *s ? SUCCESS : OUT_OF_MEMORY; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int priority) { (void)priority; return cuStreamCreate(s, flags); }
CUresult cuStreamDestroy_v2(CUstream s) { NOTE_CALL(); free(s); return SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) {
    NOTE_CALL();
    if (in_host_function) return NOT_PERMITTED;  /* a real driver may deadlock instead */
    wait_for_host_functions(s);
    return SUCCESS;
}
CUresult cuStreamQuery(CUstream s) { (void)s; return SUCCESS; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) {
    (void)f; last_waiter = s; last_waited_for = e == last_recorded ? last_recorded_on : NULL; return SUCCESS; }
CUstream fakelaunch_last_recorded_on(void) { return last_recorded_on; }
CUstream fakelaunch_last_waiter(void) { return last_waiter; }
CUstream fakelaunch_last_waited_for(void) { return last_waited_for; }
/* One stream may be said to belong to another context: the test of a foreign stream of the wrong context. */
static char other_context;
static CUstream stream_of_other_context;
void fakelaunch_stream_in_other_context(CUstream s) { stream_of_other_context = s; }
CUresult cuStreamGetCtx(CUstream s, CUcontext *c) {
    *c = (s != NULL && s == stream_of_other_context) ? (CUcontext)&other_context : (CUcontext)&primary;
    return SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, int *status) { (void)s; *status = 0; return SUCCESS; }
CUresult cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = malloc(HANDLE_BYTES); return *e ? SUCCESS : OUT_OF_MEMORY; }
CUresult cuEventDestroy_v2(CUevent e) { NOTE_CALL(); free(e); return SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { last_recorded = e; last_recorded_on = s; return SUCCESS; }
CUresult cuEventQuery(CUevent e) { (void)e; return SUCCESS; }
CUresult cuEventSynchronize(CUevent e) { (void)e; return SUCCESS; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0.5f; return SUCCESS; }

/* The launch: accepted, and nothing runs. */
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    if (!f || !params) return INVALID_VALUE;
    launches++;
    return SUCCESS;
}
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    (void)extra;
    if (!config || !f || !params) return INVALID_VALUE;
    last_config = config;  /* one store: the CPU tests read back the attributes a launch passed */
    launches++;
    return SUCCESS;
}
/* Graphs: a graph and its kernel nodes are handles; a node's attributes are recorded for the CPU tests, which
 * read back what add_kernel asked for (ids and the first 12 bytes of each value: a cluster's x, y, z). */
#define NODE_ATTRS 8
#define NODE_ATTR_VALUE_BYTES 12
static int node_attr_ids[NODE_ATTRS];
static unsigned char node_attr_values[NODE_ATTRS][NODE_ATTR_VALUE_BYTES];
static int node_attr_count, kernel_nodes, destroyed_nodes;
CUresult cuGraphCreate(void **g, unsigned flags) { *g = malloc(HANDLE_BYTES); return flags || !*g ? INVALID_VALUE : SUCCESS; }
CUresult cuGraphDestroy(void *g) { free(g); return SUCCESS; }
CUresult cuGraphAddKernelNode_v2(void **node, void *g, const void *deps, size_t n, const void *params) {
    (void)deps; (void)n;
    if (!g || !params) return INVALID_VALUE;
    *node = malloc(HANDLE_BYTES);
    kernel_nodes++;
    node_attr_count = 0;  /* the attributes read back are the latest node's */
    return *node ? SUCCESS : OUT_OF_MEMORY;
}
CUresult cuGraphDestroyNode(void *node) { (void)node; destroyed_nodes++; return SUCCESS; }
CUresult cuGraphKernelNodeSetAttribute(void *node, int id, const void *value) {
    if (!node || !value || node_attr_count == NODE_ATTRS) return INVALID_VALUE;
    node_attr_ids[node_attr_count] = id;
    memcpy(node_attr_values[node_attr_count++], value, NODE_ATTR_VALUE_BYTES);
    return SUCCESS;
}
int fakelaunch_kernel_nodes(void) { return kernel_nodes; }
int fakelaunch_node_attr_count(void) { return node_attr_count; }
int fakelaunch_node_attr_id(int i) { return node_attr_ids[i]; }
const void *fakelaunch_node_attr_value(int i) { return node_attr_values[i]; }

/* Memory pools: each a handle with its eight attributes (cuda.h's CUmemPool_attribute 1..8) and its last trim. */
#define POOL_ATTRIBUTES 9
#define POOL_INT_ATTRIBUTES 3                /* REUSE_*: an int; the rest are cuuint64_t */
typedef struct { unsigned long long attr[POOL_ATTRIBUTES]; unsigned long long trimmed_to; } fake_pool;
static fake_pool default_pool;
static int pools_created, pools_destroyed;
CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice dev) { if (dev) return INVALID_DEVICE; *pool = &default_pool; return SUCCESS; }
CUresult cuDeviceGetMemPool(void **pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }
CUresult cuMemPoolCreate(void **pool, const void *props) {
    if (!props) return INVALID_VALUE;
    *pool = calloc(1, sizeof(fake_pool));
    pools_created++;
    return *pool ? SUCCESS : OUT_OF_MEMORY;
}
CUresult cuMemPoolDestroy(void *pool) { if (pool == &default_pool) return INVALID_VALUE; free(pool); pools_destroyed++; return SUCCESS; }
CUresult cuMemPoolTrimTo(void *pool, size_t keep) { ((fake_pool *)pool)->trimmed_to = keep; return SUCCESS; }
#define POOL_RESERVED_CURRENT 5              /* read-only, as is USED_MEM_CURRENT (7) */
#define POOL_USED_CURRENT 7
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
    if (attr < 1 || attr >= POOL_ATTRIBUTES || attr == POOL_RESERVED_CURRENT || attr == POOL_USED_CURRENT) return INVALID_VALUE;
    ((fake_pool *)pool)->attr[attr] = attr <= POOL_INT_ATTRIBUTES ? (unsigned long long)*(int *)value : *(unsigned long long *)value;
    return SUCCESS;
}
CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    if (attr < 1 || attr >= POOL_ATTRIBUTES) return INVALID_VALUE;
    if (attr <= POOL_INT_ATTRIBUTES) *(int *)value = (int)((fake_pool *)pool)->attr[attr];
    else *(unsigned long long *)value = ((fake_pool *)pool)->attr[attr];
    return SUCCESS;
}
/* Stream-ordered memory: host memory again; the pool's USED_MEM_CURRENT counts it (a free's size is kept in a
 * header), and the stream of the last allocation and of the last free are kept for the CPU tests. */
#define ALLOC_HEADER 16
static CUstream last_alloc_stream, last_free_stream;
static int async_allocations, async_frees;
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, void *pool, CUstream s) {
    NOTE_CALL();
    if (!pool || !n) return INVALID_VALUE;
    unsigned char *p = malloc(n + ALLOC_HEADER);
    if (!p) return OUT_OF_MEMORY;
    *(void **)p = pool; *(size_t *)(p + sizeof(void *)) = n;
    ((fake_pool *)pool)->attr[POOL_USED_CURRENT] += n;
    last_alloc_stream = s; async_allocations++;
    *d = (CUdeviceptr)(uintptr_t)(p + ALLOC_HEADER);
    return SUCCESS;
}
CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { return cuMemAllocFromPoolAsync(d, n, &default_pool, s); }
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) {
    NOTE_CALL();
    if (!d) return INVALID_VALUE;
    unsigned char *p = (unsigned char *)(uintptr_t)d - ALLOC_HEADER;
    ((fake_pool *)*(void **)p)->attr[POOL_USED_CURRENT] -= *(size_t *)(p + sizeof(void *));
    free(p);
    last_free_stream = s; async_frees++;
    return SUCCESS;
}
CUstream fakelaunch_last_alloc_stream(void) { return last_alloc_stream; }
CUstream fakelaunch_last_free_stream(void) { return last_free_stream; }
int fakelaunch_async_allocations(void) { return async_allocations; }
int fakelaunch_async_frees(void) { return async_frees; }
int fakelaunch_pools_created(void) { return pools_created; }
int fakelaunch_pools_destroyed(void) { return pools_destroyed; }
unsigned long long fakelaunch_pool_trimmed_to(void *pool) { return ((fake_pool *)pool)->trimmed_to; }

/* A host function: called at once, as if everything queued before it had finished -- or, deferred, queued for
 * the worker, which runs them in order while the gate is open (closed, it stands for a long kernel before them). */
typedef void (*CUhostFn)(void *);
typedef struct queued { CUstream stream; CUhostFn fn; void *data; struct queued *next; } queued;
static queued *first_queued, *last_queued;
static int deferring, gate_closed, worker_started, running;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_moved = PTHREAD_COND_INITIALIZER;
static pthread_t worker;
static void *run_host_functions(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (!first_queued || gate_closed) pthread_cond_wait(&queue_moved, &queue_lock);
        queued *next = first_queued;
        first_queued = next->next;
        if (!first_queued) last_queued = NULL;
        running++;
        pthread_mutex_unlock(&queue_lock);
        in_host_function = 1;
        next->fn(next->data);
        in_host_function = 0;
        pthread_mutex_lock(&queue_lock);
        running--;
        free(next);
        pthread_cond_broadcast(&queue_moved);
        pthread_mutex_unlock(&queue_lock);
    }
    return NULL;
}
static int still_queued(CUstream s) {
    int n = running;
    for (queued *q = first_queued; q; q = q->next) n += !s || q->stream == s;
    return n;
}
static void wait_for_host_functions(CUstream s) {
    pthread_mutex_lock(&queue_lock);
    while (still_queued(s)) pthread_cond_wait(&queue_moved, &queue_lock);
    pthread_mutex_unlock(&queue_lock);
}
void fakelaunch_defer_host_functions(int on) { deferring = on; }
void fakelaunch_gate(int closed) {
    pthread_mutex_lock(&queue_lock);
    gate_closed = closed;
    pthread_cond_broadcast(&queue_moved);
    pthread_mutex_unlock(&queue_lock);
}
CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *data) {
    NOTE_CALL();
    if (!fn) return INVALID_VALUE;
    if (!deferring) {
        fn(data);
        return SUCCESS;
    }
    queued *q = calloc(1, sizeof *q);
    if (!q) return OUT_OF_MEMORY;
    q->stream = stream, q->fn = fn, q->data = data;
    pthread_mutex_lock(&queue_lock);
    if (!worker_started) worker_started = !pthread_create(&worker, NULL, run_host_functions, NULL);
    if (last_queued) last_queued->next = q; else first_queued = q;
    last_queued = q;
    pthread_cond_broadcast(&queue_moved);
    pthread_mutex_unlock(&queue_lock);
    return SUCCESS;
}

unsigned long long fakelaunch_count(void) { return launches; }
const void *fakelaunch_last_config(void) { return last_config; }

/* Occupancy, as an H200 answers for a small kernel: blocks limited by 2048 resident threads and 32 blocks per
 * SM; clusters of up to MAX_CLUSTER_BLOCKS blocks fit (cuda.h's CUlaunchConfig and CUlaunchAttribute layout). */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int block, size_t shared) {
    (void)f; (void)shared;
    if (block < 1 || block > 1024) return INVALID_VALUE;
    *n = RESIDENT_THREADS / block < RESIDENT_BLOCKS ? RESIDENT_THREADS / block : RESIDENT_BLOCKS;
    return SUCCESS;
}
static unsigned cluster_blocks(const unsigned char *config) {
    const unsigned char *attrs = *(const unsigned char *const *)(config + CONFIG_ATTRS_OFFSET);
    unsigned count = *(const unsigned *)(config + CONFIG_NUM_ATTRS_OFFSET), blocks = 1;
    for (unsigned i = 0; i < count; i++) {
        const unsigned char *attr = attrs + i * ATTRIBUTE_BYTES;
        if (*(const int *)attr == ATTRIBUTE_CLUSTER_DIMENSION) {
            const unsigned *dim = (const unsigned *)(attr + ATTRIBUTE_VALUE_OFFSET);
            blocks = dim[0] * dim[1] * dim[2];
        }
    }
    return blocks;
}
CUresult cuOccupancyMaxActiveClusters(int *n, void *f, const void *config) {
    (void)f;
    unsigned blocks = cluster_blocks(config);
    *n = blocks <= MAX_CLUSTER_BLOCKS ? (int)(SM_COUNT / blocks) : 0;
    return SUCCESS;
}
CUresult cuOccupancyMaxPotentialClusterSize(int *n, void *f, const void *config) {
    (void)f; (void)config;
    *n = MAX_CLUSTER_BLOCKS;
    return SUCCESS;
}
