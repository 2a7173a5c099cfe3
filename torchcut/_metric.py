"""Checks of multi-label energies shared by the grid and the general-graph solvers (:mod:`torchcut.multilabel`,
:mod:`torchcut.graph_multilabel`): the numeric input tensors and the metric test of a pairwise table."""

from __future__ import annotations

import numpy as np
import torch

from ._validate import check_has_data, describe

__all__ = ["check_metric"]


def _tensor(x, name: str, device=None, finite: bool = True, empty_ok: bool = False) -> torch.Tensor:
    """A numeric tensor from a tensor, array or nested list, moved to ``device``; floats checked finite
    (unless ``finite`` is False: the caller checks), empty ones refused (unless ``empty_ok``)."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.bool_ or x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected a numeric (integer or float) array, got {describe(x)}")
        x = torch.from_numpy(np.ascontiguousarray(x).astype(np.int64 if x.dtype.kind == "u" else x.dtype))
    elif isinstance(x, (list, tuple)):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name}: expected a tensor, array or nested sequence of numbers, got {describe(x)}"
            ) from exc
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch tensor or numpy array, got {describe(x)}")
    if x.dtype == torch.bool or x.is_complex():
        raise TypeError(f"{name}: expected an integer or floating-point tensor, got {describe(x)}")
    if not empty_ok:
        check_has_data(x, name)
    if device is not None:
        x = x.to(device)
    if finite and x.is_floating_point():  # finite=False: the caller checks (inside a native op)
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            raise ValueError(f"{name}: expected finite values, got {int(bad.sum())} NaN or infinite value(s)")
    return x


def check_metric(pairwise) -> None:
    """Raise ``ValueError`` unless ``pairwise`` (``[L, L]``) is a metric, naming a violating entry.

    A metric here: ``V[a, a] = 0``, ``V[a, b] = V[b, a] >= 0`` and ``V[a, c] <= V[a, b] + V[b, c]``
    (labels that cost nothing apart are allowed). Expansion moves are submodular exactly for these.

    Examples
    --------
    >>> import torch
    >>> check_metric(1 - torch.eye(3))                      # Potts
    >>> check_metric(torch.tensor([[0, 1, 4], [1, 0, 1], [4, 1, 0]]))
    Traceback (most recent call last):
    ...
    ValueError: pairwise: expected a metric, got V[0, 2] = 4 > V[0, 1] + V[1, 2] = 2 (triangle inequality fails for labels (0, 1, 2))
    """
    V = _tensor(pairwise, "pairwise")
    if V.dim() != 2 or V.shape[0] != V.shape[1]:
        raise ValueError(f"pairwise: expected a square [L, L] table, got shape {tuple(V.shape)}")
    V = V.detach().to("cpu", torch.float64 if V.is_floating_point() else torch.int64)
    L = V.shape[0]
    tol = 1e-9 * float(V.abs().max()) if V.is_floating_point() and L else 0.0

    def fmt(v):
        v = float(v)
        return str(int(v)) if v.is_integer() else f"{v:g}"

    neg = (V < 0).nonzero()
    if len(neg):
        a, b = neg[0].tolist()
        raise ValueError(f"pairwise: expected non-negative costs, got V[{a}, {b}] = {fmt(V[a, b])}")
    diag = (V.diagonal() != 0).nonzero()
    if len(diag):
        a = int(diag[0])
        raise ValueError(f"pairwise: expected V[a, a] = 0 for a metric, got V[{a}, {a}] = {fmt(V[a, a])}")
    asym = ((V - V.T).abs() > tol).nonzero()
    if len(asym):
        a, b = asym[0].tolist()
        raise ValueError(
            f"pairwise: expected a symmetric table, got V[{a}, {b}] = {fmt(V[a, b])} but V[{b}, {a}] = {fmt(V[b, a])}"
        )
    for a in range(L):  # one row at a time: L^2 memory whatever L
        excess = V[a][None, :] - (V[a][:, None] + V)  # [b, c]: V[a, c] - V[a, b] - V[b, c]
        bad = (excess > tol).nonzero()
        if len(bad):
            b, c = bad[0].tolist()
            raise ValueError(
                f"pairwise: expected a metric, got V[{a}, {c}] = {fmt(V[a, c])} > V[{a}, {b}] + V[{b}, {c}] = "
                f"{fmt(V[a, b] + V[b, c])} (triangle inequality fails for labels ({a}, {b}, {c}))"
            )
