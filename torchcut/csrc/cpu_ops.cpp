// CPU max-flow ops (torch.ops.torchcut_cpu.*): Boykov-Kolmogorov (cpu_bk.h) on grids and CSR graphs.
//
// grid_solve: the layout of torchcut/grid.py ([B, 2K, *shape] residuals, direction d < K along
// offsets[d], d >= K along -offsets[d - K]). Each item is copied into a padded, node-major buffer: the
// 2K residuals of a node side by side (one cache line for 4/8-connected int32 grids), and a border of
// empty nodes as wide as the largest offset, so a neighbour is `v + delta[d]` with no bounds test and
// no adjacency list (as in GridCut: Jamriska, Sykora and Hornung 2012). Tree and parent direction share
// one byte per node. Items of a batch are solved in parallel threads.
//
// csr_solve: the layout of torchcut/graph.py (row_ptr, head, rev, residuals), solved in place.
//
// Both write back the final residuals, the excess (unsaturated source residual, as a preflow) and the
// residual sink capacities, and return the source side of the canonical minimum cut (nodes that cannot
// reach the sink) plus counters [flow, augmentations, orphans, growths] per item.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "cpu_bk.h"

namespace torchcut_cpu {
namespace {

constexpr int kStats = 4;

// ------------------------------------------------------------------------------------------- grids
template <class CapT>
struct GridTopo {
  using Cap = CapT;
  using P = uint8_t;
  static constexpr P kTerm = 125, kOrphan = 126;
  static constexpr uint8_t kFree = 0xFF, kSinkBit = 0x80;

  Cap* rc;           // [n * D] node-major residuals
  uint8_t* st;       // tree (bit 7: T) and parent direction / kTerm / kOrphan; kFree when free
  const int64_t* delta;  // [D] neighbour offset in the padded index
  const uint8_t* sis;    // [D] opposite direction
  int D;

