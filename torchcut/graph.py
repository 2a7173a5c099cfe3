"""FlowGraph: a general sparse flow network held as tensors (CSR with a reverse-arc index).

Nodes are numbered ``0 .. N-1``; the two terminals are not nodes. As in :class:`torchcut.GridGraph`,
every node carries the capacity of its arc from the source and of its arc to the sink, and the
other arcs come in *pairs* ``(u, v)`` with a capacity each way (one of them may be zero).

Internal layout (what solvers see)
---------------------------------
``row_ptr`` ``[N + 1]`` int64: the arcs leaving node ``p`` are ``row_ptr[p] .. row_ptr[p + 1] - 1``.
``head``    ``[A]`` int64: the node each arc enters (``A = 2 * num_pairs``; both arcs of every pair).
``tail``    ``[A]`` int64: the node each arc leaves (sorted, so ``tail`` is ``row_ptr`` expanded).
``rev``     ``[A]`` int64: index of the opposite arc of the same pair.
``caps``    ``[A]``: residual capacity of each arc; int32, or int64 when the two capacities of a pair
            could overflow int32 once flow is pushed back. A solve's ``CutResult.residual`` has this
            layout.
``source``  ``[1, N]`` int64 and ``sink`` ``[1, N]`` (dtype of ``caps``): terminal capacities.

Float capacities are quantized like :class:`torchcut.GridGraph` (``scale``).

Lattices: a graph whose pairs all join ``p`` to ``p + 1`` within a row or ``p`` to ``p + W``
(pixels numbered row-major, as in the BVZ vision instances) is solved by the grid solver; see
:meth:`FlowGraph.as_grid`.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from ._copy import FLOWGRAPH_HOST_FIELDS, transfer
from ._validate import INT32_MAX, as_tensor, check_capacity, check_sum, describe, quantization_scale

__all__ = ["FlowGraph"]


def _sort_values(x: torch.Tensor) -> torch.Tensor:
    """Sorted copy of an int64 tensor (numpy's fast value sort on the CPU)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.sort(x.numpy()))
    return torch.sort(x).values


def _compiled_layout() -> bool:
    """Whether the compiled CSR layout (``torch.ops.torchcut.pairs_csr``) can be used: the CPU library
    loads (``TORCHCUT_PY_LAYOUT=1``: never, the tensor version instead)."""
    if os.environ.get("TORCHCUT_PY_LAYOUT", "") not in ("", "0"):
        return False
    from . import _ops

    return _ops.load_error("cpu") is None


def _empty_list(x) -> bool:
    """An empty list or tuple (which torch would read as float32)."""
    return isinstance(x, (list, tuple)) and len(x) == 0


def _index_tensor(x, name: str, device=None) -> torch.Tensor:
    t = torch.zeros(0, dtype=torch.int64, device=device) if _empty_list(x) else as_tensor(x, name, device)
    if t.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D tensor of node indices, got {describe(t)}")
    if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name}: expected an integer dtype, got {t.dtype}")
    return t.to(torch.int64)


def _cap_tensor(x, name: str, shape, device) -> torch.Tensor:
    t = torch.zeros(0, dtype=torch.int64, device=device) if _empty_list(x) else as_tensor(x, name, device)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {describe(t)}")
    return check_capacity(t, name)


