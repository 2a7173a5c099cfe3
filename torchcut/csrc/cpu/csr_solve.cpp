// The CPU implementation of torch.ops.torchcut.csr_solve_ (schema in torchcut.cpp): Boykov-Kolmogorov
// (cpu_bk.h) on the CSR layout of torchcut/graph.py (row_ptr, head, rev, residuals), in place. It leaves
// the final residuals, the excess (unsaturated source residual, as a preflow) and the residual sink
// capacities in its inputs, and returns the source side of the canonical minimum cut (nodes that cannot
// reach the sink) and one row of counters (kStats). The same file holds the class CsrState: a residual
// network and its search trees kept between solves, for re-solves after terminal changes.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
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

at::Tensor index64(const at::Tensor& t) {
  return t.scalar_type() == at::kLong ? t.contiguous() : t.to(at::kLong).contiguous();
}

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
// capacities where those are given (else tr holds them).
template <class Cap>
BKStats run_csr(const at::Tensor& row_ptr, const at::Tensor& head, const at::Tensor& rev, Cap* rc, int64_t N,
                CsrWork& w, int64_t* excess, Cap* sink, bool* mask) {
  int64_t* tr = w.tr.get();
  uint8_t* reach = w.reach.get();
  CsrTopo<Cap> g{rc, row_ptr.data_ptr<int64_t>(), head.data_ptr<int64_t>(), rev.data_ptr<int64_t>(), w.par.get(),
                 w.tree.get()};
  BK<CsrTopo<Cap>> bk(g, N, tr, w.nxt.get(), w.mk.get());
  const BKStats r = bk.run();
  bk.sink_side(reach);
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
    write_stats(run_csr<Cap>(row_ptr, head, rev, caps.data_ptr<Cap>(), N, work[0], e, s,
                             mask.data_ptr<bool>()),
                stats);
  });
  return {mask, stats};
}

// The residual network and the search trees of a FlowGraph kept between solves (class CsrState, used by
// torchcut/solvers/dynamic.py): Kohli and Torr's dynamic graph cuts with the trees reused. solve() runs
// Boykov-Kolmogorov from scratch; update() gives some nodes new terminal capacities and continues from
// the trees the last solve left (BK::update), so its search is the changed nodes' neighbourhood. Each
// returns the source side of the canonical cut, a copy of the residuals, the sink flows (int64), the
// counters and info [3]: deficit nodes (see update), whether the state was solved from scratch, the
// flow value.
//
// The mask without a search: a finished Boykov-Kolmogorov loop leaves the T tree closed under residual
// arcs into it (BK::update), and every node with a sink residual is one of its roots, so the T tree is
// the set of nodes that reach the sink: the canonical sink side. Free nodes keep tree byte 0
// (KeptTopo::set_free), so the mask is one pass over a copy of the tree bytes (CsrState::tree).
//
// Layout: a stroke's search visits nodes scattered over arrays of millions of entries, each visit a
// cache miss per array it reads. A node's search state (terminal residual, parent arc, first arc,
// marks, queue link, tree byte, visit byte) is one record, KeptNode: 32 bytes where arc indices fit in
// int32 (two records a cache line), 40 else. The arcs' heads and reverses are pairs (KeptArc), int32
// where they fit; the residuals stay one array (rc), which the outputs copy rows of.
template <class I>
struct alignas(sizeof(I) == 4 ? 32 : 8) KeptNode {
  int64_t tr;   // netted terminal residual
  I par;        // parent arc (CsrTopo's codes kTerm, kOrphan, kNone)
  I first;      // first arc (row_ptr[v]); the next record's is the end of the row
  Marks mk;
  int32_t nxt;  // BK's queue link
  uint8_t tree, seen;
  uint8_t logged;  // in CsrState::log (KeptTopo::note)
};

template <class I>
struct KeptArc {
  I head, rev;
};

// The terminal capacities now and the sink flow of a node, read together by the re-fit (resolve) and
// the bookkeeping of a solve (advance).
struct KeptTerms {
  int64_t S, T, fl;
  int64_t low;  // the smaller of the totals the netting took S, T from (CsrState::plan)
};

template <class CapT, class I>
struct KeptTopo {
  using Cap = CapT;
  using P = I;
  static constexpr P kTerm = -2, kOrphan = -3, kNone = -1;

  Cap* rc;
  KeptNode<I>* node;  // N + 1 records (the last holds the end of the last row)
  const KeptArc<I>* arcs;
  std::vector<int32_t>* log;  // the nodes whose tree, terminal residual or arc residuals changed, each once

