// Small grids in one launch (option `small`): every item of a batch is solved by one thread block,
// from its first global relabel to its mask, with no host synchronisation in between.
//
// The tiled solver (grid_solve.cpp) pays a fixed cost per global relabel whatever the grid's size:
// five to eight kernel launches and a read-back of its counters, ~0.1 ms a cycle on one H100, so a
// 64^2 segmentation grid took ~1.1 ms over 7 cycles. Here a block of kSmallThreads threads holds the
// item's heights, excess and BFS queues in shared memory and alternates, with block barriers only:
//   - a global relabel: a breadth-first search from the sink over residual arcs, one frontier (a
//     queue in shared memory) per level, heights = distance to the sink, kInf where there is none;
//   - push/relabel sweeps in the lock-free form of Hong (2008): each thread owns the nodes v with
//     v % kSmallThreads == its index; an active node (excess > 0, finite height) finds its lowest
//     residual neighbour (the sink at height 0), pushes min(excess, residual) to it if it lies lower,
//     and otherwise relabels to one above it. Only the owner of v takes from v's excess, its residual
//     arcs and its sink arc, and other threads only add to them (atomics), so no push can take more
//     than is there; heights read while their owners change them only delay a push.
// The sweeps of a cycle stop when no node is active or after as many sweeps as the last search had
// levels (at least kMinSweeps); the solve ends when a global relabel finds no active node, whose
// heights then give the canonical cut: the source side is every node that cannot reach the sink.
//
// The item's residual capacities, sink arcs, excess, heights and queues all live in shared memory during
// the solve (a first version read the capacities from global memory through L2 and took ~10 us a sweep,
// the latency of its dependent loads; no faster than the tiled solver), so an item fits where
// small_smem_bytes is at most the device's shared memory per block (int32 capacities: 4096 nodes with up
// to 8 directions on one H100).
#include "grid_common.h"

