"""Benchmark of :func:`torchcut.refine` and :mod:`torchcut.compat.torchmaxflow` against torchmaxflow.

The job torchmaxflow is used for: an image and a 2-class probability map become a mask through a
contrast-sensitive Potts graph cut (``lamda`` 20, ``sigma`` 15 in the image's 0-255 units). Cases: 2D
images of 128^2 to 1024^2, gray and RGB, 4- and 8-connected; 3D volumes of 64^3 to 128^3, gray, 6- and
26-connected. Inputs: ``skimage.data.astronaut`` resized (2D; coloured discs without scikit-image) or a
synthetic volume of blobs (3D), and
a probability map ``sigmoid`` of the brightness plus smoothed noise (a network's softmax, roughly).

Per case: torchmaxflow 0.0.7 (``torchmaxflow.maxflow``), ``torchcut.compat.torchmaxflow.maxflow`` (the
drop-in: same arguments, same energy) and, on 2D 4-connected cases (where its energy is
torchmaxflow's but for the probability floor), ``torchcut.refine``. Times are medians of ``--repeat``
runs after one warm-up, the calls interleaved in each round, with torch's thread count (``--threads``),
elapsed (``--clock wall``) or the process's CPU time (``--clock cpu``, with one thread).
Masks are compared with torchmaxflow's (pixels that differ). The solve alone (``grid_solve`` on the
built graph, Boykov-Kolmogorov as in the calls) is timed beside them.

    python benchmarks/refine_torchmaxflow.py [--repeat 7] [--threads 2] [--clock wall|cpu] [--cases 2d,3d]
                                             [--out FILE.md]

torchmaxflow is optional: without it the torchcut columns alone are printed. It installs with
``pip install 'setuptools<70'`` then ``pip install --no-build-isolation torchmaxflow==0.0.7``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torchcut  # noqa: E402
from torchcut.compat import torchmaxflow as tcf  # noqa: E402

try:
    import torchmaxflow
except ImportError:  # the peer is optional
    torchmaxflow = None

LAMDA, SIGMA = 20.0, 15.0


def _smooth_noise(shape, rng, passes=4):
    """Gaussian noise smoothed by box filters (torch avg_pool), unit-ish scale."""
    x = torch.from_numpy(rng.normal(0, 1, shape).astype(np.float32))[None, None]
    pool = torch.nn.functional.avg_pool2d if len(shape) == 2 else torch.nn.functional.avg_pool3d
    for _ in range(passes):
        x = pool(x, 5, 1, 2, count_include_pad=False)
    return (x / x.std())[0, 0]


def _picture(size, rng):
    """``[3, size, size]`` float32 in 0-255: skimage's astronaut resized, or (without scikit-image)
    coloured discs on a noisy background."""
    try:
        from skimage import data, transform
    except ImportError:
        g = np.meshgrid(*[np.linspace(0, 1, size, dtype=np.float32)] * 2, indexing="ij")
        img = np.broadcast_to(rng.random((3, 1, 1), dtype=np.float32) * 200 + 20, (3, size, size)).copy()
        for _ in range(8):
            c, r = rng.random(2), 0.05 + 0.2 * rng.random()
            img[:, sum((gi - ci) ** 2 for gi, ci in zip(g, c)) < r * r] = rng.random((3, 1)) * 200 + 20
        img += rng.normal(0, 10, img.shape).astype(np.float32)
        return torch.from_numpy(img)
    img = transform.resize(data.astronaut(), (size, size), anti_aliasing=True).astype(np.float32) * 255
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


def image_2d(size, rgb, seed=0):
    """``[1, C, H, W]`` float32 image in 0-255 and ``[1, 2, H, W]`` probabilities."""
    rng = np.random.default_rng(seed)
    x = _picture(size, rng)
    gray = x.mean(0)
    if not rgb:
        x = gray[None].clone()
    logit = 3.0 * (gray / 255 - 0.45) / 0.25 + 1.5 * _smooth_noise((size, size), rng)
    p1 = torch.sigmoid(logit)
    return x[None].contiguous(), torch.stack([1 - p1, p1])[None].contiguous()


def volume_3d(size, seed=0):
    """``[1, 1, D, H, W]`` float32 volume in 0-255 and ``[1, 2, D, H, W]`` probabilities."""
    rng = np.random.default_rng(seed)
    g = np.meshgrid(*[np.linspace(0, 1, size, dtype=np.float32)] * 3, indexing="ij")
    v = np.full((size,) * 3, 70.0, dtype=np.float32)
    for _ in range(6):
        c, r = rng.random(3), 0.1 + 0.15 * rng.random()
        v[sum((gi - ci) ** 2 for gi, ci in zip(g, c)) < r * r] = 180.0
    v += rng.normal(0, 25, v.shape).astype(np.float32)
    x = torch.from_numpy(v)
    logit = (x - 125) / 30 + 1.5 * _smooth_noise((size,) * 3, rng)
    p1 = torch.sigmoid(logit)
    return x[None, None].contiguous(), torch.stack([1 - p1, p1])[None].contiguous()


def cases(which):
    out = []
    if "2d" in which:
        for size in (128, 256, 512, 1024):
            for rgb in (False, True):
                for conn in (4, 8):
                    out.append(
                        (f"{size}^2 {'RGB' if rgb else 'gray'} {conn}-conn", lambda s=size, c=rgb: image_2d(s, c), conn)
                    )
    if "3d" in which:
        for size in (64, 96, 128):
            for conn in (6, 26):
                out.append((f"{size}^3 gray {conn}-conn", lambda s=size: volume_3d(s), conn))
    return out


def solve_only(image, prob, conn):
    """The grid solve of compat's graph alone (built once, outside the clock)."""
    graph = tcf._graph(image, prob, LAMDA, SIGMA, conn)
    algorithm = "boykov-kolmogorov" if conn == 4 else "auto"  # what the calls run (multilabel._solve_binary)
    return lambda: torchcut.maxflow(graph, algorithm=algorithm).mask


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--cases", default="2d,3d")
    ap.add_argument("--out", default=None, help="also write the table to this Markdown file")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time; cpu: the process's CPU time (with --threads 1, the least "
        "disturbed measure on a loaded machine)",
    )
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [
        "| case | torchmaxflow | compat | refine | solve alone | compat speed-up | refine speed-up | "
        "pixels differing (compat / refine) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    head = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, medians of "
        f"{args.repeat}, torchmaxflow {'0.0.7' if torchmaxflow else 'not installed'}"
    )
    print(head, flush=True)
    rows.insert(0, head + "\n")
    for name, make, conn in cases(args.cases.split(",")):
        image, prob = make()
        calls = {"compat": lambda: tcf.maxflow(image, prob, LAMDA, SIGMA, conn)}
        if torchmaxflow is not None:
            calls["torchmaxflow"] = lambda: torchmaxflow.maxflow(image, prob, LAMDA, SIGMA, conn)
        if conn == 4:
            calls["refine"] = lambda: torchcut.refine(image[0], prob[0], lam=LAMDA, sigma=SIGMA, connectivity=4)
        calls["solve"] = solve_only(image, prob, conn)
        out = {k: f() for k, f in calls.items()}  # warm-up
        times = {k: [] for k in calls}
        clock = time.perf_counter if args.clock == "wall" else time.process_time
        for _ in range(args.repeat):
            for k, f in calls.items():
                t0 = clock()
                f()
                times[k].append(clock() - t0)
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        ref = out.get("torchmaxflow")
        diff = "-"
        if ref is not None:
            d_c = int((out["compat"] != ref).sum())
            d_r = int((out["refine"].to(ref.dtype) != ref[0, 0]).sum()) if "refine" in out else None
            diff = f"{d_c} / {'-' if d_r is None else d_r}"

        def cell(k):
            return f"{ms[k]:.1f} ms" if k in ms else "-"

        def speed(k):
            return f"{ms['torchmaxflow'] / ms[k]:.2f}x" if k in ms and "torchmaxflow" in ms else "-"

        row = (
            f"| {name} | {cell('torchmaxflow')} | {cell('compat')} | {cell('refine')} | {cell('solve')} | "
            f"{speed('compat')} | {speed('refine')} | {diff} |"
        )
        rows.append(row)
        print(row, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
