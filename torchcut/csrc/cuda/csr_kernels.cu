// Push-relabel max-flow (phase one) on general CSR networks: CUDA kernels and the host loop.
//
// Layout (see torchcut/graph.py): row_ptr [N+1], head [A], rev [A] (int32 here), res [A] int64
// residual capacities, excess [N] int64, sink [N] int64 residual sink capacities.
//
// One cycle = a global relabel, then `period` push/relabel rounds.
// * Global relabel: queue-based BFS from the sink over residual arcs, level by level. A level kernel
//   takes the nodes of the current level from the queue, scans each node's arcs with a group of
//   kBfsLanes lanes (the lanes stride over the arcs) and claims unvisited tails of residual arcs with
//   atomicCAS, appending them to the queue; the last of its blocks to finish closes the level. The
//   host reads the level counters once every kLevelsPerCheck levels, so launches run ahead of the host.
// * Round: the active-vertex queue (excess > 0, finite height) is rebuilt by a compaction kernel with
//   warp-aggregated appends, then a discharge kernel reads its length from device memory (and its
//   last block to finish empties it for the next round) and
//   discharges each active vertex: push to every residual neighbour of lower height (the sink has
//   height 0), then relabel to 1 + the lowest residual neighbour, up to `iters` times. Low-degree
//   vertices get one thread, high-degree vertices a warp, which splits the excess over a chunk of 32
//   arcs with a warp prefix sum. Pushes use atomics on the residuals and the head's excess; a vertex's
//   own excess, outgoing residual decrements and height are changed only by the thread (warp) that
//   owns it in the round, so residuals never go negative (the lock-free scheme of Hong and He).
// * Termination (exact): right after a global relabel, no vertex with excess has a finite distance:
//   one host read per cycle. The source side of the cut = vertices at infinite distance.

// Plain CUDA runtime, no torch headers (fast to compile); the bindings (csr_ops.cpp) allocate the
// buffers and pass the current stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "csr_common.h"

namespace torchcut_csr {


namespace {

constexpr int kThreads = 256;
constexpr int kHeavy = 32;  // degree above which a vertex is handled by a whole warp
constexpr unsigned kFull = 0xffffffffu;
constexpr int kLevelsPerCheck = 16;
// Lanes per frontier node in a BFS level: a node's arcs are scanned kBfsLanes at a time rather than one
// after the other by one thread (each arc a chain of dependent loads: head, rev, res, dist), so a level
// costs a few arcs' latency rather than a degree's (docs/performance.md, "General graphs on the GPU").
constexpr int kBfsLanes = 16;

// counters in device memory (kNumCtr ints, csr_common.h)
enum Ctr : int {
  kLevelBegin = 0,  // BFS queue: current level is Q[begin, end)
  kLevelEnd = 1,
  kQueueTail = 2,   // next free slot of the BFS queue
  kLevel = 3,       // distance of the current level
  kActive = 4,      // active queue length
  kActiveCount = 5, // active vertices right after the last BFS (termination test)
  kLevelDone = 6,   // blocks of the running BFS level that are done: the last one closes the level
  kRoundDone = 7,   // blocks of the running discharge that are done: the last one empties the active queue
};

// Whether this block is the last of its grid to get here (every thread calls it, at the kernel's end):
// every block has read the counters it needed and completed its queue appends (atomics) before.
__device__ __forceinline__ bool last_block(int* done) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(done, 1) == (int)gridDim.x - 1;
    if (last) *done = 0;  // for the next launch (stream order)
  }
  __syncthreads();
  return last;
}

