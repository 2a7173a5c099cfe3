"""Exact maximum flow of one grid network split into slabs over the ranks of ``torch.distributed``.

Each rank holds a contiguous slab, along one spatial axis, of a global 2D or 3D grid network; rank
``r`` holds the slab after rank ``r - 1``'s. The arcs of a slab's border nodes that point into the
neighbouring slab are real arcs. All ranks run one push-relabel over the whole grid together: each
on its own slab, meeting only between steps, where border planes travel between neighbours
(point-to-point messages) and a few scalars are all-reduced.

Launching
---------
One process per GPU (or per CPU slab), e.g. with ``torchrun --nproc_per_node=2 script.py``; in the
script::

    import torch.distributed as dist, torchcut.distributed as tcd
    dist.init_process_group("nccl")            # "gloo" for CPU tensors
    torch.cuda.set_device(dist.get_rank())     # NCCL: one device per rank
    lo, hi = ...                               # this rank's rows along axis 0
    r = tcd.maxflow(source[lo:hi], sink[lo:hi], edges[:, lo:hi], offsets)
    r.flow_value, r.mask, r.verify()           # global flow on every rank; this slab's cut

Pass ``timeout=`` to ``init_process_group`` so that a rank that dies makes the others fail instead
of waiting for ever. Bad input (different offsets, shapes that do not line up, slabs out of order
when ``start`` is given) is detected from one all-gather of a small header before any solving and
raised on every rank.

Algorithm (bulk-synchronous push-relabel)
-----------------------------------------
State: a global preflow, stored where its arcs start. Each rank keeps the residual capacity of every
arc leaving its nodes (border arcs included; the reverse arc of a border arc lives on the neighbour),
the excess of its nodes, their residual sink capacities and their heights. The ranks repeat:

1. **Global relabel.** The exact BFS distance to the sink over all slabs: each rank runs its BFS with
   the neighbours' border distances unknown (infinite), then rounds: the border distances are
   exchanged, lower the neighbours' copies (the ghost planes) and are relaxed from there, until no
   rank lowers a ghost node (one all-reduce per round). Distances only decrease, so the rounds end.
2. **Stop test.** If no rank holds excess at a node of finite distance, stop (one all-reduce).
3. **Pushes.** A few push launches (the single-device rule, from the BFS depth). A push across a
   border lowers the residual here and is sent to the neighbour after the launch, which adds it to
   the excess of the arc's head and to the residual of the reverse arc; the border heights travel
   with it and are the neighbours' heights in the next launch (a snapshot).

On CUDA slabs split along axis 0 the steps are the single-device grid kernels themselves, run on a
slab with a ghost plane on each side (``torch.classes.torchcut.GridSlab``; see
:func:`_push_relabel_cuda`), and a global relabel may repair the last distances as on one device.
Elsewhere (CPU tensors, or another split axis) the same algorithm runs in torch ops: the synchronous
rounds of :mod:`torchcut.solvers.reference` on every slab (:func:`_push_relabel`), exact but slow.

Exactness. A push never exceeds a residual and adds what it moves to the reverse residual (for a
border arc, one exchange later: meanwhile the neighbour's reverse residual is lower than the truth,
which only forbids pushes), so the state is always a valid preflow of the global network, and no
flow is in transit when the stop test runs. Stale heights of the neighbours only make a push less
useful, never invalid. The stop test follows an exact global relabel: let ``T`` be the nodes with
finite distance (those that can reach the sink) and ``S`` the others. No residual arc leads from
``S`` to ``T`` (it would give its tail a finite distance), so every arc ``S -> T`` is saturated and
every arc ``T -> S`` carries no flow; no node of ``T`` holds excess. The flow into the sink is then
the net flow from ``S`` into ``T``, which equals the capacity of the cut ``(S, T)``: a preflow whose
value equals a cut's capacity is a maximum flow, and the cut is minimum. ``T`` is exactly the
canonical sink side of docs/design.md, so the masks agree with the single-grid solvers bit for bit.

Termination. Between two global relabels the ranks run a bounded number of push launches, and each
global relabel restores exact distances, as in the single-device solver; ``max_iter`` guards the
number of global relabels (push rounds in torch ops), and running past it raises on every rank
rather than returning an inexact answer.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ._deprecate import renamed_keywords
from ._validate import INT32_MAX, SUM_LIMIT, as_tensor, check_capacity
from .grid import GridGraph, _check_offsets, _zero_outside, shift
from .result import CertificateError, CutResult
from .solvers._terminals import net_terminals_

__all__ = ["maxflow", "segment", "DistributedCutResult", "Slab"]

INF = 2**30  # label of nodes that cannot reach the sink

#: Counters of this rank's last :func:`maxflow` or :func:`segment` call (also in the result's ``stats``,
#: but kept here when ``segment`` returns the mask alone): the algorithm's rounds and relabels,
#: ``border_bytes`` sent by this rank during the solve, ``seconds``.
last_stats: dict = {}
_slab_options: list = []  # the CUDA grid options of the slabs (names: torch.ops.torchcut.names("grid_cuda_options"))
#: The max-flow backends of a split grid: "cuda" the single-device grid kernels on every slab (CUDA slabs
#: split along axis 0), "reference" the synchronous push-relabel of torchcut.solvers.reference in torch ops
#: (any device, any axis); "auto" the first that applies.
BACKENDS = ("auto", "cuda", "reference")
#: Options of the CUDA kernels that the slabs honour (see torchcut.solvers.cuda.OPTIONS); the tile shapes
#: are fixed by the slabs' padded layout, and the push launches per relabel by the loop here.
SLAB_OPTIONS = ("rounds", "persist", "repair")
DEFAULT_MAX_ITER = 10000


def _check_max_iter(max_iter):
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: expected a positive int, got {max_iter!r}")


def _solver_setup(fn, backend, device, axis: int, options: dict) -> tuple:
    """``(kernels, slab options)`` for a call of ``fn`` with ``backend`` and ``**options`` on slabs of
    ``device`` split along ``axis``; raises naming ``fn`` and the argument."""
    if backend not in BACKENDS:
        hint = (
            " (the compiled CPU solvers do not run split grids; 'reference' runs CPU slabs)" if backend == "cpu" else ""
        )
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}{hint}")
    if backend == "cuda" and not _kernels(device, axis):
        raise ValueError(
            f"backend: 'cuda' runs the grid kernels on CUDA slabs split along axis 0, got slabs on "
            f"{device} split along axis {axis}; pass backend='auto' or 'reference'"
        )
    kernels = backend != "reference" and _kernels(device, axis)
    bad = sorted(set(options) - set(SLAB_OPTIONS))
    if bad or (options and not kernels):
        key = bad[0] if bad else sorted(options)[0]
        takes = ", ".join(SLAB_OPTIONS) if kernels else "none"
        raise TypeError(
            f"{fn.__name__}(): unexpected keyword argument {key!r}; further keywords go to the CUDA "
            f"kernels of the slabs, which take {', '.join(SLAB_OPTIONS)} (here they "
            f"{'run' if kernels else 'do not run'}: backend={backend!r}, {device.type} slabs along axis "
            f"{axis}; options taken here: {takes})"
        )
    if not options:
        return kernels, list(_slab_options)
    from . import _ops

    _ops.ensure("cuda")
    names = list(_ops.names("grid_cuda_options"))
    slab = [0] * len(names)
    for k, v in options.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{k}: expected an int, got {v!r}")
        slab[names.index(k)] = v
    return kernels, slab


# ---------------------------------------------------------------------------------------------- comms
class _Comm:
    """This rank's place in the group, neighbour messages and all-reduces on one device."""

    def __init__(self, group, device):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "group: expected an initialized torch.distributed process group "
                "(call torch.distributed.init_process_group first), got none"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.device = device
        self.sent_bytes = 0

    def peer(self, r: int) -> int:
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def has(self, side: int) -> bool:
        """Is there a neighbour at ``side`` (-1: previous rank, +1: next rank)?"""
        return 0 <= self.rank + side < self.size

    def swap(self, out: dict) -> dict:
        """Send ``out[side]`` to the neighbour at each side; return what each neighbour sent here.

        Both neighbours send tensors of the same shape and dtype as those sent to them.
        """
        ops, got = [], {}
        for side, t in out.items():
            if not self.has(side):
                continue
            t = t.contiguous()
            got[side] = torch.empty_like(t)
            peer = self.peer(self.rank + side)
            ops.append(dist.P2POp(dist.isend, t, peer, self.group))
            ops.append(dist.P2POp(dist.irecv, got[side], peer, self.group))
            self.sent_bytes += t.numel() * t.element_size()
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return got

    def total(self, values, op=None) -> list[int]:
        """All-reduce a few int64 scalars (sum by default)."""
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM, group=self.group)
        return t.tolist()


