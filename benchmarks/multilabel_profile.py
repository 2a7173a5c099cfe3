"""Where the time of the multi-label expansions goes: a timeline of the rounds, host against device.

Cases (energies as ``benchmarks/multilabel.py`` builds them):

* ``tsukuba``: Tsukuba stereo, 16 labels, contrast-sensitive Potts (the ``tsukuba`` row of the benchmark);
* ``refine``: :func:`torchcut.refine` on 4 x 1024^2 with 8 classes (``--refine-batch``, ``--refine-size``).

Each is run with the sequential and the batched schedule. For each run, after a warm-up:

1. ``time``: median of ``--repeat`` plain runs (synchronised at the end only);
2. ``phases``: one run with every phase wrapped (move build ``_Energy.move_graph``, solve
   ``torchcut.maxflow``, greedy application ``_greedy`` / ``_apply``): host wall-clock around each call
   (the time the host spends issuing it, read-backs included) and CUDA events around it (the device
   span, idle gaps included), summed per round; then the same with a synchronisation before and after
   each phase (``iso``: what the phase costs alone);
3. ``profile``: one run under ``torch.profiler`` (CPU and CUDA activities, the phases as
   ``record_function`` ranges): key_averages tables sorted by CUDA and by CPU time, a chrome trace
   (``.json.gz``, opens in https://ui.perfetto.dev), and per-run counts of cudaStreamSynchronize,
   cudaMemcpyAsync (and DtoH copies), kernel launches;
4. ``syncs`` (CUDA): one run under ``torch.cuda.set_sync_debug_mode("warn")``, every synchronising call
   listed with its source lines (the innermost torchcut frames), counted.

Reading it: a phase whose host time is close to its device span while the profiler's GPU time in its
range is much smaller is launch (host) bound; a device span much longer than the host time means the
host queued ahead and the GPU is the limit.

    python benchmarks/multilabel_profile.py --out OUT [--device cuda] [--cases tsukuba,refine]
    python benchmarks/multilabel_profile.py --device cpu --small --out /tmp/mlprof   # a quick CPU check

Writes OUT/summary.md (also printed), OUT/<run>_{cuda,cpu}_time.txt, OUT/<run>_trace.json.gz,
OUT/<run>_counts.json, OUT/<run>_rounds.json, OUT/<run>_syncs.txt.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import json
import shutil
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import torchcut  # noqa: E402
import torchcut.multilabel as ml  # noqa: E402
import torchcut.solvers as solvers  # noqa: E402
from torchcut import datasets  # noqa: E402

import multilabel as bench  # noqa: E402  (benchmarks/multilabel.py: the same energies)

COUNTED = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
           "cudaMemcpy", "cudaMemsetAsync", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
           "cuLaunchKernelEx", "cudaGraphLaunch", "cudaMemGetInfo", "cudaStreamIsCapturing")


# ------------------------------------------------------------------------------------------- the cases
def tsukuba_case(small: bool):
    """(unary, pairwise, weights) of the benchmark's ``tsukuba`` row (cropped to 64 x 96 with --small)."""
    try:
        U, W, _ = bench.tsukuba_energy()
        if small:
            U, W = U[:, 100:164, 150:246].contiguous(), W[:, 100:164, 150:246].contiguous()
    except datasets.DatasetNotFoundError as exc:
        if not small:
            raise
        print(f"tsukuba data not found ({exc}); --small uses a random 16-label energy instead")
        g = torch.Generator().manual_seed(0)
        U = torch.randint(0, 40, (16, 64, 96), generator=g)
        W = torch.randint(0, 45, (2, 64, 96), generator=g)
    W = torch.where(W > 0, W, 0)
    return U, 1 - torch.eye(U.shape[0], dtype=torch.int64), W


def refine_case(B: int, size: int, C: int = 8):
    truth, image, probs = bench.refine_energy(B, size, C)
    return image, probs


# ------------------------------------------------------------------------------------------ phase timer
def _info(args):
    """The ``info`` dict among a multilabel helper's positional arguments."""
    return next(a for a in args if isinstance(a, dict))


