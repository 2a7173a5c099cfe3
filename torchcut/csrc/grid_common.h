// Shared declarations of the grid push-relabel extension (torchcut_grid).
#pragma once

#include <ATen/ATen.h>

#include <tuple>
#include <vector>

namespace torchcut_grid {

// Most directions (2K) a grid may have on the GPU: the BFS packs one bit per direction in 64 bits.
constexpr int kMaxDirs = 62;
// Height of nodes that cannot reach the sink (also the BFS's "unreached").
constexpr int kInf = 1 << 30;

// Outcome of a solve, the last entry of the stats (the op returns instead of throwing: an exception
// thrown inside the op was measured to crash the process on the GPU machine, so the Python layer raises).
constexpr int kStatusOk = 0, kStatusCycles = 1, kStatusStalled = 2;

// Option slots of the `solve` op (0 = default).
enum Opt {
  kTileX = 0,
  kTileY,
  kTileZ,
  kRounds,        // local push/relabel rounds per push launch
  kPushLaunches,  // push launches between two global relabels (0 = adaptive)
  kBfsBatch,      // BFS launches between two host reads of the convergence flag
  kMaxCycles,     // give up after this many global relabels
  kBfsNodes,      // nodes per thread of the BFS kernel (1, 4 or 8)
  kProfile,       // time BFS and push phases with events (adds synchronisations)
  kPushBlocks,    // 1: push kernel compiled for 1 block/SM (more registers); else 2 blocks/SM
  kPersist,       // blocks per SM of the persistent push/BFS grids (0: 2 and 4; -1: one block per tile)
  kPipeline,      // n > 0: n pushes queued (guarded) behind each read-back; 0 or -1: synchronous host loop
  kWalk,          // -1: blocks per item walk over its tiles (v4); 0 or 1: one flat walk over all items' tiles
  kBfsScan,       // -1: BFS tiles relax by Jacobi sweeps (v1-v5); else by segmented scans along each axis (v6)
  kBfsTileX,      // BFS tile extent of the scan BFS (powers of two, at most 32 each, 32 to 1024 nodes)
  kBfsTileY,
  kBfsTileZ,
  kBfsQueue,      // -1: the scan BFS runs as launches over tiles until one changes nothing; else a worklist
  kExp,           // bit mask of experimental paths under measurement (0: none)
  kPushTail,      // push launches per relabel when few tiles are active (0: default, -1: no tail rule)
  kPushWalk,      // -1: push blocks walk over the tiles in a fixed stride (v5); else they take listed active tiles
  kNumOpts
};

// Runs push-relabel phase one in place. Returns (source-side mask [B, N] bool, stats int64).
std::tuple<at::Tensor, at::Tensor> solve_cuda(at::Tensor caps, at::Tensor excess, at::Tensor sink,
                                              const std::vector<int64_t>& shape,
                                              const std::vector<int64_t>& offsets,
                                              const std::vector<int64_t>& opts);

}  // namespace torchcut_grid
