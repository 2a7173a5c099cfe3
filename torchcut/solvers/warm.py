"""Sequences of grid max-flow problems on one grid, each solved from the previous one's flow.

Alpha-expansion solves the move for label alpha again in every cycle, on a network that differs from
the last one only where labels changed. :class:`WarmGrid` keeps each solve's residual network and
re-fits it to the next capacities (Kohli and Torr's dynamic graph cuts, 2005):

* **n-links.** The net flow ``g`` of the arc pair p -> q, q -> p (``g = C(p->q) - R(p->q)`` with the
  last capacities C and residuals R) is clipped to the new capacities, ``-C'(q->p) <= g' <= C'(p->q)``;
  the residuals become ``C'(p->q) - g'`` and ``C'(q->p) + g'``, and the flow taken off (``g - g'``) goes
  back to p as excess and is owed by q.
* **terminals.** Each node then has ``avail = s' + g_net`` to place, where ``s'`` is its new (netted)
  source capacity and ``g_net`` its net n-link inflow: up to its new sink capacity ``k'`` goes to the
  sink, the rest stays as excess. Where ``avail < 0`` (the n-links carry more out than comes in),
  ``d = -avail`` is added to both ``s'`` and ``k'``: every cut grows by d, so the minimum cuts do not
  change.

The result is a valid preflow of a network with the same minimum cuts as the new one, and the solvers
finish it (push-relabel phase one on CUDA, Boykov-Kolmogorov from the excess on the CPU). The mask is
the set of nodes that cannot reach the sink in the final residual network, which is the same for every
maximum preflow: the masks equal those of solves from zero flow.
"""

from __future__ import annotations

import functools

import torch

from .._cudagraph import GraphCache
from ..grid import overlap_slices
from ._backends import GRID
from ._terminals import net_terminals

__all__ = ["WarmGrid"]


class WarmGrid:
    """Solve grid networks of one shape and batch one after the other, each from the last one's flow.

    Parameters
    ----------
    offsets : sequence of K offsets
        The grid's offsets (as for :class:`torchcut.GridGraph`).
    backend : str
        Grid backend, as for :func:`torchcut.maxflow` ("auto", "cuda", "cpu", "reference").
    warm : bool
        False: every solve starts from zero flow (the baseline; same masks).
    graphs : bool
        On CUDA, replay the re-fit (about a dozen small ops per offset) as a CUDA graph once the same
        shapes come back (:class:`torchcut._cudagraph.GraphCache`).
    **options
        Passed to the backend's ``solve_grid``.

    Examples
    --------
    >>> import torch, torchcut
    >>> from torchcut.solvers.warm import WarmGrid
    >>> offs = torchcut.grid_offsets(2, 4)
    >>> caps = torch.zeros(1, 4, 1, 3, dtype=torch.int32); caps[0, 0, 0, :2] = 4   # 0 -> 1 -> 2
    >>> w = WarmGrid(offs, backend="reference")
    >>> w.solve(caps, torch.tensor([[[5, 0, 0]]]), torch.tensor([[[0, 0, 3]]])).tolist()
    [[[True, True, True]]]
    >>> caps[0, 0, 0, 1] = 1                         # the second arc shrinks: the cut moves to it
    >>> w.solve(caps, torch.tensor([[[5, 0, 0]]]), torch.tensor([[[0, 0, 3]]])).tolist()
    [[[True, True, False]]]
    """

    def __init__(self, offsets, backend: str = "auto", warm: bool = True, graphs: bool = True, **options):
        self.offsets = tuple(tuple(int(v) for v in o) for o in offsets)
        self.backend, self.warm, self.graphs, self.options = backend, bool(warm), bool(graphs), options
        self.state = None  # (caps C, residuals R, excess e, sink residual r, source s, sink k) of the last solve
        self.log = []  # the solver's counters of every solve

    def keep(self, index: torch.Tensor) -> None:
        """Keep the state of the batch items ``index`` (in that order) for the next solve."""
        if self.state is not None:
            self.state = tuple(t.index_select(0, index) for t in self.state)

    def solve(
        self, caps: torch.Tensor, source: torch.Tensor, sink: torch.Tensor, links_changed: bool = True
    ) -> torch.Tensor:
        """Source side ``[B, *shape]`` of the minimum cut of the network (arguments are not modified).

        ``caps``: ``[B, 2K, *shape]`` in the solvers' layout (``torchcut.grid._arc_layout``);
        ``source``, ``sink``: ``[B, *shape]`` terminal capacities, netted (at most one of them
        non-zero per node) or not. ``links_changed=False`` promises that ``caps`` holds the values of
        the last solve's capacities (only the terminals changed): the n-link re-fit is skipped.
        """
        self._check(caps, source, sink)
        keep_caps = None  # the last capacities when they stay (a private copy already)
        if self.state is None or not self.warm or self.state[0].shape != caps.shape:
            R, e, r, s, k = _cold(caps, source, sink)
        else:
            keep_caps = None if links_changed else self.state[0]
            step = functools.partial(_refit, offsets=self.offsets, links=links_changed)
            inputs = self.state + (caps, source, sink)
            if self.graphs:  # ~12 ops per offset: replayed as a CUDA graph once the shapes come back
                key = ("refit", self.offsets, links_changed) + tuple((tuple(t.shape), t.dtype) for t in inputs)
                R, e, r, s, k = _REFITS.run(key, step, inputs)
            else:
                R, e, r, s, k = step(*inputs)
        impl = GRID(caps.device, self.backend)
        mask, stats = impl.solve_grid(R, e, r, self.offsets, **self.options)
        self.log.append(stats)
        if self.warm:  # the caller may reuse caps: keep a copy
            self.state = (caps.clone() if keep_caps is None else keep_caps, R, e, r, s, k)
        return mask

    def _check(self, caps, source, sink):
        nd, K = len(self.offsets[0]), len(self.offsets)
        if caps.dim() != nd + 2 or caps.shape[1] != 2 * K:
            raise ValueError(
                f"caps: expected shape [B, {2 * K}, *shape] with {nd} grid dims for {K} offsets, "
                f"got {tuple(caps.shape)}"
            )
        want = (caps.shape[0],) + tuple(caps.shape[2:])
        for name, t in (("caps", caps), ("source", source), ("sink", sink)):
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise TypeError(f"{name}: expected an integer tensor, got dtype {t.dtype}")
            if t.device != caps.device:
                raise ValueError(f"{name}: expected a tensor on {caps.device} (that of caps), got {t.device}")
            if name != "caps" and tuple(t.shape) != want:
                raise ValueError(f"{name}: expected shape {want} (caps' batch and grid), got {tuple(t.shape)}")
        if caps.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"caps: expected int32 or int64 capacities, got {caps.dtype}")


