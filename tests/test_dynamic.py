"""DynamicFlowGraph: re-solving a FlowGraph after terminal changes from its last flow gives the flow and
the mask of a solve from scratch, with a certificate against the changed network."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchcut
from torchcut.solvers.dynamic import DynamicFlowGraph


def random_graph(g, N=40, M=120, integer=True):
    u = torch.randint(0, N, (M,), generator=g)
    v = (u + torch.randint(1, N, (M,), generator=g)) % N
    cap = torch.randint(0, 10, (M,), generator=g)
    rev = torch.randint(0, 10, (M,), generator=g)
    src = torch.randint(0, 12, (N,), generator=g) * (torch.rand(N, generator=g) < 0.4)
    snk = torch.randint(0, 12, (N,), generator=g) * (torch.rand(N, generator=g) < 0.4)
    if not integer:
        cap, rev, src, snk = (x.to(torch.float64) * 0.37 for x in (cap, rev, src, snk))
    return torchcut.FlowGraph.from_edges(u, v, cap, rev, source=src, sink=snk, num_nodes=N)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("seed", range(6))
def test_warm_solves_equal_solves_from_scratch(seed, backend):
    # reference: every update from the last flow (deficits repaired); cpu: from the last flow unless it
    # leaves a deficit, then from scratch (the faster way there)
    g = torch.Generator().manual_seed(seed)
    graph = random_graph(g)
    d = DynamicFlowGraph(graph, backend=backend)
    r = d.maxflow()
    assert r.verify() and r.flow_value == torchcut.maxflow(graph).flow_value
    N = graph.num_nodes
    for step in range(12):
        k = int(torch.randint(1, 8, (1,), generator=g))
        nodes = torch.randperm(N, generator=g)[:k]
        src = torch.randint(0, 15, (k,), generator=g) * (torch.rand(k, generator=g) < 0.5)
        snk = torch.randint(0, 15, (k,), generator=g) * (torch.rand(k, generator=g) < 0.5)
        d.set_terminals(source=src, sink=snk, nodes=nodes)
        assert torch.equal(d.graph.source[0, nodes], src) and torch.equal(d.graph.sink[0, nodes].long(), snk)
        r = d.maxflow()
        ref = torchcut.maxflow(d.graph, backend="cpu")
        assert r.verify() and (r.stats["warm"] or backend == "cpu")
        assert r.flow_value == ref.flow_value
        assert torch.equal(r.mask, ref.mask)
    assert d.stats["warm"] + d.stats["cold"] == 13 and d.stats["warm"] >= (12 if backend == "reference" else 1)
    assert torch.equal(graph.source, random_graph(torch.Generator().manual_seed(seed)).source)  # input untouched


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_deficits_are_repaired_and_the_flow_certified(backend):
    # a chain 0 -> 1 -> 2 -> 3 carrying 5 units; then the source of node 0 drops to 1: four units must go back
    # (the reference backend repairs the last flow; the compiled CPU solver solves from scratch instead)
    graph = torchcut.FlowGraph.from_edges([0, 1, 2], [1, 2, 3], [5, 5, 5], source=[5, 0, 0, 0], sink=[0, 0, 0, 9])
    d = DynamicFlowGraph(graph, backend=backend)
    assert d.maxflow().flow_value == 5
    d.set_terminals(source=[1], nodes=[0])
    r = d.maxflow()
    assert r.flow_value == 1 and r.verify()
    if backend == "reference":
        assert r.stats["warm"] and r.stats["repaired"] == 1 and d.stats["repaired"] == 1
    else:
        assert not r.stats["warm"] and d.stats["cold"] == 2 and d.stats["repaired"] == 0
    # and the whole source capacity moved to the middle of the chain
    d.set_terminals(source=[0, 0, 7, 0])
    r = d.maxflow()
    assert r.flow_value == 5 and r.verify() and r.mask.tolist() == [True, True, True, False]
    assert torch.equal(r.mask, torchcut.maxflow(d.graph).mask)


def test_float_graphs_and_warm_off_give_the_same_results():
    g = torch.Generator().manual_seed(11)
    graph = random_graph(g, integer=False)
    a, b = DynamicFlowGraph(graph), DynamicFlowGraph(graph, warm=False)
    for d in (a, b):
        d.maxflow()
    for step in range(5):
        nodes = torch.randperm(graph.num_nodes, generator=g)[:5]
        src = torch.rand(5, generator=g, dtype=torch.float64) * 3
        for d in (a, b):
            d.set_terminals(source=src, nodes=nodes)
        ra, rb = a.maxflow(), b.maxflow()
        assert ra.flow_value == rb.flow_value and torch.equal(ra.mask, rb.mask) and ra.verify()
    assert a.stats["warm"] + a.stats["cold"] == 6 and b.stats["warm"] == 0 and b.stats["cold"] == 6


def test_bad_updates_are_named():
    graph = torchcut.FlowGraph.from_edges([0, 1], [1, 2], [4, 3], source=[5, 0, 0], sink=[0, 0, 5])
    d = DynamicFlowGraph(graph)
    with pytest.raises(ValueError, match=r"source: expected shape \(3,\) \(one value per node\)"):
        d.set_terminals(source=[1, 2])
    with pytest.raises(ValueError, match=r"sink: expected shape \(2,\) \(one value per node in nodes\)"):
        d.set_terminals(sink=[1, 2, 3], nodes=[0, 1])
    with pytest.raises(ValueError, match=r"sink: expected non-negative capacities, got minimum -1"):
        d.set_terminals(sink=[-1, 0, 0])
    with pytest.raises(ValueError, match=r"nodes: expected node ids in \[0, 3\), got 3"):
        d.set_terminals(sink=[1], nodes=[3])
    with pytest.raises(ValueError, match=r"nodes: expected each node at most once"):
        d.set_terminals(sink=[1, 1], nodes=[0, 0])
    with pytest.raises(TypeError, match=r"source: expected integer capacities for an integer graph"):
        d.set_terminals(source=[0.5, 0, 0])
    with pytest.raises(ValueError, match=r"source: expected a tensor on cpu \(the graph's device\), got one on meta"):
        d.set_terminals(source=torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match=r"sink: expected capacities up to 2147483647"):
        d.set_terminals(sink=[2**31, 0, 0])
    with pytest.raises(TypeError, match=r"graph: expected a torchcut.FlowGraph"):
        DynamicFlowGraph(torchcut.GridGraph([[1]], [[1]], [[[0]]], [(0, 1)]))
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        DynamicFlowGraph(graph, backend="fast")
    assert d.graph.source.tolist() == [[5, 0, 0]]  # failed updates changed nothing
    assert d.maxflow().flow_value == 3


@pytest.mark.cuda
def test_cuda_warm_solves_equal_solves_from_scratch():
    g = torch.Generator().manual_seed(3)
    graph = random_graph(g, N=200, M=800).to("cuda")
    d = DynamicFlowGraph(graph)
    d.maxflow()
    for step in range(5):
        nodes = torch.randperm(200, generator=g)[:10].cuda()
        d.set_terminals(source=torch.randint(0, 15, (10,), generator=g).cuda(), nodes=nodes)
        r = d.maxflow()
        ref = torchcut.maxflow(d.graph, lattice=False)
        assert r.verify() and r.flow_value == ref.flow_value and torch.equal(r.mask, ref.mask)


def _stroke_script(mod, reuse):
    """Interactive segmentation on an edge-list graph: solve, then strokes that add terminal capacity."""
    gen = torch.Generator().manual_seed(21)
    N = 150
    G = mod.Graph[int]()
    G.add_nodes(N)
    for _ in range(500):
        i, j = torch.randint(0, N, (2,), generator=gen).tolist()
        if i != j:
            G.add_edge(
                i, j, int(torch.randint(0, 9, (1,), generator=gen)), int(torch.randint(0, 9, (1,), generator=gen))
            )
    for i in range(N):
        G.add_tedge(i, int(torch.randint(0, 8, (1,), generator=gen)), int(torch.randint(0, 8, (1,), generator=gen)))
    out = [(G.maxflow(), [G.get_segment(i) for i in range(N)])]
    for stroke in range(6):
        nodes = torch.randperm(N, generator=gen)[:10].tolist()
        for i in nodes:
            G.add_tedge(i, 0, 30) if stroke % 2 else G.add_tedge(i, 30, 0)
            G.mark_node(i)
        out.append((G.maxflow(reuse_trees=reuse), [G.get_segment(i) for i in range(N)]))
    return out, G


def test_compat_pymaxflow_reuse_trees_gives_pymaxflows_flows_and_segments(monkeypatch):
    import torchcut.compat.pymaxflow as tmax

    monkeypatch.setattr(tmax, "REUSE_FLOW", True)

    ours, G = _stroke_script(tmax, True)
    d = G._dynamic  # every stroke re-solved from the last flow, or from scratch after a deficit
    assert d is not None and d.stats["warm"] + d.stats["cold"] == 6 and d.stats["warm"] >= 1
    scratch, _ = _stroke_script(tmax, False)
    assert ours == scratch
    assert G.last_result.verify()
    maxflow = pytest.importorskip("maxflow")
    theirs, _ = _stroke_script(maxflow, True)
    assert ours == theirs


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nodes=st.integers(2, 60), steps=st.integers(1, 6))
def test_native_resolve_equals_scratch(seed, nodes, steps):
    # the CPU re-solve in one op (the re-fit, then the search from the changed nodes, checked by a search
    # back from every sink residual): flows and canonical masks of a solve from scratch, certified
    g = torch.Generator().manual_seed(seed)
    graph = random_graph(g, N=nodes, M=3 * nodes)
    d = DynamicFlowGraph(graph, backend="cpu")
    d.maxflow()
    for _ in range(steps):
        k = int(torch.randint(1, nodes + 1, (1,), generator=g))
        idx = torch.randperm(nodes, generator=g)[:k]
        d.set_terminals(
            source=torch.randint(0, 15, (k,), generator=g), sink=torch.randint(0, 15, (k,), generator=g), nodes=idx
        )
        r = d.maxflow()
        ref = torchcut.maxflow(d.graph, backend="cpu")
        assert r.verify() and r.flow_value == ref.flow_value and torch.equal(r.mask, ref.mask)


def test_native_resolve_searches_from_the_changed_nodes():
    # a 40 x 40 lattice solved, then a few terminals moved: the search grows from them, not over the graph
    H = W = 40
    ids = torch.arange(H * W).reshape(H, W)
    u = torch.cat([ids[:, :-1].flatten(), ids[:-1].flatten()])
    v = torch.cat([ids[:, 1:].flatten(), ids[1:].flatten()])
    cap = torch.full(u.shape, 4)
    src = torch.zeros(H * W, dtype=torch.int64)
    snk = torch.zeros(H * W, dtype=torch.int64)
    src[ids[:, :20].flatten()] = 3
    snk[ids[:, 20:].flatten()] = 3
    d = DynamicFlowGraph(torchcut.FlowGraph.from_edges(u, v, cap, cap, source=src, sink=snk), backend="cpu")
    first = d.maxflow()
    d.set_terminals(source=[50, 50], sink=[0, 0], nodes=[ids[5, 30], ids[6, 30]])
    r = d.maxflow()
    ref = torchcut.maxflow(d.graph, backend="cpu")
    assert r.flow_value == ref.flow_value > first.flow_value and torch.equal(r.mask, ref.mask) and r.verify()
    assert r.stats["search"] == "from the changed nodes" and r.stats["growths"] < H * W // 10
    # the op's schema and fake agree (torch.compile traces around it)
    g = d.graph
    c = d._state[0].clone()
    changed = torch.zeros(H * W, dtype=torch.bool)
    torch.library.opcheck(
        torch.ops.torchcut.csr_resolve.default,
        (g.row_ptr, g.head, g.rev, g.caps, c, g.source[0], g.sink[0].to(g.caps.dtype), changed),
        test_utils=("test_schema", "test_faketensor"),
    )
