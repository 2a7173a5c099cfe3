"""Random energies for the CPU grid solver's ``algorithm="auto"``, and auto against both forced algorithms.

The choice between Boykov-Kolmogorov and pseudoflow was first tuned on the energies of ``benchmarks/cpu.py``.
This script draws energies that rule never saw, in two disjoint parts:

* the *tuning* part (generator seeds from 1000 on, two families), the only one a rule may be fitted on;
* the *held-out* part (generator seeds from 0, the two tuning families and four more), which judges it;
* the *fresh* part (generator seeds from 2000 on, the held-out part's families): drawn after the rule in
  use was chosen (its volume feature was read off the held-out part's misses), so its clean check.

Families (``FAMILIES``; each energy draws its dimension, connectivity, size, ``lam`` and seed coverage):

* ``hist-threshold`` (tuning): smoothed noise (2D or 3D), object seeds on the brightest and background
  seeds on the darkest voxels, ``torchcut.segmentation_graph`` (a histogram data term);
* ``prob-noise`` (tuning): smoothed noise turned into object probabilities, unaries ``-log p``,
  a contrast-sensitive smoothness term, hard seeds on the most confident nodes;
* ``hist-photo-discs`` (held out): a scikit-image picture, seeds in random discs (object and background
  discs by the picture's brightness), ``segmentation_graph``;
* ``hist-noise-scribbles`` (held out): smoothed noise (2D or 3D), seeds along random walks,
  ``segmentation_graph``;
* ``prob-photo`` (held out): a picture's normalised brightness or one colour channel as probability,
  ``-log p`` unaries, contrast term, random hard seeds;
* ``prob-blobs`` (held out): blob volumes or images (``benchmarks/grid.py``) with noisy probabilities
  and hard seeds in random balls.

Sizes: 128^2-1024^2 in 2D (4- or 8-connected), 32^3-96^3 in 3D (6- or 26-connected; 26-connected volumes up
to 72^3); ``lam`` log-uniform in 1-100; seed coverage log-uniform in 1-30%.

Timing: per energy, ``torchcut.maxflow(graph, backend="cpu", algorithm=...)`` on a built graph (the solve
alone, torch's threads), auto and both forced algorithms interleaved in one process, ``--repeat`` rounds
(the round order rotates), the median kept, of wall time and of the process's CPU time (``*_cpu``: on a
busy machine less disturbed, but on a grid cut over two threads it sums them and leaves out waiting);
flows asserted equal across the three. The ratio auto / faster is what the choice is judged by;
``pick / faster`` (the forced time of auto's pick) is free of the spread between two timings of one
solve. ``--report`` summarises a saved run, and with ``--features`` also the picks of each threshold
table of ``RULES`` (the same forced times, so a rule is judged without solving again).

    python benchmarks/auto_heldout.py --split heldout|fresh --out benchmarks/results/auto-heldout.json
        [--repeat 5] [--only TEXT] [--list] [--features]
    python benchmarks/auto_heldout.py --report benchmarks/results/auto-heldout.json

``--list`` prints the energies without solving; ``--features`` adds the energy's capacity statistics
(``features``) to the JSON. ``--orient`` times pseudoflow's mask alone on each graph as given and mirrored
instead (the data of the CPU op's mirror rule, docs/performance.md "refine and torchmaxflow's job on the
CPU"), with a summary per threshold on the share of nodes with excess less those with a deficit:

    python benchmarks/auto_heldout.py --split heldout --orient --repeat 2 --out DIR/orient-heldout.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TUNING = ("hist-threshold", "prob-noise")
HELDOUT = ("hist-threshold", "prob-noise", "hist-photo-discs", "hist-noise-scribbles", "prob-photo", "prob-blobs")
PHOTOS = (
    "astronaut",
    "camera",
    "coffee",
    "chelsea",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "moon",
    "coins",
    "horse",
    "retina",
    "brick",
    "grass",
    "gravel",
    "cat",
    "cell",
    "clock",
    "page",
    "text",
)
ALGORITHMS = ("auto", "boykov-kolmogorov", "pseudoflow")
SEED_BASE = {"tuning": 1000, "heldout": 0, "fresh": 2000}
PER_FAMILY = {"tuning": 24, "heldout": 10, "fresh": 10}  # 48 tuning energies (and one fixed volume), 60 and 60


# --------------------------------------------------------------------------------------- the draws
def draw(family: str, seed: int) -> dict:
    """The parameters of one energy (deterministic in family and seed)."""
    rng = np.random.default_rng([seed, sum(map(ord, family))])
    ndim = 2 if family in ("hist-photo-discs", "prob-photo") else int(rng.choice([2, 3]))
    if ndim == 2:
        conn = int(rng.choice([4, 8]))
        side = int(round(math.exp(rng.uniform(math.log(128), math.log(1024)))))
        aspect = rng.uniform(0.75, 1.33)
        shape = (side, max(128, min(1024, int(round(side * aspect)))))
    else:
        conn = int(rng.choice([6, 26]))
        top = 96 if conn == 6 else 72
        shape = (int(round(math.exp(rng.uniform(math.log(32), math.log(top))))),) * 3
    lam = float(math.exp(rng.uniform(0, math.log(100))))
    cover = float(math.exp(rng.uniform(math.log(0.01), math.log(0.30))))
    spec = dict(
        family=family,
        seed=seed,
        ndim=ndim,
        conn=conn,
        shape=shape,
        lam=round(lam, 2),
        cover=round(cover, 4),
        smooth=round(float(rng.uniform(1.0, 6.0)), 2),
        noise=round(float(rng.uniform(0.0, 0.3)), 3),
        bins=int(rng.choice([8, 16, 32, 64])),
        photo=str(rng.choice(PHOTOS)),
        obj_share=round(float(rng.uniform(0.15, 0.6)), 3),
        temp=round(float(rng.uniform(0.03, 0.3)), 3),
    )
    n = int(np.prod(shape))
    spec["name"] = (
        f"{family} s{seed} {'x'.join(map(str, shape))} {conn}-conn lam {spec['lam']:g} seeds {100 * cover:.1f}%"
    )
    spec["nodes"] = n
    return spec


def bright_dark_volume(n: int = 64, lam: float = 50.0) -> dict:
    """The volume auto once sent to Boykov-Kolmogorov 3.7x too slow: smoothed noise, 6-connected, object
    seeds on the brightest 3% and background seeds on the darkest 10% of voxels, a 16-bin histogram."""
    spec = draw("hist-threshold", 999)
    spec.update(
        ndim=3,
        conn=6,
        shape=(n, n, n),
        lam=lam,
        cover=0.13,
        obj_share=round(3 / 13, 4),
        bins=16,
        smooth=2.0,
        noise=0.0,
        nodes=n**3,
        name=f"hist-threshold bright/dark {n}^3 6-conn lam {lam:g} seeds 13%",
    )
    return spec


def specs(split: str) -> list[dict]:
    fams = TUNING if split == "tuning" else HELDOUT
    base, count = SEED_BASE[split], PER_FAMILY[split]
    extra = [bright_dark_volume()] if split == "tuning" else []
    return extra + [draw(f, base + i) for f in fams for i in range(count)]


# ------------------------------------------------------------------------------------------ images
def smoothed_noise(shape, sigma, rng) -> np.ndarray:
    from scipy import ndimage

    v = ndimage.gaussian_filter(rng.normal(size=shape), sigma)
    v -= v.min()
    return v / max(v.max(), 1e-12)


def photo(name, shape) -> np.ndarray:
    """A scikit-image picture as RGB float in [0, 1], resized to ``shape``."""
    from skimage import data, transform

    img = np.asarray(getattr(data, name)(), np.float64)
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    img = img[..., :3] / (255.0 if img.max() > 1 else 1.0)
    return transform.resize(img, shape, order=1, anti_aliasing=True).astype(np.float32)


def image_of(spec, rng) -> np.ndarray:
    """The image: [*shape] gray or [*shape, 3] colour, float in [0, 1], with the spec's added noise."""
    fam, shape = spec["family"], tuple(spec["shape"])
    if fam in ("hist-photo-discs", "prob-photo"):
        img = photo(spec["photo"], shape)
    elif fam == "prob-blobs":
        import grid as G

        if spec["ndim"] == 3:
            img = G.volume(shape[0], seed=spec["seed"] + 7)
        else:
            img = blobs2d(shape, rng)
    else:
        img = smoothed_noise(shape, spec["smooth"], rng)
    img = img + rng.normal(0.0, spec["noise"] * 0.3, img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


def blobs2d(shape, rng) -> np.ndarray:
    from scipy import ndimage

    yy, xx = np.meshgrid(*(np.linspace(0, 1, s) for s in shape), indexing="ij")
    v = np.zeros(shape)
    for _ in range(8):
        c, r = rng.uniform(0.15, 0.85, 2), rng.uniform(0.05, 0.18)
        v += np.exp(-((yy - c[0]) ** 2 + (xx - c[1]) ** 2) / (2 * r * r))
    v = (v > 0.5) * 0.6 + 0.2 + rng.normal(0, 0.25, shape)
    return np.clip(ndimage.gaussian_filter(v, 1.0), 0, 1)


def gray(img, ndim) -> np.ndarray:
    return img.mean(-1) if img.ndim == ndim + 1 else img


# ------------------------------------------------------------------------------------------- seeds
def seeds_threshold(g, cover, obj_share) -> np.ndarray:
    """Object seeds on the brightest, background seeds on the darkest nodes."""
    flat = np.sort(g.ravel())
    n = flat.size
    k_obj = max(1, int(cover * obj_share * n))
    k_bkg = max(1, int(cover * (1 - obj_share) * n))
    s = np.zeros(g.shape, np.uint8)
    s[g >= flat[n - k_obj]] = 1
    s[(g <= flat[k_bkg - 1]) & (s == 0)] = 2
    return s


def seeds_discs(g, cover, rng) -> np.ndarray:
    """Random discs (balls) until ``cover`` of the nodes are seeds; a disc is object where the picture is
    brighter there than its median, else background."""
    shape, n = g.shape, g.size
    med = np.median(g)
    s = np.zeros(shape, np.uint8)
    grids = np.ogrid[tuple(slice(0, k) for k in shape)]
    for _ in range(2000):
        if (s > 0).sum() >= cover * n:
            break
        c = [rng.integers(0, k) for k in shape]
        r = max(2.0, rng.uniform(0.01, 0.06) * min(shape))
        ball = sum((x - ci) ** 2 for x, ci in zip(grids, c)) <= r * r
        s[ball & (s == 0)] = 1 if g[tuple(c)] > med else 2
    _both_labels(s, g)
    return s


def seeds_scribbles(g, cover, rng) -> np.ndarray:
    """Random walks of a few voxels' width, object where they start bright, background where dark."""
    shape, n = g.shape, g.size
    nd = len(shape)
    med = np.median(g)
    s = np.zeros(shape, np.uint8)
    steps = np.array([d for d in np.ndindex(*(3,) * nd) if any(v != 1 for v in d)]) - 1
    for _ in range(500):
        if (s > 0).sum() >= cover * n:
            break
        p = np.array([rng.integers(0, k) for k in shape])
        lab = 1 if g[tuple(p)] > med else 2
        length = int(rng.integers(20, 20 + 2 * max(shape)))
        path = [p]
        for _ in range(length):
            p = np.clip(p + steps[rng.integers(len(steps))] * rng.integers(1, 3), 0, np.array(shape) - 1)
            path.append(p)
        for q in path:
            sl = tuple(slice(max(0, v - 1), v + 2) for v in q)
            blk = s[sl]
            blk[blk == 0] = lab
    _both_labels(s, g)
    return s


def _both_labels(s, g):
    """At least one object and one background seed (the brightest and the darkest node)."""
    if not (s == 1).any():
        s[np.unravel_index(np.argmax(g), g.shape)] = 1
    if not (s == 2).any():
        s[np.unravel_index(np.argmin(g), g.shape)] = 2


# ---------------------------------------------------------------------------------------- energies
def histogram_graph(spec, img, seeds):
    import torch

    import torchcut

    nd = spec["ndim"]
    return torchcut.segmentation_graph(
        torch.from_numpy(np.ascontiguousarray(img)),
        torch.from_numpy(seeds.astype(np.int64)),
        lam=spec["lam"],
        connectivity=spec["conn"],
        ndim=nd,
        bins=spec["bins"],
        channel_axis=-1 if img.ndim > nd else None,
    )


def probability_graph(spec, img, prob, seeds):
    """Unaries ``-log p`` and ``-log(1 - p)`` (100 units a nat), contrast n-links ``lam`` x 100 x
    ``exp(-d^2 / (2 sigma^2)) / dist``, seeds fixed with a capacity above any cut."""
    import torch

    import torchcut
    from torchcut.grid import shift

    nd, conn = spec["ndim"], spec["conn"]
    offs = torchcut.grid_offsets(nd, conn)
    p = np.clip(prob, 1e-6, 1 - 1e-6)
    unit = 100.0
    source = np.rint(unit * -np.log(1 - p))  # paid when the node goes to the sink side
    sink = np.rint(unit * -np.log(p))
    x = torch.from_numpy(np.ascontiguousarray(img if img.ndim > nd else img[..., None])).movedim(-1, 0)
    diffs = [((x - shift(x, o, 0)) ** 2).sum(0) for o in offs]
    sigma2 = float(torch.stack([d.mean() for d in diffs]).mean()) + 1e-12
    edges = torch.stack(
        [
            torch.round(unit * spec["lam"] * torch.exp(-d / sigma2) / math.sqrt(sum(v * v for v in o)))
            for d, o in zip(diffs, offs)
        ]
    ).to(torch.int32)
    hard = int(edges.sum(0).max()) * 2 * len(offs) + 1
    source[seeds == 1], sink[seeds == 1] = hard, 0
    source[seeds == 2], sink[seeds == 2] = 0, hard
    return torchcut.GridGraph(
        torch.from_numpy(source.astype(np.int32)), torch.from_numpy(sink.astype(np.int32)), edges, offs
    )


def confident_seeds(prob, cover, rng) -> np.ndarray:
    """Hard seeds on a random ``cover`` share of the nodes, drawn among the most confident half."""
    conf = np.abs(prob - 0.5)
    cand = np.flatnonzero(conf.ravel() >= np.median(conf))
    pick = rng.choice(cand, size=max(2, min(cand.size, int(cover * prob.size))), replace=False)
    s = np.zeros(prob.size, np.uint8)
    s[pick] = np.where(prob.ravel()[pick] > 0.5, 1, 2)
    s = s.reshape(prob.shape)
    _both_labels(s, prob)
    return s


def build(spec):
    """The GridGraph of a spec (deterministic)."""
    rng = np.random.default_rng([spec["seed"], 7, sum(map(ord, spec["family"]))])
    fam, nd = spec["family"], spec["ndim"]
    img = image_of(spec, rng)
    g = gray(img, nd)
    if fam == "hist-threshold":
        return histogram_graph(spec, img, seeds_threshold(g, spec["cover"], spec["obj_share"]))
    if fam == "hist-photo-discs":
        return histogram_graph(spec, img, seeds_discs(g, spec["cover"], rng))
    if fam == "hist-noise-scribbles":
        return histogram_graph(spec, img, seeds_scribbles(g, spec["cover"], rng))
    # probabilities
    if fam == "prob-photo" and rng.random() < 0.5 and img.ndim > nd:
        g = img[..., int(rng.integers(3))]
    thr = float(np.quantile(g, 1 - spec["obj_share"]))
    prob = 1 / (1 + np.exp(-(g - thr) / spec["temp"]))
    prob = np.clip(prob + rng.normal(0, 0.1, prob.shape), 0, 1)
    if fam == "prob-blobs":
        seeds = seeds_discs(prob, spec["cover"], rng)
    else:
        seeds = confident_seeds(prob, spec["cover"], rng)
    return probability_graph(spec, img, prob, seeds)


# ---------------------------------------------------------------------------------------- features
def features(graph) -> dict:
    """Capacity statistics of a single-item grid graph (for fitting a choice; the solver's own counts are
    taken in its load pass)."""
    import torch

    caps = graph.caps[0].to(torch.int64)
    t = (graph.source[0].to(torch.int64) - graph.sink[0].to(torch.int64)).abs()
    s = caps.sum(0)
    fixed = t >= s
    free = ~fixed
    clipped = torch.minimum(t, s)
    D = caps.shape[0]
    out = dict(
        D=D,
        ndim=caps.dim() - 1,
        nodes=int(t.numel()),
        ratio=float(s.sum()) / max(1.0, 2.0 * float(clipped.sum())),
        fixed=float(fixed.double().mean()),
        zero_t=float((t == 0).double().mean()),
        ratio_free=float(s[free].sum()) / max(1.0, 2.0 * float(t[free].sum())),
        nlink_mean=float(s.double().mean()) / D,
        t_free_mean=float(t[free].double().mean()) if free.any() else 0.0,
    )
    return out


# ------------------------------------------------------------------------------------------ timing
def measure(graph, repeat: int) -> dict:
    import torchcut

    def once(alg):
        t0, c0 = time.perf_counter(), time.process_time()
        r = torchcut.maxflow(graph, backend="cpu", algorithm=alg)
        _ = r.mask
        return time.perf_counter() - t0, time.process_time() - c0, r

    runs = {a: [] for a in ALGORITHMS}
    cpu = {a: [] for a in ALGORITHMS}
    flows, stats = {}, {}
    for a in ALGORITHMS:  # warm-up and flows
        _, _, r = once(a)
        flows[a] = int(r.flow_value)
        stats[a] = {k: v for k, v in r.stats.items() if isinstance(v, (int, float, str))}
    for i in range(repeat):
        k = i % len(ALGORITHMS)
        for a in ALGORITHMS[k:] + ALGORITHMS[:k]:
            wall, cpu_s, _ = once(a)
            runs[a].append(wall)
            cpu[a].append(cpu_s)
    assert len(set(flows.values())) == 1, flows
    med = {a: statistics.median(v) for a, v in runs.items()}
    med_cpu = {a: statistics.median(v) for a, v in cpu.items()}
    faster = min(med["boykov-kolmogorov"], med["pseudoflow"])
    pick = stats["auto"]["algorithm"]
    forced = {"boykov-kolmogorov": med["boykov-kolmogorov"], "pseudoflow": med["pseudoflow"]}
    return dict(
        flow=flows["auto"],
        runs=runs,
        median=med,
        cpu_runs=cpu,
        median_cpu=med_cpu,
        auto_over_faster_cpu=med_cpu["auto"] / min(med_cpu["boykov-kolmogorov"], med_cpu["pseudoflow"]),
        pick_over_faster_cpu=med_cpu.get(pick, med_cpu["auto"])
        / min(med_cpu["boykov-kolmogorov"], med_cpu["pseudoflow"]),
        pick=pick,
        handovers=stats["auto"].get("handovers", 0),
        auto_over_faster=med["auto"] / faster,
        pick_over_faster=forced.get(pick, med["auto"]) / faster,
        faster="boykov-kolmogorov" if forced["boykov-kolmogorov"] <= forced["pseudoflow"] else "pseudoflow",
        stats=stats["auto"],
    )


def measure_orient(graph, repeat: int) -> dict:
    """Pseudoflow for the mask alone (``solvers.cpu.solve_grid_mask``) on the graph as given and mirrored,
    interleaved, best of ``repeat`` each: the data of the CPU op's mirror rule (``share``: the nodes with
    excess less those with a deficit, over all nodes; the op mirrors above 0.2)."""
    import torch

    from torchcut.solvers import cpu

    net = graph.source[0].to(torch.int64) - graph.sink[0].to(torch.int64)
    share = (int((net > 0).sum()) - int((net < 0).sum())) / net.numel()
    best, masks = {}, {}
    for i in range(repeat + 1):  # the first round warms up
        for o in ("given", "mirrored") if i % 2 == 0 else ("mirrored", "given"):
            t0 = time.perf_counter()
            masks[o], _ = cpu.solve_grid_mask(graph, algorithm="pseudoflow", orient=o)
            dt = time.perf_counter() - t0
            if i:
                best[o] = min(best.get(o, dt), dt)
    assert torch.equal(masks["given"], masks["mirrored"])
    return dict(share=share, given=best["given"], mirrored=best["mirrored"], ratio=best["mirrored"] / best["given"])


def orient_summary(rows, shares=(0.0, 0.05, 0.1, 0.15, 0.2, 0.3)) -> list[dict]:
    """Per share threshold: how many energies the rule "mirror above it" mirrors, how many of those run
    faster (ratio below 0.9) or slower (above 1.1) mirrored, the worst ratio, and the geometric mean over
    every row of the time kept over the time as given.

    Examples
    --------
    >>> rows = [dict(share=0.5, ratio=0.5), dict(share=0.1, ratio=1.5), dict(share=-0.3, ratio=2.0)]
    >>> [(r["mirrored"], r["faster"], r["slower"]) for r in orient_summary(rows, (0.0, 0.2))]
    [(2, 1, 1), (1, 1, 0)]
    """
    out = []
    for t in shares:
        chosen = [r["ratio"] for r in rows if r["share"] > t]
        kept = [r["ratio"] if r["share"] > t else 1.0 for r in rows]
        out.append(
            dict(
                share=t,
                mirrored=len(chosen),
                faster=sum(v < 0.9 for v in chosen),
                slower=sum(v > 1.1 for v in chosen),
                worst=max(chosen, default=None),
                geomean=float(np.exp(np.mean(np.log(kept)))) if kept else None,
            )
        )
    return out


def summary(rows, key="auto_over_faster") -> dict:
    v = np.array([r[key] for r in rows])
    if v.size == 0:
        return {}
    return dict(
        count=int(v.size),
        median=float(np.median(v)),
        p95=float(np.quantile(v, 0.95)),
        max=float(v.max()),
        within_1_10=float((v <= 1.10).mean()),
        within_1_25=float((v <= 1.25).mean()),
    )


# The thresholds of auto's ratio (torchcut/csrc/cpu/grid_solve.cpp, hpf_ratio) by (ndim, connectivity, cut over
# two threads): the 2D ones (unchanged by the fits), then the volumes' before the tuning part was fitted, after
# it, and on the ratio of their free nodes (features["ratio_free"], "free").
_RULES_2D = {(2, 4): 3.5, (2, 8): 3.85, (2, 8, "cut"): 2.7}
RULES = {
    "volumes 5 / 2": {**_RULES_2D, (3, 6): 5.0, (3, 26): 2.0, (3, 26, "cut"): 4.0},
    "volumes 3.2 / 1.55": {**_RULES_2D, (3, 6): 3.2, (3, 26): 1.55, (3, 26, "cut"): 4.0},
    "volumes free 4.0 / 2.2 / 20": {**_RULES_2D, (3, 6): 4.0, (3, 26): 2.2, (3, 26, "cut"): 20.0, "free": True},
}
#: The table the solver uses (cpu/grid_solve.cpp, hpf_ratio)
CURRENT_RULE = "volumes free 4.0 / 2.2 / 20"


def is_cut(spec, threads: int = 2) -> bool:
    """Whether the solver cuts this single grid into ranges over ``threads`` threads (at least 2**17 nodes
    per range, 2**20 in 6-connected volumes, counting the border of one node)."""
    n_pad = int(np.prod([k + 2 for k in spec["shape"]]))
    least = 2**20 if spec["ndim"] == 3 and spec["conn"] == 6 else 2**17
    return threads > 1 and n_pad // least >= 2


def rule_pick(row, table) -> str:
    """The algorithm a threshold table picks for a measured row: its ``features["ratio"]``, or in volumes
    ``features["ratio_free"]`` when the table says ``"free"``."""
    key = (row["ndim"], row["conn"])
    thr = table.get(key + ("cut",), table[key]) if is_cut(row) else table[key]
    feature = "ratio_free" if table.get("free") and row["ndim"] == 3 else "ratio"
    return "pseudoflow" if row["features"][feature] > thr else "boykov-kolmogorov"


def report(path) -> dict:
    """Summaries of a saved run: auto / faster, pick / faster, and pick / faster under each of ``RULES``."""
    rows = json.loads(Path(path).read_text())["rows"]
    out = {"auto_over_faster": summary(rows), "pick_over_faster": summary(rows, "pick_over_faster")}
    clocks = ("median", "median_cpu") if all("median_cpu" in r for r in rows) else ("median",)
    if "median_cpu" in clocks:
        out["auto_over_faster_cpu"] = summary(rows, "auto_over_faster_cpu")
        out["pick_over_faster_cpu"] = summary(rows, "pick_over_faster_cpu")
    if all("features" in r for r in rows):
        for name, table in RULES.items():
            for clock in clocks:
                costs = []
                for r in rows:
                    m = r[clock]
                    costs.append({"rule": m[rule_pick(r, table)] / min(m["boykov-kolmogorov"], m["pseudoflow"])})
                suffix = "_cpu" if clock == "median_cpu" else ""
                out[f"rule {name}: pick_over_faster{suffix}"] = summary(costs, "rule")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tuning", "heldout", "fresh"), default="heldout")
    ap.add_argument("--out", default=None, help="JSON file for the rows (default: print only)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default=None, help="only the energies whose name contains this text")
    ap.add_argument("--list", action="store_true", help="print the energies, solve nothing")
    ap.add_argument("--features", action="store_true", help="add capacity statistics to each row")
    ap.add_argument("--report", metavar="JSON", help="summarise a saved run (with --features: under each rule)")
    ap.add_argument("--orient", action="store_true", help="pseudoflow's mask as given against mirrored instead")
    args = ap.parse_args(argv)
    if args.report:
        print(json.dumps(report(args.report), indent=1))
        return 0
    todo = [s for s in specs(args.split) if args.only is None or args.only in s["name"]]
    if args.list:
        for s in todo:
            print(s["name"])
        return 0
    import torch

    meta = dict(
        split=args.split,
        repeat=args.repeat,
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        machine=platform.processor() or platform.machine(),
        cores=os.cpu_count(),
        load_before=os.getloadavg(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    print(f"# {meta}", flush=True)
    rows = []
    if args.orient:
        for spec in todo:
            row = dict(spec, **measure_orient(build(spec), args.repeat))
            rows.append(row)
            print(
                f"{spec['name']:64s} share {row['share']:+.2f} given {row['given'] * 1e3:8.1f} mirrored "
                f"{row['mirrored'] * 1e3:8.1f} ms ({row['ratio']:.2f})",
                flush=True,
            )
        out = {"meta": meta, "rows": rows, "orient": orient_summary(rows)}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
        print(json.dumps(out["orient"], indent=1))
        return 0
    for spec in todo:
        g = build(spec)
        row = dict(spec)
        if args.features:
            row["features"] = features(g)
        row.update(measure(g, args.repeat))
        rows.append(row)
        m = row["median"]
        print(
            f"{spec['name']:64s} auto {m['auto'] * 1e3:8.1f} [{row['pick'][:2]}{'+' if row['handovers'] else ''}] "
            f"bk {m['boykov-kolmogorov'] * 1e3:8.1f} pf {m['pseudoflow'] * 1e3:8.1f} ms | auto/faster "
            f"{row['auto_over_faster']:.2f} pick/faster {row['pick_over_faster']:.2f}",
            flush=True,
        )
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    meta["load_after"] = os.getloadavg()
    out = {
        "meta": meta,
        "rows": rows,
        "auto_over_faster": summary(rows),
        "pick_over_faster": summary(rows, "pick_over_faster"),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("auto_over_faster", "pick_over_faster")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
