"""GCO's ``cut_general_graph`` (the gco-wrapper package, ``import gco``), solved by torchcut.

``import torchcut.compat.gco as gco`` and a script that calls ``gco.cut_general_graph(edges,
edge_weights, unary_cost, pairwise_cost, n_iter=-1, algorithm="expansion", init_labels=None)`` runs
:func:`torchcut.graph_multilabel.expansion` (or :func:`~torchcut.graph_multilabel.swap`): the same
energy ``sum_p unary_cost[p, l_p] + sum_e edge_weights[e] * pairwise_cost[l_u, l_v]``, GCO's
``[N, L]`` unary layout, int32 labels back as a numpy array.

Differences from gco-wrapper:

* Costs are not truncated to integers: integer inputs are solved exactly, float inputs are quantised
  to 2**30 levels (gco-wrapper keeps about five decimal digits of the unary and two of the table).
  ``down_weight_factor`` scales every term alike, which changes no minimiser; it is checked and
  otherwise unused.
* Bad input raises ``ValueError``: a table that is not a metric for ``algorithm="expansion"`` (GCO
  runs and may raise the energy), edges out of range, self-loops, negative weights.
* ``pairwise_cost=None`` is the Potts table ``1 - eye(L)`` (gco-wrapper needs a table).
* Edges may come in either order (gco-wrapper wants ``edges[:, 0] < edges[:, 1]``).
* Inputs may also be torch tensors, on the CPU or on CUDA (the moves are solved there).

Examples
--------
>>> import numpy as np
>>> from torchcut.compat import gco
>>> edges = np.array([[0, 1], [1, 2], [2, 3]])
>>> unary = np.array([[0, 5], [0, 5], [5, 0], [5, 0]])          # 4 nodes, 2 labels: [N, L]
>>> gco.cut_general_graph(edges, np.ones(3), unary, 1 - np.eye(2))
array([0, 0, 1, 1], dtype=int32)
"""

from __future__ import annotations

import numpy as np
import torch

from .. import graph_multilabel as _gm
from .._validate import describe

__all__ = ["cut_general_graph"]


def _as_tensor(x, name, device=None):
    """A tensor as given, or an array or list as a tensor on ``device`` (the unary's)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        return _gm._tensor(np.asarray(x), name, device)
    raise TypeError(f"{name}: expected a numpy array or torch tensor, got {describe(x)}")


def cut_general_graph(
    edges,
    edge_weights,
    unary_cost,
    pairwise_cost=None,
    n_iter=-1,
    algorithm="expansion",
    init_labels=None,
    down_weight_factor=None,
):
    """Multi-label graph cut on a general graph, as ``gco.cut_general_graph`` (module docstring).

    Parameters
    ----------
    edges : integer array ``[E, 2]``
        Node pairs, 0-based.
    edge_weights : array ``[E]``
        Non-negative weight of each edge.
    unary_cost : array ``[N, L]``
        Cost of each label at each node.
    pairwise_cost : array ``[L, L]``, optional
        Label compatibility: a metric for "expansion", a semimetric for "swap"; default Potts.
    n_iter : int
        Cycles over all labels (label pairs for "swap"); -1 (default): until no move lowers the energy.
    algorithm : {"expansion", "swap"}
    init_labels : integer array ``[N]``, optional
        Starting labels; default 0 everywhere, as GCO.
    down_weight_factor : float, optional
        Accepted for compatibility (a positive number); does not change the result.

    Returns
    -------
    numpy.ndarray
        int32 labels ``[N]``.

    Examples
    --------
    >>> import numpy as np
    >>> edges = np.array([[i, i + 1] for i in range(4)])
    >>> unary = np.array([[0, 3], [0, 3], [2, 0], [0, 3], [0, 3]], dtype=np.float64)
    >>> cut_general_graph(edges, np.full(4, 2.0), unary, 1 - np.eye(2), algorithm="swap").tolist()
    [0, 0, 0, 0, 0]
    """
    if algorithm not in ("expansion", "swap"):
        raise ValueError(f"algorithm: expected 'expansion' or 'swap', got {algorithm!r}")
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < -1:
        raise ValueError(f"n_iter: expected -1 (until convergence) or a non-negative int, got {n_iter!r}")
    if down_weight_factor is not None and not (
        isinstance(down_weight_factor, (int, float, np.number))
        and np.isfinite(down_weight_factor)
        and down_weight_factor > 0
    ):
        raise ValueError(f"down_weight_factor: expected a positive finite number or None, got {down_weight_factor!r}")
    U = _as_tensor(unary_cost, "unary_cost")
    if U.dim() != 2:
        raise ValueError(f"unary_cost: expected shape [N, L] (sites by labels), got {tuple(U.shape)}")
    L = U.shape[1]
    dev = U.device
    V = (
        (1 - torch.eye(L, dtype=torch.int64, device=dev))
        if pairwise_cost is None
        else _as_tensor(pairwise_cost, "pairwise_cost", dev)
    )
    if tuple(V.shape) != (L, L):
        raise ValueError(
            f"pairwise_cost: expected shape [L, L] = ({L}, {L}) for the {L} labels of unary_cost, got {tuple(V.shape)}"
        )
    init = 0 if init_labels is None else _as_tensor(init_labels, "init_labels", dev)
    run = _gm.expansion if algorithm == "expansion" else _gm.swap
    try:
        labels = run(
            U.T,
            V,
            _as_tensor(edges, "edges", dev),
            _as_tensor(edge_weights, "edge_weights", dev),
            init=init,
            max_iter=None if n_iter == -1 else int(n_iter),
        )
    except ValueError as exc:  # name GCO's arguments rather than torchcut's
        msg = str(exc)
        for ours, theirs in (
            ("unary: ", "unary_cost: "),
            ("pairwise: ", "pairwise_cost: "),
            ("init: ", "init_labels: "),
        ):
            if msg.startswith(ours):
                msg = theirs + msg[len(ours) :]
        msg = msg.replace("unary is [L, N] with N", "unary_cost is [N, L] with N").replace(
            "; GCO's [N, L] layout is unary.T", ""
        )
        raise ValueError(msg) from None
    return labels.cpu().numpy().astype(np.int32)
