"""Benchmark of the CPU solvers: torchcut's compiled backend against PyMaxflow and thinhpf, same run.

The energies are those of ``benchmarks/grid.py`` (Boykov-Jolly segmentation networks on scikit-image
pictures, synthetic volumes), quantized to int32 once; every solver gets exactly those integers:

* 2D at 512^2, 1024^2 and 2048^2, 4- and 8-connected; 3D at 64^3 and 128^3, 6-connected;
* a batch of 8 pictures at 512^2 (torchcut solves the items on parallel threads; a single grid of at
  least 2 x 2^17 nodes is cut into ranges of rows solved on parallel threads), torchcut timed on all of
  torch's threads and again on 1 and 2 threads where there are more;
* the BVZ Tsukuba expansion moves (the 16 moves of the first Potts expansion pass, as in
  ``benchmarks/dimacs.py``), summed over the moves.

Times are *to the mask*: graph build from the integer arrays, solve, and the mask read out, medians of
``--repeat`` runs after a warm-up, one solver after the other in one process (nothing in parallel).
PyMaxflow (Boykov-Kolmogorov): ``add_grid_edges``/``add_grid_tedges``, ``maxflow()``,
``get_grid_segments``. thinhpf (Hochbaum's pseudoflow): arcs from numpy index arithmetic,
``add_edges``, ``mincut()`` and ``compute_maxflow()``; its labels need one Python call per node, so
reading its mask is *not* timed (in its favour). Flow values are asserted equal.

Peak memory: each solver runs once more in a fresh child process; the growth of its resident set
(high-water mark after the solve minus the resident set right before it, inputs already loaded) is
reported in bytes per node.

With ``--family hard``: the hard energies of ``benchmarks/grid.py --family hard`` (2D up to 512^2:
strong smoothness, thin structures, low contrast, 4- and 8-connected; 26-connected volumes), where
pseudoflow is the fastest CPU peer; written as OUT/cpu-hard.*.

With ``--family segment``: ``torchcut.segmentation_graph`` energies (what ``torchcut.segment`` solves) on
photographs of 0.24-4 MP (scikit-image pictures and, when the test data is present, GrabCut images),
lam 1-100, 4- and 8-connected, on blob volumes (64^3 and 96^3, 6- and 26-connected, lam 1-100) and on a
smoothed-noise volume seeded on its brightest and darkest voxels (64^3, 6-connected, strong smoothness);
the pictures and volumes differ from those the choice of algorithm was tuned on
(``docs/performance.md``), so the table checks that choice; written as OUT/cpu-segment.*.

Every family times torchcut three ways: the default (``algorithm="auto"``, its pick in brackets),
``"boykov-kolmogorov"`` and ``"pseudoflow"``; the column "auto / best" is auto's time over the faster
of the two forced algorithms (the choice is right when it is near 1). "solve" columns: torchcut's
solve on a built graph (``torchcut.maxflow``) and PyMaxflow's ``maxflow()`` alone.

    python benchmarks/cpu.py --out benchmarks/results [--quick] [--repeat 5] [--family hard|segment]
        [--clock cpu] [--only TEXT] [--no-peers]

Writes OUT/cpu-standard.md, OUT/cpu-standard.json and OUT/cpu-standard.png (time against nodes,
log-log); ``OUT/cpu.*`` belong to ``python -m benchmarks --suite cpu``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import grid as G  # noqa: E402  (the energies of the GPU benchmark)

from benchmarks.timing import median_time  # noqa: E402

CLOCK = time.perf_counter  # --clock cpu: time.process_time (CPU seconds of this process, for a busy machine)
SOLVERS = ("torchcut", "torchcut-bk", "torchcut-pseudoflow", "pymaxflow", "thinhpf")
FORCED = {"torchcut-bk": "boykov-kolmogorov", "torchcut-pseudoflow": "pseudoflow"}


# ------------------------------------------------------------------------------------------ solvers
def solve_torchcut(offs, items, threads=None, algorithm=None):
    """GridGraph from the int32 arrays, maxflow on the CPU backend, the mask. Returns (flows, mask, stats)."""
    import torchcut

    g = torchcut.GridGraph(*G.case_tensors(items, "cpu"), offs)
    opts = {} if threads is None else {"threads": threads}
    if algorithm is not None:
        opts["algorithm"] = algorithm
    r = torchcut.maxflow(g, backend="cpu", **opts)
    mask = r.mask
    return r.flow_values.tolist(), mask, r.stats


def solve_pymaxflow(offs, items):
    _, solve_t, flows, masks = G._pymaxflow_once(items, offs)
    return flows, masks, {"solve_s": solve_t}


def solve_only_torchcut(graph, algorithm):
    """torchcut.maxflow on a built graph, the mask read: the solve alone."""
    import torchcut

    r = torchcut.maxflow(graph, backend="cpu", algorithm=algorithm)
    _ = r.mask
    return r.flow_values.tolist(), None, r.stats


def _hpf_arcs(offs, source, sink, edges):
    from torchcut.grid import overlap_slices

    shape = source.shape
    N = source.size
    ids = np.arange(N, dtype=np.uint32).reshape(shape)
    tails, heads, caps = [], [], []
    for k, o in enumerate(offs):
        here, there = overlap_slices(shape, o)
        i, j, c = ids[here].ravel(), ids[there].ravel(), edges[k][here].ravel()
        tails += [i, j]
        heads += [j, i]
        caps += [c, c]
    flat = ids.ravel()
    tails += [np.full(N, N, np.uint32), flat]
    heads += [flat, np.full(N, N + 1, np.uint32)]
    caps += [source.ravel(), sink.ravel()]
    t, h, c = np.concatenate(tails), np.concatenate(heads), np.concatenate(caps).astype(np.int32)
    keep = c > 0
    return t[keep], h[keep], c[keep]


def solve_thinhpf(offs, items):
    import thinhpf

    flows = []
    for source, sink, edges in items:
        N = source.size
        t, h, c = _hpf_arcs(offs, source, sink, edges)
        g = thinhpf.hpf(N + 2, t.size)
        g.add_node(N + 2)
        g.set_source(N)
        g.set_sink(N + 1)
        g.add_edges(t, h, c)
        g.mincut()
        flows.append(int(g.compute_maxflow()))
    return flows, None, {}


def bvz_moves():
    from torchcut.stereo import expansion_moves, load_pair

    tsu = Path(os.environ.get("TORCHCUT_DATA", ROOT.parent / "shared" / "data")) / "middlebury" / "tsukuba"
    left, right = load_pair(tsu / "scene1.row3.col3.ppm", tsu / "scene1.row3.col4.ppm", 1)
    return list(expansion_moves(left, right, 16, step=1, solver="pymaxflow"))


def bvz_torchcut(moves, as_grid=True, algorithm=None):
    """Each move built as a GridGraph from its arrays (``ExpansionMove.gridgraph``), or, with
    ``as_grid=False``, as a FlowGraph from its edge list (the DIMACS path: pairs merged and sorted)."""
    import torchcut

    flows = []
    opts = {} if algorithm is None else {"algorithm": algorithm}
    for m in moves:
        g = m.gridgraph() if as_grid else m.flowgraph()
        r = torchcut.maxflow(g, backend="cpu", **opts)
        _ = r.mask
        flows.append(r.flow_value)
    return flows, None, {"route": r.stats.get("route", "grid")}


def bvz_pymaxflow(moves):
    import maxflow

    flows = []
    for m in moves:
        g = maxflow.Graph[int](m.num_nodes, m.u.size)
        g.add_nodes(m.num_nodes)
        g.add_edges(m.u, m.v, m.cap, m.rev_cap)
        g.add_grid_tedges(np.arange(m.num_nodes), m.source, m.sink)
        flows.append(int(g.maxflow()))
        g.get_grid_segments(np.arange(m.num_nodes))
    return flows, None, {}


def bvz_thinhpf(moves):
    import thinhpf

    flows = []
    for m in moves:
        N = m.num_nodes
        ids = np.arange(N, dtype=np.uint32)
        t = np.concatenate([m.u, m.v, np.full(N, N), ids]).astype(np.uint32)
        h = np.concatenate([m.v, m.u, ids, np.full(N, N + 1)]).astype(np.uint32)
        c = np.concatenate([m.cap, m.rev_cap, m.source, m.sink]).astype(np.int32)
        keep = c > 0
        g = thinhpf.hpf(N + 2, int(keep.sum()))
        g.add_node(N + 2)
        g.set_source(N)
        g.set_sink(N + 1)
        g.add_edges(t[keep], h[keep], c[keep])
        g.mincut()
        flows.append(int(g.compute_maxflow()))
    return flows, None, {}


def available(name):
    try:
        __import__(
            {
                "torchcut": "torchcut",
                "torchcut-bk": "torchcut",
                "torchcut-pseudoflow": "torchcut",
                "pymaxflow": "maxflow",
                "thinhpf": "thinhpf",
            }[name]
        )
        return True
    except ImportError:
        return False


# -------------------------------------------------------------------------------------------- cases
# --family segment: pictures (scikit-image name or GrabCut file, megapixels) and the smoothness weights.
SEG_PHOTOS = [
    ("chelsea", 0.25),
    ("gc:153077.jpg", 0.5),
    ("hubble_deep_field", 1.0),
    ("immunohistochemistry", 2.0),
    ("coffee", 4.0),
]
SEG_LAMS = (1, 10, 100)


def cases(quick, family="standard"):
    if family == "hard":  # 1024^2 left out: PyMaxflow takes up to ~20 s per solve there
        return [
            dict(h, name=f"{h['name']} {h['conn']}-conn") for h in G.hard_cases() if h["kind"] == "3d" or h["n"] <= 512
        ]
    if family == "segment":
        c = []
        for pic, mp in SEG_PHOTOS[:3] if quick else SEG_PHOTOS:
            for conn in (4, 8):
                for lam in SEG_LAMS:
                    c.append(
                        dict(
                            name=f"photo {pic.removeprefix('gc:')} {mp:g} MP {conn}-conn lam {lam}",
                            kind="seg",
                            pic=pic,
                            mp=mp,
                            conn=conn,
                            lam=lam,
                            ndim=2,
                        )
                    )
        for n in (64,) if quick else (64, 96):
            for conn in (6, 26):
                for lam in SEG_LAMS if n == 64 else (10,):
                    c.append(
                        dict(
                            name=f"blobs {n}^3 {conn}-conn lam {lam}",
                            kind="seg",
                            n=n,
                            seed=3,
                            conn=conn,
                            lam=lam,
                            ndim=3,
                        )
                    )
        # smoothed noise seeded on its brightest 3% and darkest 10% (benchmarks/auto_heldout.py)
        c.append(
            dict(
                name="noise 64^3 6-conn lam 50, bright/dark seeds",
                kind="seg",
                volume="bright-dark",
                n=64,
                conn=6,
                lam=50,
                ndim=3,
            )
        )
        return c
    c = [
        dict(name="2D 512^2 4-conn", kind="2d", n=512, conn=4, batch=1, pic=0),
        dict(name="2D 512^2 8-conn", kind="2d", n=512, conn=8, batch=1, pic=0),
        dict(name="2D 1024^2 4-conn", kind="2d", n=1024, conn=4, batch=1, pic=1),
        dict(name="2D 1024^2 8-conn", kind="2d", n=1024, conn=8, batch=1, pic=1),
        dict(name="2D 2048^2 4-conn", kind="2d", n=2048, conn=4, batch=1, pic=2),
        dict(name="2D 2048^2 8-conn", kind="2d", n=2048, conn=8, batch=1, pic=2),
        dict(name="3D 64^3 6-conn", kind="3d", n=64, conn=6, batch=1, seed=0),
        dict(name="3D 128^3 6-conn", kind="3d", n=128, conn=6, batch=1, seed=0),
        dict(name="batch 8 x 512^2 4-conn", kind="2d", n=512, conn=4, batch=8, pic=0),
        dict(name="strip 64x1024 4-conn (paths ~1000 long)", kind="strip", n=1024, conn=4, batch=1),
        dict(name="strip 64x1024 8-conn (paths ~1000 long)", kind="strip", n=1024, conn=8, batch=1),
        dict(name="BVZ Tsukuba, 16 expansion moves", kind="bvz"),
        dict(name="BVZ Tsukuba, 16 moves, as edge lists (FlowGraph)", kind="bvz", edges=True),
    ]
    return [x for x in c if x.get("n", 0) <= 512 or x["kind"] == "bvz"] if quick else c


_MOVES = None


def load_case(spec):
    if spec["kind"] == "bvz":
        global _MOVES
        if _MOVES is None:
            _MOVES = bvz_moves()
        return None, _MOVES, sum(m.num_nodes for m in _MOVES)
    if spec["kind"] == "strip":
        offs, items = strip_case(spec)
    elif spec["kind"] == "seg":
        offs, items = segment_case(spec)
    else:
        offs, items = G.make_case(spec)
    return offs, items, sum(s.size for s, _, _ in items)


def photo(name, mp):
    """A scikit-image picture or a GrabCut image (``gc:<file>``), RGB float32, resized to ~mp megapixels."""
    import math

    from skimage import data, io, transform

    if name.startswith("gc:"):
        path = Path(os.environ.get("TORCHCUT_DATA", ROOT.parent / "shared" / "data")) / "grabcut" / "data_GT" / name[3:]
        img = io.imread(path) if path.exists() else data.astronaut()
    else:
        img = getattr(data, name)()
    img = np.asarray(img, np.float64)
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    img = img[..., :3] / (255.0 if img.max() > 1 else 1.0)
    h, w = img.shape[:2]
    s = math.sqrt(mp * 1e6 / (h * w))
    return transform.resize(img, (round(h * s), round(w * s)), order=1, anti_aliasing=True).astype(np.float32)


def segment_case(spec):
    """The integer arrays of ``torchcut.segmentation_graph`` (seeds: a ball in the middle, the border; or
    the bright/dark noise volume of ``auto_heldout.py``)."""
    import torch

    import torchcut

    if spec.get("volume") == "bright-dark":
        import auto_heldout

        g = auto_heldout.build(auto_heldout.bright_dark_volume(spec["n"], spec["lam"]))
        K = len(g.offsets)
        return g.offsets, [
            (
                g.source[0].to(torch.int32).numpy(),
                g.sink[0].to(torch.int32).numpy(),
                g.caps[0, :K].to(torch.int32).numpy().copy(),
            )
        ]
    nd = spec["ndim"]
    img = photo(spec["pic"], spec["mp"]) if nd == 2 else G.volume(spec["n"], spec["seed"]).astype(np.float32)
    seeds = G.seeds_for(img.shape[:nd])
    g = torchcut.segmentation_graph(
        torch.from_numpy(img),
        torch.from_numpy(seeds.astype(np.int64)),
        lam=spec["lam"],
        connectivity=spec["conn"],
        ndim=nd,
        channel_axis=-1 if img.ndim > nd else None,
    )
    K = len(g.offsets)
    return g.offsets, [
        (g.source[0].to(torch.int32).numpy(), g.sink[0].to(torch.int32).numpy(), g.caps[0, :K].numpy().copy())
    ]


def strip_case(spec):
    """A 64 x n strip of random arcs (20-59), sources in the first 4 columns and sinks in the last 4:
    every augmenting path is ~n nodes long, the worst case of Boykov-Kolmogorov's tree adoption."""
    offs = G.offsets_for(2, spec["conn"])
    shape = (64, spec["n"])
    rng = np.random.default_rng(60 + spec["conn"])
    edges = rng.integers(20, 60, size=(len(offs),) + shape).astype(np.int32)
    source = np.zeros(shape, np.int32)
    sink = np.zeros(shape, np.int32)
    source[:, :4] = rng.integers(200, 900, size=(shape[0], 4))
    sink[:, -4:] = rng.integers(200, 900, size=(shape[0], 4))
    return offs, [(source, sink, edges)]


