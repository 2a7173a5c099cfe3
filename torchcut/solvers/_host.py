"""Small graphs on CUDA tensors, solved by the compiled CPU solver.

A GPU solve of a general graph costs a fixed number of kernel launches and host synchronisations
whatever its size: about 3 ms for a few hundred nodes on one H100, where the CPU solvers take 0.1-0.2
ms. Below the thresholds here ``backend="auto"`` copies a CUDA graph
to the host (one copy and one synchronisation), solves it there and copies the result back (one copy,
queued), so the caller still gets every tensor on the graph's device. ``FlowGraph.to`` lays a graph's
tensors out in one buffer, the fields the CPU solver reads first, so that the copy to the host is one
span of memory with no gather on the GPU; the flow value comes back with the result already on the host
(reading it waits for nothing). The thresholds and their measurements are in ``docs/performance.md``
("Small graphs on the GPU").
"""

from __future__ import annotations

import threading
import time
import weakref

import torch

from .._copy import FLOWGRAPH_HOST_FIELDS as CSR_FIELDS
from .._copy import padded as _padded
from .._copy import span as _span
from .._copy import transfer as _transfer
from .._copy import views as _views
from ..grid import GridGraph
from ..result import CutResult
from . import cpu

__all__ = ["HOST_NODES", "wants_host", "solve_on_host", "solve_csr_on_host"]

_CPU = torch.device("cpu")

#: Largest number of nodes of a CUDA graph that ``backend="auto"`` solves on the CPU, per layout: only
#: ``"csr"`` (FlowGraph). Grids are never routed: the CUDA grid solver takes items of up to 4096 nodes in
#: one launch (option ``small``), faster than the round trip to the host at every size measured.
HOST_NODES = {"csr": 2048}


def wants_host(graph, layout: str, backend: str, options: dict) -> bool:
    """Whether ``graph`` (on a CUDA device) goes to the CPU solver: a layout of :data:`HOST_NODES`,
    ``backend="auto"``, no solver options (they name the CUDA solver's knobs), at most
    ``HOST_NODES[layout]`` nodes, and a compiled CPU solver that loads.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> wants_host(g, "csr", "auto", {})   # a CPU graph: nothing to route
    False
    """
    if layout not in HOST_NODES or backend != "auto" or options or graph.device.type != "cuda":
        return False
    if graph.num_nodes > HOST_NODES[layout]:
        return False
    return cpu.load_error() is None


def _host_graph(graph):
    """A CPU copy of the fields the CPU solver reads (one transfer)."""
    new = object.__new__(type(graph))
    new.__dict__.update(graph.__dict__)
    names = (
        ("caps", "source", "sink")
        if isinstance(graph, GridGraph)
        else ("caps", "source", "sink", "row_ptr", "head", "tail", "rev")
    )
    for name, t in zip(names, _transfer([getattr(graph, n) for n in names], torch.device("cpu"))):
        setattr(new, name, t)
    if not isinstance(graph, GridGraph):  # read only by verify() and the lattice route, which run on the GPU copy
        new.pair_fwd = new.pair_bwd = new.node_ids = None
        new._lattice = None
    return new


def solve_on_host(graph, solve) -> CutResult:
    """``solve(host_graph)`` on a CPU copy of ``graph``, its result moved back to ``graph``'s device.

    The graph goes to the host in one copy (its tensors packed into one buffer, pinned memory) and the
    result comes back the same way. ``stats["route"]`` records ``"host"``.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> solve_on_host(g, lambda h: torchcut.maxflow(h)).flow_value
    3
    """
    device = graph.device
    if device.type != "cuda":
        r = solve(graph)
        stats = dict(r.stats)
        stats["route"] = "host" if "route" not in r.stats else f"host, {r.stats['route']}"
        return CutResult(graph, r.flow_values, r.node_mask, r.residual, r.source_flow, r.sink_flow, stats)
    r = solve(_host_graph(graph))
    flows, mask, residual, sink_flow = _transfer([r.flow_values, r.node_mask, r.residual, r.sink_flow], device)
    stats = dict(r.stats)
    stats["route"] = "host" if "route" not in r.stats else f"host, {r.stats['route']}"
    source_flow = graph.source if isinstance(graph, GridGraph) else graph.source.clone()
    return CutResult(
        graph=graph,
        flow_values=flows,
        node_mask=mask,
        residual=residual,
        source_flow=source_flow,
        sink_flow=sink_flow,
        stats=stats,
    )


