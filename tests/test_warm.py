"""Warm-started grid solves (torchcut.solvers.warm) and what uses them: expansion moves from the last
cycle's flows, and the batched round's greedy application replayed as a CUDA graph."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchcut
from torchcut import GridGraph, grid_offsets, multilabel
from torchcut.grid import _arc_layout
from torchcut.solvers.warm import WarmGrid

CPU_BACKENDS = ("reference", "cpu")


def _network(rng, B, shape, K, hi, directed):
    """Random capacities in the solvers' layout and netted-or-not terminals (int64)."""
    edges = torch.tensor(rng.integers(0, hi + 1, (K, B) + shape) * (rng.random((K, B) + shape) < 0.8))
    reverse = torch.tensor(rng.integers(0, hi + 1, (K, B) + shape)) if directed else edges
    src = torch.tensor(rng.integers(0, 3 * hi, (B,) + shape) * (rng.random((B,) + shape) < 0.4))
    snk = torch.tensor(rng.integers(0, 3 * hi, (B,) + shape) * (rng.random((B,) + shape) < 0.4))
    return edges, reverse, src, snk


def _cold_mask(caps, src, snk, offsets):
    """Source side of a solve from zero flow, through the public API (reference solver)."""
    g = GridGraph._from_layout(caps.clone(), src.to(torch.int64), snk.to(caps.dtype), offsets, batched=True)
    return torchcut.maxflow(g, backend="reference").node_mask


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    conn=st.sampled_from([4, 8, 6]),
    directed=st.booleans(),
    backend=st.sampled_from(CPU_BACKENDS),
    dtype=st.sampled_from([torch.int32, torch.int64]),
)
def test_warm_solves_give_the_masks_of_cold_solves(seed, conn, directed, backend, dtype):
    """A sequence of networks on one grid (capacities raised, lowered below the last flow, zeroed):
    every warm-started mask equals the mask of a solve from zero flow, and the inputs stay as given."""
    rng = np.random.default_rng(seed)
    ndim = 3 if conn == 6 else 2
    shape = (3, 4, 5) if ndim == 3 else (6, 7)
    offs = grid_offsets(ndim, conn)
    B = int(rng.integers(1, 4))
    warm = WarmGrid(offs, backend=backend)
    edges, reverse, src, snk = _network(rng, B, shape, len(offs), 20, directed)
    for step in range(4):
        caps = _arc_layout(edges, reverse, offs, dtype)
        keep = [t.clone() for t in (caps, src, snk)]
        mask = warm.solve(caps, src, snk)
        assert all(torch.equal(a, b) for a, b in zip(keep, (caps, src, snk)))
        assert torch.equal(mask, _cold_mask(caps, src, snk, offs)), f"step {step}"
        # the next network: some capacities scaled down (below the flow they carry), some up, some new
        e2, r2, s2, k2 = _network(rng, B, shape, len(offs), 20, directed)
        pick = torch.tensor(rng.random(edges.shape) < 0.3)
        edges = torch.where(pick, edges // 3, torch.where(torch.tensor(rng.random(edges.shape) < 0.2), e2, edges))
        reverse = edges if not directed else torch.where(pick, reverse // 2, reverse)
        src = torch.where(torch.tensor(rng.random(src.shape) < 0.3), s2, src)
        snk = torch.where(torch.tensor(rng.random(snk.shape) < 0.3), k2, snk)
    if B > 1:  # the state of a subset of the items carries on
        idx = torch.tensor([B - 1, 0])
        warm.keep(idx)
        caps = _arc_layout(edges[:, idx], reverse[:, idx], offs, dtype)
        assert torch.equal(warm.solve(caps, src[idx], snk[idx]), _cold_mask(caps, src[idx], snk[idx], offs))


def test_warm_grid_cold_option_and_shape_change():
    offs = grid_offsets(2, 4)
    rng = np.random.default_rng(1)
    edges, _, src, snk = _network(rng, 2, (5, 6), 2, 9, False)
    caps = _arc_layout(edges, edges, offs, torch.int32)
    for warm in (True, False):
        w = WarmGrid(offs, backend="reference", warm=warm)
        a = w.solve(caps, src, snk)
        b = w.solve(caps[:1], src[:1], snk[:1])  # another batch size: starts from zero flow
        assert torch.equal(a[:1], b) and len(w.log) == 2


def test_warm_grid_rejects_bad_input():
    offs = grid_offsets(2, 4)
    w = WarmGrid(offs, backend="reference")
    caps = torch.zeros(1, 4, 3, 5, dtype=torch.int32)
    src, snk = torch.zeros(1, 3, 5, dtype=torch.int64), torch.zeros(1, 3, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"caps: expected shape \[B, 4, \*shape\]"):
        w.solve(caps[:, :3], src, snk)
    with pytest.raises(ValueError, match=r"sink: expected shape \(1, 3, 5\)"):
        w.solve(caps, src, snk[:, :2])
    with pytest.raises(TypeError, match="source: expected an integer tensor, got dtype torch.float32"):
        w.solve(caps, src.float(), snk)
    with pytest.raises(TypeError, match="caps: expected int32 or int64"):
        w.solve(caps.to(torch.int16), src, snk)
    assert w.state is None and w.log == []  # nothing was solved


def _problem(seed, B, L, H, W, float_energy=False):
    g = torch.Generator().manual_seed(seed)
    U = torch.randint(0, 30, (B, L, H, W), generator=g)
    V = torch.minimum((torch.arange(L)[:, None] - torch.arange(L)[None]).abs(), torch.tensor(2)) * 6
    Wt = torch.randint(0, 4, (B, 2, H, W), generator=g)
    if float_energy:
        U, V, Wt = U * 0.37, V * 1.1, Wt * 0.9
    return U, V, Wt


@pytest.mark.parametrize("schedule", ["sequential", "batched"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("float_energy", [False, True])
def test_expansion_from_the_last_flows_gives_the_same_labels(schedule, backend, float_energy):
    """Items that reach their local minimum at different cycles leave the warm state (``keep``)."""
    U, V, Wt = _problem(3, 3, 5, 14, 17, float_energy)
    U[1] = U[1] // 7 * 7  # a flatter item: it stops at another cycle than the others
    out = {
        w: torchcut.expansion(U, V, weights=Wt, schedule=schedule, backend=backend, return_result=True, warm_start=w)
        for w in (True, False)
    }
    assert torch.equal(out[True][0], out[False][0])
    assert out[True][1]["solves"] == out[False][1]["solves"]
    assert torch.equal(out[True][1]["energy"], out[False][1]["energy"])


def test_refine_warm_start_keyword():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(4, 20, 24, generator=g) * 2, 0)
    image = torch.rand(3, 20, 24, generator=g) * 255
    a = torchcut.refine(image, probs, lam=2.0, warm_start=True)
    b = torchcut.refine(image, probs, lam=2.0, warm_start=False)
    assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("schedule", ["sequential", "batched"])
def test_cuda_tensor_op_moves_warm_equal_cold_and_cpu(monkeypatch, schedule):
    """On the GPU, the tensor-op path (the move kernels off): warm-started moves give the labels of
    cold ones and of the CPU."""
    monkeypatch.setattr(multilabel, "_FUSED_MOVES", False)
    U, V, Wt = _problem(5, 2, 6, 40, 52)
    Uc, Vc, Wc = U.cuda(), V.cuda(), Wt.cuda()
    runs = [torchcut.expansion(Uc, Vc, weights=Wc, schedule=schedule, warm_start=w) for w in (True, True, False)]
    cpu = torchcut.expansion(U, V, weights=Wt, schedule=schedule, warm_start=False)
    for r in runs:
        assert torch.equal(r.cpu(), cpu)


def test_sequential_skips_moves_whose_graph_did_not_change():
    """A label's move is not solved again when it and the L - 1 moves since changed nothing; the labels
    equal those of the textbook loop (one cycle per call, which never skips)."""
    U, V, Wt = _problem(7, 2, 5, 12, 15)
    lab, info = torchcut.expansion(U, V, weights=Wt, schedule="sequential", return_result=True)
    assert info["skipped"] > 0
    assert len(info["energies"]) == 1 + info["cycles"] * 5
    f = U.argmin(1)
    for _ in range(50):  # cycle by cycle from the last labels until a cycle changes nothing
        nxt, one = torchcut.expansion(U, V, weights=Wt, init=f, max_iter=1, schedule="sequential", return_result=True)
        assert one["skipped"] == 0
        if torch.equal(nxt, f):
            break
        f = nxt
    assert torch.equal(lab, f)
