"""Interactive segmentation: a recorded sequence of strokes replayed on one image, each update timed.

Compares :class:`torchcut.Segmenter` re-solving from the last flow (``warm``) with the same updates solved
from zero flow (``cold``) and with :func:`torchcut.segment` from scratch, and checks that the three masks
are equal after every stroke. The strokes are fixed (drawn by a seeded generator in this file): polylines
of 3 vertices whose brush covers 1-5% of the image each, object and background alternating, with some
erasures.

``--model fixed`` times segmenters that keep the histograms of the first seeds (``model="fixed"``: a
stroke changes its own pixels' terminal capacities alone); their warm and cold masks must be equal, and
a default segmenter (``model="refit"``, warm) runs beside them, its masks equal to ``segment()``'s.

    python benchmarks/interactive.py --size 1024 --device cpu
    python benchmarks/interactive.py --size 512 --device cuda --model fixed --md out.md
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from skimage import data, transform

import torchcut
from torchcut.interactive import brush


def strokes(n: int, count: int = 10, seed: int = 0):
    """The recorded sequence: (points, label, radius), each covering 1-5% of an n x n image."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        label = 0 if i % 5 == 4 else 1 + i % 2
        pts = rng.uniform(0.1 * n, 0.9 * n, size=(3, 2))
        length = float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum())
        area = rng.uniform(0.01, 0.05) * n * n
        out.append(([tuple(map(float, p)) for p in pts], label, max(1.0, area / (2 * length))))
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lam", type=float, default=8.0)
    ap.add_argument("--strokes", type=int, default=10)
    ap.add_argument("--model", choices=("refit", "fixed"), default="refit", help="the segmenters' data term")
    ap.add_argument("--md", help="write the table here (markdown)")
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    n = a.size
    img = torch.from_numpy((transform.resize(data.astronaut(), (n, n)) * 255).astype(np.uint8)).to(dev)
    seeds = torch.zeros(n, n, dtype=torch.int64, device=dev)
    seeds[n // 2 - n // 16 : n // 2 + n // 16, n // 2 - n // 16 : n // 2 + n // 16] = 1
    seeds[:2], seeds[-2:], seeds[:, :2], seeds[:, -2:] = 2, 2, 2, 2
    warm = torchcut.Segmenter(img, lam=a.lam, model=a.model)
    cold = torchcut.Segmenter(img, lam=a.lam, warm=False, model=a.model)
    refit = torchcut.Segmenter(img, lam=a.lam) if a.model == "fixed" else None
    torchcut.segment(img, seeds, lam=a.lam)  # warm-up
    for seg in (warm, cold, refit):
        if seg is not None:
            seg.update(seeds)
    rows = []
    for i, (pts, label, radius) in enumerate(strokes(n, a.strokes)):
        paint = brush((n, n), torch.tensor(pts), radius).to(dev)
        seeds = seeds.clone()
        seeds[paint] = label
        seeds[n // 2, n // 2], seeds[0, 0] = 1, 2
        times = {}
        for name, fn in (
            ("warm", lambda: warm.update(seeds)),
            ("cold", lambda: cold.update(seeds)),
            ("segment", lambda: torchcut.segment(img, seeds, lam=a.lam)),
        ) + ((("refit", lambda: refit.update(seeds)),) if refit is not None else ()):
            _sync(dev)
            t = time.perf_counter()
            m = fn()
            _sync(dev)
            times[name] = (time.perf_counter() - t) * 1e3
            times[name + "_mask"] = m
        # refit: warm, cold and segment() agree; fixed: warm and cold agree, the refit segmenter segment()
        ref = times["segment_mask"] if refit is None else times["cold_mask"]
        same = torch.equal(times["warm_mask"], ref) and torch.equal(times["cold_mask"], ref)
        if refit is not None:
            same = same and torch.equal(times["refit_mask"], times["segment_mask"])
        extra = (times["refit"],) if refit is not None else ()
        rows.append(
            (i, label, float(paint.float().mean()) * 100, times["warm"], times["cold"], times["segment"], same) + extra
        )
    fixed = refit is not None
    lines = [
        f"Interactive strokes on astronaut {n}^2 ({dev.type}, lam {a.lam:g}, model {a.model}): each update's whole"
        " call, ms",
        "",
        "| stroke | label | area % | warm update | cold update | segment() |"
        + (" refit, warm |" if fixed else "")
        + " warm / segment | masks equal |",
        "|---:|---:|---:|---:|---:|---:|" + ("---:|" if fixed else "") + "---:|---|",
    ]
    for i, lab, area, w, c, s, same, *more in rows:
        cols = "".join(f" {v:.2f} |" for v in more)
        lines.append(f"| {i} | {lab} | {area:.1f} | {w:.2f} | {c:.2f} | {s:.2f} |{cols} {w / s:.2f} | {same} |")
    med = statistics.median(r[3] / r[5] for r in rows)
    warm_ms = sorted(r[3] for r in rows)
    lines += [
        "",
        f"median warm / segment: {med:.2f}; warm update median {statistics.median(warm_ms):.2f} ms, max "
        f"{warm_ms[-1]:.2f} ms; all masks equal: {all(r[6] for r in rows)}",
    ]
    print("\n".join(lines))
    if a.md:
        with open(a.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
