"""Solver dispatch: one entry point, several backends.

The entry points are in :mod:`torchcut.solvers._maxflow`. The backends are listed, one object each,
in :mod:`torchcut.solvers._backends`: per graph layout a reference solver in torch ops (the
specification) and compiled ones for the CPU and CUDA. Grid graphs go through
:mod:`torchcut.solvers._grid`, general ones through :mod:`torchcut.solvers.csr`; both share
the terminal netting of :mod:`torchcut.solvers._terminals` and the host route of small CUDA graphs
(:mod:`torchcut.solvers._host`). Inside ``torch.compile`` a grid solve is one custom op
(:mod:`torchcut.solvers.ops`).
"""

from __future__ import annotations

from ._backends import BACKENDS
from ._maxflow import consume_mask, maxflow

__all__ = ["maxflow", "consume_mask", "BACKENDS"]
