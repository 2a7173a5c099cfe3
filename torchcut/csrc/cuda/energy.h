// Launchers of the CUDA kernels of the segmentation energy (energy.cu), called by energy_ops.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace torchcut_seg {

constexpr int kMaxOffsets = 13;  // 26-connected: 13 arc pairs

struct SegGrid {
  int64_t B, C, N, D, H, W;
};

// info int64 [3 + 2B + 2BC]: non-finite values of x (counted when `finite`), the least and the largest
// seed label, the object and background seed counts of each image, then the colour range of each image and
// channel (lo, then hi) as float32 bits; out8 [B, N] (or null): the labels as uint8. S: the seeds' type.
template <typename S>
void launch_seg_check(cudaStream_t stream, const SegGrid& g, const float* x, const S* seeds, bool finite,
                      uint8_t* out8, long long* info);

// counts [B, 2, nb] int32 (zeroed), sums [2, B] int64 (zeroed): the seed histograms and, when `sigma`,
// the exact sums of sigma's estimate and their non-finite flags; unit: B host values (one launch per image)
void launch_seg_hist(cudaStream_t stream, const SegGrid& g, const float* x, const uint8_t* seeds, const float* lo,
                     const float* span, int64_t bins, const double* unit, bool wide, bool sigma, int32_t* counts,
                     unsigned long long* sums);

// source [B, N] int64, sink [B, N] int32, caps [B, 2K, N] int32, every value written
void launch_seg_energy(cudaStream_t stream, const SegGrid& g, const float* x, const uint8_t* seeds, const float* table,
                       int64_t nb, const float* lo, const float* span, const float* coef, int64_t bins, float scale,
                       float hard, int K, const int* offsets, const float* weights, int64_t* source, int32_t* sink,
                       int32_t* caps);

// The log-ratio table [B, nb] float32 of the seed histograms counts [B, 2, nb] int32 (nb = bins^C), each
// image's seed counts below 2^(24 - 2C) per class (the blur exact in float32); totals: 2B int64 of scratch.
// keep, floor: the mixing's 1 - uniform and uniform / nb, as float32.
constexpr int kMaxTableChannels = 4;
void launch_seg_table(cudaStream_t stream, int64_t B, int64_t nb, int64_t bins, int64_t C, float keep, float floor,
                      const int32_t* counts, long long* totals, float* table);

// out [2, B] float32: sigma of each image and -0.5 / sigma**2 from seg_hist's sums [2, B] (one launch per image)
void launch_seg_sigma(cudaStream_t stream, int64_t B, const long long* sums, const int64_t* exps, int64_t count,
                      float* out);

}  // namespace torchcut_seg
