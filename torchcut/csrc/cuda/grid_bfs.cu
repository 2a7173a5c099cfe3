// Global relabel of the grid solver (BFS from the sink over residual arcs) and the small per-node
// kernels: residual masks and seeds (bfs_init_kernel, seed_kernel), the worklist BFS
// (bfs_queue_kernel), the repaired relabel's support pass (repair_seed_kernel, repair_queue_kernel),
// the active count (count_kernel), the push walk's list (list_kernel) and the output mask (mask_kernel).
//
// Global relabel = exact distance to the sink over residual arcs, Bellman-Ford style: each BFS tile is
// relaxed to its fixed point in shared memory by segmented min-plus scans along x, y and z
// (bfs_scan_tile). One launch per global relabel (bfs_queue_kernel): resident blocks take tiles from a
// worklist and tiles whose border heights changed go back into it, until nothing is queued or running.
// Termination of the solve (exact): right after a converged BFS, no node with excess has a finite
// distance. The source side of the cut is the set of nodes at infinite distance.
#include <algorithm>

#include "grid_device.cuh"

namespace torchcut_grid {

// Residual bit masks and the BFS start (height 1 next to the sink, else kInf); seeds (G = BFS geometry):
// flag the tiles holding a node next to the sink or a node with a residual arc to such a node in another
// tile (their heights never change, so no tile would be told of them). Items that the last count left
// with no active node (ic.prev) are skipped whole: no pushes touched them since, so their masks and
// heights are still exact, and with no seed tile the BFS never visits them.
// Grid: blockIdx.y is the item, so the skip is uniform over a block and node indices stay inside one
// item: coordinates take two 32-bit divisions (BFS tiles are powers of two: shifts and masks), not the
// four 64-bit divisions of a flat index over the batch (those took 73 us at 4M nodes, ~2x the bytes).
// Bit D of a mask (when the mask type has room) is the residual sink arc. warm (a repaired relabel):
// masks and counters only; the heights stay, and the repair queues its own tiles.
template <typename CapT, typename MaskT>
__global__ void bfs_init_kernel(const CapT* __restrict__ caps, const CapT* __restrict__ sink, MaskT* __restrict__ mask,
                                int* __restrict__ height, const __grid_constant__ Geom G, int* __restrict__ seeds,
                                long long* __restrict__ scal, const ItemCounts ic, bool warm) {
  const int b = blockIdx.y;
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    if (b == 0) {  // the BFS counters start at 0 (no memset node)
      scal[kHead] = scal[kTail] = scal[kPending] = scal[kMaxGen] = 0;
      scal[kActive] = scal[kActiveTiles] = 0;
    }
    if (ic.cur != nullptr) ic.cur[b] = 0;
  }
  if (ic.prev != nullptr && ic.prev[b] == 0) return;  // uniform over the block
  const long long base = (long long)b * G.N;
  const CapT* cb = caps + base * G.D;
  const CapT* sb = sink + base;
  const bool narrow = G.N <= 0x7fffffffLL;
  const int sx = __ffs(G.TX) - 1, sy = __ffs(G.TY) - 1, sz = __ffs(G.TZ) - 1;
  for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < G.N; g += (long long)gridDim.x * blockDim.x) {
    MaskT m = 0;
    for (int d = 0; d < G.D; ++d)
      if (cb[d * G.N + g] > 0) m |= (MaskT)1 << d;
    const bool next_to_sink = sb[g] > 0;
    if (next_to_sink && G.D < (int)(8 * sizeof(MaskT))) m |= (MaskT)1 << G.D;
    mask[base + g] = m;
    if (warm) continue;
    height[base + g] = next_to_sink ? 1 : kInf;
    if (!(next_to_sink || m)) continue;
    int x, y, z;
    if (narrow) {
      const unsigned u = (unsigned)g, r = u / (unsigned)G.X;
      x = (int)(u - r * (unsigned)G.X);
      y = (int)(r % (unsigned)G.Y);
      z = (int)(r / (unsigned)G.Y);
    } else {
      const long long r = g / G.X;
      x = (int)(g - r * G.X);
      y = (int)(r % G.Y);
      z = (int)(r / G.Y);
    }
    const int lx = x & (G.TX - 1), ly = y & (G.TY - 1), lz = z & (G.TZ - 1);
    bool seed = next_to_sink;
    for (int d = 0; d < G.D && !seed; ++d) {
      if (!((m >> d) & 1)) continue;
      const int ax = lx + G.dx[d], ay = ly + G.dy[d], az = lz + G.dz[d];
      if ((unsigned)ax < (unsigned)G.TX && (unsigned)ay < (unsigned)G.TY && (unsigned)az < (unsigned)G.TZ) continue;
      const int vx = x + G.dx[d], vy = y + G.dy[d], vz = z + G.dz[d];
      if ((unsigned)vx < (unsigned)G.X && (unsigned)vy < (unsigned)G.Y && (unsigned)vz < (unsigned)G.Z)
        seed = sb[g + G.glin[d]] > 0;
    }
    if (seed) seeds[(long long)b * G.T + (x >> sx) + G.nTX * ((y >> sy) + G.nTY * (z >> sz))] = 1;  // kQueued
  }
}

