// Expansion moves on general graphs (CPU): one move's FlowGraph capacities in one pass over the nodes
// and one over the edges, where torchcut/graph_multilabel.py's tensor version takes ~25 tensor ops.
//
// graph_expansion_move(U, f, u, v, arc_uv, arc_vu, W, V, alpha, beta, mode, num_arcs, wide) -> [caps,
// source, sink, clamped]: U int64 [L, N] (the quantised unary), f int64 [N] (the labels), u, v int64 [E] (the
// edges), arc_uv, arc_vu int64 [E] (the CSR index of each edge's arcs u -> v and v -> u; repeated edges
// share arcs and their capacities add up). Pair cost of edge e with labels (a, b):
//   mode 0 (Potts):           W[e] * (a != b), W int64;
//   mode 1 (integer table):   W[e] * V[a, b] (V [L, L]) or W[e] * V[e, a, b] (V [E, L, L]), int64;
//   mode 2 (float table):     round(W[e] * V[...]) in float64 (round half to even, as torch.round).
// The move (source side: keep the label, sink side: take alpha) is graph_multilabel.py's: per edge
// -min(E00, E01) on u, min(E01 - E00, 0) on v, arc u -> v max(E01 - E00, 0), arc v -> u
// E10 + min(E01 - E00, 0) (raised to 0 if negative: `clamped` is then 1). Terminals come out netted:
// source = max(delta, 0) int64, sink = max(-delta, 0), delta = cost of alpha - cost of keeping.
// With beta >= 0 it is the swap move of alpha and beta instead (build_swap below; clamped stays 0).
// caps and sink are int32 unless `wide` (int64); the caller has checked that every value fits.
//
// graph_swap_move(U, f, u, v, W, V, alpha, beta, mode, wide) -> [ids, row_ptr, head, rev, caps, source, sink,
// cut0]: the swap move of alpha and beta on the subgraph of the nodes labelled either (GCO's construction),
// where graph_expansion_move's swap writes every node and arc of the graph: ids int64 [n] the nodes of the
// move in increasing order (node i of the move is ids[i]); its CSR layout (row_ptr [n + 1], head, rev
// int64 [a]: each edge between two of them a pair of arcs, repeated edges as parallel arcs), capacities
// caps [a] and netted terminals source int64 [n], sink [n] (source side: alpha, sink side: beta), as
// graph_expansion_move's values on those nodes; cut0 (int64 scalar) the cut of the current labelling
// (alpha nodes on the source side), so that the energy after the move is the energy before plus the
// minimum cut minus cut0 (the move's cuts are the energy up to a constant).
#include <torch/library.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../terminals.h"

