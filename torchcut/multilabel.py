"""Multi-label energies on grids: alpha-expansion moves solved as grid graphs, and ``refine``.

Energy over labellings ``f`` of a 2D or 3D grid (optionally a batch of them)::

    E(f) = sum_p U[f_p, p] + sum_k sum_p W[k, p] * V[f_p, f_{p + offsets[k]}]

``U`` is the unary ``[L, *shape]``, ``V`` the ``[L, L]`` pairwise table (a metric), ``W`` optional
per-edge multipliers ``[K, *shape]`` (the edge from p to p + offsets[k]; 1 by default).

Expansion move (Boykov, Veksler, Zabih 2001) for label alpha: every pixel keeps its label or switches
to alpha, whichever set of switches lowers E most. With ``x_p = 1`` for "switch", a pair term is
``E(x_p, x_q)`` with ``E00 = w V(f_p, f_q)``, ``E01 = w V(f_p, alpha)``, ``E10 = w V(alpha, f_q)``,
``E11 = 0``; the Kolmogorov-Zabih construction writes it as ``E00 + (E10 - E00) x_p + E10 (1 - x_q)
- E10 + (E01 + E10 - E00) (1 - x_p) x_q``, so the move is a grid graph of the image's shape: the linear
terms go to the terminal arcs, the last one is the arc p -> p + offset of capacity
``E01 + E10 - E00``, non-negative because V obeys the triangle inequality. No auxiliary nodes.
Source side = keep the label, sink side = take alpha.

Exact integers, quantised floats
--------------------------------
When the unary, the pairwise table and the weights are all integers the energy is solved exactly
(int64 arithmetic, capacities int32 when they fit). Otherwise the energy is quantised once: the unary
is shifted per pixel so that its minimum over labels is 0 (this changes no minimiser), then every term
is ``round(scale * value)`` with ``scale = 2**30 / (max U + 4 K max V max W)``, the largest factor for
which every terminal capacity of every move stays below 2**30. Each pair term is rounded as a whole
(``round(scale * W[k, p] * V[a, b])``), so the rounded pair costs can miss the triangle inequality by
one unit; a negative arc capacity is then raised to 0 and the move is accepted only if it lowers the
quantised energy. All reported energies are of the quantised energy, divided by ``scale``.

Schedules
---------
``"sequential"`` (the textbook loop): one move per solve, label after label, cycling until a whole
cycle lowers no item's energy. ``"batched"``: all L moves are built from the same labelling and
solved as one batched grid graph (one solve, one host synchronisation), then applied greedily in label
order, each switch set kept only if it lowers the energy of the current labelling. A round in which
nothing is kept computed every move exactly from the current labelling, so the result is a local
minimum with respect to expansion moves, the same guarantee as the sequential loop. ``"auto"`` picks
batched on CUDA (where a solve costs a launch-bound few ms whatever its size) and sequential on the
CPU (where the solver's work grows with the batch; ``benchmarks/results/multilabel.md``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._deprecate import renamed_keywords
from ._metric import _tensor, check_metric
from ._ops import check_not_capturing
from ._validate import INT32_MAX, SUM_LIMIT, describe
from .grid import grid_offsets, overlap_slices, shift
from .solvers.warm import WarmGrid

__all__ = ["expansion", "labeling_energy", "refine", "check_metric"]

_CONN_NDIM = {4: 2, 8: 2, 6: 3, 18: 3, 26: 3}
#: Largest terminal capacity of any move of a quantised float energy.
QUANT_RANGE = 2**30
#: Smallest probability ``refine`` takes the log of.
PROB_FLOOR = 1e-6


# ---------------------------------------------------------------------------------------------- inputs
def _layout(unary: torch.Tensor, connectivity):
    """(batched, ndim, connectivity) from the unary's shape and the connectivity."""
    if connectivity is not None and connectivity not in _CONN_NDIM:
        raise ValueError(f"connectivity: expected 4 or 8 (2D) or 6, 18 or 26 (3D), got {connectivity!r}")
    d = unary.dim()
    if d == 3:
        ndim, batched = 2, False
    elif d == 4:
        ndim = 3 if connectivity is not None and _CONN_NDIM[connectivity] == 3 else 2
        batched = ndim == 2
    elif d == 5:
        ndim, batched = 3, True
    else:
        raise ValueError(
            "unary: expected shape [L, H, W], [B, L, H, W], [L, D, H, W] (with connectivity 6, 18 or 26) or "
            f"[B, L, D, H, W], got {tuple(unary.shape)}"
        )
    if connectivity is None:
        connectivity = 4 if ndim == 2 else 6
    if _CONN_NDIM[connectivity] != ndim:
        raise ValueError(
            f"connectivity: expected 6, 18 or 26 for a 3D unary of shape {tuple(unary.shape)}, got {connectivity}"
        )
    return batched, ndim, connectivity