// Scan BFS. Along one axis of the tile, a line of E nodes (E a power of two <= 32) lies in E
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

// Bit (of 3x3x3) of the neighbouring tile holding node L + offset d (d leaves the tile).
template <class S>
__device__ __forceinline__ unsigned tile_bit(const Geom& G, const Local& L, int d) {
  const int ox = L.lx + G.dx[d] < 0 ? 0 : L.lx + G.dx[d] >= S::tx(G) ? 2 : 1;
  const int oy = L.ly + G.dy[d] < 0 ? 0 : L.ly + G.dy[d] >= S::ty(G) ? 2 : 1;
  const int oz = L.lz + G.dz[d] < 0 ? 0 : L.lz + G.dz[d] >= S::tz(G) ? 2 : 1;
  return 1u << (ox + 3 * (oy + 3 * oz));
}

// Warp 0 of a block queues the neighbouring tiles of tile t (item b) flagged in next (3x3x3 bits) that
// were idle, at generation gen: one pending add, one tail add. The changes they must see are written
// and fenced before.
__device__ __forceinline__ void queue_flagged(const Work& W, const Geom& G, int b, int t, unsigned next, int gen) {
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
    if (q >= 0) W.gen[q] = gen;
    if (threadIdx.x == 0) {
      atomic_add(W.pending, (long long)__popc(win));  // counted before the tiles become visible
      atomicMax(W.max_gen, (long long)gen);
    }
    __threadfence();
    unsigned long long pos = 0;
    if (threadIdx.x == 0) pos = atomicAdd(W.tail, (unsigned long long)__popc(win));
    pos = __shfl_sync(0xffffffffu, pos, 0) + __popc(win & ((1u << threadIdx.x) - 1u));
    if (q >= 0) atomicExch(reinterpret_cast<unsigned long long*>(W.ring + (pos & W.mask)), (unsigned long long)q);
  }
}

