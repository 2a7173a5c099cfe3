"""Push-relabel for grid networks in plain torch tensor ops: the readable specification.

It runs on any device and is what the CUDA kernels are checked against. Everything is int64.

The algorithm (phase one of Goldberg-Tarjan push-relabel, synchronous over the grid):

* Every source arc is saturated at the start: a node's excess is its source capacity.
* A *round* pushes along each of the 2K directions in turn. Within one direction each node pushes to
  exactly one neighbour and receives from exactly one, so all pushes of a direction are independent.
  A push from p to q = p + o is allowed when p is active (excess > 0, finite height), the arc has
  residual capacity and h(p) == h(q) + 1. Pushes into the sink need h(p) == 1 (the sink's height is 0).
  After the pushes, every active node is relabelled to 1 + the lowest height it has a residual arc to.
* A *global relabel* sets every height to the exact BFS distance to the sink in the residual network
  (breadth-first, level by level, from the sink backwards). Nodes that cannot reach the sink get height
  INF and are never touched again.
* The solve stops when, right after a global relabel, no node with finite height holds excess. The
  flow value is then what reached the sink, and the nodes with infinite height (those that cannot
  reach the sink) form the source side of the minimum cut defined in DESIGN.md.
"""

from __future__ import annotations

import math
import time

import torch

from ..grid import shift

__all__ = ["solve_grid", "bfs_to_sink"]


def _directions(offsets):
    return tuple(offsets) + tuple(tuple(-v for v in o) for o in offsets)


def bfs_to_sink(caps: torch.Tensor, sink: torch.Tensor, offsets, inf: int) -> tuple[torch.Tensor, int]:
    """Distance of every node to the sink in the residual network, ``inf`` where unreachable.

    ``caps``: ``[B, 2K, *shape]`` residuals; ``sink``: ``[B, *shape]`` residual sink capacities.
    Returns the distances (int64, shaped like ``sink``) and the number of BFS levels swept.

    Examples
    --------
    >>> caps = torch.zeros(1, 4, 1, 3, dtype=torch.int64); caps[0, 0] = 1   # arcs p -> p + (0, 1)
    >>> d, _ = bfs_to_sink(caps, torch.tensor([[[0, 0, 5]]]), ((0, 1), (1, 0)), inf=99)
    >>> d.tolist()
    [[[3, 2, 1]]]
    """
    dirs = _directions(offsets)
    dist = torch.where(sink > 0, 1, inf).to(torch.int64)
    levels = 0
    while True:
        levels += 1
        best = dist
        for k, o in enumerate(dirs):
            reach = shift(dist, o, inf) + 1  # through the arc p -> p + o
            best = torch.minimum(best, torch.where(caps[:, k] > 0, reach, inf))
        best = best.clamp_(max=inf)
        if torch.equal(best, dist):
            return dist, levels
        dist = best


def solve_grid(caps, excess, sink, offsets, *, max_rounds: int | None = None, relabel_period: int | None = None):
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
    max_rounds : int, optional
        Raise RuntimeError after this many push/relabel rounds (default: a bound that no valid run
        reaches).
    relabel_period : int, optional
        Push/relabel rounds between global relabels (default: adaptive, a quarter of the last BFS depth).

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
    K = len(offsets)
    dirs = _directions(offsets)
    shape = tuple(excess.shape[1:])
    n = math.prod(shape)
    inf = n + 2
    c = caps.to(torch.int64)
    s = sink.to(torch.int64)
    e = excess
    if max_rounds is None:
        max_rounds = 4 * (n + 2) ** 2 + 1000
    zero = torch.zeros((), dtype=torch.int64, device=e.device)

    rounds = relabels = bfs_levels = 0
    while True:
        h, levels = bfs_to_sink(c, s, offsets, inf)
        relabels += 1
        bfs_levels += levels
        active = (e > 0) & (h < inf)
        if not bool(active.any()):
            break
        period = relabel_period or max(4, levels // 4)
        for _ in range(period):
            rounds += 1
            if rounds > max_rounds:
                raise RuntimeError(f"reference push-relabel did not converge in {max_rounds} rounds")
            # pushes into the sink (height 0)
            adm = (e > 0) & (h == 1) & (s > 0)
            delta = torch.where(adm, torch.minimum(e, s), zero)
            s -= delta
            e -= delta
            # pushes along each direction: independent within a direction
            for k, o in enumerate(dirs):
                ck = c[:, k]
                adm = (e > 0) & (h < inf) & (ck > 0) & (h == shift(h, o, inf) + 1)
                delta = torch.where(adm, torch.minimum(e, ck), zero)
                ck -= delta
                e -= delta
                recv = shift(delta, dirs[(k + K) % (2 * K)], 0)  # what p + o received from p
                c[:, (k + K) % (2 * K)] += recv
                e += recv
            # relabel every active node to 1 + its lowest residual neighbour
            active = (e > 0) & (h < inf)
            if not bool(active.any()):
                break
            new = torch.where(s > 0, 1, inf).to(torch.int64)
            for k, o in enumerate(dirs):
                new = torch.minimum(new, torch.where(c[:, k] > 0, shift(h, o, inf) + 1, inf))
            h = torch.where(active, new.clamp_(max=inf), h)

    if c is not caps:
        caps.copy_(c)
    if s is not sink:
        sink.copy_(s)
    mask = h >= inf
    stats = {
        "backend": "reference",
        "rounds": rounds,
        "global_relabels": relabels,
        "bfs_levels": bfs_levels,
        "seconds": time.perf_counter() - t0,
    }
    return mask, stats
