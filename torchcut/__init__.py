"""torchcut: graph-cut segmentation and max-flow on PyTorch tensors, with CUDA push-relabel kernels.

Examples
--------
>>> import torch, torchcut
>>> g = torchcut.GridGraph(torch.tensor([[5, 0]]), torch.tensor([[0, 5]]),
...                        torch.tensor([[[3, 0]], [[0, 0]]]), torchcut.grid_offsets(2, 4))
>>> torchcut.maxflow(g).flow_value
3
"""

import sys
import types
import warnings
from importlib import import_module

from . import _ops

_ops._load_at_import()  # the installed CPU library, when it fits this torch (nothing is compiled here)

from ._grabcut import EmptyMaskWarning, grabcut  # noqa: E402

# ``torchcut.segment`` and ``torchcut.grabcut`` are functions; their modules are private.
from ._segment import segment  # noqa: E402
from .grid import GridGraph, grid_offsets  # noqa: E402
from .result import CertificateError, CutResult  # noqa: E402
from .solvers import maxflow  # noqa: E402

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
    "Segmenter": "interactive",
    "cut_mask": "diff",
    "cut_labels": "diff",
}
# Public modules reachable as ``torchcut.<name>`` after a plain ``import torchcut``, imported on first
# use (``grid``, ``result`` and ``solvers`` are imported above).
_MODULES = (
    "build",
    "cli",
    "compat",
    "datasets",
    "diff",
    "dimacs",
    "distributed",
    "energy",
    "graph",
    "graph_multilabel",
    "interactive",
    "multilabel",
    "nn",
    "stereo",
)

__all__ = [
    "GridGraph",
    "grid_offsets",
    "maxflow",
    "segment",
    "grabcut",
    "EmptyMaskWarning",
    "CutResult",
    "CertificateError",
    *_LAZY,
    *_MODULES,
]


class _MovedModule(types.ModuleType):
    """The former module path ``torchcut.segment`` or ``torchcut.grabcut``: every name read through it
    warns (FutureWarning) and comes from the function's new place (``torchcut``) or its private module."""

    def __init__(self, name: str, target):
        super().__init__(name)
        self._target = target

    def __getattr__(self, attr):
        if attr.startswith("__") or not hasattr(self._target, attr):  # probes by tools stay quiet
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        short = self.__name__.rsplit(".", 1)[1]
        where = f"torchcut.{attr}" if attr in __all__ else f"{self._target.__name__}.{attr}"
        warnings.warn(
            f"the module {self.__name__} is deprecated: import {attr} as {where} (the name "
            f"torchcut.{short} is the function {short}())",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self._target, attr)


# Old imports such as ``from torchcut.grabcut import EmptyMaskWarning`` keep working, with a warning.
for _name in ("segment", "grabcut"):
    sys.modules[f"{__name__}.{_name}"] = _MovedModule(f"{__name__}.{_name}", sys.modules[f"{__name__}._{_name}"])
del _name


def __getattr__(name):
    if name in _MODULES:
        return import_module(f".{name}", __name__)
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchcut' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
