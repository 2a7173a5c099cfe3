// Push kernels of the grid solver: tile-local push/relabel rounds in shared memory. Templates here,
// instantiated by grid_push_i32.cu and grid_push_i64.cu (one file per capacity type, compiled in
// parallel).
//
// push_kernel: the block loads its tile's caps, excess, sink residuals and heights (plus a halo of
//   neighbouring heights, a snapshot) into shared memory and runs `rounds` local discharge rounds (push
//   to every lower residual neighbour, sink first, then relabel). Pushes inside the tile use
//   shared-memory atomics. Pushes across the tile border go straight to global memory (atomicAdd on the
//   neighbour's excess and on the reverse residual, atomic decrement of the own residual), so global
//   memory always holds the truth for border arcs and the shared copy is a lower bound: pushes never
//   exceed a residual. Interior arcs belong to the tile and are stored back plainly; excess is written
//   back as a delta (atomicAdd) because other tiles add to it concurrently. Heights of other tiles are a
//   snapshot (stale within a launch: only a heuristic, the preflow stays valid).
// Walk: before each launch list_kernel (grid_bfs.cu) lists the tiles whose flag is set; the
//   resident blocks of a persistent grid take them one at a time, so clustered active tiles spread over
//   all blocks, and every item of a batch gets blocks however large the batch.
// Chained launches (CHAIN, option push_chain; late cycles of a BFS bound by its depth, where a launch
//   holds under one wave of tiles and flow crossed one tile border per launch): a tile that flow enters
//   during the launch, or that is still active after its visit, goes back into the list, up to `chain`
//   times the listed tiles. Like the BFS's worklist, a block takes the next slot of the list and waits for
//   an entry there until no tile is queued or running (pq[2] = 0). Tile flags then have four states:
//   0 idle, 1 queued (listed, or appended), 2 running, 3 running and entered by flow since its loads; a
//   tile is appended once per transition to 1, so no two blocks run it at once. A visit may read what
//   another block of the same launch wrote: its loads go to L2 (__ldcg), and a fence precedes the
//   tile's release.
#pragma once

#include "grid_device.cuh"

