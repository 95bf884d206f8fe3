// A fixed pool of worker threads for data-parallel loops over the CPU backend's kernels.
#pragma once
#include <cstdint>
#include <functional>

namespace deepinfer {

// Runs body(begin, end) over [0, n) split into contiguous ranges, one per worker, and waits.
// Ranges depend only on n and the thread count, so results are reproducible run to run.
// grain: the smallest range worth handing to a thread.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body, int64_t grain = 1);

// Number of worker threads (DEEPINFER_CPU_THREADS, default: hardware concurrency).
int cpu_thread_count();

}  // namespace deepinfer
