// CUDA kernels of the segmentation energy (torch.ops.torchcut.seg_hist / seg_energy; wrappers in
// energy_ops.cpp): one pass each over the pixels, with the formulas of ../seg_energy.h. expf here is the
// function torch's float32 exp kernel calls (no fast-math flags in either build), so the capacities are the
// tensor version's bit for bit.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "../seg_energy.h"
#include "cuda_check.h"
#include "energy.h"

namespace torchcut_seg {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);  // grid-stride loops beyond
}

// One image (blockIdx.y unused): histogram of the seeded pixels, and the exact sum of sigma's terms over
// the axis-aligned pairs (p, p + e_axis), one atomic add per block.
template <int C>
__global__ void hist_kernel(SegGrid g, const float* __restrict__ x, const uint8_t* __restrict__ seeds,
                            const float* __restrict__ lo, const float* __restrict__ span, int64_t bins, int64_t nb,
                            float unit, double unit_wide, bool wide, bool sigma, int32_t* __restrict__ counts,
                            unsigned long long* __restrict__ total, unsigned long long* __restrict__ flag) {
  const int64_t N = g.N, HW = g.H * g.W;
  long long mine = 0;
  bool inf = false;
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < N; p += (int64_t)gridDim.x * blockDim.x) {
    const uint8_t s = seeds[p];
    if (s == 1 || s == 2) atomicAdd(counts + bin_index<C>(x + p, N, lo, span, bins) + (s == 2 ? nb : 0), 1);
    if (!sigma) continue;
    const int64_t xx = p % g.W, y = (p / g.W) % g.H, z = p / HW;
    const int64_t step[3] = {1, g.W, HW};
    const bool inside[3] = {xx + 1 < g.W, y + 1 < g.H, z + 1 < g.D};
    for (int a = 0; a < 3; ++a) {
      if (!inside[a]) continue;
      const double q = sigma_units(sq_diff<C>(x + p, x + p + step[a], N), unit, unit_wide, wide);
      if (isfinite(q))
        mine += (long long)q;
      else
        inf = true;
    }
  }
  if (!sigma) return;
  // block sum: warp shuffles, then one value per warp through shared memory
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, o);
  const bool any_inf = __any_sync(0xffffffffu, inf);
  __shared__ long long warp_sum[kThreads / 32];
  __shared__ int warp_inf[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_sum[warp] = mine;
    warp_inf[warp] = any_inf;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    long long sum = 0;
    int f = 0;
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) {
      sum += warp_sum[w];
      f |= warp_inf[w];
    }
    if (sum) atomicAdd(total, (unsigned long long)sum);
    if (f) atomicOr(flag, 1ull);
  }
}

struct Dirs {
  int o[kMaxOffsets][3];  // (dz, dy, dx)
  float w[kMaxOffsets];   // lam * scale / dist as float32; 0: the direction has no n-links
};

template <int C>
__device__ __forceinline__ int32_t link(const float* a, const float* b, int64_t N, float coef, float w) {
  return (int32_t)link_cap(expf(mul_rn(sq_diff<C>(a, b, N), coef)), w);
}

// One image: the terminal capacities of each pixel and both arcs of every direction stored at it.
template <int C>
__global__ void energy_kernel(SegGrid g, const float* __restrict__ x, const uint8_t* __restrict__ seeds,
                             const float* __restrict__ table, const float* __restrict__ lo,
                             const float* __restrict__ span, const float* __restrict__ coef_ptr, int64_t bins,
                             float scale, float hard, int K, Dirs dirs, int64_t* __restrict__ source,
                             int32_t* __restrict__ sink, int32_t* __restrict__ caps) {
  const int64_t N = g.N, HW = g.H * g.W;
  const float coef = *coef_ptr;
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < N; p += (int64_t)gridDim.x * blockDim.x) {
    const uint8_t s = seeds[p];
    if (s == 1) {
      source[p] = (int64_t)hard;
      sink[p] = 0;
    } else if (s == 2) {
      source[p] = 0;
      sink[p] = (int32_t)hard;
    } else {
      const float llr = table[bin_index<C>(x + p, N, lo, span, bins)];
      source[p] = (int64_t)data_cap(llr, scale);
      sink[p] = (int32_t)data_cap(-llr, scale);
    }
    const int64_t xx = p % g.W, y = (p / g.W) % g.H, z = p / HW;
    for (int k = 0; k < K; ++k) {
      const int dz = dirs.o[k][0], dy = dirs.o[k][1], dx = dirs.o[k][2];
      const int64_t shift = dz * HW + dy * g.W + dx;
      int32_t fwd = 0, bwd = 0;
      if (dirs.w[k] > 0.f) {
        // arc p -> p + o (the pair (p, p + o)), and arc p -> p - o (the pair (p - o, p))
        if (z + dz >= 0 && z + dz < g.D && y + dy >= 0 && y + dy < g.H && xx + dx >= 0 && xx + dx < g.W)
          fwd = link<C>(x + p, x + p + shift, N, coef, dirs.w[k]);
        if (z - dz >= 0 && z - dz < g.D && y - dy >= 0 && y - dy < g.H && xx - dx >= 0 && xx - dx < g.W)
          bwd = link<C>(x + p - shift, x + p, N, coef, dirs.w[k]);
      }
      caps[k * N + p] = fwd;
      caps[(K + k) * N + p] = bwd;
    }
  }
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