def runner(spec, solver, offs, items, threads=None):
    if spec["kind"] == "bvz":
        if solver.startswith("torchcut"):
            if spec.get("edges") and solver != "torchcut":  # the CSR layout has Boykov-Kolmogorov only
                return None, None
            return bvz_torchcut, (items, not spec.get("edges"), FORCED.get(solver))
        return {"pymaxflow": bvz_pymaxflow, "thinhpf": bvz_thinhpf}[solver], (items,)
    if solver == "torchcut":
        return solve_torchcut, (offs, items, threads)
    if solver in FORCED:  # the algorithm forced, whatever "auto" picks
        return solve_torchcut, (offs, items, threads, FORCED[solver])
    return {"pymaxflow": solve_pymaxflow, "thinhpf": solve_thinhpf}[solver], (offs, items)


def timed(fn, args, repeat):
    """Median of ``repeat`` runs of ``fn(*args)`` after a warm-up, on this script's clock (``--clock``)."""
    return median_time(lambda: fn(*args), repeat, clock=CLOCK)


# ------------------------------------------------------------------------------------- peak memory
def _status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def mem_child(case_json, solver, path):
    """Child process: load the case (pickled by the parent, so that no intermediate of the energy stays
    resident for the solver to reuse), warm the solver up on a tiny graph, then measure one solve."""
    import pickle

    spec = json.loads(case_json)
    with open(path, "rb") as f:
        offs, items, nodes = pickle.load(f)
    if solver == "torchcut":
        from torchcut.solvers import cpu

        assert cpu.load_error() is None
    if spec["kind"] != "bvz":  # warm-up on a tiny grid of the same kind
        shape = (8,) * len(offs[0])
        tiny = [(np.ones(shape, np.int32), np.ones(shape, np.int32), np.ones((len(offs),) + shape, np.int32))]
        fn, args = runner(spec, solver, offs, tiny)
        fn(*args)
    fn, args = runner(spec, solver, offs, items)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
    except OSError:
        pass
    before = _status("VmRSS")
    fn(*args)
    peak = _status("VmHWM")
    if spec["kind"] == "bvz":  # one move at a time: the peak belongs to one move's graph
        nodes = max(m.num_nodes for m in items)
    print(json.dumps({"bytes": peak - before, "nodes": nodes}))


