"""Benchmark: BVZ-style stereo expansion sequences, torchcut (CUDA) against PyMaxflow, same run.

For each sequence (the 16 expansion moves of the first pass of Potts stereo on a pair, see
torchcut/stereo.py) and each move: PyMaxflow (Boykov-Kolmogorov, one CPU core) build + solve, and
torchcut on the GPU: the FlowGraph built on the device from host arrays, then ``torchcut.maxflow``
(which routes these lattice graphs to the grid kernels), and the CSR kernels on the same graph
(``lattice=False``). Flow values are asserted equal; every torchcut result is verified once.
Times: median of ``--repeat`` runs after a warm-up, CUDA synchronised. Per sequence, the total over
all moves (as the UWO benchmark reports).

    python benchmarks/dimacs.py --out OUT [--sequences tsukuba,tsukuba4x] [--repeat 3] [--budget 240]

Writes OUT/dimacs.md (markdown table) and OUT/dimacs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torchcut  # noqa: E402
from benchmarks.timing import median_time  # noqa: E402
from torchcut.stereo import expansion_moves, load_pair  # noqa: E402

DATA = Path(os.environ.get("TORCHCUT_DATA", Path(__file__).resolve().parents[1] / "data"))


def sequences(names):
    tsu = DATA / "middlebury" / "tsukuba"
    L, R = tsu / "scene1.row3.col3.ppm", tsu / "scene1.row3.col4.ppm"
    out = {}
    for name in names:
        if name == "tsukuba":
            out[name] = (L, R, 1)
        elif name.startswith("tsukuba") and name.endswith("x"):
            out[name] = (L, R, int(name[len("tsukuba") : -1]))
        elif name.startswith("motorcycle"):
            import skimage.data

            left, right, _ = skimage.data.stereo_motorcycle()
            k = int(name[len("motorcycle") : -1]) if name.endswith("x") else 1
            out[name] = (left, right, k)
        else:
            raise SystemExit(f"--sequences: unknown sequence {name!r}")
    return out


def general_graphs(names, seed=0):
    """Large non-lattice networks (vectorized generators): ``name -> (n, tail, head, cap, s, t)``.

    ``rlgW_L``: Washington-RLG-like, L layers of W nodes, 3 random arcs to the next layer per node.
    ``rmfA_B``: RMFGEN-like, B frames of A x A grids, in-frame arcs of capacity 50 * A * A, arcs
    along a random permutation between consecutive frames with capacities in [1, 50].
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        if name.startswith("rlg"):
            W, L = (int(x) for x in name[3:].split("_"))
            n = W * L + 2
            s, t = 0, n - 1
            node = 1 + np.arange(W * L).reshape(L, W)
            deg = 3
            tails = [np.full(W, s), node[-1]]
            heads = [node[0], np.full(W, t)]
            caps = [np.full(W, 10**6), np.full(W, 10**6)]
            tl = np.repeat(node[:-1].reshape(-1), deg)
            layer = np.repeat(np.arange(L - 1), W * deg)
            hd = node[layer + 1, rng.integers(0, W, tl.size)]
            tails.append(tl)
            heads.append(hd)
            caps.append(rng.integers(1, 10**4, tl.size))
            out[name] = (n, np.concatenate(tails), np.concatenate(heads), np.concatenate(caps), s, t)
        elif name.startswith("rmf"):
            A, B = (int(x) for x in name[3:].split("_"))
            n = A * A * B
            ids = np.arange(n).reshape(B, A, A)
            tl = [ids[:, :, :-1], ids[:, :, 1:], ids[:, :-1, :], ids[:, 1:, :]]
            hd = [ids[:, :, 1:], ids[:, :, :-1], ids[:, 1:, :], ids[:, :-1, :]]
            tail = np.concatenate([x.reshape(-1) for x in tl])
            head = np.concatenate([x.reshape(-1) for x in hd])
            cap = np.full(tail.size, 50 * A * A)
            perm = np.concatenate([f * A * A + A * A + rng.permutation(A * A) for f in range(B - 1)])
            tail = np.concatenate([tail, np.arange((B - 1) * A * A)])
            head = np.concatenate([head, perm])
            cap = np.concatenate([cap, rng.integers(1, 51, (B - 1) * A * A)])
            out[name] = (n, tail, head, cap, 0, n - 1)
        else:
            raise SystemExit(f"--general: unknown family {name!r}")
    return out


