// The seeded segmentation energy of torchcut/energy.py on the CPU (torch.ops.torchcut.seg_check,
// seg_hist, seg_energy), each one multi-threaded pass over the pixels instead of tens of tensor ops.
//
// seg_check:  the checks (finite values, labels in {0, 1, 2}), the colour range of each image and
//             channel and the number of object and background seeds of each image, packed into one
//             int64 tensor: the caller reads it back once.
// seg_hist:   the colour histograms of the object and background seeds and, for the estimate of sigma,
//             the exact integer sums of the squared differences of axis-aligned neighbours.
// seg_energy: the terminal capacities (data term and seeds) and the n-link capacities, written in the
//             solver layout.
//
// Layout: x [B, C, N] float32 (C <= kMaxChannels), seeds [B, N] uint8 (the labels), lo and span [B, C]
// float32, table [B, bins**C] float32; `shape` the spatial dims (N their product), `offsets` K offsets of
// ndim ints. The arithmetic repeats the tensor version's float32 operations (seg_energy.h); exp is the
// one operation that torch's CPU kernel computes differently at the ends of its thread ranges
// (vectorised, then the scalar tail), so seg_energy writes the exponents of each direction into a
// buffer shaped as the tensor version's and calls torch's exp_ on it. The reductions of the checks and
// of sigma's sums, the data capacities and the n-links' rounding run four floats or sixteen labels at a
// time (simd.h): the compiler leaves these loops scalar without fast-math, and scalar they took 2-4x as
// long (docs/performance.md).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "../seg_energy.h"
#include "simd.h"

namespace torchcut_cpu {
namespace {

using namespace torchcut_seg;
using namespace torchcut_simd;

constexpr int64_t kGrain = 1 << 14;  // pixels per task, at least

struct Geometry {
  int64_t B = 0, C = 0, N = 0;
  int64_t D = 1, H = 1, W = 1;  // 2D grids are 3D grids with D = 1
};

Geometry geometry(const char* op, const at::Tensor& x, const at::Tensor& seeds, c10::IntArrayRef shape) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 3 && x.is_contiguous(), op,
              ": x: expected a contiguous float32 CPU tensor [B, C, N], got ", x.scalar_type(), " ", x.sizes(),
              " on ", x.device());
  Geometry g;
  g.B = x.size(0);
  g.C = x.size(1);
  g.N = x.size(2);
  TORCH_CHECK(g.C >= 1 && g.C <= kMaxChannels, op, ": x: expected 1 to ", kMaxChannels, " channels, got ", g.C);
  TORCH_CHECK(seeds.device().is_cpu() && seeds.is_contiguous() && seeds.dim() == 2 && seeds.size(0) == g.B &&
                  seeds.size(1) == g.N,
              op, ": seeds: expected a contiguous CPU tensor [", g.B, ", ", g.N, "], got ", seeds.sizes());
  if (!shape.empty()) {
    TORCH_CHECK(shape.size() == 2 || shape.size() == 3, op, ": shape: expected 2 or 3 dims, got ", shape);
    g.D = shape.size() == 3 ? shape[0] : 1;
    g.H = shape[shape.size() - 2];
    g.W = shape[shape.size() - 1];
    TORCH_CHECK(g.D * g.H * g.W == g.N, op, ": shape: expected ", g.N, " nodes, got ", shape);
  }
  return g;
}

void check_small(const char* op, const char* name, const at::Tensor& t, at::ScalarType type, int64_t numel) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == type && t.is_contiguous() && t.numel() == numel, op, ": ",
              name, ": expected a contiguous ", type, " CPU tensor of ", numel, " values, got ", t.scalar_type(), " ",
              t.sizes());
}

// ---------------------------------------------------------------------------------------------- check
constexpr int kVecs = 4;  // independent vectors of accumulators in the checks' reductions

