"""Benchmark of multi-label energies on general graphs: torchcut's expansion against GCO.

GCO is the ``gco-wrapper`` package (``gco.cut_general_graph``, alpha-expansion until convergence). Both
get the same energy ``sum_p U[f_p, p] + sum_e w_e V[f_u, f_v]`` on the same graph, in the same run:

* ``rag``: superpixels of ``skimage.data.astronaut()`` (SLIC, ``--rag-sizes`` segments; the image is
  upscaled for more than 10^4), their region adjacency graph with contrast weights
  ``boundary pixels * exp(-|c_u - c_v|^2 / (2 sigma^2))``, unaries the squared colour distance to 6
  colour clusters (k-means on the segment colours). Float energy (GCO quantises it its own way).
* ``rgg``: random geometric graphs, points uniform in the unit square joined within the radius that
  gives a mean degree of 6, integer weights falling with distance.
* ``knn``: 3D point clouds (a noisy surface), each point joined to its 6 nearest neighbours.

``rgg`` and ``knn`` have 8 labels from a smooth field observed with noise, integer unaries (``10 |l -
observation|``) and integer weights, so both solvers minimise the same energy exactly (GCO with
``down_weight_factor=1``). Every case is run with a Potts table and a truncated linear one
(``min(|a - b|, 2)``). Energies are evaluated in float64 by
:func:`torchcut.graph_multilabel.labeling_energy` on each solver's labels. Times are whole calls
(validation and graph set-up included, as a user sees them): the median of ``--repeat`` runs after one
warm-up on the small cases; torch runs on ``--threads`` threads (default 1: GCO is single-threaded).

    python benchmarks/graph_expansion.py [--sizes 1e4,1e5,1e6] [--rag-sizes 1e3,1e4] [--repeat 3]
                                         [--device cpu] [--algorithm expansion|swap] [--out DIR]

Prints one row per case (ours and GCO side by side) and, with ``--out``, writes
DIR/graph_expansion.json and DIR/graph_expansion.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torchcut  # noqa: E402
from benchmarks.timing import median_time  # noqa: E402
from torchcut.graph_multilabel import labeling_energy  # noqa: E402

LABELS = 8


# ---------------------------------------------------------------------------------------------- cases
def tables(L: int, integer: bool):
    a = np.arange(L)
    potts = 1 - np.eye(L, dtype=np.int64)
    trunc = np.minimum(np.abs(a[:, None] - a[None]), 2).astype(np.int64)
    if not integer:
        potts, trunc = potts.astype(np.float64), trunc.astype(np.float64) / 2
    return {"potts": potts, "trunc-linear": trunc}


def field_unary(pos: np.ndarray, rng, L: int = LABELS):
    """Integer unary ``[N, L]``: a smooth label field over the points, observed with noise."""
    s = np.sin(3 * pos[:, 0]) + np.cos(4 * pos[:, 1]) + (pos[:, 2] if pos.shape[1] > 2 else 0)
    truth = np.clip(((s - s.min()) / (np.ptp(s) + 1e-12) * L).astype(np.int64), 0, L - 1)
    noise = rng.integers(-3, 4, truth.shape) * (rng.random(truth.shape) < 0.5)
    obs = np.clip(truth + noise, 0, L - 1)
    return 10 * np.abs(np.arange(L)[None] - obs[:, None])


def rgg_case(n: int, rng):
    from scipy.spatial import cKDTree

    pos = rng.random((n, 2))
    r = np.sqrt(6 / (np.pi * n))  # mean degree 6
    pairs = cKDTree(pos).query_pairs(r, output_type="ndarray")
    d = np.linalg.norm(pos[pairs[:, 0]] - pos[pairs[:, 1]], axis=1)
    w = 2 + np.round(8 * (1 - d / r)).astype(np.int64)
    return np.sort(pairs, 1).astype(np.int64), w, field_unary(pos, rng)


def knn_case(n: int, rng, k: int = 6):
    from scipy.spatial import cKDTree

    uv = rng.random((n, 2))
    pos = np.stack([uv[:, 0], uv[:, 1], 0.2 * np.sin(6 * uv[:, 0]) * np.cos(5 * uv[:, 1])], 1)
    pos += 0.002 * rng.standard_normal(pos.shape)
    _, nn = cKDTree(pos).query(pos, k + 1)
    e = np.stack([np.repeat(np.arange(n), k), nn[:, 1:].ravel()], 1)
    e = np.unique(np.sort(e, 1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    return e.astype(np.int64), np.full(len(e), 8, dtype=np.int64), field_unary(pos, rng)


def rag_case(n: int, rng, k: int = 6):
    from skimage import data, transform
    from skimage.segmentation import slic

    img = data.astronaut().astype(np.float64) / 255
    if n > 10**4:  # about 25 pixels per segment
        f = np.sqrt(25 * n / (img.shape[0] * img.shape[1]))
        img = transform.rescale(img, f, channel_axis=-1, order=1)
    seg = slic(img, n_segments=n, compactness=10, start_label=0)
    N = int(seg.max()) + 1
    count = np.bincount(seg.ravel(), minlength=N)
    mean = (
        np.stack([np.bincount(seg.ravel(), img[..., c].ravel(), N) for c in range(3)], 1)
        / np.maximum(count, 1)[:, None]
    )
    a = np.concatenate([seg[:, :-1].ravel(), seg[:-1].ravel()])
    b = np.concatenate([seg[:, 1:].ravel(), seg[1:].ravel()])
    keep = a != b
    pair = np.sort(np.stack([a[keep], b[keep]], 1), 1)
    e, length = np.unique(pair, axis=0, return_counts=True)
    d2 = ((mean[e[:, 0]] - mean[e[:, 1]]) ** 2).sum(1)
    w = length * np.exp(-d2 / (2 * d2.mean())) * 0.05
    centres = mean[rng.choice(N, k, replace=False)]
    for _ in range(10):  # k-means on the segment colours
        lab = ((mean[:, None] - centres[None]) ** 2).sum(-1).argmin(1)
        centres = np.stack([mean[lab == j].mean(0) if (lab == j).any() else centres[j] for j in range(k)])
    centres = centres[np.argsort(centres.sum(1))]  # labels ordered by brightness (truncated linear)
    U = ((mean[:, None] - centres[None]) ** 2).sum(-1) * count[:, None] * 4
    return e.astype(np.int64), w, U


def cases(sizes, rag_sizes, seed=0):
    for kind, make, ns in (("rag", rag_case, rag_sizes), ("rgg", rgg_case, sizes), ("knn", knn_case, sizes)):
        for n in ns:
            rng = np.random.default_rng(seed)
            e, w, U = make(int(n), rng)
            integer = np.issubdtype(U.dtype, np.integer) and np.issubdtype(w.dtype, np.integer)
            for vname, V in tables(U.shape[1], integer).items():
                yield f"{kind}-{int(n):.0e} {vname}".replace("e+0", "e"), e, w, U, V


# ---------------------------------------------------------------------------------------------- solvers
def run_ours(e, w, U, V, device, algorithm="expansion"):
    Ut = torch.from_numpy(np.ascontiguousarray(U.T)).to(device)
    args = [torch.from_numpy(x).to(device) for x in (V, e, w)]
    if algorithm == "swap":
        labels = torchcut.graph_multilabel.swap(Ut, args[0], args[1], args[2])
    else:
        labels = torchcut.expansion(Ut, args[0], edges=args[1], edge_weights=args[2])
    if device != "cpu":
        torch.cuda.synchronize()
    return labels.cpu().numpy()


def run_gco(e, w, U, V, algorithm="expansion"):
    import gco

    integer = np.issubdtype(U.dtype, np.integer) and np.issubdtype(w.dtype, np.integer)
    if integer:
        return np.asarray(
            gco.cut_general_graph(
                e.astype(np.int32),
                w.astype(np.int32),
                U.astype(np.int32),
                V.astype(np.int32),
                down_weight_factor=1,
                algorithm=algorithm,
            ),
            dtype=np.int64,
        )
    return np.asarray(
        gco.cut_general_graph(
            e.astype(np.int32), w.astype(np.float64), U.astype(np.float64), V.astype(np.float64), algorithm=algorithm
        ),
        dtype=np.int64,
    )


def timed(fn, repeat):
    seconds, _, out = median_time(fn, repeat, warmup=0)
    return seconds, out


def energy(e, w, U, V, labels) -> float:
    t = [torch.from_numpy(np.ascontiguousarray(x)).to(torch.float64) for x in (U.T, V, w)]
    return float(labeling_energy(t[0], t[1], torch.from_numpy(labels), torch.from_numpy(e), t[2]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e4,1e5,1e6", help="nodes of the rgg and knn cases")
    p.add_argument("--rag-sizes", default="1e3,1e4", help="superpixels of the rag cases")
    p.add_argument("--repeat", type=int, default=3, help="runs per case below 2e5 nodes (1 above)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--algorithm",
        default="expansion",
        choices=("expansion", "swap"),
        help="the moves of both solvers (swap: graph_multilabel.swap and GCO's algorithm='swap')",
    )
    p.add_argument("--no-gco", action="store_true", help="ours only")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    sizes = [float(s) for s in a.sizes.split(",") if s]
    rag = [float(s) for s in a.rag_sizes.split(",") if s]
    have_gco = False
    if not a.no_gco:
        try:
            import gco  # noqa: F401

            have_gco = True
        except ImportError as exc:
            print(f"gco not importable ({exc}): ours only")
    if a.device != "cpu":  # the first CUDA call of a process starts the context and loads the kernels
        torchcut.expansion(
            torch.zeros(2, 3, device=a.device),
            1 - torch.eye(2, device=a.device),
            edges=torch.tensor([[0, 1], [1, 2]], device=a.device),
        )
        torch.cuda.synchronize()
    rows = []
    head = f"{'case':<24}{'nodes':>9}{'edges':>10}{'ours s':>9}{'gco s':>9}{'speed-up':>9}{'ours E':>16}{'gco E':>16}{'ratio':>9}"
    print(head)
    for name, e, w, U, V in cases(sizes, rag):
        N = U.shape[0]
        rep = a.repeat if N < 2e5 else 1
        if rep > 1:
            run_ours(e, w, U, V, a.device, a.algorithm)  # warm-up (first-call imports, allocator)
        t_ours, lab = timed(lambda e=e, w=w, U=U, V=V: run_ours(e, w, U, V, a.device, a.algorithm), rep)
        row = dict(
            case=name, nodes=N, edges=len(e), labels=U.shape[1], ours_s=t_ours, ours_energy=energy(e, w, U, V, lab)
        )
        if have_gco:
            t_gco, lg = timed(lambda e=e, w=w, U=U, V=V: run_gco(e, w, U, V, a.algorithm), rep)
            row.update(gco_s=t_gco, gco_energy=energy(e, w, U, V, lg))
            row["ratio"] = row["ours_energy"] / row["gco_energy"] if row["gco_energy"] else 1.0
            row["speedup"] = t_gco / t_ours
        rows.append(row)
        g = (
            (
                f"{row['gco_s']:9.3f}{row['speedup']:8.2f}x{row['ours_energy']:16.6g}{row['gco_energy']:16.6g}"
                f"{row['ratio']:9.5f}"
            )
            if have_gco
            else f"{'-':>9}{'-':>9}{row['ours_energy']:16.6g}"
        )
        print(f"{name:<24}{N:>9}{len(e):>10}{t_ours:9.3f}{g}", flush=True)
    if have_gco and rows:
        r = [x["ratio"] for x in rows]
        print(
            f"energy ratio ours/gco: max {max(r):.5f}, mean {statistics.mean(r):.5f}; "
            f"slower than gco on {sum(x['speedup'] < 1 for x in rows)} of {len(rows)} cases"
        )
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = dict(
            platform=platform.platform(),
            torch=torch.__version__,
            threads=a.threads,
            device=a.device,
            cpu=platform.processor(),
            algorithm=a.algorithm,
        )
        (out / "graph_expansion.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
        md = [
            "| case | nodes | edges | ours s | gco s | speed-up | ours energy | gco energy | ratio |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for x in rows:
            md.append(
                f"| {x['case']} | {x['nodes']:,} | {x['edges']:,} | {x['ours_s']:.3f} | {x.get('gco_s', float('nan')):.3f} "
                f"| {x.get('speedup', float('nan')):.2f} | {x['ours_energy']:.6g} | {x.get('gco_energy', float('nan')):.6g} "
                f"| {x.get('ratio', float('nan')):.5f} |"
            )
        (out / "graph_expansion.md").write_text("\n".join(md) + "\n")
    return rows


if __name__ == "__main__":
    main()