// Order-preserving int32 key of a float's bits (negative floats have their magnitude bits flipped), so
// that atomicMin / atomicMax on keys give the float minimum / maximum; the map is its own inverse.
__device__ __forceinline__ int float_key(float v) {
  const int i = __float_as_int(v);
  return i >= 0 ? i : i ^ 0x7fffffff;
}

// info (int64, see launch_seg_check) before the pass: no bad values, the seed range empty, no seeds, and
// the colour ranges empty (keys of +inf / -inf).
__global__ void check_init_kernel(long long* info, int64_t B, int64_t C) {
  const int64_t n = 3 + 2 * B + 2 * B * C, lo = 3 + 2 * B, hi = lo + B * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    long long v = 0;
    if (i == 1) v = LLONG_MAX;
    if (i == 2) v = LLONG_MIN;
    if (i >= lo && i < hi) v = float_key(INFINITY);
    if (i >= hi) v = float_key(-INFINITY);
    info[i] = v;
  }
}

// One image per blockIdx.y: non-finite values, seed range and counts, colour range per channel (reduced
// in shared memory, then one global atomic each per block), and the labels as uint8 when out8.
template <int C, typename S>
__global__ void check_kernel(int64_t N, const float* __restrict__ x, const S* __restrict__ seeds, bool finite,
                             uint8_t* __restrict__ out8, long long* __restrict__ info, int64_t B, int64_t b0) {
  const int64_t b = b0 + blockIdx.y;
  x += b * C * N;
  seeds += b * N;
  __shared__ int s_lo[C], s_hi[C];
  __shared__ unsigned long long s_bad, s_obj, s_bkg;
  __shared__ long long s_min, s_max;
  if (threadIdx.x == 0) {
    for (int c = 0; c < C; ++c) {
      s_lo[c] = float_key(INFINITY);
      s_hi[c] = float_key(-INFINITY);
    }
    s_bad = s_obj = s_bkg = 0;
    s_min = LLONG_MAX;
    s_max = LLONG_MIN;
  }
  __syncthreads();
  float lo[C], hi[C];
  for (int c = 0; c < C; ++c) {
    lo[c] = INFINITY;
    hi[c] = -INFINITY;
  }
  unsigned int bad = 0, obj = 0, bkg = 0;
  long long mn = LLONG_MAX, mx = LLONG_MIN;
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < N; p += (int64_t)gridDim.x * blockDim.x) {
    for (int c = 0; c < C; ++c) {
      const float v = x[c * N + p];
      if (finite) bad += !isfinite(v);
      lo[c] = v < lo[c] ? v : lo[c];
      hi[c] = v > hi[c] ? v : hi[c];
    }
    const long long s = (long long)seeds[p];
    mn = s < mn ? s : mn;
    mx = s > mx ? s : mx;
    obj += s == 1;
    bkg += s == 2;
    if (out8) out8[b * N + p] = (uint8_t)seeds[p];
  }
  for (int c = 0; c < C; ++c) {
    atomicMin(s_lo + c, float_key(lo[c]));
    atomicMax(s_hi + c, float_key(hi[c]));
  }
  if (bad) atomicAdd(&s_bad, (unsigned long long)bad);
  if (obj) atomicAdd(&s_obj, (unsigned long long)obj);
  if (bkg) atomicAdd(&s_bkg, (unsigned long long)bkg);
  atomicMin(&s_min, mn);
  atomicMax(&s_max, mx);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_bad) atomicAdd(reinterpret_cast<unsigned long long*>(info), s_bad);
    atomicMin(info + 1, s_min);
    atomicMax(info + 2, s_max);
    if (s_obj) atomicAdd(reinterpret_cast<unsigned long long*>(info + 3 + 2 * b), s_obj);
    if (s_bkg) atomicAdd(reinterpret_cast<unsigned long long*>(info + 4 + 2 * b), s_bkg);
    for (int c = 0; c < C; ++c) {
      atomicMin(info + 3 + 2 * B + b * C + c, (long long)s_lo[c]);
      atomicMax(info + 3 + 2 * B + B * C + b * C + c, (long long)s_hi[c]);
    }
  }
}

