"""Push-relabel for grid networks in plain torch tensor ops: the readable specification.

It runs on any device and is what the CUDA kernels are checked against. Capacities and excesses are
int64, heights int32.

The algorithm (phase one of Goldberg-Tarjan push-relabel, synchronous over the grid):

* Every source arc is saturated at the start: a node's excess is its source capacity.
* A *round* pushes along each of the 2K directions in turn. Within one direction each node pushes to
  exactly one neighbour and receives from exactly one, so all pushes of a direction are independent.
  A push from p to q = p + o is allowed when p is active (excess > 0, finite height), the arc has
  residual capacity and h(p) == h(q) + 1. Pushes into the sink need h(p) == 1 (the sink's height is 0).
  After the pushes, every active node is relabelled to 1 + the lowest height it has a residual arc to.
* A *global relabel* sets every height to the exact BFS distance to the sink in the residual network
  (relaxation from the sink backwards until nothing changes). Nodes that cannot reach the sink get
  height INF and are never touched again.
* The solve stops when, right after a global relabel, no node with finite height holds excess. The
  flow value is then what reached the sink, and the nodes with infinite height (those that cannot
  reach the sink) form the source side of the minimum cut defined in docs/design.md.

Neighbour access: per-node arrays that are read at ``p + o`` live in buffers padded by the largest
offset on every side, so that "the value at p + o for every p" is a view, not a copy. The padding of
height buffers holds INF (never admissible), that of excess deliveries holds 0.
"""

from __future__ import annotations

import math
import time

import torch

from .._deprecate import renamed_keywords

__all__ = ["solve_grid", "bfs_to_sink"]


class _Padded:
    """Buffers of shape ``[B, *(shape + 2 * pad)]`` and shifted views of their interior."""

    def __init__(self, shape, offsets):
        self.shape = tuple(shape)
        self.pad = max(abs(v) for o in offsets for v in o)

    def new(self, batch, fill, dtype, device):
        p = self.pad
        return torch.full((batch,) + tuple(n + 2 * p for n in self.shape), fill, dtype=dtype, device=device)

    def at(self, buf, offset=None):
        """View of ``buf`` holding, at index p, the value of node p + offset (the interior if None)."""
        p = self.pad
        off = offset or (0,) * len(self.shape)
        idx = (slice(None),) + tuple(slice(p + o, p + o + n) for o, n in zip(off, self.shape))
        return buf[idx]


def _directions(offsets):
    return tuple(offsets) + tuple(tuple(-v for v in o) for o in offsets)


def bfs_to_sink(caps: torch.Tensor, sink: torch.Tensor, offsets, inf: int) -> tuple[torch.Tensor, int]:
    """Distance of every node to the sink in the residual network, ``inf`` where unreachable.

    ``caps``: ``[B, 2K, *shape]`` residuals; ``sink``: ``[B, *shape]`` residual sink capacities.
    Returns the distances (int32, shaped like ``sink``) and the number of relaxation sweeps.

    Examples
    --------
    >>> caps = torch.zeros(1, 4, 1, 3, dtype=torch.int64); caps[0, 0] = 1   # arcs p -> p + (0, 1)
    >>> d, _ = bfs_to_sink(caps, torch.tensor([[[0, 0, 5]]]), ((0, 1), (1, 0)), inf=99)
    >>> d.tolist()
    [[[3, 2, 1]]]
    """
    grid = _Padded(sink.shape[1:], offsets)
    buf = grid.new(sink.shape[0], inf, torch.int32, sink.device)
    dist = grid.at(buf)
    dist.copy_(_unless(sink > 0, inf) + 1)
    # a closed arc costs inf extra, so min() never goes through it (arithmetic is much faster than
    # torch.where on CPU)
    penalty = [_unless(caps[:, k] > 0, inf) + 1 for k in range(caps.shape[1])]
    through = torch.empty_like(dist)
    sweeps = 0
    while True:
        sweeps += 1
        before = dist.clone()
        # Relax in place, direction after direction: every value stays the length of a real path to
        # the sink (or at least inf), so the fixed point is the exact BFS distance.
        for k, o in enumerate(_directions(offsets)):
            torch.add(grid.at(buf, o), penalty[k], out=through)
            torch.minimum(dist, through, out=dist)
        dist.clamp_(max=inf)
        if torch.equal(before, dist):
            return dist, sweeps