def _shape_of(x) -> tuple | None:
    """The shape of a tensor, array or nested sequence (None when it has none)."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return tuple(x.shape)
    try:
        return tuple(np.shape(x))
    except (TypeError, ValueError):
        return None


def _check_layout(unary, pairwise, weights, connectivity):
    """Checks of the axes' meaning that the shapes alone allow, before the energy is built; returns
    ``weights``, read as ``[B, K, *S]``. The number of labels is the pairwise table's side ``L``:

    * a 4-dim unary without ``connectivity`` is ``[B, L, H, W]`` only when its axis 1 has L entries;
      ``[L, D, H, W]`` (axis 0 has L entries, axis 1 not) needs a 3D ``connectivity``, and when both
      axes have L entries nothing tells the batch from the volume;
    * a unary whose last axis, not its first (or second, batched), has L entries holds its labels last;
    * batched weights in GridGraph's edge layout ``[K, B, *S]`` (B != K) are read as ``[B, K, *S]``
      with a FutureWarning.
    """
    us, vs = _shape_of(unary), _shape_of(pairwise)
    if us is None or vs is None or len(vs) != 2 or vs[0] != vs[1]:
        return weights  # _Energy names what is wrong
    L = vs[0]
    if len(us) == 4 and connectivity is None:
        if us[0] == L and us[1] == L:
            raise ValueError(
                f"unary: shape {us} with a {L} x {L} pairwise is ambiguous: a batch [B, L, H, W] of {us[0]} 2D "
                f"grids, or one 3D grid [L, D, H, W] of depth {us[1]}; pass connectivity (4 or 8 for the batch, "
                "6, 18 or 26 for the volume)"
            )
        if us[0] == L and us[1] != L:
            raise ValueError(
                f"connectivity: a unary of shape {us} with a {L} x {L} pairwise is one 3D grid [L, D, H, W]; pass "
                f"connectivity 6, 18 or 26 (without it a 4-dim unary is a batch [B, L, H, W], whose axis 1 would "
                f"need {L} labels)"
            )
    if len(us) >= 3:
        lab_axis = 0 if len(us) == 3 or (len(us) == 4 and connectivity in (6, 18, 26)) else 1
        if us[lab_axis] != L and us[-1] == L:
            want = "[L, H, W]" if len(us) == 3 else "[B, L, H, W]" if lab_axis else "[L, D, H, W]"
            raise ValueError(
                f"unary: expected the labels on axis {lab_axis} ({want}), got shape {us}, whose last axis has the "
                f"pairwise table's {L} labels; move them with unary.movedim(-1, {lab_axis})"
            )
    ws = _shape_of(weights)
    batched = len(us) == 5 or (len(us) == 4 and connectivity not in (6, 18, 26))
    conn = connectivity if connectivity in _CONN_NDIM else (4 if len(us) == 4 else 6)
    K = len(grid_offsets(_CONN_NDIM[conn], conn))
    if ws is not None and batched and len(ws) == len(us) and ws[0] == K != us[0] and ws[1] == us[0]:
        import warnings

        warnings.warn(
            f"weights: shape {ws} is GridGraph's edge layout [K, B, *shape]; expansion reads it as "
            f"weights.transpose(0, 1): pass [B, K, *shape] (item first, like the unary)",
            FutureWarning,
            stacklevel=3,
        )
        w = weights if isinstance(weights, torch.Tensor) else _tensor(weights, "weights")
        weights = w.transpose(0, 1)
    return weights


class _Energy:
    """A validated energy on one device: unary ``[B, L, *S]``, table ``V``, edge weights ``[B, K, *S]``.

    ``exact``: integer energy (``U``, ``V``, ``W`` integers of ``cap_dtype``); else ``U`` is the quantised
    unary and ``W`` the float64 weights times ``scale`` (pair costs are ``round(W * V)``).
    ``potts``: ``V`` is ``c`` off the diagonal and 0 on it; ``W`` then holds the pair costs ``c * w``
    themselves (exact, or rounded), in ``cap_dtype``.
    """

    def __init__(self, unary, pairwise, weights, connectivity):
        U = _tensor(unary, "unary")
        device = U.device
        self.batched, self.ndim, self.connectivity = _layout(U, connectivity)
        if not self.batched:
            U = U.unsqueeze(0)
        B, L = U.shape[:2]
        self.shape = tuple(U.shape[2:])
        if L < 2 or any(n == 0 for n in self.shape) or B == 0:
            raise ValueError(f"unary: expected at least 2 labels and a non-empty grid, got shape {tuple(unary.shape)}")
        V = _tensor(pairwise, "pairwise", device)
        if tuple(V.shape) != (L, L):
            raise ValueError(
                f"pairwise: expected shape [L, L] = ({L}, {L}) for the unary's {L} labels, got {tuple(V.shape)}"
            )
        check_metric(V)
        self.offsets = grid_offsets(self.ndim, self.connectivity)
        self.flat = [v for o in self.offsets for v in o]  # the offsets as the ops take them
        K = len(self.offsets)
        full = (B, K) + self.shape
        if weights is None:
            W = torch.ones(full, dtype=torch.int64, device=device)
        else:
            W = _tensor(weights, "weights", device)
            if tuple(W.shape) == full[1:]:
                W = W.unsqueeze(0).expand(full)
            elif tuple(W.shape) != full:
                want = f"{full[1:]}" + (f" or {full}" if self.batched else "")
                raise ValueError(
                    f"weights: expected shape {want} (K={K} offsets for connectivity "
                    f"{self.connectivity}), got {tuple(W.shape)}"
                )
            low = W.min()
            if bool(low < 0):
                raise ValueError(f"weights: expected non-negative edge weights, got minimum {low.item()}")
        inside = torch.stack(
            [shift(torch.ones(self.shape, dtype=torch.bool, device=device), o, False) for o in self.offsets]
        )
        self.exact = not (U.is_floating_point() or V.is_floating_point() or W.is_floating_point())
        self.L, self.B, self.K, self.device = L, B, K, device
        if self.exact:
            U = U.to(torch.int64)
            self.offset = U.amin(1).reshape(B, -1).sum(1).to(torch.float64)
            U = U - U.amin(1, keepdim=True)
            self.V = V.to(torch.int64)
            self.W = torch.where(inside, W.to(torch.int64), 0)
            self.scale = 1.0
            umax, vmax, wmax = torch.stack([U.max(), self.V.max(), self.W.max()]).tolist()  # one read-back
            peak = umax + 4 * K * vmax * wmax
            total = (umax + 2 * K * vmax * wmax) * math.prod(self.shape)
            if total >= SUM_LIMIT:
                raise ValueError(
                    f"unary: the energy of one labelling can reach {total}, at or above 2**62; "
                    "int64 energies could overflow. Scale the energy down."
                )
        else:
            U = U.to(torch.float64)
            self.offset = U.amin(1).reshape(B, -1).sum(1)
            U = U - U.amin(1, keepdim=True)
            Vf, Wf = V.to(torch.float64), torch.where(inside, W.to(torch.float64), 0.0)
            umax, vmax, wmax = torch.stack([U.max(), Vf.max(), Wf.max()]).tolist()  # one read-back
            top = umax + 4 * K * vmax * wmax
            self.scale = QUANT_RANGE / top if top > 0 else 1.0
            U = torch.round(U * self.scale).to(torch.int64)
            self.V, self.W = Vf, Wf * self.scale
            peak = QUANT_RANGE
        self.cap_dtype = torch.int32 if peak <= INT32_MAX else torch.int64
        # Every term of every move fits cap_dtype, so the moves are built in it (int32 halves the
        # memory traffic); energies are summed in int64 (torch sums integers in int64).
        self.U = U.to(self.cap_dtype)
        if self.exact:
            self.V, self.W = self.V.to(self.cap_dtype), self.W.to(self.cap_dtype)
        # Potts (one cost c for every pair of different labels, 0 on the diagonal): W holds each edge's
        # pair cost c * w (rounded as the general path rounds it), and a pair term is one select on
        # a != b instead of a gather from V, a product and (float energies) a rounding in float64.
        Vh = self.V.cpu()  # L x L: one small copy, then host checks
        off = Vh[~torch.eye(L, dtype=torch.bool)]
        self.potts = bool((Vh.diagonal() == 0).all()) and bool((off == off[0]).all())
        if self.potts:
            c = off[0].item()
            self.W = (self.W * c if self.exact else torch.round(self.W * c)).to(self.cap_dtype)
        self.Vflat = self.V.reshape(-1)
        # the labels as a device tensor: a move's alphas are a slice of it (no host-to-device copy,
        # which torch makes synchronous from pageable memory)
        self.arange = torch.arange(L, device=device)
        # every offset of grid_offsets reaches at most one node along each axis: neighbours are views of
        # one zero-padded copy of the labels
        self._pad1 = all(abs(v) <= 1 for o in self.offsets for v in o)
        self._sub = None  # (items, U[items], W[items]) of the current round's subset

    @classmethod
    def _from_potts(cls, U, W, offset, scale: float, connectivity: int) -> _Energy:
        """The float Potts energy (pair cost 1 between different labels) of quantised terms in
        ``__init__``'s layout: the unary ``U`` int32 ``[B, L, *S]``, the pair costs ``W`` int32
        ``[B, K, *S]`` (0 on edges leaving the grid), the offsets ``[B]`` and the scale; what ``__init__``
        makes of the same float64 unary and weights (``refine`` builds them with one native op)."""
        E = cls.__new__(cls)
        B, L = U.shape[:2]
        E.batched, E.ndim, E.connectivity = True, U.dim() - 2, connectivity
        E.shape = tuple(U.shape[2:])
        E.offsets = grid_offsets(E.ndim, connectivity)
        E.flat = [v for o in E.offsets for v in o]
        E.L, E.B, E.K, E.device = L, B, len(E.offsets), U.device
        E.exact, E.offset, E.scale, E.cap_dtype = False, offset, float(scale), torch.int32
        E.V = 1.0 - torch.eye(L, dtype=torch.float64, device=U.device)
        E.U, E.W, E.potts = U, W, True
        E.Vflat = E.V.reshape(-1)
        E.arange = torch.arange(L, device=U.device)
        E._pad1 = True
        E._sub = None
        return E

    def terms(self, items=None):
        """(U, W) of the items (all when None); a subset's copies are kept while ``items`` is the same."""
        if items is None:
            return self.U, self.W
        if self._sub is None or self._sub[0] is not items:
            self._sub = (items, self.U[items], self.W[items])
        return self._sub[1], self._sub[2]

    # pair cost of edges with label pairs (a, b): int64, shaped like a
    def pair(self, k: int, a: torch.Tensor, b: torch.Tensor, items=None) -> torch.Tensor:
        W = self.terms(items)[1][:, k]
        if self.potts:
            return torch.where(a != b, W, 0)
        v = self.Vflat[a * self.L + b]
        if self.exact:
            return W * v
        return torch.round(W * v).to(self.cap_dtype)

    def neighbour(self, f: torch.Tensor, o) -> torch.Tensor:
        return shift(f, o, 0)

    def neighbours(self, f: torch.Tensor) -> torch.Tensor:
        """``[..., K, *S]``: the label of p + offsets[k] (0 outside the grid) for labels ``f`` ``[..., *S]``."""
        nd = len(self.shape)
        if not self._pad1:
            return torch.stack([self.neighbour(f, o) for o in self.offsets], -nd - 1)
        fp = torch.nn.functional.pad(f, (1, 1) * nd)
        views = [fp[(Ellipsis,) + tuple(slice(1 + v, 1 + v + n) for v, n in zip(o, self.shape))] for o in self.offsets]
        return torch.stack(views, -nd - 1)

    def energy(self, f: torch.Tensor, items=None) -> torch.Tensor:
        """int64 ``[..., B]`` energies of labellings ``f`` ``[..., B, *S]`` (in quantised units).

        Leading dims (several candidate labellings of the same items) broadcast against the energy's
        terms without copying them. About ten tensor ops whatever K: every pair term of every edge is
        one gather from ``V`` (edges leaving the grid have weight 0).
        """
        U, W = self.terms(items)
        nd = len(self.shape)
        lead = f.dim() - nd - 1
        Ux = U.expand(f.shape[:lead] + U.shape) if lead else U
        u = Ux.gather(lead + 1, f.unsqueeze(lead + 1)).flatten(lead + 1).sum(-1)
        if self.potts:
            pq = torch.where(f.unsqueeze(-nd - 1) != self.neighbours(f), W, 0)  # [..., B, K, *S]
        else:
            v = self.Vflat[(f * self.L).unsqueeze(-nd - 1) + self.neighbours(f)]
            pq = W * v if self.exact else torch.round(W * v).to(self.cap_dtype)
        return u + pq.flatten(lead + 1).sum(-1)

    def alphas(self, alphas) -> torch.Tensor:
        """The labels ``alphas`` (a list) as an int64 device tensor: a view when they are consecutive."""
        alphas = [int(a) for a in alphas]
        if alphas and alphas == list(range(alphas[0], alphas[0] + len(alphas))):
            return self.arange[alphas[0] : alphas[0] + len(alphas)]
        return torch.as_tensor(alphas, dtype=torch.int64, device=self.device)

    def move_graph(self, f: torch.Tensor, alphas, items=None):
        """The batched GridGraph of the moves ``alphas`` (list of labels, or an int64 device tensor of
        them) from ``f`` ``[B, *S]``.

        Graph item ``i * B + b`` is move ``alphas[i]`` of labelling item ``b``.
        """
        from .energy import _grid_graph

        M, B = len(alphas), f.shape[0]
        U = self.terms(items)[0]
        a = alphas if isinstance(alphas, torch.Tensor) else self.alphas(alphas)
        a = a.view((M, 1) + (1,) * len(self.shape))
        src = U.index_select(1, a.view(-1)).movedim(1, 0)  # [M, B, *S]: cost of taking alpha
        snk = U.gather(1, f.unsqueeze(1)).squeeze(1).unsqueeze(0).expand_as(src).clone()  # cost of keeping
        K = self.K
        # every capacity is at most the peak bound of __init__, so cap_dtype holds it: no read-back
        caps = torch.zeros((M, B, 2 * K) + self.shape, dtype=self.cap_dtype, device=f.device)
        for k, o in enumerate(self.offsets):
            fq = self.neighbour(f, o)
            e00 = self.pair(k, f, fq, items)  # [B, *S]
            e01 = self.pair(k, f.unsqueeze(0), a, items)  # [M, B, *S]: p keeps, q takes alpha
            e10 = self.pair(k, a, fq.unsqueeze(0), items)  # p takes alpha, q keeps
            lin = e10 - e00
            src += lin.clamp(min=0)
            snk -= lin.clamp(max=0)
            neg = tuple(-v for v in o)
            snk += shift(e10, neg, 0)  # E10 (1 - x_q) lives on q's sink arc
            caps[:, :, k] = (e01 + e10 - e00).clamp_(min=0)
        low = torch.minimum(src, snk)
        src -= low
        snk -= low
        caps = caps.reshape((M * B, 2 * K) + self.shape)
        return _grid_graph(
            caps, src.reshape((M * B,) + self.shape), snk.reshape((M * B,) + self.shape), self.offsets, True
        )


