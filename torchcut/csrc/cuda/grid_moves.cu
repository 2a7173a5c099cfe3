// Expansion-move kernels (declared in grid_moves.h): one thread per node of a move's graph.
//
// move_build: node p of graph item i (move alpha of item b) computes, from the labels f and the energy,
// everything _Energy.move_graph gives it (terminals, the forward arc capacities of its K offsets, the
// e10 terms its predecessors p - o hand to its sink arc), then the re-fit of the last flow of the same
// item (torchcut.solvers.warm._refit): arc flows clipped to the new capacities, the flow taken off
// returned to the tail as excess, the terminals re-fitted with Kohli-Torr constants. Reads of a
// neighbour's state are reads, never writes, so the pass has no races.
//
// move_apply: the energy change of the move, per item (a block reduction, one atomic per block), then
// the move where it is negative. An edge (p, p + o) is read by p alone, so every edge counts once.
#include <cstdint>

#include "cuda_check.h"
#include "grid_moves.h"
#include "../terminals.h"

#define TC_MOVES_CHECK(expr) TORCHCUT_CUDA_CHECK("torchcut_grid", expr)

namespace torchcut_grid {

namespace {

template <typename CapT, int MODE>
__device__ __forceinline__ long long pair_cost(const MoveTerms& T, long long widx, long long a, long long b) {
  if (MODE == kPairPotts) return a != b ? (long long)static_cast<const CapT*>(T.W)[widx] : 0;
  if (MODE == kPairFloat)
    return (long long)(CapT)rint(static_cast<const double*>(T.W)[widx] * static_cast<const double*>(T.V)[a * T.L + b]);
  return (long long)(CapT)(static_cast<const CapT*>(T.W)[widx] * static_cast<const CapT*>(T.V)[a * T.L + b]);
}

__device__ __forceinline__ bool inside(const MoveGeom& G, long long x, long long y, long long z) {
  return x >= 0 && x < G.X && y >= 0 && y < G.Y && z >= 0 && z < G.Z;
}

__device__ __forceinline__ long long lin(const MoveGeom& G, int k) { return G.dx[k] + G.X * (G.dy[k] + G.Y * G.dz[k]); }

template <typename CapT, int MODE>
__global__ void move_build_kernel(MoveTerms T, const long long* __restrict__ f, const long long* __restrict__ alpha,
                                  long long M, MoveGeom G, bool warm, MoveState S, MoveOut O) {
  const long long N = G.N;
  const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (idx >= M * T.B * N) return;
  const long long n = idx % N, i = idx / N, b = i % T.B, m = i / T.B;
  const int K = G.K;
  const long long x = n % G.X, y = (n / G.X) % G.Y, z = n / (G.X * G.Y);
  const long long a = alpha[m];
  const long long* fb = f + b * N;
  const long long fp = fb[n];
  const CapT* U = static_cast<const CapT*>(T.U);
  long long src = U[(b * T.L + a) * N + n];   // cost of taking alpha
  long long snk = U[(b * T.L + fp) * N + n];  // cost of keeping
  long long moved = 0;                        // warm: flow the clipped arcs hand back to p
  const CapT* C0 = static_cast<const CapT*>(S.C0);
  const CapT* R0 = static_cast<const CapT*>(S.R0);
  CapT* C = static_cast<CapT*>(O.C);
  CapT* R = static_cast<CapT*>(O.R);
  for (int k = 0; k < K; ++k) {
    const long long o = lin(G, k);
    // arc p -> q = p + o (its weight is zero where q is outside, so are its terms)
    const bool in = inside(G, x + G.dx[k], y + G.dy[k], z + G.dz[k]);
    const long long fq = in ? fb[n + o] : 0;
    const long long wi = (b * K + k) * N + n;
    const long long e00 = pair_cost<CapT, MODE>(T, wi, fp, fq);
    const long long e01 = pair_cost<CapT, MODE>(T, wi, fp, a);
    const long long e10 = pair_cost<CapT, MODE>(T, wi, a, fq);
    const long long l = e10 - e00;
    src += l > 0 ? l : 0;
    snk += l < 0 ? -l : 0;
    const long long c = max(e01 + e10 - e00, 0LL);
    C[(i * K + k) * N + n] = (CapT)c;
    long long res = c;
    if (warm && in) {
      const long long g = (long long)C0[(i * K + k) * N + n] - (long long)R0[(i * 2 * K + k) * N + n];
      const long long g2 = min(max(g, 0LL), c);
      res = c - g2;
      moved += g - g2;
    }
    R[(i * 2 * K + k) * N + n] = (CapT)res;
    // the pair (p' = p - o, p): p' hands its e10 to p's sink arc; p holds the residual of the reverse arc
    long long rev = 0;
    if (inside(G, x - G.dx[k], y - G.dy[k], z - G.dz[k])) {
      const long long np = n - o;
      const long long wj = (b * K + k) * N + np;
      const long long e10p = pair_cost<CapT, MODE>(T, wj, a, fp);
      snk += e10p;
      if (warm) {
        const long long fpp = fb[np];
        const long long cp =
            max(pair_cost<CapT, MODE>(T, wj, fpp, a) + e10p - pair_cost<CapT, MODE>(T, wj, fpp, fp), 0LL);
        const long long g = (long long)C0[(i * K + k) * N + np] - (long long)R0[(i * 2 * K + k) * N + np];
        const long long g2 = min(max(g, 0LL), cp);
        rev = g2;
        moved -= g - g2;
      }
    }
    R[(i * 2 * K + K + k) * N + n] = (CapT)rev;
  }
  const long long t = torchcut::net_terminal(src, snk);
  src = torchcut::net_source(t);
  snk = torchcut::net_sink(t);
  const long long j = i * N + n;
  if (!warm) {
    O.e[j] = src;
    static_cast<CapT*>(O.r)[j] = (CapT)snk;
    O.s[j] = src;
    O.k[j] = snk;
    return;
  }
  // node balance: s0 + g_net - (k0 - r0) = e0 (+ moved)
  const long long avail = src + S.e0[j] + moved + (S.k0[j] - (long long)static_cast<const CapT*>(S.r0)[j]) - S.s0[j];
  const long long fl = min(max(avail, 0LL), snk);
  const long long d = avail < 0 ? -avail : 0;
  O.s[j] = src + d;
  O.k[j] = snk + d;
  O.e[j] = avail + d - fl;
  static_cast<CapT*>(O.r)[j] = (CapT)(snk + d - fl);
}

// blockIdx.y: the item; blockIdx.x * blockDim.x + threadIdx.x: the node.
template <typename CapT, int MODE>
__global__ void move_delta_kernel(MoveTerms T, const long long* __restrict__ f, const bool* __restrict__ take,
                                  long long a, MoveGeom G, unsigned long long* delta) {
  const long long N = G.N;
  const long long b = blockIdx.y;
  const long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long d = 0;
  if (n < N) {
    const long long* fb = f + b * N;
    const bool* tb = take + b * N;
    const long long fp = fb[n];
    const bool tp = tb[n];
    const long long cp = tp ? a : fp;
    const CapT* U = static_cast<const CapT*>(T.U);
    if (tp) d += (long long)U[(b * T.L + a) * N + n] - (long long)U[(b * T.L + fp) * N + n];
    const long long x = n % G.X, y = (n / G.X) % G.Y, z = n / (G.X * G.Y);
    for (int k = 0; k < G.K; ++k) {
      if (!inside(G, x + G.dx[k], y + G.dy[k], z + G.dz[k])) continue;
      const long long q = n + lin(G, k);
      const bool tq = tb[q];
      if (!(tp || tq)) continue;
      const long long fq = fb[q];
      const long long wi = (b * G.K + k) * N + n;
      d += pair_cost<CapT, MODE>(T, wi, cp, tq ? a : fq) - pair_cost<CapT, MODE>(T, wi, fp, fq);
    }
  }
  for (int s = 16; s > 0; s >>= 1) d += __shfl_down_sync(0xffffffffu, d, s);
  __shared__ long long part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = d;
  __syncthreads();
  if (warp == 0) {
    d = lane < (int)(blockDim.x >> 5) ? part[lane] : 0;
    for (int s = 16; s > 0; s >>= 1) d += __shfl_down_sync(0xffffffffu, d, s);
    if (lane == 0 && d != 0) atomicAdd(delta + b, (unsigned long long)d);  // two's complement sum
  }
}

__global__ void move_select_kernel(const long long* __restrict__ f, const bool* __restrict__ take, long long a,
                                   const long long* __restrict__ delta, const long long* __restrict__ e, long long N,
                                   long long* f_out, long long* e_out) {
  const long long b = blockIdx.y;
  const long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (n >= N) return;
  const bool better = delta[b] < 0;
  f_out[b * N + n] = better && take[b * N + n] ? a : f[b * N + n];
  if (n == 0) e_out[b] = better ? e[b] + delta[b] : e[b];
}

template <typename CapT>
void build_typed(cudaStream_t st, const MoveTerms& T, const long long* f, const long long* alpha, long long M,
                 const MoveGeom& G, bool warm, const MoveState& S, const MoveOut& O) {
  const long long total = M * T.B * G.N;
  const unsigned blocks = (unsigned)((total + 255) / 256);
  switch (T.mode) {
    case kPairExact: move_build_kernel<CapT, kPairExact><<<blocks, 256, 0, st>>>(T, f, alpha, M, G, warm, S, O); break;
    case kPairFloat: move_build_kernel<CapT, kPairFloat><<<blocks, 256, 0, st>>>(T, f, alpha, M, G, warm, S, O); break;
    default: move_build_kernel<CapT, kPairPotts><<<blocks, 256, 0, st>>>(T, f, alpha, M, G, warm, S, O);
  }
  TC_MOVES_CHECK(cudaGetLastError());
}

template <typename CapT>
void delta_typed(cudaStream_t st, const MoveTerms& T, const long long* f, const bool* take, long long a,
                 const MoveGeom& G, unsigned long long* delta) {
  const dim3 grid((unsigned)((G.N + 255) / 256), (unsigned)T.B);
  switch (T.mode) {
    case kPairExact: move_delta_kernel<CapT, kPairExact><<<grid, 256, 0, st>>>(T, f, take, a, G, delta); break;
    case kPairFloat: move_delta_kernel<CapT, kPairFloat><<<grid, 256, 0, st>>>(T, f, take, a, G, delta); break;
    default: move_delta_kernel<CapT, kPairPotts><<<grid, 256, 0, st>>>(T, f, take, a, G, delta);
  }
  TC_MOVES_CHECK(cudaGetLastError());
}

}  // namespace

void launch_move_build(cudaStream_t st, int cap_bytes, const MoveTerms& T, const long long* f, const long long* alpha,
                       long long M, const MoveGeom& G, bool warm, const MoveState& S, const MoveOut& O) {
  if (cap_bytes == 4)
    build_typed<int>(st, T, f, alpha, M, G, warm, S, O);
  else
    build_typed<long long>(st, T, f, alpha, M, G, warm, S, O);
}

void launch_move_apply(cudaStream_t st, int cap_bytes, const MoveTerms& T, const long long* f, const bool* take,
                       long long alpha, const long long* e, const MoveGeom& G, long long* delta, long long* f_out,
                       long long* e_out) {
  auto* acc = reinterpret_cast<unsigned long long*>(delta);
  if (cap_bytes == 4)
    delta_typed<int>(st, T, f, take, alpha, G, acc);
  else
    delta_typed<long long>(st, T, f, take, alpha, G, acc);
  const dim3 grid((unsigned)((G.N + 255) / 256), (unsigned)T.B);
  move_select_kernel<<<grid, 256, 0, st>>>(f, take, alpha, delta, e, G.N, f_out, e_out);
  TC_MOVES_CHECK(cudaGetLastError());
}

}  // namespace torchcut_grid
