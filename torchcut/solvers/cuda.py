"""CUDA backend: push-relabel kernels for grid networks (``torch.ops.torchcut.grid_solve_`` on CUDA).

The kernels live in ``torchcut/csrc/cuda/grid_*`` (push kernels ``grid_push.cuh``, global relabel
``grid_bfs.cu``, host loop ``grid_solve.cpp``, bindings ``grid_ops.cpp``), compiled into
``torchcut._C_cuda`` at install time (:mod:`torchcut._ops` loads it). This module is the thin layer
between the dispatcher in :mod:`torchcut.solvers` and the compiled op: it checks the arguments and the
tuning options (their order and names come from the library, ``csrc/layouts.h``; :data:`OPTIONS`
documents them for users, and a test keeps the two equal), that the solver's buffers fit on the GPU,
and turns the op's counters into a dict.

Algorithm: tile-local push/relabel rounds in shared memory with atomics across tile borders, and a
global relabel (BFS from the sink) on the GPU as one worklist launch. Termination is exact: right
after a BFS, no node with excess can reach the sink. The host reads one small counter block per
global relabel, so a solve cannot be captured into a CUDA graph; :func:`solve_grid` raises a
RuntimeError during a capture, before anything is queued on the stream.
"""

from __future__ import annotations

import functools
import math
import time

import torch

from .. import _ops
from .._ops import check_not_capturing

__all__ = ["load_error", "solve_grid", "workspace_bytes", "check_not_capturing", "INF", "OPTIONS"]

# Height of nodes that cannot reach the sink (kInf in grid_common.h).
INF = 1 << 30
# The tuning options of solve_grid, with what they do (the op's order is the library's: layouts.h).
# 0 or None always means the default. Variants that measured no faster were removed (see
# docs/performance.md, "Findings"): pipeline, walk, bfs_scan, bfs_queue, bfs_nodes,
# bfs_batch, push_blocks, push_walk and the exp bits.
OPTIONS = {
    "tile_x": "push tile extent along x (default 32 in 2D, 8 in 3D); tiles of 32 to 512 nodes",
    "tile_y": "push tile extent along y (default 16 in 2D, 8 beyond 8 directions; 8 in 3D)",
    "tile_z": "push tile extent along z (3D only; default 8, 4 beyond 8 directions)",
    "rounds": "local push/relabel rounds per tile visit (default 16)",
    "push_launches": "push launches between global relabels (default: half the BFS depth in tiles, at most 4 "
    "on 4/6-connected grids, at least 6 on 18/26-connected volumes)",
    "max_cycles": "raise RuntimeError after this many global relabels (default 1000000)",
    "profile": "1: time the BFS and push phases with events and count per-visit cycles (bfs_us, push_us, "
    "push_visits, push_visit_us, push_rounds, bfs_pop_us, bfs_relax_us, bfs_passes); 2: also one "
    "line per relabel cycle and push launch on stderr",
    "persist": "blocks per SM of the persistent push/BFS grids (default 2 for pushes, as many as fit for the "
    "BFS); -1: one block per tile",
    "bfs_tile_x": "BFS tile extent along x (powers of two, at most 32 each, 32 to 1024 nodes; default 32 in "
    "2D, 8 in 3D)",
    "bfs_tile_y": "BFS tile extent along y (default 16 in 2D, 8 in 3D)",
    "bfs_tile_z": "BFS tile extent along z (3D only; default 8)",
    "push_tail": "push launches between global relabels once at most a quarter as many tiles are active as "
    "there are push blocks (default: the last BFS's depth in tiles, 6 to 24; -1: no such rule)",
    "item_skip": "batches: an item left with no active node after a global relabel is left out of every later "
    "one (its heights are final; default on); -1: every global relabel covers every item",
    "repair": "global relabels after the first may repair the last one's distances where the pushes changed "
    "them instead of a full BFS from the sink (default: on grids of at least 4 BFS tiles per resident BFS "
    "block, after a full BFS bound by its tile visits rather than its depth; only where every offset "
    "stays within the neighbouring BFS tiles); 1: always; -1: never",
    "push_chain": "chained push launches, whose blocks also visit the tiles that flow enters during the launch: "
    "by default, on a single grid (not a batch) of at least 512^2 nodes, after a global relabel bound "
    "by its depth rather than its tile visits (and at least 12 tiles deep) that left at most twice as "
    "many active tiles as push blocks, one chained launch of "
    "up to 16 times the listed tiles replaces 16 plain ones; n > 0: every launch chained, up to n "
    "times; -1: never (2D 4/8-connected grids with the default tile only)",
    "small": "items of at most 4096 nodes and at most 8 directions (2D 4/8-connected, 3D 6-connected) are each "
    "solved by one thread block in a single launch, with no host synchronisation until the mask (by default, "
    "where the device's shared memory holds an item and no other option but max_cycles is set; stats "
    "one_launch = 1); -1: never (the tiled solver)",
}
# Outcomes reported by the op (grid_common.h, kStatus*): it returns a status instead of throwing.
_STATUS = {
    1: "push-relabel did not converge in {max_cycles} global relabels (option max_cycles)",
    2: "the worklist BFS stalled; this is a bug in torchcut, please report it",
}


