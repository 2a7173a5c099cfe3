// Contrast-sensitive Potts energies on the CPU (torch.ops.torchcut.potts_energy): the unaries and edge
// weights of torchcut.refine and torchcut.compat.torchmaxflow, quantised, in three passes over the pixels.
//
// The energy (torchcut/multilabel.py, refine): U[c, p] = -log(max(probs[c, p], floor)) and, for each
// offset o_k, w_k[p] = exp(-d2_k[p] / denom[b, k]) * mult[k] with d2_k[p] = sum_ch (x[p] - x[p + o_k])^2
// (x[q] = 0 outside the grid), float32 as refine computes it. Quantised as _Energy quantises a float
// Potts energy: the unary shifted per pixel to a minimum of 0, scale = 2**30 / (max U + 4 K max w)
// (w over the edges inside the grid), U and w rounded half to even.
//
// graph = true (two classes): a binary grid graph of the energy, sink side = class 1: both arcs of the
// pair (p, p + o_k) of capacity w_k[p], source = U1[p], sink = U0[p], netted. The same quantised energy
// as _Energy.move_graph's move from all-zero labels to label 1 (Kolmogorov-Zabih: arc 2 w one way, w on
// the terminals), so the same canonical minimum cut, and the flow less by the sum of the pair costs;
// Boykov-Kolmogorov solves this symmetric form faster on refine's energies (docs/performance.md).
// Outputs caps int32 [B, 2K, *S], source int64 [B, *S], sink int32 [B, *S].
// graph = false: the quantised unary int32 [B, C, *S], the pair costs int32 [B, K, *S] and the offsets of
// the shifts (the sum over pixels of each item's minimum unary, float64 [B]).
//
// Seeds (optional, int64 [B, *S]): -1 free, c >= 0 fixes the pixel to class c through a unary of
// hard = 1 + max U + 2 K max w (w here over every entry, also those leaving the grid) on the other
// classes, as refine does.
//
// Bits: the arithmetic is refine's, operation for operation and dtype for dtype, so the integers are the
// same as those of the tensor version. exp and log are torch's own kernels (at::exp_, at::log_) run on
// buffers of exactly the shapes refine applies them to: torch's CPU kernels take vectorised and scalar
// paths by position within a thread's range, which depends on the shape, and the two paths may differ in
// the last bit. The channel sum is sequential, as torch's sum over at most 4 channels is (more channels:
// refine keeps the tensor version).
//
// Validation happens in the first pass: `info` (float64 [8]) holds the count of non-finite
// probabilities, their minimum, the count of non-finite pixel values, the seeds' minimum and maximum,
// the scale, and a flag set when a check failed (the other outputs are then empty); Python raises.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

// no fused multiply-adds: torch rounds the square and the sum separately (a build with -march=native
// would otherwise contract d2 + t * t)
#pragma GCC optimize("fp-contract=off")
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "../terminals.h"
#include "huge_alloc.h"

namespace torchcut_cpu {
namespace {

constexpr int kMaxChannels = 16;  // refine takes the op for at most 4 (its channel sum is sequential up to 4)
constexpr int kMaxOffsets = 13;
enum InfoSlot { kBadProbs = 0, kProbMin, kBadImage, kSeedLo, kSeedHi, kScale, kFailed, kInfoLen = 8 };
constexpr double kQuantRange = 1073741824.0;  // 2**30, multilabel.QUANT_RANGE

struct Geometry {
  int64_t B, C, Ch, D, H, W, n, K;
  int64_t od[kMaxOffsets], oh[kMaxOffsets], ow[kMaxOffsets];
  int64_t rows() const { return B * D * H; }
  bool inside(int64_t k, int64_t d, int64_t h, int64_t w) const {
    const int64_t a = d + od[k], b = h + oh[k], c = w + ow[k];
    return a >= 0 && a < D && b >= 0 && b < H && c >= 0 && c < W;
  }
  bool inside_back(int64_t k, int64_t d, int64_t h, int64_t w) const {  // p - o_k
    const int64_t a = d - od[k], b = h - oh[k], c = w - ow[k];
    return a >= 0 && a < D && b >= 0 && b < H && c >= 0 && c < W;
  }
};

// strides of a [B, X, *S] tensor as [B, X, D, H, W] (D stride 0 in 2D)
struct Strides {
  int64_t b, x, d, h, w;
};

Strides strides_of(const at::Tensor& t) {
  if (t.dim() == 4) return {t.stride(0), t.stride(1), 0, t.stride(2), t.stride(3)};
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3), t.stride(4)};
}