__device__ __forceinline__ long long atomic_add_ll(long long* p, long long v) {
  return (long long)atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

// Warp-aggregated append of `want` to a queue; returns the slot (valid when want).
__device__ __forceinline__ int warp_append(int* tail, bool want) {
  unsigned m = __ballot_sync(kFull, want);
  if (!m) return -1;
  int lane = threadIdx.x & 31;
  int leader = __ffs(m) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(tail, __popc(m));
  base = __shfl_sync(kFull, base, leader);
  return base + __popc(m & ((1u << lane) - 1));
}

// ------------------------------------------------------------------ global relabel (BFS)
__global__ void bfs_init(int n, const long long* __restrict__ sink, int* __restrict__ dist, int* __restrict__ queue,
                         int* __restrict__ ctr, int inf) {
  int stride = gridDim.x * blockDim.x;
  int n_round = (n + 31) & ~31;
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < n_round; v += stride) {
    bool in = v < n && sink[v] > 0;
    if (v < n) dist[v] = in ? 1 : inf;
    int slot = warp_append(&ctr[kQueueTail], in);
    if (in) queue[slot] = v;
  }
}

__global__ void bfs_start(int* ctr) {
  ctr[kLevelBegin] = 0;
  ctr[kLevelEnd] = ctr[kQueueTail];
  ctr[kLevel] = 1;
}

__global__ void bfs_level(const int* __restrict__ row_ptr, const int* __restrict__ head, const int* __restrict__ rev,
                          const long long* __restrict__ res, int* __restrict__ dist, int* __restrict__ queue,
                          int* __restrict__ ctr, int inf) {
  const int begin = ctr[kLevelBegin];
  const int end = ctr[kLevelEnd];
  const int next = ctr[kLevel] + 1;
  const int count = end - begin;
  const int lane = threadIdx.x % kBfsLanes;
  const int groups = gridDim.x * (blockDim.x / kBfsLanes);
  for (int i = blockIdx.x * (blockDim.x / kBfsLanes) + threadIdx.x / kBfsLanes; i < count; i += groups) {
    const int q = queue[begin + i];
    const int a1 = row_ptr[q + 1];
    for (int a = row_ptr[q] + lane; a < a1; a += kBfsLanes) {
      const int p = head[a];
      if (res[rev[a]] > 0 && dist[p] == inf && atomicCAS(&dist[p], inf, next) == inf)
        queue[atomicAdd(&ctr[kQueueTail], 1)] = p;
    }
  }
  if (last_block(&ctr[kLevelDone]) && threadIdx.x == 0) {  // close the level: the next one is what it appended
    ctr[kLevelBegin] = end;
    ctr[kLevelEnd] = atomicAdd(&ctr[kQueueTail], 0);
    ctr[kLevel] = next;
  }
}

// ------------------------------------------------------------------ active queue
__global__ void build_active(int n, const long long* __restrict__ excess, const int* __restrict__ height,
                             int* __restrict__ active, int* __restrict__ ctr, int inf, int count_slot) {
  int stride = gridDim.x * blockDim.x;
  int n_round = (n + 31) & ~31;
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < n_round; v += stride) {
    bool a = v < n && excess[v] > 0 && height[v] < inf;
    int slot = warp_append(&ctr[count_slot], a);
    if (a && active != nullptr) active[slot] = v;
  }
}

// ------------------------------------------------------------------ discharge
// One vertex u, one thread: push to lower residual neighbours, relabel, up to `iters` times.
__device__ void discharge_thread(int u, int a0, int a1, const int* __restrict__ head, const int* __restrict__ rev,
                                 long long* res, long long* excess, long long* sink, int* height, int inf,
                                 int iters) {
  long long ex0 = excess[u];
  long long ex = ex0;
  int hu = height[u];
  if (ex <= 0 || hu >= inf) return;
  for (int it = 0; it < iters && ex > 0; ++it) {
    int hmin = inf;
    long long s = sink[u];
    if (s > 0) {
      if (hu > 0) {  // the sink has height 0: always lower
        long long d = s < ex ? s : ex;
        sink[u] = s - d;
        ex -= d;
        s -= d;
      }
      if (s > 0) hmin = -1;  // sink still reachable: relabel to 0 + 1
    }
    for (int a = a0; a < a1; ++a) {
      long long r = res[a];
      if (r <= 0) continue;
      int v = head[a];
      int hv = height[v];
      if (hv < hu && ex > 0) {
        long long d = r < ex ? r : ex;
        atomic_add_ll(&res[a], -d);
        atomic_add_ll(&res[rev[a]], d);
        atomic_add_ll(&excess[v], d);
        ex -= d;
        r -= d;
      }
      if (r > 0 && hv < hmin) hmin = hv;
      if (ex == 0) break;
    }
    if (ex == 0) break;
    int nh = hmin + 1;
    if (hmin >= inf - 1) nh = inf;
    if (nh <= hu) nh = hu + 1;  // stale neighbour heights: never move down
    hu = nh > inf ? inf : nh;
    height[u] = hu;
    if (hu >= inf) break;
  }
  if (ex != ex0) atomic_add_ll(&excess[u], ex - ex0);
}

