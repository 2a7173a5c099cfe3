"""DynamicFlowGraph: re-solving a FlowGraph after terminal changes from its last flow gives the flow and
the mask of a solve from scratch, with a certificate against the changed network."""

import numpy as np
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
    # every update from the last flow, deficits included (reference: repaired by a max-flow of the flow
    # back; cpu: by the kept search trees)
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
        assert r.verify() and r.stats["warm"]
        assert r.flow_value == ref.flow_value
        assert torch.equal(r.mask, ref.mask)
    assert d.stats["warm"] + d.stats["cold"] == 13 and d.stats["warm"] == 12
    assert torch.equal(graph.source, random_graph(torch.Generator().manual_seed(seed)).source)  # input untouched


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_deficits_are_repaired_and_the_flow_certified(backend):
    # a chain 0 -> 1 -> 2 -> 3 carrying 5 units; then the source of node 0 drops to 1: four units must go back
    graph = torchcut.FlowGraph.from_edges([0, 1, 2], [1, 2, 3], [5, 5, 5], source=[5, 0, 0, 0], sink=[0, 0, 0, 9])
    d = DynamicFlowGraph(graph, backend=backend)
    assert d.maxflow().flow_value == 5
    d.set_terminals(source=[1], nodes=[0])
    r = d.maxflow()
    assert r.flow_value == 1 and r.verify()
    assert r.stats["warm"] and r.stats["repaired"] == 1 and d.stats["repaired"] == 1 and d.stats["cold"] == 1
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
    with pytest.raises(ValueError, match=r"nodes: expected node ids in \[0, 3\), got -1"):
        d.set_terminals(sink=[1, 1], nodes=[0, -1])
    with pytest.raises(ValueError, match=r"nodes: expected each node at most once"):
        d.set_terminals(sink=[1, 1], nodes=[0, 0])
    with pytest.raises(ValueError, match=r"nodes: expected each node at most once"):
        d.set_terminals(sink=[1, 1, 1], nodes=[2, 1, 2])
    # the check's counts are cleared after a repeat: the same ids once each are accepted
    e = DynamicFlowGraph(graph)
    with pytest.raises(ValueError, match=r"nodes: expected each node at most once"):
        e.set_terminals(sink=[1, 1], nodes=[2, 2])
    e.set_terminals(sink=[1, 1], nodes=[2, 0])
    assert e.graph.sink.tolist() == [[1, 0, 1]] and graph.sink.tolist() == [[0, 0, 5]]
    # the checks are read together but reported in order: ids out of range before repeats and values
    with pytest.raises(ValueError, match=r"nodes: expected node ids in \[0, 3\), got 7"):
        e.set_terminals(sink=[-1, 1, 1], nodes=[7, 7, 0])
    with pytest.raises(ValueError, match=r"nodes: expected each node at most once"):
        e.set_terminals(source=[-2, 1], sink=[-1, 1], nodes=[1, 1])
    with pytest.raises(ValueError, match=r"source: expected non-negative capacities, got minimum -2"):
        e.set_terminals(source=[-2, 1], sink=[-1, 1], nodes=[1, 2])
    e.set_terminals(source=[4, 4, 4])  # and nothing of the failed calls is left: counts, capacities, sums
    assert e.graph.source.tolist() == [[4, 4, 4]] and e.graph.sink.tolist() == [[1, 0, 1]]
    assert e._terminal_total == 14 and e.maxflow().flow_value == torchcut.maxflow(e.graph).flow_value
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
    nodes = torch.arange(0, 200, 7).cuda()  # more source capacity leaves no deficit: from the last flow
    d.set_terminals(source=d.graph.source[0][nodes] + 5, nodes=nodes)
    r = d.maxflow()
    assert r.stats["warm"] and r.verify() and r.flow_value == torchcut.maxflow(d.graph, lattice=False).flow_value
    # a general graph re-solves from the last flow, or from scratch after a deficit (never repaired on CUDA)
    assert d.stats["warm"] + d.stats["deficit_scratch"] == 6 and d.stats["repaired"] == 0


