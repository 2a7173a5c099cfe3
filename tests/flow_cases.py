"""Random general flow networks and independent oracles (scipy, PyMaxflow) for the FlowGraph tests,
and the long-path grid strip of the CPU and CUDA grid tests (``strip``).

A *network* here is ``(n, tail, head, cap, s, t)``: a directed graph on nodes ``0..n-1`` whose
terminals are two of its nodes, the form of a DIMACS file. Oracles work on these raw arrays and
never on torchcut's layout.
"""

from __future__ import annotations

import numpy as np
import torch


def uniform(rng, n=None, m=None, cmax=20):
    """Uniform random digraph (parallel arcs, self-loops and arcs touching terminals all possible)."""
    n = int(rng.integers(3, 40)) if n is None else n
    m = int(rng.integers(0, 6 * n)) if m is None else m
    tail = rng.integers(0, n, m)
    head = rng.integers(0, n, m)
    cap = rng.integers(0, cmax + 1, m)
    s, t = rng.choice(n, 2, replace=False)
    return n, tail, head, cap, int(s), int(t)


def layered(rng, layers=None, width=None, degree=3, cmax=100):
    """Washington-RLG-like: layers of ``width`` nodes, each node wired to random nodes of the next layer."""
    layers = int(rng.integers(2, 7)) if layers is None else layers
    width = int(rng.integers(1, 8)) if width is None else width
    n = layers * width + 2
    s, t = 0, n - 1
    tails, heads = [], []
    node = lambda layer, k: 1 + layer * width + k  # noqa: E731
    for k in range(width):
        tails.append(s)
        heads.append(node(0, k))
        tails.append(node(layers - 1, k))
        heads.append(t)
    for layer in range(layers - 1):
        for k in range(width):
            for j in rng.integers(0, width, degree):
                tails.append(node(layer, k))
                heads.append(node(layer + 1, int(j)))
    tail, head = np.array(tails), np.array(heads)
    cap = rng.integers(1, cmax + 1, tail.size)
    return n, tail, head, cap, s, t


def rmfgen(rng, a=None, b=None, c1=1, c2=50):
    """RMFGEN-like: ``b`` frames of ``a x a`` grids; in-frame arcs of capacity ``c2 * a * a``, arcs between
    consecutive frames along a random permutation with capacities in ``[c1, c2]``; source = first
    node of the first frame, sink = last node of the last frame."""
    a = int(rng.integers(2, 5)) if a is None else a
    b = int(rng.integers(2, 5)) if b is None else b
    n = a * a * b
    tails, heads, caps = [], [], []
    big = c2 * a * a
    for f in range(b):
        base = f * a * a
        for y in range(a):
            for x in range(a):
                p = base + y * a + x
                for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                    yy, xx = y + dy, x + dx
                    if 0 <= yy < a and 0 <= xx < a:
                        tails.append(p)
                        heads.append(base + yy * a + xx)
                        caps.append(big)
        if f + 1 < b:
            perm = rng.permutation(a * a)
            for k in range(a * a):
                tails.append(base + k)
                heads.append(base + a * a + int(perm[k]))
                caps.append(int(rng.integers(c1, c2 + 1)))
    return n, np.array(tails), np.array(heads), np.array(caps), 0, n - 1


