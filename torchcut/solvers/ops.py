"""The solvers as torch custom ops, so that ``torch.compile`` traces around them.

Two kinds of registration live here:

* Fake (meta) implementations of the compiled ops (``torchcut_cpu::grid_solve``,
  ``torchcut_cpu::csr_solve``, ``torchcut_grid::solve``, ``torchcut_csr::solve``), registered when their
  extension loads: output shapes and dtypes from the inputs, no data.
* Three Python custom ops that the public functions call while ``torch.compile`` traces them:

  ``torchcut::grid_maxflow``       a GridGraph built before tracing (its tensors are graph inputs);
  ``torchcut::grid_build_maxflow`` a GridGraph built inside the traced code: the capacity dtype,
                                   the float quantization scale and the value checks depend on the
                                   data, so the graph is built (and checked) when the op runs;
  ``torchcut::segment_mask``       ``segment(image, seeds)``: the energy's validation and its sigma
                                   and scale estimates depend on the data.

  Each is opaque to the compiler: the data-dependent checks run eagerly inside it, exactly as outside
  ``torch.compile``, so compiled results equal eager results and bad input raises the same errors.
"""

from __future__ import annotations

import json
import math
from typing import Optional

import torch
from torch import Tensor

__all__ = ["register_fakes", "compiled_maxflow", "segment_mask", "options_string"]

# Length of the stats vector of the CUDA CSR op (csr_common.h kNumStats); those of the CPU ops
# (cpu_ops.cpp kStats) and the CUDA grid op (grid_common.h kNumStats) are their backends' _STATS.
_CSR_STATS = 5


def _grid_stats() -> int:
    from .cuda import _STATS

    return len(_STATS)


def _cpu_stats() -> int:
    from .cpu import _STATS

    return len(_STATS)


def _fake_cpu_grid(caps, source, sink, shape, offsets, threads, algorithm=2):
    B, n = caps.shape[0], math.prod(shape)
    return (caps.new_empty((B, n), dtype=torch.bool), caps.new_empty((B, _cpu_stats()), dtype=torch.int64),
            torch.empty_like(caps, memory_format=torch.contiguous_format), source.new_empty((B, n)), sink.new_empty((B, n)))


def _fake_cpu_csr(row_ptr, head, rev, caps, excess, sink):
    return excess.new_empty((excess.numel(),), dtype=torch.bool), excess.new_empty((1, _cpu_stats()))


def _fake_cuda_grid(caps, excess, sink, shape, offsets, opts):
    return (excess.new_empty((excess.numel(),), dtype=torch.bool),
            torch.empty((_grid_stats(),), dtype=torch.int64, device="cpu"))


def _fake_cuda_csr(row_ptr, head, rev, res, excess, sink, period, iters, max_cycles):
    return (excess.new_empty((excess.numel(),), dtype=torch.bool),
            torch.empty((_CSR_STATS,), dtype=torch.int64, device="cpu"))


_FAKES = {
    "torchcut_cpu": {"grid_solve": _fake_cpu_grid, "csr_solve": _fake_cpu_csr},
    "torchcut_grid": {"solve": _fake_cuda_grid},
    "torchcut_csr": {"solve": _fake_cuda_csr},
}
_registered: set[str] = set()


def register_fakes(extension: str) -> None:
    """Register the fake implementations of a loaded extension's ops (once per process).

    Called by :mod:`torchcut._ext` right after it loads ``extension``.

    Examples
    --------
    >>> from torchcut import _ext
    >>> _ext.load_named("torchcut_cpu")  # doctest: +SKIP
    >>> register_fakes("torchcut_cpu")   # a second call does nothing  # doctest: +SKIP
    """
    if extension in _registered or extension not in _FAKES:
        return
    for op, fake in _FAKES[extension].items():
        torch.library.register_fake(f"{extension}::{op}")(fake)
    _registered.add(extension)


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
        raise TypeError(f"solver options: expected ints, floats, strings or None inside torch.compile, got {options!r}") from exc


# The solves read counters back to the host, which a CUDA graph cannot hold: the tag makes inductor's
# CUDA graphs (mode="reduce-overhead") leave the graphs that call them alone.
_TAGS = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()


def _flat(offsets) -> list[int]:
    return [int(v) for o in offsets for v in o]


def _unflat(flat: list[int], ndim: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(flat[i:i + ndim]) for i in range(0, len(flat), ndim))


