"""The benchmark runner: product benchmarks of the current code, and the regression guard.

Suites (``--suite``): ``cpu`` (the compiled CPU solvers), ``gpu`` (the CUDA solvers), ``all`` (both;
the GPU part only where CUDA is available), ``dist`` (multi-GPU scaling, under ``torchrun``), ``e2e``
(the public calls end to end beside their solves and torchmaxflow: :mod:`benchmarks.e2e`).
Each case of :func:`benchmarks.cases.suite_cases` is built once (deterministic inputs, all before the
first timing), timed on torchcut (:mod:`benchmarks.worker`: median of ``--repeats`` calls after a
warm-up, CUDA synchronised), then on its peers where installed (:mod:`benchmarks.peers`, in child processes after
the torchcut part, each within ``--peer-budget`` seconds). Flow values of torchcut and the exact peers
must be equal (and equal to a DIMACS instance's published optimum where one lies beside it); any
difference makes the exit status 1. Writes ``OUT/<suite>.md`` and ``OUT/<suite>.json``, and
``OUT/startup.md`` (``startup-cpu.md`` on a CPU-only run; :mod:`benchmarks.startup`).

``--compare [REF ...]`` is the regression guard. With no REF it reads the references from
``benchmarks/references.txt`` (``--references FILE``): every accepted state of the solvers, one commit a
line (a line may name the devices whose guard it joins). Each REF (a commit, a tag, or the path of
another source tree) is checked out with ``git worktree add`` into a temporary folder and built in place
when it has a ``setup.py`` (else its extensions compile on first use). Every case of the suite runs on the current tree and on each
reference in worker processes, one per tree and round, the order rotating round by round (on the GPU
after one untimed worker of the current tree, ``--warm-worker``). The bar of a
case is the FASTEST reference that runs it: a case more than ``--threshold`` (5%) slower than that is
re-timed (``--retime-rounds`` more rounds of every tree, beside a second worker of the current tree as
the noise control) and then judged on all its rounds; it fails only if it is still slower than the
fastest reference by more than the threshold and by more than the two workers of one tree differed.
Exit status: 1 when a flow value differs from any reference's (or the current tree fails a case a
reference runs), 2 when a case is slower than its fastest reference, else 0.

    python -m benchmarks --suite cpu [--quick]
    python -m benchmarks --compare --suite cpu --quick          # against benchmarks/references.txt
    python -m benchmarks --compare 35fdd34 1a8b8c8 --suite gpu  # against these two only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import cases as C
from . import worker as W

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FAMILIES = ("2d", "batch", "3d", "hard", "stereo", "pipeline", "dimacs", "compat", "cudacuts")
REFERENCES = ROOT / "benchmarks" / "references.txt"
RUNNER_ONLY = ("compat", "cudacuts")  # not in --compare: not part of the API both trees share


# ---------------------------------------------------------------------------------------- options
def parse(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 ok, 1 values differ or a case failed, 2 (--compare) "
        "slower than the fastest reference beyond --threshold.",
    )
    ap.add_argument("--suite", choices=("cpu", "gpu", "all", "dist", "e2e"), default="cpu")
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds in all; for tests)")
    ap.add_argument("--only", default="", help="comma-separated substrings of case ids (e.g. '2d/,hard/thin')")
    ap.add_argument(
        "--families", default="", help=f"comma-separated families of {FAMILIES} (default: all but cudacuts)"
    )
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per case (default 5; --quick 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls per case before the timed ones")
    ap.add_argument(
        "--case-budget",
        type=float,
        default=30.0,
        help="seconds of timed calls per case: fewer repeats (at least 1) for slow cases",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peer-repeats", type=int, default=3)
    ap.add_argument(
        "--peer-budget",
        type=float,
        default=None,
        help="seconds per peer and case (default: cpu 60, gpu 20; killed past twice that)",
    )
    ap.add_argument(
        "--peer-max-nodes",
        type=float,
        default=None,
        help="skip peers above this many nodes (default: cpu none, gpu 5e6)",
    )
    ap.add_argument(
        "--peer-jobs",
        type=int,
        default=None,
        help="peer processes at once (default: 1 for cpu, a quarter of the cores for gpu)",
    )
    ap.add_argument(
        "--input-jobs",
        type=int,
        default=None,
        help="processes building case inputs ahead of the timing (default: 1 for cpu, a quarter of "
        "the cores for gpu and --compare)",
    )
    ap.add_argument(
        "--calls",
        default="",
        help="e2e: comma-separated calls among segment, refine, grabcut, expansion, compat (default: all)",
    )
    ap.add_argument("--sizes", default="", help="e2e: comma-separated 2D sizes (default 64-2048; --quick 64-256)")
    ap.add_argument(
        "--sizes3d", default=None, help="e2e: comma-separated 3D sizes, '' for none (default 64-256; --quick 64)"
    )
    ap.add_argument("--pictures", default="", help="e2e: astronaut, coffee or both (default both)")
    ap.add_argument("--devices", default="", help="e2e: cpu, cuda or cpu,cuda (default: cuda too where available)")
    ap.add_argument("--no-startup", action="store_true", help="leave out the start-up table (--quick does)")
    ap.add_argument(
        "--compare",
        metavar="REF",
        nargs="*",
        help="the regression guard: commits, tags or source trees to compare the current tree with "
        "(space or comma separated); none named: the lines of --references",
    )
    ap.add_argument(
        "--references",
        type=Path,
        default=REFERENCES,
        help="--compare: the file of references (default benchmarks/references.txt)",
    )
    ap.add_argument("--tree", type=Path, default=ROOT, help="the current tree (default: this checkout)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="--compare: rounds of one worker per tree (default: as many as trees, so each tree runs "
        "once in each position)",
    )
    ap.add_argument(
        "--retime-rounds",
        type=int,
        default=4,
        help="--compare: rounds of the re-timing of the cases past --threshold (0: none)",
    )
    ap.add_argument("--threshold", type=float, default=0.05, help="--compare: flag cases slower by more than this")
    ap.add_argument(
        "--warm-worker",
        choices=("auto", "on", "off"),
        default="auto",
        help="--compare: one untimed worker of the current tree before the first round (auto: on the GPU, "
        "where the first worker after the inputs are built measured 14%% slower)",
    )
    ap.add_argument("--build-jobs", type=int, default=os.cpu_count() or 1, help="MAX_JOBS of the in-place builds")
    ap.add_argument("--report", type=Path, help="--compare: also write the table (markdown) and a .json beside")
    args = ap.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    fams = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        ap.error(f"--families: expected names among {FAMILIES}, got {bad}")
    args.families = fams or [f for f in FAMILIES if f != "cudacuts"]
    return args


def select(suite, args):
    """The case specs of ``suite`` after ``--families`` and ``--only``."""
    specs = [s for s in C.suite_cases(suite, args.quick) if s["family"] in args.families]
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        specs = [s for s in specs if any(k in s["id"] for k in keys)]
    return specs


def _build_one(spec, path):
    np.savez(path, **C.build(spec))
    return path


def save_inputs(specs, folder: Path, jobs: int = 1):
    """Build every case's inputs into ``folder`` (``cases.json`` and ``<index>.npz``), ``jobs`` processes
    at once."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cases.json").write_text(json.dumps(specs))
    paths = [folder / f"{i}.npz" for i in range(len(specs))]
    if jobs <= 1:
        futures = None
    else:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))
        futures = [pool.submit(_build_one, s, p) for s, p in zip(specs, paths)]
    try:
        for i, spec in enumerate(specs):
            if futures is None:
                _build_one(spec, paths[i])
            else:
                futures[i].result()
    finally:
        if futures is not None:
            pool.shutdown(cancel_futures=True)


