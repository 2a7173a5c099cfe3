"""refine's energy built by the native op ``potts_energy`` against the tensor version, bit for bit."""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchcut
from torchcut import multilabel as ML
from torchcut.energy import _grid_graph, estimate_sigma
from torchcut.grid import grid_offsets, shift


def _both(x, P, S, lam, sigma, conn):
    """(native outputs, reference _Energy) of refine's energy for x [B, Ch, H, W], P [B, C, H, W]."""
    B, C = P.shape[:2]
    offsets = grid_offsets(2, conn)
    s = estimate_sigma(x.to(torch.float32)) if sigma is None else torch.full((B,), float(sigma), device=P.device)
    mult = [lam / math.sqrt(sum(v * v for v in o)) for o in offsets]
    denom = (2 * s**2).view(B, 1).expand(B, len(offsets)).contiguous()
    out = torch.ops.torchcut.potts_energy(x, P, denom, mult, [v for o in offsets for v in o], ML.PROB_FLOOR, S, C == 2)
    return out, ML._refine_energy(x, P, S, s, mult, offsets, conn)


def _assert_same(out, E):
    a, b, c, checks = out
    assert checks[6] == 0
    assert float(checks[5]) == E.scale
    if E.L == 2:
        # the op's graph: the quantised energy's terms on both arcs of each pair and on the terminals
        U, W = E.U.to(torch.int64), E.W
        caps = torch.cat(
            [W, torch.stack([shift(W[:, k], tuple(-v for v in o), 0) for k, o in enumerate(E.offsets)], 1)], 1
        )
        low = torch.minimum(U[:, 0], U[:, 1])
        assert torch.equal(a, caps) and torch.equal(b, U[:, 1] - low) and torch.equal(c, (U[:, 0] - low).int())
        # the same canonical cut as the move graph (Kolmogorov-Zabih) of the tensor version
        f = torch.zeros((E.B,) + E.shape, dtype=torch.int64, device=E.device)
        g = E.move_graph(f, [1])
        ours = torchcut.maxflow(_grid_graph(a, b, c, E.offsets, True))
        theirs = torchcut.maxflow(g)
        assert torch.equal(ours.mask, theirs.mask)
        # both flows are the minimum energy less what each graph netted away (and the move graph's
        # construction adds each pair cost once): E_min = ours + sum(low) = theirs + sum(low') - sum(W)
        src = U[:, 1] + W.to(torch.int64).sum(1)
        snk = U[:, 0] + caps[:, E.K :].to(torch.int64).sum(1)
        low_kz = torch.minimum(src, snk)
        per_item = lambda t: t.reshape(E.B, -1).sum(1).cpu()  # noqa: E731
        e_ours = ours.flow_values.cpu() + per_item(low)
        e_theirs = theirs.flow_values.cpu() + per_item(low_kz) - per_item(W.to(torch.int64))
        assert e_ours.tolist() == e_theirs.tolist()
    else:
        assert torch.equal(a, E.U) and torch.equal(b, E.W)
        assert torch.allclose(c, E.offset, rtol=1e-12)


def _refine_both(*args, **kw):
    ML._NATIVE_POTTS = False
    try:
        ref = torchcut.refine(*args, **kw)
    finally:
        ML._NATIVE_POTTS = True
    return torchcut.refine(*args, **kw), ref


@st.composite
def problems(draw):
    B = draw(st.integers(1, 2))
    C = draw(st.integers(2, 4))
    H, W = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    Ch = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    image_dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.uint8]))
    x = torch.randint(0, 256, (B, Ch, H, W), generator=g).to(image_dtype)
    if image_dtype != torch.uint8 and draw(st.booleans()):
        x = x + torch.randn(B, Ch, H, W, generator=g, dtype=image_dtype) * draw(st.sampled_from([0.01, 3.0, 40.0]))
    P = torch.softmax(torch.randn(B, C, H, W, generator=g) * draw(st.sampled_from([0.5, 3.0, 30.0])), 1)
    if draw(st.booleans()):  # exact zeros and ones: the floor
        P = (P > 0.5).to(P.dtype)
    P = P.to(draw(st.sampled_from([torch.float32, torch.float64])))
    S = None
    if draw(st.booleans()):
        S = torch.randint(-1, C, (B, H, W), generator=g)
        S[torch.rand(B, H, W, generator=g) < 0.7] = -1
    lam = draw(st.sampled_from([0.0, 0.3, 1.0, 20.0, 1e4]))
    sigma = draw(st.sampled_from([None, 0.5, 15.0, 300.0]))
    conn = draw(st.sampled_from([4, 8]))
    return x, P, S, lam, sigma, conn


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_native_energy_equals_tensor_version(problem):
    x, P, S, lam, sigma, conn = problem
    _assert_same(*_both(x, P, S, lam, sigma, conn))