template <class T>
bool is_finite(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
  else return true;
}

// Row r of the B * D * H rows: (b, d, h).
inline void row_coords(const Geometry& g, int64_t r, int64_t& b, int64_t& d, int64_t& h) {
  b = r / (g.D * g.H);
  const int64_t dh = r - b * g.D * g.H;
  d = dh / g.H;
  h = dh - d * g.H;
}

// Rows per task: about 2**16 pixels, so that images below ~2**17 pixels stay on the calling thread (a
// parallel region costs more than it saves there, and far more on a loaded machine, where the team
// waits for a descheduled thread).
int64_t row_grain(const Geometry& g) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(g.W, 1)); }

struct PassA {
  int64_t bad_probs = 0, bad_image = 0, seed_lo = std::numeric_limits<int64_t>::max(),
          seed_hi = std::numeric_limits<int64_t>::min();
  double prob_min = std::numeric_limits<double>::infinity();
};

// Pass A: checks, the clamped probabilities (lbuf [B, C, *S]) and the exponents -d2 / denom (ebuf [K, B, *S]).
// Unit: image and probabilities with unit stride along W (known at compile time, so the loops vectorise).
template <class TI, class TP, bool Unit>
void pass_a(const Geometry& g, const at::Tensor& image, const at::Tensor& probs, const float* denom,
            const int64_t* seeds, double floor, double* lbuf, float* ebuf, std::vector<PassA>& parts) {
  const TI* X = image.data_ptr<TI>();
  const TP* P = probs.data_ptr<TP>();
  Strides sx = strides_of(image), sp = strides_of(probs);
  if constexpr (Unit) sx.w = 1, sp.w = 1;
  const int64_t n = g.n, Ch = g.Ch, C = g.C, K = g.K, B = g.B;
  const int64_t xw = Unit ? 1 : sx.w, pw = Unit ? 1 : sp.w;
  at::parallel_for(0, g.rows(), row_grain(g), [&](int64_t r0, int64_t r1) {
    PassA acc;
    const int64_t W = g.W;
    std::vector<float> d2_row(W);
    float* d2 = d2_row.data();
    for (int64_t r = r0; r < r1; ++r) {
      int64_t b, d, h;
      row_coords(g, r, b, d, h);
      const int64_t row = (d * g.H + h) * W;
      for (int64_t c = 0; c < C; ++c) {
        const TP* pr = P + b * sp.b + c * sp.x + d * sp.d + h * sp.h;
        double* lr = lbuf + (b * C + c) * n + row;
        for (int64_t w = 0; w < W; ++w) {
          const TP v = pr[w * pw];
          if (!is_finite(v)) ++acc.bad_probs;
          const double dv = static_cast<double>(v);
          acc.prob_min = dv < acc.prob_min ? dv : acc.prob_min;
          lr[w] = dv < floor ? floor : dv;
        }
      }
      if (seeds != nullptr) {
        for (int64_t w = 0; w < W; ++w) {
          const int64_t s = seeds[b * n + row + w];
          acc.seed_lo = std::min(acc.seed_lo, s);
          acc.seed_hi = std::max(acc.seed_hi, s);
        }
      }
      const TI* xrow = X + b * sx.b + d * sx.d + h * sx.h;
      if constexpr (std::is_floating_point_v<TI>) {
        for (int64_t c = 0; c < Ch; ++c)
          for (int64_t w = 0; w < W; ++w) acc.bad_image += !is_finite(xrow[c * sx.x + w * xw]);
      }
      for (int64_t k = 0; k < K; ++k) {
        // the neighbour p + o_k is inside for w in [lo, hi) when its row is; outside it reads 0
        const int64_t dq = d + g.od[k], hq = h + g.oh[k], ow = g.ow[k];
        const bool row_in = dq >= 0 && dq < g.D && hq >= 0 && hq < g.H;
        const int64_t lo = row_in ? std::max<int64_t>(0, -ow) : 0;
        const int64_t hi = row_in ? std::max(lo, std::min<int64_t>(W, W - ow)) : 0;
        for (int64_t c = 0; c < Ch; ++c) {  // channel by channel, as torch sums them
          const TI* xr = xrow + c * sx.x;
          const TI* qr = xr + g.od[k] * sx.d + g.oh[k] * sx.h + ow * xw;  // read only for w in [lo, hi)
          if (c == 0) {
            for (int64_t w = 0; w < lo; ++w) d2[w] = static_cast<float>(xr[w * xw]) * static_cast<float>(xr[w * xw]);
            for (int64_t w = lo; w < hi; ++w) {
              const float t = static_cast<float>(xr[w * xw]) - static_cast<float>(qr[w * xw]);
              d2[w] = t * t;
            }
            for (int64_t w = hi; w < W; ++w) d2[w] = static_cast<float>(xr[w * xw]) * static_cast<float>(xr[w * xw]);
          } else {
            for (int64_t w = 0; w < lo; ++w) d2[w] = d2[w] + static_cast<float>(xr[w * xw]) * static_cast<float>(xr[w * xw]);
            for (int64_t w = lo; w < hi; ++w) {
              const float t = static_cast<float>(xr[w * xw]) - static_cast<float>(qr[w * xw]);
              d2[w] = d2[w] + t * t;
            }
            for (int64_t w = hi; w < W; ++w) d2[w] = d2[w] + static_cast<float>(xr[w * xw]) * static_cast<float>(xr[w * xw]);
          }
        }
        float* er = ebuf + (k * B + b) * n + row;
        const float den = denom[b * K + k];
        for (int64_t w = 0; w < W; ++w) er[w] = -d2[w] / den;
      }
    }
    PassA& m = parts[at::get_thread_num()];
    m.bad_probs += acc.bad_probs, m.bad_image += acc.bad_image;
    m.seed_lo = std::min(m.seed_lo, acc.seed_lo), m.seed_hi = std::max(m.seed_hi, acc.seed_hi);
    m.prob_min = std::min(m.prob_min, acc.prob_min);
  });
}

