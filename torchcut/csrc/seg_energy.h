// The per-pixel formulas of the seeded segmentation energy (torchcut/energy.py), shared by the CPU
// (cpu/energy.cpp) and CUDA (cuda/energy.cu) implementations of the seg_ ops.
//
// Every formula repeats the float32 operations of the tensor version in the same order, one rounding
// per operation: a product and a sum are never fused into one multiply-add (device code uses the _rn
// intrinsics, which nvcc does not contract; the CPU library is compiled with -ffp-contract=off), so
// the integer capacities are the tensor version's bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define SEG_HD __host__ __device__ __forceinline__
#else
#define SEG_HD inline __attribute__((always_inline))
#endif

namespace torchcut_seg {

// Channels handled by the ops: torch sums the squares of up to 4 channels in order, c = 0, 1, 2, 3
// (checked by the tests); the energy of more channels stays with the tensor version.
constexpr int kMaxChannels = 4;

SEG_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

SEG_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

SEG_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

SEG_HD float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// round(v) (to nearest, ties to even, as torch.round) of a float32 v >= 0. The CPU form adds and
// subtracts 2**23, which rounds as rint does in the default rounding mode, and vectorises without SSE4.1.
SEG_HD float rint_pos(float v) {
#ifdef __CUDA_ARCH__
  return rintf(v);
#else
  return v < 8388608.f ? (v + 8388608.f) - 8388608.f : v;
#endif
}

// Colour bin of the pixel whose channel c lies at x[c * stride]:
// floor((v - lo) / span * bins) clamped to [0, bins - 1], channel 0 most significant (energy._bin_index).
// Clamping first and truncating after gives the same integer as floor and clamp.
template <int C>
SEG_HD int64_t bin_index(const float* x, int64_t stride, const float* lo, const float* span, int64_t bins) {
  const float fb = (float)bins;
  const float top = (float)(bins - 1);
  int64_t idx = 0;
  for (int c = 0; c < C; ++c) {
    float t = mul_rn(div_rn(sub_rn(x[c * stride], lo[c]), span[c]), fb);
    t = t > 0.f ? t : 0.f;
    t = t < top ? t : top;
    idx = idx * bins + (int64_t)t;
  }
  return idx;
}

// ||I_p - I_q||^2 of two pixels (energy._sq_diff): the difference of each channel squared, summed
// in channel order.
template <int C>
SEG_HD float sq_diff(const float* p, const float* q, int64_t stride) {
  float d = sub_rn(p[0], q[0]);
  float s = mul_rn(d, d);
  for (int c = 1; c < C; ++c) {
    d = sub_rn(p[c * stride], q[c * stride]);
    s = add_rn(s, mul_rn(d, d));
  }
  return s;
}

// One terminal capacity of the data term: round(max(v, 0) * scale) (energy._data_caps).
SEG_HD float data_cap(float v, float scale) { return rint_pos(mul_rn(v > 0.f ? v : 0.f, scale)); }

// One n-link capacity from its exponential: round(e * w) (w = lam * scale / dist as float32).
SEG_HD float link_cap(float e, float w) { return rint_pos(mul_rn(e, w)); }

// A squared difference in units of 2**e, rounded (energy._sigma_sums): float32 while the unit is a
// normal float32 (wide = false), else in double.
SEG_HD double sigma_units(float d2, float unit, double unit_wide, bool wide) {
  return wide ? nearbyint((double)d2 * unit_wide) : (double)rint_pos(mul_rn(d2, unit));
}

// sigma from the exact sum of sigma's estimate (energy._sigma_floats and energy._sigma_coef), on the device
// that holds the sum, so that no value is read back: s >= 0 is the sum in units of 2**e of `count`
// squared differences (inf: it overflowed). The mean s * 2**e / count is rounded once to double, to
// nearest with ties to even, as Python's float(Fraction(s) * 2**e / count) rounds it: the integer
// quotient is extended by long division until it holds 55 to 63 bits, the remainder is the sticky bit.
// Then its square root in double, rounded to float32; 1 where the mean is 0. The caller keeps
// |e| <= 900, so the mean is a normal double (no second rounding into the subnormal range).
SEG_HD float sigma_from_sum(int64_t s, bool inf, int e, int64_t count) {
  if (inf) return INFINITY;
  if (s <= 0 || count <= 0) return 1.0f;
  const uint64_t n = (uint64_t)count;
  uint64_t q = (uint64_t)s / n, rem = (uint64_t)s % n;
  int k = 0;  // quotient bits below the binary point
  while (q < (uint64_t{1} << 54)) {
    rem <<= 1;  // rem < n < 2**62: no overflow
    const uint64_t bit = rem >= n ? 1 : 0;
    rem -= bit * n;
    q = (q << 1) | bit;
    ++k;
  }
  int len = 0;
  for (uint64_t t = q; t; t >>= 1) ++len;
  const int extra = len - 53;  // 2 to 10 bits below the kept 53
  const uint64_t low = q & ((uint64_t{1} << extra) - 1), half = uint64_t{1} << (extra - 1);
  uint64_t m = q >> extra;
  if (low > half || (low == half && (rem != 0 || (m & 1)))) ++m;
  const double mean = ldexp((double)m, extra - k + e);
#ifdef __CUDA_ARCH__
  return __double2float_rn(__dsqrt_rn(mean));
#else
  return (float)std::sqrt(mean);
#endif
}

// The exponent's coefficient of the n-links from sigma: -0.5 / sigma**2, rounded as torch's float32 ops
// round -0.5 / sig.square() (a square, a reciprocal, an exact product by -0.5).
SEG_HD float sigma_coef(float sig) { return mul_rn(div_rn(1.0f, mul_rn(sig, sig)), -0.5f); }

}  // namespace torchcut_seg