@pytest.mark.cuda
def test_cuda_lattices_are_solved_from_scratch_by_the_grid_kernels():
    # a 4-connected 48 x 48 lattice on CUDA (more nodes than the host route takes): every stroke (object
    # strokes, then background strokes that leave deficits) solved from scratch through the grid kernels,
    # equal to the CPU solver
    H = W = 48
    gen = torch.Generator().manual_seed(5)
    ids = torch.arange(H * W).reshape(H, W)
    u = torch.cat([ids[:, :-1].reshape(-1), ids[:-1].reshape(-1)])
    v = torch.cat([ids[:, 1:].reshape(-1), ids[1:].reshape(-1)])
    w = torch.randint(1, 30, (u.numel(),), generator=gen)
    src = torch.randint(0, 40, (H * W,), generator=gen)
    snk = torch.randint(0, 40, (H * W,), generator=gen)
    graph = torchcut.FlowGraph.from_edges(u, v, w, w, source=src, sink=snk, num_nodes=H * W).to("cuda")
    assert graph.lattice_shape() == (H, W)
    d = DynamicFlowGraph(graph)
    assert d.maxflow().stats["route"].startswith("grid")
    for step in range(6):
        nodes = torch.randperm(H * W, generator=gen)[:40]
        value = 200 if step % 2 == 0 else 0
        d.set_terminals(source=torch.full((40,), value).cuda(), nodes=nodes.cuda())
        r = d.maxflow()
        ref = torchcut.maxflow(d.graph.to("cpu"), backend="cpu")
        assert r.verify() and r.flow_value == ref.flow_value and torch.equal(r.mask.cpu(), ref.mask)
        assert r.stats["route"].startswith("grid")
    assert d.stats["warm"] == 0 and d.stats["cold"] == 7


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


def _grid_tedge_script(mod, reuse, gen_seed=5, grow_at=None, big_at=None, mark=False):
    """An edge-list graph changed by ``add_grid_tedges`` (consecutive and scattered ids; marked only with
    ``mark``, which PyMaxflow's tree reuse needs), with an edge added before stroke ``grow_at`` and sink
    totals past int32 before stroke ``big_at``."""
    gen = torch.Generator().manual_seed(gen_seed)
    n = 12
    N = n * n
    G = mod.Graph[int]()
    ids = G.add_nodes(N)
    u = np.array([i for i in range(N) if (i + 1) % n] + list(range(N - n)), dtype=np.int64)
    v = np.array([i + 1 for i in range(N) if (i + 1) % n] + list(range(n, N)), dtype=np.int64)
    w = torch.randint(1, 9, (len(u),), generator=gen).numpy()
    G.add_edges(u, v, w, w)
    G.add_grid_tedges(
        ids, torch.randint(0, 6, (N,), generator=gen).numpy(), torch.randint(0, 6, (N,), generator=gen).numpy()
    )
    out = [(G.maxflow(), G.get_grid_segments(ids).tolist())]
    for stroke in range(6):
        if stroke == grow_at:
            G.add_edge(0, N - 1, 4, 4)
        if stroke == big_at:
            G.add_grid_tedges(np.array([3]), 0, 2**31 + 5)
        nodes = torch.randperm(N, generator=gen)[:9].numpy()
        caps = torch.randint(0, 25, (9,), generator=gen).numpy()
        G.add_grid_tedges(nodes, caps, 0) if stroke % 2 else G.add_grid_tedges(nodes, 0, caps)
        G.add_grid_tedges(ids[:1], 1, 0)  # consecutive ids too (a range)
        if mark:
            G.mark_grid_nodes(nodes)
            G.mark_grid_nodes(ids[:1])
            if stroke == big_at:
                G.mark_node(3)
        out.append((G.maxflow(reuse_trees=reuse), G.get_grid_segments(ids).tolist()))
    return out, G


@pytest.mark.parametrize("grow_at, big_at", [(None, None), (3, None), (None, 2)])
def test_compat_pymaxflow_reuse_from_grid_tedges_without_marks(grow_at, big_at):
    import torchcut.compat.pymaxflow as tmax

    assert tmax.REUSE_FLOW  # on by default
    ours, G = _grid_tedge_script(tmax, True, grow_at=grow_at, big_at=big_at)
    scratch, _ = _grid_tedge_script(tmax, False, grow_at=grow_at, big_at=big_at)
    assert ours == scratch
    assert G.last_result.verify()
    if grow_at is None and big_at is None:  # every stroke after the first re-solved from the kept state
        assert G._dynamic.stats["warm"] >= 5
    maxflow = pytest.importorskip("maxflow")
    theirs, _ = _grid_tedge_script(maxflow, True, grow_at=grow_at, big_at=big_at, mark=True)
    assert ours == theirs


