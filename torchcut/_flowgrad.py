"""The flow value's gradient: the minimum cut (what ``CutResult.flow_value`` returns under grad).

Kept apart from :mod:`torchcut.diff` so that :mod:`torchcut.result` can reach it without importing
the solvers back; :func:`torchcut.diff.flow_value` is the public name.
"""

from __future__ import annotations

import torch

from .grid import GridGraph, shift

__all__ = ["flow_value"]


def _float_dtype(tensors) -> torch.dtype:
    dts = [t.dtype for t in tensors if t is not None and t.is_floating_point()]
    return torch.float64 if torch.float64 in dts or not dts else dts[0]


def _grid_cut_grads(S: torch.Tensor, g: torch.Tensor, offsets, batched: bool, symmetric: bool, needs):
    """Gradients of the cut capacity w.r.t. (source, sink, edges, reverse), scaled by ``g`` per item."""
    nd = len(offsets[0])
    gb = g.reshape((-1,) + (1,) * nd)
    T = ~S

    def out(x):
        return x if batched else x[0]

    d_src = out(gb * T) if needs[0] else None
    d_snk = out(gb * S) if needs[1] else None
    d_e = d_r = None
    if needs[2] or needs[3]:
        fwd = torch.stack([S & ~shift(S, o, True) for o in offsets])  # p in S, p + o in T
        bwd = torch.stack([shift(S, o, False) & T for o in offsets])  # p + o in S, p in T
        if symmetric:
            fwd = fwd.to(g.dtype) + bwd.to(g.dtype)
        d_e = fwd * gb.unsqueeze(0)
        d_e = d_e if batched else d_e[:, 0]
        if not symmetric and needs[3]:
            d_r = bwd * gb.unsqueeze(0)
            d_r = d_r if batched else d_r[:, 0]
    return d_src, d_snk, d_e, d_r


class _GridFlowValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, mask, offsets, batched, source, sink, edges, reverse):
        ctx.offsets, ctx.batched, ctx.symmetric = offsets, batched, reverse is None
        # the graph may have been moved (GridGraph.to) since it was built: gradients go back to each input's device
        ctx.devices = [None if t is None else t.device for t in (source, sink, edges, reverse)]
        ctx.save_for_backward(mask)
        return (value if batched else value[0]).to(mask.device, copy=True)

    @staticmethod
    def backward(ctx, grad):
        (S,) = ctx.saved_tensors
        needs = ctx.needs_input_grad[4:8]
        g = grad.reshape(-1).to(S.device)
        grads = _grid_cut_grads(S, g, ctx.offsets, ctx.batched, ctx.symmetric, needs)
        return (None, None, None, None) + tuple(None if d is None else d.to(dev) for d, dev in zip(grads, ctx.devices))


class _CsrFlowValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, mask, kind, tail, head, s, t, cap, rev_cap, source, sink):
        ctx.kind, ctx.st = kind, (s, t)
        ctx.save_for_backward(mask, tail, head)
        return value[0].clone()

    @staticmethod
    def backward(ctx, grad):
        S, tail, head = ctx.saved_tensors
        S = S.reshape(-1).to(tail.device)
        g = grad.to(tail.device)
        needs = ctx.needs_input_grad[7:11]
        d_cap = d_rc = d_src = d_snk = None
        if ctx.kind == "network":  # the source and sink are nodes s and t of the input numbering
            s, t = ctx.st
            side = torch.ones(S.numel() + 2, dtype=torch.bool, device=S.device)
            keep = torch.ones_like(side)
            keep[s] = keep[t] = False
            side[keep] = S
            side[t] = False
            d_cap = g * (side[tail] & ~side[head])
        else:
            if needs[0]:
                d_cap = g * (S[tail] & ~S[head])
            if needs[1]:
                d_rc = g * (S[head] & ~S[tail])
            if needs[2]:
                d_src = g * ~S
            if needs[3]:
                d_snk = g * S
        return (None,) * 7 + (d_cap, d_rc, d_src, d_snk)


def flow_value(result):
    """The maximum flow of a solve as a float tensor that carries the minimum cut as its gradient.

    What ``result.flow_value`` returns when float capacities of the graph require grad (and grad mode is
    on, both when the graph is built and when ``flow_value`` is read): a 0-d tensor, or ``[B]`` for a
    batched grid, equal to the (quantised) flow value. Its gradient with respect to each capacity the
    graph was built from is 1 on the arcs that cross the returned minimum cut from the source side
    (source arcs of sink-side nodes, sink arcs of source-side nodes, arcs from a source-side node to a
    sink-side node) and 0 elsewhere: a supergradient of the minimum cut capacity (a concave function
    of the capacities), and its gradient where the minimum cut is unique. No solve is made.

    Parameters
    ----------
    result : CutResult
        A solve of a :class:`torchcut.GridGraph` or of a :class:`torchcut.FlowGraph` built by
        ``from_edges`` or ``from_network`` from float capacities.

    Returns
    -------
    torch.Tensor
        float64 when a float64 capacity took part, else float32.

    Examples
    --------
    >>> import torch, torchcut
    >>> src = torch.tensor([[3.0, 0.0]], requires_grad=True)
    >>> snk = torch.tensor([[0.0, 2.5]], requires_grad=True)
    >>> edges = torch.tensor([[[1.5, 0.0]], [[0.0, 0.0]]], requires_grad=True)
    >>> v = torchcut.maxflow(torchcut.GridGraph(src, snk, edges, torchcut.grid_offsets(2, 4))).flow_value
    >>> v
    tensor(1.5000, grad_fn=<_GridFlowValueBackward>)
    >>> v.backward()
    >>> r = torchcut.maxflow(torchcut.GridGraph(src, snk, edges, torchcut.grid_offsets(2, 4)))
    >>> r.mask                                    # the cut: node 0 on the source side, node 1 not
    tensor([[ True, False]])
    >>> src.grad, snk.grad, edges.grad[0]         # source -> 1, 0 -> sink and 0 -> 1 cross it
    (tensor([[0., 1.]]), tensor([[1., 0.]]), tensor([[1., 0.]]))
    """
    g = result.graph
    caps = getattr(g, "_grad_caps", None)
    if caps is None:
        raise ValueError(
            "result: expected the solve of a graph built (with grad mode on) from float capacities that "
            "require grad, got a graph without any; integer capacities cannot carry a gradient"
        )
    scale = g.scale if g.scale else 1.0
    if isinstance(scale, torch.Tensor):
        scale = float(scale)
    tensors = [c for c in caps if isinstance(c, torch.Tensor)]
    dtype = _float_dtype(tensors)
    value = (result.flow_values.to(torch.float64) / scale).to(dtype)
    mask = result.node_mask.detach()
    if isinstance(g, GridGraph):
        source, sink, edges, reverse = caps
        return _GridFlowValue.apply(value, mask, g.offsets, g.batched, source, sink, edges, reverse)
    if caps[0] == "edges":
        _, u, v, cap, rc, src, snk = caps
        return _CsrFlowValue.apply(value, mask, "edges", u, v, None, None, cap, rc, src, snk)
    _, tail, head, cap, s, t = caps
    return _CsrFlowValue.apply(value, mask, "network", tail, head, s, t, cap, None, None, None)
