// The CPU solvers' thread pool: a job per item (batch items, or the ranges of one grid) on a few threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace torchcut_cpu {

// Runs job(item, worker) for items 0..B-1 on up to `threads` threads; rethrows the first exception.
//
// Built with OpenMP (as torch's CPU wheels are), the threads are an OpenMP team: torch's intra-op
// threads, which spin for a while after each parallel op, take the items at once, where threads of our
// own waited up to milliseconds for a core one of them held (docs/performance.md, "Threads of the CPU
// solvers"). Jobs never assume the threads run at once: a team may be smaller than asked (nested in a
// parallel region), and then the items run in turn on the threads it has.
template <class Job>
void parallel_items(int64_t B, int64_t threads, Job job) {
  const int64_t T = std::max<int64_t>(1, std::min(threads, B));
  if (T == 1) {
    for (int64_t b = 0; b < B; ++b) job(b, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr err;
  std::mutex m;
  auto worker = [&](int64_t t) {
    try {
      for (int64_t b; (b = next.fetch_add(1)) < B;) job(b, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!err) err = std::current_exception();
      next = B;
    }
  };
#ifdef _OPENMP
  if (!omp_in_parallel()) {
#pragma omp parallel num_threads(static_cast<int>(T))
    worker(omp_get_thread_num());
    if (err) std::rethrow_exception(err);
    return;
  }
#endif
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < T; ++t) pool.emplace_back(worker, t);
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace torchcut_cpu
