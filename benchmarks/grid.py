"""Benchmark of the grid max-flow solvers: torchcut (CUDA kernels) against PyMaxflow and the reference.

One run, one machine, the same integer networks for every solver:

* 2D segmentation energies (Boykov-Jolly: colour-histogram data term from seeds, contrast-sensitive
  smoothness, hard seed constraints) on scikit-image pictures resized to 512^2, 1024^2 and 2048^2,
  4- and 8-connected; a batch of 32 pictures at 512^2 (4-connected);
* 3D energies on synthetic volumes (smoothed noisy blobs) at 64^3, 128^3 and 256^3, 6-connected;
* small cases (256^2, 32^3) where the torch reference solver also runs (it is far too slow beyond);
* ``--family hard``: hard energies instead, where push-relabel needs many global relabels:
  strong smoothness (n-links up to 100x the data term), thin bright curves on a noisy background, and
  low contrast (object and background histograms overlap), 8-connected 2D at 0.06-0.25 MP plus
  1024^2 4-connected, and 26-connected 3D at 0.11-0.26 MP. The CPU column is then the fastest of
  PyMaxflow (Boykov-Kolmogorov) and thinhpf (Hochbaum's pseudoflow), build plus solve, same run.

Capacities are quantized to integers here once (numpy, float64), and every solver gets exactly those
integers: torchcut as CUDA tensors, PyMaxflow through ``add_grid_edges``/``add_grid_tedges``. Times:
*solve* = ``torchcut.maxflow`` on a built graph (PyMaxflow: ``maxflow()``); *to mask* = graph build from
the integer arrays plus solve plus reading the mask (PyMaxflow's ``get_grid_segments`` is True on the
sink side, the opposite of torchcut's mask; the benchmark inverts it). CUDA times use events after a
synchronisation; medians of ``--repeats`` runs after one warm-up. PyMaxflow runs in worker processes
(one case each, in parallel with the GPU part, on otherwise idle cores) and is skipped where its
warm-up exceeds ``--pymaxflow-limit`` seconds. Flow values are printed side by side and asserted equal.

Usage: ``python benchmarks/grid.py --out benchmarks/results`` (``--quick`` for a short subset).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HARD = 2000  # hard seed constraint (integer units)
DATA_SCALE = 10.0  # -log-likelihoods are multiplied by this and rounded
LAM = 50.0  # smoothness weight (integer units, before the contrast factor)
PICTURES = ["astronaut", "coffee", "chelsea", "rocket", "motorcycle_left", "immunohistochemistry", "retina", "cat"]


# ------------------------------------------------------------------------------------------ energy
def offsets_for(ndim, conn):
    from torchcut import grid_offsets

    return grid_offsets(ndim, conn)


def picture(name: str, n: int, flip: int = 0) -> np.ndarray:
    """A scikit-image picture, RGB float in [0, 1], resized to n x n."""
    from skimage import data, transform
    from skimage.color import gray2rgb

    try:
        img = getattr(data, name)()
    except Exception:  # noqa: BLE001 - pictures that need a download are replaced offline
        img = data.astronaut()
    img = np.asarray(img, dtype=np.float64)
    if img.max() > 1:
        img = img / 255.0
    if img.ndim == 2:
        img = gray2rgb(img)
    img = img[..., :3]
    img = transform.resize(img, (n, n), order=1, anti_aliasing=True)
    if flip & 1:
        img = img[:, ::-1]
    if flip & 2:
        img = img[::-1]
    return np.ascontiguousarray(img)


def volume(n: int, seed: int = 0) -> np.ndarray:
    """Synthetic 3D volume: a few smooth blobs, noise, Gaussian smoothing; float in [0, 1]."""
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.linspace(0, 1, n),) * 3, indexing="ij")
    v = np.zeros((n, n, n))
    for _ in range(6):
        c = rng.uniform(0.25, 0.75, 3)
        r = rng.uniform(0.08, 0.2)
        v += np.exp(-((z - c[0]) ** 2 + (y - c[1]) ** 2 + (x - c[2]) ** 2) / (2 * r * r))
    v = (v > 0.5).astype(np.float64) * 0.6 + 0.2
    v += rng.normal(0, 0.25, v.shape)
    v = ndimage.gaussian_filter(v, 1.0)
    return np.clip(v, 0, 1)


def seeds_for(shape) -> np.ndarray:
    """scikit-image random_walker convention: 1 object (a ball in the middle), 2 background (border)."""
    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    r2 = sum(((g - s / 2) / s) ** 2 for g, s in zip(grids, shape))
    seeds = np.zeros(shape, np.uint8)
    seeds[r2 < 0.06**2] = 1
    border = np.zeros(shape, bool)
    w = max(2, shape[0] // 40)
    for ax in range(len(shape)):
        sl = [slice(None)] * len(shape)
        sl[ax] = slice(0, w)
        border[tuple(sl)] = True
        sl[ax] = slice(-w, None)
        border[tuple(sl)] = True
    seeds[border] = 2
    return seeds


def energy(img: np.ndarray, seeds: np.ndarray, offsets, ndim: int, lam: float = LAM):
    """Integer Boykov-Jolly network: (source, sink, edges [K, *shape]) as int32 arrays.

    ``img`` is ``[*shape, C]`` (C = 3 for pictures) or ``[*shape]`` (volumes); ``lam`` is the smoothness
    weight in integer units (the data term is about ``DATA_SCALE`` times a few nats).
    """
    x = img if img.ndim == ndim + 1 else img[..., None]
    bins = 8 if x.shape[-1] == 3 else 32
    q = np.minimum((x * bins).astype(np.int64), bins - 1)
    code = np.zeros(q.shape[:-1], np.int64)
    for c in range(q.shape[-1]):
        code = code * bins + q[..., c]
    nb = bins ** q.shape[-1]
    h_obj = np.bincount(code[seeds == 1], minlength=nb) + 1.0
    h_bkg = np.bincount(code[seeds == 2], minlength=nb) + 1.0
    nll_obj = -np.log(h_obj / h_obj.sum())[code]
    nll_bkg = -np.log(h_bkg / h_bkg.sum())[code]
    source = np.rint(DATA_SCALE * nll_bkg)  # cost of calling p background = capacity source -> p
    sink = np.rint(DATA_SCALE * nll_obj)
    source[seeds == 1], sink[seeds == 1] = HARD, 0
    source[seeds == 2], sink[seeds == 2] = 0, HARD
    import torch

    from torchcut.grid import shift

    xt = torch.from_numpy(x)
    diffs = []
    for o in offsets:
        nb_x = shift(xt.movedim(-1, 0), o, 0).movedim(0, -1).numpy()
        diffs.append(((x - nb_x) ** 2).sum(-1))
    inside = [shift(torch.ones(x.shape[:-1], dtype=torch.bool), o, False).numpy() for o in offsets]
    beta = 1.0 / (2 * np.mean([d[m].mean() for d, m in zip(diffs, inside)]) + 1e-12)
    edges = np.stack(
        [
            np.rint(lam * np.exp(-beta * d) / math.sqrt(sum(v * v for v in o))) * m
            for d, m, o in zip(diffs, inside, offsets)
        ]
    )
    return source.astype(np.int32), sink.astype(np.int32), edges.astype(np.int32)


def energy_torchcut(img: np.ndarray, seeds: np.ndarray, offsets, ndim: int):
    """The same arrays from ``torchcut.segmentation_graph`` (symmetric n-links: edges = caps[:K])."""
    import torch

    import torchcut

    x = torch.from_numpy(np.ascontiguousarray(img))
    conn = 2 * len(offsets)  # 4/8 in 2D, 6/18/26 in 3D
    g = torchcut.segmentation_graph(
        x,
        torch.from_numpy(seeds.astype(np.int64)),
        lam=LAM / 10,
        connectivity=conn,
        ndim=ndim,
        channel_axis=-1 if img.ndim == ndim + 1 else None,
    )
    assert g.offsets == tuple(offsets), (g.offsets, offsets)
    K = len(offsets)
    return (
        g.source[0].to(torch.int32).numpy(),
        g.sink[0].to(torch.int32).numpy(),
        g.caps[0, :K].to(torch.int32).numpy(),
    )


def make_case(spec, which: str = "builtin"):
    """Build the integer arrays of a case spec (deterministic).

    ``which``: "builtin" (the energy above, used for the committed H100 table) or "torchcut"
    (``torchcut.segmentation_graph``).
    """
    kind, n, conn, batch = spec["kind"], spec["n"], spec["conn"], spec["batch"]
    ndim = 2 if kind == "2d" else 3
    offs = offsets_for(ndim, conn)
    if "family" in spec:  # the hard energies (always the benchmark's own energy, with a smoothness factor)
        img, seeds = hard_image(spec)
        return offs, [energy(img, seeds, offs, ndim, lam=LAM * spec.get("lam_x", 1.0))]
    make = energy if which == "builtin" else energy_torchcut
    if kind == "2d":
        items = []
        for b in range(batch):
            img = picture(PICTURES[(spec["pic"] + b) % len(PICTURES)], n, flip=b // len(PICTURES))
            items.append(make(img, seeds_for(img.shape[:2]), offs, 2))
    else:
        vol = volume(n, seed=spec.get("seed", 0))
        items = [make(vol, seeds_for(vol.shape), offs, 3)]
    return offs, items


def hard_image(spec):
    """Image (float in [0, 1]) and seeds of a hard-energy case (deterministic).

    family "smooth": a picture (its energy gets ``lam_x`` times the smoothness); "thin": bright curves
    1-2 pixels wide on a noisy background, object seeds on a short piece of each curve; "lowcontrast":
    an ellipsoid 0.06 brighter than the background under noise of 0.1 (2D) or 0.12 (3D).
    """
    fam, n, kind = spec["family"], spec["n"], spec["kind"]
    rng = np.random.default_rng(spec.get("seed", 0))
    if fam == "smooth":
        img = (
            picture(PICTURES[spec.get("pic", 0) % len(PICTURES)], n) if kind == "2d" else volume(n, spec.get("seed", 0))
        )
        return img, seeds_for(img.shape[:2] if kind == "2d" else img.shape)
    shape = (n, n) if kind == "2d" else (n, n, n)
    grids = np.meshgrid(*[np.arange(s) / s for s in shape], indexing="ij")
    seeds = seeds_for(shape)
    if fam == "thin":
        assert kind == "2d", "thin structures: 2D only"
        y, x = grids
        img = 0.3 + 0.05 * rng.standard_normal(shape)
        for k in range(6):  # curves across the image, amplitude and phase from the seed
            a, f, ph = 0.05 + 0.1 * rng.random(), 1 + 3 * rng.random(), 2 * np.pi * rng.random()
            yc = 0.15 + 0.7 * k / 5 + a * np.sin(2 * np.pi * f * x + ph)
            line = np.abs(y - yc) < (0.75 + 0.5 * (k % 2)) / n
            img[line] = 0.7 + 0.05 * rng.standard_normal(int(line.sum()))
            piece = line & (np.abs(x - 0.5) < 0.03)
            seeds[piece & (seeds == 0)] = 1
        return np.clip(img, 0, 1), seeds
    if fam == "lowcontrast":
        r2 = sum(((g - 0.5) / w) ** 2 for g, w in zip(grids, (0.3, 0.22, 0.26)[: len(shape)]))
        img = 0.45 + 0.06 * (r2 < 1) + (0.1 if kind == "2d" else 0.12) * rng.standard_normal(shape)
        return np.clip(img, 0, 1), seeds
    raise ValueError(f"unknown hard family {fam!r}")


# --------------------------------------------------------------------------------------- PyMaxflow
def _hpf_once(items, offs):
    """thinhpf (Hochbaum's pseudoflow): build + solve of each item; returns (seconds, flows)."""
    import thinhpf

    t0 = time.perf_counter()
    flows = []
    for source, sink, edges in items:
        shape, n = source.shape, source.size
        ids = np.arange(n, dtype=np.uint32).reshape(shape) + 2
        tails, heads, caps = (
            [np.zeros(n, np.uint32), ids.ravel()],
            [ids.ravel(), np.ones(n, np.uint32)],
            [source.ravel(), sink.ravel()],
        )
        for k, o in enumerate(offs):  # symmetric n-links: p -> p + o and back, both edges[k] at p
            a = tuple(slice(max(0, -v), s - max(0, v)) for v, s in zip(o, shape))
            b = tuple(slice(max(0, v), s - max(0, -v)) for v, s in zip(o, shape))
            w = edges[k][a].ravel()
            tails += [ids[a].ravel(), ids[b].ravel()]
            heads += [ids[b].ravel(), ids[a].ravel()]
            caps += [w, w]
        t, h, c = np.concatenate(tails), np.concatenate(heads), np.concatenate(caps).astype(np.int32)
        keep = c > 0
        g = thinhpf.hpf(n + 2, int(keep.sum()))
        g.add_node(2)
        g.set_source(0)
        g.set_sink(1)
        g.add_node(n)
        g.add_edges(t[keep], h[keep], c[keep])
        g.mincut()
        flows.append(int(g.compute_maxflow()))
    return time.perf_counter() - t0, flows


def _pymaxflow_once(items, offs):
    import maxflow

    t0 = time.perf_counter()
    solve_t = 0.0
    flows, masks = [], []
    for source, sink, edges in items:
        bound = min(int(source.sum(dtype=np.int64)), int(sink.sum(dtype=np.int64)))
        g = maxflow.Graph[int]() if bound < 2**31 - 1 else maxflow.Graph[float]()
        ids = g.add_grid_nodes(source.shape)
        nd = source.ndim
        for k, o in enumerate(offs):
            st = np.zeros((3,) * nd)
            st[tuple(1 + v for v in o)] = 1
            g.add_grid_edges(ids, weights=edges[k], structure=st, symmetric=True)
        g.add_grid_tedges(ids, source, sink)
        t1 = time.perf_counter()
        flows.append(int(round(g.maxflow())))
        solve_t += time.perf_counter() - t1
        masks.append(~g.get_grid_segments(ids))  # PyMaxflow: True = sink side; ours: True = source side
    return time.perf_counter() - t0, solve_t, flows, masks


def _pymaxflow_worker(spec, repeats, limit, budget, queue):
    offs, items = make_case(spec, spec.get("energy", "builtin"))
    t, s, flows, masks = _pymaxflow_once(items, offs)  # warm-up, also the skip test
    if t > limit:
        queue.put({"skipped": f"warm-up took {t:.0f} s > {limit:.0f} s", "flows": flows})
        return
    tot, sol = [t], [s]
    if t * repeats > budget:  # keep the whole worker under its budget; the table says how many runs
        repeats = max(1, int(budget // t))
    for _ in range(repeats):
        t, s, _, _ = _pymaxflow_once(items, offs)
        tot.append(t)
        sol.append(s)
    res = {
        "total": statistics.median(tot[1:]),
        "solve": statistics.median(sol[1:]),
        "flows": flows,
        "runs": repeats,
        "mask_fg": [float(m.mean()) for m in masks],
    }
    if spec.get("hpf"):  # the other fastest CPU solver, same items, build + solve
        try:
            t, hflows = _hpf_once(items, offs)
            hts = [_hpf_once(items, offs)[0] for _ in range(max(1, min(repeats, int(budget // max(t, 1e-3)))))]
            res.update(hpf_total=statistics.median(hts), hpf_flows=hflows)
        except ImportError:
            res["hpf_total"] = None
    queue.put(res)


# ------------------------------------------------------------------------------------------ torch
def _cuda_time(fn, repeats):
    import torch

    if not torch.cuda.is_available():  # CPU smoke runs of the benchmark itself
        fn()
        times, out = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), out
    fn()  # warm-up
    torch.cuda.synchronize()
    times = []
    out = None
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times), out


def case_tensors(items, device):
    """(source, sink, edges) tensors of a case's integer arrays (``make_case``) on ``device``: one item
    unbatched (``[*shape]``, ``[K, *shape]``), several batched (``[B, *shape]``, ``[K, B, *shape]``)."""
    import torch

    if len(items) == 1:
        return tuple(torch.as_tensor(a, device=device) for a in items[0])
    return (
        torch.as_tensor(np.stack([s for s, _, _ in items]), device=device),
        torch.as_tensor(np.stack([t for _, t, _ in items]), device=device),
        torch.as_tensor(np.stack([e for _, _, e in items], axis=1), device=device),
    )


def run_torchcut(offs, items, repeats, device, **opts):
    import torchcut

    src, snk, edg = case_tensors(items, device)

    def build():
        return torchcut.GridGraph(src, snk, edg, offs)

    g = build()
    t_solve, res = _cuda_time(lambda: torchcut.maxflow(g, **opts), repeats)

    def to_mask():
        r = torchcut.maxflow(build(), **opts)
        return r.mask

    t_total, mask = _cuda_time(to_mask, repeats)
    flows = res.flow_values.tolist()
    return {
        "solve": t_solve,
        "total": t_total,
        "flows": flows,
        "stats": res.stats,
        "result": res,
        "mask_fg": mask.float().mean().item(),
    }


def run_reference(offs, items, repeats, device):
    import torchcut

    g = torchcut.GridGraph(*case_tensors(items[:1], device), offs)
    t, res = _cuda_time(lambda: torchcut.maxflow(g, backend="reference"), repeats)
    return {"solve": t, "flows": res.flow_values.tolist()}


# ------------------------------------------------------------------------------------------- cases
def hard_cases():
    """The hard-energy family: strong smoothness, thin structures, low contrast."""
    c = []
    for fam, lam_x, extra in (
        ("smooth", 100.0, {"pic": 0}),
        ("thin", 10.0, {"seed": 1}),
        ("lowcontrast", 10.0, {"seed": 2}),
    ):
        for n, conn in ((256, 8), (512, 8), (512, 4), (1024, 4)):
            c.append(
                dict(
                    name=f"hard {fam} x{lam_x:g} {n}^2",
                    kind="2d",
                    n=n,
                    conn=conn,
                    batch=1,
                    family=fam,
                    lam_x=lam_x,
                    hpf=True,
                    **extra,
                )
            )
    for fam, lam_x, n in (("lowcontrast", 10.0, 48), ("lowcontrast", 10.0, 64), ("smooth", 20.0, 64)):
        c.append(
            dict(
                name=f"hard {fam} x{lam_x:g} {n}^3",
                kind="3d",
                n=n,
                conn=26,
                batch=1,
                family=fam,
                lam_x=lam_x,
                seed=5,
                hpf=True,
            )
        )
    return c


def cases(quick: bool, family: str = "standard"):
    if family == "hard":
        return hard_cases()
    c = [
        dict(name="astronaut 256^2 (small)", kind="2d", n=256, conn=4, batch=1, pic=0, ref=True, hpf=True),
        dict(name="blobs 32^3 (small)", kind="3d", n=32, conn=6, batch=1, seed=1, ref=True, hpf=True),
        dict(name="astronaut 512^2", kind="2d", n=512, conn=4, batch=1, pic=0, hpf=True),
        dict(name="astronaut 512^2", kind="2d", n=512, conn=8, batch=1, pic=0, hpf=True),
        dict(name="coffee 1024^2", kind="2d", n=1024, conn=4, batch=1, pic=1, hpf=True),
        dict(name="coffee 1024^2", kind="2d", n=1024, conn=8, batch=1, pic=1, hpf=True),
        dict(name="chelsea 2048^2", kind="2d", n=2048, conn=4, batch=1, pic=2, hpf=True),
        dict(name="chelsea 2048^2", kind="2d", n=2048, conn=8, batch=1, pic=2, hpf=True),
        dict(name="blobs 64^3", kind="3d", n=64, conn=6, batch=1, seed=2, hpf=True),
        dict(name="blobs 128^3", kind="3d", n=128, conn=6, batch=1, seed=3, hpf=True),
        dict(name="blobs 256^3", kind="3d", n=256, conn=6, batch=1, seed=4, hpf=True),
        dict(name="batch 32 x 512^2", kind="2d", n=512, conn=4, batch=32, pic=0, hpf=True),
    ]
    if quick:
        c = [x for x in c if x["n"] <= 1024 and x["batch"] == 1 and not (x["kind"] == "3d" and x["n"] > 64)]
    return c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small cases only")
    ap.add_argument("--no-pymaxflow", action="store_true")
    ap.add_argument("--pymaxflow-limit", type=float, default=120.0, help="skip PyMaxflow above this (seconds)")
    ap.add_argument(
        "--pymaxflow-budget",
        type=float,
        default=300.0,
        help="seconds of timed PyMaxflow runs per case; fewer than --repeats runs above it (stated in the table)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="PyMaxflow worker processes (1: one case at a time, the steadiest timing)",
    )
    ap.add_argument(
        "--pymaxflow-beside",
        action="store_true",
        help="run PyMaxflow while the GPU part runs (faster, but the two disturb each other's "
        "timings: host syncs wait on a loaded CPU); default: after it",
    )
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--opts", default="{}", help="JSON dict of solver options")
    ap.add_argument(
        "--family",
        choices=("standard", "hard"),
        default="standard",
        help="standard: the cases above; hard: strong smoothness, thin structures, low contrast "
        "(PyMaxflow and thinhpf's pseudoflow on the CPU)",
    )
    ap.add_argument(
        "--energy",
        choices=("builtin", "torchcut"),
        default="builtin",
        help="builtin: the benchmark's own Boykov-Jolly energy (the committed table); "
        "torchcut: torchcut.segmentation_graph",
    )
    args = ap.parse_args(argv)

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    opts = json.loads(args.opts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = cases(args.quick, args.family)
    for c in todo:
        c["energy"] = args.energy
    if args.only:
        keys = [k.strip() for k in args.only.split(",")]
        todo = [c for c in todo if any(k in f"{c['name']} {c['conn']}c" for k in keys)]

    # PyMaxflow in worker processes (largest cases first), after the GPU part (or beside it).
    ctx = mp.get_context("spawn")
    jobs: dict[int, tuple] = {}
    pending: list[int] = []
    if not args.no_pymaxflow:
        try:
            import maxflow  # noqa: F401

            pending = sorted(
                range(len(todo)),
                key=lambda i: -(todo[i]["n"] ** (3 if todo[i]["kind"] == "3d" else 2)) * todo[i]["batch"],
            )
        except ImportError:
            print("PyMaxflow not installed: its columns stay empty")

    def pump():
        while pending and sum(1 for p, _ in jobs.values() if p.is_alive()) < args.workers:
            i = pending.pop(0)
            q = ctx.Queue()
            p = ctx.Process(
                target=_pymaxflow_worker,
                args=(todo[i], args.repeats, args.pymaxflow_limit, args.pymaxflow_budget, q),
                daemon=True,
            )
            p.start()
            jobs[i] = (p, q)

    rows = []
    for spec in todo:
        if args.pymaxflow_beside:
            pump()
        t0 = time.perf_counter()
        offs, items = make_case(spec, spec.get("energy", "builtin"))
        n_nodes = int(np.prod(items[0][0].shape))
        tc = run_torchcut(offs, items, args.repeats, device, **opts)
        assert tc["result"].verify()
        row = dict(
            name=spec["name"],
            conn=spec["conn"],
            kind=spec["kind"],
            batch=spec["batch"],
            nodes=n_nodes * spec["batch"],
            tc_solve=tc["solve"],
            tc_total=tc["total"],
            tc_flows=tc["flows"],
            stats=tc["stats"],
        )
        if spec.get("ref"):
            ref = run_reference(offs, items, args.repeats, device)
            row["ref_solve"] = ref["solve"]
            row["ref_flows"] = ref["flows"]
            assert ref["flows"] == tc["flows"], (spec, ref["flows"], tc["flows"])
        rows.append(row)
        st = tc["stats"]
        print(
            f"{spec['name']:<26} {spec['conn']:>2}c  torchcut solve {tc['solve'] * 1e3:9.2f} ms  to-mask {tc['total'] * 1e3:9.2f} ms"
            f"  relabels {st.get('global_relabels')} bfs {st.get('bfs_launches')} push {st.get('push_launches')}"
            f"  flow {tc['flows'][:2]}{'...' if len(tc['flows']) > 2 else ''}"
            + (f"  reference {row['ref_solve']:.2f} s" if 'ref_solve' in row else "")
            + f"  ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        del tc
        if device == "cuda":
            torch.cuda.empty_cache()

    # collect PyMaxflow
    results: dict[int, dict] = {}
    while pending or len(results) < len(jobs):
        pump()
        for i, (p, q) in jobs.items():
            if i in results:
                continue
            if not q.empty():
                results[i] = q.get()
                p.join(timeout=5)
            elif not p.is_alive() and q.empty():
                results[i] = {"skipped": "worker failed"}
        time.sleep(0.2)
    for i, row in enumerate(rows):
        if i in results:
            row["pmf"] = results[i]
            print(f"PyMaxflow {row['name']:<26} {row['conn']:>2}c  {results[i]}"[:300], flush=True)
    for row in rows:
        res = row.get("pmf", {})
        if "flows" in res:
            assert res["flows"] == row["tc_flows"], (row["name"], res["flows"], row["tc_flows"])
        if res.get("hpf_flows") is not None:
            assert res["hpf_flows"] == row["tc_flows"], (row["name"], res["hpf_flows"], row["tc_flows"])

    write_outputs(rows, out, device, args)
    return rows


def _ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}" if v * 1e3 >= 10 else f"{v * 1e3:.2f}"


def write_outputs(rows, out: Path, device, args):
    import torch

    dev_name = torch.cuda.get_device_name() if device == "cuda" else platform.processor()
    lines = [
        f"# Grid max-flow benchmark ({dev_name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Median of {args.repeats} runs after a warm-up; CUDA timed with events. *solve*: `torchcut.maxflow` on a built graph "
        "(PyMaxflow: `maxflow()`); *to mask*: graph from the integer capacity arrays + solve + mask. PyMaxflow ran in "
        + (
            f"{args.workers} worker process(es) on the CPU cores while the GPU part ran. "
            if args.pymaxflow_beside
            else f"{args.workers} worker process(es) after the GPU part (nothing else ran beside either). "
        )
        + "Reference = torch-ops push-relabel on the GPU, small cases only "
        f"(it takes minutes beyond). Flow values of all solvers asserted equal. Energy: {args.energy}.",
        "",
        "| case | conn | nodes | torchcut solve ms | torchcut to mask ms | PyMaxflow solve ms | PyMaxflow build+solve ms "
        "| pseudoflow build+solve ms | speed-up (fastest CPU build+solve / torchcut solve) | reference solve ms "
        "| flow torchcut | flow PyMaxflow | relabels / BFS / push launches |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pmf = r.get("pmf", {})
        if "skipped" in pmf:
            p_solve = p_total = f"skipped ({pmf['skipped']})"
            speed = "-"
        elif "total" in pmf:
            p_solve, p_total = _ms(pmf["solve"]), _ms(pmf["total"])
            if pmf.get("runs", args.repeats) < args.repeats:
                p_total += f" (median of {pmf['runs']})"
            best = min(v for v in (pmf["total"], pmf.get("hpf_total")) if v is not None)
            speed = f"{best / r['tc_solve']:.0f}x"
        else:
            p_solve = p_total = speed = "not run"
        f_tc = r["tc_flows"] if r["batch"] > 1 else r["tc_flows"][0]
        f_p = pmf.get("flows", "-")
        if isinstance(f_p, list) and r["batch"] == 1:
            f_p = f_p[0]
        if r["batch"] > 1:
            f_tc = f"sum {sum(r['tc_flows'])}"
            f_p = f"sum {sum(f_p)} (32 equal)" if isinstance(f_p, list) else f_p
        st = r["stats"]
        lines.append(
            f"| {r['name']} | {r['conn']} | {r['nodes']:,} | {_ms(r['tc_solve'])} | {_ms(r['tc_total'])} | {p_solve} | {p_total} "
            f"| {_ms(pmf.get('hpf_total')) if 'hpf_total' in pmf else 'not run'} | {speed} | {_ms(r.get('ref_solve'))} | {f_tc} | {f_p} | {st.get('global_relabels')} / {st.get('bfs_launches')} / {st.get('push_launches')} |"  # noqa: E501
        )
    (out / "grid.md").write_text("\n".join(lines) + "\n")
    (out / "grid.json").write_text(json.dumps([{k: v for k, v in r.items()} for r in rows], indent=1, default=str))
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 5))
        groups = {}
        for r in rows:
            key = f"{r['kind']}-{r['conn']}c" + (" batch" if r["batch"] > 1 else "")
            groups.setdefault(key, []).append(r)
        for key, rs in groups.items():
            rs = sorted(rs, key=lambda r: r["nodes"])
            x = [r["nodes"] for r in rs]
            ax.plot(x, [r["tc_solve"] for r in rs], "o-", label=f"torchcut solve {key}")
            px = [(r["nodes"], r["pmf"]["total"]) for r in rs if "total" in r.get("pmf", {})]
            if px:
                ax.plot(*zip(*px), "s--", label=f"PyMaxflow build+solve {key}")
            rx = [(r["nodes"], r["ref_solve"]) for r in rs if "ref_solve" in r]
            if rx:
                ax.plot(*zip(*rx), "^:", label=f"reference {key}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel("seconds")
        ax.set_title(f"grid max-flow, {dev_name}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "grid.png", dpi=120)
    except ImportError:
        print("matplotlib missing: no plot")


if __name__ == "__main__":
    main()
