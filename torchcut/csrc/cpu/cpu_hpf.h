// Hochbaum's pseudoflow, lowest-label variant, on the CPU solver's padded grid (implicit neighbours).
//
// Implemented from the papers (Hochbaum, "The pseudoflow algorithm: a new algorithm for the maximum-flow
// problem", Operations Research 2008; Chandran and Hochbaum, "A computational study of the pseudoflow
// and push-relabel algorithms for the maximum flow problem", 2009):
//
//   * Every terminal arc starts saturated: node v holds the excess e(v) = source(v) - sink(v) (the
//     signed terminal residual `tr` of the grid solver). A forest covers the nodes; only roots hold
//     excess. A tree whose root has e > 0 is strong, the others weak. Labels start at 1 (strong) and 0.
//   * The strong root r of lowest label L is processed: a depth-first search from r over tree children
//     of label L looks for a residual arc v -> w to a node w of label L - 1. Every strong node has a
//     label >= L and labels do not decrease from a root to its leaves, so w is weak. Then the tree is
//     re-rooted at v, hung below w (a merger), and r's excess is pushed up the path to w's root; an arc
//     too small to carry it is saturated and the part below it becomes a strong tree of its own.
//   * A node whose search found nothing and that has no child of its label left is relabelled (+1).
//     Gap rule: when a relabel empties its old label, no node above that label can reach a weak node
//     any more (the labels are a lower bound of the residual distance to the weak nodes), and the strong
//     roots above it are dropped.
//
// The result is a pseudoflow: n-link residuals in rc, excess (> 0) and deficits (< 0) in tr, at roots
// only. A deficit is at a node whose sink arc carries more than reaches it, so `tr < 0` reads as a
// residual sink capacity and `tr > 0` as excess: a valid flow for the Boykov-Kolmogorov solver. The
// caller then searches from the deficits over residual arcs (grid_sink_side, below): when no excess is
// reached the flow is maximum and the search is the canonical sink side; otherwise Boykov-Kolmogorov
// runs from this state and augments whatever path is still open. Either way optimality never depends on
// this phase being right, only on it respecting the capacities and conserving flow. On every grid
// measured the search met no excess.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace torchcut_cpu {

struct HPFStats {
  int64_t mergers = 0;
  int64_t relabels = 0;
  int64_t gaps = 0;
  int64_t handovers = 0;  // ranges stopped and handed to Boykov-Kolmogorov (split_hpf)
};

template <class Cap>
class HPF {
 public:
  // rc: [n * D] node-major residuals; tr: [n] signed terminal residuals (excess); delta / sis: the
  // neighbour offsets in the padded index and the opposite directions. Arcs into the border are closed.
  HPF(int64_t n, int D, Cap* rc, int64_t* tr, const int64_t* delta, const uint8_t* sis)
      : n_(n), D_(D), rc_(rc), e_(tr), delta_(delta), sis_(sis) {}

  // Runs to the maximum flow, or until *stop (when given) reads true: it is read every 16 roots, and
  // between two roots the arcs and excesses are a pseudoflow any solver may go on from (complete()).
  HPFStats run(const std::atomic<bool>* stop = nullptr) {
    lab_.assign(n_, 0);
    par_.assign(n_, kRoot);
    ca_.assign(n_, 0);
    child_.assign(n_, -1);
    next_.assign(n_, -1);
    prev_.assign(n_, -1);
    scan_.assign(n_, -1);
    bnext_.assign(n_, -1);
    inq_.assign(n_, 0);
    cap_ = static_cast<int32_t>(std::min<int64_t>(n_, (int64_t(1) << 30)));
    bhead_.assign(static_cast<size_t>(cap_) + 2, -1);
    count_.assign(static_cast<size_t>(cap_) + 2, 0);
    limit_ = cap_;
    lowest_ = cap_ + 1;
    for (int64_t v = 0; v < n_; ++v) {
      if (e_[v] > 0) {
        lab_[v] = 1;
        push_bucket(static_cast<int32_t>(v));
      }
      ++count_[lab_[v]];
    }
    complete_ = true;
    for (int64_t k = 1;; ++k) {
      const int32_t r = pop_lowest();
      if (r < 0) break;
      process(r);
      if (stop && (k & 15) == 0 && stop->load(std::memory_order_relaxed)) {
        complete_ = false;
        break;
      }
    }
    return st_;
  }
  // Whether the last run() ended at the maximum flow (rather than at *stop).
  bool complete() const { return complete_; }

 private:
  static constexpr uint8_t kRoot = 0xFF;

