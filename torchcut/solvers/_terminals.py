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


def net_terminals_(source: torch.Tensor, sink: torch.Tensor, chunk: int = 1 << 21) -> None:
    """:func:`net_terminals` in place on ``source`` (int64) and ``sink``, about ``chunk`` nodes at a time
    (the int64 temporary stays at most 16 MB; a 1 MP image is one step of a few tensor ops).

    Contiguous tensors are walked as flat views; otherwise whole entries of the first dimension are
    taken, as many as fit in ``chunk`` nodes (at least one).

    Examples
    --------
    >>> s, k = torch.tensor([[5, 0], [3, 1]]), torch.tensor([[2, 4], [3, 0]])
    >>> net_terminals_(s, k, chunk=1)
    >>> s.tolist(), k.tolist()
    ([[3, 0], [0, 1]], [[0, 4], [0, 0]])
    """
    if source.dim() == 0 or (source.is_contiguous() and sink.is_contiguous()):
        source, sink = source.view(-1), sink.view(-1)
        step = chunk
    else:
        step = max(1, chunk // max(1, source[0].numel()))
    for i in range(0, source.shape[0], step):
        src, snk = source[i : i + step], sink[i : i + step]
        low = torch.minimum(src, snk)  # int64; three kernels in all, where net_terminals and copies take seven
        src.sub_(low)
        snk.sub_(low)