template <typename MaskT, int DT, class S>
__device__ __forceinline__ int bfs_scan_tile(const MaskT* __restrict__ mask, int* __restrict__ height, const Geom& G,
                                             int b, int t, const Work& W, int gen, long long t_start) {
  const int D = DT ? DT : G.D;
  __shared__ int dist_s[kScanSmem];
  __shared__ MaskT m_s[kScanSmem];
  int* hb = height + (long long)b * G.N;
  const Local L = locate_at<S>(G, t, threadIdx.x);
  const int si = L.lx + (S::tx(G) + 1) * (L.ly + S::ty(G) * L.lz);
  // 8-connected 2D with the 32 x 16 tile: the diagonals are scanned like the axes (below), not relaxed
  // by the Jacobi step (one hop per pass: 7.2 passes per visit against 2.8 on 4-connected grids)
  constexpr bool kDiag = DT == 8 && S::cx == 32 && S::cy == 16 && S::cz == 1;
  const bool diag = kDiag && G.other_diag != G.other;
  const unsigned long long other = diag ? G.other_diag : G.other;
  MaskT m = 0, m_other = 0;
  int cur0 = kInf;
  if (L.valid) {
    m = mask[(long long)b * G.N + L.g];
    cur0 = __ldcg(hb + L.g);  // other blocks wrote it in this launch
  }
  int best = cur0;
  // Heights across the tile border, loaded whatever the mask says, so that the loads overlap the mask's.
  // With the directions known at compile time, every load is issued before the first is used (one
  // memory latency per visit instead of one per direction: profiled load phase 3.4 us per visit).
  auto across = [&](int d) { return crosses<S>(G, L, d); };
  if constexpr (DT > 0) {
    int hv[DT];
#pragma unroll
    for (int d = 0; d < DT; ++d) hv[d] = across(d) ? __ldcg(hb + L.g + G.glin[d]) : kInf;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      if (in_tile<S>(G, L, d)) {
        if ((other >> d) & 1) m_other |= m & ((MaskT)1 << d);
      } else if ((m >> d) & 1) {
        best = min(best, hv[d] + 1);
      }
    }
  } else {
    for (int d = 0; d < D; ++d) {
      if (in_tile<S>(G, L, d)) {
        if ((other >> d) & 1) m_other |= m & ((MaskT)1 << d);
        continue;
      }
      if (!across(d)) continue;
      const int hv = __ldcg(hb + L.g + G.glin[d]);
      if ((m >> d) & 1) best = min(best, hv + 1);
    }
  }
  __shared__ unsigned s_next;  // neighbouring tiles (3x3x3 bits) that must relax again
  if (threadIdx.x == 0) s_next = 0;
  dist_s[si] = best;
  m_s[si] = m;
  __syncthreads();
  long long tm = 0;
  if (W.prof != nullptr && threadIdx.x == 0) tm = t_start;
  mark(W.prof, 8, tm);
  // Passes: a line scan along each axis that has unit steps (and, with diag, along both diagonals), then
  // (if any) a Jacobi step over the other arcs, in turn; the tile is at its fixed point once every pass
  // has run without a change. What a thread reads in each scan pass (its node's slot and residual arcs
  // along the line) is set up once per tile. Kinds of pass: 0-2 the axes, 3 the Jacobi step, 4 and 5 the
  // diagonals: thread q scans line q / 16 of 32, whose node k is (q / 16 + k, k) for kind 4 and
  // (q / 16 - k, k) for kind 5, x taken modulo 32 (the wrapped step is not an arc: left unlinked).
  int ps[5] = {0, 0, 0, 0, 0};  // the thread's slot in the passes of kinds 0-2, 4, 5
  unsigned links = 0;  // bits 2j / 2j + 1: arc to the previous / next node in the pass of slot j
  unsigned order = 0;  // the passes in turn, 3 bits each
  int P = 0;
#pragma unroll
  for (int a = 0; a < 5; ++a) {
    if (a >= 3 && !diag) break;
    const int q = (int)threadIdx.x;
    int lx, ly, lz = 0, dm, dp;
    bool wrap_prev = false, wrap_next = false;
    if (a < 3) {
      const int E = a == 0 ? S::tx(G) : a == 1 ? S::ty(G) : S::tz(G);
      if (E == 1 || (G.axm[a] < 0 && G.axp[a] < 0)) continue;  // uniform over the block
      if (a == 0) {
        lx = q % S::tx(G), ly = (q / S::tx(G)) % S::ty(G), lz = q / (S::tx(G) * S::ty(G));
      } else if (a == 1) {
        ly = q % S::ty(G), lx = (q / S::ty(G)) % S::tx(G), lz = q / (S::tx(G) * S::ty(G));
      } else {
        lz = q % S::tz(G), lx = (q / S::tz(G)) % S::tx(G), ly = q / (S::tz(G) * S::tx(G));
      }
      dm = G.axm[a], dp = G.axp[a];
    } else {  // diagonals (kDiag: a 32 x 16 x 1 tile of 512 threads)
      const int f = a - 3, k = q & 15;
      lx = (f == 0 ? (q >> 4) + k : (q >> 4) - k) & 31, ly = k;
      wrap_prev = f == 0 ? lx == 0 : lx == 31;
      wrap_next = f == 0 ? lx == 31 : lx == 0;
      dm = G.dgm[f], dp = G.dgp[f];
    }
    order |= (unsigned)(a < 3 ? a : a + 1) << (3 * P++);
    const int idx = lx + (S::tx(G) + 1) * (ly + S::ty(G) * lz);
    ps[a] = idx;
    const MaskT mm = m_s[idx];
    if (dm >= 0 && !wrap_prev && ((mm >> dm) & 1)) links |= 1u << (2 * a);
    if (dp >= 0 && !wrap_next && ((mm >> dp) & 1)) links |= 2u << (2 * a);
  }
  if (other) order |= 3u << (3 * P++);
  int passes = 0;
  for (int k = 0, quiet = 0; P > 0 && quiet < P; k = k + 1 == P ? 0 : k + 1, ++passes) {
    const int a = (int)(order >> (3 * k)) & 7;
    bool ch = false;
    if (a != 3) {
      const int j = a < 3 ? a : a - 1;  // slot of the pass
      const int idx = j == 0 ? ps[0] : j == 1 ? ps[1] : j == 2 ? ps[2] : j == 3 ? ps[3] : ps[4];
      const int E = a == 0 ? S::tx(G) : a == 1 ? S::ty(G) : a == 2 ? S::tz(G) : 16;
      const int d0 = dist_s[idx];
      const int d1 = scan_line(d0, (links >> (2 * j)) & 1, (links >> (2 * j + 1)) & 1, E);
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
  mark(W.prof, 9, tm);
  const int fin = dist_s[si];
  const bool mine = fin < cur0;
  {
    // Tiles with an arc into a changed node relax again: the write is fenced before the notification,
    // and a tile's relaxation reads only after it left the queued state (an atomic), so it either sees
    // the new height or starts again after it (notify). Heights that never change (1, next to the sink)
    // reach other tiles because those tiles are seeds too (bfs_init_kernel).
    if (mine) {
      hb[L.g] = fin;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        if (!crosses<S>(G, L, d)) continue;
        if (G.bfs_skip) {  // a neighbouring tile: one bit, queued once below
          atomicOr(&s_next, tile_bit<S>(G, L, d));
        } else {  // offsets longer than a tile: notify the tile of the target directly
          __threadfence();
          const long long q = (long long)b * G.T + tile_of<S>(G, L, d);
          if (notify(W, q)) push_one(W, q, gen + 1);
        }
      }
      __threadfence();
    }
    __syncthreads();
    mark(W.prof, 10, tm);
    if (threadIdx.x < 32) {  // warp 0 queues the flagged neighbours
      queue_flagged(W, G, b, t, s_next, gen + 1);
      mark(W.prof, 11, tm);
    }
  }
  return passes;
}

