"""The benchmark scripts' timer: the median of repeated calls, CUDA synchronised around each.

from benchmarks.timing import median_time
seconds, times, out = median_time(lambda: torchcut.maxflow(g), 5, cuda=True)
"""

from __future__ import annotations

import statistics
import time


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def median_time(fn, repeats: int, *, warmup: int = 1, cuda: bool = False, clock=time.perf_counter):
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    repeats : int
        Timed calls (at least 1).
    warmup : int
        Untimed calls first (compilation, caches, workspaces).
    cuda : bool
        Synchronise the current CUDA device before and after each timed call, so that a call's time
        includes its GPU work.
    clock : callable
        The clock, ``time.perf_counter`` (wall time) or e.g. ``time.process_time`` (CPU time).

    Returns
    -------
    (float, list of float, object)
        The median seconds, every call's seconds, and the last call's output.

    Examples
    --------
    >>> seconds, times, out = median_time(lambda: sum(range(100)), 3)
    >>> len(times), out, seconds >= 0
    (3, 4950, True)
    """
    if repeats < 1:
        raise ValueError(f"repeats: expected at least 1 timed call, got {repeats}")
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        _sync(cuda)
        t0 = clock()
        out = fn()
        _sync(cuda)
        times.append(clock() - t0)
    return statistics.median(times), times, out