namespace torchcut_cpu {
namespace {

// The quantised pair cost of edge e with labels (a, b) (the modes above).
template <int Mode>
inline int64_t pair_cost(const void* Wp, const void* Vp, bool per_edge, int64_t L, int64_t e, int64_t a, int64_t b) {
  if constexpr (Mode == 0) {
    return a != b ? static_cast<const int64_t*>(Wp)[e] : 0;
  } else if constexpr (Mode == 1) {
    const int64_t* T = static_cast<const int64_t*>(Vp) + (per_edge ? e * L * L : 0);
    return static_cast<const int64_t*>(Wp)[e] * T[a * L + b];
  } else {
    const double* T = static_cast<const double*>(Vp) + (per_edge ? e * L * L : 0);
    return static_cast<int64_t>(std::nearbyint(static_cast<const double*>(Wp)[e] * T[a * L + b]));
  }
}

// What a swap move's node pays for taking beta rather than alpha across edge e to a node outside the move
// whose label is `other` (the move's node is the edge's u when at_u, its v otherwise).
template <int Mode>
inline int64_t swap_term(const void* Wp, const void* Vp, bool per_edge, int64_t L, int64_t e, int64_t other,
                         int64_t alpha, int64_t beta, bool at_u) {
  return at_u ? pair_cost<Mode>(Wp, Vp, per_edge, L, e, beta, other) - pair_cost<Mode>(Wp, Vp, per_edge, L, e, alpha, other)
              : pair_cost<Mode>(Wp, Vp, per_edge, L, e, other, beta) - pair_cost<Mode>(Wp, Vp, per_edge, L, e, other, alpha);
}

// A swap move of labels alpha and beta (graph_multilabel.py's swap_move): the nodes labelled either choose
// (source side alpha, sink side beta); an edge between two of them is a pair of arcs of capacity
// cost(alpha, beta), an edge to a fixed node a terminal cost; the other nodes keep zero capacities.
template <class Cap, int Mode>
void build_swap(const int64_t* U, const int64_t* f, const int64_t* u, const int64_t* v, const int64_t* auv,
                const int64_t* avu, const void* Wp, const void* Vp, bool per_edge, int64_t L, int64_t N, int64_t E,
                int64_t alpha, int64_t beta, Cap* caps, int64_t* src, Cap* snk) {
  std::vector<int64_t> delta(N);
  auto var = [&](int64_t l) { return l == alpha || l == beta; };
  for (int64_t p = 0; p < N; ++p) delta[p] = var(f[p]) ? U[beta * N + p] - U[alpha * N + p] : 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t p = u[e], q = v[e], a = f[p], b = f[q];
    const bool vp = var(a), vq = var(b);
    if (vp && vq) {
      const Cap c = static_cast<Cap>(pair_cost<Mode>(Wp, Vp, per_edge, L, e, alpha, beta));
      caps[auv[e]] += c;
      caps[avu[e]] += c;
    } else if (vp) {
      delta[p] += swap_term<Mode>(Wp, Vp, per_edge, L, e, b, alpha, beta, true);
    } else if (vq) {
      delta[q] += swap_term<Mode>(Wp, Vp, per_edge, L, e, a, alpha, beta, false);
    }
  }
  for (int64_t p = 0; p < N; ++p) {
    src[p] = torchcut::net_source(delta[p]);  // delta is the netted pair's signed value
    snk[p] = static_cast<Cap>(torchcut::net_sink(delta[p]));
  }
}

template <class Cap, int Mode>
void build(const int64_t* U, const int64_t* f, const int64_t* u, const int64_t* v, const int64_t* auv,
           const int64_t* avu, const void* Wp, const void* Vp, bool per_edge, int64_t L, int64_t N, int64_t E,
           int64_t alpha, Cap* caps, int64_t* src, Cap* snk, int64_t* clamped) {
  std::vector<int64_t> delta(N);
  const int64_t* Ua = U + alpha * N;
  for (int64_t p = 0; p < N; ++p) delta[p] = Ua[p] - U[f[p] * N + p];
  const int64_t LL = L * L;
  int64_t neg = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t p = u[e], q = v[e], a = f[p], b = f[q];
    int64_t e00, e01, e10;
    if constexpr (Mode == 0) {
      const int64_t w = static_cast<const int64_t*>(Wp)[e];
      e00 = a != b ? w : 0, e01 = a != alpha ? w : 0, e10 = b != alpha ? w : 0;
    } else if constexpr (Mode == 1) {
      const int64_t w = static_cast<const int64_t*>(Wp)[e];
      const int64_t* T = static_cast<const int64_t*>(Vp) + (per_edge ? e * LL : 0);
      e00 = w * T[a * L + b], e01 = w * T[a * L + alpha], e10 = w * T[alpha * L + b];
    } else {
      const double w = static_cast<const double*>(Wp)[e];
      const double* T = static_cast<const double*>(Vp) + (per_edge ? e * LL : 0);
      e00 = static_cast<int64_t>(std::nearbyint(w * T[a * L + b]));
      e01 = static_cast<int64_t>(std::nearbyint(w * T[a * L + alpha]));
      e10 = static_cast<int64_t>(std::nearbyint(w * T[alpha * L + b]));
    }
    const int64_t d = e01 - e00, low = d < 0 ? d : 0;
    delta[p] -= std::min(e00, e01);
    delta[q] += low;
    int64_t back = e10 + low;
    if (back < 0) back = 0, neg = 1;
    caps[auv[e]] += static_cast<Cap>(d > 0 ? d : 0);
    caps[avu[e]] += static_cast<Cap>(back);
  }
  for (int64_t p = 0; p < N; ++p) {
    src[p] = torchcut::net_source(delta[p]);  // delta is the netted pair's signed value
    snk[p] = static_cast<Cap>(torchcut::net_sink(delta[p]));
  }
  *clamped = neg;
}

