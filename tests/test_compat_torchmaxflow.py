"""torchcut.compat.torchmaxflow: torchmaxflow's masks (against torchmaxflow where it is installed), the
native graph against its tensor version bit for bit, errors, devices."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchcut
from torchcut.compat import torchmaxflow as tcf


def _smooth(shape, g, passes=3):
    x = torch.randn((1, 1) + shape, generator=g)
    pool = torch.nn.functional.avg_pool2d if len(shape) == 2 else torch.nn.functional.avg_pool3d
    for _ in range(passes):
        x = pool(x, 5, 1, 2, count_include_pad=False)
    return (x / x.std())[0, 0]


def scene(shape, channels, seed):
    """torchmaxflow's kind of input: an image in 0-255 with objects and noise, and a network-like
    probability map (a sigmoid of the brightness plus smooth noise), [1, C, *shape] and [1, 2, *shape]."""
    g = torch.Generator().manual_seed(seed)
    grids = torch.meshgrid(*[torch.linspace(0, 1, n) for n in shape], indexing="ij")
    obj = torch.zeros(shape)
    for _ in range(4):
        c, r = torch.rand(len(shape), generator=g), 0.1 + 0.2 * float(torch.rand(1, generator=g))
        obj = torch.maximum(obj, (sum((gi - ci) ** 2 for gi, ci in zip(grids, c)) < r * r).float())
    colours = torch.rand(channels, 2, generator=g) * 200 + 20
    image = (
        colours[:, 0].view((channels,) + (1,) * len(shape)) * (1 - obj)
        + colours[:, 1].view((channels,) + (1,) * len(shape)) * obj
    )
    image = image + torch.randn((channels,) + shape, generator=g) * 12
    fg = torch.sigmoid(3 * (obj - 0.5) + 1.5 * _smooth(shape, g))
    return image[None].contiguous(), torch.stack([1 - fg, fg])[None].contiguous()


def scribbles(prob, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.zeros_like(prob)
    fg = prob[0, 1] > 0.8
    bg = prob[0, 0] > 0.8
    s[0, 0] = (bg & (torch.rand(bg.shape, generator=g) < 0.05)).float()
    s[0, 1] = (fg & (torch.rand(fg.shape, generator=g) < 0.05)).float()
    return s


CASES_2D = [((48, 64), 1, 4), ((48, 64), 3, 8), ((96, 80), 3, 4), ((96, 80), 1, 8)]
CASES_3D = [((12, 20, 16), 1, 6), ((12, 20, 16), 1, 18), ((16, 16, 16), 2, 26)]


@pytest.mark.parametrize("shape, C, conn", CASES_2D + CASES_3D)
def test_masks_equal_torchmaxflow(shape, C, conn):
    tmf = pytest.importorskip("torchmaxflow")
    for seed in range(3):
        image, prob = scene(shape, C, seed)
        seeds = scribbles(prob, seed)
        for lamda, sigma in ((20.0, 15.0), (5.0, 40.0), (60.0, 5.0)):
            ours = tcf.maxflow(image, prob, lamda, sigma, conn)
            theirs = tmf.maxflow(image, prob, lamda, sigma, conn)
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
            assert torch.equal(ours, theirs), (seed, lamda, sigma, int((ours != theirs).sum()))
            ours = tcf.maxflow_interactive(image, prob, seeds, lamda, sigma, conn)
            theirs = tmf.maxflow_interactive(image, prob.clone(), seeds, lamda, sigma, conn)
            assert torch.equal(ours, theirs), (seed, lamda, sigma, int((ours != theirs).sum()))


def test_energy_is_the_one_described():
    """The mask minimises the documented float energy: equal to PyMaxflow's optimum on the same energy."""
    maxflow = pytest.importorskip("maxflow")
    image, prob = scene((20, 24), 3, 7)
    lamda, sigma = 10.0, 20.0
    eps = float(np.finfo(np.float32).eps)
    mask = tcf.maxflow(image, prob, lamda, sigma, 8)[0, 0].numpy()
    U = -np.log(np.maximum(prob[0].double().numpy(), eps))  # U[0]: background, U[1]: foreground
    x = image[0].double().numpy()
    H, W = mask.shape
    g = maxflow.Graph[float]()
    ids = g.add_grid_nodes((H, W))
    energy = float(np.where(mask > 0, U[1], U[0]).sum())
    for dy, dx in ((1, 0), (0, 1), (1, 1)):
        w = np.zeros((H, W))
        d2 = ((x[:, : H - dy, : W - dx] - x[:, dy:, dx:]) ** 2).sum(0) / (dy * dy + dx * dx)
        w[: H - dy, : W - dx] = lamda * np.exp(-d2 / (2 * sigma**2))
        structure = np.zeros((3, 3))
        structure[1 + dy, 1 + dx] = 1
        g.add_grid_edges(ids, weights=w, structure=structure, symmetric=True)
        energy += float((w[: H - dy, : W - dx] * (mask[: H - dy, : W - dx] != mask[dy:, dx:])).sum())
    g.add_grid_tedges(ids, U[0], U[1])  # source side (foreground) pays U[1] through its sink arc
    assert energy == pytest.approx(g.maxflow(), rel=1e-6)


