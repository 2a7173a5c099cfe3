"""Small graphs on CUDA tensors, solved by the compiled CPU solver.

A GPU solve of a general graph costs a fixed number of kernel launches and host synchronisations
whatever its size: about 3 ms for a few hundred nodes on one H100, where the CPU solvers take 0.1-0.2
ms. Below the thresholds here ``backend="auto"`` copies a CUDA graph
to the host (one copy and one synchronisation), solves it there and copies the result back (one copy,
queued), so the caller still gets every tensor on the graph's device. ``FlowGraph.to`` lays a graph's
tensors out in one buffer, the fields the CPU solver reads first, so that the copy to the host is one
span of memory with no gather on the GPU; the flow value comes back with the result already on the host
(reading it waits for nothing). The thresholds and their measurements are in ``docs/performance.md``
("Small graphs on the GPU").
"""

from __future__ import annotations

import time

import torch

from .._copy import FLOWGRAPH_HOST_FIELDS as CSR_FIELDS
from .._copy import transfer as _transfer
from ..grid import GridGraph
from ..result import CutResult
from . import cpu

__all__ = ["HOST_NODES", "wants_host", "solve_on_host", "solve_csr_on_host"]

_CPU = torch.device("cpu")

#: Largest number of nodes of a CUDA graph that ``backend="auto"`` solves on the CPU, per layout: only
#: ``"csr"`` (FlowGraph). Grids are never routed: the CUDA grid solver takes items of up to 4096 nodes in
#: one launch (option ``small``), faster than the round trip to the host at every size measured.
HOST_NODES = {"csr": 2048}


def wants_host(graph, layout: str, backend: str, options: dict) -> bool:
    """Whether ``graph`` (on a CUDA device) goes to the CPU solver: a layout of :data:`HOST_NODES`,
    ``backend="auto"``, no solver options (they name the CUDA solver's knobs), at most
    ``HOST_NODES[layout]`` nodes, and a compiled CPU solver that loads.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> wants_host(g, "csr", "auto", {})   # a CPU graph: nothing to route
    False
    """
    if layout not in HOST_NODES or backend != "auto" or options or graph.device.type != "cuda":
        return False
    if graph.num_nodes > HOST_NODES[layout]:
        return False
    return cpu.load_error() is None


def _host_graph(graph):
    """A CPU copy of the fields the CPU solver reads (one transfer)."""
    new = object.__new__(type(graph))
    new.__dict__.update(graph.__dict__)
    names = (
        ("caps", "source", "sink")
        if isinstance(graph, GridGraph)
        else ("caps", "source", "sink", "row_ptr", "head", "tail", "rev")
    )
    for name, t in zip(names, _transfer([getattr(graph, n) for n in names], torch.device("cpu"))):
        setattr(new, name, t)
    if not isinstance(graph, GridGraph):  # read only by verify() and the lattice route, which run on the GPU copy
        new.pair_fwd = new.pair_bwd = new.node_ids = None
        new._lattice = None
    return new


def solve_on_host(graph, solve) -> CutResult:
    """``solve(host_graph)`` on a CPU copy of ``graph``, its result moved back to ``graph``'s device.

    The graph goes to the host in one copy (its tensors packed into one buffer, pinned memory) and the
    result comes back the same way. ``stats["route"]`` records ``"host"``.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> solve_on_host(g, lambda h: torchcut.maxflow(h)).flow_value
    3
    """
    device = graph.device
    if device.type != "cuda":
        r = solve(graph)
        stats = dict(r.stats)
        stats["route"] = "host" if "route" not in r.stats else f"host, {r.stats['route']}"
        return CutResult(graph, r.flow_values, r.node_mask, r.residual, r.source_flow, r.sink_flow, stats)
    r = solve(_host_graph(graph))
    flows, mask, residual, sink_flow = _transfer([r.flow_values, r.node_mask, r.residual, r.sink_flow], device)
    stats = dict(r.stats)
    stats["route"] = "host" if "route" not in r.stats else f"host, {r.stats['route']}"
    source_flow = graph.source if isinstance(graph, GridGraph) else graph.source.clone()
    return CutResult(
        graph=graph,
        flow_values=flows,
        node_mask=mask,
        residual=residual,
        source_flow=source_flow,
        sink_flow=sink_flow,
        stats=stats,
    )


def solve_csr_on_host(graph) -> CutResult:
    """The maximum flow of the FlowGraph ``graph`` (on a CUDA device) by the compiled CPU solver, its
    result on ``graph``'s device: what ``backend="auto"`` runs for small CUDA graphs.

    One copy to the host of the fields the solver reads (one span where ``graph`` came from
    ``FlowGraph.to``), the solve in those copies, and one queued copy of the result back. The flow
    value is kept on the host too, so ``flow_value`` needs no read from the device.
    ``stats["route"]`` is ``"host, csr"``.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> r = solve_csr_on_host(g)   # a CPU graph: solved where it is
    >>> r.flow_value, r.stats["route"]
    (3, 'host, csr')
    """
    t0 = time.perf_counter()
    device = graph.device
    if device.type == "cuda":
        caps, source, sink, row_ptr, head, rev = _transfer([getattr(graph, n) for n in CSR_FIELDS], _CPU)
    else:  # the solver writes caps; source is returned as the source flow: copies of those two alone
        caps, source, sink, row_ptr, head, rev = (getattr(graph, n) for n in CSR_FIELDS)
        caps, source = caps.clone(), source.clone()
    excess, left = source[0].clone(), sink[0].clone()  # the solver nets them in place
    mask, raw = torch.ops.torchcut.csr_solve_(row_ptr, head, rev, caps, excess, left, [])
    sink_flow = (sink - left.reshape(1, -1)).to(torch.int64)
    flows = sink_flow.sum(1)
    values = flows.tolist()
    stats = cpu._stats(raw, t0, 1)
    stats["route"] = "host, csr"
    if device.type == "cuda":
        flows, mask, caps, sink_flow, source = _transfer([flows, mask.reshape(1, -1), caps, sink_flow, source], device)
    else:
        mask = mask.reshape(1, -1)
    r = CutResult(graph, flows, mask, caps, source, sink_flow, stats)
    r._keep_host_values(values)
    return r
