"""Solver dispatch for :class:`torchcut.FlowGraph` (general networks).

The CSR backends (:data:`torchcut.solvers._backends.CSR`) solve in place (layout in
:mod:`torchcut.graph`) and return the source side (nodes that cannot reach the sink in the final
residual network).

Graphs that are 2D lattices (:meth:`FlowGraph.lattice_shape`) go to the grid solver instead, which
is much faster on the GPU; the grid result is mapped back so that ``verify()`` on the FlowGraph
result holds.
"""

from __future__ import annotations

import time

import torch

from ..result import CutResult
from ._backends import BACKENDS, CSR
from ._host import solve_csr_on_host, wants_host
from ._maxflow import maxflow
from ._terminals import net_terminals

__all__ = ["solve_flowgraph"]


def _solve_as_grid(graph, backend: str, **options) -> CutResult:
    t0 = time.perf_counter()
    H, W = graph.lattice_shape()
    N = graph.num_nodes
    grid = graph.as_grid()
    r = maxflow(grid, backend=backend, **options)
    # grid residual [1, 4, H, W]: direction 0 = (0, 1), 1 = (1, 0), 2 = (0, -1), 3 = (-1, 0)
    gres = r.residual.reshape(-1)
    if graph._native_lattice():  # a CPU graph of integer capacities: its grid and residual are too
        residual = torch.ops.torchcut.lattice_residual(
            gres.contiguous(), graph.tail, graph.head, graph.pair_fwd, graph.pair_bwd, graph.caps.dtype
        )
    else:
        u, v, _, _ = graph.edges()
        right = (v - u) == 1
        i_f = torch.where(right, 0, 1) * N + u
        i_b = torch.where(right, 2, 3) * N + v
        residual = torch.empty_like(graph.caps)
        residual[graph.pair_fwd] = gres[i_f].to(residual.dtype)
        residual[graph.pair_bwd] = gres[i_b].to(residual.dtype)
    stats = dict(r.stats)
    stats["route"] = f"grid {H}x{W}"
    stats["total_seconds"] = time.perf_counter() - t0
    return CutResult(
        graph=graph,
        flow_values=r.flow_values,
        node_mask=r.node_mask.reshape(1, N),
        residual=residual,
        source_flow=r.source_flow.reshape(1, N).to(torch.int64),
        sink_flow=r.sink_flow.reshape(1, N).to(torch.int64),
        stats=stats,
    )


def _check_csr_options(impl, options: dict, backend: str, device) -> None:
    """Raise TypeError, naming ``maxflow()``, for an option that the solver of general graphs does not take
    (grid options such as the CPU's ``algorithm`` apply only to a FlowGraph routed to the grid solver)."""
    takes = impl.options()
    renamed = impl.renamed_options()  # former names, still accepted (with a warning)
    bad = [k for k in options if k not in takes and renamed.get(k) not in takes]
    if bad:
        raise TypeError(
            f"maxflow(): keyword argument {bad[0]!r} does not apply to this FlowGraph: it is solved as a general "
            f"graph by the {impl.name!r} backend (backend={backend!r} on {device.type}), whose solver takes "
            f"{', '.join(takes) if takes else 'no options'}; grid options reach the grid solver only when a "
            "lattice-shaped FlowGraph is routed there (lattice=True)"
        )


def solve_flowgraph(graph, backend: str = "auto", *, lattice: bool | None = None, **options) -> CutResult:
    """Maximum flow of a :class:`torchcut.FlowGraph` (what ``torchcut.maxflow`` calls).

    Parameters
    ----------
    graph : FlowGraph
    backend : {"auto", "reference", "cpu", "cuda"}
    lattice : bool or None
        Route 2D lattice graphs to the grid solver. None (default): yes, on the CPU from 2**15 nodes
        (below, the conversion costs more than the grid solve saves); True: always; False: never.
    **options
        Passed to the backend.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0, 1], [1, 3], [2, 2], source=[3, 0, 0, 0], sink=[0, 0, 0, 3])
    >>> solve_flowgraph(g, "reference", lattice=False).flow_value
    2
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if wants_host(graph, "csr", backend, options) and lattice is None:
        return solve_csr_on_host(graph)
    impl = None
    if lattice is None:
        impl = CSR(graph.device, backend)
        lattice = impl.route_lattices and graph.num_nodes >= impl.lattice_min_nodes
    if lattice and graph.num_nodes > 1 and graph.lattice_shape() is not None:
        return _solve_as_grid(graph, backend, **options)
    impl = impl or CSR(graph.device, backend)
    if options:
        _check_csr_options(impl, options, backend, graph.device)
    whole = (
        None
        if options
        else impl.solve_graph(graph.row_ptr, graph.head, graph.rev, graph.caps, graph.source, graph.sink)
    )
    if whole is not None:  # one call: the copies, the solve and the result's tensors
        flows, mask, residual, source_flow, sink_flow, stats = whole
        stats.setdefault("route", "csr")
        return CutResult(graph, flows, mask, residual, source_flow, sink_flow, stats)
    excess, sink = net_terminals(graph.source[0], graph.sink[0])  # backends without a whole-graph call
    caps = graph.caps.clone()
    mask, stats = impl.solve_csr(graph.row_ptr, graph.head, graph.tail, graph.rev, caps, excess, sink, **options)
    # the netting keeps the sink's dtype: one subtraction, widened once
    sink_flow = (graph.sink[0] - sink).to(torch.int64).reshape(1, -1)
    stats.setdefault("route", "csr")
    return CutResult(
        graph=graph,
        flow_values=sink_flow.sum(1),
        node_mask=mask.reshape(1, -1),
        residual=caps,
        source_flow=graph.source.clone(),
        sink_flow=sink_flow,
        stats=stats,
    )
