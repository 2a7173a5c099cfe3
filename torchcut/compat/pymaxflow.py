"""PyMaxflow's ``Graph`` API over torchcut's solvers: change one import line, keep the script.

>>> import torchcut.compat.pymaxflow as maxflow   # instead of ``import maxflow``

``Graph[int]`` / ``GraphInt`` and ``Graph[float]`` / ``GraphFloat`` take the same calls as PyMaxflow
1.3 (``add_nodes``, ``add_grid_nodes``, ``add_edge``, ``add_edges``, ``add_tedge``,
``add_grid_edges``, ``add_grid_tedges``, ``maxflow``, ``get_segment``, ``get_grid_segments``,
``get_node_num``, ``get_edge_num``) plus one keyword, ``device=``: ``"cuda"`` keeps every capacity on
the GPU and solves there.

How a graph is built and solved
-------------------------------
Nothing is solved or laid out until :meth:`GraphInt.maxflow`. Grid calls keep their node ids,
weights and structure as tensors (no Python loop per node or edge); single ``add_edge`` /
``add_tedge`` calls are collected in lists and applied at once. At ``maxflow()``:

* when every edge came from ``add_grid_edges`` on one grid that holds all the nodes (the array
  ``add_grid_nodes`` returned, not periodic) and the grid is 1-, 2- or 3-D, the graph becomes a
  :class:`torchcut.GridGraph` whose offsets are the non-zero entries of the structures (an entry and
  its mirror image share one arc pair; ``symmetric=True`` fills the reverse arc);
* otherwise it becomes a :class:`torchcut.FlowGraph`.

Terminal capacities are netted as in PyMaxflow (Boykov-Kolmogorov's ``add_tweights``): a node's
source and sink capacities are summed over all calls (negative values allowed), the smaller total
is a constant every cut pays, and only the difference stays on the node.

Differences that remain (see also the README, "Coming from PyMaxflow")
----------------------------------------------------------------------
* ``maxflow(reuse_trees=True)`` on an integer edge-list graph (``add_edge`` / ``add_edges``) on the
  CPU whose links did not change since the last solve re-solves from the last flow
  (:class:`torchcut.solvers.dynamic.DynamicFlowGraph`; on the CPU its search trees are kept between
  calls): the nodes given terminal capacity since then are re-fitted, found from the ``add_tedge`` /
  ``add_grid_tedges`` calls themselves, so ``mark_node`` / ``mark_grid_nodes`` only check their ids.
  The first such call after a plain ``maxflow()`` solves once more to build the kept state. Grid
  graphs (``add_grid_edges``), float graphs and graphs with new links solve from scratch; values
  and segments are those of a solve from scratch either way. Adding capacity after ``maxflow()`` and
  calling it again gives the maximum flow of the grown graph, as in PyMaxflow.
* Which minimum cut: the sink side is the set of nodes that can still reach the sink in the final
  residual graph (torchcut's convention, unique per instance). Boykov-Kolmogorov's maximal search
  trees give the same set, so integer graphs get PyMaxflow's segments; float graphs are quantized
  (below) and may return another minimum cut of equal value within the tolerance.
* Float graphs: capacities are quantized to integers with the largest one mapped to 2**30, so the
  flow differs from the exact one by at most ``0.5 / scale`` per finite arc in the cut
  (``scale = 2**30 / largest capacity``).
* Stricter input: a negative edge capacity, an out-of-range or negative node id, a non-finite
  capacity or an even-sized structure raise ``ValueError`` (PyMaxflow accepts some of these
  silently); ``get_segment`` before ``maxflow`` raises ``RuntimeError`` (PyMaxflow returns 0).
* Node ids, weights and capacities may be numpy arrays, torch tensors or lists;
  ``get_grid_segments`` answers a torch tensor (on the graph's device) for a tensor and a numpy array
  otherwise.
* Not provided: ``copy``, ``get_nx_graph``, ``get_nx_graph``'s residual capacities.
* Integers are 64-bit (PyMaxflow's ``Graph[int]`` is 32-bit C ``int``); a graph whose capacities
  sum past 2**62 raises.

Examples
--------
PyMaxflow's tutorial graph:

>>> import torchcut.compat.pymaxflow as maxflow
>>> g = maxflow.Graph[int](2, 2)
>>> nodes = g.add_nodes(2)
>>> g.add_edge(nodes[0], nodes[1], 1, 2)
>>> g.add_tedge(nodes[0], 2, 5)
>>> g.add_tedge(nodes[1], 9, 4)
>>> g.maxflow()
8
>>> g.get_grid_segments(nodes).tolist()
[True, False]
"""

from __future__ import annotations

import functools
import math
from numbers import Integral, Real

import numpy as np
import torch

from .._validate import INT32_MAX, quantization_scale
from ..graph import FlowGraph
from ..grid import GridGraph, shift
from ..solvers import maxflow as _solve
from ..solvers.dynamic import DynamicFlowGraph

__all__ = [
    "Graph",
    "GraphInt",
    "GraphFloat",
    "vonNeumann_structure",
    "moore_structure",
    "fastmin",
    "aexpansion_grid",
    "abswap_grid",
]

# Offsets per grid the compiled solvers take (the CUDA kernels 31, the CPU solver 62); more go to FlowGraph.
_MAX_GRID_OFFSETS = {"cuda": 31, "cpu": 62}


def vonNeumann_structure(ndim: int = 2, directed: bool = False) -> np.ndarray:
    """The von Neumann (4-/6-connected) structure array for ``add_grid_edges``, as in PyMaxflow.

    Parameters
    ----------
    ndim : int
        Dimensions of the grid (at least 1).
    directed : bool
        True: only the neighbours after the centre along each axis (use with ``symmetric=True``);
        False: both neighbours along each axis.

    Returns
    -------
    numpy.ndarray
        Shape ``(3,) * ndim``, ones at the neighbours, zeros elsewhere.

    Examples
    --------
    >>> vonNeumann_structure(2, directed=True).tolist()
    [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    """
    ndim = _positive_int(ndim, "ndim")
    s = np.zeros((3,) * ndim, dtype=np.int64)
    for a in range(ndim):
        for step in (2,) if directed else (0, 2):
            idx = [1] * ndim
            idx[a] = step
            s[tuple(idx)] = 1
    return s