// info: [non-finite values, smallest label, largest label, object seeds of image 0, background seeds of
// image 0, ... of image B-1, lo (B*C float32 bit patterns), hi (B*C float32 bit patterns)]
template <typename S>
at::Tensor check_impl(const at::Tensor& x, const at::Tensor& seeds, bool finite, at::Tensor& s8) {
  const int64_t B = x.size(0), C = x.size(1), N = x.size(2);
  const float* xp = x.data_ptr<float>();
  const S* sp = seeds.data_ptr<S>();
  uint8_t* out8 = s8.defined() ? s8.data_ptr<uint8_t>() : nullptr;
  const int64_t chunks = std::max<int64_t>(1, (N + kGrain - 1) / kGrain);
  struct Part {
    int64_t bad = 0, smin = std::numeric_limits<int64_t>::max(), smax = std::numeric_limits<int64_t>::min();
    int64_t obj = 0, bkg = 0;
    float lo[kMaxChannels], hi[kMaxChannels];
  };
  std::vector<Part> parts(B * chunks);
  at::parallel_for(0, B * chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / chunks, a = (t % chunks) * kGrain, e = std::min(N, a + kGrain);
      Part& P = parts[t];
      for (int64_t c = 0; c < C; ++c) {
        const float* row = xp + (b * C + c) * N;
        // kVecs vectors of independent minima, maxima and counts: no chain of dependent compares, and
        // no fast-math (a NaN is never taken: `v < lo` is false for it)
        const float inf = std::numeric_limits<float>::infinity();
        f4 lo[kVecs], hi[kVecs];
        i4 bad[kVecs];  // at most kGrain each, counted down (a true comparison is -1)
        for (int u = 0; u < kVecs; ++u) lo[u] = splat<f4>(inf), hi[u] = splat<f4>(-inf), bad[u] = splat<i4>(0);
        int64_t i = a;
        for (; i + 4 * kVecs <= e; i += 4 * kVecs)
          for (int u = 0; u < kVecs; ++u) {
            const f4 v = load<f4>(row + i + 4 * u);
            const f4 z = v - v;  // NaN exactly for NaN and infinities
            bad[u] += (i4)(z != z);
            lo[u] = min_of(v, lo[u]);
            hi[u] = max_of(v, hi[u]);
          }
        float l = inf, h = -inf;
        int32_t n = 0;
        for (int u = 0; u < kVecs; ++u)
          for (int j = 0; j < 4; ++j) {
            l = lo[u][j] < l ? lo[u][j] : l;
            h = hi[u][j] > h ? hi[u][j] : h;
            n -= bad[u][j];
          }
        for (; i < e; ++i) {
          const float v = row[i];
          const float z = v - v;
          n += z != z;
          l = v < l ? v : l;
          h = v > h ? v : h;
        }
        if (!finite) n = 0;
        P.lo[c] = l;
        P.hi[c] = h;
        P.bad += n;
      }
      const S* srow = sp + b * N;
      // Wider labels are first narrowed to the uint8 copy while their bits are OR-ed: when every label
      // lies in [0, 3] the copy has the same range and counts; otherwise (an error) they come from the
      // labels themselves, one value at a time.
      const uint8_t* lab = reinterpret_cast<const uint8_t*>(srow);
      using U = std::make_unsigned_t<S>;
      U bits = 0;
      if constexpr (!std::is_same_v<S, uint8_t>) {
        uint8_t* o8 = out8 + b * N;
        for (int64_t j = a; j < e; ++j) o8[j] = (uint8_t)srow[j], bits |= (U)srow[j];
        lab = o8;
      }
      int64_t i = a, smin = std::numeric_limits<int64_t>::max(), smax = std::numeric_limits<int64_t>::min();
      int64_t obj = 0, bkg = 0;
      {
        // sixteen labels at a time; the counts in byte lanes, added up before they can wrap (at most
        // kFlush steps)
        typedef Vec<uint8_t>::type VS;
        constexpr int L = Vec<uint8_t>::kLanes;
        constexpr int64_t kFlush = 120;
        VS mn = splat<VS>(uint8_t(255)), mx = splat<VS>(uint8_t(0));
        const VS one = splat<VS>(uint8_t(1)), two = splat<VS>(uint8_t(2));
        while (i + L <= e) {
          typedef Vec<int8_t>::type M;  // what a comparison of byte lanes gives: -1 where true
          M o = {}, k = {};
          for (int64_t step = 0; step < kFlush && i + L <= e; ++step, i += L) {
            const VS v = load<VS>(lab + i);
            mn = min_of(v, mn);
            mx = max_of(v, mx);
            o -= (M)(v == one);
            k -= (M)(v == two);
          }
          for (int j = 0; j < L; ++j) obj += o[j], bkg += k[j];
        }
        for (int j = 0; j < L; ++j) smin = std::min<int64_t>(smin, mn[j]), smax = std::max<int64_t>(smax, mx[j]);
      }
      for (; i < e; ++i) {
        const uint8_t v = lab[i];
        smin = std::min<int64_t>(smin, v);
        smax = std::max<int64_t>(smax, v);
        obj += v == 1;
        bkg += v == 2;
      }
      if (bits > 3) {  // a label outside [0, 3]: the range and counts of the labels as given
        smin = std::numeric_limits<int64_t>::max(), smax = std::numeric_limits<int64_t>::min(), obj = bkg = 0;
        for (int64_t j = a; j < e; ++j) {
          const S v = srow[j];
          smin = std::min<int64_t>(smin, (int64_t)v);
          smax = std::max<int64_t>(smax, (int64_t)v);
          obj += v == 1;
          bkg += v == 2;
        }
      }
      P.smin = smin;
      P.smax = smax;
      P.obj = obj;
      P.bkg = bkg;
    }
  });
  at::Tensor info = at::zeros({3 + 2 * B + 2 * B * C}, x.options().dtype(at::kLong));
  int64_t* ip = info.data_ptr<int64_t>();
  ip[1] = std::numeric_limits<int64_t>::max();
  ip[2] = std::numeric_limits<int64_t>::min();
  std::vector<float> lo(B * C, std::numeric_limits<float>::infinity()), hi(B * C, -std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < B * chunks; ++t) {
    const Part& P = parts[t];
    const int64_t b = t / chunks;
    ip[0] += P.bad;
    ip[1] = std::min(ip[1], P.smin);
    ip[2] = std::max(ip[2], P.smax);
    ip[3 + 2 * b] += P.obj;
    ip[4 + 2 * b] += P.bkg;
    for (int64_t c = 0; c < C; ++c) {
      lo[b * C + c] = P.lo[c] < lo[b * C + c] ? P.lo[c] : lo[b * C + c];
      hi[b * C + c] = P.hi[c] > hi[b * C + c] ? P.hi[c] : hi[b * C + c];
    }
  }
  for (int64_t i = 0; i < B * C; ++i) {
    int32_t bits;
    std::memcpy(&bits, &lo[i], 4);
    ip[3 + 2 * B + i] = bits;
    std::memcpy(&bits, &hi[i], 4);
    ip[3 + 2 * B + B * C + i] = bits;
  }
  return info;
}