// Repaired relabel (Options::repair), first pass on one BFS tile: keep the heights that still have a
// support, a residual sink arc or a residual arc to a lower node that keeps its height. Following
// supports gives a residual path to the sink no longer than the height, so a kept height is an upper
// bound of the distance; the others become kInf (the greatest supported set: removals repeat in the tile
// until none is left, and a removed node notifies the tiles around it). The tile is flagged in relax when
// a height changed or one is above a residual neighbour's + 1: the relaxation (the BFS kernel, from the
// flagged tiles) lowers these upper bounds to the exact distances, as a full BFS lowers kInf. Seeds: the
// tiles the pushes visited (heights rise and arcs close only there; an arc a push opens into another
// tile leads uphill) and the tiles next to a raised height (grid_push.cuh marks both in touched).
template <typename MaskT, int DT, class S>
__device__ __forceinline__ int repair_tile(const MaskT* __restrict__ mask, int* __restrict__ height,
                                           int* __restrict__ relax, const Geom& G, int b, int t, const Work& W,
                                           int gen) {
  const int D = DT ? DT : G.D;
  __shared__ int h_s[kScanSmem];
  __shared__ unsigned s_next;
  int* hb = height + (long long)b * G.N;
  const Local L = locate_at<S>(G, t, threadIdx.x);
  const int si = L.lx + (S::tx(G) + 1) * (L.ly + S::ty(G) * L.lz);
  MaskT m = 0;
  int h = kInf;
  if (L.valid) {
    m = mask[(long long)b * G.N + L.g];
    h = __ldcg(hb + L.g);  // other blocks wrote it in this launch
  }
  int low = kInf;  // lowest height across the tile border behind a residual arc (read once)
  auto across = [&](int d) { return crosses<S>(G, L, d); };
  if constexpr (DT > 0) {
    int hv[DT];
#pragma unroll
    for (int d = 0; d < DT; ++d) hv[d] = across(d) && ((m >> d) & 1) ? __ldcg(hb + L.g + G.glin[d]) : kInf;
#pragma unroll
    for (int d = 0; d < DT; ++d) low = min(low, hv[d]);
  } else {
    for (int d = 0; d < D; ++d)
      if (across(d) && ((m >> d) & 1)) low = min(low, __ldcg(hb + L.g + G.glin[d]));
  }
  if (threadIdx.x == 0) s_next = 0;
  // A node with a residual sink arc is at 1 (it is never relabelled while it has one; set it anyway).
  const bool to_sink = L.valid && ((m >> G.D) & 1);
  h_s[si] = to_sink ? 1 : h;
  __syncthreads();
  bool alive = L.valid && h < kInf && !to_sink;  // candidates for removal
  int lo = kInf;  // the lowest residual neighbour in the last pass
  int passes = 0;
  while (true) {
    bool now = false;
    if (L.valid && !to_sink) {
      lo = low;
#pragma unroll
      for (int d = 0; d < D; ++d)
        if (in_tile<S>(G, L, d) && ((m >> d) & 1)) lo = min(lo, h_s[si + G.plin[d]]);
      now = alive && lo >= h;
    }
    ++passes;
    if (!__syncthreads_or(now)) break;  // every read of the pass is done
    if (now) {
      h_s[si] = kInf;
      alive = false;
    }
    __syncthreads();
  }
  const int fin = h_s[si];
  // Above a residual neighbour + 1 (kept, removed, or at kInf since the pushes relabelled it without
  // seeing an arc another tile opened meanwhile): the relaxation lowers it.
  const bool loose = L.valid && !to_sink && lo < kInf && fin > lo + 1;
  const bool changed = L.valid && fin != h;
  if (changed) {
    hb[L.g] = fin;
#pragma unroll
    for (int d = 0; d < D; ++d)
      if (across(d)) atomicOr(&s_next, tile_bit<S>(G, L, d));
    __threadfence();
  }
  const bool flag = __syncthreads_or(changed || loose);
  if (flag && threadIdx.x == 0) relax[(long long)b * G.T + t] = 1;
  if (threadIdx.x < 32) queue_flagged(W, G, b, t, s_next, gen + 1);
  return passes;
}

