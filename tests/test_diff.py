"""Gradients through cuts: the flow value (torchcut.diff.flow_value), cut_mask, cut_labels, refine."""

import itertools

import pytest
import torch

import torchcut
from torchcut.diff import flow_value


# ---------------------------------------------------------------------------------------------- oracles
def _arcs(shape, offsets):
    """(p, q, k) for every arc pair p -> p + offsets[k] inside the grid (p, q as coordinate tuples)."""
    for p in itertools.product(*(range(n) for n in shape)):
        for k, o in enumerate(offsets):
            q = tuple(a + b for a, b in zip(p, o))
            if all(0 <= a < n for a, n in zip(q, shape)):
                yield p, q, k


def brute_min_cut(src, snk, edges, rev, offsets):
    src, snk, edges, rev = (t.detach() for t in (src, snk, edges, rev))
    """Minimum cut of a tiny unbatched grid by enumeration: (value, mask, gap to the second best cut)."""
    shape = tuple(src.shape)
    nodes = list(itertools.product(*(range(n) for n in shape)))
    arcs = list(_arcs(shape, offsets))
    best = []
    for bits in range(1 << len(nodes)):
        side = {p: bool(bits >> i & 1) for i, p in enumerate(nodes)}
        c = sum(float(snk[p]) if side[p] else float(src[p]) for p in nodes)
        for p, q, k in arcs:
            if side[p] and not side[q]:
                c += float(edges[k][p])
            if side[q] and not side[p]:
                c += float(rev[k][p])
        best.append((c, bits))
    best.sort()
    c, bits = best[0]
    mask = torch.tensor([bool(bits >> i & 1) for i in range(len(nodes))]).view(shape)
    return c, mask, best[1][0] - c


def cut_indicator(mask, offsets):
    """Gradients of the cut capacity at ``mask`` (loops over arcs): (d source, d sink, d edges, d reverse)."""
    shape = tuple(mask.shape)
    d_src = (~mask).double()
    d_snk = mask.double()
    d_e = torch.zeros((len(offsets),) + shape, dtype=torch.float64)
    d_r = torch.zeros_like(d_e)
    for p, q, k in _arcs(shape, offsets):
        d_e[k][p] = float(mask[p] and not mask[q])
        d_r[k][p] = float(mask[q] and not mask[p])
    return d_src, d_snk, d_e, d_r


def dyadic(gen, shape, low=0, high=1024):
    """Random capacities that are multiples of 1/256 (exact once quantised with scale 2**20)."""
    return torch.randint(low, high, shape, generator=gen).double() / 256


def grid_case(seed, shape, connectivity, zero_frac=0.3):
    gen = torch.Generator().manual_seed(seed)
    offsets = torchcut.grid_offsets(len(shape), connectivity)
    K = len(offsets)
    caps = [dyadic(gen, shape), dyadic(gen, shape), dyadic(gen, (K,) + shape, high=512),
            dyadic(gen, (K,) + shape, high=512)]
    caps[0] = caps[0] * (torch.rand(shape, generator=gen) > zero_frac)
    caps[1] = caps[1] * (torch.rand(shape, generator=gen) > zero_frac)
    return [c.requires_grad_() for c in caps], offsets


# ---------------------------------------------------------------------------------------------- flow value
@pytest.mark.parametrize("shape,connectivity,seed", [((2, 3), 4, 0), ((3, 3), 8, 1), ((2, 2, 2), 26, 2),
                                                     ((1, 7), 4, 3)])
def test_flow_value_gradient_is_the_unique_minimum_cut(shape, connectivity, seed):
    (src, snk, e, r), offsets = grid_case(seed, shape, connectivity)
    value, mask, gap = brute_min_cut(src, snk, e, r, offsets)
    assert gap > 1e-3  # the minimum cut is unique: the gradient is defined
    res = torchcut.maxflow(torchcut.GridGraph(src, snk, e, offsets, r, scale=2.0**20))
    v = res.flow_value
    assert isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == torch.float64
    assert v.item() == value
    assert torch.equal(res.mask, mask)
    v.backward()
    want = cut_indicator(mask, offsets)
    for got, exp in zip((src.grad, snk.grad, e.grad, r.grad), want):
        torch.testing.assert_close(got, exp, rtol=0, atol=0)
    # central finite differences of the solver's flow value agree on every capacity
    h = 2.0**-12
    with torch.no_grad():
        caps = [t.detach() for t in (src, snk, e, r)]
        for i, t in enumerate(caps):
            for j in range(t.numel()):
                vals, at = [], []
                for sgn in (1, -1):
                    c = [x.clone() for x in caps]
                    c[i].view(-1)[j] += sgn * h
                    c[i].clamp_(min=0)  # one-sided at a zero capacity
                    at.append(float(c[i].view(-1)[j]))
                    vals.append(torchcut.maxflow(torchcut.GridGraph(*c[:3], offsets, c[3], scale=2.0**20)).flow_value)
                fd = (vals[0] - vals[1]) / (at[0] - at[1])
                assert fd == pytest.approx(float(want[i].view(-1)[j]), abs=1e-9), (i, j)