// The colour range's keys back to float bits (sign-extended int32, as the CPU op writes them).
__global__ void check_finish_kernel(long long* info, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    info[i] = (long long)float_key(__int_as_float((int)info[i]));
}

}  // namespace

template <typename S>
void launch_seg_check(cudaStream_t stream, const SegGrid& g, const float* x, const S* seeds, bool finite,
                      uint8_t* out8, long long* info) {
  const int64_t n = 3 + 2 * g.B + 2 * g.B * g.C;
  check_init_kernel<<<blocks_for(n), kThreads, 0, stream>>>(info, g.B, g.C);
  TORCHCUT_CUDA_CHECK("torchcut.seg_check", cudaGetLastError());
  const int64_t per = 65535;  // blockIdx.y: the image, at most 65535 a launch
  for (int64_t b0 = 0; b0 < g.B; b0 += per) {
    const int64_t nb = g.B - b0 < per ? g.B - b0 : per;
    const dim3 grid(blocks_for(g.N), (unsigned)nb);
    with_channels(g.C, [&](auto c) {
      constexpr int kC = decltype(c)::value;
      check_kernel<kC, S><<<grid, kThreads, 0, stream>>>(g.N, x, seeds, finite, out8, info, g.B, b0);
    });
    TORCHCUT_CUDA_CHECK("torchcut.seg_check", cudaGetLastError());
  }
  check_finish_kernel<<<blocks_for(2 * g.B * g.C), kThreads, 0, stream>>>(info + 3 + 2 * g.B, 2 * g.B * g.C);
  TORCHCUT_CUDA_CHECK("torchcut.seg_check", cudaGetLastError());
}

template void launch_seg_check<uint8_t>(cudaStream_t, const SegGrid&, const float*, const uint8_t*, bool, uint8_t*,
                                        long long*);
template void launch_seg_check<int8_t>(cudaStream_t, const SegGrid&, const float*, const int8_t*, bool, uint8_t*,
                                       long long*);
template void launch_seg_check<int16_t>(cudaStream_t, const SegGrid&, const float*, const int16_t*, bool, uint8_t*,
                                        long long*);
template void launch_seg_check<int32_t>(cudaStream_t, const SegGrid&, const float*, const int32_t*, bool, uint8_t*,
                                        long long*);
template void launch_seg_check<int64_t>(cudaStream_t, const SegGrid&, const float*, const int64_t*, bool, uint8_t*,
                                        long long*);

void launch_seg_hist(cudaStream_t stream, const SegGrid& g, const float* x, const uint8_t* seeds, const float* lo,
                     const float* span, int64_t bins, const double* unit, bool wide, bool sigma, int32_t* counts,
                     unsigned long long* sums) {
  int64_t nb = 1;
  for (int64_t c = 0; c < g.C; ++c) nb *= bins;
  for (int64_t b = 0; b < g.B; ++b) {
    with_channels(g.C, [&](auto c) {
      hist_kernel<decltype(c)::value><<<blocks_for(g.N), kThreads, 0, stream>>>(
          g, x + b * g.C * g.N, seeds + b * g.N, lo + b * g.C, span + b * g.C, bins, nb, (float)unit[b], unit[b], wide,
          sigma, counts + b * 2 * nb, sums + b, sums + g.B + b);
    });
    TORCHCUT_CUDA_CHECK("torchcut.seg_hist", cudaGetLastError());
  }
}

void launch_seg_energy(cudaStream_t stream, const SegGrid& g, const float* x, const uint8_t* seeds, const float* table,
                       int64_t nb, const float* lo, const float* span, const float* coef, int64_t bins, float scale,
                       float hard, int K, const int* offsets, const float* weights, int64_t* source, int32_t* sink,
                       int32_t* caps) {
  if (K > kMaxOffsets) throw std::runtime_error("torchcut.seg_energy: at most 13 offsets");
  Dirs dirs;
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < 3; ++j) dirs.o[k][j] = offsets[3 * k + j];
    dirs.w[k] = weights[k];
  }
  for (int64_t b = 0; b < g.B; ++b) {
    with_channels(g.C, [&](auto c) {
      energy_kernel<decltype(c)::value><<<blocks_for(g.N), kThreads, 0, stream>>>(
          g, x + b * g.C * g.N, seeds + b * g.N, table + b * nb, lo + b * g.C, span + b * g.C, coef + b, bins, scale,
          hard, K, dirs, source + b * g.N, sink + b * g.N, caps + b * 2 * K * g.N);
    });
    TORCHCUT_CUDA_CHECK("torchcut.seg_energy", cudaGetLastError());
  }
}

