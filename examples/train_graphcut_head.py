"""Train a small CNN end to end through a graph cut, and compare held-out IoU with and without the cut.

    python examples/train_graphcut_head.py                   # CPU, about 20 s on 2 cores
    python examples/train_graphcut_head.py --device cuda     # the same on a GPU
    python examples/train_graphcut_head.py --estimator perturbed --samples 8

The data are generated (no download): grey images of random ellipses and rectangles, object brighter
than the background, under heavy Gaussian noise. The CNN (three 3 x 3 convolutions, a 7 x 7 view of
the image) sees too little to tell noise from object everywhere, so its per-pixel decisions are
speckled. Three models are trained with the same seed, steps and optimiser:

* **cnn**: the CNN alone, trained with binary cross-entropy; it predicts ``logits > 0``.
* **cnn + cut (post hoc)**: the same trained CNN, its logits cut by :class:`torchcut.nn.CutHead` with
  the head's starting strength; nothing is trained through the cut.
* **cnn + cut (end to end)**: a fresh CNN trained with the cut head in the loop: cross-entropy on the
  logits plus the Hamming loss of the head's mask, whose gradient reaches the CNN and the head's
  strength ``lam`` through the cut (blackbox differentiation by default, or perturbed optimisers).

It prints the held-out IoU of each, the learned ``lam``, and the time taken.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn

from torchcut.nn import CutHead


def make_shapes(n: int, size: int, noise: float, generator: torch.Generator):
    """``n`` noisy grey images ``[n, 1, size, size]`` and their object masks ``[n, size, size]``."""
    yy, xx = torch.meshgrid(
        torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij"
    )
    masks = torch.zeros(n, size, size, dtype=torch.bool)
    for i in range(n):
        for _ in range(int(torch.randint(1, 4, (), generator=generator))):
            cy, cx = (torch.rand(2, generator=generator) * 0.8 + 0.1) * size
            ry, rx = (torch.rand(2, generator=generator) * 0.2 + 0.08) * size
            if bool(torch.rand((), generator=generator) < 0.5):
                shape = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
            else:
                shape = ((yy - cy).abs() <= ry) & ((xx - cx).abs() <= rx)
            masks[i] |= shape
    fg = 0.65 + 0.1 * torch.rand(n, 1, 1, generator=generator)
    bg = 0.35 - 0.1 * torch.rand(n, 1, 1, generator=generator)
    clean = torch.where(masks, fg, bg)
    images = clean + noise * torch.randn(n, size, size, generator=generator)
    return images.unsqueeze(1), masks


class SmallCNN(nn.Module):
    """Three 3 x 3 convolutions: object logits ``[B, 1, H, W]`` from a ``[B, 1, H, W]`` image."""

    def __init__(self, width: int = 12):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 1, 3, padding=1),
        )

    def forward(self, x):
        return self.body(x)


def iou(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Intersection over union over the whole set (bool tensors)."""
    inter = (pred & target).sum().item()
    union = (pred | target).sum().item()
    return inter / union if union else 1.0


def train(model, head, images, masks, args, device, use_head: bool):
    groups = [{"params": list(model.parameters())}]
    if use_head:  # the head's strength (a log) moves faster than the CNN's weights
        groups.append({"params": list(head.parameters()), "lr": args.lr * args.head_lr})
    opt = torch.optim.Adam(groups, lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)
    bce = nn.BCEWithLogitsLoss()
    model.train()
    head.train()
    for step in range(args.steps):
        idx = torch.randint(0, images.shape[0], (args.batch,), generator=gen)
        x, t = images[idx].to(device), masks[idx].to(device).float()
        logits = model(x)
        loss = bce(logits[:, 0], t)
        if use_head:
            m = head(logits, x)
            # Hamming loss of the cut, a mean over the pixels of the batch
            loss = loss + args.cut_weight * (m * (1 - t) + (1 - m) * t).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.verbose and (step % 50 == 0 or step == args.steps - 1):
            print(f"  step {step:4d}  loss {loss.item():.4f}" + (f"  lam {head.lam.item():.3f}" if use_head else ""))


@torch.no_grad()
def evaluate(model, head, images, masks, device, use_head: bool, batch: int = 32):
    model.eval()
    head.eval()
    preds = []
    for i in range(0, images.shape[0], batch):
        x = images[i : i + batch].to(device)
        logits = model(x)
        preds.append((head(logits, x) > 0.5 if use_head else logits[:, 0] > 0).cpu())
    return iou(torch.cat(preds), masks)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", type=int, default=48, help="image side (pixels)")
    p.add_argument("--train", type=int, default=256, help="training images")
    p.add_argument("--test", type=int, default=128, help="held-out images")
    p.add_argument("--noise", type=float, default=0.45, help="standard deviation of the pixel noise")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--lam", type=float, default=0.5, help="the cut head's starting strength")
    p.add_argument("--estimator", default="blackbox", choices=("blackbox", "perturbed"))
    p.add_argument(
        "--lambda",
        dest="lambda_",
        type=float,
        default=1.0,
        help="blackbox interpolation strength, in logit units per pixel",
    )
    p.add_argument("--samples", type=int, default=8, help="perturbed: noisy copies per image")
    p.add_argument("--perturb", type=float, default=1.0, help="perturbed: noise scale on the logits")
    p.add_argument("--head-lr", type=float, default=10.0, help="the head's learning rate over --lr")
    p.add_argument("--cut-weight", type=float, default=1.0, help="weight of the cut's Hamming loss")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: these small convolutions gain little from more; 0: torch's default)",
    )
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    train_x, train_y = make_shapes(args.train, args.size, args.noise, gen)
    test_x, test_y = make_shapes(args.test, args.size, args.noise, gen)

    # The cut's loss is a mean over batch * size^2 pixels, so each pixel's incoming gradient is about
    # 1 / (batch * size^2): blackbox's shift lambda_ * grad is in logit units for lambda_ = --lambda
    # times that count.
    lambda_ = args.lambda_ * args.batch * args.size**2

    def head():
        return CutHead(
            lam=args.lam,
            pairwise="contrast",
            estimator=args.estimator,
            lambda_=lambda_,
            samples=args.samples,
            noise=args.perturb,
        ).to(device)

    results = {}
    torch.manual_seed(args.seed)
    cnn, plain_head = SmallCNN().to(device), head()
    train(cnn, plain_head, train_x, train_y, args, device, use_head=False)
    results["cnn"] = evaluate(cnn, plain_head, test_x, test_y, device, use_head=False)
    results["cnn + cut (post hoc)"] = evaluate(cnn, plain_head, test_x, test_y, device, use_head=True)
    torch.manual_seed(args.seed)
    cnn2, cut_head = SmallCNN().to(device), head()
    train(cnn2, cut_head, train_x, train_y, args, device, use_head=True)
    results["cnn + cut (end to end)"] = evaluate(cnn2, cut_head, test_x, test_y, device, use_head=True)
    results["cnn of the end-to-end model, no cut"] = evaluate(cnn2, cut_head, test_x, test_y, device, use_head=False)
    seconds = time.perf_counter() - t0
    print(
        f"held-out IoU ({args.test} images {args.size}x{args.size}, noise {args.noise}, {args.steps} steps, "
        f"estimator {args.estimator}, device {device.type}):"
    )
    for name, v in results.items():
        print(f"  {name:38s} {v:.4f}")
    print(f"learned lam {cut_head.lam.item():.3f} (started at {args.lam}); {seconds:.1f} s")
    assert all(math.isfinite(v) for v in results.values())
    return results, cut_head.lam.item(), seconds


if __name__ == "__main__":
    main()