_REFITS = GraphCache(entries=4)


def _cold(caps, source, sink):
    """The solver's start from zero flow: (residuals, excess, sink residuals, source, sink)."""
    s, k = net_terminals(source, sink, torch.int64)
    return caps.clone(), s.clone(), k.to(caps.dtype, copy=True), s, k  # the solver works in place on the first three


def _refit(C0, R, e, r0, s0, k0, C, source, sink, *, offsets, links=True):
    """The last solve's state (capacities C0, residuals R, excess e, sink residuals r0, terminals s0, k0)
    re-fitted to the capacities C and terminals (source, sink): the start of the next solve.
    ``links=False``: C equals C0, only the terminals are re-fitted."""
    s, k = net_terminals(source, sink, torch.int64)
    moved = 0
    if links:
        R, moved = _refit_links(C0, R, C, offsets)
    # node balance: s0 + g_net - (k0 - r0) = e (+ moved: the flow the clipped links handed back)
    avail = s + e + moved + (k0 - r0.to(torch.int64)) - s0  # s' + g_net
    f = torch.minimum(avail.clamp(min=0), k)
    d = avail.neg().clamp_(min=0)
    s, k = s + d, k + d
    return R, avail + d - f, (k - f).to(C.dtype), s, k


def _refit_links(C0, R, C, offsets):
    """Residuals of the new capacities ``C`` around the last flow, and the excess each node gains."""
    K = len(offsets)
    shape = C.shape[2:]
    Rn = torch.empty_like(C)
    moved = torch.zeros((C.shape[0],) + tuple(shape), dtype=torch.int64, device=C.device)
    lead = (slice(None),)
    for k, o in enumerate(offsets):
        # arcs leaving the grid: residual = capacity (zero in the layout) and no flow
        Rn[:, k] = C[:, k]
        Rn[:, K + k] = C[:, K + k]
        if any(abs(v) >= n for v, n in zip(o, shape)):
            continue
        p, q = overlap_slices(shape, o)  # p + o = q
        g = C0[(slice(None), k) + p].to(torch.int64) - R[(slice(None), k) + p].to(torch.int64)
        fwd = C[(slice(None), k) + p].to(torch.int64)
        rev = C[(slice(None), K + k) + q].to(torch.int64)
        g2 = torch.minimum(torch.maximum(g, -rev), fwd)
        Rn[(slice(None), k) + p] = (fwd - g2).to(C.dtype)
        Rn[(slice(None), K + k) + q] = (rev + g2).to(C.dtype)
        back = g - g2  # flow p no longer sends to q: p keeps it, q no longer gets it
        moved[lead + p] += back
        moved[lead + q] -= back
    return Rn, moved