namespace torchcut_grid {

namespace {

constexpr int kSmallThreads = 1024;
constexpr int kMinSweeps = 8;

struct SmallGeom {
  int X, Y, Z, N, D, K;
  int dx[kSmallDirs], dy[kSmallDirs], dz[kSmallDirs], lin[kSmallDirs];
};

// Whether the neighbour of (x, y, z) in direction d lies inside the grid.
__device__ __forceinline__ bool inside(const SmallGeom& G, int x, int y, int z, int d) {
  const int a = x + G.dx[d], b = y + G.dy[d], c = z + G.dz[d];
  return a >= 0 && a < G.X && b >= 0 && b < G.Y && c >= 0 && c < G.Z;
}

// Atomic adds to a residual (CapT) or an excess, in shared memory (int64: two's complement).
__device__ __forceinline__ void add(int* p, long long v) { atomicAdd(p, (int)v); }
__device__ __forceinline__ void add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

// counters [B, 4]: global relabels, sweeps, pushes, status (kStatusCycles when max_cycles ran out)
template <typename CapT>
__global__ void __launch_bounds__(kSmallThreads)
    small_kernel(CapT* __restrict__ caps, long long* __restrict__ excess, CapT* __restrict__ sink,
                 bool* __restrict__ out, const SmallGeom G, long long max_cycles, long long* __restrict__ counters) {
  extern __shared__ long long smem[];
  const int N = G.N, tid = threadIdx.x;
  long long* ex = smem;                                        // [N] excess
  CapT* cs = reinterpret_cast<CapT*>(ex + N);                  // [D, N] residual capacities
  CapT* ss = cs + (long long)G.D * N;                          // [N] residual sink capacities
  volatile int* h = reinterpret_cast<int*>(ss + N);            // [N] heights
  int* qa = const_cast<int*>(h) + N;                           // [N] BFS frontier queues
  int* qb = qa + N;
  __shared__ int qn[2];
  const long long b = blockIdx.x;
  CapT* cp = caps + b * G.D * N;
  CapT* sp = sink + b * N;
  long long* ep = excess + b * N;
  for (int v = tid; v < N; v += kSmallThreads) ex[v] = ep[v], ss[v] = sp[v];
  for (int i = tid; i < G.D * N; i += kSmallThreads) cs[i] = cp[i];
  __syncthreads();
  long long cycles = 0, sweeps = 0, pushes = 0;
  int status = kStatusOk;
  while (true) {
    // ---- global relabel: breadth-first from the sink (arc v -> u with residual: h[v] = h[u] + 1)
    if (tid == 0) qn[0] = qn[1] = 0;
    __syncthreads();
    for (int v = tid; v < N; v += kSmallThreads) {
      if (ss[v] > 0) {
        h[v] = 1;
        qa[atomicAdd(&qn[0], 1)] = v;
      } else {
        h[v] = kInf;
      }
    }
    __syncthreads();
    int cur = 0, levels = 0;
    while (true) {
      const int n = qn[cur];
      if (n == 0) break;  // every thread reads the same count after the barrier
      const int* q = cur ? qb : qa;
      int* nq = cur ? qa : qb;
      const int next = levels + 2;
      for (int i = tid; i < n; i += kSmallThreads) {
        const int u = q[i];
        const int x = u % G.X, y = (u / G.X) % G.Y, z = u / (G.X * G.Y);
        for (int d = 0; d < G.D; ++d) {
          // the node v with v + offset(d) = u: its arc in direction d leads to u
          const int r = d < G.K ? d + G.K : d - G.K;
          if (!inside(G, x, y, z, r)) continue;
          const int v = u + G.lin[r];
          if (h[v] == kInf && *(volatile CapT*)(cs + d * N + v) > 0 &&
              atomicCAS(const_cast<int*>(h) + v, kInf, next) == kInf)
            nq[atomicAdd(&qn[cur ^ 1], 1)] = v;
        }
      }
      __syncthreads();
      if (tid == 0) qn[cur] = 0;
      cur ^= 1;
      ++levels;
      __syncthreads();
    }
    int act = 0;
    for (int v = tid; v < N; v += kSmallThreads) act |= ex[v] > 0 && h[v] < kInf;
    if (!__syncthreads_or(act)) break;
    if (++cycles > max_cycles) {
      status = kStatusCycles;
      break;
    }
    // ---- push/relabel sweeps
    const int most = levels > kMinSweeps ? levels : kMinSweeps;
    for (int s = 0; s < most; ++s) {
      int any = 0;
      for (int v = tid; v < N; v += kSmallThreads) {
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
        const int x = v % G.X, y = (v / G.X) % G.Y, z = v / (G.X * G.Y);
        int low = kInf, best = -1;
        CapT rb = 0;
        for (int d = 0; d < G.D; ++d) {
          if (!inside(G, x, y, z, d)) continue;
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
  for (int v = tid; v < N; v += kSmallThreads) {
    out[b * N + v] = h[v] >= kInf;
    ep[v] = ex[v];
    sp[v] = ss[v];
  }
  for (int i = tid; i < G.D * N; i += kSmallThreads) cp[i] = cs[i];
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
  return (size_t)N * (sizeof(long long) + (size_t)(D + 1) * cap_bytes + 3 * sizeof(int));
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
  const size_t smem = small_smem_bytes(G.N, G.D, (int)sizeof(CapT));
  TC_CUDA_CHECK(cudaFuncSetAttribute(small_kernel<CapT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  small_kernel<CapT><<<items, kSmallThreads, smem, st>>>(caps, excess, sink, out, S, max_cycles, counters);
  TC_CUDA_CHECK(cudaGetLastError());
}

template void launch_small<int>(cudaStream_t, int*, long long*, int*, bool*, const Geom&, int, long long, long long*);
template void launch_small<long long>(cudaStream_t, long long*, long long*, long long*, bool*, const Geom&, int,
                                      long long, long long*);

}  // namespace torchcut_grid
