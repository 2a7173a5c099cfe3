// Bindings of the grid push-relabel extension: torch.ops.torchcut_grid.solve (argument checks, buffers
// from torch's caching allocators, the current stream; the solver itself is in grid_solve.cpp).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <exception>
#include <vector>

#include "grid_common.h"

namespace torchcut_grid {

namespace {

// Buffers of one solve: torch tensors, kept alive until the op returns (the caching allocators make
// them cheap, and stream-ordered: the stream's later work may reuse them after the solve).
struct TorchAlloc final : Alloc {
  at::Device dev;
  std::vector<at::Tensor> keep;
  explicit TorchAlloc(at::Device d) : dev(d) {}
  void* device(size_t bytes) override {
    keep.push_back(at::empty({(int64_t)std::max<size_t>(bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(dev)));
    return keep.back().data_ptr();
  }
  void* pinned(size_t bytes) override {
    keep.push_back(at::empty({(int64_t)std::max<size_t>(bytes, 1)},
                             at::TensorOptions().dtype(at::kByte).pinned_memory(true)));
    return keep.back().data_ptr();
  }
};

std::tuple<at::Tensor, at::Tensor> solve_op(at::Tensor caps, at::Tensor excess, at::Tensor sink, c10::IntArrayRef shape,
                                            c10::IntArrayRef offsets, c10::IntArrayRef opts) {
  TORCH_CHECK(caps.is_cuda() && excess.is_cuda() && sink.is_cuda(),
              "torchcut_grid.solve: expected caps, excess and sink on a CUDA device, got ", caps.device(), ", ",
              excess.device(), ", ", sink.device());
  TORCH_CHECK(caps.device() == excess.device() && caps.device() == sink.device(),
              "torchcut_grid.solve: expected caps, excess and sink on one device");
  TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong,
              "torchcut_grid.solve: caps: expected int32 or int64, got ", caps.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type(), "torchcut_grid.solve: sink: expected dtype ",
              caps.scalar_type(), " (that of caps), got ", sink.scalar_type());
  TORCH_CHECK(excess.scalar_type() == at::kLong, "torchcut_grid.solve: excess: expected int64, got ",
              excess.scalar_type());
  TORCH_CHECK(caps.is_contiguous() && excess.is_contiguous() && sink.is_contiguous(),
              "torchcut_grid.solve: expected contiguous caps, excess and sink");
  TORCH_CHECK(shape.size() == 2 || shape.size() == 3, "torchcut_grid.solve: shape: expected 2 or 3 dims, got ",
              shape.size());
  const int64_t nd = (int64_t)shape.size();
  TORCH_CHECK(offsets.size() % nd == 0 && offsets.size() > 0,
              "torchcut_grid.solve: offsets: expected K*ndim integers, got ", offsets.size());
  const int64_t K = (int64_t)offsets.size() / nd;
  TORCH_CHECK(2 * K <= kMaxDirs, "torchcut_grid.solve: offsets: expected at most ", kMaxDirs / 2,
              " offsets, got ", K);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  TORCH_CHECK(n > 0, "torchcut_grid.solve: shape: expected at least one node, got ", shape);
  const int64_t B = excess.numel() / n;
  TORCH_CHECK(excess.numel() == B * n && sink.numel() == B * n && caps.numel() == B * 2 * K * n,
              "torchcut_grid.solve: expected caps [B, 2K, *shape], excess and sink [B, *shape] with shape ", shape,
              " and K=", K, ", got ", caps.sizes(), ", ", excess.sizes(), ", ", sink.sizes());
  c10::cuda::CUDAGuard guard(caps.device());
  at::Tensor out = at::empty({B * n}, excess.options().dtype(at::kBool));
  at::Tensor stats = at::zeros({kNumStats}, at::TensorOptions().dtype(at::kLong));
  TorchAlloc alloc(caps.device());
  try {
    solve(caps.data_ptr(), (int)caps.element_size(), reinterpret_cast<long long*>(excess.data_ptr()), sink.data_ptr(),
          out.data_ptr<bool>(), std::vector<int64_t>(shape.begin(), shape.end()),
          std::vector<int64_t>(offsets.begin(), offsets.end()), B,
          Options::from(std::vector<int64_t>(opts.begin(), opts.end())), at::cuda::getCurrentCUDAStream(),
          at::cuda::getCurrentDeviceProperties()->multiProcessorCount, alloc, stats.data_ptr<int64_t>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return {out, stats};
}

}  // namespace

}  // namespace torchcut_grid

TORCH_LIBRARY(torchcut_grid, m) {
  m.def(
      "solve(Tensor(a!) caps, Tensor(b!) excess, Tensor(c!) sink, int[] shape, int[] offsets, int[] opts) "
      "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchcut_grid, CUDA, m) { m.impl("solve", &torchcut_grid::solve_op); }
