// Contrast-sensitive Potts energies on CUDA (torch.ops.torchcut.potts_energy): the CUDA twin of
// torchcut/csrc/cpu/energy_potts.cpp, which documents the energy, the outputs and the arithmetic.
//
// One thread per pixel in three kernels: the checks with the clamped probabilities and the exponents,
// the maxima, then the quantised graph (or terms). exp and log are torch's own CUDA kernels (at::exp_,
// at::log_) on buffers shaped as refine's, so every value is the tensor version's. Counts and extrema
// go through 64-bit atomics (doubles mapped to ordered integers), read back once: the checks and the
// scale need the host (one synchronisation per call); `info` comes back as a CPU tensor.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "../terminals.h"
#include "cuda_check.h"

namespace torchcut_potts_cuda {
namespace {

constexpr int kMaxChannels = 16;
constexpr int kMaxOffsets = 13;
constexpr double kQuantRange = 1073741824.0;  // 2**30
constexpr int kThreads = 256;
// slots of the device accumulator: counts, then ordered extrema
enum Acc { kBadProbs = 0, kBadImage, kProbMin, kSeedLo, kSeedHi, kURaw, kWAll, kWIn, kUShift, kSeeded, kAccLen };

struct Geo {
  int64_t B, C, Ch, D, H, W, n, K;
  int od[kMaxOffsets], oh[kMaxOffsets], ow[kMaxOffsets];
  float mult[kMaxOffsets];
  // strides [b, channel, d, h, w] of the image and the probabilities
  int64_t xs[5], ps[5];
};

__device__ __forceinline__ unsigned long long ordered(double v) {
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(v));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}
__host__ double unordered(unsigned long long o) {
  const unsigned long long b = (o >> 63) ? (o & 0x7fffffffffffffffULL) : ~o;
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
// signed 64-bit extrema through the unsigned atomics (offset binary)
__device__ __forceinline__ unsigned long long biased(long long v) {
  return static_cast<unsigned long long>(v) ^ 0x8000000000000000ULL;
}

__device__ __forceinline__ bool inside(const Geo& g, int k, int64_t d, int64_t h, int64_t w, int sign) {
  const int64_t a = d + sign * g.od[k], b = h + sign * g.oh[k], c = w + sign * g.ow[k];
  return a >= 0 && a < g.D && b >= 0 && b < g.H && c >= 0 && c < g.W;
}

template <class T>
__device__ __forceinline__ bool finite_value(T v) {
  if constexpr (std::is_floating_point<T>::value) return isfinite(v);
  else return true;
}

template <class TI, class TP>
__global__ void pass_a(Geo g, const TI* __restrict__ X, const TP* __restrict__ P, const float* __restrict__ denom,
                       const int64_t* __restrict__ S, double floor, double* __restrict__ lbuf,
                       float* __restrict__ ebuf, unsigned long long* acc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g.B * g.n) return;
  const int64_t b = i / g.n, pix = i - b * g.n;
  const int64_t w = pix % g.W, h = (pix / g.W) % g.H, d = pix / (g.W * g.H);
  const TP* pp = P + b * g.ps[0] + d * g.ps[2] + h * g.ps[3] + w * g.ps[4];
  unsigned long long bad_p = 0;
  double pmin = INFINITY;
  for (int64_t c = 0; c < g.C; ++c) {
    const TP v = pp[c * g.ps[1]];
    if (!finite_value(v)) ++bad_p;
    const double dv = static_cast<double>(v);
    pmin = fmin(pmin, dv);
    lbuf[(b * g.C + c) * g.n + pix] = dv < floor ? floor : dv;
  }
  if (bad_p) atomicAdd(acc + kBadProbs, bad_p);
  if (pmin < 0 || pmin != pmin) atomicMin(acc + kProbMin, ordered(pmin));
  if (S != nullptr) {
    const long long s = S[b * g.n + pix];
    if (s < -1 || s >= g.C) {
      atomicMin(acc + kSeedLo, biased(s));
      atomicMax(acc + kSeedHi, biased(s));
    }
  }
  const TI* xp = X + b * g.xs[0] + d * g.xs[2] + h * g.xs[3] + w * g.xs[4];
  float xc[kMaxChannels];
  unsigned long long bad_x = 0;
  for (int64_t c = 0; c < g.Ch; ++c) {
    if (!finite_value(xp[c * g.xs[1]])) ++bad_x;
    xc[c] = static_cast<float>(xp[c * g.xs[1]]);
  }
  if (bad_x) atomicAdd(acc + kBadImage, bad_x);
  for (int k = 0; k < g.K; ++k) {
    float d2;
    if (inside(g, k, d, h, w, 1)) {
      const TI* xq = xp + g.od[k] * g.xs[2] + g.oh[k] * g.xs[3] + g.ow[k] * g.xs[4];
      float t = __fsub_rn(xc[0], static_cast<float>(xq[0]));
      d2 = __fmul_rn(t, t);
      for (int64_t c = 1; c < g.Ch; ++c) {
        t = __fsub_rn(xc[c], static_cast<float>(xq[c * g.xs[1]]));
        d2 = __fadd_rn(d2, __fmul_rn(t, t));
      }
    } else {
      d2 = __fmul_rn(xc[0], xc[0]);
      for (int64_t c = 1; c < g.Ch; ++c) d2 = __fadd_rn(d2, __fmul_rn(xc[c], xc[c]));
    }
    ebuf[(k * g.B + b) * g.n + pix] = __fdiv_rn(-d2, denom[b * g.K + k]);
  }
}

// the warp's maximum of v in lane 0 (every lane of the warp takes part)
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

// Maxima (ordered doubles; 0 is below every value): per warp, then one atomic per warp and slot.
__global__ void pass_b(Geo g, const int64_t* __restrict__ S, const double* __restrict__ lbuf,
                       const float* __restrict__ ebuf, unsigned long long* acc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  unsigned long long u_raw = 0, u_shift = 0, seeded = 0, w_all = 0, w_in = 0;
  if (i < g.B * g.n) {
    const int64_t b = i / g.n, pix = i - b * g.n;
    const int64_t w = pix % g.W, h = (pix / g.W) % g.H, d = pix / (g.W * g.H);
    double mn = INFINITY, top = -INFINITY;
    for (int64_t c = 0; c < g.C; ++c) {
      const double u = -lbuf[(b * g.C + c) * g.n + pix];
      top = fmax(top, u);
      mn = fmin(mn, u);
    }
    u_raw = ordered(top);
    if (S != nullptr && S[b * g.n + pix] >= 0) seeded = 1;
    else u_shift = ordered(top - mn);
    double wa = -INFINITY, wi = 0.0;
    for (int k = 0; k < g.K; ++k) {
      const double v = static_cast<double>(__fmul_rn(ebuf[(k * g.B + b) * g.n + pix], g.mult[k]));
      wa = fmax(wa, v);
      if (inside(g, k, d, h, w, 1)) wi = fmax(wi, v);
    }
    w_all = ordered(wa), w_in = ordered(wi);
  }
  u_raw = warp_max(u_raw), u_shift = warp_max(u_shift), seeded = warp_max(seeded);
  w_all = warp_max(w_all), w_in = warp_max(w_in);
  if ((threadIdx.x & 31) == 0) {
    if (u_raw) atomicMax(acc + kURaw, u_raw);
    if (u_shift) atomicMax(acc + kUShift, u_shift);
    if (seeded) atomicMax(acc + kSeeded, seeded);
    if (w_all) atomicMax(acc + kWAll, w_all);
    if (w_in) atomicMax(acc + kWIn, w_in);
  }
}

__device__ __forceinline__ int32_t quant(double v, double scale) { return static_cast<int32_t>(rint(v * scale)); }

__device__ __forceinline__ int32_t wq(const Geo& g, const float* E, int k, int64_t b, int64_t pix, double scale) {
  return quant(static_cast<double>(__fmul_rn(E[(k * g.B + b) * g.n + pix], g.mult[k])), scale);
}

__device__ __forceinline__ double shifted(const Geo& g, const double* L, const int64_t* S, int64_t b, int64_t pix,
                                          int64_t c, double mn, double hard) {
  if (S != nullptr) {
    const int64_t s = S[b * g.n + pix];
    if (s >= 0) return c == s ? 0.0 : hard;
  }
  return -L[(b * g.C + c) * g.n + pix] - mn;
}

__global__ void pass_c(Geo g, const int64_t* __restrict__ S, const double* __restrict__ L, const float* __restrict__ E,
                       double scale, double hard, bool graph, int32_t* __restrict__ out_a,
                       int64_t* __restrict__ out_source, int32_t* __restrict__ out_c, double* __restrict__ offset) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= g.B * g.n) return;
  const int64_t b = i / g.n, pix = i - b * g.n;
  const int64_t w = pix % g.W, h = (pix / g.W) % g.H, d = pix / (g.W * g.H);
  double mn = INFINITY;
  for (int64_t c = 0; c < g.C; ++c) mn = fmin(mn, -L[(b * g.C + c) * g.n + pix]);
  if (graph) {
    int32_t src = quant(shifted(g, L, S, b, pix, 1, mn, hard), scale);
    int32_t snk = quant(shifted(g, L, S, b, pix, 0, mn, hard), scale);
    int32_t* cp = out_a + b * 2 * g.K * g.n + pix;
    for (int k = 0; k < g.K; ++k) {  // both arcs of each pair carry its cost (energy_potts.cpp)
      cp[k * g.n] = inside(g, k, d, h, w, 1) ? wq(g, E, k, b, pix, scale) : 0;
      int32_t back = 0;
      if (inside(g, k, d, h, w, -1))
        back = wq(g, E, k, b, pix - (static_cast<int64_t>(g.od[k]) * g.H + g.oh[k]) * g.W - g.ow[k], scale);
      cp[(g.K + k) * g.n] = back;
    }
    int32_t s, k;
    torchcut::net_pair(src, snk, &s, &k);
    out_source[b * g.n + pix] = s;
    out_c[b * g.n + pix] = k;
    return;
  }
  const bool fixed = S != nullptr && S[b * g.n + pix] >= 0;
  atomicAdd(offset + b, fixed ? 0.0 : mn);  // the shifts' sum (reported energies only)
  for (int64_t c = 0; c < g.C; ++c) out_a[(b * g.C + c) * g.n + pix] = quant(shifted(g, L, S, b, pix, c, mn, hard), scale);
  for (int k = 0; k < g.K; ++k)
    out_c[(b * g.K + k) * g.n + pix] = inside(g, k, d, h, w, 1) ? wq(g, E, k, b, pix, scale) : 0;
}

