"""Terminal netting, written once for the Python code (the native code's is ``csrc/terminals.h``).

A node with source capacity s and sink capacity k has the same minimum cuts as one with s - m and
k - m, m = min(s, k), and a maximum flow m larger (m goes straight from the source to the sink through
the node). The solvers start from netted terminals: the source part is the node's initial excess.
"""

from __future__ import annotations

import torch

__all__ = ["net_terminals", "net_terminals_"]


def net_terminals(source: torch.Tensor, sink: torch.Tensor, sink_dtype: torch.dtype | None = None):
    """``(excess, sink)``: the integer capacities less ``min(source, sink)`` per node, as new tensors.

    The excess is int64; the sink keeps its dtype unless ``sink_dtype`` is given. Both come from one
    int64 difference (``max(source - sink, 0)`` and ``max(sink - source, 0)``), with no widened copy of
    the sink and no separate minimum.

    Examples
    --------
    >>> e, k = net_terminals(torch.tensor([5, 0, 3]), torch.tensor([2, 4, 3], dtype=torch.int32))
    >>> e.tolist(), k.tolist(), k.dtype
    ([3, 0, 0], [0, 4, 0], torch.int32)
    """
    excess = source.to(torch.int64) - sink  # no copy of an int64 source; the sink is widened in the op
    net_sink = excess.clamp(max=0).neg_().to(sink.dtype if sink_dtype is None else sink_dtype)
    excess.clamp_(min=0)
    return excess, net_sink


def net_terminals_(source: torch.Tensor, sink: torch.Tensor, rows: int = 64) -> None:
    """:func:`net_terminals` in place on ``source`` (int64) and ``sink``, ``rows`` entries of the first
    dimension at a time (no temporary of the full size).

    Examples
    --------
    >>> s, k = torch.tensor([[5, 0], [3, 1]]), torch.tensor([[2, 4], [3, 0]])
    >>> net_terminals_(s, k, rows=1)
    >>> s.tolist(), k.tolist()
    ([[3, 0], [0, 1]], [[0, 4], [0, 0]])
    """
    for i in range(0, source.shape[0], rows):
        src, snk = source[i:i + rows], sink[i:i + rows]
        excess, net_sink = net_terminals(src, snk)
        src.copy_(excess)
        snk.copy_(net_sink)
