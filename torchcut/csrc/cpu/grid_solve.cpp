// The CPU implementation of torch.ops.torchcut.grid_solve (schema in torchcut.cpp): Boykov-Kolmogorov
// (cpu_bk.h), optionally after Hochbaum's pseudoflow (cpu_hpf.h), on the layout of torchcut/grid.py
// ([B, 2K, *shape] residuals, direction d < K along offsets[d], d >= K along -offsets[d - K]).
//
// Each item is copied into a padded, node-major buffer (grid_layout.h): the 2K residuals of a node side
// by side (one cache line for 4/8-connected int32 grids), and a border of empty nodes as wide as the
// largest offset, so a neighbour is `v + delta[d]` with no bounds test and no adjacency list (as in
// GridCut: Jamriska, Sykora and Hornung 2012). Tree and parent direction share one byte per node. Items
// of a batch are solved in parallel threads (parallel.h); a single grid may be cut into ranges of rows
// solved in parallel (grid_ranges.h).
//
// grid_solve leaves its inputs alone and returns new tensors: the final residuals, the excess
// (unsaturated source residual, as a preflow), the residual sink capacities, the source side of the
// canonical minimum cut (nodes that cannot reach the sink) and counters per item (kStats).
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "cpu_bk.h"
#include "cpu_hpf.h"
#include "grid_layout.h"
#include "grid_ranges.h"
#include "huge_alloc.h"
#include "parallel.h"
#include "../layouts.h"
#include "../terminals.h"

