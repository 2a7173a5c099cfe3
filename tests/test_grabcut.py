"""torchcut.grabcut: mixture fits against numpy/scipy, cuts against PyMaxflow, batches, errors."""

import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchcut
from torchcut._grabcut import _component_loglik, _fit, _kmeans, grabcut
from torchcut.energy import to_pymaxflow

maxflow = pytest.importorskip("maxflow")


def two_colour_textures(seed=0, size=40):
    """Object: stripes of two colours; background: stripes of two colours, one of them within a
    histogram bin of an object colour (a one-shot 16-level histogram cannot tell them apart)."""
    g = np.random.default_rng(seed)
    H = W = size
    truth = np.zeros((H, W), bool)
    truth[10:30, 12:32] = True
    stripes = (np.arange(W)[None, :] // 3 % 2).astype(bool).repeat(H, 0)
    obj = np.where(stripes[..., None], [100.0, 100.0, 100.0], [200.0, 40.0, 40.0])
    bkg = np.where(stripes[..., None], [106.0, 106.0, 106.0], [40.0, 40.0, 200.0])
    img = np.where(truth[..., None], obj, bkg) + g.normal(0, 1.0, (H, W, 3))
    img[0, 0] = 0.0  # pin the range to 0..255 so the histogram bins are 16 levels wide
    img[0, 1] = 255.0
    return np.clip(img, 0, 255).astype(np.float32), truth


def iou(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return (a & b).sum() / (a | b).sum()


def test_mixture_beats_one_shot_histogram_on_two_colour_textures():
    img, truth = two_colour_textures()
    seeds = np.zeros(truth.shape, np.uint8)
    seeds[18:22, 18:26] = 1  # covers both object colours
    seeds[:3] = 2
    seeds[-3:] = 2
    hist = torchcut.segment(img, seeds, bins=16, connectivity=8).numpy()
    mix = grabcut(img, seeds).numpy()
    assert iou(hist, truth) < 0.8  # grey object stripes and grey background stripes share bins
    assert iou(mix, truth) > 0.99
    boxed = grabcut(img, box=(8, 6, 36, 34)).numpy()
    assert iou(boxed, truth) > 0.99


def test_fit_matches_numpy_and_loglik_matches_scipy():
    from scipy.stats import multivariate_normal

    g = np.random.default_rng(1)
    N, C, K = 300, 3, 2
    x = torch.from_numpy(g.normal(100, 20, (1, N, C)).astype(np.float32))
    cls = torch.from_numpy(g.integers(0, 3, (1, N)))
    comp = torch.from_numpy(g.integers(0, K, (1, N)))
    params = _fit(x, cls, comp, K)
    ll = _component_loglik(x, params)[0].double().numpy()  # [N, 2, K]
    xs = x[0].double().numpy()
    for j in range(2):
        tot = int((cls[0] == j).sum())
        for k in range(K):
            sel = ((cls[0] == j) & (comp[0] == k)).numpy()
            mu = xs[sel].mean(0)
            cov = np.cov(xs[sel].T, bias=True) + 0.1 * np.eye(C)
            np.testing.assert_allclose(params[1][0, j, k].numpy(), mu, rtol=1e-5)
            want = np.log(sel.sum() / tot) + multivariate_normal(mu, cov).logpdf(xs)
            np.testing.assert_allclose(ll[:, j, k], want, rtol=1e-4, atol=1e-3)


def test_kmeans_recovers_separated_clusters_per_class():
    g = np.random.default_rng(2)
    centres = np.array([[0, 0, 0], [200, 0, 0], [0, 200, 0], [0, 0, 200]], np.float32)
    which = g.integers(0, 4, 400)
    x = torch.from_numpy((centres[which] + g.normal(0, 3, (400, 3))).astype(np.float32))[None]
    cls = torch.from_numpy(np.where(which < 2, 0, 1))[None]  # clusters 0, 1 -> class 0; 2, 3 -> class 1
    comp = _kmeans(x, cls, 2)[0].numpy()
    for c in range(4):
        assert len(set(comp[which == c])) == 1
    assert comp[which == 0][0] != comp[which == 1][0] and comp[which == 2][0] != comp[which == 3][0]


small = st.integers(6, 12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=small, w=small, seed=st.integers(0, 10_000), conn=st.sampled_from([4, 8]), k=st.integers(1, 3))
def test_final_cut_is_minimal_and_respects_seeds(h, w, seed, conn, k):
    g = np.random.default_rng(seed)
    img = g.integers(0, 256, (3, h, w)).astype(np.float32)
    img[:, h // 3 : 2 * h // 3 + 1] += 60
    seeds = np.zeros((h, w), np.uint8)
    seeds[h // 2, w // 2] = 1
    seeds[0, :] = 2
    before = (img.copy(), seeds.copy())
    mask, res = grabcut(
        torch.from_numpy(img), torch.from_numpy(seeds), components=k, connectivity=conn, return_result=True
    )
    np.testing.assert_array_equal(img, before[0])
    np.testing.assert_array_equal(seeds, before[1])
    assert res.verify()
    assert torch.equal(res.mask, mask)
    pg, ids = to_pymaxflow(res.graph)
    assert pg.maxflow() == res.flow_value
    m = mask.numpy()
    assert m[seeds == 1].all() and not m[seeds == 2].any()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=small,
    w=small,
    seed=st.integers(0, 10_000),
    conn=st.sampled_from([4, 8]),
    backend=st.sampled_from(["cpu", "reference"]),
)
def test_warm_started_cuts_equal_cuts_from_zero_flow(h, w, seed, conn, backend):
    # every iteration's cut starts from the last one's flow; the masks must be those of cold solves
    g = np.random.default_rng(seed)
    img = torch.from_numpy(g.integers(0, 256, (3, 3, h, w)).astype(np.float32))
    img[:, :, h // 3 : 2 * h // 3 + 1] += 50
    seeds = torch.zeros((3, h, w), dtype=torch.uint8)
    seeds[:, h // 2, w // 2] = 1
    seeds[:, 0, :] = 2
    out = {}
    for warm in (True, False):
        out[warm] = grabcut(
            img,
            seeds,
            components=2,
            connectivity=conn,
            max_iter=6,
            backend=backend,
            return_result=True,
            warm_start=warm,
        )
    assert torch.equal(out[True][0], out[False][0])
    assert out[True][1].stats["grabcut_iterations"] == out[False][1].stats["grabcut_iterations"]


def test_batch_equals_single_calls_and_inputs_untouched():
    imgs, seeds = [], []
    for i in range(3):
        img, _ = two_colour_textures(seed=i)
        s = np.zeros(img.shape[:2], np.uint8)
        s[20, 20 + i] = 1
        s[:2] = 2
        imgs.append(torch.from_numpy(img).permute(2, 0, 1).contiguous())
        seeds.append(torch.from_numpy(s))
    batch, sb = torch.stack(imgs), torch.stack(seeds)
    b_copy, s_copy = batch.clone(), sb.clone()
    out = grabcut(batch, sb, max_iter=4)
    assert torch.equal(batch, b_copy) and torch.equal(sb, s_copy)
    assert out.shape == (3, 40, 40) and out.dtype == torch.bool
    for i in range(3):
        assert torch.equal(out[i], grabcut(imgs[i], seeds[i], max_iter=4))


def test_list_of_different_sizes_equals_single_calls():
    a, _ = two_colour_textures(seed=3, size=40)
    b, _ = two_colour_textures(seed=4, size=40)
    b = b[:36, :33]
    boxes = [(8, 6, 36, 34), (6, 6, 33, 33)]
    out = grabcut([a, b], box=boxes)
    assert [tuple(m.shape) for m in out] == [(40, 40), (36, 33)]
    for img, box, m in zip((a, b), boxes, out):
        assert torch.equal(m, grabcut(img, box=box))


def test_early_stop_is_reported():
    img, truth = two_colour_textures()
    _, res = grabcut(img, box=(8, 6, 36, 34), max_iter=10, return_result=True)
    assert 2 <= res.stats["grabcut_iterations"][0] < 10


def test_real_image_beats_histogram(shared_data):
    import cv2

    gt = cv2.imread(str(shared_data / "grabcut" / "boundary_GT" / "flower.bmp"), cv2.IMREAD_GRAYSCALE)
    img = cv2.imread(str(shared_data / "grabcut" / "data_GT" / "flower.jpg"), cv2.IMREAD_COLOR)[:, :, ::-1].copy()
    fg = (gt == 255).astype(np.uint8)
    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (41, 41))
    seeds = np.zeros(gt.shape, np.uint8)
    seeds[cv2.erode(fg, disc) > 0] = 1
    seeds[cv2.dilate(fg, disc) == 0] = 2
    known = gt != 128
    m = grabcut(img, seeds).numpy()
    cvm = np.where(seeds == 1, 1, np.where(seeds == 2, 0, 3)).astype(np.uint8)
    cv2.grabCut(img[:, :, ::-1].copy(), cvm, None, np.zeros((1, 65)), np.zeros((1, 65)), 5, cv2.GC_INIT_WITH_MASK)
    ours = iou(m[known], fg[known] > 0)
    theirs = iou(((cvm == 1) | (cvm == 3))[known], fg[known] > 0)
    assert ours > 0.98 and ours >= theirs - 0.002


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(box=(40, 0, 50, 10)), r"box: expected a box that overlaps the 40 x 40 image .*, got \(40, 0, 50, 10\)"),
        (dict(box=(-9, -5, -1, 10)), r"box: expected a box that overlaps the 40 x 40 image .*, got \(-9, -5, -1, 10\)"),
        (
            dict(box=(5, 5, 5, 10)),
            r"box: expected x0 < x1 and y0 < y1 \(an empty box selects nothing\), got \(5, 5, 5, 10\)",
        ),
        (dict(box=(5, 9, 10, 3)), r"box: expected x0 < x1 and y0 < y1"),
        (dict(box=(5.5, 5, 5.2, 10)), r"box: expected x0 < x1 and y0 < y1 .* got \(5.5, 5, 5.2, 10\)"),
        (dict(box=(1, 1, float("nan"), 9)), r"box: expected finite coordinates, got \[1.0, 1.0, nan, 9.0\]"),
        (dict(box=(1, 1, 9)), r"box: expected \(x0, y0, x1, y1\), got shape \(3,\)"),
        (
            dict(box="1 1 9 9"),
            r"box: expected \(x0, y0, x1, y1\) as 4 numbers, or one such box per image, got '1 1 9 9'",
        ),
        (dict(), r"seeds, box: expected seeds .* or a box, got neither"),
        (dict(box=(0, 0, 40, 40)), r"expected some background"),
        (dict(box=(1, 1, 9, 9), components=0), r"components: expected an int >= 1, got 0"),
        (dict(box=(1, 1, 9, 9), max_iter=0), r"max_iter: expected an int >= 1, got 0"),
        (dict(box=(1, 1, 9, 9), connectivity=6), r"connectivity: expected 4 or 8, got 6"),
        (dict(box=(1, 1, 9, 9), lam=-1.0), r"lam: expected a finite number in \[0, 1e\+06\], got -1.0"),
        (dict(box=(1, 1, 9, 9), lam=2e6), r"lam: expected a finite number in \[0, 1e\+06\], got 2000000.0"),
        (dict(box=[(1, 1, 9, 9)] * 3), r"box: expected \(x0, y0, x1, y1\), got shape \(3, 4\)"),
    ],
)
def test_bad_input_raises_value_error(kwargs, match):
    img = torch.rand(3, 40, 40)
    with pytest.raises(ValueError, match=match):
        grabcut(img, **kwargs)


def test_bad_seeds_and_lists():
    img = torch.rand(3, 10, 10)
    full = torch.ones(10, 10, dtype=torch.uint8)
    full[0] = 2
    with pytest.raises(ValueError, match=r"expected some unknown pixels"):
        grabcut(img, full)
    with pytest.raises(ValueError, match=r"seeds: expected labels 0 \(unknown\), 1 \(object\) and 2"):
        grabcut(img, torch.full((10, 10), 3))
    with pytest.raises(ValueError, match=r"seeds: expected a list of 2 seed arrays"):
        grabcut([img, img], full)
    with pytest.raises(
        ValueError, match=r"box: expected \(x0, y0, x1, y1\) or 2 such boxes \(shape \(2, 4\)\), got shape \(3, 4\)"
    ):
        grabcut([img, img], box=[(1, 1, 5, 5)] * 3)
    with pytest.raises(ValueError, match=r"image: expected at least one image"):
        grabcut([], box=(1, 1, 5, 5))


@pytest.mark.cuda
def test_cuda_matches_cpu_and_batches():
    imgs, boxes = [], []
    for i in range(4):
        img, _ = two_colour_textures(seed=i)
        imgs.append(torch.from_numpy(img).permute(2, 0, 1).contiguous())
        boxes.append((8, 6, 36, 34))
    cpu = grabcut(torch.stack(imgs), box=boxes)
    gpu, res = grabcut(torch.stack(imgs).cuda(), box=boxes, return_result=True)
    assert gpu.device.type == "cuda" and res.verify()
    for a, b in zip(cpu, gpu.cpu()):
        assert iou(a, b) > 0.99
    out = grabcut([m.cuda() for m in imgs[:2]], box=boxes[:2])
    assert all(torch.equal(o, g) for o, g in zip(out, gpu[:2]))
    # the warm-started push-relabel gives the cuts of solves from zero flow
    cold = grabcut(torch.stack(imgs).cuda(), box=boxes, warm_start=False)
    assert torch.equal(cold, gpu)


@pytest.mark.cuda
def test_cuda_graph_replays_equal_eager_steps():
    module = sys.modules["torchcut._grabcut"]
    g = torch.Generator().manual_seed(5)
    imgs = []
    for _ in range(3):
        im = torch.rand(3, 40, 56, generator=g) * 60
        im[:, 10:30, 12:40] += 120 + 40 * torch.rand(3, 1, 1, generator=g)
        imgs.append(im.cuda())
    box = (8, 6, 44, 34)
    cache = module._GRAPHS
    cache.graphs.clear()
    cache.seen.clear()
    replays = cache.replays
    graphed = [grabcut(im, box=box, max_iter=6) for im in imgs + imgs[:1]]
    keys = list(cache.graphs)
    assert any(k[-1] for k in keys) and any(not k[-1] for k in keys)  # the k-means step and a later step
    assert cache.replays > replays  # the graphs were replayed, not only captured
    eager = [grabcut(im, box=box, max_iter=6, cuda_graphs=False) for im in imgs + imgs[:1]]
    assert all(torch.equal(a, b) for a, b in zip(graphed, eager))
    # a batch of another shape and the list path still run eagerly or graphed, with equal masks
    both = grabcut(torch.stack(imgs), box=[box] * 3, max_iter=6)
    assert all(torch.equal(b, e) for b, e in zip(both, eager[:3]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), C=st.sampled_from([1, 3, 4]), K=st.integers(1, 5), B=st.integers(1, 2))
def test_compiled_cpu_models_match_the_tensor_version(seed, C, K, B):
    """cpu_grabcut.cpp's Lloyd iterations and model step against the tensor ops they replace on the CPU."""
    module = sys.modules["torchcut._grabcut"]
    g = torch.Generator().manual_seed(seed)
    H, W = 30, 37
    x = torch.rand(B, H * W, C, generator=g) * 255
    x[:, : H * W // 3] *= 0.3  # two populations
    cls = torch.randint(0, 3, (B, H * W), generator=g)
    seeds = torch.randint(0, 3, (B, H, W), generator=g).to(torch.uint8) * (torch.rand(B, H, W, generator=g) < 0.1)
    valid = torch.rand(B, H, W, generator=g) < 0.95
    out = {}
    for ops in (False, True):
        module.CPU_OPS = ops
        try:
            comp = module._kmeans(x, cls, K)
            first = module._models(x, cls, None, seeds, valid, K, 5000)
            out[ops] = (comp, first, module._models(x, cls, first[0], seeds, valid, K, 5000))
        finally:
            module.CPU_OPS = True
    (c0, f0, n0), (c1, f1, n1) = out[False], out[True]
    assert (c0 == c1).float().mean() >= 0.999  # near-ties may go either way (float sums in another order)
    for a, b in ((f0, f1), (n0, n1)):
        assert a[0].shape == b[0].shape and a[1].shape == b[1].shape == (B, H, W)
        finite = torch.isfinite(a[0])
        assert torch.equal(finite, torch.isfinite(b[0]))
        torch.testing.assert_close(a[0][finite], b[0][finite], rtol=1e-4, atol=1e-3)
        for s, t in ((a[1], b[1]), (a[2], b[2])):
            assert (s - t).abs().max() <= 1 and (s != t).float().mean() <= 0.01  # rounding at .5


def test_compiled_cpu_models_give_the_tensor_versions_masks():
    module = sys.modules["torchcut._grabcut"]
    g = torch.Generator().manual_seed(3)
    img = torch.rand(3, 48, 64, generator=g) * 80
    img[:, 12:36, 16:48] += 120
    img[0, 12:36:2, 16:48] += 40  # a striped object: two colours
    masks = {}
    for ops in (True, False):
        module.CPU_OPS = ops
        try:
            masks[ops] = grabcut(img, box=(10, 8, 54, 40))
        finally:
            module.CPU_OPS = True
    assert torch.equal(masks[True], masks[False])
    assert masks[True][14:34, 18:46].float().mean() > 0.95 and masks[True][:4].sum() == 0


def test_compiled_cpu_ops_check_their_inputs():
    from torchcut import _ops

    _ops.ensure("cpu")
    x = torch.zeros(1, 4, 3, dtype=torch.float64)
    cls = torch.zeros(1, 4, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="x: expected a contiguous float32 CPU tensor"):
        torch.ops.torchcut.grabcut_lloyd(x, cls, cls, 2, 3)
    with pytest.raises(RuntimeError, match="x: expected 1 to 8 channels, got 9"):
        torch.ops.torchcut.grabcut_lloyd(torch.zeros(1, 4, 9), cls, cls, 2, 3)
    with pytest.raises(RuntimeError, match="cls, comp: expected contiguous int64 tensors"):
        torch.ops.torchcut.grabcut_lloyd(torch.zeros(1, 4, 3), cls[:, :3], cls, 2, 3)


# ---------------------------------------------------------------------------------------------- boxes
def test_box_past_the_border_is_clipped_and_float_boxes_round_outward():
    img, truth = two_colour_textures()  # 40 x 40, object rows 10:30, columns 12:32
    want = grabcut(img, box=(8, 6, 36, 34))
    assert iou(want, truth) > 0.99
    for box in (
        (8.0, 6.0, 36.0, 34.0),
        (8.7, 6.2, 35.1, 33.5),
        np.array([8.5, 6.9, 35.01, 33.2]),
        torch.tensor([8.2, 6.5, 35.5, 33.9]),
        [np.float32(8.1), 6, 35.3, torch.tensor(34)],
    ):
        assert torch.equal(grabcut(img, box=box), want), box
    wide = grabcut(img, box=(0, 0, 40, 34))
    for box in ((-20, -7, 500, 34), (-0.5, -3.2, 40.0001, 33.7), torch.tensor([-100.0, -1e9, 1e9, 34.0])):
        assert torch.equal(grabcut(img, box=box), wide), box


def test_batched_and_listed_boxes_accept_floats_tensors_and_border_crossings():
    a, _ = two_colour_textures(0)
    b, _ = two_colour_textures(1)
    batch = torch.from_numpy(np.stack([a, b]))
    boxes = [(8, 6, 36, 34), (0, 0, 40, 34)]
    want = grabcut(batch, box=boxes)
    for boxes in (
        torch.tensor([[8.5, 6.0, 35.5, 34.0], [-3.0, -9.0, 45.0, 33.2]]),
        np.array([[8, 6, 36, 34], [-1, -1, 41, 34]]),
        [(8, 6, 35.2, 34), torch.tensor([-5, -5, 99, 34])],
    ):
        assert torch.equal(grabcut(batch, box=boxes), want)
        assert all(torch.equal(m, w) for m, w in zip(grabcut([a, b], box=boxes), want))
    one = grabcut(batch, box=torch.tensor([8.5, 6.0, 35.5, 34.0]))  # one box for every image
    assert torch.equal(one, grabcut(batch, box=[(8, 6, 36, 34)] * 2))
    with pytest.raises(
        ValueError, match=r"box: expected a box that overlaps the 40 x 40 image .*got \(50, 0, 60, 10\) \(image 1\)"
    ):
        grabcut(batch, box=[(8, 6, 36, 34), (50, 0, 60, 10)])
    with pytest.raises(
        ValueError, match=r"box: expected a box that overlaps the 40 x 40 image .*got \(50, 0, 60, 10\) \(image 1\)"
    ):
        grabcut([a, b], box=[(8, 6, 36, 34), (50, 0, 60, 10)])


# ---------------------------------------------------------------------------------------------- empty masks
def corner_crop(shared_data, name, corner, transpose, box=(10, 10, 60, 50)):
    """A 60 x 70 crop (70 x 60 transposed) of a GrabCut image scaled so that its object is a few pixels
    larger than ``box``, with a corner of the object's bounding box on the same corner of ``box``: the
    object touches the box's corner and crosses its two far sides."""
    from PIL import Image

    im = Image.open(shared_data / "grabcut" / "data_GT" / f"{name}.jpg").convert("RGB")
    gim = Image.open(shared_data / "grabcut" / "boundary_GT" / f"{name}.bmp")
    ys, xs = np.nonzero(np.array(gim) > 128)
    x0, y0, x1, y1 = box
    bh, bw = (x1 - x0, y1 - y0) if transpose else (y1 - y0, x1 - x0)
    s = min((bw + 6) / (np.ptp(xs) + 1), (bh + 6) / (np.ptp(ys) + 1))
    size = (int(im.width * s), int(im.height * s))
    img = np.array(im.resize(size, Image.BILINEAR))
    gt = np.array(gim.resize(size, Image.NEAREST)) > 128
    if transpose:
        img, gt = img.transpose(1, 0, 2), gt.T
    ys, xs = np.nonzero(gt)
    r0 = ys.min() - y0 if corner in (0, 1) else ys.max() - (y1 - 1)
    c0 = xs.min() - x0 if corner in (0, 2) else xs.max() - (x1 - 1)
    H, W = (70, 60) if transpose else (60, 70)
    img = np.pad(img, ((100, 100), (100, 100), (0, 0)), mode="edge")[r0 + 100 : r0 + 100 + H, c0 + 100 : c0 + 100 + W]
    gt = np.pad(gt, 100)[r0 + 100 : r0 + 100 + H, c0 + 100 : c0 + 100 + W]
    return np.ascontiguousarray(img), gt


def test_object_touching_the_box_corner_keeps_a_mask(shared_data, recwarn):
    from torchcut import EmptyMaskWarning

    # Without the rule that a cut may not empty a mask, the third (60 x 70) and second (70 x 60)
    # iterations emptied these masks, and the empty object model kept them empty.
    box = (10, 10, 60, 50)
    crops = [corner_crop(shared_data, "153093", 1, False), corner_crop(shared_data, "271008", 0, True)]
    masks = []
    for img, gt in crops:
        m, res = grabcut(img, box=box, return_result=True)
        ran = res.stats["grabcut_iterations"][0]
        assert m.any() and ran < 5 and res.stats["grabcut_empty"] == [False]
        assert iou(m, gt) > 0.35
        assert torch.equal(m, grabcut(img, box=box, max_iter=ran))  # the mask of one iteration fewer
        assert res.verify() and torch.equal(res.mask, m)
        assert not m[:10].any() and not m[50:].any() and not m[:, :10].any() and not m[:, 60:].any()
        masks.append(m)
    assert not [w for w in recwarn if issubclass(w.category, EmptyMaskWarning)]
    # alone, in a batch (with a flipped copy) and in a list of the two sizes: the same masks
    for (img, _), m in zip(crops, masks):
        both = grabcut(np.stack([img, img[::-1, ::-1].copy()]), box=box)
        assert torch.equal(both[0], m)
    assert all(torch.equal(a, b) for a, b in zip(grabcut([c[0] for c in crops], box=box), masks))


def test_empty_mask_comes_with_a_warning_naming_the_box(shared_data):
    from torchcut import EmptyMaskWarning

    img, _ = corner_crop(shared_data, "bush", 0, False)
    with pytest.warns(EmptyMaskWarning, match=r"no object pixel left in the image \(box \(10, 10, 60, 50\)\).*lam=25"):
        m, res = grabcut(img, box=(10, 10, 60, 50), return_result=True)
    assert not m.any() and res.stats["grabcut_empty"] == [True]
    # a smaller smoothness weight pays for a boundary: no warning
    assert grabcut(img, box=(10, 10, 60, 50), lam=5).any()
    # noise: nothing tells the box from the rest; in a batch the warning names the image and its clipped box
    noise = torch.rand(2, 3, 30, 30, generator=torch.Generator().manual_seed(0)) * 255
    noise[0, :, 8:20, 8:20] = 250.0
    with pytest.warns(EmptyMaskWarning, match=r"in image 1 \(box \(0, 5, 20, 25\)\):"):
        out = grabcut(noise, box=[(5, 5, 25, 25), (-4, 5, 20, 25)])
    assert out[0].any() and not out[1].any()


def test_unknown_keyword_names_grabcut():
    img, _ = two_colour_textures()
    with pytest.raises(
        TypeError,
        match=r"^grabcut\(\): unexpected keyword argument 'max_iters' \(did you mean "
        r"'max_iter'\?\)\. grabcut\(\) takes image, seeds, box, max_iter, .*; "
        r"further keywords go to the max-flow backend, here 'cpu'",
    ):
        grabcut(img, box=(8, 6, 36, 34), max_iters=3)
    with pytest.raises(
        TypeError,
        match=r"^grabcut\(\): keyword argument 'threads' is an option of the 'cpu' backend, "
        r"not of the 'reference' backend",
    ):
        grabcut([img], box=(8, 6, 36, 34), backend="reference", threads=2)
    assert torch.equal(grabcut(img, box=(8, 6, 36, 34), threads=1), grabcut(img, box=(8, 6, 36, 34)))