def _labels_in(init, E: _Energy, name: str = "init") -> torch.Tensor:
    full = (E.B,) + E.shape
    if isinstance(init, (int, np.integer)) and not isinstance(init, bool):
        if not 0 <= int(init) < E.L:
            raise ValueError(f"{name}: expected a label in [0, {E.L - 1}], got {init}")
        return torch.full(full, int(init), dtype=torch.int64, device=E.device)
    f = _tensor(init, name, E.device)
    if f.is_floating_point():
        raise TypeError(f"{name}: expected integer labels, got {describe(f)}")
    if tuple(f.shape) == E.shape:
        f = f.unsqueeze(0).expand(full)
    elif tuple(f.shape) != full:
        raise ValueError(f"{name}: expected labels of shape {E.shape if not E.batched else full}, got {tuple(f.shape)}")
    lo, hi = int(f.min()), int(f.max())
    if lo < 0 or hi >= E.L:
        raise ValueError(f"{name}: expected labels in [0, {E.L - 1}], got values in [{lo}, {hi}]")
    return f.to(torch.int64).clone()


def labeling_energy(unary, pairwise, labels, *, weights=None, connectivity=None) -> torch.Tensor:
    """The energy ``E(f)`` of labellings (module docstring), exactly for integer inputs.

    Parameters
    ----------
    unary, pairwise, weights, connectivity
        As for :func:`expansion`.
    labels : tensor ``[*shape]`` or ``[B, *shape]``
        Integer labels in ``[0, L)``.

    Returns
    -------
    torch.Tensor
        ``[B]`` (or a 0-dim tensor without a batch): int64 for integer energies, float64 otherwise
        (computed from float64 terms, not quantised).

    Examples
    --------
    >>> import torch
    >>> U = torch.tensor([[[0, 5]], [[3, 0]]])                 # 2 labels on a 1 x 2 grid
    >>> int(labeling_energy(U, 4 * (1 - torch.eye(2, dtype=torch.int64)), torch.tensor([[0, 1]])))
    4
    """
    weights = _check_layout(unary, pairwise, weights, connectivity)
    U = _tensor(unary, "unary")
    batched, ndim, connectivity = _layout(U, connectivity)
    V = _tensor(pairwise, "pairwise", U.device)
    if not batched:
        U = U.unsqueeze(0)
    L, shape = U.shape[1], tuple(U.shape[2:])
    if tuple(V.shape) != (L, L):
        raise ValueError(f"pairwise: expected shape [L, L] = ({L}, {L}), got {tuple(V.shape)}")
    floating = U.is_floating_point() or V.is_floating_point()
    offsets = grid_offsets(ndim, connectivity)
    W = None if weights is None else _tensor(weights, "weights", U.device)
    floating = floating or (W is not None and W.is_floating_point())
    dt = torch.float64 if floating else torch.int64
    f = _tensor(labels, "labels", U.device)
    if f.is_floating_point():
        raise TypeError(f"labels: expected integer labels, got {describe(f)}")
    f = f.to(torch.int64)
    if f.dim() == len(shape):
        f = f.unsqueeze(0).expand((U.shape[0],) + shape)
    if tuple(f.shape) != (U.shape[0],) + shape:
        raise ValueError(f"labels: expected shape {shape} or {(U.shape[0],) + shape}, got {tuple(f.shape)}")
    if int(f.min()) < 0 or int(f.max()) >= L:
        raise ValueError(f"labels: expected values in [0, {L - 1}], got [{int(f.min())}, {int(f.max())}]")
    B = f.shape[0]
    e = U.to(dt).gather(1, f.unsqueeze(1)).reshape(B, -1).sum(1)
    Vf = V.to(dt).reshape(-1)
    if W is not None:
        W = W.to(dt)
        if W.dim() == len(shape) + 1:
            W = W.unsqueeze(0).expand((B,) + tuple(W.shape))
        if tuple(W.shape) != (B, len(offsets)) + shape:
            raise ValueError(f"weights: expected shape {(len(offsets),) + shape}, got {tuple(W.shape)}")
    for k, o in enumerate(offsets):
        if any(abs(v) >= n for v, n in zip(o, shape)):
            continue
        here, there = overlap_slices(shape, o)
        lead = (slice(None),)
        v = Vf[f[lead + here] * L + f[lead + there]]
        if W is not None:
            v = v * W[:, k][lead + here]
        e = e + v.reshape(B, -1).sum(1)
    return e if batched else e[0]


