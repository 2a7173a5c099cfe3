// The CPU implementations of torch.ops.torchcut.pairs_csr and grid_pairs_csr (schemas in torchcut.cpp): the
// CSR layout of a FlowGraph built from its arc lists, or from a grid's structure.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
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
  // each lo's arcs by hi (insertion sort: a lo has a few), duplicates summed into pairs (sorted by (lo, hi)),
  // written in place over ent's front; the pairs' lo into p_lo
  const int64_t total = start[N];
  std::vector<int64_t> p_lo(total), n_f(N, 0), n_b(N, 0);
  int64_t M = 0;
  for (int64_t lo = 0; lo < N; ++lo) {
    Ent* a = ent.data() + start[lo];
    Ent* z = ent.data() + start[lo + 1];
    if (z - a > 16) {
      std::sort(a, z, [](const Ent& x, const Ent& y) { return x.hi < y.hi; });
    } else {
      for (Ent* i = a + 1; i < z; ++i) {
        const Ent e = *i;
        Ent* j = i;
        for (; j > a && (j - 1)->hi > e.hi; --j) *j = *(j - 1);
        *j = e;
      }
    }
    const int64_t first = M;
    for (; a < z; ++a) {
      if (M > first && ent[M - 1].hi == a->hi) {
        ent[M - 1].f += a->f, ent[M - 1].b += a->b;
        continue;
      }
      ent[M] = *a, p_lo[M] = lo, ++M;
      ++n_f[lo], ++n_b[a->hi];
    }
  }
  const int64_t A = 2 * M;
  const auto lopt = u.options();
  at::Tensor row_ptr = at::empty({N + 1}, lopt), tail = at::empty({A}, lopt), head = at::empty({A}, lopt),
             rev = at::empty({A}, lopt), caps = at::empty({A}, lopt), pos_f = at::empty({M}, lopt),
             pos_b = at::empty({M}, lopt), fwd = at::empty({M}, lopt), bwd = at::empty({M}, lopt);
  int64_t* rp = row_ptr.data_ptr<int64_t>();
  rp[0] = 0;
  for (int64_t p = 0; p < N; ++p) rp[p + 1] = rp[p] + n_b[p] + n_f[p];
  // the arcs' places: pairs in (lo, hi) order, so lo's forward arcs fill its row after its n_b backward
  // ones, and each hi's backward arcs come out by lo (n_f, n_b reused as the next free place)
  int64_t *PF = pos_f.data_ptr<int64_t>(), *PB = pos_b.data_ptr<int64_t>();
  for (int64_t p = 0; p < N; ++p) n_f[p] = rp[p] + n_b[p], n_b[p] = rp[p];
  for (int64_t j = 0; j < M; ++j) PF[j] = n_f[p_lo[j]]++, PB[j] = n_b[ent[j].hi]++;
  int64_t *T = tail.data_ptr<int64_t>(), *H = head.data_ptr<int64_t>(), *RV = rev.data_ptr<int64_t>();
  int64_t *C = caps.data_ptr<int64_t>(), *FW = fwd.data_ptr<int64_t>(), *BW = bwd.data_ptr<int64_t>();
  for (int64_t j = 0; j < M; ++j) {  // forward arcs: in order along the rows
    const int64_t kf = PF[j];
    FW[j] = ent[j].f, BW[j] = ent[j].b;
    T[kf] = p_lo[j], H[kf] = ent[j].hi, C[kf] = ent[j].f, RV[kf] = PB[j];
  }
  for (int64_t j = 0; j < M; ++j) {  // backward arcs: scattered over the higher nodes' rows
    const int64_t kb = PB[j];
    T[kb] = ent[j].hi, H[kb] = p_lo[j], C[kb] = ent[j].b, RV[kb] = PF[j];
  }
  return {row_ptr, tail, head, rev, caps, pos_f, pos_b, fwd, bwd};
}