@pytest.mark.parametrize(
    "shape, C, Ch, conn",
    [((1, 300, 301), 2, 3, 4), ((2, 129, 257), 2, 1, 8), ((2, 70, 90), 3, 3, 8), ((1, 33, 65), 5, 4, 4)],
)
def test_native_energy_large(shape, C, Ch, conn):
    """Sizes where torch's exp and log run vectorised over several threads' ranges, with tails."""
    B, H, W = shape
    g = torch.Generator().manual_seed(H * W)
    x = torch.rand(B, Ch, H, W, generator=g) * 255
    P = torch.softmax(torch.randn(B, C, H, W, generator=g) * 3, 1)
    S = torch.full((B, H, W), -1)
    S[:, 3:9, 5:11] = C - 1
    for seeds in (None, S):
        for sigma in (None, 20.0):
            _assert_same(*_both(x, P, seeds, 2.5, sigma, conn))


def test_native_energy_from_threads_and_kept_scratch():
    """The op keeps its scratch buffers between calls (one set, taken by one call at a time): calls from
    several threads at once, and calls alternating a large and a small shape (the small one in the
    large one's kept buffers), give the tensor version's integers."""
    from concurrent.futures import ThreadPoolExecutor

    g = torch.Generator().manual_seed(7)
    cases = []
    for B, C, Ch, H, W, conn in [(1, 2, 3, 160, 170, 4), (2, 3, 1, 40, 50, 8), (1, 2, 1, 90, 31, 8)]:
        x = torch.rand(B, Ch, H, W, generator=g) * 255
        P = torch.softmax(torch.randn(B, C, H, W, generator=g) * 3, 1)
        cases.append((x, P, None, 2.5, None, conn))
    want = [_both(*c) for c in cases]
    for out, E in want:
        _assert_same(out, E)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: _both(*cases[i % 3])[0], range(12)))
    for i, out in enumerate(got):
        for a, b in zip(out, want[i % 3][0]):
            assert torch.equal(a, b)


def test_refine_labels_equal_reference_and_inputs_untouched():
    g = torch.Generator().manual_seed(3)
    image = (torch.rand(40, 50, 3, generator=g) * 255).to(torch.uint8)  # channels last: a strided view inside
    for C in (2, 3):
        probs = torch.softmax(torch.randn(C, 40, 50, generator=g) * 2, 0).double()
        seeds = torch.full((40, 50), -1)
        seeds[:5, :5] = 1
        keep = (image.clone(), probs.clone(), seeds.clone())
        for conn in (4, 8):
            new, ref = _refine_both(image, probs, lam=3.0, sigma=None, connectivity=conn, seeds=seeds)
            assert torch.equal(new, ref) and new.dtype == torch.int64 and new.shape == (40, 50)
            assert bool((new[:5, :5] == 1).all())
        assert all(torch.equal(a, b) for a, b in zip(keep, (image, probs, seeds)))
    # a permuted probability map (not contiguous) and a batch
    probs = torch.softmax(torch.randn(2, 40, 50, 2, generator=g), -1).permute(0, 3, 1, 2)
    new, ref = _refine_both(image.permute(2, 0, 1).float().expand(2, 3, 40, 50), probs, lam=1.0, sigma=30.0)
    assert torch.equal(new, ref) and new.shape == (2, 40, 50)


