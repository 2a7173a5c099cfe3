"""FlowGraph: construction, validation, exactness against scipy and PyMaxflow, lattice routing."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchcut
from torchcut import FlowGraph

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flow_cases as fc  # noqa: E402


def solve(net, **kw):
    g = FlowGraph.from_network(*net[1:4], net[4], net[5], net[0])
    r = torchcut.maxflow(g, **kw)
    assert r.verify()
    return g, r


# ------------------------------------------------------------------ exactness on random networks
FAMILIES = {
    "uniform": fc.uniform,
    "layered": fc.layered,
    "rmfgen": fc.rmfgen,
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_random_networks_match_scipy(family):
    rng = np.random.default_rng(hash(family) % 2**32)
    for _ in range(80):
        net = FAMILIES[family](rng)
        _, r = solve(net, backend="reference", lattice=False)
        assert r.flow_value == fc.scipy_flow(*net)


def test_random_networks_match_pymaxflow():
    pytest.importorskip("maxflow")
    rng = np.random.default_rng(7)
    for k in range(40):
        net = (fc.uniform, fc.layered, fc.rmfgen)[k % 3](rng)
        _, r = solve(net, backend="reference", lattice=False)
        assert r.flow_value == fc.pymaxflow_flow(*net)


def test_terminals_wired_to_many_nodes():
    pytest.importorskip("maxflow")
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(2, 30))
        m = int(rng.integers(0, 3 * n))
        u, v = rng.integers(0, n, m), rng.integers(0, n, m)
        cap, rcap = rng.integers(0, 30, m), rng.integers(0, 30, m)
        src = rng.integers(0, 50, n) * (rng.random(n) < 0.7)
        snk = rng.integers(0, 50, n) * (rng.random(n) < 0.7)
        g = FlowGraph.from_edges(u, v, cap, rcap, source=src, sink=snk, num_nodes=n)
        r = torchcut.maxflow(g, backend="reference", lattice=False)
        assert r.verify()
        net = fc.terminal_network(n, u, v, cap, rcap, src, snk)
        assert r.flow_value == fc.scipy_flow(*net) == fc.pymaxflow_flow(*net)


def test_zero_flow_cases():
    # no arcs at all, no path, zero capacities, terminals on disconnected parts
    cases = [
        (4, [], [], [], 0, 3, [True, True]),
        (4, [0, 2], [1, 3], [5, 5], 0, 3, [True, False]),
        (3, [0, 1], [1, 2], [0, 7], 0, 2, [False]),
        (5, [1, 2, 3], [0, 1, 2], [9, 9, 9], 0, 4, [True, True, True]),  # arcs into the source only
    ]
    for n, t_, h_, c_, s, t, mask in cases:
        _, r = solve(
            (n, np.array(t_, dtype=np.int64), np.array(h_, dtype=np.int64), np.array(c_, dtype=np.int64), s, t),
            backend="reference",
            lattice=False,
        )
        assert r.flow_value == 0
        assert r.mask.tolist() == mask  # source side = nodes that cannot reach the sink


def test_source_to_sink_arc_and_dropped_arcs():
    # s=0, t=3: 0->3 (direct, 4), 3->1 (out of the sink, dropped), 2->0 (into the source, dropped)
    net = (4, np.array([0, 3, 2, 0, 1]), np.array([3, 1, 0, 1, 3]), np.array([4, 6, 5, 2, 9]), 0, 3)
    g, r = solve(net, backend="reference", lattice=False)
    assert r.flow_value == 6 == fc.scipy_flow(*net)


# ------------------------------------------------------------------ properties
@st.composite
def networks(draw):
    n = draw(st.integers(3, 12))
    m = draw(st.integers(0, 30))
    node = st.integers(0, n - 1)
    tail = draw(st.lists(node, min_size=m, max_size=m))
    head = draw(st.lists(node, min_size=m, max_size=m))
    cap = draw(st.lists(st.integers(0, 1000), min_size=m, max_size=m))
    s = draw(node)
    t = draw(node.filter(lambda x: x != s))
    return n, np.array(tail, dtype=np.int64), np.array(head, dtype=np.int64), np.array(cap, dtype=np.int64), s, t


@settings(max_examples=60, deadline=None)
@given(networks())
def test_property_matches_scipy_and_certifies(net):
    g, r = solve(net, backend="reference", lattice=False)
    assert r.flow_value == fc.scipy_flow(*net)
    # the mask is the set of nodes that cannot reach the sink: unique, so the lattice route agrees too
    r2 = torchcut.maxflow(g)
    assert r2.flow_value == r.flow_value and torch.equal(r2.mask, r.mask)


@settings(max_examples=40, deadline=None)
@given(networks(), st.integers(1, 5))
def test_property_scaling_capacities_scales_flow(net, k):
    n, tail, head, cap, s, t = net
    _, r1 = solve(net, backend="reference", lattice=False)
    _, r2 = solve((n, tail, head, cap * k, s, t), backend="reference", lattice=False)
    assert r2.flow_value == k * r1.flow_value


# ------------------------------------------------------------------ structure
def test_merging_parallel_and_antiparallel():
    g = FlowGraph.from_edges([0, 0, 1, 2], [1, 1, 0, 2], [2, 3, 4, 9], num_nodes=3)
    assert g.num_pairs == 1 and g.num_arcs == 2
    u, v, c, rc = g.edges()
    assert (u.tolist(), v.tolist(), c.tolist(), rc.tolist()) == ([0], [1], [5], [4])


def test_csr_invariants():
    rng = np.random.default_rng(11)
    net = fc.uniform(rng, n=30, m=120)
    g = FlowGraph.from_network(*net[1:4], net[4], net[5], net[0])
    A = g.num_arcs
    assert torch.equal(g.rev[g.rev], torch.arange(A))
    assert torch.equal(g.tail[g.rev], g.head) and torch.equal(g.head[g.rev], g.tail)
    assert torch.equal(torch.repeat_interleave(torch.arange(g.num_nodes), g.degree()), g.tail)
    assert bool((g.tail != g.head).all())


_LAYOUT = ("row_ptr", "tail", "head", "rev", "caps", "pair_fwd", "pair_bwd", "source", "sink")


def _tensor_layout(monkeypatch, *args, **kwargs):
    """The FlowGraph built by the tensor version of the layout (not torch.ops.torchcut.pairs_csr)."""
    with monkeypatch.context() as m:
        m.setenv("TORCHCUT_PY_LAYOUT", "1")
        return FlowGraph.from_edges(*args, **kwargs)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), m=st.integers(0, 200), seed=st.integers(0, 2**31 - 1), big=st.booleans())
def test_property_compiled_layout_equals_tensor_version(n, m, seed, big):
    """CPU graphs with integer capacities are laid out by one compiled pass (pairs merged, self-loops
    dropped, CSR rows by head): every tensor equal to the tensor version's, dtype included, and the
    caller's arrays unchanged."""
    if torchcut.solvers.cpu.load_error() is not None:
        pytest.skip("the CPU extension cannot be built here")
    rng = np.random.default_rng(seed)
    top = 2**40 if big else 50
    u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    cap, rc = rng.integers(0, top, m), rng.integers(0, top, m)
    src, snk = rng.integers(0, top, n), rng.integers(0, top, n)
    before = [a.copy() for a in (u, v, cap, rc, src, snk)]
    with pytest.MonkeyPatch.context() as mp:
        ref = _tensor_layout(mp, u, v, cap, rc, source=src, sink=snk, num_nodes=n)
    g = FlowGraph.from_edges(u, v, cap, rc, source=src, sink=snk, num_nodes=n)
    for name in _LAYOUT:
        a, b = getattr(g, name), getattr(ref, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert g.is_float is ref.is_float is False and g.scale is ref.scale is None
    assert all(np.array_equal(a, b) for a, b in zip(before, (u, v, cap, rc, src, snk)))


def test_compiled_layout_is_used_and_solves(monkeypatch):
    """A BVZ-like lattice given as arc lists, both ways: same layout, same flow and mask."""
    if torchcut.solvers.cpu.load_error() is not None:
        pytest.skip("the CPU extension cannot be built here")
    rng = np.random.default_rng(3)
    H, W = 30, 40
    ids = np.arange(H * W).reshape(H, W)
    u = np.concatenate([ids[:, :-1].ravel(), ids[:-1].ravel()])
    v = np.concatenate([ids[:, 1:].ravel(), ids[1:].ravel()])
    cap = rng.integers(0, 30, u.size)
    src, snk = rng.integers(0, 60, H * W), rng.integers(0, 60, H * W)
    calls = []
    real = torch.ops.torchcut.pairs_csr
    monkeypatch.setattr(torch.ops.torchcut, "pairs_csr", lambda *a: calls.append(1) or real(*a), raising=False)
    g = FlowGraph.from_edges(u, v, cap, cap, source=src, sink=snk)
    assert calls == [1]
    ref = _tensor_layout(monkeypatch, u, v, cap, cap, source=src, sink=snk)
    assert calls == [1]
    r, r_ref = torchcut.maxflow(g, backend="cpu"), torchcut.maxflow(ref, backend="cpu")
    assert r.verify() and r.flow_value == r_ref.flow_value and torch.equal(r.mask, r_ref.mask)


def test_compiled_layout_rejects_out_of_range_nodes():
    if torchcut.solvers.cpu.load_error() is not None:
        pytest.skip("the CPU extension cannot be built here")
    z = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"arc 0 \(0 -> 5\) has a node outside \[0, 3\)"):
        torch.ops.torchcut.pairs_csr(z, torch.tensor([5]), z, z, 3)
    with pytest.raises(RuntimeError, match="expected contiguous 1-D int64 CPU tensors"):
        torch.ops.torchcut.pairs_csr(z.int(), z, z, z, 3)


