// Shared declarations of the CUDA general-graph push-relabel solver: plain C++ and the
// CUDA runtime only, so that csr_kernels.cu compiles without torch headers; csr_ops.cpp binds the op.
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "../layouts.h"

#define CSR_CUDA_CHECK(expr) TORCHCUT_CUDA_CHECK("torchcut_csr", expr)

#include <cstdint>

namespace torchcut_csr {

constexpr int kNumCtr = 8;    // device counters (int)
constexpr int kNumStats = torchcut::CsrCudaStats::kCount;  // TORCHCUT_CSR_CUDA_STATS (layouts.h)

// Push-relabel phase one in place (csr_kernels.cu). Buffers: h, q, act [max(n, 1)] int, c [kNumCtr] int
// on the device, hc [kNumCtr] int pinned. Inf = n + 2 is the height of nodes that cannot reach the sink.
// Throws std::runtime_error on a CUDA error; max_cycles hit is a status (CsrCudaStats::status = 1).
void solve(const int* rp, const int* hd, const int* rv, long long* r, long long* e, long long* s, int n, int* h,
           int* q, int* act, int* c, int* hc, int64_t period, int64_t iters, int64_t max_cycles, cudaStream_t stream,
           int sms, int64_t* stats);

}  // namespace torchcut_csr
