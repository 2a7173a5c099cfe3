"""CPU backend: compiled Boykov-Kolmogorov max-flow for grids and general graphs.

The CPU implementations of ``torch.ops.torchcut.grid_solve`` and ``csr_solve_``: ``torchcut/csrc/cpu/cpu_bk.h``
(the algorithm, written once for any graph), ``torchcut/csrc/cpu/grid_solve.cpp`` and ``csr_solve.cpp`` (grid and CSR layouts),
compiled into ``torchcut._C`` at install time (:mod:`torchcut._ops` loads it). When the library is
unusable and cannot be compiled, :func:`torchcut.maxflow` falls back to the reference push-relabel with
one warning.

Why Boykov-Kolmogorov and not push-relabel on the CPU: on one or two cores, augmenting paths with
search trees that are reused between augmentations do far less work on vision graphs than
push-relabel (the published comparisons, and ``docs/performance.md``). Where the smoothness
is strong (n-links far above the terminal capacities: long augmenting paths), grids go to Hochbaum's
pseudoflow first (``torchcut/csrc/cpu/cpu_hpf.h``, option ``algorithm``), which is 1.5-6.6x faster there.
Grids use implicit neighbours (``p + delta[d]`` in a padded, node-major copy of the residuals, one
byte per node for tree and parent), as in GridCut; items of a batch are solved on parallel threads, and a
single grid of at least 2 x 2**17 nodes (a 6-connected volume 2 x 2**20) is cut into ranges of rows
solved on parallel threads (by either algorithm), then finished over the whole grid by
Boykov-Kolmogorov from what the ranges left (``docs/design.md``).

Result contract (shared with the other backends, see :mod:`torchcut.solvers._backends`): an
unsaturated source residual is reported as excess (a valid preflow with every source arc saturated),
and the mask is the canonical source side (nodes that cannot reach the sink in the final residual
network). The grid op reads the graph and returns new tensors (:func:`solve_grid_graph`, what the
dispatcher calls); :func:`solve_grid` copies them into its arguments for the callers that solve in
place (warm starts), and :func:`solve_csr` works in place.
"""

from __future__ import annotations

import time

import torch

from .. import _ops

__all__ = ["load_error", "solve_grid_graph", "solve_grid", "solve_csr", "solve_graph"]

# Counters of the pseudoflow phase (grids only), left out of the stats when it did not run. The op's
# counter names, option names and algorithm codes come from the library (torchcut/csrc/layouts.h).
_HPF_STATS = ("mergers", "hpf_relabels", "hpf_us", "pseudoflow_items", "handovers", "mirrored")


def load_error():
    """Why the compiled CPU solver cannot be used, or None when it can.

    Examples
    --------
    >>> load_error() is None or isinstance(load_error(), str)
    True
    """
    return _ops.load_error("cpu")


def _threads(threads) -> int:
    if threads is None:
        return max(1, torch.get_num_threads())
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    return threads


def _code(table: str, name: str, value) -> int:
    """The op's code of ``value`` in the library's name list ``table``; ``name`` is the argument's."""
    codes = _ops.names(table)
    if value not in codes:
        raise ValueError(f"{name}: expected one of {sorted(codes)}, got {value!r}")
    return codes.index(value)


def _stats(raw: torch.Tensor, t0: float, threads: int) -> dict:
    names = _ops.names("cpu_stats")
    rows = raw.tolist()  # summed in Python: a tensor sum costs more than the few items it adds
    totals = rows[0] if len(rows) == 1 else [sum(c) for c in zip(*rows)]
    hpf = totals[names.index("pseudoflow_items")]
    out = {
        k: v
        for k, v in zip(names[1:], totals[1:])
        if (hpf or k not in _HPF_STATS) and not (k.endswith("_us") and v == 0)
    }
    used = "pseudoflow" if hpf == raw.shape[0] else "boykov-kolmogorov" if hpf == 0 else "mixed"
    out.update(backend="cpu", algorithm=used, threads=threads, seconds=time.perf_counter() - t0)
    return out


def _grid_op(caps, source, sink, offsets, threads, algorithm="auto", mask_only=False, orient="auto"):
    """Run the grid op: (mask, residual, excess, sink residual, stats), inputs left untouched; with
    ``mask_only`` the op writes the mask alone and the three middle entries are None (and ``orient``
    applies: :func:`solve_grid_mask`)."""
    t0 = time.perf_counter()
    _ops.ensure("cpu")
    code = _code("grid_cpu_algorithms", "algorithm", algorithm)
    side = _code("grid_cpu_orients", "orient", orient)
    threads = _threads(threads)
    offsets = tuple(tuple(int(v) for v in o) for o in offsets)
    ndim = len(offsets[0])
    if caps.device.type != "cpu":
        raise ValueError(f"caps: expected a CPU tensor, got one on {caps.device}")
    if caps.dim() != ndim + 2 or caps.shape[1] != 2 * len(offsets):
        raise ValueError(
            f"caps: expected shape [B, {2 * len(offsets)}, *shape] with {ndim} spatial dims, got {tuple(caps.shape)}"
        )
    if sink.dtype != caps.dtype:
        raise ValueError(f"sink: expected dtype {caps.dtype} (that of caps), got {sink.dtype}")
    shape = tuple(caps.shape[2:])
    flat = [v for o in offsets for v in o]
    mask, raw, res, excess, sink_out = torch.ops.torchcut.grid_solve(
        caps, source, sink, list(shape), flat, [threads, code, int(mask_only), side]
    )
    full = (caps.shape[0],) + shape
    if mask_only:
        return mask.view(full), None, None, None, _stats(raw, t0, threads)
    return mask.view(full), res, excess.view(full), sink_out.view(full), _stats(raw, t0, threads)