class FlowGraph:
    """A general flow network (CSR + reverse-arc index + terminal capacities).

    Build one with :meth:`from_edges` (terminal capacities per node), :meth:`from_network` (a
    directed graph whose source and sink are ordinary node ids) or :func:`torchcut.read_dimacs`.

    Attributes
    ----------
    num_nodes : int
        Non-terminal nodes ``N``.
    num_pairs : int
        Arc pairs after merging parallel and antiparallel arcs.
    node_ids : torch.Tensor or None
        int64 ``[N]``: the id each node had in the input network (:meth:`from_network`, DIMACS ids
        for :func:`torchcut.read_dimacs`), else None.
    terminal_ids : tuple or None
        ``(source id, sink id)`` in the input network's numbering, else None.

    Examples
    --------
    >>> import torch, torchcut
    >>> g = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 9])
    >>> r = torchcut.maxflow(g)
    >>> r.flow_value, r.mask.tolist(), r.verify()
    (3, [True, True, False], True)
    """

    batch_size = 1
    batched = False
    # The capacities as given, when one of them requires grad (see torchcut.diff); else None.
    _grad_caps = None

    def __init__(self, *args, **kwargs):
        raise TypeError("use FlowGraph.from_edges, FlowGraph.from_network or torchcut.read_dimacs")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edges(
        cls,
        u,
        v,
        cap,
        rev_cap=None,
        *,
        source=None,
        sink=None,
        num_nodes: int | None = None,
        scale: float | None = None,
    ) -> FlowGraph:
        """A network from arc lists and per-node terminal capacities.

        Parameters
        ----------
        u, v : 1-D integer tensor or array, length M
            Arc ``k`` goes from node ``u[k]`` to node ``v[k]`` (0-based).
        cap : 1-D tensor or array, length M
            Capacity of ``u[k] -> v[k]``.
        rev_cap : 1-D tensor or array, length M, optional
            Capacity of the reverse arc ``v[k] -> u[k]``; default 0 (directed arcs).
        source, sink : 1-D tensor or array, length N, optional
            Capacities of the arcs source -> p and p -> sink, one per node (``source[p]``), not node
            ids: the terminals are implicit (for a network whose terminals are two of its nodes, see
            :meth:`from_network`); default 0.
        num_nodes : int, optional
            N; default the length of ``source``/``sink``, else ``max(u, v) + 1``.
        scale : float, optional
            Float capacities only: quantization factor (default: the largest capacity maps to 2**30).

        Parallel arcs are summed, antiparallel arcs merged into one pair, self-loops dropped.
        The device of ``u`` is the graph's device.

        Examples
        --------
        >>> g = FlowGraph.from_edges([0, 0], [1, 1], [2, 3], [1, 0], source=[7, 0], sink=[0, 7])
        >>> g.num_pairs, g.arc_pairs()[2].tolist(), g.arc_pairs()[3].tolist()
        (1, [5], [1])
        """
        u = _index_tensor(u, "u")
        device = u.device
        v = _index_tensor(v, "v", device)
        if v.shape != u.shape:
            raise ValueError(f"v: expected the length of u ({u.numel()}), got {v.numel()}")
        M = u.numel()
        cap = _cap_tensor(cap, "cap", (M,), device)
        rc = None if rev_cap is None else _cap_tensor(rev_cap, "rev_cap", (M,), device)
        for name, t in (("source", source), ("sink", sink)):
            if isinstance(t, (int, float, np.number)) or (isinstance(t, (torch.Tensor, np.ndarray)) and t.ndim == 0):
                raise ValueError(
                    f"{name}: expected the capacities of the arcs {'source -> p' if name == 'source' else 'p -> sink'}, "
                    f"one per node (a 1-D tensor or array of length N), got the single number {t!r}; the terminals "
                    "are implicit, not node ids (FlowGraph.from_network takes a network whose source and sink are "
                    "two of its nodes)"
                )
        if num_nodes is None:
            for t in (source, sink):
                if t is not None:
                    num_nodes = int(as_tensor(t, "source" if t is source else "sink").numel())
                    break
            else:
                if not M:
                    raise ValueError(
                        "num_nodes: expected a positive integer; with no arcs (empty u and v) and no "
                        "source or sink capacities nothing tells the number of nodes"
                    )
                num_nodes = int(torch.maximum(u.max(), v.max())) + 1
        if not isinstance(num_nodes, (int, np.integer)) or isinstance(num_nodes, bool) or num_nodes < 1:
            raise ValueError(f"num_nodes: expected a positive integer, got {num_nodes!r}")
        N = int(num_nodes)
        for name, t in (("u", u), ("v", v)):
            if M and (bool(t.min() < 0) or bool(t.max() >= N)):
                bad = t[(t < 0) | (t >= N)][0].item()
                raise ValueError(f"{name}: expected node indices in [0, {N}), got {bad}")
        src = (
            torch.zeros(N, dtype=torch.int64, device=device)
            if source is None
            else _cap_tensor(source, "source", (N,), device)
        )
        snk = (
            torch.zeros(N, dtype=torch.int64, device=device)
            if sink is None
            else _cap_tensor(sink, "sink", (N,), device)
        )
        grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (cap, rc, src, snk))
        grad_caps = ("edges", u, v, cap, rc, src, snk) if grad else None
        if rc is None:
            rc = torch.zeros_like(cap)
        g = cls._build(u, v, cap, rc, src, snk, N, scale)
        g._grad_caps = grad_caps
        return g

    @classmethod
    def from_grid(cls, grid) -> FlowGraph:
        """The network of a :class:`torchcut.GridGraph` as a FlowGraph (node ``p`` = the flat index of pixel
        ``p``).

        One pair of arcs for each pair of neighbours inside the grid (zero capacities included): the pairs
        of :meth:`GridGraph.arc_pairs` given to :meth:`from_edges`. For a network whose terminal
        capacities change afterwards: :class:`torchcut.solvers.dynamic.DynamicFlowGraph` re-solves those
        from the last flow. On the CPU the layout comes from the grid's structure in one native pass
        (``grid_pairs_csr``) where each offset names one neighbour above the pixel, as
        :func:`torchcut.grid_offsets` does.

        Parameters
        ----------
        grid : GridGraph
            One grid (not batched, or a batch of one); a float grid keeps its ``scale``.

        Returns
        -------
        FlowGraph
            On the grid's device, with the grid's integer capacities.

        Raises
        ------
        TypeError
            ``grid`` is not a GridGraph.
        ValueError
            A batch of several grids (index the batch first).

        Examples
        --------
        >>> import torchcut
        >>> g = torchcut.GridGraph([[5, 0, 0]], [[0, 0, 4]], [[[3, 2, 0]]], ((0, 1),))
        >>> f = FlowGraph.from_grid(g)
        >>> f.num_nodes, f.num_pairs, torchcut.maxflow(f).flow_value == torchcut.maxflow(g).flow_value
        (3, 2, True)
        """
        from .grid import GridGraph

        if not isinstance(grid, GridGraph):
            raise TypeError(f"grid: expected a torchcut.GridGraph, got {type(grid).__name__}")
        if grid.batched and grid.batch_size != 1:
            raise ValueError(
                f"grid: expected one grid (not batched, or a batch of 1), got a batch of {grid.batch_size}"
            )
        N, K = grid.num_nodes, len(grid.offsets)
        src = grid.source.reshape(N).to(torch.int64)
        snk = grid.sink.reshape(N).to(torch.int64)
        strides = [math.prod(grid.shape[i + 1 :]) for i in range(grid.ndim)]
        flat = [sum(v * st for v, st in zip(o, strides)) for o in grid.offsets]
        if grid.device.type == "cpu" and _compiled_layout() and min(flat) > 0 and len(set(flat)) == K <= 32:
            # one neighbour above p per offset: the layout straight from the grid (grid_pairs_csr), no sort
            from .solvers.ops import _flat

            caps = grid.caps.reshape(2 * K, N).contiguous()
            layout = torch.ops.torchcut.grid_pairs_csr(caps, list(grid.shape), _flat(grid.offsets))
            g = object.__new__(cls)
            g.node_ids, g.terminal_ids, g.id_base = None, None, 0
            g = g._finish(*layout, src, snk, None, N)
        else:
            tail, head, cf, cb, _, _ = grid.arc_pairs()
            g = cls.from_edges(tail, head, cf, cb, source=src, sink=snk, num_nodes=N)
        if grid.scale is not None:
            g.scale, g.is_float = grid.scale, True
        return g

    @classmethod
    def from_network(cls, tail, head, cap, source_node: int, sink_node: int, num_nodes: int) -> FlowGraph:
        """A network given as a directed graph whose terminals are two of its nodes.

        Arcs leaving the source become source capacities of their heads, arcs entering the sink
        sink capacities of their tails, an arc source -> sink adds its capacity to both terminal
        capacities of node 0 (which adds exactly that much to every cut and to the maximum flow).
        Arcs into the source and out of the sink can carry no flow and are dropped. The remaining
        nodes keep their order and are renumbered ``0 .. num_nodes - 3`` (``node_ids`` maps back).

        Parameters
        ----------
        tail, head : 1-D integer tensors or arrays (0-based node ids)
        cap : 1-D integer or float tensor or array: arc capacities
        source_node, sink_node : int
        num_nodes : int
            Nodes of the network, terminals included.

        Examples
        --------
        >>> g = FlowGraph.from_network([0, 2, 3, 0], [2, 3, 1, 3], [4, 3, 5, 1], 0, 1, 4)
        >>> g.num_nodes, g.node_ids.tolist(), g.source.tolist(), g.sink.tolist()
        (2, [2, 3], [[4, 1]], [[0, 5]])
        """
        tail = _index_tensor(tail, "tail")
        device = tail.device
        head = _index_tensor(head, "head", device)
        if head.shape != tail.shape:
            raise ValueError(f"head: expected the length of tail ({tail.numel()}), got {head.numel()}")
        cap = _cap_tensor(cap, "cap", tail.shape, device)
        n = int(num_nodes)
        if n < 3:
            raise ValueError(f"num_nodes: expected at least 3 (source, sink and one more node), got {num_nodes!r}")
        s, t = int(source_node), int(sink_node)
        for name, x in (("source_node", s), ("sink_node", t)):
            if not 0 <= x < n:
                raise ValueError(f"{name}: expected a node id in [0, {n}), got {x}")
        if s == t:
            raise ValueError(f"sink_node: expected a node other than source_node ({s}), got {t}")
        for name, x in (("tail", tail), ("head", head)):
            if x.numel() and (bool(x.min() < 0) or bool(x.max() >= n)):
                bad = x[(x < 0) | (x >= n)][0].item()
                raise ValueError(f"{name}: expected node ids in [0, {n}), got {bad}")
        N = n - 2
        grad_caps = ("network", tail, head, cap, s, t) if torch.is_grad_enabled() and cap.requires_grad else None
        cap = cap.detach()
        keep = (tail != head) & (head != s) & (tail != t)
        tail, head, cap = tail[keep], head[keep], cap[keep]
        if cap.is_floating_point():
            cap = cap.to(torch.float64)
            zero = torch.zeros(N, dtype=torch.float64, device=device)
        else:
            cap = cap.to(torch.int64)
            check_sum((cap,), "FlowGraph")  # the terminal sums below (index_add_) must not wrap around
            zero = torch.zeros(N, dtype=torch.int64, device=device)

        def remap(x):
            return x - (x > s).to(torch.int64) - (x > t).to(torch.int64)

        from_s = tail == s
        to_t = head == t
        direct = from_s & to_t
        st = cap[direct].sum()
        inner = ~(from_s | to_t)
        src = zero.clone().index_add_(0, remap(head[from_s & ~direct]), cap[from_s & ~direct])
        snk = zero.clone().index_add_(0, remap(tail[to_t & ~direct]), cap[to_t & ~direct])
        src[0] += st
        snk[0] += st
        g = cls._build(
            remap(tail[inner]), remap(head[inner]), cap[inner], torch.zeros_like(cap[inner]), src, snk, N, None
        )
        ids = torch.arange(n, dtype=torch.int64, device=device)
        g.node_ids = ids[(ids != s) & (ids != t)]
        g.terminal_ids = (s, t)
        g.id_base = 0
        g._grad_caps = grad_caps
        return g

    @classmethod
    def _build(cls, u, v, cf, cb, src, snk, N, scale) -> FlowGraph:
        """Merge arcs into pairs, quantize, check sums and lay out the CSR."""
        device = u.device
        self = object.__new__(cls)
        self.node_ids = None
        self.terminal_ids = None
        self.id_base = 0
        floating = any(t.is_floating_point() for t in (cf, cb, src, snk))
        if not floating:
            if scale is not None:
                raise ValueError(f"scale: only applies to float capacities, got integer capacities and scale={scale!r}")
            # before merging: parallel arcs summed in int64 could wrap around (float64 sums cannot)
            check_sum((cf, cb, src, snk), "FlowGraph")
        if device.type == "cpu" and not floating and _compiled_layout():
            # the same pairs and layout as below, in one compiled pass (torch.ops.torchcut.pairs_csr)
            row_ptr, tail, head, rev, caps, pos_f, pos_b, p_fwd, p_bwd = torch.ops.torchcut.pairs_csr(
                u.contiguous(), v.contiguous(), cf.to(torch.int64).contiguous(), cb.to(torch.int64).contiguous(), N
            )
            return self._finish(
                row_ptr,
                tail,
                head,
                rev,
                caps,
                pos_f,
                pos_b,
                p_fwd,
                p_bwd,
                src.to(torch.int64),
                snk.to(torch.int64),
                None,
                N,
            )
        loop = u == v
        if bool(loop.any()):
            u, v, cf, cb = u[~loop], v[~loop], cf[~loop], cb[~loop]
        if floating:
            cf, cb, src, snk = (t.detach().to(torch.float64) for t in (cf, cb, src, snk))
        else:
            cf, cb, src, snk = (t.to(torch.int64) for t in (cf, cb, src, snk))
        # orient every arc as (lo, hi) and merge duplicates
        swap = u > v
        lo = torch.where(swap, v, u)
        hi = torch.where(swap, u, v)
        fwd = torch.where(swap, cb, cf)  # capacity lo -> hi
        bwd = torch.where(swap, cf, cb)  # capacity hi -> lo
        key = lo * N + hi
        if key.numel():
            kbits = max(1, (N * N).bit_length())
            ibits = max(1, key.numel().bit_length())
            if kbits + ibits <= 62:
                # one value sort of (key, position): gives the order and the inverse at once
                comp = _sort_values((key << ibits) | torch.arange(key.numel(), device=device))
                order = comp & ((1 << ibits) - 1)
                sk = comp >> ibits
            else:
                order = None
                sk = _sort_values(key)
            first = torch.ones_like(sk, dtype=torch.bool)
            first[1:] = sk[1:] != sk[:-1]
            uniq = sk[first]
            if order is not None:
                inv = torch.empty_like(order)
                inv.index_copy_(0, order, torch.cumsum(first, 0) - 1)
            elif key.device.type == "cpu":
                inv = torch.from_numpy(np.searchsorted(uniq.numpy(), key.numpy()))
            else:
                inv = torch.searchsorted(uniq, key)
        else:
            uniq, inv = key, key
        M = uniq.numel()
        p_lo = uniq // N
        p_hi = uniq % N
        p_fwd = torch.zeros(M, dtype=fwd.dtype, device=device).index_add_(0, inv, fwd)
        p_bwd = torch.zeros(M, dtype=bwd.dtype, device=device).index_add_(0, inv, bwd)
        if floating:
            tops = [float(src.max()), float(snk.max())] + ([float((p_fwd + p_bwd).max())] if M else [])
            top = max(tops)
            scale = quantization_scale(top, scale)
            p_fwd, p_bwd, src, snk = (torch.round(t * scale).to(torch.int64) for t in (p_fwd, p_bwd, src, snk))
            scale = float(scale)
        # CSR rows: node p's arcs to lower nodes (backward arcs of pairs (q, p)) then to higher ones
        # (forward arcs of pairs (p, q)); pairs are sorted by (lo, hi), so both groups come out sorted
        # by head without a full sort.
        n_b = torch.bincount(p_hi, minlength=N) if M else torch.zeros(N, dtype=torch.int64, device=device)
        n_f = torch.bincount(p_lo, minlength=N) if M else torch.zeros(N, dtype=torch.int64, device=device)
        row_ptr = torch.zeros(N + 1, dtype=torch.int64, device=device)
        row_ptr[1:] = torch.cumsum(n_b + n_f, 0)
        ar = torch.arange(M, device=device)
        f_start = torch.zeros(N + 1, dtype=torch.int64, device=device)
        f_start[1:] = torch.cumsum(n_f, 0)
        # one gather per arc (index_select/index_copy_ are several times faster than [] indexing on CPU)
        pos_f = (row_ptr[:-1] + n_b - f_start[:-1]).index_select(0, p_lo) + ar
        bits = max(1, int(M).bit_length())
        by_hi = _sort_values(p_hi * (1 << bits) + ar) & ((1 << bits) - 1) if M else ar
        b_start = torch.zeros(N + 1, dtype=torch.int64, device=device)
        b_start[1:] = torch.cumsum(n_b, 0)
        hs = p_hi.index_select(0, by_hi)
        pos_b = torch.empty_like(ar).index_copy_(0, by_hi, (row_ptr[:-1] - b_start[:-1]).index_select(0, hs) + ar)
        A = 2 * M
        tail = torch.empty(A, dtype=torch.int64, device=device)
        head = torch.empty(A, dtype=torch.int64, device=device)
        rev = torch.empty(A, dtype=torch.int64, device=device)
        caps = torch.empty(A, dtype=torch.int64, device=device)
        for pos, t, h, c, r in ((pos_f, p_lo, p_hi, p_fwd, pos_b), (pos_b, p_hi, p_lo, p_bwd, pos_f)):
            tail.index_copy_(0, pos, t)
            head.index_copy_(0, pos, h)
            caps.index_copy_(0, pos, c)
            rev.index_copy_(0, pos, r)
        return self._finish(row_ptr, tail, head, rev, caps, pos_f, pos_b, p_fwd, p_bwd, src, snk, scale, N)

    def _finish(self, row_ptr, tail, head, rev, caps, pos_f, pos_b, p_fwd, p_bwd, src, snk, scale, N) -> FlowGraph:
        """Check the capacity sum, pick the capacity dtype and keep the layout (int64 capacities in)."""
        self.scale = scale
        self.is_float = scale is not None
        # one read-back: the largest sink capacity and pair sum, and (quantized capacities; integer ones
        # were checked before merging) the exact total
        vals = [snk.max(), (p_fwd + p_bwd).max() if p_fwd.numel() else snk.new_zeros(())]
        if self.is_float:
            vals += [src.sum(), snk.sum(), p_fwd.sum(), p_bwd.sum()]
        vals = torch.stack(vals).tolist()
        if self.is_float:
            check_sum(sum(vals[2:]), "FlowGraph")
        peak = max(vals[0], vals[1])
        cap_dtype = torch.int32 if peak <= INT32_MAX else torch.int64
        self.tail, self.head, self.rev = tail, head, rev
        self.caps = caps.to(cap_dtype)
        self.pair_fwd = pos_f  # arc index of lo -> hi
        self.pair_bwd = pos_b  # arc index of hi -> lo
        self.row_ptr = row_ptr
        self.source = src.reshape(1, N).contiguous()
        self.sink = snk.to(cap_dtype).reshape(1, N).contiguous()
        self.num_nodes = N
        self._lattice = None
        return self

    # ------------------------------------------------------------------ properties
    @property
    def num_pairs(self) -> int:
        """Number of arc pairs (half the number of arcs in the CSR)."""
        return self.pair_fwd.numel()

    @property
    def num_arcs(self) -> int:
        """Number of arcs in the CSR (both arcs of every pair)."""
        return self.head.numel()

    @property
    def device(self) -> torch.device:
        """The device that holds the graph's tensors."""
        return self.caps.device

    def degree(self) -> torch.Tensor:
        """Arcs leaving each node (int64 ``[N]``).

        Examples
        --------
        >>> FlowGraph.from_edges([0, 0], [1, 2], [1, 1]).degree().tolist()
        [2, 1, 1]
        """
        return self.row_ptr[1:] - self.row_ptr[:-1]

    def to(self, device, non_blocking: bool = False) -> FlowGraph:
        """A copy of the graph on ``device`` (``non_blocking`` as for :meth:`torch.Tensor.to`).

        Between the CPU and a GPU the tensors travel in one buffer, one copy (a copy to the GPU is queued
        from pinned memory whatever ``non_blocking`` says; one to the CPU is waited for), and the copy keeps
        them as views of that buffer.

        Examples
        --------
        >>> FlowGraph.from_edges([0], [1], [1]).to("cpu").device.type
        'cpu'
        """
        new = object.__new__(FlowGraph)
        new.__dict__.update(self.__dict__)
        names = (
            FLOWGRAPH_HOST_FIELDS
            + ("tail", "pair_fwd", "pair_bwd")
            + (("node_ids",) if self.node_ids is not None else ())
        )
        device = torch.device(device)
        tensors = [getattr(self, n) for n in names]
        if {device.type, self.device.type} == {"cpu", "cuda"}:
            # one copy, in one buffer: the fields the CPU solver reads come first, so that the small-graph
            # route back to the host copies them as one span (solvers._host)
            tensors = transfer(tensors, device)
        else:
            tensors = [t.to(device, non_blocking=non_blocking) for t in tensors]
        for name, t in zip(names, tensors):
            setattr(new, name, t)
        new._lattice = None
        return new

    def __repr__(self) -> str:
        return (
            f"FlowGraph(num_nodes={self.num_nodes}, num_pairs={self.num_pairs}, dtype={self.caps.dtype}, "
            f"device={self.device}{', scale=%g' % self.scale if self.scale else ''})"
        )

    def edges(self):
        """The pairs as ``(u, v, cap, rev_cap)`` tensors with ``u < v`` (what :meth:`from_edges` takes).

        Examples
        --------
        >>> g = FlowGraph.from_edges([1, 0], [0, 1], [2, 3])
        >>> [t.tolist() for t in g.edges()]
        [[0], [1], [3], [2]]
        """
        f, b = self.pair_fwd, self.pair_bwd
        return self.tail[f], self.head[f], self.caps[f].to(torch.int64), self.caps[b].to(torch.int64)

    # ------------------------------------------------------------------ certificate support
    def arc_pairs(self):
        """Arc pairs for :meth:`CutResult.verify`: ``(tail, head, cap_fwd, cap_bwd, index_fwd, index_bwd)``.

        Examples
        --------
        >>> g = FlowGraph.from_edges([0], [1], [4], [1])
        >>> [t.tolist() for t in g.arc_pairs()]
        [[0], [1], [4], [1], [0], [1]]
        """
        f, b = self.pair_fwd, self.pair_bwd
        c = self.caps.to(torch.int64)
        return self.tail[f], self.head[f], c[f], c[b], f, b

    # ------------------------------------------------------------------ lattices
    def lattice_shape(self):
        """``(H, W)`` when the graph is a 2D 4-connected lattice in row-major order, else None.

        A lattice here: every pair joins ``p`` to ``p + 1`` with both in one row of width ``W``, or
        ``p`` to ``p + W``; ``N = H * W``. Missing pairs are fine (zero capacity). This is the layout
        of the BVZ vision instances once the terminals are removed.

        Examples
        --------
        >>> g = FlowGraph.from_edges([0, 1, 0, 1], [1, 2, 3, 4], [1, 1, 1, 1], num_nodes=6)
        >>> g.lattice_shape()
        (2, 3)
        """
        if self._lattice is not None:
            return self._lattice or None
        N = self.num_nodes
        shape = False
        if self.num_pairs == 0:
            shape = (1, N)
        elif self._native_lattice():
            ops = torch.ops.torchcut
            found = ops.lattice_grid(self.tail, self.head, self.caps, self.pair_fwd, self.pair_bwd, N, 0)[0]
            H, W = found.tolist()
            shape = (H, W) if W else False
        else:
            u, v, _, _ = self.edges()
            d = v - u
            wide = d[d > 1]
            W = int(wide.min()) if wide.numel() else N
            if N % W == 0:
                ok = bool(((d == 1) | (d == W)).all()) and not bool(((d == 1) & (u % W == W - 1)).any())
                if ok:
                    shape = (N // W, W)
        self._lattice = shape
        return shape or None

    def _native_lattice(self) -> bool:
        """Whether the compiled lattice ops (``lattice_grid``, ``lattice_residual``) take this graph: integer
        capacities in the CPU library's layout."""
        return self.device.type == "cpu" and not self.caps.is_floating_point() and _compiled_layout()

    def as_grid(self):
        """The equivalent :class:`torchcut.GridGraph` (offsets ``((0, 1), (1, 0))``) of a lattice graph.

        Raises ValueError when :meth:`lattice_shape` is None.

        Examples
        --------
        >>> g = FlowGraph.from_edges([0, 0], [1, 2], [3, 2], [1, 0], source=[5, 0, 0, 0], sink=[0, 0, 0, 4])
        >>> g.as_grid()
        GridGraph(shape=(2, 2), K=2, dtype=torch.int32, device=cpu)
        """
        from .grid import GridGraph

        shape = self.lattice_shape()
        if shape is None:
            raise ValueError(
                "graph: expected a 2D lattice (pairs p -> p + 1 within rows and p -> p + W), got a general graph"
            )
        H, W = shape
        N = self.num_nodes
        if self._native_lattice() and self.num_pairs:
            edges, reverse = torch.ops.torchcut.lattice_grid(
                self.tail, self.head, self.caps, self.pair_fwd, self.pair_bwd, N, W
            )
        else:
            u, v, cf, cb = self.edges()
            right = (v - u) == 1
            edges = torch.zeros(2, N, dtype=torch.int64, device=self.device)
            reverse = torch.zeros(2, N, dtype=torch.int64, device=self.device)
            k = torch.where(right, 0, 1)
            edges[k, u] = cf
            reverse[k, u] = cb
        return GridGraph(
            self.source.reshape(H, W),
            self.sink.reshape(H, W).to(torch.int64),
            edges.view(2, H, W),
            ((0, 1), (1, 0)),
            reverse.view(2, H, W),
        )

    # ------------------------------------------------------------------ solving
    def _maxflow(self, backend: str = "auto", *, lattice: bool | None = None, **options):
        """Called by :func:`torchcut.maxflow`; see :mod:`torchcut.solvers.csr`."""
        from .solvers.csr import solve_flowgraph

        return solve_flowgraph(self, backend, lattice=lattice, **options)
