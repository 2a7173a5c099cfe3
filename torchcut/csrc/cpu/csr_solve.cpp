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
#include <initializer_list>
#include <limits>
#include <vector>

#include "cpu_bk.h"
#include "huge_alloc.h"
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

// The solver's buffers for n nodes (uninitialised: every entry is written before it is read), kept
// between calls (WorkPool, huge_alloc.h): fresh ones fault their pages in on every call.
struct CsrWork {
  HugeBuf<int64_t> tr, par;
  HugeBuf<int32_t> nxt;
  HugeBuf<Marks> mk;
  HugeBuf<uint8_t> tree, reach;
  int64_t size = 0;
  void resize(int64_t n) {
    if (n <= size) return;
    tr = huge_buf<int64_t>(n), par = huge_buf<int64_t>(n);
    nxt = huge_buf<int32_t>(n);
    mk = huge_buf<Marks>(n);
    tree = huge_buf<uint8_t>(n), reach = huge_buf<uint8_t>(n);
    size = n;
  }
  int64_t bytes() const { return size * static_cast<int64_t>(8 + 8 + 4 + sizeof(Marks) + 2); }
};

// Boykov-Kolmogorov on the CSR graph from the netted terminal residuals tr (rc: the arc residuals, left
// final): writes the canonical mask (source side) of its N nodes, and the excess and the residual sink
// capacities where those are given (else tr holds them). changed (nullptr: a solve from scratch): the
// nodes whose terminals moved since the maximum preflow that rc and tr hold (BK::rerun).
template <class Cap>
BKStats run_csr(const at::Tensor& row_ptr, const at::Tensor& head, const at::Tensor& rev, Cap* rc, int64_t N,
                CsrWork& w, const uint8_t* changed, int64_t* excess, Cap* sink, bool* mask) {
  int64_t* tr = w.tr.get();
  uint8_t* reach = w.reach.get();
  CsrTopo<Cap> g{rc, row_ptr.data_ptr<int64_t>(), head.data_ptr<int64_t>(), rev.data_ptr<int64_t>(), w.par.get(),
                 w.tree.get()};
  BK<CsrTopo<Cap>> bk(g, N, tr, w.nxt.get(), w.mk.get());
  BKStats r;
  if (changed) {
    r = bk.rerun(changed, reach);
  } else {
    r = bk.run();
    bk.sink_side(reach);
  }
  for (int64_t v = 0; v < N; ++v) mask[v] = !reach[v];
  if (excess)
    for (int64_t v = 0; v < N; ++v) excess[v] = torchcut::net_source(tr[v]);
  if (sink)
    for (int64_t v = 0; v < N; ++v) sink[v] = static_cast<Cap>(torchcut::net_sink(tr[v]));
  return r;
}

void write_stats(const BKStats& r, const at::Tensor& stats) {
  torchcut::CpuStats out;
  out.flow = r.flow, out.augmentations = r.augmentations, out.orphans = r.orphans, out.growths = r.growths;
  out.write(stats.data_ptr<int64_t>());
}

void check_cpu(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  for (const auto* t : tensors)
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous(), op, ": expected contiguous CPU tensors");
}

void check_csr(const char* op, const at::Tensor& row_ptr, const at::Tensor& head, const at::Tensor& rev,
               const at::Tensor& caps, int64_t N) {
  TORCH_CHECK(row_ptr.scalar_type() == at::kLong && head.scalar_type() == at::kLong && rev.scalar_type() == at::kLong,
              op, ": row_ptr/head/rev: expected int64");
  TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong, op,
              ": caps: expected int32 or int64, got ", caps.scalar_type());
  const int64_t A = caps.numel();
  TORCH_CHECK(row_ptr.numel() == N + 1 && head.numel() == A && rev.numel() == A, op, ": inconsistent sizes");
  TORCH_CHECK(N < std::numeric_limits<int32_t>::max(), op, ": ", N,
              " nodes are too many for the CPU solver; expected fewer than 2**31 - 1");
}

std::tuple<at::Tensor, at::Tensor> csr_solve(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps,
                                             at::Tensor excess, at::Tensor sink) {
  const char* op = "torchcut_cpu.csr_solve";
  check_cpu(op, {&row_ptr, &head, &rev, &caps, &excess, &sink});
  const int64_t N = excess.numel();
  check_csr(op, row_ptr, head, rev, caps, N);
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type() && excess.scalar_type() == at::kLong, op,
              ": sink: expected the dtype of caps, excess: int64");
  TORCH_CHECK(sink.numel() == N, op, ": inconsistent sizes");
  auto mask = at::empty({N}, excess.options().dtype(at::kBool));
  auto stats = at::zeros({1, kStats}, excess.options());
  PooledWork<CsrWork> work(1);
  work[0].resize(N);
  int64_t* tr = work[0].tr.get();
  int64_t* e = excess.data_ptr<int64_t>();
  AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut_cpu.csr_solve", [&] {
    using Cap = index_t;
    Cap* s = sink.data_ptr<Cap>();
    for (int64_t v = 0; v < N; ++v) tr[v] = torchcut::net_terminal(e[v], static_cast<int64_t>(s[v]));
    write_stats(run_csr<Cap>(row_ptr, head, rev, caps.data_ptr<Cap>(), N, work[0], nullptr, e, s,
                             mask.data_ptr<bool>()),
                stats);
  });
  return {mask, stats};
}

