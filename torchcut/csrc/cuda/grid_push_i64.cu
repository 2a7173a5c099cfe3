// Push kernels for long long capacities (the templates are in grid_push.cuh).
#include "grid_push.cuh"

namespace torchcut_grid {
template void launch_push<long long>(cudaStream_t, int, int, size_t, long long*, long long*, long long*, int*, int*, const Geom&,
                                 int, int, unsigned long long*, unsigned long long*, long long*, int*, int,
                                 long long);
}  // namespace torchcut_grid
