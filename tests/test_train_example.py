"""examples/train_graphcut_head.py runs end to end in a tiny configuration, with both estimators."""

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_graphcut_head", ROOT / "examples" / "train_graphcut_head.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shapes_are_generated_with_their_masks(example):
    images, masks = example.make_shapes(6, 20, 0.0, torch.Generator().manual_seed(0))
    assert images.shape == (6, 1, 20, 20) and masks.shape == (6, 20, 20) and masks.dtype == torch.bool
    assert all(m.any() and not m.all() for m in masks)
    # without noise the object is brighter than the background everywhere
    for img, m in zip(images[:, 0], masks):
        assert img[m].min() > img[~m].max()


@pytest.mark.parametrize("estimator", ["blackbox", "perturbed"])
def test_trains_and_reports_iou(example, estimator, capsys):
    torch.manual_seed(0)
    results, lam, seconds = example.main(
        [
            "--size",
            "16",
            "--train",
            "8",
            "--test",
            "4",
            "--steps",
            "3",
            "--batch",
            "4",
            "--estimator",
            estimator,
            "--samples",
            "2",
            "--threads",
            "0",
        ]
    )
    assert set(results) == {
        "cnn",
        "cnn + cut (post hoc)",
        "cnn + cut (end to end)",
        "cnn of the end-to-end model, no cut",
    }
    assert all(0.0 <= v <= 1.0 for v in results.values())
    assert lam > 0 and lam != 0.5  # the head's strength was trained
    out = capsys.readouterr().out
    assert "held-out IoU" in out and f"estimator {estimator}" in out


def test_iou(example):
    a = torch.tensor([[True, True, False, False]])
    b = torch.tensor([[True, False, True, False]])
    assert example.iou(a, b) == pytest.approx(1 / 3)
    assert example.iou(torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool)) == 1.0


@pytest.mark.cuda
def test_trains_on_cuda(example):
    results, lam, _ = example.main(
        [
            "--size",
            "24",
            "--train",
            "16",
            "--test",
            "8",
            "--steps",
            "5",
            "--batch",
            "4",
            "--device",
            "cuda",
            "--threads",
            "0",
        ]
    )
    assert all(0.0 <= v <= 1.0 for v in results.values()) and lam > 0
