// CUDA implementations of the segmentation energy ops (schemas in ../torchcut.cpp, CPU versions and the
// layouts in ../cpu/energy.cpp): argument checks, outputs from torch's caching allocator, the current stream.
// seg_check is one pass over the pixels (three small launches: set up, the pass, the colour range's bits),
// packed into one tensor read back once by the caller; seg_hist and seg_energy are one kernel per image each
// (energy.cu).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <exception>
#include <vector>

#include "../seg_energy.h"
#include "energy.h"

namespace torchcut_seg {

namespace {

SegGrid grid_of(const char* op, const at::Tensor& x, const at::Tensor& seeds, c10::IntArrayRef shape) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 3 && x.is_contiguous(), op,
              ": x: expected a contiguous float32 CUDA tensor [B, C, N], got ", x.scalar_type(), " ", x.sizes(),
              " on ", x.device());
  SegGrid g{x.size(0), x.size(1), x.size(2), 1, 1, 1};
  TORCH_CHECK(g.C >= 1 && g.C <= kMaxChannels, op, ": x: expected 1 to ", kMaxChannels, " channels, got ", g.C);
  TORCH_CHECK(seeds.device() == x.device() && seeds.is_contiguous() && seeds.dim() == 2 && seeds.size(0) == g.B &&
                  seeds.size(1) == g.N,
              op, ": seeds: expected a contiguous tensor [", g.B, ", ", g.N, "] on ", x.device(), ", got ",
              seeds.sizes(), " on ", seeds.device());
  if (!shape.empty()) {
    TORCH_CHECK(shape.size() == 2 || shape.size() == 3, op, ": shape: expected 2 or 3 dims, got ", shape);
    g.D = shape.size() == 3 ? shape[0] : 1;
    g.H = shape[shape.size() - 2];
    g.W = shape[shape.size() - 1];
    TORCH_CHECK(g.D * g.H * g.W == g.N, op, ": shape: expected ", g.N, " nodes, got ", shape);
  }
  return g;
}

void check_small(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x, int64_t numel) {
  TORCH_CHECK(t.device() == x.device() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == numel,
              op, ": ", name, ": expected a contiguous float32 tensor of ", numel, " values on ", x.device(), ", got ",
              t.scalar_type(), " ", t.sizes(), " on ", t.device());
}