// grid_pairs_csr: pairs_csr's outputs for the pairs (p, p + o_k) of one grid, p and p + o_k inside it
// (zero capacities included), from the grid's structure: no sort. caps [2K, N] in the solvers' layout
// (arc p -> p + o_k at [k, p], arc p + o_k -> p at [K + k, p + o_k]); shape 2 or 3 dims; offsets K x ndim
// ints whose flat offsets f_k are positive and distinct (the caller checks: one neighbour above p per
// offset). Pairs by (lo, hi) = by (p, f_k); CSR row p holds its arcs to lower nodes p - f_k by decreasing
// f_k, then those to higher nodes by increasing f_k, as pairs_csr lays them out.
template <typename CapT>
std::vector<at::Tensor> grid_pairs_impl(const at::Tensor& caps_t, int64_t D, int64_t H, int64_t W,
                                        const std::vector<std::array<int64_t, 3>>& off) {
  const int64_t N = D * H * W, K = static_cast<int64_t>(off.size());
  const CapT* caps = caps_t.data_ptr<CapT>();
  std::vector<int64_t> flat(K);
  for (int64_t k = 0; k < K; ++k) flat[k] = (off[k][0] * H + off[k][1]) * W + off[k][2];
  auto inside = [&](int64_t z, int64_t y, int64_t x, int64_t k, int64_t sign) {
    const int64_t a = z + sign * off[k][0], b = y + sign * off[k][1], c = x + sign * off[k][2];
    return a >= 0 && a < D && b >= 0 && b < H && c >= 0 && c < W;
  };
  // per node: forward arcs (p -> p + o_k inside) and backward ones (p - o_k inside), as K-bit masks
  std::vector<uint32_t> fmask(N), bmask(N);
  std::vector<int64_t> row(N + 1), first_pair(N + 1);
  at::parallel_for(0, D * H, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t z = r / H, y = r % H;
      for (int64_t x = 0; x < W; ++x) {
        uint32_t f = 0, b = 0;
        for (int64_t k = 0; k < K; ++k) {
          f |= (uint32_t)inside(z, y, x, k, 1) << k;
          b |= (uint32_t)inside(z, y, x, k, -1) << k;
        }
        fmask[r * W + x] = f, bmask[r * W + x] = b;
      }
    }
  });
  row[0] = first_pair[0] = 0;
  for (int64_t p = 0; p < N; ++p) {
    const int64_t nf = __builtin_popcount(fmask[p]), nb = __builtin_popcount(bmask[p]);
    row[p + 1] = row[p] + nf + nb;
    first_pair[p + 1] = first_pair[p] + nf;
  }
  const int64_t M = first_pair[N], A = 2 * M;
  const auto lopt = caps_t.options().dtype(at::kLong);
  at::Tensor row_ptr = at::empty({N + 1}, lopt), tail = at::empty({A}, lopt), head = at::empty({A}, lopt),
             rev = at::empty({A}, lopt), arc_caps = at::empty({A}, lopt), pos_f = at::empty({M}, lopt),
             pos_b = at::empty({M}, lopt), fwd = at::empty({M}, lopt), bwd = at::empty({M}, lopt);
  std::copy(row.begin(), row.end(), row_ptr.data_ptr<int64_t>());
  int64_t *T = tail.data_ptr<int64_t>(), *Hd = head.data_ptr<int64_t>(), *RV = rev.data_ptr<int64_t>();
  int64_t *C = arc_caps.data_ptr<int64_t>(), *PF = pos_f.data_ptr<int64_t>(), *PB = pos_b.data_ptr<int64_t>();
  int64_t *FW = fwd.data_ptr<int64_t>(), *BW = bwd.data_ptr<int64_t>();
  // offsets by increasing flat offset; rank_b[k]: the offsets whose arcs come before k's among a node's
  // arcs to lower nodes (larger flat offsets)
  std::vector<int64_t> order(K);
  for (int64_t k = 0; k < K; ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return flat[a] < flat[b]; });
  std::vector<uint32_t> larger(K, 0);  // bit j set: flat[j] > flat[k]
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < K; ++j) larger[k] |= (uint32_t)(flat[j] > flat[k]) << j;
  at::parallel_for(0, N, 1 << 14, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t j = first_pair[p], kf = row[p] + __builtin_popcount(bmask[p]);
      for (int64_t i = 0; i < K; ++i) {
        const int64_t k = order[i];
        if (!((fmask[p] >> k) & 1)) continue;
        const int64_t q = p + flat[k];
        const int64_t kb = row[q] + __builtin_popcount(bmask[q] & larger[k]);
        const int64_t cf = (int64_t)caps[k * N + p], cb = (int64_t)caps[(K + k) * N + q];
        PF[j] = kf, PB[j] = kb, FW[j] = cf, BW[j] = cb;
        T[kf] = p, Hd[kf] = q, C[kf] = cf, RV[kf] = kb;
        T[kb] = q, Hd[kb] = p, C[kb] = cb, RV[kb] = kf;
        ++j, ++kf;
      }
    }
  });
  return {row_ptr, tail, head, rev, arc_caps, pos_f, pos_b, fwd, bwd};
}