namespace {
// The log-ratio table of seed histograms whose counts keep the blur exact (seg_table; energy.h). Integers
// until the division: a blurred count is (the sum of its 3^C neighbours' counts, each times 2 per axis along
// which it is the bin itself, 4 where the axis has one bin and no blur) / 4^C, below 2^24 / 4^C, so its
// float32 value is the tensor operations' exact one; so is the total, (each count times 3 or 4 per axis: 3
// at the axis' ends) / 4^C. Then one rounding per operation, as torch's kernels round them (no contraction
// into fused multiply-adds), and logf, the function of torch's float32 log kernel.
__global__ void table_totals_kernel(const int32_t* __restrict__ counts, int64_t nb, int bins, int C,
                                    long long* __restrict__ totals) {
  const int32_t* row = counts + blockIdx.x * nb;
  long long mine = 0;
  for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) {
    const int32_t v = row[i];
    if (v == 0) continue;
    long long w = v;
    for (int64_t a = 0, rest = i; a < C; ++a, rest /= bins) {
      const int64_t d = rest % bins;
      w *= bins > 1 && (d == 0 || d == bins - 1) ? 3 : 4;  // one bin: no blur
    }
    mine += w;
  }
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, o);
  __shared__ long long warp_sum[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long sum = 0;
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) sum += warp_sum[w];
    totals[blockIdx.x] = sum;
  }
}

__global__ void table_kernel(const int32_t* __restrict__ counts, int64_t nb, int bins, int C,
                             const long long* __restrict__ totals, float keep, float floor, float* __restrict__ table) {
  const int64_t b = blockIdx.y;
  const int32_t* obj = counts + 2 * b * nb;
  const int32_t* bkg = obj + nb;
  const float unit = ldexpf(1.0f, -2 * C);  // 4^-C: exact products
  const float total_obj = (float)totals[2 * b] * unit, total_bkg = (float)totals[2 * b + 1] * unit;
  int around = 1;
  for (int a = 0; a < C; ++a) around *= 3;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < nb; c += (int64_t)gridDim.x * blockDim.x) {
    int digit[kMaxTableChannels];
    int64_t step[kMaxTableChannels];
    for (int64_t a = 0, rest = c, s = 1; a < C; ++a, rest /= bins, s *= bins) digit[a] = (int)(rest % bins), step[a] = s;
    long long sum_obj = 0, sum_bkg = 0;
    for (int o = 0; o < around; ++o) {
      int64_t at = c;
      long long w = 1;
      bool inside = true;
      for (int a = 0, rest = o; a < C; ++a, rest /= 3) {
        const int d = rest % 3 - 1, to = digit[a] + d;
        if (to < 0 || to >= bins) {
          inside = false;
          break;
        }
        at += d * step[a];
        w *= d != 0 ? 1 : bins > 1 ? 2 : 4;  // one bin: no blur
      }
      if (!inside) continue;
      sum_obj += w * obj[at];
      sum_bkg += w * bkg[at];
    }
    const float p_obj = __fadd_rn(__fmul_rn(__fdiv_rn((float)sum_obj * unit, total_obj), keep), floor);
    const float p_bkg = __fadd_rn(__fmul_rn(__fdiv_rn((float)sum_bkg * unit, total_bkg), keep), floor);
    table[b * nb + c] = __fsub_rn(logf(p_obj), logf(p_bkg));
  }
}
}  // namespace

void launch_seg_table(cudaStream_t stream, int64_t B, int64_t nb, int64_t bins, int64_t C, float keep, float floor,
                      const int32_t* counts, long long* totals, float* table) {
  table_totals_kernel<<<(unsigned)(2 * B), kThreads, 0, stream>>>(counts, nb, (int)bins, (int)C, totals);
  TORCHCUT_CUDA_CHECK("torchcut.seg_table", cudaGetLastError());
  const dim3 grid((unsigned)blocks_for(nb), (unsigned)B);
  table_kernel<<<grid, kThreads, 0, stream>>>(counts, nb, (int)bins, (int)C, totals, keep, floor, table);
  TORCHCUT_CUDA_CHECK("torchcut.seg_table", cudaGetLastError());
}

namespace {
// sigma and its coefficient of one image from the exact sums (seg_energy.h, sigma_from_sum): one thread
__global__ void sigma_kernel(const long long* sums, const long long* flags, int e, long long count, float* sig,
                             float* coef) {
  const float s = sigma_from_sum(*sums, *flags != 0, e, count);
  *sig = s;
  *coef = sigma_coef(s);
}
}  // namespace

void launch_seg_sigma(cudaStream_t stream, int64_t B, const long long* sums, const int64_t* exps, int64_t count,
                      float* out) {
  for (int64_t b = 0; b < B; ++b) {
    sigma_kernel<<<1, 1, 0, stream>>>(sums + b, sums + B + b, (int)exps[b], count, out + b, out + B + b);
    TORCHCUT_CUDA_CHECK("torchcut.seg_sigma", cudaGetLastError());
  }
}

}  // namespace torchcut_seg
