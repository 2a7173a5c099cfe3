"""Gradients through cuts: the flow value (torchcut.diff.flow_value), cut_mask, cut_labels, refine."""

import itertools
import math

import pytest
import torch

import torchcut
from torchcut.diff import contrast_weights, cut_labels, cut_mask, flow_value, refine


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
    caps = [
        dyadic(gen, shape),
        dyadic(gen, shape),
        dyadic(gen, (K,) + shape, high=512),
        dyadic(gen, (K,) + shape, high=512),
    ]
    caps[0] = caps[0] * (torch.rand(shape, generator=gen) > zero_frac)
    caps[1] = caps[1] * (torch.rand(shape, generator=gen) > zero_frac)
    return [c.requires_grad_() for c in caps], offsets


# ---------------------------------------------------------------------------------------------- flow value
@pytest.mark.parametrize(
    "shape,connectivity,seed", [((2, 3), 4, 0), ((3, 3), 8, 1), ((2, 2, 2), 26, 2), ((1, 7), 4, 3)]
)
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
        flow_value(
            torchcut.maxflow(torchcut.GridGraph([[1, 0]], [[0, 1]], [[[1, 0]], [[0, 0]]], torchcut.grid_offsets(2, 4)))
        )
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
    src = (dyadic(gen, (n,)) * torch.tensor([1.0, 1, 0, 0, 1, 0])).requires_grad_()
    snk = (dyadic(gen, (n,)) * torch.tensor([0.0, 0, 1, 1, 0, 1])).requires_grad_()
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
        best.append(
            (
                sum(float(c) for a, b, c in zip(tail.tolist(), head.tolist(), cap.tolist()) if side[a] and not side[b]),
                side,
            )
        )
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
    v = torchcut.maxflow(
        torchcut.GridGraph(leaves[0], leaves[1], leaves[2], offsets, leaves[3], scale=2.0**20)
    ).flow_value
    assert v.device.type == "cuda" and v.item() == value
    v.backward()
    for got, exp in zip((t.grad for t in leaves), cut_indicator(mask, offsets)):
        torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0)
    # a graph built on the CPU and moved: the gradient goes back to the CPU tensors
    v = torchcut.maxflow(torchcut.GridGraph(src, snk, e, offsets, r, scale=2.0**20).to("cuda")).flow_value
    v.backward()
    assert src.grad.device.type == "cpu"
    torch.testing.assert_close(src.grad, cut_indicator(mask, offsets)[0], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------- binary cuts
def brute_mask(scores, weights, offsets):
    """argmax over x of <scores, x> - sum w [x_p != x_q] for one tiny grid, by enumeration."""
    shape = tuple(scores.shape)
    nodes = list(itertools.product(*(range(n) for n in shape)))
    arcs = list(_arcs(shape, offsets))
    best = []
    for bits in range(1 << len(nodes)):
        x = {p: bool(bits >> i & 1) for i, p in enumerate(nodes)}
        v = sum(float(scores[p]) for p in nodes if x[p]) - sum(float(weights[k][p]) for p, q, k in arcs if x[p] != x[q])
        best.append((v, bits))
    best.sort(reverse=True)
    assert best[0][0] - best[1][0] > 1e-6  # a unique maximiser
    return torch.tensor([bool(best[0][1] >> i & 1) for i in range(len(nodes))]).view(shape)


def pair_changes(x, offsets):
    z = torch.zeros((len(offsets),) + tuple(x.shape), dtype=torch.float64)
    for p, q, k in _arcs(tuple(x.shape), offsets):
        z[k][p] = float(x[p] != x[q])
    return z


@pytest.mark.parametrize("shape,connectivity", [((3, 3), 4), ((2, 4), 8), ((2, 2, 2), 6)])
def test_cut_mask_blackbox_matches_enumeration(shape, connectivity):
    gen = torch.Generator().manual_seed(sum(shape) + connectivity)
    offsets = torchcut.grid_offsets(len(shape), connectivity)
    B = 3
    scores = (torch.randn((B,) + shape, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    weights = (torch.rand((B, len(offsets)) + shape, generator=gen, dtype=torch.float64)).requires_grad_()
    g = torch.randn((B,) + shape, generator=gen, dtype=torch.float64)
    lam = 3.0
    y = cut_mask(scores, weights, connectivity=connectivity, lambda_=lam)
    assert y.dtype == torch.float64 and y.shape == (B,) + shape
    (y * g).sum().backward()
    for b in range(B):
        x = brute_mask(scores[b].detach(), weights[b].detach(), offsets)
        x_lam = brute_mask(scores[b].detach() - lam * g[b], weights[b].detach(), offsets)
        assert torch.equal(y[b].detach(), x.double())
        torch.testing.assert_close(scores.grad[b], (x.double() - x_lam.double()) / lam, rtol=0, atol=1e-12)
        torch.testing.assert_close(
            weights.grad[b], (pair_changes(x_lam, offsets) - pair_changes(x, offsets)) / lam, rtol=0, atol=1e-12
        )


def brute_mask_directed(scores, fwd, bwd, offsets):
    """argmax of <scores, x> - sum fwd [x_p and not x_q] - sum bwd [x_q and not x_p], by enumeration."""
    shape = tuple(scores.shape)
    nodes = list(itertools.product(*(range(n) for n in shape)))
    arcs = list(_arcs(shape, offsets))
    best = []
    for bits in range(1 << len(nodes)):
        x = {p: bool(bits >> i & 1) for i, p in enumerate(nodes)}
        v = sum(float(scores[p]) for p in nodes if x[p])
        v -= sum(float(fwd[k][p]) for p, q, k in arcs if x[p] and not x[q])
        v -= sum(float(bwd[k][p]) for p, q, k in arcs if x[q] and not x[p])
        best.append((v, bits))
    best.sort(reverse=True)
    assert best[0][0] - best[1][0] > 1e-6
    return torch.tensor([bool(best[0][1] >> i & 1) for i in range(len(nodes))]).view(shape)


def test_cut_mask_directed_pair_terms_match_enumeration():
    gen = torch.Generator().manual_seed(11)
    offsets = torchcut.grid_offsets(2, 8)
    B, shape = 2, (3, 3)
    scores = (torch.randn((B,) + shape, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    fwd = torch.rand((B, 4) + shape, generator=gen, dtype=torch.float64).requires_grad_()
    bwd = (torch.rand((B, 4) + shape, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    g = torch.randn((B,) + shape, generator=gen, dtype=torch.float64)
    lam = 3.0
    y = cut_mask(scores, fwd, reverse=bwd, connectivity=8, lambda_=lam)
    (y * g).sum().backward()
    for b in range(B):
        x = brute_mask_directed(scores[b].detach(), fwd[b].detach(), bwd[b].detach(), offsets)
        x_lam = brute_mask_directed(scores[b].detach() - lam * g[b], fwd[b].detach(), bwd[b].detach(), offsets)
        assert torch.equal(y[b].detach(), x.double())
        torch.testing.assert_close(scores.grad[b], (x.double() - x_lam.double()) / lam, rtol=0, atol=1e-12)
        d_e0, d_r0 = cut_indicator(x, offsets)[2:]
        d_e1, d_r1 = cut_indicator(x_lam, offsets)[2:]
        torch.testing.assert_close(fwd.grad[b], (d_e1 - d_e0) / lam, rtol=0, atol=1e-12)
        torch.testing.assert_close(bwd.grad[b], (d_r1 - d_r0) / lam, rtol=0, atol=1e-12)
    # perturbed: gradients for both directions, 0 on edges that leave the grid
    fwd.grad = bwd.grad = None
    yp = cut_mask(scores.detach(), fwd, reverse=bwd, connectivity=8, estimator="perturbed", samples=16)
    (yp * g).sum().backward()
    inside = torch.stack([torchcut.grid.shift(torch.ones(shape, dtype=torch.bool), o, False) for o in offsets])
    assert fwd.grad.abs().sum() > 0 and bwd.grad.abs().sum() > 0
    assert (fwd.grad[:, ~inside] == 0).all() and (bwd.grad[:, ~inside] == 0).all()


def test_cut_mask_shared_weights_and_unbatched():
    scores = torch.tensor([[2.0, 0.5, -0.2, -3.0]], requires_grad=True)
    lam = torch.tensor(0.4, requires_grad=True)
    y = cut_mask(scores, lam, lambda_=4.0)
    assert y.tolist() == [[1.0, 1.0, 0.0, 0.0]]
    (y * torch.tensor([[0.0, 0.0, -1.0, 0.0]])).sum().backward()
    # the shifted solve (scores + 4 * e_2) turns pixel 2 on: the cut moves from edge 1-2 to edge 2-3
    assert scores.grad.tolist() == [[0.0, 0.0, -0.25, 0.0]]
    assert lam.grad.item() == 0.0  # one cut edge before and after
    w = torch.full((2, 1, 4), 0.4, requires_grad=True)
    cut_mask(scores.detach(), w, lambda_=4.0)[0, 2].backward()  # the loss asks pixel 2 to be on less
    assert w.grad[0].tolist() == [[0.0, 0.0, 0.0, 0.0]]  # scores - 4 * e_2: pixel 2 stays off
    w.grad = None
    (cut_mask(scores.detach(), w, lambda_=4.0)[0, 2] * -1).backward()
    assert w.grad[0].tolist() == [[0.0, -0.25, 0.25, 0.0]]


def test_cut_mask_perturbed_one_pixel_matches_the_gaussian_cdf():
    theta, eps, K = 0.3, 0.8, 20000
    s = torch.tensor([[theta]], dtype=torch.float64, requires_grad=True)
    y = cut_mask(s, 0.0, estimator="perturbed", samples=K, noise=eps, generator=torch.Generator().manual_seed(0))
    normal = torch.distributions.Normal(0.0, 1.0)
    expect = normal.cdf(torch.tensor(theta / eps)).item()
    assert y.item() == pytest.approx(expect, abs=0.02)
    y.sum().backward()
    slope = normal.log_prob(torch.tensor(theta / eps)).exp().item() / eps
    assert s.grad.item() == pytest.approx(slope, abs=0.04)


def _two_pixel_expectation(t1, t2, w, eps, n=20001):
    """E[x*] of the 1 x 2 grid with Gaussian noise on the scores, by quadrature (float64).

    Given the other pixel's noisy score b, pixel 1 is on iff its noisy score exceeds
    tau(b) = max(0, b - w) - max(-w, b): a Gaussian tail, integrated over b on a fine grid.
    """
    z = torch.linspace(-9, 9, n, dtype=torch.float64)
    pdf = torch.exp(-(z**2) / 2)
    pdf = pdf / pdf.sum()
    normal = torch.distributions.Normal(0.0, 1.0)

    def on(t_self, t_other):
        b = t_other + eps * z
        tau = torch.clamp(b - w, min=0) - torch.maximum(torch.full_like(b, -w), b)
        return float((pdf * (1 - normal.cdf((tau - t_self) / eps))).sum())

    return torch.tensor([on(t1, t2), on(t2, t1)], dtype=torch.float64)


def test_cut_mask_perturbed_gradients_match_quadrature():
    t1, t2, w0, eps, K = 0.4, -0.3, 0.5, 1.0, 40000
    s = torch.tensor([[t1, t2]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[[w0, 0.0]], [[0.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, -0.5]], dtype=torch.float64)
    y = cut_mask(s, w, estimator="perturbed", samples=K, noise=eps, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(y[0], _two_pixel_expectation(t1, t2, w0, eps), rtol=0, atol=0.015)
    (y * g).sum().backward()
    h = 1e-4

    def dot(*args):
        return float((_two_pixel_expectation(*args, eps) * g[0]).sum())

    d_t1 = (dot(t1 + h, t2, w0) - dot(t1 - h, t2, w0)) / (2 * h)
    d_t2 = (dot(t1, t2 + h, w0) - dot(t1, t2 - h, w0)) / (2 * h)
    d_w = (dot(t1, t2, w0 + h) - dot(t1, t2, w0 - h)) / (2 * h)
    assert s.grad[0].tolist() == pytest.approx([d_t1, d_t2], abs=0.03)
    assert w.grad[0, 0, 0].item() == pytest.approx(d_w, abs=0.03)
    assert w.grad[0, 0, 1].item() == 0.0 and w.grad[1].abs().sum().item() == 0.0  # edges that leave the grid


def test_cut_mask_perturbed_is_reproducible_and_keeps_no_noise():
    s = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(4), requires_grad=True)
    outs = []
    for _ in range(2):
        y = cut_mask(s, 0.3, estimator="perturbed", samples=4, generator=torch.Generator().manual_seed(9))
        y.sum().backward()
        outs.append((y.detach(), s.grad.clone()))
        s.grad = None
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert ((outs[0][0] * 4) == (outs[0][0] * 4).round()).all()  # means of 4 masks


def test_cut_mask_saves_only_inputs_and_masks():
    s = torch.randn(2, 5, 6, requires_grad=True)
    w = torch.rand(2, 2, 5, 6, requires_grad=True)
    y = cut_mask(s, w)
    node = y.grad_fn
    saved = node.saved_tensors
    assert saved[2] is None  # no reverse weights: symmetric
    assert [t.dtype for t in saved if t is not None] == [torch.float32, torch.float32, torch.bool]
    assert saved[0] is s or torch.equal(saved[0], s)
    yp = cut_mask(s, w, estimator="perturbed", samples=3)
    saved = yp.grad_fn.saved_tensors
    assert [(t.dtype, tuple(t.shape)) for t in saved] == [(torch.bool, (3, 2, 5, 6))]


def test_no_grad_and_no_reference_cycles():
    import gc
    import weakref

    s = torch.randn(1, 4, 4, requires_grad=True)
    with torch.no_grad():
        y = cut_mask(s, 0.5)
        yl = cut_labels(torch.stack([s, -s], 1), 0.5)
    assert y.grad_fn is None and not y.requires_grad and yl.grad_fn is None
    gc.collect()
    gc.disable()
    try:
        for estimator in ("blackbox", "perturbed"):
            for fn in (
                lambda t: cut_mask(t, 0.5, estimator=estimator, samples=2),
                lambda t: cut_labels(torch.stack([t, -t], 1), 0.5, estimator=estimator, samples=2),
            ):
                s = torch.randn(1, 4, 4, requires_grad=True)
                ref = weakref.ref(s)
                y = fn(s)
                out_ref = weakref.ref(y)
                y.sum().backward()
                del y, s
                assert ref() is None and out_ref() is None  # freed by reference counting alone
                s = torch.randn(1, 4, 4, requires_grad=True)
                ref = weakref.ref(s)
                y = fn(s)  # forward only
                del y, s
                assert ref() is None
    finally:
        gc.enable()


def test_cut_mask_errors():
    s = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="estimator: expected one of .*'blackbox'.*got 'sgd'"):
        cut_mask(s, 1.0, estimator="sgd")
    with pytest.raises(ValueError, match="lambda_: expected a positive finite number, got 0"):
        cut_mask(s, 1.0, lambda_=0)
    with pytest.raises(ValueError, match="samples: expected a positive int, got 0"):
        cut_mask(s, 1.0, estimator="perturbed", samples=0)
    with pytest.raises(ValueError, match="weights: expected non-negative edge weights, got minimum -1"):
        cut_mask(s, -1.0)
    with pytest.raises(ValueError, match=r"weights: expected a number, \(2, 3, 3\)"):
        cut_mask(s, torch.ones(4, 3, 3))
    with pytest.raises(TypeError, match="scores: expected a float tensor, got dtype torch.int64"):
        cut_mask(torch.zeros(3, 3, dtype=torch.int64), 1.0)
    with pytest.raises(ValueError, match="scores: expected finite values"):
        cut_mask(torch.tensor([[float("nan")]]), 1.0)
    with pytest.raises(ValueError, match="connectivity: expected 4 or 8 for ndim=2, got 6"):
        cut_mask(s, 1.0, connectivity=6, ndim=2)
    with pytest.raises(ValueError, match="pairwise: expected a constant label table"):
        cut_labels(torch.zeros(2, 3, 3), 1.0, pairwise=(1 - torch.eye(2)).requires_grad_())


# ---------------------------------------------------------------------------------------------- labellings
def test_cut_labels_matches_expansion_and_blackbox_formula():
    gen = torch.Generator().manual_seed(5)
    B, L, H, W = 2, 3, 5, 6
    scores = torch.randn(B, L, H, W, generator=gen, dtype=torch.float64).requires_grad_()
    weights = (0.6 * torch.rand(B, 2, H, W, generator=gen, dtype=torch.float64)).requires_grad_()
    g = torch.randn(B, L, H, W, generator=gen, dtype=torch.float64)
    V = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]])  # truncated linear: a metric
    lam = 2.0
    y = cut_labels(scores, weights, pairwise=V, lambda_=lam)
    labels = torchcut.expansion(-scores.detach(), V, weights=weights.detach())
    assert torch.equal(y.argmax(1), labels) and torch.equal(y.sum(1), torch.ones(B, H, W, dtype=torch.float64))
    (y * g).sum().backward()
    shifted = torchcut.expansion(-(scores.detach() - lam * g), V, weights=weights.detach(), init=labels)
    onehot = torch.nn.functional.one_hot
    want = (onehot(labels, L) - onehot(shifted, L)).movedim(-1, 1).double() / lam
    torch.testing.assert_close(scores.grad, want, rtol=0, atol=1e-12)
    for b in range(B):  # the weights' gradient: V of the pairs after, minus before, over lambda
        for k, o in enumerate(((0, 1), (1, 0))):
            for i in range(H - o[0]):
                for j in range(W - o[1]):
                    exp = (
                        V[shifted[b, i, j], shifted[b, i + o[0], j + o[1]]]
                        - V[labels[b, i, j], labels[b, i + o[0], j + o[1]]]
                    ) / lam
                    assert weights.grad[b, k, i, j].item() == pytest.approx(float(exp), abs=1e-12)
        assert weights.grad[b, 0, :, W - 1].abs().sum() == 0 and weights.grad[b, 1, H - 1].abs().sum() == 0


def test_cut_labels_two_labels_is_the_exact_binary_cut():
    gen = torch.Generator().manual_seed(6)
    scores = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64)
    weights = torch.rand(2, 3, 3, generator=gen, dtype=torch.float64)
    y = cut_labels(scores, weights)
    x = brute_mask(scores[1] - scores[0], weights, torchcut.grid_offsets(2, 4))
    assert torch.equal(y[1], x.double())


def test_cut_labels_perturbed_one_pixel_matches_the_gaussian_cdf():
    eps, K = 0.7, 20000
    s = torch.tensor([[[0.2]], [[0.5]]], dtype=torch.float64, requires_grad=True)
    y = cut_labels(s, estimator="perturbed", samples=K, noise=eps, generator=torch.Generator().manual_seed(2))
    normal = torch.distributions.Normal(0.0, 1.0)
    u = torch.tensor(0.3 / (eps * math.sqrt(2)))
    assert y[1].item() == pytest.approx(normal.cdf(u).item(), abs=0.02)
    y[1].sum().backward()
    slope = normal.log_prob(u).exp().item() / (eps * math.sqrt(2))
    assert s.grad[:, 0, 0].tolist() == pytest.approx([-slope, slope], abs=0.04)


def test_refine_matches_torchcut_refine_and_reaches_lam():
    gen = torch.Generator().manual_seed(7)
    image = torch.rand(3, 6, 7, generator=gen)
    logits = torch.randn(3, 6, 7, generator=gen)
    probs = torch.softmax(logits, 0).requires_grad_()
    lam = torch.tensor(0.8, requires_grad=True)
    y = refine(image, probs, lam=lam, sigma=0.3)
    assert torch.equal(y.argmax(0), torchcut.refine(image, probs.detach(), lam=0.8, sigma=0.3))
    target = torch.zeros(6, 7, dtype=torch.int64)
    loss = -(y * torch.nn.functional.one_hot(target, 3).movedim(-1, 0)).sum()
    loss.backward()
    assert probs.grad is not None and torch.isfinite(probs.grad).all() and lam.grad is not None


def test_contrast_weights_values():
    img = torch.tensor([[[0.0, 1.0], [0.0, 3.0]]])
    w = contrast_weights(img, 8, sigma=2.0)
    offsets = torchcut.grid_offsets(2, 8)
    for k, o in enumerate(offsets):
        for i in range(2):
            for j in range(2):
                q = (i + o[0], j + o[1])
                if 0 <= q[0] < 2 and 0 <= q[1] < 2:
                    d2 = float(img[0, i, j] - img[0, q[0], q[1]]) ** 2
                    exp = math.exp(-d2 / 8) / math.hypot(*o)
                else:
                    exp = 0.0
                assert w[k, i, j].item() == pytest.approx(exp, rel=1e-6)
    # the default sigma: root mean square of the axis-aligned differences (1, 9, 0, 4 -> 14 / 4)
    w = contrast_weights(img)
    assert w[0, 0, 0].item() == pytest.approx(math.exp(-1 / (2 * 3.5)))


@pytest.mark.slow
def test_cut_mask_under_torch_compile():
    s = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(8))

    def loss(x, w):
        y = cut_mask(torch.tanh(x) * 3, w * 1.0)
        return (y * torch.linspace(-1, 1, 36).view(6, 6)).sum()

    grads = []
    for fn in (loss, torch.compile(loss)):
        x = s.clone().requires_grad_()
        w = torch.tensor(0.7, requires_grad=True)
        out = fn(x, w)
        out.backward()
        grads.append((out.detach(), x.grad, w.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.cuda
def test_cut_mask_and_labels_cuda_match_cpu():
    gen = torch.Generator().manual_seed(9)
    s = torch.randn(3, 16, 16, generator=gen, dtype=torch.float64)
    w = torch.rand(3, 2, 16, 16, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 16, 16, generator=gen, dtype=torch.float64)
    res = []
    for dev in ("cpu", "cuda"):
        x = s.to(dev, copy=True).requires_grad_()  # a leaf of its own on each device
        ww = w.to(dev, copy=True).requires_grad_()
        y = cut_mask(x, ww, lambda_=2.0)
        (y * g.to(dev)).sum().backward()
        assert x.grad is not None and ww.grad is not None, (dev, y.requires_grad, y.grad_fn, x.is_leaf, ww.grad is None)
        res.append((y.cpu(), x.grad.cpu(), ww.grad.cpu()))
        yp = cut_mask(x.detach().requires_grad_(), ww, estimator="perturbed", samples=8)
        assert yp.device.type == dev and ((yp >= 0) & (yp <= 1)).all()
        yl = cut_labels(torch.stack([x.detach(), -x.detach(), 0 * x.detach()], 1).requires_grad_(), ww, lambda_=2.0)
        yl.sum().backward()
        res.append((yl.cpu(),))
    for a, b in zip(res[0], res[2]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(res[1][0], res[3][0], rtol=0, atol=0)
