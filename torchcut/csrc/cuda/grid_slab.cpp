// torch.classes.torchcut.GridSlab: the grid push-relabel solver's state on one slab of a grid split along
// its outermost axis over several devices, stepped from Python (torchcut/distributed.py), which moves the
// border planes between devices (torch.distributed send/recv) and decides when to stop (all-reduces).
//
// The slab's tensors (caps [2K, *shape], excess [*shape] int64, sink [*shape]) hold its real planes
// [lo, hi) plus a ghost plane on each side that has a neighbour (lo - 1 and hi) and, below the first,
// filler planes so that the real planes start on a tile boundary. Ghost and filler nodes start with no
// capacity at all. The single-device kernels run unchanged on the whole extent:
//  * a push launch pushes across the border into the ghost plane like across any tile border (the arc's
//    reverse residual grows; the ghost node passes what it receives to its own sink arc at once, see
//    kGhostSink); pack() collects those residuals (exactly what crossed, per arc) and zeroes them; the
//    neighbour's absorb() adds them to its border plane (excess and
//    reverse residuals) and flags its active border tiles. The heights travel the other way: the ghost
//    plane holds the neighbour's border heights of the last exchange (a snapshot, like the heights of
//    other tiles within a launch: stale heights never break the preflow, only slow it);
//  * a global relabel is the worklist BFS from the sink with the ghost plane at infinity (relabel(true)),
//    then rounds: the neighbour's border distances lower the ghost plane (dist(), which flags the BFS
//    tiles next to a lowered ghost node) and the BFS relaxes from the flagged tiles (relabel(false)),
//    until no rank lowers a ghost node. Distances only decrease, so the rounds end in the exact BFS
//    distances of the whole grid.
// Nothing here waits for the device except counters(), so a push launch and its exchange queue up on the
// stream without a host round trip.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdlib>
#include <exception>
#include <type_traits>
#include <string>
#include <vector>

#include "grid_common.h"

