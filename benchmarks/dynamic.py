"""Benchmark of re-solving after a stroke: DynamicFlowGraph against a solve from scratch and PyMaxflow.

An interactive segmentation of scikit-image's ``camera`` (resized to ``--size``^2): a 4-connected
FlowGraph with contrast weights (``lam * exp(-(I_p - I_q)^2 / (2 sigma^2))``) and terminal
capacities from two intensity models; then ``--strokes`` strokes, each a disc covering ``--cover``
of the pixels, alternately marked object (source capacity ``hard``) and background (sink capacity
``hard``). After every stroke the same network is solved three ways, in the same run:

* ``warm``: :class:`torchcut.solvers.dynamic.DynamicFlowGraph` from the last flow;
* ``scratch``: :func:`torchcut.maxflow` on the changed FlowGraph;
* ``pymaxflow``: PyMaxflow's ``maxflow(reuse_trees=True)`` after ``add_grid_tedges`` (the changes of
  the capacities) and ``mark_node`` on the stroke's nodes, when the ``maxflow`` package is importable
  (the graph is built once, outside the timing); its flow must equal ours.

Flows and masks of warm and scratch are compared on every stroke (equal or the script fails).

``--compat`` times the script a PyMaxflow user writes instead, whole: ``add_grid_tedges`` of the
stroke's changes, ``mark_node`` on its nodes and ``maxflow(reuse_trees=True)``, through PyMaxflow and
through ``torchcut.compat.pymaxflow`` with ``REUSE_FLOW`` on (the default) and off (a solve from
scratch); the three flows must agree on every stroke. The first re-solve after the plain first solve
builds the kept state (a solve from scratch), so it is listed but left out of the median. With
``--segments`` each stroke also reads the segmentation back (``get_grid_segments`` of the ids that
``add_grid_nodes`` gave, as an interactive tool does to show it), and the segments of the three must
be equal.

``--device cuda`` runs warm and scratch on a CUDA device (push-relabel from the last flow with its
residual repaired, against the CUDA solve from scratch; CUDA synchronised around each); PyMaxflow stays
on the CPU.

    python benchmarks/dynamic.py [--size 1000] [--strokes 6] [--cover 0.02] [--compat [--segments]] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import torchcut  # noqa: E402
from torchcut.solvers.dynamic import DynamicFlowGraph  # noqa: E402


def problem(size: int, lam: float = 50.0, scale: float = 10.0):
    from skimage import data, transform

    img = transform.resize(data.camera().astype(np.float64) / 255, (size, size), anti_aliasing=True)
    H, W = img.shape
    ids = np.arange(H * W).reshape(H, W)
    u = np.concatenate([ids[:, :-1].ravel(), ids[:-1].ravel()])
    v = np.concatenate([ids[:, 1:].ravel(), ids[1:].ravel()])
    d2 = (img.ravel()[u] - img.ravel()[v]) ** 2
    w = np.round(lam * np.exp(-d2 / (2 * d2.mean()))).astype(np.int64)
    fg, bg = 0.15, 0.7  # dark object (the cameraman), bright background
    src = np.round(scale * -np.log(np.clip(np.abs(img - bg), 1e-3, 1))).astype(np.int64).ravel()
    snk = np.round(scale * -np.log(np.clip(np.abs(img - fg), 1e-3, 1))).astype(np.int64).ravel()
    return (H, W), u, v, w, src, snk


def strokes(shape, count, cover, seed=0):
    H, W = shape
    rng = np.random.default_rng(seed)
    r = np.sqrt(cover * H * W / np.pi)
    yy, xx = np.mgrid[:H, :W]
    for k in range(count):
        cy, cx = rng.uniform(r, H - r), rng.uniform(r, W - r)
        yield k % 2 == 0, np.flatnonzero((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r)


def compat_script(mod, shape, u, v, w, src, snk, a, reuse_flow=None):
    """Seconds of each stroke's update and re-solve through a PyMaxflow-like module, and its flows."""
    if reuse_flow is not None:
        mod.REUSE_FLOW = reuse_flow
    g = mod.Graph[int]()
    ids = g.add_grid_nodes(shape)
    g.add_edges(u.astype(np.int32), v.astype(np.int32), w.astype(np.int32), w.astype(np.int32))
    g.add_grid_tedges(ids, src.reshape(shape), snk.reshape(shape))
    g.maxflow()
    S, T = src.copy(), snk.copy()
    out = []
    for obj, nodes in strokes(shape, a.strokes, a.cover):
        S0, T0 = S[nodes].copy(), T[nodes].copy()
        if obj:
            S[nodes], T[nodes] = a.hard, 0
        else:
            S[nodes], T[nodes] = 0, a.hard
        t0 = time.perf_counter()
        g.add_grid_tedges(nodes, S[nodes] - S0, T[nodes] - T0)
        for i in nodes:
            g.mark_node(int(i))
        flow = g.maxflow(reuse_trees=True)
        seg = g.get_grid_segments(ids) if a.segments else None
        t = time.perf_counter() - t0
        out.append((t, (flow, None if seg is None else np.packbits(seg).tobytes())))
    return out