# ---------------------------------------------------------------------------------------------- slab geometry
@dataclass
class Slab:
    """This rank's part of the global network (what :class:`DistributedCutResult` certifies).

    ``caps`` ``[2K, *shape]`` holds the capacity of every arc leaving a node of the slab, border arcs
    included (direction ``K + k`` is ``-offsets[k]``); ``source`` and ``sink`` the terminal capacities.

    Examples
    --------
    >>> import torch, torchcut
    >>> s = Slab(torchcut.grid_offsets(2, 4), (1, 2), 0, 0, torch.tensor([[5, 0]]), torch.tensor([[0, 5]]),
    ...          torch.zeros(4, 1, 2, dtype=torch.int64))
    >>> s.directions, s.num_nodes, s.batch_size
    (((0, 1), (1, 0), (0, -1), (-1, 0)), 2, 1)
    """

    offsets: tuple
    shape: tuple
    axis: int
    start: int
    source: torch.Tensor
    sink: torch.Tensor
    caps: torch.Tensor
    batched: bool = False
    scale: Any = None

    @property
    def directions(self):
        """All 2K directions: the offsets, then their negations (the rows of ``caps``)."""
        return self.offsets + tuple(tuple(-v for v in o) for o in self.offsets)

    @property
    def num_nodes(self) -> int:
        """Nodes of the slab."""
        return math.prod(self.shape)

    @property
    def batch_size(self) -> int:
        """Always 1: a slab is one part of one grid."""
        return 1

    @property
    def device(self):
        """The device that holds the slab's tensors."""
        return self.caps.device


class _Geometry:
    """Directions that cross a slab border, and the maps between face layers of two neighbours."""

    def __init__(self, offsets, shape, axis, comm: _Comm):
        self.K = len(offsets)
        self.offsets = tuple(offsets)
        self.dirs = tuple(offsets) + tuple(tuple(-v for v in o) for o in offsets)
        self.shape, self.axis, self.comm = tuple(shape), axis, comm
        # crossing[side] = directions d whose arcs leave the slab towards the neighbour at side
        self.crossing = {
            side: [d for d, v in enumerate(self.dirs) if v[axis] == side and comm.has(side)] for side in (-1, 1)
        }

    def layer(self, side: int) -> int:
        return 0 if side < 0 else self.shape[self.axis] - 1

    def face(self, x: torch.Tensor, side: int) -> torch.Tensor:
        """View of the border layer of ``x`` (trailing dims = the slab) at ``side``."""
        return x.select(x.dim() - len(self.shape) + self.axis, self.layer(side))

    def rest(self, d: int) -> tuple:
        """Direction ``d`` without its component along the split axis (a move within a face)."""
        return tuple(v for i, v in enumerate(self.dirs[d]) if i != self.axis)

    def opp(self, d: int) -> int:
        return (d + self.K) % (2 * self.K)

    def nb_crossing(self, side: int) -> list:
        """The neighbour at ``side``'s crossing directions towards us, in the order it sends them."""
        return sorted(self.opp(d) for d in self.crossing[side])

    def at_heads(self, nb_face: torch.Tensor, d: int, fill) -> torch.Tensor:
        """Neighbour's face values seen at the tails of our arcs in direction ``d`` (fill: no head)."""
        return shift(nb_face, self.rest(d), fill)

    def to_heads(self, tail_values: torch.Tensor, d: int) -> torch.Tensor:
        """Values the neighbour sent for its arcs in direction ``d``, moved to their heads here."""
        return shift(tail_values, tuple(-v for v in self.rest(d)), 0)


# ---------------------------------------------------------------------------------------------- input checks
def _header(source, sink, edges, reverse, offsets, axis, start) -> tuple[dict, tuple]:
    """Local validation; returns (header for the all-gather, tensors) and never raises."""
    head: dict = {"error": None}
    try:
        offs = _check_offsets(offsets)
        ndim, K = len(offs[0]), len(offs)
        head.update(offsets=offs)
        if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < ndim:
            raise ValueError(f"axis: expected a spatial axis in [0, {ndim}), got {axis!r}")
        if any(abs(o[axis]) > 1 for o in offs):
            raise ValueError(f"offsets: expected components in {{-1, 0, 1}} along axis {axis}, got {offs!r}")
        head.update(axis=axis)
        src = as_tensor(source, "source")
        dev = src.device
        snk = as_tensor(sink, "sink", dev)
        if src.dim() != ndim:
            raise ValueError(
                f"source: expected shape [*shape] with {ndim} spatial dims (from offsets; batches are "
                f"not supported), got shape {tuple(src.shape)}"
            )
        shape = tuple(src.shape)
        if any(n == 0 for n in shape):
            raise ValueError(f"source: expected a non-empty slab, got shape {shape}")
        if tuple(snk.shape) != shape:
            raise ValueError(f"sink: expected the shape of source {shape}, got {tuple(snk.shape)}")
        e = GridGraph._stack(edges, "edges", K, shape, dev)
        r = e if reverse is None else GridGraph._stack(reverse, "reverse", K, shape, dev)
        parts = [check_capacity(t, n) for t, n in ((src, "source"), (snk, "sink"), (e, "edges"), (r, "reverse"))]
        for t, n in zip(parts, ("source", "sink", "edges", "reverse")):
            if t.is_floating_point():
                raise TypeError(
                    f"{n}: expected integer capacities (int32 or int64), got {t.dtype}; "
                    "quantize float capacities first (e.g. with torchcut.GridGraph's scale)"
                )
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise ValueError(
                f"start: expected a non-negative int (the slab's first index along axis) or None, got {start!r}"
            )
        head.update(
            shape=shape,
            start=start,
            device=dev.type,
            peak=max(int(e.max()) + int(r.max()), int(snk.max())),
            bound=sum(int(t.max()) * t.numel() for t in parts),
        )
        return head, tuple(parts)
    except (TypeError, ValueError) as exc:
        head["error"] = (type(exc).__name__, str(exc))
        return head, ()