  I begin(int64_t v) const { return node[v].first; }
  I end(int64_t v) const { return node[v + 1].first; }
  int64_t arc(int64_t, I k) const { return k; }
  int32_t head(int64_t, I k) const { return static_cast<int32_t>(arcs[k].head); }
  int64_t sister(int64_t, I k) const { return arcs[k].rev; }
  P back(int64_t, I k) const { return arcs[k].rev; }
  P to(int64_t, I k) const { return k; }
  int32_t parent_node(int64_t, P p) const { return static_cast<int32_t>(arcs[p].head); }
  int64_t parent_arc(int64_t, P p) const { return p; }
  int64_t parent_sister(int64_t, P p) const { return arcs[p].rev; }
  bool is_free(int64_t v) const { return node[v].par == kNone; }
  bool is_sink(int64_t v) const { return node[v].tree; }
  P parent(int64_t v) const { return node[v].par; }
  void set(int64_t v, P p, bool sink) {
    node[v].par = p, node[v].tree = sink;
    note(v);
  }
  void set_parent(int64_t v, P p) { node[v].par = p; }
  void set_free(int64_t v) {
    node[v].par = kNone, node[v].tree = 0;
    note(v);
  }
  void touch(int64_t v) { note(v); }
  // logged once (the record is at hand here; a node is logged two or three times a stroke)
  void note(int64_t v) {
    if (node[v].logged) return;
    node[v].logged = 1;
    log->push_back(static_cast<int32_t>(v));
  }
};

// n entries of T, uninitialised, cache-line aligned; in transparent huge pages from 2 MiB (huge_alloc):
// a stroke's search reads records scattered over tens of MiB, and with 4 KiB pages most of those reads
// miss the TLB as well.
template <class T>
HugeBuf<T> kept_buf(int64_t n) {
  const size_t bytes = sizeof(T) * static_cast<size_t>(n);
  if (bytes >= kHuge) return huge_buf<T>(n);
  void* p = std::aligned_alloc(64, std::max<size_t>((bytes + 63) / 64 * 64, 64));
  TORCH_CHECK(p, "torchcut.CsrState: out of memory allocating ", bytes, " bytes");
  return HugeBuf<T>(static_cast<T*>(p));
}

// The node records and arc pairs of a kept state, int32 or int64 indices (I).
template <class I>
struct KeptNodes {
  HugeBuf<KeptNode<I>> node;
  HugeBuf<KeptArc<I>> arc;
  using Tr = Field<KeptNode<I>, int64_t, &KeptNode<I>::tr>;
  using Nxt = Field<KeptNode<I>, int32_t, &KeptNode<I>::nxt>;
  using Mk = Field<KeptNode<I>, Marks, &KeptNode<I>::mk>;
  using Seen = Field<KeptNode<I>, uint8_t, &KeptNode<I>::seen>;

  void build(int64_t N, const int64_t* rp, const int64_t* hd, const int64_t* rv) {
    node = kept_buf<KeptNode<I>>(N + 1);
    for (int64_t v = 0; v <= N; ++v) {
      node[v] = KeptNode<I>{};
      node[v].first = static_cast<I>(rp[v]);
    }
    const int64_t A = rp[N];
    arc = kept_buf<KeptArc<I>>(A);
    for (int64_t k = 0; k < A; ++k) arc[k] = KeptArc<I>{static_cast<I>(hd[k]), static_cast<I>(rv[k])};
  }
};

struct CsrState : torch::CustomClassHolder {
  at::Tensor row_ptr, caps;  // the rows and the capacities (as given; heads and reverses: the arc pairs)
  at::Tensor rc;             // the residuals, caps' dtype
  HugeBuf<KeptTerms> terms;  // the terminal capacities now, the sink flows, the netting's offsets
  KeptNodes<int32_t> n32;    // the search state: int32 indices where the arcs allow
  KeptNodes<int64_t> n64;    // (else int64; one of the two is empty)
  bool wide = false;
  std::vector<uint8_t> tree;   // the tree bytes, copied from the records after each solve (the mask)
  std::vector<int32_t> stamp;  // pull_back's depth-first search: visit marks, current arcs, tree arcs
  std::vector<int64_t> cur, via;
  int64_t total = 0;  // the sum of the sink flows
  std::vector<int32_t> log, changed_now, changed_before;  // the nodes changed by this solve, the last
  struct Planned {
    int64_t v, S, T, low;  // a node of plan(), its netted terminal capacities and the smaller total
  };
  std::vector<Planned> planned;
  struct Slot {
    at::Tensor mask, res, flow;
    int64_t step = -1;  // the solve whose values they hold
  } slots[2];
  int64_t step = 0;
  int32_t clock = 0, visit = 0;
  int64_t N = 0;

