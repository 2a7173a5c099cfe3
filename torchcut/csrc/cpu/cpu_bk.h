// Boykov-Kolmogorov max-flow on the CPU, written once for any graph "topology".
//
// The algorithm (Boykov and Kolmogorov, "An experimental comparison of min-cut/max-flow algorithms for
// energy minimization in vision", PAMI 2004), implemented from the paper:
//
//   * Two search trees, S rooted at the source and T rooted at the sink, grown breadth-first from a FIFO
//     of active nodes over residual arcs (S: arcs p -> q, T: arcs q -> p). A node's tree and parent are
//     one small word; terminal arcs live on the node as one signed residual `tr` (> 0: from the source,
//     < 0: to the sink), so the trees' roots are the nodes with tr != 0.
//   * When the trees touch, the path source -> ... -> p -> q -> ... -> sink is augmented by its
//     bottleneck. Arcs it saturates cut their child off: the child becomes an orphan.
//   * Adoption: an orphan looks among its neighbours of the same tree for a new parent whose own path to
//     the root is intact (checked by walking up, with the timestamp/distance marks of the paper so each
//     walk stops early and the trees stay shallow). Without one it becomes free, its children become
//     orphans and its tree-neighbours become active again. An augmentation's orphans are adopted one at
//     a time, each with the orphans it makes (see adopt).
//   * It stops when no active node is left: then the S tree is exactly what the source reaches.
//
// A Topo supplies the graph: per node v, its arcs k in [begin(v), end(v)), the arc index arc(v, k), the
// neighbour head(v, k), the reverse arc sister(v, k), and the node's tree/parent word. Grids (implicit
// neighbours, one byte per node for tree and parent) and CSR graphs share this file.
//
// Exact integer arithmetic: residuals of type Topo::Cap (int32 or int64: the caller guarantees that a
// pair's residuals sum without overflow), terminal residuals and the flow in int64.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchcut_cpu {

struct Marks {
  int32_t ts;    // time of the last check that this node's path to its root is intact
  int32_t dist;  // its length (in nodes) then
};

struct BKStats {
  int64_t flow = 0;
  int64_t augmentations = 0;
  int64_t orphans = 0;
  int64_t growths = 0;
};

// Whether a topology logs touched nodes (touch(v)); a trait rather than a requires-expression, so that
// the header also builds as C++17, the standard older torch releases compile extensions with.
template <class T, class = void>
struct HasTouch : std::false_type {};
template <class T>
struct HasTouch<T, std::void_t<decltype(std::declval<T&>().touch(int64_t{0}))>> : std::true_type {};

// One field of an array of records, indexed as a pointer to the field alone would be: BK's per-node
// arrays (terminal residuals, queue links, marks) where a caller keeps each node's state in one record
// (the kept state of csr_solve.cpp), so a node visited by the search costs one cache miss, not one per
// array. The member pointer is a template argument: the access compiles to a fixed offset.
template <class Rec, class T, T Rec::*kField>
struct Field {
  Rec* rec;
  T& operator[](int64_t v) const { return rec[v].*kField; }
};

// TrP, NxtP, MkP: how the terminal residuals, queue links and marks are reached, raw arrays by default
// (the grid and CSR solvers) or Fields of node records.
template <class Topo, class TrP = int64_t*, class NxtP = int32_t*, class MkP = Marks*>
class BK {
 public:
  using Cap = typename Topo::Cap;
  using P = typename Topo::P;

  // tr: terminal residuals (modified); nxt: int32 scratch of n nodes; marks: n entries. A solver of the
  // nodes [lo, hi) only (lo < hi <= n) touches nothing outside them, provided no arc with residual leaves
  // them: several solve disjoint ranges of one graph at once (see resume).
  BK(Topo& g, int64_t n, TrP tr, NxtP nxt, MkP marks, int64_t lo = 0, int64_t hi = -1)
      : g_(g), n_(n), lo_(lo), hi_(hi < 0 ? n : hi), ranged_(lo_ > 0 || hi_ < n), tr_(tr), nxt_(nxt), mk_(marks) {}

