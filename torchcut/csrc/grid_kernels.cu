// Push-relabel max-flow (phase one) on N-d grids, CUDA kernels and host loop.
//
// Layout (see torchcut/grid.py): caps [B, D, N] residuals, D = 2K directions (d < K: offsets[d],
// d >= K: -offsets[d-K]); excess [B, N] int64; sink [B, N] residual sink capacities; N = Z*Y*X with
// x fastest. 2D grids are 3D grids with Z = 1.
//
// The grid is cut into tiles; blocks of a persistent grid walk over the tiles of all items in one flat
// order (option walk; -1: over the tiles of one item, blockIdx.y).
//
// push_kernel: the block loads its tile's caps, excess, sink residuals and heights (plus a halo of
//   neighbouring heights, a snapshot) into shared memory and runs `rounds` local discharge rounds (push to every lower residual neighbour, sink first, then
//   relabel). Pushes inside the tile use shared-memory atomics. Pushes across the tile border go
//   straight to global memory (atomicAdd on the neighbour's excess and on the reverse residual, atomic
//   decrement of the own residual), so global memory always holds the truth for border arcs and the
//   shared copy is a lower bound: pushes never exceed a residual. Interior arcs belong to the tile and
//   are stored back plainly; excess is written back as a delta (atomicAdd) because other tiles add to
//   it concurrently. Heights of other tiles are read from global memory (stale within a launch: that
//   is only a heuristic, the preflow stays valid). A per-tile flag skips tiles with nothing to do.
// Global relabel = exact distance to the sink over residual arcs, Bellman-Ford style: each BFS tile is
//   relaxed to its fixed point in shared memory by segmented min-plus scans along x, y and z
//   (bfs_scan_tile; bfs_scan = -1: Jacobi sweeps, bfs_tile). Default (bfs_queue_kernel): one launch per
//   global relabel, resident blocks take tiles from a worklist and tiles whose border heights changed
//   go back into it, until nothing is queued or running. bfs_queue = -1 (bfs_kernel): launches over all
//   tiles until one changes nothing, skipping tiles whose neighbourhood did not change; the host reads
//   the "last launch that changed something" counter once per batch of launches.
// Termination (exact): right after a converged BFS, no node with excess has a finite distance. The
// source side of the cut is the set of nodes at infinite distance.
// Push walk (default, v7): before each push launch list_kernel lists the flagged tiles and the blocks
//   take them one at a time (push_walk = -1: each block visits the flagged tiles of a fixed stride, which
//   left some blocks twice the mean work when active tiles cluster). Push launches per relabel: half the
//   BFS depth (capped at 4 on 4/6-connected grids), or push_tail (default: the BFS depth, 6 to 24) once
//   at most a quarter as many tiles are active as there are push blocks (late cycles: a launch then
//   costs ~25 us, a BFS ~200 us).
// The default tiles (2D 32x16; 3D 8x8x8; also 16x8x4 push) are compiled with their extents (struct Sh), so
//   in-tile index arithmetic is shifts and masks: both kernels are bound by instruction issue.
// Option profile: per-visit cycle counters (push: load, rounds; BFS: pop, load, passes, write, notify);
//   profile = 2 also prints one line per relabel cycle and push launch. Option exp: bits of measured
//   alternatives (1: fewer fences per BFS visit, 2: active count fused into the BFS, 8: in-tile
//   residual updates without atomics), each tested, none faster beyond the noise (NOTES-grid.md v7).
// Host loop: synchronous by default (read the counters, then decide). Option pipeline = n > 0: behind each
// read-back the stream already holds n pushes that run only if that BFS converged (checked on the device)
// and BFS launches that continue it otherwise, so the GPU does not idle while the host waits.

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "grid_common.h"

namespace torchcut_grid {

namespace {

#define TC_CUDA_CHECK(expr)                                                                      \
  do {                                                                                           \
    cudaError_t err__ = (expr);                                                                  \
    TORCH_CHECK(err__ == cudaSuccess, "torchcut_grid: CUDA error ", cudaGetErrorString(err__), \
                " at " #expr);                                                                   \
  } while (0)

struct Geom {
  int X, Y, Z;     // grid extent, x fastest
  long long N;     // nodes per item
  int TX, TY, TZ;  // tile extent
  int nTX, nTY, nTZ;
  int T;  // tiles per item
  int D;  // directions
  int K;  // offsets (D / 2)
  int bfs_skip;
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
  int plin[kMaxDirs];      // linear offset in the padded layout
  int axm[3], axp[3];      // direction of the unit step -1 / +1 along x, y, z (-1: none)
  unsigned long long other;  // directions that the axis scans do not cover (diagonals, long offsets)
};

// Slots of the solver's counter array (long long): hot counters of the queue BFS sit 16 slots apart.
constexpr int kLast = 0, kActive = 1, kActiveTiles = 2, kProf = 8, kHead = 32, kTail = 48, kPending = 64, kMaxGen = 80,
              kVisits = 96, kStalled = 112, kPushQueue = 120 /* two pairs: 120-121, 122-123 */, kSlots = 128;

__device__ __forceinline__ void atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Option profile: thread 0 adds the cycles since t to counter k and restarts t.
__device__ __forceinline__ void mark(unsigned long long* prof, int k, long long& t) {
  if (prof != nullptr && threadIdx.x == 0) {
    const long long n = clock64();
    atomicAdd(prof + k, (unsigned long long)(n - t));
    t = n;
  }
}

struct Local {
  int lx, ly, lz, i;  // coordinates inside the tile, linear index
  int x, y, z;        // coordinates in the grid
  long long g;        // linear index in the item
  bool valid;
};

// Tile extent known at compile time (0: read from the Geom). The default tiles are compiled with their
// extents, so that index arithmetic inside a tile is shifts and masks, not integer divisions (v7: the
// BFS and push kernels were bound by instruction issue, ~28 and ~48 runtime divisions in their SASS).
template <int TXc = 0, int TYc = 0, int TZc = 0>
struct Sh {
  static constexpr bool fixed = TXc > 0 && TYc > 0 && TZc > 0;
  static __device__ __forceinline__ int tx(const Geom& G) { return TXc ? TXc : G.TX; }
  static __device__ __forceinline__ int ty(const Geom& G) { return TYc ? TYc : G.TY; }
  static __device__ __forceinline__ int tz(const Geom& G) { return TZc ? TZc : G.TZ; }
  static __device__ __forceinline__ int nt() { return fixed ? TXc * TYc * TZc : (int)blockDim.x; }
};

template <class S = Sh<>>
__device__ __forceinline__ Local locate_at(const Geom& G, int t, int li) {
  Local L;
  const int tx = t % G.nTX, ty = (t / G.nTX) % G.nTY, tz = t / (G.nTX * G.nTY);
  L.i = li;
  L.lx = L.i % S::tx(G);
  L.ly = (L.i / S::tx(G)) % S::ty(G);
  L.lz = L.i / (S::tx(G) * S::ty(G));
  L.x = tx * S::tx(G) + L.lx;
  L.y = ty * S::ty(G) + L.ly;
  L.z = tz * S::tz(G) + L.lz;
  L.valid = L.x < G.X && L.y < G.Y && L.z < G.Z;
  L.g = L.x + (long long)G.X * (L.y + (long long)G.Y * L.z);
  return L;
}

__device__ __forceinline__ Local locate(const Geom& G) { return locate_at(G, blockIdx.x, threadIdx.x); }

template <class S = Sh<>>
__device__ __forceinline__ bool in_tile(const Geom& G, const Local& L, int d) {
  return (unsigned)(L.lx + G.dx[d]) < (unsigned)S::tx(G) && (unsigned)(L.ly + G.dy[d]) < (unsigned)S::ty(G) &&
         (unsigned)(L.lz + G.dz[d]) < (unsigned)S::tz(G);
}

// --------------------------------------------------------------------------------------------- push
// One tile's push/relabel rounds; returns early (uniformly) when the tile has nothing to do.
template <typename CapT, int DT, class S>
__device__ __forceinline__ void push_tile(CapT* __restrict__ caps, long long* __restrict__ excess,
                                          CapT* __restrict__ sink, int* __restrict__ height,
                                          int* __restrict__ tile_active, const Geom& G, int rounds, int b, int t,
                                          bool known, unsigned long long* __restrict__ prof, bool plain) {
  const int D = DT ? DT : G.D;
  const int K = D / 2;
  const int NT = S::nt();
  int* flag = tile_active + (long long)b * G.T + t;
  long long t0 = 0;
  if (known) {  // the walk read the flag set; only this block clears it, others only set it
    if (threadIdx.x == 0) *flag = 0;  // from now on, only "1" is ever written to it during this launch
  } else {
    __shared__ int s_go;
    if (threadIdx.x == 0) {
      const int f = __ldcg(flag);
      s_go = f;
      if (f) *flag = 0;
    }
    __syncthreads();
    if (!s_go) return;
  }
  if (prof != nullptr && threadIdx.x == 0) t0 = clock64();

  extern __shared__ __align__(16) unsigned char smem[];
  long long* e_s = reinterpret_cast<long long*>(smem);
  CapT* c_s = reinterpret_cast<CapT*>(e_s + NT);
  CapT* s_s = c_s + (size_t)D * NT;
  int* h_s = reinterpret_cast<int*>(s_s + NT);  // the box: tile plus halo, x fastest

  const Local L = locate_at<S>(G, t, threadIdx.x);
  const int i = L.i;
  const long long base = (long long)b * G.N;
  CapT* capb = caps + (long long)b * D * G.N;
  int* hb = height + base;
  {  // heights of the box (kInf outside the grid); those of other tiles are a snapshot (a heuristic)
    const int x0 = (t % G.nTX) * S::tx(G) - G.px, y0 = ((t / G.nTX) % G.nTY) * S::ty(G) - G.py,
              z0 = (t / (G.nTX * G.nTY)) * S::tz(G) - G.pz;
    auto box_h = [&](int c) {
      const int x = x0 + c % G.BX, y = y0 + (c / G.BX) % G.BY, z = z0 + c / (G.BX * G.BY);
      return c < G.boxN && (unsigned)x < (unsigned)G.X && (unsigned)y < (unsigned)G.Y && (unsigned)z < (unsigned)G.Z
                 ? __ldcg(hb + x + (long long)G.X * (y + (long long)G.Y * z))
                 : kInf;
    };
    int hv[4];  // the first four slots of each thread: all loads in flight at once
#pragma unroll
    for (int k = 0; k < 4; ++k) hv[k] = box_h(threadIdx.x + k * NT);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (threadIdx.x + k * NT < G.boxN) h_s[threadIdx.x + k * NT] = hv[k];
    for (int c = threadIdx.x + 4 * NT; c < G.boxN; c += NT) h_s[c] = box_h(c);
  }
  const int bi = (L.lx + G.px) + G.BX * ((L.ly + G.py) + G.BY * (L.lz + G.pz));

  long long e0 = 0;
  CapT s0 = 0;
  if (L.valid) {
    e0 = excess[base + L.g];
    s0 = sink[base + L.g];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      c_s[d * NT + i] = capb[d * G.N + L.g];
    }
  } else {
    for (int d = 0; d < D; ++d) c_s[d * NT + i] = 0;
  }
  e_s[i] = e0;
  s_s[i] = s0;
  __syncthreads();
  const int h0 = h_s[bi];
  long long tm = t0;
  mark(prof, 6, tm);

  int r = 0;
  for (; r < rounds; ++r) {
    bool act = false;
    long long e = e_s[i];
    const int h = h_s[bi];
    if (L.valid && e > 0 && h < kInf) {
      act = true;
      long long pushed = 0;
      const CapT s = s_s[i];
      if (s > 0) {  // the sink has height 0
        const CapT dl = (CapT)min((long long)s, e);
        s_s[i] = s - dl;
        e -= dl;
        pushed += dl;
      }
      int hmin = kInf;
      // All residuals and neighbour heights first (independent shared loads: one latency, not 2D).
      CapT cv[DT > 0 ? DT : 1];
      int hp[DT > 0 ? DT : 1];
      if constexpr (DT > 0) {
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          cv[d] = c_s[d * NT + i];
          hp[d] = G.box ? h_s[bi + G.boff[d]] : 0;  // without the box (long offsets): read below
        }
      }
#pragma unroll
      for (int d = 0; d < D; ++d) {
        const CapT c = DT > 0 ? cv[d] : c_s[d * NT + i];
        if (c <= 0) continue;
        const bool inside = in_tile<S>(G, L, d);
        const int j = i + G.slin[d];
        const int hv = DT > 0 && G.box ? hp[d]
                       : (G.box || inside) ? h_s[bi + G.boff[d]]
                                           : __ldcg(hb + L.g + G.glin[d]);
        if (e > 0 && hv < h) {
          const CapT dl = (CapT)min((long long)c, e);
          e -= dl;
          pushed += dl;
          const int rd = d < K ? d + K : d - K;
          if (inside) {
            if (plain) {  // see push_kernel: no other thread touches these two slots in this round
              c_s[d * NT + i] = c - dl;
              c_s[rd * NT + j] += dl;
            } else {
              atomic_add(&c_s[d * NT + i], (CapT)-dl);
              atomic_add(&c_s[rd * NT + j], dl);
            }
            atomic_add(&e_s[j], (long long)dl);
          } else {
            const long long gv = L.g + G.glin[d];
            c_s[d * NT + i] = c - dl;
            atomic_add(&capb[d * G.N + L.g], (CapT)-dl);
            atomic_add(&capb[rd * G.N + gv], dl);
            atomic_add(&excess[base + gv], (long long)dl);
            const int vx = L.x + G.dx[d], vy = L.y + G.dy[d], vz = L.z + G.dz[d];
            const int tv = vx / S::tx(G) + G.nTX * (vy / S::ty(G) + G.nTY * (vz / S::tz(G)));
            tile_active[(long long)b * G.T + tv] = 1;
          }
          if (c - dl > 0) hmin = min(hmin, hv);
        } else {
          hmin = min(hmin, hv);
        }
      }
      if (pushed) atomic_add(&e_s[i], -pushed);
      if (e > 0) h_s[bi] = hmin >= kInf - 1 ? kInf : hmin + 1;  // every lower arc is saturated: relabel
    }
    if (!__syncthreads_or(act)) break;
  }
  mark(prof, 7, tm);

