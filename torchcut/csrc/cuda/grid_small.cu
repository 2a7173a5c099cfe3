// Small grids in one launch (option `small`): every item of a batch is solved by one thread block,
// from its first global relabel to its mask, with no host synchronisation in between.
//
// The tiled solver (grid_solve.cpp) pays a fixed cost per global relabel whatever the grid's size:
// five to eight kernel launches and a read-back of its counters, ~0.1 ms a cycle on one H100, so a
// 64^2 segmentation grid took ~1.1 ms over 7 cycles. Here a block of one thread per node (at most
// kMaxThreads, each owning the nodes v with v % threads == its index) holds the item's residuals,
// excess and heights in shared memory and alternates, with block barriers only:
//   - a global relabel: a breadth-first search from the sink over residual arcs, heights = distance to
//     the sink, kInf where there is none. It runs on bit sets of the item's nodes (at most 128 words):
//     the block writes one per direction (bit v: the arc from v that way has residual capacity, a warp
//     ballot per word), then up to four warps, a word per lane, expand the frontier a level at a time,
//     every word of the next level the OR over directions of the frontier shifted by the direction's
//     offset and masked by its arc bits, kept in step by a named barrier of their own threads (one warp:
//     its own syncs), the rest of the block waiting (0.46-0.57 against 0.68-0.88 ms for the whole call
//     on random 16^2-32^2 grids, 8-15% less on 64^2 ones, than a first version with the frontier in
//     shared-memory queues, two block barriers and atomics a level; one warp for the 128 words of a 64^2
//     grid, four words a lane, spent 40-45% of the kernel in the searches, four warps 20-30%;
//     docs/performance.md).
//   - push/relabel sweeps in the lock-free form of Hong (2008): an active node (excess > 0, finite
//     height) finds its lowest residual neighbour (the sink at height 0), pushes min(excess, residual)
//     to it if it lies lower, and otherwise relabels to one above it. Only the owner of v takes from
//     v's excess, its residual arcs and its sink arc, and other threads only add to them (atomics), so
//     no push can take more than is there; heights read while their owners change them only delay a
//     push.
// Which directions of an owned node stay in the grid is found once, into a register (8 bits a node).
// The sweeps of a cycle stop when no node is active or after as many sweeps as the last search had
// levels (at least kMinSweeps); the solve ends when a global relabel finds no active node, whose
// heights then give the canonical cut: the source side is every node that cannot reach the sink.
//
// The item's residual capacities, sink arcs, excess and heights all live in shared memory during
// the solve (a first version read the capacities from global memory through L2 and took ~10 us a sweep,
// the latency of its dependent loads; no faster than the tiled solver), so an item fits where
// small_smem_bytes is at most the device's shared memory per block (int32 capacities: 4096 nodes with up
// to 8 directions on one H100).
#include "grid_common.h"

namespace torchcut_grid {

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxOwned = (int)(kSmallNodes / kMaxThreads);  // nodes a thread owns, at most
constexpr int kWords = (int)(kSmallNodes / 32);                // words of a bit set over an item's nodes
static_assert(kSmallDirs <= 8, "a node's directions inside the grid are 8 bits of a register");
constexpr int kMinSweeps = 8;
constexpr int kBfsWarps = kWords / 32;  // warps of the search: a word of the bit sets per lane
// shared memory the kernel declares itself: the bit sets of the search, and its level count (padded)
constexpr size_t kStaticBytes = (size_t)(kSmallDirs + 2) * kWords * sizeof(unsigned) + 16;

// shared memory the launch gives: excess, residual capacities, sink residuals and heights
size_t dynamic_bytes(long long N, int D, int cap_bytes) {
  return (size_t)N * (sizeof(long long) + (size_t)(D + 1) * cap_bytes + sizeof(int));
}

struct SmallGeom {
  int X, Y, Z, N, D, K;
  int dx[kSmallDirs], dy[kSmallDirs], dz[kSmallDirs], lin[kSmallDirs];
};

// Atomic adds to a residual (CapT) or an excess, in shared memory (int64: two's complement).
__device__ __forceinline__ void add(int* p, long long v) { atomicAdd(p, (int)v); }
__device__ __forceinline__ void add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

// Bits v .. v + 31 of the bit set f (W words, zero outside), v = 32 * w + s for any shift s.
__device__ __forceinline__ unsigned shifted(const unsigned* f, int W, int w, int s) {
  const int p = 32 * w + s;
  const int q = p >> 5, r = p & 31;  // arithmetic shift: the floor, also for p < 0
  const unsigned lo = (q >= 0 && q < W) ? f[q] : 0u;
  const unsigned hi = (r && q + 1 >= 0 && q + 1 < W) ? f[q + 1] : 0u;
  return r ? (lo >> r) | (hi << (32 - r)) : lo;
}

// The searching threads' barrier (named barrier 1; the block's own __syncthreads use 0): with one warp,
// the warp's sync; `search_sync_or` also tells every thread whether any passed true.
__device__ __forceinline__ void search_sync(int threads) {
  if (threads == 32) {
    __syncwarp();
  } else {
    asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  }
}
__device__ __forceinline__ bool search_sync_or(bool v, int threads) {
  if (threads == 32) {
    __syncwarp();
    return __any_sync(0xffffffffu, v);
  }
  unsigned r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, 1, %2, p;\n selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((unsigned)v), "r"(threads)
      : "memory");
  return r != 0;
}