  BKStats run() {
    init(nullptr);
    return loop();
  }

  // A run that gives up once *stop reads true (read every 256 growths): a race of two algorithms on
  // copies of one graph, where the loser's state is thrown away (grid_solve.cpp). stopped() tells.
  void stop_when(const std::atomic<bool>* stop) { stop_ = stop; }
  bool stopped() const { return stopped_; }

  // Continues from the trees that solvers of disjoint ranges left (their ranges covering every node)
  // after arcs between the ranges were opened: the nodes of `seeds` that are in a tree become active
  // (they hold every opened arc), and the marks of those solvers stay valid as older ones (start: above
  // every solver's clock). The flow of this run adds to theirs.
  BKStats resume(const std::vector<int32_t>& seeds, int32_t start) {
    time_ = start;
    for (const int32_t v : seeds)
      if (!g_.is_free(v)) activate(v);
    return loop();
  }

  int32_t clock() const { return time_; }

  // A topology may log the nodes whose terminal residual or arc residuals change (touch(v); the
  // neighbour at the other end of a changed arc is touched too): the kept state of csr_solve.cpp
  // copies those nodes' values alone into its outputs.
  void touch(int32_t v) {
    if constexpr (HasTouch<Topo>::value) g_.touch(v);
  }

  // Kohli and Torr's re-solve with the trees kept (PAMI 2007; the reuse_trees of Kolmogorov's maxflow
  // 3.0): the trees, marks and residuals are those a finished loop left (start: its clock; every node
  // idle), and the terminal residuals of the m nodes `nodes` become `tr_new` (`seen`: n zero bytes, left
  // zero; a node listed twice keeps its first value; nullptr where the nodes are distinct). A node with a
  // terminal residual becomes a root of the tree of its sign; one that changes tree orphans its children
  // and activates its neighbours of the other tree that hold a residual arc towards it; one left without
  // a terminal residual becomes an orphan. Then the orphans are adopted and the trees grow from the
  // changed nodes. A finished loop leaves both trees closed (every residual arc out of an S node ends in
  // S, every residual arc into a T node starts in T; a node that is grown adds its free neighbours, and a
  // node that becomes free activates the neighbours that held it), and the update keeps that true for
  // every node but the active ones, so the trees end closed again: the T tree is exactly the nodes that
  // reach the sink.
  template <class SeenP>
  BKStats update(const int32_t* nodes, int64_t m, const int64_t* tr_new, SeenP seen, int32_t start) {
    time_ = start;
    tick();
    for (int64_t k = 0; k < m; ++k) {
      const int32_t i = nodes[k];
      if constexpr (kDedup<SeenP>) {
        if (seen[i]) continue;
        seen[i] = 1;
      }
      const int64_t t = tr_new[k];
      tr_[i] = t;
      touch(i);
      activate(i);
      if (t == 0) {
        if (!g_.is_free(i) && g_.parent(i) != Topo::kOrphan) orphan(i);
        continue;
      }
      const bool sink = t < 0;
      if (g_.is_free(i) || g_.is_sink(i) != sink) {
        for (auto a = g_.begin(i), e = g_.end(i); a != e; ++a) {
          const int32_t j = g_.head(i, a);
          if (g_.is_free(j)) continue;
          const P pj = g_.parent(j);
          if (pj != Topo::kTerm && pj != Topo::kOrphan && g_.parent_node(j, pj) == i) orphan(j);
          // j of the other tree with a residual arc towards i (S: i -> j, T: j -> i)
          if (g_.is_sink(j) != sink && g_.rc[sink ? g_.sister(i, a) : g_.arc(i, a)] > 0) activate(j);
        }
      }
      g_.set(i, Topo::kTerm, sink);
      mk_[i] = Marks{time_, 1};
    }
    if constexpr (kDedup<SeenP>)
      for (int64_t k = 0; k < m; ++k) seen[nodes[k]] = 0;
    // every orphan (a changed node made a root meanwhile is one no more)
    std::vector<int32_t> pending;
    pending.swap(orphans_);
    for (const int32_t v : pending)
      if (g_.parent(v) == Topo::kOrphan) orphans_.push_back(v);
    adopt();
    return loop();
  }

