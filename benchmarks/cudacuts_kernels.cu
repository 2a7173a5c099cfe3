// CUDA Cuts (Vineet and Narayanan, CVPR workshops 2008), written again as a benchmark peer of torchcut's
// grid solver. Not part of the library: benchmarks/cudacuts.py builds it with
// torch.utils.cpp_extension and calls torch.ops.torchcut_cudacuts.solve. The scheme, its stopping rules
// and every choice made where the sources are silent are described in that module's docstring; the
// numpy model there (simulate) performs exactly the same arithmetic, so the two can be compared.
//
// One 2D grid, int32 capacities, D = 4 or 8 directions (torchcut's GridGraph layout: caps[d][p] is the
// residual capacity of the arc p -> p + dirs[d]). One thread per node, thread blocks = 32 x 8 tiles of
// the image, the tile's heights (plus a one-node halo) in shared memory.
//
// Per iteration, two launches (the public code's kernel pair):
//   push:    an active node (mask 1) sends its excess first to the sink (height 1), then to each
//            neighbour whose height is exactly one lower, in a fixed order. It lowers its own residual
//            capacities and excess (only it writes those in this launch), and adds to the reverse arc
//            and to the neighbour's inflow with atomics.
//   relabel: every node folds its inflow into its excess, sets mask = 2 (no excess or no residual arc),
//            1 (an admissible arc under the heights it read) or 0, and writes its new height into the
//            other buffer: 1 next to the sink, else 1 + the lowest residual neighbour, at most N + 1.
// Heights are double-buffered: the push and the relabel of an iteration read one buffer, the relabel
// writes the other, and the buffers swap every iteration.
//
// mode 0 ("stochastic", the public demo's default) skips the tiles that the last activity check
// (every 11 iterations) found without a node of mask 1; mode 1 ("atomic") runs every tile. Both stop by
// the public code's rule (excess snapshot every 10 iterations, compared every 11). Mode 2 ("converge")
// runs every tile until a BFS from the sink reaches no node with excess (exact). Global relabels (BFS
// from the sink over residual arcs, one launch per level) run in mode 2, and in modes 0/1 only when
// asked (gr_every > 0). The cut: nodes that cannot reach the sink after an exact stop; otherwise the
// public code's labelling (BFS from the nodes with excess along residual arcs, not through nodes with
// residual sink capacity), or on request (label 1) the nodes that cannot reach the sink.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#define CC_CHECK(expr)                                                                                   \
  do {                                                                                                   \
    cudaError_t err__ = (expr);                                                                          \
    if (err__ != cudaSuccess)                                                                            \
      throw std::runtime_error(std::string("torchcut_cudacuts: CUDA error ") + cudaGetErrorString(err__) + \
                               " at " #expr);                                                            \
  } while (0)

namespace torchcut_cudacuts {

namespace {

constexpr int TX = 32, TY = 8;           // thread block = one 32 x 8 tile of the image (the public code's)
constexpr int NT = TX * TY;              // threads per block
constexpr int HX = TX + 2, HY = TY + 2;  // the tile with a one-node halo (corners too, for 8-connectivity)
constexpr int kFar = INT_MAX / 4;        // height / level of halo cells outside the grid: never matches
constexpr int kMaxD = 8;
constexpr int kGrMin = 32;               // converge mode: first global relabel, and the least period
constexpr int kMaxChunk = 512;           // BFS levels launched between two host reads, at most

// ctrl[] (device ints): BFS level counts in a ring of three, the first empty BFS level, nodes with
// excess reached by the sink BFS, blocks whose excess changed since the snapshot (activity check).
enum { kRing0 = 0, kDone = 3, kReached = 4, kChanged = 5, kCtrl = 8 };

// The directions in push order (left, up, right, down, then the diagonals): offsets, the caps index of
// the arc p -> p + (dy, dx), and the caps index of the reverse arc q -> q - (dy, dx), stored at q.
struct Dirs {
  int dy[kMaxD], dx[kMaxD], cap[kMaxD], rev[kMaxD];
};

// Stop reasons (stats[6]).
enum { kStopRule = 0, kStopIters = 1, kStopTime = 2, kStopExact = 3 };

__device__ __forceinline__ int tile_center() { return (threadIdx.y + 1) * HX + threadIdx.x + 1; }

// Load the block's tile of `src` with its halo into shared memory (all threads; ends with a barrier).
// LEVELS: the source holds BFS levels, mapped to heights (level > 0 -> level, else hmax + 1).
template <bool LEVELS>
__device__ __forceinline__ void load_tile(int* tile, const int* src, int H, int W, int hmax) {
  const int x0 = blockIdx.x * TX - 1, y0 = blockIdx.y * TY - 1;
  for (int i = threadIdx.y * TX + threadIdx.x; i < HX * HY; i += NT) {
    const int ty = i / HX, tx = i - ty * HX;
    const int y = y0 + ty, x = x0 + tx;
    int v = kFar;
    if (y >= 0 && y < H && x >= 0 && x < W) {
      v = src[(long long)y * W + x];
      if (LEVELS) v = v > 0 ? v : hmax + 1;
    }
    tile[i] = v;
  }
  __syncthreads();
}

__device__ __forceinline__ int block_id() { return blockIdx.y * gridDim.x + blockIdx.x; }

// -------------------------------------------------------------------------------------------- setup
// Terminal arcs netted as in the public code: excess = max(source - sink, 0), sink = max(sink - source, 0)
// (min(source, sink) flows straight through). Heights start at 1, masks at 0.
__global__ void init_kernel(const int* __restrict__ src, const int* __restrict__ snk0, int* exc, int* inflow, int* snk,
                            int* ha, int* hb, int8_t* mask, long long N) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= N) return;
  const long long d = (long long)src[i] - (long long)snk0[i];
  exc[i] = d > 0 ? (int)d : 0;
  snk[i] = d < 0 ? (int)(-d) : 0;
  inflow[i] = 0;
  ha[i] = 1;
  hb[i] = 1;
  mask[i] = 0;
}

// ----------------------------------------------------------------------------------- push / relabel
template <int D, bool STOCH>
__global__ void __launch_bounds__(NT) push_kernel(int* cap, int* exc, int* inflow, int* snk, const int* __restrict__ h,
                                                  const int8_t* __restrict__ mask, const int* __restrict__ active,
                                                  const Dirs dirs, int H, int W) {
  if (STOCH && active[block_id()] == 0) return;  // uniform over the block
  __shared__ int tile[HX * HY];
  load_tile<false>(tile, h, H, W, 0);
  const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
  if (x >= W || y >= H) return;
  const long long N = (long long)H * W;
  const long long p = (long long)y * W + x;
  if (mask[p] != 1) return;
  int e = exc[p];  // only this thread changes exc[p] here (arrivals go to inflow)
  if (e <= 0) return;
  const int c0 = tile_center();
  const int hp = tile[c0];
  int sent = 0;
  if (hp == 1) {
    const int s = snk[p];
    if (s > 0) {
      const int f = min(e, s);
      snk[p] = s - f;
      e -= f;
      sent += f;
    }
  }
#pragma unroll
  for (int j = 0; j < D; ++j) {
    if (e <= 0) break;
    int* cp = cap + dirs.cap[j] * N + p;
    const int c = *cp;
    if (c <= 0 || hp != tile[c0 + dirs.dy[j] * HX + dirs.dx[j]] + 1) continue;
    // Admissible: the neighbour q is one lower, so q cannot push back to p in this launch, and p is the
    // only writer of both arcs of the pair here.
    const int f = min(e, c);
    *cp = c - f;
    const long long q = p + (long long)dirs.dy[j] * W + dirs.dx[j];
    atomicAdd(cap + dirs.rev[j] * N + q, f);
    atomicAdd(inflow + q, f);
    e -= f;
    sent += f;
  }
  if (sent) exc[p] = e;
}

// Relabel (WRITE_H) or only the masks (after a global relabel wrote the heights: LEVELS reads the BFS
// levels as heights). Folds the inflow into the excess.
template <int D, bool STOCH, bool WRITE_H, bool LEVELS>
__global__ void __launch_bounds__(NT) relabel_kernel(const int* __restrict__ cap, int* exc, int* inflow,
                                                     const int* __restrict__ snk, const int* __restrict__ hr, int* hw,
                                                     int8_t* mask, const int* __restrict__ active, const Dirs dirs,
                                                     int H, int W, int hmax) {
  if (STOCH && active[block_id()] == 0) return;
  __shared__ int tile[HX * HY];
  load_tile<LEVELS>(tile, hr, H, W, hmax);
  const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
  if (x >= W || y >= H) return;
  const long long N = (long long)H * W;
  const long long p = (long long)y * W + x;
  int e = exc[p];
  const int in = inflow[p];
  if (in) {
    e += in;
    exc[p] = e;
    inflow[p] = 0;
  }
  const int s = snk[p];
  const int c0 = tile_center();
  const int hp = tile[c0];
  bool any = s > 0, adm = hp == 1 && s > 0;
  int low = hmax;
#pragma unroll
  for (int j = 0; j < D; ++j) {
    if (cap[dirs.cap[j] * N + p] > 0) {
      const int hq = tile[c0 + dirs.dy[j] * HX + dirs.dx[j]];
      any = true;
      adm = adm || hp == hq + 1;
      low = min(low, hq);
    }
  }
  mask[p] = (e <= 0 || !any) ? 2 : (adm ? 1 : 0);
  if (WRITE_H) hw[p] = s > 0 ? 1 : low + 1;
  if (LEVELS) hw[p] = hp;
}

// ----------------------------------------------------------------------------- stopping heuristic
__global__ void snapshot_kernel(const int* __restrict__ exc, const int* __restrict__ inflow, int* snap, long long N) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < N) snap[i] = exc[i] + inflow[i];
}