def test_compat_pymaxflow_reuse_after_reset_solves_the_new_graph():
    import torchcut.compat.pymaxflow as tmax

    G = tmax.Graph[int]()
    G.add_nodes(2)
    G.add_edge(0, 1, 3, 0)
    G.add_tedge(0, 9, 0)
    G.add_tedge(1, 0, 9)
    assert G.maxflow() == 3 and G.maxflow(reuse_trees=True) == 3
    G.reset()  # the same counts of nodes and arcs, other capacities: no reuse of the old network
    G.add_nodes(2)
    G.add_edge(0, 1, 5, 0)
    G.add_tedge(0, 9, 0)
    G.add_tedge(1, 0, 9)
    assert G.maxflow(reuse_trees=True) == 5
    G.add_tedge(1, 2, 0)  # node 1: source 2, sink 9, netted to sink 7 and a constant 2
    G.mark_node(1)
    assert G.maxflow(reuse_trees=True) == 7 and G.get_segment(1) == 1
    with pytest.raises(ValueError, match=r"i: expected a node id in \[0, 2\)"):
        G.mark_node(2)


def test_compat_pymaxflow_stroke_path_results_and_graph():
    # strokes re-solved from the kept state touch the changed nodes alone: the result, the constant and
    # the DynamicFlowGraph's graph are made when asked, and equal those of a network built from scratch
    import torchcut.compat.pymaxflow as tmax

    ours, G = _grid_tedge_script(tmax, True, gen_seed=9)
    d = G._dynamic
    assert d._stale and G._last_raw is not None  # nothing over all nodes yet
    r = G.last_result
    assert G._last_raw is None and r.verify() and r.stats["warm"]
    built, constant, _ = G.build()
    assert torch.equal(d.graph.source, built.source) and torch.equal(d.graph.sink, built.sink)
    assert r.flow_value + constant == ours[-1][0] == torchcut.maxflow(built).flow_value + constant
    assert torch.equal(~r.mask, G._seg)
    # read after more terminal calls, the result stays that of the network it solved
    ours2, G2 = _grid_tedge_script(tmax, True, gen_seed=9)
    G2.add_tedge(5, 40, 0)
    r2 = G2.last_result
    assert r2.verify() and r2.flow_value == r.flow_value


def test_compat_pymaxflow_stroke_path_overflow_changes_nothing():
    import torchcut.compat.pymaxflow as tmax

    G = tmax.Graph[int]()
    G.add_nodes(3)
    G.add_edge(0, 1, 4, 4)
    G.add_edge(1, 2, 4, 4)
    G.add_tedge(0, 9, 0)
    G.add_tedge(2, 0, 9)
    assert G.maxflow() == 4 and G.maxflow(reuse_trees=True) == 4  # the kept state
    G.add_tedge(2, 3, 0)  # node 2: source 3, sink 9: netted to sink 6 and a constant 3
    assert G.maxflow(reuse_trees=True) == 7 and G._dynamic.stats["warm"] >= 1
    G.add_tedge(0, 2**62, 0)
    with pytest.raises(ValueError, match=r"FlowGraph"):
        G.maxflow(reuse_trees=True)
    G.add_tedge(0, -(2**62), 0)  # back to what it was: the failed call left the constant and sums as they were
    G.add_tedge(2, 0, 3)
    assert G.maxflow(reuse_trees=True) == 7 == G.maxflow()
    assert G.last_result.verify()


def sink_reach(r):
    """The nodes that reach the sink in the residual network of result ``r`` (a search back from the sink
    residuals, written here without the solver), as a bool tensor."""
    g = r.graph
    N = g.num_nodes
    reach = (g.sink[0].long() - r.sink_flow[0]) > 0
    tail, head, res = g.tail.tolist(), g.head.tolist(), r.residual.tolist()
    into = [[] for _ in range(N)]  # into[y]: the nodes x with a residual arc x -> y
    for x, y, c in zip(tail, head, res):
        if c > 0:
            into[y].append(x)
    queue = torch.nonzero(reach).flatten().tolist()
    seen = reach.tolist()
    while queue:
        y = queue.pop()
        for x in into[y]:
            if not seen[x]:
                seen[x] = True
                queue.append(x)
    return torch.tensor(seen, dtype=torch.bool)