  bool still = false;
  if (L.valid) {
    const long long e = e_s[i];
    if (e != e0) atomic_add(&excess[base + L.g], e - e0);
    if (s_s[i] != s0) sink[base + L.g] = s_s[i];
    const int h = h_s[bi];
    if (h != h0) hb[L.g] = h;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (in_tile<S>(G, L, d)) capb[d * G.N + L.g] = c_s[d * NT + i];
    }
    still = e > 0 && h < kInf;
  }
  if (__syncthreads_or(still) && threadIdx.x == 0) *flag = 1;
  if (prof != nullptr && threadIdx.x == 0) {  // option profile: visits, cycles, local rounds
    atomicAdd(prof, 1ULL);
    atomicAdd(prof + 1, (unsigned long long)(clock64() - t0));
    atomicAdd(prof + 2, (unsigned long long)min(r + 1, rounds));
  }
}

// Persistent grid: each block walks over tiles, so idle tiles cost a flag read, not a block launch.
// walk == 0: blockIdx.y is the item, blocks stride over its tiles one at a time.
// walk != 0: one flat walk over the tiles of all items (q = b * T + t, so every item gets blocks however
//   large the batch); warp 0 reads the flags of the block's next 32 tiles at once and only the flagged
//   ones are visited (a flag set later in the launch is seen by the next launch: flags stay set).
// plain (option exp bit 8): in-tile pushes update the two residuals without atomics. Safe: within a round
//   u pushes to v only if h(v) < h(u) as read, and heights only rise during a launch, so v never pushes
//   to u in the same round; each residual slot has one owner (decrements) and one neighbour (increments),
//   never both in one round. The excess of a node can receive from several neighbours: still atomic.
// guard != nullptr: the launch was queued before the host knew whether the BFS before it converged; it
//   does nothing unless it did (*guard = last BFS launch that changed something < guard_launch). Pushes
//   between an unconverged BFS and its continuation would make the BFS's residual snapshot stale.
template <typename CapT, int DT, int MINB, class S>
__global__ void __launch_bounds__(512, MINB) push_kernel(CapT* __restrict__ caps, long long* __restrict__ excess,
                                                   CapT* __restrict__ sink, int* __restrict__ height,
                                                   int* __restrict__ tile_active, const __grid_constant__ Geom G,
                                                   int rounds, int walk, int items, const long long* __restrict__ guard,
                                                   long long guard_launch, unsigned long long* __restrict__ prof,
                                                   bool plain, unsigned long long* __restrict__ pq,
                                                   long long* __restrict__ plist) {
  if (guard != nullptr && __ldcg(guard) >= guard_launch) return;
  if (walk && pq != nullptr) {
    // Balanced walk (default; push_walk = -1: the strided walk below): list_kernel has listed the active tiles (pq[1] = their count);
    // blocks take them one at a time (pq[0] = next), so clustered active tiles spread over all blocks.
    __shared__ long long s_q;
    while (true) {
      if (threadIdx.x == 0) {
        const unsigned long long k = atomicAdd(pq, 1ULL);
        s_q = k < __ldcg(pq + 1) ? __ldcg(plist + k) : -1;
      }
      __syncthreads();
      const long long q = s_q;
      if (q < 0) return;
      const int b = items == 1 ? 0 : (int)(q / G.T);
      push_tile<CapT, DT, S>(caps, excess, sink, height, tile_active, G, rounds, b, (int)(q - (long long)b * G.T), true,
                             prof, plain);
      __syncthreads();  // shared memory and s_q are reused by the next tile
    }
  }
  if (!walk) {
    for (int t = blockIdx.x; t < G.T; t += gridDim.x) {
      push_tile<CapT, DT, S>(caps, excess, sink, height, tile_active, G, rounds, blockIdx.y, t, false, prof, plain);
      __syncthreads();  // shared memory and s_go are reused by the next tile
    }
    return;
  }
  __shared__ unsigned s_bits;
  const long long total = (long long)G.T * items;
  for (long long q0 = blockIdx.x; q0 < total; q0 += 32LL * gridDim.x) {
    if (threadIdx.x < 32) {  // a tile has at least 32 nodes, so warp 0 is full
      const long long q = q0 + (long long)threadIdx.x * gridDim.x;
      const bool f = q < total && __ldcg(tile_active + q) != 0;
      const unsigned bits = __ballot_sync(0xffffffffu, f);
      if (threadIdx.x == 0) s_bits = bits;
    }
    __syncthreads();
    unsigned bits = s_bits;
    __syncthreads();  // s_bits is rewritten for the next group only after every thread has read it
    while (bits) {
      const int j = __ffs(bits) - 1;
      bits &= bits - 1;
      const long long q = q0 + (long long)j * gridDim.x;
      const int b = items == 1 ? 0 : (int)(q / G.T);
      push_tile<CapT, DT, S>(caps, excess, sink, height, tile_active, G, rounds, b, (int)(q - (long long)b * G.T), true,
                             prof, plain);
      __syncthreads();  // shared memory and s_go are reused by the next tile
    }
  }
}

// Balanced walk: the flagged tiles into a list (pq[1] = count), one warp-aggregated add per warp.
// It also clears the other pair of counters, which the next push launch uses (no memset node per launch).
__global__ void list_kernel(const int* __restrict__ tile_active, unsigned long long* __restrict__ pq,
                            long long* __restrict__ plist, long long total, unsigned long long* __restrict__ other) {
  if (blockIdx.x == 0 && threadIdx.x == 0) other[0] = other[1] = 0;
  for (long long q0 = blockIdx.x * (long long)blockDim.x; q0 < total; q0 += (long long)gridDim.x * blockDim.x) {
    const long long q = q0 + threadIdx.x;
    const bool f = q < total && tile_active[q] != 0;
    const unsigned bits = __ballot_sync(0xffffffffu, f);
    if (!bits) continue;
    const int lane = threadIdx.x & 31;
    unsigned long long pos = 0;
    if (lane == 0) pos = atomicAdd(pq + 1, (unsigned long long)__popc(bits));
    pos = __shfl_sync(0xffffffffu, pos, 0) + __popc(bits & ((1u << lane) - 1u));
    if (f) plist[pos] = q;
  }
}