// Activity check, one block per tile: count the tiles where some excess differs from the snapshot; with
// `active`, also record which tiles hold a node of mask 1 (the stochastic tile list).
__global__ void __launch_bounds__(NT) check_kernel(const int* __restrict__ exc, const int* __restrict__ inflow,
                                                   const int* __restrict__ snap, const int8_t* __restrict__ mask,
                                                   int* active, int* ctrl, int H, int W) {
  const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
  bool changed = false, live = false;
  if (x < W && y < H) {
    const long long p = (long long)y * W + x;
    changed = exc[p] + inflow[p] != snap[p];
    live = mask[p] == 1;
  }
  const int any_changed = __syncthreads_or(changed);
  const int any_live = __syncthreads_or(live);
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    if (any_changed) atomicAdd(ctrl + kChanged, 1);
    if (active != nullptr) active[block_id()] = any_live ? 1 : 0;
  }
}

// -------------------------------------------------------------------------------------------- BFS
// FORWARD = false: global relabel, BFS from the sink over residual arcs (level 1 = residual sink arc);
// counts the nodes with excess that it reaches. FORWARD = true: the public code's labelling, BFS from
// the nodes with excess along residual arcs; nodes with residual sink capacity are closed (-1).
template <bool FORWARD>
__global__ void __launch_bounds__(NT) bfs_init_kernel(const int* __restrict__ exc, const int* __restrict__ inflow,
                                                      const int* __restrict__ snk, int* lvl, int* ctrl, long long N) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  bool seed = false, reached = false;
  if (i < N) {
    const bool ex = exc[i] + inflow[i] > 0, sk = snk[i] > 0;
    if (FORWARD) {
      seed = ex;
      lvl[i] = ex ? 1 : (sk ? -1 : 0);
    } else {
      seed = sk;
      reached = sk && ex;
      lvl[i] = sk ? 1 : 0;
    }
  }
  const int n = __syncthreads_count(seed);
  const int r = __syncthreads_count(reached);
  if (threadIdx.x == 0) {
    if (n) atomicAdd(ctrl + kRing0 + 1, n);
    if (r) atomicAdd(ctrl + kReached, r);
  }
}