def load_error():
    """Why the CUDA extension cannot be used, or None when it can.

    Examples
    --------
    >>> load_error() is None or isinstance(load_error(), str)  # doctest: +SKIP
    True
    """
    return _ops.load_error("cuda")


def workspace_bytes(num_nodes: int, num_dirs: int) -> int:
    """GPU memory the solver allocates on top of the graph's own tensors, in bytes.

    Per node: a height (4 bytes), a residual-arc bit mask for the BFS (4 bytes, 8 from 32 directions
    on: one bit per direction and one for the sink arc) and the output mask (1 byte); plus small
    per-tile arrays.

    Examples
    --------
    >>> workspace_bytes(1024 * 1024, 4)
    9437184
    """
    mask = 4 if num_dirs < 32 else 8
    return num_nodes * (4 + mask + 1)


@functools.lru_cache(maxsize=64)
def _plan(dims, offsets, options):
    """The checked static arguments of a solve (cached: a multi-label call solves the same shapes many
    times): ``(shape, flat offsets, options in the op's order)``. ``dims``: ``caps.shape[1:]``;
    ``offsets``: tuples of ints; ``options``: sorted (name, value) pairs."""
    options = dict(options)
    names = _ops.names("grid_cuda_options")
    unknown = set(options) - set(names)
    if unknown:
        raise TypeError(f"solve_grid: unexpected options {sorted(unknown)}; expected some of {names}")
    ndim = len(offsets[0])
    K = len(offsets)
    if len(dims) != ndim + 1 or dims[0] != 2 * K:
        raise ValueError(
            f"caps: expected shape [B, {2 * K}, *shape] with {ndim} spatial dims, got [B, {', '.join(map(str, dims))}]"
        )
    if 2 * K > 62:
        raise ValueError(f"offsets: the CUDA kernels take at most 31 offsets, got {K}")
    push_tile = [
        int(options.get(f"tile_{a}") or d)
        for a, d in zip("xyz", ((32, 8 if 2 * K > 8 else 16, 1) if ndim == 2 else (8, 8, 4 if 2 * K > 8 else 8)))
    ]
    if ndim == 2:
        push_tile[2] = 1
    if not 32 <= math.prod(push_tile) <= 512 or min(push_tile) < 1:
        raise ValueError(
            f"tile_x/tile_y/tile_z: expected a tile of 32 to 512 nodes, got {'x'.join(map(str, push_tile))}"
        )
    tile = [int(options.get(f"bfs_tile_{a}") or d) for a, d in zip("xyz", (32, 16, 1) if ndim == 2 else (8, 8, 8))]
    if ndim == 2:
        tile[2] = 1
    n_tile = math.prod(tile)
    if any(t < 1 or t > 32 or t & (t - 1) for t in tile) or not 32 <= n_tile <= 1024:
        raise ValueError(
            "bfs_tile_x/bfs_tile_y/bfs_tile_z: expected powers of two, each at most 32, "
            f"with 32 to 1024 nodes in all; got {'x'.join(map(str, tile))}"
        )
    return tuple(dims[1:]), tuple(v for o in offsets for v in o), tuple(int(options.get(k) or 0) for k in names)


# Buffers below this many bytes are not checked against the free memory: the driver query costs about
# 25 us, a tenth of a small solve's overhead, and torch's allocator raises its own OutOfMemoryError for them.
MEMORY_CHECK_BYTES = 64 << 20