@pytest.mark.parametrize("layout", ["0", "1"])
def test_capacity_sums_that_would_wrap_are_rejected(monkeypatch, layout):
    """Parallel arcs (or terminal arcs of one node) whose int64 sum wraps around once gave a graph of
    zero capacities and a wrong flow of 0; now the sum is checked before merging, in float64."""
    monkeypatch.setenv("TORCHCUT_PY_LAYOUT", layout)
    big = 2**62
    with pytest.raises(ValueError, match=r"FlowGraph: the capacities sum to 9223372036854775808, at or above 2\*\*62"):
        FlowGraph.from_edges([0, 0], [1, 1], [big, big], source=[1, 0], sink=[0, 1])
    with pytest.raises(ValueError, match=r"at or above 2\*\*62"):
        FlowGraph.from_edges([0], [1], [1], source=[big, big, 0], sink=[0, 0, 1])
    with pytest.raises(ValueError, match=r"at or above 2\*\*62"):  # arcs out of the source, summed per head
        FlowGraph.from_network([0, 0, 2], [2, 2, 1], [big, big, 1], 0, 1, 3)


def test_float_capacities_quantized():
    g = FlowGraph.from_edges([0], [1], [0.5], source=[1.0, 0.0], sink=[0.0, 0.25])
    r = torchcut.maxflow(g, lattice=False)
    assert r.verify() and abs(r.flow_value - 0.25) < 1e-6