  int begin(int64_t) const { return 0; }
  int end(int64_t) const { return D; }
  int64_t arc(int64_t v, int k) const { return v * D + k; }
  int32_t head(int64_t v, int k) const { return static_cast<int32_t>(v + delta[k]); }
  int64_t sister(int64_t v, int k) const { return (v + delta[k]) * D + sis[k]; }
  P back(int64_t, int k) const { return sis[k]; }
  P to(int64_t, int k) const { return static_cast<P>(k); }
  int32_t parent_node(int64_t v, P p) const { return static_cast<int32_t>(v + delta[p]); }
  int64_t parent_arc(int64_t v, P p) const { return v * D + p; }
  int64_t parent_sister(int64_t v, P p) const { return (v + delta[p]) * D + sis[p]; }
  bool is_free(int64_t v) const { return st[v] == kFree; }
  bool is_sink(int64_t v) const { return st[v] & kSinkBit; }
  P parent(int64_t v) const { return st[v] & 0x7F; }
  void set(int64_t v, P p, bool sink) { st[v] = static_cast<uint8_t>(p | (sink ? kSinkBit : 0)); }
  void set_parent(int64_t v, P p) { st[v] = static_cast<uint8_t>((st[v] & kSinkBit) | p); }
  void set_free(int64_t v) { st[v] = kFree; }
};

// Per-thread buffers for one padded grid item.
template <class Cap>
struct GridWork {
  std::vector<Cap> rc;
  std::vector<int64_t> tr;
  std::vector<int32_t> nxt;
  std::vector<Marks> mk;
  std::vector<uint8_t> st;
  void resize(int64_t n, int D) {
    rc.assign(n * D, 0);
    tr.assign(n, 0);
    nxt.resize(n);
    mk.resize(n);
    st.resize(n);
  }
};

// Calls f(q, v) for every node of the item: q its index in the unpadded item, v in the padded one.
template <class F>
void for_each_node(const std::vector<int64_t>& shape, const std::vector<int64_t>& pad, F f) {
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> pshape(nd), pstride(nd);
  for (int a = 0; a < nd; ++a) pshape[a] = shape[a] + 2 * pad[a];
  int64_t s = 1;
  for (int a = nd - 1; a >= 0; --a) pstride[a] = s, s *= pshape[a];
  const int64_t W = shape[nd - 1];
  int64_t rows = 1;
  for (int a = 0; a < nd - 1; ++a) rows *= shape[a];
  std::vector<int64_t> idx(nd, 0);
  int64_t q = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = pad[nd - 1];
    for (int a = 0; a < nd - 1; ++a) base += (idx[a] + pad[a]) * pstride[a];
    for (int64_t x = 0; x < W; ++x) f(q++, base + x);
    for (int a = nd - 2; a >= 0; --a) {  // next row
      if (++idx[a] < shape[a]) break;
      idx[a] = 0;
    }
  }
}

template <class Cap>
void solve_grid_item(GridWork<Cap>& w, Cap* caps, int64_t* excess, Cap* sink, bool* mask, int64_t* stats,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& pad, int64_t n_pad,
                     const std::vector<int64_t>& delta, const std::vector<uint8_t>& sis) {
  const int D = static_cast<int>(delta.size());
  int64_t n = 1;
  for (auto s : shape) n *= s;
  w.resize(n_pad, D);
  Cap* rc = w.rc.data();
  int64_t* tr = w.tr.data();
  for_each_node(shape, pad, [&](int64_t q, int64_t v) {
    tr[v] = excess[q] - static_cast<int64_t>(sink[q]);
    Cap* r = rc + v * D;
    for (int d = 0; d < D; ++d) r[d] = caps[d * n + q];
  });
  GridTopo<Cap> g{rc, w.st.data(), delta.data(), sis.data(), D};
  BK<GridTopo<Cap>> bk(g, n_pad, tr, w.nxt.data(), w.mk.data());
  const BKStats s = bk.run();
  uint8_t* reach = w.st.data();  // the trees are no longer needed
  bk.sink_side(reach);
  for_each_node(shape, pad, [&](int64_t q, int64_t v) {
    const int64_t t = tr[v];
    excess[q] = t > 0 ? t : 0;
    sink[q] = static_cast<Cap>(t < 0 ? -t : 0);
    mask[q] = !reach[v];
    const Cap* r = rc + v * D;
    for (int d = 0; d < D; ++d) caps[d * n + q] = r[d];
  });
  stats[0] = s.flow, stats[1] = s.augmentations, stats[2] = s.orphans, stats[3] = s.growths;
}

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

std::tuple<at::Tensor, at::Tensor> grid_solve(at::Tensor caps, at::Tensor excess, at::Tensor sink,
                                              at::IntArrayRef shape_, at::IntArrayRef offsets, int64_t threads) {
  const int64_t nd = static_cast<int64_t>(shape_.size());
  TORCH_CHECK(nd >= 1 && nd <= 3, "torchcut_cpu.grid_solve: shape: expected 1 to 3 dims, got ", nd);
  TORCH_CHECK(offsets.size() % nd == 0 && !offsets.empty(), "torchcut_cpu.grid_solve: offsets: expected K * ", nd,
              " values, got ", offsets.size());
  const int64_t K = static_cast<int64_t>(offsets.size()) / nd, D = 2 * K;
  TORCH_CHECK(D <= 124, "torchcut_cpu.grid_solve: offsets: expected at most 62, got ", K);
  TORCH_CHECK(caps.device().is_cpu() && caps.is_contiguous() && excess.is_contiguous() && sink.is_contiguous(),
              "torchcut_cpu.grid_solve: expected contiguous CPU tensors");
  TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong,
              "torchcut_cpu.grid_solve: caps: expected int32 or int64, got ", caps.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type(), "torchcut_cpu.grid_solve: sink: expected the dtype of caps");
  TORCH_CHECK(excess.scalar_type() == at::kLong, "torchcut_cpu.grid_solve: excess: expected int64");
  std::vector<int64_t> shape(shape_.begin(), shape_.end());
  int64_t n = 1;
  for (auto s : shape) n *= s;
  TORCH_CHECK(caps.dim() == nd + 2 && caps.size(1) == D, "torchcut_cpu.grid_solve: caps: expected [B, ", D,
              ", *shape], got ", caps.sizes());
  const int64_t B = caps.size(0);
  TORCH_CHECK(excess.numel() == B * n && sink.numel() == B * n && caps.numel() == B * D * n,
              "torchcut_cpu.grid_solve: excess/sink: expected ", B * n, " entries");
  // padding and neighbour deltas in the padded, row-major item
  std::vector<int64_t> pad(nd, 0), pstride(nd);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t a = 0; a < nd; ++a) pad[a] = std::max<int64_t>(pad[a], std::abs(offsets[k * nd + a]));
  int64_t n_pad = 1;
  for (int64_t a = nd - 1; a >= 0; --a) pstride[a] = n_pad, n_pad *= shape[a] + 2 * pad[a];
  TORCH_CHECK(n_pad < std::numeric_limits<int32_t>::max(), "torchcut_cpu.grid_solve: an item of ", n_pad,
              " nodes (with its border) is too large for the CPU solver; expected fewer than 2**31 - 1");
  std::vector<int64_t> delta(D);
  std::vector<uint8_t> sis(D);
  for (int64_t k = 0; k < K; ++k) {
    int64_t dl = 0;
    for (int64_t a = 0; a < nd; ++a) dl += offsets[k * nd + a] * pstride[a];
    delta[k] = dl, delta[k + K] = -dl;
    sis[k] = static_cast<uint8_t>(k + K), sis[k + K] = static_cast<uint8_t>(k);
  }
  auto mask = at::empty({B, n}, caps.options().dtype(at::kBool));
  auto stats = at::zeros({B, kStats}, caps.options().dtype(at::kLong));
  if (threads <= 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut_cpu.grid_solve", [&] {
    using Cap = index_t;
    std::vector<GridWork<Cap>> work(std::max<int64_t>(1, std::min(threads, B)));
    Cap* c = caps.data_ptr<Cap>();
    Cap* s = sink.data_ptr<Cap>();
    int64_t* e = excess.data_ptr<int64_t>();
    bool* m = mask.data_ptr<bool>();
    int64_t* st = stats.data_ptr<int64_t>();
    parallel_items(B, threads, [&](int64_t b, int64_t t) {
      solve_grid_item<Cap>(work[t], c + b * D * n, e + b * n, s + b * n, m + b * n, st + b * kStats, shape, pad,
                           n_pad, delta, sis);
    });
  });
  return {mask, stats};
}

