// GrabCut's colour models on the CPU (torch.ops.torchcut.grabcut_lloyd / grabcut_models).
//
// torchcut/grabcut.py computes one iteration's models as ~100 tensor passes over the pixels; on a CPU
// those passes, not the arithmetic, take the time (1.4-2.2x slower than cv2.grabCut on one thread).
// These two ops do the same work in two or three passes per image, the pixels split into fixed chunks
// over threads:
//
// grabcut_lloyd:  Lloyd iterations of the k-means start from given assignments (grabcut._kmeans).
// grabcut_models: the mixture fit from the assignments, the log-likelihoods of every pixel under the
//                 2K components, and the signed terminal capacities (grabcut._fit,
//                 _component_loglik, _terminals).
//
// Layout: x [B, N, C] float32, cls [B, N] int64 (0 object, 1 background, 2 neither), comp [B, N] int64
// (component 0..K-1), seeds [B, N] uint8 (1 object, 2 background), valid [B, N] bool. Group of a pixel:
// min(cls, 1) * K + comp; pixels with cls == 2 belong to no group. Sums are taken per chunk of kChunk
// pixels in double and added chunk by chunk in order: the result does not depend on the thread count.
// The arithmetic follows the tensor version (float32 where it is float32, double where it is double),
// so the two agree up to the order of float additions.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace torchcut_cpu {
namespace {

constexpr int64_t kChunk = 16384;
constexpr int kMaxC = 8;  // channels handled by the ops (the tensor version takes any number)

void check_inputs(const at::Tensor& x, const at::Tensor& cls, const at::Tensor& comp) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "x: expected a contiguous float32 CPU tensor [B, N, C]");
  TORCH_CHECK(x.size(2) >= 1 && x.size(2) <= kMaxC, "x: expected 1 to ", kMaxC, " channels, got ", x.size(2));
  for (const at::Tensor* t : {&cls, &comp})
    TORCH_CHECK(t->dim() == 2 && t->scalar_type() == at::kLong && t->is_contiguous() && t->size(0) == x.size(0) &&
                    t->size(1) == x.size(1),
                "cls, comp: expected contiguous int64 tensors [B, N] matching x");
}

// Calls f with the channel count as a compile-time constant for 3 and 1 channels (the loops unroll),
// else with 0 (the count read at run time).
template <class F>
void by_channels(int C, F&& f) {
  if (C == 3) f(std::integral_constant<int, 3>{});
  else if (C == 1) f(std::integral_constant<int, 1>{});
  else f(std::integral_constant<int, 0>{});
}

// Sums per group of one image over its pixels: count, the colour (C) and, with `second`, the products
// x_i x_j (C * C), in double; row g of `out` (stride 1 + C + C * C) for g < 2K.
template <int CT>  // CT > 0: the channel count, known at compile time (loops unrolled); 0: C at run time
void group_sums(const float* x, const int64_t* cls, const int64_t* comp, int64_t N, int Crt, int K, bool second,
                std::vector<double>& out) {
  const int C = CT > 0 ? CT : Crt;
  const int F = 1 + C + C * C;
  const int G = 2 * K;
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  std::vector<double> part((size_t)chunks * G * F, 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double* s = part.data() + (size_t)c * G * F;
      const int64_t end = std::min(N, (c + 1) * kChunk);
      for (int64_t p = c * kChunk; p < end; ++p) {
        if (cls[p] >= 2) continue;
        double* row = s + (cls[p] * K + comp[p]) * F;
        const float* xp = x + p * C;
        row[0] += 1.0;
        for (int i = 0; i < C; ++i) {
          const double xi = xp[i];
          row[1 + i] += xi;
          if (second)
            for (int j = 0; j < C; ++j) row[1 + C + i * C + j] += xi * (double)xp[j];
        }
      }
    }
  });
  out.assign((size_t)G * F, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int i = 0; i < G * F; ++i) out[i] += part[(size_t)c * G * F + i];
}