// ---------------------------------------------------------------------------------------------- bfs
// Residual bit masks and the BFS start (height 1 next to the sink, else kInf); seeds != nullptr (queue
// BFS, G = BFS geometry): flag the tiles holding a node next to the sink or a node with a residual arc
// to such a node in another tile (their heights never change, so no tile would be told of them).
template <typename CapT, typename MaskT>
__global__ void bfs_init_kernel(const CapT* __restrict__ caps, const CapT* __restrict__ sink, MaskT* __restrict__ mask,
                                int* __restrict__ height, const __grid_constant__ Geom G, long long total,
                                int* __restrict__ seeds, long long* __restrict__ scal) {
  if (scal != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {  // queue BFS: its counters start at 0
    scal[kHead] = scal[kTail] = scal[kPending] = scal[kMaxGen] = 0;
    scal[kActive] = scal[kActiveTiles] = 0;
  }
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total;
       q += (long long)gridDim.x * blockDim.x) {
    const long long b = q / G.N, g = q - b * G.N;
    const CapT* cb = caps + b * G.D * G.N + g;
    MaskT m = 0;
    for (int d = 0; d < G.D; ++d)
      if (cb[d * G.N] > 0) m |= (MaskT)1 << d;
    mask[q] = m;
    const bool next_to_sink = sink[q] > 0;
    height[q] = next_to_sink ? 1 : kInf;
    if (seeds != nullptr && (next_to_sink || m)) {
      const int x = (int)(g % G.X), y = (int)((g / G.X) % G.Y), z = (int)(g / ((long long)G.X * G.Y));
      const int lx = x % G.TX, ly = y % G.TY, lz = z % G.TZ;
      bool seed = next_to_sink;
      for (int d = 0; d < G.D && !seed; ++d) {
        if (!((m >> d) & 1)) continue;
        const int ax = lx + G.dx[d], ay = ly + G.dy[d], az = lz + G.dz[d];
        if ((unsigned)ax < (unsigned)G.TX && (unsigned)ay < (unsigned)G.TY && (unsigned)az < (unsigned)G.TZ) continue;
        const int vx = x + G.dx[d], vy = y + G.dy[d], vz = z + G.dz[d];
        if ((unsigned)vx < (unsigned)G.X && (unsigned)vy < (unsigned)G.Y && (unsigned)vz < (unsigned)G.Z)
          seed = sink[q + G.glin[d]] > 0;
      }
      if (seed) seeds[b * G.T + x / G.TX + G.nTX * (y / G.TY + G.nTY * (z / G.TZ))] = 1;  // kQueued
    }
  }
}

// One block relaxes a BFS tile of NPT * blockDim.x nodes (thread k handles nodes k, k + NT, ...).
template <typename MaskT, int DT, int NPT>
__device__ __forceinline__ void bfs_tile(const MaskT* __restrict__ mask, int* __restrict__ height,
                                         int* __restrict__ epoch, long long* __restrict__ last_changed, const Geom& G,
                                         int launch, int b, int t, bool check) {
  const int D = DT ? DT : G.D;
  const int NT = blockDim.x;
  int* ep = epoch + (long long)b * G.T;
  if (check && G.bfs_skip) {
    bool go = false;
    if (threadIdx.x < 27) {
      const int tx = t % G.nTX, ty = (t / G.nTX) % G.nTY, tz = t / (G.nTX * G.nTY);
      const int ax = tx + (int)threadIdx.x % 3 - 1, ay = ty + ((int)threadIdx.x / 3) % 3 - 1,
                az = tz + (int)threadIdx.x / 9 - 1;
      if (ax >= 0 && ay >= 0 && az >= 0 && ax < G.nTX && ay < G.nTY && az < G.nTZ)
        go = __ldcg(ep + ax + G.nTX * (ay + G.nTY * az)) >= launch - 1;
    }
    if (!__syncthreads_or(go)) return;
  }
  __shared__ int dist_s[512 * NPT];
  int* hb = height + (long long)b * G.N;
  // Per node, only what the relaxation needs: residual arcs that stay in the tile / leave it.
  MaskT m_in[NPT], m_out[NPT];
  long long gi[NPT];
  int li[NPT], cur[NPT];
#pragma unroll
  for (int k = 0; k < NPT; ++k) {
    const Local L = locate_at(G, t, threadIdx.x + k * NT);
    li[k] = L.i;
    gi[k] = L.g;
    MaskT m = 0;
    cur[k] = kInf;
    if (L.valid) {
      m = mask[(long long)b * G.N + L.g];
      cur[k] = hb[L.g];
    }
    MaskT inside = 0;
    for (int d = 0; d < D; ++d)
      if (in_tile(G, L, d)) inside |= (MaskT)1 << d;
    m_in[k] = m & inside;
    m_out[k] = m & ~inside;
    dist_s[L.i] = cur[k];
  }
  __syncthreads();
  unsigned mine = 0;
  while (true) {
    bool ch = false;
#pragma unroll
    for (int k = 0; k < NPT; ++k) {
      if ((m_in[k] | m_out[k]) && cur[k] > 1) {
        int best = cur[k];
#pragma unroll
        for (int d = 0; d < D; ++d) {
          if ((m_in[k] >> d) & 1) best = min(best, dist_s[li[k] + G.slin[d]] + 1);
          else if ((m_out[k] >> d) & 1) best = min(best, __ldcg(hb + gi[k] + G.glin[d]) + 1);
        }
        if (best < cur[k]) {
          cur[k] = best;
          dist_s[li[k]] = best;
          ch = true;
          mine |= 1u << k;
        }
      }
    }
    if (!__syncthreads_or(ch)) break;
  }
#pragma unroll
  for (int k = 0; k < NPT; ++k)
    if ((mine >> k) & 1) hb[gi[k]] = cur[k];
  if (__syncthreads_or(mine != 0) && threadIdx.x == 0) {
    ep[t] = launch;
    atomicMax(last_changed, (long long)launch);
  }
}

// Scan BFS (v6). Along one axis of the tile, a line of E nodes (E a power of two <= 32) lies in E
// consecutive lanes of a warp. Relaxing every arc of the line along +axis, in order, is a min-plus scan:
// with a_p = d_p - p, d_p <- p + min{a_q : q <= p, every node q+1..p has its residual arc to the previous
// one}; the arcs are a ballot, so each lane finds the first node of its chain with one bit operation,
// and log2(E) shuffles finish the scan. The same backwards (b_p = d_p + p). A pass relaxes whole lines,
// so a tile reaches its fixed point in a few passes (about one per turn of the shortest paths) instead
// of one Jacobi sweep per node of path length.
__device__ __forceinline__ int scan_line(int d, bool to_prev, bool to_next, int E) {
  const unsigned full = 0xffffffffu;
  const int lane = (int)(threadIdx.x & 31);
  const int p = lane & (E - 1);
  // forward: node p takes d(p-1) + 1 when it has a residual arc to p-1
  unsigned links = __ballot_sync(full, to_prev && p > 0);
  const int start = 31 - __clz(~links & ((2u << lane) - 1u));  // first node of p's chain (p = 0 is one)
  int a = d - lane;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {  // unrolled: E is uniform, the branch costs nothing
    if (o >= E) break;
    const int v = __shfl_up_sync(full, a, o);
    if (lane - o >= start) a = min(a, v);
  }
  d = min(d, a + lane);
  // backward: node p takes d(p+1) + 1 when it has a residual arc to p+1
  links = __ballot_sync(full, to_next && p < E - 1);
  const int end = __ffs(~links & ~((1u << lane) - 1u)) - 1;  // last node of p's chain
  int c = d + lane;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    if (o >= E) break;
    const int v = __shfl_down_sync(full, c, o);
    if (lane + o <= end) c = min(c, v);
  }
  return min(d, c - lane);  // values from unreached nodes stay >= kInf
}

// One block of TX*TY*TZ threads (powers of two) relaxes one BFS tile to its fixed point: the heights of
// other tiles (read once, at the start) seed the border, then passes of line scans along x, y, z and a
// Jacobi step over the other in-tile arcs repeat until a whole iteration changes nothing.
constexpr int kScanSmem = 2048;  // padded layout: (TX + 1) * TY * TZ <= 2 * 1024

// Worklist of the queue BFS (one launch per global relabel, see bfs_queue_kernel).
// Tile states: kIdle, kQueued (in the ring), kRunning (a block relaxes it), kDirty (running, and a
// neighbour changed since it started: it goes back into the ring when it finishes). So a tile is never
// relaxed by two blocks at once, and every change reaches a relaxation that starts after it.
constexpr int kIdle = 0, kQueued = 1, kRunning = 2, kDirty = 3;
struct Work {
  int* state;               // [B * T] tile states (bfs_init_kernel sets kQueued on the seed tiles)
  long long* ring;          // tile ids, -1 = empty slot; capacity a power of two > 4 (T * B + 4096)
  unsigned long long mask;  // capacity - 1
  unsigned long long* head; // next slot to take
  unsigned long long* tail; // next slot to fill
  long long* pending;       // tiles queued or running; 0 = the BFS has converged
  long long* stalled;       // set when a block waited implausibly long (turned into an error on the host)
  int* gen;                 // [B * T] wavefront generation of the tile's latest enqueue
  long long* max_gen;       // deepest generation: the BFS depth in tiles (sets the push launches)
  long long* visits;        // tile relaxations, for the stats
  int lean;                 // option exp bit 1: fewer fences per visit (one per block, atomicExch pop)
  unsigned long long* prof; // option profile: [3] pop cycles, [4] visit cycles, [5] passes (nullptr: off)
  // Fused count (option exp bit 2): each visit flags the push tiles of its active nodes (excess > 0,
  // finite distance) and counts them, so no count kernel runs after the BFS. nullptr: off.
  const long long* excess;
  int* tile_active;         // [B * push tiles], zeroed by seed_kernel
  unsigned long long* active;
  long long ptiles;         // B * push tiles
  int pTX, pTY, pTZ, pnTX, pnTY, pT;  // push tiling
};

// Tell tile q that a height it reads has changed (the change is written and fenced before). Returns
// true when the caller must put q into the ring (it was idle); a running tile is marked dirty instead.
__device__ __forceinline__ bool notify(const Work& W, long long q) {
  int cur = kIdle;
  while (true) {
    const int want = cur == kIdle ? kQueued : cur == kRunning ? kDirty : -1;
    if (want < 0) return false;  // queued or dirty: its next relaxation starts after this change
    const int prev = atomicCAS(W.state + q, cur, want);
    if (prev == cur) return want == kQueued;
    cur = prev;
  }
}

// Put one tile into the ring (counted in pending before it becomes visible to a consumer).
__device__ __forceinline__ void push_one(const Work& W, long long q, int gen) {
  W.gen[q] = gen;
  atomic_add(W.pending, 1LL);
  atomicMax(W.max_gen, (long long)gen);
  __threadfence();
  const unsigned long long pos = atomicAdd(W.tail, 1ULL);
  atomicExch(reinterpret_cast<unsigned long long*>(W.ring + (pos & W.mask)), (unsigned long long)q);
}