def moore_structure(ndim: int = 2, directed: bool = False) -> np.ndarray:
    """The Moore (8-/26-connected) structure array for ``add_grid_edges``, as in PyMaxflow.

    Parameters
    ----------
    ndim : int
        Dimensions of the grid (at least 1).
    directed : bool
        True: the half of the neighbours after the centre in row-major order (use with
        ``symmetric=True``); False: all neighbours.

    Returns
    -------
    numpy.ndarray
        Shape ``(3,) * ndim``; the centre is 0.

    Examples
    --------
    >>> moore_structure(2, directed=True).tolist()
    [[0, 0, 0], [0, 0, 1], [1, 1, 1]]
    """
    ndim = _positive_int(ndim, "ndim")
    flat = np.ones(3**ndim, dtype=np.int64)
    centre = 3**ndim // 2
    flat[: centre + 1 if directed else 0] = 0
    flat[centre] = 0
    return flat.reshape((3,) * ndim)


def _positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, Integral) or x < 1:
        raise ValueError(f"{name}: expected a positive integer, got {x!r}")
    return int(x)


def _node_index(i, name: str, n: int) -> int:
    if type(i) is int and 0 <= i < n:  # the common case first (mark_node in a loop over a stroke's nodes)
        return i
    if isinstance(i, (np.ndarray, torch.Tensor)) and i.ndim == 0:
        i = i.item()
    if isinstance(i, bool) or not isinstance(i, Integral):
        raise TypeError(f"{name}: expected an integer node id, got {type(i).__name__}")
    i = int(i)
    if not 0 <= i < n:
        raise ValueError(f"{name}: expected a node id in [0, {n}) (the graph has {n} nodes), got {i}")
    return i


class _Ids:
    """Grid node ids: their shape, and ``base`` when they are ``base, base + 1, ...`` in row-major order.

    The tensor is made only when needed (ids that ``add_grid_nodes`` handed out are known to be
    consecutive, so a grid solve never copies them to the device).
    """

    __slots__ = ("shape", "base", "_tensor", "_device")

    def __init__(self, shape, base, tensor, device):
        self.shape, self.base, self._tensor, self._device = tuple(shape), base, tensor, device

    @property
    def tensor(self) -> torch.Tensor:
        if self._tensor is None:
            n = math.prod(self.shape)
            self._tensor = torch.arange(self.base, self.base + n, device=self._device).view(self.shape)
        return self._tensor


class _Record:
    """One ``add_grid_edges`` call: node ids, weights and the structure's offsets and values."""

    __slots__ = ("ids", "weights", "offsets", "values", "symmetric", "periodic")

    def __init__(self, ids, weights, offsets, values, symmetric, periodic):
        self.ids, self.weights, self.offsets, self.values = ids, weights, offsets, values
        self.symmetric, self.periodic = symmetric, periodic

    def capacity(self, k: int) -> torch.Tensor:
        """Capacity of the arc p -> p + offsets[k] at every p of the grid (may be a broadcast view)."""
        v = self.values[k]
        return (self.weights if v == 1 else self.weights * v).expand(self.ids.shape)


# Host tensors at least this large go to a CUDA graph through pinned memory (below it a plain copy).
_STAGE_MIN_BYTES = 1 << 20


#: ``maxflow(reuse_trees=True)`` re-solves an edge-list graph on the CPU from its last flow when only
#: terminal capacities changed (:class:`torchcut.solvers.dynamic.DynamicFlowGraph`); False: always from
#: scratch (the results are the same). Graphs on CUDA solve from scratch: the re-solve is not measured
#: there. On: 1000^2 image graphs (2 M arcs) after strokes of 2% of the pixels, 12 ms a stroke against
#: 179 ms from scratch, one thread (``benchmarks/dynamic.py --compat``, docs/performance.md).
REUSE_FLOW = True


