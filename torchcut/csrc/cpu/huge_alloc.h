// Large CPU buffers in transparent huge pages (the CPU solvers' workspace and their result tensors).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

namespace torchcut_cpu {

// Large buffers in transparent huge pages where the kernel allows it (madvise mode): a fresh 4 KiB page
// costs a fault on first touch, and the solver's buffers are touched once per node right away.
constexpr size_t kHuge = size_t(1) << 21;

inline void* huge_alloc(size_t bytes) {
  if (bytes < kHuge) {
    void* p = std::malloc(bytes ? bytes : 1);
    TORCH_CHECK(p, "torchcut_cpu: out of memory allocating ", bytes, " bytes");
    return p;
  }
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
  TORCH_CHECK(p, "torchcut_cpu: out of memory allocating ", bytes, " bytes");
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

struct HugeFree {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using HugeBuf = std::unique_ptr<T[], HugeFree>;
template <class T>
HugeBuf<T> huge_buf(int64_t n) {
  return HugeBuf<T>(static_cast<T*>(huge_alloc(sizeof(T) * static_cast<size_t>(n))));
}

// A CPU tensor whose storage comes from huge_alloc.
inline at::Tensor huge_tensor(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  void* p = huge_alloc(static_cast<size_t>(n) * at::elementSize(dtype));
  return at::from_blob(p, sizes, [](void* q) { std::free(q); }, at::TensorOptions().dtype(dtype));
}

// Work buffers kept from one call to the next. A fresh buffer of a few MB is new memory: its first touch
// faults every page in (zeroing it), which measured about 435 faults and 0.3-0.5 ms a call on a 192^2
// 8-connected grid (7 ms in all), where a kept buffer is warm. The pool keeps at most kKeep bytes in all
// (the workspaces of grids up to about 512^2 8-connected on two threads; a Work type may set its own
// kKeepBytes); larger ones are freed as before.
// Work: a set of buffers with bytes() (grid_layout.h's GridWork, csr_solve.cpp's CsrWork); a pool per type.
// The bytes a pool keeps: 64 MB unless a Work type says otherwise (a static kKeepBytes).
template <class Work, class = void>
struct KeepBytes {
  static constexpr int64_t value = int64_t(64) << 20;
};
template <class Work>
struct KeepBytes<Work, std::void_t<decltype(Work::kKeepBytes)>> {
  static constexpr int64_t value = Work::kKeepBytes;
};

template <class Work>
class WorkPool {
 public:
  static constexpr int64_t kKeep = KeepBytes<Work>::value;
  static WorkPool& get() {
    static WorkPool pool;
    return pool;
  }
  std::unique_ptr<Work> take() {
    std::lock_guard<std::mutex> lock(m_);
    if (kept_.empty()) return std::make_unique<Work>();
    auto w = std::move(kept_.back());
    kept_.pop_back();
    bytes_ -= w->bytes();
    return w;
  }
  void give(std::unique_ptr<Work> w) {
    if (!w) return;
    std::lock_guard<std::mutex> lock(m_);
    if (bytes_ + w->bytes() > kKeep) return;  // freed here
    bytes_ += w->bytes();
    kept_.push_back(std::move(w));
  }

 private:
  std::mutex m_;
  std::vector<std::unique_ptr<Work>> kept_;
  int64_t bytes_ = 0;
};

// `count` work buffers from the pool for one call, given back when it ends (also on an exception).
template <class Work>
struct PooledWork {
  std::vector<std::unique_ptr<Work>> w;
  explicit PooledWork(int64_t count) {
    for (int64_t i = 0; i < count; ++i) w.push_back(WorkPool<Work>::get().take());
  }
  ~PooledWork() {
    for (auto& x : w) WorkPool<Work>::get().give(std::move(x));
  }
  Work& operator[](int64_t i) { return *w[i]; }
};

}  // namespace torchcut_cpu