def peak_memory(spec, solver, case):
    import pickle

    with tempfile.NamedTemporaryFile(suffix=".pkl") as f:
        pickle.dump(case, f)
        f.flush()
        out = subprocess.run(
            [sys.executable, __file__, "--mem-child", json.dumps(spec), solver, f.name], capture_output=True, text=True
        )
    if out.returncode != 0:
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["bytes"] / r["nodes"]


# -------------------------------------------------------------------------------------------- main
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--mem-child"]:
        mem_child(argv[1], argv[2], argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="512^2 and BVZ only")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--family", choices=("standard", "hard", "segment"), default="standard")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: CPU seconds of the process instead of wall time (less disturbed on a busy machine; "
        "the solvers' solves are single-threaded)",
    )
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this text")
    ap.add_argument(
        "--no-peers",
        action="store_true",
        help="time torchcut's three ways only (checks auto's choice; flows not compared with a peer)",
    )
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    stem = f"cpu-{args.family}"  # not cpu.*, which `python -m benchmarks --suite cpu` writes
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    import torchcut
    from torchcut.solvers import cpu

    err = cpu.load_error()
    if err is not None:
        raise SystemExit(f"the compiled CPU solver is unavailable: {err}")
    solvers = [s for s in SOLVERS if available(s) and not (args.no_peers and not s.startswith("torchcut"))]
    meta = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "solvers": solvers,
        "clock": args.clock,
        "load_before": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    try:
        import maxflow

        meta["pymaxflow"] = maxflow.__version__
    except ImportError:
        pass
    print(f"# {meta}", flush=True)
    rows = []
    for spec in [c for c in cases(args.quick, args.family) if args.only is None or args.only in c["name"]]:
        offs, items, nodes = load_case(spec)
        big = nodes > 2_000_000
        repeat = max(1, args.repeat - 2) if big else args.repeat
        row = {
            "case": spec["name"],
            "kind": spec["kind"],
            "nodes": nodes,
            "conn": spec.get("conn"),
            "batch": spec.get("batch", 1),
            "repeat": repeat,
        }
        here = [s for s in solvers if runner(spec, s, offs, items)[0] is not None]
        flows = {}
        runs = {s: [] for s in here}
        for s in here:  # warm-up, flows
            fl, _, st = runner(spec, s, offs, items)[0](*runner(spec, s, offs, items)[1])
            flows[s] = [int(round(f)) for f in fl]
            if s == "torchcut":
                row["torchcut_stats"] = {k: v for k, v in st.items() if isinstance(v, (int, float, str))}
        for _ in range(repeat):  # interleaved, so that a slow spell of the machine hits every solver
            for s in here:
                fn, fargs = runner(spec, s, offs, items)
                t0 = CLOCK()
                _, _, st = fn(*fargs)
                runs[s].append(CLOCK() - t0)
                if "solve_s" in st:
                    row.setdefault(s + "_solve_runs", []).append(st["solve_s"])
        if spec["kind"] != "bvz":  # the solve alone: torchcut on a built graph
            g = torchcut.GridGraph(*G.case_tensors(items, "cpu"), offs)
            for s in [x for x in here if x.startswith("torchcut")]:
                alg = FORCED.get(s, "auto")
                row[s + "_solve_runs"] = [timed(solve_only_torchcut, (g, alg), 1)[0] for _ in range(repeat)]
        for s in here:
            row[s] = min(runs[s])
            row[s + "_runs"] = runs[s]
            if s + "_solve_runs" in row:
                row[s + "_solve"] = min(row[s + "_solve_runs"])
        every = torch.get_num_threads()
        if spec["kind"] != "bvz" and every > 1:  # fewer threads: what parallel items and cut grids buy
            for th in (t for t in (1, 2) if t < every):
                _, times, _ = timed(*runner(spec, "torchcut", offs, items, threads=th), repeat)
                row.setdefault("torchcut_threads", {})[str(th)] = min(times)
        ref = flows.get("pymaxflow", flows["torchcut"])
        for s, f in flows.items():
            assert f == ref, (spec["name"], s, f, ref)
        row["flows"] = {s: sum(f) for s, f in flows.items()}
        row["flow"] = sum(ref)
        if not args.no_memory:
            for s in [x for x in here if x not in FORCED]:
                row[s + "_bytes_per_node"] = peak_memory(spec, s, (offs, items, nodes))
        rows.append(row)
        peers = [s for s in here if not s.startswith("torchcut")]
        print(
            f"{spec['name']:34s} flow {row['flow']:12d} | "
            + " | ".join(f"{s} {row[s] * 1e3:8.1f} ms" for s in here)
            + " | "
            + " ".join(f"x{row[p] / row['torchcut']:.2f} vs {p}" for p in peers)
            + (f" | auto/best {_auto_best(row):.2f}" if _auto_best(row) else "")
            + (f" pick/best {_pick_best(row):.2f}" if _pick_best(row) else ""),
            flush=True,
        )
    meta["load_after"] = os.getloadavg()
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"{stem}.md").write_text(render(meta, rows, solvers))
    plot(rows, [s for s in solvers if s not in FORCED], out / f"{stem}.png")
    print(render(meta, rows, solvers))
    return 0


