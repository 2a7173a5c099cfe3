"""Small graphs on CUDA tensors, solved by the compiled CPU solver.

A GPU solve costs a fixed number of kernel launches and host synchronisations whatever the graph's
size: about 0.4 ms for a 16^2 grid and 3 ms for a general graph of a few hundred nodes on one H100,
where the CPU solvers take 0.1-0.2 ms. Below the thresholds here ``backend="auto"`` copies a CUDA graph
to the host (one batch of asynchronous copies and one synchronisation), solves it there and copies the
result back, so the caller still gets every tensor on the graph's device. The thresholds and their
measurements are in ``docs/performance.md`` ("Small graphs on the GPU").
"""

from __future__ import annotations

import torch

from ..result import CutResult
from . import cpu

__all__ = ["HOST_NODES", "wants_host", "solve_on_host"]

#: Largest number of nodes (all batch items together) of a CUDA graph that ``backend="auto"`` solves on
#: the CPU, per layout: ``"grid"`` (GridGraph) and ``"csr"`` (FlowGraph).
HOST_NODES = {"grid": 1024, "csr": 16384}


def wants_host(graph, layout: str, backend: str, options: dict) -> bool:
    """Whether ``graph`` (on a CUDA device) goes to the CPU solver: ``backend="auto"``, no
    solver options (they name the CUDA solver's knobs), at most ``HOST_NODES[layout]`` nodes, and a
    compiled CPU solver that loads.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> wants_host(g, "csr", "auto", {})   # a CPU graph: nothing to route
    False
    """
    if backend != "auto" or options or graph.device.type != "cuda":
        return False
    nodes = graph.num_nodes if layout == "csr" else graph.batch_size * graph.num_nodes
    if nodes > HOST_NODES[layout]:
        return False
    return cpu.load_error() is None


def solve_on_host(graph, solve) -> CutResult:
    """``solve(host_graph)`` on a CPU copy of ``graph``, its result moved back to ``graph``'s device.

    The copies to the host are queued asynchronously (into pinned memory) and waited for once; the
    result comes back the same way. ``stats["route"]`` records ``"host"``.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> solve_on_host(g, lambda h: torchcut.maxflow(h)).flow_value
    3
    """
    device = graph.device
    if device.type == "cuda":
        host = graph.to("cpu", non_blocking=True)
        torch.cuda.current_stream(device).synchronize()
    else:
        host = graph.to("cpu")
    r = solve(host)
    back = lambda t: t.to(device, non_blocking=True)  # noqa: E731
    stats = dict(r.stats)
    stats["route"] = "host" if "route" not in r.stats else f"host, {r.stats['route']}"
    return CutResult(
        graph=graph,
        flow_values=back(r.flow_values),
        node_mask=back(r.node_mask),
        residual=back(r.residual),
        source_flow=back(r.source_flow),
        sink_flow=back(r.sink_flow),
        stats=stats,
    )