// One BFS level: unvisited nodes next to a node of level L (over a residual arc in the BFS's direction)
// get level L + 1. Launches after the last level find an empty level and return at once.
template <int D, bool FORWARD>
__global__ void __launch_bounds__(NT) bfs_level_kernel(const int* __restrict__ cap, const int* __restrict__ exc,
                                                       const int* __restrict__ inflow, int* lvl, int* ctrl,
                                                       const Dirs dirs, int H, int W, int L) {
  const bool lead = blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0;
  if (ctrl[kRing0 + L % 3] == 0) {  // level L is empty: the BFS is over (uniform over the grid)
    if (lead && ctrl[kDone] == 0) ctrl[kDone] = L;
    return;
  }
  if (lead) ctrl[kRing0 + (L + 2) % 3] = 0;  // the count slot of level L + 2, filled by the next launch
  __shared__ int tile[HX * HY];
  load_tile<false>(tile, lvl, H, W, 0);
  const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
  bool got = false;
  if (x < W && y < H) {
    const int c0 = tile_center();
    if (tile[c0] == 0) {
      const long long N = (long long)H * W;
      const long long p = (long long)y * W + x;
#pragma unroll
      for (int j = 0; j < D; ++j) {
        if (tile[c0 + dirs.dy[j] * HX + dirs.dx[j]] != L) continue;
        const long long q = p + (long long)dirs.dy[j] * W + dirs.dx[j];
        if (FORWARD ? cap[dirs.rev[j] * N + q] > 0 : cap[dirs.cap[j] * N + p] > 0) {
          got = true;
          break;
        }
      }
      if (got) {
        lvl[p] = L + 1;
        if (!FORWARD && exc[p] + inflow[p] > 0) atomicAdd(ctrl + kReached, 1);
      }
    }
  }
  const int n = __syncthreads_count(got);
  if (n && threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(ctrl + kRing0 + (L + 1) % 3, n);
}

// --------------------------------------------------------------------------------------- results
// Source side: FORWARD labelling -> reached from the excess (level > 0); sink BFS -> not reached (0).
__global__ void mask_kernel(const int* __restrict__ lvl, bool* out, bool forward, long long N) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < N) out[i] = forward ? lvl[i] > 0 : lvl[i] == 0;
}