// Queue BFS: one launch per global relabel. Resident blocks take tiles from a ring buffer, relax
// them (bfs_scan_tile) and notify the neighbouring tiles whose nodes can now reach the sink by a shorter
// path. Asynchronous Bellman-Ford: no launch boundaries, no host reads, every block always has the next
// tile of the wavefront. Converged when no tile is queued or running (pending == 0): then every tile was
// relaxed after the last change of the heights it reads, so all residual arcs satisfy d(u) <= d(v) + 1
// and the heights are the exact distances. Seeds: the tiles holding a node with a residual sink arc
// (bfs_init_kernel, seed_kernel).
// Bound to 32 registers (two 1024-thread blocks per SM, or four of 512 with persist's default 2048 /
// tile threads; 60-200 bytes spill to the stack, ptxas -v). A 64-register variant, with half the
// resident blocks, measured 30% less time per visit and no faster per BFS.
//
// The worklist loop of one resident block: take a tile, visit it (visit(b, t, gen, t_start) returns
// the passes, for the profile), put it back into the ring when a neighbour changed meanwhile, until
// nothing is queued or running.
template <class Visit>
__device__ __forceinline__ void queue_loop(const Geom& G, const Work& W, Visit visit) {
  __shared__ long long s_item;
  long long t0 = 0, t1 = 0;
  while (true) {
    if (threadIdx.x == 0) {
      if (W.prof != nullptr) t0 = clock64();
      const unsigned long long pos = atomicAdd(W.head, 1ULL);
      volatile long long* slot = W.ring + (pos & W.mask);
      long long item;
      for (long long spins = 0;; ++spins) {
        item = *slot;
        if (item >= 0) {
          *slot = -1;
          break;
        }
        if (*(volatile long long*)W.pending == 0) break;  // converged: nothing queued, nothing running
        if (spins > (1LL << 26)) {                         // seconds; would mean a bug, never a hang
          atomicExch(reinterpret_cast<unsigned long long*>(W.stalled), 1ULL);
          break;
        }
        __nanosleep(100);
      }
      if (item >= 0) {
        __threadfence();
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
    const int passes = visit(b, (int)(item - (long long)b * G.T), gen, t1);
    __syncthreads();  // this tile's writes are fenced and its notifications counted
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicCAS(W.state + item, kRunning, kIdle) == kDirty) {  // a neighbour changed meanwhile: again
        atomicExch(W.state + item, kQueued);
        push_one(W, item, gen);
      }
      __threadfence();
      atomic_add(W.pending, -1LL);
      if (W.prof != nullptr) {
        atomicAdd(W.prof + 4, (unsigned long long)(clock64() - t1));
        atomicAdd(W.prof + 5, (unsigned long long)passes);
      }
    }
  }
}