def stroke_steps(g, N, steps, base_src, base_snk):
    """Random strokes: each a few calls of set_terminals (hard object or background seeds, erasures back to
    the first capacities, random values; sometimes every node at once), as (source, sink, nodes) tuples."""
    for _ in range(steps):
        calls = []
        for _ in range(int(torch.randint(1, 3, (1,), generator=g))):
            k = int(torch.randint(1, N + 1, (1,), generator=g))
            idx = torch.randperm(N, generator=g)[:k]
            kind = int(torch.randint(0, 5, (1,), generator=g))
            if kind == 0:  # object seeds
                calls.append((torch.full((k,), 100), torch.zeros(k, dtype=torch.int64), idx))
            elif kind == 1:  # background seeds: their source drops (deficits where flow left them)
                calls.append((torch.zeros(k, dtype=torch.int64), torch.full((k,), 100), idx))
            elif kind == 2:  # erased: the first capacities back
                calls.append((base_src[idx], base_snk[idx], idx))
            elif kind == 3:
                calls.append((torch.randint(0, 15, (k,), generator=g), torch.randint(0, 15, (k,), generator=g), idx))
            else:  # every node, most of them unchanged
                src, snk = base_src.clone(), base_snk.clone()
                src[idx] = torch.randint(0, 15, (k,), generator=g)
                calls.append((src, snk, None))
        yield calls


def stroke_problem(seed, nodes):
    """A random graph for stroke sequences: (generator, graph, its source and its sink as int64 copies)."""
    g = torch.Generator().manual_seed(seed)
    graph = random_graph(g, N=nodes, M=3 * nodes)
    return g, graph, graph.source[0].clone(), graph.sink[0].long()


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nodes=st.integers(2, 60), steps=st.integers(1, 8))
def test_kept_trees_equal_scratch_over_stroke_sequences(seed, nodes, steps):
    # the CPU re-solve from the kept search trees, over strokes that add seeds, erase them and leave
    # deficits: every flow and mask that of a solve from scratch, certified against the changed network,
    # the mask the nodes that cannot reach the sink (searched here independently), with no fallback
    g, graph, base_src, base_snk = stroke_problem(seed, nodes)
    d = DynamicFlowGraph(graph, backend="cpu")
    d.maxflow()
    held = []
    for calls in stroke_steps(g, nodes, steps, base_src, base_snk):
        for src, snk, idx in calls:
            d.set_terminals(source=src, sink=snk, nodes=idx)
        r = d.maxflow()
        ref = torchcut.maxflow(d.graph, backend="cpu")
        assert r.stats["warm"] and r.verify() and r.flow_value == ref.flow_value
        assert torch.equal(r.mask, ref.mask) and torch.equal(r.mask, ~sink_reach(r))
        if len(held) < 2 or torch.rand(1, generator=g) < 0.3:  # some results kept, the others let go
            held.append((r, r.residual.clone(), r.mask.clone(), r.sink_flow.clone(), ref.flow_value))
    for r, res, mask, flow, value in held:  # later solves left the results they returned as they were
        assert torch.equal(r.residual, res) and torch.equal(r.mask, mask) and torch.equal(r.sink_flow, flow)
        assert r.flow_value == value and r.verify()
    assert torch.equal(graph.source[0], base_src)  # the input untouched


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nodes=st.integers(2, 50), steps=st.integers(1, 8))
def test_kept_state_counts_then_result_equal_update(seed, nodes, steps):
    # update_counts (the re-solve without its output tensors) then result() and sink_side(), asked for
    # after some strokes and not others: the counters, info, mask, residuals and flows of update() on a
    # twin state, and the sink side the mask's complement. A third twin moves to the int64 node records
    # and arc pairs of graphs too large for int32 indices (widen) before some stroke: the same again.
    g, graph, base_src, base_snk = stroke_problem(seed, nodes)
    args = (graph.row_ptr, graph.head, graph.rev, graph.caps, base_src, base_snk)
    full, lazy, wide = (torch.classes.torchcut.CsrState(*args) for _ in range(3))
    full.solve()
    lazy.solve()
    wide.solve()
    widen_at = seed % (steps + 1)  # steps: never
    S, T = base_src.clone(), base_snk.clone()
    for step, calls in enumerate(stroke_steps(g, nodes, steps, base_src, base_snk)):
        for src, snk, idx in calls:
            if idx is None:
                S, T = src.clone(), snk.clone()
            else:
                S[idx], T[idx] = src, snk
        ids = torch.arange(nodes)
        mask, res, flow, stats, info = full.update(ids, S.clone(), T.clone())
        stats2, info2 = lazy.update_counts(ids, S.clone(), T.clone())
        assert torch.equal(stats, stats2) and torch.equal(info, info2)
        assert torch.equal(lazy.sink_side(), ~mask)
        if step == widen_at:
            wide.widen()
        stats3, info3 = wide.update_counts(ids, S.clone(), T.clone())
        assert torch.equal(stats, stats3) and torch.equal(info, info3) and torch.equal(wide.sink_side(), ~mask)
        if torch.rand(1, generator=g) < 0.5:
            m2, r2, f2 = lazy.result()
            assert torch.equal(m2, mask) and torch.equal(r2, res) and torch.equal(f2, flow)
    for state in (lazy, wide):
        m2, r2, f2 = state.result()
        assert torch.equal(m2, mask) and torch.equal(r2, res) and torch.equal(f2, flow)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nodes=st.integers(2, 50), steps=st.integers(1, 8))
