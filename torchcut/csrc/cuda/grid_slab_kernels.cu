// Border kernels of a slab of a grid split over several devices (the host side is grid_slab.cpp, the
// exchange between devices torchcut/distributed.py). One thread per node of a border plane; a plane is
// contiguous (the split axis is the outermost one), so node `i` of plane `z` is `z * P + i`.
#include <algorithm>

#include "grid_device.cuh"

namespace torchcut_grid {

namespace {

int blocks_for(long long n) { return (int)std::min<long long>((n + 255) / 256, 4096); }

template <typename CapT>
__global__ void slab_pack_kernel(CapT* __restrict__ caps, long long* __restrict__ excess, CapT* __restrict__ sink,
                                 const int* __restrict__ height, long long N, long long P, long long ghost,
                                 long long border, const SlabDirs dirs, CapT* __restrict__ msg,
                                 int* __restrict__ tile_active, long long t0, long long t1) {
  for (long long t = t0 + blockIdx.x * (long long)blockDim.x + threadIdx.x; t < t1; t += (long long)gridDim.x * blockDim.x)
    tile_active[t] = 0;  // the ghost plane's own tiles: flagged by the pushes into them, never to be visited
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < P; i += (long long)gridDim.x * blockDim.x) {
    const long long q = ghost * P + i;
    for (int j = 0; j < dirs.n; ++j) {
      CapT* c = caps + dirs.d[j] * N + q;
      msg[j * P + i] = *c;  // the residual of the arc back from the ghost node: what was pushed into it
      *c = 0;
    }
    excess[q] = 0;
    sink[q] = kGhostSink<CapT>;
    msg[dirs.n * P + i] = (CapT)height[border * P + i];
  }
}

template <typename CapT>
__global__ void slab_absorb_kernel(CapT* __restrict__ caps, long long* __restrict__ excess, int* __restrict__ height,
                                   int* __restrict__ tile_active, const __grid_constant__ Geom G, long long P,
                                   long long ghost, long long border, const SlabDirs dirs,
                                   const CapT* __restrict__ msg) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < P; i += (long long)gridDim.x * blockDim.x) {
    const long long q = border * P + i;
    long long in = 0;
    for (int j = 0; j < dirs.n; ++j) {
      const CapT a = msg[j * P + i];
      if (a != 0) {
        caps[dirs.d[j] * G.N + q] += a;  // the reverse residual of the neighbour's push into this node
        in += a;
      }
    }
    long long e = excess[q];
    if (in != 0) excess[q] = e += in;
    height[ghost * P + i] = (int)msg[dirs.n * P + i];
    if (e > 0 && height[q] < kInf) {
      const int x = (int)(q % G.X), y = (int)((q / G.X) % G.Y), z = (int)(q / ((long long)G.X * G.Y));
      tile_active[x / G.TX + G.nTX * (y / G.TY + G.nTY * (z / G.TZ))] = 1;
    }
  }
}

__global__ void slab_dist_kernel(int* __restrict__ height, int* __restrict__ flags, const __grid_constant__ Geom GB,
                                 long long P, long long ghost, long long border, const int* __restrict__ dist,
                                 long long* __restrict__ changed) {
  long long n = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < P; i += (long long)gridDim.x * blockDim.x) {
    const int v = dist[i];
    int* h = height + ghost * P + i;
    if (v < *h) {
      *h = v;
      ++n;
      const long long q = border * P + i;
      const int x = (int)(q % GB.X), y = (int)((q / GB.X) % GB.Y), z = (int)(q / ((long long)GB.X * GB.Y));
      flags[x / GB.TX + GB.nTX * (y / GB.TY + GB.nTY * (z / GB.TZ))] = 1;
    }
  }
  if (n) atomicAdd(reinterpret_cast<unsigned long long*>(changed), (unsigned long long)n);
}

}  // namespace

template <typename CapT>
void launch_slab_pack(cudaStream_t st, CapT* caps, long long* excess, CapT* sink, const int* height, long long N,
                      long long P, long long ghost, long long border, const SlabDirs& dirs, CapT* msg,
                      int* tile_active, long long t0, long long t1) {
  slab_pack_kernel<CapT><<<blocks_for(P), 256, 0, st>>>(caps, excess, sink, height, N, P, ghost, border, dirs, msg,
                                                        tile_active, t0, t1);
}

template <typename CapT>
__global__ void slab_fill_kernel(CapT* __restrict__ p, long long n, CapT v) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] = v;
}

template <typename CapT>
void launch_slab_ghost_sink(cudaStream_t st, CapT* sink, long long P, long long ghost, bool on) {
  slab_fill_kernel<CapT><<<blocks_for(P), 256, 0, st>>>(sink + ghost * P, P, on ? kGhostSink<CapT> : (CapT)0);
}

template <typename CapT>
void launch_slab_absorb(cudaStream_t st, CapT* caps, long long* excess, int* height, int* tile_active, const Geom& G,
                        long long P, long long ghost, long long border, const SlabDirs& dirs, const CapT* msg) {
  slab_absorb_kernel<CapT><<<blocks_for(P), 256, 0, st>>>(caps, excess, height, tile_active, G, P, ghost, border,
                                                          dirs, msg);
}

void launch_slab_dist(cudaStream_t st, int* height, int* flags, const Geom& GB, long long P, long long ghost,
                      long long border, const int* dist, long long* changed) {
  slab_dist_kernel<<<blocks_for(P), 256, 0, st>>>(height, flags, GB, P, ghost, border, dist, changed);
}

template void launch_slab_pack<int>(cudaStream_t, int*, long long*, int*, const int*, long long, long long,
                                    long long, long long, const SlabDirs&, int*, int*, long long, long long);
template void launch_slab_pack<long long>(cudaStream_t, long long*, long long*, long long*, const int*, long long,
                                          long long, long long, long long, const SlabDirs&, long long*, int*,
                                          long long, long long);
void launch_slab_fill(cudaStream_t st, int* p, long long n, int v) {
  slab_fill_kernel<int><<<blocks_for(n), 256, 0, st>>>(p, n, v);
}

template void launch_slab_ghost_sink<int>(cudaStream_t, int*, long long, long long, bool);
template void launch_slab_ghost_sink<long long>(cudaStream_t, long long*, long long, long long, bool);
template void launch_slab_absorb<int>(cudaStream_t, int*, long long*, int*, int*, const Geom&, long long, long long,
                                      long long, const SlabDirs&, const int*);
template void launch_slab_absorb<long long>(cudaStream_t, long long*, long long*, int*, int*, const Geom&, long long,
                                            long long, long long, const SlabDirs&, const long long*);

}  // namespace torchcut_grid