def _same_links(a: FlowGraph, b: FlowGraph) -> bool:
    """Whether two FlowGraphs have the same nodes, arcs and arc capacities (terminals aside)."""
    return (
        a.num_nodes == b.num_nodes
        and a.scale == b.scale
        and a.caps.dtype == b.caps.dtype
        and a.num_arcs == b.num_arcs
        and torch.equal(a.row_ptr, b.row_ptr)
        and torch.equal(a.head, b.head)
        and torch.equal(a.caps, b.caps)
    )


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; large host tensors bound for CUDA are staged in pinned memory.

    A copy from pageable memory runs at about 10 GB/s on the H100 machine and blocks the caller
    (3.45 ms per 32 MiB map). Copying into a pinned buffer (a parallel ``copy_``) and then sending it
    without blocking lets the transfer run while Python goes on to the next call; the caching host
    allocator keeps the buffer until the copy has finished. The caller's tensor is never modified.
    """
    if device.type != "cuda" or t.device.type != "cpu" or t.numel() * t.element_size() < _STAGE_MIN_BYTES:
        return t.to(device)
    staged = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    staged.copy_(t)
    return staged.to(device, non_blocking=True)


# Read-only id arrays handed out by add_grid_nodes, by (first id, shape): a graph of a shape built
# again (frames of a video, a parameter sweep) shares the array instead of writing n int64 again.
# Each entry is the base of the views handed out, so a caller cannot make a view writeable.
_IDS_CACHE: dict = {}
_IDS_CACHE_ENTRIES = 4


def _grid_id_array(first: int, dims: tuple) -> np.ndarray:
    key = (first, dims)
    base = _IDS_CACHE.pop(key, None)
    if base is None:
        flat = np.arange(first, first + math.prod(dims), dtype=np.int64)
        flat.flags.writeable = False  # on the owner: no view of it can be made writeable again
        base = flat.reshape(dims)
    _IDS_CACHE[key] = base  # most recently used last
    while len(_IDS_CACHE) > _IDS_CACHE_ENTRIES:
        _IDS_CACHE.pop(next(iter(_IDS_CACHE)))
    return base.view()


def _quantize(t: torch.Tensor, scale: float) -> torch.Tensor:
    """Non-negative float64 capacities times ``scale``, rounded to the nearest int32 (fits: max <= 2**30)."""
    return (t * scale).add_(0.5).to(torch.int32)  # truncation of x + 0.5 rounds x >= 0 to nearest


class GraphInt:
    """PyMaxflow's ``Graph[int]``: a graph with integer capacities, solved by torchcut.

    Parameters
    ----------
    est_node_num, est_edge_num : int, optional
        Accepted for PyMaxflow compatibility and ignored (storage grows as needed).
    device : str or torch.device, optional
        Where the capacities live and the graph is solved: the CPU (default) or ``"cuda"``.

    Capacities given as floats are truncated toward zero, as PyMaxflow's ``Graph[int]`` does.

    Examples
    --------
    >>> import numpy as np
    >>> from torchcut.compat.pymaxflow import GraphInt
    >>> g = GraphInt()
    >>> ids = g.add_grid_nodes((2, 3))
    >>> g.add_grid_edges(ids, 4, symmetric=True)
    >>> g.add_grid_tedges(ids, np.array([[9, 0, 0], [9, 0, 0]]), np.array([[0, 0, 9], [0, 0, 9]]))
    >>> g.maxflow()
    8
    >>> g.get_grid_segments(ids).astype(int).tolist()
    [[0, 0, 1], [0, 0, 1]]
    """

    _integer = True

    def __init__(self, est_node_num: int = 0, est_edge_num: int = 0, *, device=None):
        for name, v in (("est_node_num", est_node_num), ("est_edge_num", est_edge_num)):
            if isinstance(v, bool) or not isinstance(v, Integral) or v < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
        try:
            self._device = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda', got {device!r}") from exc
        self._dtype = torch.int64 if self._integer else torch.float64
        self.reset()

    # ------------------------------------------------------------------ bookkeeping
    def reset(self) -> None:
        """Remove all nodes and edges.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(3); g.reset(); g.get_node_num()
        0
        """
        self._n = 0
        self._issued: dict[int, tuple[np.ndarray, int]] = {}  # id() -> (read-only array, first id)
        self._terms = torch.zeros(2, 0, dtype=self._dtype, device=self._device)  # source, sink totals
        self._t_ids: list[int] = []
        self._t_caps: list[tuple] = []
        self._e_ids: list[tuple[int, int]] = []
        self._e_caps: list[tuple] = []
        self._chunks: list[tuple] = []  # add_edges calls: (u, v, cap, rcap) tensors
        self._records: list[_Record] = []
        self._arcs = 0
        self._hard = None
        self._seg = None  # sink side per node after a solve (or a function that makes it when first asked for)
        self._last_result = None
        self._last_raw = None  # a re-solve's native outputs, made into last_result when that is read
        self._dynamic = None  # the last FlowGraph solve, kept for maxflow(reuse_trees=True)
        self._solved_links = None  # (nodes, arcs) when self._dynamic was solved: links change only by adding
        self._touched: list = []  # nodes given terminal capacity since that solve: ids, (first, count), tensors
        # whether the kept state holds every node's smaller terminal total (its sum is the netted constant;
        # CsrState.plan): False until a re-solve sets them, and after each build
        self._netted = False

    @property
    def last_result(self):
        """The :class:`torchcut.CutResult` of the last ``maxflow()`` (None before the first): its
        certificate (``verify()``), residuals and counters. After a re-solve from the kept state it is
        made when first read (a pass over all nodes that the re-solve itself does not make)."""
        if self._last_raw is not None:
            self._last_result = self._dynamic._kept_result(*self._last_raw)
            self._last_raw = None
        return self._last_result

    def _grow(self, count: int) -> int:
        first = self._n
        self._n += count
        if self._terms.shape[1] < self._n:
            size = max(self._n, 2 * self._terms.shape[1])
            grown = torch.zeros(2, size, dtype=self._dtype, device=self._device)
            grown[:, :first] = self._terms[:, :first]
            self._terms = grown
        self._seg = None
        return first

    def _scalar(self, x, name: str):
        """A capacity given as a Python number: truncated to int (int graph) or float, finite."""
        if isinstance(x, (torch.Tensor, np.ndarray)) and x.ndim == 0:
            x = x.item()
        if isinstance(x, bool) or not isinstance(x, Real):
            raise TypeError(f"{name}: expected a number, got {type(x).__name__}")
        if not math.isfinite(x) and (self._integer or not x > 0):
            raise ValueError(f"{name}: expected a finite capacity{'' if self._integer else ' or +inf'}, got {x!r}")
        return int(x) if self._integer else float(x)

    def _values(self, x, name: str, shape=None, non_negative: bool = False) -> torch.Tensor:
        """Capacities as a tensor of the graph's dtype on its device (broadcast to ``shape``).

        The values are checked where they lie, with one min/max pass: finite (``+inf`` allowed in
        float graphs), and non-negative when asked. Host data bound for a CUDA graph is checked on
        the host while it is copied through pinned memory (see :func:`_to_device`).
        """
        if isinstance(x, torch.Tensor):
            t = x
        else:
            a = np.asarray(x)
            if a.dtype == np.bool_ or a.dtype.kind not in "iuf":
                raise TypeError(f"{name}: expected numbers, got an array of dtype {a.dtype}")
            t = torch.from_numpy(np.ascontiguousarray(a) if a.flags.writeable else np.array(a))
        if (
            t.dtype == torch.bool
            or t.is_complex()
            or not (
                t.is_floating_point() or t.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
            )
        ):
            raise TypeError(f"{name}: expected a real-valued tensor, got dtype {t.dtype}")
        if t.numel():
            lo, hi = (float(v) if t.is_floating_point() else int(v) for v in torch.stack(torch.aminmax(t)).tolist())
            if t.is_floating_point() and not (math.isfinite(lo) and math.isfinite(hi)):
                bad = int((~torch.isfinite(t) if self._integer else (torch.isnan(t) | (t == -math.inf))).sum())
                if bad:
                    raise ValueError(
                        f"{name}: expected finite capacities{'' if self._integer else ' or +inf'}, "
                        f"got {bad} NaN or {'infinite' if self._integer else '-inf'} value(s)"
                    )
            low = math.trunc(lo) if self._integer and t.is_floating_point() else lo
            if non_negative and low < 0:
                raise ValueError(f"{name}: expected non-negative capacities, got minimum {low}")
        t = _to_device(t, self._device)
        if t.is_floating_point() and self._integer:
            t = torch.trunc(t)
        t = t.to(self._dtype)
        if shape is not None and tuple(t.shape) != tuple(shape):
            try:
                t = t.broadcast_to(shape)
            except RuntimeError:
                raise ValueError(
                    f"{name}: expected a shape that broadcasts to the node ids' shape {tuple(shape)}, "
                    f"got shape {tuple(t.shape)}"
                ) from None
        return t

    def _ids(self, nodeids, name: str = "nodeids") -> torch.Tensor:
        """Node ids as an int64 tensor on the device, each checked to be in the graph."""
        if isinstance(nodeids, torch.Tensor):
            t = nodeids
        else:
            a = np.asarray(nodeids)
            if a.dtype.kind not in "iu":
                raise TypeError(f"{name}: expected integer node ids, got an array of dtype {a.dtype}")
            t = torch.from_numpy(np.ascontiguousarray(a) if a.flags.writeable else np.array(a))
        if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name}: expected integer node ids, got a tensor of dtype {t.dtype}")
        t = t.to(torch.int64)  # checked where it is (one aminmax pass), then sent (pinned when large)
        if t.numel():
            lo, hi = (int(v) for v in torch.aminmax(t))
            if lo < 0 or hi >= self._n:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"{name}: expected node ids in [0, {self._n}) (the graph has {self._n} nodes), got {bad}"
                )
        return _to_device(t, self._device)

    # ------------------------------------------------------------------ nodes
    def add_nodes(self, num_nodes: int = 1) -> np.ndarray:
        """Add ``num_nodes`` nodes; return their ids (int64 numpy array).

        Examples
        --------
        >>> g = GraphInt(); g.add_nodes(3).tolist(), g.add_nodes(1).tolist()
        ([0, 1, 2], [3])
        """
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, Integral) or num_nodes < 0:
            raise ValueError(f"num_nodes: expected a non-negative integer, got {num_nodes!r}")
        first = self._grow(int(num_nodes))
        return np.arange(first, self._n, dtype=np.int64)

    def add_grid_nodes(self, shape) -> np.ndarray:
        """Add a grid of nodes; return their ids in an array of that shape (row-major, consecutive).

        The array is read-only (PyMaxflow's is writable): torchcut then knows, without a pass over
        it, that the ids are consecutive whenever it comes back in a later call.

        Examples
        --------
        >>> GraphInt().add_grid_nodes((2, 3)).tolist()
        [[0, 1, 2], [3, 4, 5]]
        """
        dims = (shape,) if isinstance(shape, Integral) else tuple(shape)
        if not dims or any(isinstance(d, bool) or not isinstance(d, Integral) or d < 0 for d in dims):
            raise ValueError(f"shape: expected a non-empty tuple of non-negative integers, got {shape!r}")
        dims = tuple(int(d) for d in dims)
        first = self._grow(math.prod(dims))
        ids = _grid_id_array(first, dims)  # read-only: later calls trust it to be consecutive without a pass
        self._issued[id(ids)] = (ids, first)
        return ids

    def get_node_num(self) -> int:
        """Number of non-terminal nodes.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_grid_nodes((4, 5)); g.get_node_num()
        20
        """
        return self._n

    get_node_count = get_node_num

    def get_edge_num(self) -> int:
        """Number of non-terminal arcs added, counted as PyMaxflow does (two per edge added).

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(2); g.add_edge(0, 1, 3, 0); g.get_edge_num()
        2
        """
        return self._arcs

    get_edge_count = get_edge_num

    # ------------------------------------------------------------------ edges
    def add_edge(self, i, j, capacity, rcapacity) -> None:
        """Add the arc ``i -> j`` with ``capacity`` and the arc ``j -> i`` with ``rcapacity``.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(2)
        >>> g.add_edge(0, 1, 5, 0); g.add_tedge(0, 3, 0); g.add_tedge(1, 0, 9); g.maxflow()
        3
        """
        a = _node_index(i, "i", self._n)
        b = _node_index(j, "j", self._n)
        c = self._scalar(capacity, "capacity")
        r = self._scalar(rcapacity, "rcapacity")
        if c < 0 or r < 0:
            raise ValueError(
                f"capacity, rcapacity: expected non-negative capacities, got {capacity!r} and {rcapacity!r}"
            )
        self._e_ids.append((a, b))
        self._e_caps.append((c, r))
        self._arcs += 2
        self._seg = None

    def add_edges(self, i, j, capacity, rev_capacity) -> None:
        """Add the arcs ``i[k] -> j[k]`` (``capacity[k]``) and ``j[k] -> i[k]`` (``rev_capacity[k]``).

        All four are vectors of one length (a capacity may also be a scalar).

        Examples
        --------
        >>> import numpy as np
        >>> g = GraphInt(); _ = g.add_nodes(3)
        >>> g.add_edges(np.array([0, 1]), np.array([1, 2]), np.array([4, 2]), np.array([0, 0]))
        >>> g.add_tedge(0, 9, 0); g.add_tedge(2, 0, 9); g.maxflow(), g.get_edge_num()
        (2, 4)
        """
        u = self._ids(i, "i").reshape(-1)
        v = self._ids(j, "j").reshape(-1)
        if u.numel() != v.numel():
            raise ValueError(f"j: expected as many node ids as i ({u.numel()}), got {v.numel()}")
        c = self._values(capacity, "capacity", non_negative=True)
        r = self._values(rev_capacity, "rev_capacity", non_negative=True)
        for name, t in (("capacity", c), ("rev_capacity", r)):
            if t.dim() > 1 or (t.dim() == 1 and t.numel() != u.numel()):
                raise ValueError(
                    f"{name}: expected a scalar or a vector of length {u.numel()} (that of i), "
                    f"got shape {tuple(t.shape)}"
                )
        self._chunks.append((u, v, c.expand(u.shape), r.expand(u.shape)))
        self._arcs += 2 * u.numel()
        self._seg = None

    def add_tedge(self, i, cap_source, cap_sink) -> None:
        """Add ``cap_source`` to the arc source -> ``i`` and ``cap_sink`` to ``i`` -> sink.

        Repeated calls add up; capacities may be negative (only the totals matter, netted as in
        PyMaxflow).

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(1)
        >>> g.add_tedge(0, 5, 0); g.add_tedge(0, 0, 3); g.maxflow()
        3
        """
        a = _node_index(i, "i", self._n)
        caps = (self._scalar(cap_source, "cap_source"), self._scalar(cap_sink, "cap_sink"))  # checked before any change
        self._t_ids.append(a)
        self._t_caps.append(caps)
        if self._dynamic is not None:  # tracked only where a re-solve may follow
            self._touched.append(a)
        self._seg = None

    def add_grid_tedges(self, nodeids, sourcecaps, sinkcaps) -> None:
        """Add terminal capacities to many nodes at once (``add_tedge`` for each entry).

        ``sourcecaps`` and ``sinkcaps`` broadcast to the shape of ``nodeids``.

        Examples
        --------
        >>> import numpy as np
        >>> g = GraphInt(); ids = g.add_grid_nodes((1, 2))
        >>> g.add_grid_tedges(ids, np.array([[4, 1]]), 2); g.maxflow()
        3
        """
        ids = self._grid_ids(nodeids)
        n = math.prod(ids.shape)
        both = [
            self._values(c, name, ids.shape).reshape(-1)  # both checked before any change
            for name, c in (("sourcecaps", sourcecaps), ("sinkcaps", sinkcaps))
        ]
        for row, t in enumerate(both):
            if ids.base is not None:
                self._terms[row, ids.base : ids.base + n] += t
            else:
                self._terms[row].index_add_(0, ids.tensor.reshape(-1), t)
        if self._dynamic is not None:  # tracked only where a re-solve may follow
            self._touched.append((ids.base, n) if ids.base is not None else ids.tensor.reshape(-1).to(torch.int64))
        self._seg = None

    def _grid_ids(self, nodeids) -> _Ids:
        """Node ids of a grid call, checked; consecutive ids are recognised (``base``)."""
        known = self._issued.get(id(nodeids)) if isinstance(nodeids, np.ndarray) else None
        if known is not None and known[0] is nodeids and not nodeids.flags.writeable:
            return _Ids(nodeids.shape, known[1], None, self._device)
        t = self._ids(nodeids)
        flat = t.reshape(-1)
        base = None
        if flat.numel():
            b = int(flat[0])
            # consecutive ids end at b + n - 1: only then the whole comparison
            if int(flat[-1]) == b + flat.numel() - 1 and torch.equal(
                flat, torch.arange(b, b + flat.numel(), device=flat.device)
            ):
                base = b
        return _Ids(t.shape, base, t, self._device)

    def add_grid_edges(self, nodeids, weights=1, structure=None, symmetric: bool = False, periodic=False) -> None:
        """Add edges between grid nodes following a structure array centred on each node.

        Parameters
        ----------
        nodeids : array of node ids (any shape, usually from ``add_grid_nodes``)
        weights : scalar or array broadcastable to ``nodeids.shape``
            The arc from ``p`` to ``p + o`` gets ``weights[p] * structure[centre + o]``.
        structure : array, optional
            Odd size along each axis; non-zero entries are neighbours. Default:
            ``vonNeumann_structure(nodeids.ndim, directed=symmetric)``.
        symmetric : bool
            Also add each arc's reverse with the same capacity.
        periodic : bool or sequence of bools
            Wrap around the grid's borders (per axis).

        Examples
        --------
        >>> import numpy as np
        >>> g = GraphInt(); ids = g.add_grid_nodes((1, 3))
        >>> g.add_grid_edges(ids, np.array([[5, 2, 0]]), np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0]]))
        >>> g.add_grid_tedges(ids, np.array([[9, 0, 0]]), np.array([[0, 0, 9]])); g.maxflow()
        2
        """
        ids = self._grid_ids(nodeids)
        nd = len(ids.shape)
        if nd == 0:
            raise ValueError("nodeids: expected an array of node ids with at least one dimension, got a scalar")
        if not isinstance(symmetric, (bool, np.bool_, Integral)):
            raise TypeError(f"symmetric: expected a bool, got {type(symmetric).__name__}")
        symmetric = bool(symmetric)
        if structure is None:
            structure = vonNeumann_structure(nd, directed=symmetric)
        s = structure.detach().cpu().numpy() if isinstance(structure, torch.Tensor) else np.asarray(structure)
        if s.dtype == np.bool_:
            s = s.astype(np.int64)
        if s.dtype.kind not in "iuf":
            raise TypeError(f"structure: expected a numeric array, got dtype {s.dtype}")
        if s.ndim > nd:
            raise ValueError(f"structure: expected at most {nd} dimensions (those of nodeids), got shape {s.shape}")
        s = s.reshape((1,) * (nd - s.ndim) + s.shape)
        if any(n % 2 == 0 for n in s.shape):
            raise ValueError(
                f"structure: expected an odd size along every axis (centred on the node), got shape {s.shape}"
            )
        if np.isnan(s).any() or (self._integer and not np.isfinite(s).all()):
            raise ValueError(f"structure: expected finite values{'' if self._integer else ' or +inf'}")
        if (s < 0).any():
            raise ValueError(f"structure: expected non-negative values (capacities), got minimum {s.min()}")
        per = np.broadcast_to(np.asarray(periodic, dtype=bool), (nd,)) if np.ndim(periodic) <= 1 else None
        if per is None or (np.ndim(periodic) == 1 and len(periodic) != nd):
            raise ValueError(f"periodic: expected a bool or {nd} bools (one per axis), got {periodic!r}")
        centre = np.array(s.shape) // 2
        where = np.argwhere(s != 0)
        offsets, values = [], []
        for idx in where:
            o = tuple(int(v) for v in idx - centre)
            if any(o):
                offsets.append(o)
                v = s[tuple(idx)]
                values.append(int(v) if self._integer else float(v))
        w = self._values(weights, "weights", non_negative=True)  # kept at its own shape, broadcast when used
        try:
            fits = torch.broadcast_shapes(w.shape, ids.shape) == ids.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"weights: expected a shape that broadcasts to the node ids' shape {tuple(ids.shape)}, "
                f"got shape {tuple(w.shape)}"
            )
        shape = tuple(ids.shape)
        for o in offsets:
            self._arcs += 2 * math.prod(n if p else max(n - abs(v), 0) for v, n, p in zip(o, shape, per))
        if not offsets:
            return
        self._records.append(_Record(ids, w, offsets, values, symmetric, tuple(bool(p) for p in per)))
        self._seg = None

    # ------------------------------------------------------------------ no-ops kept for compatibility
    def mark_node(self, i) -> None:
        """Accepted for compatibility: ``maxflow(reuse_trees=True)`` finds the changed nodes from the
        terminal calls themselves, so this only checks the id.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(1); g.mark_node(0)
        """
        if type(i) is not int or not 0 <= i < self._n:  # in a loop over a stroke's nodes: no call when valid
            _node_index(i, "i", self._n)

    def mark_grid_nodes(self, nodeids) -> None:
        """Accepted for compatibility (see :meth:`mark_node`).

        Examples
        --------
        >>> g = GraphInt(); ids = g.add_grid_nodes((2, 2)); g.mark_grid_nodes(ids)
        """
        self._ids(nodeids)

    # ------------------------------------------------------------------ solving
    def _totals(self) -> torch.Tensor:
        """The ``[2, n]`` source and sink totals (a view of this graph's own array, not to be modified),
        the scalar ``add_tedge`` calls folded in once."""
        if self._t_ids:
            idx = torch.tensor(self._t_ids, dtype=torch.int64, device=self._device)
            caps = torch.tensor(self._t_caps, dtype=self._dtype, device=self._device).T
            self._terms[:, : self._n].index_add_(1, idx, caps)
            self._t_ids, self._t_caps = [], []
        return self._terms[:, : self._n]

    def _terminals(self):
        """Source and sink totals per node, as new tensors."""
        terms = self._totals().clone()
        return terms[0], terms[1]

    def _grid_layout(self):
        """``(shape, offsets, edges, reverse)`` when the edges form one lattice over all nodes, else None."""
        if self._e_ids or self._chunks or not self._records:
            return None
        shape = self._records[0].ids.shape
        if any(
            r.ids.base != 0 or math.prod(r.ids.shape) != self._n or any(r.periodic) or r.ids.shape != shape
            for r in self._records
        ):
            return None
        if len(shape) > 3:
            return None
        canon = []
        for r in self._records:
            for o in r.offsets:
                c = o if next(v for v in o if v) > 0 else tuple(-v for v in o)
                if c not in canon:
                    canon.append(c)
        if len(canon) > _MAX_GRID_OFFSETS.get(self._device.type, 31):
            return None
        fwd: dict = {c: None for c in canon}
        rev: dict = {c: None for c in canon}
        same = all(r.symmetric for r in self._records)

        def add(table, c, x):  # out of place: x may be a view of the caller's weights
            table[c] = x if table[c] is None else table[c] + x

        for r in self._records:
            for k, o in enumerate(r.offsets):
                cap = r.capacity(k)
                if o in fwd:  # canonical: arc p -> p + o is edges[o][p]
                    add(fwd, o, cap)
                    if r.symmetric and not same:
                        add(rev, o, cap)
                else:  # arc p -> p - c is reverse[c][p - c]
                    c = tuple(-v for v in o)
                    moved = shift(cap, c, 0)
                    if not same:
                        add(rev, c, moved)
                    if r.symmetric:  # and its reverse p - c -> p, the arc edges[c][p - c]
                        add(fwd, c, moved)
        zero = torch.zeros((), dtype=self._dtype, device=self._device).expand(shape)
        edges = torch.stack([fwd[c] if fwd[c] is not None else zero for c in canon])
        reverse = None if same else torch.stack([rev[c] if rev[c] is not None else zero for c in canon])
        if len(shape) == 1:  # a 1-D grid is one row of a 2-D grid
            shape = (1,) + shape
            canon = [(0,) + c for c in canon]
            edges = edges.unsqueeze(1)
            reverse = None if reverse is None else reverse.unsqueeze(1)
        return shape, canon, edges, reverse

    def _edge_lists(self):
        """All non-terminal arcs as ``(u, v, cap, rcap)`` tensors."""
        parts = list(self._chunks)
        if self._e_ids:
            ij = torch.tensor(self._e_ids, dtype=torch.int64, device=self._device)
            cr = torch.tensor(self._e_caps, dtype=self._dtype, device=self._device)
            parts.append((ij[:, 0], ij[:, 1], cr[:, 0], cr[:, 1]))
        for r in self._records:
            shape, ids = r.ids.shape, r.ids.tensor
            for k, o in enumerate(r.offsets):
                cap = r.capacity(k)
                if any(p for p in r.periodic):
                    axes = [a for a in range(len(shape)) if o[a] and not r.periodic[a]]
                    head = torch.roll(ids, tuple(-v for v in o), tuple(range(len(shape))))
                    keep = torch.ones(shape, dtype=torch.bool, device=self._device)
                    for a in axes:
                        keep &= shift(
                            torch.ones(shape, dtype=torch.bool, device=self._device),
                            tuple(o[b] if b == a else 0 for b in range(len(shape))),
                            False,
                        )
                    u, v, c = ids[keep], head[keep], cap[keep]
                else:
                    if any(abs(v) >= n for v, n in zip(o, shape)):
                        continue
                    keep = shift(torch.ones(shape, dtype=torch.bool, device=self._device), o, False)
                    u, v, c = ids[keep], shift(ids, o, -1)[keep], cap[keep]
                parts.append((u, v, c, c if r.symmetric else torch.zeros_like(c)))
        if not parts:
            e = torch.zeros(0, dtype=torch.int64, device=self._device)
            return e, e, e.to(self._dtype), e.to(self._dtype)
        return tuple(torch.cat([p[i] for p in parts]) for i in range(4))

    def build(self):
        """The torchcut network ``maxflow()`` solves, and the constant that netting moved out of it.

        Returns
        -------
        (graph, constant, scale)
            A :class:`torchcut.GridGraph` (all edges from grid calls on one full grid) or a
            :class:`torchcut.FlowGraph`; the flow PyMaxflow reports is ``maxflow(graph).flow_value /
            scale + constant`` (``scale`` is None, meaning 1, for integer graphs and for FlowGraphs,
            which quantize float capacities themselves).

        Examples
        --------
        >>> g = GraphInt(); ids = g.add_grid_nodes((2, 2)); g.add_grid_edges(ids, 1, symmetric=True)
        >>> g.add_grid_tedges(ids, 3, 1); g.build()
        (GridGraph(shape=(2, 2), K=2, dtype=torch.int32, device=cpu), 4, None)
        """
        if self._n == 0:
            raise ValueError("graph: expected at least one node, got an empty graph (add nodes first)")
        src, snk = self._terminals()
        if not self._integer and not math.isfinite(float(src.sum() + snk.sum())):
            both = torch.isinf(src) & torch.isinf(snk)
            if bool(both.any()):
                i = int(both.nonzero()[0, 0])
                raise ValueError(
                    f"add_tedge: expected at most one infinite terminal capacity per node, got +inf "
                    f"to both the source and the sink at node {i}"
                )
        low = torch.minimum(src, snk)
        constant = low.sum().item()
        source, sink = src - low, snk - low
        layout = self._grid_layout()
        if layout is None:
            u, v, c, r = self._edge_lists()
            (source, sink, c, r), self._hard = self._bounded((source, sink, c, r))
            return FlowGraph.from_edges(u, v, c, r, source=source, sink=sink, num_nodes=self._n), constant, None
        shape, offsets, edges, reverse = layout
        (source, sink, edges, reverse), self._hard = self._bounded((source, sink, edges, reverse))
        scale = None
        if not self._integer:  # quantize here, in one pass per tensor, to int32 (GridGraph's float path copies more)
            pair = 2 * edges.max() if reverse is None else (edges + reverse).max()
            top = max(float(pair), float(source.max()), float(sink.max()))
            scale = quantization_scale(top, None)
            source, sink, edges = (_quantize(t, scale) for t in (source, sink, edges))
            reverse = None if reverse is None else _quantize(reverse, scale)
        return GridGraph(source.view(shape), sink.view(shape), edges, offsets, reverse), constant, scale

    def _bounded(self, tensors):
        """Replace +inf capacities by ``M = 2 * (sum of the finite ones) + 1``; return (tensors, that sum).

        Every cut that avoids the infinite arcs costs at most the finite sum, so a minimum cut of the
        bounded network crosses no M arc whenever the original has a finite minimum cut: the two agree.
        The sum is None when nothing was infinite.
        """
        if self._integer:
            return tensors, None
        # a finite sum proves every entry finite: one cheap pass per tensor in the usual case
        present = [t for t in tensors if t is not None and t.numel() and not math.isfinite(float(t.sum()))]
        for t in present:
            if bool(torch.isnan(t).any()):
                raise ValueError(
                    "weights, structure: expected capacities, got NaN (a zero weight times an "
                    "infinite structure entry?)"
                )
        if not present:
            return tensors, None
        present = [t for t in tensors if t is not None]
        total = sum(float(torch.where(torch.isinf(t), 0, t).sum()) for t in present)
        big = 2 * total + 1
        return tuple(None if t is None else torch.where(torch.isinf(t), big, t) for t in tensors), total

    def maxflow(self, reuse_trees: bool = False):
        """Compute the maximum flow; return its value (the capacity of the minimum cut).

        ``reuse_trees=True``: an integer edge-list graph on the CPU whose terminal capacities alone
        changed since the last call is solved from the last flow (``REUSE_FLOW``, on by default; module
        docstring). Either way the value and segments are those of a solve from scratch.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(2)
        >>> g.add_edge(0, 1, 1, 2); g.add_tedge(0, 2, 5); g.add_tedge(1, 9, 4); g.maxflow()
        8
        """
        if self._n == 0:
            self._seg = torch.zeros(0, dtype=torch.bool, device=self._device)
            return 0 if self._integer else 0.0
        links = (self._n, self._arcs)
        reuse = reuse_trees and REUSE_FLOW and self._device.type == "cpu"  # measured on the CPU only
        if reuse and self._integer and self._solved_links == links:
            flow = self._resolve()
            if flow is not None:
                self._touched = []
                return flow
        graph, constant, scale = self.build()
        dyn = self._dynamic
        if (
            reuse
            and isinstance(graph, FlowGraph)
            and dyn is not None
            and dyn.graph.device == graph.device
            and _same_links(dyn.graph, graph)
        ):
            # only terminal capacities changed since the last solve: re-solve from its flow
            dyn._install(graph.source[0], graph.sink[0])
            result = dyn.maxflow()
        else:
            result = _solve(graph)
            self._dynamic = None
            if isinstance(graph, FlowGraph):
                self._dynamic = DynamicFlowGraph(graph)
                self._dynamic._remember(result)
        self._solved_links = links if self._dynamic is not None else None
        self._netted = False  # the per-node totals of a re-solve start again from the built graph
        self._constant = constant
        self._touched = []
        self._last_result, self._last_raw = result, None
        self._seg = functools.partial(torch.logical_not, result.node_mask.reshape(-1))
        flow = result.flow_value if scale is None else result.flow_value / scale
        if self._hard is not None and flow > 1.5 * self._hard + 0.5:  # the cut crosses an infinite arc
            return math.inf
        flow += constant
        return int(flow) if self._integer else float(flow)

    def _touched_ids(self) -> torch.Tensor:
        """The node ids given terminal capacity since the last solve (int64; an id may repeat: the kept
        state's ``plan`` takes each once)."""
        parts = [
            t if isinstance(t, torch.Tensor) else torch.arange(t[0], t[0] + t[1])
            for t in self._touched
            if not isinstance(t, int)
        ]
        scalars = [t for t in self._touched if isinstance(t, int)]
        if scalars:
            parts.append(torch.tensor(scalars, dtype=torch.int64))
        if not parts:
            return torch.empty(0, dtype=torch.int64)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _resolve(self):
        """The re-solve of an integer edge-list graph whose links did not change since the last solve,
        from the kept state (CPU): only the nodes given terminal capacity since then are netted and
        re-fitted, and the netted constant and the capacities' sum change by theirs, all in the kept
        state (``CsrState.plan``, which holds each node's smaller total); no pass over all nodes (the
        first re-solve after a build nets every node once; the first after a plain ``maxflow()`` makes
        the kept state, from the network that call built). Returns the flow, or None where the new totals
        do not fit the solved graph's sink dtype (the caller builds the network again)."""
        dyn = self._dynamic
        totals = self._totals()
        narrow = dyn._graph.sink.dtype == torch.int32
        if dyn._kept is None:  # the first re-solve after a plain maxflow(): its network, the new terminals
            terms = totals.numpy()
            low = np.minimum(terms[0], terms[1])
            source, sink = terms[0] - low, terms[1] - low
            if narrow and sink.size and int(sink.max()) > INT32_MAX:
                return None
            dyn._install(torch.from_numpy(source), torch.from_numpy(sink))  # raises before any change on overflow
            result = dyn.maxflow()  # the kept state, solved from scratch
            self._constant = dyn._kept.plan(torch.empty(0, dtype=torch.int64), totals[0], totals[1], True)[0]
            self._netted = True
            self._last_result, self._last_raw = result, None
            self._seg = functools.partial(torch.logical_not, result.node_mask.reshape(-1))
            return result.flow_value + self._constant
        # the first re-solve since the network was built: every node's totals (sums, not changes)
        every = not self._netted
        constant, total, top = dyn._kept.plan(self._touched_ids(), totals[0], totals[1], every)
        if narrow and top > INT32_MAX:  # (no refresh)
            return None
        if not every:
            constant, total = self._constant + constant, dyn._terminal_total + total
        raw = dyn._kept_update(total)  # raises before any change on overflow
        self._netted, self._constant = True, constant
        self._last_raw = raw
        self._seg = dyn._kept.sink_side  # the segments from the kept trees, made when first asked for
        return int(raw[0][4][2]) + constant

    # ------------------------------------------------------------------ segments
    def _segments(self) -> torch.Tensor:
        if self._seg is None:
            raise RuntimeError(
                "maxflow: call maxflow() before asking for segments (the graph changed or was never solved)"
            )
        if not isinstance(self._seg, torch.Tensor):  # made when first asked for
            self._seg = self._seg()
        return self._seg

    def get_segment(self, i) -> int:
        """Segment of node ``i`` after ``maxflow()``: 0 = source side, 1 = sink side.

        Examples
        --------
        >>> g = GraphInt(); _ = g.add_nodes(2); g.add_tedge(0, 1, 0); g.add_tedge(1, 0, 1)
        >>> _ = g.maxflow(); g.get_segment(0), g.get_segment(1)
        (0, 1)
        """
        seg = self._segments()
        return int(seg[_node_index(i, "i", self._n)])

    def get_grid_segments(self, nodeids):
        """Segments of many nodes after ``maxflow()``: True = sink side (PyMaxflow's convention).

        Note that torchcut's own masks (``torchcut.maxflow(...).mask``) are the opposite: True =
        source side.

        Returns
        -------
        numpy bool array of ``nodeids``' shape, or a torch bool tensor on the graph's device when
        ``nodeids`` is a tensor.

        Examples
        --------
        >>> import numpy as np
        >>> g = GraphInt(); ids = g.add_grid_nodes((1, 2))
        >>> g.add_grid_tedges(ids, np.array([[5, 0]]), np.array([[0, 5]])); _ = g.maxflow()
        >>> g.get_grid_segments(ids).tolist()
        [[False, True]]
        """
        seg = self._segments()
        ids = self._grid_ids(nodeids)
        if ids.base is not None:
            out = seg[ids.base : ids.base + math.prod(ids.shape)].view(ids.shape)
        else:
            out = seg[ids.tensor]
        if isinstance(nodeids, torch.Tensor):
            return out
        return out.cpu().numpy()


class GraphFloat(GraphInt):
    """PyMaxflow's ``Graph[float]``: capacities in float64, quantized by torchcut for the solve.

    See :class:`GraphInt` for the methods. The flow returned differs from the exact value by at most
    ``0.5 / scale`` per arc in the minimum cut, where ``scale = 2**30 / (largest capacity)``.

    Examples
    --------
    >>> from torchcut.compat.pymaxflow import GraphFloat
    >>> g = GraphFloat(); _ = g.add_nodes(2)
    >>> g.add_edge(0, 1, 0.5, 0.0); g.add_tedge(0, 1.5, 0.0); g.add_tedge(1, 0.0, 2.0)
    >>> round(g.maxflow(), 6)
    0.5
    """

    _integer = False


Graph = {int: GraphInt, float: GraphFloat}


def __getattr__(name):
    # fastmin needs torchcut.multilabel (alpha-expansion) for aexpansion_grid: imported on first use.
    if name == "fastmin":
        from . import fastmin

        return fastmin
    if name in ("aexpansion_grid", "abswap_grid"):
        from . import fastmin

        return getattr(fastmin, name)
    raise AttributeError(f"module 'torchcut.compat.pymaxflow' has no attribute {name!r}")