@st.composite
def graph_inputs(draw):
    nd = draw(st.sampled_from([2, 3]))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(nd))
    B, Ch = draw(st.integers(1, 2)), draw(st.integers(1, 6))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.rand((B, Ch) + shape, generator=g) * draw(st.sampled_from([1.0, 255.0]))
    x = x.to(draw(st.sampled_from([torch.float32, torch.float64])))
    P = torch.softmax(torch.randn((B, 2) + shape, generator=g) * draw(st.sampled_from([0.5, 5.0, 40.0])), 1)
    conn = draw(st.sampled_from([4, 8] if nd == 2 else [6, 18, 26]))
    sigma = draw(st.sampled_from([0.1, 10.0, 200.0]))
    lamda = draw(st.sampled_from([0.0, 1.0, 50.0]))
    seeds = None
    if draw(st.booleans()):
        seeds = torch.randint(-1, 2, (B,) + shape, generator=g)
    return x, P, conn, sigma, lamda, seeds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_inputs())
def test_native_graph_equals_tensor_version(inputs):
    x, P, conn, sigma, lamda, seeds = inputs
    offsets, denom, mult = tcf._terms(conn, sigma, lamda, P.shape[0], P.device)
    flat = [v for o in offsets for v in o]
    caps, source, sink, checks = torch.ops.torchcut.potts_energy(x, P, denom, mult, flat, tcf.EPS, seeds, True)
    ref = tcf.potts_graph_reference(x, P, denom, mult, offsets, tcf.EPS, seeds)
    assert checks[6] == 0
    assert torch.equal(caps, ref[0]) and torch.equal(source, ref[1]) and torch.equal(sink, ref[2])
    # netted as built (the two-class cuts of refine and this module skip the solver's netting)
    assert int(torch.minimum(source, sink.to(source.dtype)).max()) == 0


@pytest.mark.cuda
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_inputs())
def test_cuda_two_class_cut_equals_the_cpu_cut(inputs):
    """The CUDA graph is cut without netting it again: its mask is the CPU's, and the terminals of the
    CUDA build are netted as the CPU build's are."""
    x, P, conn, sigma, lamda, seeds = inputs
    want = tcf._solve(x, P, lamda, sigma, conn, seeds)
    cuda = [t.cuda() if t is not None else None for t in (x, P, seeds)]
    got = tcf._solve(cuda[0], cuda[1], lamda, sigma, conn, cuda[2])
    assert got.device.type == "cuda" and torch.equal(got.cpu(), want)


def test_batch_dtypes_and_inputs_untouched():
    image, prob = scene((30, 40), 3, 1)
    seeds = scribbles(prob, 1)
    keep = [t.clone() for t in (image, prob, seeds)]
    one = tcf.maxflow_interactive(image, prob, seeds, 10.0, 20.0, 8)
    assert all(torch.equal(a, b) for a, b in zip(keep, (image, prob, seeds)))
    # a batch of two, uint8 and float64 images, float64 probabilities, connectivity 0 (the default 4)
    batch = tcf.maxflow(image.expand(2, -1, -1, -1), prob.expand(2, -1, -1, -1).double(), 10.0, 20.0, 0)
    assert batch.shape == (2, 1, 30, 40) and torch.equal(batch[0], batch[1])
    assert torch.equal(batch[:1], tcf.maxflow(image.double(), prob, 10.0, 20.0, 4))
    u8 = image.clamp(0, 255).round().to(torch.uint8)
    assert torch.equal(tcf.maxflow(u8, prob, 10.0, 20.0, 4), tcf.maxflow(u8.float(), prob, 10.0, 20.0, 4))
    assert one.dtype == torch.float32 and set(one.unique().tolist()) <= {0.0, 1.0}


def test_tensor_version_where_the_op_is_missing(monkeypatch):
    """The path taken on a device without the op gives the same masks."""
    from torchcut import multilabel

    image, prob = scene((12, 10, 14), 1, 3)
    native = tcf.maxflow(image, prob, 20.0, 15.0, 26)
    monkeypatch.setattr(multilabel, "_native_potts", lambda device: False)
    assert torch.equal(tcf.maxflow(image, prob, 20.0, 15.0, 26), native)
    prob[0, 1, 2, 3, 4] = -1.0
    with pytest.raises(ValueError, match=r"prob: expected non-negative probabilities, got minimum -1\.0"):
        tcf.maxflow(image, prob, 20.0, 15.0, 26)


