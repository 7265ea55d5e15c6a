/* The C floor of a launch, called from Python so that it is measured in the same process and the same
 * rounds as every Python variant (bench/launch_overhead.py). A separate C program measures at another time,
 * and on a shared host the machine's speed drifts by 20-30 % between runs -- more than the differences we
 * are after. Built at bench time: nvcc -O2 -shared -Xcompiler -fPIC launch_loop.c -lcuda.
 *
 * launch_loop(..., use_ex=0) queues `launches` launches with cuLaunchKernel (11 arguments);
 * use_ex=1 with cuLaunchKernelEx and one prebuilt CUlaunchConfig. Returns the first non-zero CUresult, or 0.
 */
#include <cuda.h>

int launch_loop(CUfunction fn, CUstream stream, void **params, unsigned block, int launches, int use_ex) {
    CUlaunchConfig config = {1, 1, 1, block, 1, 1, 0, stream, NULL, 0};
    for (int i = 0; i < launches; ++i) {
        CUresult rc = use_ex ? cuLaunchKernelEx(&config, fn, params, NULL)
                             : cuLaunchKernel(fn, 1, 1, 1, block, 1, 1, 0, stream, params, NULL);
        if (rc != CUDA_SUCCESS) return (int)rc;
    }
    return 0;
}
