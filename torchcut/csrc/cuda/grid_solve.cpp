// Host loop of the grid push-relabel solver (phase one): geometry, buffers, and the cycle of one global
// relabel (a worklist BFS launch) and a few push launches, with one read-back of the counters per cycle.
// Plain C++ and the CUDA runtime: the kernels are launched through grid_common.h's launchers. The first
// push launch of each cycle is queued before the host waits for the counters (see `ahead`).
//
// Layout (see torchcut/grid.py): caps [B, D, N] residuals, D = 2K directions (d < K: offsets[d],
// d >= K: -offsets[d-K]); excess [B, N] int64; sink [B, N] residual sink capacities; N = Z*Y*X with
// x fastest. 2D grids are 3D grids with Z = 1. The grid is cut into push tiles (grid_push.cuh) and BFS
// tiles (grid_bfs.cu), each of its own extent.
//
// Push launches per relabel: half the BFS depth in tiles (capped at 4 on 4/6-connected grids, at least 6
// on 18/26-connected volumes), or
// push_tail (default: the BFS depth, 6 to 24) once at most a quarter as many tiles are active as there
// are push blocks (late cycles: a launch then costs ~25 us, a BFS ~200 us).
// Repaired relabels (option repair): a global relabel after the first may start from the last one's
// distances and recompute only what the pushes may have changed (repair_tile in grid_bfs.cu: a support
// pass from the tiles the pushes visited, then the BFS relaxation from the tiles it flagged). It visits
// fewer tiles, but its two passes are each a wavefront: it pays where a full BFS is bound by tile visits
// (large grids, batches: twice the BFS blocks in visits per tile of depth), not where it is bound
// by its depth (hard energies, small grids). So by default, on grids of at least 4 BFS tiles per
// resident BFS block, every relabel after a full BFS bound by its visits is a repair. (Timing each
// relabel and repairing only while the last repair took no longer than the last full BFS was measured:
// a choice by timings makes the schedule of 256^3 change from run to run, 9 against 14 ms.)
// A repair's cost is estimated from its counters instead, in units of one wavefront step of a resident
// BFS block: max(visits / BFS blocks, depth in tiles). A repair that costs at least as many units as
// the last full BFS lost; the relabel after it is full, and after kRepairLosses lost repairs the run
// relabels in full from then on (and the last full BFS decides the other rules again). Where the sink
// is next to most nodes (the BVZ expansion moves of 1536 x 1152: a full BFS 3-45 tiles deep, repairs
// 18-40 tiles deep over 2-3x the visits) repairs cost 1.2x the time of the same solve without them;
// on large photographs, volumes and batches the first repair may lose but the later ones win (a 2048^2
// photograph: 60 units against 34, then 6-26 against 26).
// Chained pushes (option push_chain, grid_push.cuh): on a single 2D grid of at least 512^2 nodes, in a
// cycle whose BFS was bound by its depth (at least 12 tiles deep) and that starts with at most twice as
// many active tiles as there are push blocks, the cycle's P push launches become ceil(P / 16) chained
// ones (after the unchained first), each visiting up to 16 times the listed tiles: tiles that flow
// enters, or that stay active, go back into the launch's worklist, so flow crosses a tile border at the
// latency of a tile visit (~12 us) instead of a launch's (~25-30 us). Where few tiles are active the
// launches are latency-bound and chaining pays: hard 1024^2 energies 1.09-1.14x, hard 512^2 up to 1.2x
// (fewer relabels). Where thousands of tiles are active a launch is bound by its visits, and a chained
// launch that appends every tile flow enters multiplies the visits on stale heights: large photographs
// (2-8 MP, thin branching structures) took 2.4-3x as long with chaining and no active-tile bound.
// Not on grids whose BFS is bound by its visits (2048^2, batches) either: 1.5-2x slower there.
// Option profile: per-visit cycle counters (push: load, rounds; BFS: pop, load, passes, write, notify);
// profile = 2 also prints one line per relabel cycle and push launch.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "grid_common.h"

