// The CPU grid solver's view of one item: a padded, node-major copy of the residuals (the 2K residuals
// of a node side by side, and a border of empty nodes as wide as the largest offset, so a neighbour is
// `v + delta[d]` with no bounds test), its geometry (Layout), the topology Boykov-Kolmogorov runs on
// (GridTopo) and the per-thread buffers (GridWork).
#pragma once

#include <cstdint>
#include <utility>
#include <memory>
#include <mutex>
#include <vector>

#include "cpu_bk.h"
#include "huge_alloc.h"

namespace torchcut_cpu {

template <class CapT>
struct GridTopo {
  using Cap = CapT;
  using P = uint8_t;
  static constexpr P kTerm = 125, kOrphan = 126;
  static constexpr uint8_t kFree = 0xFF, kSinkBit = 0x80;

  Cap* rc;           // [n * D] node-major residuals
  uint8_t* st;       // tree (bit 7: T) and parent direction / kTerm / kOrphan; kFree when free
  const int64_t* delta;  // [D] neighbour offset in the padded index
  const uint8_t* sis;    // [D] opposite direction
  int D;

  int begin(int64_t) const { return 0; }
  int end(int64_t) const { return D; }
  int64_t arc(int64_t v, int k) const { return v * D + k; }
  int32_t head(int64_t v, int k) const { return static_cast<int32_t>(v + delta[k]); }
  int64_t sister(int64_t v, int k) const { return (v + delta[k]) * D + sis[k]; }
  P back(int64_t, int k) const { return sis[k]; }
  P to(int64_t, int k) const { return static_cast<P>(k); }
  int32_t parent_node(int64_t v, P p) const { return static_cast<int32_t>(v + delta[p]); }
  int64_t parent_arc(int64_t v, P p) const { return v * D + p; }
  int64_t parent_sister(int64_t v, P p) const { return (v + delta[p]) * D + sis[p]; }
  bool is_free(int64_t v) const { return st[v] == kFree; }
  bool is_sink(int64_t v) const { return st[v] & kSinkBit; }
  P parent(int64_t v) const { return st[v] & 0x7F; }
  void set(int64_t v, P p, bool sink) { st[v] = static_cast<uint8_t>(p | (sink ? kSinkBit : 0)); }
  void set_parent(int64_t v, P p) { st[v] = static_cast<uint8_t>((st[v] & kSinkBit) | p); }
  void set_free(int64_t v) { st[v] = kFree; }
};

// Per-thread buffers for one padded grid item (uninitialised: the loader writes every entry). Sized for at
// least n nodes of D arcs; a larger one is used as it is.
template <class Cap>
struct GridWork {
  HugeBuf<Cap> rc;
  HugeBuf<int64_t> tr;
  HugeBuf<int32_t> nxt;
  HugeBuf<Marks> mk;
  HugeBuf<uint8_t> st, reach;
  int64_t size = 0, arcs = 0;  // nodes and arcs allocated
  void resize(int64_t n, int D) {
    if (n <= size && n * D <= arcs) return;
    rc = huge_buf<Cap>(n * D);
    tr = huge_buf<int64_t>(n);
    nxt = huge_buf<int32_t>(n);
    mk = huge_buf<Marks>(n);
    st = huge_buf<uint8_t>(n);
    reach = huge_buf<uint8_t>(n);
    size = n, arcs = n * D;
  }
  int64_t bytes() const {
    return arcs * static_cast<int64_t>(sizeof(Cap)) + size * static_cast<int64_t>(8 + 4 + sizeof(Marks) + 2);
  }
};


// The geometry of a padded, row-major item.
struct Layout {
  std::vector<int64_t> shape, pad, pshape;
  int64_t n = 1, n_pad = 1, rows = 1, W = 1, L = 1;  // rows: padded rows; W, L: row length unpadded, padded
  Layout(std::vector<int64_t> s, std::vector<int64_t> p) : shape(std::move(s)), pad(std::move(p)) {
    const size_t nd = shape.size();
    pshape.resize(nd);
    for (size_t a = 0; a < nd; ++a) pshape[a] = shape[a] + 2 * pad[a], n *= shape[a], n_pad *= pshape[a];
    W = shape[nd - 1], L = pshape[nd - 1];
    rows = n_pad / L;
  }
  // The first padded row of part p of `parts` (p = parts: the end): the ranges split_bk solves and the
  // threads that load and store the rows share it.
  int64_t part_row(int64_t p, int64_t parts) const { return rows * p / parts; }
  // Calls f(v0, q0) for every padded row (of rows [r0, r1) when given): v0 its first padded index, q0
  // the unpadded index of its first interior node, or -1 for a row of the border.
  template <class F>
  void for_each_row(F f, int64_t r0 = 0, int64_t r1 = -1) const {
    const size_t nd = shape.size();
    std::vector<int64_t> idx(nd, 0);  // over the first nd - 1 axes
    for (int64_t a = static_cast<int64_t>(nd) - 2, r = r0; a >= 0; --a) idx[a] = r % pshape[a], r /= pshape[a];
    for (int64_t r = r0; r < (r1 < 0 ? rows : r1); ++r) {
      int64_t q0 = 0;
      bool inside = true;
      for (size_t a = 0; a + 1 < nd; ++a) {
        const int64_t i = idx[a] - pad[a];
        inside = inside && i >= 0 && i < shape[a];
        q0 = q0 * shape[a] + i;
      }
      f(r * L, inside ? q0 * W : -1);
      for (int64_t a = static_cast<int64_t>(nd) - 2; a >= 0; --a) {
        if (++idx[a] < pshape[a]) break;
        idx[a] = 0;
      }
    }
  }
};

}  // namespace torchcut_cpu