def _check_memory(device, need: int, per_node, B: int, n: int) -> None:
    """Raise OutOfMemoryError naming the sizes when the solver's buffers (at least
    :data:`MEMORY_CHECK_BYTES`) cannot fit in the free memory.

    (torch.cuda.memory_reserved/memory_allocated would count the caching allocator's spare memory too,
    but each builds the allocator's whole statistics dict: slower than this driver call.)
    """
    if need < MEMORY_CHECK_BYTES:
        return
    free, total = torch.cuda.mem_get_info(device)
    if need > free:
        raise torch.cuda.OutOfMemoryError(
            f"torchcut: the CUDA grid solver needs {need / 2**20:.1f} MiB more GPU memory for its buffers "
            f"({B} x {n} nodes, {per_node()} bytes per node with the graph), but only {free / 2**20:.1f} MiB "
            f"of {total / 2**20:.1f} MiB are free on {device}"
        )


def solve_grid(caps, excess, sink, offsets, **options):
    """Run push-relabel phase one on a batched grid network on the GPU, in place.

    Same contract as :func:`torchcut.solvers.reference.solve_grid`.

    Parameters
    ----------
    caps : Tensor ``[B, 2K, *shape]`` int32 or int64, CUDA
        Residual arc capacities, overwritten with the final residuals.
    excess : Tensor ``[B, *shape]`` int64, CUDA
        Initial excess, overwritten with the final excess.
    sink : Tensor ``[B, *shape]``, dtype of caps, CUDA
        Residual sink capacities, overwritten.
    offsets : the K offsets of the grid (tuples of length 2 or 3).
    **options
        Tuning knobs, all optional, listed with what they do in :data:`OPTIONS` (``tile_x``/``tile_y``/
        ``tile_z``, ``rounds``, ``push_launches``, ``max_cycles``, ``profile``, ``persist``,
        ``bfs_tile_x``/``bfs_tile_y``/``bfs_tile_z``, ``push_tail``, ``item_skip``, ``repair``, ``push_chain``,
        ``small``). None or 0 means the default.

    Returns
    -------
    (mask, stats): bool ``[B, *shape]`` source side, and a dict of counters.

    Examples
    --------
    >>> caps = torch.zeros(1, 4, 1, 2, dtype=torch.int32, device="cuda"); caps[0, 0, 0, 0] = 5  # doctest: +SKIP
    >>> excess = torch.tensor([[[3, 0]]], device="cuda")  # doctest: +SKIP
    >>> sink = torch.tensor([[[0, 2]]], dtype=torch.int32, device="cuda")  # doctest: +SKIP
    >>> mask, stats = solve_grid(caps, excess, sink, ((0, 1), (1, 0)))  # doctest: +SKIP
    >>> mask.tolist(), sink.tolist()  # doctest: +SKIP
    ([[[True, False]]], [[[0, 0]]])
    """
    check_not_capturing("torchcut.maxflow")
    t0 = time.perf_counter()
    _ops.ensure("cuda")
    if caps.device.type != "cuda":
        raise ValueError(f"caps: expected a CUDA tensor, got one on {caps.device}")
    if sink.dtype != caps.dtype:
        raise ValueError(f"sink: expected dtype {caps.dtype} (that of caps), got {sink.dtype}")
    offsets = tuple(tuple(int(v) for v in o) for o in offsets)
    shape, flat, opts = _plan(tuple(caps.shape[1:]), offsets, tuple(sorted(options.items())))
    B = caps.shape[0]
    if B > 65535:
        raise ValueError(f"caps: expected a batch of at most 65535 items on the GPU, got {B}")
    n = math.prod(shape)
    K = caps.shape[1] // 2
    work = [t if t.is_contiguous() else t.contiguous() for t in (caps, excess, sink)]
    need = workspace_bytes(B * n, 2 * K) + 4096
    need += sum(t.numel() * t.element_size() for t, o in zip(work, (caps, excess, sink)) if t is not o)
    _check_memory(
        caps.device,
        need,
        lambda: (caps.element_size() * 2 * K + 8 + sink.element_size()) + workspace_bytes(1, 2 * K),
        B,
        n,
    )
    mask, stats = torch.ops.torchcut.grid_solve_(work[0], work[1], work[2], list(shape), list(flat), list(opts))
    for t, o in zip(work, (caps, excess, sink)):
        if t is not o:
            o.copy_(t)
    out = dict(zip(_ops.names("grid_cuda_stats"), stats.tolist()))
    if out["status"]:
        max_cycles = int(options.get("max_cycles") or 1000000)
        raise RuntimeError(
            "torchcut.grid_solve_: "
            + _STATUS.get(out["status"], "error {status}").format(max_cycles=max_cycles, status=out["status"])
        )
    out["backend"] = "cuda"
    out["seconds"] = time.perf_counter() - t0
    return mask.view((B,) + shape), out
