"""Independent oracles for flow values, built from the raw inputs (not from torchcut's own layout)."""

from __future__ import annotations

import numpy as np
import pytest


def pymaxflow_grid(source, sink, edges, offsets, reverse=None) -> int:
    """Max flow of one grid network by PyMaxflow (Boykov-Kolmogorov), in float64 (exact below 2**53).

    ``source``, ``sink``: ``[*shape]``; ``edges``/``reverse``: ``[K, *shape]``; arc p -> p + offsets[k].
    """
    maxflow = pytest.importorskip("maxflow")  # PyMaxflow, the oracle: the test skips without it

    source = np.asarray(source, dtype=np.float64)
    shape = source.shape
    n = source.size
    ids = np.arange(n).reshape(shape)
    g = maxflow.Graph[float]()
    g.add_nodes(n)
    rev = edges if reverse is None else reverse
    for k, off in enumerate(offsets):
        src_sl, dst_sl = [], []
        for o, size in zip(off, shape):
            n = max(0, size - abs(o))
            src_sl.append(slice(max(0, -o), max(0, -o) + n))
            dst_sl.append(slice(max(0, o), max(0, o) + n))
        src_sl, dst_sl = tuple(src_sl), tuple(dst_sl)
        i = ids[src_sl].ravel()
        j = ids[dst_sl].ravel()
        if i.size == 0:
            continue
        fwd = np.asarray(edges[k], dtype=np.float64)[src_sl].ravel()
        bwd = np.asarray(rev[k], dtype=np.float64)[src_sl].ravel()
        g.add_edges(i.astype(np.int64), j.astype(np.int64), fwd, bwd)
    g.add_grid_tedges(ids, source, np.asarray(sink, dtype=np.float64))
    return g.maxflow()