__global__ void fold_kernel(int* exc, int* inflow, long long N) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < N && inflow[i]) {
    exc[i] += inflow[i];
    inflow[i] = 0;
  }
}

// ------------------------------------------------------------------------------------------- host
struct Events {
  cudaEvent_t e[4] = {nullptr, nullptr, nullptr, nullptr};
  Events() {
    for (auto& x : e) CC_CHECK(cudaEventCreate(&x));
  }
  ~Events() {
    for (auto& x : e)
      if (x) cudaEventDestroy(x);
  }
};

struct Solver {
  int H, W, D;
  long long N;
  int hmax;
  Dirs dirs;
  cudaStream_t st;
  dim3 tiles, tile_block{TX, TY};
  unsigned lin_blocks;
  int *cap, *exc, *inflow, *snk, *h[2], *snap, *lvl, *active, *ctrl;
  int8_t* mask;
  int* host;  // pinned copy of ctrl
  int64_t syncs = 0, bfs_chunk = 16;

  void read_ctrl() {
    CC_CHECK(cudaGetLastError());
    CC_CHECK(cudaMemcpyAsync(host, ctrl, kCtrl * sizeof(int), cudaMemcpyDeviceToHost, st));
    CC_CHECK(cudaStreamSynchronize(st));
    ++syncs;
  }

  template <int DD>
  void push(bool stoch, const int* hr) {
    if (stoch)
      push_kernel<DD, true><<<tiles, tile_block, 0, st>>>(cap, exc, inflow, snk, hr, mask, active, dirs, H, W);
    else
      push_kernel<DD, false><<<tiles, tile_block, 0, st>>>(cap, exc, inflow, snk, hr, mask, active, dirs, H, W);
  }

  template <int DD>
  void relabel(bool stoch, const int* hr, int* hw) {
    if (stoch)
      relabel_kernel<DD, true, true, false>
          <<<tiles, tile_block, 0, st>>>(cap, exc, inflow, snk, hr, hw, mask, active, dirs, H, W, hmax);
    else
      relabel_kernel<DD, false, true, false>
          <<<tiles, tile_block, 0, st>>>(cap, exc, inflow, snk, hr, hw, mask, active, dirs, H, W, hmax);
  }

  // BFS, one launch per level; the host looks after bfs_chunk levels, then after chunks twice as long
  // each time (at most kMaxChunk). Returns the number of levels.
  template <int DD, bool FORWARD>
  int64_t bfs() {
    CC_CHECK(cudaMemsetAsync(ctrl, 0, (kReached + 1) * sizeof(int), st));
    bfs_init_kernel<FORWARD><<<lin_blocks, NT, 0, st>>>(exc, inflow, snk, lvl, ctrl, N);
    int64_t L = 1, chunk = bfs_chunk;
    while (true) {
      for (int64_t i = 0; i < chunk; ++i, ++L)
        bfs_level_kernel<DD, FORWARD><<<tiles, tile_block, 0, st>>>(cap, exc, inflow, lvl, ctrl, dirs, H, W, (int)L);
      read_ctrl();
      if (host[kDone] != 0) return host[kDone] - 1;
      if (L > N + 2) throw std::runtime_error("torchcut_cudacuts: BFS did not end");
      chunk = std::max(chunk, std::min<int64_t>(2 * chunk, kMaxChunk));
    }
  }