class Phases:
    """Wraps the phases of ``torchcut.multilabel`` while active; records host and device spans per round."""

    def __init__(self, device: torch.device, mode: str):
        self.cuda = device.type == "cuda"
        self.mode = mode  # "off": only record_function ranges; "events": timers; "iso": timers + syncs
        self.round = 0
        self.depth = 0
        self.records = []  # (round, phase, host seconds, start event, end event)

    def _wrap(self, phase, fn, sets_round=False):
        def wrapped(*args, **kwargs):
            if sets_round:
                self.round = _info(args)["cycles"]
            if self.depth:  # an _apply inside _greedy: counted in the outer call
                return fn(*args, **kwargs)
            self.depth += 1
            try:
                with torch.profiler.record_function(f"ml.{phase}"):
                    if self.mode == "off":
                        return fn(*args, **kwargs)
                    if self.mode == "iso" and self.cuda:
                        torch.cuda.synchronize()
                    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if self.cuda else None
                    if ev:
                        ev[0].record()
                    t0 = time.perf_counter()
                    out = fn(*args, **kwargs)
                    if self.mode == "iso" and self.cuda:
                        torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    if ev:
                        ev[1].record()
                    self.records.append((self.round, phase, t1 - t0, ev))
                    return out
            finally:
                self.depth -= 1
        return wrapped

    @contextlib.contextmanager
    def active(self):
        saved = (ml._solve, ml._greedy, ml._apply, ml._Energy.move_graph, solvers.maxflow)
        solve = ml._solve

        def solve_round(*args, **kwargs):  # sets the round; its parts are timed separately
            self.round = _info(args)["cycles"]
            return solve(*args, **kwargs)

        ml._solve = solve_round
        ml._greedy = self._wrap("apply", ml._greedy, True)
        ml._apply = self._wrap("apply", ml._apply, True)
        ml._Energy.move_graph = self._wrap("build", ml._Energy.move_graph)
        solvers.maxflow = self._wrap("solve", solvers.maxflow)
        try:
            yield self
        finally:
            ml._solve, ml._greedy, ml._apply, ml._Energy.move_graph, solvers.maxflow = saved

    def per_round(self):
        """{round: {phase: [calls, host ms, device ms]}} (device ms: CUDA event spans)."""
        if self.cuda:
            torch.cuda.synchronize()
        out = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0, 0.0]))
        for r, phase, host, ev in self.records:
            row = out[r][phase]
            row[0] += 1
            row[1] += host * 1e3
            row[2] += ev[0].elapsed_time(ev[1]) if ev else float("nan")
        return {r: dict(v) for r, v in sorted(out.items())}