  int32_t parent_of(int32_t v) const { return par_[v] == kRoot ? -1 : static_cast<int32_t>(v + delta_[par_[v]]); }

  void add_child(int32_t p, int32_t c) {
    prev_[c] = -1;
    next_[c] = child_[p];
    if (child_[p] >= 0) prev_[child_[p]] = c;
    child_[p] = c;
  }
  void remove_child(int32_t p, int32_t c) {
    if (prev_[c] >= 0) next_[prev_[c]] = next_[c]; else child_[p] = next_[c];
    if (next_[c] >= 0) prev_[next_[c]] = prev_[c];
    // a search in progress at p may point at c: move it on (c leaves p's children)
    if (scan_[p] == c) scan_[p] = next_[c];
    next_[c] = prev_[c] = -1;
  }

  // Strong roots by label: singly linked stacks, lowest_ a lower bound of the lowest non-empty label.
  void push_bucket(int32_t v) {
    const int32_t l = lab_[v];
    if (l > limit_ || inq_[v]) return;  // above a gap: cannot reach a weak node
    inq_[v] = 1;
    bnext_[v] = bhead_[l];
    bhead_[l] = v;
    lowest_ = std::min(lowest_, l);
  }
  int32_t pop_lowest() {
    for (; lowest_ <= limit_; ++lowest_) {
      while (bhead_[lowest_] >= 0) {
        const int32_t v = bhead_[lowest_];
        bhead_[lowest_] = bnext_[v];
        inq_[v] = 0;
        // still a strong root of this label (a merger or a relabel since it was queued makes it stale)
        if (par_[v] == kRoot && e_[v] > 0 && lab_[v] == lowest_) return v;
      }
    }
    return -1;
  }

  void relabel(int32_t v) {
    const int32_t l = lab_[v];
    if (l >= limit_) {  // leaves the labels below the gap for good
      lab_[v] = cap_ + 1;
      return;
    }
    --count_[l];
    lab_[v] = l + 1;
    ++count_[l + 1];
    ca_[v] = 0;
    ++st_.relabels;
    if (count_[l] == 0 && l > 0) {  // gap: nothing at label l, so nothing above it reaches a weak node
      limit_ = l;
      ++st_.gaps;
    }
  }

  // A residual arc from v (label L) to a node of label L - 1, from v's current arc on; -1: none.
  int find_weak(int32_t v) {
    const int32_t want = lab_[v] - 1;
    const Cap* r = rc_ + static_cast<int64_t>(v) * D_;
    for (int d = ca_[v]; d < D_; ++d) {
      if (r[d] > 0 && lab_[v + delta_[d]] == want) {
        ca_[v] = static_cast<uint8_t>(d);
        return d;
      }
    }
    ca_[v] = static_cast<uint8_t>(D_);
    return -1;
  }

  // Move scan_[v] to the next child of v's label; relabel v when there is none.
  void check_children(int32_t v) {
    while (scan_[v] >= 0 && lab_[scan_[v]] != lab_[v]) scan_[v] = next_[scan_[v]];
    if (scan_[v] < 0) relabel(v);
  }

  void process(int32_t r) {
    scan_[r] = child_[r];
    int d = find_weak(r);
    if (d >= 0) {
      merge(r, r, d);
      return;
    }
    check_children(r);
    int32_t v = r;
    while (v >= 0) {
      while (scan_[v] >= 0) {
        const int32_t c = scan_[v];
        scan_[v] = next_[c];
        v = c;
        scan_[v] = child_[v];
        d = find_weak(v);
        if (d >= 0) {
          merge(r, v, d);
          return;
        }
        check_children(v);
      }
      if (v == r) break;
      v = parent_of(v);
      check_children(v);
    }
    push_bucket(r);  // relabelled: back in the queue at its new label
  }

  // Hang the strong tree of root r below w = v + delta[d] (re-rooted at v), then push r's excess up.
  void merge(int32_t r, int32_t v, int d) {
    ++st_.mergers;
    int32_t cur = v, new_par = static_cast<int32_t>(v + delta_[d]);
    uint8_t new_dir = static_cast<uint8_t>(d);
    for (;;) {
      const uint8_t old_dir = par_[cur];
      const int32_t old_par = parent_of(cur);
      if (old_par >= 0) remove_child(old_par, cur);
      par_[cur] = new_dir;
      add_child(new_par, cur);
      if (old_par < 0) break;
      new_par = cur;
      new_dir = sis_[old_dir];  // old_par -> cur
      cur = old_par;
    }
    push_up(r);
  }

