"""torchcut.Segmenter: every update equals segment() on the same seeds, warm or cold; with a fixed
appearance model, the minimum cut of the kept data term under the current hard constraints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data, transform

import torchcut
from torchcut.energy import _grid_graph, model_terms
from torchcut.interactive import brush


def _image(n=48):
    return torch.from_numpy((transform.resize(data.astronaut(), (n, n)) * 255).astype(np.uint8))


def _strokes(n, count, seed):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        p = rng.uniform(0, n - 1, size=(3, 2))
        yield [tuple(map(float, q)) for q in p], int(rng.integers(0, 3)), float(rng.uniform(0.5, 3))


@pytest.mark.parametrize("lam,conn", [(8.0, 4), (30.0, 8)])
def test_updates_equal_segment(lam, conn):
    img = _image()
    seg = torchcut.Segmenter(img, lam=lam, connectivity=conn)
    cold = torchcut.Segmenter(img, lam=lam, connectivity=conn, warm=False)
    seeds = torch.zeros(48, 48, dtype=torch.int64)
    seeds[20:28, 20:28] = 1
    seeds[0] = 2
    seeds[-1] = 2
    m = seg.update(seeds)
    assert not seg.stats["warm"] and torch.equal(m, torchcut.segment(img, seeds, lam=lam, connectivity=conn))
    for pts, label, radius in _strokes(48, 6, 7):
        seeds = seeds.clone()
        seeds[brush((48, 48), torch.tensor(pts), radius)] = label
        seeds[0, 0], seeds[24, 24] = 2, 1  # both kinds of seed stay
        m = seg.update(seeds)
        assert seg.stats["warm"]
        want = torchcut.segment(img, seeds, lam=lam, connectivity=conn)
        assert torch.equal(m, want) and torch.equal(cold.update(seeds), want)


def test_stroke_helper_paints_and_erases():
    img = _image(32)
    seg = torchcut.Segmenter(img)
    m = seg.stroke([(16, 10), (16, 20)], label=1, radius=2)
    assert not m.any() and int((seg.seeds == 1).sum()) > 0  # one kind of seed: nothing solved yet
    m = seg.stroke([(0, 0), (0, 31)], label=2, radius=1)
    assert torch.equal(m, torchcut.segment(img, seg.seeds))
    before = seg.seeds.clone()
    m = seg.stroke([(16, 15)], label=0, radius=1)
    assert int((seg.seeds == 1).sum()) < int((before == 1).sum())
    assert torch.equal(m, torchcut.segment(img, seg.seeds))


def _twins(n=32):
    """An image whose right half repeats its left half: every left pixel has an unseeded twin."""
    a = _image(n)
    return torch.cat([a, a], dim=1)


def _fixed_mask(g0, terms, seeds):
    """The reference: the kept data term, the seeds' hard constraints, solved from scratch."""
    src, snk = terms
    hard = g0.energy.hard
    src = torch.where(seeds == 1, hard, torch.where(seeds == 2, 0, src))
    snk = torch.where(seeds == 2, hard, torch.where(seeds == 1, 0, snk))
    return torchcut.maxflow(_grid_graph(g0.caps, src, snk, g0.offsets, False)).mask


def test_model_terms_are_the_unseeded_data_term():
    img = _twins()
    seeds = torch.zeros(32, 64, dtype=torch.int64)
    seeds[10:20, 10:20], seeds[0, :32], seeds[:, 0] = 1, 2, 2
    g = torchcut.segmentation_graph(img, seeds, lam=8.0)
    src, snk = model_terms(img, seeds, g)
    assert src.dtype == g.source.dtype and snk.dtype == g.sink.dtype and src.shape == g.source.shape
    free = seeds == 0
    assert torch.equal(src[0][free], g.source[0][free]) and torch.equal(snk[0][free], g.sink[0][free])
    # a seeded pixel gets the data term of its unseeded twin (same colour, same histograms)
    assert torch.equal(src[0, :, :32], g.source[0, :, 32:]) and torch.equal(snk[0, :, :32], g.sink[0, :, 32:])
    assert int(src[0, 15, 15]) != g.energy.hard or int(g.source[0, 15, 47]) == g.energy.hard


@pytest.mark.parametrize("conn,backend", [(4, "auto"), (8, "auto"), (4, "reference")])
def test_fixed_model_updates(conn, backend):
    img = _twins()
    seg = torchcut.Segmenter(img, lam=8.0, connectivity=conn, model="fixed", backend=backend)
    cold = torchcut.Segmenter(img, lam=8.0, connectivity=conn, model="fixed", warm=False)
    seeds = torch.zeros(32, 64, dtype=torch.int64)
    seeds[12:20, 12:20], seeds[0], seeds[-1] = 1, 2, 2
    g0 = torchcut.segmentation_graph(img, seeds, lam=8.0, connectivity=conn)
    terms = model_terms(img, seeds, g0)
    m = seg.update(seeds)
    assert seg.stats["refit"] and torch.equal(m, torchcut.segment(img, seeds, lam=8.0, connectivity=conn))
    assert (seg._dynamic is not None) == (backend == "auto")  # the CPU keeps its search trees
    cold.update(seeds)
    changed = 0
    for pts, label, radius in _strokes(32, 8, 11):
        seeds = seeds.clone()
        seeds[brush((32, 64), torch.tensor(pts) * torch.tensor([1.0, 2.0]), radius)] = label
        before = seg.mask.clone()
        m = seg.update(seeds)
        assert seg.stats["warm"] and not seg.stats["refit"]
        want = _fixed_mask(g0, terms, seeds)
        assert torch.equal(m, want) and torch.equal(cold.update(seeds), want)
        changed += int((m != before).sum())
    assert changed > 0  # the strokes moved the cut
    # fitted again: the masks of segment() on these seeds
    seeds[0, 0], seeds[16, 16] = 2, 1
    m = seg.update(seeds, refit=True)
    assert seg.stats["refit"] and torch.equal(m, torchcut.segment(img, seeds, lam=8.0, connectivity=conn))