namespace torchcut_grid {

namespace {


void require(bool ok, const std::string& msg) {
  if (!ok) throw std::runtime_error("torchcut_grid: " + msg);
}

std::string dims(int x, int y, int z) { return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z); }

// Tile counts, per-direction offsets and whether BFS tile skipping is safe, from X/Y/Z and TX/TY/TZ.
void finish_geom(Geom& G, const std::vector<int64_t>& offsets, int nd) {
  const int K = G.K;
  G.nTX = (G.X + G.TX - 1) / G.TX;
  G.nTY = (G.Y + G.TY - 1) / G.TY;
  G.nTZ = (G.Z + G.TZ - 1) / G.TZ;
  G.T = G.nTX * G.nTY * G.nTZ;
  G.bfs_skip = 1;
  for (int d = 0; d < G.D; ++d) {
    const int k = d < K ? d : d - K;
    const int sgn = d < K ? 1 : -1;
    const int ox = sgn * (int)offsets[k * nd + nd - 1];
    const int oy = sgn * (int)offsets[k * nd + nd - 2];
    const int oz = nd == 3 ? sgn * (int)offsets[k * nd] : 0;
    G.dx[d] = ox;
    G.dy[d] = oy;
    G.dz[d] = oz;
    G.slin[d] = ox + G.TX * (oy + G.TY * oz);
    G.glin[d] = ox + (long long)G.X * (oy + (long long)G.Y * oz);
    // the BFS notifies the 3x3x3 neighbouring tiles by bits; longer offsets notify their target tile
    if (std::abs(ox) > G.TX || std::abs(oy) > G.TY || std::abs(oz) > G.TZ) G.bfs_skip = 0;
  }
  // push: the height box (halo as deep as the longest offset along each axis, at most 2)
  int px = 0, py = 0, pz = 0;
  for (int d = 0; d < G.D; ++d) {
    px = std::max(px, std::abs(G.dx[d]));
    py = std::max(py, std::abs(G.dy[d]));
    pz = std::max(pz, std::abs(G.dz[d]));
  }
  G.box = px <= 2 && py <= 2 && pz <= 2;
  if (!G.box) px = py = pz = 0;
  G.px = px;
  G.py = py;
  G.pz = pz;
  G.BX = G.TX + 2 * px;
  G.BY = G.TY + 2 * py;
  G.boxN = G.BX * G.BY * (G.TZ + 2 * pz);
  // scan BFS: padded layout, unit steps along each axis, the rest
  G.SX = G.TX + 1;
  G.other = 0;
  for (int a = 0; a < 3; ++a) G.axm[a] = G.axp[a] = -1;
  G.dgm[0] = G.dgp[0] = G.dgm[1] = G.dgp[1] = -1;  // 2D diagonals (the 32 x 16 BFS tile scans them)
  for (int d = 0; d < G.D; ++d) {
    G.boff[d] = G.dx[d] + G.BX * (G.dy[d] + G.BY * G.dz[d]);
    G.plin[d] = G.dx[d] + G.SX * (G.dy[d] + G.TY * G.dz[d]);
    const int ax = std::abs(G.dx[d]), ay = std::abs(G.dy[d]), az = std::abs(G.dz[d]);
    const int a = ax + ay + az != 1 ? -1 : ax ? 0 : ay ? 1 : 2;
    if (a >= 0) {
      const int step = G.dx[d] + G.dy[d] + G.dz[d];
      (step < 0 ? G.axm : G.axp)[a] = d;
    } else {
      G.other |= 1ULL << d;
      if (az == 0 && ax == 1 && ay == 1) {
        const int f = G.dx[d] == G.dy[d] ? 0 : 1;  // 0: (-1, -1) and (1, 1); 1: (1, -1) and (-1, 1)
        (G.dy[d] < 0 ? G.dgm : G.dgp)[f] = d;
      }
    }
  }
  G.other_diag = G.other;
  if (std::min({G.dgm[0], G.dgp[0], G.dgm[1], G.dgp[1]}) >= 0)
    for (int f = 0; f < 2; ++f) G.other_diag &= ~((1ULL << G.dgm[f]) | (1ULL << G.dgp[f]));
}

bool pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }
int pick(int64_t want, int fallback) { return want > 0 ? (int)want : fallback; }

// Destroys events on every exit: the profile's timing events e, and done (the counters' read-back).
struct Events {
  cudaEvent_t e[3];
  int n = 0;
  cudaEvent_t done = nullptr;
  ~Events() {
    for (int k = 0; k < n; ++k) cudaEventDestroy(e[k]);
    if (done != nullptr) cudaEventDestroy(done);
  }
};