// One vertex u of high degree, one warp (all lanes call with the same u).
__device__ void discharge_warp(int u, int a0, int a1, const int* __restrict__ head, const int* __restrict__ rev,
                               long long* res, long long* excess, long long* sink, int* height, int inf, int iters) {
  const int lane = threadIdx.x & 31;
  // lane 0 reads, everyone uses the same values (others may add to excess[u] meanwhile)
  long long ex0 = __shfl_sync(kFull, lane == 0 ? excess[u] : 0LL, 0);
  long long ex = ex0;
  int hu = __shfl_sync(kFull, lane == 0 ? height[u] : 0, 0);
  if (ex <= 0 || hu >= inf) return;
  for (int it = 0; it < iters && ex > 0; ++it) {
    int hmin = inf;
    long long s = __shfl_sync(kFull, lane == 0 ? sink[u] : 0LL, 0);
    if (s > 0) {
      long long d = s < ex ? s : ex;
      if (lane == 0) sink[u] = s - d;
      ex -= d;
      s -= d;
      if (s > 0) hmin = -1;
    }
    for (int base = a0; base < a1; base += 32) {
      int a = base + lane;
      long long r = 0;
      int hv = inf;
      int v = -1;
      if (a < a1) {
        r = res[a];
        if (r > 0) {
          v = head[a];
          hv = height[v];
        }
      }
      long long want = (r > 0 && hv < hu) ? r : 0;
      // inclusive prefix sum of `want` over the warp
      long long incl = want;
      for (int o = 1; o < 32; o <<= 1) {
        long long y = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += y;
      }
      long long before = incl - want;
      long long give = 0;
      if (want > 0 && ex > before) give = (ex - before) < want ? (ex - before) : want;
      if (give > 0) {
        atomic_add_ll(&res[a], -give);
        atomic_add_ll(&res[rev[a]], give);
        atomic_add_ll(&excess[v], give);
        r -= give;
      }
      long long total = __shfl_sync(kFull, incl, 31);
      ex -= total < ex ? total : ex;
      if (r > 0 && hv < hmin) hmin = hv;
    }
    for (int o = 16; o > 0; o >>= 1) {
      int y = __shfl_xor_sync(kFull, hmin, o);
      hmin = y < hmin ? y : hmin;
    }
    if (ex == 0) break;
    int nh = hmin + 1;
    if (hmin >= inf - 1) nh = inf;
    if (nh <= hu) nh = hu + 1;
    hu = nh > inf ? inf : nh;
    if (lane == 0) height[u] = hu;
    if (hu >= inf) break;
  }
  if (lane == 0 && ex != ex0) atomic_add_ll(&excess[u], ex - ex0);
}

