// The argument checks of the grid_arcs op, shared by its CPU (cpu/grid_arcs.cpp) and CUDA
// (cuda/grid_arcs.cu) implementations; the contract is described in cpu/grid_arcs.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace torchcut_arcs_checks {

struct ArcsShape {
  int64_t nd, K, B;  // spatial dims, offsets, items
};

// edges / reverse [K, B, *shape] with 2 or 3 spatial dims, equal shapes and dtypes, on `device`;
// offsets K * nd values.
inline ArcsShape check_grid_arcs(const at::Tensor& edges, const at::Tensor& reverse, at::IntArrayRef offsets,
                                 at::DeviceType device) {
  const int64_t dims = edges.dim();
  TORCH_CHECK(dims == 4 || dims == 5, "torchcut.grid_arcs: edges: expected [K, B, *shape] with 2 or 3 spatial dims, "
              "got ", edges.sizes());
  const ArcsShape s{dims - 2, edges.size(0), edges.size(1)};
  TORCH_CHECK(reverse.sizes() == edges.sizes(), "torchcut.grid_arcs: reverse: expected the shape of edges ",
              edges.sizes(), ", got ", reverse.sizes());
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == s.K * s.nd, "torchcut.grid_arcs: offsets: expected ",
              s.K * s.nd, " values, got ", offsets.size());
  TORCH_CHECK(edges.device().type() == device && reverse.device() == edges.device(), "torchcut.grid_arcs: expected ",
              "edges and reverse on one ", c10::DeviceTypeName(device), " device, got ", edges.device(), " and ",
              reverse.device());
  TORCH_CHECK(edges.scalar_type() == reverse.scalar_type(), "torchcut.grid_arcs: reverse: expected dtype ",
              edges.scalar_type(), " (that of edges), got ", reverse.scalar_type());
  return s;
}

}  // namespace torchcut_arcs_checks
