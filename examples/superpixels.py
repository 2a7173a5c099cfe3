"""Label the superpixels of an image by colour with alpha-expansion on their region adjacency graph.

    python examples/superpixels.py                        # scikit-image's astronaut, 2000 superpixels
    python examples/superpixels.py --image coffee --segments 5000 --clusters 5 --lam 2 --out results

Steps, all on scikit-image's built-in images (no download):

1. SLIC superpixels (``skimage.segmentation.slic``), each one a node with its mean colour and size.
2. The region adjacency graph: an edge between two superpixels that touch, weighted by
   ``lam * shared boundary pixels * exp(-|c_u - c_v|^2 / (2 sigma^2))`` (``sigma^2`` the mean squared
   colour difference over the edges): cheap to cut between different colours, dear inside a region.
3. Unaries from a few colour clusters (k-means on the superpixel colours, weighted by size): the cost
   of cluster ``l`` at superpixel ``p`` is ``size_p * |c_p - mean_l|^2 / (2 s^2)`` with ``s^2`` the mean
   squared distance of the superpixels to their nearest cluster.
4. ``torchcut.expansion(unary, potts, edges=..., edge_weights=...)`` on the graph; the labels are
   painted back onto the pixels (each in its cluster's mean colour, the borders between regions in black).

Writes ``<image>_superpixels.png`` (the labels painted, the input on the left) into ``--out`` and
prints the energies of the per-superpixel best cluster and of the expansion result.
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
    import torchcut
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(ROOT))
    import torchcut

from torchcut.graph_multilabel import labeling_energy

IMAGES = ("astronaut", "coffee", "chelsea", "rocket")


def load(name: str, size: int | None) -> np.ndarray:
    """A scikit-image built-in RGB image as float64 in [0, 1], shrunk so its longer side is ``size``."""
    from skimage import data

    img = Image.fromarray(getattr(data, name)())
    if size:
        f = size / max(img.size)
        img = img.resize((max(1, round(img.size[0] * f)), max(1, round(img.size[1] * f))), Image.BILINEAR)
    return np.asarray(img.convert("RGB"), dtype=np.float64) / 255


def region_graph(seg: np.ndarray, img: np.ndarray):
    """(edges [E, 2], shared boundary pixels [E], mean colour [N, 3], size [N]) of a label image."""
    N = int(seg.max()) + 1
    size = np.bincount(seg.ravel(), minlength=N)
    colour = np.stack([np.bincount(seg.ravel(), img[..., c].ravel(), N) for c in range(3)], 1) / size[:, None]
    a = np.concatenate([seg[:, :-1].ravel(), seg[:-1].ravel()])
    b = np.concatenate([seg[:, 1:].ravel(), seg[1:].ravel()])
    cut = a != b
    pairs = np.sort(np.stack([a[cut], b[cut]], 1), 1)
    edges, length = np.unique(pairs, axis=0, return_counts=True)
    return edges, length, colour, size


def kmeans(x: np.ndarray, weight: np.ndarray, k: int, seed: int = 0, iters: int = 20) -> np.ndarray:
    """Cluster means of the rows of ``x`` (weighted k-means from k-means++ seeds)."""
    rng = np.random.default_rng(seed)
    centres = [x[rng.choice(len(x), p=weight / weight.sum())]]
    for _ in range(1, k):
        d = ((x[:, None] - np.array(centres)[None]) ** 2).sum(-1).min(1) * weight
        centres.append(x[rng.choice(len(x), p=d / d.sum())] if d.sum() > 0 else x[rng.integers(len(x))])
    c = np.array(centres)
    for _ in range(iters):
        lab = ((x[:, None] - c[None]) ** 2).sum(-1).argmin(1)
        for j in range(k):
            m = lab == j
            if m.any():
                c[j] = np.average(x[m], axis=0, weights=weight[m])
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", default="astronaut", choices=IMAGES, help="a scikit-image built-in image")
    p.add_argument("--size", type=int, default=None, help="shrink so the longer side has this many pixels")
    p.add_argument("--segments", type=int, default=2000, help="SLIC superpixels (about)")
    p.add_argument("--clusters", type=int, default=6, help="colour clusters (labels)")
    p.add_argument("--lam", type=float, default=1.0, help="smoothness weight")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="results")
    a = p.parse_args(argv)
    from skimage.segmentation import find_boundaries, slic

    img = load(a.image, a.size)
    seg = slic(img, n_segments=a.segments, compactness=10, start_label=0)
    edges, length, colour, size = region_graph(seg, img)
    d2 = ((colour[edges[:, 0]] - colour[edges[:, 1]]) ** 2).sum(1)
    weights = a.lam * length * np.exp(-d2 / (2 * max(d2.mean(), 1e-12)))
    centres = kmeans(colour, size.astype(np.float64), a.clusters)
    dist = ((colour[:, None] - centres[None]) ** 2).sum(-1)  # [N, L]
    unary = (size[:, None] * dist / (2 * max(dist.min(1).mean(), 1e-12))).T  # [L, N]
    dev = torch.device(a.device)
    U, E, W = (torch.from_numpy(np.ascontiguousarray(x)).to(dev) for x in (unary, edges, weights))
    potts = 1 - torch.eye(a.clusters, dtype=torch.float64, device=dev)
    # one tiny call first: the first call of a process loads the solver library and torch's kernels
    torchcut.expansion(U[:, :2], potts, edges=E[:0])
    t0 = time.perf_counter()
    labels = torchcut.expansion(U, potts, edges=E, edge_weights=W)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    before = float(labeling_energy(U, potts, U.argmin(0), E, W))
    after = float(labeling_energy(U, potts, labels, E, W))
    lab = labels.cpu().numpy()
    painted = centres[lab[seg]]
    painted[find_boundaries(lab[seg], mode="inner")] = 0  # the borders between labelled regions
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    side = np.concatenate([img, painted], 1)
    path = out / f"{a.image}_superpixels.png"
    Image.fromarray(np.round(side * 255).astype(np.uint8)).save(path)
    print(
        f"{a.image}: {img.shape[1]}x{img.shape[0]} pixels, {len(size)} superpixels, {len(edges)} edges, "
        f"{a.clusters} colour clusters, lam {a.lam:g}"
    )
    print(
        f"energy: best cluster per superpixel {before:.6g}, expansion {after:.6g} "
        f"({int((lab != U.argmin(0).cpu().numpy()).sum())} superpixels changed) in {1e3 * seconds:.1f} ms on {dev.type}"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
