"""torchcut.segment: recovers known objects, honours seeds, agrees with the graph it solves."""

import numpy as np
import pytest
import torch
from PIL import Image

import torchcut
from torchcut.energy import segmentation_graph


def iou(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return (a & b).sum() / (a | b).sum()


def noisy_disk(n=40, radius=11, noise=0.12, seed=0, colour=False):
    """A bright disk on a dark background with Gaussian noise; seeds: a blob inside, a frame outside."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:n, :n]
    cy, cx = n / 2 + 1.5, n / 2 - 2.5
    truth = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
    if colour:
        fg, bg = np.array([0.8, 0.35, 0.2]), np.array([0.25, 0.4, 0.6])
        img = np.where(truth[..., None], fg, bg) + rng.normal(0, noise, (n, n, 3))
    else:
        img = np.where(truth, 0.7, 0.3) + rng.normal(0, noise, (n, n))
    seeds = np.zeros((n, n), np.uint8)
    seeds[int(cy) - 2 : int(cy) + 3, int(cx) - 2 : int(cx) + 3] = 1
    seeds[:2, :] = seeds[-2:, :] = seeds[:, :2] = seeds[:, -2:] = 2
    return img.astype(np.float32), seeds, truth


def test_noisy_disk_is_recovered():
    img, seeds, truth = noisy_disk()
    mask = torchcut.segment(img, seeds)
    assert mask.dtype == torch.bool and mask.shape == truth.shape
    assert iou(mask.numpy(), truth) > 0.95


def test_noisy_colour_disk_is_recovered_8_connected():
    img, seeds, truth = noisy_disk(colour=True, noise=0.1, seed=1)
    mask = torchcut.segment(torch.from_numpy(img).permute(2, 0, 1), seeds, connectivity=8)
    assert iou(mask.numpy(), truth) > 0.95


def test_smoothness_removes_noise_specks():
    img, seeds, truth = noisy_disk(noise=0.2, seed=2)
    rough = torchcut.segment(img, seeds, lam=0.01)
    smooth = torchcut.segment(img, seeds, lam=8)
    assert iou(smooth.numpy(), truth) > iou(rough.numpy(), truth)
    assert iou(smooth.numpy(), truth) > 0.9


def test_hard_constraints_hold_against_the_data():
    img, seeds, truth = noisy_disk(seed=3)
    # seeds that contradict the colours: an object seed out in the background, a background seed in the disk
    seeds = seeds.copy()
    seeds[5, 30] = 1
    seeds[20, 17] = 2
    mask = torchcut.segment(img, seeds, lam=2).numpy()
    assert mask[seeds == 1].all()
    assert not mask[seeds == 2].any()


def test_mask_is_the_cut_of_the_energy_graph_and_verifies():
    img, seeds, _ = noisy_disk(seed=4)
    mask, result = torchcut.segment(img, seeds, connectivity=8, return_result=True)
    assert result.verify()
    g = segmentation_graph(img, seeds, connectivity=8)
    direct = torchcut.maxflow(g)
    assert direct.verify()
    assert torch.equal(mask, direct.mask)
    assert result.flow_value == direct.flow_value
    info = result.graph.energy
    assert info.connectivity == 8 and info.ndim == 2 and info.hard > 0
    # the cut value is the energy of the mask, in integer units
    assert result.flow_value > 0 and result.flow_value / info.scale < mask.numel() * 20


def test_flow_matches_pymaxflow_and_masks_have_equal_energy():
    maxflow = pytest.importorskip("maxflow")
    img, seeds, _ = noisy_disk(n=24, radius=7, seed=5)
    mask, result = torchcut.segment(img, seeds, return_result=True)
    g = result.graph
    pg = maxflow.Graph[int]()
    nodes = pg.add_grid_nodes(g.shape)
    caps = g.caps[0].numpy().astype(np.int64)
    K = len(g.offsets)
    for k, o in enumerate(g.offsets):
        s = np.zeros((3, 3), np.int64)
        s[1 + o[0], 1 + o[1]] = 1
        pg.add_grid_edges(nodes, weights=caps[k], structure=s, symmetric=False)
        s = np.zeros((3, 3), np.int64)
        s[1 - o[0], 1 - o[1]] = 1
        pg.add_grid_edges(nodes, weights=caps[K + k], structure=s, symmetric=False)
    pg.add_grid_tedges(nodes, g.source[0].numpy(), g.sink[0].numpy().astype(np.int64))
    assert pg.maxflow() == result.flow_value
    # PyMaxflow's segments are True on the sink side: the opposite of torchcut's masks
    theirs = ~pg.get_grid_segments(nodes)
    assert iou(theirs, mask.numpy()) > 0.98


def palette(labels):
    im = Image.frombytes("P", labels.shape[::-1], labels.astype(np.uint8).tobytes())
    im.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255])
    return im


def test_tensor_numpy_and_pil_inputs_give_the_same_mask():
    img, seeds, truth = noisy_disk(colour=True, seed=6)
    u8 = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
    ref = torchcut.segment(u8, seeds)
    assert iou(ref.numpy(), truth) > 0.9
    variants = [
        (torch.from_numpy(u8), torch.from_numpy(seeds)),  # [H, W, C] tensor
        (torch.from_numpy(u8).permute(2, 0, 1), torch.from_numpy(seeds).long()),  # [C, H, W] tensor
        (Image.fromarray(u8), Image.fromarray(seeds)),  # PIL RGB and L
        (torch.from_numpy(u8).float(), seeds.astype(np.int32)),  # float values, int32 seeds
        (u8, palette(seeds)),  # palette seeds: the indices are the labels
    ]

    def snapshot(x):
        return x.numpy().copy() if isinstance(x, torch.Tensor) else np.array(x)

    for image, s in variants:
        before = (snapshot(image), snapshot(s))
        assert torch.equal(torchcut.segment(image, s), ref)
        assert np.array_equal(snapshot(image), before[0]) and np.array_equal(snapshot(s), before[1])  # untouched


def test_gray_pil_image():
    img, seeds, truth = noisy_disk(seed=7)
    u8 = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
    a = torchcut.segment(Image.fromarray(u8), seeds)
    b = torchcut.segment(torch.from_numpy(u8), torch.from_numpy(seeds))
    assert torch.equal(a, b) and iou(a.numpy(), truth) > 0.9


def test_batch_of_two_equals_two_single_calls():
    a, sa, ta = noisy_disk(seed=8)
    b, sb, tb = noisy_disk(seed=9, noise=0.05)
    b = 1.0 - b  # dark disk on bright ground: different statistics in the batch
    batch = torchcut.segment(np.stack([a, b]), np.stack([sa, sb]), ndim=2)
    assert batch.shape == (2,) + ta.shape
    assert torch.equal(batch[0], torchcut.segment(a, sa))
    assert torch.equal(batch[1], torchcut.segment(b, sb))
    # colour batch, channels first
    ca, sca, _ = noisy_disk(colour=True, seed=10)
    cb, scb, _ = noisy_disk(colour=True, seed=11)
    x = torch.from_numpy(np.stack([ca, cb])).permute(0, 3, 1, 2)  # [B, C, H, W]
    cbatch = torchcut.segment(x, np.stack([sca, scb]), connectivity=4)
    assert torch.equal(cbatch[0], torchcut.segment(ca, sca))
    assert torch.equal(cbatch[1], torchcut.segment(cb, scb))


def noisy_ball(n=14, radius=4.5, seed=0):
    rng = np.random.default_rng(seed)
    z, y, x = np.mgrid[:n, :n, :n]
    c = n / 2 - 0.5
    truth = (z - c) ** 2 + (y - c) ** 2 + (x - c - 1) ** 2 <= radius**2
    vol = np.where(truth, 0.7, 0.3) + rng.normal(0, 0.1, truth.shape)
    seeds = np.zeros(truth.shape, np.uint8)
    ci = int(round(c))
    seeds[ci - 1 : ci + 2, ci - 1 : ci + 2, ci : ci + 3] = 1
    seeds[0], seeds[-1] = 2, 2
    return vol.astype(np.float32), seeds, truth


@pytest.mark.parametrize("conn", [6, 26])
def test_3d_volume(conn):
    vol, seeds, truth = noisy_ball(seed=conn)
    mask, result = torchcut.segment(vol, seeds, connectivity=conn, return_result=True)
    assert mask.shape == truth.shape and result.graph.ndim == 3
    assert result.verify()
    assert iou(mask.numpy(), truth) > 0.85
    assert mask.numpy()[seeds == 1].all() and not mask.numpy()[seeds == 2].any()


def test_3d_batch_equals_singles():
    va, sa, _ = noisy_ball(n=10, radius=3, seed=1)
    vb, sb, _ = noisy_ball(n=10, radius=3, seed=2)
    batch = torchcut.segment(np.stack([va, vb]), np.stack([sa, sb]))  # [B, D, H, W]: 4-dim seeds are 3D
    assert batch.shape == (2, 10, 10, 10)
    assert torch.equal(batch[0], torchcut.segment(va, sa, ndim=3))
    assert torch.equal(batch[1], torchcut.segment(vb, sb, ndim=3))


def test_errors_reach_the_user():
    img, seeds, _ = noisy_disk(n=12, radius=3)
    with pytest.raises(ValueError, match=r"seeds: shape \(2, 12, 12\) is ambiguous"):
        torchcut.segment(np.stack([img, img]), np.stack([seeds, seeds]))
    with pytest.raises(
        ValueError,
        match=r"seeds: expected shape \(12, 12\), from the image's spatial shape "
        r"\(image of shape \(12, 12\)\), got \(12, 11\)",
    ):
        torchcut.segment(img, seeds[:, :11])
    rgb = np.stack([img] * 3, -1)
    with pytest.raises(
        ValueError,
        match=r"seeds: expected shape \(12, 12\), from the image's spatial shape "
        r"\(image of shape \(12, 12, 3\)\), got \(11, 12\)",
    ):
        torchcut.segment(rgb, seeds[:11])
    with pytest.raises(
        ValueError,
        match=r"seeds: expected shape \(12, 12\), from the image's spatial shape "
        r"\(image of shape \(3, 12, 12\), channel_axis=0\), got \(12, 11\)",
    ):
        torchcut.segment(np.moveaxis(rgb, -1, 0), seeds[:, :11], channel_axis=0)
    with pytest.raises(ValueError, match=r"seeds: expected at least one object \(label 1\) seed in batch item 1"):
        torchcut.segment(np.stack([img, img]), np.stack([seeds, np.where(seeds == 1, 0, seeds)]), ndim=2)
    with pytest.raises(
        TypeError, match=r"seeds: expected a one-channel PIL image \(mode L, P or I\) of labels, got mode RGB"
    ):
        torchcut.segment(img, Image.fromarray(seeds).convert("RGB"))
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        torchcut.segment(img, seeds, backend="nope")


@pytest.mark.cuda
def test_cuda_image_gives_cuda_mask():
    img, seeds, truth = noisy_disk(colour=True, seed=12)
    x = torch.from_numpy(img).cuda().permute(2, 0, 1)
    mask, result = torchcut.segment(x, torch.from_numpy(seeds).cuda(), connectivity=8, return_result=True)
    assert mask.device.type == "cuda" and mask.dtype == torch.bool
    assert result.verify()
    # the same graph solved by the reference solver on the CPU gives the same (unique) cut
    assert torch.equal(torchcut.maxflow(result.graph.to("cpu")).mask, mask.cpu())
    cpu = torchcut.segment(img, seeds, connectivity=8)  # capacities may differ by an ulp-rounding unit
    assert iou(mask.cpu().numpy(), cpu.numpy()) > 0.99 and iou(mask.cpu().numpy(), truth) > 0.9


@pytest.mark.cuda
def test_cuda_volume():
    vol, seeds, truth = noisy_ball(seed=3)
    mask, result = torchcut.segment(
        torch.from_numpy(vol).cuda(), torch.from_numpy(seeds).cuda(), connectivity=26, return_result=True
    )
    assert mask.device.type == "cuda" and result.verify()
    assert torch.equal(torchcut.maxflow(result.graph.to("cpu")).mask, mask.cpu())
    assert iou(mask.cpu().numpy(), truth) > 0.85


def test_unknown_keyword_names_segment_and_lists_what_it_takes():
    img, seeds, _ = noisy_disk(n=12, radius=3)
    with pytest.raises(
        TypeError,
        match=r"^segment\(\): unexpected keyword argument 'lamda' \(did you mean 'lam'\?\)\. "
        r"segment\(\) takes image, seeds, lam, sigma, .*, backend, return_result; "
        r"further keywords go to the max-flow backend, here 'reference' "
        r"\(backend='reference' on cpu\), which takes max_iter, relabel_period",
    ):
        torchcut.segment(img, seeds, lamda=2, backend="reference")
    with pytest.raises(
        TypeError,
        match=r"^segment\(\): keyword argument 'tile_x' is an option of the 'cuda' backend, "
        r"not of the 'reference' backend that runs here",
    ):
        torchcut.segment(img, seeds, tile_x=32, backend="reference")
    for name in ("max_iter", "max_rounds"):  # max_rounds: the option's former name
        with pytest.raises(
            TypeError,
            match=rf"^segment\(\): keyword argument '{name}' is an option of the 'reference' "
            r"backend, not of the 'cpu' backend that runs here \(backend='cpu' on cpu\), "
            r"which takes threads, algorithm",
        ):
            torchcut.segment(img, seeds, **{name: 5}, backend="cpu")
    # the backend's own options still reach it
    want = torchcut.segment(img, seeds, backend="reference")
    assert torch.equal(torchcut.segment(img, seeds, backend="reference", max_iter=10**6), want)
    with pytest.warns(
        FutureWarning, match=r"the reference backend's options: the keyword max_rounds= is deprecated; use max_iter="
    ):
        assert torch.equal(torchcut.segment(img, seeds, backend="reference", max_rounds=10**6), want)
    assert torch.equal(torchcut.segment(img, seeds, backend="cpu", threads=1, algorithm="pseudoflow"), want)
