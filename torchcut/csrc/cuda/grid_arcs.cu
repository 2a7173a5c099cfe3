// grid_arcs (CUDA): a grid's arc capacities from the user's layout to the solvers' one, in one launch.
//
// The same contract as the CPU op (cpu/grid_arcs.cpp; torchcut/grid.py, _arc_layout_tensors, is the
// reference): edges, reverse [K, B, *shape] (int32 or int64), edges[k][b][p] the arc p -> p + offsets[k],
// reverse[k][b][p] the arc p + offsets[k] -> p; out caps [B, 2K, *shape] (int32, or int64 when `wide`),
// direction k holding edges[k][p], direction K + k at node q holding reverse[k][q - offsets[k]], arcs
// that leave the grid 0. The tensor ops zero and copy one slab per direction and axis, 2K * (ndim + 1)
// launches (about 0.4 ms of a 16^2 8-connected GridGraph on one H100); here one thread per output value.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace torchcut_arcs {
namespace {

constexpr int kMaxDirs = 32;  // offsets K per launch (2D / 3D neighbourhoods have at most 13)

struct ArcGeom {
  int nd, K;
  long long X, Y, Z, n, B;  // extents (Z = 1 in 2D: x the last axis), nodes per item, items
  int ox[kMaxDirs], oy[kMaxDirs], oz[kMaxDirs];
};

template <class In, class Out>
__global__ void arcs_kernel(const In* __restrict__ edges, const In* __restrict__ reverse, Out* __restrict__ caps,
                            const ArcGeom G) {
  const long long total = G.B * 2 * G.K * G.n;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long p = i % G.n, bd = i / G.n;
    const int d = (int)(bd % (2 * G.K));
    const long long b = bd / (2 * G.K);
    const bool fwd = d < G.K;
    const int k = fwd ? d : d - G.K;
    const long long x = p % G.X, y = (p / G.X) % G.Y, z = p / (G.X * G.Y);
    const long long s = fwd ? 1 : -1;  // the arc's far end: p + o (forward), p - o (reverse)
    const long long qx = x + s * G.ox[k], qy = y + s * G.oy[k], qz = z + s * G.oz[k];
    Out v = 0;
    if (qx >= 0 && qx < G.X && qy >= 0 && qy < G.Y && qz >= 0 && qz < G.Z) {
      const long long base = ((long long)k * G.B + b) * G.n;
      v = fwd ? (Out)edges[base + p] : (Out)reverse[base + qx + G.X * (qy + G.Y * qz)];
    }
    caps[i] = v;
  }
}

at::Tensor grid_arcs_cuda(const at::Tensor& edges_, const at::Tensor& reverse_, at::IntArrayRef offsets, bool wide) {
  const int64_t dims = edges_.dim();
  TORCH_CHECK(dims == 4 || dims == 5, "torchcut.grid_arcs: edges: expected [K, B, *shape] with 2 or 3 spatial dims, "
              "got ", edges_.sizes());
  const int64_t nd = dims - 2, K = edges_.size(0), B = edges_.size(1);
  TORCH_CHECK(reverse_.sizes() == edges_.sizes(), "torchcut.grid_arcs: reverse: expected the shape of edges ",
              edges_.sizes(), ", got ", reverse_.sizes());
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == K * nd, "torchcut.grid_arcs: offsets: expected ", K * nd,
              " values, got ", offsets.size());
  TORCH_CHECK(K <= kMaxDirs, "torchcut.grid_arcs: expected at most ", kMaxDirs, " offsets, got ", K);
  TORCH_CHECK(edges_.is_cuda() && reverse_.device() == edges_.device(),
              "torchcut.grid_arcs: expected edges and reverse on one CUDA device");
  TORCH_CHECK(edges_.scalar_type() == reverse_.scalar_type(), "torchcut.grid_arcs: reverse: expected dtype ",
              edges_.scalar_type(), " (that of edges), got ", reverse_.scalar_type());
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
  const int threads = 256;
  const int blocks = (int)std::min<long long>((total + threads - 1) / threads, 65535);
  const cudaStream_t st = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_INDEX_TYPES(edges.scalar_type(), "torchcut.grid_arcs", [&] {
    if (wide)
      arcs_kernel<index_t, int64_t><<<blocks, threads, 0, st>>>(edges.data_ptr<index_t>(), reverse.data_ptr<index_t>(),
                                                               caps.data_ptr<int64_t>(), G);
    else
      arcs_kernel<index_t, int32_t><<<blocks, threads, 0, st>>>(edges.data_ptr<index_t>(), reverse.data_ptr<index_t>(),
                                                               caps.data_ptr<int32_t>(), G);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return caps;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) { m.impl("grid_arcs", &grid_arcs_cuda); }

}  // namespace torchcut_arcs