template <typename MaskT, int DT, class S>
__global__ void __launch_bounds__(1024, 2)
    bfs_queue_kernel(const MaskT* __restrict__ mask, int* __restrict__ height, const __grid_constant__ Geom G,
                     const Work W) {
  queue_loop(G, W, [&](int b, int t, int gen, long long t1) {
    return bfs_scan_tile<MaskT, DT, S>(mask, height, G, b, t, W, gen, t1);
  });
}

// The support pass of a repaired relabel (repair_tile), the same worklist loop.
template <typename MaskT, int DT, class S>
__global__ void __launch_bounds__(1024, 2)
    repair_queue_kernel(const MaskT* __restrict__ mask, int* __restrict__ height, const __grid_constant__ Geom G,
                        const Work W, int* __restrict__ relax) {
  queue_loop(G, W, [&](int b, int t, int gen, long long) {
    return repair_tile<MaskT, DT, S>(mask, height, relax, G, b, t, W, gen);
  });
}

// Queue the seed tiles: those bfs_init_kernel set to kQueued (flags nullptr), or those flagged in flags
// (cleared; the repair's relaxation: every tile is idle then). With flags, one block: the ring restarts
// at slot 0, because the support pass's blocks each took a slot past its tail when they found it done.
__global__ void seed_kernel(const Work W, long long tiles, int* __restrict__ flags) {
  if (flags != nullptr) {
    if (threadIdx.x == 0) *W.head = *W.tail = 0;  // every slot is empty (-1) after a converged pass
    __syncthreads();
  }
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < tiles; q += (long long)gridDim.x * blockDim.x) {
    if (flags != nullptr) {
      if (!flags[q]) continue;
      flags[q] = 0;
      W.state[q] = kQueued;
    } else if (W.state[q] != kQueued) {
      continue;
    }
    W.gen[q] = 0;
    atomic_add(W.pending, 1LL);
    const unsigned long long pos = atomicAdd(W.tail, 1ULL);
    W.ring[pos & W.mask] = q;
  }
}

// Push tiles to BFS tiles, for the repair's seeds.
struct TileMap {
  int X, Y, Z;             // grid extent
  int TX, TY, TZ, nTX, nTY, T;  // push tiles
  int sx, sy, sz, bnTX, bnTY, BT;  // BFS tiles (power-of-two extents: shifts)
};

// Queue the BFS tiles overlapping the push tiles flagged in touched (and clear those), generation 0.
__global__ void repair_seed_kernel(int* __restrict__ touched, long long push_tiles, const TileMap M, const Work W) {
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < push_tiles;
       q += (long long)gridDim.x * blockDim.x) {
    if (!touched[q]) continue;
    touched[q] = 0;
    const int b = (int)(q / M.T), t = (int)(q - (long long)b * M.T);
    const int x0 = (t % M.nTX) * M.TX, y0 = ((t / M.nTX) % M.nTY) * M.TY, z0 = (t / (M.nTX * M.nTY)) * M.TZ;
    const int x1 = min(x0 + M.TX, M.X) - 1, y1 = min(y0 + M.TY, M.Y) - 1, z1 = min(z0 + M.TZ, M.Z) - 1;
    for (int bz = z0 >> M.sz; bz <= z1 >> M.sz; ++bz)
      for (int by = y0 >> M.sy; by <= y1 >> M.sy; ++by)
        for (int bx = x0 >> M.sx; bx <= x1 >> M.sx; ++bx) {
          const long long qq = (long long)b * M.BT + bx + M.bnTX * (by + M.bnTY * bz);
          if (atomicCAS(W.state + qq, kIdle, kQueued) == kIdle) push_one(W, qq, 0);
        }
  }
}

