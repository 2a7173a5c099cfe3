"""torchcut.Segmenter: every update equals segment() on the same seeds, warm or cold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data, transform

import torchcut
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
