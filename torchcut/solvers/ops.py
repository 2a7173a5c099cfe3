"""The solvers as Python custom ops, so that ``torch.compile`` traces around them.

The compiled ops (``torch.ops.torchcut.grid_solve`` and the others) have fake implementations of
their own (registered by :mod:`torchcut._ops`). The public functions call these Python ops while
``torch.compile`` traces them:

  ``torchcut::grid_maxflow``       a GridGraph built before tracing (its tensors are graph inputs);
  ``torchcut::grid_build_maxflow`` a GridGraph built inside the traced code: the capacity dtype,
                                   the float quantization scale and the value checks depend on the
                                   data, so the graph is built (and checked) when the op runs;
  ``torchcut::segment_mask``       ``segment(image, seeds)``, defined in :mod:`torchcut._segment`.

  Each is opaque to the compiler: the data-dependent checks run eagerly inside it, exactly as outside
  ``torch.compile``, so compiled results equal eager results and bad input raises the same errors.
"""

from __future__ import annotations

import json

import torch
from torch import Tensor

from .._ops import CUDAGRAPH_UNSAFE
from ..grid import GridGraph
from ..result import CutResult
from ._grid import solve_grid

__all__ = ["compiled_maxflow", "options_string"]


@torch.compiler.assume_constant_result  # the options are constants of the traced code
def options_string(options: dict) -> str:
    """Solver options as the JSON string the custom ops take (sorted, so that equal options compare equal).

    Examples
    --------
    >>> options_string({"threads": 2})
    '{"threads": 2}'
    """
    try:
        return json.dumps(options, sort_keys=True)
    except TypeError as exc:
        raise TypeError(
            f"solver options: expected ints, floats, strings or None inside torch.compile, got {options!r}"
        ) from exc


# The solves read counters back to the host, which a CUDA graph cannot hold: the tag makes inductor's
# CUDA graphs (mode="reduce-overhead") leave the graphs that call them alone.
_TAGS = CUDAGRAPH_UNSAFE


def _flat(offsets) -> list[int]:
    return [int(v) for o in offsets for v in o]


def _unflat(flat: list[int], ndim: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(flat[i : i + ndim]) for i in range(0, len(flat), ndim))


# ---------------------------------------------------------------------------------------- grid max-flow
@torch.library.custom_op("torchcut::grid_maxflow", mutates_args=(), tags=_TAGS)
def _grid_maxflow(
    caps: Tensor, source: Tensor, sink: Tensor, offsets: list[int], ndim: int, backend: str, options: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    graph = GridGraph._from_layout(caps, source, sink, _unflat(offsets, ndim), batched=True)
    r = solve_grid(graph, backend, **json.loads(options))
    return r.node_mask, r.flow_values, r.residual, r.sink_flow  # new tensors: none aliases an input


@_grid_maxflow.register_fake
def _(caps, source, sink, offsets, ndim, backend, options):
    B = caps.shape[0]
    return (
        source.new_empty(source.shape, dtype=torch.bool),
        source.new_empty((B,), dtype=torch.int64),
        torch.empty_like(caps, memory_format=torch.contiguous_format),
        source.new_empty(source.shape, dtype=torch.int64),
    )


@torch.library.custom_op("torchcut::grid_build_maxflow", mutates_args=(), tags=_TAGS)
def _grid_build_maxflow(
    source: Tensor,
    sink: Tensor,
    edges: Tensor,
    reverse: Tensor | None,
    offsets: list[int],
    ndim: int,
    scale: float | None,
    backend: str,
    options: str,
) -> tuple[Tensor, Tensor, Tensor]:
    graph = GridGraph(source, sink, edges, _unflat(offsets, ndim), reverse, scale=scale)
    r = solve_grid(graph, backend, **json.loads(options))
    q = torch.tensor(graph.scale if graph.scale else 1.0, dtype=torch.float64)
    return r.node_mask.reshape(source.shape), r.flow_values, q


@_grid_build_maxflow.register_fake
def _(source, sink, edges, reverse, offsets, ndim, scale, backend, options):
    B = source.shape[0] if source.dim() > ndim else 1
    return (
        source.new_empty(source.shape, dtype=torch.bool),
        source.new_empty((B,), dtype=torch.int64),
        torch.empty((), dtype=torch.float64),
    )


def compiled_maxflow(graph, backend: str, options: dict):
    """What :func:`torchcut.maxflow` does while ``torch.compile`` traces it: one custom op call.

    A graph built before tracing keeps its certificate (``verify()`` works on the result); a graph
    built inside the traced function is built and checked when the op runs, and its result carries
    the flow values and the mask (``verify()`` then raises, saying why).

    Examples
    --------
    >>> import torch, torchcut
    >>> g = torchcut.GridGraph([[3, 0]], [[0, 2]], [[[5, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> f = torch.compile(lambda g: torchcut.maxflow(g).flow_values, fullgraph=True)  # doctest: +SKIP
    >>> f(g).tolist()  # doctest: +SKIP
    [2]
    """
    if not isinstance(graph, GridGraph):
        raise TypeError(
            f"graph: inside torch.compile, expected a torchcut.GridGraph, got {type(graph).__name__} "
            "(general FlowGraphs are solved outside torch.compile)"
        )
    opts = options_string(options)
    flat = _flat(graph.offsets)
    stats = {"backend": backend, "compiled": True}
    pending = graph._pending
    if pending is None:
        mask, flows, residual, sink_flow = _grid_maxflow(
            graph.caps, graph.source, graph.sink, flat, graph.ndim, backend, opts
        )
        return CutResult(
            graph=graph,
            flow_values=flows,
            node_mask=mask,
            residual=residual,
            source_flow=graph.source,
            sink_flow=sink_flow,
            stats=stats,
        )
    source, sink, edges, reverse, scale = pending
    mask, flows, q = _grid_build_maxflow(source, sink, edges, reverse, flat, graph.ndim, scale, backend, opts)
    if graph.is_float:
        graph.scale = q
    if not graph.batched:
        mask = mask.unsqueeze(0)
    return CutResult(
        graph=graph, flow_values=flows, node_mask=mask, residual=None, source_flow=None, sink_flow=None, stats=stats
    )