template <int CT>
void lloyd_image(const float* xb, const int64_t* cb, int64_t* kb, int64_t N, int Crt, int K, int64_t iters) {
  const int C = CT > 0 ? CT : Crt;
  const int G = 2 * K, F = 1 + C + C * C;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> sums;
  std::vector<float> centre((size_t)G * C), norm(G);
  for (int64_t it = 0; it < iters; ++it) {
    group_sums<CT>(xb, cb, kb, N, C, K, false, sums);
    for (int g = 0; g < G; ++g) {  // centres in float32, |c|^2 in float32 (+inf for an empty group)
      const double n = sums[(size_t)g * F];
      float q = 0.f;
      for (int i = 0; i < C; ++i) {
        const float v = (float)(sums[(size_t)g * F + 1 + i] / std::max(n, 1.0));
        centre[(size_t)g * C + i] = v;
        q += v * v;
      }
      norm[g] = n == 0 ? inf : q;
    }
    // every pixel to the nearest centre of its class (cls 2 as background, as the tensor version)
    at::parallel_for(0, N, kChunk, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int base = (int)std::min<int64_t>(cb[p], 1) * K;
        const float* xp = xb + p * C;
        int best = 0;
        float bd = 0.f;
        for (int k = 0; k < K; ++k) {
          const float* ck = centre.data() + (size_t)(base + k) * C;
          float dot = 0.f;
          for (int i = 0; i < C; ++i) dot += xp[i] * ck[i];
          const float d = norm[base + k] - 2.f * dot;
          if (k == 0 || d < bd) {  // the first minimum, as argmin
            bd = d;
            best = k;
          }
        }
        kb[p] = best;
      }
    });
  }
}

at::Tensor grabcut_lloyd(at::Tensor x, at::Tensor cls, at::Tensor comp, int64_t K, int64_t iters) {
  check_inputs(x, cls, comp);
  TORCH_CHECK(K >= 1, "K: expected at least one component");
  const int64_t B = x.size(0), N = x.size(1);
  const int C = (int)x.size(2);
  at::Tensor out = comp.clone();
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x.data_ptr<float>() + b * N * C;
    const int64_t* cb = cls.data_ptr<int64_t>() + b * N;
    int64_t* kb = out.data_ptr<int64_t>() + b * N;
    by_channels(C, [&](auto ct) { lloyd_image<decltype(ct)::value>(xb, cb, kb, N, C, (int)K, iters); });
  }
  return out;
}

// Cholesky factor L (lower) of a C x C symmetric positive definite matrix, in place; returns false
// when a pivot is not positive.
bool cholesky(double* a, int C) {
  for (int j = 0; j < C; ++j) {
    double d = a[j * C + j];
    for (int k = 0; k < j; ++k) d -= a[j * C + k] * a[j * C + k];
    if (!(d > 0)) return false;
    d = std::sqrt(d);
    a[j * C + j] = d;
    for (int i = j + 1; i < C; ++i) {
      double s = a[i * C + j];
      for (int k = 0; k < j; ++k) s -= a[i * C + k] * a[j * C + k];
      a[i * C + j] = s / d;
    }
    for (int k = j + 1; k < C; ++k) a[j * C + k] = 0.0;
  }
  return true;
}