// csr_resolve (schema in torchcut.cpp): the last maximum flow re-fitted to new terminal capacities in
// one pass over the arcs (each node's net n-link inflow, read while the residuals are copied into the
// output; then as much as the node can to the sink and the rest as excess: unchanged nodes get back the
// state the last solve left), then the search from the changed nodes (BK::rerun). Where a node's n-links
// carry out more than its new source capacity and n-link inflow bring in (a deficit), nothing is solved
// and the count comes back: the caller repairs the flow first.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> csr_resolve(
    at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps, at::Tensor residual, at::Tensor source,
    at::Tensor sink, at::Tensor changed) {
  const char* op = "torchcut.csr_resolve";
  check_cpu(op, {&caps, &residual, &source, &sink, &changed});
  const int64_t N = source.numel();
  check_csr(op, row_ptr, head, rev, caps, N);
  TORCH_CHECK(residual.scalar_type() == caps.scalar_type() && residual.numel() == caps.numel(), op,
              ": residual: expected the dtype and size of caps, got ", residual.scalar_type(), " ", residual.sizes());
  TORCH_CHECK(source.scalar_type() == at::kLong, op, ": source: expected int64, got ", source.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type() && sink.numel() == N, op,
              ": sink: expected the dtype of caps and one value per node, got ", sink.scalar_type(), " ",
              sink.sizes());
  TORCH_CHECK(changed.scalar_type() == at::kBool && changed.numel() == N, op,
              ": changed: expected one bool per node, got ", changed.scalar_type(), " ", changed.sizes());
  auto mask = at::empty({N}, source.options().dtype(at::kBool));
  auto out = at::empty({caps.numel()}, caps.options());
  auto sink_flow = at::empty({N}, source.options());
  auto stats = at::zeros({1, kStats}, source.options());
  auto deficits = at::zeros({1}, source.options());
  const int64_t* rp = row_ptr.data_ptr<int64_t>();
  const int64_t* S = source.data_ptr<int64_t>();
  PooledWork<CsrWork> work(1);
  work[0].resize(N);
  int64_t* tr = work[0].tr.get();
  int64_t* flow = sink_flow.data_ptr<int64_t>();
  AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut.csr_resolve", [&] {
    using Cap = index_t;
    const Cap* C = caps.data_ptr<Cap>();
    const Cap* R0 = residual.data_ptr<Cap>();
    Cap* R = out.data_ptr<Cap>();
    const Cap* T = sink.data_ptr<Cap>();
    int64_t bad = 0;
    for (int64_t v = 0; v < N; ++v) {
      int64_t avail = S[v];
      for (int64_t k = rp[v]; k < rp[v + 1]; ++k) {
        R[k] = R0[k];
        avail += static_cast<int64_t>(R0[k]) - static_cast<int64_t>(C[k]);
      }
      if (avail < 0) {
        ++bad;
        continue;
      }
      const int64_t t = std::min<int64_t>(avail, T[v]);  // to the sink first, the rest stays as excess
      tr[v] = torchcut::net_terminal(avail - t, static_cast<int64_t>(T[v]) - t);
    }
    if (bad) {  // nothing solved: the outputs are zeros
      deficits.data_ptr<int64_t>()[0] = bad;
      mask.zero_(), out.zero_(), sink_flow.zero_();
      return;
    }
    const uint8_t* mark = reinterpret_cast<const uint8_t*>(changed.data_ptr<bool>());
    write_stats(run_csr<Cap>(row_ptr, head, rev, R, N, work[0], mark, nullptr, nullptr, mask.data_ptr<bool>()),
                stats);
    for (int64_t v = 0; v < N; ++v) flow[v] = static_cast<int64_t>(T[v]) - torchcut::net_sink(tr[v]);
  });
  return {mask, out, sink_flow, stats, deficits};
}

at::Tensor index64(const at::Tensor& t) {
  return t.scalar_type() == at::kLong ? t.contiguous() : t.to(at::kLong).contiguous();
}

std::tuple<at::Tensor, at::Tensor> csr_solve_op(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps,
                                                at::Tensor excess, at::Tensor sink, at::IntArrayRef options) {
  TORCH_CHECK(options.empty(), "torchcut.csr_solve_ (CPU): options: expected none, got ", options.size(), " values");
  return csr_solve(index64(row_ptr), index64(head), index64(rev), caps, excess, sink);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> csr_resolve_op(
    at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps, at::Tensor residual, at::Tensor source,
    at::Tensor sink, at::Tensor changed) {
  return csr_resolve(index64(row_ptr), index64(head), index64(rev), caps, residual, source, sink, changed);
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("csr_solve_", &torchcut_cpu::csr_solve_op);
  m.impl("csr_resolve", &torchcut_cpu::csr_resolve_op);
}
