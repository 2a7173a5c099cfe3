"""Drop-in replacements for other graph-cut libraries' APIs, solved by torchcut.

``torchcut.compat.pymaxflow`` mirrors PyMaxflow (``import torchcut.compat.pymaxflow as maxflow``),
``torchcut.compat.fastmin`` its ``fastmin`` module, ``torchcut.compat.torchmaxflow`` torchmaxflow's
``maxflow`` and ``maxflow_interactive``, and ``torchcut.compat.gco`` gco-wrapper's ``cut_general_graph``
(``import torchcut.compat.gco as gco``).

Examples
--------
>>> from torchcut.compat import pymaxflow as maxflow
>>> g = maxflow.Graph[int]()
>>> g.add_nodes(2).tolist()
[0, 1]
"""

from importlib import import_module

_MODULES = ("pymaxflow", "fastmin", "torchmaxflow", "gco")


def __getattr__(name):
    # ``torchcut.compat.pymaxflow`` works after a plain ``import torchcut`` too (imported on first use)
    if name in _MODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torchcut.compat' has no attribute {name!r}")