# ----------------------------------------------------------------------------------------- suites
def _device(suite):
    import torch

    if suite == "gpu":
        if not torch.cuda.is_available():
            raise SystemExit("--suite gpu: CUDA is not available here")
        return "cuda"
    return "cpu"


def _sol_value(spec):
    """The published optimum of a DIMACS case (a ``.sol`` file beside the instance), or None."""
    if spec["kind"] != "dimacs":
        return None
    p = C.data_dir() / "maxflow" / spec["params"]["path"]
    sol = p.parent / (p.name.split(".max")[0] + ".sol")
    if not sol.is_file():
        return None
    for line in sol.read_text().splitlines():
        if line.startswith("s "):
            return [int(line.split()[1])]
    return None


def run_peers(jobs, args, specs, folder):
    """Run the peer jobs ``[(case index, peer)]`` in child processes; ``{(index, peer): result}``."""
    ctx = mp.get_context("spawn")
    todo, running, out = list(jobs), {}, {}
    width = args.peer_jobs
    while todo or running:
        while todo and len(running) < width:
            i, peer = todo.pop(0)
            q = ctx.Queue()
            p = ctx.Process(
                target=_peer_entry,
                args=(specs[i], str(folder / f"{i}.npz"), peer, args.peer_repeats, args.peer_budget, q),
                daemon=True,
            )
            p.start()
            running[(i, peer)] = (p, q, time.perf_counter())
        time.sleep(0.05)
        for key, (p, q, t0) in list(running.items()):
            if not q.empty():
                out[key] = q.get()
                p.join(5)
                del running[key]
            elif not p.is_alive():
                out[key] = {"peer": key[1], "skipped": f"worker died (exit {p.exitcode})"}
                del running[key]
            elif time.perf_counter() - t0 > 2 * args.peer_budget + 30:
                p.kill()
                out[key] = {"peer": key[1], "skipped": f"over the budget ({args.peer_budget:.0f} s)"}
                del running[key]
            if key in out:
                r = out[key]
                msg = f"{r['median'] * 1e3:.1f} ms" if "median" in r else r["skipped"]
                print(f"  peer {key[1]:10s} {specs[key[0]]['id']}: {msg}", flush=True)
    return out


def _peer_entry(spec, npz, peer, repeats, budget, q):
    from . import peers

    peers.peer_job(spec, npz, peer, repeats, budget, q)


