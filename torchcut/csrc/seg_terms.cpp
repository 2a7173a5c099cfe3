// torch.ops.torchcut.seg_terms: the seeded segmentation energy after its checks, in one call (what
// torchcut/energy.py's _native_terms composes): the seed histograms (seg_hist), their log-ratio table, sigma
// and the n-links' coefficient (seg_sigma, or given), and the capacities (seg_energy).
//
// Each step is the op or the tensor operations the Python composition runs, called here through the
// dispatcher, so the values are the same bit for bit on either device; what the one call saves is the
// host's time per step (argument parsing, a Python frame, the small copies): 8-19% of a CPU image's energy.
// Registered for every device (CompositeExplicitAutograd: the steps dispatch to the CPU or CUDA kernels of
// the tensors' device). energy.py calls it for CPU images, and for CUDA images whose seed counts keep the
// histograms' blur exact (`bound`, below), where the table is one kernel (seg_table) instead of the dozen
// small tensor operations that the op-by-op path replays as a CUDA graph (docs/performance.md).
//
// Arguments: x [B, C, N] float32 and seeds [B, N] uint8 as seg_hist takes them; lo and span: the colour
// range's float32 values (B * C each, as doubles); bins, unit, wide, shape, sums: as seg_hist takes them
// (sums: work out sigma from the sums, seg_sigma with exps and count); sig_coef: otherwise sigma and the
// coefficient per image (2 * B values, float32 as doubles); uniform: the mixture weight of the uniform
// distribution; scale, hard, offsets, weights: as seg_energy takes them; bound: at least the largest seed
// count of an image and class (-1: the pixels of an image). Returns the source, sink and n-link capacities
// and sigma [B] (float32).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