// counters [B, 4]: global relabels, sweeps, pushes, status (kStatusCycles when max_cycles ran out)
template <typename CapT>
__global__ void __launch_bounds__(kMaxThreads)
    small_kernel(CapT* __restrict__ caps, long long* __restrict__ excess, CapT* __restrict__ sink,
                 bool* __restrict__ out, const SmallGeom G, long long max_cycles, long long* __restrict__ counters) {
  extern __shared__ long long smem[];
  // bit sets of the breadth-first search: the residual arcs per direction, the frontier, the labelled nodes
  __shared__ unsigned arc_bits[kSmallDirs][kWords];
  __shared__ unsigned front[kWords];
  __shared__ unsigned seen[kWords];
  __shared__ int bfs_levels;
  const int N = G.N, tid = threadIdx.x, T = blockDim.x, W = (N + 31) / 32, lane = tid & 31;
  long long* ex = smem;                                        // [N] excess
  CapT* cs = reinterpret_cast<CapT*>(ex + N);                  // [D, N] residual capacities
  CapT* ss = cs + (long long)G.D * N;                          // [N] residual sink capacities
  volatile int* h = reinterpret_cast<int*>(ss + N);            // [N] heights
  const long long b = blockIdx.x;
  CapT* cp = caps + b * G.D * N;
  CapT* sp = sink + b * N;
  long long* ep = excess + b * N;
  // Thread tid owns the nodes tid + k * T (k < kMaxOwned); byte k of inside holds the directions whose
  // neighbour of that node lies in the grid, found once here (no divisions in the loops below).
  unsigned inside = 0;
#pragma unroll
  for (int k = 0; k < kMaxOwned; ++k) {
    const int v = tid + k * T;
    if (v >= N) break;
    const int x = v % G.X, y = (v / G.X) % G.Y, z = v / (G.X * G.Y);
    unsigned m = 0;
    for (int d = 0; d < G.D; ++d) {
      const int a = x + G.dx[d], c = y + G.dy[d], e = z + G.dz[d];
      if (a >= 0 && a < G.X && c >= 0 && c < G.Y && e >= 0 && e < G.Z) m |= 1u << d;
    }
    inside |= m << (8 * k);
    ex[v] = ep[v];
    ss[v] = sp[v];
  }
  for (int i = tid; i < G.D * N; i += T) cs[i] = cp[i];
  __syncthreads();
  long long cycles = 0, sweeps = 0, pushes = 0;
  int status = kStatusOk;
  while (true) {
    // ---- global relabel: breadth-first from the sink over residual arcs (v joins the level after u
    // when its arc v -> u has residual capacity), on bit sets: the whole block writes the arcs' bits (a
    // warp ballot per word), then one warp expands the frontier a level at a time with shifts of whole
    // words, no block barrier between levels, and gives each new node its height.
#pragma unroll
    for (int k = 0; k < kMaxOwned; ++k) {  // every lane takes part in the ballots
      const int v = tid + k * T;
      const bool mine = v < N;
      const unsigned m = mine ? (inside >> (8 * k)) & 0xffu : 0u;
      const bool seed = mine && ss[v] > 0;
      if (mine) h[v] = seed ? 1 : kInf;
      const int w = v >> 5;  // the warp's 32 lanes hold nodes 32 w .. 32 w + 31
      const unsigned sb = __ballot_sync(0xffffffffu, seed);
      if (lane == 0 && w < W) front[w] = seen[w] = sb;
      for (int d = 0; d < G.D; ++d) {
        const unsigned ab = __ballot_sync(0xffffffffu, ((m >> d) & 1u) && cs[d * N + v] > 0);
        if (lane == 0 && w < W) arc_bits[d][w] = ab;
      }
    }
    __syncthreads();
    // the search's warps: a word per lane (nt threads, at most kBfsWarps warps), their levels kept in
    // step by a named barrier (one warp: the warp's own syncs)
    const int nt = 32 * min(kBfsWarps, (W + 31) / 32);
    if (tid < nt) {
      int level = 1;
      while (true) {
        unsigned next[kWords / 32];
        bool grew = false;
#pragma unroll
        for (int j = 0; j < kWords / 32; ++j) {
          const int w = tid + nt * j;
          unsigned nb = 0;
          if (w < W) {
            for (int d = 0; d < G.D; ++d) nb |= shifted(front, W, w, G.lin[d]) & arc_bits[d][w];
            nb &= ~seen[w];
          }
          next[j] = nb;
          grew |= nb != 0;
        }
        if (!search_sync_or(grew, nt)) break;  // every searching thread has read the frontier
        ++level;
#pragma unroll
        for (int j = 0; j < kWords / 32; ++j) {
          const int w = tid + nt * j;
          if (w >= W) continue;
          front[w] = next[j];
          seen[w] |= next[j];
          for (unsigned bits = next[j]; bits; bits &= bits - 1) h[32 * w + __ffs(bits) - 1] = level;
        }
        search_sync(nt);  // the new frontier is written
      }
      if (tid == 0) bfs_levels = level;
    }
    __syncthreads();
    const int levels = bfs_levels;
    int act = 0;
#pragma unroll
    for (int k = 0; k < kMaxOwned; ++k) {
      const int v = tid + k * T;
      if (v < N) act |= ex[v] > 0 && h[v] < kInf;
    }
    if (!__syncthreads_or(act)) break;
    if (++cycles > max_cycles) {
      status = kStatusCycles;
      break;
    }
    // ---- push/relabel sweeps
    const int most = levels > kMinSweeps ? levels : kMinSweeps;
    for (int s = 0; s < most; ++s) {
      int any = 0;
#pragma unroll
      for (int k = 0; k < kMaxOwned; ++k) {
        const int v = tid + k * T;
        if (v >= N) break;
        const long long e = *reinterpret_cast<volatile long long*>(ex + v);
        const int hv = h[v];
        if (e <= 0 || hv >= kInf) continue;
        any = 1;
        const CapT sv = ss[v];
        if (sv > 0) {  // the sink lies at height 0, below every node
          const CapT f = (CapT)(e < (long long)sv ? e : (long long)sv);
          ss[v] = sv - f;
          add(ex + v, -(long long)f);
          ++pushes;
          continue;
        }
        const unsigned m = (inside >> (8 * k)) & 0xffu;
        int low = kInf, best = -1;
        CapT rb = 0;
        for (int d = 0; d < G.D; ++d) {
          if (!((m >> d) & 1u)) continue;
          const CapT r = *(volatile CapT*)(cs + d * N + v);
          if (r <= 0) continue;
          const int hu = h[v + G.lin[d]];
          if (hu < low) low = hu, best = d, rb = r;
        }
        if (best < 0 || low >= kInf) {
          h[v] = kInf;  // no residual arc leads anywhere with a path to the sink
        } else if (hv > low) {
          const int u = v + G.lin[best];
          const int rev = best < G.K ? best + G.K : best - G.K;
          const CapT f = (CapT)(e < (long long)rb ? e : (long long)rb);
          add(cs + best * N + v, -(long long)f);
          add(cs + rev * N + u, (long long)f);
          add(ex + v, -(long long)f);
          add(ex + u, (long long)f);
          ++pushes;
        } else {
          h[v] = low + 1 < N ? low + 1 : kInf;  // a height of N or more: no path to the sink is that long
        }
      }
      ++sweeps;
      if (!__syncthreads_or(any)) break;
    }
  }
  for (int v = tid; v < N; v += T) {
    out[b * N + v] = h[v] >= kInf;
    ep[v] = ex[v];
    sp[v] = ss[v];
  }
  for (int i = tid; i < G.D * N; i += T) cp[i] = cs[i];
  // per-thread counts summed into the item's row (pushes) and written once (the rest)
  atomicAdd(reinterpret_cast<unsigned long long*>(counters + b * 4 + 2), (unsigned long long)pushes);
  if (tid == 0) {
    counters[b * 4 + 0] = cycles + 1;
    counters[b * 4 + 1] = sweeps;
    counters[b * 4 + 3] = status;
  }
}

}  // namespace

