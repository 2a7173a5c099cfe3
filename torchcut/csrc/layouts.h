// The names of every option list and counter vector that crosses the op boundary, written once.
//
// Plain C++ (no torch, no CUDA headers): the CUDA host code builds its Options struct from these lists,
// every solver fills its counters through a struct built from them (GridCudaStats, CpuStats,
// CsrCudaStats below: a field per name, written out in the list's order), and the op
// torch.ops.torchcut.names returns them to Python, so no list is kept equal to another by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// CUDA grid solver options, in the order of the op's `options` list (0 = the default).
#define TORCHCUT_GRID_CUDA_OPTIONS(X)                                                                  \
  X(tile_x) X(tile_y) X(tile_z) X(rounds) X(push_launches) X(max_cycles) X(profile) X(persist)        \
  X(bfs_tile_x) X(bfs_tile_y) X(bfs_tile_z) X(push_tail) X(item_skip) X(repair) X(push_chain) X(small)

// CUDA grid solver counters (one vector for the whole batch), `status` last.
#define TORCHCUT_GRID_CUDA_STATS(X)                                                                    \
  X(global_relabels) X(bfs_launches) X(push_launches) X(host_syncs) X(rounds_per_launch) X(tile_x)     \
  X(tile_y) X(tile_z) X(bfs_tile_x) X(bfs_tile_y) X(bfs_tile_z) X(bfs_us) X(push_us) X(bfs_visits)     \
  X(bfs_depth) X(push_visits) X(push_visit_us) X(push_rounds) X(bfs_pop_us) X(bfs_relax_us)           \
  X(bfs_passes) X(repairs) X(chained_launches) X(one_launch) X(sweeps) X(status)

// CPU grid solver options (mask_only 1: the op writes the source side alone; its residual, excess and sink
// outputs are empty; orient: the orientation pseudoflow runs in for a mask alone, by code below).
#define TORCHCUT_GRID_CPU_OPTIONS(X) X(threads) X(algorithm) X(mask_only) X(orient)

// The `orient` codes: the graph as given, mirrored, auto (mirrored where the rule says so), and auto with
// pseudoflow wherever the rule mirrors, whatever `algorithm` asks (grid_solve.cpp, "The cut's orientation").
#define TORCHCUT_GRID_CPU_ORIENTS(X) X(given) X(mirrored) X(auto) X(auto-pseudoflow)

// CPU grid algorithms, by code (the `algorithm` option).
#define TORCHCUT_GRID_CPU_ALGORITHMS(X) X(boykov-kolmogorov) X(pseudoflow) X(auto)

// CPU counters, one row per batch item (grids) or one row (CSR): Boykov-Kolmogorov's, its timings, then
// the pseudoflow phase's (grids only).
#define TORCHCUT_CPU_STATS(X)                                                                          \
  X(flow) X(augmentations) X(orphans) X(growths) X(load_us) X(solve_us) X(cut_us) X(store_us)          \
  X(mergers) X(hpf_relabels) X(hpf_us) X(pseudoflow_items) X(handovers) X(mirrored) X(races)

// CUDA CSR solver options and counters (`status` last).
#define TORCHCUT_CSR_CUDA_OPTIONS(X) X(period) X(iters) X(max_cycles)
#define TORCHCUT_CSR_CUDA_STATS(X) X(cycles) X(rounds) X(bfs_levels) X(last_bfs_depth) X(status)

namespace torchcut {

#define TORCHCUT_COUNT_(name) +1
constexpr int kGridCudaOptions = 0 TORCHCUT_GRID_CUDA_OPTIONS(TORCHCUT_COUNT_);
constexpr int kGridCudaStats = 0 TORCHCUT_GRID_CUDA_STATS(TORCHCUT_COUNT_);
constexpr int kCpuStats = 0 TORCHCUT_CPU_STATS(TORCHCUT_COUNT_);
constexpr int kCsrCudaStats = 0 TORCHCUT_CSR_CUDA_STATS(TORCHCUT_COUNT_);
#undef TORCHCUT_COUNT_

// A counter vector as a struct: one int64 field per name of LIST (0 unless set), and write(out), which
// stores them in the list's order, the order torch.ops.torchcut.names gives Python.
#define TORCHCUT_FIELD_(name) int64_t name = 0;
#define TORCHCUT_STORE_(name) *out++ = name;
#define TORCHCUT_COUNTERS_(Name, LIST, count)                                                          \
  struct Name {                                                                                        \
    static constexpr int kCount = count;                                                               \
    LIST(TORCHCUT_FIELD_)                                                                              \
    void write(int64_t* out) const { LIST(TORCHCUT_STORE_) }                                           \
  };
TORCHCUT_COUNTERS_(GridCudaStats, TORCHCUT_GRID_CUDA_STATS, kGridCudaStats)
TORCHCUT_COUNTERS_(CpuStats, TORCHCUT_CPU_STATS, kCpuStats)
TORCHCUT_COUNTERS_(CsrCudaStats, TORCHCUT_CSR_CUDA_STATS, kCsrCudaStats)
#undef TORCHCUT_COUNTERS_
#undef TORCHCUT_STORE_
#undef TORCHCUT_FIELD_

// The list called `table` (the op torch.ops.torchcut.names); empty for an unknown name.
inline std::vector<std::string> names(const std::string& table) {
#define TORCHCUT_NAME_(name) #name,
  if (table == "grid_cuda_options") return {TORCHCUT_GRID_CUDA_OPTIONS(TORCHCUT_NAME_)};
  if (table == "grid_cuda_stats") return {TORCHCUT_GRID_CUDA_STATS(TORCHCUT_NAME_)};
  if (table == "grid_cpu_options") return {TORCHCUT_GRID_CPU_OPTIONS(TORCHCUT_NAME_)};
  if (table == "grid_cpu_algorithms") return {TORCHCUT_GRID_CPU_ALGORITHMS(TORCHCUT_NAME_)};
  if (table == "grid_cpu_orients") return {TORCHCUT_GRID_CPU_ORIENTS(TORCHCUT_NAME_)};
  if (table == "cpu_stats") return {TORCHCUT_CPU_STATS(TORCHCUT_NAME_)};
  if (table == "csr_cuda_options") return {TORCHCUT_CSR_CUDA_OPTIONS(TORCHCUT_NAME_)};
  if (table == "csr_cuda_stats") return {TORCHCUT_CSR_CUDA_STATS(TORCHCUT_NAME_)};
#undef TORCHCUT_NAME_
  return {};
}

}  // namespace torchcut