def run_suite(suite, args) -> int:
    device = _device(suite)
    specs = select(suite, args)
    if args.peer_budget is None:
        args.peer_budget = 60.0 if suite == "cpu" else 20.0
    if args.peer_max_nodes is None:
        args.peer_max_nodes = 5e6 if suite == "gpu" else float("inf")
    quarter = max(1, (os.cpu_count() or 4) // 4)
    if args.peer_jobs is None:
        args.peer_jobs = 1 if suite == "cpu" else quarter
    jobs = args.input_jobs or (1 if suite == "cpu" else quarter)
    print(
        f"# suite {suite} on {device}: {len(specs)} cases, {args.repeats} timed calls after {args.warmup} warm-up(s)",
        flush=True,
    )
    t_start = time.perf_counter()
    rows, status = [], 0
    with tempfile.TemporaryDirectory(prefix="torchcut-bench-") as tmp:
        folder = Path(tmp)

        # Every input is built before the first case is timed: building them in processes while cases
        # ran (the GPU suite's 8 builders) slowed the host loop of the solves it overlapped up to 3.6x.
        t_build = time.perf_counter()
        save_inputs(specs, folder, jobs=jobs)
        print(f"# inputs of {len(specs)} cases built in {time.perf_counter() - t_build:.1f} s", flush=True)
        for i, spec in enumerate(specs):
            t0 = time.perf_counter()
            res = W.run_case(spec, W.load_inputs(folder, i), device, args.repeats, args.warmup, args.case_budget)
            rows.append(dict(spec=spec, torchcut=res, peers={}, run_s=time.perf_counter() - t0))
            msg = f"{res['median'] * 1e3:9.2f} ms" if "median" in res else res.get("error") or res.get("unavailable")
            print(f"{spec['id']:52s} {msg}  value {_short(res.get('value'))}", flush=True)
            if device == "cuda":
                import torch

                torch.cuda.empty_cache()
        if not args.no_peers:
            jobs = []
            for i, spec in enumerate(specs):
                for peer in spec.get("peers", []):
                    nodes = spec.get("nodes") or 0
                    if nodes > args.peer_max_nodes:
                        rows[i]["peers"][peer] = {"peer": peer, "skipped": f"above {args.peer_max_nodes:.0e} nodes"}
                    else:
                        jobs.append((i, peer))
            for (i, peer), r in run_peers(jobs, args, specs, folder).items():
                rows[i]["peers"][peer] = r
    if "compat" in args.families and not args.only:
        rows += compat_rows(device, args)
    if "cudacuts" in args.families and device == "cuda":
        rows += cudacuts_rows(args)
    for row in rows:
        row["check"] = check(row)
        if row["check"].startswith(("MISMATCH", "FAILED")):
            status = 1
    meta = _meta(suite, device, args, time.perf_counter() - t_start)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{suite}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    md = render(meta, rows)
    (args.out / f"{suite}.md").write_text(md)
    print(md)
    print(f"# wrote {args.out / (suite + '.md')} and .json ({meta['seconds']:.0f} s)")
    return status


def check(row) -> str:
    """The row's verdict: ``ok`` (all values equal), ``MISMATCH ...``, ``FAILED ...``, or a note."""
    res, spec = row["torchcut"], row["spec"]
    if "error" in res:
        return f"FAILED: {res['error']}"
    if "unavailable" in res:
        return f"not run: {res['unavailable']}"
    sol = _sol_value(spec)
    if sol is not None and res["value"] != sol:
        return f"MISMATCH: published optimum {sol[0]}"
    if not spec.get("exact"):
        return "ok (approximate peers: values side by side)" if row["peers"] else "ok"
    for peer, r in row["peers"].items():
        if "value" in r and r["value"] != res["value"]:
            return f"MISMATCH: {peer} {_short(r['value'])}"
    return "ok" + (" (= published optimum)" if sol is not None else "")


def compat_rows(device, args):
    """``torchcut.compat.pymaxflow`` running a PyMaxflow script against PyMaxflow itself."""
    from . import peers

    if peers.missing("pymaxflow"):
        return []
    from . import compat as CP

    n = 128 if args.quick else 1024
    out = []
    for integer, moore in ((False, False), (True, True)):
        img = CP.synthetic((n, n), seed=1)
        label = f"compat script {n}^2 " + ("8-conn Graph[int]" if moore else "4-conn Graph[float]")
        spec = dict(
            id=f"compat/{n}-{'int8c' if moore else 'float4c'}",
            family="compat",
            kind="compat",
            label=label,
            nodes=n * n,
            exact=integer,
            peers=["pymaxflow"],
        )
        try:
            r = CP.run(label, img, integer, moore, [device], args.repeats)
        except AssertionError as exc:
            out.append(dict(spec=spec, torchcut={"error": str(exc)}, peers={}))
            continue
        mine = f"torchcut-{device}"
        val = lambda v: [int(v)] if integer else round(v, 3)
        out.append(
            dict(
                spec=spec,
                torchcut={"median": r["median_s"][mine], "value": val(r["flows"][mine])},
                peers={
                    "pymaxflow": {
                        "median": r["median_s"]["pymaxflow"],
                        "value": val(r["flows"]["pymaxflow"]),
                        "runs": r["runs"],
                    }
                },
            )
        )
        print(
            f"{spec['id']:52s} {r['median_s'][mine] * 1e3:9.2f} ms  PyMaxflow {r['median_s']['pymaxflow'] * 1e3:.1f} ms",
            flush=True,
        )
    return out


def cudacuts_rows(args):
    """CUDA Cuts (benchmarks/cudacuts.py, approximate) beside torchcut on the hard 2D cases up to 512^2."""
    from types import SimpleNamespace

    from . import cudacuts as CC

    try:
        CC.load_extension()
    except Exception as exc:  # noqa: BLE001
        print(f"# CUDA Cuts left out: {exc}")
        return []
    ns = SimpleNamespace(repeats=args.repeats, variants=["stochastic"], no_converge=True, gr_every=0, bfs_chunk=16)
    out = []
    for c in CC.case_list("hard", quick=True):
        row = CC.run_case(c, ns)
        v = row["variants"]["stochastic"]
        spec = dict(
            id=f"cudacuts/{c['name'].replace(' ', '-')}-{c['conn']}c",
            family="cudacuts",
            kind="grid",
            label=c["name"],
            conn=c["conn"],
            nodes=row["nodes"],
            exact=False,
            peers=["cudacuts"],
        )
        out.append(
            dict(
                spec=spec,
                torchcut={"median": row["tc_solve"], "value": {"energy": row["optimum"]}},
                peers={
                    "cudacuts": {"median": v["time"], "value": {"energy": v["energy"]}, "note": f"gap {v['gap']:.2f}%"}
                },
            )
        )
    return out


def _meta(suite, device, args, seconds):
    import torch

    dev = torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine())
    return {
        "suite": suite,
        "device": dev,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "quick": args.quick,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "case_budget": args.case_budget,
        "commit": _git(["rev-parse", "--short", "HEAD"], ROOT),
        "dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"], ROOT)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": seconds,
    }


