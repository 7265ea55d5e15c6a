// rawcuda-build: arch=compute_90
// dependent_launch.cu -- programmatic dependent launch (PDL, compute capability 9.0): the next kernel of
// a stream starts before this one has finished, and waits inside itself for the data it needs.
//
// add_one(y, x, n): y[i] = x[i] + 1. A chain of them, ping-ponging between two buffers, adds 1 per
// launch: after K launches every element is x + K exactly (small whole numbers are exact in float32),
// which is what a test checks. Timing the chain with and without PDL measures the gap between kernels.
//
// Launch configuration: any 1-D grid covering n; no shared memory. With PDL: launch it through
// fn.options(programmatic=True), on the stream of the kernel it depends on.
//
// Why it is written this way:
// * Without PDL, a stream starts kernel k+1 only after kernel k has finished and its writes are flushed:
//   the GPU sits idle for the launch latency in between. With the programmatic-stream-serialization
//   attribute, kernel k+1 may be scheduled as soon as every block of kernel k has executed
//   griddepcontrol.launch_dependents (or exited), so its blocks are resident and waiting when k ends.
// * griddepcontrol.wait is the other half: it blocks until the grids this one depends on have completed
//   and their memory operations are visible. Everything before it must not read their output. Here that
//   is only the index arithmetic; in a real kernel, loading weights or zeroing shared memory.
// * launch_dependents first: it costs nothing to let the next kernel get ready early, since its own wait
//   still orders its reads after this kernel's writes. Launched without the attribute, both instructions
//   do nothing, and the kernel is an ordinary one.

#include <cstddef>

// -- begin add_one
extern "C" __global__ void add_one(float *y, const float *x, size_t n)
{
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may get ready now
    asm volatile("griddepcontrol.wait;" ::: "memory");  // x is the previous kernel's output: wait for it
    if (i < n) {
        y[i] = x[i] + 1.0f;
    }
}
// -- end add_one