  // Global relabel into hw (heights = BFS levels, unreached = hmax + 1) and fresh masks. Returns the
  // number of levels; host[kReached] = nodes with excess that can reach the sink.
  template <int DD>
  int64_t global_relabel(int* hw) {
    const int64_t levels = bfs<DD, false>();
    if (host[kReached] != 0)
      relabel_kernel<DD, false, false, true>
          <<<tiles, tile_block, 0, st>>>(cap, exc, inflow, snk, lvl, hw, mask, active, dirs, H, W, hmax);
    return levels;
  }

  template <int DD>
  void run(int mode, int64_t max_iters, int64_t gr_every, double time_limit, bool sink_label, bool* out_mask,
           int64_t* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    Events ev;
    const bool stoch = mode == 0, converge = mode == 2;
    const int64_t ntiles = (int64_t)tiles.x * tiles.y;
    // The start kernel of the public code: no push (all masks 0), a relabel of every tile from heights 1.
    relabel<DD>(false, h[0], h[1]);
    if (stoch) {
      std::vector<int> ones(ntiles, 1);
      CC_CHECK(cudaMemcpyAsync(active, ones.data(), ntiles * sizeof(int), cudaMemcpyHostToDevice, st));
      CC_CHECK(cudaStreamSynchronize(st));
    }
    const int nblocks = (int)std::min<int64_t>(ntiles, INT_MAX);
    CC_CHECK(cudaMemcpyAsync(ctrl + kChanged, &nblocks, sizeof(int), cudaMemcpyHostToDevice, st));
    CC_CHECK(cudaStreamSynchronize(st));
    CC_CHECK(cudaEventRecord(ev.e[0], st));

    int64_t counter = 1, iters = 0, grs = 0, gr_levels = 0, label_levels = 0;
    int term = 0, stop = kStopIters;
    bool finish = true, exact = false;
    int64_t next_gr = converge ? (gr_every > 0 ? gr_every : kGrMin) : (gr_every > 0 ? gr_every : -1);
    while (true) {
      if (!converge) {
        // The public code's rule: snapshot the excess every 10 iterations (and take the count of the
        // last check), count the tiles whose excess moved every 11.
        if (counter % 10 == 0) {
          snapshot_kernel<<<lin_blocks, NT, 0, st>>>(exc, inflow, snap, N);
          read_ctrl();
          finish = host[kChanged] != 0;
          if (!stoch && !finish) ++term;
        }
        if (counter % 11 == 0) {
          CC_CHECK(cudaMemsetAsync(ctrl + kChanged, 0, sizeof(int), st));
          check_kernel<<<tiles, tile_block, 0, st>>>(exc, inflow, snap, mask, stoch ? active : nullptr, ctrl, H, W);
          if (stoch && !finish && counter % 121 != 0) ++term;
        }
      }
      const int r = counter & 1;  // odd: read buffer 1, write buffer 0 (the public code's alternation)
      push<DD>(stoch, h[r]);
      relabel<DD>(stoch, h[r], h[1 - r]);
      ++iters;
      if (next_gr > 0 && counter >= next_gr) {
        const int64_t levels = global_relabel<DD>(h[1 - r]);
        ++grs;
        gr_levels += levels;
        if (host[kReached] == 0) {
          exact = true;
          stop = kStopExact;
          break;
        }
        next_gr = counter + (gr_every > 0 ? gr_every : std::max<int64_t>(kGrMin, levels));
        if (time_limit > 0 && elapsed() > time_limit) {
          stop = kStopTime;
          break;
        }
      }
      ++counter;
      if (!converge && (stoch ? term != 0 : term == 2)) {
        stop = kStopRule;
        break;
      }
      if (counter >= max_iters) {
        stop = kStopIters;
        break;
      }
    }
    CC_CHECK(cudaEventRecord(ev.e[1], st));
    CC_CHECK(cudaEventRecord(ev.e[2], st));
    // The cut: after an exact stop, the nodes the last BFS from the sink did not reach. Otherwise the
    // public code's labelling (bfsLabeling), or (sink_label) a BFS from the sink, as after an exact stop.
    const bool forward = !exact && !sink_label;
    if (!exact) label_levels = forward ? bfs<DD, true>() : bfs<DD, false>();
    mask_kernel<<<lin_blocks, NT, 0, st>>>(lvl, out_mask, forward, N);
    fold_kernel<<<lin_blocks, NT, 0, st>>>(exc, inflow, N);
    CC_CHECK(cudaEventRecord(ev.e[3], st));
    CC_CHECK(cudaGetLastError());
    CC_CHECK(cudaEventSynchronize(ev.e[3]));
    float loop_ms = 0, label_ms = 0;
    CC_CHECK(cudaEventElapsedTime(&loop_ms, ev.e[0], ev.e[1]));
    CC_CHECK(cudaEventElapsedTime(&label_ms, ev.e[2], ev.e[3]));
    int64_t live_tiles = -1;
    if (stoch) {
      std::vector<int> a(ntiles);
      CC_CHECK(cudaMemcpyAsync(a.data(), active, ntiles * sizeof(int), cudaMemcpyDeviceToHost, st));
      CC_CHECK(cudaStreamSynchronize(st));
      live_tiles = 0;
      for (int v : a) live_tiles += v != 0;
    }
    stats[0] = iters;
    stats[1] = grs;
    stats[2] = gr_levels;
    stats[3] = label_levels;
    stats[4] = exact ? 1 : 0;
    stats[5] = syncs;
    stats[6] = stop;
    stats[7] = (int64_t)(loop_ms * 1000.0f);
    stats[8] = (int64_t)(label_ms * 1000.0f);
    stats[9] = live_tiles;
  }
};

