// The CPU implementation of torch.ops.torchcut.csr_solve_ (schema in torchcut.cpp): Boykov-Kolmogorov
// (cpu_bk.h) on the CSR layout of torchcut/graph.py (row_ptr, head, rev, residuals), in place. It leaves
// the final residuals, the excess (unsaturated source residual, as a preflow) and the residual sink
// capacities in its inputs, and returns the source side of the canonical minimum cut (nodes that cannot
// reach the sink) and one row of counters (kStats).
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cpu_bk.h"
#include "../layouts.h"
#include "../terminals.h"

namespace torchcut_cpu {
namespace {

// One row of counters, named and ordered by TORCHCUT_CPU_STATS (layouts.h).
constexpr int kStats = torchcut::CpuStats::kCount;

template <class CapT>
struct CsrTopo {
  using Cap = CapT;
  using P = int64_t;
  static constexpr P kTerm = -2, kOrphan = -3, kNone = -1;

  Cap* rc;
  const int64_t* row_ptr;
  const int64_t* headv;
  const int64_t* rev;
  int64_t* par;
  uint8_t* sink_tree;

  int64_t begin(int64_t v) const { return row_ptr[v]; }
  int64_t end(int64_t v) const { return row_ptr[v + 1]; }
  int64_t arc(int64_t, int64_t k) const { return k; }
  int32_t head(int64_t, int64_t k) const { return static_cast<int32_t>(headv[k]); }
  int64_t sister(int64_t, int64_t k) const { return rev[k]; }
  P back(int64_t, int64_t k) const { return rev[k]; }
  P to(int64_t, int64_t k) const { return k; }
  int32_t parent_node(int64_t, P p) const { return static_cast<int32_t>(headv[p]); }
  int64_t parent_arc(int64_t, P p) const { return p; }
  int64_t parent_sister(int64_t, P p) const { return rev[p]; }
  bool is_free(int64_t v) const { return par[v] == kNone; }
  bool is_sink(int64_t v) const { return sink_tree[v]; }
  P parent(int64_t v) const { return par[v]; }
  void set(int64_t v, P p, bool sink) { par[v] = p, sink_tree[v] = sink; }
  void set_parent(int64_t v, P p) { par[v] = p; }
  void set_free(int64_t v) { par[v] = kNone; }
};

std::tuple<at::Tensor, at::Tensor> csr_solve(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps,
                                             at::Tensor excess, at::Tensor sink) {
  for (const auto* t : {&row_ptr, &head, &rev, &caps, &excess, &sink})
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous(), "torchcut_cpu.csr_solve: expected contiguous CPU tensors");
  TORCH_CHECK(row_ptr.scalar_type() == at::kLong && head.scalar_type() == at::kLong && rev.scalar_type() == at::kLong,
              "torchcut_cpu.csr_solve: row_ptr/head/rev: expected int64");
  TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong,
              "torchcut_cpu.csr_solve: caps: expected int32 or int64, got ", caps.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type() && excess.scalar_type() == at::kLong,
              "torchcut_cpu.csr_solve: sink: expected the dtype of caps, excess: int64");
  const int64_t N = excess.numel(), A = caps.numel();
  TORCH_CHECK(row_ptr.numel() == N + 1 && sink.numel() == N && head.numel() == A && rev.numel() == A,
              "torchcut_cpu.csr_solve: inconsistent sizes");
  TORCH_CHECK(N < std::numeric_limits<int32_t>::max(), "torchcut_cpu.csr_solve: ", N,
              " nodes are too many for the CPU solver; expected fewer than 2**31 - 1");
  auto mask = at::empty({N}, excess.options().dtype(at::kBool));
  auto stats = at::zeros({1, kStats}, excess.options());
  std::vector<int64_t> tr(N), par(N);
  std::vector<int32_t> nxt(N);
  std::vector<Marks> mk(N);
  std::vector<uint8_t> tree(N);
  int64_t* e = excess.data_ptr<int64_t>();
  AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut_cpu.csr_solve", [&] {
    using Cap = index_t;
    Cap* s = sink.data_ptr<Cap>();
    for (int64_t v = 0; v < N; ++v) tr[v] = torchcut::net_terminal(e[v], static_cast<int64_t>(s[v]));
    CsrTopo<Cap> g{caps.data_ptr<Cap>(), row_ptr.data_ptr<int64_t>(), head.data_ptr<int64_t>(),
                   rev.data_ptr<int64_t>(), par.data(), tree.data()};
    BK<CsrTopo<Cap>> bk(g, N, tr.data(), nxt.data(), mk.data());
    const BKStats r = bk.run();
    std::vector<uint8_t> reach(N);
    bk.sink_side(reach.data());
    bool* m = mask.data_ptr<bool>();
    for (int64_t v = 0; v < N; ++v) {
      e[v] = torchcut::net_source(tr[v]);
      s[v] = static_cast<Cap>(torchcut::net_sink(tr[v]));
      m[v] = !reach[v];
    }
    torchcut::CpuStats out;
    out.flow = r.flow, out.augmentations = r.augmentations, out.orphans = r.orphans, out.growths = r.growths;
    out.write(stats.data_ptr<int64_t>());
  });
  return {mask, stats};
}

std::tuple<at::Tensor, at::Tensor> csr_solve_op(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps,
                                                at::Tensor excess, at::Tensor sink, at::IntArrayRef options) {
  TORCH_CHECK(options.empty(), "torchcut.csr_solve_ (CPU): options: expected none, got ", options.size(), " values");
  auto idx = [](const at::Tensor& t) { return t.scalar_type() == at::kLong ? t.contiguous() : t.to(at::kLong).contiguous(); };
  return csr_solve(idx(row_ptr), idx(head), idx(rev), caps, excess, sink);
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("csr_solve_", &torchcut_cpu::csr_solve_op);
}