  // The canonical sink side: nodes that can reach the sink in the residual network. Writes 1 there and
  // 0 elsewhere into `reach`; uses nxt as the BFS queue. Every node of the T tree reaches the sink along
  // its parent arcs and no node of the S tree does (else there would be an augmenting path), so only
  // free nodes need a search: it starts from those with a residual arc into the T tree.
  void sink_side(uint8_t* reach) {  // the whole graph (after a solver of every node)
    for (int64_t v = 0; v < n_; ++v) reach[v] = !g_.is_free(v) && g_.is_sink(v);
    int64_t qt = 0;
    for (int64_t v = 0; v < n_; ++v) {
      if (!g_.is_free(v)) continue;
      for (auto k = g_.begin(v), e = g_.end(v); k != e; ++k) {
        // the residual first: a grid's border nodes (free, no open arcs) have neighbours outside the array
        if (g_.rc[g_.arc(v, k)] > 0 && reach[g_.head(v, k)]) {
          reach[v] = 1;
          nxt_[qt++] = static_cast<int32_t>(v);
          break;
        }
      }
    }
    spread_back(reach, qt);
  }

 private:
  template <class SeenP>
  static constexpr bool kDedup = !std::is_same_v<SeenP, std::nullptr_t>;
  static constexpr int32_t kIdle = -1;     // not active
  static constexpr int32_t kCurrent = -2;  // active, being grown (not in the queue)
  static constexpr int32_t kInfD = std::numeric_limits<int32_t>::max();

  // Marks in `reach` every node with a residual path into the qt nodes queued in nxt (marked already),
  // breadth-first over the arcs back; true when a node with excess was marked.
  bool spread_back(uint8_t* reach, int64_t qt) {
    bool excess = false;
    for (int64_t qh = 0; qh < qt; ++qh) {
      const int32_t v = nxt_[qh];
      for (auto k = g_.begin(v), e = g_.end(v); k != e; ++k) {
        const int32_t j = g_.head(v, k);
        if (!reach[j] && g_.rc[g_.sister(v, k)] > 0) {
          reach[j] = 1;
          excess |= tr_[j] > 0;
          nxt_[qt++] = j;
        }
      }
    }
    return excess;
  }

  BKStats loop() {
    int32_t cur = -1;
    for (;;) {
      int32_t i = -1;
      if (cur >= 0) {
        nxt_[cur] = kIdle;
        if (!g_.is_free(cur)) i = cur;
        cur = -1;
      }
      if (i < 0 && (i = pop_active()) < 0) break;
      ++st_.growths;
      if (stop_ && (st_.growths & 255) == 0 && stop_->load(std::memory_order_relaxed)) {
        stopped_ = true;
        break;
      }
      int32_t x = -1, y = -1;  // the S-tree and T-tree ends of the connecting arc
      int64_t mid = -1, mid_sis = -1;
      if (g_.is_sink(i)) grow<true>(i, x, y, mid, mid_sis); else grow<false>(i, x, y, mid, mid_sis);
      tick();
      if (mid >= 0) {
        nxt_[i] = kCurrent;  // active, not queued: grown again next
        cur = i;
        augment(x, y, mid, mid_sis);
        adopt();
      }
    }
    return st_;
  }

  // Grows i's tree over its residual arcs (S: i -> j, T: j -> i): free neighbours join as children, and
  // a neighbour of the same tree is re-parented to i when that shortens its path (the paper's
  // timestamp/distance rule). Stops at the first neighbour of the other tree and returns the connecting
  // arc: x, y its S and T ends, mid the arc x -> y and mid_sis its reverse.
  template <bool kSink>
  void grow(int32_t i, int32_t& x, int32_t& y, int64_t& mid, int64_t& mid_sis) {
    const Marks mi = mk_[i];
    for (auto k = g_.begin(i), e = g_.end(i); k != e; ++k) {
      const int64_t a = kSink ? g_.sister(i, k) : g_.arc(i, k);
      if (g_.rc[a] <= 0) continue;
      const int32_t j = g_.head(i, k);
      if (g_.is_free(j)) {
        g_.set(j, g_.back(i, k), kSink);
        mk_[j] = Marks{mi.ts, mi.dist + 1};
        activate(j);
      } else if (g_.is_sink(j) != kSink) {
        x = kSink ? j : i, y = kSink ? i : j;
        mid = a, mid_sis = kSink ? g_.arc(i, k) : g_.sister(i, k);
        return;
      } else if (mk_[j].ts <= mi.ts && mk_[j].dist > mi.dist) {
        g_.set_parent(j, g_.back(i, k));
        mk_[j] = Marks{mi.ts, mi.dist + 1};
      }
    }
  }