std::vector<at::Tensor> grid_pairs_csr(at::Tensor caps, c10::IntArrayRef shape, c10::IntArrayRef offsets) {
  const char* op = "torchcut.grid_pairs_csr";
  TORCH_CHECK(shape.size() == 2 || shape.size() == 3, op, ": shape: expected 2 or 3 dims, got ", shape);
  const int64_t nd = static_cast<int64_t>(shape.size());
  TORCH_CHECK(!offsets.empty() && offsets.size() % nd == 0, op, ": offsets: expected K x ", nd, " ints, got ",
              offsets.size());
  const int64_t K = static_cast<int64_t>(offsets.size()) / nd;
  TORCH_CHECK(K <= 32, op, ": offsets: expected at most 32, got ", K);
  const int64_t D = nd == 3 ? shape[0] : 1, H = shape[nd - 2], W = shape[nd - 1];
  TORCH_CHECK(D >= 1 && H >= 1 && W >= 1, op, ": shape: expected positive sizes, got ", shape);
  const int64_t N = D * H * W;
  TORCH_CHECK(caps.device().is_cpu() && caps.is_contiguous() && caps.dim() == 2 && caps.size(0) == 2 * K &&
                  caps.size(1) == N && (caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong),
              op, ": caps: expected a contiguous int32 or int64 CPU tensor [", 2 * K, ", ", N, "], got ",
              caps.scalar_type(), " ", caps.sizes());
  std::vector<std::array<int64_t, 3>> off(K);
  std::vector<int64_t> flat(K);
  for (int64_t k = 0; k < K; ++k) {
    off[k] = {nd == 3 ? offsets[k * nd] : 0, offsets[k * nd + nd - 2], offsets[k * nd + nd - 1]};
    flat[k] = (off[k][0] * H + off[k][1]) * W + off[k][2];
    TORCH_CHECK(flat[k] > 0, op, ": offsets: expected offsets above p (positive flat offsets), got ", flat[k],
                " for offset ", k);
    for (int64_t j = 0; j < k; ++j)
      TORCH_CHECK(flat[j] != flat[k], op, ": offsets: expected distinct flat offsets, got ", flat[k], " twice");
  }
  if (caps.scalar_type() == at::kInt) return grid_pairs_impl<int32_t>(caps, D, H, W, off);
  return grid_pairs_impl<int64_t>(caps, D, H, W, off);
}

