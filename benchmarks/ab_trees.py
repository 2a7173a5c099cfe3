"""A/B of source trees of torchcut on the GPU: the same cases, processes of each tree alternated.

A kernel change is measured against the commit before it without keeping the old variant in the code
as an option: ``--trees A B [C ...]`` names checkouts (each builds its extensions into its own cache,
under ``--cache``). Every round starts one worker process per tree; a worker imports torchcut from its
tree, and the inputs from this tree's benchmark modules, runs each case once as a warm-up and then
``--repeat`` times (CUDA synchronised around each call). The order rotates every round, so over a
multiple of the number of trees every tree runs in every position equally often (session 7 saw the
first worker of a round run ~5% faster). Reported:
medians over all rounds, minima, each tree's speed-up over A, and whether the outputs (flow values,
labels) were equal. Cases (``--cases``, comma-separated names):

* ``refine``: the 4 x 1024^2 8-class :func:`torchcut.refine` of ``benchmarks/multilabel.py``;
* ``tsukuba``: the Tsukuba expansion (batched, per-edge Potts) of the same benchmark;
* ``grid:<substring>``: every case of ``benchmarks/grid.py`` (hard family and the standard cases with
  the library energy) whose name and connectivity ``"<name> <conn>c"`` contain the substring; maxflow
  of a built graph, as that benchmark's "solve" column.

    python benchmarks/ab_trees.py --trees /tmp/base . --cases refine,tsukuba,"grid:1024^2 4c" --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _grid_specs(sub):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import grid

    out = []
    for family in ("hard", "standard"):
        for spec in grid.cases(False, family):
            label = f"{spec['name']} {spec['conn']}c"
            if sub in label:
                out.append((label, spec))
    return out


def _worker(args):
    """Run the cases with the torchcut of ``args.tree``; print one JSON line per case."""
    tree = str(Path(args.tree).resolve())
    sys.path.insert(0, tree)
    import hashlib

    import torch
    import torchcut  # noqa: F401  (from the tree: imported before the benchmark modules put ROOT first)

    assert Path(torchcut.__file__).resolve().is_relative_to(tree), torchcut.__file__
    sys.path.insert(1, str(ROOT / "benchmarks"))
    import grid
    import multilabel as ml

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        ts, out = [], None
        for _ in range(args.repeat):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return ts, out

    for name in args.cases.split(","):
        if name == "refine":
            _, image, probs = ml.refine_energy(4, 1024, 8)
            x, p = image.cuda(), probs.cuda()
            todo = [("refine 4 x 1024^2, 8 classes", lambda: torchcut.refine(x, p, lam=2.0, sigma=20.0), None)]
        elif name == "tsukuba":
            U, W, _ = ml.tsukuba_energy()
            U, W = U.cuda(), W.cuda()
            V = (1 - torch.eye(U.shape[0], dtype=torch.int64)).cuda()
            todo = [("tsukuba batched, per-edge Potts", lambda: torchcut.expansion(U, V, weights=W), None)]
        elif name.startswith("grid:"):
            todo = []
            for label, spec in _grid_specs(name[5:]):
                offs, items = grid.make_case(spec, "torchcut")
                g = torchcut.GridGraph(*grid.case_tensors(items, "cuda"), offs)
                todo.append((label, (lambda g=g: torchcut.maxflow(g)), "flow"))
        else:
            raise SystemExit(f"--cases: unknown case {name!r}")
        for label, fn, kind in todo:
            ts, out = timed(fn)
            kernels = _kernel_totals(fn) if args.profile else {}
            if kind == "flow":
                digest = [str(v) for v in out.flow_values.tolist()]
                extra = {k: out.stats.get(k) for k in ("global_relabels", "push_launches", "bfs_visits")}
            else:
                digest = [hashlib.sha1(out.cpu().numpy().tobytes()).hexdigest()]
                extra = {}
            print(json.dumps({"case": label, "times": ts, "digest": digest, "kernels": kernels, **extra}), flush=True)


def _kernel_totals(fn, top=10):
    """{kernel name: [launches, total device us]} of one call of ``fn`` under torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.count, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[2])
    return {k.split("<")[0].split("(")[0][:60]: [n, round(t, 1)] for k, n, t in rows[:top]}