// Active nodes (excess > 0, finite distance) per tile, per item (ic.cur) and in total, right after a BFS.
// Finished items (ic.prev) are skipped: their tiles' flags are already 0 and stay so (no push visits them).
__global__ void count_kernel(const long long* __restrict__ excess, const int* __restrict__ height,
                             int* __restrict__ tile_active, unsigned long long* __restrict__ count,
                             const __grid_constant__ Geom G, const ItemCounts ic) {
  if (ic.prev != nullptr && ic.prev[blockIdx.y] == 0) return;  // uniform over the block
  const Local L = locate_at(G, blockIdx.x, threadIdx.x);
  const long long q = (long long)blockIdx.y * G.N + L.g;
  const bool a = L.valid && excess[q] > 0 && height[q] < kInf;
  const int n = __syncthreads_count(a);
  if (threadIdx.x == 0) {
    tile_active[(long long)blockIdx.y * G.T + blockIdx.x] = n > 0;
    if (n) {
      atomicAdd(count, (unsigned long long)n);
      atomicAdd(count + 1, 1ULL);  // active tiles
      if (ic.cur != nullptr) atomicAdd(ic.cur + blockIdx.y, (unsigned long long)n);
    }
  }
}

__global__ void mask_kernel(const int* __restrict__ height, bool* __restrict__ out, long long total) {
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total;
       q += (long long)gridDim.x * blockDim.x)
    out[q] = height[q] >= kInf;
}

// Push walk: the flagged tiles into a list (pq[1] = the list's end; for chained launches, which append to
// the list (grid_push.cuh), pq[2] = the tiles queued or running and pq[3] = the listed count), one
// warp-aggregated add per warp. It also clears the other counters, which the next push launch uses (no
// memset node per launch).
__global__ void list_kernel(const int* __restrict__ tile_active, unsigned long long* __restrict__ pq,
                            long long* __restrict__ plist, long long total, unsigned long long* __restrict__ other) {
  if (blockIdx.x == 0 && threadIdx.x == 0) other[0] = other[1] = other[2] = other[3] = 0;
  for (long long q0 = blockIdx.x * (long long)blockDim.x; q0 < total; q0 += (long long)gridDim.x * blockDim.x) {
    const long long q = q0 + threadIdx.x;
    const bool f = q < total && tile_active[q] != 0;
    const unsigned bits = __ballot_sync(0xffffffffu, f);
    if (!bits) continue;
    const int lane = threadIdx.x & 31;
    unsigned long long pos = 0;
    if (lane == 0) {
      pos = atomicAdd(pq + 1, (unsigned long long)__popc(bits));
      atomicAdd(pq + 2, (unsigned long long)__popc(bits));
      atomicAdd(pq + 3, (unsigned long long)__popc(bits));
    }
    pos = __shfl_sync(0xffffffffu, pos, 0) + __popc(bits & ((1u << lane) - 1u));
    if (f) plist[pos] = q;
  }
}


// ---------------------------------------------------------------------------------------- launchers
template <typename CapT, typename MaskT>
void launch_bfs_init(cudaStream_t st, int blocks, const CapT* caps, const CapT* sink, MaskT* mask, int* height,
                     const Geom& G, int items, int* seeds, long long* scal, const ItemCounts& ic, bool warm) {
  const long long per_item = std::max(1, blocks / items);  // the same ~2k blocks over the batch
  const dim3 grid((unsigned)std::min<long long>((G.N + 255) / 256, per_item), (unsigned)items);
  bfs_init_kernel<CapT, MaskT><<<grid, 256, 0, st>>>(caps, sink, mask, height, G, seeds, scal, ic, warm);
}
template void launch_bfs_init<int, uint32_t>(cudaStream_t, int, const int*, const int*, uint32_t*, int*, const Geom&,
                                             int, int*, long long*, const ItemCounts&, bool);
template void launch_bfs_init<int, unsigned long long>(cudaStream_t, int, const int*, const int*, unsigned long long*,
                                                       int*, const Geom&, int, int*, long long*, const ItemCounts&,
                                                       bool);
template void launch_bfs_init<long long, uint32_t>(cudaStream_t, int, const long long*, const long long*, uint32_t*,
                                                   int*, const Geom&, int, int*, long long*, const ItemCounts&, bool);
template void launch_bfs_init<long long, unsigned long long>(cudaStream_t, int, const long long*, const long long*,
                                                             unsigned long long*, int*, const Geom&, int, int*,
                                                             long long*, const ItemCounts&, bool);

