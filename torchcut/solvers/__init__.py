"""Solver dispatch: one entry point, several backends.

A grid backend is a module with ``solve_grid(caps, excess, sink, offsets, **options) -> (mask, stats)``
that runs push-relabel phase one in place on the tensors (layout in :mod:`torchcut.grid`), and returns
the source side (nodes that cannot reach the sink in the final residual network) and a dict of
counters. Everything else (terminal reduction, flow values, the certificate) is shared here, so a new
backend slots in without any change to callers.
"""

from __future__ import annotations

import torch

from .._ops import check_not_capturing
from ..grid import GridGraph
from ..result import CutResult
from . import reference
from ._host import solve_on_host, wants_host
from ._choice import BACKENDS, BackendChoice

__all__ = ["maxflow", "consume_mask", "BACKENDS"]

# Grid backends: the reference, or the compiled solvers (CUDA kernels, CPU Boykov-Kolmogorov) when
# their library loads.
_pick = BackendChoice(reference, {"cuda": ("torchcut.solvers.cuda", "CUDA solver"),
                                  "cpu": ("torchcut.solvers.cpu", "compiled CPU solver")})


def _phase_one(graph: GridGraph, backend: str, consume: bool, options: dict):
    """Run the grid backend on ``graph``: ``(mask, residual caps, residual sink capacities, stats)``.

    Backends that write their results into new tensors (``solve_grid_graph``) read the graph as it
    is. The others work in place: on the graph's own tensors when ``consume`` (after netting the
    terminals in place, a few rows at a time), otherwise on copies, netted as
    ``excess = max(source - sink, 0)`` and ``sink = max(sink - source, 0)`` from one int64
    difference (no widened copy of the sink, no separate minimum).
    """
    impl = _pick(graph.device, backend)
    if hasattr(impl, "solve_grid_graph"):
        mask, caps, _, sink, stats = impl.solve_grid_graph(graph, **options)
        return mask, caps, sink, stats
    if consume:
        _reduce_terminals_in_place(graph)
        caps, excess, sink = graph.caps, graph.source, graph.sink
    else:
        excess = graph.source - graph.sink  # int64
        sink = excess.clamp(max=0).neg_().to(graph.sink.dtype)
        excess.clamp_(min=0)
        caps = graph.caps.clone()
    mask, stats = impl.solve_grid(caps, excess, sink, graph.offsets, **options)
    return mask, caps, sink, stats


def _solve_grid(graph: GridGraph, backend: str, **options) -> CutResult:
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


def _reduce_terminals_in_place(graph: GridGraph, chunk: int = 1 << 21) -> None:
    """Subtract min(source, sink) from both, in place, ``chunk`` nodes at a time (the int64 temporary
    stays at most 16 MB; a 1 MP image is one step, four tensor ops, instead of one step per 64 rows)."""
    src_all = graph.source.view(-1)  # views: the graph's tensors are contiguous
    snk_all = graph.sink.view(-1)
    for i in range(0, src_all.numel(), chunk):
        src, snk = src_all[i:i + chunk], snk_all[i:i + chunk]
        low = torch.minimum(src, snk.to(torch.int64))
        src.sub_(low)
        snk.sub_(low.to(snk.dtype))


def consume_mask(graph: GridGraph, *, backend: str = "auto", **options) -> torch.Tensor:
    """Source side of the minimum cut, solving in the graph's own tensors (the graph is used up).

    What ``segment()`` calls when it returns only the mask: the solver works on ``graph.caps``,
    ``graph.source`` and ``graph.sink`` directly instead of on copies, which keeps the peak memory at
    the graph plus the solver's own workspace. Afterwards the graph holds the final residual network,
    not the original capacities. Backends that write their results into new tensors (the compiled CPU
    solver) leave the graph untouched.

    Examples
    --------
    >>> import torch, torchcut
    >>> from torchcut.solvers import consume_mask
    >>> g = torchcut.GridGraph([[5, 0]], [[0, 5]], [[[3, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> consume_mask(g, backend="reference").tolist()
    [[True, False]]
    """
    if not isinstance(graph, GridGraph):
        raise TypeError(f"graph: expected a torchcut.GridGraph, got {type(graph).__name__}")
    if graph.device.type == "cuda":
        check_not_capturing("torchcut.segment")
    if wants_host(graph, "grid", backend, options):
        mask = solve_on_host(graph, lambda g: _solve_grid(g, backend)).node_mask
    else:
        mask = _phase_one(graph, backend, True, options)[0]
    return mask if graph.batched else mask[0]