std::tuple<at::Tensor, at::Tensor> seg_check(at::Tensor x, at::Tensor seeds, bool finite) {
  const char* op = "torchcut.seg_check";
  geometry(op, x, seeds, {});
  TORCH_CHECK(at::isIntegralType(seeds.scalar_type(), false), op, ": seeds: expected an integer tensor, got ",
              seeds.scalar_type());
  at::Tensor s8;
  if (seeds.scalar_type() != at::kByte) s8 = at::empty(seeds.sizes(), seeds.options().dtype(at::kByte));
  at::Tensor info;
  AT_DISPATCH_INTEGRAL_TYPES(seeds.scalar_type(), "seg_check", [&] { info = check_impl<scalar_t>(x, seeds, finite, s8); });
  if (!s8.defined()) s8 = at::empty({0}, seeds.options().dtype(at::kByte));
  return {info, s8};
}

// ---------------------------------------------------------------------------------------------- hist
// rint_pos (seg_energy.h) of four values at once, lane by lane
inline f4 rint_pos4(f4 v) {
  const f4 big = splat<f4>(8388608.f);
  return select(v < big, (v + big) - big, v);
}

// sq_diff of four consecutive pixels at once (the same operations in the same order, lane by lane)
template <int C>
inline f4 sq_diff4(const float* p, const float* q, int64_t stride) {
  f4 d = load<f4>(p) - load<f4>(q);
  f4 s = d * d;
  for (int c = 1; c < C; ++c) {
    d = load<f4>(p + c * stride) - load<f4>(q + c * stride);
    s = s + d * d;
  }
  return s;
}

// Exact sums: a run of at most kRun terms below 2**30 sums exactly in double (vectorised), then into int64.
constexpr int64_t kRun = 4096;

