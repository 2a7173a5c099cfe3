// grid_arcs (CUDA): a grid's arc capacities from the user's layout to the solvers' one, in one launch.
//
// The same contract as the CPU op (cpu/grid_arcs.cpp; torchcut/grid.py, _arc_layout_tensors, is the
// reference): edges, reverse [K, B, *shape] (int32 or int64), edges[k][b][p] the arc p -> p + offsets[k],
// reverse[k][b][p] the arc p + offsets[k] -> p; out caps [B, 2K, *shape] (int32, or int64 when `wide`),
// direction k holding edges[k][p], direction K + k at node q holding reverse[k][q - offsets[k]], arcs
// that leave the grid 0. The tensor ops zero and copy one slab per direction and axis, 2K * (ndim + 1)
// launches (about 0.4 ms of a 16^2 8-connected GridGraph on one H100); here one launch, one
// thread per output value.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

#include "../grid_arcs.h"

namespace torchcut_arcs {
namespace {

constexpr int kMaxDirs = 32;  // offsets K per launch (2D / 3D neighbourhoods have at most 13)

struct ArcGeom {
  int nd, K;
  long long X, Y, Z, n, B;  // extents (Z = 1 in 2D: x the last axis), nodes per item, items
  int ox[kMaxDirs], oy[kMaxDirs], oz[kMaxDirs];
};

// Division by a fixed divisor d in [1, 2^31] of numbers below 2^31: a multiply-high, an add and a shift
// (q = (umulhi(n, m) + n) >> s with s = ceil(log2 d), m = 2^32 (2^s - d) / d + 1), where the hardware's
// 32-bit division takes about twenty instructions.
struct FastDiv {
  uint32_t d, m, s;
  explicit FastDiv(uint32_t divisor = 1) : d(divisor), m(1), s(0) {
    while ((1ULL << s) < d) ++s;
    m = (uint32_t)(((1ULL << 32) * ((1ULL << s) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

// One output slab (item b, direction d) per blockIdx.y, its nodes along x: the slab's direction and source
// pointer are set once per block, and a node's coordinates take two divisions, done by FastDiv when a slab
// has fewer than 2^31 nodes.
template <class In, class Out, bool kFast>
__global__ void arcs_kernel(const In* __restrict__ edges, const In* __restrict__ reverse, Out* __restrict__ caps,
                            const ArcGeom G, const FastDiv divx, const FastDiv divy) {
  const long long slabs = G.B * 2 * G.K;
  for (long long bd = blockIdx.y; bd < slabs; bd += gridDim.y) {
    const int d = (int)(bd % (2 * G.K));
    const long long b = bd / (2 * G.K);
    const bool fwd = d < G.K;
    const int k = fwd ? d : d - G.K;
    const int s = fwd ? 1 : -1;  // the arc's far end: p + o (forward), p - o (reverse)
    const long long ox = s * G.ox[k], oy = s * G.oy[k], oz = s * G.oz[k];
    const long long shift = fwd ? 0 : ox + G.X * (oy + G.Y * oz);  // reverse[k][b][q] with q = p - o
    const In* src = (fwd ? edges : reverse) + ((long long)k * G.B + b) * G.n + shift;
    Out* dst = caps + bd * G.n;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < G.n;
         p += (long long)gridDim.x * blockDim.x) {
      long long x, y, z;
      if constexpr (kFast) {
        const uint32_t row = divx.div((uint32_t)p), zz = divy.div(row);
        x = (long long)((uint32_t)p - row * divx.d), y = (long long)(row - zz * divy.d), z = zz;
      } else {
        const long long row = p / G.X;
        x = p - row * G.X, z = row / G.Y, y = row - z * G.Y;
      }
      const long long qx = x + ox, qy = y + oy, qz = z + oz;
      Out v = 0;
      if (qx >= 0 && qx < G.X && qy >= 0 && qy < G.Y && qz >= 0 && qz < G.Z) v = (Out)src[p];
      dst[p] = v;
    }
  }
}

template <class In, class Out>
void launch_arcs(const at::Tensor& edges, const at::Tensor& reverse, at::Tensor& caps, const ArcGeom& G,
                 cudaStream_t st) {
  const int threads = 256;
  const long long slabs = G.B * 2 * G.K;
  // about 4096 blocks in all, so that each thread walks many nodes of its slab and the per-block set-up
  // (the slab's direction, 64-bit index arithmetic) is paid rarely
  const long long ys = std::min<long long>(slabs, 65535);
  const dim3 grid((unsigned)std::max<long long>(1, std::min<long long>((G.n + threads - 1) / threads, 4096 / ys)),
                  (unsigned)ys);
  const In* e = edges.data_ptr<In>();
  const In* r = reverse.data_ptr<In>();
  Out* c = caps.data_ptr<Out>();
  if (G.n < (1LL << 31))
    arcs_kernel<In, Out, true><<<grid, threads, 0, st>>>(e, r, c, G, FastDiv((uint32_t)G.X), FastDiv((uint32_t)G.Y));
  else
    arcs_kernel<In, Out, false><<<grid, threads, 0, st>>>(e, r, c, G, FastDiv(), FastDiv());
}

at::Tensor grid_arcs_cuda(const at::Tensor& edges_, const at::Tensor& reverse_, at::IntArrayRef offsets, bool wide) {
  const auto arcs = torchcut_arcs_checks::check_grid_arcs(edges_, reverse_, offsets, at::kCUDA);
  const int64_t nd = arcs.nd, K = arcs.K, B = arcs.B;
  const int64_t dims = edges_.dim();
  TORCH_CHECK(K <= kMaxDirs, "torchcut.grid_arcs: expected at most ", kMaxDirs, " offsets, got ", K);
  const c10::cuda::CUDAGuard guard(edges_.device());
  const at::Tensor edges = edges_.contiguous(), reverse = reverse_.contiguous();
  std::vector<int64_t> out_sizes{B, 2 * K};
  for (int64_t a = 2; a < dims; ++a) out_sizes.push_back(edges.size(a));
  at::Tensor caps = at::empty(out_sizes, edges.options().dtype(wide ? at::kLong : at::kInt));
  ArcGeom G{};
  G.nd = (int)nd, G.K = (int)K, G.B = B;
  G.X = edges.size(dims - 1), G.Y = edges.size(dims - 2), G.Z = nd == 3 ? edges.size(2) : 1;
  G.n = G.X * G.Y * G.Z;
  for (int64_t k = 0; k < K; ++k) {
    G.ox[k] = (int)offsets[k * nd + nd - 1];
    G.oy[k] = (int)offsets[k * nd + nd - 2];
    G.oz[k] = nd == 3 ? (int)offsets[k * nd] : 0;
  }
  const long long total = B * 2 * K * G.n;
  if (total == 0) return caps;
  const cudaStream_t st = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_INDEX_TYPES(edges.scalar_type(), "torchcut.grid_arcs", [&] {
    if (wide)
      launch_arcs<index_t, int64_t>(edges, reverse, caps, G, st);
    else
      launch_arcs<index_t, int32_t>(edges, reverse, caps, G, st);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return caps;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) { m.impl("grid_arcs", &grid_arcs_cuda); }

}  // namespace torchcut_arcs