// --------------------------------------------------------------------------------------- CSR graphs
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
    for (int64_t v = 0; v < N; ++v) tr[v] = e[v] - static_cast<int64_t>(s[v]);
    CsrTopo<Cap> g{caps.data_ptr<Cap>(), row_ptr.data_ptr<int64_t>(), head.data_ptr<int64_t>(),
                   rev.data_ptr<int64_t>(), par.data(), tree.data()};
    BK<CsrTopo<Cap>> bk(g, N, tr.data(), nxt.data(), mk.data());
    const BKStats r = bk.run();
    bk.sink_side(tree.data());
    bool* m = mask.data_ptr<bool>();
    for (int64_t v = 0; v < N; ++v) {
      e[v] = tr[v] > 0 ? tr[v] : 0;
      s[v] = static_cast<Cap>(tr[v] < 0 ? -tr[v] : 0);
      m[v] = !tree[v];
    }
    int64_t* st = stats.data_ptr<int64_t>();
    st[0] = r.flow, st[1] = r.augmentations, st[2] = r.orphans, st[3] = r.growths;
  });
  return {mask, stats};
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY(torchcut_cpu, m) {
  m.def("grid_solve(Tensor(a!) caps, Tensor(b!) excess, Tensor(c!) sink, int[] shape, int[] offsets, int threads)"
        " -> (Tensor, Tensor)");
  m.def("csr_solve(Tensor row_ptr, Tensor head, Tensor rev, Tensor(a!) caps, Tensor(b!) excess, Tensor(c!) sink)"
        " -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchcut_cpu, CPU, m) {
  m.impl("grid_solve", &torchcut_cpu::grid_solve);
  m.impl("csr_solve", &torchcut_cpu::csr_solve);
}