# ----------------------------------------------------------------------------------------------- runs
def make_runs(args, device):
    runs = []
    if "tsukuba" in args.cases:
        U, V, W = tsukuba_case(args.small)
        Ud, Vd, Wd = U.to(device), V.to(device), W.to(device)
        for sched in args.schedules.split(","):
            runs.append((f"tsukuba_{sched}", sched,
                         lambda s=sched: torchcut.expansion(Ud, Vd, weights=Wd, schedule=s.split("+")[0],
                                                            return_info=True)))
    if "refine" in args.cases:
        B, size = (2, 64) if args.small else (args.refine_batch, args.refine_size)
        image, probs = refine_case(B, size)
        x, p = image.to(device), probs.to(device)
        for sched in args.schedules.split(","):
            runs.append((f"refine_{sched}", sched,
                         lambda s=sched: (torchcut.refine(x, p, lam=2.0, sigma=20.0, schedule=s.split("+")[0]), None)))
    return runs


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeat):
    times = []
    for _ in range(repeat):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profile_run(name, fn, device, out: Path, trace: bool):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    ph = Phases(device, "off")
    with ph.active():
        sync(device)
        with profile(activities=acts, record_shapes=False) as prof:
            fn()
            sync(device)
    avgs = prof.key_averages()
    cuda_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    (out / f"{name}_cuda_time.txt").write_text(avgs.table(sort_by=cuda_key, row_limit=60, max_name_column_width=70))
    (out / f"{name}_cpu_time.txt").write_text(avgs.table(sort_by="cpu_time_total", row_limit=60,
                                                         max_name_column_width=70))
    counts = {k: 0 for k in COUNTED}
    counts.update({"Memcpy DtoH": 0, "Memcpy HtoD": 0, "Memcpy DtoD": 0, "Memset": 0, "kernels (device)": 0,
                   "aten ops (top level)": 0})
    ranges = {}
    for a in avgs:
        key = a.key
        if key in counts:
            counts[key] += a.count
        for pre in ("Memcpy DtoH", "Memcpy HtoD", "Memcpy DtoD", "Memset"):
            if key.startswith(pre):
                counts[pre] += a.count
        if key.startswith("ml."):
            ranges[key] = {"calls": a.count, "cpu_ms": a.cpu_time_total / 1e3,
                           "gpu_ms": getattr(a, "device_time_total", getattr(a, "cuda_time_total", 0.0)) / 1e3}
    for e in prof.events():
        dev = getattr(e, "device_type", None)
        if dev is not None and dev != torch.autograd.DeviceType.CPU and not e.name.startswith(("Memcpy", "Memset")):
            counts["kernels (device)"] += 1
        elif e.name.startswith("aten::"):
            par, top = e.cpu_parent, True
            while par is not None and top:
                top = not par.name.startswith("aten::")
                if par.name.startswith("ml.") and top:
                    ranges.setdefault(par.name, {}).setdefault("aten_ops", 0)
                    ranges[par.name]["aten_ops"] += 1
                    break
                par = par.cpu_parent
            if top:  # dispatched from Python, not from inside another op
                counts["aten ops (top level)"] += 1
    counts["launches (runtime API)"] = sum(counts[k] for k in ("cudaLaunchKernel", "cudaLaunchKernelExC",
                                                              "cuLaunchKernel", "cuLaunchKernelEx"))
    (out / f"{name}_counts.json").write_text(json.dumps({"counts": counts, "ranges": ranges}, indent=1))
    if trace:
        tmp = out / f"{name}_trace.json"
        prof.export_chrome_trace(str(tmp))
        with open(tmp, "rb") as src, gzip.open(str(tmp) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        tmp.unlink()
    return counts, ranges


def sync_debug_run(name, fn, device, out: Path):
    """Every synchronising CUDA call of one run, with its innermost torchcut/benchmark source lines."""
    if device.type != "cuda":
        return None
    seen = collections.Counter()
    examples = {}
    old_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1]
                  if "torchcut" in f.filename and "multilabel_profile" not in f.filename]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-3:])) \
            or f"{filename}:{lineno}"
        key = (str(message).splitlines()[0][:90], where)
        seen[key] += 1
        examples.setdefault(key, frames[-1].line if frames else line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = old_show
    lines = [f"{name}: {sum(seen.values())} synchronising calls seen by torch's sync debug mode (the CUDA "
             "extension's own counter read-backs in C++ are not among them: see the counts file)", ""]
    for (msg, where), n in seen.most_common():
        lines.append(f"{n:6d}  {where}\n        {examples[(msg, where)]}\n        [{msg}]")
    (out / f"{name}_syncs.txt").write_text("\n".join(lines) + "\n")
    return sum(seen.values()), seen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "multilabel_profile")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="a 64 x 96 Tsukuba crop and a 2 x 64^2 refine (CPU check)")
    p.add_argument("--cases", default="tsukuba,refine")
    p.add_argument("--schedules", default="sequential,batched")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--refine-batch", type=int, default=4)
    p.add_argument("--refine-size", type=int, default=1024)
    p.add_argument("--no-trace", action="store_true", help="skip the chrome traces")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    a.out.mkdir(parents=True, exist_ok=True)
    name_dev = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    head = [f"# Multi-label profile ({name_dev}, torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{', small' if a.small else ''})", ""]
    summary = []
    for name, sched, fn in make_runs(a, device):
        _, info = fn()  # warm-up (and the extension's first load)
        sync(device)
        sec = timed(fn, device, a.repeat)
        rows = {}
        for mode in ("events", "iso"):
            ph = Phases(device, mode)
            with ph.active():
                fn()
            rows[mode] = ph.per_round()
        counts, ranges = profile_run(name, fn, device, a.out, not a.no_trace)
        syncs = sync_debug_run(name, fn, device, a.out)
        (a.out / f"{name}_rounds.json").write_text(json.dumps(rows, indent=1))
        # ---- summary
        n_rounds = len(rows["events"])
        extra = f", energy {float(info['energy'][0]):.1f}, {info['solves']} solves" if info else ""
        summary += [f"## {name}: {sec * 1e3:.1f} ms per run (median of {a.repeat}), {n_rounds} rounds{extra}", ""]
        summary += ["Per run: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v) +
                    (f"; sync-debug warnings {syncs[0]}" if syncs else ""), ""]
        if ranges:
            summary += ["Profiler ranges (one run): " + ", ".join(
                f"{k} {v['calls']} calls, {v.get('aten_ops', 0)} top-level aten ops, CPU {v['cpu_ms']:.1f} ms, GPU {v['gpu_ms']:.1f} ms" for k, v in sorted(ranges.items())), ""]
        summary += ["| round | build host / dev / iso ms | solve host / dev / iso ms | apply host / dev / iso ms | "
                    "host sum | iso sum |", "|---|---|---|---|---|---|"]
        tot = collections.defaultdict(float)
        for r, ph in rows["events"].items():
            iso = rows["iso"].get(r, {})
            cells, hs, isum = [], 0.0, 0.0
            for phase in ("build", "solve", "apply"):
                c, h, d = ph.get(phase, (0, 0.0, 0.0))
                i = iso.get(phase, (0, 0.0, 0.0))[1]
                cells.append(f"{h:.2f} / {d:.2f} / {i:.2f}" + (f" ({c}x)" if c > 1 else ""))
                hs, isum = hs + h, isum + i
                tot[phase + "_host"] += h
                tot[phase + "_dev"] += d
                tot[phase + "_iso"] += i
            summary.append(f"| {r} | " + " | ".join(cells) + f" | {hs:.2f} | {isum:.2f} |")
        summary.append("| all | " + " | ".join(
            f"{tot[p + '_host']:.1f} / {tot[p + '_dev']:.1f} / {tot[p + '_iso']:.1f}" for p in ("build", "solve", "apply"))
            + f" | {sum(tot[p + '_host'] for p in ('build', 'solve', 'apply')):.1f} | "
            f"{sum(tot[p + '_iso'] for p in ('build', 'solve', 'apply')):.1f} |")
        summary.append("")
        print("\n".join(summary[-(n_rounds + 8):]), flush=True)
        (a.out / "summary.md").write_text("\n".join(head + summary) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
