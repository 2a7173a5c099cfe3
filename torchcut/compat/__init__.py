"""Drop-in replacements for other graph-cut libraries' APIs, solved by torchcut.

``torchcut.compat.pymaxflow`` mirrors PyMaxflow (``import torchcut.compat.pymaxflow as maxflow``).

Examples
--------
>>> from torchcut.compat import pymaxflow as maxflow
>>> g = maxflow.Graph[int]()
>>> g.add_nodes(2).tolist()
[0, 1]
"""
