// One grid on several threads: its padded rows cut into ranges (Cuts), one solver per range
// (split_bk: Boykov-Kolmogorov; split_hpf: pseudoflow, which may hand the ranges that run long over
// to Boykov-Kolmogorov), then Boykov-Kolmogorov over the whole grid from what the ranges left.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "cpu_bk.h"
#include "cpu_hpf.h"
#include "grid_layout.h"
#include "parallel.h"

namespace torchcut_cpu {

// A single grid is split over the threads only where every part has at least this many nodes; 6-connected
// volumes 8 times as many (their solve is one tree growth per node, bound by memory: 64^3 measured 17.0 ms
// on one thread against 19.5 on two, best of 15; 96^3 1.07x faster on two, 128^3 1.12x).
constexpr int64_t kSplitNodes = int64_t(1) << 17;
constexpr int64_t kSplitNodes3D6 = int64_t(1) << 20;

// The longest neighbour offset in the padded index.
inline int64_t longest(const std::vector<int64_t>& delta) {
  int64_t reach = 0;
  for (const int64_t d : delta) reach = std::max<int64_t>(reach, d < 0 ? -d : d);
  return reach;
}

// The fewest padded rows a range may have: more than twice the longest offset, so no arc crosses two cuts.
inline int64_t least_rows(const Layout& lay, const std::vector<int64_t>& delta) {
  return (2 * longest(delta) + lay.L - 1) / lay.L + 1;
}

// The parts of a single grid on `threads` threads: each at least kSplitNodes (kSplitNodes3D6) nodes and
// twice the longest offset (an arc crosses one cut only); 1: not cut.
inline int64_t split_parts(const Layout& lay, const std::vector<int64_t>& delta, int64_t threads) {
  const int64_t rows_each = least_rows(lay, delta);  // rows per part, at least
  const int64_t least = lay.shape.size() == 3 && delta.size() <= 6 ? kSplitNodes3D6 : kSplitNodes;
  const int64_t most = std::min(lay.n_pad / least, lay.rows / rows_each);
  return std::max<int64_t>(1, std::min(threads, most));
}

// The first padded row of each of `parts` ranges of equal length, then the end.
inline std::vector<int64_t> even_rows(const Layout& lay, int64_t parts) {
  std::vector<int64_t> rows(parts + 1);
  for (int64_t p = 0; p <= parts; ++p) rows[p] = lay.part_row(p, parts);
  return rows;
}

// The arcs across the cuts between ranges of consecutive padded rows (`rows`: the first row of each range,
// then the end; each range at least as long as split_parts asks, so no arc crosses two cuts), closed so
// that a solver of one range touches only its own nodes. Holds the closed arcs' residuals to reopen
// them, the range bounds (node indices) and, with `seed`, the nodes next to a cut (those that hold a
// closed arc).
template <class Cap>
struct Cuts {
  std::vector<int64_t> bound;                  // [parts + 1] first node of each range, then n
  std::vector<std::pair<int64_t, Cap>> saved;  // (arc, residual) of the closed arcs
  std::vector<int32_t> seeds;                  // nodes that hold one (with `seed`)
  Cap* rc;

