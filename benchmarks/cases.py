"""The benchmark cases: their specs, and deterministic inputs made from them.

A case is a JSON-able dict (``id``, ``family``, ``kind``, ``label``, parameters). :func:`suite_cases`
lists the cases of a suite; :func:`build` makes a case's inputs (numpy arrays, plus an optional
``path`` to a file), the same bytes on every call and every machine with the same library versions.
The inputs are what a worker (:mod:`benchmarks.worker`) hands to torchcut and what the peers
(:mod:`benchmarks.peers`) get, so every solver of a case solves the same instance.

Kinds (what a worker runs):

* ``grid``: a ``GridGraph`` from int32 arrays (``source``, ``sink``, ``edges`` ``[K, *shape]``,
  symmetric n-links; a batch stacked as ``[B, *shape]`` / ``[K, B, *shape]``), ``maxflow``, the mask;
* ``moves``: the BVZ expansion moves of a stereo pair, one ``FlowGraph.from_edges`` each, solved in turn;
* ``dimacs``: ``read_dimacs`` of a file of ``$TORCHCUT_DATA/maxflow``, then ``maxflow``;
* ``segment``, ``grabcut``, ``expansion``, ``refine``: the public function on an image (and seeds,
  a box, a unary, class probabilities).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import grid as G

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("cpu", "gpu")


def data_dir() -> Path:
    """The test data folder (``$TORCHCUT_DATA``; the benchmarks that need it are skipped without it)."""
    return Path(os.environ.get("TORCHCUT_DATA", ROOT / "data"))


# ------------------------------------------------------------------------------------------ images
def vessel_tree(n: int, seed: int = 0):
    """A fundus-like RGB image ``[n, n, 3]`` (float in [0, 1]) with a tree of thin dark vessels, and seeds.

    Deterministic in ``(n, seed)``. Four trunks leave an optic disc and branch (each branch narrower
    than its parent, down to about one pixel at 1024^2; widths scale with ``n``) over a reddish
    background with uneven lighting and noise, inside a circular field of view. Seeds follow
    scikit-image's convention: 1 (object = vessel) on the trunks next to the disc only, so the cut
    must follow the long thin branches; 2 (background) outside the field of view and on a sparse
    grid of points away from vessels.

    Examples
    --------
    >>> img, seeds = vessel_tree(128)
    >>> img.shape, sorted(np.unique(seeds).tolist())
    ((128, 128, 3), [0, 1, 2])
    """
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    s = n / 1024.0
    disc = np.array([0.5, 0.62]) * n  # (y, x)
    pts, radii, trunk = [], [], []

    def grow(p, ang, width, length, depth, is_trunk):
        step = 0.5
        steps = int(length / step)
        curv = rng.normal(0, 0.0008 / max(s, 1e-3))
        t = np.arange(1, steps + 1)
        angs = ang + np.cumsum(curv + rng.normal(0, 0.012, steps))
        path = p + step * np.cumsum(np.stack([np.sin(angs), np.cos(angs)], 1), 0)
        pts.append(path)
        radii.append(np.full(steps, width / 2))
        trunk.append(np.full(steps, is_trunk) & (t * step < 0.12 * n))
        if depth == 0 or width < 1.2 * s:
            return
        for frac in sorted(rng.uniform(0.3, 0.9, 2)):
            k = int(frac * (steps - 1))
            side = rng.choice([-1.0, 1.0])
            grow(
                path[k],
                angs[k] + side * rng.uniform(0.4, 0.9),
                width * rng.uniform(0.6, 0.75),
                length * rng.uniform(0.45, 0.65),
                depth - 1,
                False,
            )
        grow(path[-1], angs[-1] + rng.normal(0, 0.2), width * 0.8, length * 0.6, depth - 1, False)

    for k, base in enumerate((0.35, 2.79, 3.49, 5.93)):  # up/left/down/right-ish trunks
        grow(disc, base * np.pi / 2 + rng.normal(0, 0.1), 11.0 * s + 1.0, 0.42 * n, 5, True)
    P = np.concatenate(pts)
    R = np.concatenate(radii)
    T = np.concatenate(trunk)
    inside = (P[:, 0] >= 0) & (P[:, 0] < n) & (P[:, 1] >= 0) & (P[:, 1] < n)
    P, R, T = P[inside], R[inside], T[inside]
    iy, ix = np.clip(np.rint(P).astype(np.int64), 0, n - 1).T
    rad = np.zeros((n, n), np.float32)
    np.maximum.at(rad, (iy, ix), R.astype(np.float32))
    centre = rad > 0
    dist, (ny, nx) = ndimage.distance_transform_edt(~centre, return_indices=True)
    r = rad[ny, nx]
    depth = np.clip(1.0 - (dist / np.maximum(r, 0.5)) ** 2, 0, 1).astype(np.float32)  # vessel profile
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
    fov = (yy - 0.5) ** 2 + (xx - 0.5) ** 2 < 0.47**2
    light = 0.75 + 0.25 * np.exp(-((yy - disc[0] / n) ** 2 + (xx - disc[1] / n) ** 2) / 0.08)
    optic = np.exp(-((yy - disc[0] / n) ** 2 + (xx - disc[1] / n) ** 2) / (2 * 0.035**2))
    base = np.stack([0.78 * light, 0.38 * light, 0.18 * light], -1) + 0.2 * optic[..., None]
    vessel = np.array([0.45, 0.12, 0.08], np.float32)
    img = base * (1 - 0.8 * depth[..., None]) + vessel * 0.8 * depth[..., None]
    img = img + rng.normal(0, 0.035, img.shape).astype(np.float32)
    img = np.where(fov[..., None], np.clip(img, 0, 1), 0.02).astype(np.float32)
    seeds = np.zeros((n, n), np.uint8)
    near_trunk = np.zeros((n, n), bool)
    near_trunk[iy[T], ix[T]] = True
    seeds[near_trunk & (dist == 0)] = 1
    bg = np.zeros((n, n), bool)
    g = max(4, n // 32)
    bg[g // 2 :: g, g // 2 :: g] = True
    bg = ndimage.binary_dilation(bg, iterations=max(1, n // 512))
    seeds[(bg & (dist > 6 + 3 * r)) | ~fov] = 2
    return img, seeds


def blobs(n: int, seed: int = 0) -> np.ndarray:
    """A synthetic volume ``[n, n, n]`` (float32 in [0, 1]): six smooth blobs under noise, smoothed.

    Separable, float32: a 512^3 volume takes seconds, not minutes.

    Examples
    --------
    >>> blobs(16).shape
    (16, 16, 16)
    """
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    ax = np.linspace(0, 1, n, dtype=np.float32)
    v = np.zeros((n, n, n), np.float32)
    for _ in range(6):
        c = rng.uniform(0.25, 0.75, 3)
        r = rng.uniform(0.08, 0.2)
        g = [np.exp(-((ax - ci) ** 2) / (2 * r * r)).astype(np.float32) for ci in c]
        v += g[0][:, None, None] * g[1][None, :, None] * g[2][None, None, :]
    v = (v > 0.5).astype(np.float32) * 0.6 + 0.2
    v += rng.standard_normal((n, n, n), dtype=np.float32) * 0.25
    v = ndimage.gaussian_filter(v, 1.0)
    return np.clip(v, 0, 1)


# ------------------------------------------------------------------------------------------- specs
def _grid(family, label, n, conn, *, batch=1, ndim=2, exact=True, **params):
    nodes = n**ndim * batch
    cid = f"{family}/{label.replace('^2', '').replace('^3', '-cube').replace(' ', '-')}-{conn}c"
    return dict(
        id=cid,
        family=family,
        kind="grid",
        label=label,
        conn=conn,
        nodes=nodes,
        batch=batch,
        exact=exact,
        peers=["pymaxflow", "thinhpf"],
        params=dict(n=n, ndim=ndim, **params),
    )


def _case(cid, kind, label, nodes, exact, peers, **params):
    """A case that is not a grid (its family is the first part of ``cid``)."""
    family = cid.split("/")[0]
    return dict(id=cid, family=family, kind=kind, label=label, nodes=nodes, exact=exact, peers=peers, params=params)


def suite_cases(suite: str, quick: bool = False):
    """The cases of ``suite`` ("cpu" or "gpu"); ``quick``: small sizes (seconds in all, for tests).

    Examples
    --------
    >>> [c["id"] for c in suite_cases("cpu", quick=True)][:2]
    ['2d/photo-astronaut-128-4c', '2d/photo-astronaut-128-8c']
    """
    if suite not in SUITES:
        raise ValueError(f"suite: expected one of {SUITES}, got {suite!r}")
    gpu = suite == "gpu"
    c = []
    # 2D photographs (scikit-image pictures, resized: the large ones upscaled) and vessel trees
    if quick:
        photo_sizes, vessel_sizes = [128], [192]
    elif gpu:
        photo_sizes, vessel_sizes = [512, 1024, 2048, 2832], [1024, 2048, 2832]
    else:
        photo_sizes, vessel_sizes = [512, 1024, 2048], [1024, 2048]
    pics = ["astronaut", "coffee", "chelsea", "retina"]
    for i, n in enumerate(photo_sizes):
        for conn in (4, 8):
            if not gpu and n >= 2048 and conn == 8:
                continue
            pic = pics[i % len(pics)]
            c.append(_grid("2d", f"photo {pic} {n}", n, conn, source="photo", pic=G.PICTURES.index(pic)))
    for n in vessel_sizes:
        for conn in (4, 8):
            if not gpu and n >= 2048 and conn == 8:
                continue
            c.append(_grid("2d", f"vessels {n}", n, conn, source="vessels", seed=n))
    # batches
    if quick:
        c.append(_grid("batch", "batch 2x64", 64, 4, batch=2, source="photo", pic=0))
    else:
        c.append(
            _grid(
                "batch", "batch 32x512" if gpu else "batch 8x512", 512, 4, batch=32 if gpu else 8, source="photo", pic=0
            )
        )
        if gpu:
            c.append(_grid("batch", "batch 8x1024", 1024, 8, batch=8, source="photo", pic=1))
    # 3D blobs
    if quick:
        vols = [(24, 6), (16, 26)]
    elif gpu:
        vols = [(64, 6), (128, 6), (256, 6), (512, 6), (64, 26), (128, 26), (256, 26)]
    else:
        vols = [(64, 6), (128, 6), (48, 26), (64, 26)]
    for n, conn in vols:
        c.append(_grid("3d", f"blobs {n}^3", n, conn, ndim=3, source="blobs", seed=n))
    # the hard energies of grid.py (strong smoothness, thin structures, low contrast)
    for h in G.hard_cases():
        if quick or (not gpu and (h["n"] > 512 or (h["kind"] == "3d" and h["n"] > 48))):
            continue
        ndim = 2 if h["kind"] == "2d" else 3
        extra = {k: h[k] for k in ("family", "lam_x", "pic", "seed") if k in h}
        hard_fam = extra.pop("family")
        c.append(
            _grid(
                "hard",
                h["name"].replace("hard ", ""),
                h["n"],
                h["conn"],
                ndim=ndim,
                source="hard",
                hard=hard_fam,
                **extra,
            )
        )
    if gpu and not quick:
        # the hard 1 MP energies again on two more instances each (other pictures and seeds): their solve
        # time varies by instance more than any other family's, and the guard must not pass on one draw
        for fam, lam_x, key, values in (
            ("smooth", 100.0, "pic", (1, 2)),
            ("thin", 10.0, "seed", (2, 3)),
            ("lowcontrast", 10.0, "seed", (3, 4)),
        ):
            for v in values:
                c.append(
                    _grid(
                        "hard",
                        f"{fam} x{lam_x:g} 1024^2 {key} {v}",
                        1024,
                        4,
                        source="hard",
                        hard=fam,
                        lam_x=lam_x,
                        **{key: v},
                    )
                )
    if quick:
        c.append(_grid("hard", "thin x10 96", 96, 8, source="hard", hard="thin", lam_x=10.0, seed=1))
    # stereo: BVZ expansion moves (exact flows), and whole expansions (energies)
    tsu = data_dir() / "middlebury" / "tsukuba"
    if (tsu / "scene1.row3.col3.ppm").is_file():
        ups = [1] if not gpu or quick else [1, 4]
        for k in ups:
            lab = "tsukuba" + (f" x{k}" if k > 1 else "")
            c.append(
                _case(
                    f"stereo/bvz-moves-{lab.replace(' ', '')}",
                    "moves",
                    f"BVZ moves {lab}",
                    384 * 288 * k * k,
                    True,
                    ["pymaxflow", "thinhpf"],
                    upsample=k,
                    moves=4 if quick else 16,
                )
            )
        crop = (96, 128) if quick else None
        for plain, tag, what, peer in ((True, "-plain", "plain", "aexpansion"), (False, "", "contrast", "gco")):
            c.append(
                _case(
                    f"stereo/expansion-tsukuba{tag}",
                    "expansion",
                    f"expansion tsukuba, {what} Potts" + (" (crop)" if quick else ""),
                    (crop[0] * crop[1]) if crop else 384 * 288,
                    False,
                    [peer],
                    plain=plain,
                    crop=crop,
                )
            )
    # pipelines: refine, GrabCut, segment
    rb, rs = (1, 64) if quick else ((4, 1024) if gpu else (1, 512))
    c.append(
        _case(
            f"pipeline/refine-{rb}x{rs}",
            "refine",
            f"refine {rb}x{rs}^2 C=8",
            rb * rs * rs,
            False,
            ["gco"],
            batch=rb,
            size=rs,
            classes=8,
        )
    )
    gc_dir = data_dir() / "grabcut" / "data_GT"
    if gc_dir.is_dir():
        count = 1 if quick else 4
        for proto in ("trimap-10",) if quick else ("trimap-10", "box"):
            c.append(
                _case(
                    f"pipeline/grabcut-{proto}",
                    "grabcut",
                    f"GrabCut {proto}, {count} image(s)" + (" 1/4 size" if quick else ""),
                    None,
                    False,
                    ["cv2"],
                    protocol=proto,
                    images=count,
                    iterations=2 if quick else 5,
                    shrink=4 if quick else 1,
                )
            )
    sn = 128 if quick else 1024
    c.append(
        _case(
            f"pipeline/segment-{sn}",
            "segment",
            f"segment() astronaut {sn}^2",
            sn * sn,
            False,
            [],
            n=sn,
            connectivity=8,
        )
    )
    # DIMACS instances
    mf = data_dir() / "maxflow"
    if mf.is_dir():
        for p in sorted(x for x in mf.rglob("*") if x.name.endswith((".max", ".max.gz", ".max.bz2"))):
            c.append(
                _case(
                    f"dimacs/{p.name}",
                    "dimacs",
                    p.name,
                    None,
                    True,
                    ["pymaxflow"],
                    path=str(p.relative_to(mf)),
                )
            )
    return c


# ------------------------------------------------------------------------------------------ inputs
def build(spec):
    """The inputs of a case: a dict of numpy arrays (and strings); see the module docstring.

    Examples
    --------
    >>> spec = suite_cases("cpu", quick=True)[0]
    >>> x = build(spec)
    >>> x["source"].shape, x["edges"].shape, x["offsets"].tolist()
    ((128, 128), (2, 128, 128), [[0, 1], [1, 0]])
    """
    kind, p = spec["kind"], spec["params"]
    if kind == "grid":
        return _grid_inputs(spec)
    if kind == "moves":
        return _moves_inputs(p)
    if kind == "expansion":
        return _expansion_inputs(p)
    if kind == "refine":
        return _refine_inputs(p)
    if kind == "grabcut":
        return _grabcut_inputs(p)
    if kind == "segment":
        img = G.picture("astronaut", p["n"])
        return {"image": img.astype(np.float32), "seeds": G.seeds_for(img.shape[:2]).astype(np.int64)}
    if kind == "dimacs":
        return {"path": str(data_dir() / "maxflow" / p["path"])}
    raise ValueError(f"spec['kind']: unknown kind {kind!r}")


def _grid_inputs(spec):
    from torchcut import grid_offsets

    p, conn, B = spec["params"], spec["conn"], spec["batch"]
    n, ndim = p["n"], p["ndim"]
    offs = grid_offsets(ndim, conn)
    items = []
    if p["source"] == "photo":
        for b in range(B):
            img = G.picture(G.PICTURES[(p["pic"] + b) % len(G.PICTURES)], n, flip=b // len(G.PICTURES))
            items.append(G.energy(img, G.seeds_for(img.shape[:2]), offs, 2))
    elif p["source"] == "vessels":
        img, seeds = vessel_tree(n, p["seed"])
        items.append(G.energy(img, seeds, offs, 2))
    elif p["source"] == "blobs":
        vol = blobs(n, p["seed"])
        items.append(G.energy(vol, G.seeds_for(vol.shape), offs, 3))
    elif p["source"] == "hard":
        h = dict(
            kind="2d" if ndim == 2 else "3d", n=n, family=p["hard"], **{k: p[k] for k in ("pic", "seed") if k in p}
        )
        img, seeds = G.hard_image(h)
        items.append(G.energy(img, seeds, offs, ndim, lam=G.LAM * p.get("lam_x", 1.0)))
    else:
        raise ValueError(f"unknown grid source {p['source']!r}")
    out = {"offsets": np.array(offs, np.int64)}
    if B == 1:
        out["source"], out["sink"], out["edges"] = items[0]
    else:
        out["source"] = np.stack([s for s, _, _ in items])
        out["sink"] = np.stack([t for _, t, _ in items])
        out["edges"] = np.stack([e for _, _, e in items], axis=1)
    return out


def grid_items(x, batch: int = 1):
    """``(offsets, [(source, sink, edges), ...])`` of grid inputs, one item per batch element."""
    offs = [tuple(int(v) for v in o) for o in x["offsets"]]
    if batch == 1:
        return offs, [(x["source"], x["sink"], x["edges"])]
    return offs, [(x["source"][b], x["sink"][b], x["edges"][:, b]) for b in range(x["source"].shape[0])]


def _moves_inputs(p):
    from torchcut.stereo import expansion_moves, load_pair

    tsu = data_dir() / "middlebury" / "tsukuba"
    left, right = load_pair(tsu / "scene1.row3.col3.ppm", tsu / "scene1.row3.col4.ppm", p["upsample"])
    out = {}
    for i, m in enumerate(expansion_moves(left, right, 16, step=p["upsample"])):
        if i >= p["moves"]:
            break
        for k in ("u", "v", "cap", "rev_cap", "source", "sink"):
            out[f"m{i}_{k}"] = np.ascontiguousarray(getattr(m, k))
        out[f"m{i}_n"] = np.array(m.num_nodes)
    return out


def moves_of(x):
    """The moves of ``moves`` inputs as objects with ``u, v, cap, rev_cap, source, sink, num_nodes``."""
    from types import SimpleNamespace

    count = sum(1 for k in x if k.endswith("_n"))
    return [
        SimpleNamespace(
            num_nodes=int(x[f"m{i}_n"]), **{k: x[f"m{i}_{k}"] for k in ("u", "v", "cap", "rev_cap", "source", "sink")}
        )
        for i in range(count)
    ]


def _expansion_inputs(p):
    import torch

    from torchcut import datasets
    from torchcut.stereo import DISPARITY_DEFAULTS, bt_costs, contrast_weights

    left, right, _ = datasets.tsukuba_pair(download=False)
    d = DISPARITY_DEFAULTS
    U = bt_costs(left, right, 16).clamp(max=float(d["trunc"])).round().to(torch.int64)
    W = contrast_weights(left, d["lam"], d["contrast_threshold"], d["contrast_ratio"]).to(torch.int64)
    if p["plain"]:
        V = 30 * (1 - torch.eye(16, dtype=torch.int64))
        W = torch.where(W > 0, 1, 0)
    else:
        V = 1 - torch.eye(16, dtype=torch.int64)
    if p.get("crop"):
        h, w = p["crop"]
        y0, x0 = (U.shape[1] - h) // 2, (U.shape[2] - w) // 2
        U = U[:, y0 : y0 + h, x0 : x0 + w].contiguous()
        W = W[:, y0 : y0 + h, x0 : x0 + w].clone()
        W[0, :, -1] = 0  # arcs that leave the crop carry nothing
        W[1, -1, :] = 0
    return {"unary": U.numpy(), "pairwise": V.numpy(), "weights": W.numpy()}


def _refine_inputs(p):
    from . import multilabel as ML

    truth, image, probs = ML.refine_energy(p["batch"], p["size"], p["classes"])
    return {
        "image": image.numpy().astype(np.float32),
        "probs": probs.numpy().astype(np.float32),
        "truth": truth.numpy(),
        "lam": np.array(2.0),
        "sigma": np.array(20.0),
    }


def _grabcut_inputs(p):
    from PIL import Image
    from scipy import ndimage

    root = data_dir() / "grabcut"
    names = sorted(x.name for x in (root / "data_GT").iterdir())[: p["images"]]
    out = {}
    for i, name in enumerate(names):
        img = np.asarray(Image.open(root / "data_GT" / name).convert("RGB"))
        gt = np.asarray(Image.open(root / "boundary_GT" / (Path(name).stem + ".bmp")).convert("L"))
        k = p["shrink"]
        img, gt = img[::k, ::k], gt[::k, ::k]
        fg = gt == 255
        out[f"i{i}_image"] = np.ascontiguousarray(img)
        out[f"i{i}_truth"] = np.ascontiguousarray(gt)
        if p["protocol"] == "box":
            ys, xs = np.nonzero(fg)
            out[f"i{i}_box"] = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        else:
            r = max(1, int(p["protocol"].split("-")[1]) // k)
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            disc = yy * yy + xx * xx <= r * r
            seeds = np.zeros(gt.shape, np.uint8)
            seeds[ndimage.binary_erosion(fg, disc)] = 1
            seeds[~ndimage.binary_dilation(fg, disc)] = 2
            out[f"i{i}_seeds"] = seeds
    return out


def grabcut_items(x):
    """``[(image [H, W, 3] uint8, seeds or None, box or None, truth), ...]`` of grabcut inputs."""
    count = sum(1 for k in x if k.endswith("_image"))
    return [
        (
            x[f"i{i}_image"],
            x.get(f"i{i}_seeds"),
            None if f"i{i}_box" not in x else tuple(int(v) for v in x[f"i{i}_box"]),
            x[f"i{i}_truth"],
        )
        for i in range(count)
    ]


def iou(mask, truth) -> float:
    """IoU of a boolean object mask against a GrabCut truth (255 object, 0 background, 128 unknown)."""
    known = truth != 128
    t = truth == 255
    union = ((mask | t) & known).sum()
    return float((mask & t & known).sum() / union) if union else 1.0
