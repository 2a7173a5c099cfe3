"""Re-solving a FlowGraph after its terminal capacities change, from the last maximum flow.

Kohli and Torr's dynamic graph cuts (PAMI 2007) for the change an interactive segmenter makes: a
stroke moves a few nodes' source and sink capacities, and the last flow is almost a maximum flow of
the new network. :class:`DynamicFlowGraph` keeps the last solve's residual network and, after
:meth:`~DynamicFlowGraph.set_terminals`, re-fits it to the new capacities:

1. **Terminals.** The n-links keep their flow, so each node has ``avail = S' + g`` to place (``S'`` its
   new source capacity, saturated as in every preflow here, ``g`` its net n-link inflow): up to its
   new sink capacity ``T'`` goes to the sink, the rest stays as excess.
2. **Repair.** A node whose n-links carry more out than its new source capacity brings in
   (``avail < 0``) has a deficit. The deficit is taken back along the flow that left it: a max-flow on
   the same CSR layout whose arcs ``x -> y`` have the capacity of the flow on ``y -> x``, from the nodes'
   sink flow and excess to the deficits. A valid flow always has enough (its decomposition ends every
   unit at the sink or at an excess), so the result is a valid preflow of the new network, every
   source arc saturated. (Kohli and Torr instead add ``-avail`` to both terminal capacities, which
   keeps the cuts but leaves a flow of another network; the repair keeps ``verify()`` against the
   network the user has.)
3. **Finish.** The CSR backend of :func:`torchcut.maxflow` (Boykov-Kolmogorov on the CPU,
   push-relabel on CUDA) runs from that preflow. On the CPU without a deficit, steps 1 and 3 are one
   op (``csr_resolve``): the last flow was a maximum preflow, so every augmenting path now starts or
   ends at a node whose terminals changed, and Boykov-Kolmogorov grows its trees from those nodes
   alone (the other nodes with terminal capacity left are roots that are not grown); one search back
   from every sink residual then checks that no excess reaches the sink (else the whole trees are
   grown) and gives the canonical mask.

The flow value is the maximum flow of the new network and the mask is the canonical source side
(the nodes that cannot reach the sink in the final residual network, the same for every maximum
preflow): both equal a solve from scratch, and ``verify()`` holds. Only terminal capacities change;
n-link capacities stay those of the graph given.

On the CPU a stroke that leaves a deficit is solved from scratch instead of repaired: the repair and
the solve after it search the whole graph twice, 5-6x a solve from scratch after a 2% stroke on a
1000^2 image graph.

Speed on the CPU (``benchmarks/dynamic.py``, 2% strokes, one thread): 0.74x a solve from scratch at
1000^2 and 0.65x at 400^2 (medians over 6 strokes; 1.1-1.5x on a stroke with a deficit), against
2.1x and 3.0x with the re-fit in tensor ops and the trees grown from every node. The search touches
the stroke's neighbourhood (20,000 growths of 1,000,000 nodes); the re-fit, the check and the mask
still pass over every node and arc. Kohli and Torr's speed-up (PyMaxflow's ``reuse_trees``, ~10x
faster here) needs the search trees and the mask kept between solves inside the solver.

Examples
--------
>>> import torchcut
>>> from torchcut.solvers.dynamic import DynamicFlowGraph
>>> g = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
>>> d = DynamicFlowGraph(g)
>>> d.maxflow().flow_value
3
>>> d.set_terminals(source=[1], sink=[6], nodes=[0])     # node 0 now leans to the sink
>>> r = d.maxflow()
>>> r.flow_value, r.mask.tolist(), r.verify(), r.flow_value == torchcut.maxflow(d.graph).flow_value
(1, [False, False, False], True, True)
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .. import _ops
from .._validate import INT32_MAX, as_tensor, check_sum, describe
from ..result import CutResult
from . import cpu

__all__ = ["DynamicFlowGraph"]


class DynamicFlowGraph:
    """A :class:`torchcut.FlowGraph` solved again after terminal changes, from its last flow.

    Parameters
    ----------
    graph : FlowGraph
        The network; it is not modified (``self.graph`` holds the current capacities).
    backend : str
        The CSR backend, as for :func:`torchcut.maxflow` ("auto", "cpu", "cuda", "reference").
    warm : bool
        False: every :meth:`maxflow` solves from scratch (the baseline; the same results).

    Attributes
    ----------
    graph : FlowGraph
        The network with the capacities of the last :meth:`set_terminals`.
    stats : dict
        ``warm`` solves, ``cold`` solves and ``repaired`` nodes (deficits taken back) so far.

    Examples
    --------
    >>> import torchcut
    >>> g = torchcut.FlowGraph.from_edges([0], [1], [2], [2], source=[3, 0], sink=[0, 3])
    >>> d = DynamicFlowGraph(g)
    >>> d.maxflow().flow_value, d.set_terminals(sink=[0, 1]), d.maxflow().flow_value
    (2, None, 1)
    """

    def __init__(self, graph, *, backend: str = "auto", warm: bool = True):
        from ..graph import FlowGraph
        from ._backends import BACKENDS

        if not isinstance(graph, FlowGraph):
            raise TypeError(f"graph: expected a torchcut.FlowGraph, got {type(graph).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        self.graph = graph
        self.backend = backend
        self.warm = bool(warm)
        self._state = None  # (residual caps, sink flow, source, sink) of the last solve, for self.graph
        self._caps_total = None  # the sum of the n-link capacities (float64), for the overflow check
        self.stats = {"warm": 0, "cold": 0, "repaired": 0}

    # ------------------------------------------------------------------------------------------ changes
    def _values(self, x, name: str, n: int) -> torch.Tensor:
        g = self.graph
        if isinstance(x, torch.Tensor) and x.device != g.device:
            raise ValueError(f"{name}: expected a tensor on {g.device} (the graph's device), got one on {x.device}")
        t = as_tensor(x, name, g.device)
        if t.dim() == 0:
            t = t.expand(n)
        if tuple(t.shape) != (n,):
            raise ValueError(
                f"{name}: expected shape ({n},) (one value per node{' in nodes' if n != g.num_nodes else ''}), "
                f"got {describe(t)}"
            )
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name}: expected integer or float capacities, got {describe(t)}")
        if t.is_floating_point():
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name}: expected finite capacities, got NaN or infinite value(s)")
            if g.scale is None:
                raise TypeError(f"{name}: expected integer capacities for an integer graph, got {t.dtype}")
            t = torch.round(t.to(torch.float64) * g.scale)
        elif g.scale is not None:
            t = t.to(torch.float64) * g.scale
            t = torch.round(t)
        t = t.to(torch.int64)
        if n and bool((t < 0).any()):
            raise ValueError(f"{name}: expected non-negative capacities, got minimum {int(t.min())}")
        return t

    def set_terminals(self, source=None, sink=None, nodes=None) -> None:
        """Give nodes new terminal capacities (the next :meth:`maxflow` starts from the last flow).

        Parameters
        ----------
        source, sink : tensor, array or scalar, optional
            New capacities of the arcs source -> p and p -> sink: ``[N]``, or ``[len(nodes)]`` with
            ``nodes``; a scalar for all of them. None leaves them as they are. Float values for a
            float graph are quantised with the graph's ``scale``.
        nodes : integer tensor or array, optional
            The nodes that change (each at most once); default all.

        Raises
        ------
        ValueError
            Shapes, devices or node ids that do not match the graph, negative capacities, or
            capacities the graph's dtype cannot hold.

        Examples
        --------
        >>> import torchcut
        >>> d = DynamicFlowGraph(torchcut.FlowGraph.from_edges([0], [1], [2], source=[3, 0], sink=[0, 3]))
        >>> d.set_terminals(source=[7], nodes=[1])
        >>> d.graph.source.tolist()
        [[3, 7]]
        """
        g = self.graph
        N = g.num_nodes
        idx = None
        if nodes is not None:
            if isinstance(nodes, torch.Tensor) and nodes.device != g.device:
                raise ValueError(
                    f"nodes: expected a tensor on {g.device} (the graph's device), got one on {nodes.device}"
                )
            idx = as_tensor(
                nodes if not isinstance(nodes, (list, tuple)) else np.asarray(nodes, dtype=np.int64), "nodes", g.device
            )
            if idx.is_floating_point() or idx.dtype == torch.bool or idx.dim() != 1:
                raise ValueError(f"nodes: expected a 1-D integer tensor of node ids, got {describe(idx)}")
            idx = idx.to(torch.int64)
            if idx.numel() and (bool((idx < 0).any()) or bool((idx >= N).any())):
                bad = idx[(idx < 0) | (idx >= N)][0].item()
                raise ValueError(f"nodes: expected node ids in [0, {N}), got {bad}")
            if idx.numel() != torch.unique(idx).numel():
                raise ValueError("nodes: expected each node at most once, got repeated ids")
        n = N if idx is None else idx.numel()
        new_src, new_snk = g.source[0].clone(), g.sink[0].to(torch.int64)
        for name, x, target in (("source", source, new_src), ("sink", sink, new_snk)):
            if x is None:
                continue
            t = self._values(x, name, n)
            if name == "sink" and g.caps.dtype == torch.int32 and n and int(t.max()) > INT32_MAX:
                raise ValueError(
                    f"sink: expected capacities up to {INT32_MAX} (this graph holds int32 capacities), got "
                    f"{int(t.max())}; build the FlowGraph with the larger capacities instead"
                )
            if idx is None:
                target.copy_(t)
            else:
                target[idx] = t
        self._install(new_src, new_snk)

    def _install(self, new_src: torch.Tensor, new_snk: torch.Tensor) -> None:
        """Make int64 ``[N]`` terminal capacities (in the graph's units) the current ones."""
        g = self.graph
        N = g.num_nodes
        if self._caps_total is None:  # the n-links never change: their sum once
            self._caps_total = float(g.caps.sum(dtype=torch.float64))
        sums = torch.stack([new_src.sum(dtype=torch.float64), new_snk.sum(dtype=torch.float64)])
        check_sum(int(float(sums.sum()) + self._caps_total), "FlowGraph")
        new = object.__new__(type(g))
        new.__dict__.update(g.__dict__)
        new.source = new_src.to(torch.int64).reshape(1, N)
        new.sink = new_snk.to(g.sink.dtype).reshape(1, N)
        self.graph = new

    # ------------------------------------------------------------------------------------------ solves
    def maxflow(self) -> CutResult:
        """Maximum flow and minimum cut of :attr:`graph`, from the last flow when there is one.

        Returns
        -------
        CutResult
            As :func:`torchcut.maxflow` returns for :attr:`graph` (the same flow value and mask);
            ``stats["warm"]`` tells whether the last flow was reused.

        Examples
        --------
        >>> import torchcut
        >>> d = DynamicFlowGraph(torchcut.FlowGraph.from_edges([0], [1], [4], source=[5, 0], sink=[0, 5]))
        >>> d.maxflow().flow_value, d.maxflow().stats["warm"]
        (4, True)
        """
        from ._backends import CSR
        from ._maxflow import maxflow

        g = self.graph
        r = None
        if self._state is not None and self.warm:
            r = self._warm(CSR(g.device, self.backend))
        if r is None:
            r = maxflow(g, backend=self.backend, lattice=False)
        r.stats.setdefault("warm", False)  # a solve from scratch (also the repair's fallback)
        self.stats["warm" if r.stats["warm"] else "cold"] += 1
        self._remember(r)
        return r

    def _remember(self, r: CutResult) -> None:
        """Keep ``r`` (a maximum flow of :attr:`graph`) as the flow the next solve starts from: its
        residuals and sink flow, and the terminals it was solved for (the native re-solve starts from the
        nodes whose terminals differ from these)."""
        g = self.graph
        self._state = (r.residual, r.sink_flow[0].to(torch.int64), g.source[0], g.sink[0])

    def _warm(self, impl) -> CutResult | None:
        """A solve from the last flow, or None where a solve from scratch is the faster way: on the CPU
        when the last flow leaves a deficit (the repair and the solve after it are two searches over the
        whole graph, 5-6x a solve from scratch after a 2% stroke on 1000^2)."""
        g = self.graph
        R0 = self._state[0]
        if g.device.type == "cpu" and impl.name == "cpu" and _native_resolve():
            return self._warm_native()
        C = g.caps.to(torch.int64)
        R = R0.to(torch.int64)
        S = g.source[0].to(torch.int64)
        T = g.sink[0].to(torch.int64)
        N = g.num_nodes
        # net n-link inflow of every node: minus the flow on its outgoing arcs
        inflow = torch.zeros(N, dtype=torch.int64, device=g.device).index_add_(0, g.tail, R - C)
        avail = S + inflow
        t = torch.minimum(avail.clamp(min=0), T)  # to the sink
        ex = avail.clamp(min=0) - t
        deficit = (-avail).clamp(min=0)
        repaired = int((deficit > 0).sum())
        if repaired:
            self.stats["repaired"] += repaired
            back = (C - R).index_select(0, g.rev).clamp(min=0)  # arc x -> y: the flow on y -> x
            rc = back.to(g.caps.dtype)
            supply = t + ex
            need = deficit.to(g.caps.dtype)
            impl.solve_csr(g.row_ptr, g.head, g.tail, g.rev, rc, supply, need)
            if bool((need != 0).any()):  # cannot happen for a valid last flow; solve from scratch then
                from ._maxflow import maxflow

                return maxflow(g, backend=self.backend, lattice=False)
            R = R - (back - rc.to(torch.int64))
            used = t + ex - supply  # taken from each node's excess first, then from its sink flow
            from_ex = torch.minimum(used, ex)
            ex = ex - from_ex
            t = t - (used - from_ex)
        caps = R.to(g.caps.dtype)
        sink = (T - t).to(g.sink.dtype)
        mask, stats = impl.solve_csr(g.row_ptr, g.head, g.tail, g.rev, caps, ex, sink)
        return self._result(mask, caps, sink, dict(stats, warm=True, repaired=repaired))

    def _result(self, mask, caps, sink, stats, sink_flow=None) -> CutResult:
        """The result of a warm solve of :attr:`graph` that left residuals ``caps`` and residual sink
        capacities ``sink`` (or the int64 sink flows ``sink_flow``)."""
        g = self.graph
        if sink_flow is None:
            sink_flow = g.sink[0].to(torch.int64) - sink.to(torch.int64)
        sink_flow = sink_flow.reshape(1, -1)
        return CutResult(
            graph=g,
            flow_values=sink_flow.sum(1),
            node_mask=mask.reshape(1, -1),
            residual=caps,
            source_flow=g.source.clone(),
            sink_flow=sink_flow,
            stats=stats,
        )

    def _warm_native(self) -> CutResult | None:
        """The CPU re-solve in one op (``csr_resolve``): the re-fit of the last flow in one pass and a
        search grown from the changed nodes (its work is their neighbourhood, not the graph). None where
        the last flow leaves a deficit (the caller solves from scratch)."""
        g = self.graph
        t0 = time.perf_counter()
        R0, _, S0, T0 = self._state
        S, T = g.source[0], g.sink[0]
        changed = (S != S0) | (T != T0)
        # new residuals (the last result's stay as they were), the sink flows
        mask, caps, sink_flow, raw, deficits = torch.ops.torchcut.csr_resolve(
            g.row_ptr, g.head, g.rev, g.caps, R0, S, T if T.dtype == g.caps.dtype else T.to(g.caps.dtype), changed
        )
        if int(deficits[0]):
            return None
        stats = cpu._stats(raw, t0, 1)
        stats.update(route="csr", warm=True, repaired=0, search="from the changed nodes")
        return self._result(mask, caps, None, stats, sink_flow)


def _native_resolve() -> bool:
    """Whether the CPU library has ``csr_resolve`` (checked once)."""
    if "resolve" not in _NATIVE:
        _NATIVE["resolve"] = _ops.has_kernels("cpu", "csr_resolve")
    return _NATIVE["resolve"]


# op name -> whether the loaded library has it
_NATIVE: dict[str, bool] = {}