// Compiled variants: the default BFS tile of 4-, 8-, 6- and 26-connected grids with its directions and
// extents known at compile time, 18 directions, and one generic kernel for every other grid, tile
// option and 64-bit masks.
template <typename MaskT>
void launch_bfs_queue(cudaStream_t st, int blocks, int threads, const MaskT* mask, int* height, const Geom& G,
                      const Work& W) {
  auto go = [&](auto kern) { kern<<<blocks, threads, 0, st>>>(mask, height, G, W); };
  const bool t2 = G.TX == 32 && G.TY == 16 && G.TZ == 1, t3 = G.TX == 8 && G.TY == 8 && G.TZ == 8;
  if constexpr (sizeof(MaskT) == 4) {
    if (G.D == 4 && t2) return go(bfs_queue_kernel<MaskT, 4, Sh<32, 16, 1>>);
    if (G.D == 8 && t2) return go(bfs_queue_kernel<MaskT, 8, Sh<32, 16, 1>>);
    if (G.D == 6 && t3) return go(bfs_queue_kernel<MaskT, 6, Sh<8, 8, 8>>);
    if (G.D == 26 && t3) return go(bfs_queue_kernel<MaskT, 26, Sh<8, 8, 8>>);
    if (G.D == 18) return go(bfs_queue_kernel<MaskT, 18, Sh<>>);
  }
  go(bfs_queue_kernel<MaskT, 0, Sh<>>);
}

// The support pass: the default 2D tiles of 4- and 8-connected grids compiled with their directions and
// extents, one generic kernel for the rest.
template <typename MaskT>
void launch_repair_queue(cudaStream_t st, int blocks, int threads, const MaskT* mask, int* height, const Geom& G,
                         const Work& W, int* relax) {
  auto go = [&](auto kern) { kern<<<blocks, threads, 0, st>>>(mask, height, G, W, relax); };
  const bool t2 = G.TX == 32 && G.TY == 16 && G.TZ == 1;
  if constexpr (sizeof(MaskT) == 4) {
    if (G.D == 4 && t2) return go(repair_queue_kernel<MaskT, 4, Sh<32, 16, 1>>);
    if (G.D == 8 && t2) return go(repair_queue_kernel<MaskT, 8, Sh<32, 16, 1>>);
  }
  go(repair_queue_kernel<MaskT, 0, Sh<>>);
}
template void launch_repair_queue<uint32_t>(cudaStream_t, int, int, const uint32_t*, int*, const Geom&, const Work&,
                                            int*);
template void launch_repair_queue<unsigned long long>(cudaStream_t, int, int, const unsigned long long*, int*,
                                                      const Geom&, const Work&, int*);

void launch_repair_seed(cudaStream_t st, int* touched, long long push_tiles, const Geom& G, const Geom& GB,
                        const Work& W) {
  const TileMap M{G.X,        G.Y,         G.Z,         G.TX,    G.TY,    G.TZ, G.nTX, G.nTY, G.T,
                  __builtin_ctz(GB.TX), __builtin_ctz(GB.TY), __builtin_ctz(GB.TZ), GB.nTX, GB.nTY, GB.T};
  repair_seed_kernel<<<(int)std::min<long long>((push_tiles + 255) / 256, 1024), 256, 0, st>>>(touched, push_tiles,
                                                                                               M, W);
}
template void launch_bfs_queue<uint32_t>(cudaStream_t, int, int, const uint32_t*, int*, const Geom&, const Work&);
template void launch_bfs_queue<unsigned long long>(cudaStream_t, int, int, const unsigned long long*, int*,
                                                   const Geom&, const Work&);

void launch_seed(cudaStream_t st, const Work& W, long long tiles, int* flags) {
  if (flags != nullptr)
    seed_kernel<<<1, 1024, 0, st>>>(W, tiles, flags);
  else
    seed_kernel<<<(int)std::min<long long>((tiles + 255) / 256, 1024), 256, 0, st>>>(W, tiles, flags);
}

void launch_count(cudaStream_t st, int items, const long long* excess, const int* height, int* tile_active,
                  unsigned long long* count, const Geom& G, const ItemCounts& ic) {
  count_kernel<<<dim3(G.T, (unsigned)items), G.TX * G.TY * G.TZ, 0, st>>>(excess, height, tile_active, count, G, ic);
}

void launch_list(cudaStream_t st, const int* tile_active, unsigned long long* pq, long long* plist, long long total,
                 unsigned long long* other) {
  list_kernel<<<(int)std::min<long long>((total + 255) / 256, 1024), 256, 0, st>>>(tile_active, pq, plist, total,
                                                                                  other);
}

void launch_mask(cudaStream_t st, int blocks, const int* height, bool* out, long long total) {
  mask_kernel<<<blocks, 256, 0, st>>>(height, out, total);
}

}  // namespace torchcut_grid