def scipy_flow(n, tail, head, cap, s, t) -> int:
    """Max flow by ``scipy.sparse.csgraph.maximum_flow`` (int32 capacities)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import maximum_flow

    tail, head, cap = (np.asarray(x, dtype=np.int64) for x in (tail, head, cap))
    keep = (tail != head) & (cap > 0)
    A = sp.coo_matrix((cap[keep], (tail[keep], head[keep])), shape=(n, n)).tocsr()
    A.sum_duplicates()
    return int(maximum_flow(A.astype(np.int32), int(s), int(t)).flow_value)


def pymaxflow_flow(n, tail, head, cap, s, t) -> int:
    """Max flow by PyMaxflow (Boykov-Kolmogorov) with the terminals as terminal arcs."""
    import maxflow

    tail, head, cap = (np.asarray(x, dtype=np.int64) for x in (tail, head, cap))
    g = maxflow.Graph[int]()
    g.add_nodes(n)
    src = np.zeros(n, dtype=np.int64)
    snk = np.zeros(n, dtype=np.int64)
    direct = 0
    inner_t, inner_h, inner_c = [], [], []
    for u, v, c in zip(tail.tolist(), head.tolist(), cap.tolist()):
        if u == v or v == s or u == t:
            continue
        if u == s and v == t:
            direct += c
        elif u == s:
            src[v] += c
        elif v == t:
            snk[u] += c
        else:
            inner_t.append(u)
            inner_h.append(v)
            inner_c.append(c)
    if inner_t:
        g.add_edges(np.array(inner_t), np.array(inner_h), np.array(inner_c), np.zeros(len(inner_c), dtype=np.int64))
    g.add_grid_tedges(np.arange(n), src, snk)
    return int(g.maxflow()) + direct


def terminal_network(n, u, v, cap, rcap, source, sink):
    """The network of a FlowGraph given per-node terminal capacities: nodes ``0..n-1``, s = n, t = n + 1."""
    u, v, cap, rcap, source, sink = (np.asarray(x, dtype=np.int64) for x in (u, v, cap, rcap, source, sink))
    ids = np.arange(n)
    tail = np.concatenate([u, v, np.full(n, n), ids])
    head = np.concatenate([v, u, ids, np.full(n, n + 1)])
    caps = np.concatenate([cap, rcap, source, sink])
    return n + 2, tail, head, caps, n, n + 1


def strip(shape, offsets, seed):
    """A grid strip whose augmenting paths are all about as long as it is wide: random arcs (20-59) in
    both directions, sources (200-899) in the first 4 columns and sinks in the last 4.

    Returns int64 arrays ``(source, sink, edges, reverse)`` for ``GridGraph(source, sink, edges,
    offsets, reverse=reverse)``. The worst case of Boykov-Kolmogorov's tree adoption, and a grid whose
    BFS is many tiles deep for the CUDA solver.
    """
    rng = np.random.default_rng(seed)
    edges = rng.integers(20, 60, size=(len(offsets),) + tuple(shape)).astype(np.int64)
    rev = rng.integers(20, 60, size=edges.shape).astype(np.int64)
    source = np.zeros(shape, np.int64)
    sink = np.zeros(shape, np.int64)
    source[:, :4] = rng.integers(200, 900, size=(shape[0], 4))
    sink[:, -4:] = rng.integers(200, 900, size=(shape[0], 4))
    return source, sink, edges, rev


def sphere_volume(n: int, device, lo: int = 0, hi: int | None = None):
    """Planes ``lo:hi`` (axis 0) of the synthetic n^3 volume and its seeds, made plane by plane.

    Each plane's noise comes from its own generator (seeded by the plane's index), so a slab is
    exactly the matching planes of the whole volume on the same kind of device.
    """
    hi = n if hi is None else hi
    y = torch.arange(n, dtype=torch.float32, device=device).view(-1, 1)
    x = torch.arange(n, dtype=torch.float32, device=device).view(1, -1)
    c = (n - 1) / 2
    image = torch.empty((hi - lo, n, n), dtype=torch.float32, device=device)
    for i in range(lo, hi):  # one plane at a time: no full-size temporaries
        g = torch.Generator(device=device).manual_seed(i)
        plane = (((i - c) ** 2 + (y - c) ** 2 + (x - c) ** 2) < (0.35 * n) ** 2).float()
        plane.add_(torch.randn((n, n), generator=g, device=device), alpha=0.3)
        image[i - lo] = plane
    seeds = torch.zeros((hi - lo, n, n), dtype=torch.uint8, device=device)
    m = n // 2
    for p, label in (
        ((m, m, m), 1),
        ((m + 1, m, m), 1),
        ((0, 0, 0), 2),
        ((n - 1, n - 1, n - 1), 2),
        ((0, n - 1, 0), 2),
        ((n - 1, 0, n - 1), 2),
    ):
        if lo <= p[0] < hi:
            seeds[p[0] - lo, p[1], p[2]] = label
    return image, seeds