def test_refine_two_classes_matches_pymaxflow_labels():
    """The native graph's cut is the optimum of the float energy (PyMaxflow, float capacities)."""
    maxflow = pytest.importorskip("maxflow")
    g = torch.Generator().manual_seed(5)
    H, W, lam, sigma = 24, 30, 2.0, 25.0
    x = torch.rand(3, H, W, generator=g) * 255
    probs = torch.softmax(torch.randn(2, H, W, generator=g) * 2, 0)
    lab = torchcut.refine(x, probs, lam=lam, sigma=sigma)
    U = -np.log(np.clip(probs.double().numpy(), 1e-6, None))
    xn = x.double().numpy()
    gr = maxflow.Graph[float]()
    ids = gr.add_grid_nodes((H, W))
    Wt = torch.zeros(2, H, W, dtype=torch.float64)
    for k, (dy, dx) in enumerate(((0, 1), (1, 0))):
        w = np.zeros((H, W))
        d2 = ((xn[:, : H - dy, : W - dx] - xn[:, dy:, dx:]) ** 2).sum(0)
        w[: H - dy, : W - dx] = lam * np.exp(-d2 / (2 * sigma**2))
        Wt[k] = torch.from_numpy(w)
        stc = np.zeros((3, 3))
        stc[1 + dy, 1 + dx] = 1
        gr.add_grid_edges(ids, weights=w, structure=stc, symmetric=True)
    gr.add_grid_tedges(ids, U[1], U[0])
    opt = gr.maxflow()
    V = 1 - torch.eye(2, dtype=torch.float64)
    ours = float(ML.labeling_energy(torch.from_numpy(U), V, lab, weights=Wt))
    assert ours == pytest.approx(opt, rel=1e-6)


def test_native_errors_are_the_tensor_versions():
    P = torch.full((3, 4, 5), 1 / 3)
    bad = P.clone()
    bad[0, 1, 2] = float("nan")
    bad[1, 1, 1] = float("inf")
    neg = P.clone()
    neg[2, 3, 4] = -0.25
    img_bad = torch.zeros(4, 5)
    img_bad[1, 1] = float("inf")
    seeds = torch.full((4, 5), -1)
    seeds[0, 0] = 3
    cases = [
        (dict(image=torch.zeros(4, 5), probs=bad), r"probs: expected finite values, got 2 NaN or infinite value\(s\)"),
        (dict(image=torch.zeros(4, 5), probs=neg), r"probs: expected non-negative probabilities, got minimum -0\.25"),
        (dict(image=img_bad, probs=P, sigma=5.0), r"image: expected finite pixel values"),
        (dict(image=img_bad, probs=P), r"image: expected finite pixel values"),
        (
            dict(image=torch.zeros(4, 5), probs=P, seeds=seeds),
            r"seeds: expected -1 \(free\) or a class in \[0, 2\], got values in \[-1, 3\]",
        ),
        (
            dict(image=torch.zeros(4, 5), probs=P[:2], seeds=seeds - 2),
            r"seeds: expected -1 \(free\) or a class in \[0, 1\], got values in \[-3, 1\]",
        ),
    ]
    for kw, msg in cases:
        for native in (True, False):
            ML._NATIVE_POTTS = native
            try:
                with pytest.raises(ValueError, match=msg):
                    torchcut.refine(**kw)
            finally:
                ML._NATIVE_POTTS = True
    with pytest.raises(ValueError, match="schedule: expected"):
        torchcut.refine(torch.zeros(4, 5), P[:2], schedule="fast")
    with pytest.raises(ValueError, match=r"probs: expected a non-empty grid, got shape \(2, 0, 5\)"):
        torchcut.refine(torch.zeros(0, 5), torch.full((2, 0, 5), 0.5))