def _git(cmd, cwd):
    try:
        return subprocess.run(["git", *cmd], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _short(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        if len(v) == 1:
            return str(v[0])
        return f"sum {sum(v)} ({len(v)} items)" if all(isinstance(a, int) for a in v) else str(v)
    if isinstance(v, dict):
        parts = []
        for k in ("energy", "iou", "accuracy", "foreground"):
            if k in v:
                x = v[k]
                if isinstance(x, list):
                    x = f"mean {statistics.mean(x):.4f}"
                elif isinstance(x, float):
                    x = f"{x:.6g}"
                parts.append(f"{k} {x}")
        return ", ".join(parts) or str(v)
    return str(v)


def _ms(s) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.1f}" if s * 1e3 >= 10 else f"{s * 1e3:.2f}"


def render(meta, rows) -> str:
    """The suite's markdown table."""
    lines = [
        f"# torchcut benchmarks, suite `{meta['suite']}`",
        "",
        f"{meta['date']}; {meta['device']}, {meta['cores']} cores, torch {meta['torch']} "
        f"({meta['threads']} threads); commit {meta['commit']}{' (modified)' if meta['dirty'] else ''}"
        f"{'; quick sizes' if meta['quick'] else ''}. torchcut: median of {meta['repeats']} calls after "
        f"{meta['warmup']} warm-up(s) (fewer when they would pass {meta['case_budget']:.0f} s; *runs*), CUDA "
        "synchronised; graph build from arrays on the device + solve + mask "
        "(pipelines: the whole call). Peers: build + solve, median of up to 3 calls; the fastest installed "
        "peer is shown, the others in the notes. Exact cases: flow values required equal (sums over "
        "batch items / moves shown); approximate peers: energies or IoU side by side.",
        "",
        "| family | case | conn | nodes | torchcut ms | fastest peer | peer ms | peer / torchcut | torchcut value "
        "| peer value | check | notes |",
        "|---|---|---:|---:|---:|---|---:|---:|---|---|---|---|",
    ]
    for r in rows:
        s, res = r["spec"], r["torchcut"]
        timed = {p: v for p, v in r["peers"].items() if "median" in v}
        best = min(timed, key=lambda p: timed[p]["median"]) if timed else None
        notes = [f"{p} {_ms(v['median'])} ms" for p, v in timed.items() if p != best]
        notes += [f"{p}: {v['skipped']}" for p, v in r["peers"].items() if "skipped" in v]
        notes += [v["note"] for v in r["peers"].values() if "note" in v]
        if not s.get("peers"):
            notes.append("no peer")
        stats = res.get("stats") or {}
        if stats.get("algorithm") or stats.get("backend"):
            notes.append("/".join(str(stats[k]) for k in ("backend", "algorithm") if stats.get(k)))
        t = res.get("median")
        pb = timed[best]["median"] if best else None
        lines.append(
            f"| {s['family']} | {s['label']} | {s.get('conn', '')} | {s['nodes']:,} | "
            if s.get("nodes")
            else f"| {s['family']} | {s['label']} | {s.get('conn', '')} | - | "
        )
        runs = len(res.get("times") or [])
        tcell = _ms(t) + (f" ({runs} runs)" if res.get("times") is not None and runs < meta["repeats"] else "")
        lines[-1] += (
            f"{tcell} | {best or '-'} | {_ms(pb)} | {f'{pb / t:.1f}x' if pb and t else '-'} | "
            f"{_short(res.get('value'))} | {_short(timed[best]['value']) if best else '-'} | {r['check']} | "
            f"{'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- compare
def _cache_root() -> Path:
    return Path(os.environ.get("TORCHCUT_CACHE", Path.home() / ".cache" / "torchcut"))


def tree_env(tree: Path, cache: Path) -> dict:
    """The environment of a worker for ``tree``: its torchcut first on the path, its own cache."""
    env = dict(os.environ)
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not (Path(p) / "torchcut").is_dir()]
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *keep])
    env["TORCHCUT_CACHE"] = str(cache)
    return env


def build_tree(tree: Path, jobs: int) -> None:
    """``python setup.py build_ext --inplace`` in ``tree`` when it has a setup.py (else: JIT on first use)."""
    if not (tree / "setup.py").is_file():
        print(f"# {tree}: no setup.py, its extensions compile on first use", flush=True)
        return
    t0 = time.perf_counter()
    env = dict(os.environ, MAX_JOBS=str(jobs))
    r = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"build of {tree} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    print(f"# built {tree} in place ({time.perf_counter() - t0:.0f} s)", flush=True)