def test_int64_capacities_beyond_int32():
    big = 2**40
    g = FlowGraph.from_edges([0], [1], [big], source=[big, 0], sink=[0, big])
    assert g.caps.dtype == torch.int64
    assert torchcut.maxflow(g, lattice=False).flow_value == big


def test_to_device_roundtrip():
    g = FlowGraph.from_edges([0], [1], [4], source=[4, 0], sink=[0, 3])
    h = g.to("cpu")
    assert torchcut.maxflow(h).flow_value == 3


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(u=[0, 1], v=[1], cap=[1, 1]), "v: expected the length of u"),
        (dict(u=[0.0], v=[1], cap=[1]), "u: expected an integer dtype"),
        (dict(u=[[0]], v=[[1]], cap=[1]), "u: expected a 1-D tensor"),
        (dict(u=[0], v=[5], cap=[1], num_nodes=3), r"v: expected node indices in \[0, 3\), got 5"),
        (dict(u=[-1], v=[1], cap=[1]), r"u: expected node indices"),
        (dict(u=[0], v=[1], cap=[-2]), "cap: expected non-negative capacities, got minimum -2"),
        (dict(u=[0], v=[1], cap=[float("nan")]), "cap: expected finite capacities"),
        (dict(u=[0], v=[1], cap=[float("inf")]), "cap: expected finite capacities"),
        (dict(u=[0], v=[1], cap=[1, 2]), r"cap: expected shape \(1,\)"),
        (dict(u=[0], v=[1], cap=[1], rev_cap=[-1]), "rev_cap: expected non-negative"),
        (dict(u=[0], v=[1], cap=[1], source=[1, 2, 3], sink=[0, 0]), r"sink: expected shape \(3,\)"),
        (dict(u=[0], v=[1], cap=[1], num_nodes=0), "num_nodes: expected a positive integer"),
        (dict(u=[0], v=[1], cap=[2**62], source=[2**62, 0]), "capacities sum to"),
        (dict(u=[0], v=[1], cap=[1], scale=2.0), "scale: only applies to float capacities"),
        (dict(u=[0], v=[1], cap=[True]), "cap: expected a numeric"),
    ],
)
def test_validation_errors(kwargs, match):
    u, v, cap = kwargs.pop("u"), kwargs.pop("v"), kwargs.pop("cap")
    if isinstance(cap, list) and cap and isinstance(cap[0], bool):
        cap = np.array(cap)
        with pytest.raises(TypeError, match=match):
            FlowGraph.from_edges(u, v, cap, **kwargs)
        return
    with pytest.raises(ValueError, match=match):
        FlowGraph.from_edges(u, v, cap, **kwargs)