struct PassB {
  double u_raw = -std::numeric_limits<double>::infinity();  // max of U over everything (before seeds)
  double w_all = -std::numeric_limits<double>::infinity();  // max of w over every entry
  double w_in = 0.0;                                       // max of w over the edges inside the grid
  double u_shift = 0.0;                                    // max of the shifted U over unseeded pixels
  bool seeded = false;
};

// Pass B (reads only): the maxima of U = -log(...) and of w = exp(...) * mult, row by row with one simple
// loop per term (the neighbours inside the grid a range of each row, as in pass A). Maxima do not depend on
// the order, so the values are those of a pixel-by-pixel pass.
void pass_b(const Geometry& g, const float* mult, const int64_t* seeds, const double* lbuf, const float* ebuf,
            std::vector<PassB>& parts) {
  const int64_t n = g.n, C = g.C, K = g.K, B = g.B, W = g.W;
  constexpr double kInfD = std::numeric_limits<double>::infinity();
  constexpr float kInfF = std::numeric_limits<float>::infinity();
  at::parallel_for(0, g.rows(), row_grain(g), [&](int64_t r0, int64_t r1) {
    PassB acc;
    std::vector<double> top_row(W), low_row(W);
    double* top = top_row.data();
    double* low = low_row.data();
    for (int64_t r = r0; r < r1; ++r) {
      int64_t b, d, h;
      row_coords(g, r, b, d, h);
      const int64_t row = (d * g.H + h) * W;
      // per pixel, the largest and smallest unary over the classes
      const double* L0 = lbuf + (b * C) * n + row;
      for (int64_t w = 0; w < W; ++w) top[w] = -L0[w], low[w] = -L0[w];
      for (int64_t c = 1; c < C; ++c) {
        const double* Lc = lbuf + (b * C + c) * n + row;
        for (int64_t w = 0; w < W; ++w) {
          const double u = -Lc[w];
          top[w] = u > top[w] ? u : top[w];
          low[w] = u < low[w] ? u : low[w];
        }
      }
      double u_raw = -kInfD, u_shift = 0.0;
      for (int64_t w = 0; w < W; ++w) u_raw = top[w] > u_raw ? top[w] : u_raw;
      if (seeds == nullptr) {
        for (int64_t w = 0; w < W; ++w) {
          const double t = top[w] - low[w];
          u_shift = t > u_shift ? t : u_shift;
        }
      } else {
        const int64_t* sr = seeds + b * n + row;
        for (int64_t w = 0; w < W; ++w) {
          if (sr[w] >= 0) {
            acc.seeded = true;
            continue;
          }
          const double t = top[w] - low[w];
          u_shift = t > u_shift ? t : u_shift;
        }
      }
      acc.u_raw = std::max(acc.u_raw, u_raw);
      acc.u_shift = std::max(acc.u_shift, u_shift);
      for (int64_t k = 0; k < K; ++k) {
        const float* er = ebuf + (k * B + b) * n + row;
        const float mk = mult[k];
        // p + o_k is inside for w in [lo, hi) when its row is
        const int64_t dq = d + g.od[k], hq = h + g.oh[k], ow = g.ow[k];
        const bool row_in = dq >= 0 && dq < g.D && hq >= 0 && hq < g.H;
        const int64_t lo = row_in ? std::max<int64_t>(0, -ow) : 0;
        const int64_t hi = row_in ? std::max(lo, std::min<int64_t>(W, W - ow)) : 0;
        float all_f = -kInfF, in_f = 0.0f;
        for (int64_t w = 0; w < lo; ++w) {
          const float e = er[w] * mk;
          all_f = e > all_f ? e : all_f;
        }
        for (int64_t w = lo; w < hi; ++w) {
          const float e = er[w] * mk;
          all_f = e > all_f ? e : all_f;
          in_f = e > in_f ? e : in_f;
        }
        for (int64_t w = hi; w < W; ++w) {
          const float e = er[w] * mk;
          all_f = e > all_f ? e : all_f;
        }
        acc.w_all = std::max(acc.w_all, static_cast<double>(all_f));
        acc.w_in = std::max(acc.w_in, static_cast<double>(in_f));
      }
    }
    PassB& p = parts[at::get_thread_num()];
    p.u_raw = std::max(p.u_raw, acc.u_raw), p.w_all = std::max(p.w_all, acc.w_all);
    p.w_in = std::max(p.w_in, acc.w_in), p.u_shift = std::max(p.u_shift, acc.u_shift);
    p.seeded = p.seeded || acc.seeded;
  });
}

