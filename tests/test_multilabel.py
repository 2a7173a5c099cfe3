"""Multi-label energies: expansion moves against brute force, PyMaxflow's aexpansion_grid and GCO."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchcut
from torchcut.multilabel import _Energy, _solve, check_metric, expansion, labeling_energy, refine
from torchcut.stereo import _solve_labels_side, move_graph

SCHEDULES = ("sequential", "batched")


def potts(L, w=1):
    return w * (1 - torch.eye(L, dtype=torch.int64))


def trunc_linear(L, t, w=1):
    a = torch.arange(L)
    return w * (a[:, None] - a[None, :]).abs().clamp(max=t)


def random_problem(seed, shape, L, umax, wmax):
    """Integer unary ``[*lead, L, H, W]`` and weights ``[*lead, 2, H, W]`` for a 4-connected grid."""
    rng = np.random.default_rng(seed)
    *lead, H, W = shape
    U = torch.tensor(rng.integers(0, umax, (*lead, L, H, W)))
    return U, torch.tensor(rng.integers(0, wmax, (*lead, 2, H, W)))


def brute_energies(U, V, W=None):
    """Energies of every labelling of a tiny 2D grid (4-connected), and the labellings."""
    L, H, Wd = U.shape
    labs = torch.tensor(list(itertools.product(range(L), repeat=H * Wd))).view(-1, H, Wd)
    return labeling_energy(U.expand((len(labs),) + U.shape), V, labs, weights=W), labs


def one_move(U, V, W, f, alpha):
    E = _Energy(U, V, W, None)
    info = {"solves": 0, "moves": 0}
    take = _solve(E, f.unsqueeze(0), [alpha], None, "auto", info)[0][0]
    return torch.where(take, alpha, f)


# ---------------------------------------------------------------------------------------------- brute force
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), L=st.integers(2, 4), metric=st.sampled_from(["potts", "linear"]))
def test_each_move_reaches_the_moves_minimum(seed, L, metric):
    rng = np.random.default_rng(seed)
    H, Wd = 2, 3
    U = torch.tensor(rng.integers(0, 30, (L, H, Wd)))
    V = potts(L, 7) if metric == "potts" else trunc_linear(L, 2, 5)
    W = torch.tensor(rng.integers(0, 4, (2, H, Wd)))
    f = torch.tensor(rng.integers(0, L, (H, Wd)))
    alpha = int(rng.integers(0, L))
    got = one_move(U, V, W, f, alpha)
    # every switch set of the move
    switches = torch.tensor(list(itertools.product((0, 1), repeat=H * Wd)), dtype=torch.bool).view(-1, H, Wd)
    cands = torch.where(switches, alpha, f)
    best = int(labeling_energy(U.expand((len(cands),) + U.shape), V, cands, weights=W).min())
    assert int(labeling_energy(U, V, got, weights=W)) == best
    assert bool(((got == f) | (got == alpha)).all())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), schedule=st.sampled_from(SCHEDULES))
def test_potts_result_within_factor_two_of_the_optimum(seed, schedule):
    rng = np.random.default_rng(seed)
    L, H, Wd = 3, 2, 3
    U = torch.tensor(rng.integers(0, 20, (L, H, Wd)))
    W = torch.tensor(rng.integers(0, 15, (2, H, Wd)))
    V = potts(L)
    lab, info = expansion(U, V, weights=W, schedule=schedule, return_result=True)
    energies, _ = brute_energies(U, V, W)
    opt = int(energies.min())
    got = int(labeling_energy(U, V, lab, weights=W))
    assert got == float(info["energy"])
    assert opt <= got <= 2 * opt
    trace = [float(e) for e in info["energies"]]
    assert all(a >= b for a, b in zip(trace, trace[1:])), trace
    # local minimum: no single expansion move (brute-forced above) lowers it
    for alpha in range(L):
        assert int(labeling_energy(U, V, one_move(U, V, W, lab, alpha), weights=W)) >= got


# ---------------------------------------------------------------------------------------------- oracles
def _aexp(U, V, init=None):
    from maxflow.fastmin import aexpansion_grid

    D = np.ascontiguousarray(np.moveaxis(np.asarray(U, dtype=np.float64), 0, -1))
    lab = aexpansion_grid(D, np.asarray(V, dtype=np.float64), labels=init)
    return torch.from_numpy(np.asarray(lab, dtype=np.int64))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("metric", ["potts", "linear"])
def test_energy_against_aexpansion_grid(schedule, metric):
    rng = np.random.default_rng(1 if metric == "potts" else 2)
    L, H, Wd = 6, 24, 32
    truth = np.repeat(np.repeat(rng.integers(0, L, (3, 4)), 8, 0), 8, 1)
    U = rng.integers(0, 40, (L, H, Wd))
    U[truth, np.arange(H)[:, None], np.arange(Wd)] //= 4
    U = torch.tensor(U)
    V = potts(L, 15) if metric == "potts" else trunc_linear(L, 3, 6)
    lab, info = expansion(U, V, schedule=schedule, return_result=True)
    ours = int(labeling_energy(U, V, lab))
    ref = int(labeling_energy(U, V, _aexp(U, V)))
    assert ours == float(info["energy"])
    assert ours <= 1.01 * ref, (ours, ref)
    assert ref <= 1.05 * ours, (ours, ref)  # the oracle and we both reach a good local minimum


def test_sequential_matches_aexpansion_grid_exactly_on_a_generic_problem():
    # Same move order, canonical cuts and no ties: the same labelling.
    rng = np.random.default_rng(5)
    U = torch.tensor(rng.integers(0, 1000, (4, 12, 15)))
    V = trunc_linear(4, 2, 300)
    lab = expansion(U, V, schedule="sequential")
    assert int(labeling_energy(U, V, lab)) == int(labeling_energy(U, V, _aexp(U, V)))


def test_3d_against_aexpansion_grid():
    rng = np.random.default_rng(3)
    U = torch.tensor(rng.integers(0, 30, (4, 5, 6, 7)))
    V = potts(4, 9)
    lab = expansion(U, V, connectivity=6)
    assert lab.shape == (5, 6, 7)
    ours, ref = int(labeling_energy(U, V, lab, connectivity=6)), int(labeling_energy(U, V, _aexp(U, V), connectivity=6))
    assert ours <= 1.01 * ref


def test_local_minimum_checked_by_independent_pymaxflow_moves():
    # stereo.move_graph builds the BVZ move in numpy; PyMaxflow solves it. From our result, no move lowers E.
    rng = np.random.default_rng(7)
    L, H, Wd = 5, 10, 12
    D = rng.integers(0, 25, (L, H, Wd))
    wh, wv = rng.integers(1, 12, (H, Wd - 1)), rng.integers(1, 12, (H - 1, Wd))
    W = np.zeros((2, H, Wd), np.int64)
    W[0, :, :-1], W[1, :-1, :] = wh, wv
    U, Wt, V = torch.tensor(D), torch.tensor(W), potts(L)
    for schedule in SCHEDULES:
        lab = expansion(U, V, weights=Wt, schedule=schedule)
        e = int(labeling_energy(U, V, lab, weights=Wt))
        for alpha in range(L):
            u, v, cap, rcap, src, snk = move_graph(D, lab.numpy(), alpha, wh, wv)
            _, take = _solve_labels_side(u, v, cap, rcap, src, snk, H * Wd, "pymaxflow")
            moved = torch.where(torch.from_numpy(take.reshape(H, Wd)), alpha, lab)
            assert int(labeling_energy(U, V, moved, weights=Wt)) >= e


def test_per_edge_weights_against_gco():
    gco = pytest.importorskip("gco")
    rng = np.random.default_rng(11)
    L, H, Wd = 5, 30, 40
    truth = np.repeat(np.repeat(rng.integers(0, L, (3, 4)), 10, 0), 10, 1)
    U = rng.integers(0, 50, (L, H, Wd))
    U[truth, np.arange(H)[:, None], np.arange(Wd)] //= 5
    W = rng.integers(1, 20, (2, H, Wd))
    W[0, :, -1] = 0
    W[1, -1, :] = 0
    V = trunc_linear(L, 2)
    lab = expansion(torch.tensor(U), V, weights=torch.tensor(W))
    ids = np.arange(H * Wd).reshape(H, Wd)
    edges = np.concatenate(
        [np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], 1), np.stack([ids[:-1].ravel(), ids[1:].ravel()], 1)]
    ).astype(np.int32)
    ew = np.concatenate([W[0, :, :-1].ravel(), W[1, :-1, :].ravel()]).astype(np.int32)
    ref = gco.cut_general_graph(
        edges, ew, U.reshape(L, -1).T.astype(np.int32).copy(), V.numpy().astype(np.int32), down_weight_factor=1
    )
    ref = torch.from_numpy(ref.reshape(H, Wd).astype(np.int64))
    e_gco = int(labeling_energy(torch.tensor(U), V, ref, weights=torch.tensor(W)))
    e_ours = int(labeling_energy(torch.tensor(U), V, lab, weights=torch.tensor(W)))
    assert e_ours <= 1.01 * e_gco, (e_ours, e_gco)


# ---------------------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_batch_equals_items_alone(schedule):
    U, W = random_problem(4, (3, 9, 11), 4, 30, 9)
    V = trunc_linear(4, 2, 4)
    lab, info = expansion(U, V, weights=W, schedule=schedule, return_result=True)
    assert lab.shape == (3, 9, 11) and lab.dtype == torch.int64
    for b in range(3):
        alone = expansion(U[b], V, weights=W[b], schedule=schedule)
        assert torch.equal(alone, lab[b])
    assert torch.equal(info["energy"], labeling_energy(U, V, lab, weights=W).double())


def test_float_energy_is_quantised_close_to_the_integer_one():
    rng = np.random.default_rng(8)
    U = torch.tensor(rng.integers(0, 400, (4, 16, 16)))
    V = trunc_linear(4, 2, 60)
    lab_i = expansion(U, V)
    lab_f, info = expansion(U.double() / 8, V.double() / 8, return_result=True)
    assert not info["exact"] and info["scale"] > 1e3
    e_i = float(labeling_energy(U, V, lab_i)) / 8
    e_f = float(labeling_energy(U.double() / 8, V.double() / 8, lab_f))
    assert abs(float(info["energy"]) - e_f) <= 1e-6 * e_f
    assert e_f <= e_i * 1.005


def test_init_and_max_cycles():
    rng = np.random.default_rng(9)
    U = torch.tensor(rng.integers(0, 30, (3, 8, 8)))
    V = potts(3, 20)
    lab, info = expansion(U, V, init=2, max_iter=1, return_result=True)
    assert info["cycles"] == 1 and info["solves"] == 3
    lab0, info0 = expansion(U, V, init=2, max_iter=0, return_result=True)
    assert bool((lab0 == 2).all()) and info0["solves"] == 0
    full = expansion(U, V, init=torch.full((8, 8), 2))
    assert int(labeling_energy(U, V, full)) <= int(labeling_energy(U, V, lab))


def test_inputs_are_not_modified():
    rng = np.random.default_rng(10)
    U = torch.tensor(rng.integers(0, 30, (3, 6, 7)))
    V, W, init = potts(3, 5), torch.tensor(rng.integers(0, 3, (2, 6, 7))), torch.zeros(6, 7, dtype=torch.int64)
    copies = [t.clone() for t in (U, V, W, init)]
    expansion(U, V, weights=W, init=init)
    P = torch.softmax(torch.tensor(rng.normal(size=(3, 6, 7))), 0)
    img, seeds = torch.rand(6, 7), torch.full((6, 7), -1)
    more = [P.clone(), img.clone(), seeds.clone()]
    refine(img, P, seeds=seeds)
    for a, b in zip((U, V, W, init, P, img, seeds), copies + more):
        assert torch.equal(a, b)


ENERGY_CASES = [  # (unary shape, connectivity, float)
    ((3, 4, 9, 11), None, False),  # a batch of three 2D items
    ((5, 12, 10), 8, False),
    ((4, 5, 6, 7), 6, False),  # 3D
    ((3, 4, 6, 5, 6), 26, False),  # a batch of 3D items, 26-connected
    ((2, 6, 10, 9), None, True),  # float: quantised
]


@pytest.mark.parametrize("case", ENERGY_CASES)
def test_vectorised_energy_equals_labeling_energy(case):
    shape, conn, _ = case
    rng = np.random.default_rng(3)
    U = torch.tensor(rng.integers(0, 40, shape))
    lead = 1 if len(shape) == 5 or (len(shape) == 4 and conn in (None, 4, 8)) else 0
    L = shape[lead]
    V = trunc_linear(L, 2, 3)
    E = _Energy(U, V, None, conn)
    f = torch.tensor(rng.integers(0, L, (E.B,) + E.shape))
    want = labeling_energy(U if lead else U.unsqueeze(0), V, f, connectivity=conn)
    assert torch.equal(E.energy(f).double() + E.offset, want.double())  # E shifts the unary per pixel
    # candidates in leading dims broadcast against the terms
    g = torch.tensor(rng.integers(0, L, (3, E.B) + E.shape))
    assert torch.equal(E.energy(g), torch.stack([E.energy(x) for x in g]))


# ---------------------------------------------------------------------------------------------- refine
def _noisy_maps(seed, C=3, B=1, H=48, W=48, noise=1.2):
    g = torch.Generator().manual_seed(seed)
    truth = torch.zeros(B, H, W, dtype=torch.int64)
    for c in range(1, C):
        y0, x0 = (torch.randint(0, H // 2, (2,), generator=g)).tolist()
        truth[:, y0 : y0 + H // 2, x0 : x0 + W // 2] = c
    colours = torch.rand(C, 3, generator=g) * 200
    image = colours[truth].permute(0, 3, 1, 2) + torch.randn(B, 3, H, W, generator=g) * 5
    logits = torch.nn.functional.one_hot(truth, C).permute(0, 3, 1, 2).float() * 1.0
    probs = torch.softmax(logits + torch.randn(B, C, H, W, generator=g) * noise, 1)
    return truth, image, probs


def test_refine_beats_argmax_on_noisy_maps():
    truth, image, probs = _noisy_maps(0, C=4, B=2)
    arg = probs.argmax(1)
    lab = refine(image, probs, lam=2.0)
    acc_arg = float((arg == truth).float().mean())
    acc = float((lab == truth).float().mean())
    assert acc_arg < 0.85 and acc > 0.97, (acc_arg, acc)
    # and refine's energy is below argmax's
    U = -torch.log(probs.clamp(min=1e-6)).double()
    from torchcut.energy import estimate_sigma

    s = estimate_sigma(image).view(2, 1, 1)
    Wt = torch.stack(
        [
            torch.exp(-(image - torchcut.grid.shift(image, o, 0.0)).square().sum(1) / (2 * s**2)) * 2.0
            for o in torchcut.grid_offsets(2, 4)
        ],
        1,
    ).double()
    V = 1 - torch.eye(4, dtype=torch.float64)
    assert bool((labeling_energy(U, V, lab, weights=Wt) < labeling_energy(U, V, arg, weights=Wt)).all())


def test_refine_two_classes_is_the_exact_cut():
    import maxflow

    truth, image, probs = _noisy_maps(1, C=2, H=20, W=24)
    lam, sigma = 1.5, 30.0
    lab = refine(image[0], probs[0], lam=lam, sigma=sigma)
    U = -np.log(np.clip(probs[0].double().numpy(), 1e-6, None))
    x = image[0].double().numpy()
    H, W = lab.shape
    g = maxflow.Graph[float]()
    ids = g.add_grid_nodes((H, W))
    for dy, dx in ((0, 1), (1, 0)):
        w = np.zeros((H, W))
        d2 = ((x[:, : H - dy, : W - dx] - x[:, dy:, dx:]) ** 2).sum(0)
        w[: H - dy, : W - dx] = lam * np.exp(-d2 / (2 * sigma**2))
        st = np.zeros((3, 3))
        st[1 + dy, 1 + dx] = 1
        g.add_grid_edges(ids, weights=w, structure=st, symmetric=True)
    g.add_grid_tedges(ids, U[1], U[0])  # source side = class 0 pays U[0] via the sink arc
    opt = g.maxflow()
    V = 1 - torch.eye(2, dtype=torch.float64)
    Wt = torch.zeros(2, H, W, dtype=torch.float64)
    for k, (dy, dx) in enumerate(((0, 1), (1, 0))):
        d2 = ((x[:, : H - dy, : W - dx] - x[:, dy:, dx:]) ** 2).sum(0)
        Wt[k, : H - dy, : W - dx] = torch.from_numpy(lam * np.exp(-d2 / (2 * sigma**2)))
    ours = float(labeling_energy(torch.from_numpy(U), V, lab, weights=Wt))
    assert ours == pytest.approx(opt, rel=1e-6)


def test_refine_seeds_fix_pixels():
    truth, image, probs = _noisy_maps(2, C=3, H=32, W=32)
    seeds = torch.full((32, 32), -1)
    seeds[0:4, 0:4] = 2
    seeds[20, 20] = 1
    lab = refine(image[0], probs[0], lam=3.0, seeds=seeds)
    assert bool((lab[0:4, 0:4] == 2).all()) and int(lab[20, 20]) == 1


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors():
    U = torch.zeros(3, 4, 5, dtype=torch.int64)
    V = potts(3)
    with pytest.raises(ValueError, match="unary: expected finite values, got 1 NaN"):
        expansion(torch.where(torch.arange(60).view(3, 4, 5) == 7, float("nan"), 0.0), V)
    with pytest.raises(ValueError, match=r"pairwise: expected shape \[L, L\] = \(3, 3\).*got \(4, 4\)"):
        expansion(U, potts(4))
    with pytest.raises(ValueError, match=r"triangle inequality fails for labels \(0, 1, 2\)"):
        expansion(U, torch.tensor([[0, 1, 4], [1, 0, 1], [4, 1, 0]]))
    with pytest.raises(ValueError, match=r"pairwise: expected V\[a, a\] = 0"):
        expansion(U, V + torch.eye(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="pairwise: expected a symmetric table"):
        check_metric(torch.tensor([[0, 1], [2, 0]]))
    with pytest.raises(ValueError, match="weights: expected shape"):
        expansion(U, V, weights=torch.ones(2, 4, 4))
    with pytest.raises(ValueError, match="weights: expected non-negative"):
        expansion(U, V, weights=-torch.ones(2, 4, 5))
    with pytest.raises(ValueError, match=r"init: expected labels in \[0, 2\], got values in \[0, 3\]"):
        expansion(U, V, init=torch.tensor([[0, 3, 0, 0, 0]] * 4))
    with pytest.raises(ValueError, match="connectivity: expected 6, 18 or 26"):
        expansion(torch.zeros(2, 3, 4, 5, 6), potts(2), connectivity=4)
    with pytest.raises(ValueError, match=r"unary: expected shape \[L, H, W\]"):
        expansion(torch.zeros(3, 4), V)
    with pytest.raises(TypeError, match="unary: expected an integer or floating-point tensor"):
        expansion(torch.zeros(3, 4, 5, dtype=torch.bool), V)
    with pytest.raises(ValueError, match="schedule: expected"):
        expansion(U, V, schedule="fast")
    P = torch.full((3, 4, 5), 1 / 3)
    with pytest.raises(
        ValueError, match=r"seeds: expected -1 \(free\) or a class in \[0, 2\], got values in \[-1, 3\]"
    ):
        refine(torch.zeros(4, 5), P, seeds=torch.tensor([[3, -1, -1, -1, -1]] * 4))
    with pytest.raises(ValueError, match=r"seeds: expected shape \(4, 5\)"):
        refine(torch.zeros(4, 5), P, seeds=torch.full((4, 4), -1))
    with pytest.raises(ValueError, match="probs: expected finite values"):
        refine(torch.zeros(4, 5), torch.full((3, 4, 5), float("nan")))
    with pytest.raises(
        ValueError,
        match=r"probs: expected shape \(3, 5, 5\), from the image's spatial shape "
        r"\(image of shape \(5, 5\)\), got \(3, 4, 5\)",
    ):
        refine(torch.zeros(5, 5), P)
    with pytest.raises(
        ValueError,
        match=r"probs: expected shape \(2, 3, 5, 5\), from the image's spatial shape "
        r"\(image of shape \(2, 5, 5, 3\)\), got \(2, 3, 4, 5\)",
    ):
        refine(torch.zeros(2, 5, 5, 3), P.expand(2, 3, 4, 5))


# ---------------------------------------------------------------------------------------------- stereo
def tsukuba_or_skip():
    from torchcut import datasets

    try:
        return datasets.tsukuba_pair(download=False)
    except datasets.DatasetNotFoundError as exc:
        pytest.skip(f"Tsukuba not in the data folder: {exc}")


def test_tsukuba_bad_pixels(shared_data):
    from torchcut.stereo import bad_pixel_rates, disparity

    left, right, truth = tsukuba_or_skip()
    d, info = disparity(left, right, 16, schedule="batched", return_result=True)
    r = bad_pixel_rates(d, truth)
    assert r["nonocc"] <= 1.9, r
    assert r["all"] < 4.5, r
    assert r["pixels_all"] == 348 * 252


# ---------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_cuda_matches_cpu(schedule):
    U, W = random_problem(12, (2, 40, 50), 6, 40, 9)
    V = trunc_linear(6, 2, 5)
    cpu = expansion(U, V, weights=W, schedule=schedule)
    gpu, info = expansion(U.cuda(), V.cuda(), weights=W.cuda(), schedule=schedule, return_result=True)
    assert gpu.device.type == "cuda"
    # canonical minimum cuts: the same moves, hence the same labels
    assert torch.equal(gpu.cpu(), cpu)
    trace = [e.cpu() for e in info["energies"]]
    assert all(bool((a >= b).all()) for a, b in zip(trace, trace[1:]))


@pytest.mark.cuda
def test_cuda_refine_and_tsukuba(shared_data):
    from torchcut.stereo import bad_pixel_rates, disparity

    truth, image, probs = _noisy_maps(0, C=4, B=2)
    gpu = refine(image.cuda(), probs.cuda(), lam=2.0, sigma=20.0)
    cpu = refine(image, probs, lam=2.0, sigma=20.0, schedule="batched")
    assert gpu.device.type == "cuda"
    # exp() may round differently on the two devices, so compare energies, not label bits
    U = -torch.log(probs.clamp(min=1e-6)).double()
    Wt = torch.stack(
        [
            torch.exp(-(image - torchcut.grid.shift(image, o, 0.0)).square().sum(1) / 800.0) * 2.0
            for o in torchcut.grid_offsets(2, 4)
        ],
        1,
    ).double()
    V = 1 - torch.eye(4, dtype=torch.float64)
    e_gpu, e_cpu = (labeling_energy(U, V, x.cpu(), weights=Wt) for x in (gpu, cpu))
    assert torch.allclose(e_gpu, e_cpu, rtol=1e-3)
    assert float((gpu.cpu() == truth).float().mean()) > 0.97
    left, right, t = tsukuba_or_skip()
    d = disparity(torch.from_numpy(left).cuda(), torch.from_numpy(right).cuda(), 16)
    assert d.device.type == "cuda"
    assert bad_pixel_rates(d, t)["nonocc"] <= 1.9


def _kernel_case(case):
    """(unary, pairwise, weights, connectivity) for the move-kernel comparisons."""
    g = torch.Generator().manual_seed(len(case))
    if case == "int truncated-linear 4c batch":
        U, W = random_problem(3, (3, 24, 31), 5, 30, 6)
        return U, trunc_linear(5, 2, 3), W, None
    if case == "int Potts 8c batch":
        return (
            torch.randint(0, 40, (2, 4, 20, 22), generator=g),
            5 * (1 - torch.eye(4, dtype=torch.int64)),
            torch.randint(0, 6, (2, 4, 20, 22), generator=g),
            8,
        )
    if case == "float truncated-linear":
        return (
            torch.rand(4, 18, 25, generator=g, dtype=torch.float64) * 10,
            1.5 * trunc_linear(4, 2).double(),
            torch.rand(2, 18, 25, generator=g, dtype=torch.float64),
            None,
        )
    if case == "int64 capacities":  # unary terms beyond int32: the moves are built in int64
        return (
            torch.randint(0, 1 << 33, (3, 12, 14), generator=g),
            (1 << 30) * (1 - torch.eye(3, dtype=torch.int64)),
            torch.randint(0, 3, (2, 12, 14), generator=g),
            None,
        )
    if case == "3D 6c":
        return torch.randint(0, 25, (3, 6, 7, 8), generator=g), trunc_linear(3, 1, 4), None, 6
    return torch.randint(0, 25, (3, 5, 6, 7), generator=g), 2 * (1 - torch.eye(3, dtype=torch.int64)), None, 26


@pytest.mark.cuda
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize(
    "case",
    [
        "int truncated-linear 4c batch",
        "int Potts 8c batch",
        "float truncated-linear",
        "int64 capacities",
        "3D 6c",
        "3D 26c",
    ],
)
def test_cuda_move_kernels_equal_the_tensor_ops(monkeypatch, case, schedule):
    """The move kernels (graph build with the warm re-fit, move application) give the labels, energy
    traces and solve counts of the tensor-op path, warm and cold, on every pair mode and cap type."""
    import torchcut.multilabel as ml

    U, V, W, conn = (t.cuda() if isinstance(t, torch.Tensor) else t for t in _kernel_case(case))
    calls = []
    solve = ml._FusedMoves.solve
    monkeypatch.setattr(ml._FusedMoves, "solve", lambda self, *a: calls.append(1) or solve(self, *a))

    def run(**kw):
        return expansion(U, V, weights=W, connectivity=conn, schedule=schedule, return_result=True, **kw)

    fused = {w: run(warm_start=w) for w in (True, False)}
    assert len(calls) == fused[True][1]["solves"] + fused[False][1]["solves"]
    monkeypatch.setattr(ml, "_FUSED_MOVES", False)
    plain = run(warm_start=True)
    for lab, info in fused.values():
        assert torch.equal(lab, plain[0])
        assert info["solves"] == plain[1]["solves"]
        assert len(info["energies"]) == len(plain[1]["energies"])
        assert all(torch.equal(a, b) for a, b in zip(info["energies"], plain[1]["energies"]))
    assert torch.equal(
        plain[0].cpu(),
        expansion(
            *(t.cpu() if isinstance(t, torch.Tensor) else t for t in (U, V)),
            weights=None if W is None else W.cpu(),
            connectivity=conn,
            schedule=schedule,
        ),
    )


@pytest.mark.cuda
def test_cuda_move_kernels_refine_and_subsets(monkeypatch):
    """refine (float Potts: pair costs pre-rounded) on a batch whose items stop at different cycles."""
    import torchcut.multilabel as ml

    truth, image, probs = _noisy_maps(3, C=5, B=3)
    probs[1] = torch.softmax(probs[1] * 8, 0)  # a sharper item: fewer cycles than the others
    x, p = image.cuda(), probs.cuda()
    out = {}
    for fusedmoves in (True, False):
        monkeypatch.setattr(ml, "_FUSED_MOVES", fusedmoves)
        out[fusedmoves] = [refine(x, p, lam=2.0, sigma=20.0, schedule=s) for s in SCHEDULES]
    for a, b in zip(out[True], out[False]):
        assert torch.equal(a, b)


def test_unknown_keywords_name_the_public_function():
    U = torch.zeros(3, 4, 5)
    V = 1 - torch.eye(3)
    with pytest.raises(TypeError, match=r"^expansion\(\) got an unexpected keyword argument 'lamda'$"):
        expansion(U, V, lamda=2)
    with pytest.raises(TypeError, match=r"^refine\(\) got an unexpected keyword argument 'sigm'$"):
        refine(torch.zeros(4, 5), torch.full((3, 4, 5), 1 / 3), sigm=2.0)