size_t small_smem_bytes(long long N, int D, int cap_bytes) {
  return dynamic_bytes(N, D, cap_bytes) + kStaticBytes;
}

template <typename CapT>
void launch_small(cudaStream_t st, CapT* caps, long long* excess, CapT* sink, bool* out, const Geom& G, int items,
                  long long max_cycles, long long* counters) {
  SmallGeom S{};
  S.X = G.X, S.Y = G.Y, S.Z = G.Z, S.N = (int)G.N, S.D = G.D, S.K = G.K;
  for (int d = 0; d < G.D; ++d) {
    S.dx[d] = G.dx[d], S.dy[d] = G.dy[d], S.dz[d] = G.dz[d];
    S.lin[d] = (int)G.glin[d];
  }
  const size_t dynamic = dynamic_bytes(G.N, G.D, (int)sizeof(CapT));
  TC_CUDA_CHECK(cudaFuncSetAttribute(small_kernel<CapT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic));
  // a thread per node up to kMaxThreads (whole warps): fewer warps at each barrier on the smallest items
  const int threads = (int)std::min<long long>(kMaxThreads, (G.N + 31) / 32 * 32);
  small_kernel<CapT><<<items, threads, dynamic, st>>>(caps, excess, sink, out, S, max_cycles, counters);
  TC_CUDA_CHECK(cudaGetLastError());
}

template void launch_small<int>(cudaStream_t, int*, long long*, int*, bool*, const Geom&, int, long long, long long*);
template void launch_small<long long>(cudaStream_t, long long*, long long*, long long*, bool*, const Geom&, int,
                                      long long, long long*);

}  // namespace torchcut_grid