// lattice_grid: a FlowGraph whose pairs each join p to p + 1 within one row of width W, or p to p + W
// (FlowGraph.lattice_shape's rule: W the smallest step above 1, or N when there is none; N a multiple
// of W), as the grid the grid solver takes, in one or two passes over the pairs instead of ~25 tensor
// ops (the pairs' ends gathered, compared, reduced, then scattered). With W = 0 it finds the shape:
// int64 [2] (H, W), or (0, 0) when the graph is no such lattice. With the W it found, it lays the grid
// out: edges and reverse ([2, N], the caps' dtype), direction 0 the arc p -> p + 1, direction 1 the arc
// p -> p + W, zero where the pair is missing.
// The arcs' indices are checked where they are followed (pair_fwd, pair_bwd in [0, 2 M), the ends of a
// forward arc in [0, N)): the tensors are a FlowGraph's own, but the op is public.
template <class Cap>
std::vector<at::Tensor> lattice_impl(const char* op, const at::Tensor& tail, const at::Tensor& head,
                                     const at::Tensor& caps, const at::Tensor& pair_fwd, const at::Tensor& pair_bwd,
                                     int64_t N, int64_t W) {
  const int64_t M = pair_fwd.numel(), A = 2 * M;
  const int64_t *T = tail.data_ptr<int64_t>(), *Hd = head.data_ptr<int64_t>();
  const int64_t *PF = pair_fwd.data_ptr<int64_t>(), *PB = pair_bwd.data_ptr<int64_t>();
  bool ok = true;
  auto arc = [&](int64_t j, int64_t& u, int64_t& v) {
    const int64_t f = PF[j], b = PB[j];
    if (f < 0 || f >= A || b < 0 || b >= A) return false;
    u = T[f], v = Hd[f];
    return u >= 0 && u < N && v >= 0 && v < N;
  };
  if (W == 0) {
    at::Tensor shape = at::zeros({2}, tail.options());
    int64_t* S = shape.data_ptr<int64_t>();
    int64_t w = N, u = 0, v = 0;
    for (int64_t j = 0; ok && j < M; ++j) {
      ok = arc(j, u, v);
      const int64_t d = v - u;
      if (d > 1 && d < w) w = d;
    }
    TORCH_CHECK(ok, op, ": expected arc indices in [0, ", A, ") whose ends lie in [0, ", N, ")");
    ok = N % w == 0;
    for (int64_t j = 0; ok && j < M; ++j) {
      u = T[PF[j]];
      const int64_t d = Hd[PF[j]] - u;
      ok = d == w || (d == 1 && u % w != w - 1);
    }
    if (ok) S[0] = N / w, S[1] = w;
    return {shape};
  }
  TORCH_CHECK(W >= 1 && N % W == 0, op, ": W: expected a divisor of N = ", N, ", got ", W);
  at::Tensor edges = at::zeros({2, N}, caps.options()), reverse = at::zeros({2, N}, caps.options());
  const Cap* C = caps.data_ptr<Cap>();
  Cap *E = edges.data_ptr<Cap>(), *R = reverse.data_ptr<Cap>();
  for (int64_t j = 0; ok && j < M; ++j) {
    int64_t u = 0, v = 0;
    ok = arc(j, u, v) && (v - u == W || (v - u == 1 && u % W != W - 1));
    if (!ok) break;
    const int64_t slot = (v - u == 1 ? 0 : N) + u;
    E[slot] = C[PF[j]], R[slot] = C[PB[j]];
  }
  TORCH_CHECK(ok, op, ": expected the pairs of a lattice of width ", W, " (arc indices in [0, ", A,
              "), pairs p -> p + 1 within rows and p -> p + W)");
  return {edges, reverse};
}

void check_pairs(const char* op, const at::Tensor& tail, const at::Tensor& head, const at::Tensor& pair_fwd,
                 const at::Tensor& pair_bwd) {
  for (const auto* t : {&tail, &head, &pair_fwd, &pair_bwd})
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kLong && t->dim() == 1, op,
                ": expected contiguous 1-D int64 CPU tensors (tail, head, pair_fwd, pair_bwd), got ", t->scalar_type(),
                " ", t->sizes());
  TORCH_CHECK(tail.numel() == head.numel() && pair_fwd.numel() == pair_bwd.numel() &&
                  2 * pair_fwd.numel() == tail.numel(),
              op, ": expected 2 M arcs and M pairs, got ", tail.numel(), " arcs and ", pair_fwd.numel(), " pairs");
}