def solve_grid_graph(graph, *, threads=None, algorithm="auto"):
    """Solve a :class:`torchcut.GridGraph` without copying or modifying its tensors.

    What :func:`torchcut.maxflow` calls: the op reads the capacities and writes the results into new
    tensors, so the dispatcher's terminal reduction and residual copy are not needed. ``threads`` and
    ``algorithm`` are as for :func:`solve_grid`.

    Returns
    -------
    (mask, residual, excess, sink, stats)

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.GridGraph([[3, 0]], [[0, 2]], [[[5, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> mask, residual, excess, sink, stats = solve_grid_graph(g)
    >>> mask.tolist(), excess.tolist(), sink.tolist()
    ([[[True, True]]], [[[1, 0]]], [[[0, 0]]])
    """
    return _grid_op(graph.caps, graph.source, graph.sink, graph.offsets, threads, algorithm)


def solve_grid_mask(graph, *, threads=None, algorithm="auto", orient="auto"):
    """The source side of the minimum cut of a :class:`torchcut.GridGraph` alone, and the counters.

    What :func:`torchcut.solvers.consume_mask` (and so ``segment()``) calls on the CPU: the op solves as
    :func:`solve_grid_graph` does but writes only the mask, so the residuals, the excess and the sink
    capacities are neither allocated nor stored (at 1024^2, 4-connected: 28 MB of new memory a call).
    ``threads`` and ``algorithm`` are as for :func:`solve_grid`.

    ``orient`` is the orientation pseudoflow runs in: ``"auto"`` mirrors the graph (arcs reversed, source
    and sink swapped) when the nodes that start with excess outnumber those with a deficit by more than a
    fifth of the nodes, where pseudoflow runs up to 2.5x faster mirrored; ``"given"`` and ``"mirrored"``
    force one; ``"auto-pseudoflow"`` is auto that also runs pseudoflow wherever it mirrors, whatever
    ``algorithm`` asks. The mask is the canonical source side of the graph as given either way
    (``stats["mirrored"]`` says whether the solve was mirrored).

    Returns
    -------
    (mask, stats): bool ``[B, *shape]`` (True = source side) and the counters.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.GridGraph([[3, 0]], [[0, 2]], [[[5, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> mask, stats = solve_grid_mask(g)
    >>> mask.tolist(), stats["augmentations"]
    ([[[True, True]]], 1)
    """
    mask, _, _, _, stats = _grid_op(
        graph.caps, graph.source, graph.sink, graph.offsets, threads, algorithm, True, orient
    )
    return mask, stats