template <typename MaskT, int DT, bool QUEUE, class S = Sh<>>
__device__ __forceinline__ int bfs_scan_tile(const MaskT* __restrict__ mask, int* __restrict__ height,
                                              int* __restrict__ epoch, long long* __restrict__ last_changed,
                                              const Geom& G, int launch, int b, int t, bool check, const Work& W,
                                              int gen, long long t_start = 0) {
  const int D = DT ? DT : G.D;
  int* ep = epoch + (long long)b * G.T;
  if (!QUEUE && check && G.bfs_skip) {
    bool go = false;
    if (threadIdx.x < 27) {
      const int tx = t % G.nTX, ty = (t / G.nTX) % G.nTY, tz = t / (G.nTX * G.nTY);
      const int ax = tx + (int)threadIdx.x % 3 - 1, ay = ty + ((int)threadIdx.x / 3) % 3 - 1,
                az = tz + (int)threadIdx.x / 9 - 1;
      if (ax >= 0 && ay >= 0 && az >= 0 && ax < G.nTX && ay < G.nTY && az < G.nTZ)
        go = __ldcg(ep + ax + G.nTX * (ay + G.nTY * az)) >= launch - 1;
    }
    if (!__syncthreads_or(go)) return 0;
  }
  __shared__ int dist_s[kScanSmem];
  __shared__ MaskT m_s[kScanSmem];
  int* hb = height + (long long)b * G.N;
  const Local L = locate_at<S>(G, t, threadIdx.x);
  const int si = L.lx + (S::tx(G) + 1) * (L.ly + S::ty(G) * L.lz);
  MaskT m = 0, m_other = 0;
  int cur0 = kInf;
  long long ex = 0;  // fused count: the node's excess (read with the mask, used at the end)
  if (L.valid) {
    m = mask[(long long)b * G.N + L.g];
    cur0 = QUEUE ? __ldcg(hb + L.g) : hb[L.g];  // queue: other blocks wrote it in this launch
    if (QUEUE && W.excess != nullptr) ex = W.excess[(long long)b * G.N + L.g];
  }
  int best = cur0;
  // Heights across the tile border, loaded whatever the mask says, so that the loads overlap the mask's.
  // With the directions known at compile time, every load is issued before the first is used (one
  // memory latency per visit instead of one per direction: v7 profile, load phase 3.4 us per visit).
  auto across = [&](int d) {
    const int vx = L.x + G.dx[d], vy = L.y + G.dy[d], vz = L.z + G.dz[d];
    return L.valid && !in_tile<S>(G, L, d) && (unsigned)vx < (unsigned)G.X && (unsigned)vy < (unsigned)G.Y &&
           (unsigned)vz < (unsigned)G.Z;
  };
  if constexpr (DT > 0) {
    int hv[DT];
#pragma unroll
    for (int d = 0; d < DT; ++d) hv[d] = across(d) ? __ldcg(hb + L.g + G.glin[d]) : kInf;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      if (in_tile<S>(G, L, d)) {
        if ((G.other >> d) & 1) m_other |= m & ((MaskT)1 << d);
      } else if ((m >> d) & 1) {
        best = min(best, hv[d] + 1);
      }
    }
  } else {
    for (int d = 0; d < D; ++d) {
      if (in_tile<S>(G, L, d)) {
        if ((G.other >> d) & 1) m_other |= m & ((MaskT)1 << d);
        continue;
      }
      if (!across(d)) continue;
      const int hv = __ldcg(hb + L.g + G.glin[d]);
      if ((m >> d) & 1) best = min(best, hv + 1);
    }
  }
  __shared__ unsigned s_next;  // queue: neighbouring tiles (3x3x3 bits) that must relax again
  if (QUEUE && threadIdx.x == 0) s_next = 0;
  dist_s[si] = best;
  m_s[si] = m;
  __syncthreads();
  long long tm = 0;
  if (QUEUE && W.prof != nullptr && threadIdx.x == 0) tm = t_start;
  if (QUEUE) mark(W.prof, 8, tm);
  // Passes: a line scan along each axis that has unit steps, then (if any) a Jacobi step over the other
  // arcs, in turn; the tile is at its fixed point once every pass has run without a change. What a thread
  // reads in each scan pass (its node's slot and residual arcs along the axis) is set up once per tile.
  int p0 = 0, p1 = 0, p2 = 0;  // the thread's slot in the x, y and z passes
  unsigned links = 0;  // bit 2a: arc to the previous node along axis a, bit 2a + 1: to the next one
  unsigned order = 0;  // the passes in turn, 2 bits each (3 = the Jacobi step)
  int P = 0;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    const int E = a == 0 ? S::tx(G) : a == 1 ? S::ty(G) : S::tz(G);
    if (E == 1 || (G.axm[a] < 0 && G.axp[a] < 0)) continue;  // uniform over the block
    order |= (unsigned)a << (2 * P++);
    const int q = (int)threadIdx.x;
    int lx, ly, lz;  // the thread's node in this pass: the axis coordinate is the fastest
    if (a == 0) {
      lx = q % S::tx(G), ly = (q / S::tx(G)) % S::ty(G), lz = q / (S::tx(G) * S::ty(G));
    } else if (a == 1) {
      ly = q % S::ty(G), lx = (q / S::ty(G)) % S::tx(G), lz = q / (S::tx(G) * S::ty(G));
    } else {
      lz = q % S::tz(G), lx = (q / S::tz(G)) % S::tx(G), ly = q / (S::tz(G) * S::tx(G));
    }
    const int idx = lx + (S::tx(G) + 1) * (ly + S::ty(G) * lz);
    (a == 0 ? p0 : a == 1 ? p1 : p2) = idx;
    const MaskT mm = m_s[idx];
    if (G.axm[a] >= 0 && ((mm >> G.axm[a]) & 1)) links |= 1u << (2 * a);
    if (G.axp[a] >= 0 && ((mm >> G.axp[a]) & 1)) links |= 2u << (2 * a);
  }
  if (G.other) order |= 3u << (2 * P++);
  int passes = 0;
  for (int k = 0, quiet = 0; P > 0 && quiet < P; k = k + 1 == P ? 0 : k + 1, ++passes) {
    const int a = (int)(order >> (2 * k)) & 3;
    bool ch = false;
    if (a < 3) {
      const int idx = a == 0 ? p0 : a == 1 ? p1 : p2;
      const int E = a == 0 ? S::tx(G) : a == 1 ? S::ty(G) : S::tz(G);
      const int d0 = dist_s[idx];
      const int d1 = scan_line(d0, (links >> (2 * a)) & 1, (links >> (2 * a + 1)) & 1, E);
      if (d1 < d0) {
        dist_s[idx] = d1;
        ch = true;
      }
    } else if (m_other) {  // diagonals and long offsets inside the tile (old or new values: both bound)
      const int d0 = dist_s[si];
      int bst = d0;
#pragma unroll
      for (int d = 0; d < D; ++d)
        if ((m_other >> d) & 1) bst = min(bst, dist_s[si + G.plin[d]] + 1);
      if (bst < d0) {
        dist_s[si] = bst;
        ch = true;
      }
    }
    quiet = __syncthreads_or(ch) ? 0 : quiet + 1;
  }
  if (QUEUE) mark(W.prof, 9, tm);
  const int fin = dist_s[si];
  const bool mine = fin < cur0;
  if constexpr (QUEUE) {
    // Tiles with an arc into a changed node relax again: the write is fenced before the notification,
    // and a tile's relaxation reads only after it left the queued state (an atomic), so it either sees
    // the new height or starts again after it (notify). Heights that never change (1, next to the sink)
    // reach other tiles because those tiles are seeds too (bfs_init_kernel).
    if (mine) {
      hb[L.g] = fin;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        if (in_tile<S>(G, L, d)) continue;
        const int vx = L.x + G.dx[d], vy = L.y + G.dy[d], vz = L.z + G.dz[d];
        if ((unsigned)vx >= (unsigned)G.X || (unsigned)vy >= (unsigned)G.Y || (unsigned)vz >= (unsigned)G.Z) continue;
        if (G.bfs_skip) {  // a neighbouring tile: one bit, queued once below
          const int ox = L.lx + G.dx[d] < 0 ? 0 : L.lx + G.dx[d] >= S::tx(G) ? 2 : 1;
          const int oy = L.ly + G.dy[d] < 0 ? 0 : L.ly + G.dy[d] >= S::ty(G) ? 2 : 1;
          const int oz = L.lz + G.dz[d] < 0 ? 0 : L.lz + G.dz[d] >= S::tz(G) ? 2 : 1;
          atomicOr(&s_next, 1u << (ox + 3 * (oy + 3 * oz)));
        } else {  // offsets longer than a tile: notify the tile of the target directly
          __threadfence();
          const long long q = (long long)b * G.T + vx / S::tx(G) + G.nTX * (vy / S::ty(G) + G.nTY * (vz / S::tz(G)));
          if (notify(W, q)) push_one(W, q, gen + 1);
        }
      }
      if (!W.lean) __threadfence();
    }
    bool act = false;
    if (W.excess != nullptr && L.valid && fin < kInf && ex > 0) {  // fused count: an active node
      act = true;
      const int px = L.x / W.pTX, py = L.y / W.pTY, pz = L.z / W.pTZ;
      W.tile_active[(long long)b * W.pT + px + W.pnTX * (py + W.pnTY * pz)] = 1;
    }
    if (W.lean || W.excess != nullptr) {  // bit 27: some height changed, bit 28: some node is active
      const unsigned wm = __ballot_sync(0xffffffffu, mine), wa = __ballot_sync(0xffffffffu, act);
      if ((threadIdx.x & 31) == 0 && (wm | wa)) atomicOr(&s_next, (wm ? 1u << 27 : 0u) | (wa ? 1u << 28 : 0u));
    }
    __syncthreads();
    mark(W.prof, 10, tm);
    if (threadIdx.x < 32) {  // warp 0 queues the flagged neighbours: one pending add, one tail add
      const unsigned next = s_next;
      // lean: one fence for the whole block's height writes (ordered before it by the barrier), before
      // any notification or the tile's return to idle makes them someone else's input
      if (W.lean && ((next >> 27) & 1)) __threadfence();
      if (threadIdx.x == 0 && ((next >> 28) & 1)) atomicAdd(W.active, 1ULL);
      long long q = -1;
      if (threadIdx.x < 27 && ((next >> threadIdx.x) & 1)) {
        const int tx = t % G.nTX + (int)threadIdx.x % 3 - 1, ty = (t / G.nTX) % G.nTY + ((int)threadIdx.x / 3) % 3 - 1,
                  tz = t / (G.nTX * G.nTY) + (int)threadIdx.x / 9 - 1;
        if (tx >= 0 && ty >= 0 && tz >= 0 && tx < G.nTX && ty < G.nTY && tz < G.nTZ) {
          q = (long long)b * G.T + tx + G.nTX * (ty + G.nTY * tz);
          if (!notify(W, q)) q = -1;
        }
      }
      const unsigned win = __ballot_sync(0xffffffffu, q >= 0);
      if (win) {
        if (q >= 0) W.gen[q] = gen + 1;
        if (threadIdx.x == 0) {
          atomic_add(W.pending, (long long)__popc(win));  // counted before the tiles become visible
          atomicMax(W.max_gen, (long long)gen + 1);
        }
        __threadfence();
        unsigned long long pos = 0;
        if (threadIdx.x == 0) pos = atomicAdd(W.tail, (unsigned long long)__popc(win));
        pos = __shfl_sync(0xffffffffu, pos, 0) + __popc(win & ((1u << threadIdx.x) - 1u));
        if (q >= 0) atomicExch(reinterpret_cast<unsigned long long*>(W.ring + (pos & W.mask)), (unsigned long long)q);
      }
      mark(W.prof, 11, tm);
    }
  } else if (mine) {
    hb[L.g] = fin;
  }
  if (!QUEUE && __syncthreads_or(mine) && threadIdx.x == 0) {
    ep[t] = launch;
    atomicMax(last_changed, (long long)launch);
  }
  return passes;
}