def maxflow(graph, *, backend: str = "auto", **options) -> CutResult:
    """Maximum flow and minimum cut of a flow network.

    Parameters
    ----------
    graph : GridGraph or FlowGraph
        The network. Its device picks the solver.
    backend : {"auto", "reference", "cpu", "cuda"}
        "auto" uses the CUDA kernels for CUDA graphs and the compiled CPU solver (Boykov-Kolmogorov)
        for CPU graphs and for CUDA graphs small enough that the GPU's launches would cost more than
        the solve (:data:`torchcut.solvers._host.HOST_NODES`; the result still comes back on the GPU), falling back to the reference push-relabel in torch ops with one warning when
        they cannot be built. "cpu" and "cuda" name a compiled solver (and raise when it cannot be
        built); "reference" runs the specification.
    **options
        Passed to the backend (for example ``max_iter`` for the reference solver, ``threads`` for
        the CPU solver).

    Returns
    -------
    CutResult
        ``flow_value``, ``mask`` (True = source side) and ``verify()``.

    Examples
    --------
    >>> import torch, torchcut
    >>> g = torchcut.GridGraph(torch.tensor([[9, 0, 0]]), torch.tensor([[0, 0, 9]]),
    ...                        torch.tensor([[[4, 2, 0]], [[0, 0, 0]]]), torchcut.grid_offsets(2, 4))
    >>> r = torchcut.maxflow(g)
    >>> r.flow_value, r.mask.tolist()
    (2, [[True, True, False]])

    Inside ``torch.compile`` (``fullgraph=True`` works) the solve is one custom op. A graph built
    before the compiled function keeps its certificate; one built inside it is built and checked
    when the op runs, and its result has the flow values and the mask but no ``verify()``.

    >>> f = torch.compile(lambda s, t, e: torchcut.maxflow(
    ...     torchcut.GridGraph(s, t, e, torchcut.grid_offsets(2, 4))).flow_values, fullgraph=True)
    >>> f(torch.tensor([[9, 0, 0]]), torch.tensor([[0, 0, 9]]),
    ...   torch.tensor([[[4, 2, 0]], [[0, 0, 0]]])).tolist()  # doctest: +SKIP
    [2]
    """
    if torch.compiler.is_compiling() and isinstance(graph, GridGraph):  # one opaque custom op
        from .ops import compiled_maxflow

        return compiled_maxflow(graph, backend, options)
    device = getattr(graph, "device", None)
    if options and isinstance(device, torch.device):  # a misspelt keyword names maxflow(), not a backend function
        from ._options import check_options

        grid = isinstance(graph, GridGraph)
        check_options(maxflow, options, device, backend, layout="grid" if grid else "csr",
                      also=() if grid else ("lattice",))
    if isinstance(device, torch.device) and device.type == "cuda":
        check_not_capturing("torchcut.maxflow")  # every solver reads back: refuse before queueing anything
    if isinstance(graph, GridGraph):
        if wants_host(graph, "grid", backend, options):
            return solve_on_host(graph, lambda g: _solve_grid(g, backend))
        return _solve_grid(graph, backend, **options)
    solve = getattr(graph, "_maxflow", None)
    if solve is not None:
        return solve(backend, **options)
    raise TypeError(f"graph: expected a torchcut.GridGraph or torchcut.FlowGraph, got {type(graph).__name__}")