namespace torchcut_grid {

namespace {

class GridSlab : public torch::CustomClassHolder {
 public:
  GridSlab(at::Tensor caps, at::Tensor excess, at::Tensor sink, std::vector<int64_t> shape,
           std::vector<int64_t> offsets, int64_t lo, int64_t hi, std::vector<int64_t> options)
      : caps_(caps), excess_(excess), sink_(sink), lo_(lo), hi_(hi) {
    const char* op = "torchcut.GridSlab";
    TORCH_CHECK(caps.is_cuda() && excess.device() == caps.device() && sink.device() == caps.device(), op,
                ": expected caps, excess and sink on one CUDA device");
    TORCH_CHECK(caps.scalar_type() == at::kInt || caps.scalar_type() == at::kLong, op,
                ": caps: expected int32 or int64, got ", caps.scalar_type());
    TORCH_CHECK(sink.scalar_type() == caps.scalar_type() && excess.scalar_type() == at::kLong, op,
                ": expected sink of the dtype of caps and int64 excess, got ", sink.scalar_type(), " and ",
                excess.scalar_type());
    TORCH_CHECK(caps.is_contiguous() && excess.is_contiguous() && sink.is_contiguous(), op,
                ": expected contiguous caps, excess and sink");
    TORCH_CHECK(shape.size() == 2 || shape.size() == 3, op, ": shape: expected 2 or 3 dims, got ", shape.size());
    const int64_t nd = (int64_t)shape.size();
    TORCH_CHECK(!offsets.empty() && offsets.size() % nd == 0, op, ": offsets: expected K*ndim integers");
    const int64_t K = (int64_t)offsets.size() / nd;
    TORCH_CHECK(2 * K < 32, op, ": offsets: expected at most 15 offsets, got ", K);
    for (int64_t k = 0; k < K; ++k)
      TORCH_CHECK(std::abs(offsets[k * nd]) <= 1, op, ": offsets: expected steps of at most 1 along the split axis");
    N_ = 1;
    for (auto s : shape) N_ *= s;
    TORCH_CHECK(excess.numel() == N_ && sink.numel() == N_ && caps.numel() == 2 * K * N_, op,
                ": expected caps [2K, *shape], excess and sink [*shape] with shape ", shape, ", got ", caps.sizes(),
                ", ", excess.sizes(), ", ", sink.sizes());
    TORCH_CHECK(0 <= lo && lo < hi && hi <= shape[0], op, ": expected 0 <= lo < hi <= ", shape[0], ", got ", lo,
                " and ", hi);
    outer_ = shape[0];
    P_ = N_ / outer_;
    opts_ = Options::from(options);
    try {
      geometry(shape, offsets, opts_, G_, GB_);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
    // pack: the directions back from a ghost node into the slab; absorb: from a border node outwards
    for (int side = 0; side < 2; ++side) {
      const int out = side == 0 ? -1 : 1;
      for (int d = 0; d < G_.D; ++d) {
        const int a = nd == 3 ? G_.dz[d] : G_.dy[d];
        if (a == -out) pack_[side].d[pack_[side].n++] = d;
        if (a == out) absorb_[side].d[absorb_[side].n++] = d;
      }
    }
    // push tiles that hold padding only (below lo, or from hi on when hi starts a tile row): pack() clears
    // their flags, so that no launch visits them
    const int tz = nd == 3 ? G_.TZ : G_.TY;
    tile_rows_ = tz;
    row_tiles_ = (long long)G_.T / ((outer_ + tz - 1) / tz);
    pad_tiles_[0][0] = 0;
    pad_tiles_[0][1] = (lo / tz) * row_tiles_;
    pad_tiles_[1][0] = ((hi + tz - 1) / tz) * row_tiles_;
    pad_tiles_[1][1] = G_.T;
    c10::cuda::CUDAGuard guard(caps.device());
    auto i32 = caps.options().dtype(at::kInt);
    auto i64 = caps.options().dtype(at::kLong);
    height_ = at::full({N_}, kInf, i32);
    mask_ = at::empty({N_}, i32);
    tap_ = at::zeros({G_.T}, i32);
    plist_ = at::empty({G_.T}, i64);
    scal_ = at::zeros({kSlots}, i64);
    state_ = at::zeros({GB_.T}, i32);
    gen_ = at::zeros({GB_.T}, i32);
    flags_ = at::zeros({GB_.T}, i32);
    unsigned long long capq = 4096;
    while (capq < 4ULL * (unsigned long long)(GB_.T + 4096)) capq <<= 1;
    ring_ = at::full({(int64_t)capq}, -1, i64);
    W_.state = state_.data_ptr<int>();
    W_.gen = gen_.data_ptr<int>();
    W_.ring = reinterpret_cast<long long*>(ring_.data_ptr<int64_t>());
    W_.mask = capq - 1;
    long long* scp = reinterpret_cast<long long*>(scal_.data_ptr<int64_t>());
    W_.head = reinterpret_cast<unsigned long long*>(scp + kHead);
    W_.tail = reinterpret_cast<unsigned long long*>(scp + kTail);
    W_.pending = scp + kPending;
    W_.stalled = scp + kStalled;
    W_.max_gen = scp + kMaxGen;
    W_.visits = scp + kVisits;
    W_.prof = nullptr;
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int NTB = GB_.TX * GB_.TY * GB_.TZ;
    const long long bfs_fit = (long long)(opts_.persist > 0 ? opts_.persist : std::max(1, 2048 / NTB)) * sms;
    push_blocks_ = (int)std::min<long long>(G_.T, (long long)(opts_.persist > 0 ? opts_.persist : 2) * sms);
    bfs_blocks_ = (int)std::min<long long>(GB_.T, bfs_fit);
    flat_blocks_ = (int)std::min<long long>((N_ + 255) / 256, 16LL * sms);
    rounds_ = opts_.rounds > 0 ? (int)opts_.rounds : 16;
    // Repaired relabels, by the single-device rule (grid_solve.cpp): on slabs of at least 4 BFS tiles per
    // resident BFS block, after a full BFS bound by its visits (option repair: 1 always, -1 never).
    repair_ok_ = opts_.repair >= 0 && GB_.bfs_skip && (opts_.repair > 0 || GB_.T >= 4 * bfs_fit);
    if (repair_ok_) {
      touched_ = at::zeros({G_.T}, i32);
      relax_ = at::zeros({GB_.T}, i32);
    }
  }

  // One global relabel step: cold, the whole BFS from the sink (ghost planes at infinity); else the
  // relaxation from the tiles that dist() flagged.
  void relabel(bool cold) {
    c10::cuda::CUDAGuard guard(caps_.device());
    auto st = at::cuda::getCurrentCUDAStream();
    long long* scp = reinterpret_cast<long long*>(scal_.data_ptr<int64_t>());
    const int NTB = GB_.TX * GB_.TY * GB_.TZ;
    if (cold) {
      ghost_sinks(false);
      const bool warm = next_repair_;
      typed([&](auto* c, auto* s) {
        launch_bfs_init<std::remove_pointer_t<decltype(c)>, uint32_t>(
            st, flat_blocks_, c, s, mask(), height(), GB_, 1, W_.state, scp, ItemCounts{}, warm);
      });
      if (warm) {
        // The ghost planes' heights were the neighbours' push heights, no bound on their distances: they
        // restart at infinity, and the border tile rows are repaired, so that no height rests on them;
        // the rounds that follow lower them to the neighbours' exact distances.
        for (int side = 0; side < 2; ++side) {
          if (side == 0 ? lo_ == 0 : hi_ == outer_) continue;
          launch_slab_fill(st, height() + ghost(side) * P_, P_, kInf);
          launch_slab_fill(st, touched_.data_ptr<int>() + border(side) / tile_rows_ * row_tiles_, row_tiles_, 1);
        }
        launch_repair_seed(st, touched_.data_ptr<int>(), G_.T, G_, GB_, W_);
        launch_repair_queue<uint32_t>(st, bfs_blocks_, NTB, mask(), height(), GB_, W_, relax_.data_ptr<int>());
        launch_seed(st, W_, GB_.T, relax_.data_ptr<int>());
      } else {
        if (repair_ok_) TC_CUDA_CHECK(cudaMemsetAsync(touched_.data_ptr<int>(), 0, G_.T * sizeof(int), st));
        launch_seed(st, W_, GB_.T, nullptr);
      }
      last_warm_ = warm;
      repairs_ += warm;
    } else {
      launch_seed(st, W_, GB_.T, flags_.data_ptr<int>());
    }
    launch_bfs_queue<uint32_t>(st, bfs_blocks_, NTB, mask(), height(), GB_, W_);
    TC_CHECK_LAUNCH();
  }

  // The neighbour's border distances (dist, [P] int32) on side (0: below, 1: above); changed ([1] int64)
  // counts the ghost nodes they lowered.
  void dist(int64_t side, at::Tensor d, at::Tensor changed) {
    check_side(side);
    TORCH_CHECK(d.device() == caps_.device() && d.scalar_type() == at::kInt && d.is_contiguous() && d.numel() == P_,
                "torchcut.GridSlab.dist: dist: expected ", P_, " contiguous int32 values on ", caps_.device());
    TORCH_CHECK(changed.device() == caps_.device() && changed.scalar_type() == at::kLong && changed.numel() == 1,
                "torchcut.GridSlab.dist: changed: expected one int64 on ", caps_.device());
    c10::cuda::CUDAGuard guard(caps_.device());
    launch_slab_dist(at::cuda::getCurrentCUDAStream(), height(), flags_.data_ptr<int>(), GB_, P_, ghost(side),
                     border(side), d.data_ptr<int>(), reinterpret_cast<long long*>(changed.data_ptr<int64_t>()));
    TC_CHECK_LAUNCH();
  }

  // After the last relabel step: flags the tiles with an active node and returns, on the device, the
  // active nodes, the active tiles, the BFS depth in tiles and the stall flag.
  // Waits for the device (the counters decide the next relabel's kind, as on one device).
  at::Tensor count() {
    c10::cuda::CUDAGuard guard(caps_.device());
    auto st = at::cuda::getCurrentCUDAStream();
    unsigned long long* cnt = reinterpret_cast<unsigned long long*>(scal_.data_ptr<int64_t>() + kActive);
    launch_count(st, 1, excess_ptr(), height(), tap_.data_ptr<int>(), cnt, G_, ItemCounts{});
    TC_CHECK_LAUNCH();
    at::Tensor host = scal_.cpu();
    const int64_t* h = host.data_ptr<int64_t>();
    const int gen_depth = (int)h[kMaxGen] + 1;
    if (!last_warm_) full_depth_ = gen_depth;
    const long long visits = h[kVisits] - seen_visits_;
    seen_visits_ = h[kVisits];
    // bound by its visits: at least twice as many per tile of depth as there are BFS blocks
    if (!last_warm_) full_by_visits_ = visits >= 2LL * gen_depth * bfs_blocks_;
    next_repair_ = repair_ok_ && (opts_.repair > 0 || full_by_visits_);
    return at::tensor({h[kActive], h[kActiveTiles], (int64_t)std::max(full_depth_, gen_depth), h[kStalled]},
                      scal_.options());
  }

  // One push launch over the flagged tiles.
  void push() {
    c10::cuda::CUDAGuard guard(caps_.device());
    auto st = at::cuda::getCurrentCUDAStream();
    unsigned long long* pq0 = reinterpret_cast<unsigned long long*>(scal_.data_ptr<int64_t>() + kPushQueue);
    unsigned long long* pq = pq0 + 4 * (seq_ & 1);
    unsigned long long* other = pq0 + 4 * ((seq_ + 1) & 1);
    ++seq_;
    const int NT = G_.TX * G_.TY * G_.TZ;
    ghost_sinks(true);
    launch_list(st, tap_.data_ptr<int>(), pq, plist(), G_.T, other);
    typed([&](auto* c, auto* s) {
      using CapT = std::remove_pointer_t<decltype(c)>;
      const size_t smem = (size_t)NT * (sizeof(long long) + (G_.D + 1) * sizeof(CapT)) + (size_t)G_.boxN * sizeof(int);
      launch_push<CapT>(st, push_blocks_, NT, smem, c, excess_ptr(), s, height(), tap_.data_ptr<int>(), G_, rounds_, 1,
                        nullptr, pq, plist(), repair_ok_ ? touched_.data_ptr<int>() : nullptr, 0, G_.T);
    });
    TC_CHECK_LAUNCH();
  }

  // What this launch pushed into the ghost plane of side, and the border heights, into msg [n + 1, P].
  void pack(int64_t side, at::Tensor msg) {
    check_side(side);
    check_msg("pack", msg, pack_[side].n);
    c10::cuda::CUDAGuard guard(caps_.device());
    typed([&](auto* c, auto* s) {
      using CapT = std::remove_pointer_t<decltype(c)>;
      launch_slab_pack<CapT>(at::cuda::getCurrentCUDAStream(), c, excess_ptr(), s, height(), N_, P_, ghost(side),
                             border(side), pack_[side], static_cast<CapT*>(msg.data_ptr()), tap_.data_ptr<int>(),
                             pad_tiles_[side][0], pad_tiles_[side][1]);
    });
    TC_CHECK_LAUNCH();
  }

  // The neighbour's message of side (its pack of the facing side) into the border plane and ghost plane.
  void absorb(int64_t side, at::Tensor msg) {
    check_side(side);
    check_msg("absorb", msg, absorb_[side].n);
    c10::cuda::CUDAGuard guard(caps_.device());
    typed([&](auto* c, auto*) {
      using CapT = std::remove_pointer_t<decltype(c)>;
      launch_slab_absorb<CapT>(at::cuda::getCurrentCUDAStream(), c, excess_ptr(), height(), tap_.data_ptr<int>(), G_,
                               P_, ghost(side), border(side), absorb_[side], static_cast<CapT*>(msg.data_ptr()));
    });
    TC_CHECK_LAUNCH();
  }

  int64_t directions(int64_t side) const {
    check_side(side);
    return pack_[side].n;
  }
  at::Tensor heights() const { return height_; }
  // The solver's counters (host copy; waits for the device): BFS tile visits, push launches, repairs.
  std::vector<int64_t> counters() const {
    at::Tensor h = scal_.cpu();
    return {h[kVisits].item<int64_t>(), seq_, repairs_};
  }

 private:
  at::Tensor caps_, excess_, sink_, height_, mask_, tap_, plist_, scal_, state_, gen_, flags_, ring_, touched_, relax_;
  bool repair_ok_ = false, next_repair_ = false, last_warm_ = false, full_by_visits_ = false;
  int full_depth_ = 0, tile_rows_ = 1;  // push tile extent along the split axis
  long long row_tiles_ = 1;             // push tiles per tile row
  long long seen_visits_ = 0;
  int64_t repairs_ = 0;
  int64_t lo_, hi_, outer_ = 0, N_ = 0, P_ = 0, seq_ = 0;
  Options opts_;
  Geom G_{}, GB_{};
  Work W_{};
  SlabDirs pack_[2], absorb_[2];
  long long pad_tiles_[2][2] = {{0, 0}, {0, 0}};
  int push_blocks_ = 1, bfs_blocks_ = 1, flat_blocks_ = 1, rounds_ = 16;
  bool armed_ = false;  // the ghost planes' sink capacities are kGhostSink

  // The ghost planes' sink capacities (kGhostSink in grid_common.h): on for pushes, off for a global relabel.
  void ghost_sinks(bool on) {
    if (armed_ == on) return;
    armed_ = on;
    auto st = at::cuda::getCurrentCUDAStream();
    for (int side = 0; side < 2; ++side) {
      if (side == 0 ? lo_ == 0 : hi_ == outer_) continue;
      typed([&](auto*, auto* s) {
        launch_slab_ghost_sink<std::remove_pointer_t<decltype(s)>>(st, s, P_, ghost(side), on);
      });
    }
  }
  static void TC_CHECK_LAUNCH() {
    const cudaError_t e = cudaGetLastError();
    TORCH_CHECK(e == cudaSuccess, "torchcut.GridSlab: CUDA error: ", cudaGetErrorString(e));
  }
  void check_side(int64_t side) const {
    TORCH_CHECK(side == 0 || side == 1, "torchcut.GridSlab: side: expected 0 (below) or 1 (above), got ", side);
    TORCH_CHECK(side == 0 ? lo_ > 0 : hi_ < outer_,
                "torchcut.GridSlab: side ", side, " has no ghost plane");
  }
  void check_msg(const char* what, const at::Tensor& msg, int n) const {
    TORCH_CHECK(msg.device() == caps_.device() && msg.scalar_type() == caps_.scalar_type() && msg.is_contiguous() &&
                    msg.numel() == (n + 1) * P_,
                "torchcut.GridSlab.", what, ": msg: expected ", n + 1, " x ", P_, " contiguous ", caps_.scalar_type(),
                " values on ", caps_.device(), ", got ", msg.sizes(), " ", msg.scalar_type());
  }
  long long ghost(int64_t side) const { return side == 0 ? lo_ - 1 : hi_; }
  long long border(int64_t side) const { return side == 0 ? lo_ : hi_ - 1; }
  int* height() { return height_.data_ptr<int>(); }
  uint32_t* mask() { return reinterpret_cast<uint32_t*>(mask_.data_ptr<int>()); }
  long long* plist() { return reinterpret_cast<long long*>(plist_.data_ptr<int64_t>()); }
  long long* excess_ptr() { return reinterpret_cast<long long*>(excess_.data_ptr<int64_t>()); }
  template <typename F>
  void typed(F f) {
    if (caps_.scalar_type() == at::kInt)
      f(caps_.data_ptr<int>(), sink_.data_ptr<int>());
    else
      f(reinterpret_cast<long long*>(caps_.data_ptr<int64_t>()), reinterpret_cast<long long*>(sink_.data_ptr<int64_t>()));
  }
};

}  // namespace

}  // namespace torchcut_grid

TORCH_LIBRARY_FRAGMENT(torchcut, m) {
  using torchcut_grid::GridSlab;
  m.class_<GridSlab>("GridSlab")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, std::vector<int64_t>, int64_t, int64_t,
                       std::vector<int64_t>>())
      .def("relabel", &GridSlab::relabel)
      .def("dist", &GridSlab::dist)
      .def("count", &GridSlab::count)
      .def("push", &GridSlab::push)
      .def("pack", &GridSlab::pack)
      .def("absorb", &GridSlab::absorb)
      .def("directions", &GridSlab::directions)
      .def("heights", &GridSlab::heights)
      .def("counters", &GridSlab::counters);
}
