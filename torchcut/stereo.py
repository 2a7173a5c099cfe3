"""Vision max-flow instances of the BVZ family: alpha-expansion moves of Potts stereo.

Boykov, Veksler and Zabih (PAMI 2001) compute stereo disparities by alpha-expansion: for each label
alpha in turn, one max-flow decides which pixels switch to alpha. The UWO/Waterloo benchmark's
``BVZ-*`` instances are those graphs. This module writes graphs of the same family for any rectified
pair, so that the benchmark can be reproduced and scaled locally.

Energy over disparities ``f``::

    E(f) = sum_p D_p(f_p) + sum_{p,q 4-neighbours} w_pq [f_p != f_q]
    D_p(d) = min(|I_L(y, x) - I_R(y, x - d)|, trunc)          (grey levels 0..255, x - d clamped to 0)
    w_pq   = 2 * lam if |I_L(p) - I_L(q)| < 5 else lam        (contrast-weighted Potts, as in BVZ)

Expansion move for alpha (x_p = 1: p switches to alpha), Kolmogorov-Zabih construction. For Potts the
move is submodular and needs no auxiliary nodes. Source side = keep the old label, sink side = take
alpha:

* terminal arcs: source -> p of capacity ``E_p(1) = D_p(alpha)``, p -> sink of capacity
  ``E_p(0) = D_p(f_p)``;
* for each neighbour pair with ``A = w[f_p != f_q]``, ``B = w[f_p != alpha]``, ``C = w[alpha != f_q]``
  (and ``E(1, 1) = 0``): ``C - A`` moves to p's terminal arcs, ``C`` to q's sink arc, and the arc
  p -> q gets capacity ``B + C - A >= 0``;
* finally ``min(source, sink)`` is subtracted from both terminal capacities of every pixel (a
  constant of the move), so that the flow values are of the size of the published instances'.

Nodes are the pixels in row-major order, so :func:`torchcut.write_dimacs` writes them with the BVZ
layout (source 1, sink 2, pixel p as p + 3) and :meth:`FlowGraph.lattice_shape` recognises them.

Command line::

    python -m torchcut.stereo --left L --right R --disparities 16 --out DIR   (or: torchcut bvz ...)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ExpansionMove", "expansion_moves", "load_pair", "move_graph", "add_arguments", "main"]


@dataclass
class ExpansionMove:
    """The network of one expansion move (pairs in row-major pixel order) and the labels after it.

    Attributes
    ----------
    alpha : int
        The label index of the move.
    shape : (H, W)
    u, v : int64 arrays: pair ``k`` joins pixels ``u[k] < v[k]`` (``v = u + 1`` or ``u + W``).
    cap, rev_cap : int64 arrays: capacities ``u -> v`` and ``v -> u``.
    source, sink : int64 arrays ``[H * W]``: terminal capacities.
    labels : int array ``[H, W]``: the labelling after the move.
    flow : int: the move's max-flow value.
    """

    alpha: int
    shape: tuple
    u: np.ndarray
    v: np.ndarray
    cap: np.ndarray
    rev_cap: np.ndarray
    source: np.ndarray
    sink: np.ndarray
    labels: np.ndarray
    flow: int

    @property
    def num_nodes(self) -> int:
        return self.shape[0] * self.shape[1]

    def flowgraph(self, device=None):
        """The move as a :class:`torchcut.FlowGraph` (on ``device``)."""
        import torch

        from .graph import FlowGraph

        t = [torch.as_tensor(x, device=device) for x in (self.u, self.v, self.cap, self.rev_cap, self.source, self.sink)]
        return FlowGraph.from_edges(t[0], t[1], t[2], t[3], source=t[4], sink=t[5], num_nodes=self.num_nodes)

    def gridgraph(self, device=None):
        """The move as a 4-connected :class:`torchcut.GridGraph` ``[H, W]`` (on ``device``).

        The pairs are the horizontal ones (row-major), then the vertical ones, so the arc arrays
        reshape into the grid's per-offset maps without any index arithmetic.

        Examples
        --------
        >>> D = np.array([[[0, 9]], [[9, 0]]])
        >>> u, v, c, rc, s, t = move_graph(D, np.zeros((1, 2), int), 1, np.array([[4]]), np.zeros((0, 2), int))
        >>> m = ExpansionMove(1, (1, 2), u, v, c, rc, s, t, None, 0)
        >>> import torchcut
        >>> torchcut.maxflow(m.gridgraph()).flow_value == torchcut.maxflow(m.flowgraph()).flow_value == 8
        True
        """
        import torch

        from .grid import GridGraph, grid_offsets

        H, W = self.shape
        nh = H * (W - 1)

        def maps(x):
            out = np.zeros((2, H, W), dtype=np.int64)
            out[0, :, :-1] = x[:nh].reshape(H, W - 1)
            out[1, :-1, :] = x[nh:].reshape(H - 1, W)
            return torch.as_tensor(out, device=device)

        src = torch.as_tensor(self.source.reshape(H, W), device=device)
        snk = torch.as_tensor(self.sink.reshape(H, W), device=device)
        return GridGraph(src, snk, maps(self.cap), grid_offsets(2, 4), maps(self.rev_cap))


def _grey(img) -> np.ndarray:
    a = np.asarray(img)
    if a.ndim == 3:
        a = a[..., :3].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return np.clip(np.rint(a), 0, 255).astype(np.int64)


def load_pair(left, right, upsample: int = 1):
    """Read a rectified pair as integer grey images (0..255), optionally upsampled by pixel repetition.

    ``left``/``right``: paths or arrays. Returns two int64 arrays ``[H, W]``.

    Examples
    --------
    >>> L, R = load_pair(np.zeros((4, 5, 3)), np.ones((4, 5)), upsample=2)
    >>> L.shape, int(R.max())
    ((8, 10), 1)
    """
    out = []
    for x in (left, right):
        if isinstance(x, (str, os.PathLike)):
            from PIL import Image

            x = np.asarray(Image.open(x).convert("RGB"))
        g = _grey(x)
        if upsample > 1:
            g = np.repeat(np.repeat(g, upsample, 0), upsample, 1)
        out.append(g)
    if out[0].shape != out[1].shape:
        raise ValueError(f"right: expected the shape of left {out[0].shape}, got {out[1].shape}")
    return out[0], out[1]


def data_costs(left, right, disparities, trunc: int = 20) -> np.ndarray:
    """``D[k, y, x] = min(|L[y, x] - R[y, x - d_k]|, trunc)`` with ``x - d`` clamped to 0 (int64).

    Examples
    --------
    >>> data_costs(np.array([[0, 10, 20]]), np.array([[10, 20, 30]]), [0, 1]).tolist()
    [[[10, 10, 10]], [[10, 0, 0]]]
    """
    H, W = left.shape
    xs = np.arange(W)
    D = np.empty((len(disparities), H, W), dtype=np.int64)
    for k, d in enumerate(disparities):
        D[k] = np.minimum(np.abs(left - right[:, np.clip(xs - int(d), 0, W - 1)]), trunc)
    return D


def smoothness_weights(left, lam: int = 20, contrast: bool = True):
    """Potts weights of the horizontal ``[H, W-1]`` and vertical ``[H-1, W]`` neighbour pairs.

    Examples
    --------
    >>> h, v = smoothness_weights(np.array([[0, 1], [50, 0]]), lam=3)
    >>> h.tolist(), v.tolist()
    ([[6], [3]], [[3, 6]])
    """
    if not contrast:
        return np.full((left.shape[0], left.shape[1] - 1), lam, np.int64), np.full((left.shape[0] - 1, left.shape[1]), lam, np.int64)
    wh = np.where(np.abs(np.diff(left, axis=1)) < 5, 2 * lam, lam).astype(np.int64)
    wv = np.where(np.abs(np.diff(left, axis=0)) < 5, 2 * lam, lam).astype(np.int64)
    return wh, wv


def move_graph(D, labels, alpha: int, wh, wv):
    """Capacities of the expansion move for label index ``alpha`` from labelling ``labels``.

    Returns ``(u, v, cap, rev_cap, source, sink)`` as int64 numpy arrays (see module docstring).

    Examples
    --------
    >>> D = np.array([[[0, 9]], [[9, 0]]])          # 2 labels, a 1x2 image
    >>> u, v, c, rc, s, t = move_graph(D, np.zeros((1, 2), int), 1, np.array([[4]]), np.zeros((0, 2), int))
    >>> s.tolist(), t.tolist(), c.tolist()
    ([13, 0], [0, 13], [8])
    """
    K, H, W = D.shape
    N = H * W
    f = labels.reshape(-1)
    Df = np.take_along_axis(D.reshape(K, N), f[None], 0)[0]
    Da = D[alpha].reshape(N)
    src = Da.copy()  # cost of x_p = 1 (take alpha)
    snk = Df.copy()  # cost of x_p = 0 (keep)
    ids = np.arange(N).reshape(H, W)
    u = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    v = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    w = np.concatenate([wh.ravel(), wv.ravel()])
    fp, fq = f[u], f[v]
    A = w * (fp != fq)
    B = w * (fp != alpha)
    C = w * (fq != alpha)
    # (C - A) x_p
    ca = C - A
    np.add.at(src, u, np.maximum(ca, 0))
    np.add.at(snk, u, np.maximum(-ca, 0))
    # (D - C) x_q with D = 0: C on q's sink arc
    np.add.at(snk, v, C)
    cap = B + C - A
    if (cap < 0).any():  # cannot happen for Potts (a metric)
        raise AssertionError("non-submodular expansion move")
    low = np.minimum(src, snk)  # flow that goes straight through p: a constant of the move
    src -= low
    snk -= low
    return u, v, cap, np.zeros_like(cap), src, snk


def _solve_labels_side(u, v, cap, rcap, src, snk, N, solver: str, device=None):
    """Flow value and the sink side (x = 1) of one move."""
    if solver in ("auto", "pymaxflow"):
        try:
            import maxflow as pmf
        except ImportError:
            if solver == "pymaxflow":
                raise
        else:
            g = pmf.Graph[int](N, u.size)
            g.add_nodes(N)
            g.add_edges(u, v, cap, rcap)
            g.add_grid_tedges(np.arange(N), src, snk)
            flow = g.maxflow()
            return int(flow), g.get_grid_segments(np.arange(N))  # True = sink side
    import torch

    from .graph import FlowGraph
    from .solvers import maxflow

    t = [torch.as_tensor(x, device=device) for x in (u, v, cap, rcap, src, snk)]
    gr = FlowGraph.from_edges(t[0], t[1], t[2], t[3], source=t[4], sink=t[5], num_nodes=N)
    r = maxflow(gr)
    return int(r.flow_value), (~r.mask).cpu().numpy()


def expansion_moves(left, right, num_disparities: int = 16, *, step: int = 1, lam: int = 20, trunc: int = 20,
                    contrast: bool = True, init: int = 0, solver: str = "auto", device=None):
    """Yield the :class:`ExpansionMove` of each label of the first expansion pass, in label order.

    Each move is solved (PyMaxflow when installed, else torchcut) to update the labelling before the
    next one is built, as in the BVZ sequences.

    Parameters
    ----------
    left, right : int arrays ``[H, W]`` (see :func:`load_pair`)
    num_disparities : int
        Labels ``0, step, 2 * step, ...``.
    step : int
        Disparity step between labels (use the upsampling factor for an upsampled pair).
    lam, trunc, contrast : energy parameters (module docstring).
    init : int
        Initial label index of every pixel.
    solver : {"auto", "pymaxflow", "torchcut"}

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> L = rng.integers(0, 255, (6, 8)); R = np.roll(L, -1, axis=1)
    >>> moves = list(expansion_moves(L, R, 3, solver="torchcut"))
    >>> [m.alpha for m in moves], moves[0].flow
    ([0, 1, 2], 0)
    """
    disparities = [k * step for k in range(num_disparities)]
    D = data_costs(left, right, disparities, trunc)
    wh, wv = smoothness_weights(left, lam, contrast)
    H, W = left.shape
    labels = np.full((H, W), init, dtype=np.int64)
    for alpha in range(num_disparities):
        u, v, cap, rcap, src, snk = move_graph(D, labels, alpha, wh, wv)
        flow, take = _solve_labels_side(u, v, cap, rcap, src, snk, H * W, solver, device)
        labels = np.where(take.reshape(H, W), alpha, labels)
        yield ExpansionMove(alpha, (H, W), u, v, cap, rcap, src, snk, labels.copy(), flow)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the generator (shared by ``python -m torchcut.stereo`` and ``torchcut bvz``).

    Examples
    --------
    >>> p = argparse.ArgumentParser(); add_arguments(p)
    >>> p.parse_args(["--left", "l.png", "--right", "r.png", "--out", "d"]).disparities
    16
    """
    p.add_argument("--left", required=True, help="left image (the reference view)")
    p.add_argument("--right", required=True, help="right image")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--disparities", type=int, default=16, help="number of labels (default 16)")
    p.add_argument("--upsample", type=int, default=1, help="repeat pixels k x k; disparities scale by k")
    p.add_argument("--lam", type=int, default=20, help="Potts weight (default 20)")
    p.add_argument("--trunc", type=int, default=20, help="data cost truncation (default 20)")
    p.add_argument("--no-contrast", action="store_true", help="constant Potts weight")
    p.add_argument("--name", default="BVZ-stereo", help="file name prefix (default BVZ-stereo)")
    p.add_argument("--gz", action="store_true", help="write .max.gz")
    p.add_argument("--solver", choices=("auto", "pymaxflow", "torchcut"), default="auto",
                   help="what solves each move to update the labels")


