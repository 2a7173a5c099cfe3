"""Multi-label energies on any graph: alpha-expansion and alpha-beta swap, each move a FlowGraph cut.

Energy over labellings ``f`` of the ``N`` nodes of a graph with edges ``(u_e, v_e)``::

    E(f) = sum_p U[f_p, p] + sum_e w_e * V[f_{u_e}, f_{v_e}]

``U`` is the unary ``[L, N]`` (labels first, as the grid energies of :mod:`torchcut.multilabel` take
``[L, H, W]``), ``w`` the edge weights ``[E]`` (1 by default) and ``V`` either one ``[L, L]`` table for
every edge or one table per edge ``[E, L, L]``. This is the energy of GCO's general graphs
(superpixels, meshes, point clouds, region adjacency graphs); :mod:`torchcut.compat.gco` offers GCO's
own call, ``cut_general_graph``, with its ``[N, L]`` layout.

Expansion move (label alpha): every node keeps its label or takes alpha. With ``x_p = 1`` for "take
alpha", an edge's term is ``E00 = w V(f_u, f_v)``, ``E01 = w V(f_u, alpha)``, ``E10 = w V(alpha, f_v)``,
``E11 = 0``; as in Kolmogorov and Zabih's construction, ``-min(E00, E01)`` goes to u's terminal arcs,
``min(E01 - E00, 0)`` to v's, and the rest is the arc ``u -> v`` of capacity ``max(E01 - E00, 0)`` and
the arc ``v -> u`` of capacity ``E10 + min(E01 - E00, 0)``, non-negative when ``V`` is a metric. (This
pushes less flow through the terminals than one arc ``u -> v`` of capacity ``E01 + E10 - E00`` with
``E10`` on v's sink arc; the whole expansion measured up to 1.4x faster on it, docs/performance.md.)
No auxiliary nodes: the move is a :class:`torchcut.FlowGraph` on the graph's own nodes and edges, laid
out once; each move only writes new capacities into that layout (on the CPU in one compiled pass,
``torchcut/csrc/cpu/cpu_graph_moves.cpp``; elsewhere by tensor ops) and is solved in place by the CSR
backend of :func:`torchcut.maxflow`. Source side = keep the label, sink side = take alpha. The energy
after a move is read off the flow: ``E(new) = E(old) + flow - sum of the sink capacities``.

Swap move (labels alpha < beta): the nodes labelled alpha or beta choose between the two (source side
alpha, sink side beta); an edge between two of them is a pair of arcs of capacity ``w V(alpha, beta)``,
an edge to a fixed node a terminal cost. It needs only a semimetric (``V(a, a) = 0``, symmetric,
non-negative).

Exact integers, quantised floats
--------------------------------
When the unary, the tables and the weights are all integers the energy is solved exactly. Otherwise it
is quantised once, as on grids: the unary is shifted per node so that its minimum over labels is 0,
then every term is ``round(scale * value)`` with ``scale = 2**30 / (max U + 2 max_p D_p)``, ``D_p`` the
sum over the edges at ``p`` of ``w_e max V_e``, so that every capacity of every move stays below 2**30.
Each pair cost is rounded as a whole; a non-Potts table can then miss the triangle inequality by one
unit, a negative arc is raised to 0 and that move is kept only if it lowers the quantised energy
(computed in full then). Reported energies are those of the quantised energy, divided by ``scale``.

Schedules
---------
``"sequential"``: one move per solve, label after label (pair after pair for swap), until as many
moves in a row as there are labels (pairs) change nothing: a local minimum with respect to every
move. ``"batched"`` (expansion): the L moves of one labelling are one FlowGraph of ``L * N`` nodes,
solved at once, then applied greedily in label order, each kept only if it lowers the energy of the
current labelling; a round that keeps nothing ends the loop (same guarantee). ``"auto"``: batched on
CUDA while the batched graph holds at most 2**23 nodes (one kernel loop for L moves, as on grids; not
yet timed against sequential on general graphs), sequential on the CPU (the Boykov-Kolmogorov solver's
work grows with the graph).
"""

from __future__ import annotations

import numpy as np
import torch

from ._metric import _tensor as _metric_tensor
from ._validate import INT32_MAX, SUM_LIMIT, describe
from .graph import FlowGraph

__all__ = ["expansion", "swap", "labeling_energy", "check_edge_tables"]

#: Largest capacity of any move of a quantised float energy.
QUANT_RANGE = 2**30
#: "auto" takes the batched schedule on CUDA while one batched graph holds at most this many nodes.
AUTO_BATCHED_NODES = 1 << 23


# ---------------------------------------------------------------------------------------------- inputs
def _tensor(x, name: str, device=None) -> torch.Tensor:
    """A numeric tensor on ``device``: tensors must already be there, arrays and lists are moved
    (:func:`torchcut._metric._tensor`; empty ones allowed: a graph may have no edges)."""
    if isinstance(x, torch.Tensor) and device is not None and x.device != torch.device(device):
        raise ValueError(f"{name}: expected a tensor on {device} (the unary's device), got one on {x.device}")
    return _metric_tensor(x, name, device, empty_ok=True)