def main_compat(a, shape, u, v, w, src, snk):
    import torchcut.compat.pymaxflow as tmax

    runs = {"reuse on": compat_script(tmax, shape, u, v, w, src, snk, a, True)}
    runs["reuse off"] = compat_script(tmax, shape, u, v, w, src, snk, a, False)
    tmax.REUSE_FLOW = True
    try:
        import maxflow

        runs["PyMaxflow"] = compat_script(maxflow, shape, u, v, w, src, snk, a)
    except ImportError:
        pass
    what = "update, marks, maxflow(reuse_trees=True)" + (" and get_grid_segments" if a.segments else "")
    print(f"{a.size}x{a.size}, strokes of {a.cover:.0%}; ms per stroke ({what}):")
    print(f"{'stroke':>6} " + " ".join(f"{k:>14}" for k in runs))
    for k in range(a.strokes):
        flows = {r[k][1] for r in runs.values()}
        assert len(flows) == 1, f"stroke {k}: the flows or segments differ: {[f[0] for f in flows]}"
        print(f"{k:>6} " + " ".join(f"{1e3 * r[k][0]:>14.1f}" for r in runs.values()))
    med = {name: statistics.median(t for t, _ in r[1:]) for name, r in runs.items()}
    print("median after the first stroke: " + ", ".join(f"{n} {1e3 * m:.1f} ms" for n, m in med.items()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--strokes", type=int, default=6)
    p.add_argument("--cover", type=float, default=0.02, help="fraction of the pixels one stroke covers")
    p.add_argument("--hard", type=int, default=10**6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compat", action="store_true", help="time the PyMaxflow script through compat.pymaxflow")
    p.add_argument("--segments", action="store_true", help="--compat: read the segments back after each stroke")
    p.add_argument("--device", default="cpu", help="cpu or cuda (warm and scratch)")
    a = p.parse_args(argv)
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    torch.set_num_threads(a.threads)
    shape, u, v, w, src, snk = problem(a.size)
    if a.compat:
        return main_compat(a, shape, u, v, w, src, snk)
    N = src.size
    g = torchcut.FlowGraph.from_edges(
        torch.from_numpy(u),
        torch.from_numpy(v),
        torch.from_numpy(w),
        torch.from_numpy(w),
        source=torch.from_numpy(src),
        sink=torch.from_numpy(snk),
        num_nodes=N,
    ).to(dev)
    backend = "cpu" if dev.type == "cpu" else "auto"
    d = DynamicFlowGraph(g, backend=backend)
    torchcut.maxflow(d.graph, backend=backend)  # warm-up (CUDA: the kernels' first launch)
    if dev.type == "cuda":  # and the general-graph kernels that the re-solve runs (loaded on first use)
        m = 3000
        ring = torchcut.FlowGraph.from_edges(
            torch.arange(m),
            (torch.arange(m) + 7) % m,
            torch.full((m,), 5),
            source=torch.full((m,), 3),
            sink=torch.full((m,), 2),
        ).to(dev)
        torchcut.maxflow(ring, backend=backend, lattice=False)
    sync()
    t0 = time.perf_counter()
    d.maxflow()
    sync()
    first = time.perf_counter() - t0
    pm = None
    try:
        import maxflow

        pm = maxflow.Graph[int]()
        pm.add_nodes(N)
        pm.add_edges(u.astype(np.int32), v.astype(np.int32), w.astype(np.int32), w.astype(np.int32))
        pm.add_grid_tedges(np.arange(N), src, snk)
        t0 = time.perf_counter()
        pm.maxflow()
        pm_first = time.perf_counter() - t0
    except ImportError:
        pm_first = None
    print(
        f"{a.size}x{a.size} on {dev.type}: {N} nodes, {len(u)} edges; first solve {1e3 * first:.0f} ms"
        + (f", PyMaxflow {1e3 * pm_first:.0f} ms" if pm_first else "")
    )
    print(
        f"{'stroke':>6} {'pixels':>8} {'warm ms':>9} {'scratch ms':>11} {'warm/scratch':>13} {'pymaxflow reuse ms':>19}"
    )
    ratios = []
    S, T = src.copy(), snk.copy()
    for k, (obj, nodes) in enumerate(strokes(shape, a.strokes, a.cover)):
        S0, T0 = S[nodes].copy(), T[nodes].copy()
        if obj:
            S[nodes], T[nodes] = a.hard, 0
        else:
            S[nodes], T[nodes] = 0, a.hard
        idx, s_new, t_new = (torch.from_numpy(x).to(dev) for x in (nodes, S[nodes], T[nodes]))
        sync()
        t0 = time.perf_counter()
        d.set_terminals(source=s_new, sink=t_new, nodes=idx)
        r = d.maxflow()
        sync()
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = torchcut.maxflow(d.graph, backend=backend)
        sync()
        scratch = time.perf_counter() - t0
        assert r.flow_value == ref.flow_value and torch.equal(r.mask, ref.mask), "warm and scratch differ"
        pm_t = "-"
        if pm is not None:  # the same change: PyMaxflow adds to the totals, so add the differences
            t0 = time.perf_counter()
            pm.add_grid_tedges(nodes, S[nodes] - S0, T[nodes] - T0)
            for i in nodes:
                pm.mark_node(int(i))
            flow = pm.maxflow(reuse_trees=True)
            pm_t = f"{1e3 * (time.perf_counter() - t0):.1f}"
            assert flow == r.flow_value, f"PyMaxflow's flow {flow} differs from {r.flow_value}"
        ratios.append(warm / scratch)
        print(
            f"{k:>6} {nodes.size:>8} {1e3 * warm:>9.1f} {1e3 * scratch:>11.1f} {warm / scratch:>13.2f} {pm_t:>19}",
            flush=True,
        )
    print(
        f"warm / scratch: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}; repaired nodes "
        f"{d.stats['repaired']}; flows equal to scratch (and to PyMaxflow's) on every stroke"
    )


if __name__ == "__main__":
    main()