def clear_stale_locks(cache: Path) -> list[Path]:
    """Remove the build locks in a reference tree's private cache (``<cache>/<extension>/lock``).

    Only a compare uses that cache, and before its first worker starts nothing is building there: a lock
    found then was left by a compare killed while the reference compiled its extensions on first use,
    and torch's extension loader would wait for it forever. Returns the paths removed."""
    gone = []
    if cache.is_dir():
        for lock in sorted(cache.glob("*/lock")):
            lock.unlink(missing_ok=True)
            gone.append(lock)
            print(f"# removed a build lock left by an interrupted run: {lock}", flush=True)
    return gone


def warm_up(trees, caches, device: str) -> None:
    """Compile the trees that build on first use (no setup.py), all at once, before any round: each
    solves a 2x2 grid on ``device`` in its own process with its own cache, so the rounds time no compile
    and the compiles share the cores instead of running one after another."""
    code = (
        "import torch, torchcut; g = torchcut.GridGraph(torch.tensor([[3, 0], [0, 0]]), "
        "torch.tensor([[0, 0], [0, 2]]), torch.ones(2, 2, 2, dtype=torch.int64), [(0, 1), (1, 0)]); "
        f"g = g.to({device!r}) if hasattr(g, 'to') else g; torchcut.maxflow(g)"
    )
    procs = [
        (tree, subprocess.Popen([sys.executable, "-c", code], env=tree_env(tree, caches[tree]), cwd=tree))
        for _, tree in trees
        if not (tree / "setup.py").is_file()
    ]
    for tree, p in procs:
        if p.wait() != 0:
            print(f"# warm-up of {tree} failed (exit {p.returncode}); its first worker compiles", flush=True)


# The guard times each case for at least this many seconds per round (up to 25 times its repeats): cases
# of a few milliseconds then get the median of tens of calls, where 3 calls left two workers of one tree
# 8-17% apart on a 2-core machine.
GUARD_MIN_TIME = 0.05


