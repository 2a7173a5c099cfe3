"""GridGraph: a flow network on an N-d lattice, held as tensors.

Every node of a grid of shape ``shape`` (2D or 3D, optionally with a batch dimension in front) has an
arc from the source, an arc to the sink and, for each of K offsets ``o``, an arc pair between ``p`` and
``p + o``. Arcs that would leave the grid do not exist.

Internal layout (what solvers see)
---------------------------------
``caps``  ``[B, 2K, *shape]``: residual capacity of the arc leaving node ``p`` in direction ``d``.
          Directions ``0..K-1`` are ``offsets``; direction ``K + k`` is ``-offsets[k]``. Entries whose
          arc leaves the grid are zero. dtype int32, or int64 when a pair of opposite capacities could
          overflow int32 once flow is pushed back.
``source`` ``[B, *shape]`` int64: capacity of the arc source -> p.
``sink``   ``[B, *shape]``, dtype of ``caps``: capacity of the arc p -> sink.

Float capacities are quantized: multiplied by ``scale`` and rounded to integers, so that the solver is
exact on the quantized network; flow values are reported divided by ``scale``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch

from ._validate import INT32_MAX, SUM_LIMIT, as_tensor, capacity_ranges, check_sum, describe, quantization_scale

__all__ = ["GridGraph", "grid_offsets", "shift", "overlap_slices"]


def grid_offsets(ndim: int, connectivity: int) -> tuple[tuple[int, ...], ...]:
    """Half of the neighbourhood of a lattice: one offset per arc pair.

    Parameters
    ----------
    ndim : int
        2 or 3.
    connectivity : int
        4 or 8 in 2D, 6, 18 or 26 in 3D.

    Returns
    -------
    tuple of tuples
        K offsets; the full neighbourhood is these and their negations.

    Examples
    --------
    >>> grid_offsets(2, 4)
    ((0, 1), (1, 0))
    >>> len(grid_offsets(3, 26))
    13
    """
    allowed = {2: (4, 8), 3: (6, 18, 26)}
    if ndim not in allowed:
        raise ValueError(f"ndim: expected 2 or 3, got {ndim!r}")
    if connectivity not in allowed[ndim]:
        raise ValueError(f"connectivity: expected one of {allowed[ndim]} for ndim={ndim}, got {connectivity!r}")
    known = _OFFSETS.get((ndim, connectivity))  # every call of an energy asks: worked out once
    if known is not None:
        return known
    out = []
    for off in itertools.product((-1, 0, 1), repeat=ndim):
        # keep the lexicographically positive half
        first = next((v for v in off if v != 0), 0)
        if first <= 0:
            continue
        nz = sum(1 for v in off if v != 0)
        if ndim == 2 and connectivity == 4 and nz > 1:
            continue
        if ndim == 3 and connectivity == 6 and nz > 1:
            continue
        if ndim == 3 and connectivity == 18 and nz > 2:
            continue
        out.append(off)
    # axis-aligned first, last axis fastest: (0, 1), (1, 0), then diagonals
    out.sort(key=lambda o: (sum(1 for v in o if v != 0), [-abs(v) for v in o[::-1]], o))
    known = _OFFSETS[(ndim, connectivity)] = tuple(tuple(int(v) for v in o) for o in out)
    return known


# (ndim, connectivity) -> grid_offsets' answer
_OFFSETS: dict = {}


def shift(x: torch.Tensor, offset: Sequence[int], fill) -> torch.Tensor:
    """``y[..., p] = x[..., p + offset]`` over the trailing ``len(offset)`` dims, ``fill`` outside.

    Examples
    --------
    >>> shift(torch.arange(4).view(1, 4), (1,), -1)
    tensor([[ 1,  2,  3, -1]])
    """
    nd = len(offset)
    out = torch.full_like(x, fill)
    if any(abs(o) >= n for o, n in zip(offset, x.shape[x.dim() - nd :])):
        return out
    here, there = overlap_slices(x.shape[x.dim() - nd :], offset)
    lead = (slice(None),) * (x.dim() - nd)
    out[lead + here] = x[lead + there]
    return out


def overlap_slices(shape: Sequence[int], offset: Sequence[int]):
    """Index tuples of the nodes p with p + offset inside the grid, and of those p + offset.

    Examples
    --------
    >>> overlap_slices((4,), (1,))
    ((slice(0, 3, None),), (slice(1, 4, None),))
    """
    here, there = [], []
    for o, n in zip(offset, shape):
        if o >= 0:
            here.append(slice(0, max(n - o, 0)))
            there.append(slice(min(o, n), n))
        else:
            here.append(slice(min(-o, n), n))
            there.append(slice(0, max(n + o, 0)))
    return tuple(here), tuple(there)


def _pair_peak(edges, reverse, offsets, shape) -> int:
    """Largest ``edges[k][p] + reverse[k][p]`` over the arc pairs inside the grid (int64, exact)."""
    peak = 0
    for k, o in enumerate(offsets):
        here = (slice(None),) + overlap_slices(shape, o)[0]
        e = edges[k][here]
        if e.numel():
            peak = max(peak, int((e.to(torch.int64) + reverse[k][here]).max()))
    return peak


def _zero_outside(x: torch.Tensor, offset) -> None:
    """Zero ``x[..., p]`` (trailing dims) wherever ``p + offset`` leaves the grid: one slab per axis."""
    nd = len(offset)
    lead = (slice(None),) * (x.dim() - nd)
    for a, (o, n) in enumerate(zip(offset, x.shape[x.dim() - nd :])):
        if o:
            sl = [slice(None)] * nd
            sl[a] = slice(max(n - o, 0), n) if o > 0 else slice(0, min(-o, n))
            x[lead + tuple(sl)] = 0


def _exact_total(tensors) -> int:
    """Exact sum of non-negative integer tensors as a Python int (int32 entries summed in int64)."""
    total = 0
    for t in tensors:
        if t.dtype == torch.int64:  # may wrap in int64: sum the high and low halves apart
            total += (int((t >> 31).sum()) << 31) + int((t & INT32_MAX).sum())
        else:
            total += int(t.sum(dtype=torch.int64))
    return total


def _inside_mask(shape: Sequence[int], offset: Sequence[int], device) -> torch.Tensor:
    """Bool tensor of ``shape``: True where ``p + offset`` lies in the grid."""
    m = torch.ones(tuple(shape), dtype=torch.bool, device=device)
    return shift(m, offset, False)


def _check_offsets(offsets) -> tuple[tuple[int, ...], ...]:
    try:
        offs = tuple(tuple(int(v) for v in o) for o in offsets)
        raw = [list(o) for o in offsets]
    except TypeError as exc:
        raise ValueError(f"offsets: expected a sequence of integer tuples, got {offsets!r}") from exc
    if len(offs) == 0:
        raise ValueError("offsets: expected at least one offset, got an empty sequence")
    ndim = len(offs[0])
    if ndim not in (2, 3):
        raise ValueError(f"offsets: expected tuples of length 2 or 3 (2D or 3D grids), got {offs[0]!r}")
    for o, r in zip(offs, raw):
        if len(o) != ndim:
            raise ValueError(f"offsets: expected all offsets of length {ndim}, got {o!r}")
        if any(not float(v).is_integer() for v in r):
            raise ValueError(f"offsets: expected integer offsets, got {tuple(r)!r}")
        if all(v == 0 for v in o):
            raise ValueError(f"offsets: the zero offset {o!r} would be a self-loop")
    return offs


def _arc_layout(edges: torch.Tensor, reverse: torch.Tensor, offsets, dtype) -> torch.Tensor:
    """The solvers' ``caps`` ``[B, 2K, *shape]`` from ``edges`` / ``reverse`` ``[K, B, *shape]`` (no checks).

    Direction k holds the arc p -> p + offsets[k] (``edges[k][p]``), direction K + k the arc
    q -> q - offsets[k] (``reverse[k][q - offsets[k]]``); arcs that leave the grid are zero.
    """
    if (
        _NATIVE_ARCS
        and edges.dtype == reverse.dtype
        and edges.dtype in (torch.int32, torch.int64)
        and dtype in (torch.int32, torch.int64)
        and (edges.device.type == "cpu" or len(offsets) <= 32)  # the CUDA kernel's offset table
        and _native_arcs(edges.device.type)
    ):  # one pass (csrc/cpu/grid_arcs.cpp, csrc/cuda/grid_arcs.cu) instead of 2K * (ndim + 1) slab copies
        flat = [int(v) for o in offsets for v in o]
        return torch.ops.torchcut.grid_arcs(edges, reverse, flat, dtype == torch.int64)
    return _arc_layout_tensors(edges, reverse, offsets, dtype)


# False: _arc_layout in tensor ops only (the reference of the native op, for tests and A/B).
_NATIVE_ARCS = True
# device type -> whether the loaded libraries implement grid_arcs there
_ARCS: dict[str, bool] = {}


def _native_arcs(device_type: str) -> bool:
    """Whether the compiled ``grid_arcs`` runs on ``device_type`` (checked once per device type)."""
    if device_type not in _ARCS:
        from . import _ops

        _ARCS[device_type] = _ops.has_kernels(device_type, "grid_arcs")
    return _ARCS[device_type]


def _arc_layout_tensors(edges: torch.Tensor, reverse: torch.Tensor, offsets, dtype) -> torch.Tensor:
    """:func:`_arc_layout` in tensor ops: any device and dtype (the reference of ``grid_arcs``)."""
    K, B, shape = len(offsets), edges.shape[1], tuple(edges.shape[2:])
    caps = torch.empty((B, 2 * K) + shape, dtype=dtype, device=edges.device)
    lead = (slice(None),)
    for k, o in enumerate(offsets):
        for d, off in ((k, o), (K + k, tuple(-v for v in o))):
            _zero_outside(caps[:, d], off)
        if any(abs(v) >= n for v, n in zip(o, shape)):
            continue  # every arc of this offset leaves the grid
        here, _ = overlap_slices(shape, o)
        caps[:, k][lead + here] = edges[k][lead + here]
        # arc (p + o) -> p lives at node q = p + o in direction K + k: caps[K + k][q] = reverse[k][q - o]
        here, there = overlap_slices(shape, tuple(-v for v in o))
        caps[:, K + k][lead + here] = reverse[k][lead + there]
    return caps


class GridGraph:
    """A flow network on a 2D or 3D lattice, optionally batched, stored as tensors.

    Parameters
    ----------
    source, sink : tensor or array, shape ``[*shape]`` or ``[B, *shape]``
        Capacities of the terminal arcs source -> p and p -> sink.
    edges : tensor ``[K, *shape]`` / ``[K, B, *shape]``, or a sequence of K tensors shaped like ``source``
        ``edges[k][p]`` is the capacity of the arc p -> p + offsets[k].
    offsets : sequence of K integer tuples of length ndim (2 or 3)
        See :func:`grid_offsets` for the usual 4/8 (2D) and 6/18/26 (3D) neighbourhoods.
    reverse : like ``edges``, optional
        ``reverse[k][p]`` is the capacity of the arc p + offsets[k] -> p. Defaults to ``edges``
        (symmetric).
    scale : float, optional
        Float capacities only: the quantization factor (capacities are multiplied by it and rounded).
        By default the largest capacity maps to 2**30.

    Capacities may be int32, int64, float32 or float64, non-negative and finite. Arcs that leave the
    grid are ignored.

    Examples
    --------
    >>> import torch, torchcut
    >>> src = torch.tensor([[5, 0], [0, 0]])
    >>> snk = torch.tensor([[0, 0], [0, 4]])
    >>> edges = torch.full((2, 2, 2), 3)
    >>> g = torchcut.GridGraph(src, snk, edges, torchcut.grid_offsets(2, 4))
    >>> torchcut.maxflow(g).flow_value
    4
    """

    # Inputs kept for the solver op when the graph is built inside torch.compile (see __init__).
    _pending = None
    # The capacities as given ``(source, sink, edges, reverse or None)`` when one of them requires grad
    # (``CutResult.flow_value`` is then differentiable, see :mod:`torchcut.diff`); else None.
    _grad_caps = None
    #: How a segmentation graph was built (:class:`torchcut.energy.EnergyInfo`); None for other graphs.
    energy = None

    def __init__(self, source, sink, edges, offsets, reverse=None, *, scale: float | None = None):
        offsets = _check_offsets(offsets)
        ndim = len(offsets[0])
        K = len(offsets)
        source = as_tensor(source, "source")
        device = source.device
        sink = as_tensor(sink, "sink", device)
        if source.dim() not in (ndim, ndim + 1):
            raise ValueError(
                f"source: expected shape [*shape] or [B, *shape] with {ndim} spatial dims (from offsets), "
                f"got shape {tuple(source.shape)}"
            )
        if tuple(sink.shape) != tuple(source.shape):
            raise ValueError(f"sink: expected the shape of source {tuple(source.shape)}, got {tuple(sink.shape)}")
        batched = source.dim() == ndim + 1
        full_shape = tuple(source.shape)
        edges = self._stack(edges, "edges", K, full_shape, device)
        reverse = edges if reverse is None else self._stack(reverse, "reverse", K, full_shape, device)
        if torch.compiler.is_compiling():
            # Inside torch.compile: the capacity dtype, the float scale and the value checks depend on the
            # data, so the graph is built (and checked) when the solver op runs (torchcut.solvers.ops).
            self._set_layout(
                None,
                None,
                None,
                offsets,
                batched,
                shape=full_shape[1:] if batched else full_shape,
                is_float=any(t.is_floating_point() for t in (source, sink, edges, reverse)),
                pending=(source, sink, edges, None if reverse is edges else reverse, scale),
            )
            return
        if torch.is_grad_enabled() and any(t.requires_grad for t in (source, sink, edges, reverse)):
            self._grad_caps = (source, sink, edges, None if reverse is edges else reverse)
        # the value checks and every maximum used below from one read-back per kind of capacity (each
        # read-back is a host synchronisation on a CUDA device)
        same = reverse is edges
        names = ("source", "sink", "edges") + (() if same else ("reverse",))
        ranges = capacity_ranges((source, sink, edges) + (() if same else (reverse,)), names)
        source, sink, edges = (t for t, _, _ in ranges[:3])
        reverse = edges if same else ranges[3][0]
        top = {name: hi for name, (_, _, hi) in zip(names, ranges)}
        if not batched:
            source, sink = source.unsqueeze(0), sink.unsqueeze(0)
            edges, reverse = edges.unsqueeze(1), reverse.unsqueeze(1)
        shape = tuple(source.shape[1:])
        if any(n == 0 for n in shape) or source.shape[0] == 0:
            raise ValueError(f"source: expected a non-empty grid, got shape {full_shape}")

        floating = any(t.is_floating_point() for t in (source, sink, edges, reverse))
        if floating:
            # Zero the arcs that leave the grid, then quantize.
            inside = torch.stack([_inside_mask(shape, o, device) for o in offsets]).unsqueeze(1)
            edges = torch.where(inside, edges, torch.zeros((), dtype=edges.dtype, device=device))
            reverse = torch.where(inside, reverse, torch.zeros((), dtype=reverse.dtype, device=device))
            source, sink, edges, reverse = (t.detach().to(torch.float64) for t in (source, sink, edges, reverse))
            pair, *highs = torch.stack(
                [(edges + reverse).max(), source.max(), sink.max(), edges.max(), reverse.max()]
            ).tolist()
            scale = quantization_scale(max(pair, highs[0], highs[1]), scale)
            source, sink, edges, reverse = (
                torch.round(t * scale).to(torch.int64) for t in (source, sink, edges, reverse)
            )
            # rounding is monotone: the quantized maxima are the maxima quantized, as torch.round rounds
            top = {name: int(round(hi * scale)) for name, hi in zip(("source", "sink", "edges", "reverse"), highs)}
            scale = float(scale)
        elif scale is not None:
            raise ValueError(f"scale: only applies to float capacities, got integer capacities and scale={scale!r}")
        top.setdefault("reverse", top["edges"])
        # the layout's dtype, as a copy (solvers may work in the graph's tensors); the sink keeps its
        # own dtype until the end
        source = source.to(torch.int64, copy=source.dtype == torch.int64)
        # Integer capacities are never copied whole to int64 (int32 ones stay int32, which keeps the
        # constructor's peak at the graph's own 36 bytes per node for a 6-connected int32 grid): sums
        # and maxima are taken in int64 from the input (arcs that leave the grid counted too, which
        # only makes the checks stricter).
        parts = (source, sink, edges) + (() if reverse is edges else (reverse,))
        highs = (top["source"], top["sink"], top["edges"]) + (() if reverse is edges else (top["reverse"],))
        bound = sum(int(hi) * t.numel() for hi, t in zip(highs, parts))  # max * count: cheap, and usually enough
        check_sum(bound if bound < SUM_LIMIT else _exact_total(parts), "GridGraph")
        peak_arc = int(top["edges"]) + int(top["reverse"])
        if peak_arc > INT32_MAX:  # the bound is loose: the largest pair of arcs that exist
            peak_arc = _pair_peak(edges, reverse, offsets, shape)
        peak = max(peak_arc, int(top["sink"]))
        cap_dtype = torch.int32 if peak <= INT32_MAX else torch.int64

        caps = _arc_layout(edges, reverse, offsets, cap_dtype)
        # the sink as a copy (never the caller's tensor: solvers may work in the graph's tensors)
        self._set_layout(
            caps,
            source.contiguous(),
            sink.to(cap_dtype, copy=sink.dtype == cap_dtype).contiguous(),
            offsets,
            batched,
            scale,
        )

    @classmethod
    def _from_layout(cls, caps, source, sink, offsets, batched, scale=None, energy=None) -> GridGraph:
        """A graph from tensors already in its internal layout, taken as they are (no checks, no copies).

        ``caps`` ``[B, 2K, *shape]`` int32 or int64, ``source`` ``[B, *shape]`` int64, ``sink`` ``[B, *shape]``
        of the dtype of ``caps``; ``offsets`` as checked by the constructor; ``batched``: whether the
        user's graph had a batch dimension; ``scale``: the quantization of a float graph (None for an
        integer one); ``energy``: how a segmentation graph was built.
        """
        g = object.__new__(cls)
        g._set_layout(caps, source, sink, offsets, batched, scale, energy)
        return g

    def _set_layout(
        self, caps, source, sink, offsets, batched, scale=None, energy=None, *, shape=None, is_float=None, pending=None
    ) -> None:
        """Every field of a graph, set in one place: the end of every constructor. ``shape``,
        ``is_float`` and ``pending`` are for a graph built inside ``torch.compile`` (no tensors yet)."""
        self.offsets = offsets
        self.caps, self.source, self.sink = caps, source, sink
        self.batched = bool(batched)
        self.shape = tuple(caps.shape[2:]) if shape is None else tuple(shape)
        self.scale = scale
        self.is_float = scale is not None if is_float is None else is_float
        self.energy = energy
        self._pending = pending

    @staticmethod
    def _stack(x, name, K, full_shape, device) -> torch.Tensor:
        if isinstance(x, (list, tuple)) and len(x) > 0 and not isinstance(x[0], (int, float)):
            if len(x) != K:
                raise ValueError(f"{name}: expected {K} tensors (one per offset), got {len(x)}")
            parts = [as_tensor(e, f"{name}[{k}]", device) for k, e in enumerate(x)]
            for k, e in enumerate(parts):
                if tuple(e.shape) != full_shape:
                    raise ValueError(f"{name}[{k}]: expected the shape of source {full_shape}, got {tuple(e.shape)}")
            dtypes = {e.dtype for e in parts}
            if len(dtypes) > 1:
                common = torch.float64 if any(d.is_floating_point for d in dtypes) else torch.int64
                parts = [e.to(common) for e in parts]
            return torch.stack(parts)
        t = as_tensor(x, name, device)
        if tuple(t.shape) != (K,) + full_shape:
            raise ValueError(
                f"{name}: expected shape {(K,) + full_shape} (one capacity map per offset, K={K}), got {describe(t)}"
            )
        return t

    # ------------------------------------------------------------------ properties
    @property
    def ndim(self) -> int:
        """Number of spatial dimensions (2 or 3)."""
        return len(self.shape)

    @property
    def batch_size(self) -> int:
        """Number of independent grids (1 when the input had no batch dimension)."""
        if self._pending is not None:
            return self._pending[0].shape[0] if self.batched else 1
        return self.caps.shape[0]

    @property
    def num_nodes(self) -> int:
        """Nodes per grid (terminals excluded)."""
        return math.prod(self.shape)

    @property
    def device(self) -> torch.device:
        """The device that holds the graph's tensors."""
        return self.caps.device if self._pending is None else self._pending[0].device

    @property
    def directions(self) -> tuple[tuple[int, ...], ...]:
        """All 2K directions: the offsets, then their negations."""
        return self.offsets + tuple(tuple(-v for v in o) for o in self.offsets)

    def to(self, device, non_blocking: bool = False) -> GridGraph:
        """A copy of the graph on ``device`` (``non_blocking`` as for :meth:`torch.Tensor.to`).

        Examples
        --------
        >>> g = GridGraph([[1]], [[1]], [[[0]], [[0]]], grid_offsets(2, 4))
        >>> g.to("cpu").device.type
        'cpu'
        """
        caps, source, sink = (t.to(device, non_blocking=non_blocking) for t in (self.caps, self.source, self.sink))
        new = GridGraph._from_layout(caps, source, sink, self.offsets, self.batched, self.scale, self.energy)
        new._grad_caps = self._grad_caps  # the flow value's gradient goes to the capacities as given
        return new

    def __repr__(self) -> str:
        b = f"B={self.batch_size}, " if self.batched else ""
        return (
            f"GridGraph({b}shape={self.shape}, K={len(self.offsets)}, dtype={self.caps.dtype}, "
            f"device={self.device}{', scale=%g' % self.scale if self.scale else ''})"
        )

    # ------------------------------------------------------------------ certificate support
    def arc_pairs(self):
        """Flatten the network into arc pairs for :meth:`CutResult.verify`.

        Returns ``(tail, head, cap_fwd, cap_bwd, index_fwd, index_bwd)``: node indices into the flattened
        ``[B * N]`` nodes, the two capacities of each pair, and the flat indices of the two arcs in
        ``caps`` (so that the residuals of any ``caps``-shaped tensor can be gathered).
        """
        B, K = self.batch_size, len(self.offsets)
        N = self.num_nodes
        dev = self.device
        node = torch.arange(B * N, device=dev).view((B,) + self.shape)
        tails, heads, idx_f, idx_b = [], [], [], []
        slot = torch.arange(B * 2 * K * N, device=dev).view((B, 2 * K) + self.shape)
        for k, o in enumerate(self.offsets):
            inside = _inside_mask(self.shape, o, dev).expand((B,) + self.shape)
            head = shift(node, o, -1)
            back = shift(slot[:, K + k], o, -1)  # slot of arc (p+o) -> p, seen from p
            tails.append(node[inside])
            heads.append(head[inside])
            idx_f.append(slot[:, k][inside])
            idx_b.append(back[inside])
        tail = torch.cat(tails)
        head = torch.cat(heads)
        index_fwd = torch.cat(idx_f)
        index_bwd = torch.cat(idx_b)
        flat = self.caps.reshape(-1).to(torch.int64)
        return tail, head, flat[index_fwd], flat[index_bwd], index_fwd, index_bwd