  CsrState(at::Tensor row_ptr_, at::Tensor head_, at::Tensor rev_, at::Tensor caps_, at::Tensor source,
           at::Tensor sink) {
    const char* op = "torchcut.CsrState";
    row_ptr = index64(row_ptr_), caps = caps_.contiguous();
    const at::Tensor head = index64(head_), rev = index64(rev_);
    check_cpu(op, {&caps, &source, &sink});
    N = source.numel();
    check_csr(op, row_ptr, head, rev, caps, N);
    TORCH_CHECK(sink.numel() == N, op, ": sink: expected ", N, " values (one per node), got ", sink.numel());
    auto s = source.to(at::kLong).contiguous(), k = sink.to(at::kLong).contiguous();
    const int64_t* sp = s.data_ptr<int64_t>();
    const int64_t* kp = k.data_ptr<int64_t>();
    terms = kept_buf<KeptTerms>(N);
    for (int64_t v = 0; v < N; ++v) terms[v] = KeptTerms{sp[v], kp[v], 0, 0};
    tree.assign(N, 0);
    // the arc indices, the parent codes (down to -3) and the end of the last row in int32
    wide = caps.numel() >= std::numeric_limits<int32_t>::max();
    const int64_t *rp = row_ptr.data_ptr<int64_t>(), *hd = head.data_ptr<int64_t>(), *rv = rev.data_ptr<int64_t>();
    if (wide) n64.build(N, rp, hd, rv); else n32.build(N, rp, hd, rv);
  }

  // Moves the state to int64 indices (the layout of graphs with 2**31 - 1 arcs or more), as it is: what
  // the tests run the wide layout through, on graphs small enough to have both.
  void widen() {
    if (wide) return;
    n64.node = kept_buf<KeptNode<int64_t>>(N + 1);
    for (int64_t v = 0; v <= N; ++v) {
      const KeptNode<int32_t>& x = n32.node[v];
      n64.node[v] = KeptNode<int64_t>{x.tr, x.par, x.first, x.mk, x.nxt, x.tree, x.seen, x.logged};
    }
    const int64_t A = caps.numel();
    n64.arc = kept_buf<KeptArc<int64_t>>(A);
    for (int64_t k = 0; k < A; ++k) n64.arc[k] = KeptArc<int64_t>{n32.arc[k].head, n32.arc[k].rev};
    n32.node.reset(), n32.arc.reset();
    wide = true;
  }

  // f(n32) or f(n64): the records in use.
  template <class F>
  decltype(auto) with_nodes(F&& f) {
    return wide ? f(n64) : f(n32);
  }

  // Boykov-Kolmogorov from scratch or the update of m nodes (BK::update; distinct: no node repeats).
  template <class Cap, class I>
  BKStats run(KeptNodes<I>& k, const int32_t* nodes, int64_t m, const int64_t* tr_new, bool distinct,
              bool from_scratch = false) {
    using Nodes = KeptNodes<I>;
    KeptNode<I>* nd = k.node.get();
    KeptTopo<Cap, I> g{rc.data_ptr<Cap>(), nd, k.arc.get(), &log};
    BK<KeptTopo<Cap, I>, typename Nodes::Tr, typename Nodes::Nxt, typename Nodes::Mk> bk(
        g, N, typename Nodes::Tr{nd}, typename Nodes::Nxt{nd}, typename Nodes::Mk{nd});
    BKStats r = from_scratch ? bk.run()
                : distinct   ? bk.update(nodes, m, tr_new, nullptr, clock)
                             : bk.update(nodes, m, tr_new, typename Nodes::Seen{nd}, clock);
    clock = bk.clock();
    return r;
  }