# ---------------------------------------------------------------------------------------- grid max-flow
@torch.library.custom_op("torchcut::grid_maxflow", mutates_args=(), tags=_TAGS)
def _grid_maxflow(caps: Tensor, source: Tensor, sink: Tensor, offsets: list[int], ndim: int, backend: str,
                  options: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    from ..grid import GridGraph
    from . import _solve_grid

    graph = GridGraph._from_tensors(caps, source, sink, _unflat(offsets, ndim))
    r = _solve_grid(graph, backend, **json.loads(options))
    return r.node_mask, r.flow_values, r.residual, r.sink_flow  # new tensors: none aliases an input


@_grid_maxflow.register_fake
def _(caps, source, sink, offsets, ndim, backend, options):
    B = caps.shape[0]
    return (source.new_empty(source.shape, dtype=torch.bool), source.new_empty((B,), dtype=torch.int64),
            torch.empty_like(caps, memory_format=torch.contiguous_format), source.new_empty(source.shape, dtype=torch.int64))


@torch.library.custom_op("torchcut::grid_build_maxflow", mutates_args=(), tags=_TAGS)
def _grid_build_maxflow(source: Tensor, sink: Tensor, edges: Tensor, reverse: Optional[Tensor], offsets: list[int],
                        ndim: int, scale: Optional[float], backend: str, options: str) -> tuple[Tensor, Tensor, Tensor]:
    from ..grid import GridGraph
    from . import _solve_grid

    graph = GridGraph(source, sink, edges, _unflat(offsets, ndim), reverse, scale=scale)
    r = _solve_grid(graph, backend, **json.loads(options))
    q = torch.tensor(graph.scale if graph.scale else 1.0, dtype=torch.float64)
    return r.node_mask.reshape(source.shape), r.flow_values, q


@_grid_build_maxflow.register_fake
def _(source, sink, edges, reverse, offsets, ndim, scale, backend, options):
    B = source.shape[0] if source.dim() > ndim else 1
    return (source.new_empty(source.shape, dtype=torch.bool), source.new_empty((B,), dtype=torch.int64),
            torch.empty((), dtype=torch.float64))


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
    from ..grid import GridGraph
    from ..result import CutResult

    if not isinstance(graph, GridGraph):
        raise TypeError(f"graph: inside torch.compile, expected a torchcut.GridGraph, got {type(graph).__name__} "
                        "(general FlowGraphs are solved outside torch.compile)")
    opts = options_string(options)
    flat = _flat(graph.offsets)
    stats = {"backend": backend, "compiled": True}
    pending = graph._pending
    if pending is None:
        mask, flows, residual, sink_flow = _grid_maxflow(graph.caps, graph.source, graph.sink, flat, graph.ndim,
                                                         backend, opts)
        return CutResult(graph=graph, flow_values=flows, node_mask=mask, residual=residual,
                         source_flow=graph.source, sink_flow=sink_flow, stats=stats)
    source, sink, edges, reverse, scale = pending
    mask, flows, q = _grid_build_maxflow(source, sink, edges, reverse, flat, graph.ndim, scale, backend, opts)
    if graph.is_float:
        graph.scale = q
    if not graph.batched:
        mask = mask.unsqueeze(0)
    return CutResult(graph=graph, flow_values=flows, node_mask=mask, residual=None, source_flow=None,
                     sink_flow=None, stats=stats)


# ---------------------------------------------------------------------------------------- segment
@torch.library.custom_op("torchcut::segment_mask", mutates_args=(), tags=_TAGS)
def segment_mask(image: Tensor, seeds: Tensor, lam: float, sigma: Optional[float], connectivity: Optional[int],
                 ndim: Optional[int], channel_axis: Optional[int], bins: Optional[int], scale: Optional[float],
                 spacing: Optional[list[float]], backend: str, options: str) -> Tensor:
    """``torchcut.segment(image, seeds, ...)`` as one op: what ``segment`` calls inside ``torch.compile``.

    Examples
    --------
    >>> import torch
    >>> image = torch.zeros(4, 4); image[:2] = 1
    >>> seeds = torch.zeros(4, 4, dtype=torch.int64); seeds[0, 0] = 1; seeds[3, 3] = 2
    >>> segment_mask(image, seeds, 8.0, None, None, None, None, None, None, None, "auto", "{}").sum().item()
    8
    """
    from ..segment import segment

    mask = segment(image, seeds, lam=lam, sigma=sigma, connectivity=connectivity, ndim=ndim,
                   channel_axis=channel_axis, bins=bins, scale=scale, spacing=spacing, backend=backend,
                   **json.loads(options))
    return mask


@segment_mask.register_fake
def _(image, seeds, lam, sigma, connectivity, ndim, channel_axis, bins, scale, spacing, backend, options):
    return torch.empty(seeds.shape, dtype=torch.bool, device=image.device)