def solve_csr_on_host(graph) -> CutResult:
    """The maximum flow of the FlowGraph ``graph`` (on a CUDA device) by the compiled CPU solver, its
    result on ``graph``'s device: what ``backend="auto"`` runs for small CUDA graphs.

    One copy to the host of the fields the solver reads (one span where ``graph`` came from
    ``FlowGraph.to``), the solve in those copies, and one queued copy of the result back. The flow
    value is kept on the host too, so ``flow_value`` needs no read from the device.
    ``stats["route"]`` is ``"host, csr"``.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [3], source=[5, 0], sink=[0, 5])
    >>> r = solve_csr_on_host(g)   # a CPU graph: solved where it is
    >>> r.flow_value, r.stats["route"]
    (3, 'host, csr')
    """
    t0 = time.perf_counter()
    device = graph.device
    if device.type == "cuda":
        twin = _Twin.of(graph)
        if twin is not None:
            return twin.solve(graph, t0)
        caps, source, sink, row_ptr, head, rev = _transfer([getattr(graph, n) for n in CSR_FIELDS], _CPU)
    else:
        caps, source, sink, row_ptr, head, rev = (getattr(graph, n) for n in CSR_FIELDS)
    # one op: the copies it solves in, the solve, the sink flows and their sum (cpu.solve_graph)
    flows, mask, caps, source, sink_flow, raw = torch.ops.torchcut.csr_solve(row_ptr, head, rev, caps, source, sink)
    values = flows.tolist()
    if device.type == "cuda":
        flows, mask, caps, sink_flow, source = _transfer([flows, mask, caps, sink_flow, source], device)
    return _csr_result(graph, (flows, mask, caps, source, sink_flow), raw, t0, values)


def _csr_result(graph, tensors, raw, t0: float, values) -> CutResult:
    """The CutResult of a CPU solve of ``graph``'s solver fields: ``tensors`` (flows, mask, residuals,
    source flow, sink flow) on the graph's device, the solver's counters ``raw`` (route ``"host, csr"``),
    the flow ``values`` kept as read on the host."""
    stats = cpu._stats(raw, t0, 1)
    stats["route"] = "host, csr"
    r = CutResult(graph, *tensors, stats)
    r._keep_host_values(values)
    return r


