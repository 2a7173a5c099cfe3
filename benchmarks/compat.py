"""Benchmark of ``torchcut.compat.pymaxflow``: one PyMaxflow script, run by PyMaxflow and by torchcut.

The same function (:func:`script`) builds and solves each case the PyMaxflow way (``Graph[...]``,
``add_grid_nodes``, one ``add_grid_edges`` per axis with a one-entry structure and a weight map,
``add_grid_tedges``, ``maxflow()``, ``get_grid_segments``); only the module differs:
``maxflow`` (PyMaxflow 1.3.2, Boykov-Kolmogorov in C++) or ``torchcut.compat.pymaxflow`` with
``device="cpu"`` or ``device="cuda"``. PyMaxflow is the fastest peer here: on these grid energies it
beats thinhpf's pseudoflow on every case of ``benchmarks/results/cpu.md``.

Cases: a 64x256x256 6-connected volume (float and int graphs), a 1024^2 picture
4- and 8-connected (Moore structure), and PyMaxflow's own example ``a2.png`` (needs TORCHCUT_DATA).
Energies: a synthetic volume or picture (bright blobs on a darker noisy background); terminal
capacities from the squared distance to the two class means, edge weights
``lam * exp(-(I_p - I_q)^2 / (2 sigma^2))``.

Times are to the segments (graph build + solve + ``get_grid_segments``), medians of ``--repeat``
runs after one warm-up, the solvers interleaved in each round; CUDA times synchronise before the
clock stops (``get_grid_segments`` copies the segments back to a numpy array, which synchronises).
The flows are printed side by side: int graphs must agree exactly, float graphs within the
quantization bound of ``GraphFloat`` (reported).

    python benchmarks/compat.py --out benchmarks/results [--devices cpu,cuda] [--cases vol,2d4,2d8,a2]

Writes OUT/compat[-TAG].md, .json and .png (time against nodes, log-log).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def synthetic(shape, seed=0):
    """Bright blobs (0.7) on a background (0.3) plus Gaussian noise, float32."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.linspace(0, 1, n, dtype=np.float32) for n in shape], indexing="ij")
    img = np.full(shape, 0.3, dtype=np.float32)
    for _ in range(6):
        c = rng.random(len(shape))
        r = 0.08 + 0.15 * rng.random()
        d2 = sum((g - ci) ** 2 for g, ci in zip(grids, c))
        img[d2 < r * r] = 0.7
    img += rng.normal(0, 0.15, shape).astype(np.float32)
    return img


def energy(img, lam=0.5, sigma=0.1, integer=False):
    """(source caps, sink caps, [weight map per axis]) of a Boykov-Jolly style energy."""
    src = (img - 0.3) ** 2  # paid when the node goes to the sink side (background)
    snk = (img - 0.7) ** 2
    weights = []
    for a in range(img.ndim):
        d = np.diff(img, axis=a, append=np.take(img, [-1], axis=a))
        weights.append(lam * np.exp(-(d * d) / (2 * sigma * sigma)))
    if integer:
        q = lambda x: np.round(x * 1000).astype(np.int64)  # noqa: E731
        return q(src), q(snk), [q(w) for w in weights]
    return src.astype(np.float64), snk.astype(np.float64), [w.astype(np.float64) for w in weights]


def script(maxflow, src, snk, weights, integer, moore=False, **graph_kwargs):
    """A PyMaxflow user's script, unchanged but for the module. Returns (flow, sink-side segments, maxflow() seconds)."""
    g = maxflow.Graph[int](**graph_kwargs) if integer else maxflow.Graph[float](**graph_kwargs)
    ids = g.add_grid_nodes(src.shape)
    nd = src.ndim
    for a in range(nd):
        st = np.zeros((3,) * nd)
        st[tuple(2 if b == a else 1 for b in range(nd))] = 1
        g.add_grid_edges(ids, weights=weights[a], structure=st, symmetric=True)
    if moore:  # 2D diagonals (offsets (1, -1) and (1, 1)): one structure, a scalar weight
        diag = np.zeros((3, 3))
        diag[2, 0] = diag[2, 2] = 1
        w = np.mean(weights[0]) / np.sqrt(2)
        g.add_grid_edges(ids, weights=int(w) if integer else float(w), structure=diag, symmetric=True)
    g.add_grid_tedges(ids, src, snk)
    t0 = time.perf_counter()
    flow = g.maxflow()  # returns a Python number: on the GPU it has synchronised
    solve = time.perf_counter() - t0
    return flow, g.get_grid_segments(ids), solve


def cases(names, data_dir):
    out = []
    if "vol" in names:
        img = synthetic((64, 256, 256))
        out.append(("3D 64x256x256 6-conn, Graph[float]", img, False, False))
        out.append(("3D 64x256x256 6-conn, Graph[int]", img, True, False))
    if "2d4" in names or "2d8" in names:
        img = synthetic((1024, 1024), seed=1)
        if "2d4" in names:
            out.append(("2D 1024^2 4-conn, Graph[float]", img, False, False))
        if "2d8" in names:
            out.append(("2D 1024^2 8-conn (Moore), Graph[int]", img, True, True))
    if "a2" in names:
        path = Path(data_dir) / "pymaxflow_examples" / "a2.png"
        if path.is_file():
            import cv2

            a2 = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE).astype(np.float32) / 255.0
            out.append(("PyMaxflow example a2.png, Graph[int]", a2, True, False))
    return out


