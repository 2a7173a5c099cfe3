// Push kernels for int capacities (the templates are in grid_push.cuh).
#include "grid_push.cuh"

namespace torchcut_grid {
template void launch_push<int>(cudaStream_t, int, int, size_t, int*, long long*, int*, int*, int*, const Geom&,
                                 int, int, unsigned long long*, unsigned long long*, long long*, int*, int,
                                 long long);
}  // namespace torchcut_grid
