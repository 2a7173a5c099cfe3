"""segmentation_graph: the Boykov-Jolly energy as integer capacities (values, hard constraints, errors)."""

import math

import numpy as np
import pytest
import torch

import torchcut
from torchcut.energy import SCALE_UNITS, estimate_sigma, segmentation_graph, to_pymaxflow
from torchcut.grid import grid_offsets


def two_tone(h=10, w=12, seed=0, noise=8.0):
    """Left half dark, right half bright, a little noise; seeds on each side."""
    rng = np.random.default_rng(seed)
    img = np.where(np.arange(w)[None, :] < w // 2, 60.0, 190.0) + rng.normal(0, noise, (h, w))
    img = np.clip(img, 0, 255).astype(np.float32)
    seeds = np.zeros((h, w), np.uint8)
    seeds[h // 2, 1:3] = 1
    seeds[h // 2, w - 3 : w - 1] = 2
    return img, seeds


def node_out_sums(g):
    """Sum of the n-link capacities leaving each node: [B, *shape]."""
    return g.caps.to(torch.int64).sum(1)


def pymaxflow_value(g, index=0):
    """Max flow of the same integer network through PyMaxflow (Boykov-Kolmogorov)."""
    pytest.importorskip("maxflow")
    pg, _ = to_pymaxflow(g, index)
    return pg.maxflow()


def test_capacities_match_the_formulas():
    img, seeds = two_tone()
    lam, sigma = 3.0, 20.0
    g = segmentation_graph(img, seeds, lam=lam, sigma=sigma, connectivity=8)
    scale = SCALE_UNITS / lam
    assert g.energy.scale == scale and g.energy.lam == lam
    assert g.caps.dtype == torch.int32 and g.shape == img.shape
    H, W = img.shape
    for k, o in enumerate(grid_offsets(2, 8)):
        dist = math.hypot(*o)
        for y, x in [(0, 0), (4, 5), (9, 0), (3, 10)]:
            yy, xx = y + o[0], x + o[1]
            got = int(g.caps[0, k, y, x])
            if 0 <= yy < H and 0 <= xx < W:
                d2 = float((img[y, x] - img[yy, xx]) ** 2)
                want = round(lam * scale * math.exp(-d2 / (2 * sigma**2)) / dist)
                assert abs(got - want) <= 1, (o, y, x, got, want)
            else:
                assert got == 0


def test_sigma_is_the_rms_neighbour_difference():
    rng = np.random.default_rng(1)
    img = rng.uniform(0, 255, (7, 9, 3)).astype(np.float32)
    d = [np.diff(img, axis=0), np.diff(img, axis=1)]
    want = math.sqrt(sum(float((v**2).sum()) for v in d) / sum(v[..., 0].size for v in d))
    x = torch.from_numpy(img).permute(2, 0, 1)[None]
    assert estimate_sigma(x).item() == pytest.approx(want, rel=1e-5)
    seeds = np.zeros((7, 9), np.uint8)
    seeds[0, 0], seeds[6, 8] = 1, 2
    g = segmentation_graph(img, seeds)
    assert g.energy.sigma.item() == pytest.approx(want, rel=1e-5)
    assert g.energy.channels == 3 and g.energy.channel_axis == 2


def test_hard_constraints_exceed_every_nodes_other_arcs():
    img, seeds = two_tone()
    for conn in (4, 8):
        g = segmentation_graph(img, seeds, connectivity=conn, lam=5.0)
        hard = g.energy.hard
        assert hard > int(node_out_sums(g).max())
        src, snk = g.source[0], g.sink[0].to(torch.int64)
        obj, bkg = torch.from_numpy(seeds == 1), torch.from_numpy(seeds == 2)
        assert bool((src[obj] == hard).all()) and bool((snk[obj] == 0).all())
        assert bool((snk[bkg] == hard).all()) and bool((src[bkg] == 0).all())
        # unseeded pixels: the data term, never a hard capacity, one side only
        free = torch.from_numpy(seeds == 0)
        assert bool((torch.minimum(src, snk)[free] == 0).all())
        assert int(torch.maximum(src, snk)[free].max()) < hard


def test_data_term_prefers_the_seeds_colours():
    img, seeds = two_tone(noise=2.0)
    seeds[:, 1], seeds[:, -2] = 1, 2
    g = segmentation_graph(img, seeds, lam=1.0)
    free = torch.from_numpy(seeds == 0)
    left = torch.zeros_like(free)
    left[:, :6] = True
    src, snk = g.source[0], g.sink[0].to(torch.int64)
    assert bool((src[left & free] > 0).all()) and bool((snk[left & free] == 0).all())
    assert bool((snk[~left & free] > 0).all()) and bool((src[~left & free] == 0).all())


@pytest.mark.parametrize("conn", [4, 8])
def test_flow_value_equals_pymaxflow(conn):
    rng = np.random.default_rng(conn)
    img = rng.uniform(0, 255, (14, 17, 3)).astype(np.uint8)
    seeds = np.zeros((14, 17), np.uint8)
    seeds[2:5, 2:5] = 1
    seeds[10:13, 12:15] = 2
    seeds[0, 16] = 2
    g = segmentation_graph(img, seeds, connectivity=conn, lam=2.0)
    r = torchcut.maxflow(g)
    assert r.verify()
    assert r.flow_value == pymaxflow_value(g)
    assert r.flow_value > 0


@pytest.mark.parametrize("conn", [6, 26])
def test_flow_value_equals_pymaxflow_3d(conn):
    rng = np.random.default_rng(conn)
    vol = rng.normal(100, 30, (5, 6, 7)).astype(np.float32)
    seeds = np.zeros(vol.shape, np.int64)
    seeds[1, 1, 1:3] = 1
    seeds[4, 5, 4:7] = 2
    g = segmentation_graph(vol, seeds, connectivity=conn)
    assert g.ndim == 3 and len(g.offsets) == conn // 2
    assert g.energy.hard > int(node_out_sums(g).max())
    r = torchcut.maxflow(g)
    assert r.verify()
    assert r.flow_value == pymaxflow_value(g)


def test_batch_graph_items_equal_single_graphs():
    a, sa = two_tone(seed=2)
    b, sb = two_tone(seed=3)
    b = 255 - b  # different statistics: sigma, ranges and histograms are per image
    g = segmentation_graph(np.stack([a, b]), np.stack([sa, sb]), ndim=2)
    assert g.batched and g.batch_size == 2
    for i, (img, s) in enumerate([(a, sa), (b, sb)]):
        one = segmentation_graph(img, s)
        assert torch.equal(g.caps[i], one.caps[0])
        assert torch.equal(g.source[i], one.source[0])
        assert torch.equal(g.sink[i], one.sink[0])
        assert g.energy.sigma[i].item() == pytest.approx(one.energy.sigma.item())


def test_channel_axis_first_last_and_explicit():
    rng = np.random.default_rng(4)
    img = rng.uniform(0, 255, (6, 5, 3)).astype(np.float32)
    seeds = np.zeros((6, 5), np.int64)
    seeds[0, 0], seeds[5, 4] = 1, 2
    last = segmentation_graph(img, seeds)
    first = segmentation_graph(torch.from_numpy(img).permute(2, 0, 1), seeds)
    explicit = segmentation_graph(np.moveaxis(img, 2, 1), seeds, channel_axis=1)
    for g in (first, explicit):
        assert torch.equal(g.caps, last.caps) and torch.equal(g.source, last.source)
    assert (last.energy.channel_axis, first.energy.channel_axis, explicit.energy.channel_axis) == (2, 0, 1)


def test_gray_image_with_singleton_channel():
    img, seeds = two_tone()
    a = segmentation_graph(img, seeds)
    b = segmentation_graph(img[..., None], seeds)
    assert torch.equal(a.caps, b.caps) and torch.equal(a.sink, b.sink)


def test_lam_zero_has_no_smoothness():
    img, seeds = two_tone()
    g = segmentation_graph(img, seeds, lam=0)
    assert int(g.caps.abs().sum()) == 0 and g.energy.hard == 1


def test_constant_image_is_fine():
    img = np.full((5, 5), 7.0, np.float32)
    seeds = np.zeros((5, 5), np.uint8)
    seeds[0, 0], seeds[4, 4] = 1, 2
    g = segmentation_graph(img, seeds)
    assert g.energy.sigma.item() == 1.0
    assert torchcut.maxflow(g).verify()


# ------------------------------------------------------------------------------------------ errors
IMG, SEEDS = two_tone()
IMG_NAN = IMG.copy()
IMG_NAN[3, 4] = np.nan


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(seeds=SEEDS[:5]),
            ValueError,
            r"seeds: expected shape \(10, 12\), from the image's spatial shape \(image of shape \(10, 12\)\), got \(5, 12\)",
        ),
        (dict(seeds=np.zeros((10, 12), np.uint8)), ValueError, r"seeds: expected at least one object \(label 1\) seed"),
        (
            dict(seeds=np.where(SEEDS == 2, 0, SEEDS)),
            ValueError,
            r"seeds: expected at least one background \(label 2\)",
        ),
        (
            dict(seeds=SEEDS * 2),
            ValueError,
            r"seeds: expected labels 0 \(unknown\), 1 \(object\) and 2 .* got values in \[0, 4\]",
        ),
        (
            dict(seeds=SEEDS.astype(np.float32)),
            TypeError,
            r"seeds: expected an integer array .* got numpy array of dtype float32",
        ),
        (
            dict(seeds=torch.from_numpy(SEEDS).bool()),
            TypeError,
            r"seeds: expected an integer tensor .* got tensor of dtype torch.bool",
        ),
        (dict(seeds="seeds.png"), TypeError, r"seeds: expected a torch tensor, numpy array or PIL image .* got str"),
        (dict(image=IMG > 100), TypeError, r"image: expected a numeric .* got numpy array of dtype bool"),
        (dict(image=[[1, 2]]), TypeError, r"image: expected a torch tensor, numpy array or PIL image, got list"),
        (dict(image=IMG_NAN), ValueError, r"image: expected finite pixel values, got 1 NaN or infinite"),
        (dict(connectivity=5), ValueError, r"connectivity: expected 4 or 8 \(2D\) or 6, 18 or 26 \(3D\), got 5"),
        (dict(connectivity=6, ndim=2), ValueError, r"connectivity: expected 4 or 8 for ndim=2, got 6"),
        (dict(ndim=4), ValueError, r"ndim: expected 2 or 3 spatial dimensions, got 4"),
        (
            dict(connectivity=6),
            ValueError,
            r"seeds: expected shape \[D, H, W\] or \[B, D, H, W\] for ndim=3, got \(10, 12\)",
        ),
        (dict(lam=-1.0), ValueError, r"lam: expected a finite number >= 0, got -1.0"),
        (dict(sigma=0.0), ValueError, r"sigma: expected a finite number > 0 \(at most 3.403e\+38\) or None, got 0.0"),
        (
            dict(sigma=1e300),
            ValueError,
            r"sigma: expected a finite number > 0 \(at most 3.403e\+38\) or None, got 1e\+300",
        ),
        (dict(scale=float("nan")), ValueError, r"scale: expected a finite number > 0 or None, got nan"),
        (dict(scale=1e9), ValueError, r"scale: lam \* scale = .* exceed the int32 range"),
        (dict(bins=0), ValueError, r"bins: expected a positive int, got 0"),
        (
            dict(lam=0, scale=1e9),
            ValueError,
            r"scale: the data term can reach \d+ integer units at scale 1e\+09, beyond the int32 range",
        ),
        (
            dict(channel_axis=0),
            ValueError,
            r"channel_axis: expected an axis of an image with one axis more than the seeds",
        ),
    ],
)
def test_errors_name_the_argument(kwargs, exc, match):
    args = dict(image=IMG, seeds=SEEDS)
    args.update(kwargs)
    image, seeds = args.pop("image"), args.pop("seeds")
    with pytest.raises(exc, match=match):
        segmentation_graph(image, seeds, **args)