def test_op_checks_its_arguments():
    x, P = torch.zeros(1, 1, 4, 5), torch.full((1, 2, 4, 5), 0.5)
    denom = torch.ones(1, 2)
    with pytest.raises(RuntimeError, match="probs: expected at least 2 classes"):
        torch.ops.torchcut.potts_energy(x, P[:, :1], denom, [1.0, 1.0], [0, 1, 1, 0], 1e-6, None, False)
    with pytest.raises(RuntimeError, match="image: expected 1 to 16 channels"):
        torch.ops.torchcut.potts_energy(torch.zeros(1, 17, 4, 5), P, denom, [1.0, 1.0], [0, 1, 1, 0], 1e-6, None, True)
    with pytest.raises(RuntimeError, match="graph: expected 2 classes"):
        torch.ops.torchcut.potts_energy(
            x, torch.full((1, 3, 4, 5), 0.3), denom, [1.0, 1.0], [0, 1, 1, 0], 1e-6, None, True
        )
    with pytest.raises(RuntimeError, match="denom: expected float32"):
        torch.ops.torchcut.potts_energy(x, P, torch.ones(1, 3), [1.0, 1.0], [0, 1, 1, 0], 1e-6, None, True)


@pytest.mark.cuda
def test_cuda_native_energy_equals_tensor_version():
    torchcut._ops.ensure("cuda")  # the op is called directly: the CUDA library loads on first need
    g = torch.Generator().manual_seed(11)
    for B, C, Ch, H, W, conn in ((1, 2, 3, 300, 301, 4), (2, 2, 1, 64, 80, 8), (2, 4, 3, 50, 61, 8)):
        x = (torch.rand(B, Ch, H, W, generator=g) * 255).cuda()
        P = torch.softmax(torch.randn(B, C, H, W, generator=g) * 3, 1).cuda()
        S = torch.full((B, H, W), -1, device="cuda")
        S[:, 2:7, 3:9] = C - 1
        for seeds in (None, S):
            for sigma in (None, 12.0):
                out, E = _both(x, P, seeds, 2.0, sigma, conn)
                assert out[0].device.type == "cuda"
                _assert_same(out, E)
        new, ref = _refine_both(x, P, lam=2.0, sigma=12.0, connectivity=conn)
        assert torch.equal(new, ref) and new.device.type == "cuda"


def test_fake_matches_the_op():
    """The fake (torch.compile's shapes) describes what the op returns, for both outputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, denom = torch.rand(2, 3, 6, 7) * 255, torch.full((2, 4), 50.0)
    for C in (2, 3):
        P = torch.softmax(torch.randn(2, C, 6, 7), 1)
        args = (denom, [1.0] * 4, [0, 1, 1, 0, 1, 1, 1, -1], 1e-6, None, C == 2)
        real = torch.ops.torchcut.potts_energy(x, P, *args)
        with FakeTensorMode() as mode:
            fake = torch.ops.torchcut.potts_energy(
                mode.from_tensor(x), mode.from_tensor(P), mode.from_tensor(denom), *args[1:]
            )
        assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real]


@pytest.mark.parametrize("major", [0, 1])
def test_refine_4_connected_cut_follows_the_orientation(major, monkeypatch):
    """refine's 4-connected two-class cut on the CPU: pseudoflow on the mirrored graph where most pixels
    start on the source side (class 0), Boykov-Kolmogorov where they do not; the labels equal the
    reference's either way."""
    from torchcut.solvers import cpu as cpu_backend

    g = torch.Generator().manual_seed(11 + major)
    H, W = 48, 64
    image = torch.rand(3, H, W, generator=g) * 255
    p = torch.rand(H, W, generator=g) * 0.3 + 0.6 * (torch.rand(H, W, generator=g) < 0.8)
    probs = torch.stack([p, 1 - p] if major == 0 else [1 - p, p])
    seen = []
    run = cpu_backend._grid_op
    monkeypatch.setattr(cpu_backend, "_grid_op", lambda *a, **k: (lambda o: seen.append(o[-1]) or o)(run(*a, **k)))
    new, ref = _refine_both(image, probs, lam=2.0, sigma=20.0, connectivity=4)
    assert torch.equal(new, ref) and 0 < int(new.sum()) < H * W
    last = seen[-1]  # the native energy's solve (after the reference's)
    assert last["algorithm"] == ("pseudoflow" if major == 0 else "boykov-kolmogorov")
    assert last.get("mirrored", 0) == (1 if major == 0 else 0)