Dirs push_order(c10::IntArrayRef dirs, int D) {
  static const int pref[kMaxD][2] = {{0, -1}, {-1, 0}, {0, 1}, {1, 0}, {-1, -1}, {-1, 1}, {1, 1}, {1, -1}};
  auto find = [&](int dy, int dx) {
    for (int i = 0; i < D; ++i)
      if (dirs[2 * i] == dy && dirs[2 * i + 1] == dx) return i;
    return -1;
  };
  for (int i = 0; i < D; ++i) {
    const int64_t dy = dirs[2 * i], dx = dirs[2 * i + 1];
    TORCH_CHECK(dy >= -1 && dy <= 1 && dx >= -1 && dx <= 1 && (dy || dx),
                "torchcut_cudacuts.solve: dirs: expected unit 2D offsets, got (", dy, ", ", dx, ")");
    TORCH_CHECK(find((int)dy, (int)dx) == i, "torchcut_cudacuts.solve: dirs: (", dy, ", ", dx, ") given twice");
  }
  Dirs out{};
  int n = 0;
  for (const auto& pd : pref) {
    const int i = find(pd[0], pd[1]);
    if (i < 0) continue;
    const int r = find(-pd[0], -pd[1]);
    TORCH_CHECK(r >= 0, "torchcut_cudacuts.solve: dirs: (", pd[0], ", ", pd[1], ") has no reverse direction");
    out.dy[n] = pd[0];
    out.dx[n] = pd[1];
    out.cap[n] = i;
    out.rev[n] = r;
    ++n;
  }
  TORCH_CHECK(n == D, "torchcut_cudacuts.solve: dirs: expected the 4- or 8-neighbourhood");
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> solve_op(const at::Tensor& caps, const at::Tensor& source,
                                                                    const at::Tensor& sink, c10::IntArrayRef dirs,
                                                                    int64_t mode, int64_t max_iters, int64_t gr_every,
                                                                    double time_limit, int64_t bfs_chunk, int64_t label) {
  TORCH_CHECK(caps.is_cuda() && source.is_cuda() && sink.is_cuda(),
              "torchcut_cudacuts.solve: expected CUDA tensors");
  TORCH_CHECK(caps.device() == source.device() && caps.device() == sink.device(),
              "torchcut_cudacuts.solve: expected caps, source and sink on one device");
  TORCH_CHECK(caps.scalar_type() == at::kInt && source.scalar_type() == at::kInt && sink.scalar_type() == at::kInt,
              "torchcut_cudacuts.solve: expected int32 caps, source and sink");
  TORCH_CHECK(caps.is_contiguous() && source.is_contiguous() && sink.is_contiguous(),
              "torchcut_cudacuts.solve: expected contiguous tensors");
  TORCH_CHECK(caps.dim() == 3 && source.dim() == 2 && source.sizes() == sink.sizes() &&
                  caps.size(1) == source.size(0) && caps.size(2) == source.size(1),
              "torchcut_cudacuts.solve: expected caps [D, H, W], source and sink [H, W]");
  const int D = (int)caps.size(0);
  TORCH_CHECK(D == 4 || D == 8, "torchcut_cudacuts.solve: expected 4 or 8 directions, got ", D);
  TORCH_CHECK((int)dirs.size() == 2 * D, "torchcut_cudacuts.solve: dirs: expected ", 2 * D, " integers");
  TORCH_CHECK(mode >= 0 && mode <= 2, "torchcut_cudacuts.solve: mode: expected 0, 1 or 2, got ", mode);
  TORCH_CHECK(max_iters >= 1 && bfs_chunk >= 1, "torchcut_cudacuts.solve: max_iters and bfs_chunk must be >= 1");
  TORCH_CHECK(label == 0 || label == 1, "torchcut_cudacuts.solve: label: expected 0 (excess) or 1 (sink), got ", label);
  const int64_t H = source.size(0), W = source.size(1), N = H * W;
  TORCH_CHECK(N >= 1 && N < INT_MAX / 8 && H < 65535LL * TY, "torchcut_cudacuts.solve: grid too large or empty");

  c10::cuda::CUDAGuard guard(caps.device());
  auto opt = caps.options();
  Solver s;
  s.H = (int)H;
  s.W = (int)W;
  s.D = D;
  s.N = N;
  s.hmax = (int)N;
  s.dirs = push_order(dirs, D);
  s.st = c10::cuda::getCurrentCUDAStream(caps.device().index()).stream();
  s.tiles = dim3((unsigned)((W + TX - 1) / TX), (unsigned)((H + TY - 1) / TY));
  s.lin_blocks = (unsigned)((N + NT - 1) / NT);
  s.bfs_chunk = bfs_chunk;
  const int64_t ntiles = (int64_t)s.tiles.x * s.tiles.y;

  at::Tensor cap = at::empty({D, H, W}, opt);
  at::Tensor exc = at::empty({H, W}, opt);
  at::Tensor snk = at::empty({H, W}, opt);
  at::Tensor work = at::empty({5, N}, opt);  // inflow, heights (two buffers), excess snapshot, BFS levels
  at::Tensor active = at::empty({ntiles}, opt);
  at::Tensor ctrl = at::empty({kCtrl}, opt);
  at::Tensor mask = at::empty({H, W}, opt.dtype(at::kChar));
  at::Tensor host = at::empty({kCtrl}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  at::Tensor out = at::empty({H, W}, opt.dtype(at::kBool));
  at::Tensor stats = at::empty({10}, at::TensorOptions().dtype(at::kLong));
  s.cap = cap.data_ptr<int>();
  int* w = work.data_ptr<int>();
  s.exc = exc.data_ptr<int>();
  s.snk = snk.data_ptr<int>();
  s.inflow = w;
  s.h[0] = w + N;
  s.h[1] = w + 2 * N;
  s.snap = w + 3 * N;
  s.lvl = w + 4 * N;
  s.active = active.data_ptr<int>();
  s.ctrl = ctrl.data_ptr<int>();
  s.mask = mask.data_ptr<int8_t>();
  s.host = host.data_ptr<int>();

  CC_CHECK(cudaMemcpyAsync(s.cap, caps.data_ptr<int>(), (size_t)D * N * sizeof(int), cudaMemcpyDeviceToDevice, s.st));
  CC_CHECK(cudaMemsetAsync(s.ctrl, 0, kCtrl * sizeof(int), s.st));
  init_kernel<<<s.lin_blocks, NT, 0, s.st>>>(source.data_ptr<int>(), sink.data_ptr<int>(), s.exc, s.inflow, s.snk,
                                             s.h[0], s.h[1], s.mask, N);
  if (D == 4)
    s.run<4>((int)mode, max_iters, gr_every, time_limit, label == 1, out.data_ptr<bool>(), stats.data_ptr<int64_t>());
  else
    s.run<8>((int)mode, max_iters, gr_every, time_limit, label == 1, out.data_ptr<bool>(), stats.data_ptr<int64_t>());
  return {out, snk, exc, stats};
}

}  // namespace

TORCH_LIBRARY(torchcut_cudacuts, m) {
  m.def(
      "solve(Tensor caps, Tensor source, Tensor sink, int[] dirs, int mode, int max_iters, int gr_every, "
      "float time_limit, int bfs_chunk, int label) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchcut_cudacuts, CUDA, m) { m.impl("solve", &solve_op); }

}  // namespace torchcut_cudacuts