def test_fixed_model_volume():
    torch.manual_seed(3)
    vol = torch.rand(8, 10, 12) * 40
    vol[2:6, 3:8, 4:10] += 120
    seg = torchcut.Segmenter(vol, connectivity=6, model="fixed")
    seeds = torch.zeros(8, 10, 12, dtype=torch.int64)
    seeds[3:5, 4:7, 5:9], seeds[0], seeds[-1] = 1, 2, 2
    g0 = torchcut.segmentation_graph(vol, seeds, connectivity=6)
    terms = model_terms(vol, seeds, g0)
    assert torch.equal(seg.update(seeds), torchcut.segment(vol, seeds, connectivity=6))
    for label, box in (
        (2, (slice(2, 4), slice(0, 10), slice(4, 6))),
        (1, (slice(6, 7), slice(2, 5), slice(2, 5))),
        (0, (slice(3, 4),) * 3),
    ):
        seeds = seeds.clone()
        seeds[box] = label
        m = seg.update(seeds)
        assert seg.stats["warm"] and m.shape == (8, 10, 12) and torch.equal(m, _fixed_mask(g0, terms, seeds))


def test_fixed_model_erases_every_seed():
    img = _image(24)
    seg = torchcut.Segmenter(img, model="fixed")
    seeds = torch.zeros(24, 24, dtype=torch.int64)
    seeds[8:16, 8:16], seeds[0] = 1, 2
    g0 = torchcut.segmentation_graph(img, seeds)
    terms = model_terms(img, seeds, g0)
    seg.update(seeds)
    none = torch.zeros_like(seeds)  # the kept histograms alone decide
    assert torch.equal(seg.update(none), _fixed_mask(g0, terms, none))


def test_brush_distance():
    b = brush((7, 7), torch.tensor([[3.0, 3.0]]), 1.0)
    assert b.int().sum().item() == 5 and b[3, 3] and b[2, 3] and not b[2, 2]


def test_bad_inputs():
    seg = torchcut.Segmenter(_image(16))
    with pytest.raises(TypeError, match="seeds: expected integer labels"):
        seg.update(torch.zeros(16, 16))
    with pytest.raises(ValueError, match="label: expected 0"):
        seg.stroke([(1, 1)], label=3)
    with pytest.raises(ValueError, match="radius: expected"):
        seg.stroke([(1, 1)], label=1, radius=-1)
    with pytest.raises(ValueError, match="points: expected a sequence of 2-coordinate points"):
        seg.stroke([(1, 1, 1)], label=1)
    seeds = torch.zeros(16, 16, dtype=torch.int64)
    seeds[5, 5], seeds[0, 0] = 1, 2
    seg.update(seeds)
    with pytest.raises(ValueError, match=r"seeds: expected shape \(16, 16\)"):
        seg.update(torch.zeros(8, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="seeds: expected at least one object"):
        seg.update(torch.zeros(16, 16, dtype=torch.int64))
    with pytest.raises(ValueError, match="seeds: expected a tensor on cpu"):
        seg.update(torch.zeros(16, 16, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="model: expected 'refit' or 'fixed', got 'kept'"):
        torchcut.Segmenter(_image(16), model="kept")
    for backend in ("auto", "reference"):  # the kept search trees, the grid solvers' warm start
        fixed = torchcut.Segmenter(_image(16), model="fixed", backend=backend)
        fixed.update(seeds)
        bad = seeds.clone()
        bad[3, 3] = 3
        msg = r"seeds: expected labels 0 \(unknown\), 1 \(object\) and 2 \(background\), got values in \[[03], 3\]"
        with pytest.raises(ValueError, match=msg):
            fixed.update(bad)
        before = fixed.mask.clone()
        assert torch.equal(fixed.update(seeds), before)  # the failed update changed nothing


@pytest.mark.cuda
def test_updates_equal_segment_cuda():
    img = _image(64).cuda()
    seg = torchcut.Segmenter(img, lam=20.0)
    seeds = torch.zeros(64, 64, dtype=torch.int64, device="cuda")
    seeds[28:36, 28:36] = 1
    seeds[0] = 2
    for pts, label, radius in _strokes(64, 5, 3):
        seeds = seeds.clone()
        seeds[brush((64, 64), torch.tensor(pts), radius).cuda()] = label
        seeds[0, 0], seeds[32, 32] = 2, 1
        m = seg.update(seeds)
        assert m.is_cuda and torch.equal(m, torchcut.segment(img, seeds, lam=20.0))


@pytest.mark.cuda
def test_fixed_model_cuda():
    img = _twins(64).cuda()
    seg = torchcut.Segmenter(img, lam=20.0, model="fixed")
    seeds = torch.zeros(64, 128, dtype=torch.int64, device="cuda")
    seeds[28:36, 28:36], seeds[0] = 1, 2
    g0 = torchcut.segmentation_graph(img, seeds, lam=20.0)
    terms = model_terms(img, seeds, g0)
    seg.update(seeds)
    for pts, label, radius in _strokes(64, 6, 5):
        seeds = seeds.clone()
        seeds[brush((64, 128), torch.tensor(pts) * torch.tensor([1.0, 2.0]), radius).cuda()] = label
        m = seg.update(seeds)
        assert m.is_cuda and seg.stats["warm"] and torch.equal(m, _fixed_mask(g0, terms, seeds))