def run_worker(
    tree: Path,
    cache: Path,
    folder: Path,
    device: str,
    repeats: int,
    warmup: int,
    out: Path,
    budget: float | None = None,
) -> dict:
    """One worker process on ``tree`` over every saved case; its parsed JSON output."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve().parent / "worker.py"),
        "--cases",
        str(folder),
        "--device",
        device,
        "--repeats",
        str(repeats),
        "--warmup",
        str(warmup),
        "--out",
        str(out),
    ]
    if budget:
        cmd += ["--budget", str(budget)]
    cmd += ["--min-time", str(GUARD_MIN_TIME)]
    r = subprocess.run(cmd, env=tree_env(tree, cache), cwd=folder)
    if r.returncode != 0 or not out.is_file():
        raise SystemExit(f"worker on {tree} failed (exit {r.returncode})")
    got = json.loads(out.read_text())
    if Path(got["torchcut"]).resolve() != (tree / "torchcut").resolve():
        raise SystemExit(f"the worker for {tree} imported torchcut from {got['torchcut']}")
    return got


DEVICES = ("cpu", "cuda")


def read_references(path: Path, device: str | None = None) -> list[tuple[str, str]]:
    """The references of the guard: ``[(ref, comment)]`` from ``path``, in file order.

    One reference a line, ``REF [DEVICE ...]  # what it holds``: a commit (or tag) of this repository or
    the path of another source tree, optionally the devices ("cpu", "cuda") whose guard it joins (default
    every device), then ``#`` and a short comment. With ``device``, the lines that name other devices only
    are left out. Blank lines and lines starting with ``#`` are skipped. Raises ValueError naming the file
    and line of a malformed entry, or a file with none.
    """
    out, lines = [], 0
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        head, sep, comment = text.partition("#")
        words = head.split()
        if not words or not sep or not comment.strip() or any(w not in DEVICES for w in words[1:]):
            raise ValueError(
                f"{path}:{n}: expected 'REF [DEVICE ...]  # what it holds' (one commit or tree, devices among "
                f"{', '.join(DEVICES)}, then a comment), got {line.strip()!r}"
            )
        lines += 1
        if device is None or len(words) == 1 or device in words[1:]:
            out.append((words[0], comment.strip()))
    if not lines:
        raise ValueError(f"{path}: expected at least one reference, found none")
    return out


def reference_list(args, device: str | None = None) -> list[tuple[str, str]]:
    """``--compare``'s references: those named on the command line (comma or space separated), else the
    lines of ``--references`` (default ``benchmarks/references.txt``) that join ``device``'s guard.
    Repeats are dropped."""
    named = [r for item in args.compare for r in item.split(",") if r.strip()]
    if named:
        refs = [(r.strip(), "named on the command line") for r in named]
    else:
        try:
            refs = read_references(args.references, device)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--references: {exc}") from exc
    seen, out = set(), []
    for ref, note in refs:
        if ref not in seen:
            seen.add(ref)
            out.append((ref, note))
    return out


def _ok(results) -> bool:
    return all("median" in r for r in results)


def _why(results) -> str:
    r = next(r for r in results if "median" not in r)
    return r.get("unavailable") or f"fails: {r.get('error')}"


def summarize(specs, rounds_cur, rounds_refs, threshold, control=None):
    """Per-case comparison of worker results against every reference (lists of per-round result lists,
    in ``specs`` order).

    ``rounds_refs`` maps each reference's label to its rounds. A case's time in a tree is the median
    over the rounds of the per-round medians; the bar is the fastest reference that runs the case.
    ``control`` (optional) maps a case id to the noise the re-timing measured for it: the larger ratio
    of two workers of one tree (>= 1); a case slower than the bar by more than ``threshold`` but not by
    more than that noise is called within noise, not slower.

    Returns ``(rows, status)``: each row has ``id``, ``cur``, ``refs`` (label -> time or None where the
    reference does not run the case), ``fastest`` (its label), ``ref`` (its time), ``ratio``
    (cur / ref), ``verdict``; status 1 when a value differs from any reference's in an exact case or the
    current tree fails a case a reference runs, else 2 when a case is slower than the fastest reference
    by more than ``threshold``, else 0.
    """
    rows, fail, slow = [], False, False
    for i, spec in enumerate(specs):
        cur = [r[i] for r in rounds_cur]
        refs = {label: [r[i] for r in rr] for label, rr in rounds_refs.items()}
        row = {
            "id": spec["id"],
            "cur": None,
            "refs": {label: None for label in refs},
            "fastest": None,
            "ref": None,
            "ratio": None,
        }
        running = {label: rr for label, rr in refs.items() if rr and _ok(rr)}
        missing = [f"{label}: {_why(rr)}" for label, rr in refs.items() if rr and not _ok(rr)]
        if not running:
            row["verdict"] = "skipped: no reference runs it (" + "; ".join(missing) + ")"
            if not _ok(cur) and any("error" in r for r in cur):
                row["verdict"] += f"; current fails too: {next(r for r in cur if 'error' in r)['error']}"
            rows.append(row)
            continue
        if not _ok(cur):
            bad = next(r for r in cur if "median" not in r)
            row["verdict"] = f"FAILED: current tree: {bad.get('error') or bad.get('unavailable')}"
            fail = True
            rows.append(row)
            continue
        row["cur"] = statistics.median(r["median"] for r in cur)
        for label, rr in running.items():
            row["refs"][label] = statistics.median(r["median"] for r in rr)
        row["fastest"] = min(running, key=lambda label: row["refs"][label])
        row["ref"] = row["refs"][row["fastest"]]
        row["ratio"] = row["cur"] / row["ref"] if row["ref"] > 0 else float("inf")
        row["value_cur"] = cur[0]["value"]
        row["value_ref"] = running[row["fastest"]][0]["value"]
        mine = {json.dumps(r["value"], sort_keys=True) for r in cur}
        differ = [
            label
            for label, rr in running.items()
            if {json.dumps(r["value"], sort_keys=True) for r in rr} | mine != mine or len(mine) > 1
        ]
        notes = [f"not in {m}" for m in missing]
        if differ:
            other = running[differ[0]][0]["value"]
            if spec.get("exact"):
                row["verdict"] = f"VALUES DIFFER: current {_short(cur[0]['value'])}, {differ[0]} {_short(other)}" + (
                    f" (also {', '.join(differ[1:])})" if differ[1:] else ""
                )
                fail = True
                rows.append(row)
                continue
            notes.append(
                f"output changed (not checked: depends on defaults): current {_short(cur[0]['value'])}, "
                f"{differ[0]} {_short(other)}"
            )
        noise = (control or {}).get(spec["id"])
        if row["ratio"] > 1 + threshold and noise is not None and row["ratio"] <= noise:
            verdict = (
                f"within noise: {100 * (row['ratio'] - 1):.0f}% over {row['fastest']}, two workers of one "
                f"tree differed by {100 * (noise - 1):.0f}%"
            )
        elif row["ratio"] > 1 + threshold:
            verdict = f"SLOWER by {100 * (row['ratio'] - 1):.0f}% than {row['fastest']}"
            slow = True
        else:
            verdict = "ok"
        row["verdict"] = "; ".join([verdict, *notes])
        rows.append(row)
    return rows, (1 if fail else 2 if slow else 0)


def render_compare(rows, label_cur, refs, meta) -> str:
    """The guard's markdown table; ``refs``: ``[(label, description)]``."""
    labels = [label for label, _ in refs]
    lines = [f"# Comparison: current ({label_cur}) against the fastest of {len(refs)} reference(s)", ""]
    lines += [f"- {label}: {desc}" for label, desc in refs]
    lines += [
        "",
        f"{meta}",
        "",
        "| case | current ms | "
        + " | ".join(f"{label} ms" for label in labels)
        + " | fastest | current / fastest | verdict |",
        "|---|---:|" + "---:|" * len(labels) + "---|---:|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        cells = " | ".join(_ms(r["refs"].get(label)) for label in labels)
        retimed = f" (re-timed: {r['retimed']})" if r.get("retimed") else ""
        lines.append(
            f"| {r['id']} | {_ms(r['cur'])} | {cells} | {r['fastest'] or '-'} | {ratio} | {r['verdict']}{retimed} |"
        )
    timed = [r["ratio"] for r in rows if r["ratio"]]
    if timed:
        gm = float(np.exp(np.mean(np.log(timed))))
        lines += ["", f"Geometric mean of the ratios over {len(timed)} cases: {gm:.3f}."]
    return "\n".join(lines) + "\n"


def ref_key(ref: str, cur_tree: Path) -> str:
    """What a reference names: the resolved path of a folder, else the full hash of a commit of
    ``cur_tree``; raises SystemExit for neither."""
    if Path(ref).is_dir():
        return str(Path(ref).resolve())
    sha = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cur_tree)
    if not sha:
        raise SystemExit(f"--compare: expected a commit of {cur_tree} or a folder, got {ref!r}")
    return sha


