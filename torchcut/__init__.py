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
    "expansion": "multilabel",
    "refine": "multilabel",
    "labeling_energy": "multilabel",
}
# Public modules reachable as ``torchcut.<name>`` after a plain ``import torchcut``, imported on first
# use (``grid``, ``result`` and ``solvers`` are imported above; ``torchcut.segment`` and
# ``torchcut.grabcut`` are the functions: import their modules by name).
_MODULES = ("build", "cli", "compat", "datasets", "dimacs", "distributed", "energy", "graph", "graph_multilabel",
            "multilabel", "stereo")

__all__ = ["GridGraph", "grid_offsets", "maxflow", "segment", "grabcut", "CutResult", "CertificateError", *_LAZY,
           *_MODULES]


def __getattr__(name):
    if name in _MODULES:
        return import_module(f".{name}", __name__)
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchcut' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
