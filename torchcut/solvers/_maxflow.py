"""The entry points of the solvers: :func:`maxflow` and :func:`consume_mask` (re-exported by
:mod:`torchcut.solvers`).

They check what the caller passed, then hand a :class:`torchcut.GridGraph` to
:mod:`torchcut.solvers._grid` and a :class:`torchcut.FlowGraph` to :mod:`torchcut.solvers.csr` (through
the graph). A FlowGraph that is a lattice comes back here as a GridGraph, so that it is checked and
routed as one.
"""

from __future__ import annotations

import torch

from .._ops import check_not_capturing
from ..grid import GridGraph
from ..result import CutResult
from . import _grid
from ._options import check_options

__all__ = ["maxflow", "consume_mask"]


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
    return _consume(graph, backend, False, options)


def _consume(graph: GridGraph, backend: str, netted: bool, options: dict) -> torch.Tensor:
    """:func:`consume_mask`; ``netted``: no node of the graph has both terminal capacities (a graph of
    :func:`torchcut.segmentation_graph`, whose data term puts each node's cost on one side), so the
    in-place netting is skipped."""
    if graph.device.type == "cuda":
        check_not_capturing("torchcut.solvers.consume_mask")
    mask = _grid.consume_mask(graph, backend, netted, **options)
    return mask if graph.batched else mask[0]


def maxflow(graph, *, backend: str = "auto", **options) -> CutResult:
    """Maximum flow and minimum cut of a flow network.

    Parameters
    ----------
    graph : GridGraph or FlowGraph
        The network. Its device picks the solver.
    backend : {"auto", "reference", "cpu", "cuda"}
        "auto" uses the CUDA kernels for CUDA graphs and the compiled CPU solver (Boykov-Kolmogorov)
        for CPU graphs and for general CUDA graphs small enough that the GPU's launches would cost more
        than the solve (:data:`torchcut.solvers._host.HOST_NODES`; the result still comes back on the GPU),
        falling back to the reference push-relabel in torch ops with one warning when
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
        grid = isinstance(graph, GridGraph)
        check_options(
            maxflow, options, device, backend, layout="grid" if grid else "csr", also=() if grid else ("lattice",)
        )
    if isinstance(device, torch.device) and device.type == "cuda":
        check_not_capturing("torchcut.maxflow")  # every solver reads back: refuse before queueing anything
    if isinstance(graph, GridGraph):
        return _grid.solve_grid(graph, backend, **options)
    solve = getattr(graph, "_maxflow", None)
    if solve is not None:
        return solve(backend, **options)
    raise TypeError(f"graph: expected a torchcut.GridGraph or torchcut.FlowGraph, got {type(graph).__name__}")