// round(v * scale) half to even, as torch.round: v * scale is in [0, 2**31), where adding and subtracting
// 2**52 rounds to an integer in the current (nearest-even) mode; std::nearbyint is a library call here.
inline int32_t quant(double v, double scale) {
  const double t = v * scale;
  return static_cast<int32_t>((t + 0x1p52) - 0x1p52);
}

// The two scratch buffers of a call (the log-probabilities and the exponents), kept for the next call in
// a WorkPool (huge_alloc.h): fresh, they are new memory above the allocator's mapping threshold at volume
// sizes (58 MB at 128^3 6-connected), and every call faulted all their pages in again
// (docs/performance.md). At most 256 MB kept; a call that finds none kept allocates its own.
struct PottsScratch {
  static constexpr int64_t kKeepBytes = int64_t(256) << 20;
  at::Tensor slot[2];
  int64_t bytes() const { return (slot[0].defined() ? slot[0].nbytes() : 0) + (slot[1].defined() ? slot[1].nbytes() : 0); }
  // A contiguous tensor of `sizes` in slot i: the kept buffer's first bytes when it is large enough, else a
  // new buffer, kept from now on.
  at::Tensor take(int i, c10::IntArrayRef sizes, at::ScalarType dtype) {
    int64_t n = 1;
    for (auto v : sizes) n *= v;
    if (!slot[i].defined() || slot[i].scalar_type() != dtype || slot[i].numel() < n)
      slot[i] = at::empty({n}, at::TensorOptions().dtype(dtype));
    return slot[i].narrow(0, 0, n).view(sizes);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> potts_energy(
    const at::Tensor& image, const at::Tensor& probs, const at::Tensor& denom_, at::ArrayRef<double> mult_,
    at::IntArrayRef offsets, double floor, const std::optional<at::Tensor>& seeds_, bool graph) {
  const int64_t nd = probs.dim() - 2;
  TORCH_CHECK(nd == 2 || nd == 3, "torchcut.potts_energy: probs: expected [B, C, H, W] or [B, C, D, H, W], got ",
              probs.sizes());
  TORCH_CHECK(image.dim() == nd + 2, "torchcut.potts_energy: image: expected ", nd + 2, " dims, got ", image.sizes());
  TORCH_CHECK(image.device().is_cpu() && probs.device().is_cpu() && denom_.device().is_cpu(),
              "torchcut.potts_energy: expected CPU tensors");
  Geometry g{};
  g.B = probs.size(0), g.C = probs.size(1), g.Ch = image.size(1);
  g.D = nd == 3 ? probs.size(2) : 1, g.H = probs.size(nd), g.W = probs.size(nd + 1);
  g.n = g.D * g.H * g.W;
  TORCH_CHECK(image.size(0) == g.B, "torchcut.potts_energy: image: expected ", g.B, " items, got ", image.size(0));
  for (int64_t a = 0; a < nd; ++a)
    TORCH_CHECK(image.size(2 + a) == probs.size(2 + a), "torchcut.potts_energy: image and probs: spatial shapes differ (",
                image.sizes(), " vs ", probs.sizes(), ")");
  TORCH_CHECK(g.C >= 2, "torchcut.potts_energy: probs: expected at least 2 classes, got ", g.C);
  TORCH_CHECK(!graph || g.C == 2, "torchcut.potts_energy: graph: expected 2 classes, got ", g.C);
  TORCH_CHECK(g.Ch >= 1 && g.Ch <= kMaxChannels, "torchcut.potts_energy: image: expected 1 to ", kMaxChannels,
              " channels, got ", g.Ch);
  TORCH_CHECK(offsets.size() % nd == 0 && !offsets.empty(), "torchcut.potts_energy: offsets: expected K * ", nd,
              " values, got ", offsets.size());
  g.K = static_cast<int64_t>(offsets.size()) / nd;
  TORCH_CHECK(g.K <= kMaxOffsets, "torchcut.potts_energy: offsets: expected at most ", kMaxOffsets, ", got ", g.K);
  for (int64_t k = 0; k < g.K; ++k) {
    g.od[k] = nd == 3 ? offsets[k * nd] : 0;
    g.oh[k] = offsets[k * nd + nd - 2];
    g.ow[k] = offsets[k * nd + nd - 1];
  }
  TORCH_CHECK(static_cast<int64_t>(mult_.size()) == g.K, "torchcut.potts_energy: mult: expected ", g.K, " values");
  TORCH_CHECK(denom_.scalar_type() == at::kFloat && denom_.numel() == g.B * g.K,
              "torchcut.potts_energy: denom: expected float32 [B, K]");
  const at::Tensor denom = denom_.contiguous();
  at::Tensor seeds;
  if (seeds_.has_value()) {
    seeds = seeds_->contiguous();
    TORCH_CHECK(seeds.scalar_type() == at::kLong && seeds.numel() == g.B * g.n && seeds.device().is_cpu(),
                "torchcut.potts_energy: seeds: expected int64 CPU [B, *S]");
  }
  const int64_t* S = seeds.defined() ? seeds.data_ptr<int64_t>() : nullptr;
  std::vector<float> mult(g.K);
  for (int64_t k = 0; k < g.K; ++k) mult[k] = static_cast<float>(mult_[k]);  // torch casts the scalar to float32
  std::vector<int64_t> sp(probs.sizes().begin() + 2, probs.sizes().end());
  auto dims = [&](int64_t a, int64_t b) {
    std::vector<int64_t> v{a, b};
    v.insert(v.end(), sp.begin(), sp.end());
    return v;
  };
  PooledWork<PottsScratch> scratch(1);
  at::Tensor lbuf = scratch[0].take(0, dims(g.B, g.C), at::kDouble);
  at::Tensor ebuf = scratch[0].take(1, dims(g.K, g.B), at::kFloat);
  at::Tensor info = at::zeros({kInfoLen}, probs.options().dtype(at::kDouble));
  double* I = info.data_ptr<double>();
  const int slots = at::get_num_threads();

  // pass A
  std::vector<PassA> pa(slots);
  auto run_a = [&](auto ti, auto tp) {
    using TI = decltype(ti);
    using TP = decltype(tp);
    const bool unit = strides_of(image).w == 1 && strides_of(probs).w == 1;
    (unit ? pass_a<TI, TP, true> : pass_a<TI, TP, false>)(g, image, probs, denom.data_ptr<float>(), S, floor,
                                                           lbuf.data_ptr<double>(), ebuf.data_ptr<float>(), pa);
  };
  auto with_probs = [&](auto ti) {
    switch (probs.scalar_type()) {
      case at::kFloat: return run_a(ti, float{});
      case at::kDouble: return run_a(ti, double{});
      default: TORCH_CHECK(false, "torchcut.potts_energy: probs: expected float32 or float64, got ", probs.scalar_type());
    }
  };
  switch (image.scalar_type()) {
    case at::kFloat: with_probs(float{}); break;
    case at::kDouble: with_probs(double{}); break;
    case at::kByte: with_probs(uint8_t{}); break;
    default: TORCH_CHECK(false, "torchcut.potts_energy: image: expected float32, float64 or uint8, got ", image.scalar_type());
  }
  PassA a;
  for (const auto& p : pa) {
    a.bad_probs += p.bad_probs, a.bad_image += p.bad_image;
    a.seed_lo = std::min(a.seed_lo, p.seed_lo), a.seed_hi = std::max(a.seed_hi, p.seed_hi);
    a.prob_min = std::min(a.prob_min, p.prob_min);
  }
  I[kBadProbs] = static_cast<double>(a.bad_probs), I[kProbMin] = a.prob_min, I[kBadImage] = static_cast<double>(a.bad_image);
  I[kSeedLo] = S ? static_cast<double>(a.seed_lo) : -1.0, I[kSeedHi] = S ? static_cast<double>(a.seed_hi) : -1.0;
  const bool failed = a.bad_probs > 0 || a.prob_min < 0 || a.bad_image > 0 ||
                      (S && (a.seed_lo < -1 || a.seed_hi >= g.C));
  if (failed) {
    I[kFailed] = 1.0;
    const at::Tensor none = at::empty({0}, probs.options().dtype(at::kInt));
    return {none, none, none, info};
  }

  // torch's own exp and log, on buffers shaped as refine's (see the top of the file)
  at::log_(lbuf);
  for (int64_t k = 0; k < g.K; ++k) {
    at::Tensor slice = ebuf.select(0, k);
    at::exp_(slice);
  }

  // pass B
  std::vector<PassB> pb(slots);
  double* L = lbuf.data_ptr<double>();
  float* E = ebuf.data_ptr<float>();
  pass_b(g, mult.data(), S, L, E, pb);
  PassB m;
  for (const auto& p : pb) {
    m.u_raw = std::max(m.u_raw, p.u_raw), m.w_all = std::max(m.w_all, p.w_all);
    m.w_in = std::max(m.w_in, p.w_in), m.u_shift = std::max(m.u_shift, p.u_shift), m.seeded = m.seeded || p.seeded;
  }
  // refine: hard = 1.0 + float(U.max()) + 2 * len(offsets) * float(Wt.max())
  const double hard = S ? 1.0 + m.u_raw + static_cast<double>(2 * g.K) * m.w_all : 0.0;
  const double umax = m.seeded ? std::max(m.u_shift, hard) : m.u_shift;
  // _Energy: top = umax + 4 * K * vmax * wmax with vmax = 1
  const double top = umax + static_cast<double>(4 * g.K) * 1.0 * m.w_in;
  const double scale = top > 0 ? kQuantRange / top : 1.0;
  I[kScale] = scale;

  // pass C
  const int64_t n = g.n, C = g.C, K = g.K, B = g.B;
  const float* M = mult.data();
  auto wq = [&](int64_t k, int64_t b, int64_t pix) {
    return quant(static_cast<double>(E[(k * B + b) * n + pix] * M[k]), scale);
  };
  // the unary of class c at a pixel, shifted (seeded pixels: 0 for their class, hard for the others)
  auto shifted = [&](int64_t b, int64_t pix, int64_t c, double mn) {
    if (S) {
      const int64_t s = S[b * n + pix];
      if (s >= 0) return c == s ? 0.0 : hard;
    }
    return -L[(b * C + c) * n + pix] - mn;
  };
  auto min_u = [&](int64_t b, int64_t pix) {
    double mn = std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c) mn = std::min(mn, -L[(b * C + c) * n + pix]);
    return mn;
  };
  if (graph) {
    at::Tensor caps = at::empty(dims(g.B, 2 * g.K), probs.options().dtype(at::kInt));
    std::vector<int64_t> node_shape{g.B};
    node_shape.insert(node_shape.end(), sp.begin(), sp.end());
    at::Tensor source = at::empty(node_shape, probs.options().dtype(at::kLong));
    at::Tensor sink = at::empty(node_shape, probs.options().dtype(at::kInt));
    int32_t* cp = caps.data_ptr<int32_t>();
    int64_t* so = source.data_ptr<int64_t>();
    int32_t* si = sink.data_ptr<int32_t>();
    // row by row, one simple loop per term (the compiler vectorises them)
    at::parallel_for(0, g.rows(), row_grain(g), [&](int64_t r0, int64_t r1) {
      std::vector<int32_t> src_row(g.W), snk_row(g.W);
      int32_t* src = src_row.data();
      int32_t* snk = snk_row.data();
      const int64_t W = g.W;
      for (int64_t r = r0; r < r1; ++r) {
        int64_t b, d, h;
        row_coords(g, r, b, d, h);
        const int64_t row = (d * g.H + h) * W;
        const double* L0 = L + (b * C) * n + row;
        const double* L1 = L0 + n;
        if (S == nullptr) {
          for (int64_t w = 0; w < W; ++w) {
            const double u0 = -L0[w], u1 = -L1[w];
            const double mn = u1 < u0 ? u1 : u0;
            src[w] = quant(u1 - mn, scale);
            snk[w] = quant(u0 - mn, scale);
          }
        } else {
          for (int64_t w = 0; w < W; ++w) {
            const double mn = min_u(b, row + w);
            src[w] = quant(shifted(b, row + w, 1, mn), scale);
            snk[w] = quant(shifted(b, row + w, 0, mn), scale);
          }
        }
        int32_t* cpb = cp + b * 2 * K * n + row;
        for (int64_t k = 0; k < K; ++k) {
          const float mk = M[k];
          int32_t* fwd = cpb + k * n;
          int32_t* rev = cpb + (K + k) * n;
          // p -> p + o_k inside for w in [lo, hi) when the row of p + o_k is
          const int64_t dq = d + g.od[k], hq = h + g.oh[k], ow = g.ow[k];
          const bool row_in = dq >= 0 && dq < g.D && hq >= 0 && hq < g.H;
          const int64_t lo = row_in ? std::max<int64_t>(0, -ow) : 0, hi = row_in ? std::min<int64_t>(W, W - ow) : 0;
          const float* Ek = E + (k * B + b) * n + row;
          for (int64_t w = 0; w < lo; ++w) fwd[w] = 0;
          for (int64_t w = std::max(hi, lo); w < W; ++w) fwd[w] = 0;
          for (int64_t w = lo; w < hi; ++w) fwd[w] = quant(static_cast<double>(Ek[w] * mk), scale);
          // the arc p -> p - o_k (the pair's reverse arc, stored at p): the pair cost of edge (p - o_k, p)
          const int64_t dp = d - g.od[k], hp = h - g.oh[k];
          const bool back_in = dp >= 0 && dp < g.D && hp >= 0 && hp < g.H;
          const int64_t blo = back_in ? std::max<int64_t>(0, ow) : 0;
          const int64_t bhi = back_in ? std::max(blo, std::min<int64_t>(W, W + ow)) : 0;
          for (int64_t w = 0; w < blo; ++w) rev[w] = 0;
          for (int64_t w = bhi; w < W; ++w) rev[w] = 0;
          if (back_in) {
            const float* Eb = E + (k * B + b) * n + (dp * g.H + hp) * W;  // Eb[w - ow] = E_k[p - o_k]
            for (int64_t w = blo; w < bhi; ++w) rev[w] = quant(static_cast<double>(Eb[w - ow] * mk), scale);
          }
        }
        int64_t* sor = so + b * n + row;
        int32_t* sir = si + b * n + row;
        for (int64_t w = 0; w < W; ++w) {
          int32_t s, k;
          torchcut::net_pair(src[w], snk[w], &s, &k);
          sor[w] = s;
          sir[w] = k;
        }
      }
    });
    return {caps, source, sink, info};
  }
  at::Tensor U = at::empty(dims(g.B, g.C), probs.options().dtype(at::kInt));
  at::Tensor Wt = at::empty(dims(g.B, g.K), probs.options().dtype(at::kInt));
  at::Tensor offset = at::zeros({g.B}, probs.options().dtype(at::kDouble));
  int32_t* up = U.data_ptr<int32_t>();
  int32_t* wp = Wt.data_ptr<int32_t>();
  std::vector<double> sums(static_cast<size_t>(slots) * g.B, 0.0);
  at::parallel_for(0, g.rows(), row_grain(g), [&](int64_t r0, int64_t r1) {
    double* mysum = sums.data() + static_cast<size_t>(at::get_thread_num()) * g.B;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t b, d, h;
      row_coords(g, r, b, d, h);
      const int64_t row = (d * g.H + h) * g.W;
      for (int64_t w = 0; w < g.W; ++w) {
        const int64_t pix = row + w;
        const double mn = min_u(b, pix);
        const bool fixed = S && S[b * n + pix] >= 0;
        mysum[b] += fixed ? 0.0 : mn;
        for (int64_t c = 0; c < C; ++c) up[(b * C + c) * n + pix] = quant(shifted(b, pix, c, mn), scale);
        for (int64_t k = 0; k < K; ++k) wp[(b * K + k) * n + pix] = g.inside(k, d, h, w) ? wq(k, b, pix) : 0;
      }
    }
  });
  double* op = offset.data_ptr<double>();
  for (int s = 0; s < slots; ++s)
    for (int64_t b = 0; b < g.B; ++b) op[b] += sums[static_cast<size_t>(s) * g.B + b];
  return {U, Wt, offset, info};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CPU, m) { m.impl("potts_energy", &potts_energy); }

}  // namespace torchcut_cpu