std::vector<at::Tensor> graph_move(at::Tensor U, at::Tensor f, at::Tensor u, at::Tensor v, at::Tensor arc_uv,
                                   at::Tensor arc_vu, at::Tensor W, at::Tensor V, int64_t alpha, int64_t beta, int64_t mode,
                                   int64_t num_arcs, bool wide) {
  for (const auto* t : {&U, &f, &u, &v, &arc_uv, &arc_vu, &W, &V})
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous(),
                "torchcut.graph_expansion_move: expected contiguous CPU tensors");
  for (const auto* t : {&U, &f, &u, &v, &arc_uv, &arc_vu})
    TORCH_CHECK(t->scalar_type() == at::kLong, "torchcut.graph_expansion_move: U, f, u, v, arc_uv, arc_vu: expected int64");
  TORCH_CHECK(mode >= 0 && mode <= 2, "torchcut.graph_expansion_move: mode: expected 0, 1 or 2, got ", mode);
  const at::ScalarType wt = mode == 2 ? at::kDouble : at::kLong;
  TORCH_CHECK(W.scalar_type() == wt && (mode == 0 || V.scalar_type() == wt),
              "torchcut.graph_expansion_move: W, V: expected ", wt, " for mode ", mode);
  TORCH_CHECK(U.dim() == 2, "torchcut.graph_expansion_move: U: expected [L, N]");
  const int64_t L = U.size(0), N = U.size(1), E = u.numel();
  TORCH_CHECK(f.numel() == N && v.numel() == E && arc_uv.numel() == E && arc_vu.numel() == E && W.numel() == E,
              "torchcut.graph_expansion_move: inconsistent sizes");
  TORCH_CHECK(alpha >= 0 && alpha < L, "torchcut.graph_expansion_move: alpha: expected a label in [0, ", L, ")");
  TORCH_CHECK(beta >= -1 && beta < L && beta != alpha,
              "torchcut.graph_expansion_move: beta: expected -1 (expansion) or a label in [0, ", L, ") other than alpha");
  const bool per_edge = mode != 0 && V.numel() == E * L * L && E > 0 && V.numel() != L * L;
  TORCH_CHECK(mode == 0 || per_edge || V.numel() == L * L, "torchcut.graph_expansion_move: V: expected [L, L] or [E, L, L]");
  const at::ScalarType ct = wide ? at::kLong : at::kInt;
  auto caps = at::zeros({num_arcs}, U.options().dtype(ct));
  auto src = at::empty({N}, U.options());
  auto snk = at::empty({N}, U.options().dtype(ct));
  auto clamped = at::zeros({1}, U.options());
  const int64_t *Up = U.data_ptr<int64_t>(), *fp = f.data_ptr<int64_t>(), *up = u.data_ptr<int64_t>(),
                *vp = v.data_ptr<int64_t>(), *a1 = arc_uv.data_ptr<int64_t>(), *a2 = arc_vu.data_ptr<int64_t>();
  for (int64_t k = 0; k < E; ++k)  // indices are read unchecked below
    TORCH_CHECK(up[k] >= 0 && up[k] < N && vp[k] >= 0 && vp[k] < N && a1[k] >= 0 && a1[k] < num_arcs && a2[k] >= 0 &&
                    a2[k] < num_arcs, "torchcut.graph_expansion_move: edge ", k, " out of range");
  for (int64_t p = 0; p < N; ++p)
    TORCH_CHECK(fp[p] >= 0 && fp[p] < L, "torchcut.graph_expansion_move: f: label out of range at node ", p);
  const void* Wp = W.data_ptr();
  const void* Vp = V.data_ptr();
  int64_t* cl = clamped.data_ptr<int64_t>();
  int64_t* sp = src.data_ptr<int64_t>();
  auto run = [&](auto* c, auto* s) {
    using Cap = std::remove_pointer_t<decltype(c)>;
    if (beta >= 0) {
      if (mode == 0) build_swap<Cap, 0>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, beta, c, sp, s);
      else if (mode == 1) build_swap<Cap, 1>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, beta, c, sp, s);
      else build_swap<Cap, 2>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, beta, c, sp, s);
    } else if (mode == 0) {
      build<Cap, 0>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, c, sp, s, cl);
    } else if (mode == 1) {
      build<Cap, 1>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, c, sp, s, cl);
    } else {
      build<Cap, 2>(Up, fp, up, vp, a1, a2, Wp, Vp, per_edge, L, N, E, alpha, c, sp, s, cl);
    }
  };
  if (wide) run(caps.data_ptr<int64_t>(), snk.data_ptr<int64_t>());
  else run(caps.data_ptr<int32_t>(), snk.data_ptr<int32_t>());
  return {caps, src, snk, clamped};
}

