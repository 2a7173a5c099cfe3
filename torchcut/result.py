"""CutResult: the flow value, the minimum cut, and a certificate that proves both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["CutResult", "CertificateError"]


class CertificateError(AssertionError):
    """Raised by :meth:`CutResult.verify` when the flow or the cut fails a check.

    Examples
    --------
    >>> import torch, torchcut
    >>> r = torchcut.maxflow(torchcut.GridGraph(torch.tensor([[5, 0]]), torch.tensor([[0, 5]]),
    ...                                         torch.tensor([[[3, 0]]]), [(0, 1)]))
    >>> r.flow_values[0] = 4  # tampered with
    >>> try:
    ...     r.verify()
    ... except CertificateError as e:
    ...     print("rejected")
    rejected
    """


@dataclass
class CutResult:
    """What a max-flow solve returns.

    Attributes
    ----------
    graph : GridGraph or FlowGraph
        The network that was solved.
    flow_values : torch.Tensor
        int64 ``[B]``: the maximum flow of each item, in the graph's integer units.
    node_mask : torch.Tensor
        bool ``[B, *shape]`` (grids) or ``[B, N]`` (general graphs): True = source side.
    residual : torch.Tensor
        Final residual capacities, laid out like the graph's arc capacities.
    source_flow, sink_flow : torch.Tensor
        int64, shaped like ``node_mask``: flow on each node's terminal arcs.
    stats : dict
        Solver details (backend, rounds, global relabels, seconds).

    Examples
    --------
    >>> import torch, torchcut
    >>> g = torchcut.GridGraph([[3, 0]], [[0, 4]], [[[2, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
    >>> r = torchcut.maxflow(g)
    >>> r.flow_value, r.mask.tolist(), r.verify()
    (2, [[True, False]], True)
    """

    graph: Any
    flow_values: torch.Tensor
    node_mask: torch.Tensor
    residual: torch.Tensor
    source_flow: torch.Tensor
    sink_flow: torch.Tensor
    stats: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ user-facing views
    @property
    def flow_value(self):
        """The maximum flow: a Python int (float for float capacities), or a list of them for a batch.

        When float capacities of the graph require grad (and grad mode is on), a float tensor instead
        (0-d, or ``[B]`` for a batch) whose gradient is the minimum cut: 1 on the arcs that cross the
        returned cut from the source side, 0 elsewhere (:func:`torchcut.diff.flow_value`).
        """
        if getattr(self.graph, "_grad_caps", None) is not None and torch.is_grad_enabled():
            from ._flowgrad import flow_value

            return flow_value(self)
        kept = self.__dict__.get("_host_values")
        if kept is not None and kept[0] is self.flow_values and kept[1] == self.flow_values._version:
            vals = list(kept[2])  # read on the host when the result was made: no wait for the device
        else:
            vals = self.flow_values.tolist()
        scale = getattr(self.graph, "scale", None)
        if isinstance(scale, torch.Tensor):  # a float graph built inside torch.compile
            scale = float(scale)
        if scale:
            vals = [v / scale for v in vals]
        return vals if getattr(self.graph, "batched", False) else vals[0]

    def _keep_host_values(self, values: list) -> None:
        """Remember ``flow_values`` as already read on the host (``values``, a list): :attr:`flow_value`
        uses them while that tensor is the same object and unmodified (its version counter)."""
        self._host_values = (self.flow_values, self.flow_values._version, list(values))

    @property
    def mask(self) -> torch.Tensor:
        """Bool tensor, True = source side (object); batch dim only when the graph had one."""
        return self.node_mask if getattr(self.graph, "batched", False) else self.node_mask[0]

    def __repr__(self) -> str:
        return f"CutResult(flow_value={self.flow_value!r}, mask={tuple(self.mask.shape)}, backend={self.stats.get('backend')!r})"

    # ------------------------------------------------------------------ certificate
    def verify(self) -> bool:
        """Check the max-flow / min-cut certificate; return True or raise :class:`CertificateError`.

        Independently of the solver's bookkeeping, from the original capacities and the final
        residual network:

        1. every arc pair's residuals are non-negative and sum to the pair's capacities, and terminal
           flows lie within their capacities (a valid preflow: capacities respected),
        2. no node other than the source has negative excess,
        3. no residual arc leads from the source side to the sink side (terminal arcs included),
        4. the cut capacity equals the flow into the sink, which equals ``flow_values``.

        A preflow whose value equals the capacity of some cut is a maximum flow, and that cut is
        minimum.

        Examples
        --------
        >>> import torchcut
        >>> g = torchcut.GridGraph([[1, 0]], [[0, 1]], [[[1, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4))
        >>> torchcut.maxflow(g).verify()
        True
        """
        if self.residual is None:
            raise CertificateError(
                "verify(): this result has no residual network: its GridGraph was built inside torch.compile, "
                "where it is built and solved in one op. Build the GridGraph before the compiled function (its "
                "result keeps the certificate) or solve it outside torch.compile to verify it."
            )
        g = self.graph
        B = g.batch_size
        N = g.num_nodes
        dev = self.residual.device
        i64 = torch.int64
        src_cap = g.source.reshape(-1).to(i64)
        snk_cap = g.sink.reshape(-1).to(i64)
        src_f = self.source_flow.reshape(-1).to(i64)
        snk_f = self.sink_flow.reshape(-1).to(i64)
        S = self.node_mask.reshape(-1)
        if S.numel() != B * N or src_f.numel() != B * N or snk_f.numel() != B * N:
            raise CertificateError(
                f"shape: expected {B * N} node entries, got mask {S.numel()}, source_flow {src_f.numel()}, "
                f"sink_flow {snk_f.numel()}"
            )
        T = ~S
        tail, head, c_f, c_b, i_f, i_b = g.arc_pairs()
        res = self.residual.reshape(-1).to(i64)
        r_f, r_b = res[i_f], res[i_b]

        def fail(msg, bad):
            n = int(bad.sum())
            if n:
                raise CertificateError(f"{msg} ({n} violation(s))")

        # 1. capacities respected
        fail("residual capacity negative", (r_f < 0) | (r_b < 0))
        fail("arc pair residuals do not sum to the pair's capacities", (r_f + r_b) != (c_f + c_b))
        fail("source-arc flow outside [0, capacity]", (src_f < 0) | (src_f > src_cap))
        fail("sink-arc flow outside [0, capacity]", (snk_f < 0) | (snk_f > snk_cap))
        # 2. excess >= 0 at every node
        f = c_f - r_f  # net flow tail -> head
        excess = src_f - snk_f
        excess = excess.index_add(0, head, f).index_add(0, tail, -f)
        fail("node with negative excess (flow conservation broken)", excess < 0)
        # 3. no residual arc from S to T
        fail(
            "residual arc from the source side to the sink side",
            (S[tail] & T[head] & (r_f > 0)) | (S[head] & T[tail] & (r_b > 0)),
        )
        fail("unsaturated source arc into the sink side", T & (src_f < src_cap))
        fail("unsaturated sink arc from the source side", S & (snk_f < snk_cap))
        # 4. cut capacity == flow into the sink == claimed value
        batch_of_node = torch.arange(B, device=dev).repeat_interleave(N)
        flow_in_t = torch.zeros(B, dtype=i64, device=dev).index_add(0, batch_of_node, snk_f)
        cut = torch.where(T, src_cap, 0) + torch.where(S, snk_cap, 0)
        cut_cap = torch.zeros(B, dtype=i64, device=dev).index_add(0, batch_of_node, cut)
        cross = torch.where(S[tail] & T[head], c_f, 0) + torch.where(S[head] & T[tail], c_b, 0)
        cut_cap = cut_cap.index_add(0, batch_of_node[tail], cross)
        claimed = self.flow_values.to(dev, i64)
        if not torch.equal(flow_in_t, claimed):
            raise CertificateError(
                f"flow into the sink {flow_in_t.tolist()} differs from flow_values {claimed.tolist()}"
            )
        if not torch.equal(cut_cap, flow_in_t):
            raise CertificateError(f"cut capacity {cut_cap.tolist()} differs from the flow value {flow_in_t.tolist()}")
        return True