def _raise_first(errors: list, me: int) -> None:
    """Raise the first rank's local error on every rank (named with its rank on the others)."""
    for r, err in enumerate(errors):
        if err is not None:
            kind, msg = err
            exc = TypeError if kind == "TypeError" else ValueError
            raise exc(msg if r == me else f"rank {r}: {msg}")


def _check_headers(heads: list, me: int) -> None:
    """Raise (the same error on every rank) when the ranks' inputs do not form one grid."""
    _raise_first([h["error"] for h in heads], me)
    h0 = heads[0]
    for r, h in enumerate(heads):
        if h["offsets"] != h0["offsets"]:
            raise ValueError(
                f"offsets: expected the same offsets on every rank, got {h0['offsets']!r} on rank 0 "
                f"and {h['offsets']!r} on rank {r}"
            )
        if h["axis"] != h0["axis"]:
            raise ValueError(
                f"axis: expected the same axis on every rank, got {h0['axis']} on rank 0 and {h['axis']} on rank {r}"
            )
        if h["device"] != h0["device"]:
            raise ValueError(
                f"source: expected tensors on one device type on every rank, got {h0['device']} on "
                f"rank 0 and {h['device']} on rank {r}"
            )
        a = h["axis"]
        other = lambda s: s[:a] + s[a + 1 :]  # noqa: E731
        if other(h["shape"]) != other(h0["shape"]):
            raise ValueError(
                f"source: expected slabs whose shapes differ only along axis {a}, got {h0['shape']} on "
                f"rank 0 and {h['shape']} on rank {r}"
            )
    starts = [h["start"] for h in heads]
    if any(s is not None for s in starts):
        if any(s is None for s in starts):
            raise ValueError(f"start: expected it on every rank or on none, got {starts}")
        expect = 0
        for r, h in enumerate(heads):
            if h["start"] != expect:
                raise ValueError(
                    f"start: expected slabs in rank order, rank {r} starting at {expect} along axis "
                    f"{h['axis']}, got start={h['start']} (starts {starts})"
                )
            expect += h["shape"][h["axis"]]