# ---------------------------------------------------------------------------------------------- solver
# Expansion moves on CUDA through the grid extension's move kernels (torchcut/csrc/cuda/grid_moves.cu): a
# move's graph and the warm re-fit of its last flow in one pass, a move's application in two, where the
# tensor ops (move_graph, WarmGrid, _move) take ~100 kernels over int64 and float64 copies. Same labels
# and energies (the tests compare both paths). False: the tensor ops everywhere (tests, A/B).
_FUSED_MOVES = True


def _fused(E: _Energy, backend) -> bool:
    """Whether this energy's moves go through the move kernels (CUDA solver, at most 13 offsets)."""
    if not (_FUSED_MOVES and E.device.type == "cuda" and E.K <= 13):
        return False
    from .solvers._backends import GRID

    return GRID(E.device, backend).name == "cuda"


def _pair_mode(E: _Energy) -> int:
    """grid_moves.h's PairMode of the energy's pair terms."""
    return 2 if E.potts else 0 if E.exact else 1


class _FusedMoves:
    """Moves built and solved on CUDA by the move kernels, each warm-started from the flow of its last
    solve when ``warm`` (the state: forward capacities, residuals, excess, sink residuals, terminals)."""

    def __init__(self, E: _Energy, warm: bool = True):
        self.mode = _pair_mode(E)
        self.warm = bool(warm)
        self.state = None
        self.log = []  # the solver's counters of every solve

    keep = WarmGrid.keep  # the same state tuple, indexed by graph item

    def solve(self, E: _Energy, U, W, f, alphas: torch.Tensor) -> torch.Tensor:
        """Source side ``[M * B, *S]`` of the moves ``alphas`` (int64 device tensor) from labels ``f``."""
        from .solvers import cuda as cuda_backend

        MB = alphas.numel() * f.shape[0]
        warm = self.state is not None and self.state[0].shape[0] == MB
        state = self.state if warm else (f,) * 6  # placeholders, not read on a cold start
        C, R, e, r, s, k = torch.ops.torchcut.move_build(
            U, f.contiguous(), W, E.Vflat, alphas, *state, list(E.shape), E.flat, self.mode, warm
        )
        mask, stats = cuda_backend.solve_grid(
            R.view((MB, 2 * E.K) + E.shape), e.view((MB,) + E.shape), r.view((MB,) + E.shape), E.offsets
        )
        self.log.append(stats)
        if self.warm:  # the solve left its residuals, excess and sink residuals in R, e, r
            self.state = (C, R, e, r, s, k)
        return mask