namespace torchcut_grid {

// Chained launches: append tile q to the list, counted as queued (pq[2]) before its entry is written.
// Entries past the launch's limit are dropped: the tile stays queued, and the next launch lists it.
__device__ __forceinline__ void tile_append(long long q, unsigned long long* pq, long long* plist,
                                            unsigned long long limit) {
  const unsigned long long pos = atomicAdd(pq + 1, 1ULL);
  if (pos >= limit) return;
  atomicAdd(pq + 2, 1ULL);
  __threadfence();
  atomicExch(reinterpret_cast<unsigned long long*>(plist + pos), (unsigned long long)q);
}

// Chained launches: flow entered tile q. Idle: queue it; running: mark it entered (its visit re-queues
// it); queued or already entered: nothing. Retried when the tile went from running to idle in between.
__device__ __forceinline__ void tile_enter(int* tile_active, long long q, unsigned long long* pq, long long* plist,
                                           unsigned long long limit) {
  while (true) {
    const int old = atomicCAS(tile_active + q, 0, 1);
    if (old == 0) {
      tile_append(q, pq, plist, limit);
      return;
    }
    if (old != 2 || atomicCAS(tile_active + q, 2, 3) != 0) return;
  }
}

// A load of data another block of the same launch may have written (chained launches: through L2).
template <bool CHAIN, typename T>
__device__ __forceinline__ T load(const T* p) {
  if constexpr (CHAIN) return __ldcg(p);
  return *p;
}

// One tile's push/relabel rounds (the tile was listed as active by list_kernel).
template <typename CapT, int DT, class S, bool CHAIN>
__device__ __forceinline__ void push_tile(CapT* __restrict__ caps, long long* __restrict__ excess,
                                          CapT* __restrict__ sink, int* __restrict__ height,
                                          int* __restrict__ tile_active, const Geom& G, int rounds, int b, int t,
                                          unsigned long long* __restrict__ prof, int* __restrict__ touched,
                                          unsigned long long* __restrict__ pq, long long* __restrict__ plist,
                                          unsigned long long limit) {
  const int D = DT ? DT : G.D;
  const int K = D / 2;
  const int NT = S::nt();
  int* flag = tile_active + (long long)b * G.T + t;
  long long t0 = 0;
  // the walk listed the tile because its flag was set; only this block clears it, others only set it
  // (chained: running; flow entering now marks it 3, see tile_enter)
  if (threadIdx.x == 0) *flag = CHAIN ? 2 : 0;  // unchained: from now on, only "1" is written to it
  // Repaired relabels (Options::repair): the tiles whose arcs or heights may change since the last one
  if (touched != nullptr && threadIdx.x == 0) touched[(long long)b * G.T + t] = 1;
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
    e0 = load<CHAIN>(excess + base + L.g);
    s0 = load<CHAIN>(sink + base + L.g);
#pragma unroll
    for (int d = 0; d < D; ++d) {
      c_s[d * NT + i] = load<CHAIN>(capb + d * G.N + L.g);
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
            atomic_add(&c_s[d * NT + i], (CapT)-dl);
            atomic_add(&c_s[rd * NT + j], dl);
            atomic_add(&e_s[j], (long long)dl);
          } else {
            const long long gv = L.g + G.glin[d];
            c_s[d * NT + i] = c - dl;
            atomic_add(&capb[d * G.N + L.g], (CapT)-dl);
            atomic_add(&capb[rd * G.N + gv], dl);
            atomic_add(&excess[base + gv], (long long)dl);
            const long long tv = (long long)b * G.T + tile_of<S>(G, L, d);
            if constexpr (CHAIN)
              tile_enter(tile_active, tv, pq, plist, limit);
            else
              tile_active[tv] = 1;
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
    if (h != h0) {
      hb[L.g] = h;
      // a raised height across the border may take the support of a node of the neighbouring tile
      for (int d = 0; touched != nullptr && d < D; ++d)
        if (crosses<S>(G, L, d)) touched[(long long)b * G.T + tile_of<S>(G, L, d)] = 1;
    }
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (in_tile<S>(G, L, d)) capb[d * G.N + L.g] = c_s[d * NT + i];
    }
    still = e > 0 && h < kInf;
  }
  if constexpr (CHAIN) {
    __threadfence();  // this visit's writes before the tile is released to another block
    const bool again = __syncthreads_or(still);
    // still active, or entered by flow while it ran: back into the list
    if (threadIdx.x == 0) {
      if (again || atomicCAS(flag, 2, 0) == 3) {
        atomicExch(flag, 1);
        tile_append((long long)b * G.T + t, pq, plist, limit);
      }
      __threadfence();
      atomicAdd(pq + 2, ~0ULL);  // this tile no longer runs
    }
  } else {
    if (__syncthreads_or(still) && threadIdx.x == 0) *flag = 1;
  }
  if (prof != nullptr && threadIdx.x == 0) {  // option profile: visits, cycles, local rounds
    atomicAdd(prof, 1ULL);
    atomicAdd(prof + 1, (unsigned long long)(clock64() - t0));
    atomicAdd(prof + 2, (unsigned long long)min(r + 1, rounds));
  }
}

