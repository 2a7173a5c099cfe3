// Terminal netting, written once for the native code.
//
// A node with source capacity s and sink capacity k has the same minimum cuts as one with s - m and
// k - m, m = min(s, k), and a maximum flow m larger: the m units go straight from the source to the sink
// through the node. The solvers keep the netted pair as one signed value t = s - k (net_terminal): t > 0
// is the excess left at the node (an unsaturated source arc, as a preflow), t < 0 the residual capacity
// of its sink arc. net_source and net_sink give the pair back; both are never non-zero at once.
//
// Plain C++ (no torch headers), usable from device code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TORCHCUT_HOST_DEVICE __host__ __device__
#else
#define TORCHCUT_HOST_DEVICE
#endif

namespace torchcut {

// s - k: > 0 the excess, < 0 minus the residual sink capacity of the netted pair.
TORCHCUT_HOST_DEVICE inline int64_t net_terminal(int64_t source, int64_t sink) { return source - sink; }
// max(t, 0): the netted source capacity (the excess).
TORCHCUT_HOST_DEVICE inline int64_t net_source(int64_t t) { return t > 0 ? t : 0; }
// max(-t, 0): the netted sink capacity.
TORCHCUT_HOST_DEVICE inline int64_t net_sink(int64_t t) { return t < 0 ? -t : 0; }

// Both netted capacities at once in the operands' own type T, for loops over one narrow type that the
// compiler vectorises (int32 stays int32: s, k >= 0, so s - k cannot overflow).
template <class T>
TORCHCUT_HOST_DEVICE inline void net_pair(T source, T sink, T* net_src, T* net_snk) {
  const T t = source - sink;
  *net_src = t > 0 ? t : T(0);
  *net_snk = t < 0 ? T(-t) : T(0);
}

}  // namespace torchcut