def _solve(E: _Energy, f, alphas, items, backend, info, warm=None):
    """Take-alpha masks ``[len(alphas), B, *S]``; ``warm``: a WarmGrid or _FusedMoves holding these
    moves' last flows."""
    from .solvers import maxflow

    if isinstance(warm, _FusedMoves):
        U, W = E.terms(items)
        source = warm.solve(E, U, W, f, E.alphas(alphas))
    elif warm is None:
        source = maxflow(E.move_graph(f, alphas, items), backend=backend).node_mask
    else:
        g = E.move_graph(f, alphas, items)
        source = warm.solve(g.caps, g.source, g.sink)
    info["solves"] += 1
    info["moves"] += len(alphas)
    return (~source).view((len(alphas), f.shape[0]) + E.shape)  # True: take alpha


def _move(E: _Energy, f, e_cur, take, alpha, items=None):
    """Labels and energies after the move ``take`` (to ``alpha``) where it lowers the energy."""
    cand = torch.where(take, alpha, f)
    e_new = E.energy(cand, items)
    better = e_new < e_cur
    return torch.where(better.view((-1,) + (1,) * len(E.shape)), cand, f), torch.where(better, e_new, e_cur)


def _apply(E: _Energy, f, e_cur, take, alpha, items, info, fused=False):
    if fused:  # the move kernels: its energy change per item, then the move where it is negative
        U, W = E.terms(items)
        f, e_next = torch.ops.torchcut.move_apply(
            U, f.contiguous(), take.contiguous(), W, E.Vflat, e_cur, int(alpha), list(E.shape), E.flat, _pair_mode(E)
        )
    else:
        f, e_next = _move(E, f, e_cur, take, alpha, items)
    info["trace"].append((items, e_next))
    return f, e_next


def _greedy(E: _Energy, f, e, take, items, info, fused: bool = False):
    """The batched round's greedy application of the L moves ``take`` ``[L, B, *S]`` in label order."""
    for alpha in range(E.L):
        f, e = _apply(E, f, e, take[alpha], alpha, items, info, fused)
    return f, e


@renamed_keywords(max_cycles="max_iter", return_info="return_result")
def expansion(
    unary,
    pairwise,
    *,
    weights=None,
    connectivity=None,
    init=None,
    max_iter=None,
    schedule: str = "auto",
    backend: str = "auto",
    return_result: bool = False,
    warm_start: bool | None = None,
    edges=None,
    edge_weights=None,
):
    """Minimise a multi-label energy with alpha-expansion moves, each a grid max-flow.

    With ``edges`` the energy lives on a general graph instead of a grid (superpixels, meshes,
    point clouds): ``unary`` is ``[L, N]``, ``edges`` ``[E, 2]``, ``edge_weights`` ``[E]`` and
    ``pairwise`` ``[L, L]`` or ``[E, L, L]``; each move is a :class:`torchcut.FlowGraph`
    (:func:`torchcut.graph_multilabel.expansion`, which takes the same ``init``, ``max_cycles``,
    ``schedule``, ``backend`` and ``return_info``).

    Parameters
    ----------
    unary : tensor or array
        ``[L, H, W]``, ``[B, L, H, W]``, or 3D ``[L, D, H, W]`` / ``[B, L, D, H, W]`` (with
        ``connectivity`` 6, 18 or 26): the cost of each label at each pixel. Integer or float.
    pairwise : tensor or array ``[L, L]``
        A metric (Potts ``1 - eye(L)``, truncated linear ``min(|a - b|, t)``, ...). Anything else
        raises ``ValueError`` naming a violating triple.
    weights : tensor or array, optional
        ``[K, *shape]`` or ``[B, K, *shape]`` non-negative multipliers of the pair term of the edge
        from p to p + offsets[k] (``torchcut.grid_offsets(ndim, connectivity)``); 1 by default.
        Item first, like the unary (``unary[b]`` and ``weights[b]`` are item b's energy), where a
        batched :class:`torchcut.GridGraph` takes ``edges[k]`` shaped like its source ``[B, *shape]``,
        so ``[K, B, *shape]``; weights in that layout (B != K) are transposed, with a FutureWarning.
    connectivity : int, optional
        4 or 8 in 2D (default 4, the smallest graph per move, as in the BVZ stereo energies), 6, 18 or
        26 in 3D (default 6). Required for a 3D
        unary ``[L, D, H, W]``, which a batch ``[B, L, H, W]`` could not be told from otherwise.
    init : int or integer tensor, optional
        Starting labels (``[*shape]`` or ``[B, *shape]``), default the per-pixel argmin of the unary.
    max_iter : int, optional
        Stop after this many cycles (sequential: L moves each; batched: one batched solve each).
        Default: until no move lowers the energy (a local minimum with respect to expansion moves).
        Formerly ``max_cycles`` (still accepted, with a ``FutureWarning``).
    schedule : {"auto", "sequential", "batched"}
        How moves are grouped into solves (module docstring). "auto": batched on CUDA while one
        batched solve holds at most 2**23 nodes (``B * L * H * W``), else sequential; sequential on the
        CPU.
    backend : str
        Passed to :func:`torchcut.maxflow`.
    return_result : bool
        Also return a dict (formerly ``return_info``, still accepted with a ``FutureWarning``):
        ``energy`` (float64 ``[B]``, final energies in the input's units, of the
        quantised energy for floats), ``energies`` (list of ``[B]`` energies after every applied or
        rejected move, never increasing), ``solves``, ``moves``, ``cycles``, ``scale``, ``exact``,
        ``skipped`` (sequential moves not solved because nothing changed since the same label's last
        move, which changed nothing either: the graph would be the same).
    warm_start : bool, optional
        Solve each move from the flow of the same move in the last cycle, re-fitted to the new
        labelling (Kohli-Torr; :class:`torchcut.solvers.warm.WarmGrid`). The labels are the same either
        way; the warm start holds about two copies of each move's graph. Default: on CUDA, off on the
        CPU (one thread: Tsukuba sequential 5% faster, refine 11% and the batched schedule 15-40%
        slower, because the re-fit's tensor ops cost about what the Boykov-Kolmogorov solver saves).
        On CUDA the moves are built, re-fitted and applied by the grid extension's move kernels, one
        pass each (``torchcut/csrc/cuda/grid_moves.cu``).
    edges : integer tensor or array ``[E, 2]``, optional
        A general graph's edges ``(u, v)``: the energy is then
        ``sum_p unary[f_p, p] + sum_e edge_weights[e] * pairwise[f_u, f_v]`` on ``N`` nodes, with
        ``unary`` ``[L, N]`` (labels first, as on grids; GCO's ``[N, L]`` is ``unary.T``). ``weights``,
        ``connectivity`` and ``warm_start`` do not apply.
    edge_weights : tensor or array ``[E]``, optional
        Non-negative multipliers of the edges' pair costs (with ``edges``); 1 by default.

    Returns
    -------
    torch.Tensor
        int64 labels ``[*shape]`` or ``[B, *shape]`` on the unary's device (and the info dict); ``[N]``
        with ``edges``.

    Examples
    --------
    >>> import torch, torchcut
    >>> U = torch.tensor([[[0, 0, 9, 9]], [[9, 9, 0, 1]], [[9, 9, 9, 0]]])   # 3 labels, a 1 x 4 grid
    >>> torchcut.expansion(U, 5 * (1 - torch.eye(3, dtype=torch.int64)))
    tensor([[0, 0, 1, 1]])
    >>> torchcut.expansion(U[:, 0], 5 * (1 - torch.eye(3, dtype=torch.int64)), edges=[[0, 1], [1, 2], [2, 3]])
    tensor([0, 0, 1, 1])
    """
    if edges is not None or edge_weights is not None:
        from .graph_multilabel import _dispatch

        return _dispatch(
            unary,
            pairwise,
            edges,
            edge_weights,
            weights=weights,
            connectivity=connectivity,
            warm_start=warm_start,
            init=init,
            max_iter=max_iter,
            schedule=schedule,
            backend=backend,
            return_result=return_result,
        )
    weights = _check_layout(unary, pairwise, weights, connectivity)
    E = _Energy(unary, pairwise, weights, connectivity)
    if schedule not in ("auto", "sequential", "batched"):
        raise ValueError(f"schedule: expected 'auto', 'sequential' or 'batched', got {schedule!r}")
    if max_iter is not None and (
        isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0
    ):
        raise ValueError(f"max_iter: expected a non-negative int or None, got {max_iter!r}")
    if schedule == "auto":
        schedule = _auto_schedule(E)
    f = E.U.argmin(1) if init is None else _labels_in(init, E)
    info = {"solves": 0, "moves": 0, "cycles": 0, "trace": [], "scale": E.scale, "exact": E.exact, "schedule": schedule}
    warm = E.device.type == "cuda" if warm_start is None else bool(warm_start)
    f = _minimise(E, f, max_iter, schedule, backend, info, warm)
    labels = f if E.batched else f[0]
    if not return_result:
        return labels
    return labels, _finish_info(E, f, info)