// The sizes of a labelling's energy (U [L, N], f [N], edges u, v [E], pair costs W, V of `mode`), checked
// for the ops that read one (graph_swap_move, graph_labeling_energy); per_edge: V is [E, L, L].
struct EnergySizes {
  int64_t L, N, E;
  bool per_edge;
};

EnergySizes check_energy(const char* op, const at::Tensor& U, const at::Tensor& f, const at::Tensor& u,
                         const at::Tensor& v, const at::Tensor& W, const at::Tensor& V, int64_t mode) {
  for (const auto* t : {&U, &f, &u, &v, &W, &V})
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous(), op, ": expected contiguous CPU tensors");
  for (const auto* t : {&U, &f, &u, &v})
    TORCH_CHECK(t->scalar_type() == at::kLong, op, ": U, f, u, v: expected int64");
  TORCH_CHECK(mode >= 0 && mode <= 2, op, ": mode: expected 0, 1 or 2, got ", mode);
  const at::ScalarType wt = mode == 2 ? at::kDouble : at::kLong;
  TORCH_CHECK(W.scalar_type() == wt && (mode == 0 || V.scalar_type() == wt), op, ": W, V: expected ", wt,
              " for mode ", mode);
  TORCH_CHECK(U.dim() == 2, op, ": U: expected [L, N]");
  const int64_t L = U.size(0), N = U.size(1), E = u.numel();
  TORCH_CHECK(f.numel() == N && v.numel() == E && W.numel() == E, op, ": inconsistent sizes");
  const bool per_edge = mode != 0 && V.numel() == E * L * L && E > 0 && V.numel() != L * L;
  TORCH_CHECK(mode == 0 || per_edge || V.numel() == L * L, op, ": V: expected [L, L] or [E, L, L]");
  return {L, N, E, per_edge};
}

// The move's nodes (f alpha or beta) in increasing order and each node's index among them (or -1).
inline void swap_nodes(const int64_t* f, int64_t N, int64_t L, int64_t alpha, int64_t beta,
                       std::vector<int32_t>& loc, std::vector<int64_t>& ids) {
  loc.resize(N);
  for (int64_t p = 0; p < N; ++p) {
    TORCH_CHECK(f[p] >= 0 && f[p] < L, "torchcut.graph_swap_move: f: label out of range at node ", p);
    const bool in = f[p] == alpha || f[p] == beta;
    loc[p] = in ? static_cast<int32_t>(ids.size()) : -1;
    if (in) ids.push_back(p);
  }
}