def test_ambiguous_3d_seeds_raise():
    vol = np.zeros((4, 5, 6), np.float32)
    seeds = np.zeros((4, 5, 6), np.uint8)
    seeds[0, 0, 0], seeds[3, 4, 5] = 1, 2
    with pytest.raises(
        ValueError, match=r"seeds: shape \(4, 5, 6\) is ambiguous: a batch of 2D images .* pass ndim=2 or ndim=3"
    ):
        segmentation_graph(vol, seeds)
    assert segmentation_graph(vol, seeds, ndim=3).ndim == 3
    assert segmentation_graph(vol, seeds, connectivity=26).ndim == 3
    # the same arrays read as a batch of four 2D images need seeds in every image
    with pytest.raises(ValueError, match=r"seeds: expected at least one background \(label 2\) seed in batch item 0"):
        segmentation_graph(vol, seeds, ndim=2)


def test_ambiguous_channel_axis_raises():
    img = np.zeros((4, 4, 4), np.float32)
    seeds = np.zeros((4, 4), np.uint8)
    seeds[0, 0], seeds[3, 3] = 1, 2
    with pytest.raises(
        ValueError, match=r"image: shape \(4, 4, 4\) with seeds of shape \(4, 4\) is ambiguous.*pass channel_axis"
    ):
        segmentation_graph(img, seeds)
    a = segmentation_graph(img, seeds, channel_axis=-1)
    assert a.energy.channel_axis == 2


