// Expansion moves on the GPU in one pass each (torchcut.multilabel): building a move's graph together
// with the warm re-fit of the last flow, and applying a move where it lowers the energy. Plain C++ and
// the CUDA runtime (no torch headers); the bindings are in grid_ops.cpp.
//
// The graph built is exactly _Energy.move_graph's (Kolmogorov-Zabih construction, terminals netted),
// and the re-fit exactly torchcut.solvers.warm._refit's, so labels and energies are the same as the
// tensor-op path (the tests compare them).
#pragma once

#include <cuda_runtime.h>

namespace torchcut_grid {

// Offsets of a move grid: at most 13 (the 26-connected volume); larger ones use the tensor-op path.
constexpr int kMaxMoveOffsets = 13;

// How a pair term is read: W * V[a, b] in the capacity type (exact), rint(W * V[a, b]) from float64
// (quantised float energies), or W where a != b (Potts: W holds the pair costs).
enum PairMode { kPairExact = 0, kPairFloat = 1, kPairPotts = 2 };

struct MoveGeom {
  long long X, Y, Z, N;  // grid extent (x fastest), nodes per item
  int K;
  int dx[kMaxMoveOffsets], dy[kMaxMoveOffsets], dz[kMaxMoveOffsets];
};

// The energy: U [B, L, N] (capacity type), W [B, K, N] (capacity type; float64 for kPairFloat), V [L * L]
// (capacity type; float64 for kPairFloat).
struct MoveTerms {
  const void* U;
  const void* W;
  const void* V;
  long long B;
  int L;
  int mode;
};

// The last solve's state of the same moves (warm): forward capacities C0 [MB, K, N], residuals R0
// [MB, 2K, N], excess e0, sink residuals r0, source s0 and sink k0 terminals [MB, N].
struct MoveState {
  const void* C0;
  const void* R0;
  const long long* e0;
  const void* r0;
  const long long* s0;
  const long long* k0;
};

// A solve's start: forward capacities C [MB, K, N] (kept for the next re-fit), residuals R [MB, 2K, N],
// excess e, sink residuals r, terminals s and k [MB, N].
struct MoveOut {
  void* C;
  void* R;
  long long* e;
  void* r;
  long long* s;
  long long* k;
};

// Graph item i = m * B + b is move alpha[m] of item b from labels f [B, N]; warm: re-fit S to it.
void launch_move_build(cudaStream_t st, int cap_bytes, const MoveTerms& T, const long long* f, const long long* alpha,
                       long long M, const MoveGeom& G, bool warm, const MoveState& S, const MoveOut& O);

// The move to alpha where take [B, N] (true: take alpha) from f [B, N] with energies e [B]: f_out and
// e_out are the labels and energies after it for the items whose energy it lowers (the others unchanged).
// delta: [B] int64 zeros, a work buffer (each item's energy change).
void launch_move_apply(cudaStream_t st, int cap_bytes, const MoveTerms& T, const long long* f, const bool* take,
                       long long alpha, const long long* e, const MoveGeom& G, long long* delta, long long* f_out,
                       long long* e_out);

}  // namespace torchcut_grid