template <typename CapT, typename MaskT>
void solve_typed(CapT* cp, long long* ep, CapT* sp, bool* out, const Geom& G, const Geom& GB, int64_t B,
                 const Options& opts, cudaStream_t st, int sms, Alloc& alloc, int64_t* stats) {
  const int NT = G.TX * G.TY * G.TZ;
  const int NTB = GB.TX * GB.TY * GB.TZ;  // threads of a BFS block
  const long long total = (long long)B * G.N;
  const long long pt = (long long)G.T * B;      // push tiles of all items
  const long long qtiles = (long long)GB.T * B;  // BFS tiles of all items
  int* hp = static_cast<int*>(alloc.device(total * sizeof(int)));
  MaskT* mp = static_cast<MaskT*>(alloc.device(total * sizeof(MaskT)));
  int* tap = static_cast<int*>(alloc.device(pt * sizeof(int)));
  // chained launches: the listed tiles and those appended during the launch, up to chain_max times
  const bool chain_on = opts.push_chain >= 0 && push_chains(G);
  const bool chain_always = opts.push_chain > 0;
  // by default only on single grids of at least 512^2 nodes (the multi-label moves, batches and
  // 288 x 384 grids, measured 1.2x slower with it: Tsukuba 84 -> 104 ms, refine 145 -> 170 ms)
  const bool chain_auto = chain_on && B == 1 && G.N >= (1LL << 18);
  // sweeps of the factor: 8 gained less; 32 gained more on some hard energies, but cost 512^2 4c 1.2x
  constexpr int kChainFactor = 16;
  const int chain_max = chain_always ? (int)opts.push_chain : kChainFactor;
  const long long plist_cap = (chain_on ? chain_max : 1) * pt;
  long long* plist = static_cast<long long*>(alloc.device(plist_cap * sizeof(long long)));
  // Counters (slots k*): the active count, the profile counters, and the queue BFS's head, tail,
  // pending, max_gen, visits and stalled, each of those in its own 128-byte line (every visit updates
  // them, and idle blocks poll pending); the push walk's two counter pairs.
  long long* scp = static_cast<long long*>(alloc.device(kSlots * sizeof(long long)));
  long long* hostp = static_cast<long long*>(alloc.pinned(kSlots * sizeof(long long)));
  unsigned long long capq = 4096;
  while (capq < 4ULL * (unsigned long long)(qtiles + 4096)) capq <<= 1;  // never wraps onto a live slot
  Work W{};
  W.state = static_cast<int*>(alloc.device(qtiles * sizeof(int)));
  W.gen = static_cast<int*>(alloc.device(qtiles * sizeof(int)));
  W.ring = static_cast<long long*>(alloc.device(capq * sizeof(long long)));
  TC_CUDA_CHECK(cudaMemsetAsync(tap, 0, pt * sizeof(int), st));
  TC_CUDA_CHECK(cudaMemsetAsync(scp, 0, kSlots * sizeof(long long), st));
  TC_CUDA_CHECK(cudaMemsetAsync(W.state, 0, qtiles * sizeof(int), st));
  TC_CUDA_CHECK(cudaMemsetAsync(W.gen, 0, qtiles * sizeof(int), st));
  TC_CUDA_CHECK(cudaMemsetAsync(W.ring, 0xff, capq * sizeof(long long), st));  // -1: empty
  // Repair: the masks need a spare bit (the residual sink arc) and neighbour tiles within 3x3x3.
  // By default only where a full BFS can be bound by its visits: at least 4 BFS tiles per resident BFS
  // block (per_sm_bfs * sms, below); smaller grids pay nothing for it (timing events, touched flags).
  const long long bfs_fit = (long long)(opts.persist > 0 ? opts.persist : std::max(1, 2048 / NTB)) * sms;
  const bool repair = opts.repair >= 0 && GB.bfs_skip && GB.D < (int)(8 * sizeof(MaskT)) &&
                      (opts.repair > 0 || qtiles >= 4 * bfs_fit);
  const bool repair_always = opts.repair > 0;
  int* touched = nullptr;  // push tiles visited (or next to a raised height) since the last relabel
  int* relax = nullptr;    // BFS tiles the repair's relaxation starts from
  if (repair) {
    touched = static_cast<int*>(alloc.device(pt * sizeof(int)));
    relax = static_cast<int*>(alloc.device(qtiles * sizeof(int)));
    TC_CUDA_CHECK(cudaMemsetAsync(touched, 0, pt * sizeof(int), st));
    TC_CUDA_CHECK(cudaMemsetAsync(relax, 0, qtiles * sizeof(int), st));
  }
  for (int k = 0; k < kSlots; ++k) hostp[k] = 0;
  // batches: active nodes per item, two buffers (ItemCounts); 0xff.. = not yet counted (every item live)
  ItemCounts ic_pair[2];
  if (B > 1 && opts.item_skip >= 0) {
    auto* cnt = static_cast<unsigned long long*>(alloc.device(2 * B * sizeof(unsigned long long)));
    TC_CUDA_CHECK(cudaMemsetAsync(cnt, 0xff, 2 * B * sizeof(unsigned long long), st));
    for (int k = 0; k < 2; ++k) ic_pair[k] = ItemCounts{cnt + (1 - k) * B, cnt + k * B, (int)B};
  }
  W.mask = capq - 1;
  W.head = reinterpret_cast<unsigned long long*>(scp + kHead);
  W.tail = reinterpret_cast<unsigned long long*>(scp + kTail);
  W.pending = scp + kPending;
  W.stalled = scp + kStalled;
  W.max_gen = scp + kMaxGen;
  W.visits = scp + kVisits;

  const bool profile = opts.profile != 0;
  const bool trace = opts.profile >= 2;  // one line per relabel cycle and push launch on stderr
  unsigned long long* prof = profile ? reinterpret_cast<unsigned long long*>(scp + kProf) : nullptr;
  W.prof = prof;
  // Persistent grids: blocks walk over the tiles of all items (2 push blocks per SM, as many BFS blocks
  // as fit; persist = n: n per SM; -1: one block per tile).
  const long long cap = (1LL << 31) - 1;
  const int per_sm_push = (int)(opts.persist > 0 ? opts.persist : 2);
  const int per_sm_bfs = (int)(bfs_fit / sms);
  const int push_blocks = (int)std::min(cap, opts.persist < 0 ? pt : std::min<long long>(pt, (long long)per_sm_push * sms));
  const int bfs_blocks = (int)std::min(cap, opts.persist < 0 ? qtiles : std::min<long long>(qtiles, (long long)per_sm_bfs * sms));
  Events ev;
  float bfs_ms = 0, push_ms = 0;
  if (profile)
    for (; ev.n < 3; ++ev.n) TC_CUDA_CHECK(cudaEventCreate(&ev.e[ev.n]));
  else
    TC_CUDA_CHECK(cudaEventCreateWithFlags(&ev.done, cudaEventDisableTiming));
  const size_t smem = (size_t)NT * (sizeof(long long) + (G.D + 1) * sizeof(CapT)) + (size_t)G.boxN * sizeof(int);
  const int flat_blocks = (int)std::min<long long>((total + 255) / 256, 16LL * sms);
  const int rounds = opts.rounds > 0 ? (int)opts.rounds : 16;
  const int64_t push_opt = opts.push_launches;
  const int64_t max_cycles = opts.max_cycles > 0 ? opts.max_cycles : 1000000;
  const int items = (int)B;
  unsigned long long* pq0 = reinterpret_cast<unsigned long long*>(scp + kPushQueue);  // two quads, zero at start
  long long push_seq = 0;
  int64_t chained = 0;
  // launch k uses quad k % 2; its list_kernel clears the other quad for launch k + 1
  auto push = [&](bool chain) {
    unsigned long long* pq = pq0 + 4 * (push_seq & 1);
    unsigned long long* other = pq0 + 4 * ((push_seq + 1) & 1);
    ++push_seq;
    chain = chain && chain_on;
    chained += chain;
    if (chain) TC_CUDA_CHECK(cudaMemsetAsync(plist, 0xff, plist_cap * sizeof(long long), st));  // -1: unwritten
    launch_list(st, tap, pq, plist, pt, other);
    launch_push<CapT>(st, push_blocks, NT, smem, cp, ep, sp, hp, tap, G, rounds, items, prof, pq, plist, touched,
                      chain ? chain_max : 0, plist_cap);
    TC_CUDA_CHECK(cudaGetLastError());
  };
  int clock_khz = 1;  // cycles per ms (profile counters are clock64 cycles)
  if (profile) {
    int dev = 0;
    TC_CUDA_CHECK(cudaGetDevice(&dev));
    TC_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  }
  const double khz = std::max(clock_khz, 1);
  long long seen[kSlots] = {0};  // trace: counters at the last line
  // Push launches between two global relabels: half the BFS depth in tiles, at most 4 on 4/6-connected
  // grids (a sweep: fixed 4 beat depth/2 by 5-12% at 1024^2 4c and 128^3; on 1024^2 8c it lost 10-30%,
  // so more directions keep depth/2).
  const int push_cap = G.D <= 6 ? 4 : 64;
  // 3D grids of 18 or 26 directions: at least 6 (a sweep: their BFS is 2-5
  // tiles deep, so depth/2 gave 1-2 pushes per relabel and the BFS dominated; 6 took 64^3 26c 7.03 ->
  // 5.20 ms, the hard 26c volumes 7.5 -> 4.5, 11.5 -> 6.7, 6.2 -> 5.3 ms, 128^3 26c 25.6 -> 25.1 ms).
  const int push_min = G.D >= 18 && G.Z > 1 ? 6 : 1;
  // Tail (option push_tail): when at most a quarter as many tiles are active as there are push blocks, a
  // push launch costs about one tile visit plus the launch (~25 us) and a BFS ~8 of them, so run more
  // push launches before the next BFS (a trace at 1024^2: the last 7 of 12 cycles had 10-70 active
  // tiles and 2-4 pushes each). Default: as many launches as the BFS was deep in tiles, 6 to 24 (fixed 6
  // was best at 1024^2, 24 at 2048^2; the depth grows with the grid).
  const bool tail_on = opts.push_tail >= 0;
  const int tail_fixed = opts.push_tail > 0 ? (int)opts.push_tail : 0;

  // The first push launch of a cycle goes in before the read-back of the BFS's counters, so the GPU
  // works while the host waits for them (every cycle runs at least one push launch). After the last BFS
  // it finds no listed tile and changes nothing. Not with the option profile (its events time phases).
  const bool ahead = !profile;
  int64_t cycles = 0, push_launches = 0, syncs = 0, bfs_depth = 0;
  // The depth in tiles that sets the push launches per relabel: the last BFS's, at least the last full
  // one's after a repair (whose own depth counts only the tiles it visited).
  int full_depth = 0;
  int64_t repairs = 0;
  constexpr int kChainDepth = 12;  // chained pushes: after a BFS bound by its depth, at least this deep
  constexpr long long kChainTiles = 2;  // chained pushes: at most this many active tiles per push block
  long long seen_visits = 0;  // BFS tile visits before this relabel
  bool full_by_visits = false;  // the last full BFS visited more tiles per tile of depth than bfs_blocks
  constexpr int kRepairLosses = 2;  // repairs: lost repairs after which every relabel is full
  int repair_losses = 0;
  bool after_loss = false;  // the last relabel was a repair that lost
  double full_units = 0;    // the last full BFS's cost in wavefront steps
  int status = kStatusOk;
  while (true) {
    // ---- global relabel: one queue BFS launch (bfs_init_kernel zeroes its counters), then one read-back
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev.e[1], st));
    const ItemCounts& ic = ic_pair[syncs & 1];  // this BFS counts into the buffer the last one read
    bool warm = repair && syncs > 0;
    if (warm && !repair_always) warm = full_by_visits && !after_loss && repair_losses < kRepairLosses;
    launch_bfs_init<CapT, MaskT>(st, flat_blocks, cp, sp, mp, hp, GB, items, W.state, scp, ic, warm);
    if (warm) {
      launch_repair_seed(st, touched, pt, G, GB, W);
      launch_repair_queue<MaskT>(st, bfs_blocks, NTB, mp, hp, GB, W, relax);
      launch_seed(st, W, qtiles, relax);
    } else {
      if (repair) TC_CUDA_CHECK(cudaMemsetAsync(touched, 0, pt * sizeof(int), st));  // a full BFS needs none
      launch_seed(st, W, qtiles, nullptr);
    }
    launch_bfs_queue<MaskT>(st, bfs_blocks, NTB, mp, hp, GB, W);
    launch_count(st, items, ep, hp, tap, reinterpret_cast<unsigned long long*>(scp + kActive), G, ic);
    TC_CUDA_CHECK(cudaGetLastError());
    TC_CUDA_CHECK(cudaMemcpyAsync(hostp, scp, kSlots * sizeof(long long), cudaMemcpyDeviceToHost, st));
    if (ahead) {
      TC_CUDA_CHECK(cudaEventRecord(ev.done, st));
      push(chain_always);  // before the counters are read: chained only where the option forces it
      TC_CUDA_CHECK(cudaEventSynchronize(ev.done));
    } else {
      TC_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    ++syncs;
    repairs += warm;
    if (hostp[kStalled] != 0) {  // never expected; reported by the Python layer (no exception crosses the op)
      status = kStatusStalled;
      break;
    }
    if (profile) {
      TC_CUDA_CHECK(cudaEventRecord(ev.e[2], st));
      TC_CUDA_CHECK(cudaEventSynchronize(ev.e[2]));
      float a = 0;
      TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev.e[1], ev.e[2]));
      bfs_ms += a;
      if (cycles > 0) {
        TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev.e[0], ev.e[1]));
        push_ms += a;
      }
    }
    const int gen_depth = (int)hostp[kMaxGen] + 1;  // wavefront depth in tiles
    if (!warm) full_depth = gen_depth;
    const int last_bfs = std::max(full_depth, gen_depth);
    const long long visits = hostp[kVisits] - seen_visits;
    seen_visits = hostp[kVisits];
    // bound by its visits: at least twice as many per tile of depth as there are BFS blocks (measured:
    // repairs paid at 2.3-14x, on 2048^2, 256^3 and a batch of 32 x 512^2, and lost at 1.3-1.9x)
    const bool by_visits = visits >= 2LL * gen_depth * bfs_blocks;
    const double units = std::max((double)visits / std::max(bfs_blocks, 1), (double)gen_depth);
    if (!warm) {
      full_units = units;
      // a full BFS after a lost repair keeps the run's regime unless repairs are over
      if (!after_loss || repair_losses >= kRepairLosses) full_by_visits = by_visits;
    }
    after_loss = warm && !repair_always && units >= full_units;
    repair_losses += after_loss;
    bfs_depth += gen_depth;
    if (trace) {
      float a = 0;
      TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev.e[1], ev.e[2]));
      const long long v = hostp[kVisits] - seen[kVisits];
      auto per = [&](int k) { return v ? (hostp[kProf + k] - seen[kProf + k]) / khz * 1000 / v : 0.0; };
      fprintf(stderr,
              "trace cycle %lld: bfs %.1f us, %lld visits, depth %d, pop %.2f us/visit, relax %.2f us/visit "
              "(load %.2f, passes %.2f, write %.2f, notify %.2f), %.1f passes/visit, active %lld (tiles %lld)%s\n",
              (long long)cycles, a * 1000, v, gen_depth, per(3), per(4), per(8), per(9), per(10), per(11),
              v ? (double)(hostp[kProf + 5] - seen[kProf + 5]) / v : 0.0, hostp[kActive], hostp[kActiveTiles],
              warm ? ", repaired" : "");
      for (int k = 0; k < kSlots; ++k) seen[k] = hostp[k];
    }
    if (hostp[kActive] == 0) break;
    if (++cycles > max_cycles) {  // reported by the Python layer (no exception crosses the op)
      status = kStatusCycles;
      break;
    }
    // ---- push/relabel launches
    if (profile) TC_CUDA_CHECK(cudaEventRecord(ev.e[0], st));
    int P = push_opt > 0 ? (int)push_opt : std::max(push_min, std::min(push_cap, last_bfs / 2));
    if (tail_on && push_opt <= 0 && hostp[kActiveTiles] * 4 <= push_blocks)
      P = std::max(P, tail_fixed ? tail_fixed : std::min(24, std::max(6, last_bfs)));
    // Chained pushes (see the top): late cycles of a BFS bound by its depth
    const bool chain = chain_always || (chain_auto && !full_by_visits && last_bfs >= kChainDepth &&
                                        hostp[kActiveTiles] <= kChainTiles * push_blocks);
    if (chain && !chain_always) P = (ahead ? 1 : 0) + std::max(1, (P + kChainFactor - 1) / kChainFactor);
    for (int p = ahead ? 1 : 0; p < P; ++p) {
      if (trace) TC_CUDA_CHECK(cudaEventRecord(ev.e[2], st));
      push(chain);
      if (trace) {
        TC_CUDA_CHECK(cudaEventRecord(ev.e[1], st));
        TC_CUDA_CHECK(cudaMemcpyAsync(hostp, scp, kSlots * sizeof(long long), cudaMemcpyDeviceToHost, st));
        TC_CUDA_CHECK(cudaStreamSynchronize(st));
        float a = 0;
        TC_CUDA_CHECK(cudaEventElapsedTime(&a, ev.e[2], ev.e[1]));
        const long long v = hostp[kProf] - seen[kProf];
        auto per = [&](int k) { return v ? (hostp[kProf + k] - seen[kProf + k]) / khz * 1000 / v : 0.0; };
        fprintf(stderr, "trace   push %d: %.1f us, %lld tiles, %.2f us/tile (load %.2f, rounds %.2f), %.1f rounds/tile\n",
                p, a * 1000, v, per(1), per(6), per(7), v ? (double)(hostp[kProf + 2] - seen[kProf + 2]) / v : 0.0);
        for (int k = 0; k < kSlots; ++k) seen[k] = hostp[k];
      }
    }
    push_launches += P;
  }
  launch_mask(st, flat_blocks, hp, out, total);
  TC_CUDA_CHECK(cudaGetLastError());
  Stats s;
  s.global_relabels = cycles + 1;
  s.bfs_launches = cycles + 1;  // one worklist launch per global relabel
  s.push_launches = push_launches;
  s.host_syncs = syncs;
  s.rounds_per_launch = rounds;
  s.tile_x = G.TX;
  s.tile_y = G.TY;
  s.tile_z = G.TZ;
  s.bfs_tile_x = GB.TX;
  s.bfs_tile_y = GB.TY;
  s.bfs_tile_z = GB.TZ;
  s.bfs_us = (int64_t)(bfs_ms * 1000);
  s.push_us = (int64_t)(push_ms * 1000);
  s.bfs_visits = hostp[kVisits];
  s.bfs_depth = bfs_depth;
  s.push_visits = hostp[kProf];
  s.push_visit_us = (int64_t)(hostp[kProf + 1] / khz * 1000);
  s.push_rounds = hostp[kProf + 2];
  s.bfs_pop_us = (int64_t)(hostp[kProf + 3] / khz * 1000);
  s.bfs_relax_us = (int64_t)(hostp[kProf + 4] / khz * 1000);
  s.bfs_passes = hostp[kProf + 5];
  s.repairs = repairs;
  s.chained_launches = chained;
  s.status = status;
  s.write(stats);
}

}  // namespace