struct SigmaSum {
  int64_t total = 0;
  bool inf = false;
  template <int C>
  void pairs(const float* p, const float* q, int64_t n, int64_t stride, float uf, double uw, bool wide) {
    for (int64_t a = 0; a < n; a += kRun) {
      const int64_t e = std::min(n, a + kRun);
      double run = 0;
      if (wide) {
        for (int64_t i = a; i < e; ++i) run += sigma_units(sq_diff<C>(p + i, q + i, stride), uf, uw, true);
      } else {  // integers below 2**30: the runs sum exactly in any order; eight at a time, in doubles
        const f4 u4 = splat<f4>(uf);
        d2 acc[4] = {};
        int64_t i = a;
        for (; i + 8 <= e; i += 8)
          for (int h = 0; h < 2; ++h) {
            const f4 r = rint_pos4(sq_diff4<C>(p + i + 4 * h, q + i + 4 * h, stride) * u4);
            acc[2 * h] += d2{(double)r[0], (double)r[1]};
            acc[2 * h + 1] += d2{(double)r[2], (double)r[3]};
          }
        const d2 all = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        run = all[0] + all[1];
        for (; i < e; ++i) run += (double)rint_pos(mul_rn(sq_diff<C>(p + i, q + i, stride), uf));
      }
      if (std::isfinite(run))
        total += (int64_t)run;
      else
        inf = true;
    }
  }
};

template <int C>
void hist_image(const Geometry& g, const float* xb, const uint8_t* sb, const float* lob, const float* spb, int64_t bins,
                int64_t nb, float uf, double uw, bool wide, bool sigma, int32_t* cb, int64_t* total, int64_t* flag,
                std::mutex& lock) {
  const int64_t N = g.N, HW = g.H * g.W, W = g.W;
  const bool local = 2 * nb <= (int64_t{1} << 18);  // per-thread histograms when small, else atomic adds
  at::parallel_for(0, g.D * g.H, std::max<int64_t>(1, kGrain / W), [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> mine(local ? 2 * nb : 0);
    int32_t* h = local ? mine.data() : cb;
    SigmaSum sum;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t a = r * W;
      for (int64_t i = a; i < a + W; ++i) {
        const uint8_t s = sb[i];
        if (s != 1 && s != 2) continue;
        const int64_t k = bin_index<C>(xb + i, N, lob, spb, bins) + (s == 2 ? nb : 0);
        if (local)
          ++h[k];
        else
          __atomic_fetch_add(h + k, 1, __ATOMIC_RELAXED);
      }
      if (!sigma) continue;
      sum.pairs<C>(xb + a, xb + a + 1, W - 1, N, uf, uw, wide);
      if ((r % g.H) + 1 < g.H) sum.pairs<C>(xb + a, xb + a + W, W, N, uf, uw, wide);
      if (r / g.H + 1 < g.D) sum.pairs<C>(xb + a, xb + a + HW, W, N, uf, uw, wide);
    }
    std::lock_guard<std::mutex> guard(lock);
    if (local)
      for (int64_t k = 0; k < 2 * nb; ++k) cb[k] += h[k];
    *total += sum.total;
    *flag |= sum.inf;
  });
}

template <typename F>
void with_channels(int64_t C, F&& f) {
  switch (C) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    default: f(std::integral_constant<int, 4>()); break;
  }
}

std::tuple<at::Tensor, at::Tensor> seg_hist(at::Tensor x, at::Tensor seeds, at::Tensor lo, at::Tensor span,
                                            int64_t bins, c10::ArrayRef<double> unit, bool wide, c10::IntArrayRef shape,
                                            bool sigma) {
  const char* op = "torchcut.seg_hist";
  const Geometry g = geometry(op, x, seeds, shape);
  TORCH_CHECK(seeds.scalar_type() == at::kByte, op, ": seeds: expected uint8 labels, got ", seeds.scalar_type());
  check_small(op, "lo", lo, at::kFloat, g.B * g.C);
  check_small(op, "span", span, at::kFloat, g.B * g.C);
  TORCH_CHECK((int64_t)unit.size() == g.B, op, ": unit: expected ", g.B, " values, got ", unit.size());
  int64_t nb = 1;
  for (int64_t c = 0; c < g.C; ++c) nb *= bins;
  TORCH_CHECK(bins >= 1 && nb <= (int64_t{1} << 24), op, ": bins: expected at most 2**24 histogram bins, got ", nb);
  at::Tensor counts = at::zeros({g.B, 2, nb}, x.options().dtype(at::kInt));
  at::Tensor sums = at::zeros({2, g.B}, x.options().dtype(at::kLong));  // exact sums, non-finite flags
  int64_t* out = sums.data_ptr<int64_t>();
  std::mutex lock;
  for (int64_t b = 0; b < g.B; ++b) {
    with_channels(g.C, [&](auto c) {
      hist_image<decltype(c)::value>(g, x.data_ptr<float>() + b * g.C * g.N, seeds.data_ptr<uint8_t>() + b * g.N,
                                     lo.data_ptr<float>() + b * g.C, span.data_ptr<float>() + b * g.C, bins, nb,
                                     (float)unit[b], unit[b], wide, sigma, counts.data_ptr<int32_t>() + b * 2 * nb,
                                     out + b, out + g.B + b, lock);
    });
  }
  return {counts, sums};
}