def test_flow_value_gradcheck_float64():
    (src, snk, e, r), offsets = grid_case(5, (2, 3), 4, zero_frac=0.0)
    assert brute_min_cut(src, snk, e, r, offsets)[2] > 1e-2

    def f(s, t, ed, rv):
        return torchcut.maxflow(torchcut.GridGraph(s, t, ed, offsets, rv, scale=2.0**20)).flow_value

    assert torch.autograd.gradcheck(f, (src, snk, e, r), eps=2.0**-12, atol=1e-9, rtol=0)


def test_flow_value_batched_items_get_their_own_cuts():
    cases = [grid_case(s, (2, 3), 4) for s in (10, 11, 12)]
    offsets = cases[0][1]
    leaves = [torch.stack([c[0][i].detach() for c in cases]).requires_grad_() for i in range(4)]
    src, snk, e, r = leaves
    # edges and reverse are [K, B, *shape]
    e_kb, r_kb = e.transpose(0, 1), r.transpose(0, 1)
    v = torchcut.maxflow(torchcut.GridGraph(src, snk, e_kb, offsets, r_kb, scale=2.0**20)).flow_value
    assert v.shape == (3,)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    (v * weights).sum().backward()
    for b, (caps, _) in enumerate(cases):
        value, mask, gap = brute_min_cut(*caps, offsets)
        assert gap > 1e-3 and v[b].item() == value
        for got, exp in zip((src.grad[b], snk.grad[b], e.grad[b], r.grad[b]), cut_indicator(mask, offsets)):
            torch.testing.assert_close(got, weights[b] * exp, rtol=0, atol=0)


def test_flow_value_symmetric_edges_and_edge_lists():
    (src, snk, e, _), offsets = grid_case(7, (3, 3), 4)
    value, mask, gap = brute_min_cut(src, snk, e, e, offsets)
    assert gap > 1e-3
    parts = [e[k].detach().clone().requires_grad_() for k in range(len(offsets))]
    for edges in (e, parts):  # one tensor, or one tensor per offset
        v = torchcut.maxflow(torchcut.GridGraph(src, snk, edges, offsets, scale=2.0**20)).flow_value
        assert v.item() == value
        v.backward()
    d_src, d_snk, d_e, d_r = cut_indicator(mask, offsets)
    torch.testing.assert_close(e.grad, d_e + d_r, rtol=0, atol=0)
    torch.testing.assert_close(torch.stack([p.grad for p in parts]), d_e + d_r, rtol=0, atol=0)
    torch.testing.assert_close(src.grad, 2 * d_src, rtol=0, atol=0)  # two backward passes accumulated


def test_flow_value_float32_mixed_with_integer_capacities():
    src = torch.tensor([[3.0, 0.0, 1.0]], requires_grad=True)
    snk = torch.tensor([[0, 0, 4]])  # integers: no gradient, the graph is still a float graph
    e = torch.tensor([[[2.0, 1.0, 0.0]], [[0.0, 0.0, 0.0]]])
    v = torchcut.maxflow(torchcut.GridGraph(src, snk, e, torchcut.grid_offsets(2, 4))).flow_value
    assert v.dtype == torch.float32 and v.item() == pytest.approx(2.0)
    v.backward()
    # the one minimum cut {0, 1} | {2}: arc 1 -> 2 (capacity 1) and source -> 2 (capacity 1)
    assert src.grad.tolist() == [[0.0, 0.0, 1.0]]


def test_flow_value_stays_a_number_without_grad():
    src = torch.tensor([[3.0, 0.0]], requires_grad=True)
    args = (src, torch.tensor([[0.0, 2.5]]), torch.tensor([[[1.5, 0.0]], [[0.0, 0.0]]]), torchcut.grid_offsets(2, 4))
    with torch.no_grad():
        g = torchcut.GridGraph(*args)
    assert torchcut.maxflow(g).flow_value == 1.5  # built without grad: a float
    r = torchcut.maxflow(torchcut.GridGraph(*args))
    with torch.no_grad():
        assert r.flow_value == 1.5  # read without grad: a float
    assert isinstance(r.flow_value, torch.Tensor)
    r2 = torchcut.maxflow(torchcut.GridGraph(src.detach(), *args[1:]))
    assert r2.flow_value == 1.5
    with pytest.raises(ValueError, match="result: expected the solve of a graph built .* integer capacities"):
        flow_value(torchcut.maxflow(torchcut.GridGraph([[1, 0]], [[0, 1]], [[[1, 0]], [[0, 0]]],
                                                       torchcut.grid_offsets(2, 4))))
    with pytest.raises(RuntimeError, match="floating point"):  # torch refuses integer tensors that require grad
        torch.tensor([[1, 0]]).requires_grad_()


