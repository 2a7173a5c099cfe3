// Device helpers shared by the grid kernels (grid_push.cuh, grid_bfs.cu).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "grid_common.h"

namespace torchcut_grid {


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
// extents, so that index arithmetic inside a tile is shifts and masks, not integer divisions (the
// BFS and push kernels were bound by instruction issue, ~28 and ~48 runtime divisions in their SASS).
template <int TXc = 0, int TYc = 0, int TZc = 0>
struct Sh {
  static constexpr bool fixed = TXc > 0 && TYc > 0 && TZc > 0;
  static constexpr int cx = TXc, cy = TYc, cz = TZc;
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

template <class S = Sh<>>
__device__ __forceinline__ bool in_tile(const Geom& G, const Local& L, int d) {
  return (unsigned)(L.lx + G.dx[d]) < (unsigned)S::tx(G) && (unsigned)(L.ly + G.dy[d]) < (unsigned)S::ty(G) &&
         (unsigned)(L.lz + G.dz[d]) < (unsigned)S::tz(G);
}

// Offset d leads from node L out of its tile to a node of the grid (an arc another tile's visit reads).
template <class S = Sh<>>
__device__ __forceinline__ bool crosses(const Geom& G, const Local& L, int d) {
  const int vx = L.x + G.dx[d], vy = L.y + G.dy[d], vz = L.z + G.dz[d];
  return L.valid && !in_tile<S>(G, L, d) && (unsigned)vx < (unsigned)G.X && (unsigned)vy < (unsigned)G.Y &&
         (unsigned)vz < (unsigned)G.Z;
}

// Tile (within its item) of the node L + offset d.
template <class S = Sh<>>
__device__ __forceinline__ int tile_of(const Geom& G, const Local& L, int d) {
  const int vx = L.x + G.dx[d], vy = L.y + G.dy[d], vz = L.z + G.dz[d];
  return vx / S::tx(G) + G.nTX * (vy / S::ty(G) + G.nTY * (vz / S::tz(G)));
}

}  // namespace torchcut_grid
