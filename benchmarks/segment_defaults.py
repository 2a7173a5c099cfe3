"""Measure segment()'s contrast scale on the GrabCut set: sigma = factor x the per-image estimate.

Issue 12, item 2: ``torchcut.segment`` estimates sigma per image (root mean square colour difference
of neighbours, ``energy.estimate_sigma``). This runs segment() with 20-px trimap seeds on the 50
images at several multiples of that estimate, and reports the mean IoU on each half of the set
(even / odd positions of the sorted names), so a change of the default can be judged on a half it
was not chosen on.

    python benchmarks/segment_defaults.py [--factors 0.5 0.7 1 1.4 2] [--connectivity 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grabcut_quality import iou, load, protocol_seeds  # noqa: E402

import torchcut  # noqa: E402
from torchcut.energy import estimate_sigma  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=float, nargs="*", default=[0.5, 0.7, 1.0, 1.4, 2.0])
    ap.add_argument("--connectivity", type=int, default=4)
    ap.add_argument("--protocol", default="trimap-20")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = load("all")
    scores = {f: [] for f in args.factors}
    for name, bgr, gt in data:
        rgb = torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1])).permute(2, 0, 1).float()
        seeds, _ = protocol_seeds(gt, args.protocol)
        est = float(estimate_sigma(rgb.unsqueeze(0))[0])
        for f in args.factors:
            mask = torchcut.segment(rgb, torch.from_numpy(seeds), sigma=f * est, connectivity=args.connectivity)
            scores[f].append(iou(mask.numpy(), gt))
    print(f"segment(), {args.protocol}, {args.connectivity}-connected, sigma = factor x estimate; mean IoU")
    print("| factor | all 50 | even half | odd half |")
    print("|---|---|---|---|")
    for f, s in scores.items():
        s = np.array(s)
        print(f"| {f:g} | {s.mean():.4f} | {s[0::2].mean():.4f} | {s[1::2].mean():.4f} |")


if __name__ == "__main__":
    main()