# "auto" takes the batched schedule on CUDA while one batched solve (all L moves of every item) holds at
# most this many nodes. Measured on the H100 (benchmarks/results/multilabel_h100.md): Tsukuba, 16 x
# 110k nodes, batched 249 ms against sequential 330 ms; refine 4 x 1024^2 with 8 classes (33.5M nodes
# per batched solve) batched 995 ms against sequential 303 ms.
AUTO_BATCHED_NODES = 1 << 23


def _auto_schedule(E: _Energy) -> str:
    return "batched" if E.device.type == "cuda" and E.U.numel() <= AUTO_BATCHED_NODES else "sequential"


def _minimise(E: _Energy, f, max_cycles, schedule, backend, info, warm_start=True):
    e = E.energy(f)
    info["trace"].append((None, e))
    items = torch.arange(E.B, device=E.device)  # the items not yet at a local minimum
    labels = list(range(E.L))
    quiet = 0  # sequential: moves in a row (skipped ones included) that changed no labelling, as far as read
    unread = []  # sequential: whether each later move changed a labelling, device flags not yet read back
    info["skipped"] = 0
    # each move is solved from the flow of the same move in the last round (batched: one WarmGrid for
    # the batched graph of all moves; sequential: one per label)
    warms = None
    fused = _fused(E, backend)
    if fused:  # cold starts too go through the move kernels (warm_start=False keeps no state)
        warms = _FusedMoves(E, warm_start) if schedule == "batched" else {a: _FusedMoves(E, warm_start) for a in labels}
    elif warm_start:
        warms = (
            WarmGrid(E.offsets, backend, graphs=False)
            if schedule == "batched"
            else {a: WarmGrid(E.offsets, backend, graphs=False) for a in labels}
        )
    while items.numel() and (max_cycles is None or info["cycles"] < max_cycles):
        info["cycles"] += 1
        full = items.numel() == E.B  # known on the host: no indexing while every item is active
        sub = None if full else items
        fi, ei = (f, e) if full else (f[items], e[items])
        e_start = ei
        if schedule == "batched":
            take = _solve(E, fi, labels, sub, backend, info, warms)
            fi, ei = _greedy(E, fi, ei, take, sub, info, fused)
        else:
            for alpha in labels:
                if unread and quiet + len(unread) >= E.L:  # the rule below may fire: read the flags
                    for changed in torch.stack(unread).tolist():  # (one read-back for up to L moves)
                        quiet = 0 if changed else quiet + 1
                    unread = []
                if quiet >= E.L:  # this label's last move and the L - 1 since changed nothing: the same
                    info["trace"].append((sub, ei))  # graph as last time, so the same empty move
                    info["skipped"] += 1
                    continue
                take = _solve(E, fi, [alpha], sub, backend, info, warms and warms[alpha])[0]
                e_before = ei
                fi, ei = _apply(E, fi, ei, take, alpha, sub, info, fused)
                unread.append((ei < e_before).any())
        if full:
            f, e = fi, ei
        else:
            f = f.index_copy(0, items, fi)
            e = e.index_copy(0, items, ei)
        kept = (ei < e_start).nonzero().squeeze(1)  # the round's one read-back of the loop itself
        if warms is not None and kept.numel() < items.numel():  # the moves' flows of the kept items
            if schedule == "batched":
                n = items.numel()
                warms.keep((torch.arange(E.L, device=E.device).unsqueeze(1) * n + kept).flatten())
            else:
                for w in warms.values():
                    w.keep(kept)
        items = items[kept]
    return f


def _finish_info(E: _Energy, f, info):
    cur = None
    rows = []
    for items, e in info.pop("trace"):
        cur = e if items is None else cur.index_copy(0, items, e)
        rows.append(cur)
    energies = (torch.stack(rows).to(torch.float64) / E.scale + E.offset).unbind(0)  # 3 ops, not 4 per move
    info["energies"] = list(energies)
    info["energy"] = energies[-1]
    return info