def test_too_many_histogram_bins_raise():
    img = np.zeros((4, 4, 6), np.float32)
    seeds = np.zeros((4, 4), np.uint8)
    seeds[0, 0], seeds[3, 3] = 1, 2
    with pytest.raises(ValueError, match=r"bins: 64 levels for 6 channels make 68719476736 histogram bins"):
        segmentation_graph(img, seeds, bins=64)
    assert segmentation_graph(img, seeds).energy.bins == 4  # the default shrinks with the channels


@pytest.mark.cuda
def test_cuda_graph_stays_on_the_gpu():
    img, seeds = two_tone()
    cpu = segmentation_graph(img, seeds, connectivity=8)
    gpu = segmentation_graph(torch.from_numpy(img).cuda(), torch.from_numpy(seeds).cuda(), connectivity=8)
    assert gpu.device.type == "cuda" and gpu.caps.dtype == torch.int32
    assert gpu.source.device.type == "cuda" and gpu.sink.device.type == "cuda"
    # exp/log may differ by an ulp between CPU and GPU: capacities agree to one integer unit
    assert int((gpu.caps.cpu().long() - cpu.caps.long()).abs().max()) <= 1
    assert int((gpu.source.cpu() - cpu.source).abs().max()) <= 1
    assert gpu.energy.hard == cpu.energy.hard