std::vector<at::Tensor> lattice_grid(at::Tensor tail, at::Tensor head, at::Tensor caps, at::Tensor pair_fwd,
                                     at::Tensor pair_bwd, int64_t N, int64_t W) {
  const char* op = "torchcut.lattice_grid";
  TORCH_CHECK(N >= 1, op, ": N: expected >= 1, got ", N);
  check_pairs(op, tail, head, pair_fwd, pair_bwd);
  TORCH_CHECK(caps.device().is_cpu() && caps.is_contiguous() && caps.dim() == 1 && caps.numel() == tail.numel() &&
                  (caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong),
              op, ": caps: expected a contiguous int32 or int64 CPU tensor [", tail.numel(), "], got ",
              caps.scalar_type(), " ", caps.sizes());
  if (caps.scalar_type() == at::kInt) return lattice_impl<int32_t>(op, tail, head, caps, pair_fwd, pair_bwd, N, W);
  return lattice_impl<int64_t>(op, tail, head, caps, pair_fwd, pair_bwd, N, W);
}

// lattice_residual: the grid solver's residual of a lattice graph ([4, N] flat: p -> p + 1, p -> p + W,
// p -> p - 1, p -> p - W) in the graph's arc order (each pair's two arcs), in dtype.
template <class G, class Out>
bool residual_impl(const G* gres, const int64_t* T, const int64_t* Hd, const int64_t* PF, const int64_t* PB,
                   int64_t M, int64_t N, Out* out) {
  const int64_t A = 2 * M;
  for (int64_t j = 0; j < M; ++j) {
    const int64_t f = PF[j], b = PB[j];
    if (f < 0 || f >= A || b < 0 || b >= A) return false;
    const int64_t u = T[f], v = Hd[f];
    if (u < 0 || u >= N || v < 0 || v >= N) return false;
    const bool right = v - u == 1;
    out[f] = static_cast<Out>(gres[(right ? 0 : N) + u]);
    out[b] = static_cast<Out>(gres[(right ? 2 * N : 3 * N) + v]);
  }
  return true;
}

at::Tensor lattice_residual(at::Tensor gres, at::Tensor tail, at::Tensor head, at::Tensor pair_fwd,
                            at::Tensor pair_bwd, at::ScalarType dtype) {
  const char* op = "torchcut.lattice_residual";
  check_pairs(op, tail, head, pair_fwd, pair_bwd);
  TORCH_CHECK(gres.device().is_cpu() && gres.is_contiguous() && gres.numel() % 4 == 0 &&
                  (gres.scalar_type() == at::kInt || gres.scalar_type() == at::kLong),
              op, ": gres: expected a contiguous int32 or int64 CPU tensor of 4 N values, got ", gres.scalar_type(),
              " ", gres.sizes());
  TORCH_CHECK(dtype == at::kInt || dtype == at::kLong, op, ": dtype: expected int32 or int64, got ", dtype);
  const int64_t N = gres.numel() / 4, M = pair_fwd.numel();
  const int64_t *T = tail.data_ptr<int64_t>(), *Hd = head.data_ptr<int64_t>();
  const int64_t *PF = pair_fwd.data_ptr<int64_t>(), *PB = pair_bwd.data_ptr<int64_t>();
  at::Tensor out = at::empty({2 * M}, gres.options().dtype(dtype));
  bool ok = true;
  auto run = [&](auto* g) {
    if (dtype == at::kInt) ok = residual_impl(g, T, Hd, PF, PB, M, N, out.data_ptr<int32_t>());
    else ok = residual_impl(g, T, Hd, PF, PB, M, N, out.data_ptr<int64_t>());
  };
  if (gres.scalar_type() == at::kInt) run(gres.data_ptr<int32_t>());
  else run(gres.data_ptr<int64_t>());
  TORCH_CHECK(ok, op, ": expected arc indices in [0, ", 2 * M, ") whose ends lie in [0, ", N, ")");
  return out;
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("pairs_csr", &torchcut_cpu::pairs_csr);
  m.impl("grid_pairs_csr", &torchcut_cpu::grid_pairs_csr);
  m.impl("lattice_grid", &torchcut_cpu::lattice_grid);
  m.impl("lattice_residual", &torchcut_cpu::lattice_residual);
}