// Queue BFS (v6): one launch per global relabel. Resident blocks take tiles from a ring buffer, relax
// them (bfs_scan_tile) and notify the neighbouring tiles whose nodes can now reach the sink by a shorter
// path. Asynchronous Bellman-Ford: no launch boundaries, no host reads, every block always has the next
// tile of the wavefront. Converged when no tile is queued or running (pending == 0): then every tile was
// relaxed after the last change of the heights it reads, so all residual arcs satisfy d(u) <= d(v) + 1
// and the heights are the exact distances. Seeds: the tiles holding a node with a residual sink arc
// (bfs_init_kernel, seed_kernel).
// Bound to 32 registers (four 512-thread blocks per SM; ~25 values spill to the stack). v7 measured a
// 64-register variant with two blocks per SM: 30% less time per visit, half the blocks, no faster.
template <typename MaskT, int DT, class S>
__global__ void __launch_bounds__(1024, 2)
    bfs_queue_kernel(const MaskT* __restrict__ mask, int* __restrict__ height, const __grid_constant__ Geom G,
                     const Work W) {
  __shared__ long long s_item;
  long long t0 = 0, t1 = 0;
  while (true) {
    if (threadIdx.x == 0) {
      if (W.prof != nullptr) t0 = clock64();
      const unsigned long long pos = atomicAdd(W.head, 1ULL);
      volatile long long* slot = W.ring + (pos & W.mask);
      long long item;
      for (long long spins = 0;; ++spins) {
        if (W.lean) {  // take and clear in one round trip
          item = (long long)atomicExch(reinterpret_cast<unsigned long long*>(W.ring + (pos & W.mask)), ~0ULL);
          if (item >= 0) break;
        } else {
          item = *slot;
          if (item >= 0) {
            *slot = -1;
            break;
          }
        }
        // converged: nothing queued, nothing running (lean: polled every 4th spin, a hot line)
        if ((!W.lean || (spins & 3) == 3) && *(volatile long long*)W.pending == 0) break;
        if (spins > (1LL << 26)) {                         // seconds; would mean a bug, never a hang
          atomicExch(reinterpret_cast<unsigned long long*>(W.stalled), 1ULL);
          break;
        }
        __nanosleep(100);
      }
      if (item >= 0) {
        if (!W.lean) __threadfence();
        atomicExch(W.state + item, kRunning);  // from now on a change of a neighbour marks it dirty
        __threadfence();  // (acquire) the heights are read after the state and the slot
        atomic_add(W.visits, 1LL);
      }
      s_item = item;
      if (W.prof != nullptr) {
        t1 = clock64();
        atomicAdd(W.prof + 3, (unsigned long long)(t1 - t0));
      }
    }
    __syncthreads();
    const long long item = s_item;
    if (item < 0) return;
    const int b = item < G.T ? 0 : (int)(item / G.T);
    const int gen = __ldcg(W.gen + item);
    const int passes = bfs_scan_tile<MaskT, DT, true, S>(mask, height, nullptr, nullptr, G, 0, b,
                                                      (int)(item - (long long)b * G.T), false, W, gen, t1);
    __syncthreads();  // this tile's writes are fenced and its notifications counted
    if (threadIdx.x == 0) {
      // lean: the heights were fenced by warp 0 (if any changed) and thread 0 made the pending adds of
      // the notifications itself, so program order keeps them before the decrement below
      if (!W.lean) __threadfence();
      if (atomicCAS(W.state + item, kRunning, kIdle) == kDirty) {  // a neighbour changed meanwhile: again
        atomicExch(W.state + item, kQueued);
        push_one(W, item, gen);
      }
      if (!W.lean) __threadfence();
      atomic_add(W.pending, -1LL);
      if (W.prof != nullptr) {
        atomicAdd(W.prof + 4, (unsigned long long)(clock64() - t1));
        atomicAdd(W.prof + 5, (unsigned long long)passes);
      }
    }
  }
}

// Queue the seed tiles (flagged by bfs_init_kernel); fused count: clear the push tiles' flags.
__global__ void seed_kernel(const Work W, long long tiles) {
  if (W.tile_active != nullptr)
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < W.ptiles; q += (long long)gridDim.x * blockDim.x)
      W.tile_active[q] = 0;
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < tiles; q += (long long)gridDim.x * blockDim.x) {
    if (W.state[q] != kQueued) continue;
    W.gen[q] = 0;
    atomic_add(W.pending, 1LL);
    const unsigned long long pos = atomicAdd(W.tail, 1ULL);
    W.ring[pos & W.mask] = q;
  }
}

// walk: as in push_kernel (one flat walk over the tiles of all items, 32 tiles' skip tests at once).
// One node per thread: at most 32 registers, so that the 4 blocks per SM of the persistent grid are resident.
// SCAN: tiles of up to 1024 threads relaxed by bfs_scan_tile, two blocks per SM.
template <typename MaskT, int DT, int NPT, bool SCAN>
__global__ void __launch_bounds__(SCAN ? 1024 : 512, SCAN ? 2 : (NPT == 1 ? 4 : 1))
    bfs_kernel(const MaskT* __restrict__ mask, int* __restrict__ height, int* __restrict__ epoch,
               long long* __restrict__ last_changed, const __grid_constant__ Geom G, int launch, int walk, int items) {
  // The previous launch changed nothing: the BFS has converged, this launch is spare.
  if (__ldcg(last_changed) < launch - 1) return;
  if (!walk) {
    for (int t = blockIdx.x; t < G.T; t += gridDim.x) {
      if constexpr (SCAN)
        bfs_scan_tile<MaskT, DT, false>(mask, height, epoch, last_changed, G, launch, blockIdx.y, t, true, Work{}, 0);
      else
        bfs_tile<MaskT, DT, NPT>(mask, height, epoch, last_changed, G, launch, blockIdx.y, t, true);
      __syncthreads();  // dist_s is reused by the next tile
    }
    return;
  }
  __shared__ unsigned s_bits;
  const long long total = (long long)G.T * items;
  for (long long q0 = blockIdx.x; q0 < total; q0 += 32LL * gridDim.x) {
    if (threadIdx.x == 0) s_bits = 0;
    __syncthreads();
    // Thread (j, a): neighbour a (3x3x3) of the group's tile j changed in this launch or the last one?
    for (int idx = threadIdx.x; idx < 32 * 27; idx += blockDim.x) {
      const int j = idx / 27, a = idx - j * 27;
      const long long q = q0 + (long long)j * gridDim.x;
      if (q >= total) continue;
      bool go = a == 0;
      if (G.bfs_skip) {
        const int b = (int)(q / G.T);
        const int t = (int)(q - (long long)b * G.T);
        const int tx = t % G.nTX, ty = (t / G.nTX) % G.nTY, tz = t / (G.nTX * G.nTY);
        const int ax = tx + a % 3 - 1, ay = ty + (a / 3) % 3 - 1, az = tz + a / 9 - 1;
        go = ax >= 0 && ay >= 0 && az >= 0 && ax < G.nTX && ay < G.nTY && az < G.nTZ &&
             __ldcg(epoch + (long long)b * G.T + ax + G.nTX * (ay + G.nTY * az)) >= launch - 1;
      }
      if (go) atomicOr(&s_bits, 1u << j);
    }
    __syncthreads();
    unsigned bits = s_bits;
    __syncthreads();  // s_bits is reset for the next group only after every thread has read it
    while (bits) {
      const int j = __ffs(bits) - 1;
      bits &= bits - 1;
      const long long q = q0 + (long long)j * gridDim.x;
      const int b = (int)(q / G.T);
      const int t = (int)(q - (long long)b * G.T);
      if constexpr (SCAN)
        bfs_scan_tile<MaskT, DT, false>(mask, height, epoch, last_changed, G, launch, b, t, false, Work{}, 0);
      else
        bfs_tile<MaskT, DT, NPT>(mask, height, epoch, last_changed, G, launch, b, t, false);
      __syncthreads();  // dist_s is reused by the next tile
    }
  }
}

// Active nodes (excess > 0, finite distance) per tile and in total, right after a BFS.
__global__ void count_kernel(const long long* __restrict__ excess, const int* __restrict__ height,
                             int* __restrict__ tile_active, unsigned long long* __restrict__ count,
                             const __grid_constant__ Geom G) {
  const Local L = locate(G);
  const long long q = (long long)blockIdx.y * G.N + L.g;
  const bool a = L.valid && excess[q] > 0 && height[q] < kInf;
  const int n = __syncthreads_count(a);
  if (threadIdx.x == 0) {
    tile_active[(long long)blockIdx.y * G.T + blockIdx.x] = n > 0;
    if (n) {
      atomicAdd(count, (unsigned long long)n);
      atomicAdd(count + 1, 1ULL);  // active tiles
    }
  }
}

__global__ void mask_kernel(const int* __restrict__ height, bool* __restrict__ out, long long total) {
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total;
       q += (long long)gridDim.x * blockDim.x)
    out[q] = height[q] >= kInf;
}

int pick_tile(int64_t want, int fallback) { return want > 0 ? (int)want : fallback; }

#define COMMA ,

template <typename CapT>
void launch_push(int D, int minb, dim3 grid, int threads, size_t smem, cudaStream_t st, CapT* caps, long long* excess,
                 CapT* sink, int* height, int* tile_active, const Geom& G, int rounds, int walk, int items,
                 const long long* guard, long long guard_launch, unsigned long long* prof, bool plain,
                 unsigned long long* pq, long long* plist) {
  const bool t2 = G.TX == 32 && G.TY == 16 && G.TZ == 1, t3 = G.TX == 16 && G.TY == 8 && G.TZ == 4,
             t8 = G.TX == 8 && G.TY == 8 && G.TZ == 8;
#define TC_PUSH_S(DV, MB, SH)                                                                                \
  {                                                                                                          \
    auto kern = push_kernel<CapT, DV, MB, SH>;                                                               \
    if (smem > 48 * 1024)                                                                                    \
      TC_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));    \
    kern<<<grid, threads, smem, st>>>(caps, excess, sink, height, tile_active, G, rounds, walk, items, guard, \
                                      guard_launch, prof, plain, pq, plist);                                 \
  }
