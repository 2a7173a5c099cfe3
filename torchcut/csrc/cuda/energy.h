// Launchers of the CUDA kernels of the segmentation energy (energy.cu), called by energy_ops.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace torchcut_seg {

constexpr int kMaxOffsets = 13;  // 26-connected: 13 arc pairs

struct SegGrid {
  int64_t B, C, N, D, H, W;
};

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

}  // namespace torchcut_seg