  // Boykov-Kolmogorov from scratch on the terminals S, T.
  template <class I>
  BKStats scratch(KeptNodes<I>& k) {
    rc = huge_tensor(caps.sizes(), caps.scalar_type()).copy_(caps);
    for (int64_t v = 0; v < N; ++v) k.node[v].tr = torchcut::net_terminal(terms[v].S, terms[v].T);
    clock = 0;
    BKStats r;
    AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut.CsrState",
                            [&] { r = run<index_t>(k, nullptr, 0, nullptr, false, true); });
    return r;
  }

  // The bookkeeping of a solve: the nodes it changed (each once, into changed_now), their tree bytes,
  // sink flows and the total (every node after a solve from scratch), the step.
  template <class I>
  void advance(KeptNodes<I>& k, bool fresh) {
    KeptNode<I>* nd = k.node.get();
    changed_now.clear();
    changed_now.swap(log);  // each node once (KeptTopo::note)
    if (fresh) {
      total = 0;
      for (int64_t v = 0; v < N; ++v) {
        nd[v].logged = 0;
        tree[v] = nd[v].tree;
        total += (terms[v].fl = terms[v].T + std::min<int64_t>(nd[v].tr, 0));  // T - net_sink
      }
    } else {
      for (const int32_t v : changed_now) {
        nd[v].logged = 0;
        tree[v] = nd[v].tree;
        const int64_t f = terms[v].T + std::min<int64_t>(nd[v].tr, 0);
        total += f - terms[v].fl, terms[v].fl = f;
      }
    }
    ++step;
  }

  // The outputs, from one of two slots of output tensors used in turn: a slot whose tensors the caller
  // has let go (only the state holds them) and that was written one or two solves ago gets the values of
  // the nodes those solves changed (their logs: the nodes' mask entries, sink flows and arc rows), not a
  // copy of the whole state; else new tensors are written whole (while the caller keeps the results of
  // the last two solves). A solve from scratch writes both slots whole.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> output(const BKStats& r, int64_t deficits,
                                                                              bool fresh) {
    with_nodes([&](auto& k) { advance(k, fresh); });
    if (fresh) {  // both slots written now (their pages faulted in by the solve from scratch, not a stroke)
      for (Slot& o : slots) {
        if (!owned(o)) o.mask = at::Tensor();  // the caller keeps those: new tensors
        write_all(o);
      }
      changed_now.clear();
      return finish(slots[step % 2], r, deficits, fresh);
    }
    Slot& o = slots[step % 2];
    const bool own = owned(o);
    const int64_t* rp = row_ptr.data_ptr<int64_t>();
    const size_t width = rc.element_size();
    const char* from = static_cast<const char*>(rc.data_ptr());
    if (own && (o.step == step - 1 || o.step == step - 2)) {
      bool* m = o.mask.data_ptr<bool>();
      int64_t* f = o.flow.data_ptr<int64_t>();
      char* to = static_cast<char*>(o.res.data_ptr());
      for (const auto* list : {&changed_before, &changed_now}) {
        if (list == &changed_before && o.step == step - 1) continue;
        for (const int32_t v : *list) {
          m[v] = !tree[v], f[v] = terms[v].fl;
          std::memcpy(to + rp[v] * width, from + rp[v] * width, (rp[v + 1] - rp[v]) * width);
        }
      }
      o.step = step;
    } else {
      if (!own) o.mask = at::Tensor();  // the caller keeps those: new tensors
      write_all(o);
    }
    return finish(o, r, deficits, fresh);
  }

  // Whether the caller has let go of slot o's tensors: it gets aliases (new tensors on the slot's
  // storage), so a storage that the slot alone holds is one no result holds.
  static bool owned(const Slot& o) {
    return o.mask.defined() && o.mask.storage().use_count() == 1 && o.res.storage().use_count() == 1 &&
           o.flow.storage().use_count() == 1;
  }

  // Writes the whole state into slot o (new tensors where it has none).
  void write_all(Slot& o) {
    if (!o.mask.defined())
      o.mask = at::empty({N}, at::kBool), o.res = at::empty({rc.numel()}, rc.scalar_type()),
      o.flow = at::empty({N}, at::kLong);
    std::memcpy(o.res.data_ptr(), rc.data_ptr(), rc.nbytes());
    bool* m = o.mask.data_ptr<bool>();
    int64_t* f = o.flow.data_ptr<int64_t>();
    const uint8_t* b = tree.data();
    for (int64_t v = 0; v < N; ++v) m[v] = !b[v], f[v] = terms[v].fl;
    o.step = step;
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> finish(Slot& o, const BKStats& r,
                                                                              int64_t deficits, bool fresh) {
    changed_before.swap(changed_now);
    auto [stats, info] = counters(r, deficits, fresh);
    return {o.mask.alias(), o.res.alias(), o.flow.alias(), stats, info};
  }

  // The counters of a solve ([1, kStats]) and info [3]: deficit nodes, whether from scratch, the flow value.
  std::tuple<at::Tensor, at::Tensor> counters(const BKStats& r, int64_t deficits, bool fresh) const {
    auto stats = at::zeros({1, kStats}, at::TensorOptions().dtype(at::kLong));
    auto info = at::empty({3}, at::TensorOptions().dtype(at::kLong));
    write_stats(r, stats);
    int64_t* in = info.data_ptr<int64_t>();
    in[0] = deficits, in[1] = fresh, in[2] = total;
    return {stats, info};
  }

  // The terminal capacities the state was last solved for: (source, sink), int64 [N] copies.
  std::tuple<at::Tensor, at::Tensor> terminals() const {
    auto src = at::empty({N}, at::kLong), snk = at::empty({N}, at::kLong);
    int64_t* sp = src.data_ptr<int64_t>();
    int64_t* kp = snk.data_ptr<int64_t>();
    for (int64_t v = 0; v < N; ++v) sp[v] = terms[v].S, kp[v] = terms[v].T;
    return {src, snk};
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> solve() {
    return output(with_nodes([&](auto& k) { return scratch(k); }), 0, true);
  }

  // New terminal capacities for `nodes` (int64 ids; source, sink: int64, one per id; an id listed twice
  // keeps its first values), then the search from the nodes that changed. Each changed node re-fits the
  // flow it holds: its n-links keep their flow, so it has avail = S' + (net n-link inflow) = S + avail
  // change; up to T' goes to the sink, the rest is excess. Where avail < 0 (a deficit d: the n-links
  // carry out more than comes in), the node is solved with d added to both terminal capacities (Kohli and
  // Torr: every cut grows by d, so the minimum cuts stay and the flow grows by d); when the node's sink
  // arc then carries at least d, taking d off both leaves a maximum flow of the real network with the
  // same residuals. Otherwise the state is solved from scratch (info[1] = 1).
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> update(at::Tensor nodes, at::Tensor source,
                                                                              at::Tensor sink) {
    BKStats r;
    int64_t deficits = 0;
    const bool fresh = resolve(nodes, source, sink, r, deficits);
    return output(r, deficits, fresh);
  }

  // update() without the output tensors: the same solve, then the counters and info alone. Both slots
  // go stale (result() or the next update() writes one whole). What an interactive caller that reads
  // the segments alone (sink_side) needs after each change.
  std::tuple<at::Tensor, at::Tensor> update_counts(at::Tensor nodes, at::Tensor source, at::Tensor sink) {
    BKStats r;
    int64_t deficits = 0;
    const bool fresh = resolve(nodes, source, sink, r, deficits);
    return counts(r, deficits, fresh);
  }

  // The bookkeeping of a solve whose output tensors are not written (update_counts, update_planned).
  std::tuple<at::Tensor, at::Tensor> counts(const BKStats& r, int64_t deficits, bool fresh) {
    with_nodes([&](auto& k) { advance(k, fresh); });
    for (Slot& o : slots) o.step = -1;
    changed_before.clear();
    auto [stats, info] = counters(r, deficits, fresh);
    return {stats, info};
  }

  // The outputs of the last solve (mask, residuals, sink flows; as update() returns them), written into
  // a slot where update_counts() left none current.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result() {
    Slot& o = slots[step % 2];
    if (o.step != step) {
      if (!owned(o)) o.mask = at::Tensor();  // the caller keeps those: new tensors
      write_all(o);
    }
    return {o.mask.alias(), o.res.alias(), o.flow.alias()};
  }

  // The sink side of the canonical cut after the last solve (bool [N], new): the T tree's nodes.
  at::Tensor sink_side() const {
    auto out = at::empty({N}, at::kBool);
    bool* m = out.data_ptr<bool>();
    const uint8_t* b = tree.data();
    for (int64_t v = 0; v < N; ++v) m[v] = b[v] != 0;
    return out;
  }

  // The stroke path of compat.pymaxflow, in two calls: plan() nets the source and sink totals of some
  // nodes (what PyMaxflow's add_tedge calls summed) and says what the update would change, update_planned()
  // makes the update. Between the two the caller checks those changes (the capacities' sum, the sink
  // dtype) and may drop the plan: nothing has changed then. The netting keeps the smaller total of each
  // node (low, a constant every cut pays) and the difference: the node's terminal capacities.
  //
  // plan(nodes, source, sink, all): nodes int64 ids (repeats allowed: the totals are per node),
  // source and sink the totals of every node (int64 [N]). Returns (constant, total, top): the change of
  // the lows' sum and of the netted capacities' sum (float64, as a float64 sum of the int64 changes)
  // over the nodes, and the largest netted sink capacity among them (-1: none). all: the lows of every
  // node are set from the totals first (the state was made from those totals' netting, the nodes aside)
  // and constant, total are the sums over every node, not changes.
  std::tuple<int64_t, double, int64_t> plan(at::Tensor nodes, at::Tensor source, at::Tensor sink, bool all) {
    const char* op = "torchcut.CsrState.plan";
    TORCH_CHECK(nodes.scalar_type() == at::kLong && source.scalar_type() == at::kLong &&
                    sink.scalar_type() == at::kLong,
                op, ": nodes, source, sink: expected int64, got ", nodes.scalar_type(), ", ", source.scalar_type(),
                ", ", sink.scalar_type());
    TORCH_CHECK(source.numel() == N && sink.numel() == N, op, ": source, sink: expected ", N,
                " values (one per node), got ", source.numel(), " and ", sink.numel());
    auto ids = nodes.contiguous();
    auto s = source.contiguous(), t_ = sink.contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    const int64_t* sv = s.data_ptr<int64_t>();
    const int64_t* kv = t_.data_ptr<int64_t>();
    const int64_t n = ids.numel();
    for (int64_t q = 0; q < n; ++q)
      TORCH_CHECK(id[q] >= 0 && id[q] < N, op, ": nodes: expected ids in [0, ", N, "), got ", id[q]);
    int64_t constant = 0, top = -1;
    double total = 0;
    if (all) {
      for (int64_t v = 0; v < N; ++v) {
        const int64_t least = std::min(sv[v], kv[v]);
        terms[v].low = least;
        constant += least;
        total += static_cast<double>(sv[v] - kv[v] < 0 ? kv[v] - sv[v] : sv[v] - kv[v]);
      }
    }
    planned.clear();
    planned.reserve(n);
    with_nodes([&](auto& k) {
      auto* nd = k.node.get();
      for (int64_t q = 0; q < n; ++q) {
        const int64_t v = id[q];
        if (nd[v].seen) continue;
        nd[v].seen = 1;
        const int64_t least = std::min(sv[v], kv[v]);
        const Planned p{v, sv[v] - least, kv[v] - least, least};
        const KeptTerms& e = terms[v];
        if (!all) {
          constant += least - e.low;
          total += static_cast<double>((p.S + p.T) - (e.S + e.T));
        }
        top = std::max(top, p.T);
        planned.push_back(p);
      }
      for (const Planned& p : planned) nd[p.v].seen = 0;
    });
    return {constant, total, top};
  }

  // The update of the nodes of the last plan() to their netted totals (update_counts' outputs).
  std::tuple<at::Tensor, at::Tensor> update_planned() {
    const int64_t m = static_cast<int64_t>(planned.size());
    std::vector<int64_t> id(m), sv(m), kv(m);
    for (int64_t q = 0; q < m; ++q) id[q] = planned[q].v, sv[q] = planned[q].S, kv[q] = planned[q].T;
    BKStats r;
    int64_t deficits = 0;
    const bool fresh =
        with_nodes([&](auto& k) { return resolve(k, id.data(), sv.data(), kv.data(), m, true, r, deficits); });
    for (const Planned& p : planned) terms[p.v].low = p.low;
    planned.clear();
    return counts(r, deficits, fresh);
  }

  // The solve of update(): returns whether the state was solved from scratch.
  bool resolve(at::Tensor nodes, at::Tensor source, at::Tensor sink, BKStats& r, int64_t& deficits) {
    return with_nodes([&](auto& k) { return resolve(k, nodes, source, sink, r, deficits); });
  }

  template <class I>
  bool resolve(KeptNodes<I>& k, const at::Tensor& nodes, const at::Tensor& source, const at::Tensor& sink,
               BKStats& r, int64_t& deficits) {
    const char* op = "torchcut.CsrState.update";
    TORCH_CHECK(nodes.scalar_type() == at::kLong && source.scalar_type() == at::kLong &&
                    sink.scalar_type() == at::kLong,
                op, ": nodes, source, sink: expected int64, got ", nodes.scalar_type(), ", ", source.scalar_type(),
                ", ", sink.scalar_type());
    const int64_t n = nodes.numel();
    TORCH_CHECK(source.numel() == n && sink.numel() == n, op, ": source, sink: expected ", n,
                " values (one per node id), got ", source.numel(), " and ", sink.numel());
    auto ids = nodes.contiguous();
    auto s = source.contiguous(), t_ = sink.contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t q = 0; q < n; ++q)
      TORCH_CHECK(id[q] >= 0 && id[q] < N, op, ": nodes: expected ids in [0, ", N, "), got ", id[q]);
    return resolve(k, id, s.data_ptr<int64_t>(), t_.data_ptr<int64_t>(), n, false, r, deficits);
  }

  // resolve() of n node ids (in range; a repeated id keeps its first values, distinct: none repeats) and
  // their new terminal capacities sv, kv.
  template <class I>
  bool resolve(KeptNodes<I>& k, const int64_t* id, const int64_t* sv, const int64_t* kv, int64_t n,
               bool distinct, BKStats& r, int64_t& deficits) {
    KeptNode<I>* nd = k.node.get();
    std::vector<int32_t> which;
    std::vector<int64_t> tr_new;
    which.reserve(n), tr_new.reserve(n);
    deficits = 0;
    for (int64_t q = 0; q < n; ++q) {
      const int64_t v = id[q];
      KeptNode<I>& x = nd[v];
      if (!distinct) {
        if (x.seen) continue;
        x.seen = 1;
      }
      KeptTerms& e = terms[v];
      if (sv[q] == e.S && kv[q] == e.T) continue;
      const int64_t t0 = e.T - torchcut::net_sink(x.tr);  // the flow to the sink now
      const int64_t avail = torchcut::net_source(x.tr) + t0 + (sv[q] - e.S);
      e.S = sv[q], e.T = kv[q];
      int64_t t;
      if (avail < 0) {
        ++deficits;
        t = -e.T + avail;  // S' + d, T' + d with d = -avail: nothing to the sink yet
      } else {
        const int64_t to_sink = std::min(avail, e.T);
        t = torchcut::net_terminal(avail - to_sink, e.T - to_sink);
      }
      which.push_back(static_cast<int32_t>(v));
      tr_new.push_back(t);
    }
    if (!distinct)
      for (int64_t q = 0; q < n; ++q) nd[id[q]].seen = 0;
    bool ok = true;
    AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut.CsrState.update", [&] {
      r = run<index_t>(k, which.data(), static_cast<int64_t>(which.size()), tr_new.data(), true);
      if (!deficits) return;
      std::vector<int32_t> touched;
      ok = pull_back<index_t>(k, which, touched);
      if (!ok || touched.empty()) return;
      std::vector<int64_t> now(touched.size());
      for (size_t q = 0; q < touched.size(); ++q) now[q] = nd[touched[q]].tr;
      const BKStats more =
          run<index_t>(k, touched.data(), static_cast<int64_t>(touched.size()), now.data(), false);
      r.flow += more.flow, r.augmentations += more.augmentations, r.orphans += more.orphans;
      r.growths += more.growths;
    });
    if (!ok) r = scratch(k);  // not reached for a valid state; kept as a guard
    return !ok;
  }

  // After a solve with deficits (update): a node v whose sink arc carries less than its deficit d (the
  // flow holds r = net_sink(tr[v]) - T[v] > 0 units that the real network cannot give) takes r units back
  // along the flow that leaves it: a path of arcs with positive net flow from v to a node w that sends
  // flow to the sink or holds excess (w != v; one exists: the flow out of the nodes that v's flow reaches
  // ends at sink arcs and excesses, r more than v sends there), found depth first, its flow lowered by
  // its bottleneck, until r is 0. Each unit comes off a sink arc or an excess, and the value was the
  // maximum flow plus the deficits, so the result is a maximum preflow of the real network. The nodes
  // of the paths go to `touched`: their residuals moved, so the trees are mended from them (BK::update;
  // no augmenting path is left, so it only re-parents and re-grows). False if some path is not found.
  template <class Cap, class I>
  bool pull_back(KeptNodes<I>& kn, const std::vector<int32_t>& changed, std::vector<int32_t>& touched) {
    KeptNode<I>* nd = kn.node.get();
    const auto tr = [nd](int64_t v) -> int64_t& { return nd[v].tr; };
    const auto T = [this](int64_t v) { return terms[v].T; };
    Cap* rc_ = rc.data_ptr<Cap>();
    const Cap* C = caps.data_ptr<Cap>();
    const int64_t* rp = row_ptr.data_ptr<int64_t>();
    const KeptArc<I>* arc = kn.arc.get();
    if (stamp.empty()) stamp.assign(N, 0), cur.resize(N), via.resize(N);
    std::vector<int32_t> stack;
    for (const int32_t v : changed) {
      int64_t r = torchcut::net_sink(tr(v)) - T(v);
      if (r <= 0) continue;
      touched.push_back(v);
      while (r > 0) {
        if (++visit == std::numeric_limits<int32_t>::max()) std::fill(stamp.begin(), stamp.end(), 0), visit = 1;
        stack.assign(1, v);
        stamp[v] = visit, cur[v] = rp[v];
        int32_t w = -1;
        while (!stack.empty()) {
          const int32_t x = stack.back();
          if (x != v && (tr(x) > 0 || T(x) - torchcut::net_sink(tr(x)) > 0)) {
            w = x;
            break;
          }
          int64_t k = cur[x];
          for (; k < rp[x + 1]; ++k) {
            const int32_t y = static_cast<int32_t>(arc[k].head);
            if (stamp[y] != visit && C[k] > rc_[k]) break;
          }
          cur[x] = k < rp[x + 1] ? k + 1 : k;
          if (k == rp[x + 1]) {
            stack.pop_back();
            continue;
          }
          const int32_t y = static_cast<int32_t>(arc[k].head);
          stamp[y] = visit, cur[y] = rp[y], via[y] = k;
          stack.push_back(y);
        }
        if (w < 0) return false;
        int64_t b = std::min(r, torchcut::net_source(tr(w)) + T(w) - torchcut::net_sink(tr(w)));
        for (size_t q = 1; q < stack.size(); ++q) {
          const int64_t k = via[stack[q]];
          b = std::min<int64_t>(b, static_cast<int64_t>(C[k]) - rc_[k]);
        }
        for (size_t q = 1; q < stack.size(); ++q) {
          const int64_t k = via[stack[q]];
          rc_[k] += static_cast<Cap>(b), rc_[arc[k].rev] -= static_cast<Cap>(b);
          touched.push_back(stack[q]);
        }
        tr(w) -= b, tr(v) += b, r -= b;
      }
    }
    return true;
  }
};


