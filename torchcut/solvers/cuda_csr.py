"""CUDA backend for general graphs: push-relabel kernels on CSR (``torch.ops.torchcut.csr_solve_`` on CUDA).

The kernels and the host loop live in ``torchcut/csrc/cuda/csr_kernels.cu`` (algorithm described at its
top: an active-vertex queue rebuilt each round, one thread per low-degree vertex and a warp per high-degree vertex, a
queue-based BFS global relabel on the GPU, one host read per cycle); the op converts the layout of
:mod:`torchcut.graph` to the kernels' (int32 indices, int64 residuals) and back. When the library
cannot be built, :func:`torchcut.maxflow` falls back to :mod:`torchcut.solvers.csr_reference` with
one warning. The host loop reads counters back between launches, so a solve cannot run inside a CUDA
graph capture: :func:`solve_csr` raises a RuntimeError then, before anything is queued on the stream.
"""

from __future__ import annotations

import time

import torch

from .. import _ops
from .._ops import check_not_capturing

__all__ = ["load_error", "solve_csr"]


def load_error():
    """Why the CUDA CSR solver cannot be used, or None when it can.

    Examples
    --------
    >>> load_error() is None or isinstance(load_error(), str)  # doctest: +SKIP
    True
    """
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    return _ops.load_error("cuda")


def solve_csr(
    row_ptr, head, tail, rev, caps, excess, sink, *, period: int = 0, iters: int = 4, max_cycles: int | None = None
):
    """Push-relabel phase one on the GPU, in place (same contract as ``csr_reference.solve_csr``).

    Parameters
    ----------
    period : int
        Push/relabel rounds between global relabels; 0 = adaptive (half the last BFS depth, at
        least 8).
    iters : int
        Push/relabel steps per active vertex per round.
    max_cycles : int, optional
        Raise RuntimeError after this many global relabels.

    Raises
    ------
    RuntimeError
        During a CUDA graph capture on the current stream (nothing is queued then), or when
        ``max_cycles`` is reached.

    Examples
    --------
    >>> import torch, torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [5], source=[3, 0], sink=[0, 2]).to("cuda")  # doctest: +SKIP
    >>> torchcut.maxflow(g, backend="cuda", lattice=False).flow_value  # doctest: +SKIP
    2
    """
    check_not_capturing("torchcut.maxflow")
    t0 = time.perf_counter()
    _ops.ensure("cuda")
    n = excess.numel()
    if max_cycles is None:
        max_cycles = 4 * n + 1000
    mask, st = torch.ops.torchcut.csr_solve_(
        row_ptr, head, rev, caps, excess, sink, [int(period), int(iters), int(max_cycles)]
    )
    torch.cuda.synchronize(caps.device)
    st = dict(zip(_ops.names("csr_cuda_stats"), st.tolist()))
    if st["status"]:  # the op returns a status instead of throwing
        raise RuntimeError(
            f"torchcut.csr_solve_: push-relabel did not converge in {max_cycles} cycles (global relabels)"
        )
    return mask, {
        "backend": "cuda_csr",
        "global_relabels": st["cycles"] + 1,
        "rounds": st["rounds"],
        "bfs_levels": st["bfs_levels"],
        "seconds": time.perf_counter() - t0,
    }
