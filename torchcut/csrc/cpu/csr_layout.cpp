// The CPU implementation of torch.ops.torchcut.pairs_csr (schema in torchcut.cpp): the CSR layout of a
// FlowGraph built from its arc lists.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace torchcut_cpu {
namespace {

// pairs_csr: graph.py's FlowGraph._build for integer capacities on the CPU, in O(E + N) passes instead
// of ~20 tensor ops (measured 25 -> ~3 ms for a BVZ move of 220k arcs). Arcs u -> v (capacity cf,
// reverse cb) are oriented as pairs (lo, hi), self-loops dropped, duplicates summed; pairs come out
// sorted by (lo, hi) (a counting sort by lo, then each lo's few arcs sorted by hi). CSR row p holds p's
// arcs to lower nodes (backward arcs of pairs (q, p), by q) then to higher ones (forward arcs of pairs
// (p, q), by q): the layout and order of the tensor version, tensor for tensor.
// Returns row_ptr [N + 1], tail, head, rev, caps (int64) [2M], pair_fwd, pair_bwd (arc index of lo -> hi
// and hi -> lo) [M], and the pairs' capacities fwd, bwd [M].
std::vector<at::Tensor> pairs_csr(at::Tensor u, at::Tensor v, at::Tensor cf, at::Tensor cb, int64_t N) {
  for (const auto* t : {&u, &v, &cf, &cb})
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kLong && t->dim() == 1,
                "torchcut_cpu.pairs_csr: expected contiguous 1-D int64 CPU tensors");
  const int64_t E = u.numel();
  TORCH_CHECK(v.numel() == E && cf.numel() == E && cb.numel() == E, "torchcut_cpu.pairs_csr: inconsistent sizes");
  TORCH_CHECK(N >= 0, "torchcut_cpu.pairs_csr: N: expected >= 0, got ", N);
  const int64_t *U = u.data_ptr<int64_t>(), *V = v.data_ptr<int64_t>();
  const int64_t *F = cf.data_ptr<int64_t>(), *R = cb.data_ptr<int64_t>();
  // counting sort of the non-loop arcs by lo
  std::vector<int64_t> start(N + 1, 0);
  for (int64_t i = 0; i < E; ++i) {
    TORCH_CHECK(U[i] >= 0 && U[i] < N && V[i] >= 0 && V[i] < N, "torchcut_cpu.pairs_csr: arc ", i, " (", U[i], " -> ",
                V[i], ") has a node outside [0, ", N, ")");
    if (U[i] != V[i]) ++start[std::min(U[i], V[i]) + 1];
  }
  for (int64_t p = 0; p < N; ++p) start[p + 1] += start[p];
  struct Ent {
    int64_t hi, f, b;
  };
  std::vector<Ent> ent(start[N]);
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < E; ++i) {
      if (U[i] == V[i]) continue;
      const bool swap = U[i] > V[i];
      const int64_t lo = swap ? V[i] : U[i];
      ent[next[lo]++] = {swap ? U[i] : V[i], swap ? R[i] : F[i], swap ? F[i] : R[i]};
    }
  }
  // each lo's arcs by hi, duplicates summed into pairs (sorted by (lo, hi))
  std::vector<int64_t> p_lo, p_hi, p_f, p_b;
  p_lo.reserve(ent.size()), p_hi.reserve(ent.size()), p_f.reserve(ent.size()), p_b.reserve(ent.size());
  std::vector<int64_t> n_f(N, 0), n_b(N, 0);
  for (int64_t lo = 0; lo < N; ++lo) {
    Ent* a = ent.data() + start[lo];
    Ent* z = ent.data() + start[lo + 1];
    if (z - a > 1) std::sort(a, z, [](const Ent& x, const Ent& y) { return x.hi < y.hi; });
    for (; a < z; ++a) {
      if (!p_hi.empty() && p_lo.back() == lo && p_hi.back() == a->hi) {
        p_f.back() += a->f, p_b.back() += a->b;
        continue;
      }
      p_lo.push_back(lo), p_hi.push_back(a->hi), p_f.push_back(a->f), p_b.push_back(a->b);
      ++n_f[lo], ++n_b[a->hi];
    }
  }
  const int64_t M = static_cast<int64_t>(p_lo.size()), A = 2 * M;
  const auto lopt = u.options();
  at::Tensor row_ptr = at::empty({N + 1}, lopt), tail = at::empty({A}, lopt), head = at::empty({A}, lopt),
             rev = at::empty({A}, lopt), caps = at::empty({A}, lopt), pos_f = at::empty({M}, lopt),
             pos_b = at::empty({M}, lopt), fwd = at::empty({M}, lopt), bwd = at::empty({M}, lopt);
  int64_t* rp = row_ptr.data_ptr<int64_t>();
  rp[0] = 0;
  for (int64_t p = 0; p < N; ++p) rp[p + 1] = rp[p] + n_b[p] + n_f[p];
  std::vector<int64_t> f_next(N), b_next(N);
  for (int64_t p = 0; p < N; ++p) b_next[p] = rp[p], f_next[p] = rp[p] + n_b[p];
  int64_t *T = tail.data_ptr<int64_t>(), *H = head.data_ptr<int64_t>(), *RV = rev.data_ptr<int64_t>();
  int64_t *C = caps.data_ptr<int64_t>(), *PF = pos_f.data_ptr<int64_t>(), *PB = pos_b.data_ptr<int64_t>();
  int64_t *FW = fwd.data_ptr<int64_t>(), *BW = bwd.data_ptr<int64_t>();
  for (int64_t j = 0; j < M; ++j) {  // pairs in (lo, hi) order: each hi's backward arcs come out by lo
    const int64_t lo = p_lo[j], hi = p_hi[j], kf = f_next[lo]++, kb = b_next[hi]++;
    PF[j] = kf, PB[j] = kb, FW[j] = p_f[j], BW[j] = p_b[j];
    T[kf] = lo, H[kf] = hi, C[kf] = p_f[j], RV[kf] = kb;
    T[kb] = hi, H[kb] = lo, C[kb] = p_b[j], RV[kb] = kf;
  }
  return {row_ptr, tail, head, rev, caps, pos_f, pos_b, fwd, bwd};
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("pairs_csr", &torchcut_cpu::pairs_csr);
}