def test_from_network_validation():
    with pytest.raises(ValueError, match="sink_node: expected a node other than source_node"):
        FlowGraph.from_network([0], [1], [1], 1, 1, 3)
    with pytest.raises(ValueError, match=r"source_node: expected a node id in \[0, 3\), got 7"):
        FlowGraph.from_network([0], [1], [1], 7, 1, 3)
    with pytest.raises(ValueError, match="head: expected node ids"):
        FlowGraph.from_network([0], [9], [1], 0, 1, 3)
    with pytest.raises(ValueError, match="num_nodes: expected at least 3"):
        FlowGraph.from_network([0], [1], [1], 0, 1, 2)


def test_constructor_is_not_public():
    with pytest.raises(TypeError, match="from_edges"):
        FlowGraph()


def test_bad_backend():
    g = FlowGraph.from_edges([0], [1], [1])
    with pytest.raises(ValueError, match="backend: expected one of"):
        torchcut.maxflow(g, backend="magic")
    with pytest.raises(ValueError, match="backend='cuda': expected a graph on a CUDA device"):
        torchcut.maxflow(g, backend="cuda", lattice=False)


# ------------------------------------------------------------------ lattices
def lattice_graph(rng, H, W, p_missing=0.2):
    N = H * W
    ids = np.arange(N).reshape(H, W)
    u = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    v = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    keep = rng.random(u.size) > p_missing
    u, v = u[keep], v[keep]
    cap, rcap = rng.integers(0, 20, u.size), rng.integers(0, 20, u.size)
    src = rng.integers(0, 40, N) * (rng.random(N) < 0.4)
    snk = rng.integers(0, 40, N) * (rng.random(N) < 0.4)
    # shuffle arc order and orientation: detection must not depend on it
    flip = rng.random(u.size) < 0.5
    u2, v2 = np.where(flip, v, u), np.where(flip, u, v)
    c2, r2 = np.where(flip, rcap, cap), np.where(flip, cap, rcap)
    perm = rng.permutation(u.size)
    return FlowGraph.from_edges(u2[perm], v2[perm], c2[perm], r2[perm], source=src, sink=snk, num_nodes=N), (
        u,
        v,
        cap,
        rcap,
        src,
        snk,
    )


def test_lattice_detection_and_routing():
    rng = np.random.default_rng(5)
    for H, W in [(1, 1), (1, 7), (6, 1), (4, 5), (9, 8), (3, 16)]:
        g, raw = lattice_graph(rng, H, W)
        shape = g.lattice_shape()
        assert shape is not None and shape[0] * shape[1] == H * W
        r_grid = torchcut.maxflow(g, lattice=True)  # routed to the grid solver
        r_csr = torchcut.maxflow(g, lattice=False)
        assert r_grid.verify() and r_csr.verify()
        assert r_grid.stats.get("route", "").startswith("grid") or H * W == 1
        assert r_grid.flow_value == r_csr.flow_value == fc.scipy_flow(*fc.terminal_network(H * W, *raw))
        assert torch.equal(r_grid.mask, r_csr.mask)


def test_non_lattices_are_not_routed():
    # a diagonal arc, a row wrap-around arc
    g1 = FlowGraph.from_edges([0, 0], [1, 4], [1, 1], num_nodes=6)  # W would be 4, but 6 % 4 != 0
    g2 = FlowGraph.from_edges([0, 2], [3, 3], [1, 1], num_nodes=6)  # 2 -> 3 wraps a row of width 3
    g3 = FlowGraph.from_edges([0, 0], [3, 4], [1, 1], num_nodes=9)  # diffs 3 and 4
    for g in (g1, g2, g3):
        assert g.lattice_shape() is None
        with pytest.raises(ValueError, match="expected a 2D lattice"):
            g.as_grid()


