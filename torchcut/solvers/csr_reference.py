"""Push-relabel for general (CSR) networks in plain torch ops: the readable specification.

Runs on any device; the CUDA kernels of :mod:`torchcut.solvers.cuda_csr` are checked against it.
Everything is int64.

Phase one of Goldberg-Tarjan push-relabel, synchronous over all arcs:

* Every source arc is saturated at the start: a node's excess is its (reduced) source capacity.
* A *round* first pushes into the sink from active nodes of height 1, then along every admissible arc
  (residual > 0, ``h(tail) == h(head) + 1``) at once. With heights, the arcs (p, q) and (q, p) are
  never both admissible, so all pushes of a round are independent. A node splits its excess over its
  admissible arcs in CSR order: a segmented (per-tail) exclusive cumulative sum of the admissible
  residuals says how much of the excess earlier arcs take. Then every active node is relabelled to
  1 + the lowest height it has a residual arc to (1 when it still has sink capacity).
* A *global relabel* sets heights to exact BFS distances to the sink in the residual network; nodes
  that cannot reach the sink get height INF = N + 2 and are never touched again.
* Stop when, right after a global relabel, no node of finite height holds excess. The nodes of
  infinite height (those that cannot reach the sink) are the source side of the minimum cut.
"""

from __future__ import annotations

import time

import torch

from .._deprecate import renamed_keywords

__all__ = ["solve_csr", "bfs_to_sink"]


def bfs_to_sink(row_ptr, head, tail, res, sink, inf: int):
    """Distance of every node to the sink in the residual network, ``inf`` where unreachable.

    Returns ``(dist, levels)``: int64 ``[N]`` distances and the number of sweeps.

    Examples
    --------
    >>> tail = torch.tensor([0, 1, 1, 2]); head = torch.tensor([1, 0, 2, 1])
    >>> res = torch.tensor([3, 0, 2, 0]); sink = torch.tensor([0, 0, 5])
    >>> bfs_to_sink(None, head, tail, res, sink, inf=9)[0].tolist()
    [3, 2, 1]
    """
    dist = torch.where(sink > 0, 1, inf).to(torch.int64)
    has = res > 0
    levels = 0
    while True:
        levels += 1
        cand = torch.where(has, dist[head] + 1, inf)
        new = dist.scatter_reduce(0, tail, cand, reduce="amin").clamp_(max=inf)
        if torch.equal(new, dist):
            return dist, levels
        dist = new


@renamed_keywords("the reference backend's options", max_rounds="max_iter")
def solve_csr(
    row_ptr, head, tail, rev, caps, excess, sink, *, max_iter: int | None = None, relabel_period: int | None = None
):
    """Run push-relabel phase one on a CSR network, in place.

    Parameters
    ----------
    row_ptr : Tensor ``[N + 1]`` int64
    head, tail, rev : Tensor ``[A]`` int64 (arcs sorted by tail; ``rev`` the opposite arc)
    caps : Tensor ``[A]`` (int32 or int64): residual capacities, overwritten with the final residuals.
    excess : Tensor ``[N]`` int64: initial excess (reduced source capacities), overwritten.
    sink : Tensor ``[N]``: residual sink capacities, overwritten.
    max_iter : int, optional
        Raise RuntimeError after this many rounds (formerly ``max_rounds``, still accepted with a
        ``FutureWarning``).
    relabel_period : int, optional
        Rounds between global relabels (default: a quarter of the last BFS depth, at least 4).

    Returns
    -------
    (mask, stats): bool ``[N]`` source side, dict of counters.

    Examples
    --------
    >>> row_ptr = torch.tensor([0, 1, 2]); head = torch.tensor([1, 0]); tail = torch.tensor([0, 1])
    >>> rev = torch.tensor([1, 0]); caps = torch.tensor([5, 0])
    >>> excess = torch.tensor([3, 0]); sink = torch.tensor([0, 2])
    >>> mask, stats = solve_csr(row_ptr, head, tail, rev, caps, excess, sink)
    >>> mask.tolist(), sink.tolist(), caps.tolist()
    ([True, True], [0, 0], [3, 2])
    """
    t0 = time.perf_counter()
    N = excess.numel()
    inf = N + 2
    dev = excess.device
    c = caps.to(torch.int64)
    s = sink.to(torch.int64)
    e = excess
    if max_iter is None:
        max_iter = 4 * (N + 2) ** 2 + 1000
    zero = torch.zeros((), dtype=torch.int64, device=dev)
    seg_first = row_ptr[:-1].clamp(max=max(head.numel() - 1, 0))

    rounds = relabels = bfs_levels = 0
    while True:
        h, levels = bfs_to_sink(row_ptr, head, tail, c, s, inf)
        relabels += 1
        bfs_levels += levels
        if not bool(((e > 0) & (h < inf)).any()):
            break
        period = relabel_period or max(4, levels // 4)
        for _ in range(period):
            rounds += 1
            if rounds > max_iter:
                raise RuntimeError(f"reference push-relabel did not converge in {max_iter} rounds (option max_iter)")
            # pushes into the sink (height 0)
            adm = (e > 0) & (h == 1) & (s > 0)
            d = torch.where(adm, torch.minimum(e, s), zero)
            s -= d
            e -= d
            if head.numel():
                # pushes along admissible arcs, excess split in CSR order
                et = e[tail]
                adm = (c > 0) & (et > 0) & (h[tail] < inf) & (h[tail] == h[head] + 1)
                r = torch.where(adm, c, zero)
                before = torch.cumsum(r, 0) - r
                before = before - before[seg_first][tail]
                d = torch.minimum(r, et - before).clamp_(min=0)
                c -= d
                c.index_add_(0, rev, d)
                e.index_add_(0, tail, -d)
                e.index_add_(0, head, d)
            active = (e > 0) & (h < inf)
            if not bool(active.any()):
                break
            new = torch.where(s > 0, 1, inf).to(torch.int64)
            if head.numel():
                cand = torch.where(c > 0, h[head] + 1, inf)
                new = new.scatter_reduce(0, tail, cand, reduce="amin")
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