// ---------------------------------------------------------------------------------------------- energy
// data_cap (seg_energy.h) of four values at once
inline f4 data_cap4(f4 v, f4 scale) { return rint_pos4(max_of(v, splat<f4>(0.f)) * scale); }

// out[i] = link_cap(e[i], w) as int32 for n values, four at a time (the capacities lie in the int32 range,
// where the vector conversion truncates as the scalar one does)
inline void link_row(const float* e, int64_t n, float w, int32_t* out) {
  const f4 w4 = splat<f4>(w);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) store(out + i, __builtin_convertvector(rint_pos4(load<f4>(e + i) * w4), i4));
  for (; i < n; ++i) out[i] = (int32_t)link_cap(e[i], w);
}

constexpr int64_t kBlock = 512;

// bin_index of n consecutive pixels, as floats (exact: fewer than 2**24 bins), in one loop per channel
template <int C>
void bin_block(const float* x, int64_t stride, const float* lo, const float* span, int64_t bins, int64_t n,
               float* out) {
  const float fb = (float)bins, top = (float)(bins - 1);
  for (int64_t j = 0; j < n; ++j) out[j] = 0.f;
  for (int c = 0; c < C; ++c) {
    const float* xc = x + c * stride;
    const float l = lo[c], s = span[c];
    for (int64_t j = 0; j < n; ++j) {
      float t = mul_rn(div_rn(sub_rn(xc[j], l), s), fb);
      t = t > 0.f ? t : 0.f;
      t = t < top ? t : top;
      out[j] = out[j] * fb + (float)(int32_t)t;  // integers below 2**24: exact
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> seg_energy(at::Tensor x, at::Tensor seeds, at::Tensor table,
                                                          at::Tensor lo, at::Tensor span, at::Tensor coef,
                                                          int64_t bins, double scale, int64_t hard,
                                                          c10::IntArrayRef shape, c10::IntArrayRef offsets,
                                                          c10::ArrayRef<double> weights) {
  const char* op = "torchcut.seg_energy";
  const Geometry g = geometry(op, x, seeds, shape);
  TORCH_CHECK(seeds.scalar_type() == at::kByte, op, ": seeds: expected uint8 labels, got ", seeds.scalar_type());
  const int64_t nd = (int64_t)shape.size();
  TORCH_CHECK(!offsets.empty() && offsets.size() % nd == 0, op, ": offsets: expected K*", nd, " ints, got ",
              offsets.size());
  const int64_t K = (int64_t)offsets.size() / nd;
  TORCH_CHECK((int64_t)weights.size() == K, op, ": weights: expected ", K, " values, got ", weights.size());
  int64_t nb = 1;
  for (int64_t c = 0; c < g.C; ++c) nb *= bins;
  TORCH_CHECK(bins >= 1 && nb <= (int64_t{1} << 24), op, ": bins: expected at most 2**24 histogram bins, got ", nb);
  check_small(op, "table", table, at::kFloat, g.B * nb);
  check_small(op, "lo", lo, at::kFloat, g.B * g.C);
  check_small(op, "span", span, at::kFloat, g.B * g.C);
  check_small(op, "coef", coef, at::kFloat, g.B);
  const int C = (int)g.C;
  const int64_t B = g.B, N = g.N, D = g.D, H = g.H, W = g.W;
  std::vector<int64_t> full = {B};
  for (auto s : shape) full.push_back(s);
  at::Tensor source = at::empty(full, x.options().dtype(at::kLong));
  at::Tensor sink = at::empty(full, x.options().dtype(at::kInt));
  std::vector<int64_t> cshape = {B, 2 * K};
  for (auto s : shape) cshape.push_back(s);
  at::Tensor caps = at::empty(cshape, x.options().dtype(at::kInt));
  const float* xp = x.data_ptr<float>();
  const uint8_t* sp = seeds.data_ptr<uint8_t>();
  const float* tp = table.data_ptr<float>();
  const float* lop = lo.data_ptr<float>();
  const float* spp = span.data_ptr<float>();
  const float* cf = coef.data_ptr<float>();
  int64_t* src = source.data_ptr<int64_t>();
  int32_t* snk = sink.data_ptr<int32_t>();
  int32_t* cp = caps.data_ptr<int32_t>();

  // data term and seeds: the tensor version writes float32 values (hard included) into int64 / int32
  const float fscale = (float)scale, fhard = (float)hard;
  const f4 fs4 = splat<f4>(fscale);
  const int64_t hard64 = (int64_t)fhard;
  const int32_t hard32 = (int32_t)fhard;
  const int64_t chunks = (N + kGrain - 1) / kGrain;
  with_channels(C, [&](auto cc) {
    constexpr int CC = decltype(cc)::value;
    at::parallel_for(0, B * chunks, 1, [&](int64_t t0, int64_t t1) {
      float bin[kBlock];  // bin indices of a block of pixels, computed first in a loop that vectorises
      float up[kBlock], down[kBlock];  // its source and sink capacities
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / chunks, a0 = (t % chunks) * kGrain, e0 = std::min(N, a0 + kGrain);
        const float* xb = xp + b * C * N;
        const float* tb = tp + b * nb;
        const float* lb = lop + b * C;
        const float* sb = spp + b * C;
        for (int64_t a = a0; a < e0; a += kBlock) {
          const int64_t n = std::min<int64_t>(kBlock, e0 - a);
          bin_block<CC>(xb + a, N, lb, sb, bins, n, bin);
          // the log ratios gathered, then both data capacities four pixels at a time, then the seeds
          for (int64_t j = 0; j < n; ++j) up[j] = tb[(int64_t)bin[j]];
          int64_t j = 0;
          for (; j + 4 <= n; j += 4) {
            const f4 l = load<f4>(up + j);
            store(up + j, data_cap4(l, fs4));
            store(down + j, data_cap4(-l, fs4));
          }
          for (; j < n; ++j) down[j] = data_cap(-up[j], fscale), up[j] = data_cap(up[j], fscale);
          const uint8_t* sj = sp + b * N + a;
          int64_t* so = src + b * N + a;
          int32_t* si = snk + b * N + a;
          for (j = 0; j < n; ++j) {
            const uint8_t s = sj[j];
            so[j] = s == 1 ? hard64 : (s == 2 ? 0 : (int64_t)up[j]);
            si[j] = s == 2 ? hard32 : (s == 1 ? 0 : (int32_t)down[j]);
          }
        }
      }
    });
  });

  // n-links, one direction at a time: the exponents of the pairs (p, p + o) with both inside, as the
  // tensor [B, *S'] of the tensor version (S' the overlap), torch's exp_, then both arcs of each pair
  int64_t most = 0;
  std::vector<std::array<int64_t, 3>> offs(K);
  std::vector<bool> fits(K);
  for (int64_t k = 0; k < K; ++k) {
    offs[k] = {0, 0, 0};
    for (int64_t j = 0; j < nd; ++j) offs[k][3 - nd + j] = offsets[k * nd + j];
    const int64_t dz = std::abs(offs[k][0]), dy = std::abs(offs[k][1]), dx = std::abs(offs[k][2]);
    fits[k] = weights[k] > 0 && dz < D && dy < H && dx < W;
    if (fits[k]) most = std::max(most, B * (D - dz) * (H - dy) * (W - dx));
  }
  at::Tensor buf = at::empty({std::max<int64_t>(most, 1)}, x.options());
  float* bp = buf.data_ptr<float>();
  const int64_t plane = D * H * W;
  for (int64_t k = 0; k < K; ++k) {
    int32_t* fwd = cp + k * plane;         // arc p -> p + o, stored at p (plane k)
    int32_t* bwd = cp + (K + k) * plane;   // arc p + o -> p, stored at p + o (plane K + k)
    const int64_t cstride = 2 * K * plane;  // from one image's planes to the next's
    if (!fits[k]) {
      at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          std::memset(fwd + b * cstride, 0, plane * sizeof(int32_t));
          std::memset(bwd + b * cstride, 0, plane * sizeof(int32_t));
        }
      });
      continue;
    }
    const int64_t oz = offs[k][0], oy = offs[k][1], ox = offs[k][2];
    const int64_t D2 = D - std::abs(oz), H2 = H - std::abs(oy), W2 = W - std::abs(ox);
    const int64_t z0 = std::max<int64_t>(-oz, 0), y0 = std::max<int64_t>(-oy, 0), x0 = std::max<int64_t>(-ox, 0);
    const int64_t shift = (oz * H + oy) * W + ox;
    const int64_t rows = B * D2 * H2;
    with_channels(C, [&](auto cc) {
      constexpr int CC = decltype(cc)::value;
      at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / W2), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / (D2 * H2), z = (r / H2) % D2 + z0, y = r % H2 + y0;
          const float* xr = xp + b * C * N + (z * H + y) * W + x0;
          float* out = bp + r * W2;
          const float c = cf[b];
          for (int64_t i = 0; i < W2; ++i) out[i] = mul_rn(sq_diff<CC>(xr + i, xr + i + shift, N), c);
        }
      });
    });
    const int64_t used = rows * W2;
    at::Tensor part = buf.narrow(0, 0, used);
    part.exp_();
    const float wk = (float)weights[k];
    at::parallel_for(0, B * D * H, std::max<int64_t>(1, kGrain / W), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / (D * H), z = (r / H) % D, y = r % H;
        int32_t* f = fwd + b * cstride + (z * H + y) * W;
        int32_t* v = bwd + b * cstride + (z * H + y) * W;
        // plane k at p: the pair (p, p + o) when p lies in the overlap's "here" range
        const int64_t zh = z - z0, yh = y - y0;
        if (zh >= 0 && zh < D2 && yh >= 0 && yh < H2) {
          const float* e = bp + ((b * D2 + zh) * H2 + yh) * W2 - x0;
          for (int64_t i = 0; i < x0; ++i) f[i] = 0;
          link_row(e + x0, W2, wk, f + x0);
          for (int64_t i = x0 + W2; i < W; ++i) f[i] = 0;
        } else {
          std::memset(f, 0, W * sizeof(int32_t));
        }
        // plane K + k at q: the pair (q - o, q)
        const int64_t zt = z - oz - z0, yt = y - oy - y0, xs = x0 + ox;  // q's first x with q - o inside
        if (zt >= 0 && zt < D2 && yt >= 0 && yt < H2) {
          const float* e = bp + ((b * D2 + zt) * H2 + yt) * W2 - xs;
          for (int64_t i = 0; i < xs; ++i) v[i] = 0;
          link_row(e + xs, W2, wk, v + xs);
          for (int64_t i = xs + W2; i < W; ++i) v[i] = 0;
        } else {
          std::memset(v, 0, W * sizeof(int32_t));
        }
      }
    });
  }
  return {source, sink, caps};
}