def _sorted(x: torch.Tensor) -> torch.Tensor:
    """Sorted copy of an int64 tensor (numpy's sort on the CPU)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.sort(x.numpy()))
    return torch.sort(x).values


def _stable_argsort(x: torch.Tensor, top: int) -> torch.Tensor:
    """Stable argsort of int64 values in ``[0, top)``. On the CPU: below ``2**32``, numpy's radix sort of
    16-bit keys, one pass per 16 bits from the lowest (each pass stable, so the order is; 0.2 ms a pass
    for 48,000 keys, against 1.6 ms for a comparison sort); else one value sort of ``(value, position)``
    packed into int64 when it fits (several times faster than numpy's stable argsort)."""
    n = x.numel()
    if x.device.type == "cpu" and top <= 1 << 32:
        return torch.from_numpy(_radix_argsort(x.numpy(), top))
    ibits = max(1, n.bit_length())
    if x.device.type == "cpu" and max(1, top).bit_length() + ibits <= 62:
        packed = (x << ibits) | torch.arange(n, dtype=torch.int64)
        return _sorted(packed) & ((1 << ibits) - 1)
    if x.device.type == "cpu":
        return torch.from_numpy(np.argsort(x.numpy(), kind="stable"))
    return torch.sort(x, stable=True).indices


def _radix_argsort(x: np.ndarray, top: int, order: np.ndarray | None = None) -> np.ndarray:
    """Stable argsort of the int64 values ``x`` in ``[0, top)``, ``top <= 2**32``, by 16-bit radix passes;
    ``order``: the positions to sort (the result of an earlier pass on other keys, whose order ties keep)."""
    for shift in range(0, max(1, (top - 1).bit_length()), 16):
        keys = ((x if order is None else x[order]) >> shift).astype(np.uint16)  # the low 16 bits of the shift
        step = np.argsort(keys, kind="stable")
        order = step if order is None else order[step]
    return order


#: Build CPU expansion moves with the compiled op (``torchcut/csrc/cpu/cpu_graph_moves.cpp``) when the CPU
#: library has it; False: the tensor ops everywhere (tests, A/B).
COMPILED_MOVES = True
_COMPILED = {}


def _compiled(device: torch.device, op: str) -> bool:
    """Whether the compiled CPU op ``torch.ops.torchcut.<op>`` runs for tensors on ``device``: the CPU,
    ``COMPILED_MOVES``, and a library built from these sources (an older build lacks the op)."""
    if not COMPILED_MOVES or device.type != "cpu":
        return False
    if op not in _COMPILED:
        from . import _ops

        _COMPILED[op] = _ops.has_kernels("cpu", op)
    return _COMPILED[op]


def _compiled_move(device: torch.device) -> bool:
    """Whether ``graph_expansion_move`` builds the moves on ``device``."""
    return _compiled(device, "graph_expansion_move")


def _compiled_energy(device: torch.device) -> bool:
    """Whether ``graph_labeling_energy`` evaluates labellings on ``device``."""
    return _compiled(device, "graph_labeling_energy")


def _fmt(v) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() else f"{v:g}"


def check_edge_tables(pairwise, *, metric: bool = True) -> None:
    """Raise ``ValueError`` unless every table of ``pairwise`` (``[E, L, L]``) is a (semi)metric.

    A semimetric: ``V[a, a] = 0`` and ``V[a, b] = V[b, a] >= 0``; a metric also obeys
    ``V[a, c] <= V[a, b] + V[b, c]``. The message names the first violating edge and labels.

    Parameters
    ----------
    pairwise : tensor or array ``[E, L, L]``
    metric : bool
        Check the triangle inequality too (what expansion moves need; swap moves do not).

    Examples
    --------
    >>> import torch
    >>> V = torch.stack([1 - torch.eye(3), torch.tensor([[0., 1, 3], [1, 0, 1], [3, 1, 0]])])
    >>> check_edge_tables(V, metric=False)
    >>> check_edge_tables(V)
    Traceback (most recent call last):
    ...
    ValueError: pairwise: expected a metric on every edge, got pairwise[1, 0, 2] = 3 > pairwise[1, 0, 1] + pairwise[1, 1, 2] = 2
    """
    V = _tensor(pairwise, "pairwise")
    if V.dim() != 3 or V.shape[1] != V.shape[2]:
        raise ValueError(f"pairwise: expected per-edge tables of shape [E, L, L], got shape {tuple(V.shape)}")
    V = V.detach().to("cpu", torch.float64 if V.is_floating_point() else torch.int64)
    E, L = V.shape[0], V.shape[1]
    if E == 0:
        return
    tol = 1e-9 * float(V.abs().max()) if V.is_floating_point() else 0.0
    neg = (V < 0).nonzero()
    if len(neg):
        e, a, b = neg[0].tolist()
        raise ValueError(f"pairwise: expected non-negative costs, got pairwise[{e}, {a}, {b}] = {_fmt(V[e, a, b])}")
    diag = (V.diagonal(dim1=1, dim2=2) != 0).nonzero()
    if len(diag):
        e, a = diag[0].tolist()
        raise ValueError(
            f"pairwise: expected zero cost for equal labels, got pairwise[{e}, {a}, {a}] = {_fmt(V[e, a, a])}"
        )
    asym = ((V - V.transpose(1, 2)).abs() > tol).nonzero()
    if len(asym):
        e, a, b = asym[0].tolist()
        raise ValueError(
            f"pairwise: expected symmetric tables, got pairwise[{e}, {a}, {b}] = {_fmt(V[e, a, b])} but "
            f"pairwise[{e}, {b}, {a}] = {_fmt(V[e, b, a])}"
        )
    if not metric:
        return
    for a in range(L):  # [E, b, c]: V[e, a, c] - V[e, a, b] - V[e, b, c], one label a at a time
        excess = V[:, a, None, :] - (V[:, a, :, None] + V)
        bad = (excess > tol).nonzero()
        if len(bad):
            e, b, c = bad[0].tolist()
            raise ValueError(
                f"pairwise: expected a metric on every edge, got pairwise[{e}, {a}, {c}] = "
                f"{_fmt(V[e, a, c])} > pairwise[{e}, {a}, {b}] + pairwise[{e}, {b}, {c}] = "
                f"{_fmt(V[e, a, b] + V[e, b, c])}"
            )


def _check_table(V: torch.Tensor, metric: bool) -> None:
    from ._metric import check_metric

    L = V.shape[0]
    if L <= 64:  # one vectorised test first (L^3 values); the messages come from the full checks
        W = V.detach().to("cpu", torch.float64)
        tol = 1e-9 * float(W.abs().max()) if V.is_floating_point() and L else 0.0
        ok = bool((W >= 0).all()) and bool((W.diagonal() == 0).all()) and bool(((W - W.T).abs() <= tol).all())
        if ok and metric:
            ok = bool((W[:, None, :] - (W[:, :, None] + W[None]) <= tol).all())
        if ok:
            return
    if metric:
        check_metric(V)
        return
    check_edge_tables(V.unsqueeze(0), metric=False)


def _edges_in(edges, N: int, device) -> torch.Tensor:
    e = _tensor(edges, "edges", device)
    if e.is_floating_point():
        raise TypeError(f"edges: expected integer node indices, got {describe(e)}")
    if e.numel() == 0:
        e = e.reshape(0, 2)
    if e.dim() != 2 or e.shape[1] != 2:
        raise ValueError(f"edges: expected shape [E, 2] (one row of two node indices per edge), got {tuple(e.shape)}")
    e = e.to(torch.int64)
    if e.shape[0]:
        out = (e < 0) | (e >= N)
        if bool(out.any()):
            bad = out.nonzero()
            i, j = bad[0].tolist()
            raise ValueError(
                f"edges: expected node indices in [0, {N}) (unary is [L, N] with N = {N} nodes; GCO's "
                f"[N, L] layout is unary.T), got edges[{i}, {j}] = {int(e[i, j])}"
            )
        same = e[:, 0] == e[:, 1]
        if bool(same.any()):
            loop = same.nonzero()
            i = int(loop[0])
            raise ValueError(
                f"edges: expected two different nodes per edge, got a self-loop edges[{i}] = "
                f"({int(e[i, 0])}, {int(e[i, 1])})"
            )
    return e


class _GraphEnergy:
    """A validated energy on one device and the FlowGraph layout its moves share.

    ``U`` ``[L, N]`` quantised unary (int64), ``pair(e, a, b)`` the quantised pair cost of edges with
    labels ``a`` at ``u`` and ``b`` at ``v`` (int64, broadcast), ``exact_moves``: expansion arcs can never
    be negative (integer energies, or a Potts table).
    """

    def __init__(self, unary, pairwise, edges, edge_weights, metric: bool = True):
        U = _tensor(unary, "unary")
        device = U.device
        if U.dim() != 2:
            raise ValueError(
                f"unary: expected shape [L, N] (labels first; GCO's [N, L] layout is unary.T), got {tuple(U.shape)}"
            )
        L, N = U.shape
        if L < 1 or N < 1:
            raise ValueError(f"unary: expected at least one label and one node, got shape {tuple(U.shape)}")
        ed = _edges_in(edges, N, device)
        E = ed.shape[0]
        if edge_weights is None:
            w = torch.ones(E, dtype=torch.int64, device=device)
        else:
            w = _tensor(edge_weights, "edge_weights", device)
            if tuple(w.shape) != (E,):
                raise ValueError(
                    f"edge_weights: expected shape [E] = ({E},) (one weight per row of edges), got {tuple(w.shape)}"
                )
            below = w < 0
            if bool(below.any()):
                neg = below.nonzero()
                i = int(neg[0])
                raise ValueError(f"edge_weights: expected non-negative weights, got edge_weights[{i}] = {_fmt(w[i])}")
        V = _tensor(pairwise, "pairwise", device)
        if tuple(V.shape) == (L, L):
            self.per_edge = False
            _check_table(V, metric)
        elif tuple(V.shape) == (E, L, L):
            self.per_edge = True
            check_edge_tables(V, metric=metric)
        else:
            raise ValueError(
                f"pairwise: expected shape [L, L] = ({L}, {L}) or per-edge [E, L, L] = ({E}, {L}, {L}) "
                f"for the unary's {L} labels and the {E} edges, got {tuple(V.shape)}"
            )
        self.L, self.N, self.E, self.device = L, N, E, device
        self.u, self.v = ed[:, 0].contiguous(), ed[:, 1].contiguous()
        self.exact = not (U.is_floating_point() or V.is_floating_point() or w.is_floating_point())
        dt = torch.int64 if self.exact else torch.float64
        U, V, w = U.to(dt), V.to(dt), w.to(dt)
        low = U.amin(0)
        self.offset = float(low.sum())
        U = U - low
        if self.per_edge:
            vmax = V.reshape(E, L * L).amax(1) if E else V.new_zeros(0)
        else:
            vmax = V.max().expand(E)
        top_pair = w * vmax  # largest pair cost of each edge
        D = torch.zeros(N, dtype=dt, device=device)
        if E:
            D.index_add_(0, self.u, top_pair).index_add_(0, self.v, top_pair)
        umax, dmax, pmax, psum = (
            torch.stack([U.max(), D.max(), top_pair.max() if E else D.max() * 0, top_pair.sum()])
            .to(torch.float64)
            .tolist()
        )
        if self.exact:
            self.scale = 1.0
            total = float(U.amax(0).sum()) + psum
            if total >= SUM_LIMIT:
                raise ValueError(
                    f"unary: the energy of one labelling can reach {int(total)}, at or above 2**62; "
                    "int64 energies could overflow. Scale the energy down."
                )
            peak = max(umax + dmax, 2 * pmax)
            self.U = U
            Wq = w
        else:
            top = umax + 2 * dmax
            self.scale = QUANT_RANGE / top if top > 0 else 1.0
            self.U = torch.round(U * self.scale).to(torch.int64)
            Wq = w * self.scale
            peak = QUANT_RANGE
        # int32 capacities on the CPU when they fit (half the memory traffic); int64 on CUDA, where the CSR
        # kernels work in int64 and would otherwise convert and copy back every move
        self.cap_dtype = torch.int32 if peak <= INT32_MAX and device.type != "cuda" else torch.int64
        # Potts (one cost c off the diagonal): each edge's pair cost is one integer, P_e = round(w_e c)
        Vh = V.cpu()
        self.potts = False
        if not self.per_edge and L > 1:
            off = Vh[~torch.eye(L, dtype=torch.bool)]
            self.potts = bool((Vh.diagonal() == 0).all()) and bool((off == off[0]).all())
        if self.potts:
            c = off[0].item()
            self.P = (Wq * c if self.exact else torch.round(Wq * c)).to(torch.int64).contiguous()
        self.U = self.U.contiguous()  # (a transposed unary gives transposed strides)
        self.Wq = Wq.contiguous()
        self.Vflat = V.reshape(-1).contiguous()
        self.ebase = (torch.arange(E, device=device) * (L * L)) if self.per_edge else None
        self.exact_moves = self.exact or self.potts
        self._layout = None
        self._batched = {}
        self.impl = {}  # backend name -> CSR solver module
        self.idx32 = {}  # CUDA: nodes of a move graph -> its int32 row_ptr, head, rev

    # -------------------------------------------------------------------------------- energy terms
    def pair(self, a: torch.Tensor, b) -> torch.Tensor:
        """Quantised int64 cost of every edge with labels ``a`` at u and ``b`` at v (``[..., E]``)."""
        if self.potts:
            return torch.where(a != b, self.P, 0)
        idx = a * self.L + b
        if self.per_edge:
            idx = idx + self.ebase
        v = self.Vflat[idx]
        if self.exact:
            return self.Wq * v
        return torch.round(self.Wq * v).to(torch.int64)

    @property
    def op_pairs(self):
        """``(W, mode)``: the pair costs as the compiled ops take them (cpu_graph_moves.cpp): the Potts
        costs (mode 0), or the weights of an integer (1) or float (2) table."""
        return (self.P, 0) if self.potts else (self.Wq, 1 if self.exact else 2)

    def energy(self, f: torch.Tensor) -> torch.Tensor:
        """int64 quantised energies of labellings ``f`` ``[..., N]`` (shape ``[...]``)."""
        lead = f.shape[:-1]
        if not lead and _compiled_energy(self.device):  # one pass (cpu/cpu_graph_moves.cpp), the same integer
            W, mode = self.op_pairs
            return torch.ops.torchcut.graph_labeling_energy(self.U, f.contiguous(), self.u, self.v, W, self.Vflat, mode)
        if not lead:  # one labelling: index_select (several times faster than [] indexing on the CPU)
            un = self.U.gather(0, f.view(1, -1)).sum()
            if not self.E:
                return un
            return un + self.pair(f.index_select(0, self.u), f.index_select(0, self.v)).sum()
        Ux = self.U.expand(lead + self.U.shape)
        un = Ux.gather(-2, f.unsqueeze(-2)).squeeze(-2).sum(-1)
        if not self.E:
            return un
        return un + self.pair(f[..., self.u], f[..., self.v]).sum(-1)

    def to_units(self, e) -> float:
        return float(e) / self.scale + self.offset

    # -------------------------------------------------------------------------------- move layout
    def layout(self):
        """``(template, arc_uv, arc_vu, perm)``: the moves' FlowGraph layout (capacities 0), the CSR
        index of each edge's arcs ``u -> v`` and ``v -> u``, and ``perm`` (``[2E]``, or None when edges
        repeat) such that ``cat([cap_uv, cap_vu])[perm]`` are the CSR capacities.

        Without repeated edges (either orientation) every edge is its own arc pair: the CSR is one
        stable sort of the ``2E`` arcs by tail. Repeated edges go through
        :meth:`torchcut.FlowGraph.from_edges`, which merges them; their capacities are then added up.
        """
        if self._layout is None:
            N, E, dev = self.N, self.E, self.device
            u, v = self.u, self.v
            lo, hi = torch.minimum(u, v), torch.maximum(u, v)
            if dev.type == "cpu" and N <= 1 << 32:  # (lo, hi) in order: by hi, then by lo, radix passes
                a, b = lo.numpy(), hi.numpy()
                order = _radix_argsort(a, N, _radix_argsort(b, N))
                repeated = bool(((a[order[1:]] == a[order[:-1]]) & (b[order[1:]] == b[order[:-1]])).any())
            else:
                key = _sorted(lo * N + hi)
                repeated = bool((key[1:] == key[:-1]).any()) if E > 1 else False
            if repeated:
                one = torch.ones(E, dtype=torch.int64, device=dev)
                g = FlowGraph.from_edges(u, v, one, one, num_nodes=N)
                pk = g.tail[g.pair_fwd] * N + g.head[g.pair_fwd]  # pairs as (lo, hi)
                order = torch.argsort(pk)
                pair = order[torch.searchsorted(pk[order], lo * N + hi)]
                forward = u < v
                arc_uv = torch.where(forward, g.pair_fwd[pair], g.pair_bwd[pair])
                arc_vu = torch.where(forward, g.pair_bwd[pair], g.pair_fwd[pair])
                perm = None
            else:
                tails = torch.cat([u, v])
                heads = torch.cat([v, u])
                perm = _stable_argsort(tails, N)  # CSR position -> arc (k: u_k -> v_k, E + k: v_k -> u_k)
                # (scatter_ and index_select: 3-4x faster than [] indexing on the CPU, the same values)
                inv = torch.empty_like(perm).scatter_(0, perm, torch.arange(2 * E, device=dev))
                arc_uv, arc_vu = inv[:E], inv[E:]
                g = object.__new__(FlowGraph)
                g.node_ids, g.terminal_ids, g.id_base = None, None, 0
                g.scale, g.is_float = None, False
                g.row_ptr = torch.zeros(N + 1, dtype=torch.int64, device=dev)
                g.row_ptr[1:] = torch.cumsum(torch.bincount(tails, minlength=N), 0)
                g.tail, g.head = tails.index_select(0, perm), heads.index_select(0, perm)
                g.rev = torch.cat([arc_vu, arc_uv]).index_select(0, perm)
                forward = u < v
                g.pair_fwd = torch.where(forward, arc_uv, arc_vu)
                g.pair_bwd = torch.where(forward, arc_vu, arc_uv)
                g.caps = torch.zeros(2 * E, dtype=self.cap_dtype, device=dev)
                g.source = torch.zeros(1, N, dtype=torch.int64, device=dev)
                g.sink = torch.zeros(1, N, dtype=self.cap_dtype, device=dev)
                g.num_nodes = N
                g._lattice = None
            if dev.type == "cuda":
                g.lattice_shape()  # cached on the template (the CUDA dispatch routes lattices to the grid solver)
            self._layout = (g, arc_uv, arc_vu, perm)
        return self._layout

    def batched_layout(self, M: int):
        """``(template, offsets)``: M disjoint copies of :meth:`layout`'s graph as one FlowGraph, and
        ``A * arange(M)`` (copy m's arcs are ``m * A + a``)."""
        if M not in self._batched:
            g = self.layout()[0]
            N, A = self.N, g.num_arcs
            dev = self.device
            ar = torch.arange(M, device=dev)
            big = object.__new__(FlowGraph)
            big.__dict__.update(g.__dict__)
            big.row_ptr = torch.cat([g.row_ptr[:1], (g.row_ptr[1:].unsqueeze(0) + A * ar.unsqueeze(1)).reshape(-1)])
            shift_n = (N * ar).repeat_interleave(A)
            shift_a = (A * ar).repeat_interleave(A)
            big.head = g.head.repeat(M) + shift_n
            big.tail = g.tail.repeat(M) + shift_n
            big.rev = g.rev.repeat(M) + shift_a
            P = g.num_pairs
            big.pair_fwd = g.pair_fwd.repeat(M) + (A * ar).repeat_interleave(P)
            big.pair_bwd = g.pair_bwd.repeat(M) + (A * ar).repeat_interleave(P)
            big.caps = g.caps.repeat(M)
            big.source, big.sink = g.source.repeat(1, M), g.sink.repeat(1, M)
            big.num_nodes = M * N
            big._lattice = False
            self._batched = {M: (big, A * ar)}
        return self._batched[M]

    def graph(self, caps: torch.Tensor, source: torch.Tensor, sink: torch.Tensor) -> FlowGraph:
        """The FlowGraph of one move (or of M moves, :meth:`batched_layout`) from its capacities, sharing
        the template's layout."""
        N = source.numel()
        template = self.layout()[0] if N == self.N else self.batched_layout(N // self.N)[0]
        g = object.__new__(FlowGraph)
        g.__dict__.update(template.__dict__)
        g.caps = caps.reshape(-1)
        g.source = source.reshape(1, -1)
        g.sink = sink.reshape(1, -1)
        return g

    # -------------------------------------------------------------------------------- moves
    def _caps(self, both: torch.Tensor, perm, arc_uv, arc_vu, A: int) -> torch.Tensor:
        """CSR capacities ``[M, A]`` from ``both`` ``[M, 2E]`` (``cat([cap_uv, cap_vu])`` per move)."""
        both = both.to(self.cap_dtype)
        if perm is not None:
            return both.index_select(1, perm)
        caps = torch.zeros((both.shape[0], A), dtype=self.cap_dtype, device=self.device)
        return caps.index_add_(1, torch.cat([arc_uv, arc_vu]), both)

    def expansion_moves(self, f: torch.Tensor, alphas: torch.Tensor):
        """Capacities of the expansion moves ``alphas`` (int64 ``[M]``) from labels ``f`` ``[N]``.

        Returns ``(caps [M, A], source [M, N], sink [M, N], clamped)``: ``clamped`` (a 0-dim bool
        tensor, or None when it cannot happen) tells whether a rounded arc came out negative.
        """
        g, arc_uv, arc_vu, perm = self.layout()
        M = alphas.numel()
        if M == 1 and self.E and _compiled_move(self.device):  # one pass (cpu_graph_moves.cpp)
            W, mode = self.op_pairs
            caps, source, sink, clamped = torch.ops.torchcut.graph_expansion_move(
                self.U,
                f,
                self.u,
                self.v,
                arc_uv,
                arc_vu,
                W,
                self.Vflat,
                int(alphas[0]),
                -1,
                mode,
                g.num_arcs,
                self.cap_dtype == torch.int64,
            )
            return caps.view(1, -1), source.view(1, -1), sink.view(1, -1), None if self.exact_moves else clamped[0] > 0
        a = alphas.view(M, 1)
        delta = self.U.index_select(0, alphas) - self.U.gather(0, f.view(1, -1))  # take - keep, [M, N]
        clamped = None
        if not self.E:
            caps = torch.zeros((M, 0), dtype=self.cap_dtype, device=self.device)
        else:
            fu, fv = f.index_select(0, self.u), f.index_select(0, self.v)
            e00 = self.pair(fu, fv)  # [E]
            e01 = self.pair(fu, a)  # [M, E]: u keeps, v takes alpha
            e10 = self.pair(a, fv)  # u takes alpha, v keeps
            b = e01 - e00  # E01 - E00: the arc u -> v where positive, else a terminal term
            low = b.clamp(max=0)
            delta.index_add_(1, self.u, torch.minimum(e00, e01).neg_()).index_add_(1, self.v, low)
            fwd, bwd = b.clamp_(min=0), e10.add_(low)  # bwd: E10 + min(E01 - E00, 0)
            if not self.exact_moves:
                clamped = (bwd < 0).any()
                bwd.clamp_(min=0)
            caps = self._caps(torch.cat([fwd, bwd], 1), perm, arc_uv, arc_vu, g.num_arcs)
        source = delta.clamp(min=0)
        sink = delta.neg_().clamp_(min=0)
        return caps, source, sink.to(self.cap_dtype), clamped

    def swap_move(self, f: torch.Tensor, alpha: int, beta: int):
        """Capacities ``(caps [A], source [N], sink [N], var [N])`` of the swap move of ``alpha`` and
        ``beta`` (source side alpha, sink side beta) from labels ``f``."""
        g, arc_uv, arc_vu, perm = self.layout()
        var = (f == alpha) | (f == beta)
        if self.E and _compiled_move(self.device):  # one pass (cpu_graph_moves.cpp)
            W, mode = self.op_pairs
            caps, source, sink, _ = torch.ops.torchcut.graph_expansion_move(
                self.U,
                f,
                self.u,
                self.v,
                arc_uv,
                arc_vu,
                W,
                self.Vflat,
                alpha,
                beta,
                mode,
                g.num_arcs,
                self.cap_dtype == torch.int64,
            )
            return caps, source, sink, var
        delta = torch.where(var, self.U[beta] - self.U[alpha], 0)  # cost of beta - cost of alpha
        caps = torch.zeros(g.num_arcs, dtype=self.cap_dtype, device=self.device)
        if self.E:
            fu, fv = f.index_select(0, self.u), f.index_select(0, self.v)
            vu, vv = var.index_select(0, self.u), var.index_select(0, self.v)
            A = torch.full_like(fu, alpha)
            B = torch.full_like(fu, beta)
            du = torch.where(vu & ~vv, self.pair(B, fv) - self.pair(A, fv), 0)
            dv = torch.where(vv & ~vu, self.pair(fu, B) - self.pair(fu, A), 0)
            delta.index_add_(0, self.u, du).index_add_(0, self.v, dv)
            c = torch.where(vu & vv, self.pair(A, B), 0)
            caps = self._caps(torch.cat([c, c]).unsqueeze(0), perm, arc_uv, arc_vu, g.num_arcs)[0]
        source = delta.clamp(min=0)
        sink = delta.neg_().clamp_(min=0).to(self.cap_dtype)
        return caps, source, sink, var


# ---------------------------------------------------------------------------------------------- public
def _labels_in(init, G: _GraphEnergy) -> torch.Tensor:
    if init is None:
        if G.device.type == "cpu":  # along contiguous rows: 0.23 against 1.3 ms at 10,000 nodes, 6 labels
            return G.U.t().contiguous().argmin(1)
        return G.U.argmin(0)
    if isinstance(init, (int, np.integer)) and not isinstance(init, bool):
        if not 0 <= int(init) < G.L:
            raise ValueError(f"init: expected a label in [0, {G.L - 1}], got {init}")
        return torch.full((G.N,), int(init), dtype=torch.int64, device=G.device)
    f = _tensor(init, "init", G.device)
    if f.is_floating_point():
        raise TypeError(f"init: expected integer labels, got {describe(f)}")
    if tuple(f.shape) != (G.N,):
        raise ValueError(f"init: expected labels of shape [N] = ({G.N},), got {tuple(f.shape)}")
    lo, hi = int(f.min()), int(f.max())
    if lo < 0 or hi >= G.L:
        raise ValueError(f"init: expected labels in [0, {G.L - 1}], got values in [{lo}, {hi}]")
    return f.to(torch.int64).clone()


def _check_common(schedule, max_iter, choices, backend):
    from .solvers import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if schedule not in choices:
        raise ValueError(f"schedule: expected one of {choices}, got {schedule!r}")
    if max_iter is not None and (
        isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0
    ):
        raise ValueError(f"max_iter: expected a non-negative int or None, got {max_iter!r}")


def _solve(G: _GraphEnergy, caps, source, sink, backend, info):
    """Solve a move's FlowGraph (or a batch of moves'), using up its capacity tensors.

    Returns the source side ``[n]`` (True: keep) and the residual sink capacities ``[n]``. The CSR
    backend of :func:`torchcut.maxflow` (Boykov-Kolmogorov on the CPU, the CSR kernels on CUDA) runs in
    place on the move's own tensors; a lattice on CUDA goes through :func:`torchcut.maxflow` to the grid
    solver.
    """
    from .solvers import maxflow
    from .solvers._backends import CSR

    info["solves"] += 1
    g = G.graph(caps, source, sink)
    impl = G.impl.get(backend)
    if impl is None:  # picked once per energy (the pick checks the library each time)
        impl = G.impl[backend] = CSR(G.device, backend)
    if g._lattice and impl.route_lattices:
        r = maxflow(g, backend=backend)
        return r.node_mask[0], g.sink[0].to(torch.int64) - r.sink_flow[0]
    row_ptr, head, rev = g.row_ptr, g.head, g.rev
    if g.device.type == "cuda":  # the CSR kernels take int32 indices: convert the layout once, not every move
        idx = G.idx32.get(g.num_nodes)
        if idx is None:
            idx = G.idx32[g.num_nodes] = tuple(t.to(torch.int32) for t in (row_ptr, head, rev))
        row_ptr, head, rev = idx
    mask, _ = impl.solve_csr(row_ptr, head, g.tail, rev, g.caps, g.source[0], g.sink[0])
    return mask, g.sink[0]


def expansion(
    unary,
    pairwise,
    edges,
    edge_weights=None,
    *,
    init=None,
    max_iter=None,
    schedule: str = "auto",
    backend: str = "auto",
    return_result: bool = False,
):
    """Minimise a multi-label energy on a graph with alpha-expansion moves, each a FlowGraph cut.

    What ``torchcut.expansion(unary, pairwise, edges=..., edge_weights=...)`` runs. The energy is
    ``sum_p unary[f_p, p] + sum_e edge_weights[e] * pairwise[f_u, f_v]`` (module docstring). The
    unary is labels-first, ``[L, N]``, as for grids (``[L, H, W]``): a user of GCO's
    ``cut_general_graph`` passes its ``[N, L]`` unary transposed, or calls
    :func:`torchcut.compat.gco.cut_general_graph`, which takes GCO's arguments as they are.

    Parameters
    ----------
    unary : tensor or array ``[L, N]``
        Cost of each label at each node. Integer or float.
    pairwise : tensor or array ``[L, L]`` or ``[E, L, L]``
        A metric shared by all edges (Potts ``1 - eye(L)``, truncated linear ``min(|a - b|, t)``), or one
        metric per edge. Anything else raises ``ValueError`` naming a violating entry.
    edges : integer tensor or array ``[E, 2]``
        The edges ``(u, v)``, 0-based node indices, either order; repeated edges add up. Self-loops and
        indices outside ``[0, N)`` raise ``ValueError``.
    edge_weights : tensor or array ``[E]``, optional
        Non-negative multipliers of each edge's pair cost; 1 by default.
    init : int or integer tensor ``[N]``, optional
        Starting labels; default the per-node argmin of the unary.
    max_iter : int, optional
        Stop after this many cycles (L moves each, or one batched solve). Default: until a local
        minimum with respect to expansion moves.
    schedule : {"auto", "sequential", "batched"}
        Module docstring.
    backend : str
        Passed to :func:`torchcut.maxflow` ("cpu": Boykov-Kolmogorov, "cuda": the CSR kernels).
    return_result : bool
        Also return a dict: ``energy`` (final energy in the input's units, of the quantised energy for
        floats), ``energies`` (after every move, never increasing), ``solves``, ``moves``, ``cycles``,
        ``scale``, ``exact``, ``schedule``.

    Returns
    -------
    torch.Tensor
        int64 labels ``[N]`` on the unary's device (and the info dict).

    Examples
    --------
    >>> import torch, torchcut
    >>> unary = torch.tensor([[0, 0, 9, 9], [9, 9, 0, 1], [9, 9, 9, 0]])   # 3 labels, 4 nodes
    >>> edges = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]])             # a cycle
    >>> torchcut.expansion(unary, 5 * (1 - torch.eye(3, dtype=torch.int64)), edges=edges)
    tensor([0, 0, 1, 1])
    """
    G = _GraphEnergy(unary, pairwise, edges, edge_weights, metric=True)
    _check_common(schedule, max_iter, ("auto", "sequential", "batched"), backend)
    if schedule == "auto":
        schedule = "batched" if G.device.type == "cuda" and G.L * G.N <= AUTO_BATCHED_NODES else "sequential"
    f = _labels_in(init, G)
    info = {"solves": 0, "moves": 0, "cycles": 0, "scale": G.scale, "exact": G.exact, "schedule": schedule}
    e = int(G.energy(f))
    energies = [e]
    if G.L > 1:
        if schedule == "sequential":
            f, e = _expansion_sequential(G, f, e, max_iter, backend, info, energies)
        else:
            f, e = _expansion_batched(G, f, e, max_iter, backend, info, energies)
    if not return_result:
        return f
    info["energies"] = [G.to_units(x) for x in energies]
    info["energy"] = info["energies"][-1]
    return f, info


def _cpu_backend(G: _GraphEnergy, backend: str) -> bool:
    """Whether ``backend`` solves ``G``'s moves by the compiled CPU solver (the pick kept on ``G``)."""
    from .solvers._backends import CSR

    impl = G.impl.get(backend) or G.impl.setdefault(backend, CSR(G.device, backend))
    return impl.name == "cpu"


def _cpu_moves(G: _GraphEnergy, backend: str):
    """A move function ``alpha, f -> (mask, residual sink, clamped)`` built and solved by the two compiled
    CPU ops (cpu_graph_moves.cpp, then Boykov-Kolmogorov on the move's CSR layout) with no tensor op
    between them, or None where that path does not apply (CUDA, another backend, an older build)."""
    if not (G.E and _compiled_move(G.device) and _cpu_backend(G, backend)):
        return None
    g, arc_uv, arc_vu, _ = G.layout()
    W, mode = G.op_pairs
    wide = G.cap_dtype == torch.int64
    ops = torch.ops.torchcut

    def move(alpha: int, f: torch.Tensor):
        caps, source, sink, clamped = ops.graph_expansion_move(
            G.U, f, G.u, G.v, arc_uv, arc_vu, W, G.Vflat, alpha, -1, mode, g.num_arcs, wide
        )
        mask, _ = ops.csr_solve_(g.row_ptr, g.head, g.rev, caps, source, sink, [])
        return mask, sink, None if G.exact_moves else clamped[0] > 0

    return move


def _cpu_swaps(G: _GraphEnergy, backend: str):
    """A swap function ``alpha, beta, f, e -> (labels, energy)`` on the CPU, or None where it does not
    apply (CUDA, another backend, an older build): each move is built on the subgraph of the nodes
    labelled alpha or beta (``graph_swap_move``) and cut by Boykov-Kolmogorov, and the energy of the
    result is the energy before plus the minimum cut minus the cut of the current labelling (the move's
    cuts are the energy up to a constant), so no pass over the whole graph follows a move. The labels
    are those of the whole-graph move: the mask is the canonical cut either way."""
    if not (G.E and _compiled(G.device, "graph_swap_move") and _cpu_backend(G, backend)):
        return None
    W, mode = G.op_pairs
    wide = G.cap_dtype == torch.int64
    ops = torch.ops.torchcut

    def swap(alpha: int, beta: int, f: torch.Tensor, e: int):
        ids, row_ptr, head, rev, caps, source, sink, cut0 = ops.graph_swap_move(
            G.U, f, G.u, G.v, W, G.Vflat, alpha, beta, mode, wide
        )
        if not ids.numel():
            return f, e
        left = sink.clone()
        mask, _ = ops.csr_solve_(row_ptr, head, rev, caps, source, left, [])
        flow = int((sink.to(torch.int64) - left).sum())
        e_new = e + flow - int(cut0)
        if e_new >= e:
            return f, e_new
        cand = f.clone()
        cand.index_copy_(0, ids, torch.where(mask, alpha, beta))
        return cand, e_new

    return swap


def _expansion_sequential(G: _GraphEnergy, f, e, max_iter, backend, info, energies):
    alphas = torch.arange(G.L, device=G.device)
    fast = _cpu_moves(G, backend)
    quiet = 0  # moves in a row that changed nothing
    while quiet < G.L and (max_iter is None or info["cycles"] < max_iter):
        info["cycles"] += 1
        for alpha in range(G.L):
            if fast is not None:
                mask, residual, clamped = fast(alpha, f)
                info["solves"] += 1
            else:
                caps, source, sink, clamped = G.expansion_moves(f, alphas[alpha : alpha + 1])
                mask, residual = _solve(G, caps, source, sink, backend, info)
            info["moves"] += 1
            if clamped is None or not bool(clamped):
                # exact representation: E(new) = E(old) + cut(new) - cut(keep everything)
                # = E(old) + flow - sum of the sink capacities = E(old) - sum of the residual ones
                e_new = e - int(residual.sum(dtype=torch.int64))
                cand = None
            else:
                cand = torch.where(mask, f, alpha)
                e_new = int(G.energy(cand))
            if e_new < e:
                f = torch.where(mask, f, alpha) if cand is None else cand
                e = e_new
                quiet = 0
            else:
                quiet += 1
            energies.append(e)
            if quiet >= G.L:
                break
    return f, e


def _expansion_batched(G: _GraphEnergy, f, e, max_iter, backend, info, energies):
    alphas = torch.arange(G.L, device=G.device)
    while max_iter is None or info["cycles"] < max_iter:
        info["cycles"] += 1
        caps, source, sink, _ = G.expansion_moves(f, alphas)
        mask, _ = _solve(G, caps, source, sink, backend, info)
        info["moves"] += G.L
        take = ~mask.view(G.L, G.N)
        e_start = e
        for alpha in range(G.L):
            cand = torch.where(take[alpha], alpha, f)
            e_new = int(G.energy(cand))
            if e_new < e:
                f, e = cand, e_new
            energies.append(e)
        if e >= e_start:
            break
    return f, e


def swap(
    unary,
    pairwise,
    edges,
    edge_weights=None,
    *,
    init=None,
    max_iter=None,
    backend: str = "auto",
    return_result: bool = False,
):
    """Minimise a multi-label energy on a graph with alpha-beta swap moves, each a FlowGraph cut.

    Same energy and arguments as :func:`expansion` (GCO's ``algorithm="swap"``), but the tables need
    only be semimetrics (``V[a, a] = 0``, symmetric, non-negative): a move lets the nodes labelled
    alpha or beta exchange the two labels. One cycle is the ``L (L - 1) / 2`` pairs in order; the
    loop ends when that many moves in a row change nothing (a local minimum with respect to swap
    moves) or after ``max_iter`` cycles.

    Parameters
    ----------
    unary, pairwise, edges, edge_weights, init, max_iter, backend, return_result
        As for :func:`expansion`.

    Returns
    -------
    torch.Tensor
        int64 labels ``[N]`` (and the info dict, as for :func:`expansion`).

    Examples
    --------
    >>> import torch
    >>> unary = torch.tensor([[0, 4, 0], [5, 1, 5]])            # 2 labels on a path of 3 nodes
    >>> swap(unary, torch.tensor([[0, 3], [3, 0]]), torch.tensor([[0, 1], [1, 2]]))
    tensor([0, 0, 0])
    """
    G = _GraphEnergy(unary, pairwise, edges, edge_weights, metric=False)
    _check_common("sequential", max_iter, ("sequential",), backend)
    f = _labels_in(init, G)
    info = {"solves": 0, "moves": 0, "cycles": 0, "scale": G.scale, "exact": G.exact, "schedule": "sequential"}
    e = int(G.energy(f))
    energies = [e]
    pairs = [(a, b) for a in range(G.L) for b in range(a + 1, G.L)]
    fast = _cpu_swaps(G, backend)
    quiet = 0
    while pairs and quiet < len(pairs) and (max_iter is None or info["cycles"] < max_iter):
        info["cycles"] += 1
        for a, b in pairs:
            if fast is not None:
                cand, e_new = fast(a, b, f, e)
                info["solves"] += 1
            else:
                caps, source, sink, var = G.swap_move(f, a, b)
                mask, _ = _solve(G, caps, source, sink, backend, info)
                cand = torch.where(var, torch.where(mask, a, b), f)
                e_new = int(G.energy(cand))
            info["moves"] += 1
            if e_new < e:
                f, e = cand, e_new
                quiet = 0
            else:
                quiet += 1
            energies.append(e)
            if quiet >= len(pairs):
                break
    if not return_result:
        return f
    info["energies"] = [G.to_units(x) for x in energies]
    info["energy"] = info["energies"][-1]
    return f, info


def labeling_energy(unary, pairwise, labels, edges, edge_weights=None):
    """The energy of a labelling on a graph, exactly (int64 for integer inputs, else float64).

    Parameters
    ----------
    unary, pairwise, edges, edge_weights
        As for :func:`expansion` (the tables are not checked for being metrics here).
    labels : integer tensor or array ``[N]``

    Returns
    -------
    torch.Tensor
        0-dim int64 or float64 energy.

    Examples
    --------
    >>> import torch
    >>> unary = torch.tensor([[0, 5, 1], [3, 0, 4]])
    >>> labeling_energy(unary, torch.tensor([[0, 2], [2, 0]]), torch.tensor([0, 1, 0]), torch.tensor([[0, 1], [1, 2]]))
    tensor(5)
    """
    U = _tensor(unary, "unary")
    if U.dim() != 2:
        raise ValueError(f"unary: expected shape [L, N], got {tuple(U.shape)}")
    L, N = U.shape
    ed = _edges_in(edges, N, U.device)
    E = ed.shape[0]
    V = _tensor(pairwise, "pairwise", U.device)
    if tuple(V.shape) not in ((L, L), (E, L, L)):
        raise ValueError(f"pairwise: expected shape ({L}, {L}) or ({E}, {L}, {L}), got {tuple(V.shape)}")
    w = None if edge_weights is None else _tensor(edge_weights, "edge_weights", U.device)
    if w is not None and tuple(w.shape) != (E,):
        raise ValueError(f"edge_weights: expected shape ({E},), got {tuple(w.shape)}")
    f = _tensor(labels, "labels", U.device)
    if f.is_floating_point() or tuple(f.shape) != (N,):
        raise ValueError(f"labels: expected integer labels of shape ({N},), got {describe(f)}")
    f = f.to(torch.int64)
    if N and (int(f.min()) < 0 or int(f.max()) >= L):
        raise ValueError(f"labels: expected values in [0, {L - 1}], got [{int(f.min())}, {int(f.max())}]")
    floating = U.is_floating_point() or V.is_floating_point() or (w is not None and w.is_floating_point())
    dt = torch.float64 if floating else torch.int64
    e = U.to(dt).gather(0, f.view(1, -1)).sum()
    if E:
        a, b = f[ed[:, 0]], f[ed[:, 1]]
        if V.dim() == 2:
            pv = V.to(dt)[a, b]
        else:
            pv = V.to(dt)[torch.arange(E, device=U.device), a, b]
        if w is not None:
            pv = pv * w.to(dt)
        e = e + pv.sum()
    return e


def _dispatch(unary, pairwise, edges, edge_weights, *, weights, connectivity, warm_start, **kwargs):
    """``torchcut.expansion`` with ``edges``: refuse the grid-only arguments, then :func:`expansion`."""
    if edges is None:
        raise ValueError("edges: expected an [E, 2] integer tensor of edges with edge_weights, got None")
    for name, value in (("weights", weights), ("connectivity", connectivity)):
        if value is not None:
            raise ValueError(
                f"{name}: applies to grid energies only; with edges, pass per-edge weights as "
                f"edge_weights, got {name}={describe(value) if hasattr(value, 'shape') else value!r}"
            )
    if warm_start:
        raise ValueError("warm_start: not available for energies on general graphs (edges), got True")
    return expansion(unary, pairwise, edges, edge_weights, **kwargs)
