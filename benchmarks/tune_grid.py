"""Quick correctness smoke test and option sweep of the CUDA grid solver (GPU session helper).

``python benchmarks/tune_grid.py [--sweep JSON] [--cases ...] [--reps N]``: solves a few benchmark energies,
checks flows against each other over options and verifies them, and prints solve times (CUDA events) and
counters. The options of a sweep are timed round-robin (one solve of each option per round, ``--reps``
rounds after one warm-up each), so slow drift of the machine hits all of them alike; printed: median,
min and max in ms, and the counters of the median run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import grid as B  # noqa: E402

import torchcut  # noqa: E402


def graph_of(spec, energy="builtin"):
    offs, items = B.make_case(spec, energy)
    return torchcut.GridGraph(*B.case_tensors(items, "cuda"), offs)


def solve_ms(g, opts):
    """One solve of ``g`` with ``opts``: its time in ms (CUDA events, the device idle before) and result."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    r = torchcut.maxflow(g, **opts)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b), r


def cases():
    """The named cases of ``--cases``: spec dicts of grid.py (``B.make_case``)."""
    specs = {
        "512-4": dict(kind="2d", n=512, conn=4, batch=1, pic=0),
        "1024-4": dict(kind="2d", n=1024, conn=4, batch=1, pic=1),
        "1024-8": dict(kind="2d", n=1024, conn=8, batch=1, pic=1),
        "2048-4": dict(kind="2d", n=2048, conn=4, batch=1, pic=2),
        "64-6": dict(kind="3d", n=64, conn=6, batch=1, seed=2),
        "128-6": dict(kind="3d", n=128, conn=6, batch=1, seed=3),
        "256-6": dict(kind="3d", n=256, conn=6, batch=1, seed=4),
        "64-26": dict(kind="3d", n=64, conn=26, batch=1, seed=2),
        "128-26": dict(kind="3d", n=128, conn=26, batch=1, seed=3),
        "batch": dict(kind="2d", n=512, conn=4, batch=32, pic=0),
    }
    for spec in B.hard_cases():  # --family hard of grid.py, e.g. "hard-lowcontrast-1024-4"
        specs[f"hard-{spec['family']}-{spec['n']}-{spec['conn']}"] = spec
    return specs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", default="", help="JSON list of option dicts")
    ap.add_argument("--cases", default="1024-4,2048-4,128-6,batch",
                    help="comma-separated names: 512-4 ... batch, or hard-<family>-<n>-<conn> (grid.py --family hard)")
    ap.add_argument("--reps", type=int, default=3, help="timed rounds over the sweep")
    ap.add_argument("--verify-all", action="store_true", help="verify the certificate of every timed run too")
    ap.add_argument("--each", action="store_true", help="also print every timed run in order (ms, relabels, repairs, push launches; with option profile the BFS and push GPU ms)")
    ap.add_argument("--empty-cache", action="store_true",
                    help="release the caching allocator's free blocks before every timed solve (placement study)")
    ap.add_argument("--trace", action="store_true", help="after the timing, one solve with profile=2 per profiled option")
    ap.add_argument("--energy", choices=("builtin", "torchcut"), default="builtin",
                    help="the benchmark's own energy or the library's segmentation_graph (see grid.py)")
    args = ap.parse_args()
    specs = cases()
    sweep = json.loads(args.sweep) if args.sweep else [{}]
    for name in args.cases.split(","):
        t0 = time.perf_counter()
        g = graph_of(specs[name], args.energy)
        print(f"== {name}: {g} (built in {time.perf_counter() - t0:.1f} s)", flush=True)
        flows = None
        good = []
        for opts in sweep:  # warm-up and checks; an option that fails them is reported and left out
            try:
                r = torchcut.maxflow(g, **opts)
                ok = r.verify()
                f = r.flow_values.tolist()
            except Exception as exc:  # noqa: BLE001 - report and go on with the other options
                print(f"  FAILED {json.dumps(opts)}: {type(exc).__name__}: {exc}", flush=True)
                continue
            if flows is None:
                flows = f
            print(f"  check {json.dumps(opts):<50} verify={ok} same_flow={f == flows} flow={f[:1]}", flush=True)
            if ok and f == flows:
                good.append(opts)
            else:
                print(f"  FAILED {json.dumps(opts)}: wrong result", flush=True)
        runs = [[] for _ in good]
        for _ in range(args.reps):
            for k, opts in enumerate(good):
                if args.empty_cache:
                    r = None
                    torch.cuda.empty_cache()
                ms, r = solve_ms(g, opts)
                runs[k].append((ms, r.stats))
                if r.flow_values.tolist() != flows:
                    print(f"  MISMATCH {json.dumps(opts)}: flow {r.flow_values.tolist()[:1]}", flush=True)
                if args.verify_all:
                    try:
                        r.verify()
                    except Exception as exc:  # noqa: BLE001 - report every failing run
                        print(f"  VERIFY FAILED {json.dumps(opts)}: {exc}", flush=True)
        keys = ("global_relabels", "bfs_launches", "push_launches", "host_syncs", "bfs_us", "push_us", "bfs_visits",
                "bfs_depth", "push_visits", "push_visit_us", "push_rounds", "bfs_pop_us", "bfs_relax_us", "bfs_passes",
                "repairs", "chained_launches")
        for opts, rs in zip(good, runs):
            in_order = list(rs)
            rs.sort(key=lambda x: x[0])
            ms = statistics.median(x[0] for x in rs)
            st = {k: rs[len(rs) // 2][1].get(k) for k in keys if rs[len(rs) // 2][1].get(k)}
            print(f"  {json.dumps(opts):<50} median {ms:8.2f} ms  min {rs[0][0]:7.2f}  max {rs[-1][0]:7.2f}  {st}",
                  flush=True)
            if args.each:  # every run, in the order timed: time / relabels / repairs / push launches
                def run(t, s):
                    phases = f" bfs {s['bfs_us'] / 1000:.2f} push {s['push_us'] / 1000:.2f}" if s.get("bfs_us") else ""
                    return f"{t:.2f} ({s.get('global_relabels')}/{s.get('repairs')}/{s.get('push_launches')}{phases})"
                print("    runs in order: " + ", ".join(run(t, s) for t, s in in_order), flush=True)
        for opts in [o for o in good if args.trace and "profile" in o]:  # traced solves (profile=2, stderr)
            print(f"  trace {json.dumps(opts)}", flush=True)
            sys.stderr.flush()
            torchcut.maxflow(g, **{**opts, "profile": 2})
            torch.cuda.synchronize()
        del g
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