def test_bad_input_raises_clear_errors():
    image, prob = scene((6, 7), 1, 0)
    bad = prob.clone()
    bad[0, 0, 2, 3] = float("nan")
    img_inf = image.clone()
    img_inf[0, 0, 1, 1] = float("inf")
    cases = [
        ((image[0], prob, 1.0, 1.0), ValueError, r"image: expected shape \[1, C, 6, 7\]"),
        ((image, prob[:, :1], 1.0, 1.0), ValueError, r"prob: expected 2 channels"),
        ((image, prob[0], 1.0, 1.0), ValueError, r"prob: expected shape \[1, 2, H, W\] or \[1, 2, D, H, W\]"),
        ((image, prob, 1.0, 1.0, 6), ValueError, r"connectivity: expected one of \(0, 4, 8\) for 2D inputs, got 6"),
        ((image, prob, -1.0, 1.0), ValueError, r"lamda: expected a non-negative finite number, got -1\.0"),
        ((image, prob, 1.0, 0.0), ValueError, r"sigma: expected a positive finite number, got 0\.0"),
        ((image, bad, 1.0, 1.0), ValueError, r"prob: expected finite values, got 1 NaN or infinite value\(s\)"),
        ((image, prob - 0.75, 1.0, 1.0), ValueError, r"prob: expected non-negative probabilities, got minimum -0\.7"),
        ((img_inf, prob, 1.0, 1.0), ValueError, r"image: expected finite pixel values"),
        ((image.numpy(), prob, 1.0, 1.0), TypeError, r"image: expected a torch tensor"),
        ((image.expand(1, 17, 6, 7), prob, 1.0, 1.0), ValueError, r"image: expected at most 16 channels, got 17"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            tcf.maxflow(*args)
    with pytest.raises(ValueError, match=r"seed: expected the shape of prob \(1, 2, 6, 7\), got \(1, 2, 6, 6\)"):
        tcf.maxflow_interactive(image, prob, torch.zeros(1, 2, 6, 6), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"connectivity: expected one of \(0, 6, 18, 26\) for 3D inputs, got 8"):
        tcf.maxflow(image[..., None], prob[..., None], 1.0, 1.0, 8)


def test_same_call_as_torchmaxflow_module():
    """The module answers the two calls by name, as ``import torchmaxflow`` does."""
    import torchcut.compat

    assert torchcut.compat.torchmaxflow.maxflow is tcf.maxflow
    image, prob = scene((10, 12), 1, 2)
    mask = torchcut.compat.torchmaxflow.maxflow(image, prob, 5.0, 10.0)
    assert torch.equal(mask, tcf.maxflow(image, prob, 5.0, 10.0, 4))


@pytest.mark.cuda
def test_cuda_masks_equal_cpu():
    for shape, C, conn in CASES_2D + CASES_3D:
        image, prob = scene(shape, C, 5)
        seeds = scribbles(prob, 5)
        cpu = tcf.maxflow(image, prob, 20.0, 15.0, conn)
        gpu = tcf.maxflow(image.cuda(), prob.cuda(), 20.0, 15.0, conn)
        assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), cpu), (shape, conn)
        cpu = tcf.maxflow_interactive(image, prob, seeds, 20.0, 15.0, conn)
        gpu = tcf.maxflow_interactive(image.cuda(), prob.cuda(), seeds.cuda(), 20.0, 15.0, conn)
        assert torch.equal(gpu.cpu(), cpu), (shape, conn)


@pytest.mark.cuda
def test_cuda_native_graph_equals_tensor_version():
    g = torch.Generator().manual_seed(4)
    for shape, conn in (((70, 90), 8), ((10, 30, 40), 26), ((300, 301), 4)):
        x = (torch.rand((2, 3) + shape, generator=g) * 255).cuda()
        P = torch.softmax(torch.randn((2, 2) + shape, generator=g) * 3, 1).cuda()
        seeds = torch.randint(-1, 2, (2,) + shape, generator=g).cuda()
        offsets, denom, mult = tcf._terms(conn, 15.0, 20.0, 2, P.device)
        flat = [v for o in offsets for v in o]
        for s in (None, seeds):
            out = torch.ops.torchcut.potts_energy(x, P, denom, mult, flat, tcf.EPS, s, True)
            ref = tcf.potts_graph_reference(x, P, denom, mult, offsets, tcf.EPS, s)
            assert out[0].device.type == "cuda"
            assert all(torch.equal(a, b) for a, b in zip(out[:3], ref))
    assert torchcut.compat.torchmaxflow.maxflow is tcf.maxflow
