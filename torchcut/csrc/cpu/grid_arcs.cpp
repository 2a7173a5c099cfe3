// grid_arcs (CPU): a grid's arc capacities from the user's layout to the solvers' one, in one pass.
//
// In: edges, reverse [K, B, *shape] (int32 or int64); edges[k][b][p] is the arc p -> p + offsets[k],
// reverse[k][b][p] the arc p + offsets[k] -> p. Out: caps [B, 2K, *shape] of `dtype` (int32 or int64);
// direction k holds edges[k][p], direction K + k at node q holds reverse[k][q - offsets[k]]; arcs that
// leave the grid are 0 (torchcut/grid.py, _arc_layout, is the same in tensor ops and the reference).
//
// The tensor-op version zeroes and copies one slab per direction and axis: 2K * (ndim + 1) small copies,
// each a dispatch of a few microseconds, which made the constructor of a 16^3 26-connected grid 0.8 ms.
// Here each output row is one loop: the valid span copied, the rest zeroed.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../grid_arcs.h"

namespace torchcut_cpu {
namespace {

// One output plane [*shape] of direction d: out[p] = in[p + shift] where p + shift is inside, else 0.
// (Direction k: shift 0 and in-grid test on p + o; direction K + k: shift -o, test on p - o.)
template <class In, class Out>
void plane(const In* in, Out* out, const std::vector<int64_t>& shape, const std::vector<int64_t>& o, int64_t sign,
           bool forward) {
  const int64_t nd = static_cast<int64_t>(shape.size()), W = shape[nd - 1];
  int64_t rows = 1;
  for (int64_t a = 0; a + 1 < nd; ++a) rows *= shape[a];
  // the arc p -> p + o exists where p + o is inside (forward: read in[p]); the arc stored at q (q - o -> q
  // reversed: o' = -o) exists where q - o is inside and reads in[q - o]
  const int64_t ox = sign * o[nd - 1];
  const int64_t x0 = std::max<int64_t>(0, -ox), x1 = std::min<int64_t>(W, W - ox);
  std::vector<int64_t> idx(nd, 0);
  for (int64_t r = 0; r < rows; ++r) {
    bool inside = x0 < x1;
    int64_t src_row = 0;
    for (int64_t a = 0; a + 1 < nd; ++a) {
      const int64_t j = idx[a] + sign * o[a];
      inside = inside && j >= 0 && j < shape[a];
      src_row = src_row * shape[a] + (forward ? idx[a] : j);
    }
    Out* dst = out + r * W;
    if (!inside) {
      std::fill(dst, dst + W, Out(0));
    } else {
      const In* src = in + src_row * W + (forward ? 0 : ox);
      std::fill(dst, dst + x0, Out(0));
      for (int64_t x = x0; x < x1; ++x) dst[x] = static_cast<Out>(src[x]);
      std::fill(dst + x1, dst + W, Out(0));
    }
    for (int64_t a = nd - 2; a >= 0; --a) {
      if (++idx[a] < shape[a]) break;
      idx[a] = 0;
    }
  }
}

at::Tensor grid_arcs(const at::Tensor& edges_, const at::Tensor& reverse_, at::IntArrayRef offsets, bool wide) {
  const auto arcs = torchcut_arcs_checks::check_grid_arcs(edges_, reverse_, offsets, at::kCPU);
  const int64_t nd = arcs.nd, K = arcs.K, B = arcs.B;
  const at::Tensor edges = edges_.contiguous(), reverse = reverse_.contiguous();
  std::vector<int64_t> shape(edges.sizes().begin() + 2, edges.sizes().end());
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<int64_t> out_sizes{B, 2 * K};
  out_sizes.insert(out_sizes.end(), shape.begin(), shape.end());
  at::Tensor caps = at::empty(out_sizes, edges.options().dtype(wide ? at::kLong : at::kInt));
  AT_DISPATCH_INDEX_TYPES(edges.scalar_type(), "torchcut.grid_arcs", [&] {
    using In = index_t;
    const In* e = edges.data_ptr<In>();
    const In* rv = reverse.data_ptr<In>();
    auto run = [&](auto* out) {
      // planes (b, d) are independent: split over torch's threads only from 2^18 values on (below, the
      // threads' start and their spinning after the region cost more than the copy, and the solver that
      // follows on one thread shares the cores with them)
      const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(n, 1));
      at::parallel_for(0, B * 2 * K, grain, [&](int64_t lo, int64_t hi) {
        std::vector<int64_t> o(nd);
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t b = i / (2 * K), d = i % (2 * K), k = d % K;
          for (int64_t a = 0; a < nd; ++a) o[a] = offsets[k * nd + a];
          const bool fwd = d < K;
          const In* in = (fwd ? e : rv) + (k * B + b) * n;
          plane(in, out + i * n, shape, o, fwd ? 1 : -1, fwd);
        }
      });
    };
    if (wide) run(caps.data_ptr<int64_t>());
    else run(caps.data_ptr<int32_t>());
  });
  return caps;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CPU, m) { m.impl("grid_arcs", &grid_arcs); }

}  // namespace torchcut_cpu