def run(label, img, integer, moore, devices, repeat):
    import maxflow
    import torch

    import torchcut.compat.pymaxflow as tcm

    src, snk, weights = energy(img, integer=integer)
    solvers = {"pymaxflow": lambda: script(maxflow, src, snk, weights, integer, moore)}
    for dev in devices:
        solvers[f"torchcut-{dev}"] = (lambda d: lambda: script(tcm, src, snk, weights, integer, moore, device=d))(dev)
    times = {k: [] for k in solvers}
    solve_times = {k: [] for k in solvers}
    results = {}
    for r in range(repeat + 1):  # round 0 is the warm-up
        for name, fn in solvers.items():
            if name.endswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            flow, seg, solve = fn()
            if name.endswith("cuda"):
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if r:
                times[name].append(dt)
                solve_times[name].append(solve)
            results[name] = (flow, seg)
    ref_flow, ref_seg = results["pymaxflow"]
    # the float tolerance of GraphFloat: 0.5 / scale per finite arc of the graph (a loose bound)
    caps = [np.abs(src - snk).max()] + [2 * w.max() for w in weights]
    arcs = img.size * (1 + img.ndim * (2 if moore else 1))
    tol = 0 if integer else arcs * 0.5 * float(max(caps)) / 2**30
    row = {
        "case": label,
        "nodes": int(img.size),
        "integer": integer,
        "tolerance": tol,
        "flows": {k: float(v[0]) for k, v in results.items()},
        "seg_differs": {k: int((v[1] != ref_seg).sum()) for k, v in results.items()},
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "maxflow_s": {k: statistics.median(v) for k, v in solve_times.items()},
        "runs": repeat,
    }
    for k, (flow, _) in results.items():
        if abs(flow - ref_flow) > tol:
            raise AssertionError(f"{label}: {k} flow {flow!r} differs from PyMaxflow's {ref_flow!r} by more than {tol}")
    return row


def render(meta, rows, names):
    lines = [
        "# `torchcut.compat.pymaxflow` against PyMaxflow: one script, two modules",
        "",
        meta,
        "",
        "| case | nodes | flow ("
        + ", ".join(names)
        + ") | "
        + " | ".join(names)
        + " | "
        + " | ".join(f"speed-up {n}" for n in names if n != "pymaxflow")
        + " | maxflow() alone ("
        + ", ".join(names)
        + ") | segments differing |",
        "|---|---:|---|" + "---:|" * len(names) + "---:|" * (len(names) - 1) + "---|---|",
    ]
    for r in rows:
        flows = ", ".join(f"{r['flows'][n]:.6g}" if not r["integer"] else str(int(r["flows"][n])) for n in names)
        ts = " | ".join(_t(r["median_s"][n]) for n in names)
        sp = " | ".join(f"{r['median_s']['pymaxflow'] / r['median_s'][n]:.2f}x" for n in names if n != "pymaxflow")
        seg = ", ".join(str(r["seg_differs"][n]) for n in names if n != "pymaxflow")
        alone = ", ".join(_t(r["maxflow_s"][n]) for n in names)
        lines.append(f"| {r['case']} | {r['nodes']:,} | {flows} | {ts} | {sp} | {alone} | {seg} |")
    slow = min(
        rows, key=lambda r: min(r["median_s"]["pymaxflow"] / r["median_s"][n] for n in names if n != "pymaxflow")
    )
    lines += ["", f"Slowest case for torchcut (smallest speed-up): {slow['case']}."]
    return "\n".join(lines) + "\n"


def _t(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def plot(rows, names, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        pts = sorted((r["nodes"], r["median_s"][n]) for r in rows)
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o", label=n)
    ax.set_xlabel("nodes")
    ax.set_ylabel("time to segments (s)")
    ax.set_title("PyMaxflow script: PyMaxflow vs torchcut.compat")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", default="cpu", help="comma-separated torchcut devices: cpu, cuda")
    ap.add_argument("--cases", default="vol,2d4,2d8,a2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    import maxflow
    import torch

    devices = [d for d in args.devices.split(",") if d]
    names = ["pymaxflow"] + [f"torchcut-{d}" for d in devices]
    data_dir = os.environ.get("TORCHCUT_DATA", str(ROOT / "data"))
    rows = []
    load0 = os.getloadavg()[0]
    gpu = f", {torch.cuda.get_device_name()}" if "cuda" in devices else ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "compat" + (f"-{args.tag}" if args.tag else "")
    for label, img, integer, moore in cases(args.cases.split(","), data_dir):
        row = run(label, img, integer, moore, devices, args.repeat)
        print(json.dumps(row), flush=True)
        rows.append(row)
        meta = (
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores ({platform.machine()}){gpu}, "
            f"torch {torch.__version__}, PyMaxflow {maxflow.__version__}; load average before/after "
            f"{load0:.2f}/{os.getloadavg()[0]:.2f}. Time to the segments (build + maxflow + get_grid_segments), "
            f"median of {args.repeat} runs after a warm-up, solvers interleaved; int flows asserted equal, float "
            "flows within the quantization bound."
        )
        # written after every case, so that a run cut short still leaves its table
        (out / f"{stem}.md").write_text(render(meta, rows, names))
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    plot(rows, names, out / f"{stem}.png")
    print(render(meta, rows, names))


if __name__ == "__main__":
    main()
