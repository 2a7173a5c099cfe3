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
   network the user has. The CPU path below starts as Kohli and Torr do, then takes back what the
   network the user has cannot carry.)
3. **Finish.** The CSR backend of :func:`torchcut.maxflow` runs from that preflow (push-relabel on
   CUDA, the reference solver's).

On CUDA a re-fit that finds a deficit is not repaired: the repair's max-flow runs on the CSR kernels,
which are bound by launches (33-79 ms after strokes on a 1000^2 grid), and the graph is solved from
scratch instead. A graph that is a 2D lattice (``FlowGraph.lattice_shape``) is always solved from
scratch on CUDA, by the grid kernels: at 1000^2 they take 4-5 ms, and the re-fit and CSR finish
took 2.3-4 ms after strokes without deficits, 4-9 ms with the fallback after strokes with them, and
about 100 ms on the first stroke (``benchmarks/dynamic.py --device cuda``; docs/performance.md).

On the CPU the residual network and the Boykov-Kolmogorov search trees stay in a native object between
solves (``torch.classes.torchcut.CsrState``), as in Kohli and Torr's method and PyMaxflow's
``maxflow(reuse_trees=True)``. An update changes the terminal residuals of the changed nodes alone (step 1
for each); a node whose sign of terminal residual changes becomes a root of the other tree, orphaning its
children and activating the neighbours across, and the search continues from those nodes. A deficit is
solved with the deficit added to both terminal capacities of its node (every cut grows by the same
amount, so the minimum cuts stay); where the node's sink arc then carries less than that, the rest is
taken back along the flow that leaves the node (a depth-first search over arcs carrying flow, to a node
with sink flow or excess), and the trees are mended around those paths. The flow value is then that of
a maximum flow of the network the user has, and ``verify()`` holds.

The flow value is the maximum flow of the new network and the mask is the canonical source side
(the nodes that cannot reach the sink in the final residual network, the same for every maximum
preflow): both equal a solve from scratch, and ``verify()`` holds. Only terminal capacities change;
n-link capacities stay those of the graph given. On the CPU the mask needs no search: when the
search stops, every residual arc into the sink tree starts in it and every node with a sink residual is
one of its roots, so the sink tree is exactly the nodes that reach the sink.

Speed on the CPU (``benchmarks/dynamic.py``, 1000^2, one thread; docs/performance.md has the table):
0.1-0.2x a solve from scratch after strokes of 2-5% of the pixels, deficits included. The outputs come
from buffers that the state hands out in turn: once the caller lets go of the result before last, only
the nodes changed since are copied into them (the whole residual network else: 1-3 ms at 1000^2).

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

import struct
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
        ``warm`` solves, ``cold`` solves and ``repaired`` nodes (deficits taken back) so far;
        ``deficit_scratch``: CUDA re-solves that met a deficit and were solved from scratch instead.

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
        self._graph = graph
        self._stale = False  # the kept state holds newer terminals than _graph (compat's stroke path)
        self.backend = backend
        self.warm = bool(warm)
        self._state = None  # (residual caps, sink flow, source, sink) of the last solve, for self.graph
        self._caps_total = None  # the sum of the n-link capacities (float64), for the overflow check
        self._terminal_total = None  # the sum of the terminal capacities (float64), kept up to date
        self._kept = None  # CPU: the native residual network and search trees (CsrState) of self.graph
        self._pending = []  # node ids (int64 tensors) given new terminals since the last solve; None: all
        self._marks = None  # int32 [N] zeros: the repeated-ids check counts into it and clears it again
        self.stats = {"warm": 0, "cold": 0, "repaired": 0, "deficit_scratch": 0}

    @property
    def graph(self):
        """The network with the capacities of the last :meth:`set_terminals` (a FlowGraph)."""
        if self._stale:  # terminals updated in the kept state alone (_kept_update): made current when asked
            self._graph, self._stale = _with_terminals(self._graph, *self._kept.terminals()), False
        return self._graph

    @graph.setter
    def graph(self, g) -> None:
        self._graph, self._stale = g, False

    # ------------------------------------------------------------------------------------------ changes
    def _repeats(self, idx: torch.Tensor) -> torch.Tensor:
        """How many of the node ids ``idx`` (in range) occur more than once, as a 0-d tensor (not read): a
        count per id in O(len(idx)) (a sort of a 5% stroke's ids at 1000^2 took 1 ms, this 0.3 ms)."""
        if self._marks is None:
            self._marks = torch.zeros(self.graph.num_nodes, dtype=torch.int32, device=idx.device)
        m = self._marks
        m.index_add_(0, idx, torch.ones(idx.numel(), dtype=torch.int32, device=idx.device))
        repeats = (m.index_select(0, idx) > 1).sum()
        m.index_fill_(0, idx, 0)
        return repeats

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
        return t.to(torch.int64)  # the sign is checked by the caller, with the other checks in one read

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
        # The values the checks need, read back in one copy (one wait on a CUDA device, not one a check):
        # (0-d tensor, the error its value raises or None), in the order the checks are reported.
        reads = []
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
            if idx.numel():
                lo, hi = torch.aminmax(idx)

                def bad_id(_):
                    bad = idx[(idx < 0) | (idx >= N)][0].item()
                    return ValueError(f"nodes: expected node ids in [0, {N}), got {bad}")

                reads += [(lo, lambda v: v < 0 and bad_id(v)), (hi, lambda v: v >= N and bad_id(v))]
                safe = idx.clamp(0, N - 1)  # counted before the range is known: no access out of bounds
                reads.append(
                    (
                        self._repeats(safe),
                        lambda v: v and ValueError("nodes: expected each node at most once, got repeated ids"),
                    )
                )
        n = N if idx is None else idx.numel()
        new = {}
        for name, x in (("source", source), ("sink", sink)):
            if x is None:
                continue
            t = new[name] = self._values(x, name, n)
            if not n:
                continue
            low = t.min()
            reads.append(
                (
                    low,
                    lambda v, name=name: (
                        v < 0 and ValueError(f"{name}: expected non-negative capacities, got minimum {int(v)}")
                    ),
                )
            )
            if name == "sink" and g.caps.dtype == torch.int32:
                reads.append(
                    (
                        t.max(),
                        lambda v: (
                            v > INT32_MAX
                            and ValueError(
                                f"sink: expected capacities up to {INT32_MAX} (this graph holds int32 capacities), got "
                                f"{int(v)}; build the FlowGraph with the larger capacities instead"
                            )
                        ),
                    )
                )
        # the change of the terminals' sum (float64, its bits carried in the int64 read), for the overflow check
        self._sums()
        parts = []
        for name, t in new.items():
            old = g.source[0] if name == "source" else g.sink[0]
            old = old if idx is None else old.index_select(0, safe if n else idx)
            parts += [t.sum(dtype=torch.float64), -old.sum(dtype=torch.float64)]
        if parts:
            reads.append((torch.stack(parts).sum().view(torch.int64), None))
        total = self._terminal_total
        if reads:
            values = torch.stack([r.to(torch.int64) for r, _ in reads]).tolist()
            for v, (_, error) in zip(values, reads):
                e = error(v) if error else None
                if e:
                    raise e
            if parts:
                total += struct.unpack("d", struct.pack("q", values[-1]))[0]
        new_src, new_snk = g.source[0].clone(), g.sink[0].clone()  # copies: the last graph stays as it was
        for name, target in (("source", new_src), ("sink", new_snk)):
            if name not in new:
                continue
            if idx is None:
                target.copy_(new[name])
            else:
                target[idx] = new[name].to(target.dtype)
        self._install(new_src, new_snk, idx, total)

    def _install(
        self, new_src: torch.Tensor, new_snk: torch.Tensor, nodes: torch.Tensor | None = None, total=None
    ) -> None:
        """Make ``[N]`` terminal capacities (in the graph's units) the current ones; ``nodes``: the int64
        ids of the only nodes whose capacities may differ (None: any); ``total``: their sum (float), where
        the caller knows it. The tensors become the graph's and are never modified in place afterwards."""
        self._sums()
        if total is None:
            total = float(new_src.sum(dtype=torch.float64) + new_snk.sum(dtype=torch.float64))
        check_sum(int(total + self._caps_total), "FlowGraph")
        self._terminal_total = total
        self.graph = _with_terminals(self.graph, new_src, new_snk)
        if self._pending is not None:
            self._pending = None if nodes is None else self._pending + [nodes]

    def _sums(self) -> None:
        """The sums of the n-link capacities (they never change) and of the terminal capacities (then
        kept up to date by :meth:`_install`), as floats, where they are not known yet."""
        g = self.graph
        if self._caps_total is None:
            self._caps_total = float(g.caps.sum(dtype=torch.float64))
        if self._terminal_total is None:
            self._terminal_total = float(g.source.sum(dtype=torch.float64) + g.sink.sum(dtype=torch.float64))

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
        if g.device.type == "cpu" and CSR(g.device, self.backend).name == "cpu" and _native_kept():
            r = self._kept_solve()
        else:
            r = None
            # a CUDA lattice is solved from scratch by the grid kernels: faster than from the last flow
            # by the CSR kernels on the strokes measured (module docstring)
            cuda_lattice = g.device.type == "cuda" and g.lattice_shape() is not None
            if self._state is not None and self.warm and not cuda_lattice:
                r = self._warm(CSR(g.device, self.backend))
            if r is None:  # on CUDA a lattice goes to the grid kernels (4 against 33 ms for the CSR ones at 1000^2)
                r = maxflow(g, backend=self.backend, lattice=None if g.device.type == "cuda" else False)
        r.stats.setdefault("warm", False)  # a solve from scratch (also the repair's fallback)
        self.stats["warm" if r.stats["warm"] else "cold"] += 1
        if self._kept is None:  # the native state keeps its own flow (and reuses the result's buffers once
            self._remember(r)  # the caller lets them go: nothing here holds them)
        self._pending = []
        return r

    def _remember(self, r: CutResult) -> None:
        """Keep ``r`` (a maximum flow of :attr:`graph`) as the flow the next solve starts from: its
        residuals and sink flow, and the terminals it was solved for (the native re-solve starts from the
        nodes whose terminals differ from these)."""
        g = self.graph
        self._state = (r.residual, r.sink_flow[0].to(torch.int64), g.source[0], g.sink[0])

    def _warm(self, impl) -> CutResult | None:
        """A solve from the last flow in tensor ops and the CSR backend ``impl`` (CUDA, the reference
        solver; the CPU keeps its native state instead), or None where the repair could not take a
        deficit back (not the case for a valid last flow): the caller solves from scratch then."""
        g = self.graph
        R0 = self._state[0]
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
        if repaired and g.device.type == "cuda":
            # the repair's CSR max-flow is launch-bound: 33-79 ms after strokes on a 1000^2 grid, where the
            # grid kernels solve from scratch in 4 ms (docs/performance.md); the caller solves from scratch
            self.stats["deficit_scratch"] += 1
            return None
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

    def _result(self, mask, caps, sink, stats, sink_flow=None, total=None) -> CutResult:
        """The result of a warm solve of :attr:`graph` that left residuals ``caps`` and residual sink
        capacities ``sink`` (or the int64 sink flows ``sink_flow``, and their sum ``total`` if known)."""
        g = self.graph
        if sink_flow is None:
            sink_flow = g.sink[0].to(torch.int64) - sink.to(torch.int64)
        sink_flow = sink_flow.reshape(1, -1)
        flow = sink_flow.sum(1) if total is None else torch.tensor([total], dtype=torch.int64, device=g.device)
        return CutResult(
            graph=g,
            flow_values=flow,
            node_mask=mask.reshape(1, -1),
            residual=caps,
            source_flow=g.source,  # saturated; the graph's tensors are never modified in place
            sink_flow=sink_flow,
            stats=stats,
        )

    def _kept_solve(self) -> CutResult:
        """The CPU solve with the residual network and search trees kept natively (``CsrState``): from
        scratch the first time (and with ``warm=False``), else an update of the nodes whose terminals
        were set since the last solve (Kohli and Torr's re-solve with the trees reused; see the module)."""
        g = self.graph
        t0 = time.perf_counter()
        S, T = g.source[0], g.sink[0]
        if self._kept is None or not self.warm:
            self._kept = torch.classes.torchcut.CsrState(g.row_ptr, g.head, g.rev, g.caps, S, T.to(torch.int64))
            out = self._kept.solve()
            self._sums()  # the overflow check's sums once, with the solve from scratch (not on a stroke)
        else:
            if self._pending is None:  # every node may have changed: the state skips those that did not
                nodes = torch.arange(g.num_nodes, dtype=torch.int64)
            elif self._pending:
                nodes = torch.cat(self._pending)
            else:
                nodes = torch.empty(0, dtype=torch.int64)
            out = self._kept.update(nodes, S.index_select(0, nodes), T.index_select(0, nodes).to(torch.int64))
        self.stats["repaired"] += int(out[4][0])
        return self._kept_result(out, t0)

    def _kept_update(self, total: float):
        """The stroke path of ``compat.pymaxflow``: the kept state's update of the nodes of its last
        ``plan()`` (``CsrState.plan``: the nodes given new terminal totals, netted there; the caller has
        checked their sink capacities against the graph's dtype), after which the terminal capacities sum
        to ``total``. Raises before any change when the capacities' sum could overflow. Nothing here is
        over all nodes: :attr:`graph` is made current from the kept state when next read, and the result's
        tensors (mask, residuals, flows) are written by :meth:`_kept_result` when asked for (the segments
        alone come from the kept trees: ``self._kept.sink_side()``). Returns what :meth:`_kept_result`
        takes. Needs a kept state (a solve of this graph on the CPU)."""
        check_sum(int(total + self._caps_total), "FlowGraph")
        t0 = time.perf_counter()
        out = (None, None, None, *self._kept.update_planned())
        self._terminal_total = total
        self._stale, self._pending = True, []
        deficits, fresh = out[4][:2].tolist()
        self.stats["cold" if fresh else "warm"] += 1
        self.stats["repaired"] += deficits
        return out, t0

    def _kept_result(self, out, t0: float) -> CutResult:
        """The CutResult of the kept state's outputs ``out`` (a solve started at ``t0``; after
        :meth:`_kept_update`, the last solve's: its tensors are written now)."""
        mask, caps, sink_flow, raw, info = out
        if mask is None:
            mask, caps, sink_flow = self._kept.result()
        deficits, fresh, total = info.tolist()
        stats = cpu._stats(raw, t0, 1)
        stats.update(route="csr", warm=not fresh, repaired=deficits, search="kept trees")
        return self._result(mask, caps, None, stats, sink_flow, total)


def _with_terminals(g, source: torch.Tensor, sink: torch.Tensor):
    """A shallow copy of the FlowGraph ``g`` whose terminal capacities are ``source`` and ``sink`` (``[N]``,
    kept as the copy's own: int64 and ``g``'s sink dtype, ``[1, N]``)."""
    new = object.__new__(type(g))
    new.__dict__.update(g.__dict__)
    new.source = source.to(torch.int64).reshape(1, -1)
    new.sink = sink.to(g.sink.dtype).reshape(1, -1)
    return new


def _native_kept() -> bool:
    """Whether the CPU library has the class ``CsrState`` (checked once)."""
    if "kept" not in _NATIVE:
        ok = _ops.load_error("cpu") is None
        try:
            ok = ok and torch.classes.torchcut.CsrState is not None
        except (RuntimeError, AttributeError):
            ok = False
        _NATIVE["kept"] = ok
    return _NATIVE["kept"]


# op name -> whether the loaded library has it
_NATIVE: dict[str, bool] = {}
