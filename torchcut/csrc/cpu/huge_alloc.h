// Large CPU buffers in transparent huge pages (the CPU solvers' workspace and their result tensors).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

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

}  // namespace torchcut_cpu
