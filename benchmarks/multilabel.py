"""Benchmark of multi-label energies: torchcut's expansion against PyMaxflow's aexpansion_grid and GCO.

Same run, same machine, same integer (or float) energy for every solver:

* ``tsukuba``: the energy of :func:`torchcut.stereo.disparity` (16 labels, colour Birchfield-Tomasi
  truncated at 40, contrast-sensitive Potts with per-edge weights 15 / 45). Peer: GCO
  (``gco-wrapper``, alpha-expansion with the same per-edge weights, integer energy);
  ``aexpansion_grid`` has no per-edge weights, so it appears only in the next case.
* ``tsukuba-plain``: the same unary with a plain Potts term of weight 30 on every edge, the energy
  ``aexpansion_grid`` can take. Peers: aexpansion_grid and GCO.
* ``refine``: 8-class :func:`torchcut.refine` energies (``-log`` of noisy softmax maps, contrast-
  sensitive Potts, float, quantised by torchcut) on a batch of 4 images of 1024^2 (``--refine-size``).
  Peer: GCO on item 0 (float energy), whose energy is printed beside torchcut's item 0.

Times are of the minimisation alone (the energy is built once, outside the timing): medians of
``--repeat`` runs after a warm-up, CUDA timed with synchronisation. Energies are evaluated by
:func:`torchcut.labeling_energy` on every solver's labels; bad-pixel rates follow the usual
protocol (:func:`torchcut.stereo.bad_pixel_rates`).

    python benchmarks/multilabel.py --out benchmarks/results [--devices cpu,cuda] [--repeat 3]

Writes OUT/multilabel.md and OUT/multilabel.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torchcut  # noqa: E402
from benchmarks.timing import median_time  # noqa: E402
from torchcut import datasets  # noqa: E402
from torchcut.stereo import DISPARITY_DEFAULTS, bad_pixel_rates, bt_costs, contrast_weights  # noqa: E402

PLAIN_POTTS = 30


def timed(fn, repeat, cuda=False):
    """(median seconds, last result) of ``repeat`` runs after one warm-up."""
    seconds, _, out = median_time(fn, repeat, cuda=cuda)
    return seconds, out


def tsukuba_energy():
    left, right, truth = datasets.tsukuba_pair(download=False)
    p = DISPARITY_DEFAULTS
    U = bt_costs(left, right, 16).clamp(max=float(p["trunc"])).round().to(torch.int64)
    W = contrast_weights(left, p["lam"], p["contrast_threshold"], p["contrast_ratio"])
    return U, W, truth


def gco_labels(U, V, W):
    """GCO's alpha-expansion on a 4-connected grid energy (integer when all inputs are)."""
    import gco

    L, H, Wd = U.shape
    ids = np.arange(H * Wd).reshape(H, Wd)
    edges = np.concatenate(
        [np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], 1), np.stack([ids[:-1].ravel(), ids[1:].ravel()], 1)]
    ).astype(np.int32)
    w = np.concatenate([W[0, :, :-1].ravel(), W[1, :-1, :].ravel()])
    un = np.ascontiguousarray(U.reshape(L, -1).T)
    if np.issubdtype(un.dtype, np.integer) and np.issubdtype(w.dtype, np.integer):
        lab = gco.cut_general_graph(
            edges, w.astype(np.int32), un.astype(np.int32), V.astype(np.int32), down_weight_factor=1
        )
    else:
        lab = gco.cut_general_graph(edges, w.astype(np.float64), un.astype(np.float64), V.astype(np.float64))
    return torch.from_numpy(np.asarray(lab, dtype=np.int64).reshape(H, Wd))


def aexp_labels(U, V):
    from maxflow.fastmin import aexpansion_grid

    D = np.ascontiguousarray(np.moveaxis(U.astype(np.float64), 0, -1))
    return torch.from_numpy(np.asarray(aexpansion_grid(D, V.astype(np.float64)), dtype=np.int64))


def run_torchcut(U, V, W, device, schedule, repeat):
    Ud, Vd, Wd = U.to(device), V.to(device), W.to(device)
    cuda = device == "cuda"
    sec, (lab, info) = timed(
        lambda: torchcut.expansion(Ud, Vd, weights=Wd, schedule=schedule, return_info=True), repeat, cuda
    )
    return sec, lab.cpu(), {"solves": info["solves"], "cycles": info["cycles"], "moves": info["moves"]}