template <class Cap, int Mode>
std::vector<at::Tensor> swap_subgraph(const int64_t* U, const int64_t* f, const int64_t* u, const int64_t* v,
                                      const void* Wp, const void* Vp, bool per_edge, int64_t L, int64_t N, int64_t E,
                                      int64_t alpha, int64_t beta, const at::TensorOptions& opt, at::ScalarType ct) {
  std::vector<int32_t> loc;
  std::vector<int64_t> ids;
  swap_nodes(f, N, L, alpha, beta, loc, ids);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> delta(n);  // cost of beta - cost of alpha
  for (int64_t i = 0; i < n; ++i) delta[i] = U[beta * N + ids[i]] - U[alpha * N + ids[i]];
  std::vector<int64_t> deg(n + 1, 0);
  std::vector<int64_t> inner;  // the edges between two nodes of the move
  for (int64_t e = 0; e < E; ++e) {
    const int64_t p = u[e], q = v[e];
    TORCH_CHECK(p >= 0 && p < N && q >= 0 && q < N, "torchcut.graph_swap_move: edge ", e, " out of range");
    const int32_t i = loc[p], j = loc[q];
    if (i >= 0 && j >= 0) {
      inner.push_back(e);
      ++deg[i + 1], ++deg[j + 1];
    } else if (i >= 0) {
      delta[i] += swap_term<Mode>(Wp, Vp, per_edge, L, e, f[q], alpha, beta, true);
    } else if (j >= 0) {
      delta[j] += swap_term<Mode>(Wp, Vp, per_edge, L, e, f[p], alpha, beta, false);
    }
  }
  const int64_t A = 2 * static_cast<int64_t>(inner.size());
  auto ids_t = at::empty({n}, opt);
  auto row_ptr = at::empty({n + 1}, opt);
  auto head = at::empty({A}, opt), rev = at::empty({A}, opt);
  auto caps = at::empty({A}, opt.dtype(ct));
  auto src = at::empty({n}, opt), snk = at::empty({n}, opt.dtype(ct));
  int64_t* rp = row_ptr.data_ptr<int64_t>();
  int64_t* hd = head.data_ptr<int64_t>();
  int64_t* rv = rev.data_ptr<int64_t>();
  Cap* cp = caps.data_ptr<Cap>();
  std::copy(ids.begin(), ids.end(), ids_t.data_ptr<int64_t>());
  for (int64_t i = 0; i < n; ++i) deg[i + 1] += deg[i];
  std::copy(deg.begin(), deg.end(), rp);
  int64_t cut0 = 0;
  for (const int64_t e : inner) {  // deg[i]: the next free arc of node i
    const int64_t p = u[e], q = v[e];
    const int32_t i = loc[p], j = loc[q];
    const int64_t c = pair_cost<Mode>(Wp, Vp, per_edge, L, e, alpha, beta);
    const int64_t x = deg[i]++, y = deg[j]++;
    hd[x] = j, hd[y] = i, rv[x] = y, rv[y] = x;
    cp[x] = cp[y] = static_cast<Cap>(c);
    if (f[p] != f[q]) cut0 += c;  // the current labelling cuts this pair
  }
  int64_t* sp = src.data_ptr<int64_t>();
  Cap* kp = snk.data_ptr<Cap>();
  for (int64_t i = 0; i < n; ++i) {
    sp[i] = torchcut::net_source(delta[i]);  // delta is the netted pair's signed value
    kp[i] = static_cast<Cap>(torchcut::net_sink(delta[i]));
    cut0 += f[ids[i]] == beta ? sp[i] : static_cast<int64_t>(kp[i]);  // a beta node cuts its source arc
  }
  auto cut = at::empty({}, opt);
  cut.fill_(cut0);
  return {ids_t, row_ptr, head, rev, caps, src, snk, cut};
}

