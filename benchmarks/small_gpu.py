"""Small graphs on CUDA tensors: one launch, the tiled solver and the host route, side by side.

Grids of at most 4096 nodes per item are solved by one thread block each in a single launch (option
``small`` of the CUDA grid solver, the default); ``small=-1`` runs the tiled solver, and the host route
(``torchcut.solvers._host.solve_on_host``) copies the graph to the CPU solver and the result back. Each
row times the whole ``maxflow`` call (median of ``--repeats``, CUDA synchronised around each call) on
the same graph, and checks that the three give the same flows and the same mask. The DIMACS Tsukuba
crops (general graphs, ``TORCHCUT_DATA``) are timed through ``backend="auto"`` (the host route) and
through the lattice route to the grid kernels.

    python benchmarks/small_gpu.py [--out benchmarks/results/small-gpu.md] [--repeats 40]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torchcut  # noqa: E402
from benchmarks.timing import median_time  # noqa: E402
from torchcut import GridGraph, grid_offsets  # noqa: E402
from torchcut.solvers._host import solve_on_host  # noqa: E402


def _time(fn, repeats: int) -> float:
    """Median milliseconds of ``fn()`` after 5 warm-up calls."""
    return median_time(fn, repeats, warmup=5, cuda=True)[0] * 1e3


def _segmentation(n: int, colour: bool):
    from benchmarks.e2e import inputs

    x = inputs(dict(call="segment", picture="astronaut", colour=colour, ndim=2, n=n, conn=4))
    img = torch.as_tensor(x["image"]).cuda()
    seeds = torch.as_tensor(x["seeds"]).cuda()
    return torchcut.segmentation_graph(img, seeds)


def _random(shape, conn: int, batch=None, seed: int = 0):
    rng = np.random.default_rng(seed)
    offs = grid_offsets(len(shape), conn)
    lead = () if batch is None else (batch,)
    full = lead + tuple(shape)
    edges = torch.as_tensor(rng.integers(0, 60, size=(len(offs),) + full))
    source = torch.as_tensor(rng.integers(0, 200, size=full) * (rng.random(full) < 0.3))
    sink = torch.as_tensor(rng.integers(0, 200, size=full) * (rng.random(full) < 0.3))
    return GridGraph(source.cuda(), sink.cuda(), edges.cuda(), offs)


def graphs():
    """(label, GridGraph on CUDA) of every grid row."""
    for n in (16, 32, 48, 64):
        for colour in (False, True):
            yield f"segmentation grid {n}^2 {'RGB' if colour else 'gray'}", _segmentation(n, colour)
    yield "random 8-connected grid 24^2", _random((24, 24), 8)
    yield "random 8-connected grid 32^2", _random((32, 32), 8)
    yield "random 8-connected grid 64^2", _random((64, 64), 8)
    yield "random 6-connected volume 16^3", _random((16, 16, 16), 6)
    yield "batch of 8 random 4-connected 64^2", _random((64, 64), 4, batch=8)
    yield "batch of 64 random 4-connected 32^2", _random((32, 32), 4, batch=64)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the markdown table here (default: print only)")
    ap.add_argument("--repeats", type=int, default=40)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("small_gpu.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    lines = [
        f"Small graphs on {torch.cuda.get_device_name()}: the whole maxflow call, median of {a.repeats}, ms",
        "",
        "| graph | nodes per item | one launch | tiled (`small=-1`) | host route | relabels, sweeps (one launch) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, g in graphs():
        one = torchcut.maxflow(g)
        tiled = torchcut.maxflow(g, small=-1)
        host = solve_on_host(g, lambda h: torchcut.maxflow(h))
        for r in (tiled, host):
            if r.flow_values.tolist() != one.flow_values.tolist() or not torch.equal(r.node_mask, one.node_mask):
                raise SystemExit(f"{label}: the three solves differ")
        t_one = _time(lambda: torchcut.maxflow(g).mask, a.repeats)
        t_tiled = _time(lambda: torchcut.maxflow(g, small=-1).mask, a.repeats)
        t_host = _time(lambda: solve_on_host(g, lambda h: torchcut.maxflow(h)).mask, a.repeats)
        s = one.stats
        lines.append(
            f"| {label} | {g.num_nodes} | {t_one:.2f} | {t_tiled:.2f} | {t_host:.2f} | "
            f"{s['global_relabels']}, {s['sweeps']}{'' if s['one_launch'] else ' (tiled: too large)'} |"
        )
        print(lines[-1], flush=True)
    data = os.environ.get("TORCHCUT_DATA")
    crops = Path(data) / "maxflow" / "tsukuba_crops" if data else None
    if crops is not None and crops.is_dir():
        lines += ["", "| DIMACS crop (general graph) | nodes | auto (host route) | lattice route, grid kernels |"]
        lines.append("|---|---:|---:|---:|")
        for name in ("tsukuba_crop_16x16.max", "tsukuba_crop_32x32.max"):
            g = torchcut.read_dimacs(crops / name).to("cuda")
            if torchcut.maxflow(g).flow_value != torchcut.maxflow(g, backend="cuda", lattice=True).flow_value:
                raise SystemExit(f"{name}: the routes differ")
            t_auto = _time(lambda: torchcut.maxflow(g).flow_value, a.repeats)
            t_grid = _time(lambda: torchcut.maxflow(g, backend="cuda", lattice=True).flow_value, a.repeats)
            lines.append(f"| {name} | {g.num_nodes} | {t_auto:.2f} | {t_grid:.2f} |")
            print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