void geometry(const std::vector<int64_t>& shape, const std::vector<int64_t>& offsets, const Options& opts, Geom& G,
              Geom& GB) {
  const int nd = (int)shape.size();
  G = Geom{};
  G.X = (int)shape[nd - 1];
  G.Y = (int)shape[nd - 2];
  G.Z = nd == 3 ? (int)shape[0] : 1;
  G.N = (long long)G.X * G.Y * G.Z;
  const int K = (int)(offsets.size() / nd);
  G.K = K;
  G.D = 2 * K;
  // Push tiles: 512 threads, one node each (256 for many directions, to keep shared memory moderate).
  if (nd == 2) {
    G.TX = pick(opts.tile_x, 32);
    G.TY = pick(opts.tile_y, G.D > 8 ? 8 : 16);
    G.TZ = 1;
  } else {
    G.TX = pick(opts.tile_x, 8);  // 8x8x8 beat 16x8x4 at 128^3 (3.06 vs 3.25 ms) and 256^3
    G.TY = pick(opts.tile_y, 8);
    G.TZ = pick(opts.tile_z, G.D > 8 ? 4 : 8);
  }
  require(G.TX * G.TY * G.TZ <= 512 && G.TX * G.TY * G.TZ >= 32,
          "tile: expected between 32 and 512 nodes, got " + dims(G.TX, G.TY, G.TZ));
  finish_geom(G, offsets, nd);
  require((long long)G.nTX * G.nTY * G.nTZ < (1LL << 31), "grid too large");
  // BFS tiles: up to 1024 threads, each extent a power of two <= 32.
  GB = G;
  GB.TX = pick(opts.bfs_tile_x, nd == 2 ? 32 : 8);  // 3D: 8x8x8 steadier than 16x8x8 at 128^3
  GB.TY = pick(opts.bfs_tile_y, nd == 2 ? 16 : 8);  // 32x16 measured a little faster than 32x32
  GB.TZ = nd == 2 ? 1 : pick(opts.bfs_tile_z, 8);
  const int nb = GB.TX * GB.TY * GB.TZ;
  require(pow2(GB.TX) && pow2(GB.TY) && pow2(GB.TZ) && GB.TX <= 32 && GB.TY <= 32 && GB.TZ <= 32 && nb >= 32 &&
              nb <= 1024,
          "BFS tile: expected powers of two, each at most 32, between 32 and 1024 nodes, got " +
              dims(GB.TX, GB.TY, GB.TZ));
  finish_geom(GB, offsets, nd);
}