std::vector<at::Tensor> graph_swap(at::Tensor U, at::Tensor f, at::Tensor u, at::Tensor v, at::Tensor W, at::Tensor V,
                                   int64_t alpha, int64_t beta, int64_t mode, bool wide) {
  const char* op = "torchcut.graph_swap_move";
  const EnergySizes z = check_energy(op, U, f, u, v, W, V, mode);
  const int64_t L = z.L, N = z.N, E = z.E;
  const bool per_edge = z.per_edge;
  TORCH_CHECK(N < (int64_t{1} << 31), op, ": U: expected fewer than 2**31 nodes, got ", N);
  TORCH_CHECK(alpha >= 0 && alpha < L && beta >= 0 && beta < L && alpha != beta, op,
              ": alpha, beta: expected two different labels in [0, ", L, "), got ", alpha, " and ", beta);
  const int64_t *Up = U.data_ptr<int64_t>(), *fp = f.data_ptr<int64_t>(), *up = u.data_ptr<int64_t>(),
                *vp = v.data_ptr<int64_t>();
  const at::TensorOptions opt = U.options();  // (labels and edges are checked where they are read)
  const at::ScalarType ct = wide ? at::kLong : at::kInt;
  const void* Wp = W.data_ptr();
  const void* Vp = V.data_ptr();
  auto run = [&](auto cap, auto mode_c) {
    using Cap = decltype(cap);
    return swap_subgraph<Cap, decltype(mode_c)::value>(Up, fp, up, vp, Wp, Vp, per_edge, L, N, E, alpha, beta, opt, ct);
  };
  auto pick = [&](auto cap) {
    if (mode == 0) return run(cap, std::integral_constant<int, 0>());
    if (mode == 1) return run(cap, std::integral_constant<int, 1>());
    return run(cap, std::integral_constant<int, 2>());
  };
  return wide ? pick(int64_t{0}) : pick(int32_t{0});
}

// graph_labeling_energy(U, f, u, v, W, V, mode) -> int64 scalar: the quantised energy of the labelling f,
// sum_p U[f[p], p] + sum_e pair_cost(e, f[u[e]], f[v[e]]) (the modes above), summed in int64 as torch sums
// the tensor version's terms (graph_multilabel.py, _GraphEnergy.energy): one pass, where the tensor
// version takes a gather, two index_selects and the table's lookup, product and rounding over every edge.
at::Tensor graph_energy(at::Tensor U, at::Tensor f, at::Tensor u, at::Tensor v, at::Tensor W, at::Tensor V,
                        int64_t mode) {
  const char* op = "torchcut.graph_labeling_energy";
  const EnergySizes z = check_energy(op, U, f, u, v, W, V, mode);
  const int64_t L = z.L, N = z.N, E = z.E;
  const bool per_edge = z.per_edge;
  const int64_t *Up = U.data_ptr<int64_t>(), *fp = f.data_ptr<int64_t>(), *up = u.data_ptr<int64_t>(),
                *vp = v.data_ptr<int64_t>();
  uint64_t total = 0;  // wraps as the tensor version's int64 sums do
  for (int64_t p = 0; p < N; ++p) {
    TORCH_CHECK(fp[p] >= 0 && fp[p] < L, op, ": f: label out of range at node ", p);
    total += static_cast<uint64_t>(Up[fp[p] * N + p]);
  }
  for (int64_t k = 0; k < E; ++k)  // indices are read unchecked below
    TORCH_CHECK(up[k] >= 0 && up[k] < N && vp[k] >= 0 && vp[k] < N, op, ": edge ", k, " out of range");
  const void* Wp = W.data_ptr();
  const void* Vp = V.data_ptr();
  auto edges = [&](auto mode_c) {
    constexpr int Mode = decltype(mode_c)::value;
    for (int64_t e = 0; e < E; ++e)
      total += static_cast<uint64_t>(pair_cost<Mode>(Wp, Vp, per_edge, L, e, fp[up[e]], fp[vp[e]]));
  };
  if (mode == 0) edges(std::integral_constant<int, 0>());
  else if (mode == 1) edges(std::integral_constant<int, 1>());
  else edges(std::integral_constant<int, 2>());
  auto out = at::empty({}, U.options());
  out.fill_(static_cast<int64_t>(total));
  return out;
}

}  // namespace
}  // namespace torchcut_cpu

TORCH_LIBRARY_IMPL(torchcut, CPU, m) {
  m.impl("graph_expansion_move", &torchcut_cpu::graph_move);
  m.impl("graph_labeling_energy", &torchcut_cpu::graph_energy);
  m.impl("graph_swap_move", &torchcut_cpu::graph_swap);
}