def bench_general(names, repeat, dev, budget=1e9):
    """CSR kernels against PyMaxflow on large general graphs; rows for the markdown table."""
    import maxflow

    rows = []
    t_start = time.perf_counter()
    for name, (n, tail, head, cap, s, t) in general_graphs(names).items():
        if time.perf_counter() - t_start > budget:
            print(f"# budget exhausted, skipping {name}", flush=True)
            break
        g = torchcut.FlowGraph.from_network(
            torch.from_numpy(tail), torch.from_numpy(head), torch.from_numpy(cap), s, t, n
        )
        u, v, cf, cb = (x.numpy() for x in g.edges())
        src, snk = g.source[0].numpy(), g.sink[0].numpy().astype(np.int64)
        N = g.num_nodes

        def pmf():
            t0 = time.perf_counter()
            G = maxflow.Graph[int](N, u.size)
            G.add_nodes(N)
            G.add_edges(u, v, cf, cb)
            G.add_grid_tedges(np.arange(N), src, snk)
            return int(G.maxflow()), time.perf_counter() - t0

        res = [pmf()]  # Boykov-Kolmogorov takes seconds to minutes on these: once
        flow_pm, t_pm = res[0][0], statistics.median(x[1] for x in res)
        gd = g.to(dev)
        t_tc, r = timed(lambda: torchcut.maxflow(gd, lattice=False), repeat)
        assert r.flow_value == flow_pm, (name, r.flow_value, flow_pm)
        assert r.verify()
        row = {
            "name": name,
            "nodes": n,
            "pairs": g.num_pairs,
            "flow": flow_pm,
            "pmf_total": t_pm,
            "tc_solve": t_tc,
            "backend": r.stats.get("backend"),
            "global_relabels": r.stats.get("global_relabels"),
            "rounds": r.stats.get("rounds"),
        }
        print(
            f"general {name}: n={n} pairs={g.num_pairs} flow={flow_pm} pmf {t_pm * 1e3:.1f} ms | torchcut "
            f"{r.stats.get('backend')} {t_tc * 1e3:.1f} ms ({row['global_relabels']} relabels, {row['rounds']} rounds)",
            flush=True,
        )
        rows.append(row)
    return rows


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeat):
    seconds, _, out = median_time(fn, repeat, cuda=torch.cuda.is_available())
    return seconds, out