def _write(args, samples, digests, extras, kernels, rounds, final=False):
    """The table (ab_trees.md, .json in --out) of the rounds so far: rewritten after every round, so that a
    run stopped by a time limit leaves the rounds it finished."""
    n = len(args.trees)
    names = [chr(ord("A") + i) for i in range(n)]
    lines = ["# A/B of source trees: " + ", ".join(f"{c} = `{t}`" for c, t in zip(names, args.trees)), "",
             f"Medians over {rounds} worker processes per tree x {args.repeat} calls, alternated; "
             "speed-up = A's median / the tree's median.", "",
             "| case | " + " | ".join(f"{c} ms" for c in names) + " | " + " | ".join(f"{c} speed-up" for c in names[1:])
             + " | " + " | ".join(f"{c} min" for c in names) + " | outputs equal | counters (A; ...) |",
             "|---|" + "---:|" * (3 * n - 1) + "---|---|"]
    rows = []
    for case in digests:
        ts = [samples[(case, i)] for i in range(n)]
        med = [statistics.median(t) for t in ts]
        eq = all(digests[case].get(i) == digests[case].get(0) for i in range(n))
        rows.append(dict(case=case, trees=args.trees, ms=[m * 1e3 for m in med], samples_ms=[[v * 1e3 for v in t] for t in ts],
                         equal=eq, counters=[extras[(case, i)] for i in range(n)]))
        lines.append(f"| {case} | " + " | ".join(f"{m * 1e3:.2f}" for m in med) + " | "
                     + " | ".join(f"{med[0] / m:.3f}x" for m in med[1:]) + " | "
                     + " | ".join(f"{min(t) * 1e3:.2f}" for t in ts) + f" | {eq} | "
                     + "; ".join(str(extras[(case, i)] or "") for i in range(n)) + " |")
    if kernels:
        lines += ["", "Kernel totals of one call (us, launches), torch.profiler:", "",
                  "| case | kernel | " + " | ".join(f"{c} us" for c in names) + " | "
                  + " | ".join(f"{c} launches" for c in names) + " |", "|---|---|" + "---:|" * (2 * n)]
        for case in digests:
            ks = [kernels.get((case, i), {}) for i in range(n)]
            for k in sorted(set().union(*ks), key=lambda k: -max(kk.get(k, [0, 0])[1] for kk in ks)):
                vals = [kk.get(k, ["-", "-"]) for kk in ks]
                lines.append(f"| {case} | `{k}` | " + " | ".join(str(v[1]) for v in vals) + " | "
                             + " | ".join(str(v[0]) for v in vals) + " |")
    text = "\n".join(lines) + "\n"
    if final:
        print(text)
    (args.out / "ab_trees.md").write_text(text)
    (args.out / "ab_trees.json").write_text(json.dumps(rows, indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", nargs="+", default=None, help="two or more source trees; the first is the base")
    ap.add_argument("--cases", default="refine,tsukuba")
    ap.add_argument("--rounds", type=int, default=4, help="worker processes per tree")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per case in each worker")
    ap.add_argument("--cache", default="/tmp/ab-trees-cache", help="build caches (one folder per tree)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/out/ab_trees"))
    ap.add_argument("--profile", action="store_true",
                    help="also each tree's kernel totals of one call per case (torch.profiler, first round)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    if args.trees is None or len(args.trees) < 2:
        ap.error("--trees: expected at least two source trees")
    if args.rounds % len(args.trees):
        print(f"warning: --rounds {args.rounds} is not a multiple of the {len(args.trees)} trees: "
              "positions in the rounds are not balanced", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    samples = {}  # (case, tree) -> times
    digests, extras, kernels = {}, {}, {}
    n = len(args.trees)
    for r in range(args.rounds):
        order = [(i + r) % n for i in range(n)]  # each tree takes each position once every n rounds
        for i in order:
            env = dict(os.environ, TORCHCUT_CACHE=f"{args.cache}/{i}")
            cmd = [sys.executable, __file__, "--worker", "--tree", args.trees[i], "--cases", args.cases,
                   "--repeat", str(args.repeat)] + (["--profile"] if args.profile and r == 0 else [])
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"worker {args.trees[i]} failed:\n{p.stderr[-3000:]}")
            for line in p.stdout.splitlines():
                if not line.startswith("{"):
                    continue
                row = json.loads(line)
                key = (row["case"], i)
                samples.setdefault(key, []).extend(row["times"])
                digests.setdefault(row["case"], {}).setdefault(i, row["digest"])
                extras[key] = {k: v for k, v in row.items() if k not in ("case", "times", "digest", "kernels")}
                if row["kernels"]:
                    kernels[key] = row["kernels"]
        print(f"round {r + 1}/{args.rounds} done", flush=True)
        _write(args, samples, digests, extras, kernels, r + 1)
    _write(args, samples, digests, extras, kernels, args.rounds, final=True)


if __name__ == "__main__":
    main()