@pytest.mark.parametrize("batched, conn", [(False, 4), (False, 8), (True, 8), (False, 26)])
def test_fast_graph_equals_the_public_constructor(batched, conn):
    """segmentation_graph fills GridGraph's layout directly; it must be the graph the constructor builds."""
    rng = np.random.default_rng(conn)
    shape = (5, 6, 7) if conn == 26 else (9, 11)
    img = rng.uniform(0, 255, ((2,) if batched else ()) + shape).astype(np.float32)
    seeds = np.zeros(img.shape, np.uint8)
    seeds[..., 0, 0], seeds[..., -1, -1] = 1, 2
    fast = segmentation_graph(img, seeds, connectivity=conn, lam=3.0)
    K = len(fast.offsets)
    edges = fast.caps[:, :K].transpose(0, 1)  # [K, B, *shape]
    src, snk = fast.source, fast.sink
    if not batched:
        edges, src, snk = edges[:, 0], src[0], snk[0]
    slow = torchcut.GridGraph(src, snk, edges, fast.offsets)
    assert set(vars(fast)) == set(vars(slow))
    assert slow.energy is None and fast.energy.lam == 3.0
    for key, value in vars(slow).items():
        if key == "energy":
            continue
        mine = getattr(fast, key)
        if isinstance(value, torch.Tensor):
            assert mine.dtype == value.dtype and torch.equal(mine, value), key
        else:
            assert mine == value, key
    assert repr(fast) == repr(slow)


def test_spacing_scales_the_distances():
    rng = np.random.default_rng(7)
    vol = rng.normal(100, 20, (4, 5, 6)).astype(np.float32)
    seeds = np.zeros(vol.shape, np.uint8)
    seeds[0, 0, 0], seeds[3, 4, 5] = 1, 2
    iso = segmentation_graph(vol, seeds, connectivity=6, sigma=20.0)
    assert torch.equal(segmentation_graph(vol, seeds, connectivity=6, sigma=20.0, spacing=(3, 3, 3)).caps, iso.caps)
    thick = segmentation_graph(vol, seeds, connectivity=6, sigma=20.0, spacing=(2.0, 1.0, 1.0))
    offsets = thick.offsets
    z = offsets.index((1, 0, 0))
    inplane = [k for k, o in enumerate(offsets) if o[0] == 0]
    # arcs between slices are twice as long: half the capacity; in-plane arcs unchanged
    assert (thick.caps[0, z].double() - iso.caps[0, z].double() / 2).abs().max() <= 1
    for k in inplane:
        assert torch.equal(thick.caps[0, k], iso.caps[0, k])
    assert thick.energy.hard > int(thick.caps.to(torch.int64).sum(1).max())
    with pytest.raises(
        ValueError, match=r"spacing: expected 3 positive finite numbers \(one per spatial axis\), got \(1.0, 1.0\)"
    ):
        segmentation_graph(vol, seeds, connectivity=6, spacing=(1, 1))


def test_to_pymaxflow_batch_items():
    pytest.importorskip("maxflow")
    a, sa = two_tone(seed=5)
    b, sb = two_tone(seed=6, noise=20.0)
    g = segmentation_graph(np.stack([a, b]), np.stack([sa, sb]), connectivity=8)
    r = torchcut.maxflow(g)
    for i in range(2):
        pg, ids = to_pymaxflow(g, i)
        assert pg.maxflow() == r.flow_value[i]
