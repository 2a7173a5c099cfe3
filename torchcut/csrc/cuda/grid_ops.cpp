// CUDA implementations of torch.ops.torchcut.grid_solve_ (in place; argument checks, buffers from torch's
// caching allocators, the current stream; the solver itself is in grid_solve.cpp), and the
// expansion-move ops move_build / move_apply (kernels in grid_moves.cu).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <exception>
#include <vector>

#include "grid_common.h"
#include "grid_moves.h"

namespace torchcut_grid {

namespace {

// Buffers of one solve: torch tensors, kept alive until the op returns (the caching allocators make
// them cheap, and stream-ordered: the stream's later work may reuse them after the solve).
struct TorchAlloc final : Alloc {
  at::Device dev;
  std::vector<at::Tensor> keep;
  explicit TorchAlloc(at::Device d) : dev(d) {}
  void* device(size_t bytes) override {
    keep.push_back(at::empty({(int64_t)std::max<size_t>(bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(dev)));
    return keep.back().data_ptr();
  }
  void* pinned(size_t bytes) override {
    keep.push_back(at::empty({(int64_t)std::max<size_t>(bytes, 1)},
                             at::TensorOptions().dtype(at::kByte).pinned_memory(true)));
    return keep.back().data_ptr();
  }
};

std::tuple<at::Tensor, at::Tensor> solve_op(at::Tensor caps, at::Tensor excess, at::Tensor sink, c10::IntArrayRef shape,
                                            c10::IntArrayRef offsets, c10::IntArrayRef opts) {
  TORCH_CHECK(caps.is_cuda() && excess.is_cuda() && sink.is_cuda(),
              "torchcut.grid_solve_: expected caps, excess and sink on a CUDA device, got ", caps.device(), ", ",
              excess.device(), ", ", sink.device());
  TORCH_CHECK(caps.device() == excess.device() && caps.device() == sink.device(),
              "torchcut.grid_solve_: expected caps, excess and sink on one device");
  TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong,
              "torchcut.grid_solve_: caps: expected int32 or int64, got ", caps.scalar_type());
  TORCH_CHECK(sink.scalar_type() == caps.scalar_type(), "torchcut.grid_solve_: sink: expected dtype ",
              caps.scalar_type(), " (that of caps), got ", sink.scalar_type());
  TORCH_CHECK(excess.scalar_type() == at::kLong, "torchcut.grid_solve_: excess: expected int64, got ",
              excess.scalar_type());
  TORCH_CHECK(caps.is_contiguous() && excess.is_contiguous() && sink.is_contiguous(),
              "torchcut.grid_solve_: expected contiguous caps, excess and sink");
  TORCH_CHECK(shape.size() == 2 || shape.size() == 3, "torchcut.grid_solve_: shape: expected 2 or 3 dims, got ",
              shape.size());
  const int64_t nd = (int64_t)shape.size();
  TORCH_CHECK(offsets.size() % nd == 0 && offsets.size() > 0,
              "torchcut.grid_solve_: offsets: expected K*ndim integers, got ", offsets.size());
  const int64_t K = (int64_t)offsets.size() / nd;
  TORCH_CHECK(2 * K <= kMaxDirs, "torchcut.grid_solve_: offsets: expected at most ", kMaxDirs / 2,
              " offsets, got ", K);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  TORCH_CHECK(n > 0, "torchcut.grid_solve_: shape: expected at least one node, got ", shape);
  const int64_t B = excess.numel() / n;
  TORCH_CHECK(excess.numel() == B * n && sink.numel() == B * n && caps.numel() == B * 2 * K * n,
              "torchcut.grid_solve_: expected caps [B, 2K, *shape], excess and sink [B, *shape] with shape ", shape,
              " and K=", K, ", got ", caps.sizes(), ", ", excess.sizes(), ", ", sink.sizes());
  c10::cuda::CUDAGuard guard(caps.device());
  at::Tensor out = at::empty({B * n}, excess.options().dtype(at::kBool));
  at::Tensor stats = at::zeros({kNumStats}, at::TensorOptions().dtype(at::kLong));
  TorchAlloc alloc(caps.device());
  try {
    solve(caps.data_ptr(), (int)caps.element_size(), reinterpret_cast<long long*>(excess.data_ptr()), sink.data_ptr(),
          out.data_ptr<bool>(), std::vector<int64_t>(shape.begin(), shape.end()),
          std::vector<int64_t>(offsets.begin(), offsets.end()), B,
          Options::from(std::vector<int64_t>(opts.begin(), opts.end())), at::cuda::getCurrentCUDAStream(),
          at::cuda::getCurrentDeviceProperties()->multiProcessorCount, alloc, stats.data_ptr<int64_t>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return {out.view({B, n}), stats};
}

long long* ll(const at::Tensor& t) { return reinterpret_cast<long long*>(t.data_ptr<int64_t>()); }

// Geometry and energy of a move op; checks what both move ops read.
struct MoveArgs {
  MoveGeom G;
  MoveTerms T;
  int cap_bytes;
};

MoveArgs move_args(const char* op, const at::Tensor& U, const at::Tensor& f, const at::Tensor& W, const at::Tensor& V,
                   c10::IntArrayRef shape, c10::IntArrayRef offsets, int64_t mode) {
  TORCH_CHECK(U.is_cuda() && f.device() == U.device() && W.device() == U.device() && V.device() == U.device(),
              op, ": expected U, f, W and V on one CUDA device");
  TORCH_CHECK(U.scalar_type() == at::kInt || U.scalar_type() == at::kLong, op, ": U: expected int32 or int64, got ",
              U.scalar_type());
  TORCH_CHECK(mode >= kPairExact && mode <= kPairPotts, op, ": mode: expected 0, 1 or 2, got ", mode);
  const auto wdt = mode == kPairFloat ? at::kDouble : U.scalar_type();
  TORCH_CHECK(W.scalar_type() == wdt, op, ": W: expected ", wdt, ", got ", W.scalar_type());
  TORCH_CHECK(mode == kPairPotts || V.scalar_type() == wdt, op, ": V: expected ", wdt, ", got ", V.scalar_type());
  TORCH_CHECK(f.scalar_type() == at::kLong, op, ": f: expected int64 labels, got ", f.scalar_type());
  TORCH_CHECK(U.is_contiguous() && f.is_contiguous() && W.is_contiguous() && V.is_contiguous(), op,
              ": expected contiguous U, f, W and V");
  const int64_t nd = (int64_t)shape.size();
  TORCH_CHECK(nd == 2 || nd == 3, op, ": shape: expected 2 or 3 dims, got ", shape);
  TORCH_CHECK(offsets.size() % nd == 0 && offsets.size() > 0, op, ": offsets: expected K*ndim integers");
  const int64_t K = (int64_t)offsets.size() / nd;
  TORCH_CHECK(K <= kMaxMoveOffsets, op, ": offsets: expected at most ", kMaxMoveOffsets, " offsets, got ", K);
  MoveArgs A{};
  A.G.Z = nd == 3 ? shape[0] : 1;
  A.G.Y = shape[nd - 2];
  A.G.X = shape[nd - 1];
  A.G.N = A.G.X * A.G.Y * A.G.Z;
  A.G.K = (int)K;
  for (int64_t k = 0; k < K; ++k) {
    A.G.dx[k] = (int)offsets[k * nd + nd - 1];
    A.G.dy[k] = (int)offsets[k * nd + nd - 2];
    A.G.dz[k] = nd == 3 ? (int)offsets[k * nd] : 0;
  }
  const int64_t B = f.numel() / std::max<int64_t>(A.G.N, 1);
  TORCH_CHECK(A.G.N > 0 && f.numel() == B * A.G.N && B > 0 && B <= 65535, op,
              ": f: expected [B, *shape] labels with 1 <= B <= 65535, got ", f.sizes());
  TORCH_CHECK(U.dim() >= 2 && U.size(0) == B && U.numel() == B * U.size(1) * A.G.N, op,
              ": U: expected [B, L, *shape], got ", U.sizes());
  const int64_t L = U.size(1);
  TORCH_CHECK(W.numel() == B * K * A.G.N, op, ": W: expected [B, K, *shape], got ", W.sizes());
  TORCH_CHECK(V.numel() == L * L, op, ": V: expected L*L = ", L * L, " entries, got ", V.numel());
  A.T = MoveTerms{U.data_ptr(), W.data_ptr(), V.data_ptr(), B, (int)L, (int)mode};
  A.cap_bytes = (int)U.element_size();
  return A;
}

std::vector<at::Tensor> move_build_op(at::Tensor U, at::Tensor f, at::Tensor W, at::Tensor V, at::Tensor alpha,
                                      at::Tensor C0, at::Tensor R0, at::Tensor e0, at::Tensor r0, at::Tensor s0,
                                      at::Tensor k0, c10::IntArrayRef shape, c10::IntArrayRef offsets, int64_t mode,
                                      bool warm) {
  const char* op = "torchcut.move_build";
  MoveArgs A = move_args(op, U, f, W, V, shape, offsets, mode);
  TORCH_CHECK(alpha.device() == U.device() && alpha.scalar_type() == at::kLong && alpha.is_contiguous(), op,
              ": alpha: expected contiguous int64 labels on the device of U");
  const int64_t M = alpha.numel(), B = A.T.B, N = A.G.N, K = A.G.K, MB = M * B;
  TORCH_CHECK(M > 0 && MB <= 65535, op, ": alpha: expected 1 to 65535 / B moves, got ", M);
  const auto capo = U.options();
  const auto longo = U.options().dtype(at::kLong);
  std::vector<at::Tensor> out = {at::empty({MB, K, N}, capo), at::empty({MB, 2 * K, N}, capo),
                                 at::empty({MB, N}, longo),    at::empty({MB, N}, capo),
                                 at::empty({MB, N}, longo),    at::empty({MB, N}, longo)};
  MoveState S{};
  if (warm) {
    const std::vector<std::pair<const at::Tensor*, int64_t>> want = {{&C0, MB * K * N}, {&R0, MB * 2 * K * N},
                                                                      {&e0, MB * N},     {&r0, MB * N},
                                                                      {&s0, MB * N},     {&k0, MB * N}};
    for (size_t t = 0; t < want.size(); ++t) {
      const at::Tensor& x = *want[t].first;
      const bool cap = t == 0 || t == 1 || t == 3;
      TORCH_CHECK(x.device() == U.device() && x.is_contiguous() && x.numel() == want[t].second &&
                      x.scalar_type() == (cap ? U.scalar_type() : at::kLong),
                  op, ": state tensor ", t, ": expected ", want[t].second, " contiguous ",
                  cap ? U.scalar_type() : at::kLong, " values on the device of U, got ", x.sizes(), " ",
                  x.scalar_type());
    }
    S = MoveState{C0.data_ptr(), R0.data_ptr(), ll(e0), r0.data_ptr(), ll(s0), ll(k0)};
  }
  MoveOut O{out[0].data_ptr(), out[1].data_ptr(), ll(out[2]), out[3].data_ptr(), ll(out[4]), ll(out[5])};
  c10::cuda::CUDAGuard guard(U.device());
  try {
    launch_move_build(at::cuda::getCurrentCUDAStream(), A.cap_bytes, A.T, ll(f), ll(alpha), M, A.G, warm, S, O);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> move_apply_op(at::Tensor U, at::Tensor f, at::Tensor take, at::Tensor W,
                                                 at::Tensor V, at::Tensor e, int64_t alpha, c10::IntArrayRef shape,
                                                 c10::IntArrayRef offsets, int64_t mode) {
  const char* op = "torchcut.move_apply";
  MoveArgs A = move_args(op, U, f, W, V, shape, offsets, mode);
  TORCH_CHECK(take.device() == U.device() && take.scalar_type() == at::kBool && take.is_contiguous() &&
                  take.numel() == f.numel(),
              op, ": take: expected a contiguous bool mask shaped like f, got ", take.sizes(), " ", take.scalar_type());
  TORCH_CHECK(e.device() == U.device() && e.scalar_type() == at::kLong && e.is_contiguous() && e.numel() == A.T.B,
              op, ": e: expected [B] int64 energies, got ", e.sizes(), " ", e.scalar_type());
  TORCH_CHECK(alpha >= 0 && alpha < A.T.L, op, ": alpha: expected a label in [0, ", A.T.L, "), got ", alpha);
  at::Tensor delta = at::zeros({A.T.B}, e.options());
  at::Tensor f_out = at::empty_like(f);
  at::Tensor e_out = at::empty_like(e);
  c10::cuda::CUDAGuard guard(U.device());
  try {
    launch_move_apply(at::cuda::getCurrentCUDAStream(), A.cap_bytes, A.T, ll(f), take.data_ptr<bool>(), alpha, ll(e),
                      A.G, ll(delta), ll(f_out), ll(e_out));
  } catch (const std::exception& ex) {
    TORCH_CHECK(false, ex.what());
  }
  return {f_out, e_out};
}

}  // namespace

}  // namespace torchcut_grid

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) {
  m.impl("grid_solve_", &torchcut_grid::solve_op);
  m.impl("move_build", &torchcut_grid::move_build_op);
  m.impl("move_apply", &torchcut_grid::move_apply_op);
}