at::Tensor seg_sigma(at::Tensor sums, c10::IntArrayRef exps, int64_t count) {
  const char* op = "torchcut.seg_sigma";
  TORCH_CHECK(sums.scalar_type() == at::kLong && sums.dim() == 2 && sums.size(0) == 2 && sums.is_contiguous(), op,
              ": sums: expected a contiguous int64 tensor [2, B], got ", sums.scalar_type(), " ", sums.sizes());
  const int64_t B = sums.size(1);
  TORCH_CHECK((int64_t)exps.size() == B, op, ": exps: expected ", B, " exponents, got ", exps.size());
  TORCH_CHECK(count >= 0, op, ": count: expected a non-negative number of pairs, got ", count);
  for (auto e : exps) TORCH_CHECK(e >= -900 && e <= 900, op, ": exps: expected exponents in [-900, 900], got ", e);
  at::Tensor out = at::empty({2, B}, sums.options().dtype(at::kFloat));
  const int64_t* sp = sums.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const float sig = torchcut_seg::sigma_from_sum(sp[b], sp[B + b] != 0, (int)exps[b], count);
    o[b] = sig;
    o[B + b] = torchcut_seg::sigma_coef(sig);
  }
  return out;
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("seg_check", &torchcut_cpu::seg_check);
  m.impl("seg_hist", &torchcut_cpu::seg_hist);
  m.impl("seg_energy", &torchcut_cpu::seg_energy);
  m.impl("seg_sigma", &torchcut_cpu::seg_sigma);
}