def main(args=None) -> int:
    """Write one DIMACS file (and a ``.sol`` file) per expansion move; returns an exit code.

    Examples
    --------
    >>> main(["--help"])  # doctest: +SKIP
    """
    if args is None or isinstance(args, list):
        p = argparse.ArgumentParser(prog="python -m torchcut.stereo", description=__doc__.splitlines()[0])
        add_arguments(p)
        args = p.parse_args(args)
    from .dimacs import write_dimacs
    from .graph import FlowGraph

    if args.disparities < 2:
        raise ValueError(f"--disparities: expected at least 2, got {args.disparities}")
    if args.upsample < 1:
        raise ValueError(f"--upsample: expected at least 1, got {args.upsample}")
    left, right = load_pair(args.left, args.right, args.upsample)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    H, W = left.shape
    print(f"c {args.name}: {H}x{W} pixels, {args.disparities} labels (step {args.upsample}), {H * W + 2} nodes per move")
    t0 = time.perf_counter()
    for m in expansion_moves(left, right, args.disparities, step=args.upsample, lam=args.lam, trunc=args.trunc,
                             contrast=not args.no_contrast, solver=args.solver):
        g = FlowGraph.from_edges(m.u, m.v, m.cap, m.rev_cap, source=m.source, sink=m.sink, num_nodes=m.num_nodes)
        path = out / f"{args.name}{m.alpha}.max{'.gz' if args.gz else ''}"
        write_dimacs(g, path, comment=f"{args.name} expansion move alpha={m.alpha} ({H}x{W}, lam={args.lam}, "
                                      f"trunc={args.trunc}); source 1, sink 2, pixel p (row-major) = p + 3")
        (out / f"{args.name}{m.alpha}.sol").write_text(f"c max flow of {path.name}\ns {m.flow}\n")
        print(f"c wrote {path} (flow {m.flow})")
    print(f"c done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