namespace {

// Whether the items go to grid_small.cu: small enough for one block's shared memory on this device, and
// no option of the tiled solver set (max_cycles applies to both).
bool use_small(const Geom& G, const Options& o, int cap_bytes) {
  if (o.small < 0 || G.N > kSmallNodes || G.D > kSmallDirs) return false;
  // every option of the list but these two names one of the tiled solver's knobs
  bool tiled = false;
#define TORCHCUT_TILED_(name) \
  tiled |= std::string_view(#name) != "small" && std::string_view(#name) != "max_cycles" && o.name != 0;
  TORCHCUT_GRID_CUDA_OPTIONS(TORCHCUT_TILED_)
#undef TORCHCUT_TILED_
  if (tiled) return false;
  int dev = 0, most = 0;
  TC_CUDA_CHECK(cudaGetDevice(&dev));
  TC_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return small_smem_bytes(G.N, G.D, cap_bytes) + 64 <= (size_t)most;
}

template <typename CapT>
void solve_small(CapT* cp, long long* ep, CapT* sp, bool* out, const Geom& G, int64_t B, const Options& opts,
                 cudaStream_t st, Alloc& alloc, int64_t* stats) {
  const size_t bytes = (size_t)B * 4 * sizeof(long long);
  long long* cnt = static_cast<long long*>(alloc.device(bytes));
  long long* host = static_cast<long long*>(alloc.pinned(bytes));
  TC_CUDA_CHECK(cudaMemsetAsync(cnt, 0, bytes, st));
  const long long max_cycles = opts.max_cycles > 0 ? opts.max_cycles : 1000000;
  launch_small<CapT>(st, cp, ep, sp, out, G, (int)B, max_cycles, cnt);
  TC_CUDA_CHECK(cudaMemcpyAsync(host, cnt, bytes, cudaMemcpyDeviceToHost, st));
  TC_CUDA_CHECK(cudaStreamSynchronize(st));
  Stats s;
  for (int64_t b = 0; b < B; ++b) {
    s.global_relabels = std::max<int64_t>(s.global_relabels, host[b * 4]);
    s.sweeps += host[b * 4 + 1];
    s.push_visits += host[b * 4 + 2];
    if (host[b * 4 + 3] != kStatusOk) s.status = host[b * 4 + 3];
  }
  s.host_syncs = 1;
  s.one_launch = 1;
  s.write(stats);
}

}  // namespace

void solve(void* caps, int caps_bytes, long long* excess, void* sink, bool* out, const std::vector<int64_t>& shape,
           const std::vector<int64_t>& offsets, int64_t B, const Options& opts, cudaStream_t st, int sms, Alloc& alloc,
           int64_t* stats) {
  Geom G, GB;
  geometry(shape, offsets, opts, G, GB);
  require(B <= 65535, "batch: expected at most 65535 items");
  if (use_small(G, opts, caps_bytes)) {
    if (caps_bytes == 4)
      return solve_small<int>(static_cast<int*>(caps), excess, static_cast<int*>(sink), out, G, B, opts, st, alloc,
                              stats);
    return solve_small<long long>(static_cast<long long*>(caps), excess, static_cast<long long*>(sink), out, G, B,
                                  opts, st, alloc, stats);
  }
  if (caps_bytes == 4) {
    auto* c = static_cast<int*>(caps);
    auto* s = static_cast<int*>(sink);
    if (G.D < 32) return solve_typed<int, uint32_t>(c, excess, s, out, G, GB, B, opts, st, sms, alloc, stats);
    return solve_typed<int, unsigned long long>(c, excess, s, out, G, GB, B, opts, st, sms, alloc, stats);
  }
  auto* c = static_cast<long long*>(caps);
  auto* s = static_cast<long long*>(sink);
  if (G.D < 32) return solve_typed<long long, uint32_t>(c, excess, s, out, G, GB, B, opts, st, sms, alloc, stats);
  solve_typed<long long, unsigned long long>(c, excess, s, out, G, GB, B, opts, st, sms, alloc, stats);
}

}  // namespace torchcut_grid