__global__ void discharge(const int* __restrict__ active, int* __restrict__ ctr, const int* __restrict__ row_ptr,
                          const int* __restrict__ head, const int* __restrict__ rev, long long* res,
                          long long* excess, long long* sink, int* height, int inf, int iters) {
  const int count = ctr[kActive];
  const int count_round = (count + 31) & ~31;
  const int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count_round; i += stride) {
    int u = i < count ? active[i] : -1;
    int a0 = 0, a1 = 0;
    if (u >= 0) {
      a0 = row_ptr[u];
      a1 = row_ptr[u + 1];
    }
    bool heavy = u >= 0 && (a1 - a0) > kHeavy;
    if (u >= 0 && !heavy) discharge_thread(u, a0, a1, head, rev, res, excess, sink, height, inf, iters);
    unsigned hm = __ballot_sync(kFull, heavy);
    while (hm) {
      int src = __ffs(hm) - 1;
      hm &= hm - 1;
      int v = __shfl_sync(kFull, u, src);
      int b0 = __shfl_sync(kFull, a0, src), b1 = __shfl_sync(kFull, a1, src);
      discharge_warp(v, b0, b1, head, rev, res, excess, sink, height, inf, iters);
      __syncwarp();
    }
  }
  if (last_block(&ctr[kRoundDone]) && threadIdx.x == 0) ctr[kActive] = 0;  // empty for the next round's appends
}

__global__ void reset_bfs(int* ctr) {
  ctr[kQueueTail] = 0;
  ctr[kActiveCount] = 0;
}

int grid_for(long long work, int sms) {
  long long blocks = (work + kThreads - 1) / kThreads;
  long long cap = (long long)sms * 8;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return (int)blocks;
}

}  // namespace

void solve(const int* rp, const int* hd, const int* rv, long long* r, long long* e, long long* s, int n, int* h,
           int* q, int* act, int* c, int* hc, int64_t period, int64_t iters, int64_t max_cycles, cudaStream_t stream,
           int sms, int64_t* stats) {
  const int inf = n + 2;
  const int g_nodes = grid_for(n, sms);
  CSR_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(int) * kNumCtr, stream));
  int status = 0;
  long long cycles = 0, rounds = 0, levels_total = 0;
  int last_levels = 1;
  while (true) {
    // ---- global relabel
    reset_bfs<<<1, 1, 0, stream>>>(c);
    bfs_init<<<g_nodes, kThreads, 0, stream>>>(n, s, h, q, c, inf);
    bfs_start<<<1, 1, 0, stream>>>(c);
    int levels = 0;
    while (true) {
      for (int k = 0; k < kLevelsPerCheck; ++k) {
        bfs_level<<<g_nodes, kThreads, 0, stream>>>(rp, hd, rv, r, h, q, c, inf);
      }
      levels += kLevelsPerCheck;
      CSR_CUDA_CHECK(cudaGetLastError());
      CSR_CUDA_CHECK(cudaMemcpyAsync(hc, c, sizeof(int) * kNumCtr, cudaMemcpyDeviceToHost, stream));
      CSR_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (hc[kLevelBegin] == hc[kLevelEnd]) break;
    }
    levels_total += levels;
    last_levels = hc[kLevel];
    // ---- termination: active vertices after the relabel
    build_active<<<g_nodes, kThreads, 0, stream>>>(n, e, h, nullptr, c, inf, kActiveCount);
    CSR_CUDA_CHECK(cudaGetLastError());
    CSR_CUDA_CHECK(cudaMemcpyAsync(hc, c, sizeof(int) * kNumCtr, cudaMemcpyDeviceToHost, stream));
    CSR_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (hc[kActiveCount] == 0) break;
    if (++cycles > max_cycles) {  // a status, raised by the Python layer (no exception crosses the op)
      status = 1;
      break;
    }
    int rounds_now = period > 0 ? (int)period : std::max(8, last_levels / 2);
    for (int k = 0; k < rounds_now; ++k) {
      build_active<<<g_nodes, kThreads, 0, stream>>>(n, e, h, act, c, inf, kActive);
      discharge<<<g_nodes, kThreads, 0, stream>>>(act, c, rp, hd, rv, r, e, s, h, inf, (int)iters);
    }
    rounds += rounds_now;
    CSR_CUDA_CHECK(cudaGetLastError());
  }
  torchcut::CsrCudaStats out;
  out.cycles = cycles;
  out.rounds = rounds;
  out.bfs_levels = levels_total;
  out.last_bfs_depth = last_levels;
  out.status = status;
  out.write(stats);
}

}  // namespace torchcut_csr
