// The CPU solvers' thread pool: a job per item (batch items, or the ranges of one grid) on a few threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace torchcut_cpu {

// Runs job(item, worker) for items 0..B-1 on up to `threads` threads; rethrows the first exception.
template <class Job>
void parallel_items(int64_t B, int64_t threads, Job job) {
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(threads, B));
  if (T == 1) {
    for (int64_t b = 0; b < B; ++b) job(b, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr err;
  std::mutex m;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < T; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int64_t b; (b = next.fetch_add(1)) < B;) job(b, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!err) err = std::current_exception();
        next = B;
      }
    });
  }
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace torchcut_cpu