def pymaxflow_solve(m):
    import maxflow

    N = m.num_nodes
    t0 = time.perf_counter()
    g = maxflow.Graph[int](N, m.u.size)
    g.add_nodes(N)
    g.add_edges(m.u, m.v, m.cap, m.rev_cap)
    g.add_grid_tedges(np.arange(N), m.source, m.sink)
    t1 = time.perf_counter()
    f = g.maxflow()
    t2 = time.perf_counter()
    return int(f), t1 - t0, t2 - t1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--plot"]:
        plot(argv[2:], argv[1])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sequences", default="tsukuba,tsukuba4x")
    ap.add_argument("--disparities", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--budget", type=float, default=240.0, help="seconds; later work is skipped past it")
    ap.add_argument("--csr-max-nodes", type=int, default=4_000_000, help="skip the CSR kernels above this")
    ap.add_argument("--csr-sweep", action="store_true", help="time CSR kernel options on one move per sequence")
    ap.add_argument("--general", default="", help="comma list of general graphs, e.g. rlg1000_200,rmf64_64")
    ap.add_argument("--dimacs-io", action="store_true", help="also write and re-read the first sequence as DIMACS")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    import maxflow  # noqa: F401  (required: the comparison is the point)

    # Lattice graphs go to the grid kernels; without them (build failure) the grid route would run the
    # grid reference, far too slow here: then time the CSR kernels as "torchcut" and say so.
    lattice = True
    if dev == "cuda":
        from torchcut.solvers import cuda as grid_cuda

        err = grid_cuda.load_error()
        if err is not None:
            print(f"# grid kernels unavailable ({err}); torchcut column = CSR kernels", flush=True)
            lattice = False

    rows, seqs = [], []
    for si, (name, (L, R, k)) in enumerate(sequences(args.sequences.split(",")).items()):
        if time.perf_counter() - t_start > args.budget:
            print(f"# budget exhausted, skipping {name}", flush=True)
            break
        left, right = load_pair(L, R, k)
        H, W = left.shape
        t0 = time.perf_counter()
        moves = list(expansion_moves(left, right, args.disparities, step=k, solver="pymaxflow"))
        print(
            f"# {name}: {H}x{W} = {H * W} pixels, {len(moves)} moves generated in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        if args.dimacs_io and si == 0:
            with tempfile.TemporaryDirectory() as tmp:
                t_w = t_r = 0.0
                for m in moves:
                    g = m.flowgraph()
                    p = Path(tmp) / f"{name}{m.alpha}.max"
                    a = time.perf_counter()
                    torchcut.write_dimacs(g, p)
                    b = time.perf_counter()
                    g2 = torchcut.read_dimacs(p)
                    c = time.perf_counter()
                    t_w += b - a
                    t_r += c - b
                    assert torch.equal(g2.caps, g.caps) and torch.equal(g2.source, g.source)
                print(f"# DIMACS io {name}: write {t_w:.2f} s, read {t_r:.2f} s for {len(moves)} files", flush=True)
        seq = {
            "name": name,
            "shape": [H, W],
            "nodes": H * W + 2,
            "moves": 0,
            "pmf_total": 0.0,
            "pmf_solve": 0.0,
            "tc_total": 0.0,
            "tc_solve": 0.0,
            "csr_solve": 0.0,
            "csr_moves": 0,
        }
        csr_on = H * W <= args.csr_max_nodes
        for m in moves:
            if time.perf_counter() - t_start > args.budget:
                print(f"# budget exhausted in {name} at move {m.alpha}", flush=True)
                break
            reps = args.repeat if H * W < 1_000_000 else max(1, args.repeat - 1)
            pm = [pymaxflow_solve(m) for _ in range(reps)]
            flow_pm = pm[0][0]
            pmf_build = statistics.median(x[1] for x in pm)
            pmf_solve = statistics.median(x[2] for x in pm)
            host = [torch.from_numpy(x) for x in (m.u, m.v, m.cap, m.rev_cap, m.source, m.sink)]

            def build():
                t = [x.to(dev, non_blocking=False) for x in host]
                return torchcut.FlowGraph.from_edges(
                    t[0], t[1], t[2], t[3], source=t[4], sink=t[5], num_nodes=m.num_nodes
                )

            g = build()
            t_total, r = timed(lambda: torchcut.maxflow(build(), lattice=lattice), reps)
            t_solve, r = timed(lambda g=g: torchcut.maxflow(g, lattice=lattice), reps)
            assert r.flow_value == flow_pm, (name, m.alpha, r.flow_value, flow_pm)
            assert r.verify()
            row = {
                "seq": name,
                "alpha": m.alpha,
                "nodes": m.num_nodes + 2,
                "pairs": g.num_pairs,
                "flow": flow_pm,
                "pmf_total": pmf_build + pmf_solve,
                "pmf_solve": pmf_solve,
                "tc_total": t_total,
                "tc_solve": t_solve,
                "route": r.stats.get("route"),
                "backend": r.stats.get("backend"),
            }
            if csr_on and dev == "cuda":
                t_csr, rc = timed(lambda g=g: torchcut.maxflow(g, backend="cuda", lattice=False), 1)
                assert rc.flow_value == flow_pm, (name, m.alpha, "csr", rc.flow_value, flow_pm)
                row["csr_solve"] = t_csr
                row["csr_stats"] = {k2: v for k2, v in rc.stats.items() if isinstance(v, (int, float))}
                seq["csr_solve"] += t_csr
                seq["csr_moves"] += 1
                if t_csr > 20 * max(t_solve, 1e-3) and t_csr > 2.0:
                    csr_on = False  # too slow to keep timing on this sequence
            if args.csr_sweep and dev == "cuda" and m.alpha == 1:
                for period in (0, 4, 16, 64):
                    for iters in (1, 4, 16):
                        ts, rs = timed(
                            lambda g=g, period=period, iters=iters: torchcut.maxflow(
                                g, backend="cuda", lattice=False, period=period, iters=iters
                            ),
                            2,
                        )
                        assert rs.flow_value == flow_pm
                        print(
                            f"# sweep {name} a=1 period={period:3d} iters={iters:2d}: {ts * 1e3:8.1f} ms "
                            f"({rs.stats['global_relabels']} relabels, {rs.stats['rounds']} rounds)",
                            flush=True,
                        )
            rows.append(row)
            for key in ("pmf_total", "pmf_solve", "tc_total", "tc_solve"):
                seq[key] += row[key]
            seq["moves"] += 1
            print(
                f"{name} a={m.alpha:2d} flow={flow_pm:9d} pmf {row['pmf_total'] * 1e3:8.1f} ms "
                f"(solve {pmf_solve * 1e3:7.1f}) | torchcut {t_total * 1e3:7.1f} ms (solve {t_solve * 1e3:7.1f}, "
                f"{row['route']}/{row['backend']}) | csr {row.get('csr_solve', float('nan')) * 1e3:8.1f} ms",
                flush=True,
            )
            del g
        seqs.append(seq)
        save(out, rows, seqs, [], dev)

    general = (
        bench_general(
            [x for x in args.general.split(",") if x],
            args.repeat,
            dev,
            args.budget + 120 - (time.perf_counter() - t_start),
        )
        if args.general
        else []
    )
    save(out, rows, seqs, general, dev)
    print(render(rows, seqs, general, dev))
    return 0


def save(out, rows, seqs, general, dev):
    (out / "dimacs.json").write_text(json.dumps({"rows": rows, "sequences": seqs, "general": general}, indent=1))
    (out / "dimacs.md").write_text(render(rows, seqs, general, dev))


def render(rows, seqs, general, dev):
    dev_name = (torch.cuda.get_device_name() if dev == "cuda" else "cpu") if dev in ("cuda", "cpu") else dev
    lines = [
        f"# BVZ-style expansion sequences: torchcut ({dev_name}) vs PyMaxflow {_pmf_version()}",
        "",
        "Per move: time to the result (graph build + solve) and solve alone, median of runs; flows equal.",
        "",
        "| sequence | move | nodes | arc pairs | flow | PyMaxflow total ms | PyMaxflow solve ms | torchcut total ms | "
        "torchcut solve ms | CSR kernels ms | speed-up (total) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        csr = f"{r['csr_solve'] * 1e3:.1f}" if "csr_solve" in r else "-"
        lines.append(
            f"| {r['seq']} | {r['alpha']} | {r['nodes']} | {r['pairs']} | {r['flow']} | {r['pmf_total'] * 1e3:.1f} | "
            f"{r['pmf_solve'] * 1e3:.1f} | {r['tc_total'] * 1e3:.1f} | {r['tc_solve'] * 1e3:.1f} | {csr} | "
            f"{r['pmf_total'] / r['tc_total']:.2f}x |"
        )
    lines += [
        "",
        "## Per sequence (sum over moves)",
        "",
        "| sequence | pixels | moves | PyMaxflow total s | PyMaxflow solve s | torchcut total s | torchcut solve s | "
        "CSR kernels s (moves) | speed-up total | speed-up solve |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in seqs:
        if not s["moves"]:
            continue
        lines.append(
            f"| {s['name']} | {s['shape'][0]}x{s['shape'][1]} | {s['moves']} | {s['pmf_total']:.3f} | "
            f"{s['pmf_solve']:.3f} | {s['tc_total']:.3f} | {s['tc_solve']:.3f} | "
            f"{s['csr_solve']:.3f} ({s['csr_moves']}) | {s['pmf_total'] / s['tc_total']:.2f}x | "
            f"{s['pmf_solve'] / s['tc_solve']:.2f}x |"
        )
    if general:
        lines += [
            "",
            "## General (non-lattice) graphs: CSR kernels",
            "",
            "| graph | nodes | arc pairs | flow | PyMaxflow total ms | torchcut solve ms | global relabels | rounds | speed-up |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in general:
            lines.append(
                f"| {r['name']} | {r['nodes']} | {r['pairs']} | {r['flow']} | {r['pmf_total'] * 1e3:.1f} | "
                f"{r['tc_solve'] * 1e3:.1f} | {r['global_relabels']} | {r['rounds']} | "
                f"{r['pmf_total'] / r['tc_solve']:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def plot(json_paths, png):
    """Mean time per move against nodes (log-log) for PyMaxflow, torchcut and the CSR kernels.

    ``python benchmarks/dimacs.py --plot OUT.png RUN1.json [RUN2.json ...]``
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = {
        "PyMaxflow 1.3.2 (build + solve)": [],
        "torchcut (build + solve, grid route)": [],
        "torchcut CSR kernels (solve)": [],
    }
    names = []
    for path in json_paths:
        for sq in json.loads(Path(path).read_text())["sequences"]:
            if not sq["moves"]:
                continue
            n, k = sq["nodes"], sq["moves"]
            pts["PyMaxflow 1.3.2 (build + solve)"].append((n, sq["pmf_total"] / k))
            pts["torchcut (build + solve, grid route)"].append((n, sq["tc_total"] / k))
            if sq.get("csr_moves"):
                pts["torchcut CSR kernels (solve)"].append((n, sq["csr_solve"] / sq["csr_moves"]))
            names.append((n, sq["name"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for (label, xy), mk in zip(pts.items(), "osD"):
        xy.sort()
        ax.loglog([x for x, _ in xy], [y * 1e3 for _, y in xy], mk + "-", label=label)
    for n, name in sorted(set(names)):
        ax.annotate(name, (n, ax.get_ylim()[0]), rotation=90, fontsize=7, va="bottom", ha="right")
    ax.set_xlabel("nodes per expansion move")
    ax.set_ylabel("mean time per move (ms)")
    ax.set_title("BVZ-style stereo expansion moves, H100 vs one CPU core")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def _pmf_version():
    try:
        import maxflow

        return maxflow.__version__
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