def _tensor_lattice(g, monkeypatch):
    """lattice_shape and as_grid of a copy of ``g`` through the tensor ops (no compiled layout)."""
    import torchcut.graph as G

    with monkeypatch.context() as m:
        m.setattr(G, "_compiled_layout", lambda: False)
        h = object.__new__(FlowGraph)
        h.__dict__.update(g.__dict__)
        h._lattice = None
        shape = h.lattice_shape()
        return shape, (h.as_grid() if shape else None)


def test_lattice_ops_match_the_tensor_version(monkeypatch):
    rng = np.random.default_rng(11)
    graphs = [
        lattice_graph(rng, H, W, p)[0]
        for H, W, p in [(1, 7, 0.2), (6, 1, 0.2), (4, 5, 0.2), (9, 8, 0), (3, 16, 0.2), (5, 6, 0.9)]
    ]
    graphs += [
        FlowGraph.from_edges([0, 0], [1, 4], [1, 1], num_nodes=6),  # W would be 4, but 6 % 4 != 0
        FlowGraph.from_edges([0, 2], [3, 3], [1, 1], num_nodes=6),  # 2 -> 3 wraps a row of width 3
        FlowGraph.from_edges([0, 0], [3, 4], [1, 1], num_nodes=9),  # steps 3 and 4
        FlowGraph.from_edges([0, 1], [1, 2], [1, 1], num_nodes=3),  # one row
        FlowGraph.from_edges([0, 3], [3, 6], [2**40, 1], [1, 3], num_nodes=9),  # one column, int64 capacities
    ]
    for g in graphs:
        shape, grid = _tensor_lattice(g, monkeypatch)
        g._lattice = None
        assert g.lattice_shape() == shape
        if shape is None:
            continue
        mine = g.as_grid()
        assert mine.shape == grid.shape and mine.offsets == grid.offsets
        for name in ("caps", "source", "sink"):
            assert torch.equal(getattr(mine, name).long(), getattr(grid, name).long()), name


def test_lattice_route_on_the_cpu_by_size():
    # the compiled solver takes lattices of at least 2**15 nodes through the grid solver: same flow, mask and
    # a residual that certifies it, in the graph's arc order
    rng = np.random.default_rng(12)
    for H, W in [(128, 256), (181, 181), (40, 60)]:
        g, raw = lattice_graph(rng, H, W, 0.1)
        auto, csr = torchcut.maxflow(g), torchcut.maxflow(g, lattice=False)
        grid = torchcut.maxflow(g, lattice=True)
        routed = H * W >= 1 << 15
        assert auto.stats["route"] == (f"grid {H}x{W}" if routed else "csr")
        for r in (auto, grid):
            assert r.flow_value == csr.flow_value and r.verify() and torch.equal(r.mask, csr.mask)
            assert r.residual.dtype == g.caps.dtype and r.residual.shape == g.caps.shape
        assert csr.flow_value == fc.scipy_flow(*fc.terminal_network(H * W, *raw))


