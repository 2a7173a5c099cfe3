"""torchcut: graph-cut segmentation and max-flow on PyTorch tensors, with CUDA push-relabel kernels.

Examples
--------
>>> import torch, torchcut
>>> g = torchcut.GridGraph(torch.tensor([[5, 0]]), torch.tensor([[0, 5]]),
...                        torch.tensor([[[3, 0]], [[0, 0]]]), torchcut.grid_offsets(2, 4))
>>> torchcut.maxflow(g).flow_value
3
"""

from importlib import import_module

from . import _ops

_ops._load_at_import()  # the installed CPU library, when it fits this torch (nothing is compiled here)

from .grid import GridGraph, grid_offsets  # noqa: E402
from .result import CertificateError, CutResult  # noqa: E402
from .solvers import maxflow  # noqa: E402
# Imported eagerly: the function shares its name with its module, and a lazy lookup would return the
# module once anything imported ``torchcut.segment``.
from .segment import segment  # noqa: E402
from .grabcut import grabcut  # noqa: E402 - same reason as segment

__version__ = "0.1.0"

# Public names that live in heavier modules, imported on first use.
_LAZY = {
    "segmentation_graph": "energy",
    "FlowGraph": "graph",
    "read_dimacs": "dimacs",
    "write_dimacs": "dimacs",
    "read_dimacs_solution": "dimacs",
    "datasets": None,
    "compat": None,
    "distributed": None,
    "expansion": "multilabel",
    "refine": "multilabel",
    "labeling_energy": "multilabel",
}

__all__ = ["GridGraph", "grid_offsets", "maxflow", "segment", "grabcut", "CutResult", "CertificateError", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        mod = _LAZY[name]
        if mod is None:
            return import_module(f".{name}", __name__)
        return getattr(import_module(f".{mod}", __name__), name)
    raise AttributeError(f"module 'torchcut' has no attribute {name!r}")
