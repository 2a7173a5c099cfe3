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

:func:`disparity` solves the whole multi-label energy (all expansion cycles, on the input's device)
with :func:`torchcut.expansion`: a colour Birchfield-Tomasi data term and a contrast-sensitive Potts
(or truncated linear) smoothness term, in tensor ops.

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

from ._deprecate import renamed_keywords

# The command-line plumbing (add_arguments, main) is not part of the API.
__all__ = [
    "ExpansionMove",
    "expansion_moves",
    "load_pair",
    "move_graph",
    "disparity",
    "bt_costs",
    "contrast_weights",
    "occlusion_mask",
    "bad_pixel_rates",
]


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

    Examples
    --------
    >>> D = np.array([[[0, 9]], [[9, 0]]])  # two labels, one row of two pixels
    >>> u, v, c, rc, s, t = move_graph(D, np.zeros((1, 2), int), 1, np.array([[4]]), np.zeros((0, 2), int))
    >>> m = ExpansionMove(1, (1, 2), u, v, c, rc, s, t, None, 0)
    >>> m.num_nodes, m.u.tolist(), m.v.tolist()
    (2, [0], [1])
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
        """Pixels of the move's grid (one node each)."""
        return self.shape[0] * self.shape[1]

    def flowgraph(self, device=None):
        """The move as a :class:`torchcut.FlowGraph` (on ``device``)."""
        import torch

        from .graph import FlowGraph

        t = [
            torch.as_tensor(x, device=device) for x in (self.u, self.v, self.cap, self.rev_cap, self.source, self.sink)
        ]
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
        return np.full((left.shape[0], left.shape[1] - 1), lam, np.int64), np.full(
            (left.shape[0] - 1, left.shape[1]), lam, np.int64
        )
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


def _solve_labels_side(u, v, cap, rcap, src, snk, N, backend: str, device=None):
    """Flow value and the sink side (x = 1) of one move."""
    if backend in ("auto", "pymaxflow"):
        try:
            import maxflow as pmf
        except ImportError:
            if backend == "pymaxflow":
                raise ImportError(
                    "backend: 'pymaxflow' needs PyMaxflow (pip install PyMaxflow); pass "
                    "backend='torchcut' to solve the moves with torchcut"
                ) from None
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
    r = maxflow(gr, backend="auto" if backend in ("auto", "torchcut") else backend)
    return int(r.flow_value), (~r.mask).cpu().numpy()


_MOVE_BACKENDS = ("auto", "pymaxflow", "torchcut", "reference", "cpu", "cuda")


@renamed_keywords(solver="backend")
def expansion_moves(
    left,
    right,
    num_disparities: int = 16,
    *,
    step: int = 1,
    lam: float = 20.0,
    trunc: int = 20,
    contrast: bool = True,
    init: int = 0,
    backend: str = "auto",
    device=None,
):
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
    lam : float
        Potts weight (default 20, the weight of the BVZ instances; a whole number, since the
        instances' capacities are integers).
    trunc, contrast : energy parameters (module docstring).
    init : int
        Initial label index of every pixel.
    backend : {"auto", "pymaxflow", "torchcut", "reference", "cpu", "cuda"}
        What solves each move to update the labels: "auto" PyMaxflow when it is installed (the
        solver of the published sequences), else torchcut; "torchcut" torchcut's own choice; the
        others a :func:`torchcut.maxflow` backend. Formerly ``solver`` (still accepted, with a
        ``FutureWarning``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> L = rng.integers(0, 255, (6, 8)); R = np.roll(L, -1, axis=1)
    >>> moves = list(expansion_moves(L, R, 3, backend="torchcut"))
    >>> [m.alpha for m in moves], moves[0].flow
    ([0, 1, 2], 0)
    """
    if backend not in _MOVE_BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, _MOVE_BACKENDS))}, got {backend!r}")
    if (
        isinstance(lam, bool)
        or not isinstance(lam, (int, float, np.integer, np.floating))
        or not (lam >= 0 and float(lam).is_integer())
    ):
        raise ValueError(f"lam: expected a non-negative whole number (the capacities are integers), got {lam!r}")
    lam = int(lam)
    disparities = [k * step for k in range(num_disparities)]
    D = data_costs(left, right, disparities, trunc)
    wh, wv = smoothness_weights(left, lam, contrast)
    H, W = left.shape
    labels = np.full((H, W), init, dtype=np.int64)
    for alpha in range(num_disparities):
        u, v, cap, rcap, src, snk = move_graph(D, labels, alpha, wh, wv)
        flow, take = _solve_labels_side(u, v, cap, rcap, src, snk, H * W, backend, device)
        labels = np.where(take.reshape(H, W), alpha, labels)
        yield ExpansionMove(alpha, (H, W), u, v, cap, rcap, src, snk, labels.copy(), flow)


# ---------------------------------------------------------------------------------------------- disparity()
#: Defaults of :func:`disparity`, tuned on Tsukuba (benchmarks/results/multilabel.md).
DISPARITY_DEFAULTS = {"trunc": 40, "lam": 15, "contrast_threshold": 8, "contrast_ratio": 3}


def _view(x, name):
    """A float32 ``[C, H, W]`` tensor of a grey or colour view (``[H, W]``, ``[H, W, C]``, ``[C, H, W]``)."""
    import torch

    from .energy import _as_image_tensor

    t = _as_image_tensor(x, name)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    elif t.dim() == 3 and t.shape[-1] in (1, 3, 4):
        t = t.movedim(-1, 0)
    elif not (t.dim() == 3 and t.shape[0] in (1, 3, 4)):
        raise ValueError(
            f"{name}: expected an image [H, W], [H, W, C] or [C, H, W] with C in (1, 3, 4), got shape {tuple(t.shape)}"
        )
    t = t[:3].float()
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: expected finite pixel values, got NaN or infinite value(s)")
    return t


def _bt_range(x):
    """Per pixel, the min and max of the view interpolated half a pixel left and right (along x)."""
    import torch

    left = torch.cat([x[..., :1], x[..., :-1]], -1)
    right = torch.cat([x[..., 1:], x[..., -1:]], -1)
    a, b = (x + left) / 2, (x + right) / 2
    return torch.minimum(torch.minimum(a, b), x), torch.maximum(torch.maximum(a, b), x)


def bt_costs(left, right, num_disparities: int):
    """Birchfield-Tomasi dissimilarity of every left pixel and disparity, summed over colour channels.

    ``cost[d, y, x] = sum_c min(dLR, dRL)`` for the left pixel x and the right pixel ``x - d`` (clamped
    to 0), each half measuring how far one pixel's value lies from the other view's values
    interpolated half a pixel either side (Birchfield and Tomasi, PAMI 1998). Grey views are counted
    three times, so that costs are on the scale of colour ones. Intensities are taken on a 0..255 scale.

    Parameters
    ----------
    left, right : tensor, array or PIL image
        ``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``, the same size; the rectified left and right views.
    num_disparities : int
        Disparities ``0 .. num_disparities - 1``.

    Returns
    -------
    torch.Tensor
        float32 ``[num_disparities, H, W]`` on the left view's device.

    Examples
    --------
    >>> import torch
    >>> L = torch.tensor([[0., 0., 90., 90.]]); R = torch.tensor([[0., 90., 90., 90.]])
    >>> bt_costs(L, R, 2)[:, 0, 2].tolist()      # the edge is one pixel further left in the right view
    [0.0, 0.0]
    """
    import torch

    L = _view(left, "left")
    R = _view(right, "right").to(L.device)
    if tuple(L.shape[1:]) != tuple(R.shape[1:]) or L.shape[0] != R.shape[0]:
        raise ValueError(f"right: expected the shape of left {tuple(L.shape)} (channels first), got {tuple(R.shape)}")
    if isinstance(num_disparities, bool) or not isinstance(num_disparities, (int, np.integer)) or num_disparities < 2:
        raise ValueError(f"num_disparities: expected an int >= 2, got {num_disparities!r}")
    if num_disparities > L.shape[-1]:
        raise ValueError(f"num_disparities: expected at most the image width {L.shape[-1]}, got {num_disparities}")
    W = L.shape[-1]
    Lmin, Lmax = _bt_range(L)
    Rmin, Rmax = _bt_range(R)
    xs = torch.arange(W, device=L.device)
    out = []
    for d in range(int(num_disparities)):
        idx = (xs - d).clamp(min=0)
        r, rmin, rmax = R[..., idx], Rmin[..., idx], Rmax[..., idx]
        d_lr = torch.maximum(L - rmax, rmin - L).clamp(min=0)
        d_rl = torch.maximum(r - Lmax, Lmin - r).clamp(min=0)
        out.append(torch.minimum(d_lr, d_rl).sum(0))
    return torch.stack(out) * (3.0 / L.shape[0])


def contrast_weights(image, lam: float, threshold: float = 8, ratio: float = 3):
    """Contrast-sensitive Potts weights of the 4-neighbour edges, as BVZ: ``ratio * lam`` across a
    small change, ``lam`` across an edge.

    The change is the largest absolute difference over the colour channels; "small" is below
    ``threshold``. Weights are rounded to integers.

    Returns
    -------
    torch.Tensor
        int64 ``[2, H, W]``: the edge from p to its right neighbour, then to the one below (the order
        of ``torchcut.grid_offsets(2, 4)``); 0 where the neighbour leaves the image.

    Examples
    --------
    >>> contrast_weights(np.array([[0, 1, 50]]), lam=2).tolist()
    [[[6, 2, 0]], [[0, 0, 0]]]
    """
    import torch

    x = _view(image, "image")
    _, H, W = x.shape
    out = torch.zeros((2, H, W), dtype=torch.float32, device=x.device)
    dh = (x[:, :, 1:] - x[:, :, :-1]).abs().amax(0)
    dv = (x[:, 1:] - x[:, :-1]).abs().amax(0)
    out[0, :, :-1] = torch.where(dh < threshold, ratio * lam, lam)
    out[1, :-1] = torch.where(dv < threshold, ratio * lam, lam)
    return out.round().to(torch.int64)


@renamed_keywords(return_info="return_result")
def disparity(
    left,
    right,
    num_disparities: int,
    *,
    lam=None,
    trunc=None,
    contrast_threshold=None,
    contrast_ratio=None,
    smoothness: str = "potts",
    linear_trunc: int = 2,
    schedule: str = "auto",
    backend: str = "auto",
    return_result: bool = False,
):
    """Disparity map of the left view by alpha-expansion on a truncated Birchfield-Tomasi energy.

    ``E(d) = sum_p min(BT_p(d_p), trunc) + sum_pq w_pq V(d_p, d_q)``: :func:`bt_costs` rounded to
    integers, :func:`contrast_weights` (``lam``, ``contrast_threshold``, ``contrast_ratio``), and
    ``V`` Potts ``[d_p != d_q]`` or truncated linear ``min(|d_p - d_q|, linear_trunc)``. The energy is
    an integer one, minimised exactly move by move by :func:`torchcut.expansion` (4-connected) on the
    views' device. No cost aggregation, no post-processing. Defaults (``DISPARITY_DEFAULTS``) were
    tuned on Tsukuba; they give 1.85% bad pixels there (``examples/stereo_tsukuba.py``).

    Parameters
    ----------
    left, right : tensor, array or PIL image
        Rectified views, ``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``, intensities on a 0..255 scale.
    num_disparities : int
        Disparities ``0 .. num_disparities - 1`` (the right view's match of left pixel x is x - d).
    lam, trunc, contrast_threshold, contrast_ratio : number, optional
        Energy parameters; ``None`` takes ``DISPARITY_DEFAULTS`` (``lam`` 15, ``trunc`` 40: the values
        with the fewest bad pixels on Tsukuba, ``benchmarks/results/multilabel.md``; ``lam`` weighs
        integer grey-level costs here, not the colour histograms of ``segment``, so its scale differs).
    smoothness : {"potts", "linear"}
    linear_trunc : int
        Truncation of the linear smoothness.
    schedule, backend : str
        As for :func:`torchcut.expansion`.
    return_result : bool
        Also return :func:`torchcut.expansion`'s dict of energies and counts (formerly
        ``return_info``, still accepted with a ``FutureWarning``).

    Returns
    -------
    torch.Tensor
        int64 ``[H, W]`` disparities on the left view's device.

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> right = torch.rand(20, 40, generator=g) * 255
    >>> left = torch.roll(right, 3, dims=1)          # everything 3 pixels to the right in the left view
    >>> d = disparity(left, right, 6)
    >>> float((d[:, 8:] == 3).float().mean()) > 0.95
    True
    """
    import torch

    from .multilabel import expansion

    p = dict(DISPARITY_DEFAULTS)
    for k, v in (
        ("lam", lam),
        ("trunc", trunc),
        ("contrast_threshold", contrast_threshold),
        ("contrast_ratio", contrast_ratio),
    ):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not v >= 0:
                raise ValueError(f"{k}: expected a non-negative number, got {v!r}")
            p[k] = v
    if smoothness not in ("potts", "linear"):
        raise ValueError(f"smoothness: expected 'potts' or 'linear', got {smoothness!r}")
    cost = bt_costs(left, right, num_disparities)
    U = cost.clamp(max=float(p["trunc"])).round().to(torch.int64)
    w = contrast_weights(left, p["lam"], p["contrast_threshold"], p["contrast_ratio"]).to(U.device)
    labels = torch.arange(int(num_disparities), device=U.device)
    diff = (labels[:, None] - labels[None, :]).abs()
    if smoothness == "potts":
        V = (diff > 0).to(torch.int64)
    else:
        if isinstance(linear_trunc, bool) or not isinstance(linear_trunc, (int, np.integer)) or linear_trunc < 1:
            raise ValueError(f"linear_trunc: expected a positive int, got {linear_trunc!r}")
        V = diff.clamp(max=int(linear_trunc))
    return expansion(U, V, weights=w, connectivity=4, schedule=schedule, backend=backend, return_result=return_result)


def occlusion_mask(truth):
    """Left pixels whose match in the right view is hidden, according to true disparities.

    Pixel ``(y, x)`` with true disparity ``d`` is occluded when ``x - d`` leaves the image, or when some
    known pixel of the same row with a larger true disparity (a nearer surface) lands on the same
    right pixel. Unknown pixels (true disparity 0 or NaN) are never occluded.

    Parameters
    ----------
    truth : tensor or array ``[H, W]``
        True disparities in pixels (rounded to integers for the test).

    Returns
    -------
    torch.Tensor
        bool ``[H, W]``.

    Examples
    --------
    >>> occlusion_mask(np.array([[1, 1, 1, 3, 3]], dtype=np.float32)).tolist()   # x=0 leaves the image;
    [[True, True, True, False, False]]

    (x=1 and x=2 land where the nearer x=3 and x=4 do.)
    """
    import torch

    from .multilabel import _tensor

    t = _tensor(np.asarray(truth, dtype=np.float32) if not isinstance(truth, torch.Tensor) else truth, "truth")
    if t.dim() != 2:
        raise ValueError(f"truth: expected a disparity map [H, W], got shape {tuple(t.shape)}")
    known = torch.nan_to_num(t.float(), nan=0.0) > 0
    d = torch.nan_to_num(t.float(), nan=0.0).round().to(torch.int64)
    H, W = d.shape
    xr = torch.arange(W, device=d.device) - d
    inside = known & (xr >= 0)
    flat = (torch.arange(H, device=d.device)[:, None] * W + xr.clamp(min=0)).reshape(-1)
    nearest = torch.full((H * W,), -1, dtype=torch.int64, device=d.device)
    nearest.scatter_reduce_(0, flat[inside.reshape(-1)], d.reshape(-1)[inside.reshape(-1)], "amax")
    hidden = nearest[flat].view(H, W) > d
    return known & (~inside | hidden)


def bad_pixel_rates(disparity_map, truth, *, border: int = 18, threshold: float = 1.0) -> dict:
    """Percent of bad pixels (``|d - truth| > threshold``), over non-occluded and over all known pixels.

    Known pixels have a true disparity > 0; ``border`` pixels along every side are excluded; occlusion
    follows :func:`occlusion_mask`.

    Returns
    -------
    dict
        ``{"nonocc": percent, "all": percent, "pixels_nonocc": n, "pixels_all": n}``.

    Examples
    --------
    >>> truth = np.full((5, 6), 2.0); d = np.full((5, 6), 2); d[2, 2] = 5
    >>> r = bad_pixel_rates(d, truth, border=1)     # column 1 is occluded: x - 2 leaves the image
    >>> round(r["nonocc"], 2), round(r["all"], 2), r["pixels_nonocc"], r["pixels_all"]
    (11.11, 8.33, 9, 12)
    """
    import torch

    t = torch.as_tensor(np.asarray(truth.cpu() if isinstance(truth, torch.Tensor) else truth, dtype=np.float32))
    d = torch.as_tensor(np.asarray(disparity_map.cpu() if isinstance(disparity_map, torch.Tensor) else disparity_map))
    if tuple(d.shape) != tuple(t.shape):
        raise ValueError(f"disparity_map: expected the truth's shape {tuple(t.shape)}, got {tuple(d.shape)}")
    H, W = t.shape
    if not (isinstance(border, (int, np.integer)) and 0 <= border and 2 * border < min(H, W)):
        raise ValueError(f"border: expected an int in [0, {(min(H, W) - 1) // 2}], got {border!r}")
    inner = torch.zeros((H, W), dtype=torch.bool)
    inner[border : H - border, border : W - border] = True
    known = (torch.nan_to_num(t, nan=0.0) > 0) & inner
    bad = (d.to(torch.float32) - t).abs() > threshold
    nonocc = known & ~occlusion_mask(t)
    return {
        "nonocc": 100.0 * float(bad[nonocc].double().mean()),
        "all": 100.0 * float(bad[known].double().mean()),
        "pixels_nonocc": int(nonocc.sum()),
        "pixels_all": int(known.sum()),
    }


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
    p.add_argument(
        "--backend",
        choices=_MOVE_BACKENDS,
        default="auto",
        help="what solves each move to update the labels (default auto: PyMaxflow if installed)",
    )
    p.add_argument("--solver", choices=_MOVE_BACKENDS, default=None, help=argparse.SUPPRESS)  # deprecated name


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

    if getattr(args, "solver", None) is not None:
        print("warning: --solver is deprecated; use --backend (same values)", file=sys.stderr)
        args.backend = args.solver
    if args.disparities < 2:
        raise ValueError(f"--disparities: expected at least 2, got {args.disparities}")
    if args.upsample < 1:
        raise ValueError(f"--upsample: expected at least 1, got {args.upsample}")
    left, right = load_pair(args.left, args.right, args.upsample)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    H, W = left.shape
    print(
        f"c {args.name}: {H}x{W} pixels, {args.disparities} labels (step {args.upsample}), {H * W + 2} nodes per move"
    )
    t0 = time.perf_counter()
    for m in expansion_moves(
        left,
        right,
        args.disparities,
        step=args.upsample,
        lam=args.lam,
        trunc=args.trunc,
        contrast=not args.no_contrast,
        backend=args.backend,
    ):
        g = FlowGraph.from_edges(m.u, m.v, m.cap, m.rev_cap, source=m.source, sink=m.sink, num_nodes=m.num_nodes)
        path = out / f"{args.name}{m.alpha}.max{'.gz' if args.gz else ''}"
        write_dimacs(
            g,
            path,
            comment=f"{args.name} expansion move alpha={m.alpha} ({H}x{W}, lam={args.lam}, "
            f"trunc={args.trunc}); source 1, sink 2, pixel p (row-major) = p + 3",
        )
        (out / f"{args.name}{m.alpha}.sol").write_text(f"c max flow of {path.name}\ns {m.flow}\n")
        print(f"c wrote {path} (flow {m.flow})")
    print(f"c done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