  void init(const uint8_t* only) {  // only: the roots to activate (nullptr: all)
    for (int64_t v = lo_; v < hi_; ++v) {
      nxt_[v] = kIdle;
      mk_[v] = Marks{0, 1};
      if (tr_[v] > 0) {
        g_.set(v, Topo::kTerm, false);
        if (!only || only[v]) activate(static_cast<int32_t>(v));
      } else if (tr_[v] < 0) {
        g_.set(v, Topo::kTerm, true);
        if (!only || only[v]) activate(static_cast<int32_t>(v));
      } else {
        g_.set_free(v);
      }
    }
  }

  void tick() {
    if (++time_ == std::numeric_limits<int32_t>::max()) {  // wrap: forget every mark
      for (int64_t v = lo_; v < hi_; ++v) mk_[v].ts = 0;
      time_ = 1;
    }
  }

  void activate(int32_t v) {
    if (nxt_[v] != kIdle) return;
    if (qlast_ >= 0) nxt_[qlast_] = v; else qfirst_ = v;
    qlast_ = v;
    nxt_[v] = v;  // the last node points to itself
  }

  int32_t pop_active() {
    while (qfirst_ >= 0) {
      const int32_t v = qfirst_;
      qfirst_ = nxt_[v] == v ? -1 : nxt_[v];
      if (qfirst_ < 0) qlast_ = -1;
      nxt_[v] = kIdle;
      if (!g_.is_free(v)) return v;
    }
    return -1;
  }

  void orphan(int32_t v) {
    g_.set_parent(v, Topo::kOrphan);
    orphans_.push_back(v);
  }

  void augment(int32_t x, int32_t y, int64_t mid, int64_t mid_sis) {
    int64_t b = g_.rc[mid];
    int32_t v = x;
    for (P p; (p = g_.parent(v)) != Topo::kTerm; v = g_.parent_node(v, p)) b = std::min<int64_t>(b, g_.rc[g_.parent_sister(v, p)]);
    b = std::min(b, tr_[v]);
    v = y;
    for (P p; (p = g_.parent(v)) != Topo::kTerm; v = g_.parent_node(v, p)) b = std::min<int64_t>(b, g_.rc[g_.parent_arc(v, p)]);
    b = std::min(b, -tr_[v]);
    const Cap bc = static_cast<Cap>(b);
    g_.rc[mid] -= bc;
    g_.rc[mid_sis] += bc;
    // source side: flow runs parent -> v
    for (v = x;;) {
      touch(v);
      const P p = g_.parent(v);
      if (p == Topo::kTerm) {
        if ((tr_[v] -= b) == 0) orphan(v);
        break;
      }
      const int64_t down = g_.parent_sister(v, p);
      g_.rc[g_.parent_arc(v, p)] += bc;
      const int32_t u = g_.parent_node(v, p);
      if ((g_.rc[down] -= bc) == 0) orphan(v);
      v = u;
    }
    // sink side: flow runs v -> parent
    for (v = y;;) {
      touch(v);
      const P p = g_.parent(v);
      if (p == Topo::kTerm) {
        if ((tr_[v] += b) == 0) orphan(v);
        break;
      }
      const int64_t up = g_.parent_arc(v, p);
      g_.rc[g_.parent_sister(v, p)] += bc;
      const int32_t u = g_.parent_node(v, p);
      if ((g_.rc[up] -= bc) == 0) orphan(v);
      v = u;
    }
    st_.flow += b;
    ++st_.augmentations;
  }