void fill_strides(const at::Tensor& t, int64_t* s) {
  if (t.dim() == 4) {
    s[0] = t.stride(0), s[1] = t.stride(1), s[2] = 0, s[3] = t.stride(2), s[4] = t.stride(3);
  } else {
    for (int a = 0; a < 5; ++a) s[a] = t.stride(a);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> potts_energy_cuda(
    const at::Tensor& image, const at::Tensor& probs, const at::Tensor& denom_, at::ArrayRef<double> mult,
    at::IntArrayRef offsets, double floor, const std::optional<at::Tensor>& seeds_, bool graph) {
  const char* op = "torchcut.potts_energy";
  const int64_t nd = probs.dim() - 2;
  TORCH_CHECK(nd == 2 || nd == 3, op, ": probs: expected [B, C, H, W] or [B, C, D, H, W], got ", probs.sizes());
  TORCH_CHECK(image.dim() == nd + 2, op, ": image: expected ", nd + 2, " dims, got ", image.sizes());
  TORCH_CHECK(image.is_cuda() && denom_.is_cuda() && image.device() == probs.device() &&
                  denom_.device() == probs.device(),
              op, ": expected image, probs and denom on one CUDA device");
  c10::cuda::CUDAGuard guard(probs.device());
  Geo g{};
  g.B = probs.size(0), g.C = probs.size(1), g.Ch = image.size(1);
  g.D = nd == 3 ? probs.size(2) : 1, g.H = probs.size(nd), g.W = probs.size(nd + 1);
  g.n = g.D * g.H * g.W;
  TORCH_CHECK(image.size(0) == g.B, op, ": image: expected ", g.B, " items, got ", image.size(0));
  for (int64_t a = 0; a < nd; ++a)
    TORCH_CHECK(image.size(2 + a) == probs.size(2 + a), op, ": image and probs: spatial shapes differ (",
                image.sizes(), " vs ", probs.sizes(), ")");
  TORCH_CHECK(g.C >= 2, op, ": probs: expected at least 2 classes, got ", g.C);
  TORCH_CHECK(!graph || g.C == 2, op, ": graph: expected 2 classes, got ", g.C);
  TORCH_CHECK(g.Ch >= 1 && g.Ch <= kMaxChannels, op, ": image: expected 1 to ", kMaxChannels, " channels, got ", g.Ch);
  TORCH_CHECK(offsets.size() % nd == 0 && !offsets.empty(), op, ": offsets: expected K * ", nd, " values, got ",
              offsets.size());
  g.K = static_cast<int64_t>(offsets.size()) / nd;
  TORCH_CHECK(g.K <= kMaxOffsets, op, ": offsets: expected at most ", kMaxOffsets, ", got ", g.K);
  TORCH_CHECK(static_cast<int64_t>(mult.size()) == g.K, op, ": mult: expected ", g.K, " values");
  for (int64_t k = 0; k < g.K; ++k) {
    g.od[k] = static_cast<int>(nd == 3 ? offsets[k * nd] : 0);
    g.oh[k] = static_cast<int>(offsets[k * nd + nd - 2]);
    g.ow[k] = static_cast<int>(offsets[k * nd + nd - 1]);
    g.mult[k] = static_cast<float>(mult[k]);
  }
  TORCH_CHECK(denom_.scalar_type() == at::kFloat && denom_.numel() == g.B * g.K, op, ": denom: expected float32 [B, K]");
  const at::Tensor denom = denom_.contiguous();
  at::Tensor seeds;
  if (seeds_.has_value()) {
    seeds = seeds_->contiguous();
    TORCH_CHECK(seeds.scalar_type() == at::kLong && seeds.numel() == g.B * g.n && seeds.device() == probs.device(),
                op, ": seeds: expected int64 [B, *S] on the device of probs");
  }
  const int64_t* S = seeds.defined() ? seeds.data_ptr<int64_t>() : nullptr;
  fill_strides(image, g.xs);
  fill_strides(probs, g.ps);
  std::vector<int64_t> sp(probs.sizes().begin() + 2, probs.sizes().end());
  auto dims = [&](std::vector<int64_t> lead) {
    lead.insert(lead.end(), sp.begin(), sp.end());
    return lead;
  };
  at::Tensor lbuf = at::empty(dims({g.B, g.C}), probs.options().dtype(at::kDouble));
  at::Tensor ebuf = at::empty(dims({g.K, g.B}), probs.options().dtype(at::kFloat));
  std::vector<unsigned long long> init(kAccLen, 0ULL);
  init[kProbMin] = ~0ULL, init[kSeedLo] = ~0ULL;  // minima start at the top
  at::Tensor acc_host = at::from_blob(init.data(), {kAccLen}, at::TensorOptions().dtype(at::kLong)).clone();
  at::Tensor acc = acc_host.to(probs.device());
  auto* A = reinterpret_cast<unsigned long long*>(acc.data_ptr<int64_t>());
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t N = g.B * g.n;
  const unsigned blocks = static_cast<unsigned>((N + kThreads - 1) / kThreads);
  auto launch_a = [&](auto ti, auto tp) {
    using TI = decltype(ti);
    using TP = decltype(tp);
    pass_a<TI, TP><<<blocks, kThreads, 0, stream>>>(g, image.data_ptr<TI>(), probs.data_ptr<TP>(),
                                                     denom.data_ptr<float>(), S, floor, lbuf.data_ptr<double>(),
                                                     ebuf.data_ptr<float>(), A);
  };
  auto with_probs = [&](auto ti) {
    if (probs.scalar_type() == at::kFloat) launch_a(ti, float{});
    else if (probs.scalar_type() == at::kDouble) launch_a(ti, double{});
    else TORCH_CHECK(false, op, ": probs: expected float32 or float64, got ", probs.scalar_type());
  };
  if (image.scalar_type() == at::kFloat) with_probs(float{});
  else if (image.scalar_type() == at::kDouble) with_probs(double{});
  else if (image.scalar_type() == at::kByte) with_probs(uint8_t{});
  else TORCH_CHECK(false, op, ": image: expected float32, float64 or uint8, got ", image.scalar_type());
  TORCHCUT_CUDA_CHECK("torchcut.potts_energy", cudaGetLastError());
  at::log_(lbuf);
  for (int64_t k = 0; k < g.K; ++k) {
    at::Tensor slice = ebuf.select(0, k);
    at::exp_(slice);
  }
  // the maxima are computed even when a check failed (then unused): one read-back for both
  pass_b<<<blocks, kThreads, 0, stream>>>(g, S, lbuf.data_ptr<double>(), ebuf.data_ptr<float>(), A);
  TORCHCUT_CUDA_CHECK("torchcut.potts_energy", cudaGetLastError());
  const at::Tensor host = acc.cpu();  // the one synchronisation
  const auto* R = reinterpret_cast<const unsigned long long*>(host.data_ptr<int64_t>());
  at::Tensor info = at::zeros({8}, at::TensorOptions().dtype(at::kDouble));
  double* I = info.data_ptr<double>();
  const bool neg = R[kProbMin] != ~0ULL && unordered(R[kProbMin]) < 0;
  const bool seed_bad = S && R[kSeedLo] != ~0ULL;
  I[0] = static_cast<double>(R[kBadProbs]), I[2] = static_cast<double>(R[kBadImage]);
  I[3] = I[4] = -1.0;
  if (R[kBadProbs] || neg || R[kBadImage] || seed_bad) {  // the messages' extrema, as the CPU op reports them
    I[1] = probs.min().item<double>();
    if (S) I[3] = seeds.min().item<double>(), I[4] = seeds.max().item<double>();
    I[6] = 1.0;
    const at::Tensor none = at::empty({0}, probs.options().dtype(at::kInt));
    return {none, none, none, info};
  }
  const double u_raw = unordered(R[kURaw]), w_all = unordered(R[kWAll]), w_in = unordered(R[kWIn]);
  const double u_shift = R[kUShift] ? unordered(R[kUShift]) : 0.0;
  const double hard = S ? 1.0 + u_raw + static_cast<double>(2 * g.K) * w_all : 0.0;
  const double umax = R[kSeeded] ? std::max(u_shift, hard) : u_shift;
  const double top = umax + static_cast<double>(4 * g.K) * 1.0 * std::max(w_in, 0.0);
  const double scale = top > 0 ? kQuantRange / top : 1.0;
  I[5] = scale;
  if (graph) {
    at::Tensor caps = at::empty(dims({g.B, 2 * g.K}), probs.options().dtype(at::kInt));
    at::Tensor source = at::empty(dims({g.B}), probs.options().dtype(at::kLong));
    at::Tensor sink = at::empty(dims({g.B}), probs.options().dtype(at::kInt));
    pass_c<<<blocks, kThreads, 0, stream>>>(g, S, lbuf.data_ptr<double>(), ebuf.data_ptr<float>(), scale, hard, true,
                                            caps.data_ptr<int32_t>(), source.data_ptr<int64_t>(),
                                            sink.data_ptr<int32_t>(), nullptr);
    TORCHCUT_CUDA_CHECK("torchcut.potts_energy", cudaGetLastError());
    return {caps, source, sink, info};
  }
  at::Tensor U = at::empty(dims({g.B, g.C}), probs.options().dtype(at::kInt));
  at::Tensor Wt = at::empty(dims({g.B, g.K}), probs.options().dtype(at::kInt));
  at::Tensor offset = at::zeros({g.B}, probs.options().dtype(at::kDouble));
  pass_c<<<blocks, kThreads, 0, stream>>>(g, S, lbuf.data_ptr<double>(), ebuf.data_ptr<float>(), scale, hard, false,
                                          U.data_ptr<int32_t>(), nullptr, Wt.data_ptr<int32_t>(),
                                          offset.data_ptr<double>());
  TORCHCUT_CUDA_CHECK("torchcut.potts_energy", cudaGetLastError());
  return {U, Wt, offset, info};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CUDA, m) { m.impl("potts_energy", &potts_energy_cuda); }

}  // namespace torchcut_potts_cuda
