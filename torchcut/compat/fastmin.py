"""PyMaxflow's ``fastmin``: alpha-expansion and alpha-beta swap on grids, solved by torchcut.

``aexpansion_grid`` runs :func:`torchcut.multilabel.expansion` (it needs that module);
``abswap_grid`` runs alpha-beta swap moves here, each one a cut on a :class:`torchcut.GridGraph` of
the grid's shape. Both take PyMaxflow's layout: ``unary`` of shape ``(S1, ..., Sn, L)`` (n = 1, 2
or 3), ``binary`` of shape ``(L, L)``, von Neumann neighbourhood (4-connected in 2D, 6 in 3D), and
the energy ``sum_p unary[p, l_p] + sum over neighbour pairs (p, p + e_axis) of
binary[l_{p + e}, l_p]`` (PyMaxflow's ``energy_of_grid_labeling``).

Difference from PyMaxflow: a ``labels`` array passed in is read, never modified (PyMaxflow writes
the result into it); use the returned labels.

Examples
--------
>>> import numpy as np
>>> from torchcut.compat.fastmin import abswap_grid
>>> unary = np.array([[[0, 5], [4, 1], [0, 5]]])        # one row of 3 pixels, 2 labels
>>> binary = np.array([[0, 3], [3, 0]])
>>> abswap_grid(unary, binary).tolist()                   # the middle pixel gives in to its neighbours
[[0, 0, 0]]
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import torch

from ..grid import GridGraph
from ..solvers import maxflow as _solve

__all__ = ["aexpansion_grid", "abswap_grid", "energy_of_grid_labeling"]


def _inputs(unary, binary, labels):
    """Checked tensors: unary ``[*S, L]``, binary ``[L, L]``, labels ``[*S]`` int64, and the output dtype."""
    was_tensor = isinstance(unary, torch.Tensor)
    u = unary if was_tensor else torch.from_numpy(np.array(unary))
    if u.dim() == 0:
        raise ValueError("unary: expected an array of shape (S1, ..., Sn, L), got a scalar")
    if u.is_complex() or u.dtype == torch.bool:
        raise TypeError(f"unary: expected real numbers, got dtype {u.dtype}")
    L = u.shape[-1]
    if L == 0:
        raise ValueError(f"unary: expected at least one label (last axis), got shape {tuple(u.shape)}")
    if not 1 <= u.dim() - 1 <= 3:
        raise ValueError(
            f"unary: expected a 1-D, 2-D or 3-D grid of shape (S1, ..., Sn, L), got shape {tuple(u.shape)}"
        )
    b = binary if isinstance(binary, torch.Tensor) else torch.from_numpy(np.array(binary))
    if tuple(b.shape) != (L, L):
        raise ValueError(f"binary: expected shape ({L}, {L}) (num_labels from unary), got {tuple(b.shape)}")
    floating = u.is_floating_point() or b.is_floating_point()
    dt = torch.float64 if floating else torch.int64
    u, b = u.to(dt), b.to(u.device, dt)
    for name, t in (("unary", u), ("binary", b)):
        if floating and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: expected finite values")
    if labels is None:
        lab = u.argmin(-1)
        out_dtype = np.int8 if L <= 127 else np.int64
    else:
        lab_in = labels if isinstance(labels, torch.Tensor) else torch.from_numpy(np.array(labels))
        if lab_in.is_floating_point() or lab_in.dtype == torch.bool:
            raise TypeError(f"labels: expected integer labels, got dtype {lab_in.dtype}")
        if tuple(lab_in.shape) != tuple(u.shape[:-1]):
            raise ValueError(
                f"labels: expected shape {tuple(u.shape[:-1])} (that of unary without its last axis), "
                f"got {tuple(lab_in.shape)}"
            )
        if lab_in.numel() and (int(lab_in.min()) < 0 or int(lab_in.max()) >= L):
            raise ValueError(
                f"labels: expected values in [0, {L}) (num_labels={L}), got range "
                f"[{int(lab_in.min())}, {int(lab_in.max())}]"
            )
        lab = lab_in.to(u.device, torch.int64).clone()
        out_dtype = lab_in.dtype if isinstance(labels, torch.Tensor) else np.asarray(labels).dtype
    return u, b, lab, was_tensor, out_dtype


def _output(lab: torch.Tensor, was_tensor: bool, out_dtype):
    if was_tensor:
        return lab.to(out_dtype) if isinstance(out_dtype, torch.dtype) else lab
    return lab.cpu().numpy().astype(out_dtype)


def _max_cycles(max_cycles):
    if max_cycles is None:
        return itertools.count()
    if isinstance(max_cycles, bool) or not isinstance(max_cycles, (int, np.integer)) or max_cycles < 0:
        raise ValueError(f"max_cycles: expected None or a non-negative integer, got {max_cycles!r}")
    return range(int(max_cycles))


def _pairs(nd: int):
    """Index tuples (earlier, later) of the neighbour pairs along each axis of an nd grid."""
    for a in range(nd):
        lo = tuple(slice(None, -1) if b == a else slice(None) for b in range(nd))
        hi = tuple(slice(1, None) if b == a else slice(None) for b in range(nd))
        yield a, lo, hi


def energy_of_grid_labeling(unary, binary, labels):
    """PyMaxflow's grid energy of a labelling (von Neumann neighbours, each pair once).

    ``sum_p unary[p, labels[p]] + sum_axis sum_p binary[labels[p + e_axis], labels[p]]``.

    Examples
    --------
    >>> import numpy as np
    >>> energy_of_grid_labeling(np.array([[[0, 5], [4, 1]]]), np.array([[0, 3], [2, 0]]), np.array([[0, 1]]))
    3
    """
    u, b, lab, _, _ = _inputs(unary, binary, labels)
    return _energy(u, b, lab).item()


def _energy(u, b, lab):
    e = u.gather(-1, lab.unsqueeze(-1)).sum()
    for _, lo, hi in _pairs(lab.dim()):
        e = e + b[lab[hi], lab[lo]].sum()
    return e


def _swap_move(u, b, lab, alpha: int, beta: int):
    """The best labelling reachable from ``lab`` by one alpha-beta swap (one cut)."""
    nd = lab.dim()
    inset = (lab == alpha) | (lab == beta)
    cost0 = torch.where(inset, u[..., alpha], 0)  # x_p = 0: alpha (source side)
    cost1 = torch.where(inset, u[..., beta], 0)  # x_p = 1: beta (sink side)
    A, B, C, D = b[alpha, alpha], b[beta, alpha], b[alpha, beta], b[beta, beta]  # V(x_p, x_q) = binary[l_q, l_p]
    edges = []
    for _a, lo, hi in _pairs(nd):
        p_in, q_in = inset[lo], inset[hi]
        lp, lq = lab[lo], lab[hi]
        both = p_in & q_in
        # one end in the set: the pair term is a unary term of that end
        c0, c1 = cost0[lo], cost1[lo]
        c0 += torch.where(p_in & ~q_in, b[lq, alpha], 0)
        c1 += torch.where(p_in & ~q_in, b[lq, beta], 0)
        c0, c1 = cost0[hi], cost1[hi]
        c0 += torch.where(q_in & ~p_in, b[alpha, lp], 0)
        c1 += torch.where(q_in & ~p_in, b[beta, lp], 0)
        # both ends: A + (C - A) x_p + (D - C) x_q + (B + C - A - D) (1 - x_p) x_q
        cost1[lo] += torch.where(both, C - A, 0)
        cost1[hi] += torch.where(both, D - C, 0)
        w = torch.zeros_like(cost0)
        w[lo] = torch.where(both, B + C - A - D, 0)
        edges.append(w)
    diff = cost1 - cost0
    source = diff.clamp(min=0)  # paid when x_p = 1
    sink = (-diff).clamp(min=0)  # paid when x_p = 0
    offsets = [tuple(1 if b_ == a else 0 for b_ in range(nd)) for a in range(nd)]
    if nd == 1:  # one row of a 2-D grid
        source, sink = source.unsqueeze(0), sink.unsqueeze(0)
        edges = [e.unsqueeze(0) for e in edges]
        offsets = [(0, 1)]
    zero = torch.zeros_like(edges[0])
    g = GridGraph(source, sink, torch.stack(edges), offsets, torch.stack([zero] * len(edges)))
    src_side = _solve(g).mask.reshape(lab.shape)
    return torch.where(inset, torch.where(src_side, alpha, beta), lab)


def abswap_grid(unary, binary, max_cycles=None, labels=None):
    """Minimise a grid energy by alpha-beta swap moves, as PyMaxflow's ``fastmin.abswap_grid``.

    Parameters
    ----------
    unary : array ``(S1, ..., Sn, L)``, n = 1, 2 or 3
        ``unary[p, l]``: cost of label ``l`` at ``p``. A torch tensor keeps its device.
    binary : array ``(L, L)``
        ``binary[l1, l2]``: cost of neighbours labelled ``l1`` (the later one along the axis) and
        ``l2``. Every pair of labels must satisfy ``binary[a, b] + binary[b, a] >= binary[a, a] +
        binary[b, b]`` (each move is then a minimum cut).
    max_cycles : int, optional
        Cycles over all label pairs; default: until a cycle improves nothing.
    labels : array ``(S1, ..., Sn)``, optional
        Initial labelling (default: the argmin of ``unary``); not modified.

    Returns
    -------
    labels : numpy array (a tensor when ``unary`` is one)
        A labelling no single alpha-beta swap can improve (when the cycles ran to convergence).

    Examples
    --------
    >>> import numpy as np
    >>> unary = np.full((2, 2, 3), 2.0); unary[..., 0] = [[0, 9], [9, 9]]; unary[..., 1] = 1
    >>> abswap_grid(unary, np.ones((3, 3)) - np.eye(3)).tolist()
    [[1, 1], [1, 1]]
    """
    u, b, lab, was_tensor, out_dtype = _inputs(unary, binary, labels)
    L = u.shape[-1]
    for x, y in itertools.combinations(range(L), 2):
        if b[x, y] + b[y, x] < b[x, x] + b[y, y]:
            raise ValueError(
                f"binary: a swap of labels {x} and {y} is not a cut: expected binary[{x}, {y}] + "
                f"binary[{y}, {x}] >= binary[{x}, {x}] + binary[{y}, {y}], got "
                f"{(b[x, y] + b[y, x]).item()} < {(b[x, x] + b[y, y]).item()}"
            )
    best = _energy(u, b, lab)
    for _ in _max_cycles(max_cycles):
        improved = False
        for alpha, beta in itertools.combinations(range(L), 2):
            cand = _swap_move(u, b, lab, alpha, beta)
            e = _energy(u, b, cand)
            if e < best:  # keep a move only when it lowers the exact energy
                lab, best, improved = cand, e, True
        if not improved:
            break
    return _output(lab, was_tensor, out_dtype)


def aexpansion_grid(unary, binary, max_cycles=None, labels=None):
    """Minimise a grid energy by alpha-expansion, as PyMaxflow's ``fastmin.aexpansion_grid``.

    Runs :func:`torchcut.multilabel.expansion` with ``unary`` moved to ``[L, *S]``, ``pairwise =
    binary`` (which must be a metric), the von Neumann neighbourhood (``connectivity`` 4 in 2D, 6 in
    3D), ``init = labels`` and ``max_cycles``.

    Parameters
    ----------
    unary : array ``(S1, ..., Sn, L)``
    binary : array ``(L, L)``, a metric
    max_cycles : int, optional
    labels : array ``(S1, ..., Sn)``, optional
        Initial labelling (default: the argmin of ``unary``); not modified.

    Returns
    -------
    labels : numpy array (a tensor when ``unary`` is one)

    Raises
    ------
    ImportError
        When ``torchcut.multilabel`` (alpha-expansion) is not available in this installation.

    Examples
    --------
    >>> import numpy as np
    >>> unary = np.zeros((2, 2, 2)); unary[..., 1] = [[-1, 1], [1, 1]]
    >>> aexpansion_grid(unary, np.array([[0, 1], [1, 0]])).tolist()  # doctest: +SKIP
    [[0, 0], [0, 0]]
    """
    try:
        multilabel = importlib.import_module("torchcut.multilabel")
        expansion = multilabel.expansion
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            "aexpansion_grid: needs torchcut.multilabel.expansion (alpha-expansion), which this "
            f"installation lacks ({exc})"
        ) from exc
    u, b, lab, was_tensor, out_dtype = _inputs(unary, binary, labels)
    nd = lab.dim()
    if nd == 1:
        u, lab = u.unsqueeze(0), lab.unsqueeze(0)
    conn = 6 if lab.dim() == 3 else 4
    cycles = None if max_cycles is None else len(_max_cycles(max_cycles))
    out = expansion(
        u.movedim(-1, 0).contiguous(), b, connectivity=conn, init=lab if labels is not None else None, max_iter=cycles
    )
    out = torch.as_tensor(out).to(torch.int64)
    if nd == 1:
        out = out.reshape(-1)
    return _output(out, was_tensor, out_dtype)
