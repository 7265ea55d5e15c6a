// spin.cu -- a kernel that runs for a known wall-clock time: every thread busy-waits on the GPU's clock.
//
// Why such a kernel exists at all:
//
// * The asyncio tests and tutorials ask "does the event loop keep running *while the GPU works*?". To
//   answer, the GPU must be busy for a known time (about 1-2 s) -- long enough that a ticker task on the
//   host would visibly stall if the loop were blocked, and independent of how fast the GPU is. A real
//   kernel (a big matmul) takes whatever time it takes on this GPU; spin(nanoseconds) takes the time asked.
// * The graph tests use it the same way: a long first kernel proves that a later host-side event only
//   fires after the GPU work it follows, not when the launch call returns.
//
// Why it is written this way:
//
// * %globaltimer, not clock64(). clock64() counts cycles of *this SM's* clock, whose frequency changes
//   with boost and power states and differs between SMs, so "N cycles" is no fixed time. %globaltimer is
//   a nanosecond timer shared by the whole GPU (PTX ISA: "a 64-bit global nanosecond timer"): the wait
//   is measured in wall-clock time. Its resolution is coarse on some GPUs (it may tick in steps of about
//   a microsecond), which does not matter for waits of milliseconds to seconds.
// * `asm volatile`: the timer read has no inputs, so without volatile the compiler could treat it as a
//   constant, hoist it out of the loop and spin forever (or not at all). "%%" is how inline PTX spells a
//   literal "%" once operands (%0) are in use.
// * Every thread waits on its own, so any grid works and the kernel ends about `nanoseconds` after its
//   *last* block started. Launch one block of one thread: a single resident thread keeps the GPU "busy"
//   for the stream (later work on it waits) while leaving every other SM free for other streams.
// * Unsigned subtraction: `now - start` stays correct even across a wrap of the 64-bit counter
//   (which would take centuries, but the arithmetic costs nothing).
// * No watchdog concern on a compute GPU (an H200 has no display): CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT
//   is 0 there. On a desktop GPU driving a display, kernels longer than a few seconds may be killed.
//
// Launch configuration:
//   block = 1 thread (SPIN_BLOCK); grid = 1 block; dynamic shared memory = 0
//   argument: the duration in nanoseconds (unsigned 64-bit: pass a Python int)

constexpr unsigned SPIN_BLOCK = 1;  // the documented launch: one thread is enough to occupy a stream
static_assert(SPIN_BLOCK >= 1, "a launch needs at least one thread");

__device__ __forceinline__ unsigned long long globaltimer_ns()
{
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

extern "C" __global__ void spin(unsigned long long nanoseconds)
{
    const unsigned long long start = globaltimer_ns();
    while (globaltimer_ns() - start < nanoseconds) {
        // busy-wait: the point of this kernel is to take time
    }
}

// spin_timed(nanoseconds, times): the same wait, and the GPU's own record of it -- times[0] = when the
// kernel started, times[1] = when it ended, both %globaltimer nanoseconds. Two kernels ran at the same
// time exactly when their [start, end] intervals overlap: a fact of the GPU's timeline, not of host clocks
// (tutorials/06f_per_thread_stream.py). One block of one thread, as above; `times` holds two values.
extern "C" __global__ void spin_timed(unsigned long long nanoseconds, unsigned long long *times)
{
    const unsigned long long start = globaltimer_ns();
    unsigned long long now = start;
    while (now - start < nanoseconds) {
        now = globaltimer_ns();
    }
    times[0] = start;
    times[1] = now;
}
