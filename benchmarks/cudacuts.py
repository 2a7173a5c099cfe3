"""CUDA Cuts (Vineet and Narayanan 2008) as a benchmark peer of torchcut's exact grid solver.

torchcut's CUDA grid solver should be no slower than an approximate GPU method such as CUDA
Cuts on the same energy. No CUDA Cuts build exists on the benchmark machine, so this module carries its
own implementation of the scheme (``cudacuts_kernels.cu``, built on first use with
``torch.utils.cpp_extension``; never a dependency of the library), and a driver that runs it beside
``torchcut.maxflow`` on the integer networks of ``benchmarks/grid.py`` (2D cases only, 4- and
8-connected; 3D cases and batches are skipped).

Sources
-------
* V. Vineet and P. J. Narayanan, "CUDA cuts: Fast graph cuts on the GPU", CVPR workshops 2008 (only its
  abstract could be read here: push-relabel on the GPU, one thread per pixel).
* The public CUDA Cuts code of IIIT Hyderabad (``CudaCuts.cu``, ``CudaCuts_kernel.cu`` /
  ``PushRelabel_kernel.cu``), read in mirrors found through a code index, e.g. GitHub
  ``whdlgp/cuda_cuts``. Every detail below that is not marked as a choice comes from that code. No code
  was copied; the kernels here are written anew for torchcut's tensor layout.

The scheme (as in the public code)
----------------------------------
* The terminal arcs are netted: ``excess = max(source - sink, 0)``, ``sink = max(sink - source, 0)``.
  Heights start at 1, every node's mask at 0.
* One thread per node; thread blocks are 32 x 8 tiles of the image, whose heights (with a one-node halo)
  are loaded into shared memory by each kernel.
* An iteration is two launches. *Push*: a node with mask 1 and excess sends flow to the sink if its
  height is 1, then to each neighbour whose height is exactly one lower (left, up, right, down), as much
  as the arc and its excess allow; the neighbour's excess and reverse arc grow by atomic adds.
  *Relabel*: every node (active or not) computes its mask from the heights it read (2: no excess or no
  residual arc; 1: an admissible arc; 0: neither) and writes its new height into the other height
  buffer: 1 with residual sink capacity, else 1 + the lowest neighbour over a residual arc (at most
  N + 1, N nodes). The two height buffers swap every iteration. A first relabel-only launch (the public
  ``kernel_push1_start``) precedes the loop.
* Variant ``"stochastic"`` (the public demo's default, ``cudaCutsStochasticOptimize``): push and relabel
  skip the tiles that the last activity check found without a node of mask 1; the check runs every 11
  iterations (all tiles start in the list). Variant ``"atomic"`` (``cudaCutsAtomicOptimize``): every tile,
  every iteration.
* Stopping rule (both variants): every 10 iterations the excess is copied to a snapshot and the host
  reads how many tiles the previous check found with an excess different from the snapshot then in
  force (a device-to-host read, the only host synchronisation of the loop); every 11 iterations that
  count is recomputed. "stochastic" stops at an 11-multiple (not a 121-multiple) when the count read at
  the last 10-multiple was 0, and after 500 iterations at most; "atomic" stops the second time a
  10-multiple reads 0. The snapshot taken at iteration 110 is compared at once (110 is also an
  11-multiple), so its count is always 0: "atomic" always stops by iteration 230 and "stochastic" by
  231 (its exception for 121-multiples skips the 121 check but not the 231 one), whatever the graph.
  On easy images the flow is mostly routed by then; on hard ones it is not, and, in "stochastic", excess
  pushed into a tile that left the list stays there (the list only readmits tiles holding a node of mask
  1, and masks are only recomputed in listed tiles). These are where the answers above the optimum come
  from.
* The cut (``bfsLabeling``): a BFS from every node with excess along residual arcs, one launch per level;
  nodes with residual sink capacity are closed to it. The source side is what it reaches.

Choices (where the sources are silent, or where this implementation departs from them)
-------------------------------------------------------------------------------------
* Every node takes part. The public code pads the grid to tile multiples and leaves the image's outer
  one-node frame out of push, relabel and labelling (flow pushed into the frame is stranded there); here
  arcs that leave the grid have zero capacity instead.
* 8-connectivity (the public code is 4-connected only): the same kernels over 8 directions, the halo
  includes the tile's corners, and the push order is left, up, right, down, then up-left, up-right,
  down-right, down-left.
* Flow that arrives at a node during a push launch is added to an ``inflow`` array (atomics) and folded
  into its excess by the next relabel, so a node pushes the excess it had when the launch started. The
  public code adds to the excess itself and re-reads it between directions, so a node may pass on flow
  that arrived earlier in the same launch, depending on scheduling. The change makes every launch
  deterministic (the numpy model :func:`simulate` reproduces the CUDA kernels exactly), at the cost of
  arriving flow moving on one launch later at most. Readers of the excess (activity check, labelling,
  BFS) use excess + inflow.
* Global relabel (exact distance to the sink over residual arcs, heights of unreached nodes = N + 1): the
  public loop has none (its relabel recomputes every node's height every iteration instead). It is off in
  the two heuristic variants unless ``gr_every > 0``, and it is what variant ``"converge"`` uses: a BFS
  from the sink, one launch per level. The host reads the BFS's progress after ``bfs_chunk`` = 16
  levels, then after chunks twice as long each time up to 512 (launches past the last level return at
  once); the public labelling BFS reads a flag after each level. The labelling BFS here does the same.
* Variant ``"converge"`` (the heuristic disabled, run to exact convergence): every tile every iteration
  as in "atomic", a global relabel after 32 iterations and then every max(32, levels of the last BFS)
  iterations (so the BFS's launches roughly match the iterations' launches); it stops when the BFS
  reaches no node with excess. The flow is then a maximum preflow and the nodes that cannot reach the
  sink are the source side of a minimum cut (torchcut's convention; the labelling BFS is not needed).
  An iteration cap and a time limit end runs that do not converge (reported, not asserted).
* Capacities, excess and heights are int32, as in the public code; :func:`network` checks that the total
  initial excess (a bound on any node's excess) fits.
* Besides the public labelling, the driver reports the cut of the nodes that cannot reach the sink after
  the same iterations (``label="sink"``, torchcut's rule; a BFS from the sink instead of from the excess).
  Not part of CUDA Cuts: a second reading of how far its flow got. On early stops the public labelling
  can be far above the optimum (the region a BFS from scattered leftover excess reaches); the other one
  is often much closer, not always.

Energies, conventions, timing
-----------------------------
A labelling's energy is the capacity of its cut, computed exactly in int64 from the integer arrays:
source capacities of the sink-side nodes + sink capacities of the source-side nodes + capacities of the
arcs from the source side to the sink side. Masks are True on the source side (torchcut's ``mask``:
object). The energy of torchcut's mask equals its flow (asserted per case), which is the optimum.

Times are those of ``benchmarks/grid.py``'s helper (``_cuda_time``: CUDA events after a synchronisation,
median of ``--repeats`` runs after one warm-up). torchcut: *solve* = ``torchcut.maxflow`` on a built
graph (the README's numbers). CUDA Cuts: the whole call (copy of the capacities, terminal netting, the
loop, the labelling BFS, the mask); its loop alone (the public code's own timer) is reported beside it.

Usage::

    python benchmarks/cudacuts.py --out benchmarks/results [--family hard|standard|both] [--repeats 5]
        [--quick] [--only SUBSTR,...] [--no-converge] [--converge-limit 30]
    python benchmarks/cudacuts.py --selfcheck   # CUDA kernels against the numpy model (CPU: model only)

It writes ``cudacuts.md`` and ``cudacuts.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import grid as bench  # noqa: E402  (benchmarks/grid.py: cases, energies, torchcut runs, timing helper)

VARIANTS = {"stochastic": 0, "atomic": 1, "converge": 2}
STOPS = {0: "rule", 1: "iteration cap", 2: "time limit", 3: "exact"}
LABELS = {"excess": 0, "sink": 1}
PUBLIC_MAX_ITERS = 500  # the public stochastic loop's `counter < 500`
CONVERGE_MAX_ITERS = 10_000_000
GR_MIN = 32  # converge mode: first global relabel, least period (as kGrMin in the kernels)
MAX_CHUNK = 512  # BFS levels between two host reads, at most (kMaxChunk)
TX, TY = 32, 8  # thread block tile
FAR = (2**31 - 1) // 4  # INT_MAX / 4 in the kernels: halo outside the grid
INT32_MAX = 2**31 - 1
PUSH_ORDER = ((0, -1), (-1, 0), (0, 1), (1, 0), (-1, -1), (-1, 1), (1, 1), (1, -1))
STAT_KEYS = (
    "iterations",
    "global_relabels",
    "gr_levels",
    "label_levels",
    "exact",
    "host_syncs",
    "stop",
    "loop_us",
    "label_us",
    "live_tiles",
)


# ------------------------------------------------------------------------------------------ network
@dataclass
class Network:
    """One 2D integer network in the layout the CUDA Cuts op reads.

    Attributes
    ----------
    caps : torch.Tensor
        int32 ``[D, H, W]``: ``caps[d][p]`` is the capacity of the arc ``p -> p + dirs[d]`` (0 where it
        would leave the grid). D is 4 or 8.
    source, sink : torch.Tensor
        int32 ``[H, W]``: capacities of the terminal arcs source -> p and p -> sink.
    dirs : tuple of (int, int)
        The D unit offsets (dy, dx), in the order of ``caps``.
    """

    caps: object
    source: object
    sink: object
    dirs: tuple


def network(graph) -> Network:
    """The CUDA Cuts network of a 2D integer ``torchcut.GridGraph`` (unbatched, or a batch of one).

    Parameters
    ----------
    graph : torchcut.GridGraph
        2D, integer capacities, int32 layout (``graph.caps.dtype == torch.int32``).

    Returns
    -------
    Network
        ``caps`` is a view of the graph's tensor (:func:`solve` works on a copy); source and sink are
        int32 copies.

    Raises
    ------
    ValueError
        When the graph is not 2D, holds several items, has int64 capacities, or when its total initial
        excess does not fit in int32 (CUDA Cuts keeps excess in int32).
    """
    import torch

    if graph.ndim != 2 or graph.batch_size != 1:
        raise ValueError(f"graph: expected one 2D grid, got shape {graph.shape} with {graph.batch_size} item(s)")
    if graph.is_float or graph.caps.dtype != torch.int32:
        raise ValueError(
            f"graph: expected int32 capacities, got {graph.caps.dtype}{' (float input)' if graph.is_float else ''}"
        )
    src64 = graph.source[0]
    snk = graph.sink[0].to(torch.int32)
    if int(src64.max()) > INT32_MAX:
        raise ValueError("graph: a source capacity exceeds int32")
    total = int((src64 - snk.to(torch.int64)).clamp(min=0).sum())
    if total > INT32_MAX:
        raise ValueError(f"graph: total initial excess {total} exceeds int32 (CUDA Cuts keeps excess in int32)")
    return Network(
        caps=graph.caps[0].contiguous(),
        source=src64.to(torch.int32).contiguous(),
        sink=snk.contiguous(),
        dirs=tuple(tuple(int(v) for v in d) for d in graph.directions),
    )


# ------------------------------------------------------------------------------------------- solver
@functools.cache
def load_extension(verbose: bool = False):
    """Build (once, cached) and load the CUDA Cuts kernels; return ``torch.ops.torchcut_cudacuts``.

    Parameters
    ----------
    verbose : bool
        Print the compiler commands.

    Returns
    -------
    torch._ops._OpNamespace
        Namespace holding the op ``solve``.

    Notes
    -----
    The build goes to torchcut's extension cache (``$TORCHCUT_CACHE``, default ``~/.cache/torchcut``),
    folder ``torchcut_cudacuts-torch<version>-cu<version>``. It needs nvcc and a CUDA build of torch.
    """
    import torch
    from torch.utils import cpp_extension

    from torchcut import _ext

    _ext._ninja_on_path()
    build = _ext.cache_dir("torchcut_cudacuts")
    build.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name="torchcut_cudacuts",
        sources=[str(HERE / "cudacuts_kernels.cu")],
        build_directory=str(build),
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr", "-lineinfo"],
        is_python_module=False,
        verbose=verbose,
    )
    return torch.ops.torchcut_cudacuts


@dataclass
class Solution:
    """What :func:`solve` (or :func:`simulate`) returns.

    Attributes
    ----------
    mask : torch.Tensor or numpy.ndarray
        bool ``[H, W]``, True = source side.
    sink_residual, excess : torch.Tensor or numpy.ndarray
        int32 ``[H, W]``: residual sink capacities and excess left at the end.
    stats : dict
        ``iterations`` (push + relabel pairs), ``global_relabels``, ``gr_levels`` (BFS levels over all
        global relabels), ``label_levels`` (levels of the labelling BFS), ``exact`` (stopped because no
        node with excess can reach the sink), ``host_syncs``, ``stop`` ("rule", "iteration cap",
        "time limit" or "exact"), ``loop_ms`` and ``label_ms`` (CUDA events; absent from the model),
        ``live_tiles`` (stochastic: tiles in the list at the end, else -1).
    flow : int
        Flow that reached the sink (netted terminal flow included): a lower bound of the maximum flow.
    """

    mask: object
    sink_residual: object
    excess: object
    stats: dict = field(default_factory=dict)
    flow: int = 0


def _stats(values) -> dict:
    st = dict(zip(STAT_KEYS, (int(v) for v in values)))
    st["exact"] = bool(st["exact"])
    st["stop"] = STOPS.get(st["stop"], str(st["stop"]))
    if "loop_us" in st:
        st["loop_ms"] = st.pop("loop_us") / 1e3
        st["label_ms"] = st.pop("label_us") / 1e3
    return st


def _max_iters(variant: str, max_iters):
    if max_iters is not None:
        return int(max_iters)
    return CONVERGE_MAX_ITERS if variant == "converge" else PUBLIC_MAX_ITERS


def solve(
    net: Network,
    variant: str = "stochastic",
    *,
    max_iters: int | None = None,
    gr_every: int = 0,
    time_limit: float = 0.0,
    bfs_chunk: int = 16,
    label: str = "excess",
    with_flow: bool = True,
) -> Solution:
    """Run CUDA Cuts on the GPU.

    Parameters
    ----------
    net : Network
        CUDA tensors (see :func:`network`).
    variant : {"stochastic", "atomic", "converge"}
        The public code's two variants with their stopping rule, or the heuristic disabled (run until no
        node with excess can reach the sink: exact).
    max_iters : int, optional
        Iteration cap (default: 500 as in the public code; "converge": 10**7).
    gr_every : int
        Global relabel every this many iterations; 0: none in the heuristic variants, adaptive in
        "converge" (see the module docstring).
    time_limit : float
        Seconds; > 0 ends a run at the first global relabel past it (stop "time limit").
    bfs_chunk : int
        BFS levels launched before the first host read of the BFS's progress (then chunks double, up to
        512 levels).
    label : {"excess", "sink"}
        The cut after a heuristic stop: "excess" = the public code's labelling (what a BFS from the nodes
        with excess reaches, closed at nodes with residual sink capacity); "sink" = the nodes that cannot
        reach the sink (torchcut's rule; what an exact stop always uses).
    with_flow : bool
        Compute ``Solution.flow`` (a reduction and a device-to-host read; off inside timed calls).

    Returns
    -------
    Solution
    """
    ops = load_extension()
    mask, snk, exc, st = ops.solve(
        net.caps,
        net.source,
        net.sink,
        [v for d in net.dirs for v in d],
        VARIANTS[variant],
        _max_iters(variant, max_iters),
        int(gr_every),
        float(time_limit),
        int(bfs_chunk),
        LABELS[label],
    )
    sol = Solution(mask=mask, sink_residual=snk, excess=exc, stats=_stats(st.tolist()))
    if with_flow:
        sol.flow = flow_of(net, sol)
    return sol


def flow_of(net: Network, sol: Solution) -> int:
    """Flow into the sink of a :class:`Solution`: sum of sink capacities minus their residuals.

    Parameters
    ----------
    net : Network
    sol : Solution

    Returns
    -------
    int
    """
    if isinstance(sol.sink_residual, np.ndarray):
        return int(np.asarray(net.sink, np.int64).sum() - sol.sink_residual.astype(np.int64).sum())
    import torch

    return int(net.sink.sum(dtype=torch.int64) - sol.sink_residual.sum(dtype=torch.int64))


def cut_energy(source, sink, edges, offsets, mask, reverse=None) -> int:
    """Exact capacity of the cut that a labelling defines (the energy of the labelling).

    Parameters
    ----------
    source, sink : torch.Tensor
        Integer ``[H, W]`` terminal capacities.
    edges : torch.Tensor
        Integer ``[K, H, W]``: ``edges[k][p]`` = capacity of the arc p -> p + offsets[k].
    offsets : sequence of (int, int)
    mask : torch.Tensor
        bool ``[H, W]``, True = source side.
    reverse : torch.Tensor, optional
        Like ``edges``: capacity of the arc p + offsets[k] -> p (default ``edges``: symmetric).

    Returns
    -------
    int
        Source capacities of the sink-side nodes + sink capacities of the source-side nodes + capacities
        of the arcs from the source side to the sink side (int64 sums).

    Examples
    --------
    >>> import torch
    >>> cut_energy(torch.tensor([[5, 0]]), torch.tensor([[0, 4]]), torch.tensor([[[3, 0]], [[0, 0]]]),
    ...            ((0, 1), (1, 0)), torch.tensor([[True, False]]))
    3
    """
    import torch

    from torchcut.grid import overlap_slices

    S = mask.to(device=source.device, dtype=torch.bool)
    i64 = torch.int64
    total = source.to(i64)[~S].sum() + sink.to(i64)[S].sum()
    rev = edges if reverse is None else reverse
    for k, o in enumerate(offsets):
        here, there = overlap_slices(tuple(S.shape), o)
        if any(s.start >= s.stop for s in here):
            continue
        s_p, s_q = S[here], S[there]
        total = total + edges[k][here].to(i64)[s_p & ~s_q].sum() + rev[k][here].to(i64)[~s_p & s_q].sum()
    return int(total)


# --------------------------------------------------------------------------------------- numpy model
def _push_order(dirs):
    """(dy, dx, caps index, reverse caps index) in push order (the kernels' ``push_order``)."""
    index = {tuple(d): i for i, d in enumerate(dirs)}
    out = [(dy, dx, index[(dy, dx)], index[(-dy, -dx)]) for dy, dx in PUSH_ORDER if (dy, dx) in index]
    if len(out) != len(dirs):
        raise ValueError(f"dirs: expected the 4- or 8-neighbourhood, got {dirs}")
    return out


def _nb(a, dy, dx, fill):
    """``out[p] = a[p + (dy, dx)]``, ``fill`` outside the grid."""
    H, W = a.shape
    out = np.full_like(a, fill)
    out[max(0, -dy) : H - max(0, dy), max(0, -dx) : W - max(0, dx)] = a[
        max(0, dy) : H + min(0, dy), max(0, dx) : W + min(0, dx)
    ]
    return out


def simulate(
    caps,
    source,
    sink,
    dirs,
    variant: str = "stochastic",
    *,
    max_iters: int | None = None,
    gr_every: int = 0,
    bfs_chunk: int = 16,
    label: str = "excess",
) -> Solution:
    """Numpy model of the CUDA kernels and host loop: the same arithmetic, one launch at a time.

    Every launch of the CUDA version is deterministic (see the module docstring), so on the same
    network the model returns the same mask, residuals and counters (not the times). Slow: small grids.

    Parameters
    ----------
    caps : array-like
        Integer ``[D, H, W]`` (the layout of :class:`Network`).
    source, sink : array-like
        Integer ``[H, W]``.
    dirs : sequence of (int, int)
    variant, max_iters, gr_every, bfs_chunk, label
        As in :func:`solve` (no time limit).

    Returns
    -------
    Solution
        numpy arrays; ``stats`` without ``loop_ms`` / ``label_ms``.
    """
    caps = np.array(caps, dtype=np.int64)
    source, sink = np.asarray(source, np.int64), np.asarray(sink, np.int64)
    D, H, W = caps.shape
    N = H * W
    hmax = N
    mode = VARIANTS[variant]
    stoch, converge = mode == 0, mode == 2
    max_iters = _max_iters(variant, max_iters)
    order = _push_order(dirs)
    d = source - sink
    exc, snk = np.maximum(d, 0), np.maximum(-d, 0)
    inflow = np.zeros_like(exc)
    heights = [np.ones_like(exc), np.ones_like(exc)]
    mask = np.zeros((H, W), np.int8)
    tiles_x, tiles_y = -(-W // TX), -(-H // TY)
    ntiles = tiles_x * tiles_y
    tile_of = ((np.arange(H) // TY)[:, None] * tiles_x + (np.arange(W) // TX)[None, :]).ravel()
    active = np.ones(ntiles, bool)
    every = np.ones((H, W), bool)
    syncs = 0

    def tiles_any(b):
        return np.bincount(tile_of, weights=b.ravel().astype(np.float64), minlength=ntiles) > 0

    def push(hr, sel):
        nonlocal exc, snk, inflow
        act = sel & (mask == 1) & (exc > 0)
        e = np.where(act, exc, 0)
        f = np.where(act & (hr == 1) & (snk > 0), np.minimum(e, snk), 0)
        snk = snk - f
        e = e - f
        add_cap = np.zeros_like(caps)
        add_in = np.zeros_like(exc)
        for dy, dx, ci, ri in order:
            c = caps[ci]
            ok = act & (e > 0) & (c > 0) & (hr == _nb(hr, dy, dx, FAR) + 1)
            f = np.where(ok, np.minimum(e, c), 0)
            caps[ci] -= f
            e = e - f
            g = _nb(f, -dy, -dx, 0)  # arrives at q = p + (dy, dx)
            add_cap[ri] += g
            add_in += g
        caps[...] += add_cap
        inflow = inflow + add_in
        exc = np.where(act, e, exc)

    def relabel(hr, hw, sel, write_h=True, levels=False):
        nonlocal exc, inflow, mask
        if levels:
            hr = np.where(hr > 0, hr, hmax + 1)
        e = exc + inflow
        exc = np.where(sel, e, exc)
        inflow = np.where(sel, 0, inflow)
        anyres = snk > 0
        adm = (hr == 1) & (snk > 0)
        low = np.full_like(hr, hmax)
        for dy, dx, ci, _ in order:
            pos = caps[ci] > 0
            hq = _nb(hr, dy, dx, FAR)
            anyres |= pos
            adm |= pos & (hr == hq + 1)
            low = np.where(pos, np.minimum(low, hq), low)
        mask = np.where(sel, np.where((e <= 0) | ~anyres, 2, np.where(adm, 1, 0)), mask).astype(np.int8)
        if write_h:
            hw[sel] = np.where(snk > 0, 1, low + 1)[sel]
        if levels:
            hw[sel] = hr[sel]

    def bfs(forward):
        nonlocal syncs
        ex = (exc + inflow) > 0
        if forward:
            lvl = np.where(ex, 1, np.where(snk > 0, -1, 0))
            count, reached = int(ex.sum()), 0
        else:
            lvl = np.where(snk > 0, 1, 0)
            count, reached = int((snk > 0).sum()), int(((snk > 0) & ex).sum())
        L = 1
        while count:
            cand = lvl == 0
            got = np.zeros((H, W), bool)
            for dy, dx, ci, ri in order:
                arc = _nb(caps[ri], dy, dx, 0) > 0 if forward else caps[ci] > 0
                got |= cand & (_nb(lvl, dy, dx, FAR) == L) & arc
            lvl[got] = L + 1
            reached += int((got & ex).sum())
            count = int(got.sum())
            L += 1
        launched, chunk = 0, bfs_chunk  # the host reads after each chunk, up to the one holding launch L
        while launched < L:
            launched += chunk
            syncs += 1
            chunk = max(chunk, min(2 * chunk, MAX_CHUNK))
        return lvl, L - 1, reached

    relabel(heights[0], heights[1], every)  # the start launch: no push (all masks 0)
    changed = ntiles
    counter, iters, grs, gr_levels, label_levels, term = 1, 0, 0, 0, 0, 0
    stop, finish, exact = 1, True, False
    snap = None
    lvl = np.zeros((H, W), np.int64)
    next_gr = (gr_every if gr_every > 0 else GR_MIN) if converge else (gr_every if gr_every > 0 else -1)
    while True:
        if not converge:
            if counter % 10 == 0:
                snap = exc + inflow
                syncs += 1
                finish = changed != 0
                if not stoch and not finish:
                    term += 1
            if counter % 11 == 0:
                changed = int(tiles_any((exc + inflow) != snap).sum())
                if stoch:
                    active = tiles_any(mask == 1)
                    if not finish and counter % 121 != 0:
                        term += 1
        r = counter & 1
        sel = active[tile_of].reshape(H, W) if stoch else every
        push(heights[r], sel)
        relabel(heights[r], heights[1 - r], sel)
        iters += 1
        if next_gr > 0 and counter >= next_gr:
            lvl, levels, reached = bfs(False)
            grs += 1
            gr_levels += levels
            if reached == 0:
                exact, stop = True, 3
                break
            relabel(lvl, heights[1 - r], every, write_h=False, levels=True)
            next_gr = counter + (gr_every if gr_every > 0 else max(GR_MIN, levels))
        counter += 1
        if not converge and (term != 0 if stoch else term == 2):
            stop = 0
            break
        if counter >= max_iters:
            stop = 1
            break
    if exact:
        out = lvl == 0
    elif LABELS[label] == 1:
        lvl, label_levels, _ = bfs(False)
        out = lvl == 0
    else:
        lvl, label_levels, _ = bfs(True)
        out = lvl > 0
    st = _stats([iters, grs, gr_levels, label_levels, exact, syncs, stop])
    st["live_tiles"] = int(active.sum()) if stoch else -1
    sol = Solution(mask=out, sink_residual=snk.astype(np.int32), excess=(exc + inflow).astype(np.int32), stats=st)
    sol.flow = int(sink.sum() - snk.sum())
    return sol


# ------------------------------------------------------------------------------------------ selfcheck
def _random_graph(rng, H, W, conn, device):
    import torch

    import torchcut

    offs = torchcut.grid_offsets(2, conn)
    blob = np.hypot(*np.meshgrid(np.linspace(-1, 1, H), np.linspace(-1, 1, W), indexing="ij")) < 0.5
    src = rng.integers(0, 20, (H, W)) + 25 * blob
    snk = rng.integers(0, 20, (H, W)) + 25 * ~blob
    edges = rng.integers(0, 30, (len(offs), H, W))
    t = [torch.as_tensor(a.astype(np.int32), device=device) for a in (src, snk, edges)]
    return torchcut.GridGraph(t[0], t[1], t[2], offs), offs, t


def selfcheck(seed: int = 0) -> bool:
    """Check the numpy model (and, with CUDA, the kernels against it) on small random grids.

    Grids: random ones (4- and 8-connected, sizes that are not tile multiples) and two small hard
    energies of grid.py. Per grid, variant and option: a run that stopped exactly has cut energy and flow
    equal to torchcut's flow, any other a cut no lower and a flow no higher. With CUDA, the op's output
    (mask, residual sink capacities, excess, counters) must equal the model's.

    Parameters
    ----------
    seed : int

    Returns
    -------
    bool
        True when every check passed (failures are printed).
    """
    import torch

    import torchcut

    rng = np.random.default_rng(seed)
    cuda = torch.cuda.is_available()
    ok = True
    grids = [
        _random_graph(rng, H, W, conn, "cpu") for H, W, conn in ((13, 70, 4), (37, 41, 8), (24, 96, 4), (9, 33, 8))
    ]
    for spec in (
        dict(kind="2d", n=48, conn=4, batch=1, family="lowcontrast", lam_x=10.0, seed=2),
        dict(kind="2d", n=40, conn=8, batch=1, family="smooth", lam_x=100.0, pic=0),
    ):
        offs, items = bench.make_case(spec)  # small hard energies: long runs, idle tiles, unreachable excess
        t = [torch.as_tensor(a) for a in items[0]]
        grids.append((torchcut.GridGraph(t[0], t[1], t[2], offs), offs, t))
    for g, offs, (src, snk, edg) in grids:
        H, W = g.shape
        conn = 2 * len(offs)
        flow = torchcut.maxflow(g).flow_value
        net = network(g)
        runs = [
            ("stochastic", "excess", 0),
            ("stochastic", "sink", 0),
            ("atomic", "excess", 0),
            ("atomic", "excess", 7),
            ("converge", "excess", 0),
            ("converge", "excess", 5),
        ]
        for variant, label, gr_every in runs:
            t0 = time.perf_counter()
            sim = simulate(
                net.caps.numpy(),
                net.source.numpy(),
                net.sink.numpy(),
                net.dirs,
                variant,
                label=label,
                gr_every=gr_every,
            )
            e = cut_energy(src, snk, edg, offs, torch.from_numpy(sim.mask))
            good = e == flow == sim.flow if sim.stats["exact"] else e >= flow >= sim.flow
            line = (
                f"{H}x{W} {conn}c {variant:<10} label {label:<6} gr_every {gr_every}: model energy {e} flow "
                f"{sim.flow} optimum {flow} {sim.stats} ({time.perf_counter() - t0:.1f} s)"
            )
            if cuda:
                gnet = Network(*(t.cuda() for t in (net.caps, net.source, net.sink)), net.dirs)
                dev = solve(gnet, variant, label=label, gr_every=gr_every)
                same = (
                    np.array_equal(dev.mask.cpu().numpy(), sim.mask)
                    and np.array_equal(dev.sink_residual.cpu().numpy(), sim.sink_residual)
                    and np.array_equal(dev.excess.cpu().numpy(), sim.excess)
                    and all(dev.stats[k] == sim.stats[k] for k in sim.stats)
                )
                line += f"; CUDA {'== model' if same else f'DIFFERS {dev.stats}'}"
                good = good and same
            ok = ok and good
            print(("ok   " if good else "FAIL ") + line, flush=True)
    return ok


# --------------------------------------------------------------------------------------------- driver
def case_list(family: str, quick: bool):
    """The 2D, single-item cases of ``benchmarks/grid.py`` for ``family`` ("standard", "hard", "both").

    Parameters
    ----------
    family : str
    quick : bool
        Standard: grid.py's quick subset; hard: grids of at most 512^2.

    Returns
    -------
    list of dict
        grid.py case specs.
    """
    out = []
    if family in ("standard", "both"):
        out += bench.cases(quick, "standard")
    if family in ("hard", "both"):
        out += [c for c in bench.hard_cases() if not quick or c["n"] <= 512]
    return [c for c in out if c["kind"] == "2d" and c["batch"] == 1]


def _gap(e, opt):
    return 100.0 * (e - opt) / opt if opt else (0.0 if e == opt else math.inf)


def run_case(spec, args, device: str = "cuda") -> dict:
    """Run torchcut and CUDA Cuts on one case; return its row (times in seconds).

    Parameters
    ----------
    spec : dict
        A grid.py case spec.
    args : argparse.Namespace
        The driver's options.
    device : str
        Where the tensors live ("cuda"; other devices only with a substitute :func:`solve`).

    Returns
    -------
    dict
    """
    import torch

    offs, items = bench.make_case(spec, "torchcut")  # the README's energies (hard cases: their own)
    src, snk, edg = bench.case_tensors(items, device)
    tc = bench.run_torchcut(offs, items, args.repeats, device)
    res = tc["result"]
    assert res.verify()
    flow = int(tc["flows"][0])
    e_tc = cut_energy(src, snk, edg, offs, res.mask)
    assert e_tc == flow, (spec["name"], e_tc, flow)
    net = network(res.graph)  # the graph torchcut just solved (grid.py built it from the same arrays)
    row = dict(
        name=spec["name"],
        conn=spec["conn"],
        nodes=int(src.numel()),
        tc_solve=tc["solve"],
        tc_total=tc["total"],
        tc_stats={k: v for k, v in tc["stats"].items() if isinstance(v, (int, float, str, bool))},
        optimum=flow,
        variants={},
    )
    del tc, res
    for variant in args.variants:
        rec = {}
        for label in ("excess", "sink"):  # the public labelling, then the nodes that cannot reach the sink
            t, sol = bench._cuda_time(
                lambda: solve(
                    net, variant, gr_every=args.gr_every, bfs_chunk=args.bfs_chunk, label=label, with_flow=False
                ),
                args.repeats,
            )
            e = cut_energy(src, snk, edg, offs, sol.mask)
            key = "" if label == "excess" else "_sink"
            rec.update(
                {
                    f"time{key}": t,
                    f"energy{key}": e,
                    f"gap{key}": _gap(e, flow),
                    f"stats{key}": sol.stats,
                    f"fg{key}": float(sol.mask.float().mean()),
                }
            )
        rec["flow"] = flow_of(net, sol)
        row["variants"][variant] = rec
    if not args.no_converge:
        t0 = time.perf_counter()
        sol = solve(net, "converge", time_limit=args.converge_limit, bfs_chunk=args.bfs_chunk)
        if device == "cuda":
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        conv = dict(first=first, stats=sol.stats, flow=sol.flow)
        if sol.stats["exact"]:
            e = cut_energy(src, snk, edg, offs, sol.mask)
            assert e == flow and sol.flow == flow, (spec["name"], e, sol.flow, flow)
            runs = max(1, min(args.repeats, int(args.converge_budget // max(first, 1e-3))))
            t, sol = bench._cuda_time(
                lambda: solve(
                    net, "converge", time_limit=4 * args.converge_limit, bfs_chunk=args.bfs_chunk, with_flow=False
                ),
                runs,
            )
            assert sol.stats["exact"], spec["name"]
            conv.update(time=t, runs=runs, energy=e, stats=sol.stats)
        row["converge"] = conv
    return row


def _ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}" if v * 1e3 >= 10 else f"{v * 1e3:.2f}"


def _line(row) -> str:
    parts = [f"{row['name']:<28} {row['conn']}c  torchcut {_ms(row['tc_solve'])} ms  optimum {row['optimum']}"]
    for v, r in row["variants"].items():
        st = r["stats"]
        parts.append(
            f"{v} {_ms(r['time'])} ms ({st['iterations']} it, {st['stop']}) gap {r['gap']:.2f}% "
            f"(sink labelling {r['gap_sink']:.2f}%)"
        )
    c = row.get("converge")
    if c:
        st = c["stats"]
        parts.append(
            f"converge {_ms(c.get('time'))} ms ({st['iterations']} it, {st['global_relabels']} GR, {st['stop']})"
        )
    return "  ".join(parts)


def write_outputs(rows, out: Path, args, echo: bool = True) -> None:
    """Write ``cudacuts.md`` (tables) and ``cudacuts.json`` (every field) into ``out``.

    Parameters
    ----------
    rows : list of dict
        From :func:`run_case`.
    out : pathlib.Path
    args : argparse.Namespace
    echo : bool
        Also print the tables.
    """
    import torch

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "CPU"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = [
        f"# torchcut against CUDA Cuts ({dev}, torch {torch.__version__}, CUDA {torch.version.cuda}, {stamp}"
        + (f", commit {commit}" if commit else "")
        + ")",
        "",
        f"`python benchmarks/cudacuts.py {' '.join(sys.argv[1:])}` (family {args.family}"
        + (", quick" if args.quick else "")
        + f"). Same integer networks as `benchmarks/grid.py` (2D cases). "
        f"Times: medians of {args.repeats} runs after a warm-up, CUDA events (grid.py's `_cuda_time`). "
        "torchcut = `torchcut.maxflow` on a built graph (exact; its flow is the optimum, and the energy of its "
        "mask equals it). CUDA Cuts = this repository's re-implementation (`benchmarks/cudacuts.py`, see its "
        "docstring for the scheme and the choices), whole call: copy of the capacities, terminal netting, "
        "the loop, the labelling BFS; *loop* = the loop alone (the public code's own timer). "
        "Energy = capacity of the cut of the returned mask; gap = energy / optimum - 1. "
        "ratio = CUDA Cuts time / torchcut time (above 1: torchcut faster). The public code's labelling (a BFS "
        "from the nodes left with excess) decides CUDA Cuts' cut; the last two columns take instead the nodes "
        "that cannot reach the sink (torchcut's rule) after the same iterations, as a second reading of how "
        "far the flow got.",
        "",
    ]
    lines = list(head)
    for v in args.variants:
        lines += [
            f"## CUDA Cuts, variant {v!r} (the public stopping rule)",
            "",
            "| case | conn | nodes | torchcut ms | CUDA Cuts ms (loop) | ratio | optimum | CUDA Cuts energy | gap % "
            "| flow reached % | iterations | stop | labelling BFS levels | sink-side labelling: ms, gap % |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            x = r["variants"][v]
            st = x["stats"]
            reach = 100.0 * x["flow"] / r["optimum"] if r["optimum"] else 100.0
            lines.append(
                f"| {r['name']} | {r['conn']} | {r['nodes']:,} | {_ms(r['tc_solve'])} | {_ms(x['time'])} "
                f"({st['loop_ms']:.2f}) | {x['time'] / r['tc_solve']:.2f} | {r['optimum']} | {x['energy']} "
                f"| {x['gap']:.2f} | {reach:.2f} | {st['iterations']} | {st['stop']} | {st['label_levels']} "
                f"| {_ms(x['time_sink'])}, {x['gap_sink']:.2f} |"
            )
        lines.append("")
    if not args.no_converge:
        lines += [
            "## CUDA Cuts run to exact convergence (stopping heuristic disabled)",
            "",
            f"Variant 'atomic' without its stopping rule, global relabels (BFS from the sink) every max(32, last "
            f"BFS depth) iterations, stopped when no node with excess can reach the sink; time limit "
            f"{args.converge_limit:g} s per run, at most {args.converge_budget:g} s of timed runs per case. Energy and "
            "flow asserted equal to torchcut's.",
            "",
            "| case | conn | torchcut ms | converged CUDA Cuts ms | ratio | runs | iterations | global relabels "
            "| BFS levels | result |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            c = r.get("converge", {})
            st = c.get("stats", {})
            if "time" in c:
                lines.append(
                    f"| {r['name']} | {r['conn']} | {_ms(r['tc_solve'])} | {_ms(c['time'])} | "
                    f"{c['time'] / r['tc_solve']:.1f} | {c['runs']} | {st['iterations']} | {st['global_relabels']} "
                    f"| {st['gr_levels']} | exact (energy = optimum) |"
                )
            else:
                reach = 100.0 * c.get("flow", 0) / r["optimum"] if r["optimum"] else 100.0
                lines.append(
                    f"| {r['name']} | {r['conn']} | {_ms(r['tc_solve'])} | not converged: {st.get('stop')} after "
                    f"{c.get('first', 0):.1f} s | - | 1 | {st.get('iterations')} | {st.get('global_relabels')} "
                    f"| {st.get('gr_levels')} | flow reached {reach:.2f}% |"
                )
        lines.append("")
    (out / "cudacuts.md").write_text("\n".join(lines) + "\n")
    meta = dict(
        device=dev,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        date=stamp,
        commit=commit,
        argv=sys.argv[1:],
        repeats=args.repeats,
        family=args.family,
        quick=args.quick,
        host=platform.node(),
    )
    (out / "cudacuts.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1, default=str))
    if echo:
        print("\n".join(lines))


def main(argv=None):
    """Command line: see the module docstring.

    Parameters
    ----------
    argv : list of str, optional

    Returns
    -------
    list of dict or bool
        The rows written (``--selfcheck``: whether every check passed).
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--family", choices=("standard", "hard", "both"), default="both")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small cases only")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names (with the conn, e.g. '4c')")
    ap.add_argument("--variants", default="stochastic,atomic", help="heuristic variants to run")
    ap.add_argument("--no-converge", action="store_true", help="skip the run to exact convergence")
    ap.add_argument("--converge-limit", type=float, default=30.0, help="seconds: give up a converge run past this")
    ap.add_argument(
        "--converge-budget",
        type=float,
        default=60.0,
        help="seconds of timed converge runs per case (fewer than --repeats runs above it)",
    )
    ap.add_argument("--gr-every", type=int, default=0, help="global relabel period in the heuristic variants (0: none)")
    ap.add_argument("--bfs-chunk", type=int, default=16)
    ap.add_argument("--selfcheck", action="store_true", help="kernels against the numpy model on small grids")
    args = ap.parse_args(argv)
    if args.selfcheck:
        ok = selfcheck()
        print("selfcheck", "passed" if ok else "FAILED")
        if not ok:
            sys.exit(1)
        return ok
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in args.variants if v not in ("stochastic", "atomic")]
    if bad:
        ap.error(f"--variants: expected stochastic and/or atomic, got {bad}")

    import torch

    if not torch.cuda.is_available():
        ap.error("CUDA is needed (the CPU path is --selfcheck only)")
    load_extension()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = case_list(args.family, args.quick)
    if args.only:
        keys = [k.strip() for k in args.only.split(",")]
        todo = [c for c in todo if any(k in f"{c['name']} {c['conn']}c" for k in keys)]
    rows = []
    for spec in todo:
        t0 = time.perf_counter()
        row = run_case(spec, args)
        rows.append(row)
        print(_line(row) + f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
        torch.cuda.empty_cache()
        write_outputs(rows, out, args, echo=False)  # what ran so far survives a later failure
    if rows:
        write_outputs(rows, out, args)
    else:
        print("no case selected")
    return rows


if __name__ == "__main__":
    main()
