// Bindings of the general-graph push-relabel extension: torch.ops.torchcut_csr.solve
#include <torch/library.h>

#include <ATen/ATen.h>

namespace torchcut_csr {

std::tuple<at::Tensor, at::Tensor> solve_cuda(const at::Tensor& row_ptr, const at::Tensor& head, const at::Tensor& rev,
                                              at::Tensor& res, at::Tensor& excess, at::Tensor& sink, int64_t period,
                                              int64_t iters, int64_t max_cycles);

static std::tuple<at::Tensor, at::Tensor> solve(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor res,
                                                at::Tensor excess, at::Tensor sink, int64_t period, int64_t iters,
                                                int64_t max_cycles) {
  const auto dev = res.device();
  for (const auto* t : {&row_ptr, &head, &rev, &excess, &sink}) {
    TORCH_CHECK(t->device() == dev, "torchcut_csr.solve: expected all tensors on ", dev, ", got one on ",
                t->device());
  }
  TORCH_CHECK(dev.is_cuda(), "torchcut_csr.solve: expected CUDA tensors, got ", dev);
  TORCH_CHECK(row_ptr.scalar_type() == at::kInt && head.scalar_type() == at::kInt && rev.scalar_type() == at::kInt,
              "torchcut_csr.solve: row_ptr, head, rev: expected int32, got ", row_ptr.scalar_type(), ", ",
              head.scalar_type(), ", ", rev.scalar_type());
  TORCH_CHECK(res.scalar_type() == at::kLong && excess.scalar_type() == at::kLong && sink.scalar_type() == at::kLong,
              "torchcut_csr.solve: res, excess, sink: expected int64, got ", res.scalar_type(), ", ",
              excess.scalar_type(), ", ", sink.scalar_type());
  for (const auto* t : {&row_ptr, &head, &rev, &res, &excess, &sink}) {
    TORCH_CHECK(t->is_contiguous() && t->dim() == 1, "torchcut_csr.solve: expected contiguous 1-D tensors, got ",
                t->sizes());
  }
  const int64_t n = excess.numel();
  const int64_t a = res.numel();
  TORCH_CHECK(sink.numel() == n && row_ptr.numel() == n + 1, "torchcut_csr.solve: expected sink [", n,
              "] and row_ptr [", n + 1, "], got ", sink.sizes(), " and ", row_ptr.sizes());
  TORCH_CHECK(head.numel() == a && rev.numel() == a, "torchcut_csr.solve: expected head and rev [", a, "], got ",
              head.sizes(), " and ", rev.sizes());
  TORCH_CHECK(n + 2 < INT32_MAX && a < INT32_MAX, "torchcut_csr.solve: graph too large for int32 indices");
  TORCH_CHECK(iters >= 1 && max_cycles >= 1, "torchcut_csr.solve: iters and max_cycles: expected >= 1, got ", iters,
              " and ", max_cycles);
  return solve_cuda(row_ptr, head, rev, res, excess, sink, period, iters, max_cycles);
}

}  // namespace torchcut_csr

TORCH_LIBRARY(torchcut_csr, m) {
  m.def(
      "solve(Tensor row_ptr, Tensor head, Tensor rev, Tensor(a!) res, Tensor(b!) excess, Tensor(c!) sink, "
      "int period, int iters, int max_cycles) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchcut_csr, CUDA, m) { m.impl("solve", &torchcut_csr::solve); }