def test_kept_state_plan_nets_totals_as_numpy_does(seed, nodes, steps):
    # compat.pymaxflow's stroke path: plan() of raw terminal totals (ids repeated, some totals moved by
    # the same amount on both sides, some plans dropped) then update_planned(): the netted constant, the
    # capacities' sum and the largest sink capacity of numpy's netting, and the counters, info and sink
    # side of update_counts() with the netted capacities on a twin state
    g, graph, base_src, base_snk = stroke_problem(seed, nodes)
    rng = np.random.default_rng(seed)
    common = torch.minimum(base_src, base_snk)
    base_src, base_snk = base_src - common, base_snk - common  # the state is made from netted capacities
    src = base_src.numpy() + rng.integers(0, 4, nodes)  # totals: those plus a common part
    snk = base_snk.numpy() + (src - base_src.numpy())
    args = (graph.row_ptr, graph.head, graph.rev, graph.caps, base_src, base_snk)
    planned, twin = (torch.classes.torchcut.CsrState(*args) for _ in range(2))
    planned.solve()
    twin.solve()
    low = np.minimum(src, snk)
    assert planned.plan(torch.empty(0, dtype=torch.int64), torch.from_numpy(src), torch.from_numpy(snk), True) == (
        int(low.sum()),
        float(np.abs(src - snk).sum()),
        -1,
    )
    for _ in range(steps):
        ids = rng.integers(0, nodes, int(rng.integers(1, 2 * nodes)))  # repeats
        new_src, new_snk = src.copy(), snk.copy()
        new_src[ids] += rng.integers(-3, 40, ids.size)
        new_snk[ids] += rng.integers(-3, 40, ids.size)
        both = ids[: ids.size // 3]
        new_src[both] += 5  # the same on both sides: the constant changes, the capacities do not
        new_snk[both] += 5
        u = ids[np.sort(np.unique(ids, return_index=True)[1])]  # each once, in the order first given
        new_low = np.minimum(new_src, new_snk)
        s, t = new_src - new_low, new_snk - new_low
        expected = (
            int((new_low[u] - low[u]).sum()),
            float(((s[u] + t[u]) - np.abs(src[u] - snk[u])).sum()),
            int(t[u].max()),
        )
        ids_t = torch.from_numpy(ids)
        assert planned.plan(ids_t, torch.from_numpy(new_src), torch.from_numpy(new_snk), False) == expected
        if rng.random() < 0.3:  # dropped: nothing changed
            continue
        stats, info = planned.update_planned()
        stats2, info2 = twin.update_counts(torch.from_numpy(u), torch.from_numpy(s[u]), torch.from_numpy(t[u]))
        assert torch.equal(stats, stats2) and torch.equal(info, info2)
        assert torch.equal(planned.sink_side(), twin.sink_side())
        src, snk, low = new_src, new_snk, new_low
    for a, b in zip(planned.result(), twin.result()):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(planned.terminals(), twin.terminals()))