# ---------------------------------------------------------------------------------------------- solves
# ---------------------------------------------------------------------------------------------- push-relabel
def _push_relabel(R, excess, sink, geo: _Geometry, max_iter, stats) -> torch.Tensor:
    """Bulk-synchronous push-relabel over all slabs, in torch ops, in place; returns the source side.

    The synchronous rounds of :mod:`torchcut.solvers.reference` on every slab at once: a push along
    a border arc lowers the residual here and is sent, after the round, to the neighbour, which adds
    it to the excess of the arc's head and to the residual of the reverse arc; the neighbours' border
    heights sit in the padding of the height buffer (a snapshot, refreshed after every round). A
    global relabel is the exact BFS distance to the sink over all slabs, in rounds: a local fixed
    point whose padding holds the neighbours' border distances, an exchange, until no rank changes
    (one all-reduce per round). The solve stops right after a global relabel that leaves no node with
    excess and a finite height on any rank.
    """
    from .solvers.reference import _Padded, _unless, push_round, relabel_round

    comm, offs, axis, K = geo.comm, geo.offsets, geo.axis, geo.K
    INF = 2**29  # heights and distances; INF + INF + 1 stays within int32
    dirs = geo.dirs
    shape = geo.shape
    c = R.unsqueeze(0).to(torch.int64)
    s = sink.unsqueeze(0).to(torch.int64)
    grid = _Padded(shape, offs)
    e_buf = grid.new(1, 0, torch.int64, R.device)
    e = grid.at(e_buf)
    e.copy_(excess)
    h_buf = grid.new(1, INF, torch.int32, R.device)
    h = grid.at(h_buf)
    p = grid.pad
    sides = [side for side in (-1, 1) if comm.has(side)]

    def pad_view(buf, side):
        """The padding layer of ``buf`` beyond the border at ``side``: the neighbour's border layer."""
        return buf[
            (0,)
            + tuple(
                (slice(p - 1, p) if side < 0 else slice(p + n, p + n + 1)) if i == axis else slice(p, p + n)
                for i, n in enumerate(shape)
            )
        ].squeeze(axis)

    def swap_faces(buf):
        """The neighbours' border layers of ``buf`` into its padding; True if any of them changed."""
        got = comm.swap({side: geo.face(grid.at(buf)[0], side) for side in sides})
        changed = False
        for side, face in got.items():
            dst = pad_view(buf, side)
            changed |= not torch.equal(dst, face)
            dst.copy_(face)
        return changed

    rounds = relabels = bfs_rounds = 0
    limit = max_iter
    while True:
        # ---- global relabel: exact distances over all slabs, in rounds
        d_buf = grid.new(1, INF, torch.int32, R.device)
        d = grid.at(d_buf)
        d.copy_(_unless(s > 0, INF) + 1)
        penalty = [_unless(c[:, k] > 0, INF) + 1 for k in range(2 * K)]
        through = torch.empty_like(d)
        levels = 0
        while True:
            bfs_rounds += 1
            while True:  # local fixed point, the neighbours' distances fixed in the padding
                levels += 1
                before = d.clone()
                for k, o in enumerate(dirs):
                    torch.add(grid.at(d_buf, o), penalty[k], out=through)
                    torch.minimum(d, through, out=d)
                d.clamp_(max=INF)
                if torch.equal(before, d):
                    break
            changed = swap_faces(d_buf)
            if comm.total([int(changed)], dist.ReduceOp.MAX)[0] == 0:
                break
        del penalty, through
        h.copy_(d)
        swap_faces(h_buf)
        del d_buf, d
        relabels += 1
        if comm.total([int(((e > 0) & (h < INF)).any())], dist.ReduceOp.MAX)[0] == 0:
            break
        period = comm.total([max(4, levels // 4)], dist.ReduceOp.MAX)[0]
        for _ in range(period):
            rounds += 1
            if rounds > limit:
                raise RuntimeError(f"max_iter: the solve did not finish in {limit} rounds; pass a larger max_iter")
            sent = {}

            def record(k, delta):  # what crosses a border, into the neighbour's nodes
                side = dirs[k][axis]
                if side != 0 and k in geo.crossing[side]:
                    sent[k] = geo.face(delta[0], side).clone()

            push_round(grid, c, s, e_buf, h_buf, dirs, INF, record)
            for side in sides:  # what reached the padding was sent above
                pad_view(e_buf, side).zero_()
            relabel_round(grid, c, s, h_buf, dirs, INF, (e > 0) & (h < INF))
            # the round's border flows and the new border heights to the neighbours
            out = {
                side: torch.stack([sent[d] for d in geo.crossing[side]] + [geo.face(h[0], side).to(torch.int64)])
                for side in (-1, 1)
                if geo.crossing[side]
            }
            for side, msg in comm.swap(out).items():
                for j, d_nb in enumerate(geo.nb_crossing(side)):
                    amount = geo.to_heads(msg[j], d_nb)
                    geo.face(e[0], side).add_(amount)
                    geo.face(c[0, geo.opp(d_nb)], side).add_(amount)
                pad_view(h_buf, side).copy_(msg[-1].to(torch.int32))
    excess.copy_(e[0])
    sink.copy_(s[0].to(sink.dtype))
    R.copy_(c[0].to(R.dtype))
    stats.update(rounds=rounds, global_relabels=relabels, bfs_rounds=bfs_rounds)
    return h[0] >= INF


def _pad_planes(ndim: int) -> int:
    """Planes below a slab's first real plane in the padded layout (the ghost plane and filler): one tile
    of the CUDA kernels along the split axis, so that the real planes start on a tile boundary."""
    return 8 if ndim == 3 else 16


def _padded(t: torch.Tensor, lead: int, lo: int, hi: int) -> torch.Tensor:
    """``t`` (``lead`` leading dims, then the split axis) with ``lo`` zero planes before and ``hi`` after."""
    n = t.shape[lead]
    out = torch.zeros(t.shape[:lead] + (lo + n + hi,) + t.shape[lead + 1 :], dtype=t.dtype, device=t.device)
    out.narrow(lead, lo, n).copy_(t)
    return out


def _push_relabel_cuda(
    R, excess, sink, lo: int, hi: int, geo: _Geometry, max_iter: int, stats, slab_options=()
) -> torch.Tensor:
    """The bulk-synchronous push-relabel with the CUDA grid kernels, in place; the source side of the real planes.

    ``R`` ``[2K, Z, ...]``, ``excess`` (int64) and ``sink`` are the padded slab: real planes ``[lo, hi)``
    along the split axis (axis 0), the ghost planes ``lo - 1`` and ``hi`` where there is a neighbour,
    nothing but zeros outside the real planes. ``torch.classes.torchcut.GridSlab`` (grid_slab.cpp) runs the
    single-device kernels on it; this loop moves the border planes between the ranks:

    * after every push launch, each rank sends each neighbour what the launch pushed into the ghost plane
      on that side (per arc) and its border heights; the neighbour adds the amounts to its border
      plane's excess and reverse residuals and keeps the heights in its ghost plane;
    * a global relabel is the worklist BFS of each slab with the ghost planes at infinity (or, as on one
      device, a repair of the last distances where the BFS is bound by its tile visits), then rounds in
      which the border distances are exchanged, lower the ghost planes and are relaxed from there,
      until no rank's ghost plane changes (one all-reduce per round): the exact BFS distances of the
      whole grid;
    * right after a global relabel, the active nodes of all ranks are summed (one all-reduce) and the
      solve stops when there are none.
    """
    from . import _ops

    _ops.ensure("cuda")
    comm = geo.comm
    dev = R.device
    ext = tuple(R.shape[1:])
    P = math.prod(ext[1:])
    offsets = [int(v) for o in geo.offsets for v in o]
    slab = torch.classes.torchcut.GridSlab(R, excess, sink, list(ext), offsets, lo, hi, list(slab_options))
    step = {0: -1, 1: 1}
    sides = [s for s in (0, 1) if comm.has(step[s])]
    peer = {s: comm.peer(comm.rank + step[s]) for s in sides}
    heights = slab.heights()
    border = {0: heights[lo * P : (lo + 1) * P], 1: heights[(hi - 1) * P : hi * P]}
    msg_out = {s: torch.empty((slab.directions(s) + 1, P), dtype=R.dtype, device=dev) for s in sides}
    msg_in = {s: torch.empty_like(msg_out[s]) for s in sides}
    dist_in = {s: torch.empty(P, dtype=torch.int32, device=dev) for s in sides}
    changed = torch.zeros(1, dtype=torch.int64, device=dev)

    def exchange(out, into):
        ops = []
        for s in sides:
            ops.append(dist.P2POp(dist.isend, out[s], peer[s], comm.group))
            ops.append(dist.P2POp(dist.irecv, into[s], peer[s], comm.group))
            comm.sent_bytes += out[s].numel() * out[s].element_size()
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()

    # push launches per global relabel: the single-device rule (grid_solve.cpp) on the depth of the whole
    # grid (the local depths summed over the ranks)
    D = 2 * geo.K
    push_cap = 4 if D <= 6 else 64
    push_min = 6 if D >= 18 and len(ext) == 3 else 1
    push_blocks = 2 * torch.cuda.get_device_properties(dev).multi_processor_count * comm.size
    relabels = launches = bfs_rounds = 0
    marks = []  # (event before a global relabel, event before its pushes): the phases' device time
    while True:
        marks.append([torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)])
        marks[-1][0].record()
        slab.relabel(True)
        bfs_rounds += 1
        while sides:
            exchange(border, dist_in)
            changed.zero_()
            for s in sides:
                slab.dist(s, dist_in[s], changed)
            dist.all_reduce(changed, op=dist.ReduceOp.MAX, group=comm.group)
            if int(changed.item()) == 0:
                break
            slab.relabel(False)
            bfs_rounds += 1
        counts = slab.count()
        dist.all_reduce(counts, group=comm.group)
        active, tiles, depth, stalled = counts.tolist()
        relabels += 1
        if stalled:
            raise RuntimeError("the CUDA BFS stalled (a bug, please report it)")
        if active == 0:
            break
        if relabels > max_iter:
            raise RuntimeError(
                f"max_iter: the solve did not finish in {max_iter} global relabels; pass a larger max_iter"
            )
        n = max(push_min, min(push_cap, depth // 2))
        if tiles * 4 <= push_blocks:  # few active tiles: launches are cheap, relabels are not
            n = max(n, min(24, max(6, depth)))
        marks[-1][1].record()
        for _ in range(n):
            slab.push()
            if sides:
                for s in sides:
                    slab.pack(s, msg_out[s])
                exchange(msg_out, msg_in)
                for s in sides:
                    slab.absorb(s, msg_in[s])
        launches += n
    marks[-1][1].record()  # the end of the last global relabel
    visits, _, repairs = slab.counters()  # waits for the device
    relabel_ms = sum(a.elapsed_time(b) for a, b in marks)
    push_ms = sum(b.elapsed_time(c[0]) for (_, b), c in zip(marks[:-1], marks[1:]))
    stats.update(
        rounds=launches,
        global_relabels=relabels,
        repairs=repairs,
        bfs_rounds=bfs_rounds,
        bfs_visits=visits,
        relabel_ms=round(relabel_ms, 3),
        push_ms=round(push_ms, 3),
    )
    return heights.view(ext)[lo:hi] >= INF


# ---------------------------------------------------------------------------------------------- result
@dataclass
class DistributedCutResult(CutResult):
    """:class:`~torchcut.CutResult` of one rank's slab, with what its certificate needs from the neighbours.

    ``flow_value`` is the global maximum flow (the same on every rank), ``mask`` this slab's part of the
    canonical minimum cut (True = source side), ``residual`` ``[1, 2K, *shape]`` the final residuals of
    the arcs leaving the slab's nodes (border arcs included). ``ghost_residual`` and ``ghost_mask`` hold,
    for each border direction ``d``, the neighbour's residual of the reverse arc and the side of the arc's
    head, as seen at the arc's tail (exchanged once when the solve ends).

    Examples
    --------
    >>> DistributedCutResult.verify.__doc__.splitlines()[0]
    'Check the global certificate from this slab and its ghosts, with one all-reduce; True or raise.'
    """

    ghost_residual: dict = field(default_factory=dict)
    ghost_caps: dict = field(default_factory=dict)
    ghost_mask: dict = field(default_factory=dict)
    ghost_exists: dict = field(default_factory=dict)
    group: Any = None

    def verify(self) -> bool:
        """Check the global certificate from this slab and its ghosts, with one all-reduce; True or raise.

        Collective: every rank of the group must call it. Each rank checks, for the arcs leaving its
        nodes (border arcs included, their reverse residuals taken from the neighbour's ghost copy):
        residuals non-negative and each pair's residuals summing to the pair's capacities, terminal
        flows within capacity, non-negative excess, no residual arc from the source side to the sink
        side; and it adds up the flow into the sink and the capacity of the cut arcs leaving its nodes.
        One all-reduce sums the violations, the flows and the cut capacities; the flow must equal the
        cut capacity and ``flow_values`` on every rank.

        Examples
        --------
        >>> callable(DistributedCutResult.verify)
        True
        """
        g: Slab = self.graph
        i64 = torch.int64
        K = len(g.offsets)
        caps = g.caps.to(i64)
        res = self.residual[0].to(i64)
        S = self.node_mask[0]
        T = ~S
        src_f = self.source_flow[0].to(i64)
        snk_f = self.sink_flow[0].to(i64)
        bad: dict = {}

        def count(name, m):
            bad[name] = bad.get(name, 0) + int(m.sum())

        count("residual capacity negative", res < 0)
        count("source-arc flow outside [0, capacity]", (src_f < 0) | (src_f > g.source))
        count("sink-arc flow outside [0, capacity]", (snk_f < 0) | (snk_f > g.sink))
        count("unsaturated source arc into the sink side", T & (src_f < g.source))
        count("unsaturated sink arc from the source side", S & (snk_f < g.sink))
        count("node with negative excess (flow conservation broken)", src_f - snk_f - (caps - res).sum(0) < 0)
        cut = int(torch.where(T, g.source, 0).sum()) + int(torch.where(S, g.sink.to(i64), 0).sum())
        ones = torch.ones(g.shape, dtype=torch.bool, device=S.device)
        layer = {-1: 0, 1: g.shape[g.axis] - 1}
        for d, v in enumerate(g.directions):
            back = (d + K) % (2 * K)
            inside = shift(ones, v, False)  # head in this slab
            exists = inside.clone()
            # (tail side, residual, capacity, reverse residual, reverse capacity, head side) per arc
            arcs = [
                (
                    S[inside],
                    res[d][inside],
                    caps[d][inside],
                    shift(res[back], v, 0)[inside],
                    shift(caps[back], v, 0)[inside],
                    shift(T, v, False)[inside],
                )
            ]
            if d in self.ghost_residual:  # border arcs: the reverse arc and the head live on the neighbour
                side = v[g.axis]
                there = self.ghost_exists[d]
                exists.select(g.axis, layer[side]).logical_or_(there)
                on_face = lambda x: x.select(g.axis, layer[side])[there]  # noqa: E731
                arcs.append(
                    (
                        on_face(S),
                        on_face(res[d]),
                        on_face(caps[d]),
                        self.ghost_residual[d][there].to(i64),
                        self.ghost_caps[d][there].to(i64),
                        ~self.ghost_mask[d][there],
                    )
                )
            count("capacity on an arc that leaves the grid", (~exists) & (caps[d] != 0))
            for tail_S, r_f, c_f, r_b, c_b, head_T in arcs:
                count("arc pair residuals do not sum to the pair's capacities", (r_f + r_b) != (c_f + c_b))
                count("residual arc from the source side to the sink side", tail_S & head_T & (r_f > 0))
                cut += int(torch.where(tail_S & head_T, c_f, 0).sum())
        names = sorted(bad)
        totals = _Comm(self.group, res.device).total([bad[n] for n in names] + [int(snk_f.sum()), cut])
        for n, v in zip(names, totals):
            if v:
                raise CertificateError(f"{n} ({v} violation(s) over all ranks)")
        flow, cut_total = totals[-2:]
        claimed = int(self.flow_values[0])
        if flow != claimed:
            raise CertificateError(f"flow into the sink {flow} differs from flow_values {claimed}")
        if cut_total != flow:
            raise CertificateError(f"cut capacity {cut_total} differs from the flow value {flow}")
        return True


# ---------------------------------------------------------------------------------------------- entry point
@renamed_keywords(max_sweeps="max_iter")
def maxflow(
    source,
    sink,
    edges,
    offsets,
    reverse=None,
    *,
    axis: int = 0,
    group=None,
    start: int | None = None,
    backend: str = "auto",
    max_iter: int = DEFAULT_MAX_ITER,
    **solver_options,
) -> DistributedCutResult:
    """Exact maximum flow of a grid network split into slabs over the ranks of a process group.

    A collective call: every rank of ``group`` calls it with its own slab.

    Parameters
    ----------
    source, sink : tensor ``[*shape]``
        This slab's terminal capacities (integer).
    edges : tensor ``[K, *shape]`` or K tensors
        ``edges[k][p]``: capacity of the arc ``p -> p + offsets[k]``; arcs of the slab's border nodes
        into a neighbouring slab are real arcs (they leave the grid only at the global ends).
    offsets : K integer tuples
        As for :class:`torchcut.GridGraph`; the same on every rank, components in {-1, 0, 1} along
        ``axis``.
    reverse : like ``edges``, optional
        ``reverse[k][p]``: capacity of ``p + offsets[k] -> p``; default ``edges`` (symmetric).
    axis : int
        The spatial axis along which the grid is split; slabs follow in rank order.
    group : ProcessGroup, optional
        Default: the default group. gloo for CPU tensors, NCCL for CUDA tensors (one device per rank).
    start : int, optional
        This slab's first index along ``axis`` in the global grid. When given (on every rank), the
        slabs are checked to be contiguous and in rank order.
    backend : {"auto", "cuda", "reference"}
        "cuda": the single-device grid kernels on every slab (CUDA slabs split along axis 0);
        "reference": the synchronous push-relabel in torch ops (any device and axis, exact, slow);
        "auto" (default): "cuda" where it applies, else "reference".
    max_iter : int
        Guard on the number of global relabels (CUDA kernels) or push rounds (torch ops); exceeding it
        raises RuntimeError on every rank (default 10000; formerly ``max_sweeps``, still accepted with a
        ``FutureWarning``).
    **solver_options
        With the CUDA kernels: ``rounds``, ``persist`` and ``repair`` of
        ``torchcut.solvers.cuda.OPTIONS`` (the tiles are fixed by the slabs' layout). Anything else
        raises ``TypeError``.

    Returns
    -------
    DistributedCutResult
        ``flow_value`` global on every rank; ``mask`` this slab's part of the canonical minimum cut;
        ``verify()`` (collective); ``stats``: ``global_relabels``, ``bfs_rounds`` (local BFS passes and
        border rounds), ``rounds`` (push launches, or push rounds in torch ops), ``border_bytes`` sent by
        this rank, ``kernels`` (whether the CUDA grid kernels ran: CUDA slabs split along axis 0), and
        on CUDA ``repairs``, ``bfs_visits`` and the device time of the relabels and pushes.

    Raises
    ------
    ValueError, TypeError
        On every rank, when any rank's input is bad or the slabs do not form one grid.

    Examples
    --------
    A group of one process is a single slab (launch with ``torchrun`` for more):

    >>> import torch, torch.distributed as dist, torchcut
    >>> from torchcut import distributed as tcd
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> r = tcd.maxflow(torch.tensor([[5, 0]]), torch.tensor([[0, 5]]), torch.tensor([[[3, 0]], [[0, 0]]]),
    ...                 torchcut.grid_offsets(2, 4))
    >>> r.flow_value, r.mask.tolist(), r.verify()
    (3, [[True, False]], True)
    >>> dist.destroy_process_group()
    """
    t0 = time.perf_counter()
    head, parts = _header(source, sink, edges, reverse, offsets, axis, start)
    if not dist.is_available() or not dist.is_initialized():
        _raise_first([head["error"]], 0)
        _Comm(group, None)  # raises: no process group
    try:
        _check_max_iter(max_iter)
        dev0 = parts[0].device if parts else torch.device("cpu")
        kernels, slab_opts = _solver_setup(maxflow, backend, dev0, axis, solver_options)
    except (TypeError, ValueError) as exc:
        head["error"] = head["error"] or (type(exc).__name__, str(exc))
        kernels, slab_opts = False, []
    rank = dist.get_rank(group)
    heads = [None] * dist.get_world_size(group)
    dist.all_gather_object(heads, head, group=group)
    _check_headers(heads, rank)
    bound = sum(h["bound"] for h in heads)
    if bound >= SUM_LIMIT:
        raise ValueError(
            f"source: the capacities of all slabs could sum to {bound}, at or above 2**62 (int64 "
            "flows); scale them down"
        )
    cap_dtype = torch.int32 if max(h["peak"] for h in heads) <= INT32_MAX else torch.int64
    src, snk, e, rv = parts
    offs = head["offsets"]
    dev = src.device
    comm = _Comm(group, dev)
    shape = tuple(src.shape)
    geo = _Geometry(offs, shape, axis, comm)
    K = len(offs)

    # capacities of the arcs leaving this slab's nodes, border arcs included
    caps = torch.empty((2 * K,) + shape, dtype=cap_dtype, device=dev)
    for k, o in enumerate(offs):
        caps[k].copy_(e[k])
        caps[K + k].copy_(shift(rv[k], tuple(-v for v in o), 0))  # reverse[k][p - o], inside the slab
    # A border pair is described by the rank of its tail p (p + o in the neighbour): send reverse[k][p]
    # to the neighbour, which stores it at the head as the capacity of its arc in direction K + k.
    out = {
        side: torch.stack([geo.face(rv[d] if d < K else torch.zeros_like(rv[0]), side) for d in geo.crossing[side]]).to(
            cap_dtype
        )
        for side in (-1, 1)
        if geo.crossing[side]
    }
    for side, msg in comm.swap(out).items():
        for j, d_nb in enumerate(geo.nb_crossing(side)):
            if d_nb < K:
                geo.face(caps[geo.opp(d_nb)], side).copy_(geo.to_heads(msg[j], d_nb))
    for d, v in enumerate(geo.dirs):
        keep = v[axis] != 0 and comm.has(v[axis])  # arcs into a neighbour are real
        _zero_outside(caps[d], tuple(0 if (i == axis and keep) else x for i, x in enumerate(v)))
    del e, rv, out
    snk, lo = snk.to(cap_dtype), None
    if kernels:  # the kernels' padded layout
        lo, hi = (_pad_planes(len(shape)) if comm.has(-1) else 0), int(comm.has(1))
        caps, src, snk = _padded(caps, 1, lo, hi), _padded(src, 0, lo, hi), _padded(snk, 0, lo, hi)
    return _run(caps, src, snk, geo, start, max_iter, t0, certificate=True, lo=lo, slab_options=slab_opts)


def _kernels(device, axis: int) -> bool:
    """Whether the push-relabel runs on the CUDA grid kernels (else in torch ops)."""
    return device.type == "cuda" and axis == 0


def _run(caps, src, snk, geo: _Geometry, start, max_iter, t0, certificate, lo=None, slab_options=()):
    """The solve of this slab's network (``caps`` ``[2K, *shape]`` border arcs included, ``snk`` of the
    dtype of ``caps``). Without ``certificate`` the solve works in ``caps``, ``src`` and ``snk``
    themselves (used up) and only the mask is returned. ``lo``: the tensors are in the padded layout of
    the CUDA kernels (:func:`_push_relabel_cuda`, split axis 0), their real planes start at ``lo``."""
    comm, offs, shape, axis = geo.comm, geo.offsets, geo.shape, geo.axis
    dev = caps.device
    stats = {}
    src64 = src.to(torch.int64)
    snk_c = snk
    excess = src64.clone() if certificate else src64
    sink_res = snk_c.clone() if certificate else snk_c
    net_terminals_(excess, sink_res)
    R = caps.clone() if certificate else caps
    sent_before = comm.sent_bytes
    if lo is not None:  # the padded layout: the kernels, then the real planes alone
        n = shape[0]
        mask = _push_relabel_cuda(R, excess, sink_res, lo, lo + n, geo, max_iter, stats, slab_options)
        real = lambda t, lead=0: t.narrow(lead, lo, n)  # noqa: E731
        caps, src64, snk_c, R, excess, sink_res = (
            real(caps, 1),
            real(src64),
            real(snk_c),
            real(R, 1),
            real(excess),
            real(sink_res),
        )
    else:
        if dev.type == "cuda" and axis != 0:
            warnings.warn(
                f"axis: CUDA slabs split along axis {axis} run the push-relabel in torch ops, far slower "
                "and larger than the CUDA kernels, which need the split along axis 0; move that axis first "
                "(x.movedim(axis, 0)) to use them",
                RuntimeWarning,
                stacklevel=3,
            )
        mask = _push_relabel(R, excess, sink_res, geo, max_iter, stats)
    solve_bytes = comm.sent_bytes - sent_before
    stats.update(kernels=lo is not None, ranks=comm.size, border_bytes=solve_bytes, seconds=time.perf_counter() - t0)
    last_stats.clear()
    last_stats.update(stats)
    if not certificate:
        return mask
    sink_flow = snk_c.to(torch.int64) - sink_res
    flow = comm.total([int(sink_flow.sum())])[0]

    # ghost copies for the certificate: the neighbour's border residuals, capacities and mask face
    out = {
        side: torch.cat(
            [
                torch.stack([geo.face(R[d], side) for d in geo.crossing[side]]).to(torch.int64),
                torch.stack([geo.face(caps[d], side) for d in geo.crossing[side]]).to(torch.int64),
                geo.face(mask, side).to(torch.int64).unsqueeze(0),
            ]
        )
        for side in (-1, 1)
        if geo.crossing[side]
    }
    gres, gcaps, gmask, gexists = {}, {}, {}, {}
    for side, msg in comm.swap(out).items():
        nb = geo.nb_crossing(side)
        n = len(nb)
        for d in geo.crossing[side]:
            j = nb.index(geo.opp(d))
            gres[d] = geo.at_heads(msg[j], d, 0)
            gcaps[d] = geo.at_heads(msg[n + j], d, 0)
            gmask[d] = geo.at_heads(msg[2 * n].bool(), d, True)
            gexists[d] = geo.at_heads(torch.ones_like(msg[2 * n], dtype=torch.bool), d, False)
    stats.update(backend="distributed", seconds=time.perf_counter() - t0)
    slab = Slab(offs, shape, axis, -1 if start is None else start, src64, snk_c, caps)
    return DistributedCutResult(
        graph=slab,
        flow_values=torch.tensor([flow], dtype=torch.int64, device=dev),
        node_mask=mask.unsqueeze(0),
        residual=R.unsqueeze(0),
        source_flow=src64.unsqueeze(0),
        sink_flow=sink_flow.unsqueeze(0),
        stats=stats,
        ghost_residual=gres,
        ghost_caps=gcaps,
        ghost_mask=gmask,
        ghost_exists=gexists,
        group=comm.group,
    )


# ---------------------------------------------------------------------------------------------- segmentation
def _agree(error, group) -> None:
    """All-gather each rank's local error (or None) and raise the first one on every rank."""
    errors = [None] * dist.get_world_size(group)
    dist.all_gather_object(errors, error, group=group)
    _raise_first(errors, dist.get_rank(group))


def _global_sigma(x, lower, axis: int, ndim: int, reduce) -> float:
    """:func:`torchcut.energy.estimate_sigma` of the whole volume from this slab: the same exact
    integer sums, each pair counted by the rank of its tail (``lower``: the previous rank's border
    layer and this slab's first, or None), added over the ranks in int64 limbs."""
    from . import energy

    dims = tuple(range(1, x.dim()))
    exps = energy._sigma_exponents(reduce(x.amin(dims), "min").unsqueeze(0), reduce(x.amax(dims), "max").unsqueeze(0))
    total, count = 0, 0
    for a in range(ndim):
        o = tuple(1 if i == a else 0 for i in range(ndim))
        for part in [x] + ([lower] if a == axis and lower is not None else []):
            (s,), n = energy._sigma_sums(part.unsqueeze(0), o, exps)
            total += s
            count += n
    inf = total == math.inf
    limbs = [0, 0] if inf else [total >> 31, total & (2**31 - 1)]
    hi, low, count, inf = reduce(
        torch.tensor(limbs + [count, int(inf)], dtype=torch.int64, device=x.device), "sum"
    ).tolist()
    total = math.inf if inf else (hi << 31) + low
    return float(energy._sigma_value([total], count, exps, x.device)[0])


def _border_links(g, pairs, geo: _Geometry, spacing) -> None:
    """Write the n-links between this slab's border voxels and the neighbours' into ``g.caps``.

    ``pairs[side]``: the two layers (in global order) on both sides of the border at ``side``. The
    weights are those :func:`torchcut.energy.segmentation_graph` computes for the whole volume, by
    the same float32 operations in the same order (the tests compare every capacity).
    """
    from . import energy
    from .grid import overlap_slices

    info = g.energy
    if info.lam <= 0:
        return
    ndim = len(geo.shape)
    spacing = (1.0,) * ndim if spacing is None else tuple(float(v) for v in spacing)
    unit = min(spacing)
    dists = [math.sqrt(sum((v * h / unit) ** 2 for v, h in zip(o, spacing))) for o in g.offsets]
    coef = (-0.5 / info.sigma.square()).view((1,) + (1,) * ndim)
    K = geo.K
    for side, two in pairs.items():
        xb = two.unsqueeze(0)
        shape2 = tuple(xb.shape[2:])
        mine = 1 if side < 0 else 0  # the layer of the pair that is this slab's
        for k, (o, dk) in enumerate(zip(g.offsets, dists)):
            if o[geo.axis] == 0:
                continue
            d2 = energy._sq_diff(xb, o)
            if d2 is None:
                continue
            here, there = overlap_slices(shape2, o)
            w = d2.mul_(coef).exp_().mul_(info.lam * info.scale / dk).round_()
            links = torch.zeros((2,) + shape2, dtype=g.caps.dtype, device=g.caps.device)
            links[(0,) + here] = w[0]  # arc p -> p + o, stored at p
            links[(1,) + there] = w[0]  # arc p + o -> p, stored at p + o
            for j, d in ((0, k), (1, K + k)):
                if d in geo.crossing[side]:
                    geo.face(g.caps[0, d], side).copy_(links[j].select(geo.axis, mine))


def segment(
    image,
    seeds,
    *,
    axis: int = 0,
    group=None,
    lam: float | None = None,
    sigma: float | None = None,
    connectivity: int | None = None,
    ndim: int | None = None,
    channel_axis: int | None = None,
    bins: int | None = None,
    scale: float | None = None,
    spacing=None,
    backend: str = "auto",
    return_result: bool = False,
    **solver_options,
):
    """Seeded segmentation of a volume (or image) split into slabs over the ranks of a process group.

    A collective call: rank ``r`` passes slab ``r`` of the image and of the seeds along spatial
    ``axis``; the keyword arguments must be the same on every rank. The energy is that of
    :func:`torchcut.segment` on the whole volume, capacity for capacity: the contrast scale
    ``sigma`` and the seed histograms are exact integer sums over all ranks, the colour range a
    global minimum and maximum, and the n-links between two slabs use the neighbour's border layer
    (exchanged once). The mask is this slab's part of the mask that :func:`torchcut.segment`
    returns for the whole volume. Each rank builds only its slab's network and, without
    ``return_result``, solves in it (as :func:`torchcut.segment` does on one device).

    Parameters
    ----------
    image : tensor or array
        This slab, gray ``[*S]`` or with a channel axis (``channel_axis``, as for :func:`torchcut.segment`).
    seeds : tensor or array ``[*S]``
        0 unknown, 1 object, 2 background; the volume as a whole needs both kinds.
    axis : int
        The split spatial axis; slabs follow in rank order.
    group
        As for :func:`maxflow`. Split CUDA volumes along axis 0: each rank then builds its network with
        its ghost planes in place (the kernels' padded layout) and the CUDA grid kernels solve it, at
        about the single GPU's memory per voxel.
    lam, sigma, connectivity, channel_axis, bins, scale, spacing
        As for :func:`torchcut.segment` (``lam`` defaults to its default, 8; ``None`` takes it so that
        the energy is the single-device one unless asked otherwise).
    ndim : int, optional
        Number of spatial dimensions of the slab (2 or 3), as for :func:`torchcut.segment`; a slab is
        never a batch, so it must equal ``seeds.dim()`` (default).
    backend : {"auto", "cuda", "reference"}
        As for :func:`maxflow`.
    return_result : bool
        Also return the :class:`DistributedCutResult`.
    **solver_options
        ``max_iter`` (default 10000), and with the CUDA kernels ``rounds``, ``persist`` and ``repair``,
        as for :func:`maxflow`; anything else raises ``TypeError`` naming ``segment()``.

    Returns
    -------
    torch.Tensor or (torch.Tensor, DistributedCutResult)
        Bool mask of this slab, True = object.

    Examples
    --------
    >>> import torch, torch.distributed as dist
    >>> from torchcut import distributed as tcd
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> image = torch.zeros(4, 6); image[:, :3] = 1.0
    >>> seeds = torch.zeros(4, 6, dtype=torch.uint8); seeds[0, 0], seeds[0, 5] = 1, 2
    >>> tcd.segment(image, seeds).int().tolist()[0]
    [1, 1, 1, 0, 0, 0]
    >>> dist.destroy_process_group()
    """
    from . import energy

    if not dist.is_available() or not dist.is_initialized():
        _Comm(group, None)  # raises: no process group
    error, head = None, {}
    options = dict(solver_options)
    max_iter = options.pop("max_iter", DEFAULT_MAX_ITER)
    try:
        nd = energy._as_seed_tensor(seeds, None).dim() if not isinstance(seeds, torch.Tensor) else seeds.dim()
        if nd not in (2, 3):
            raise ValueError(f"seeds: expected one slab [*S] with 2 or 3 spatial dims, got {nd} dims")
        if ndim is not None and ndim != nd:
            raise ValueError(
                f"ndim: expected None or {nd} (seeds.dim(): a slab is one grid, never a batch), got {ndim!r}"
            )
        x, s, ndim, conn, _, _ = energy._prepare(image, seeds, nd, connectivity, channel_axis)
        if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < ndim:
            raise ValueError(f"axis: expected a spatial axis in [0, {ndim}), got {axis!r}")
        _check_max_iter(max_iter)
        kernels, slab_opts = _solver_setup(segment, backend, x.device, axis, options)
        x, s = x[0], s[0]  # [C, *S], [*S]
        head = dict(shape=tuple(s.shape), channels=x.shape[0], conn=conn)
    except (TypeError, ValueError) as exc:
        error = (type(exc).__name__, str(exc))
    heads = [None] * dist.get_world_size(group)
    dist.all_gather_object(heads, (error, head), group=group)
    _raise_first([e for e, _ in heads], dist.get_rank(group))
    ref = heads[0][1]
    for r, (_, h) in enumerate(heads):
        other = lambda t: t[:axis] + t[axis + 1 :]  # noqa: E731
        if other(h["shape"]) != other(ref["shape"]) or h["channels"] != ref["channels"] or h["conn"] != ref["conn"]:
            raise ValueError(
                f"image: expected slabs that differ only along axis {axis}, got shape {ref['shape']} "
                f"with {ref['channels']} channel(s) on rank 0 and {h['shape']} with {h['channels']} on rank {r}"
            )
    t0 = time.perf_counter()
    comm = _Comm(group, x.device)
    n = s.shape[axis]
    # one border layer of the image from each neighbour (halo)
    halo = comm.swap({side: x.select(1 + axis, 0 if side < 0 else n - 1) for side in (-1, 1) if comm.has(side)})
    # the pairs of neighbouring voxels on both sides of a border, as two-layer images in global order
    pairs = {
        side: torch.stack(
            [halo[-1], x.select(1 + axis, 0)] if side < 0 else [x.select(1 + axis, n - 1), halo[1]], 1 + axis
        )
        for side in halo
    }
    ops = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM}

    def reduce(t, op):
        t = t.contiguous().clone()
        dist.all_reduce(t, op=ops[op], group=group)
        return t

    if sigma is None:  # the global root mean square difference of axis-aligned neighbours, bit for bit
        sigma = _global_sigma(x, pairs.get(-1), axis, ndim, reduce)

    kw = dict(sigma=sigma, connectivity=conn, ndim=ndim, channel_axis=0, bins=bins, scale=scale, spacing=spacing)
    if lam is not None:
        kw["lam"] = lam
    shape = tuple(s.shape)
    lo = None
    if axis == 0:
        # the padded layout: the network of the slab with a ghost plane (the neighbour's border layer) on
        # each side that has a neighbour, and filler below the first; n-links into the ghost planes come out
        # of the same float32 operations as the whole volume's, and everything outside the real planes is
        # zeroed after the build (the ghost planes hold no seeds, so the histograms count each voxel once)
        lo, hi = (_pad_planes(ndim) if comm.has(-1) else 0), int(comm.has(1))
        parts = [halo[-1].unsqueeze(1).expand(-1, lo, *halo[-1].shape[1:])] if lo else []
        x = torch.cat(parts + [x] + ([halo[1].unsqueeze(1)] if hi else []), 1)
        s = _padded(s, 0, lo, hi)
        del parts, pairs
    error = None
    try:  # the slab's own network; the histograms and colour range are reduced over the ranks inside
        g = energy.segmentation_graph(x, s, reduce=reduce, **kw)
    except (TypeError, ValueError) as exc:  # after the collectives inside, so raised alike on every rank
        error, g = (type(exc).__name__, str(exc)), None
    _agree(error, group)
    geo = _Geometry(g.offsets, shape, axis, comm)
    if lo is None:
        _border_links(g, pairs, geo, spacing)
        del pairs
    else:
        n = shape[0]
        for t, lead in ((g.caps[0], 1), (g.source[0], 0), (g.sink[0], 0)):
            t.narrow(lead, 0, lo).zero_()
            t.narrow(lead, lo + n, t.shape[lead] - lo - n).zero_()
    del halo, x, s
    caps, src, snk = g.caps[0], g.source[0], g.sink[0]
    del g  # the solve works in the energy's tensors (and in a copy of them when the result is returned)
    if caps.is_cuda:
        torch.cuda.synchronize(caps.device)
    built = time.perf_counter() - t0
    if lo is not None and not kernels:  # torch ops: the real planes alone
        real = lambda t, lead=0: t.narrow(lead, lo, shape[0])  # noqa: E731
        caps, src, snk, lo = real(caps, 1), real(src), real(snk), None
    result = _run(caps, src, snk, geo, None, max_iter, t0, certificate=return_result, lo=lo, slab_options=slab_opts)
    last_stats["build_seconds"] = built
    return (result.mask, result) if return_result else result