def resolve_ref(ref: str, cur_tree: Path, where: Path) -> tuple[Path, str, bool]:
    """``(tree, label, added)`` for a reference: a folder as it is, else a commit checked out with
    ``git worktree add`` into ``where`` (``added`` True: remove it afterwards)."""
    key = ref_key(ref, cur_tree)
    if Path(ref).is_dir():
        return Path(key), key, False
    sha = key
    r = subprocess.run(
        ["git", "worktree", "add", "--detach", str(where), sha], cwd=cur_tree, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"git worktree add failed: {r.stderr.strip()}")
    return where, ref if sha.startswith(ref) else f"{ref} = {sha[:10]}", True


def time_rounds(trees, caches, folder, device, rounds, args, worker, tmp, tag="round"):
    """``rounds`` rounds of one worker per tree over the cases in ``folder``; the order rotates by one
    tree each round, so with as many rounds as trees each tree runs once in each position (the first
    worker of a round has measured ~5% faster). ``trees``: ``[(name, path)]``. Returns
    ``{name: [per-round result lists]}``."""
    got = {name: [] for name, _ in trees}
    for k in range(rounds):
        shift = k % len(trees)
        for name, tree in trees[shift:] + trees[:shift]:
            t1 = time.perf_counter()
            print(f"# {tag} {k + 1}/{rounds}: {name} ({tree})", flush=True)
            res = worker(
                tree,
                caches[tree],
                folder,
                device,
                args.repeats,
                args.warmup,
                tmp / f"{tag}{k}-{_safe(name)}.json",
                args.case_budget / max(1, rounds),
            )
            got[name].append(res["results"])
            print(f"#   {time.perf_counter() - t1:.0f} s", flush=True)
    return got


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "tree"


