"""Solver dispatch: one entry point, several backends.

A grid backend is a module with ``solve_grid(caps, excess, sink, offsets, **options) -> (mask, stats)``
that runs push-relabel phase one in place on the tensors (layout in :mod:`torchcut.grid`), and returns
the source side (nodes that cannot reach the sink in the final residual network) and a dict of
counters. Everything else (terminal reduction, flow values, the certificate) is shared here, so a new
backend slots in without any change to callers.
"""

from __future__ import annotations

import warnings

import torch

from ..grid import GridGraph
from ..result import CutResult
from . import reference

__all__ = ["maxflow", "BACKENDS"]

BACKENDS = ("auto", "reference", "cuda")
_warned_fallback = False


def _cuda_backend(required: bool):
    """The CUDA backend module if its extension loads; otherwise None (auto) or an error (explicit)."""
    global _warned_fallback
    from . import cuda

    err = cuda.load_error()
    if err is None:
        return cuda
    if required:
        raise RuntimeError(f"backend='cuda': the CUDA extension is unavailable: {err}")
    if not _warned_fallback:
        warnings.warn(
            f"torchcut: CUDA extension unavailable ({err}); using the reference push-relabel in torch ops, "
            "which is much slower. Set TORCHCUT_VERBOSE=1 to see the build log.",
            RuntimeWarning,
            stacklevel=3,
        )
        _warned_fallback = True
    return None


def _pick(graph_device: torch.device, backend: str):
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "reference":
        return reference
    if backend == "cuda":
        if graph_device.type != "cuda":
            raise ValueError(f"backend='cuda': expected a graph on a CUDA device, got one on {graph_device}")
        return _cuda_backend(required=True)
    if graph_device.type == "cuda":
        return _cuda_backend(required=False) or reference
    return reference


def _solve_grid(graph: GridGraph, backend: str, **options) -> CutResult:
    impl = _pick(graph.device, backend)
    low = torch.minimum(graph.source, graph.sink.to(torch.int64))
    excess = graph.source - low
    sink = graph.sink - low.to(graph.sink.dtype)
    caps = graph.caps.clone()
    mask, stats = impl.solve_grid(caps, excess, sink, graph.offsets, **options)
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


def maxflow(graph, *, backend: str = "auto", **options) -> CutResult:
    """Maximum flow and minimum cut of a flow network.

    Parameters
    ----------
    graph : GridGraph or FlowGraph
        The network. Its device picks the solver.
    backend : {"auto", "reference", "cuda"}
        "auto" uses the CUDA kernels for CUDA graphs (falling back with one warning when they cannot be
        built) and the reference solver otherwise.
    **options
        Passed to the backend (for example ``max_rounds`` for the reference solver).

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
    """
    if isinstance(graph, GridGraph):
        return _solve_grid(graph, backend, **options)
    solve = getattr(graph, "_maxflow", None)
    if solve is not None:
        return solve(backend, **options)
    raise TypeError(f"graph: expected a torchcut.GridGraph or torchcut.FlowGraph, got {type(graph).__name__}")