def tsukuba_rows(devices, repeat, peers):
    U, W, truth = tsukuba_energy()
    rows = []
    for case, Wt, V in (
        ("tsukuba", W, 1 - torch.eye(16, dtype=torch.int64)),
        ("tsukuba-plain", None, PLAIN_POTTS * (1 - torch.eye(16, dtype=torch.int64))),
    ):
        Wfull = Wt if Wt is not None else torch.ones_like(W)
        Wfull = torch.where(W > 0, Wfull, 0)  # arcs that leave the image carry nothing
        for device in devices:
            for schedule in ("sequential", "batched"):
                sec, lab, extra = run_torchcut(U, V, Wfull, device, schedule, repeat)
                rows.append(dict(case=case, solver=f"torchcut {device} {schedule}", seconds=sec, labels=lab, **extra))
                print(f"{case}: torchcut {device} {schedule} {sec * 1e3:.1f} ms, {extra}", flush=True)
        if "gco" in peers:
            sec, lab = timed(lambda: gco_labels(U.numpy(), V.numpy(), Wfull.numpy()), repeat)
            rows.append(dict(case=case, solver="GCO (gco-wrapper)", seconds=sec, labels=lab))
            print(f"{case}: GCO {sec * 1e3:.1f} ms", flush=True)
        if Wt is None and "pymaxflow" in peers:
            sec, lab = timed(lambda: aexp_labels(U.numpy(), V.numpy()), repeat)
            rows.append(dict(case=case, solver="PyMaxflow aexpansion_grid", seconds=sec, labels=lab))
            print(f"{case}: aexpansion_grid {sec * 1e3:.1f} ms", flush=True)
        for r in rows:
            if r["case"] == case and "energy" not in r:
                r["energy"] = float(torchcut.labeling_energy(U, V, r["labels"], weights=Wfull))
                r.update({k: v for k, v in bad_pixel_rates(r["labels"], truth).items() if k in ("nonocc", "all")})
    return rows


