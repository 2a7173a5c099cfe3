// Shared declarations of the CUDA grid push-relabel solver: plain C++ and the CUDA
// runtime only, no torch headers, so that the kernel files (grid_push*.cu, grid_bfs.cu) and the host
// loop (grid_solve.cpp) compile fast and in parallel; only the bindings (grid_ops.cpp) include torch.
//
// Files: grid_device.cuh (device helpers shared by the kernels), grid_push.cuh + grid_push_i32.cu /
// grid_push_i64.cu (push kernels, one file per capacity type), grid_bfs.cu (global relabel: the
// worklist BFS, its init and seeds, the active count, the output mask), grid_small.cu (items of up to
// kSmallNodes nodes, one block each, in one launch), grid_solve.cpp (geometry and the host loop, and the
// choice of grid_small.cu), grid_ops.cpp (the ops: argument checks, buffers, torch.ops.torchcut.grid_solve_).
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "../layouts.h"

#define TC_CUDA_CHECK(expr) TORCHCUT_CUDA_CHECK("torchcut_grid", expr)

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchcut_grid {

// Most directions (2K) a grid may have on the GPU: the BFS packs one bit per direction in 64 bits.
constexpr int kMaxDirs = 62;
// Height of nodes that cannot reach the sink (also the BFS's "unreached").
constexpr int kInf = 1 << 30;

// Outcome of a solve, the last entry of the stats (the op returns instead of throwing: an exception
// thrown inside the op was measured to crash the process on the GPU machine, so the Python layer raises).
constexpr int kStatusOk = 0, kStatusCycles = 1, kStatusStalled = 2;

// The tuning options of the solver, in the order of the op's `options` list (layouts.h, which also gives
// their names to Python; torchcut/solvers/cuda.py documents them for users). 0 always means "the default".
//   tile_x/y/z      push tile extent (default 2D 32x16, 32x8 beyond 8 dirs; 3D 8x8x8, 8x8x4 beyond 8 dirs)
//   rounds          local push/relabel rounds per tile visit (default 16)
//   push_launches   push launches between two global relabels (default: half the BFS depth in tiles, at most 4
//                   on 4/6-connected grids, at least 6 on 18/26-connected 3D)
//   max_cycles      give up (status kStatusCycles) after this many global relabels
//   profile         1: events and per-visit cycle counters; 2: also a trace line per cycle
//   persist         blocks per SM of the persistent push/BFS grids; -1: one block per tile
//   bfs_tile_x/y/z  BFS tile extent (powers of two <= 32, 32 to 1024 nodes; default 2D 32x16, 3D 8x8x8)
//   push_tail       push launches per relabel once at most a quarter as many tiles are active as there are
//                   push blocks (default: the BFS depth in tiles, 6 to 24; -1: off)
//   item_skip       batches: an item left with no active node is left out of every later BFS; -1: never
//   repair          later global relabels may repair the last one's distances (see grid_solve.cpp)
//   push_chain      chained push launches (blocks also visit the tiles that flow enters during the launch);
//                   see grid_solve.cpp for the default rule; n > 0: always, factor n; -1: never
//   small           items of at most kSmallNodes nodes and kSmallDirs directions solved in one launch, a
//                   thread block each (grid_small.cu; default, where the device's shared memory holds
//                   them and no other option is set); -1: never
struct Options {
#define TORCHCUT_FIELD_(name) int64_t name = 0;
  TORCHCUT_GRID_CUDA_OPTIONS(TORCHCUT_FIELD_)
#undef TORCHCUT_FIELD_
  static constexpr int kCount = torchcut::kGridCudaOptions;
  // From the op's list (missing entries: 0 = default).
  static Options from(const std::vector<int64_t>& v) {
    Options o;
    int k = 0;
#define TORCHCUT_READ_(name) if (k < (int)v.size()) o.name = v[k]; ++k;
    TORCHCUT_GRID_CUDA_OPTIONS(TORCHCUT_READ_)
#undef TORCHCUT_READ_
    return o;
  }
};

// Counters returned by the op: a field per name of TORCHCUT_GRID_CUDA_STATS (layouts.h), written out in
// that list's order.
using Stats = torchcut::GridCudaStats;
constexpr int kNumStats = Stats::kCount;

struct Geom {
  int X, Y, Z;     // grid extent, x fastest
  long long N;     // nodes per item
  int TX, TY, TZ;  // tile extent
  int nTX, nTY, nTZ;
  int T;  // tiles per item
  int D;  // directions
  int K;  // offsets (D / 2)
  int bfs_skip;  // every offset reaches at most the 3x3x3 neighbouring tiles
  int dx[kMaxDirs], dy[kMaxDirs], dz[kMaxDirs];
  int slin[kMaxDirs];        // linear offset inside a tile
  long long glin[kMaxDirs];  // linear offset in the grid
  // Push: the tile's heights plus a halo of px/py/pz nodes on each side (the box) sit in shared memory,
  // so that a local round never waits on a global load. box == 0 (offsets longer than 2): no halo, the
  // heights of other tiles are read from global memory.
  int box, px, py, pz, BX, BY, boxN;
  int boff[kMaxDirs];  // linear offset in the box
  // Scan BFS: shared arrays with rows padded to SX = TX + 1 (fewer bank conflicts in the y/z passes).
  int SX;
  int plin[kMaxDirs];        // linear offset in the padded layout
  int axm[3], axp[3];        // direction of the unit step -1 / +1 along x, y, z (-1: none)
  unsigned long long other;  // directions that the axis scans do not cover (diagonals, long offsets)
  // 2D diagonals: direction of the step (-1, -1) / (+1, +1) (dgm[0] / dgp[0]) and (+1, -1) / (-1, +1)
  // (dgm[1] / dgp[1]), -1: none; other_diag: other without them (the 32 x 16 BFS tile scans diagonals)
  int dgm[2], dgp[2];
  unsigned long long other_diag;
};

// Slots of the solver's counter array (long long): hot counters of the queue BFS sit 16 slots apart.
constexpr int kActive = 1, kActiveTiles = 2, kProf = 8, kHead = 32, kTail = 48, kPending = 64, kMaxGen = 80,
              kVisits = 96, kStalled = 112, kPushQueue = 120 /* two quads: 120-123, 124-127 */, kSlots = 128;

// Worklist of the queue BFS (one launch per global relabel, see bfs_queue_kernel in grid_bfs.cu).
// Tile states: kIdle, kQueued (in the ring), kRunning (a block relaxes it), kDirty (running, and a
// neighbour changed since it started: it goes back into the ring when it finishes). So a tile is never
// relaxed by two blocks at once, and every change reaches a relaxation that starts after it.
constexpr int kIdle = 0, kQueued = 1, kRunning = 2, kDirty = 3;
struct Work {
  int* state;                 // [B * T] tile states (bfs_init_kernel sets kQueued on the seed tiles)
  long long* ring;            // tile ids, -1 = empty slot; capacity a power of two >= 4 (T * B + 4096)
  unsigned long long mask;    // capacity - 1
  unsigned long long* head;   // next slot to take
  unsigned long long* tail;   // next slot to fill
  long long* pending;         // tiles queued or running; 0 = the BFS has converged
  long long* stalled;         // set when a block waited implausibly long (turned into an error on the host)
  int* gen;                   // [B * T] wavefront generation of the tile's latest enqueue
  long long* max_gen;         // deepest generation: the BFS depth in tiles (sets the push launches)
  long long* visits;          // tile relaxations, for the stats
  unsigned long long* prof;   // option profile: [3] pop cycles, [4] visit cycles, [5] passes (nullptr: off)
};

// Active nodes per item of a batch, from the last BFS (prev; 0 = the item is finished: later BFS leave
// it out) and from the current one (cur, zeroed by bfs_init_kernel, filled by count_kernel); two buffers
// that swap every cycle. Both nullptr: every item is relabelled every cycle (one item, or item_skip -1).
struct ItemCounts {
  const unsigned long long* prev = nullptr;
  unsigned long long* cur = nullptr;
  int items = 0;
};

// Whether launch_push has a chained variant for this grid: the 2D default tiles of 4 and 8 directions
// (the hard energies that chaining pays on; every other grid runs unchained).
inline bool push_chains(const Geom& G) {
  return (G.D == 4 || G.D == 8) && G.TX == 32 && G.TY == 16 && G.TZ == 1;
}

// Kernel launchers (grid_push_i32.cu / grid_push_i64.cu, grid_bfs.cu). CapT: int or long long;
// MaskT: uint32_t (at most 32 directions) or unsigned long long.
template <typename CapT>
void launch_push(cudaStream_t st, int blocks, int threads, size_t smem, CapT* caps, long long* excess, CapT* sink,
                 int* height, int* tile_active, const Geom& G, int rounds, int items, unsigned long long* prof,
                 unsigned long long* pq, long long* plist, int* touched, int chain, long long cap);
void launch_list(cudaStream_t st, const int* tile_active, unsigned long long* pq, long long* plist, long long total,
                 unsigned long long* other);
template <typename CapT, typename MaskT>
void launch_bfs_init(cudaStream_t st, int blocks, const CapT* caps, const CapT* sink, MaskT* mask, int* height,
                     const Geom& G, int items, int* seeds, long long* scal, const ItemCounts& ic, bool warm);
template <typename MaskT>
void launch_bfs_queue(cudaStream_t st, int blocks, int threads, const MaskT* mask, int* height, const Geom& G,
                      const Work& W);
// flags nullptr: queue the tiles bfs_init_kernel set to kQueued; else the tiles flagged there (cleared).
void launch_seed(cudaStream_t st, const Work& W, long long tiles, int* flags);
// Repaired relabel (Options::repair): queue the BFS tiles overlapping the push tiles flagged in touched
// (clearing them; G push geometry, GB BFS geometry), then the support pass over them (repair_queue_kernel),
// which flags in relax the tiles the relaxation (launch_seed + launch_bfs_queue) must start from.
void launch_repair_seed(cudaStream_t st, int* touched, long long push_tiles, const Geom& G, const Geom& GB,
                        const Work& W);
template <typename MaskT>
void launch_repair_queue(cudaStream_t st, int blocks, int threads, const MaskT* mask, int* height, const Geom& G,
                         const Work& W, int* relax);
void launch_count(cudaStream_t st, int items, const long long* excess, const int* height, int* tile_active,
                  unsigned long long* count, const Geom& G, const ItemCounts& ic);
void launch_mask(cudaStream_t st, int blocks, const int* height, bool* out, long long total);

// Small grids in one launch (grid_small.cu): at most this many nodes per item and directions.
constexpr long long kSmallNodes = 4096;
constexpr int kSmallDirs = 8;
// Shared memory of one block for an item of N nodes and D directions (cap_bytes: 4 or 8).
size_t small_smem_bytes(long long N, int D, int cap_bytes);
// Solves every item in place (one block each) and writes the mask; counters [items, 4] (zeroed first):
// global relabels, sweeps, pushes and the status of each item.
template <typename CapT>
void launch_small(cudaStream_t st, CapT* caps, long long* excess, CapT* sink, bool* out, const Geom& G, int items,
                  long long max_cycles, long long* counters);

// Memory the host loop asks the bindings for (torch's caching allocators).
struct Alloc {
  virtual void* device(size_t bytes) = 0;
  virtual void* pinned(size_t bytes) = 0;
  virtual ~Alloc() = default;
};

// The push geometry G and the BFS geometry GB of a grid (shape: 2 or 3 extents, offsets: K * ndim values)
// under the tile options; throws std::runtime_error on bad tiles.
void geometry(const std::vector<int64_t>& shape, const std::vector<int64_t>& offsets, const Options& opts, Geom& G,
              Geom& GB);

// One slab of a grid split along its outermost axis over several devices (grid_slab.cpp and
// grid_slab_kernels.cu).
// Planes of the outermost axis hold P nodes each. A ghost plane next to a real border plane stands for
// the neighbour's border plane: pushes into it are collected (slab_pack) and sent, what the neighbour
// pushed into its own ghost plane is added to the border plane here (slab_absorb), and its heights are
// the neighbour's border heights (a snapshot). `dirs` lists the directions whose arcs point from a ghost
// node back into the slab (slab_pack) or from a border node towards the neighbour (slab_absorb), in
// ascending order on both sides, so that the amounts of one direction meet at the same row.
struct SlabDirs {
  int n = 0;
  int d[kMaxDirs / 2];
};
// During the pushes a ghost node holds this residual sink capacity, so that flow entering it stops there:
// where the ghost plane shares a push tile with real planes, the kernel visits ghost nodes too, and a
// ghost node with excess would otherwise relabel above its tails and push the flow back (measured: a
// small grid livelocked). The ghost plane's sink capacities are zero during a global relabel.
template <typename CapT>
constexpr CapT kGhostSink = (CapT)(sizeof(CapT) == 4 ? 0x7fffffffLL : (1LL << 62));
// msg [n + 1, P] (CapT): rows 0..n-1 the ghost plane's residuals in dirs (then zeroed, as is its excess, and
// its sink capacity set back to kGhostSink), row n the heights of the border plane; the push tiles [t0, t1)
// (those holding only padding) are unflagged.
template <typename CapT>
void launch_slab_pack(cudaStream_t st, CapT* caps, long long* excess, CapT* sink, const int* height, long long N,
                      long long P, long long ghost, long long border, const SlabDirs& dirs, CapT* msg,
                      int* tile_active, long long t0, long long t1);
// n ints from p set to v.
void launch_slab_fill(cudaStream_t st, int* p, long long n, int v);
// The ghost plane's sink capacities: kGhostSink (on, for the pushes) or 0 (for a global relabel).
template <typename CapT>
void launch_slab_ghost_sink(cudaStream_t st, CapT* sink, long long P, long long ghost, bool on);
// The neighbour's message: its amounts added to the residuals in dirs and to the excess of the border
// plane, its heights into the ghost plane; border tiles with an active node are flagged for the next push.
template <typename CapT>
void launch_slab_absorb(cudaStream_t st, CapT* caps, long long* excess, int* height, int* tile_active, const Geom& G,
                        long long P, long long ghost, long long border, const SlabDirs& dirs, const CapT* msg);
// A round of the global relabel: the neighbour's border distances (dist [P]) into the ghost plane where
// lower; the BFS tiles of the border plane next to a lowered ghost node are flagged (flags), and changed
// counts the lowered nodes.
void launch_slab_dist(cudaStream_t st, int* height, int* flags, const Geom& GB, long long P, long long ghost,
                      long long border, const int* dist, long long* changed);

// Push-relabel phase one in place on caps [B, D, N], excess [B, N] (int64), sink [B, N]; writes the
// source-side mask (out [B * N]) and the counters (stats[kNumStats]). caps_bytes: 4 (int32) or 8.
// Throws std::runtime_error on a CUDA error or bad options; a limit hit is a status (Stats::status).
void solve(void* caps, int caps_bytes, long long* excess, void* sink, bool* out, const std::vector<int64_t>& shape,
           const std::vector<int64_t>& offsets, int64_t B, const Options& opts, cudaStream_t st, int sms, Alloc& alloc,
           int64_t* stats);

}  // namespace torchcut_grid