  // Length of the path from j to its root, or kInfD when it meets an orphan; marks the path when intact.
  int32_t origin(int32_t j) {
    int64_t d = 0;
    int32_t u = j;
    for (;;) {
      if (mk_[u].ts == time_) {
        d += mk_[u].dist;
        break;
      }
      const P p = g_.parent(u);
      ++d;
      if (p == Topo::kTerm) {
        mk_[u] = Marks{time_, 1};
        break;
      }
      if (p == Topo::kOrphan) return kInfD;
      u = g_.parent_node(u, p);
    }
    if (d >= kInfD) d = kInfD - 1;
    int32_t dd = static_cast<int32_t>(d);
    for (u = j; mk_[u].ts != time_; u = g_.parent_node(u, g_.parent(u))) mk_[u] = Marks{time_, dd--};
    return static_cast<int32_t>(d);
  }

  template <bool kSink>
  void process_orphan(int32_t i) {
    ++st_.orphans;
    int32_t best_d = kInfD;
    P best = Topo::kOrphan;
    for (auto k = g_.begin(i), e = g_.end(i); k != e; ++k) {
      // S: the arc j -> i must have residual; T: the arc i -> j.
      if (g_.rc[kSink ? g_.arc(i, k) : g_.sister(i, k)] <= 0) continue;
      const int32_t j = g_.head(i, k);
      if (g_.is_free(j) || g_.is_sink(j) != kSink) continue;
      const int32_t d = origin(j);
      if (d < best_d) {
        best_d = d;
        best = g_.to(i, k);
      }
    }
    if (best_d < kInfD) {
      g_.set_parent(i, best);
      mk_[i] = Marks{time_, best_d + 1};
      return;
    }
    g_.set_free(i);
    for (auto k = g_.begin(i), e = g_.end(i); k != e; ++k) {
      // a pair with no residual either way can neither activate j nor hold a parent arc (a parent arc
      // always has residual): skipped before j is read, so a range solver never reads outside its range
      // (a solver of the whole graph skips the test: it costs 4-7% on small grids)
      if (ranged_ && g_.rc[g_.arc(i, k)] <= 0 && g_.rc[g_.sister(i, k)] <= 0) continue;
      const int32_t j = g_.head(i, k);
      if (g_.is_free(j) || g_.is_sink(j) != kSink) continue;
      if (g_.rc[kSink ? g_.arc(i, k) : g_.sister(i, k)] > 0) activate(j);
      const P pj = g_.parent(j);
      if (pj != Topo::kTerm && pj != Topo::kOrphan && g_.parent_node(j, pj) == i) orphan(j);
    }
  }

  // The orphans of one augmentation, one at a time: the one found last first (nearest the sink-side
  // root), each with every orphan its adoption makes (FIFO), before the next. Adopting all of them in
  // the order found, and the orphans they made after them, processed 5-14x more orphans on long paths
  // (a 64 x 1024 strip: 15.3 M against 3.1 M, 5.2x the time; 8-connected 38.0 M against 2.7 M, 14.5x)
  // and measured the same on the benchmark's grids (docs/performance.md, "CPU solvers").
  void adopt() {
    roots_.assign(orphans_.rbegin(), orphans_.rend());
    orphans_.clear();
    for (const int32_t r : roots_) {
      orphans_.push_back(r);
      for (size_t h = 0; h < orphans_.size(); ++h) {
        const int32_t v = orphans_[h];
        if (g_.is_sink(v)) process_orphan<true>(v); else process_orphan<false>(v);
      }
      orphans_.clear();
    }
  }

  Topo& g_;
  int64_t n_, lo_, hi_;
  bool ranged_;  // solves [lo, hi) only, not every node
  TrP tr_;
  NxtP nxt_;
  MkP mk_;
  int32_t qfirst_ = -1, qlast_ = -1;
  int32_t time_ = 0;
  std::vector<int32_t> orphans_;
  std::vector<int32_t> roots_;
  BKStats st_;
  const std::atomic<bool>* stop_ = nullptr;
  bool stopped_ = false;
};

}  // namespace torchcut_cpu