@settings(max_examples=40, deadline=None)
@given(
    H=st.integers(1, 12),
    W=st.integers(1, 12),
    missing=st.floats(0.0, 0.9),
    big=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_lattice_route_equals_csr(H, W, missing, big, seed):
    """Any lattice (pairs missing, int32 or int64 capacities, shuffled arc order and orientation), routed to the
    grid solver by the compiled conversion: the CSR solve's flow and mask, a residual that certifies it."""
    rng = np.random.default_rng(seed)
    g, raw = lattice_graph(rng, H, W, missing)
    if big:  # int64 capacities: the conversion keeps the dtype
        u, v, cap, rcap, src, snk = raw
        g = FlowGraph.from_edges(u, v, cap * 2**33, rcap * 2**33, source=src * 2**33, sink=snk * 2**33, num_nodes=H * W)
    shape = g.lattice_shape()  # a single row or column may be found as either: the same graph
    assert shape is not None and shape[0] * shape[1] == H * W
    assert g.caps.dtype == torch.int64 or not (big and g.num_pairs)
    grid, csr = torchcut.maxflow(g, lattice=True), torchcut.maxflow(g, lattice=False)
    assert grid.flow_value == csr.flow_value and torch.equal(grid.mask, csr.mask)
    assert grid.residual.dtype == g.caps.dtype and grid.verify()
    assert grid.stats["route"] == f"grid {shape[0]}x{shape[1]}" or H * W == 1


def test_lattice_ops_check_their_indices():
    g = FlowGraph.from_edges([0, 1, 0], [1, 2, 3], [1, 1, 1], num_nodes=6)
    op = torch.ops.torchcut.lattice_grid
    args = [g.tail, g.head, g.caps, g.pair_fwd, g.pair_bwd]
    assert op(*args, 6, 0)[0].tolist() == [2, 3]
    with pytest.raises(RuntimeError, match=r"lattice_grid: expected arc indices in \[0, 6\)"):
        op(g.tail, g.head, g.caps, g.pair_fwd + 100, g.pair_bwd, 6, 0)
    with pytest.raises(
        RuntimeError, match=r"lattice_grid: expected arc indices in \[0, 6\) whose ends lie in \[0, 3\)"
    ):
        op(*args, 3, 0)
    with pytest.raises(RuntimeError, match="W: expected a divisor of N = 6, got 4"):
        op(*args, 6, 4)
    with pytest.raises(RuntimeError, match="expected the pairs of a lattice of width 2"):
        op(*args, 6, 2)
    with pytest.raises(RuntimeError, match="expected 2 M arcs and M pairs"):
        op(g.tail[:-1], g.head[:-1], g.caps[:-1], g.pair_fwd, g.pair_bwd, 6, 0)
    with pytest.raises(RuntimeError, match="caps: expected a contiguous int32 or int64 CPU tensor"):
        op(g.tail, g.head, g.caps.double(), g.pair_fwd, g.pair_bwd, 6, 0)
    res = torch.ops.torchcut.lattice_residual
    gres = torch.arange(24, dtype=torch.int32)
    out = res(gres, g.tail, g.head, g.pair_fwd, g.pair_bwd, torch.int64)
    # pairs by (lo, hi): (0, 1) the right arc of 0 (slot 0), the left arc of 1 (2 N + 1); (0, 3) down, up
    f, b = g.pair_fwd.tolist(), g.pair_bwd.tolist()
    assert out.dtype == torch.int64 and [out[f[0]], out[b[0]], out[f[1]], out[b[1]]] == [0, 13, 6, 21]
    with pytest.raises(RuntimeError, match=r"lattice_residual: expected arc indices in \[0, 6\)"):
        res(gres[:8], g.tail, g.head, g.pair_fwd, g.pair_bwd, torch.int64)
    with pytest.raises(RuntimeError, match="dtype: expected int32 or int64"):
        res(gres, g.tail, g.head, g.pair_fwd, g.pair_bwd, torch.float32)


@pytest.mark.parametrize("ndim,conn,shape", [(2, 4, (6, 7)), (2, 8, (5, 4)), (3, 6, (3, 4, 2)), (3, 26, (3, 3, 4))])
def test_from_grid(ndim, conn, shape):
    torch.manual_seed(ndim * 100 + conn)
    offs = torchcut.grid_offsets(ndim, conn)
    K = len(offs)
    src, snk = torch.randint(0, 20, shape), torch.randint(0, 20, shape)
    edges, rev = torch.randint(0, 9, (K,) + shape), torch.randint(0, 9, (K,) + shape)
    g = torchcut.GridGraph(src, snk, edges, offs, rev)
    f = FlowGraph.from_grid(g)
    # the native layout from the grid's structure is the one from_edges makes of the grid's arc pairs
    tail, head, cf, cb, _, _ = g.arc_pairs()
    ref = FlowGraph.from_edges(tail, head, cf, cb, source=src.reshape(-1), sink=snk.reshape(-1))
    for name in ("row_ptr", "tail", "head", "rev", "caps", "pair_fwd", "pair_bwd", "source", "sink"):
        assert torch.equal(getattr(f, name), getattr(ref, name)), name
    # one pair per pair of neighbours inside the grid, node = flat pixel index
    inside = sum(math.prod(n - abs(v) for n, v in zip(shape, o)) for o in offs)
    assert f.num_nodes == math.prod(shape) and f.num_pairs == inside
    assert torch.equal(f.source[0], src.reshape(-1)) and torch.equal(f.sink[0].long(), snk.reshape(-1))
    rg, rf = torchcut.maxflow(g), torchcut.maxflow(f)
    assert rf.flow_value == rg.flow_value and rf.verify() and torch.equal(rf.mask, rg.mask.reshape(-1))
    # batches of one are one grid; larger batches are refused
    g1 = torchcut.GridGraph(src[None], snk[None], edges[:, None], offs, rev[:, None])
    assert torchcut.maxflow(FlowGraph.from_grid(g1)).flow_value == rg.flow_value
    g2 = torchcut.GridGraph(torch.stack([src, src]), torch.stack([snk, snk]), torch.stack([edges, edges], 1), offs)
    with pytest.raises(ValueError, match="grid: expected one grid .* got a batch of 2"):
        FlowGraph.from_grid(g2)
    with pytest.raises(TypeError, match="grid: expected a torchcut.GridGraph, got FlowGraph"):
        FlowGraph.from_grid(f)


def test_from_grid_offsets_below_and_the_op_checks():
    # offsets naming a neighbour below p (or the same flat offset twice) take the arc pairs' path
    src, snk = torch.tensor([[4, 0, 0], [0, 0, 0]]), torch.tensor([[0, 0, 0], [0, 0, 5]])
    edges = torch.full((2, 2, 3), 2)
    for offs in (((0, -1), (-1, 0)), ((0, 1), (1, -1)), ((0, 1), (0, 1))):
        g = torchcut.GridGraph(src, snk, edges, offs)
        f = FlowGraph.from_grid(g)
        assert torchcut.maxflow(f).flow_value == torchcut.maxflow(g).flow_value
    op = torch.ops.torchcut.grid_pairs_csr
    caps = torch.zeros(4, 6, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="offsets: expected offsets above p"):
        op(caps, [2, 3], [0, -1, 1, 0])
    with pytest.raises(RuntimeError, match="offsets: expected distinct flat offsets"):
        op(caps, [2, 3], [0, 1, 0, 1])
    with pytest.raises(RuntimeError, match=r"caps: expected a contiguous int32 or int64 CPU tensor \[4, 6\]"):
        op(caps.float(), [2, 3], [0, 1, 1, 0])
    with pytest.raises(RuntimeError, match="shape: expected 2 or 3 dims"):
        op(caps, [6], [1, 1])


def test_float_from_grid():
    g = torchcut.GridGraph([[2.5, 0.0, 0.0]], [[0.0, 0.0, 1.25]], [[[1.5, 0.75, 0.0]]], ((0, 1),))
    f = FlowGraph.from_grid(g)
    assert f.is_float and f.scale == g.scale
    assert torchcut.maxflow(f).flow_value == pytest.approx(torchcut.maxflow(g).flow_value) == pytest.approx(0.75)


def test_tsukuba_crops(shared_data):
    for name, value in (("16x16", 50), ("32x32", 186)):
        path = shared_data / "maxflow" / "tsukuba_crops" / f"tsukuba_crop_{name}.max"
        if not path.exists():
            pytest.skip(f"{path} not found")
        g = torchcut.read_dimacs(path)
        assert torchcut.read_dimacs_solution(path.with_suffix(".sol")) == value
        r_csr = torchcut.maxflow(g, backend="reference", lattice=False)
        assert r_csr.flow_value == value and r_csr.verify()
        r = torchcut.maxflow(g, lattice=True)
        assert r.flow_value == value and r.verify()
        side = int(name.split("x")[0])
        assert g.lattice_shape() == (side, side) and r.stats["route"].startswith("grid")
        auto = torchcut.maxflow(g)  # on the CPU the compiled solver takes lattices this small as they are
        assert auto.flow_value == value and auto.verify() and torch.equal(auto.mask, r.mask)
        assert auto.stats["route"] == ("csr" if auto.stats["backend"] == "cpu" else r.stats["route"])


def test_cuda_fallback_warns_once(monkeypatch):
    """Without the CSR extension, 'auto' on a CUDA graph falls back to the reference with one warning."""
    import warnings

    from torchcut.solvers import cuda_csr
    from torchcut.solvers._backends import CSR

    monkeypatch.setattr(cuda_csr, "load_error", lambda: "nvcc not found")
    monkeypatch.setattr(CSR, "warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert CSR(torch.device("cuda"), "auto") is CSR.reference
        assert CSR(torch.device("cuda"), "auto") is CSR.reference
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "CUDA CSR extension unavailable (nvcc not found)" in msgs[0]
    with pytest.raises(RuntimeError, match="backend='cuda': the CUDA CSR extension is unavailable: nvcc not found"):
        CSR(torch.device("cuda"), "cuda")