def refine_energy(B, size, C, seed=0):
    """Noisy 8-class softmax maps of blocky scenes, and their images."""
    g = torch.Generator().manual_seed(seed)
    cells = 16
    truth = torch.randint(0, C, (B, cells, cells), generator=g)
    truth = truth.repeat_interleave(size // cells, 1).repeat_interleave(size // cells, 2)
    colours = torch.rand(C, 3, generator=g) * 200
    image = colours[truth].permute(0, 3, 1, 2) + torch.randn(B, 3, size, size, generator=g) * 8
    logits = torch.nn.functional.one_hot(truth, C).permute(0, 3, 1, 2).float()
    probs = torch.softmax(logits + torch.randn(B, C, size, size, generator=g) * 1.2, 1)
    return truth, image, probs


def refine_rows(devices, repeat, peers, B, size, C=8, lam=2.0, sigma=20.0):
    truth, image, probs = refine_energy(B, size, C)
    rows = []
    U = -torch.log(probs.double().clamp(min=1e-6))
    offs = torchcut.grid_offsets(2, 4)
    Wt = torch.stack(
        [torch.exp(-(image - torchcut.grid.shift(image, o, 0.0)).square().sum(1) / (2 * sigma**2)) * lam for o in offs],
        1,
    ).double()
    Wt[:, 0, :, -1] = 0
    Wt[:, 1, -1, :] = 0
    V = 1 - torch.eye(C, dtype=torch.float64)
    case = f"refine {B}x{size}^2 C={C}"
    for device in devices:
        for schedule in ("sequential", "batched"):
            x, p = image.to(device), probs.to(device)
            sec, lab = timed(
                lambda: torchcut.refine(x, p, lam=lam, sigma=sigma, schedule=schedule), repeat, device == "cuda"
            )
            rows.append(dict(case=case, solver=f"torchcut {device} {schedule}", seconds=sec, labels=lab.cpu()))
            print(f"{case}: torchcut {device} {schedule} {sec * 1e3:.1f} ms", flush=True)
    if "gco" in peers:
        sec, lab = timed(lambda: gco_labels(U[0].numpy(), V.numpy(), Wt[0].numpy()), max(1, repeat // 2))
        rows.append(dict(case=case, solver="GCO item 0 (x B for the batch)", seconds=sec * B, labels=lab.unsqueeze(0)))
        print(f"{case}: GCO item 0 {sec * 1e3:.1f} ms", flush=True)
    arg = probs.argmax(1)
    for r in rows:
        lab0 = r["labels"][0]
        r["energy"] = float(torchcut.labeling_energy(U[0], V, lab0, weights=Wt[0]))
        r["accuracy"] = 100.0 * float((lab0 == truth[0]).double().mean())
    rows.append(
        dict(
            case=case,
            solver="argmax (no cut)",
            seconds=0.0,
            labels=arg,
            energy=float(torchcut.labeling_energy(U[0], V, arg[0], weights=Wt[0])),
            accuracy=100.0 * float((arg[0] == truth[0]).double().mean()),
        )
    )
    return rows


def render(meta, rows):
    out = [
        "# Multi-label energies: torchcut expansion vs aexpansion_grid and GCO\n",
        f"{meta['when']} on {meta['machine']}; torch {meta['torch']}; median of {meta['repeat']} after a warm-up. "
        "Times of the minimisation alone (energy built once). Energies of each solver's labels on the same "
        "energy (refine: item 0). Bad pixels: |d - truth| > 1, 18-px border excluded, non-occluded / all known.\n",
    ]
    for case in dict.fromkeys(r["case"] for r in rows):
        sub = [r for r in rows if r["case"] == case]
        best = min(r["energy"] for r in sub)
        stereo = "nonocc" in sub[0]
        head = "| solver | time (ms) | energy | vs best energy | solves |" + (
            " bad non-occ % | bad all % |" if stereo else " accuracy item 0 % |"
        )
        out += [f"\n## {case}\n", head, "|" + "---|" * (head.count("|") - 1)]
        for r in sub:
            extra = f" {r['nonocc']:.2f} | {r['all']:.2f} |" if stereo else f" {r['accuracy']:.2f} |"
            out.append(
                f"| {r['solver']} | {r['seconds'] * 1e3:.1f} | {r['energy']:.1f} | "
                f"{100 * (r['energy'] / best - 1):+.2f}% | {r.get('solves', '')} |" + extra
            )
        timed_rows = [r for r in sub if r["seconds"] > 0]
        slow = max(timed_rows, key=lambda r: r["seconds"])
        out.append(f"\nSlowest: {slow['solver']} ({slow['seconds'] * 1e3:.0f} ms).")
    return "\n".join(out) + "\n"


def profile(device, repeat):
    """Where the time of a Tsukuba expansion goes on ``device``: one move's build, its solve alone and
    batched with the other 15 labels, one energy evaluation (medians, synchronised)."""
    from torchcut.multilabel import _Energy

    U, W, _ = tsukuba_energy()
    E = _Energy(U.to(device), (1 - torch.eye(16, dtype=torch.int64)).to(device), W.to(device), None)
    f = E.U.argmin(1)
    cuda = device == "cuda"
    for what, fn in (
        ("build 1 move", lambda: E.move_graph(f, [5])),
        ("build 16 moves", lambda: E.move_graph(f, list(range(16)))),
        ("energy of a labelling", lambda: E.energy(f)),
    ):
        sec, _ = timed(fn, repeat, cuda)
        print(f"profile {device}: {what}: {sec * 1e3:.2f} ms", flush=True)
    for n in (1, 4, 16):
        g = E.move_graph(f, list(range(5, 5 + n)) if n < 16 else list(range(16)))
        sec, r = timed(lambda: torchcut.maxflow(g), repeat, cuda)
        print(
            f"profile {device}: solve {n} move(s) as one batched graph: {sec * 1e3:.2f} ms "
            f"(stats {dict((k, v) for k, v in r.stats.items() if not isinstance(v, torch.Tensor))})",
            flush=True,
        )


def available(peer: str) -> bool:
    """Whether a peer's package imports (a missing one is reported and left out)."""
    try:
        __import__({"gco": "gco", "pymaxflow": "maxflow"}[peer])
        return True
    except ImportError as exc:
        print(f"peer {peer} left out: {exc}")
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--devices", default="cpu" + (",cuda" if torch.cuda.is_available() else ""))
    p.add_argument("--peers", default="gco,pymaxflow")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--refine-repeat", type=int, default=None, help="repeats of the refine case (default --repeat)")
    p.add_argument("--refine-size", type=int, default=1024)
    p.add_argument("--refine-batch", type=int, default=4)
    p.add_argument("--refine-devices", default=None, help="devices for the refine case (default: --devices)")
    p.add_argument("--cases", default="tsukuba,refine")
    p.add_argument("--name", default="multilabel")
    p.add_argument("--profile", action="store_true", help="first print where a Tsukuba expansion's time goes")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: the peers are single-threaded, and on a shared machine "
        "more threads than free cores made the tensor ops 3-30x slower and erratic)",
    )
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    devices = a.devices.split(",")
    peers = [x for x in (a.peers.split(",") if a.peers else []) if available(x)]
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeat": a.repeat,
        "machine": (torch.cuda.get_device_name() + ", " if torch.cuda.is_available() else "")
        + f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads",
        "torch": torch.__version__,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.profile:
        for device in devices:
            profile(device, a.repeat)

    def write():  # after every case group, so that a run cut short still leaves its tables
        (a.out / f"{a.name}.md").write_text(render(meta, rows))
        (a.out / f"{a.name}.json").write_text(
            json.dumps({"meta": meta, "rows": [{k: v for k, v in r.items() if k != "labels"} for r in rows]}, indent=1)
        )

    if "tsukuba" in a.cases:
        try:
            rows += tsukuba_rows(devices, a.repeat, peers)
        except datasets.DatasetNotFoundError as exc:
            print(f"tsukuba cases left out: {exc}")
        write()
    if "refine" in a.cases:
        rdev = a.refine_devices.split(",") if a.refine_devices else devices
        rows += refine_rows(rdev, a.refine_repeat or a.repeat, peers, a.refine_batch, a.refine_size)
        write()
    print(render(meta, rows))


if __name__ == "__main__":
    main()