def test_kept_trees_search_from_the_changed_nodes():
    # a 40 x 40 lattice solved, then a few terminals moved: the search grows from them, not over the graph;
    # then a stroke that leaves deficits (the flow into its nodes was passed on)
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
    assert first.stats["search"] == "kept trees" and not first.stats["warm"]
    d.set_terminals(source=[50, 50], sink=[0, 0], nodes=[ids[5, 30], ids[6, 30]])
    r = d.maxflow()
    ref = torchcut.maxflow(d.graph, backend="cpu")
    assert r.flow_value == ref.flow_value > first.flow_value and torch.equal(r.mask, ref.mask) and r.verify()
    assert r.stats["warm"] and r.stats["growths"] < H * W // 10
    # the source side's column 19 sends its flow on to column 20: as background seeds, those nodes have deficits
    col = ids[:, 19]
    d.set_terminals(source=0, sink=100, nodes=col)
    r = d.maxflow()
    ref = torchcut.maxflow(d.graph, backend="cpu")
    assert r.stats["warm"] and r.stats["repaired"] == H and r.verify()
    assert r.flow_value == ref.flow_value and torch.equal(r.mask, ref.mask)


def test_kept_trees_give_pymaxflows_flows():
    # strokes on a 30 x 30 grid, object and background in turn (background strokes leave deficits), and
    # erasures: our flows equal PyMaxflow's maxflow(reuse_trees=True) after the same changes
    maxflow = pytest.importorskip("maxflow")
    g = torch.Generator().manual_seed(5)
    H = W = 30
    ids = torch.arange(H * W).reshape(H, W)
    u = torch.cat([ids[:, :-1].flatten(), ids[:-1].flatten()])
    v = torch.cat([ids[:, 1:].flatten(), ids[1:].flatten()])
    w = torch.randint(1, 20, u.shape, generator=g)
    S = torch.randint(0, 30, (H * W,), generator=g)
    T = torch.randint(0, 30, (H * W,), generator=g)
    d = DynamicFlowGraph(torchcut.FlowGraph.from_edges(u, v, w, w, source=S, sink=T), backend="cpu")
    pm = maxflow.Graph[int]()
    pm.add_nodes(H * W)
    pm.add_edges(u.numpy().astype("int32"), v.numpy().astype("int32"), w.numpy(), w.numpy())
    pm.add_grid_tedges(ids.flatten().numpy(), S.numpy(), T.numpy())
    assert d.maxflow().flow_value == pm.maxflow()
    S0, T0 = S.clone(), T.clone()
    for k in range(8):
        y, x = torch.randint(3, H - 3, (2,), generator=g).tolist()
        nodes = ids[y - 3 : y + 3, x - 3 : x + 3].flatten()
        newS, newT = S.clone(), T.clone()
        if k % 3 == 2:  # erased
            newS[nodes], newT[nodes] = S0[nodes], T0[nodes]
        elif k % 3 == 0:
            newS[nodes], newT[nodes] = 1000, 0
        else:
            newS[nodes], newT[nodes] = 0, 1000
        d.set_terminals(source=newS[nodes], sink=newT[nodes], nodes=nodes)
        pm.add_grid_tedges(nodes.numpy(), (newS - S)[nodes].numpy(), (newT - T)[nodes].numpy())
        for i in nodes.tolist():
            pm.mark_node(i)
        S, T = newS, newT
        r = d.maxflow()
        assert r.stats["warm"] and r.verify() and r.flow_value == pm.maxflow(reuse_trees=True)
        segments = torch.tensor([pm.get_segment(i) for i in range(H * W)], dtype=torch.bool)
        assert torch.equal(r.mask, torchcut.maxflow(d.graph, backend="cpu").mask)
        # PyMaxflow's sink segment is its T tree: the nodes that reach the sink, as ours
        assert torch.equal(r.mask, ~segments)