#define TC_PUSH(DV, MB)                                                                      \
  if constexpr (DV == 4 || DV == 8) {                                                        \
    if (t2) TC_PUSH_S(DV, MB, Sh<32 COMMA 16 COMMA 1>) else TC_PUSH_S(DV, MB, Sh<>)          \
  } else if constexpr (DV == 6) {                                                            \
    if (t3) TC_PUSH_S(DV, MB, Sh<16 COMMA 8 COMMA 4>)                                        \
    else if (t8) TC_PUSH_S(DV, MB, Sh<8 COMMA 8 COMMA 8>) else TC_PUSH_S(DV, MB, Sh<>)       \
  } else {                                                                                   \
    TC_PUSH_S(DV, MB, Sh<>)                                                                  \
  }                                                                                          \
  break;
  if (minb == 2 && threads <= 512) {  // 2 blocks per SM: at most 64 registers a thread
    switch (D) {
      case 4: TC_PUSH(4, 2)
      case 6: TC_PUSH(6, 2)
      case 8: TC_PUSH(8, 2)
      default: minb = 1;
    }
    if (minb == 2) return;
  }
  switch (D) {
    case 4: TC_PUSH(4, 1)
    case 6: TC_PUSH(6, 1)
    case 8: TC_PUSH(8, 1)
    case 18: TC_PUSH(18, 1)
    case 26: TC_PUSH(26, 1)
    default: TC_PUSH(0, 1)
  }
#undef TC_PUSH
#undef TC_PUSH_S
}

template <typename MaskT>
void launch_bfs_queue(int D, int blocks, int threads, cudaStream_t st, const MaskT* mask, int* height, const Geom& G,
                      const Work& W) {
  const bool t2 = G.TX == 32 && G.TY == 16 && G.TZ == 1, t3 = G.TX == 8 && G.TY == 8 && G.TZ == 8;
#define TC_QUEUE_S(DV, SH) \
  { bfs_queue_kernel<MaskT, DV, SH><<<blocks, threads, 0, st>>>(mask, height, G, W); }
#define TC_QUEUE(DV)                                                                       \
  if constexpr (DV == 4 || DV == 8) {                                                      \
    if (t2) TC_QUEUE_S(DV, Sh<32 COMMA 16 COMMA 1>) else TC_QUEUE_S(DV, Sh<>)              \
  } else if constexpr (DV == 6 || DV == 26) {                                              \
    if (t3) TC_QUEUE_S(DV, Sh<8 COMMA 8 COMMA 8>) else TC_QUEUE_S(DV, Sh<>)                \
  } else {                                                                                 \
    TC_QUEUE_S(DV, Sh<>)                                                                   \
  }
  switch (sizeof(MaskT) > 4 ? 0 : D) {
    case 4: TC_QUEUE(4); break;
    case 6: TC_QUEUE(6); break;
    case 8: TC_QUEUE(8); break;
    case 18: TC_QUEUE(18); break;
    case 26: TC_QUEUE(26); break;
    default: TC_QUEUE(0); break;
  }
#undef TC_QUEUE
#undef TC_QUEUE_S
}

template <typename MaskT>
void launch_bfs(int D, int npt, bool scan, dim3 grid, int threads, cudaStream_t st, const MaskT* mask, int* height,
                int* epoch, long long* last_changed, const Geom& G, int launch, int walk, int items) {
  if (scan) {
#define TC_SCAN(DV) \
  bfs_kernel<MaskT, DV, 1, true><<<grid, threads, 0, st>>>(mask, height, epoch, last_changed, G, launch, walk, items)
    switch (sizeof(MaskT) > 4 ? 0 : D) {
      case 4: TC_SCAN(4); break;
      case 6: TC_SCAN(6); break;
      case 8: TC_SCAN(8); break;
      case 18: TC_SCAN(18); break;
      case 26: TC_SCAN(26); break;
      default: TC_SCAN(0); break;
    }
#undef TC_SCAN
  } else if constexpr (sizeof(MaskT) > 4) {  // only generic grids have more than 32 directions
    bfs_kernel<MaskT, 0, 1, false><<<grid, threads, 0, st>>>(mask, height, epoch, last_changed, G, launch, walk, items);
  } else {
#define TC_BFS(DV, NV) \
  bfs_kernel<MaskT, DV, NV, false><<<grid, threads, 0, st>>>(mask, height, epoch, last_changed, G, launch, walk, items)
#define TC_BFS_N(DV)          \
  if (npt == 8)               \
    TC_BFS(DV, 8);            \
  else if (npt == 4)          \
    TC_BFS(DV, 4);            \
  else                        \
    TC_BFS(DV, 1);            \
  break;
    switch (D) {
      case 4: TC_BFS_N(4)
      case 6: TC_BFS_N(6)
      case 8: TC_BFS_N(8)
      case 18: TC_BFS(18, 1); break;
      case 26: TC_BFS(26, 1); break;
      default: TC_BFS(0, 1); break;
    }
#undef TC_BFS_N
#undef TC_BFS
  }
}

// Tile counts, per-direction offsets and whether BFS tile skipping is safe, from X/Y/Z and TX/TY/TZ.
void finish_geom(Geom& G, const std::vector<int64_t>& offsets, int nd) {
  const int K = G.K;
  G.nTX = (G.X + G.TX - 1) / G.TX;
  G.nTY = (G.Y + G.TY - 1) / G.TY;
  G.nTZ = (G.Z + G.TZ - 1) / G.TZ;
  G.T = G.nTX * G.nTY * G.nTZ;
  G.bfs_skip = 1;
  for (int d = 0; d < G.D; ++d) {
    const int k = d < K ? d : d - K;
    const int sgn = d < K ? 1 : -1;
    const int ox = sgn * (int)offsets[k * nd + nd - 1];
    const int oy = sgn * (int)offsets[k * nd + nd - 2];
    const int oz = nd == 3 ? sgn * (int)offsets[k * nd] : 0;
    G.dx[d] = ox;
    G.dy[d] = oy;
    G.dz[d] = oz;
    G.slin[d] = ox + G.TX * (oy + G.TY * oz);
    G.glin[d] = ox + (long long)G.X * (oy + (long long)G.Y * oz);
    // tile skipping looks at the 3x3x3 neighbouring tiles only
    if (std::abs(ox) > G.TX || std::abs(oy) > G.TY || std::abs(oz) > G.TZ) G.bfs_skip = 0;
  }
  // push: the height box (halo as deep as the longest offset along each axis, at most 2)
  int px = 0, py = 0, pz = 0;
  for (int d = 0; d < G.D; ++d) {
    px = std::max(px, std::abs(G.dx[d]));
    py = std::max(py, std::abs(G.dy[d]));
    pz = std::max(pz, std::abs(G.dz[d]));
  }
  G.box = px <= 2 && py <= 2 && pz <= 2;
  if (!G.box) px = py = pz = 0;
  G.px = px;
  G.py = py;
  G.pz = pz;
  G.BX = G.TX + 2 * px;
  G.BY = G.TY + 2 * py;
  G.boxN = G.BX * G.BY * (G.TZ + 2 * pz);
  // scan BFS: padded layout, unit steps along each axis, the rest
  G.SX = G.TX + 1;
  G.other = 0;
  for (int a = 0; a < 3; ++a) G.axm[a] = G.axp[a] = -1;
  for (int d = 0; d < G.D; ++d) {
    G.boff[d] = G.dx[d] + G.BX * (G.dy[d] + G.BY * G.dz[d]);
    G.plin[d] = G.dx[d] + G.SX * (G.dy[d] + G.TY * G.dz[d]);
    const int ax = std::abs(G.dx[d]), ay = std::abs(G.dy[d]), az = std::abs(G.dz[d]);
    const int a = ax + ay + az != 1 ? -1 : ax ? 0 : ay ? 1 : 2;
    if (a >= 0) {
      const int step = G.dx[d] + G.dy[d] + G.dz[d];
      (step < 0 ? G.axm : G.axp)[a] = d;
    } else {
      G.other |= 1ULL << d;
    }
  }
}

bool pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