namespace torchcut_terms {
namespace {

// the kernels' own signatures (tensors by value), as the dispatcher checks them
using Hist = std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor, at::Tensor, at::Tensor, int64_t,
                                                c10::ArrayRef<double>, bool, c10::IntArrayRef, bool);
using Sigma = at::Tensor(at::Tensor, c10::IntArrayRef, int64_t);
using Table = at::Tensor(at::Tensor, int64_t, int64_t, double, int64_t);
constexpr int64_t kTableChannels = 4;  // seg_table's kernel (cuda/energy.h, kMaxTableChannels)
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
//
// A CPU table whose seeds fill few bins is worked out on the blurred histograms' support alone: the bins
// within one step of a seeded bin along every colour axis (3^C around each). Elsewhere both blurred counts
// are 0, both probabilities the uniform term, and the log ratio 0, as the dense operations give it. The
// values are the same bit for bit while each image's seed counts stay below 2^(24 - 2C): every blurred count
// is then a multiple of 4^-C below 2^(24 - 2C), so the blur's sums and the normalising total are exact in
// float32 in any order (here, the counts scattered to their neighbours); the division, the mixing's product
// and its sum round once each, as the tensor operations do; and the log is torch's, which gives a value the
// same result wherever it lies in a tensor. On a small image this is most of its energy: the dense 32^3 colour
// table takes ~0.2 ms.
at::Tensor sparse_log_ratio_table(const at::Tensor& counts, int64_t bins, int64_t C, double uniform) {
  if (!counts.device().is_cpu() || counts.scalar_type() != at::kInt || !counts.is_contiguous() || C > 8 ||
      bins < 2)
    return {};
  const int64_t B = counts.size(0), nb = counts.size(2);
  int64_t around = 1;  // neighbours of a bin, itself included
  for (int64_t c = 0; c < C; ++c) around *= 3;
  const int32_t* cnt = counts.data_ptr<int32_t>();
  const int64_t limit = int64_t{1} << (24 - 2 * C);
  std::vector<std::vector<int64_t>> occupied(2 * B);  // the seeded bins of each histogram
  for (int64_t r = 0; r < 2 * B; ++r) {
    const int32_t* row = cnt + r * nb;
    std::vector<int64_t>& list = occupied[r];
    int64_t total = 0, i = 0;
    for (; i + 4 <= nb; i += 4) {  // mostly empty: four bins a test
      uint64_t pair[2];
      std::memcpy(pair, row + i, sizeof pair);
      if ((pair[0] | pair[1]) == 0) continue;
      for (int64_t j = i; j < i + 4; ++j)
        if (row[j] != 0) list.push_back(j), total += row[j];
      if (static_cast<int64_t>(list.size()) * around > nb) return {};  // not sparse enough to gain
    }
    for (; i < nb; ++i)
      if (row[i] != 0) list.push_back(i), total += row[i];
    if (total >= limit || static_cast<int64_t>(list.size()) * around > nb) return {};  // or not exact
  }
  at::Tensor table = at::zeros({B, nb}, counts.options().dtype(at::kFloat));
  float* out = table.data_ptr<float>();
  std::vector<float> blurred[2] = {std::vector<float>(nb), std::vector<float>(nb)};
  std::vector<uint8_t> seen(nb);
  std::vector<int64_t> support;
  std::vector<int64_t> digit(C), step(C);
  for (int64_t a = 0, s = 1; a < C; ++a, s *= bins) step[a] = s;  // step[a]: the stride of colour axis C-1-a
  std::vector<int64_t> shift(around);  // each neighbour's offset and weight ([1, 2, 1] / 4 per axis)
  std::vector<float> weight(around);
  for (int64_t o = 0; o < around; ++o) {
    shift[o] = 0, weight[o] = 1;
    for (int64_t a = 0, rest = o; a < C; ++a, rest /= 3)
      shift[o] += (rest % 3 - 1) * step[a], weight[o] *= rest % 3 == 1 ? 0.5f : 0.25f;
  }
  const float keep = static_cast<float>(1 - uniform), floor = static_cast<float>(uniform / static_cast<double>(nb));
  for (int64_t b = 0; b < B; ++b) {
    support.clear();
    float total[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int32_t* row = cnt + (2 * b + k) * nb;
      float* h = blurred[k].data();
      for (const int64_t i : occupied[2 * b + k]) {
        const float v = static_cast<float>(row[i]);
        bool interior = true;
        for (int64_t a = 0, rest = i; a < C; ++a, rest /= bins)
          digit[a] = rest % bins, interior = interior && digit[a] > 0 && digit[a] < bins - 1;
        for (int64_t o = 0; o < around; ++o) {  // o's base-3 digits: -1, 0, +1 along each axis
          if (!interior) {
            bool inside = true;
            for (int64_t a = 0, rest = o; a < C && inside; ++a, rest /= 3)
              inside = digit[a] + rest % 3 - 1 >= 0 && digit[a] + rest % 3 - 1 < bins;
            if (!inside) continue;
          }
          const int64_t at = i + shift[o];
          const float w = v * weight[o];  // exact: a count times a power of 2
          if (!seen[at]) seen[at] = 1, support.push_back(at), blurred[0][at] = 0, blurred[1][at] = 0;
          h[at] += w;
          total[k] += w;
        }
      }
    }
    const int64_t M = static_cast<int64_t>(support.size());
    at::Tensor p = at::empty({2, M}, table.options());
    float* pv = p.data_ptr<float>();
    for (int k = 0; k < 2; ++k)
      for (int64_t j = 0; j < M; ++j) {
        const float q = blurred[k][support[j]] / total[k];
        const float mixed = q * keep;
        pv[k * M + j] = mixed + floor;
      }
    p.log_();
    for (int64_t j = 0; j < M; ++j) out[b * nb + support[j]] = pv[j] - pv[M + j], seen[support[j]] = 0;
  }
  return table;
}

at::Tensor log_ratio_table(const at::Tensor& counts, int64_t bins, int64_t C, double uniform) {
  const int64_t B = counts.size(0), nb = counts.size(2);
  if (at::Tensor sparse = sparse_log_ratio_table(counts, bins, C, uniform); sparse.defined()) return sparse;
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
    c10::IntArrayRef offsets, c10::ArrayRef<double> weights, int64_t bound) {
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
  // on CUDA, one kernel where the seed counts keep the blur exact (seg_table; `bound` < 0: every pixel a seed)
  const int64_t most = bound < 0 ? x.size(2) : bound;
  static const auto table_op = handle<Table>("torchcut::seg_table");
  const at::Tensor table = x.is_cuda() && C <= kTableChannels && B <= 65535 && most < (int64_t{1} << (24 - 2 * C))
                               ? table_op.call(counts, bins, C, uniform, most)
                               : log_ratio_table(counts, bins, C, uniform);
  const at::Tensor sc = sums ? sigma_op.call(total, exps, count) : values.narrow(0, 0, 2 * B).view({2, B});
  auto [source, sink, caps] =
      energy_op.call(x, seeds, table, lo_t, span_t, sc.select(0, 1), bins, scale, hard, shape, offsets, weights);
  return {source, sink, caps, sc.select(0, 0)};
}

}  // namespace
}  // namespace torchcut_terms

TORCH_LIBRARY_IMPL(torchcut, CompositeExplicitAutograd, m) { m.impl("seg_terms", &torchcut_terms::seg_terms); }