  void push_up(int32_t x) {
    while (e_[x] > 0 && par_[x] != kRoot) {
      const uint8_t d = par_[x];
      const int32_t p = static_cast<int32_t>(x + delta_[d]);
      Cap& fwd = rc_[static_cast<int64_t>(x) * D_ + d];
      Cap& back = rc_[static_cast<int64_t>(p) * D_ + sis_[d]];
      const int64_t a = fwd;
      if (a >= e_[x]) {
        fwd = static_cast<Cap>(a - e_[x]);
        back = static_cast<Cap>(back + e_[x]);
        e_[p] += e_[x];
        e_[x] = 0;
      } else {  // the arc saturates: x and its subtree become a strong tree of their own
        fwd = 0;
        back = static_cast<Cap>(back + a);
        e_[p] += a;
        e_[x] -= a;
        remove_child(p, x);
        par_[x] = kRoot;
        push_bucket(x);
      }
      x = p;
    }
    if (par_[x] == kRoot && e_[x] > 0) push_bucket(x);  // a weak root that turned strong
  }

  int64_t n_;
  int D_;
  Cap* rc_;
  int64_t* e_;
  const int64_t* delta_;
  const uint8_t* sis_;
  std::vector<int32_t> lab_, child_, next_, prev_, scan_, bnext_, bhead_, count_;
  std::vector<uint8_t> par_, ca_, inq_;
  int32_t cap_ = 0, limit_ = 0, lowest_ = 0;
  bool complete_ = false;
  HPFStats st_;
};

// The canonical sink side of a pseudoflow on the padded grid: nodes that reach a deficit (tr < 0, a
// residual sink arc) over residual arcs. Writes 1 there and 0 elsewhere into `reach` (queue: n int32).
// Returns false when a node with excess (tr > 0, an unsent source residual) is among them: an augmenting
// path is still open and the flow is not maximum yet; true when it is maximum (then reach is final).
template <class Cap>
bool grid_sink_side(int64_t n, int D, const Cap* rc, const int64_t* tr, const int64_t* delta, const uint8_t* sis,
                    uint8_t* reach, int32_t* queue) {
  int64_t qt = 0;
  for (int64_t v = 0; v < n; ++v) {
    reach[v] = tr[v] < 0;
    if (reach[v]) queue[qt++] = static_cast<int32_t>(v);
  }
  // deficits lie inside the grid, and arcs into the border are closed: every node dequeued is interior
  for (int64_t qh = 0; qh < qt; ++qh) {
    const int32_t v = queue[qh];
    for (int d = 0; d < D; ++d) {
      const int64_t u = v + delta[d];
      if (reach[u] || rc[u * D + sis[d]] <= 0) continue;
      if (tr[u] > 0) return false;
      reach[u] = 1;
      queue[qt++] = static_cast<int32_t>(u);
    }
  }
  return true;
}

// The mirror of grid_sink_side, for a pseudoflow of the mirrored graph (grid_solve.cpp, `mirrored`):
// marks in `reach` every node reachable over residual arcs from a node with excess (tr > 0). Returns
// false when a deficit (tr < 0) is among them; true when the flow is maximum. Then `reach` is the
// source side of the canonical cut of that graph once its excesses go back to the source: a node's
// excess came from its own source arc through nodes of `reach` alone (a node outside that sent flow in
// would be reached over the flow's reverse), and returning it along those paths leaves every node of
// the paths, and whatever they reach, reachable from the source. Its complement is the canonical
// source side of the graph before mirroring.
template <class Cap>
bool grid_source_side(int64_t n, int D, const Cap* rc, const int64_t* tr, const int64_t* delta, uint8_t* reach,
                      int32_t* queue) {
  int64_t qt = 0;
  for (int64_t v = 0; v < n; ++v) {
    reach[v] = tr[v] > 0;
    if (reach[v]) queue[qt++] = static_cast<int32_t>(v);
  }
  for (int64_t qh = 0; qh < qt; ++qh) {  // excesses lie inside the grid, arcs into the border are closed
    const int32_t v = queue[qh];
    const Cap* r = rc + static_cast<int64_t>(v) * D;
    for (int d = 0; d < D; ++d) {
      const int64_t u = v + delta[d];
      if (reach[u] || r[d] <= 0) continue;
      if (tr[u] < 0) return false;
      reach[u] = 1;
      queue[qt++] = static_cast<int32_t>(u);
    }
  }
  return true;
}

}  // namespace torchcut_cpu