def _subset(folder: Path, specs, index, dest: Path) -> Path:
    """A case folder holding the cases ``index`` of ``folder`` (inputs linked or copied, not rebuilt)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "cases.json").write_text(json.dumps([specs[i] for i in index]))
    for j, i in enumerate(index):
        try:
            os.link(folder / f"{i}.npz", dest / f"{j}.npz")
        except OSError:
            shutil.copyfile(folder / f"{i}.npz", dest / f"{j}.npz")
    return dest


def _spread(a, b) -> float:
    """Two workers of one tree on one case: the larger ratio of their medians over the rounds."""
    ma, mb = statistics.median(r["median"] for r in a), statistics.median(r["median"] for r in b)
    return max(ma / mb, mb / ma) if min(ma, mb) > 0 else float("inf")


def compare(args, worker=run_worker) -> int:
    """The regression guard (see the module docstring). ``worker`` runs one worker (replaceable in tests)."""
    suite = "cpu" if args.suite == "all" else args.suite
    if args.suite == "all":
        import torch

        suite = "gpu" if torch.cuda.is_available() else "cpu"
    if suite == "e2e":
        raise SystemExit("--compare: expected --suite cpu or gpu (the e2e suite has no guard), got e2e")
    device = _device(suite)
    args.families = [f for f in args.families if f not in RUNNER_ONLY]
    specs = select(suite, args)
    cur_tree = args.tree.resolve()
    refs = reference_list(args, device)
    if not refs:
        raise SystemExit(f"--references: no reference joins the {device} guard in {args.references}")
    tmp = Path(tempfile.mkdtemp(prefix="torchcut-compare-"))
    added = []
    try:
        trees, described, keys = [("current", cur_tree)], [], set()
        for n, (ref, note) in enumerate(refs, 1):
            key = ref_key(ref, cur_tree)
            if key in keys:  # two names of one commit or folder: timed once
                continue
            keys.add(key)
            tree, label, was_added = resolve_ref(ref, cur_tree, tmp / f"ref{n}")
            if was_added:
                added.append(tree)
            trees.append((label, tree))
            described.append((label, note))
        label_cur = f"{cur_tree} at {_git(['rev-parse', '--short', 'HEAD'], cur_tree) or '?'}"
        caches = {}
        for _, tree in trees:
            if tree in caches:
                continue
            build_tree(tree, args.build_jobs)
            # a reference's private cache, named by its commit and its folder (a folder inside another
            # checkout reports that checkout's HEAD, so the commit alone could give two trees one cache)
            key = (_git(["rev-parse", "HEAD"], tree) or "") + str(tree)
            caches[tree] = (
                _cache_root()
                if tree == cur_tree
                else Path(str(_cache_root()) + "-ref-" + hashlib.sha1(key.encode()).hexdigest()[:10])
            )
            if tree != cur_tree:
                clear_stale_locks(caches[tree])
        warm_up(trees, caches, device)
        rounds = args.rounds or len(trees)
        print(
            f"# compare on {device}: {len(specs)} cases, {len(trees)} trees, {rounds} rounds x {args.repeats} "
            f"timed calls (+{args.warmup} warm-up) per tree; building inputs",
            flush=True,
        )
        t0 = time.perf_counter()
        save_inputs(specs, tmp / "cases", jobs=args.input_jobs or max(1, (os.cpu_count() or 4) // 4))
        print(f"# inputs built ({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.warm_worker == "on" or (args.warm_worker == "auto" and device == "cuda"):
            # The first worker after the inputs are built runs cold: on one H100 the current tree measured
            # 14% slower in that position than later in the same run (median over 29 cases), which a
            # single round charges to it alone. One untimed pass takes that position.
            t1 = time.perf_counter()
            print(f"# warm-up worker (untimed): current ({cur_tree})", flush=True)
            worker(cur_tree, caches[cur_tree], tmp / "cases", device, 1, args.warmup, tmp / "warm-current.json", None)
            print(f"#   {time.perf_counter() - t1:.0f} s", flush=True)
        got = time_rounds(trees, caches, tmp / "cases", device, rounds, args, worker, tmp)
        rows, status = summarize(specs, got["current"], {name: got[name] for name, _ in trees[1:]}, args.threshold)
        flagged = [i for i, r in enumerate(rows) if r["verdict"].startswith("SLOWER")]
        if flagged and args.retime_rounds > 0:
            # Re-timing: the flagged cases again, more rounds, with a second worker of the current tree as
            # the noise control; the verdict then takes every round of both passes.
            print(
                f"# re-timing {len(flagged)} case(s) slower than the fastest reference: {args.retime_rounds} "
                "rounds with a noise control",
                flush=True,
            )
            sub = _subset(tmp / "cases", specs, flagged, tmp / "retime")
            again = time_rounds(
                trees + [("control", cur_tree)],
                caches,
                sub,
                device,
                args.retime_rounds,
                args,
                worker,
                tmp,
                tag="retime",
            )
            sub_specs = [specs[i] for i in flagged]
            control = {}
            for j, spec in enumerate(sub_specs):
                a, b = [r[j] for r in again["current"]], [r[j] for r in again["control"]]
                if _ok(a) and _ok(b):
                    control[spec["id"]] = _spread(a, b)

            def both(name):  # every round of both passes, over the flagged cases
                return [[r[i] for i in flagged] for r in got[name]] + again[name]

            rows_again, _ = summarize(
                sub_specs, both("current"), {name: both(name) for name, _ in trees[1:]}, args.threshold, control
            )
            for j, i in enumerate(flagged):
                rows_again[j]["retimed"] = (
                    f"{rounds}+{args.retime_rounds} rounds, control {control.get(specs[i]['id'], float('nan')):.3f}"
                )
                rows[i] = rows_again[j]
            status = max(
                [
                    1
                    if r["verdict"].startswith(("FAILED", "VALUES"))
                    else 2
                    if r["verdict"].startswith("SLOWER")
                    else 0
                    for r in rows
                ]
                or [0]
            )
        meta = (
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, device {device}, {rounds} rounds (the order "
            f"of the workers rotates), each case: median of {args.repeats} calls (more, up to {25 * args.repeats}, "
            f"until they add up to {1e3 * GUARD_MIN_TIME:.0f} ms) after {args.warmup} warm-up(s) "
            f"per round, then the median over rounds; the bar is the fastest reference per case; threshold "
            f"{100 * args.threshold:.0f}%; cases past it re-timed with {args.retime_rounds} more rounds and a "
            f"second worker of the current tree as the noise control."
        )
        md = render_compare(rows, label_cur, described, meta)
        print(md)
        if args.report:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(md)
            args.report.with_suffix(".json").write_text(
                json.dumps({"meta": meta, "references": described, "rows": rows}, indent=1)
            )
        print(
            {
                0: "# no regression",
                1: "# FAILED: values differ or the current tree fails a case",
                2: f"# slower than the fastest reference beyond {100 * args.threshold:.0f}% in some case",
            }[status]
        )
        return status
    finally:
        for tree in added:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=cur_tree, capture_output=True)
        if added:
            subprocess.run(["git", "worktree", "prune"], cwd=cur_tree, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------- main
def run_dist(args) -> int:
    """Multi-GPU scaling (benchmarks/distributed.py), under torchrun only."""
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("--suite dist runs under torchrun: torchrun --nproc-per-node N -m benchmarks --suite dist")
    try:
        from . import distributed
    except ImportError as exc:
        raise SystemExit(f"--suite dist: benchmarks/distributed.py is not available ({exc})") from exc
    return int(distributed.main(out=args.out, quick=args.quick, repeats=args.repeats) or 0)


def main(argv=None) -> int:
    args = parse(argv)
    if args.suite == "dist":
        return run_dist(args)
    if args.suite == "e2e" and args.compare is None:
        from . import e2e

        return e2e.run_suite(args)
    if args.compare is not None:
        return compare(args)
    import torch

    suites = ["cpu", "gpu"] if args.suite == "all" else [args.suite]
    if args.suite == "all" and not torch.cuda.is_available():
        print("# --suite all: no CUDA here, the gpu suite is left out")
        suites = ["cpu"]
    status = 0
    for s in suites:
        status = max(status, run_suite(s, args))
    if not args.no_startup and not args.quick:
        from . import startup

        # a CPU-only run keeps its own file: startup.md is the table of both devices, from a GPU host
        name = "startup.md" if "gpu" in suites else "startup-cpu.md"
        startup.main(["--out", str(args.out / name)] + ([] if "gpu" in suites else ["--no-cuda"]))
    return status