template <typename CapT, typename MaskT>
std::tuple<at::Tensor, at::Tensor> solve_typed(at::Tensor caps, at::Tensor excess, at::Tensor sink, const Geom& G,
                                               const Geom& GB, int npt, bool scan, int64_t B,
                                               const std::vector<int64_t>& opts) {
  const int NT = G.TX * G.TY * G.TZ;
  const int NTB = scan ? GB.TX * GB.TY * GB.TZ : NT;  // threads of a BFS block
  auto st = at::cuda::getCurrentCUDAStream();
  auto i32 = excess.options().dtype(at::kInt);
  const long long total = (long long)B * G.N;
  at::Tensor height = at::empty({total}, i32);
  at::Tensor mask = at::empty({total}, excess.options().dtype(sizeof(MaskT) == 4 ? at::kInt : at::kLong));
  at::Tensor tile_active = at::zeros({B * G.T}, i32);
  at::Tensor epoch = at::zeros({B * GB.T}, i32);
  // Counters (slots k*): last_changed, active count, the profile counters, and the queue BFS's head, tail,
  // pending, max_gen, visits and stalled, each of those in its own 128-byte line (every visit updates
  // them, and idle blocks poll pending).
  at::Tensor scal = at::zeros({kSlots}, excess.options());
  at::Tensor host = at::empty({kSlots}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));

  CapT* cp = reinterpret_cast<CapT*>(caps.data_ptr());
  CapT* sp = reinterpret_cast<CapT*>(sink.data_ptr());
  long long* ep = reinterpret_cast<long long*>(excess.data_ptr());
  int* hp = height.data_ptr<int>();
  MaskT* mp = reinterpret_cast<MaskT*>(mask.data_ptr());
  int* tap = tile_active.data_ptr<int>();
  int* epp = epoch.data_ptr<int>();
  long long* scp = reinterpret_cast<long long*>(scal.data_ptr());
  long long* hostp = reinterpret_cast<long long*>(host.data_ptr());

  const dim3 tgrid(G.T, (unsigned)B);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  // walk (default on): one flat persistent walk over the tiles of all items, so that an item's blocks do
  // not shrink with the batch (v4 gave each item persist * SMs / B blocks). pipeline = n > 0 (default off:
  // measured no faster, NOTES-grid.md v5): the host queues n guarded pushes and more BFS launches behind
  // each read-back (see below).
  const int walk = opts[kWalk] < 0 ? 0 : 1;
  const bool profile = opts[kProfile] != 0;
  const int trace = opts[kProfile] >= 2;  // one line per relabel cycle and push launch on stderr
  unsigned long long* prof = profile ? reinterpret_cast<unsigned long long*>(scp + kProf) : nullptr;
  const bool pipeline = opts[kPipeline] > 0 && !profile;  // profiling needs the synchronous loop
  const int spec = pipeline ? (int)opts[kPipeline] : 0;   // pushes queued before the host knows
  const int per_sm_push = (int)(opts[kPersist] > 0 ? opts[kPersist] : 2);
  const int exp = opts[kExp] > 0 ? (int)opts[kExp] : 0;
  const int per_sm_bfs = (int)(opts[kPersist] > 0 ? opts[kPersist] : std::max(1, 2048 / NTB));
  int push_blocks, bfs_blocks;
  if (walk) {
    const long long pt = (long long)G.T * B, bt = (long long)GB.T * B;
    const long long cap = (1LL << 31) - 1;
    push_blocks = (int)std::min(cap, opts[kPersist] < 0 ? pt : std::min<long long>(pt, (long long)per_sm_push * sms));
    bfs_blocks = (int)std::min(cap, opts[kPersist] < 0 ? bt : std::min<long long>(bt, (long long)per_sm_bfs * sms));
  } else {
    push_blocks = opts[kPersist] < 0 ? G.T : std::min<int>(G.T, std::max<int>(1, per_sm_push * sms / (int)B));
    bfs_blocks = opts[kPersist] < 0 ? GB.T : std::min<int>(GB.T, std::max<int>(1, per_sm_bfs * sms / (int)B));
  }
  // Queue BFS (default with the scan BFS; bfs_queue = -1: BFS launches until one changes nothing).
  const bool queue = scan && opts[kBfsQueue] >= 0 && !pipeline;
  const long long qtiles = (long long)GB.T * B;
  at::Tensor state, ring, gen;
  Work W{};
  if (queue) {
    unsigned long long capq = 4096;
    while (capq < 4ULL * (unsigned long long)(qtiles + 4096)) capq <<= 1;  // never wraps onto a live slot
    state = at::zeros({qtiles}, i32);
    gen = at::zeros({qtiles}, i32);
    ring = at::full({(long long)capq}, -1, excess.options());
    W.state = state.data_ptr<int>();
    W.gen = gen.data_ptr<int>();
    W.ring = reinterpret_cast<long long*>(ring.data_ptr());
    W.mask = capq - 1;
    W.head = reinterpret_cast<unsigned long long*>(scp + kHead);
    W.tail = reinterpret_cast<unsigned long long*>(scp + kTail);
    W.pending = scp + kPending;
    W.stalled = scp + kStalled;
    W.max_gen = scp + kMaxGen;
    W.visits = scp + kVisits;
    W.lean = exp & 1;
    W.prof = prof;
    if (exp & 2) {  // fused count
      W.excess = ep;
      W.tile_active = tap;
      W.active = reinterpret_cast<unsigned long long*>(scp + kActive);
      W.ptiles = (long long)G.T * B;
      W.pTX = G.TX;
      W.pTY = G.TY;
      W.pTZ = G.TZ;
      W.pnTX = G.nTX;
      W.pnTY = G.nTY;
      W.pT = G.T;
    }
  }
  const dim3 pgrid(push_blocks, walk ? 1u : (unsigned)B);
  const dim3 bgrid(bfs_blocks, walk ? 1u : (unsigned)B);
  const int items = (int)B;
  const int push_minb = opts[kPushBlocks] == 1 ? 1 : 2;
  cudaEvent_t ev[3];
  float bfs_ms = 0, push_ms = 0;
  if (profile)
    for (auto& e : ev) TC_CUDA_CHECK(cudaEventCreate(&e));
  struct EventGuard {  // destroys the events on every exit
    cudaEvent_t* e;
    int n;
    ~EventGuard() {
      for (int k = 0; k < n; ++k) cudaEventDestroy(e[k]);
    }
  } ev_guard{ev, profile ? 3 : 0};
  cudaEvent_t ready;
  TC_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  EventGuard ready_guard{&ready, 1};
  const size_t smem = (size_t)NT * (sizeof(long long) + (G.D + 1) * sizeof(CapT)) + (size_t)G.boxN * sizeof(int);
  const int flat_blocks = (int)std::min<long long>((total + 255) / 256, 132LL * 16);
  const int rounds = opts[kRounds] > 0 ? (int)opts[kRounds] : 16;
  const int64_t push_opt = opts[kPushLaunches];
  const int batch_opt = opts[kBfsBatch] > 0 ? (int)opts[kBfsBatch] : 0;
  const int64_t max_cycles = opts[kMaxCycles] > 0 ? opts[kMaxCycles] : 1000000;
  // balanced walk (push_walk >= 0): list of active tiles, [0] next, [1] length (reset before each push launch)
  const bool balanced = opts[kPushWalk] >= 0 && walk;
  at::Tensor plist_t = balanced ? at::empty({(long long)G.T * B}, excess.options()) : at::Tensor();
  unsigned long long* pq0 = reinterpret_cast<unsigned long long*>(scp + kPushQueue);  // two pairs, zero at start
  long long* plist = balanced ? reinterpret_cast<long long*>(plist_t.data_ptr()) : nullptr;
  long long push_seq = 0;
  auto push = [&](const long long* guard, long long guard_launch) {
    unsigned long long* pq = nullptr;
    if (balanced) {  // launch k uses pair k % 2; its list_kernel clears the other pair for launch k + 1
      pq = pq0 + 2 * (push_seq & 1);
      unsigned long long* other = pq0 + 2 * ((push_seq + 1) & 1);
      ++push_seq;
      const long long pt = (long long)G.T * B;
      list_kernel<<<(int)std::min<long long>((pt + 255) / 256, 1024), 256, 0, st>>>(tap, pq, plist, pt, other);
    }
    launch_push<CapT>(G.D, push_minb, pgrid, NT, smem, st, cp, ep, sp, hp, tap, G, rounds, walk, items, guard,
                      guard_launch, prof, (exp & 8) != 0, pq, plist);
    TC_CUDA_CHECK(cudaGetLastError());
  };
  auto bfs = [&](int n, int& launch) {
    for (int k = 0; k < n; ++k) {
      ++launch;
      launch_bfs<MaskT>(G.D, npt, scan, bgrid, NTB, st, mp, hp, epp, scp, GB, launch, walk, items);
    }
    TC_CUDA_CHECK(cudaGetLastError());
  };
  // Active nodes per tile and in total, then both counters to the host (pinned, asynchronous).
  auto count_and_copy = [&](bool zeroed) {  // zeroed: bfs_init_kernel cleared the counts
    if (!zeroed) TC_CUDA_CHECK(cudaMemsetAsync(scp + kActive, 0, 2 * sizeof(long long), st));
    count_kernel<<<tgrid, NT, 0, st>>>(ep, hp, tap, reinterpret_cast<unsigned long long*>(scp + kActive), G);
    TC_CUDA_CHECK(cudaGetLastError());
    TC_CUDA_CHECK(cudaMemcpyAsync(hostp, scp, kSlots * sizeof(long long), cudaMemcpyDeviceToHost, st));
  };
  int clock_khz = 1;  // cycles per ms (profile counters are clock64 cycles)
  if (profile) {
    int dev = 0;
    TC_CUDA_CHECK(cudaGetDevice(&dev));
    TC_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  }
  const double khz = std::max(clock_khz, 1);
  long long seen[kSlots] = {0};  // trace: counters at the last line
  // Push launches between two global relabels: half the BFS depth (launches, or tiles for the queue BFS),
  // at most 4 with the queue BFS on 4/6-connected grids (v6 sweep: fixed 4 beat depth/2 by 5-12% at
  // 1024^2 4c and 128^3; on 1024^2 8c it lost 10-30%, so more directions keep depth/2).
  const int push_cap = queue && G.D <= 6 ? 4 : 64;
  // Tail (option push_tail, queue BFS only): when at most a quarter as many tiles are active as there are
  // push blocks, a push launch costs about one tile visit plus the launch (~25 us) and a BFS ~8 of them,
  // so run push_tail launches before the next BFS (v7 trace at 1024^2: the last 7 of 12 cycles had
  // 10-70 active tiles and 2-4 pushes each).
  // Default: as many launches as the BFS was deep in tiles, 6 to 24 (fixed 6 was best at 1024^2, 24 at
  // 2048^2; the depth grows with the grid).
  const bool tail_on = opts[kPushTail] >= 0;
  const int tail_fixed = opts[kPushTail] > 0 ? (int)opts[kPushTail] : 0;
  auto push_count = [&](int last) {
    return push_opt > 0 ? (int)push_opt : std::max(1, std::min(push_cap, last / 2));
  };

  int launch = 0;
  int64_t cycles = 0, bfs_launches = 0, push_launches = 0, syncs = 0, bfs_depth = 0;
  int status = kStatusOk;
  int last_bfs = 8;
  while (queue) {
    // ---- global relabel: one queue BFS launch, then one read-back
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev[1], st));
    // head .. max_gen (fused count: the active count too)
    // (zeroed by bfs_init_kernel: no memset nodes between the kernels)
    bfs_init_kernel<CapT, MaskT><<<flat_blocks, 256, 0, st>>>(cp, sp, mp, hp, GB, total, W.state, scp);
    seed_kernel<<<(int)std::min<long long>((std::max(qtiles, W.ptiles) + 255) / 256, 1024), 256, 0, st>>>(W, qtiles);
    launch_bfs_queue<MaskT>(G.D, bfs_blocks, NTB, st, mp, hp, GB, W);
    TC_CUDA_CHECK(cudaGetLastError());
    ++bfs_launches;
    if (W.active) {
      TC_CUDA_CHECK(cudaMemcpyAsync(hostp, scp, kSlots * sizeof(long long), cudaMemcpyDeviceToHost, st));
    } else {
      count_and_copy(true);
    }
    TC_CUDA_CHECK(cudaStreamSynchronize(st));
    ++syncs;
    if (hostp[kStalled] != 0) {  // never expected; reported by the Python layer (no exception crosses the op)
      status = kStatusStalled;
      goto finish;
    }
    if (profile) {
      TC_CUDA_CHECK(cudaEventRecord(ev[2], st));
      TC_CUDA_CHECK(cudaEventSynchronize(ev[2]));
      float a = 0;
      TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[1], ev[2]));
      bfs_ms += a;
      if (cycles > 0) {
        TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
        push_ms += a;
      }
    }
    last_bfs = (int)hostp[kMaxGen] + 1;  // wavefront depth in tiles: what a launch-based BFS would need
    bfs_depth += last_bfs;
    if (trace) {
      float a = 0;
      TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[1], ev[2]));
      const long long v = hostp[kVisits] - seen[kVisits];
      auto per = [&](int k) { return v ? (hostp[kProf + k] - seen[kProf + k]) / khz * 1000 / v : 0.0; };
      fprintf(stderr, "trace cycle %lld: bfs %.1f us, %lld visits, depth %d, pop %.2f us/visit, relax %.2f us/visit "
              "(load %.2f, passes %.2f, write %.2f, notify %.2f), %.1f passes/visit, active %lld (tiles %lld)\n", (long long)cycles,
              a * 1000, v, last_bfs, per(3), per(4), per(8), per(9), per(10), per(11),
              v ? (double)(hostp[kProf + 5] - seen[kProf + 5]) / v : 0.0, hostp[kActive],
              W.active ? hostp[kActive] : hostp[kActiveTiles]);
      for (int k = 0; k < kSlots; ++k) seen[k] = hostp[k];
    }
    if (hostp[kActive] == 0) break;
    if (++cycles > max_cycles) {  // reported by the Python layer (no exception crosses the op)
      status = kStatusCycles;
      goto finish;
    }
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev[0], st));
    // active tiles (fused count: BFS visits that found an active node, about the same)
    const long long act_tiles = W.active ? hostp[kActive] : hostp[kActiveTiles];
    int P = push_count(last_bfs);
    if (tail_on && push_opt <= 0 && act_tiles * 4 <= push_blocks)
      P = std::max(P, tail_fixed ? tail_fixed : std::min(24, std::max(6, last_bfs)));
    for (int p = 0; p < P; ++p) {
      if (trace) TC_CUDA_CHECK(cudaEventRecord(ev[2], st));
      push(nullptr, 0);
      if (trace) {
        TC_CUDA_CHECK(cudaEventRecord(ev[1], st));
        TC_CUDA_CHECK(cudaMemcpyAsync(hostp, scp, kSlots * sizeof(long long), cudaMemcpyDeviceToHost, st));
        TC_CUDA_CHECK(cudaStreamSynchronize(st));
        float a = 0;
        TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[2], ev[1]));
        const long long v = hostp[kProf] - seen[kProf];
        auto per = [&](int k) { return v ? (hostp[kProf + k] - seen[kProf + k]) / khz * 1000 / v : 0.0; };
        fprintf(stderr, "trace   push %d: %.1f us, %lld tiles, %.2f us/tile (load %.2f, rounds %.2f), %.1f rounds/tile\n",
                p, a * 1000, v, per(1), per(6), per(7), v ? (double)(hostp[kProf + 2] - seen[kProf + 2]) / v : 0.0);
        for (int k = 0; k < kSlots; ++k) seen[k] = hostp[k];
      }
    }
    push_launches += P;
  }
  while (!queue) {
    // ---- global relabel
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev[1], st));
    epoch.fill_(launch);
    scal.narrow(0, 0, 1).fill_(launch);  // "changed at the launch before the first": the first one runs
    bfs_init_kernel<CapT, MaskT><<<flat_blocks, 256, 0, st>>>(cp, sp, mp, hp, G, total, nullptr, nullptr);
    TC_CUDA_CHECK(cudaGetLastError());
    const int start = launch;
    // Spare launches after convergence exit at once (a few us each), a host sync costs tens of us:
    // ask for a little more than the last BFS needed.
    int batch = batch_opt ? batch_opt : std::max(4, last_bfs + 1);
    bfs(batch, launch);
    if (pipeline) {
      // Pipelined: behind each read-back the stream already holds (1) P pushes guarded on the device by
      // "the BFS converged" (they exit at once otherwise) and (2) more BFS launches, which continue an
      // unconverged BFS or exit at once (last_changed < launch - 1) after a converged one. So the GPU
      // works while the host waits. Safe in every outcome: a converged BFS with no active node leaves all
      // tile flags at 0, so the guarded pushes change nothing and the heights stay those of that BFS; an
      // unconverged one is continued with the same residual snapshot, as no push ran in between.
      bool done = false;
      while (!done) {
        count_and_copy(false);
        TC_CUDA_CHECK(cudaEventRecord(ready, st));
        const int checked = launch;  // converged iff some launch up to here changed nothing
        const int P = std::min(spec, push_count(launch - start));
        for (int p = 0; p < P; ++p) push(scp, checked);
        const int more = batch_opt ? batch_opt : std::max(2, batch / 2);
        bfs(more, launch);
        TC_CUDA_CHECK(cudaEventSynchronize(ready));
        ++syncs;
        if (hostp[kLast] >= checked) {  // not converged: the launches queued above continue it
          batch = more;
          continue;
        }
        last_bfs = (int)(hostp[kLast] - start) + 1;
        bfs_launches += launch - start;
        if (hostp[kActive] == 0) {  // done; the queued pushes and BFS launches change nothing
          done = true;
          break;
        }
        if (++cycles > max_cycles) {  // reported by the Python layer (no exception crosses the op)
      status = kStatusCycles;
      goto finish;
    }
        const int want = push_count(last_bfs);
        for (int p = P; p < want; ++p) push(nullptr, 0);
        push_launches += std::max(P, want);
        break;  // the next BFS init follows the pushes in the stream
      }
      if (done) break;
      continue;
    }
    while (true) {
      count_and_copy(false);
      TC_CUDA_CHECK(cudaStreamSynchronize(st));
      ++syncs;
      if (hostp[kLast] < launch) break;  // some launch changed nothing: converged
      batch = batch_opt ? batch_opt : std::max(2, batch / 2);
      bfs(batch, launch);
    }
    if (profile) {
      TC_CUDA_CHECK(cudaEventRecord(ev[2], st));
      TC_CUDA_CHECK(cudaEventSynchronize(ev[2]));
      float a = 0;
      TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[1], ev[2]));
      bfs_ms += a;
      if (cycles > 0) {
        TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
        push_ms += a;
      }
    }
    last_bfs = (int)(hostp[kLast] - start) + 1;  // launches that changed something, plus the confirming one
    bfs_launches += launch - start;           // launches issued (spare ones included)
    if (hostp[kActive] == 0) break;
    if (++cycles > max_cycles) {  // reported by the Python layer (no exception crosses the op)
      status = kStatusCycles;
      goto finish;
    }
    // ---- push/relabel launches
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev[0], st));
    const int P = push_count(last_bfs);
    for (int p = 0; p < P; ++p) push(nullptr, 0);
    push_launches += P;
  }