template <typename CapT, int DT, int MINB, class S, bool CHAIN>
__global__ void __launch_bounds__(512, MINB)
    push_kernel(CapT* __restrict__ caps, long long* __restrict__ excess, CapT* __restrict__ sink,
                int* __restrict__ height, int* __restrict__ tile_active, const __grid_constant__ Geom G, int rounds,
                int items, unsigned long long* __restrict__ prof, unsigned long long* __restrict__ pq,
                long long* __restrict__ plist, int* __restrict__ touched, int chain, long long cap) {
  // list_kernel has listed the active tiles (pq[1] = the list's end); blocks take entries one at a time
  // (pq[0]). Chained, the list grows during the launch up to `limit` entries (chain times the listed
  // tiles, pq[3]): a block waits at its slot until an entry is written there (plist is -1 before a
  // chained launch) or no tile is queued or running (pq[2] = 0).
  __shared__ long long s_q;
  const unsigned long long limit = CHAIN ? min((unsigned long long)cap, __ldcg(pq + 3) * (unsigned long long)chain) : 0;
  while (true) {
    if (threadIdx.x == 0) {
      const unsigned long long k = atomicAdd(pq, 1ULL);
      long long q = -1;
      if constexpr (CHAIN) {
        if (k < limit) {
          volatile long long* slot = plist + k;
          volatile unsigned long long* pending = pq + 2;
          for (long long spins = 0; (q = *slot) < 0 && *pending != 0 && spins < (1LL << 26); ++spins)
            __nanosleep(64);
          if (q >= 0) __threadfence();  // the tile's data is read after its entry
        }
      } else {
        q = k < __ldcg(pq + 1) ? __ldcg(plist + k) : -1;
      }
      s_q = q;
    }
    __syncthreads();
    const long long q = s_q;
    if (q < 0) return;
    const int b = items == 1 ? 0 : (int)(q / G.T);
    push_tile<CapT, DT, S, CHAIN>(caps, excess, sink, height, tile_active, G, rounds, b,
                                  (int)(q - (long long)b * G.T), prof, touched, pq, plist, limit);
    __syncthreads();  // shared memory and s_q are reused by the next tile
  }
}

// Compiled variants: the default tile of 4-, 8- and 6-connected grids with its directions and extents
// known at compile time (2 blocks per SM, 64 registers; 2D also chained), 18 and 26 directions known at
// compile time (1 block per SM), and one generic kernel for every other grid and tile option (runtime
// directions and extents, 1 block per SM). chain > 0: chained (only where push_chains(G)).
template <typename CapT>
void launch_push(cudaStream_t st, int blocks, int threads, size_t smem, CapT* caps, long long* excess, CapT* sink,
                 int* height, int* tile_active, const Geom& G, int rounds, int items, unsigned long long* prof,
                 unsigned long long* pq, long long* plist, int* touched, int chain, long long cap) {
  auto go = [&](auto kern) {
    if (smem > 48 * 1024)
      TC_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<blocks, threads, smem, st>>>(caps, excess, sink, height, tile_active, G, rounds, items, prof, pq, plist,
                                        touched, chain, cap);
  };
  const bool t2 = G.TX == 32 && G.TY == 16 && G.TZ == 1, t888 = G.TX == 8 && G.TY == 8 && G.TZ == 8;
  const bool ch = chain > 0 && push_chains(G);
  if (G.D == 4 && t2)
    ch ? go(push_kernel<CapT, 4, 2, Sh<32, 16, 1>, true>) : go(push_kernel<CapT, 4, 2, Sh<32, 16, 1>, false>);
  else if (G.D == 8 && t2)
    ch ? go(push_kernel<CapT, 8, 2, Sh<32, 16, 1>, true>) : go(push_kernel<CapT, 8, 2, Sh<32, 16, 1>, false>);
  else if (G.D == 6 && t888)
    go(push_kernel<CapT, 6, 2, Sh<8, 8, 8>, false>);
  else if (G.D == 18)  // extents at run time: with them fixed, D = 26 spilled 720 bytes instead of 44
    go(push_kernel<CapT, 18, 1, Sh<>, false>);
  else if (G.D == 26)
    go(push_kernel<CapT, 26, 1, Sh<>, false>);
  else
    go(push_kernel<CapT, 0, 1, Sh<>, false>);
}

}  // namespace torchcut_grid
