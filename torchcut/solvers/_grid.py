"""Grid dispatch: a :class:`torchcut.GridGraph` through the grid backend that :data:`GRID` picks.

Everything around the backend is shared here (terminal netting, flow values, the result with its
certificate), so a new backend slots in as one entry of the backend table. Data flows one way:
:mod:`torchcut.solvers` (``maxflow``), :mod:`~torchcut.solvers.csr` (lattice FlowGraphs) and
:mod:`~torchcut.solvers.ops` (``torch.compile``) call this module, which calls the backends.
"""

from __future__ import annotations

import torch

from ..grid import GridGraph
from ..result import CutResult
from ._backends import GRID
from ._terminals import net_terminals, net_terminals_

__all__ = ["solve_grid", "consume_mask"]


def _phase_one(graph: GridGraph, backend: str, consume: bool, options: dict, netted: bool = False):
    """Run the grid backend on ``graph``: ``(mask, residual caps, residual sink capacities, stats)``.

    A backend that solves into new tensors reads the graph as it is, and when ``consume`` (the caller
    wants the mask alone) writes only the mask (the residual entries are None). The others work in
    place: on the graph's own tensors when ``consume`` (after netting the terminals in place, 2**21
    nodes at a time, unless ``netted``: the caller built the graph with no node holding both terminal
    capacities), otherwise on copies.
    """
    impl = GRID(graph.device, backend)
    if impl.new_tensors and consume:  # the caller wants the mask alone: no residuals are written
        mask, stats = impl.solve_mask(graph, **options)
        return mask, None, None, stats
    if impl.new_tensors:
        mask, caps, _, sink, stats = impl.solve_graph(graph, **options)
        return mask, caps, sink, stats
    if consume:
        if not netted:
            net_terminals_(graph.source, graph.sink)
        caps, excess, sink = graph.caps, graph.source, graph.sink
    else:
        excess, sink = net_terminals(graph.source, graph.sink)
        caps = graph.caps.clone()
    mask, stats = impl.solve_grid(caps, excess, sink, graph.offsets, **options)
    return mask, caps, sink, stats


def solve_grid(graph: GridGraph, backend: str, **options) -> CutResult:
    """The maximum flow of ``graph`` by the backend that ``backend`` picks for its device (the graph is
    left as it is).

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.GridGraph([[5, 0]], [[0, 5]], [[[3, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> solve_grid(g, "reference").flow_value
    3
    """
    mask, caps, sink, stats = _phase_one(graph, backend, False, options)
    sink_flow = graph.sink.to(torch.int64) - sink.to(torch.int64)
    flows = sink_flow.reshape(graph.batch_size, -1).sum(1)
    return CutResult(
        graph=graph,
        flow_values=flows,
        node_mask=mask,
        residual=caps,
        source_flow=graph.source,  # phase one saturates every source arc
        sink_flow=sink_flow,
        stats=stats,
    )


def consume_mask(graph: GridGraph, backend: str, netted: bool = False, /, **options) -> torch.Tensor:
    """The source side ``[B, *shape]`` of the minimum cut, solved in the graph's own tensors where the
    backend works in place (the graph is used up); see :func:`torchcut.solvers.consume_mask`.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.GridGraph([[5, 0]], [[0, 5]], [[[3, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> consume_mask(g, "reference").tolist()
    [[[True, False]]]
    """
    return _phase_one(graph, backend, True, options, netted)[0]
