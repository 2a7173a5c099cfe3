// TORCHCUT_CUDA_CHECK(ext, expr): throw std::runtime_error naming the extension when a CUDA runtime call
// fails (the ops turn it into a status or a Python RuntimeError). Shared by the grid and CSR extensions.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define TORCHCUT_CUDA_CHECK(ext, expr)                                                                  \
  do {                                                                                                  \
    cudaError_t err__ = (expr);                                                                         \
    if (err__ != cudaSuccess)                                                                           \
      throw std::runtime_error(std::string(ext ": CUDA error ") + cudaGetErrorString(err__) + " at " #expr); \
  } while (0)