  Cuts(Cap* rc_, const Layout& lay, const std::vector<int64_t>& delta, const std::vector<int64_t>& rows, bool seed)
      : bound(rows.size()), rc(rc_) {
    const int D = static_cast<int>(delta.size());
    const int64_t n = lay.n_pad, reach = longest(delta), parts = static_cast<int64_t>(rows.size()) - 1;
    for (int64_t p = 0; p <= parts; ++p) bound[p] = rows[p] * lay.L;
    for (int64_t p = 1; p < parts; ++p) {
      const int64_t c = bound[p];
      for (int64_t v = std::max<int64_t>(0, c - reach); v < std::min(n, c + reach); ++v) {
        bool holds = false;
        for (int d = 0; d < D; ++d) {
          const int64_t j = v + delta[d];
          if (j < 0 || j >= n || (v < c) == (j < c)) continue;
          Cap& r = rc[v * D + d];
          if (r != Cap(0)) saved.emplace_back(v * D + d, r);
          r = Cap(0);
          holds = true;
        }
        if (holds && seed) seeds.push_back(static_cast<int32_t>(v));
      }
    }
  }
  // No flow crossed a closed arc, so its residual is the saved one.
  void reopen() const {
    for (const auto& [a, r] : saved) rc[a] = r;
  }
};

// Several cores on one grid (Liu and Sun's block-parallel Boykov-Kolmogorov, one level of merging):
// the padded rows are cut into ranges (`rows`, Cuts), and one solver per range runs on its own thread.
// Their flows are flows of the whole graph. The arcs are then reopened and `bk` continues on the whole
// graph from the trees the range solvers left, from the nodes next to a cut: the result is the maximum
// flow. Returns the counters of all the solvers together.
template <class Cap>
BKStats split_bk(GridTopo<Cap>& g, BK<GridTopo<Cap>>& bk, const Layout& lay, int64_t* tr, GridWork<Cap>& w,
                 const std::vector<int64_t>& delta, const std::vector<int64_t>& rows) {
  const Cuts<Cap> cuts(g.rc, lay, delta, rows, true);
  const int64_t parts = static_cast<int64_t>(rows.size()) - 1;
  std::vector<BKStats> st(parts);
  std::vector<int32_t> clocks(parts);
  parallel_items(parts, parts, [&](int64_t p, int64_t) {
    BK<GridTopo<Cap>> part(g, lay.n_pad, tr, w.nxt.get(), w.mk.get(), cuts.bound[p], cuts.bound[p + 1]);
    st[p] = part.run();
    clocks[p] = part.clock();
  });
  cuts.reopen();
  const int32_t last = *std::max_element(clocks.begin(), clocks.end());  // below INT32_MAX (tick wraps there)
  BKStats s = bk.resume(cuts.seeds, std::min(last + 1, std::numeric_limits<int32_t>::max() - 1));
  for (const BKStats& t : st) {
    s.flow += t.flow;
    s.augmentations += t.augmentations;
    s.orphans += t.orphans;
    s.growths += t.growths;
  }
  return s;
}

// split_hpf: a thread whose range is done while others still run waits this fraction of the time spent
// so far, then the ranges still running are stopped and handed over (docs/design.md, "Compiled CPU solvers", and docs/performance.md, "Balancing the ranges of a cut grid: the handover").
constexpr double kHandoverGrace = 0.3;

// Pseudoflow on several cores: one pseudoflow per range of rows (Cuts), each on its own thread and on its
// own nodes alone (indices relative to the range's first node; a closed arc is never followed, so no
// search leaves the range). The work of a range is not known beforehand (on a photograph one half of the
// rows measured 4x the other's pseudoflow), so with `hand`, when one range is done and others still run
// after a grace (kHandoverGrace), those are stopped: a pseudoflow is a valid flow between any two roots it processes.
// `handover` then holds new ranges of rows for split_bk, cut where the stopped rows are, so that each
// thread's Boykov-Kolmogorov takes an equal share of the work left; it stays empty when every range
// ended at its maximum flow. The arcs are reopened either way; after a full run the caller's search
// from the deficits (grid_sink_side) finds the paths across the cuts still open, which
// Boykov-Kolmogorov augments. Returns the counters of the range solvers together.
template <class Cap>
HPFStats split_hpf(Cap* rc, int64_t* tr, const Layout& lay, const std::vector<int64_t>& delta,
                   const std::vector<uint8_t>& sis, int64_t parts, bool hand, std::vector<int64_t>& handover) {
  using Clock = std::chrono::steady_clock;
  const int D = static_cast<int>(delta.size());
  const std::vector<int64_t> rows = even_rows(lay, parts);
  const Cuts<Cap> cuts(rc, lay, delta, rows, false);
  std::vector<HPFStats> st(parts);
  std::vector<std::atomic<bool>> stop(parts);
  for (auto& x : stop) x = false;
  std::vector<char> complete(parts, 1);
  std::mutex m;
  std::condition_variable cv;
  int64_t done = 0;
  const auto start = Clock::now();
  parallel_items(parts, parts, [&](int64_t p, int64_t) {
    const int64_t lo = cuts.bound[p];
    HPF<Cap> pf(cuts.bound[p + 1] - lo, D, rc + lo * D, tr + lo, delta.data(), sis.data());
    st[p] = pf.run(&stop[p]);
    complete[p] = pf.complete();
    std::unique_lock<std::mutex> lk(m);
    ++done;
    cv.notify_all();
    if (!hand || done == parts) return;
    const auto now = Clock::now();
    if (!cv.wait_until(lk, now + (now - start) * kHandoverGrace, [&] { return done == parts; }))
      for (auto& x : stop) x = true;
  });
  cuts.reopen();
  HPFStats s;
  for (const HPFStats& t : st) s.mergers += t.mergers, s.relabels += t.relabels, s.gaps += t.gaps;
  // the handover's ranges: equal shares of the stopped rows, each range as long as split_parts asks
  handover.clear();
  int64_t left = 0;
  for (int64_t p = 0; p < parts; ++p) left += complete[p] ? 0 : rows[p + 1] - rows[p];
  if (left == 0) return s;
  s.handovers = std::count(complete.begin(), complete.end(), 0);
  const int64_t least = least_rows(lay, delta);
  handover.assign(1, 0);
  int64_t seen = 0;
  for (int64_t p = 0; p < parts; ++p) {
    if (complete[p]) continue;
    for (int64_t r = rows[p]; r < rows[p + 1]; ++r, ++seen) {
      const int64_t k = static_cast<int64_t>(handover.size());  // the cut wanted next
      if (k < parts && seen * parts >= k * left && r - handover.back() >= least && lay.rows - r >= least * (parts - k))
        handover.push_back(r);
    }
  }
  if (static_cast<int64_t>(handover.size()) != parts) handover = rows;  // too few rows to share: even ranges
  else handover.push_back(lay.rows);
  return s;
}

}  // namespace torchcut_cpu
