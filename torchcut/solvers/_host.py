"""Small graphs on CUDA tensors, solved by the compiled CPU solver.

A GPU solve of a general graph costs a fixed number of kernel launches and host synchronisations
whatever its size: about 3 ms for a few hundred nodes on one H100, where the CPU solvers take 0.1-0.2
ms. Below the thresholds here ``backend="auto"`` copies a CUDA graph
to the host (one batch of asynchronous copies and one synchronisation), solves it there and copies the
result back, so the caller still gets every tensor on the graph's device. The thresholds and their
measurements are in ``docs/performance.md`` ("Small graphs on the GPU").
"""

from __future__ import annotations

import torch

from ..grid import GridGraph
from ..result import CutResult
from . import cpu

__all__ = ["HOST_NODES", "wants_host", "solve_on_host"]

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


def _transfer(tensors, device: torch.device) -> list:
    """Copies of ``tensors`` on ``device`` through one byte buffer: one copy between the devices.

    Each tensor's bytes start at a multiple of 8 in the buffer, so every part can be viewed back as its
    dtype. A copy to the host lands in pinned memory and is waited for; a copy to the GPU is queued.
    """
    src = tensors[0].device
    parts, layout, size = [], [], 0
    for t in tensors:
        b = t.contiguous().reshape(-1).view(torch.uint8)
        pad = -b.numel() % 8
        parts.append(b)
        if pad:
            parts.append(torch.zeros(pad, dtype=torch.uint8, device=src))
        layout.append((size, b.numel(), t.dtype, t.shape))
        size += b.numel() + pad
    if device.type == "cpu":
        buf = torch.cat(parts).to(device, non_blocking=True)
        if src.type == "cuda":
            torch.cuda.current_stream(src).synchronize()
    else:
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        torch.cat(parts, out=host)
        buf = host.to(device, non_blocking=True)
    return [buf[o : o + n].view(dtype).view(shape) for o, n, dtype, shape in layout]


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
