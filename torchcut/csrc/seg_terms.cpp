// torch.ops.torchcut.seg_terms: the seeded segmentation energy after its checks, in one call (what
// torchcut/energy.py's _native_terms composes): the seed histograms (seg_hist), their log-ratio table, sigma
// and the n-links' coefficient (seg_sigma, or given), and the capacities (seg_energy).
//
// Each step is the op or the tensor operations the Python composition runs, called here through the
// dispatcher, so the values are the same bit for bit on either device; what the one call saves is the
// host's time per step (argument parsing, a Python frame, the small copies): 8-19% of a CPU image's energy.
// Registered for every device (CompositeExplicitAutograd: the steps dispatch to the CPU or CUDA kernels of
// the tensors' device), but energy.py calls it for CPU images only: on CUDA the log-ratio table's dozen
// small ops, launched one by one from here, cost more than the Python calls it saves, where the op-by-op
// path replays them as one CUDA graph (docs/performance.md).
//
// Arguments: x [B, C, N] float32 and seeds [B, N] uint8 as seg_hist takes them; lo and span: the colour
// range's float32 values (B * C each, as doubles); bins, unit, wide, shape, sums: as seg_hist takes them
// (sums: work out sigma from the sums, seg_sigma with exps and count); sig_coef: otherwise sigma and the
// coefficient per image (2 * B values, float32 as doubles); uniform: the mixture weight of the uniform
// distribution; scale, hard, offsets, weights: as seg_energy takes them. Returns the source, sink and
// n-link capacities and sigma [B] (float32).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace torchcut_terms {
namespace {

// the kernels' own signatures (tensors by value), as the dispatcher checks them
using Hist = std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor, at::Tensor, at::Tensor, int64_t,
                                                c10::ArrayRef<double>, bool, c10::IntArrayRef, bool);
using Sigma = at::Tensor(at::Tensor, c10::IntArrayRef, int64_t);
using Energy = std::tuple<at::Tensor, at::Tensor, at::Tensor>(at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                                              at::Tensor, at::Tensor, int64_t, double, int64_t,
                                                              c10::IntArrayRef, c10::IntArrayRef,
                                                              c10::ArrayRef<double>);

template <class F>
c10::TypedOperatorHandle<F> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<F>();
}

// The log ratios [B, nb] of the seed histograms `counts` (int32 [B, 2, nb]): energy.py's _table and
// _smooth_hist, operation for operation ([1, 2, 1] / 4 along each colour axis, normalise, mix with the
// uniform distribution, log, object minus background).
at::Tensor log_ratio_table(const at::Tensor& counts, int64_t bins, int64_t C, double uniform) {
  const int64_t B = counts.size(0), nb = counts.size(2);
  std::vector<int64_t> dims{2 * B};
  for (int64_t c = 0; c < C; ++c) dims.push_back(bins);
  at::Tensor h = counts.to(at::kFloat).view(dims);
  for (int64_t axis = h.dim() - C; axis < h.dim(); ++axis) {
    const int64_t n = h.size(axis);
    if (n < 2) continue;
    at::Tensor out = h * 0.5;
    out.narrow(axis, 1, n - 1).add_(h.narrow(axis, 0, n - 1), 0.25);
    out.narrow(axis, 0, n - 1).add_(h.narrow(axis, 1, n - 1), 0.25);
    h = out;
  }
  h = h.reshape({B, 2, nb});
  at::Tensor p = h / h.sum(2, /*keepdim=*/true);
  p.mul_(1 - uniform).add_(uniform / static_cast<double>(nb));
  at::Tensor logp = p.log_();
  return logp.select(1, 0) - logp.select(1, 1);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> seg_terms(
    const at::Tensor& x, const at::Tensor& seeds, c10::ArrayRef<double> lo, c10::ArrayRef<double> span,
    int64_t bins, c10::ArrayRef<double> unit, bool wide, c10::IntArrayRef shape, bool sums, c10::IntArrayRef exps,
    int64_t count, c10::ArrayRef<double> sig_coef, double uniform, double scale, int64_t hard,
    c10::IntArrayRef offsets, c10::ArrayRef<double> weights) {
  const char* op = "torchcut.seg_terms";
  TORCH_CHECK(x.dim() == 3, op, ": x: expected [B, C, N], got ", x.dim(), " dimensions");
  const int64_t B = x.size(0), C = x.size(1);
  TORCH_CHECK(static_cast<int64_t>(lo.size()) == B * C && static_cast<int64_t>(span.size()) == B * C, op,
              ": lo, span: expected ", B * C, " values each (one per image and channel), got ", lo.size(), " and ",
              span.size());
  TORCH_CHECK(sums || static_cast<int64_t>(sig_coef.size()) == 2 * B, op, ": sig_coef: expected ", 2 * B,
              " values (sigma and the coefficient per image), got ", sig_coef.size());
  // the host's values in one buffer, one copy to the image's device: sigma and coef (when given), lo, span
  const int64_t extra = sums ? 0 : 2 * B;
  at::Tensor host = at::empty({extra + 2 * B * C}, at::TensorOptions().dtype(at::kFloat));
  float* h = host.data_ptr<float>();
  for (int64_t i = 0; i < extra; ++i) h[i] = static_cast<float>(sig_coef[i]);
  for (int64_t i = 0; i < B * C; ++i)
    h[extra + i] = static_cast<float>(lo[i]), h[extra + B * C + i] = static_cast<float>(span[i]);
  const at::Tensor values = x.device().is_cpu() ? host : host.to(x.device(), /*non_blocking=*/true);
  const at::Tensor lo_t = values.narrow(0, extra, B * C).view({B, C});
  const at::Tensor span_t = values.narrow(0, extra + B * C, B * C).view({B, C});

  static const auto hist_op = handle<Hist>("torchcut::seg_hist");
  static const auto sigma_op = handle<Sigma>("torchcut::seg_sigma");
  static const auto energy_op = handle<Energy>("torchcut::seg_energy");
  auto [counts, total] = hist_op.call(x, seeds, lo_t, span_t, bins, unit, wide, shape, sums);
  const at::Tensor table = log_ratio_table(counts, bins, C, uniform);
  const at::Tensor sc = sums ? sigma_op.call(total, exps, count) : values.narrow(0, 0, 2 * B).view({2, B});
  auto [source, sink, caps] =
      energy_op.call(x, seeds, table, lo_t, span_t, sc.select(0, 1), bins, scale, hard, shape, offsets, weights);
  return {source, sink, caps, sc.select(0, 0)};
}

}  // namespace
}  // namespace torchcut_terms

TORCH_LIBRARY_IMPL(torchcut, CompositeExplicitAutograd, m) { m.impl("seg_terms", &torchcut_terms::seg_terms); }