# ---------------------------------------------------------------------------------------------- refine
def refine(
    image,
    probs,
    *,
    lam: float = 1.0,
    sigma: float | None = None,
    seeds=None,
    connectivity: int = 4,
    schedule: str = "auto",
    backend: str = "auto",
    warm_start: bool | None = None,
):
    """Refine class probabilities (a softmax) into labels with a contrast-sensitive Potts graph cut.

    Energy: ``sum_p -log(max(probs[c_p, p], 1e-6)) + lam * sum_pq w_pq [c_p != c_q]`` with
    ``w_pq = exp(-||I_p - I_q||^2 / (2 sigma^2)) / dist(p, q)`` (``sigma`` defaults to the root mean
    square colour difference of axis-aligned neighbours, per image). Two classes are one exact cut;
    more go through :func:`expansion`. Float energies are quantised (see :mod:`torchcut.multilabel`).
    The unaries, weights and (two classes) the graph are built by one native op per device
    (``torch.ops.torchcut.potts_energy``, which also checks the values), the same integers as the
    tensor version it replaces.

    Parameters
    ----------
    image : tensor or array
        ``[H, W]``, ``[H, W, C]``, ``[C, H, W]`` or batched ``[B, ...]`` (the channel axis is found as
        in :func:`torchcut.segment`).
    probs : tensor or array ``[C, H, W]`` or ``[B, C, H, W]``
        Non-negative class probabilities.
    lam : float
        Weight of the smoothness term (nats per unit of ``w_pq``; default 1: the data term is a
        classifier's ``-log p``, already in nats and smoother than ``segment``'s histogram costs).
    sigma : float, optional
        Contrast scale in the image's units.
    seeds : integer tensor, optional
        Shaped like the labels: -1 leaves a pixel free, ``c >= 0`` fixes it to class c.
    connectivity : {4, 8}
        Default 4, the smallest graph per move (as :func:`expansion`).
    schedule, backend, warm_start
        As for :func:`expansion`.

    Returns
    -------
    torch.Tensor
        int64 labels ``[H, W]`` or ``[B, H, W]`` on the input's device.

    Examples
    --------
    >>> import torch, torchcut
    >>> probs = torch.tensor([[[0.9, 0.6, 0.1]], [[0.1, 0.4, 0.9]]])   # one noisy pixel in the middle
    >>> torchcut.refine(torch.zeros(1, 3), probs, lam=2.0)
    tensor([[0, 0, 1]])
    """
    from .energy import _as_image_tensor, _channel_axis, estimate_sigma

    P = _tensor(probs, "probs", finite=False)
    if P.device.type == "cuda":  # before any work is queued: the capture stays valid
        check_not_capturing("torchcut.refine")
    P_shape = P.shape
    if P.dim() not in (3, 4):
        raise ValueError(f"probs: expected shape [C, H, W] or [B, C, H, W], got {tuple(P.shape)}")
    batched = P.dim() == 4
    if P.is_floating_point() and P.shape[-1] >= 2 and P.numel():
        # a softmax over the last axis: the classes are last ([H, W, C]), which the shape cannot tell;
        # one pixel's sum first (a row of probabilities of one class rarely sums to 1), the whole map
        # only where it does
        one = lambda t: bool(torch.isclose(t, torch.ones((), dtype=t.dtype, device=t.device), atol=1e-3).all())  # noqa: E731
        first = float(P[(0,) * (P.dim() - 1)].sum())
        if abs(first - 1.0) <= 2e-3 and one(P.sum(-1)) and not one(P.sum(1 if batched else 0)):
            want = "[B, C, H, W]" if batched else "[C, H, W]"
            raise ValueError(
                f"probs: expected the classes on axis {1 if batched else 0} ({want}), got shape "
                f"{tuple(P.shape)}, whose last axis sums to 1 (classes last); pass "
                f"probs.movedim(-1, {1 if batched else 0})"
            )
    if not batched:
        P = P.unsqueeze(0)
    B, C, H, W = P.shape
    if C < 2:
        raise ValueError(f"probs: expected at least 2 classes, got shape {tuple(probs.shape)}")
    if B == 0 or H == 0 or W == 0:
        raise ValueError(f"probs: expected a non-empty grid, got shape {tuple(P_shape)}")
    if connectivity not in (4, 8):
        raise ValueError(f"connectivity: expected 4 or 8, got {connectivity!r}")
    if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam: expected a non-negative finite number, got {lam!r}")
    if sigma is not None and not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma: expected a positive finite number, got {sigma!r}")
    if schedule not in ("auto", "sequential", "batched"):
        raise ValueError(f"schedule: expected 'auto', 'sequential' or 'batched', got {schedule!r}")
    img = _as_image_tensor(image, "image").to(P.device)
    label_shape = (B, H, W) if batched else (H, W)
    ax = _channel_axis(
        tuple(img.shape),
        label_shape,
        1 if batched else 0,
        None,
        "probs",
        tuple(P_shape),
        lambda sp: sp[:1] + (C,) + sp[1:] if batched else (C,) + sp,
    )
    x = img if ax is not None else img.unsqueeze(1 if batched else 0)
    if ax is not None and ax != (1 if batched else 0):
        x = x.movedim(ax, 1 if batched else 0)
    if not batched:
        x = x.unsqueeze(0)
    S = None
    if seeds is not None:
        S = _tensor(seeds, "seeds", P.device)
        if S.is_floating_point():
            raise TypeError(f"seeds: expected integer labels (-1 free, c >= 0 fixed), got {describe(S)}")
        if tuple(S.shape) != label_shape:
            raise ValueError(f"seeds: expected shape {label_shape} (the labels'), got {tuple(S.shape)}")
        S = S.to(torch.int64).reshape(B, H, W)
    P = P.contiguous()  # both paths take exp and log over the same layout (energy_potts.cpp)
    offsets = grid_offsets(2, connectivity)
    # the op sums the channels in order, as torch's sum does over at most 4 channels on the CPU (3 on CUDA)
    native = _NATIVE_POTTS and x.shape[1] <= (4 if P.device.type == "cpu" else 3) and _native_potts(P.device)
    if sigma is None or not native:
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError("image: expected finite pixel values, got NaN or infinite value(s)")
    if sigma is None:
        s = estimate_sigma(x.to(torch.float32))
    else:
        s = torch.full((B,), float(sigma), device=P.device)
    mult = [lam / math.sqrt(sum(v * v for v in o)) for o in offsets]
    info = {"solves": 0, "moves": 0, "cycles": 0, "trace": [], "scale": 1.0, "exact": False}
    if native:
        denom = (2 * s**2).view(B, 1).expand(B, len(offsets)).contiguous()
        if x.dtype not in (torch.float32, torch.float64, torch.uint8):
            x = x.to(torch.float32)
        if P.dtype not in (torch.float32, torch.float64):
            P = P.to(torch.float64)
        a, b, c, checks = torch.ops.torchcut.potts_energy(
            x, P, denom, mult, [v for o in offsets for v in o], PROB_FLOOR, S, C == 2
        )
        _potts_checks(checks, C)
        if C == 2:  # one exact cut of the energy's symmetric graph (energy_potts.cpp)
            return _solve_binary(a, b, c, offsets, backend, _refine_options(a.device, backend, offsets)).view(
                label_shape
            )
        E = _Energy._from_potts(a, b, c, float(checks[5]), connectivity)
    else:
        E = _refine_energy(x, P, S, s, mult, offsets, connectivity)
    info["scale"] = E.scale
    if C == 2:
        f = torch.zeros((B, H, W), dtype=torch.int64, device=P.device)
        take = _solve(E, f, [1], None, backend, info)[0]
        f = take.to(torch.int64)
    else:
        if schedule == "auto":
            schedule = _auto_schedule(E)
        warm = E.device.type == "cuda" if warm_start is None else bool(warm_start)
        f = _minimise(E, E.U.argmin(1), None, schedule, backend, info, warm)
    return f if batched else f[0]