std::tuple<at::Tensor, at::Tensor> seg_check(at::Tensor x, at::Tensor seeds, bool finite) {
  const char* op = "torchcut.seg_check";
  const SegGrid g = grid_of(op, x, seeds, {});
  TORCH_CHECK(at::isIntegralType(seeds.scalar_type(), false), op, ": seeds: expected an integer tensor, got ",
              seeds.scalar_type());
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor info = at::empty({3 + 2 * g.B + 2 * g.B * g.C}, x.options().dtype(at::kLong));
  const bool wide = seeds.scalar_type() != at::kByte;
  at::Tensor s8 = wide ? at::empty({g.B, g.N}, seeds.options().dtype(at::kByte)) : at::empty({0}, seeds.options().dtype(at::kByte));
  AT_DISPATCH_INTEGRAL_TYPES(seeds.scalar_type(), "seg_check", [&] {
    try {
      launch_seg_check<scalar_t>(at::cuda::getCurrentCUDAStream(), g, x.data_ptr<float>(), seeds.data_ptr<scalar_t>(),
                                 finite, wide ? s8.data_ptr<uint8_t>() : nullptr,
                                 reinterpret_cast<long long*>(info.data_ptr<int64_t>()));
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
  });
  return {info, s8};
}

std::tuple<at::Tensor, at::Tensor> seg_hist(at::Tensor x, at::Tensor seeds, at::Tensor lo, at::Tensor span,
                                            int64_t bins, c10::ArrayRef<double> unit, bool wide, c10::IntArrayRef shape,
                                            bool sigma) {
  const char* op = "torchcut.seg_hist";
  const SegGrid g = grid_of(op, x, seeds, shape);
  TORCH_CHECK(seeds.scalar_type() == at::kByte, op, ": seeds: expected uint8 labels, got ", seeds.scalar_type());
  check_small(op, "lo", lo, x, g.B * g.C);
  check_small(op, "span", span, x, g.B * g.C);
  TORCH_CHECK((int64_t)unit.size() == g.B, op, ": unit: expected ", g.B, " values, got ", unit.size());
  int64_t nb = 1;
  for (int64_t c = 0; c < g.C; ++c) nb *= bins;
  TORCH_CHECK(bins >= 1 && nb <= (int64_t{1} << 24), op, ": bins: expected at most 2**24 histogram bins, got ", nb);
  c10::cuda::CUDAGuard guard(x.device());
  // zeroed by memsets (two driver calls) rather than at::zeros (two fill kernels through TensorIterator)
  at::Tensor counts = at::empty({g.B, 2, nb}, x.options().dtype(at::kInt));
  at::Tensor sums = at::empty({2, g.B}, x.options().dtype(at::kLong));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  C10_CUDA_CHECK(cudaMemsetAsync(counts.data_ptr(), 0, counts.nbytes(), stream));
  C10_CUDA_CHECK(cudaMemsetAsync(sums.data_ptr(), 0, sums.nbytes(), stream));
  try {
    launch_seg_hist(stream, g, x.data_ptr<float>(), seeds.data_ptr<uint8_t>(),
                    lo.data_ptr<float>(), span.data_ptr<float>(), bins, unit.data(), wide, sigma,
                    counts.data_ptr<int32_t>(), reinterpret_cast<unsigned long long*>(sums.data_ptr<int64_t>()));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return {counts, sums};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> seg_energy(at::Tensor x, at::Tensor seeds, at::Tensor table,
                                                          at::Tensor lo, at::Tensor span, at::Tensor coef,
                                                          int64_t bins, double scale, int64_t hard,
                                                          c10::IntArrayRef shape, c10::IntArrayRef offsets,
                                                          c10::ArrayRef<double> weights) {
  const char* op = "torchcut.seg_energy";
  const SegGrid g = grid_of(op, x, seeds, shape);
  TORCH_CHECK(seeds.scalar_type() == at::kByte, op, ": seeds: expected uint8 labels, got ", seeds.scalar_type());
  const int64_t nd = (int64_t)shape.size();
  TORCH_CHECK(!offsets.empty() && offsets.size() % nd == 0, op, ": offsets: expected K*", nd, " ints, got ",
              offsets.size());
  const int64_t K = (int64_t)offsets.size() / nd;
  TORCH_CHECK(K <= kMaxOffsets, op, ": offsets: expected at most ", kMaxOffsets, " offsets, got ", K);
  TORCH_CHECK((int64_t)weights.size() == K, op, ": weights: expected ", K, " values, got ", weights.size());
  int64_t nb = 1;
  for (int64_t c = 0; c < g.C; ++c) nb *= bins;
  check_small(op, "table", table, x, g.B * nb);
  check_small(op, "lo", lo, x, g.B * g.C);
  check_small(op, "span", span, x, g.B * g.C);
  check_small(op, "coef", coef, x, g.B);
  std::vector<int64_t> full = {g.B};
  for (auto s : shape) full.push_back(s);
  std::vector<int64_t> cshape = {g.B, 2 * K};
  for (auto s : shape) cshape.push_back(s);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor source = at::empty(full, x.options().dtype(at::kLong));
  at::Tensor sink = at::empty(full, x.options().dtype(at::kInt));
  at::Tensor caps = at::empty(cshape, x.options().dtype(at::kInt));
  std::vector<int> offs(3 * K, 0);
  std::vector<float> w(K);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < nd; ++j) offs[3 * k + 3 - nd + j] = (int)offsets[k * nd + j];
    w[k] = (float)weights[k];
  }
  try {
    launch_seg_energy(at::cuda::getCurrentCUDAStream(), g, x.data_ptr<float>(), seeds.data_ptr<uint8_t>(),
                      table.data_ptr<float>(), nb, lo.data_ptr<float>(), span.data_ptr<float>(), coef.data_ptr<float>(),
                      bins, (float)scale, (float)hard, (int)K, offs.data(), w.data(), source.data_ptr<int64_t>(),
                      sink.data_ptr<int32_t>(), caps.data_ptr<int32_t>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return {source, sink, caps};
}


// The log-ratio table of histograms whose seed counts keep the blur exact (`bound`: at least every image's
// seed count per class, below 2^(24 - 2 * channels)); larger counts take the dense tensor operations
// (energy.py's _table, seg_terms.cpp), whose float32 sums may round.
at::Tensor seg_table(at::Tensor counts, int64_t bins, int64_t channels, double uniform, int64_t bound) {
  const char* op = "torchcut.seg_table";
  TORCH_CHECK(counts.is_cuda() && counts.scalar_type() == at::kInt && counts.dim() == 3 && counts.size(1) == 2 &&
                  counts.is_contiguous(),
              op, ": counts: expected a contiguous int32 CUDA tensor [B, 2, nb], got ", counts.scalar_type(), " ",
              counts.sizes(), " on ", counts.device());
  TORCH_CHECK(channels >= 1 && bins >= 1, op, ": expected bins >= 1 and channels >= 1, got ", bins, " and ", channels);
  int64_t nb = 1;
  for (int64_t c = 0; c < channels && nb <= counts.size(2); ++c) nb *= bins;
  TORCH_CHECK(nb == counts.size(2), op, ": counts: expected bins^channels = ", bins, "^", channels,
              " histogram bins, got ", counts.size(2));
  TORCH_CHECK(channels <= kMaxTableChannels, op, ": channels: expected at most ", kMaxTableChannels, ", got ",
              channels);
  TORCH_CHECK(bound >= 0 && bound < (int64_t{1} << (24 - 2 * channels)), op,
              ": bound: expected a bound on the seed counts in [0, 2^", 24 - 2 * channels, "), got ", bound);
  const int64_t B = counts.size(0);
  TORCH_CHECK(B <= 65535, op, ": counts: expected at most 65535 images, got ", B);
  c10::cuda::CUDAGuard guard(counts.device());
  at::Tensor table = at::empty({B, nb}, counts.options().dtype(at::kFloat));
  at::Tensor totals = at::empty({2 * B}, counts.options().dtype(at::kLong));
  try {
    launch_seg_table(at::cuda::getCurrentCUDAStream(), B, nb, bins, channels, (float)(1 - uniform),
                     (float)(uniform / (double)nb), counts.data_ptr<int32_t>(),
                     reinterpret_cast<long long*>(totals.data_ptr<int64_t>()), table.data_ptr<float>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return table;
}

at::Tensor seg_sigma(at::Tensor sums, c10::IntArrayRef exps, int64_t count) {
  const char* op = "torchcut.seg_sigma";
  TORCH_CHECK(sums.is_cuda() && sums.scalar_type() == at::kLong && sums.dim() == 2 && sums.size(0) == 2 &&
                  sums.is_contiguous(),
              op, ": sums: expected a contiguous int64 CUDA tensor [2, B], got ", sums.scalar_type(), " ",
              sums.sizes(), " on ", sums.device());
  const int64_t B = sums.size(1);
  TORCH_CHECK((int64_t)exps.size() == B, op, ": exps: expected ", B, " exponents, got ", exps.size());
  TORCH_CHECK(count >= 0, op, ": count: expected a non-negative number of pairs, got ", count);
  for (auto e : exps) TORCH_CHECK(e >= -900 && e <= 900, op, ": exps: expected exponents in [-900, 900], got ", e);
  c10::cuda::CUDAGuard guard(sums.device());
  at::Tensor out = at::empty({2, B}, sums.options().dtype(at::kFloat));
  try {
    launch_seg_sigma(at::cuda::getCurrentCUDAStream(), B, reinterpret_cast<const long long*>(sums.data_ptr<int64_t>()),
                     exps.data(), count, out.data_ptr<float>());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return out;
}

}  // namespace

}  // namespace torchcut_seg

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) {
  m.impl("seg_check", &torchcut_seg::seg_check);
  m.impl("seg_hist", &torchcut_seg::seg_hist);
  m.impl("seg_energy", &torchcut_seg::seg_energy);
  m.impl("seg_sigma", &torchcut_seg::seg_sigma);
  m.impl("seg_table", &torchcut_seg::seg_table);
}