class _Twin:
    """The host side of the route for one CUDA FlowGraph whose solver fields lie in one span (a graph
    moved by ``FlowGraph.to``), kept on the graph: one pinned buffer holding those fields, the solver's
    scratch and the result, with every view into it made once.

    A solve is then one copy of the span into the buffer (waited for), the solve in place, and one
    queued copy of the buffer into new device memory, whose views are the result's tensors (the
    residuals where the capacities were, the source flow where the source was). Against the general
    route (a gather into a new pinned buffer and a split of it each way) this saves the ~30 small
    tensor ops that made most of a small graph's call. The next solve waits for the last copy out of
    the buffer (an event) before it writes into it again, and a lock keeps two threads out of it.
    """

    @classmethod
    def of(cls, graph):
        """The graph's twin, kept while the graph lives, or None: on a graph's first solve (a graph solved
        once would pay for the buffer and its views without using them again) and where its fields are
        not one span."""
        fields = tuple(getattr(graph, n) for n in CSR_FIELDS)
        twin = _TWINS.get(graph)
        if twin is None:
            _TWINS[graph] = _FIRST
            return None
        if twin is not _FIRST and all(a is b for a, b in zip(twin.fields, fields)):
            return twin
        whole = _span(fields)
        if whole is None:
            return None
        twin = _TWINS[graph] = cls(fields, whole)
        return twin

    def __init__(self, fields, whole):
        caps, source, sink = fields[:3]
        N, A = source.shape[1], caps.numel()
        self.fields, self.whole, self.device = fields, whole, whole.device
        span_bytes = whole.numel()
        layout, at = {}, _padded(span_bytes)
        for name, n in (
            ("mask", N),
            ("sink_flow", 8 * N),
            ("flows", 8),
            ("excess", 8 * N),
            ("left", N * sink.element_size()),
        ):
            layout[name] = (at, n)
            at += _padded(n)
        self.size = at
        self.host = torch.empty(at, dtype=torch.uint8, pin_memory=True)
        self.host_in = self.host[:span_bytes]
        # the span's own layout (that of _copy.transfer)
        self.caps, self.source, self.sink, self.row_ptr, self.head, self.rev = _views(self.host, fields)
        view = lambda name, dtype, shape: self.host[layout[name][0] : sum(layout[name])].view(dtype).view(shape)  # noqa: E731
        self.mask = view("mask", torch.bool, (1, N))
        self.sink_flow = view("sink_flow", torch.int64, (1, N))
        self.flows = view("flows", torch.int64, (1,))
        self.excess = view("excess", torch.int64, (N,))
        self.left = view("left", sink.dtype, (N,))
        # where each result tensor lies in the buffer: (byte offset, dtype, shape); the source follows caps
        self.out = (
            (layout["flows"][0], torch.int64, (1,)),
            (layout["mask"][0], torch.bool, (1, N)),
            (0, caps.dtype, tuple(caps.shape)),
            (layout["sink_flow"][0], torch.int64, (1, N)),
            (_padded(A * caps.element_size()), torch.int64, tuple(source.shape)),
        )
        # the buffer is viewed once per dtype, each tensor is one strided view of that (offsets: multiples of 8)
        self.out = tuple((at, dtype, shape, _contiguous_strides(shape)) for at, dtype, shape in self.out)
        self.dtypes = sorted({dtype for _, dtype, _, _ in self.out} - {torch.uint8}, key=str)
        self.done = None  # the event after the last copy out of the buffer
        self.lock = threading.Lock()

    def solve(self, graph, t0: float) -> CutResult:
        with self.lock:
            if self.done is not None:
                self.done.synchronize()
            stream = torch.cuda.current_stream(self.device)
            self.host_in.copy_(self.whole, non_blocking=True)
            stream.synchronize()
            self.excess.copy_(self.source[0])
            self.left.copy_(self.sink[0])
            mask, raw = torch.ops.torchcut.csr_solve_(
                self.row_ptr, self.head, self.rev, self.caps, self.excess, self.left, []
            )
            self.mask[0].copy_(mask)
            torch.sub(self.sink[0], self.left, out=self.sink_flow[0])
            torch.sum(self.sink_flow, 1, out=self.flows)
            values = self.flows.tolist()
            buf = torch.empty(self.size, dtype=torch.uint8, device=self.device)
            buf.copy_(self.host, non_blocking=True)
            self.done = torch.cuda.Event()
            self.done.record(stream)
        typed = {torch.uint8: buf}
        for dtype in self.dtypes:
            typed[dtype] = buf.view(dtype)
        flows, mask, caps, sink_flow, source = (
            typed[dtype].as_strided(shape, stride, at // dtype.itemsize) for at, dtype, shape, stride in self.out
        )
        return _csr_result(graph, (flows, mask, caps, source, sink_flow), raw, t0, values)


#: FlowGraph -> its _Twin, or _FIRST after its first solve (not in the graph's own attributes: those are
#: copied and pickled)
_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FIRST = object()


def _contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