def solve_grid(caps, excess, sink, offsets, *, threads=None, algorithm="auto"):
    """Maximum flow of a batched grid network on the CPU, in place.

    Same contract as :func:`torchcut.solvers.reference.solve_grid`.

    Parameters
    ----------
    caps : Tensor ``[B, 2K, *shape]`` int32 or int64, CPU
        Residual arc capacities, overwritten with the final residuals.
    excess : Tensor ``[B, *shape]`` int64
        Initial excess (reduced source capacity), overwritten with the final excess.
    sink : Tensor ``[B, *shape]``, dtype of caps
        Residual sink capacities, overwritten.
    offsets : the K offsets of the grid.
    threads : int, optional
        Threads: items of the batch solved at once, or for a single grid of at least 2 x 2**17 nodes,
        the ranges of rows it is cut into (each at least 2**17 nodes, 2**20 in a 6-connected volume;
        default ``torch.get_num_threads()``; they are an OpenMP team, torch's own threads, where the
        library is built with OpenMP). The flow and the mask do not depend on it; the residuals of a
        cut grid, or of a grid auto races the algorithms on, may differ.
    algorithm : {"auto", "boykov-kolmogorov", "pseudoflow"}
        "boykov-kolmogorov": search trees and augmenting paths. "pseudoflow": Hochbaum's pseudoflow
        (lowest label, with the gap rule), after which one search from the deficits proves the flow
        maximum (Boykov-Kolmogorov runs from it only if an augmenting path is left). "auto" (default)
        picks pseudoflow for an item whose n-link capacities (twice the smaller arc of each pair) sum to
        more than a threshold times its netted terminal capacities (each node's up to its own n-links):
        3.5 on 2D 4-connected grids, 3.85 on 8-connected ones, 3.2 on 3D 6-connected and 1.55 on
        18/26-connected volumes (strong smoothness, long augmenting paths, bushy search trees);
        Boykov-Kolmogorov otherwise (``docs/performance.md``, "The choice of algorithm"). A single
        grid cut over several threads takes 2.7 on 8-connected grids and 4 on 18/26-connected volumes;
        there auto's pseudoflow on a 2D grid with a ratio below 4.6 (4-connected) or 4.1 (8-connected)
        hands the ranges still running, once one is done, to Boykov-Kolmogorov
        (``stats["handovers"]``); forced pseudoflow runs every range to its end. On a single 2D grid
        of at least 16,384 nodes that is not cut, with two threads or more and a ratio below 3 times
        the threshold, auto races both algorithms on two copies, one thread each, and keeps the first
        done (``stats["races"]``; ``stats["algorithm"]`` names the winner): the flow and the mask are
        the same either way, the residuals those of the winner.

    Returns
    -------
    (mask, stats): bool ``[B, *shape]`` source side, and a dict of counters (``stats["algorithm"]``:
    what ran, "mixed" when a batch used both).

    Examples
    --------
    >>> caps = torch.zeros(1, 4, 1, 2, dtype=torch.int32); caps[0, 0, 0, 0] = 5
    >>> excess = torch.tensor([[[3, 0]]]); sink = torch.tensor([[[0, 2]]], dtype=torch.int32)
    >>> mask, stats = solve_grid(caps, excess, sink, ((0, 1), (1, 0)))
    >>> mask.tolist(), sink.tolist(), excess.tolist(), stats["algorithm"]
    ([[[True, True]]], [[[0, 0]]], [[[1, 0]]], 'boykov-kolmogorov')
    """
    mask, res, ex, snk, stats = _grid_op(caps, excess, sink, offsets, threads, algorithm)
    caps.copy_(res)
    excess.copy_(ex)
    sink.copy_(snk)
    return mask, stats


def solve_csr(row_ptr, head, tail, rev, caps, excess, sink, **options):
    """Maximum flow of a general network in CSR layout on the CPU, in place.

    Same contract as :func:`torchcut.solvers.csr_reference.solve_csr` (``tail`` is not needed).

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
    >>> caps, excess, sink = g.caps.clone(), g.source[0].clone(), g.sink[0].clone()
    >>> mask, stats = solve_csr(g.row_ptr, g.head, g.tail, g.rev, caps, excess, sink)
    >>> mask.tolist(), sink.tolist()
    ([True, True, False], [0, 0, 2])
    """
    if options:
        raise TypeError(f"solve_csr: unexpected options {sorted(options)} for the CPU backend")
    t0 = time.perf_counter()
    _ops.ensure("cpu")
    if caps.device.type != "cpu":
        raise ValueError(f"caps: expected a CPU tensor, got one on {caps.device}")
    args = [t.contiguous() for t in (row_ptr, head, rev)]
    work = [t if t.is_contiguous() else t.contiguous() for t in (caps, excess, sink)]
    mask, raw = torch.ops.torchcut.csr_solve_(*args, *work, [])
    for t, o in zip(work, (caps, excess, sink)):
        if t is not o:
            o.copy_(t)
    return mask, _stats(raw, t0, 1)


def solve_graph(row_ptr, head, rev, caps, source, sink):
    """Maximum flow of a general network on the CPU, its tensors left as they are: one call of the
    compiled op, which makes the copies the solve works in and the result's tensors.

    What :func:`torchcut.maxflow` runs for a CPU :class:`~torchcut.FlowGraph` without solver options: a
    graph of a few hundred nodes solves in a few microseconds, where the copies, the sink flows and their
    sum took ~25 us as tensor operations from Python.

    Parameters
    ----------
    row_ptr, head, rev, caps : torch.Tensor
        The CSR network (``torchcut.FlowGraph``'s fields).
    source, sink : torch.Tensor
        ``[1, N]`` terminal capacities: ``source`` int64, ``sink`` in the dtype of ``caps``.

    Returns
    -------
    tuple
        ``(flows [1], mask [1, N], residual [A], source_flow [1, N], sink_flow [1, N] int64, stats)``;
        ``stats`` a dict, as :func:`solve_csr` gives it.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
    >>> flows, mask, residual, _, sink_flow, _ = solve_graph(g.row_ptr, g.head, g.rev, g.caps, g.source, g.sink)
    >>> flows.tolist(), mask.tolist(), sink_flow.tolist()
    ([3], [[True, True, False]], [[0, 0, 3]])
    """
    t0 = time.perf_counter()
    _ops.ensure("cpu")
    flows, mask, residual, source_flow, sink_flow, raw = torch.ops.torchcut.csr_solve(
        row_ptr, head, rev, caps, source, sink
    )
    return flows, mask, residual, source_flow, sink_flow, _stats(raw, t0, 1)