template <int CT>
void models_image(const float* xb, const int64_t* cb, const int64_t* kb, const uint8_t* sb, const bool* vb,
                  float* lb, int64_t* ob, int64_t* tb, int64_t N, int Crt, int K, int64_t hard, double cov_reg,
                  double scale, double data_cap) {
  const int C = CT > 0 ? CT : Crt;
  const int G = 2 * K, F = 1 + C + C * C;
  const float ninf = -std::numeric_limits<float>::infinity();
  const double log2pi = 1.8378770664093453;  // log(2 pi)
  std::vector<double> sums;
  group_sums<CT>(xb, cb, kb, N, C, K, true, sums);
  // per component, in float32 as the tensor version hands them on: y = Linv x - Linv mu, constant
  std::vector<float> linv((size_t)G * C * C), shift((size_t)G * C), cst(G);
  double tot[2] = {0, 0};
  for (int g = 0; g < G; ++g) tot[g / K] += sums[(size_t)g * F];
  for (int g = 0; g < G; ++g) {
    const double* s = sums.data() + (size_t)g * F;
    const double n = s[0], m = std::max(n, 1.0);
    double mean[kMaxC], a[kMaxC * kMaxC];
    for (int i = 0; i < C; ++i) mean[i] = s[1 + i] / m;
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < C; ++j)
        a[i * C + j] = (n > 0 ? s[1 + C + i * C + j] / m - mean[i] * mean[j] : (i == j ? 1.0 : 0.0)) +
                       (i == j ? cov_reg : 0.0);
    if (!cholesky(a, C)) {  // not expected (cov_reg > 0); an unusable component
      for (int i = 0; i < C * C; ++i) linv[(size_t)g * C * C + i] = 0.f;
      for (int i = 0; i < C; ++i) shift[(size_t)g * C + i] = 0.f;
      cst[g] = ninf;
      continue;
    }
    double inv[kMaxC * kMaxC] = {0};  // L^-1, lower triangular, by forward substitution
    for (int j = 0; j < C; ++j) {
      inv[j * C + j] = 1.0 / a[j * C + j];
      for (int i = j + 1; i < C; ++i) {
        double t = 0;
        for (int k = j; k < i; ++k) t += a[i * C + k] * inv[k * C + j];
        inv[i * C + j] = -t / a[i * C + i];
      }
    }
    double logdet = 0;
    for (int i = 0; i < C; ++i) logdet += std::log(a[i * C + i]);
    const float lognorm = (float)(-logdet - 0.5 * C * log2pi);
    const float logw = (float)std::log(n / std::max(tot[g / K], 1.0));  // -inf for an empty component
    float meanf[kMaxC];
    for (int i = 0; i < C; ++i) meanf[i] = (float)mean[i];
    for (int i = 0; i < C; ++i) {
      float t = 0.f;
      for (int j = 0; j < C; ++j) {
        const float l = (float)inv[i * C + j];
        linv[(size_t)g * C * C + i * C + j] = l;
        t += l * meanf[j];
      }
      shift[(size_t)g * C + i] = t;
    }
    cst[g] = logw + lognorm;
  }
  const float cap = (float)data_cap, sc = (float)scale;
  at::parallel_for(0, N, kChunk, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = xb + p * C;
      float* lp = lb + p * G;
      for (int g = 0; g < G; ++g) {
        const float* l = linv.data() + (size_t)g * C * C;
        float maha = 0.f;
        for (int i = 0; i < C; ++i) {
          float y = -shift[(size_t)g * C + i];
          for (int j = 0; j <= i; ++j) y += l[i * C + j] * xp[j];
          maha += y * y;
        }
        lp[g] = maha * -0.5f + cst[g];
      }
      float mix[2];
      for (int c = 0; c < 2; ++c) {  // logsumexp over the class's K components
        float top = ninf;
        for (int k = 0; k < K; ++k) top = std::max(top, lp[c * K + k]);
        if (!std::isfinite(top)) {
          mix[c] = top;
          continue;
        }
        float s = 0.f;  // terms below exp(-18) < 2e-8 vanish next to the top term's 1 in float32
        for (int k = 0; k < K; ++k) {
          const float v = lp[c * K + k] - top;
          if (v > -18.f) s += std::exp(v);
        }
        mix[c] = std::log(s) + top;
      }
      float d = mix[0] - mix[1];
      if (std::isnan(d)) d = 0.f;
      d = std::min(std::max(d, -cap), cap);
      int64_t q = (int64_t)std::nearbyint(d * sc);
      if (sb[p] == 1) q = hard;
      else if (sb[p] == 2) q = -hard;
      if (!vb[p]) q = 0;
      ob[p] = q > 0 ? q : 0;
      tb[p] = q < 0 ? -q : 0;
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> grabcut_models(at::Tensor x, at::Tensor cls, at::Tensor comp,
                                                              at::Tensor seeds, at::Tensor valid, int64_t K,
                                                              int64_t hard, double cov_reg, double scale,
                                                              double data_cap) {
  check_inputs(x, cls, comp);
  const int64_t B = x.size(0), N = x.size(1);
  const int C = (int)x.size(2);
  TORCH_CHECK(seeds.scalar_type() == at::kByte && seeds.is_contiguous() && seeds.numel() == B * N,
              "seeds: expected a contiguous uint8 tensor of B * N entries");
  TORCH_CHECK(valid.scalar_type() == at::kBool && valid.is_contiguous() && valid.numel() == B * N,
              "valid: expected a contiguous bool tensor of B * N entries");
  at::Tensor loglik = at::empty({B, N, 2, K}, x.options());
  at::Tensor src = at::empty({B, N}, cls.options());
  at::Tensor snk = at::empty({B, N}, cls.options());
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x.data_ptr<float>() + b * N * C;
    const int64_t* cb = cls.data_ptr<int64_t>() + b * N;
    const int64_t* kb = comp.data_ptr<int64_t>() + b * N;
    const uint8_t* sb = seeds.data_ptr<uint8_t>() + b * N;
    const bool* vb = valid.data_ptr<bool>() + b * N;
    float* lb = loglik.data_ptr<float>() + b * N * 2 * K;
    int64_t* ob = src.data_ptr<int64_t>() + b * N;
    int64_t* tb = snk.data_ptr<int64_t>() + b * N;
    by_channels(C, [&](auto ct) {
      models_image<decltype(ct)::value>(xb, cb, kb, sb, vb, lb, ob, tb, N, C, (int)K, hard, cov_reg, scale, data_cap);
    });
  }
  return {loglik, src, snk};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("grabcut_lloyd", &grabcut_lloyd);
  m.impl("grabcut_models", &grabcut_models);
}

}  // namespace torchcut_cpu