std::tuple<at::Tensor, at::Tensor> csr_solve_op(at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps,
                                                at::Tensor excess, at::Tensor sink, at::IntArrayRef options) {
  TORCH_CHECK(options.empty(), "torchcut.csr_solve_ (CPU): options: expected none, got ", options.size(), " values");
  return csr_solve(index64(row_ptr), index64(head), index64(rev), caps, excess, sink);
}

// torch.ops.torchcut.csr_solve: a FlowGraph's solve that leaves its tensors alone and returns the result's
// tensors, made here: the copies the solve works in, the solve (csr_solve above), the sink flows and their
// sum. On a graph of a few hundred nodes the solve takes a few microseconds, and the ~10 tensor operations
// this replaces took ~25 us from Python. source [1, N] int64 and sink [1, N] (caps' dtype) as FlowGraph
// holds them. Returns flows [1], mask [1, N], residual [A], source flow [1, N] (a copy of source), sink
// flow [1, N] int64, stats [1, kStats].
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> csr_solve_copy(
    at::Tensor row_ptr, at::Tensor head, at::Tensor rev, at::Tensor caps, at::Tensor source, at::Tensor sink) {
  const char* op = "torchcut.csr_solve (CPU)";
  TORCH_CHECK(source.dim() == 2 && source.size(0) == 1 && sink.sizes() == source.sizes(), op,
              ": source, sink: expected [1, N] each, got ", source.sizes(), " and ", sink.sizes());
  TORCH_CHECK(source.device().is_cpu() && sink.device().is_cpu() && caps.device().is_cpu(), op,
              ": expected CPU tensors");
  TORCH_CHECK(source.scalar_type() == at::kLong, op, ": source: expected int64, got ", source.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type(), op, ": sink: expected the dtype of caps (",
              caps.scalar_type(), "), got ", sink.scalar_type());
  const int64_t N = source.size(1);
  at::Tensor residual = caps.clone(at::MemoryFormat::Contiguous);
  at::Tensor excess = source.reshape({N}).clone(at::MemoryFormat::Contiguous);
  at::Tensor left = sink.reshape({N}).clone(at::MemoryFormat::Contiguous);
  auto [mask, stats] = csr_solve(index64(row_ptr), index64(head), index64(rev), residual, excess, left);
  at::Tensor sink_flow = at::empty({1, N}, source.options().dtype(at::kLong));
  at::Tensor flows = at::empty({1}, source.options().dtype(at::kLong));
  const at::Tensor given = sink.contiguous();
  int64_t* f = sink_flow.data_ptr<int64_t>();
  int64_t total = 0;
  AT_DISPATCH_INDEX_TYPES(given.scalar_type(), "torchcut.csr_solve", [&] {
    const index_t* a = given.data_ptr<index_t>();
    const index_t* b = left.data_ptr<index_t>();
    for (int64_t v = 0; v < N; ++v) total += f[v] = static_cast<int64_t>(a[v] - b[v]);
  });
  flows.data_ptr<int64_t>()[0] = total;
  return {flows, mask.view({1, N}), residual, source.clone(at::MemoryFormat::Contiguous), sink_flow, stats};
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_FRAGMENT(torchcut, m) {
  m.class_<torchcut_cpu::CsrState>("CsrState")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>())
      .def("solve", &torchcut_cpu::CsrState::solve)
      .def("update", &torchcut_cpu::CsrState::update)
      .def("update_counts", &torchcut_cpu::CsrState::update_counts)
      .def("result", &torchcut_cpu::CsrState::result)
      .def("sink_side", &torchcut_cpu::CsrState::sink_side)
      .def("terminals", &torchcut_cpu::CsrState::terminals)
      .def("widen", &torchcut_cpu::CsrState::widen)
      .def("plan", &torchcut_cpu::CsrState::plan)
      .def("update_planned", &torchcut_cpu::CsrState::update_planned);
}

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("csr_solve_", &torchcut_cpu::csr_solve_op);
  m.impl("csr_solve", &torchcut_cpu::csr_solve_copy);
}