def _unless(condition: torch.Tensor, value: int) -> torch.Tensor:
    """int32 tensor: 0 where ``condition`` holds, ``value`` elsewhere."""
    return (~condition).to(torch.int32) * value


@renamed_keywords("the reference backend's options", max_rounds="max_iter")
def solve_grid(
    caps, excess, sink, offsets, *, max_iter: int | None = None, relabel_period: int | None = None, on_relabel=None
):
    """Run push-relabel phase one on a batched grid network, in place.

    Parameters
    ----------
    caps : Tensor ``[B, 2K, *shape]`` (int32 or int64)
        Residual arc capacities, overwritten with the final residuals.
    excess : Tensor ``[B, *shape]`` int64
        Initial excess (the source capacities), overwritten with the final excess.
    sink : Tensor ``[B, *shape]``
        Residual sink capacities, overwritten.
    offsets : the K offsets of the grid.
    max_iter : int, optional
        Raise RuntimeError after this many push/relabel rounds (default: a bound no valid run reaches;
        formerly ``max_rounds``, still accepted with a ``FutureWarning``).
    relabel_period : int, optional
        Push/relabel rounds between global relabels (default: adaptive, a quarter of the last BFS depth).
    on_relabel : callable, optional
        Called before every global relabel but the first as ``on_relabel(caps, sink, heights, exact)``
        (residuals, residual sink capacities, the current heights and the exact distances the relabel
        will set; int64, int64, int32, int32 views, not to be modified). For studies of the relabel.

    Returns
    -------
    (mask, stats): bool ``[B, *shape]`` source side, and a dict of counters.

    Examples
    --------
    >>> caps = torch.zeros(1, 4, 1, 2, dtype=torch.int64); caps[0, 0, 0, 0] = 2
    >>> excess = torch.tensor([[[3, 0]]]); sink = torch.tensor([[[0, 4]]])
    >>> mask, stats = solve_grid(caps, excess, sink, ((0, 1), (1, 0)))
    >>> mask.tolist(), sink.tolist(), excess.tolist()
    ([[[True, False]]], [[[0, 2]]], [[[1, 0]]])
    """
    t0 = time.perf_counter()
    dirs = _directions(offsets)
    B, shape = excess.shape[0], tuple(excess.shape[1:])
    n = math.prod(shape)
    inf = n + 2
    if max_iter is None:
        max_iter = 4 * (n + 2) ** 2 + 1000
    dev = excess.device
    c = caps.to(torch.int64)
    s = sink.to(torch.int64)
    grid = _Padded(shape, offsets)
    e_buf = grid.new(B, 0, torch.int64, dev)  # excess, padded so that deliveries to p + o are views
    e = grid.at(e_buf)
    e.copy_(excess)
    h_buf = grid.new(B, inf, torch.int32, dev)  # heights, padded with INF
    h = grid.at(h_buf)

    rounds = relabels = sweeps = 0
    while True:
        dist, levels = bfs_to_sink(c, s, offsets, inf)
        if on_relabel is not None and relabels:
            on_relabel(c, s, h, dist)
        h.copy_(dist)
        relabels += 1
        sweeps += levels
        if not bool(((e > 0) & (h < inf)).any()):
            break
        period = relabel_period or max(4, levels // 4)
        for _ in range(period):
            rounds += 1
            if rounds > max_iter:
                raise RuntimeError(f"reference push-relabel did not converge in {max_iter} rounds (option max_iter)")
            push_round(grid, c, s, e_buf, h_buf, dirs, inf)
            active = (e > 0) & (h < inf)
            if not bool(active.any()):
                break
            relabel_round(grid, c, s, h_buf, dirs, inf, active)
    excess.copy_(e)
    if c is not caps:
        caps.copy_(c)
    if s is not sink:
        sink.copy_(s)
    mask = h >= inf
    stats = {
        "backend": "reference",
        "rounds": rounds,
        "global_relabels": relabels,
        "bfs_sweeps": sweeps,
        "seconds": time.perf_counter() - t0,
    }
    return mask, stats


def push_round(grid: _Padded, c, s, e_buf, h_buf, dirs, inf: int, on_push=None) -> None:
    """One synchronous push round, in place: every node with excess and height 1 pushes into the sink,
    then, direction by direction (independent within a direction), every node with excess pushes to its
    neighbour one height lower. ``c`` ``[B, 2K, *shape]`` int64 residuals, ``s`` residual sink
    capacities; ``e_buf`` and ``h_buf`` padded excess and heights (:class:`_Padded`: a push into the
    padding is a delivery outside the grid). ``on_push(k, delta)``: called with what each node pushed
    in direction ``k``.

    Examples
    --------
    Node 0 (excess 3, height 2) pushes 2 units right to node 1 (height 1); node 1 had none to send.

    >>> offs = ((0, 1), (1, 0)); grid = _Padded((1, 2), offs)
    >>> c = torch.zeros(1, 4, 1, 2, dtype=torch.int64); c[0, 0, 0, 0] = 2
    >>> s = torch.tensor([[[0, 4]]])
    >>> e_buf = grid.new(1, 0, torch.int64, "cpu"); _ = grid.at(e_buf).copy_(torch.tensor([[[3, 0]]]))
    >>> h_buf = grid.new(1, 9, torch.int32, "cpu"); _ = grid.at(h_buf).copy_(torch.tensor([[[2, 1]]]))
    >>> push_round(grid, c, s, e_buf, h_buf, _directions(offs), 9)
    >>> grid.at(e_buf).tolist(), c[0, 2].tolist()
    ([[[1, 2]]], [[0, 2]])
    """
    K = len(dirs) // 2
    e, h = grid.at(e_buf), grid.at(h_buf)
    delta = torch.minimum(e, s) * ((e > 0) & (h == 1))  # into the sink (height 0)
    s -= delta
    e -= delta
    for k, o in enumerate(dirs):
        ck = c[:, k]
        admissible = (e > 0) & (h < inf) & (h == grid.at(h_buf, o) + 1)
        delta = torch.minimum(e, ck) * admissible
        ck -= delta
        e -= delta
        c[:, (k + K) % (2 * K)] += _delivered(grid, delta, o)
        grid.at(e_buf, o).add_(delta)  # the neighbour p + o receives what p sent
        if on_push is not None:
            on_push(k, delta)


def relabel_round(grid: _Padded, c, s, h_buf, dirs, inf: int, active) -> None:
    """Every ``active`` node to 1 + its lowest residual neighbour (the padding of ``h_buf`` holds the
    heights beyond the grid), at most ``inf``, in place.

    Examples
    --------
    Node 0's only residual arc leads to node 1 (height 4), so it rises to 5.

    >>> offs = ((0, 1), (1, 0)); grid = _Padded((1, 2), offs)
    >>> c = torch.zeros(1, 4, 1, 2, dtype=torch.int64); c[0, 0, 0, 0] = 2
    >>> h_buf = grid.new(1, 9, torch.int32, "cpu"); _ = grid.at(h_buf).copy_(torch.tensor([[[0, 4]]]))
    >>> no_sink = torch.zeros(1, 1, 2, dtype=torch.int64)
    >>> relabel_round(grid, c, no_sink, h_buf, _directions(offs), 9, torch.tensor([[[True, False]]]))
    >>> grid.at(h_buf).tolist()
    [[[5, 4]]]
    """
    h = grid.at(h_buf)
    new = _unless(s > 0, inf) + 1
    for k, o in enumerate(dirs):
        torch.minimum(new, grid.at(h_buf, o) + 1 + _unless(c[:, k] > 0, inf), out=new)
    h.add_((new.clamp_(max=inf) - h) * active)


def _delivered(grid: _Padded, delta: torch.Tensor, o) -> torch.Tensor:
    """``r[q] = delta[q - o]``: what node q received through its reverse arc q -> q - o."""
    buf = grid.new(delta.shape[0], 0, delta.dtype, delta.device)
    grid.at(buf, o).copy_(delta)
    return grid.at(buf)
