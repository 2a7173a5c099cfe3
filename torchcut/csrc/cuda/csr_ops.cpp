// CUDA implementation of torch.ops.torchcut.csr_solve_ for general graphs (argument checks,
// buffers from torch's caching allocators, the current stream; the solver is in csr_kernels.cu).
#include <ATen/TensorOperators.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <exception>

#include "csr_common.h"

namespace torchcut_csr {

static std::tuple<at::Tensor, at::Tensor> solve_op(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor res,
                                                at::Tensor excess, at::Tensor sink, int64_t period, int64_t iters,
                                                int64_t max_cycles) {
  const auto dev = res.device();
  for (const auto* t : {&row_ptr, &head, &rev, &excess, &sink}) {
    TORCH_CHECK(t->device() == dev, "torchcut.csr_solve_: expected all tensors on ", dev, ", got one on ",
                t->device());
  }
  TORCH_CHECK(dev.is_cuda(), "torchcut.csr_solve_: expected CUDA tensors, got ", dev);
  TORCH_CHECK(row_ptr.scalar_type() == at::kInt && head.scalar_type() == at::kInt && rev.scalar_type() == at::kInt,
              "torchcut.csr_solve_: row_ptr, head, rev: expected int32, got ", row_ptr.scalar_type(), ", ",
              head.scalar_type(), ", ", rev.scalar_type());
  TORCH_CHECK(res.scalar_type() == at::kLong && excess.scalar_type() == at::kLong && sink.scalar_type() == at::kLong,
              "torchcut.csr_solve_: res, excess, sink: expected int64, got ", res.scalar_type(), ", ",
              excess.scalar_type(), ", ", sink.scalar_type());
  for (const auto* t : {&row_ptr, &head, &rev, &res, &excess, &sink}) {
    TORCH_CHECK(t->is_contiguous() && t->dim() == 1, "torchcut.csr_solve_: expected contiguous 1-D tensors, got ",
                t->sizes());
  }
  const int64_t n = excess.numel();
  const int64_t a = res.numel();
  TORCH_CHECK(sink.numel() == n && row_ptr.numel() == n + 1, "torchcut.csr_solve_: expected sink [", n,
              "] and row_ptr [", n + 1, "], got ", sink.sizes(), " and ", row_ptr.sizes());
  TORCH_CHECK(head.numel() == a && rev.numel() == a, "torchcut.csr_solve_: expected head and rev [", a, "], got ",
              head.sizes(), " and ", rev.sizes());
  TORCH_CHECK(n + 2 < INT32_MAX && a < INT32_MAX, "torchcut.csr_solve_: graph too large for int32 indices");
  TORCH_CHECK(iters >= 1 && max_cycles >= 1, "torchcut.csr_solve_: iters and max_cycles: expected >= 1, got ", iters,
              " and ", max_cycles);
  c10::cuda::CUDAGuard guard(dev);
  const int nn = (int)n;
  auto opts_i = at::TensorOptions().dtype(at::kInt).device(dev);
  at::Tensor height = at::empty({std::max<int64_t>(n, 1)}, opts_i);
  at::Tensor queue = at::empty({std::max<int64_t>(n, 1)}, opts_i);
  at::Tensor active = at::empty({std::max<int64_t>(n, 1)}, opts_i);
  at::Tensor ctr = at::empty({kNumCtr}, opts_i);  // zeroed by solve()
  at::Tensor host_ctr = at::empty({kNumCtr}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  at::Tensor stats = at::zeros({kNumStats}, at::TensorOptions().dtype(at::kLong));
  try {
    solve(row_ptr.data_ptr<int>(), head.data_ptr<int>(), rev.data_ptr<int>(),
          reinterpret_cast<long long*>(res.data_ptr()), reinterpret_cast<long long*>(excess.data_ptr()),
          reinterpret_cast<long long*>(sink.data_ptr()), nn, height.data_ptr<int>(), queue.data_ptr<int>(),
          active.data_ptr<int>(), ctr.data_ptr<int>(), host_ctr.data_ptr<int>(), period, iters, max_cycles,
          at::cuda::getCurrentCUDAStream(), at::cuda::getCurrentDeviceProperties()->multiProcessorCount,
          stats.data_ptr<int64_t>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return {height.slice(0, 0, n) >= (int64_t)(n + 2), stats};
}

// The registered signature: indices of any integer type (converted to int32), residuals of any integer type
// (solved in int64 and copied back), options [period, iters, max_cycles] (layouts.h).
static std::tuple<at::Tensor, at::Tensor> solve_registered(at::Tensor row_ptr, at::Tensor head, at::Tensor rev,
                                                           at::Tensor caps, at::Tensor excess, at::Tensor sink,
                                                           c10::IntArrayRef options) {
  TORCH_CHECK(options.size() == 3, "torchcut.csr_solve_ (CUDA): options: expected [period, iters, max_cycles], got ",
              options.size(), " values");
  auto i32 = [](const at::Tensor& t) { return t.to(at::kInt).contiguous(); };
  auto i64 = [](const at::Tensor& t) { return t.to(at::kLong).contiguous(); };
  at::Tensor r = i64(caps), e = i64(excess), s = i64(sink);
  auto out = solve_op(i32(row_ptr), i32(head), i32(rev), r, e, s, options[0], options[1], options[2]);
  if (!r.is_same(caps)) caps.copy_(r);
  if (!e.is_same(excess)) excess.copy_(e);
  if (!s.is_same(sink)) sink.copy_(s);
  return out;
}

}  // namespace torchcut_csr

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) { m.impl("csr_solve_", &torchcut_csr::solve_registered); }