finish:
  at::Tensor out = at::empty({total}, excess.options().dtype(at::kBool));
  mask_kernel<<<flat_blocks, 256, 0, st>>>(hp, out.data_ptr<bool>(), total);
  TC_CUDA_CHECK(cudaGetLastError());
  at::Tensor stats = at::tensor({cycles + 1, bfs_launches, push_launches, syncs, (int64_t)rounds,
                                 (int64_t)G.TX, (int64_t)G.TY, (int64_t)G.TZ, (int64_t)npt,
                                 (int64_t)(bfs_ms * 1000), (int64_t)(push_ms * 1000), (int64_t)spec,
                                 (int64_t)walk, (int64_t)scan, (int64_t)GB.TX, (int64_t)GB.TY, (int64_t)GB.TZ,
                                 (int64_t)queue, queue ? (int64_t)hostp[kVisits] : (int64_t)0, bfs_depth,
                                 (int64_t)hostp[kProf], (int64_t)(hostp[kProf + 1] / khz * 1000),
                                 (int64_t)hostp[kProf + 2], (int64_t)(hostp[kProf + 3] / khz * 1000),
                                 (int64_t)(hostp[kProf + 4] / khz * 1000), (int64_t)hostp[kProf + 5], (int64_t)status},
                                at::TensorOptions().dtype(at::kLong));
  return {out, stats};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> solve_cuda(at::Tensor caps, at::Tensor excess, at::Tensor sink,
                                              const std::vector<int64_t>& shape, const std::vector<int64_t>& offsets,
                                              const std::vector<int64_t>& opts) {
  c10::cuda::CUDAGuard guard(caps.device());
  const int nd = (int)shape.size();
  Geom G{};
  G.X = (int)shape[nd - 1];
  G.Y = (int)shape[nd - 2];
  G.Z = nd == 3 ? (int)shape[0] : 1;
  G.N = (long long)G.X * G.Y * G.Z;
  const int K = (int)(offsets.size() / nd);
  G.K = K;
  G.D = 2 * K;
  const int64_t B = excess.numel() / G.N;
  // Tiles: 512 threads, one node each (256 for many directions, to keep shared memory moderate).
  if (nd == 2) {
    G.TX = pick_tile(opts[kTileX], 32);
    G.TY = pick_tile(opts[kTileY], G.D > 8 ? 8 : 16);
    G.TZ = 1;
  } else {
    G.TX = pick_tile(opts[kTileX], 8);  // v7: 8x8x8 beat 16x8x4 at 128^3 (3.06 vs 3.25 ms) and 256^3
    G.TY = pick_tile(opts[kTileY], 8);
    G.TZ = pick_tile(opts[kTileZ], G.D > 8 ? 4 : 8);
  }
  TORCH_CHECK(G.TX * G.TY * G.TZ <= 512 && G.TX * G.TY * G.TZ >= 32,
              "torchcut_grid: tile: expected between 32 and 512 nodes, got ", G.TX, "x", G.TY, "x", G.TZ);
  finish_geom(G, offsets, nd);
  TORCH_CHECK((long long)G.nTX * G.nTY * G.nTZ < (1LL << 31), "torchcut_grid: grid too large: ",
              (long long)G.nTX * G.nTY * G.nTZ, " tiles");
  TORCH_CHECK(B <= 65535, "torchcut_grid: batch: expected at most 65535 items, got ", B);
  // BFS tiles. Scan BFS (default): its own tile, up to 1024 threads, each extent a power of two <= 32.
  // Otherwise (bfs_scan = -1) Jacobi tiles of npt nodes per thread.
  const bool scan = opts[kBfsScan] >= 0;
  int npt = opts[kBfsNodes] > 0 ? (int)opts[kBfsNodes] : 1;  // 4 and 8 measured no faster (NOTES-grid.md)
  if (scan || G.D > 8 || (npt != 1 && npt != 4 && npt != 8)) npt = 1;
  Geom GB = G;
  if (scan) {
    GB.TX = pick_tile(opts[kBfsTileX], nd == 2 ? 32 : 8);  // 3D: 8x8x8 steadier than 16x8x8 at 128^3
    GB.TY = pick_tile(opts[kBfsTileY], nd == 2 ? 16 : 8);  // 32x16 measured a little faster than 32x32
    GB.TZ = nd == 2 ? 1 : pick_tile(opts[kBfsTileZ], 8);
    const int nb = GB.TX * GB.TY * GB.TZ;
    TORCH_CHECK(pow2(GB.TX) && pow2(GB.TY) && pow2(GB.TZ) && GB.TX <= 32 && GB.TY <= 32 && GB.TZ <= 32 &&
                    nb >= 32 && nb <= 1024,
                "torchcut_grid: BFS tile: expected powers of two, each at most 32, between 32 and 1024 nodes, got ",
                GB.TX, "x", GB.TY, "x", GB.TZ);
  } else if (npt == 4) {
    GB.TX *= 2;
    GB.TY *= 2;
  } else if (npt == 8) {
    GB.TX *= 2;
    GB.TY *= 2;
    if (nd == 3) GB.TZ *= 2; else GB.TY *= 2;
  }
  finish_geom(GB, offsets, nd);
  if (caps.scalar_type() == at::kInt) {
    if (G.D <= 32) return solve_typed<int, uint32_t>(caps, excess, sink, G, GB, npt, scan, B, opts);
    return solve_typed<int, unsigned long long>(caps, excess, sink, G, GB, npt, scan, B, opts);
  }
  if (G.D <= 32) return solve_typed<long long, uint32_t>(caps, excess, sink, G, GB, npt, scan, B, opts);
  return solve_typed<long long, unsigned long long>(caps, excess, sink, G, GB, npt, scan, B, opts);
}

}  // namespace torchcut_grid