def _brute_flowgraph(n, arcs, src, snk):
    src, snk = src.detach(), snk.detach()
    best = []
    for bits in range(1 << n):
        side = [bool(bits >> i & 1) for i in range(n)]
        c = sum(float(snk[i]) if side[i] else float(src[i]) for i in range(n))
        c += sum(float(w) for (a, b, w) in arcs if side[a] and not side[b])
        best.append((c, side))
    best.sort(key=lambda x: x[0])
    return best[0][0], best[0][1], best[1][0] - best[0][0]


def test_flow_value_flowgraph_from_edges():
    gen = torch.Generator().manual_seed(3)
    n = 6
    u = torch.tensor([0, 1, 2, 3, 4, 0, 2, 5, 1, 1, 3])  # a parallel arc (1, 2)/(2, 1) and a self-loop (3, 3)
    v = torch.tensor([1, 2, 3, 4, 5, 5, 1, 0, 2, 4, 3])
    cap = dyadic(gen, (len(u),)).requires_grad_()
    rc = dyadic(gen, (len(u),)).requires_grad_()
    src = (dyadic(gen, (n,)) * torch.tensor([1., 1, 0, 0, 1, 0])).requires_grad_()
    snk = (dyadic(gen, (n,)) * torch.tensor([0., 0, 1, 1, 0, 1])).requires_grad_()
    arcs = [(int(a), int(b), float(cap.detach()[i])) for i, (a, b) in enumerate(zip(u, v))]
    arcs += [(int(b), int(a), float(rc.detach()[i])) for i, (a, b) in enumerate(zip(u, v))]
    value, side, gap = _brute_flowgraph(n, arcs, src, snk)
    assert gap > 1e-3
    g = torchcut.FlowGraph.from_edges(u, v, cap, rc, source=src, sink=snk, scale=2.0**20)
    val = torchcut.maxflow(g, lattice=False).flow_value
    assert val.item() == value
    val.backward()
    S = torch.tensor(side)
    assert torch.equal(cap.grad, (S[u] & ~S[v]).double())
    assert torch.equal(rc.grad, (S[v] & ~S[u]).double())
    assert torch.equal(src.grad, (~S).double()) and torch.equal(snk.grad, S.double())


def test_flow_value_flowgraph_from_network():
    tail = torch.tensor([0, 0, 2, 3, 2, 4, 3, 1, 0, 5, 4, 5])
    head = torch.tensor([2, 3, 3, 4, 4, 1, 1, 2, 1, 0, 5, 1])  # an arc s -> t, one out of t, one into s
    cap = torch.tensor([4.0, 2.0, 1.0, 3.5, 1.5, 6.0, 0.5, 9.0, 0.25, 7.0, 0.75, 2.0], requires_grad=True)
    g = torchcut.FlowGraph.from_network(tail, head, cap, 0, 1, 6)
    v = torchcut.maxflow(g).flow_value
    # brute force over the sides of nodes 2..5 (0 = source side, 1 = sink side)
    best = []
    for bits in range(16):
        side = {0: True, 1: False, **{i + 2: bool(bits >> i & 1) for i in range(4)}}
        best.append((sum(float(c) for a, b, c in zip(tail.tolist(), head.tolist(), cap.tolist()) if side[a] and not side[b]),
                     side))
    best.sort(key=lambda x: x[0])
    assert best[1][0] - best[0][0] > 1e-3
    assert v.item() == best[0][0]
    v.backward()
    side = best[0][1]
    assert cap.grad.tolist() == [float(side[a] and not side[b]) for a, b in zip(tail.tolist(), head.tolist())]


@pytest.mark.cuda
def test_flow_value_gradient_cuda():
    (src, snk, e, r), offsets = grid_case(0, (3, 4), 8)
    value, mask, gap = brute_min_cut(src, snk, e, r, offsets)
    assert gap > 1e-3
    leaves = [t.detach().cuda().requires_grad_() for t in (src, snk, e, r)]
    v = torchcut.maxflow(torchcut.GridGraph(leaves[0], leaves[1], leaves[2], offsets, leaves[3],
                                            scale=2.0**20)).flow_value
    assert v.device.type == "cuda" and v.item() == value
    v.backward()
    for got, exp in zip((t.grad for t in leaves), cut_indicator(mask, offsets)):
        torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0)
