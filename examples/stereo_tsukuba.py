"""Disparities of Middlebury's Tsukuba pair by alpha-expansion on the grid max-flow solvers.

    python examples/stereo_tsukuba.py                    # Tsukuba, 16 disparities
    python examples/stereo_tsukuba.py --left L.png --right R.png --disparities 32 --out results

Tsukuba (both views and the true disparities) is looked for through :mod:`torchcut.datasets`:
``$TORCHCUT_DATA``, the cache (``~/.cache/torchcut/data``), then a download from the Middlebury site
checked against its SHA-256. The energy is :func:`torchcut.stereo.disparity`'s (colour
Birchfield-Tomasi cost truncated at 40, contrast-sensitive Potts 15 / 45, no cost aggregation).

Writes ``<name>_disparity.png`` (colour-mapped, near = warm) into ``--out`` and, when the truth is
known, prints the bad-pixel rates: ``|d - truth| > 1`` over the non-occluded known pixels (occlusion
from the truth: a nearer surface hides the match in the right view) and over all known pixels, an
18-pixel border excluded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
try:
    import torchcut  # noqa: F401 - only whether it imports
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(ROOT))

from torchcut import datasets
from torchcut.stereo import bad_pixel_rates, disparity

#: Anchor colours of the map, far (0) to near (1): dark blue, cyan, yellow, red.
ANCHORS = np.array([[0.0, 20, 20, 110], [0.35, 0, 190, 230], [0.7, 250, 230, 40], [1.0, 200, 20, 10]])


def colour_map(d: np.ndarray, top: int) -> np.ndarray:
    """uint8 ``[H, W, 3]``: disparities 0..top through the anchor colours."""
    t = np.clip(d.astype(np.float64) / max(top, 1), 0, 1)
    rgb = [np.interp(t, ANCHORS[:, 0], ANCHORS[:, c]) for c in (1, 2, 3)]
    return np.stack(rgb, -1).round().astype(np.uint8)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--left", type=Path, help="left view (default: Tsukuba)")
    p.add_argument("--right", type=Path, help="right view (required with --left)")
    p.add_argument("--disparities", type=int, default=16, help="number of disparities (default 16)")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: ./out)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--lam", type=float, default=None, help="Potts weight (default: torchcut.stereo's)")
    p.add_argument("--no-download", action="store_true", help="never download Tsukuba")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (on a machine busy with other work, 1 can be several times faster)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    truth = None
    if args.left is not None:
        if args.right is None:
            p.error("--right is required with --left")
        left, right = (np.array(Image.open(x).convert("RGB")) for x in (args.left, args.right))
        name = args.left.stem
    else:
        try:
            left, right, truth = datasets.tsukuba_pair(download=False if args.no_download else None)
        except datasets.DatasetNotFoundError as exc:
            raise SystemExit(f"Tsukuba not available: {exc}") from None
        name = "tsukuba"
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    L, R = (torch.from_numpy(x.copy()).to(device) for x in (left, right))
    disparity(L, R, args.disparities)  # warm-up: kernels, the compiled CPU solver, caches
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    d, info = disparity(L, R, args.disparities, lam=args.lam, return_result=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    d = d.cpu().numpy()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}_disparity.png"
    Image.fromarray(colour_map(d, args.disparities - 1)).save(path)
    print(
        f"{name}: {d.shape} on {device}, {args.disparities} disparities, {seconds * 1e3:.0f} ms "
        f"({info['schedule']} schedule, {info['solves']} solves, {info['cycles']} cycles), "
        f"energy {float(info['energy']):.0f}"
    )
    if truth is not None:
        r = bad_pixel_rates(d, truth)
        print(
            f"bad pixels (|d - truth| > 1, 18-px border excluded): {r['nonocc']:.2f}% of the "
            f"{r['pixels_nonocc']} non-occluded, {r['all']:.2f}% of all {r['pixels_all']} known"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
