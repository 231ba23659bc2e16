#pragma once
/// host_parallel_for: volt's own element loops (the fused host Adam/AdamW step) split across host
/// threads.
///
/// [Note: why not at::parallel_for] With LibTorch's OpenMP backend (Debian's LibTorch and PyTorch's
/// wheels), at::parallel_for is a header template whose `#pragma omp parallel` is compiled into the
/// caller's translation unit. volt is built without -fopenmp, so there it ran the whole range on the
/// calling thread: the fused host AdamW of FSDP's cpu_offload stepped 5.54 B parameters on one of
/// the GPU machine's 16 cores (measured: 10.2 s a step, about 1.3 s of it on the GPU). Building volt
/// with -fopenmp would link the compiler's OpenMP runtime, which need not be the one LibTorch uses
/// (PyTorch's wheels carry their own copy). Plain std::threads work the same with every LibTorch.
///
/// Threads are started for each call (tens of microseconds each) and joined before it returns, so
/// callers pass work worth milliseconds; nothing outlives the call.
#include <cstdint>
#include <functional>

namespace volt::detail {

/// The number of threads volt's host loops use: at::get_num_threads() (what torch::set_num_threads,
/// OMP_NUM_THREADS or LibTorch's default make it), at least 1.
int host_threads();

/// Calls fn(begin, end) on contiguous, disjoint ranges that cover [0, n) in order, each of at least
/// `grain` elements (one range when n < 2 * grain), on at most `threads` threads: the calling
/// thread and threads - 1 std::threads started for the call. A thread that cannot be started (a
/// process or memory limit) leaves its range to the calling thread. Returns when every range is
/// done and rethrows the first exception fn threw (the other ranges still run to their end).
/// Thread-safety: fn is called concurrently, on disjoint ranges.
void host_parallel_for(int64_t n, int64_t grain, int threads, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace volt::detail