def _auto_best(r):
    """auto's time over the faster forced algorithm's (None when they were not both timed)."""
    forced = [r[s] for s in FORCED if s in r]
    return r["torchcut"] / min(forced) if len(forced) == 2 else None


def _pick_best(r):
    """The forced time of auto's pick over the faster forced algorithm's: whether the choice was right,
    free of the run-to-run spread between two timings of the same solve (None: not both timed, or a
    batch whose items picked differently)."""
    forced = {s: r[s] for s in FORCED if s in r}
    pick = {alg: s for s, alg in FORCED.items()}.get(r.get("torchcut_stats", {}).get("algorithm"))
    return forced[pick] / min(forced.values()) if len(forced) == 2 and pick in forced else None


def render(meta, rows, solvers):
    peers = [s for s in solvers if not s.startswith("torchcut")]
    mine = [s for s in solvers if s.startswith("torchcut")]  # auto, then the forced algorithms
    lines = [
        f"# CPU max-flow: torchcut (compiled: Boykov-Kolmogorov, pseudoflow) vs {', '.join(peers)}",
        "",
        f"{meta['date']}, {meta['cores']} cores ({meta['machine']}), torch {meta['torch']}, PyMaxflow "
        f"{meta.get('pymaxflow', '-')}; load average before/after "
        f"{meta['load_before'][0]:.2f}/{meta['load_after'][0]:.2f}; clock: {meta.get('clock', 'wall')}. Time to the "
        "mask (build + solve + mask), "
        "best of the runs after a warm-up, the solvers interleaved; flows asserted equal across solvers (the "
        "flows columns); solve = the solve alone (torchcut on a built graph, PyMaxflow's maxflow()); peak "
        "memory = growth of the resident set during one solve in a fresh process, per node (thinhpf's time "
        "leaves out reading its labels, see the script). torchcut = the default algorithm (\"auto\"; its pick "
        "in brackets: bk or pf; on all of torch's threads, in parentheses on fewer); "
        "torchcut-bk / torchcut-pseudoflow = the algorithm forced; auto / best = auto "
        "over the faster forced one; pick / best = the forced time of auto's pick over the faster forced one "
        "(1.00: the right choice; auto / best also holds the spread between two timings of one solve, and "
        "auto's pseudoflow on a cut 2D grid, unlike the forced one, may hand ranges over to "
        "Boykov-Kolmogorov: [pf+bk]).",
        "",
        "| "
        + " | ".join(
            [
                "case",
                "nodes",
                *mine,
                "auto / best",
                "pick / best",
                *peers,
                *(f"{p} / auto" for p in peers),
                "solve: auto, pymaxflow",
                "flows (" + ", ".join(solvers) + ")",
                "bytes/node (" + ", ".join(["torchcut", *peers]) + ")",
            ]
        )
        + " |",
        "|---|---:|" + "---:|" * (len(mine) + 2 + 2 * len(peers) + 1) + "---|---|",
    ]
    for r in rows:
        mem = ", ".join(
            f"{r[s + '_bytes_per_node']:.0f}" if r.get(s + "_bytes_per_node") is not None else "-"
            for s in ["torchcut"] + peers
        )
        pick = r.get("torchcut_stats", {}).get("algorithm")
        fewer = r.get("torchcut_threads", {})
        tc = _t(r["torchcut"]) + (
            " (" + ", ".join(f"{_t(v)} on {k} thread{'' if k == '1' else 's'}" for k, v in fewer.items()) + ")"
            if fewer
            else ""
        )
        handed = r.get("torchcut_stats", {}).get("handovers")
        tc += {"pseudoflow": " [pf+bk]" if handed else " [pf]", "boykov-kolmogorov": " [bk]", "mixed": " [mixed]"}.get(
            pick, ""
        )
        ab, pb = _auto_best(r), _pick_best(r)
        solve = ", ".join(_t(r[s + "_solve"]) if s + "_solve" in r else "-" for s in ("torchcut", "pymaxflow"))
        fl = ", ".join(str(r["flows"][s]) if s in r.get("flows", {}) else "-" for s in solvers)
        cells = [
            r["case"],
            f"{r['nodes']:,}",
            tc,
            *(_t(r[m]) if m in r else "-" for m in mine[1:]),
            f"{ab:.2f}" if ab else "-",
            f"{pb:.2f}" if pb else "-",
            *(_t(r[p]) if p in r else "-" for p in peers),
            *(f"{r[p] / r['torchcut']:.2f}x" if p in r else "-" for p in peers),
            solve,
            fl,
            mem,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _t(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def plot(rows, solvers, png):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = {
        "2D 4-conn": lambda r: r["kind"] == "2d" and r["conn"] == 4 and r["batch"] == 1,
        "2D 8-conn": lambda r: r["kind"] == "2d" and r["conn"] == 8,
        "3D 6-conn": lambda r: r["kind"] == "3d",
    }
    styles = {"torchcut": "-o", "pymaxflow": "--s", "thinhpf": ":^"}
    colors = {"2D 4-conn": "C0", "2D 8-conn": "C1", "3D 6-conn": "C2"}
    for g, pick in groups.items():
        sel = sorted((r for r in rows if pick(r)), key=lambda r: r["nodes"])
        if not sel:
            continue
        for s in solvers:
            ax.plot([r["nodes"] for r in sel], [r[s] for r in sel], styles[s], color=colors[g], label=f"{s}, {g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("time to mask (s)")
    ax.set_title("CPU max-flow on segmentation energies (2 cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