# refine's energy through torch.ops.torchcut.potts_energy: one op of three passes over the pixels, the
# same integers as the tensor ops of _refine_energy (the reference, which the tests compare it with);
# for two classes it returns the graph itself. False: the tensor ops (tests, A/B).
_NATIVE_POTTS = True


def _native_potts(device: torch.device) -> bool:
    """Whether ``potts_energy`` runs on ``device`` (the compiled library loaded, with a kernel there)."""
    from . import _ops

    return _ops.has_kernels(device.type, "potts_energy")


def _potts_checks(checks: torch.Tensor, C: int, probs: str = "probs", image: str = "image") -> None:
    """Raise the errors of the tensor version from ``potts_energy``'s checks (the op's last output)."""
    bad_p, p_min, bad_x, lo, hi, _, failed = checks.tolist()[:7]
    if not failed:
        return
    if bad_p:
        raise ValueError(f"{probs}: expected finite values, got {int(bad_p)} NaN or infinite value(s)")
    if p_min < 0:
        raise ValueError(f"{probs}: expected non-negative probabilities, got minimum {p_min}")
    if bad_x:
        raise ValueError(f"{image}: expected finite pixel values, got NaN or infinite value(s)")
    raise ValueError(f"seeds: expected -1 (free) or a class in [0, {C - 1}], got values in [{int(lo)}, {int(hi)}]")


def _refine_options(device: torch.device, backend: str, offsets) -> dict:
    """The CPU solver options of refine's two-class cuts; none on other devices.

    8-connected images and volumes: auto's pick (pseudoflow there, 1.1-1.75x faster than
    Boykov-Kolmogorov). 4-connected images: Boykov-Kolmogorov, unless the op mirrors the graph (most
    pixels start on the source side, class 0: ``orient="auto-pseudoflow"``), where pseudoflow on the
    mirrored graph is 1.7-2.5x faster than Boykov-Kolmogorov; pseudoflow in the given orientation does not
    beat it on colour images (docs/performance.md, "refine and torchmaxflow's job on the CPU").
    torchmaxflow's graphs (:mod:`torchcut.compat.torchmaxflow`) keep auto's pick at every connectivity.
    """
    if device.type != "cpu" or backend not in ("auto", "cpu"):
        return {}
    if len(offsets) == 2 and len(offsets[0]) == 2:
        return {"algorithm": "boykov-kolmogorov", "orient": "auto-pseudoflow"}
    return {}


def _solve_binary(caps, source, sink, offsets, backend, options: dict | None = None) -> torch.Tensor:
    """int64 labels ``[B, *S]``: 1 on the sink side of the canonical minimum cut of a two-class graph
    (:func:`_source_side` of the same arguments, negated)."""
    return (~_source_side(caps, source, sink, offsets, backend, options)).to(torch.int64)


def _source_side(caps, source, sink, offsets, backend, options: dict | None = None) -> torch.Tensor:
    """bool ``[B, *S]``: the source side (class 0) of the canonical minimum cut of a two-class graph,
    solved by ``backend`` with its ``options`` (None: the backend's defaults). The graph is private, so
    the solver may use it up and write the mask alone (``consume_mask``); its terminals come netted
    (``potts_energy`` and its tensor reference net each node's pair), so they are not netted again."""
    from .energy import _grid_graph
    from .solvers._maxflow import _consume

    graph = _grid_graph(caps, source, sink, offsets, True)
    return _consume(graph, backend, True, dict(options or {}))


def _refine_energy(x, P, S, s, mult, offsets, connectivity) -> _Energy:
    """refine's energy in tensor ops (the reference of ``potts_energy``): -log of the probabilities and
    the contrast weights in float, quantised by :class:`_Energy`."""
    B = P.shape[0]
    bad = ~torch.isfinite(P)
    if bool(bad.any()):
        raise ValueError(f"probs: expected finite values, got {int(bad.sum())} NaN or infinite value(s)")
    if bool((P < 0).any()):
        raise ValueError(f"probs: expected non-negative probabilities, got minimum {P.min().item()}")
    x = x.to(torch.float32)
    wts = []
    for o, m in zip(offsets, mult):
        d2 = (x - shift(x, o, 0.0)).square().sum(1)  # [B, H, W]; outside pairs are zeroed later
        wts.append(torch.exp(-d2 / (2 * s.view(B, 1, 1) ** 2)) * m)
    Wt = torch.stack(wts, 1).to(torch.float64)
    U = -torch.log(P.to(torch.float64).clamp(min=PROB_FLOOR))
    if S is not None:
        C = P.shape[1]
        lo, hi = int(S.min()), int(S.max())
        if lo < -1 or hi >= C:
            raise ValueError(f"seeds: expected -1 (free) or a class in [0, {C - 1}], got values in [{lo}, {hi}]")
        # more than any labelling's pair terms at one pixel can save: a seeded pixel never moves
        hard = 1.0 + float(U.max()) + 2 * len(offsets) * float(Wt.max())
        cls = torch.arange(C, device=P.device).view(1, C, 1, 1)
        fixed = (S >= 0).unsqueeze(1)
        U = torch.where(fixed & (cls != S.unsqueeze(1)), hard, torch.where(fixed, 0.0, U))
    V = 1.0 - torch.eye(P.shape[1], dtype=torch.float64, device=P.device)
    return _Energy(U, V, Wt, connectivity)