namespace torchcut_cpu {
namespace {

// One row of counters per item, named and ordered by TORCHCUT_CPU_STATS (layouts.h).
constexpr int kStats = torchcut::CpuStats::kCount;
// Grid algorithms: 0 Boykov-Kolmogorov; 1 pseudoflow (then Boykov-Kolmogorov only if a path is still open); 2
// (auto) pseudoflow where the n-link capacities exceed hpf_ratio(ndim, D) times the netted terminal
// capacities, else Boykov-Kolmogorov. A pair counts twice its smaller arc (a one-way pair, as in the
// expansion moves of stereo, counts nothing: Boykov-Kolmogorov is 1.4-1.9x faster on those moves); a
// node's terminal capacity counts only up to its own n-link capacity (the rest, as on seeds, fixes its side
// whatever the n-links, so it measured the seeds' area rather than the smoothness). The thresholds per
// dimension and connectivity were measured on segmentation energies (photographs 0.25-4 MP, lam 1-100;
// blob volumes), the hard energies and the standard ones (docs/performance.md, "The choice of algorithm"):
// the more neighbours a node has, the earlier Boykov-Kolmogorov's trees get bushy and its adoptions costly.
// A single grid cut over several threads runs either algorithm one range per thread (split_bk, split_hpf):
// on two cores Boykov-Kolmogorov 1.2-2x and pseudoflow 0.9-2.2x (median 1.46x) faster. Measured with two
// threads the same way, 2D 4-connected grids keep their threshold, while 18/26-connected volumes, where
// cut Boykov-Kolmogorov gains more, take pseudoflow only above 4 (`cut`). On a cut 2D grid below
// handover_ratio, auto's pseudoflow hands ranges that run long to Boykov-Kolmogorov (split_hpf), which
// makes it the faster from 2.7 on cut 8-connected grids. The volumes' thresholds were then fitted again on
// random energies (benchmarks/auto_heldout.py, its tuning part: smoothed noise with threshold seeds or
// probability unaries, 32^3-96^3, lam 1-100, seeds on 1-30% of the voxels), on the ratio of their free
// nodes (below). The misses of its held-out part are in docs/performance.md, "`auto` on random energies".
//
// Volumes count their free nodes only (terminal capacity below the n-link capacity): with a share s of the
// nodes seeded, the ratio over every node stays below about 1 / (2s) however strong the smoothness, and
// that sent seeded noise volumes to Boykov-Kolmogorov 3.4-4.2x too slow. Over the free nodes the
// tuning part separates at 3.5-5.3 (6-connected) and 1.8-2.7 (26-connected, one thread); cut 26-connected
// volumes, where Boykov-Kolmogorov gains more from the cut, keep it up to 8.2 (blob volumes) and want
// pseudoflow from 53 (noise volumes): 4.0, 2.2 and 20.
double hpf_ratio(size_t ndim, int D, bool cut) {
  if (ndim == 2) return D <= 4 ? 3.5 : (cut ? 2.7 : 3.85);
  if (ndim == 3) return D <= 6 ? 4.0 : (cut ? 20.0 : 2.2);
  return 8.0;
}

// Below this ratio (2D cut grids, auto), split_hpf hands the ranges that run long to Boykov-Kolmogorov;
// above it pseudoflow costs far less per unit of work than Boykov-Kolmogorov (hard energies, strong
// smoothness: 1.09-1.42x slower with the handover) and runs to the end. docs/performance.md, "Balancing
// the ranges of a cut grid".
double handover_ratio(size_t ndim, int D) { return ndim == 2 ? (D <= 4 ? 4.6 : 4.1) : 0.0; }

// auto races the two algorithms (solve_grid_item) on an uncut 2D item whose ratio is below this many
// times hpf_ratio: above it pseudoflow was the faster on every 2D energy of the tuning part of
// benchmarks/auto_heldout.py but one (Boykov-Kolmogorov 1.10x faster), below it either one by up to 2-3x
// at every ratio measured. Volumes never race: their rule (the free nodes' ratio) picked the faster
// algorithm on all 22 volumes of the fresh part and 19 of 20 of the held-out one (the other 1.10x), and a
// race cost the guard's volumes 7-21%.
double race_band(size_t ndim) { return ndim == 3 ? 0.0 : 3.0; }

// Smallest item (nodes) that races: below it a thread's start and the copy weigh on a solve of well
// under a millisecond.
constexpr int64_t kRaceNodes = 16384;

template <class Cap>
void solve_grid_item(GridWork<Cap>& w, const Layout& lay, const Cap* caps, const int64_t* source, const Cap* sink,
                     Cap* res, int64_t* excess, Cap* sink_out, bool* mask, int64_t* stats,
                     const std::vector<int64_t>& delta, const std::vector<uint8_t>& sis, int64_t algorithm,
                     int64_t parts, bool mask_only, int64_t orient, GridWork<Cap>* rival) {
  const int D = static_cast<int>(delta.size());
  const int64_t n = lay.n, W = lay.W, L = lay.L, px = lay.pad.back();
  const auto Ts = std::chrono::steady_clock::now();
  w.resize(lay.n_pad, D);
  Cap* rc = w.rc.get();
  int64_t* tr = w.tr.get();
  // algorithm 2: both arcs of every pair and the terminal capacities (each up to the node's n-links), summed
  // per row (int32 arcs: per node in 64-bit integers; int64 arcs in double), in double across rows
  const bool count = algorithm == 2;
  const bool free_only = lay.shape.size() == 3;  // volumes: the sums over the free nodes only (hpf_ratio)
  // Rows are loaded and stored by `parts` threads (the ranges split_bk solves), sums per part
  auto rows = [&](auto f) {
    if (parts <= 1) return lay.for_each_row([&](int64_t v0, int64_t q0) { f(v0, q0, 0); });
    parallel_items(parts, parts, [&](int64_t p, int64_t) {
      lay.for_each_row([&](int64_t v0, int64_t q0) { f(v0, q0, p); }, lay.part_row(p, parts),
                       lay.part_row(p + 1, parts));
    });
  };
  std::vector<double> nsums(std::max<int64_t>(parts, 1), 0.0), tsums(nsums.size(), 0.0);
  // orient auto: the nodes with excess (a source residual) less those with a deficit, per part (`mirrored`)
  std::vector<int64_t> sides(nsums.size(), 0);
  // load: the netted terminals as one signed value (terminals.h), residuals node-major
  rows([&](int64_t v0, int64_t q0, int64_t part) {
    if (q0 < 0) {
      std::fill(rc + v0 * D, rc + (v0 + L) * D, Cap(0));
      std::fill(tr + v0, tr + v0 + L, int64_t(0));
      return;
    }
    std::fill(rc + v0 * D, rc + (v0 + px) * D, Cap(0));
    std::fill(rc + (v0 + px + W) * D, rc + (v0 + L) * D, Cap(0));
    std::fill(tr + v0, tr + v0 + px, int64_t(0));
    std::fill(tr + v0 + px + W, tr + v0 + L, int64_t(0));
    // one pass over the row: the arcs node-major and, for auto, the sums (int32 arcs: per node in 64-bit
    // integers; int64 arcs in double); the terminal capacity of a node counts only up to its n-link
    // capacity: beyond it, it fixes the node's side and leaves straight through its terminal arcs, whatever
    // the solver (seed constraints); volumes sum their free nodes only (hpf_ratio)
    double row_t = 0, row_n = 0;
    int64_t row_t32 = 0, row_n32 = 0;
    const int64_t* srow = source + q0;
    const Cap* krow = sink + q0;
    int64_t* trow = tr + v0 + px;
    Cap* rrow = rc + (v0 + px) * D;
    for (int64_t x = 0; x < W; ++x) trow[x] = torchcut::net_terminal(srow[x], static_cast<int64_t>(krow[x]));
    if (mask_only && orient >= 2) {
      int64_t side = 0;
      for (int64_t x = 0; x < W; ++x) side += (trow[x] > 0) - (trow[x] < 0);
      sides[part] += side;
    }
    for (int d = 0; d < D; ++d) {
      const Cap* c = caps + d * n + q0;
      for (int64_t x = 0; x < W; ++x) rrow[x * D + d] = c[x];
    }
    if (!count) return;
    for (int64_t x = 0; x < W; ++x) {
      const int64_t t = trow[x] < 0 ? -trow[x] : trow[x];
      const Cap* r = rrow + x * D;
      if constexpr (sizeof(Cap) == 4) {
        int64_t s = 0;
        for (int d = 0; d < D; ++d) s += r[d];
        if (!free_only || t < s) {
          row_n32 += s;
          row_t32 += t < s ? t : s;
        }
      } else {
        double s = 0;
        for (int d = 0; d < D; ++d) s += static_cast<double>(r[d]);
        if (!free_only || static_cast<double>(t) < s) {
          row_n += s;
          row_t += std::min(static_cast<double>(t), s);
        }
      }
    }
    tsums[part] += row_t + static_cast<double>(row_t32);
    nsums[part] += row_n + static_cast<double>(row_n32);
  });
  double nsum = 0, tsum = 0;
  for (size_t p = 0; p < nsums.size(); ++p) nsum += nsums[p], tsum += tsums[p];
  // Arcs into the border are closed whatever the caller's layout holds there: no search ever steps
  // onto a border node, whose own neighbours may lie outside the padded array.
  auto close_into = [&](int64_t v) {
    for (int d = 0; d < D; ++d) {
      const int64_t j = v + delta[d];
      if (j >= 0 && j < lay.n_pad) rc[j * D + sis[d]] = Cap(0);
    }
  };
  lay.for_each_row([&](int64_t v0, int64_t q0) {
    if (q0 < 0) {
      for (int64_t v = v0; v < v0 + L; ++v) close_into(v);
      return;
    }
    for (int64_t v = v0; v < v0 + px; ++v) close_into(v);
    for (int64_t v = v0 + px + W; v < v0 + L; ++v) close_into(v);
  });
  const auto Th = std::chrono::steady_clock::now();
  // auto: the sum over both arcs above counts a one-way pair (an arc whose reverse is 0, as in the
  // expansion moves of stereo) fully; only the part of a pair that flows both ways counts, the smaller
  // arc twice. That sum is never larger, so it is taken (one more read of the arcs) only where the first
  // one passes the threshold.
  const double thr = 2.0 * hpf_ratio(lay.shape.size(), D, parts > 1) * tsum;
  bool hpf = algorithm == 1 || (count && nsum > thr);
  bool hand = false;  // auto, 2D, below handover_ratio: split_hpf may hand ranges over
  if (hpf && count) {
    double both = 0;
    lay.for_each_row([&](int64_t v0, int64_t q0) {
      if (q0 < 0) return;
      for (int64_t v = v0 + px; v < v0 + px + W; ++v) {
        const Cap* r = rc + v * D;
        if (free_only) {  // a fixed node counts nothing (as in the load pass)
          double all = 0;
          for (int d = 0; d < D; ++d) all += static_cast<double>(r[d]);
          if (static_cast<double>(tr[v] < 0 ? -tr[v] : tr[v]) >= all) continue;
        }
        double s = 0;
        for (int d = 0; d < D; ++d)  // each pair once, from the node it leaves in a direction d < sis[d]
          if (d < sis[d]) s += 2.0 * static_cast<double>(std::min(r[d], rc[(v + delta[d]) * D + sis[d]]));
        both += s;
      }
    });
    hpf = both > thr;
    hand = both < 2.0 * handover_ratio(lay.shape.size(), D) * tsum;
  }
  // The cut's orientation. Pseudoflow's time depends on it (Boykov-Kolmogorov's does not): it starts from
  // the nodes with excess, and where they are most of the grid it runs up to 2.5x longer than on the
  // mirrored graph (arcs reversed, source and sink swapped). For a mask alone, the rule mirrors when the
  // nodes with excess outnumber those with a deficit by more than a fifth of the nodes (orient 2; 3 also
  // runs pseudoflow then, whatever `algorithm` asks): the canonical source side of the given graph is
  // the complement of the mirrored graph's minimal source side (grid_source_side). docs/design.md, "The
  // cut's orientation"; the fifth: docs/performance.md.
  int64_t excess_less_deficit = 0;
  for (auto v : sides) excess_less_deficit += v;
  const bool rule = mask_only && orient >= 2 && 5 * excess_less_deficit > n;
  if (orient == 3 && rule) hpf = true;
  // The race (auto, one uncut 2D item, a thread to spare: `rival`, a ratio below race_band times the
  // threshold): Boykov-Kolmogorov and pseudoflow on two copies of the residual network, on two threads;
  // the first done stops the other and its state is the result. Below that band no feature measured
  // tells the faster one (docs/performance.md, "`auto` on random energies"); the race costs a copy, a
  // core, and the two solvers' contention for the memory (a winner 5-20% slower than alone).
  const bool race = rival != nullptr && count && !(orient == 3 && rule) &&
                    nsum < race_band(lay.shape.size()) * thr;
  // One algorithm on one work buffer, to the canonical side in its `reach`; false when stopped by `stop`.
  struct Run {
    BKStats s;
    HPFStats hs;
    bool hpf = false, mirrored = false;
    std::chrono::steady_clock::time_point T0, T1;
  };
  auto solve_on = [&](GridWork<Cap>& ww, bool use_hpf, const std::atomic<bool>* stop, Run& run) -> bool {
    Cap* rw = ww.rc.get();
    int64_t* tw = ww.tr.get();
    run.hpf = use_hpf;
    run.mirrored = use_hpf && mask_only && (orient == 1 || rule);
    if (run.mirrored) {  // the residual network of the mirrored graph, in place
      rows([&](int64_t v0, int64_t q0, int64_t) {
        if (q0 < 0) return;
        for (int64_t v = v0 + px; v < v0 + px + W; ++v) {
          tw[v] = -tw[v];
          // each pair once, from the node it leaves in a direction d < sis[d]; a pair with a border node
          // is 0 both ways (arcs into the border are closed, the border's own arcs were never loaded)
          Cap* r = rw + v * D;
          for (int d = 0; d < D; ++d)
            if (d < sis[d]) std::swap(r[d], rw[(v + delta[d]) * D + sis[d]]);
        }
      });
    }
    std::vector<int64_t> handover;  // split_hpf stopped ranges: split_bk's rows (else empty)
    if (use_hpf) {  // pseudoflow first (cpu_hpf.h)
      if (parts > 1) {
        run.hs = split_hpf<Cap>(rw, tw, lay, delta, sis, parts, hand, handover);
      } else {
        HPF<Cap> pf(lay.n_pad, D, rw, tw, delta.data(), sis.data());
        run.hs = pf.run(stop);
        if (!pf.complete()) return false;
      }
    }
    run.T0 = run.T1 = std::chrono::steady_clock::now();
    uint8_t* reach = ww.reach.get();
    // After pseudoflow, one search from the deficits proves the flow maximum when it meets no excess (the
    // usual case) and is then the canonical sink side (from the excesses, on the mirrored graph);
    // otherwise Boykov-Kolmogorov finishes (at once where split_hpf handed ranges over, on the rows it
    // chose).
    auto side = [&] {
      return run.mirrored ? grid_source_side<Cap>(lay.n_pad, D, rw, tw, delta.data(), reach, ww.nxt.get())
                          : grid_sink_side<Cap>(lay.n_pad, D, rw, tw, delta.data(), sis.data(), reach, ww.nxt.get());
    };
    if (!use_hpf || !handover.empty() || !side()) {
      GridTopo<Cap> g{rw, ww.st.get(), delta.data(), sis.data(), D};
      BK<GridTopo<Cap>> bk(g, lay.n_pad, tw, ww.nxt.get(), ww.mk.get());
      bk.stop_when(stop);
      if (parts > 1) run.s = split_bk<Cap>(g, bk, lay, tw, ww, delta, handover.empty() ? even_rows(lay, parts) : handover);
      else run.s = bk.run();
      if (bk.stopped()) return false;
      run.T1 = std::chrono::steady_clock::now();
      if (run.mirrored) {
        const bool maximum = side();  // no path from an excess to a deficit is left
        TORCH_CHECK(maximum, "torchcut_cpu.grid_solve: internal error: a path is open after the search");
      } else {
        bk.sink_side(reach);
      }
    }
    return true;
  };
  Run run;
  GridWork<Cap>* done = &w;  // the buffer that holds the result
  if (!race) {
    solve_on(w, hpf, nullptr, run);
  } else {
    rival->resize(lay.n_pad, D);
    std::copy(rc, rc + lay.n_pad * D, rival->rc.get());
    std::copy(tr, tr + lay.n_pad, rival->tr.get());
    std::atomic<bool> stop{false};
    std::atomic<int> first{-1};  // 0: Boykov-Kolmogorov, 1: pseudoflow
    Run rival_run;
    // item 0 first: on a team of one thread (nested in a parallel region) Boykov-Kolmogorov runs to the
    // end and pseudoflow stops at once
    parallel_items(2, 2, [&](int64_t who, int64_t) {
      if (who == 1) {
        try {
          if (!solve_on(*rival, true, &stop, rival_run)) return;
        } catch (...) {  // (out of memory) Boykov-Kolmogorov runs on alone
          return;
        }
      } else {
        try {
          if (!solve_on(w, false, &stop, run)) return;
        } catch (...) {
          stop.store(true);
          throw;
        }
      }
      int none = -1;
      if (first.compare_exchange_strong(none, static_cast<int>(who))) stop.store(true);
    });
    TORCH_CHECK(first.load() >= 0, "torchcut_cpu.grid_solve: internal error: neither algorithm of the race ended");
    if (first.load() == 1) run = rival_run, done = rival;
  }
  hpf = run.hpf;
  const bool mirrored = run.mirrored;
  const HPFStats hs = run.hs;
  const BKStats s = run.s;
  const auto T0 = run.T0, T1 = run.T1;
  rc = done->rc.get();
  tr = done->tr.get();
  uint8_t* reach = done->reach.get();
  const auto T2 = std::chrono::steady_clock::now();

  rows([&](int64_t v0, int64_t q0, int64_t) {
    if (q0 < 0) return;
    if (mask_only) {  // the caller wants the cut alone: no residuals, excess or sink capacities
      for (int64_t x = 0; x < W; ++x) mask[q0 + x] = !reach[v0 + px + x];
      return;
    }
    for (int64_t x = 0; x < W; ++x) {
      const int64_t q = q0 + x, v = v0 + px + x;
      const int64_t t = tr[v];
      excess[q] = torchcut::net_source(t);
      sink_out[q] = static_cast<Cap>(torchcut::net_sink(t));
      mask[q] = !reach[v];
      const Cap* r = rc + v * D;
      for (int d = 0; d < D; ++d) res[d * n + q] = r[d];
    }
  });
  const auto T3 = std::chrono::steady_clock::now();
  auto us = [](auto a, auto b) { return std::chrono::duration_cast<std::chrono::microseconds>(b - a).count(); };
  torchcut::CpuStats out;
  out.flow = s.flow, out.augmentations = s.augmentations, out.orphans = s.orphans, out.growths = s.growths;
  out.load_us = us(Ts, Th), out.solve_us = us(T0, T1), out.cut_us = us(T1, T2), out.store_us = us(T2, T3);
  out.mergers = hs.mergers, out.hpf_relabels = hs.relabels, out.hpf_us = hpf ? us(Th, T0) : 0;
  out.pseudoflow_items = hpf, out.handovers = hs.handovers, out.mirrored = mirrored, out.races = race;
  out.write(stats);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> grid_solve(
    const at::Tensor& caps_, const at::Tensor& source_, const at::Tensor& sink_, at::IntArrayRef shape_,
    at::IntArrayRef offsets, int64_t threads, int64_t algorithm, bool mask_only, int64_t orient) {
  TORCH_CHECK(algorithm >= 0 && algorithm <= 2, "torchcut_cpu.grid_solve: algorithm: expected 0 (Boykov-Kolmogorov), "
              "1 (pseudoflow, then Boykov-Kolmogorov) or 2 (auto), got ", algorithm);
  const int64_t nd = static_cast<int64_t>(shape_.size());
  TORCH_CHECK(nd >= 1 && nd <= 3, "torchcut_cpu.grid_solve: shape: expected 1 to 3 dims, got ", nd);
  TORCH_CHECK(offsets.size() % nd == 0 && !offsets.empty(), "torchcut_cpu.grid_solve: offsets: expected K * ", nd,
              " values, got ", offsets.size());
  const int64_t K = static_cast<int64_t>(offsets.size()) / nd, D = 2 * K;
  TORCH_CHECK(D <= 124, "torchcut_cpu.grid_solve: offsets: expected at most 62, got ", K);
  TORCH_CHECK(caps_.device().is_cpu() && source_.device().is_cpu() && sink_.device().is_cpu(),
              "torchcut_cpu.grid_solve: expected CPU tensors");
  TORCH_CHECK(caps_.scalar_type() == at::kInt || caps_.scalar_type() == at::kLong,
              "torchcut_cpu.grid_solve: caps: expected int32 or int64, got ", caps_.scalar_type());
  TORCH_CHECK(sink_.scalar_type() == caps_.scalar_type(), "torchcut_cpu.grid_solve: sink: expected the dtype of caps");
  TORCH_CHECK(source_.scalar_type() == at::kLong, "torchcut_cpu.grid_solve: source: expected int64");
  std::vector<int64_t> shape(shape_.begin(), shape_.end());
  int64_t n = 1;
  for (auto s : shape) n *= s;
  TORCH_CHECK(caps_.dim() == nd + 2 && caps_.size(1) == D, "torchcut_cpu.grid_solve: caps: expected [B, ", D,
              ", *shape], got ", caps_.sizes());
  const int64_t B = caps_.size(0);
  TORCH_CHECK(source_.numel() == B * n && sink_.numel() == B * n && caps_.numel() == B * D * n,
              "torchcut_cpu.grid_solve: source/sink: expected ", B * n, " entries");
  const at::Tensor caps = caps_.contiguous(), source = source_.contiguous(), sink = sink_.contiguous();
  std::vector<int64_t> pad(nd, 0), pstride(nd);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t a = 0; a < nd; ++a) pad[a] = std::max<int64_t>(pad[a], std::abs(offsets[k * nd + a]));
  const Layout lay(shape, pad);
  TORCH_CHECK(lay.n_pad < std::numeric_limits<int32_t>::max(), "torchcut_cpu.grid_solve: an item of ", lay.n_pad,
              " nodes (with its border) is too large for the CPU solver; expected fewer than 2**31 - 1");
  int64_t stride = 1;
  for (int64_t a = nd - 1; a >= 0; --a) pstride[a] = stride, stride *= lay.pshape[a];
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
  // mask_only: the residuals, excess and sink capacities are not written (empty tensors)
  auto res = mask_only ? at::empty({0}, caps.options()) : huge_tensor(caps.sizes(), caps.scalar_type());
  auto excess = at::empty({mask_only ? 0 : B, n}, source.options());
  auto sink_out = at::empty({mask_only ? 0 : B, n}, sink.options());
  if (threads <= 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  AT_DISPATCH_INDEX_TYPES(caps.scalar_type(), "torchcut_cpu.grid_solve", [&] {
    using Cap = index_t;
    // one item: its rows split over the threads (split_parts); an uncut 2D one under auto with a thread
    // to spare may race Boykov-Kolmogorov against pseudoflow (solve_grid_item, race_band), from kRaceNodes
    // nodes: it takes a second buffer
    const int64_t parts = B == 1 ? split_parts(lay, delta, threads) : 1;
    const bool race = algorithm == 2 && B == 1 && parts == 1 && threads >= 2 && n >= kRaceNodes &&
                      race_band(shape.size()) > 0;
    PooledWork<GridWork<Cap>> work(std::max<int64_t>(race ? 2 : 1, std::min(threads, B)));
    const Cap* c = caps.data_ptr<Cap>();
    const Cap* s = sink.data_ptr<Cap>();
    const int64_t* src = source.data_ptr<int64_t>();
    Cap* r = res.data_ptr<Cap>();
    Cap* so = sink_out.data_ptr<Cap>();
    int64_t* e = excess.data_ptr<int64_t>();
    bool* m = mask.data_ptr<bool>();
    int64_t* st = stats.data_ptr<int64_t>();
    parallel_items(B, threads, [&](int64_t b, int64_t t) {
      // mask_only: the result tensors are empty, so no pointers into them
      solve_grid_item<Cap>(work[t], lay, c + b * D * n, src + b * n, s + b * n, mask_only ? nullptr : r + b * D * n,
                           mask_only ? nullptr : e + b * n, mask_only ? nullptr : so + b * n, m + b * n,
                           st + b * kStats, delta, sis, algorithm, parts, mask_only, orient,
                           race ? &work[1] : nullptr);
    });
  });
  return {mask, stats, res, excess, sink_out};
}

// The registered signatures: options [threads, algorithm, mask_only, orient] (layouts.h,
// TORCHCUT_GRID_CPU_OPTIONS).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> grid_solve_op(
    at::Tensor caps, at::Tensor source, at::Tensor sink, at::IntArrayRef shape, at::IntArrayRef offsets,
    at::IntArrayRef options) {
  TORCH_CHECK(options.size() <= 4,
              "torchcut.grid_solve (CPU): options: expected [threads, algorithm, mask_only, orient], got ",
              options.size(), " values");
  const int64_t threads = options.size() > 0 ? options[0] : 0;
  const int64_t algorithm = options.size() > 1 ? options[1] : 2;
  const int64_t mask_only = options.size() > 2 ? options[2] : 0;
  const int64_t orient = options.size() > 3 ? options[3] : 2;
  TORCH_CHECK(mask_only == 0 || mask_only == 1, "torchcut.grid_solve (CPU): mask_only: expected 0 or 1, got ",
              mask_only);
  TORCH_CHECK(orient >= 0 && orient <= 3, "torchcut.grid_solve (CPU): orient: expected 0 (as given), 1 (mirrored), "
              "2 (auto) or 3 (auto, pseudoflow where mirrored), got ", orient);
  return grid_solve(caps, source, sink, shape, offsets, threads, algorithm, mask_only == 1, orient);
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("grid_solve", &torchcut_cpu::grid_solve_op);
}
