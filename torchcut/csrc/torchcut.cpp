// The schema of every torchcut op, declared once: torch.ops.torchcut.<op>.
//
// Implementations are registered per dispatch key beside their code: cpu/*.cpp (CPU, in the library
// torchcut._C together with this file), grid_ops.cpp, csr_ops.cpp, energy_ops.cpp and energy_potts.cu
// (CUDA, in torchcut._C_cuda). The dispatcher picks the implementation from the device of the tensors; fake
// implementations for torch.compile are registered from Python (torchcut/_ops.py).
//
// Shared conventions of the max-flow ops (torchcut/grid.py and torchcut/graph.py give the layouts):
// terminal capacities live on the nodes; `mask` is the source side of the canonical minimum cut (the
// nodes that cannot reach the sink in the final residual network); `stats` is an int64 CPU tensor of
// counters named by torch.ops.torchcut.names (layouts.h), and so are the `options` lists. A solver
// reports "did not converge" as a status counter instead of throwing, and Python raises.
#include <torch/library.h>

#include <string>
#include <vector>

#include "layouts.h"

namespace {

std::vector<std::string> names_op(std::string table) {
  auto out = torchcut::names(table);
  TORCH_CHECK(!out.empty(), "torchcut.names: table: expected one of grid_cuda_options, grid_cuda_stats, "
              "grid_cpu_options, grid_cpu_algorithms, cpu_stats, csr_cuda_options, csr_cuda_stats; got '", table, "'");
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torchcut, m) {
  m.def("names(str table) -> str[]", &names_op);
  // Grid max-flow, one form per device. grid_solve (CPU: Boykov-Kolmogorov or pseudoflow then BK) reads
  // the network and returns new tensors, because the solver works on a padded copy anyway: the source
  // side, the counters, the final residuals, the excess left (an unsaturated source residual, as a
  // preflow) and the residual sink capacities, each [B, n]-shaped except the residuals ([B, 2K, *shape]).
  m.def("grid_solve(Tensor caps, Tensor source, Tensor sink, int[] shape, int[] offsets, int[] options) "
        "-> (Tensor mask, Tensor stats, Tensor residual, Tensor excess, Tensor sink_residual)");
  // grid_solve_ (CUDA: push-relabel) works in place on a network whose terminals are netted (excess =
  // source - sink >= 0), so the peak GPU memory stays at the network plus the solver's workspace.
  m.def("grid_solve_(Tensor(a!) caps, Tensor(b!) excess, Tensor(c!) sink, int[] shape, int[] offsets, "
        "int[] options) -> (Tensor mask, Tensor stats)");
  // General graphs in CSR layout (row_ptr, head, rev: reverse-arc index), in place.
  m.def("csr_solve_(Tensor row_ptr, Tensor head, Tensor rev, Tensor(a!) caps, Tensor(b!) excess, "
        "Tensor(c!) sink, int[] options) -> (Tensor mask, Tensor stats)");
  // The same solve of a FlowGraph's tensors (source [1, N] int64, sink [1, N]) left as they are, the
  // result's tensors made by the op (CPU: small graphs' calls are otherwise the Python around the solve).
  m.def("csr_solve(Tensor row_ptr, Tensor head, Tensor rev, Tensor caps, Tensor source, Tensor sink) -> "
        "(Tensor flows, Tensor mask, Tensor residual, Tensor source_flow, Tensor sink_flow, Tensor stats)");
  // (cpu/csr_solve.cpp also registers the class CsrState: a FlowGraph's residual network and search trees
  // kept between solves, for DynamicFlowGraph's re-solves on the CPU.)
  // A grid's arcs from the user's layout (edges, reverse [K, B, *shape]) to the solvers' caps [B, 2K, *shape],
  // int64 if `wide` else int32, arcs that leave the grid zeroed (cpu/grid_arcs.cpp, cuda/grid_arcs.cu).
  m.def("grid_arcs(Tensor edges, Tensor reverse, int[] offsets, bool wide) -> Tensor");
  // Arc pairs -> CSR layout with reverse-arc index (CPU).
  m.def("pairs_csr(Tensor u, Tensor v, Tensor cf, Tensor cb, int N) -> Tensor[]");
  // The same layout for the arc pairs of one grid (caps [2K, N] in the solvers' layout), from its structure.
  m.def("grid_pairs_csr(Tensor caps, int[] shape, int[] offsets) -> Tensor[]");
  // A 2D lattice FlowGraph as the grid solver's grid, and that solver's residual back in the CSR's arc order (CPU).
  m.def("lattice_grid(Tensor tail, Tensor head, Tensor caps, Tensor pair_fwd, Tensor pair_bwd, int N, "
        "int W) -> Tensor[]");
  m.def("lattice_residual(Tensor gres, Tensor tail, Tensor head, Tensor pair_fwd, Tensor pair_bwd, "
        "ScalarType dtype) -> Tensor");
  // Expansion moves in one pass each (CUDA): build a move's graph with the warm re-fit, apply a move.
  m.def("move_build(Tensor U, Tensor f, Tensor W, Tensor V, Tensor alpha, Tensor C0, Tensor R0, Tensor e0, "
        "Tensor r0, Tensor s0, Tensor k0, int[] shape, int[] offsets, int mode, bool warm) -> Tensor[]");
  m.def("move_apply(Tensor U, Tensor f, Tensor take, Tensor W, Tensor V, Tensor e, int alpha, int[] shape, "
        "int[] offsets, int mode) -> (Tensor, Tensor)");
  // Contrast-sensitive Potts energies (refine, compat.torchmaxflow) in one pass per stage: graph=true gives
  // the two-class grid graph (caps, source, sink), graph=false the quantised unary, pair costs and offsets;
  // the last output is a float64 CPU tensor of checks and the scale (energy_potts.cpp).
  m.def("potts_energy(Tensor image, Tensor probs, Tensor denom, float[] mult, int[] offsets, float floor, "
        "Tensor? seeds, bool graph) -> (Tensor, Tensor, Tensor, Tensor)");
  // An expansion move (beta = -1) or a swap move of a multi-label energy on a general graph (CPU): the
  // move's CSR capacities and netted terminals in one pass (cpu/cpu_graph_moves.cpp describes the arguments).
  m.def("graph_expansion_move(Tensor U, Tensor f, Tensor u, Tensor v, Tensor arc_uv, Tensor arc_vu, Tensor W, "
        "Tensor V, int alpha, int beta, int mode, int num_arcs, bool wide) -> Tensor[]");
  // A swap move on the subgraph of the nodes labelled alpha or beta (CPU; cpu/cpu_graph_moves.cpp): the nodes,
  // their CSR layout, capacities and netted terminals, and the cut of the current labelling.
  m.def("graph_swap_move(Tensor U, Tensor f, Tensor u, Tensor v, Tensor W, Tensor V, int alpha, int beta, "
        "int mode, bool wide) -> Tensor[]");
  // The quantised energy of a labelling of that energy's graph (CPU; cpu/cpu_graph_moves.cpp): an int64 scalar.
  m.def("graph_labeling_energy(Tensor U, Tensor f, Tensor u, Tensor v, Tensor W, Tensor V, int mode) -> Tensor");
  // GrabCut's colour models (CPU): k-means initialisation and the mixture fit with the data terms.
  m.def("grabcut_lloyd(Tensor x, Tensor cls, Tensor comp, int K, int iters) -> Tensor");
  // The seeded segmentation energy (torchcut/energy.py) in one pass each: the checks, colour ranges and seed
  // counts (info, read back once; seeds8: the labels as uint8, empty when they were uint8), the seed
  // histograms with the exact integer sums of sigma, and the capacities in the solver layout.
  m.def("seg_check(Tensor x, Tensor seeds, bool finite) -> (Tensor info, Tensor seeds8)");
  m.def("seg_hist(Tensor x, Tensor seeds, Tensor lo, Tensor span, int bins, float[] unit, bool wide, int[] shape, "
        "bool sigma) -> (Tensor counts, Tensor sums)");
  m.def("seg_energy(Tensor x, Tensor seeds, Tensor table, Tensor lo, Tensor span, Tensor coef, int bins, "
        "float scale, int hard, int[] shape, int[] offsets, float[] weights) -> (Tensor source, Tensor sink, "
        "Tensor caps)");
  // sigma and the n-links' exponent coefficient [2, B] from seg_hist's sums (units 2**exps[b], `count`
  // pairs), computed where the sums are: the estimate needs no read back to the host.
  m.def("seg_sigma(Tensor sums, int[] exps, int count) -> Tensor");
  // the log-ratio table [B, bins^channels] of seg_hist's counts (CUDA; `bound`, at least the seed count of
  // each image and class, below 2^(24 - 2 * channels): the blur is exact, the values the tensor operations')
  m.def("seg_table(Tensor counts, int bins, int channels, float uniform, int bound) -> Tensor");
  // seg_hist, the log-ratio table, seg_sigma (or the given sigma) and seg_energy in one call, for any device
  // (seg_terms.cpp describes the arguments).
  m.def("seg_terms(Tensor x, Tensor seeds, float[] lo, float[] span, int bins, float[] unit, bool wide, "
        "int[] shape, bool sums, int[] exps, int count, float[] sig_coef, float uniform, float scale, int hard, "
        "int[] offsets, float[] weights, int bound=-1) -> (Tensor source, Tensor sink, Tensor caps, Tensor sigma)");
  m.def("grabcut_models(Tensor x, Tensor cls, Tensor comp, Tensor seeds, Tensor valid, int K, int hard, "
        "float cov_reg, float scale, float data_cap) -> (Tensor, Tensor, Tensor)");
}
