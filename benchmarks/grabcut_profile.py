"""Where one single-image ``torchcut.grabcut`` call spends its time (CUDA or CPU).

For the first ``--images`` images of the GrabCut set and each protocol: every phase of the call
(normalise, n-links, k-means, mixture fit, log-likelihoods, terminals, cut, bookkeeping) timed with a
synchronisation around it, the solver's counters per cut (global relabels, push launches), cuts that
start from the last flow against cuts from zero flow, and one ``torch.profiler`` table of a whole call.

python benchmarks/grabcut_profile.py --device cuda --images 8 --out OUT
"""
import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grabcut_quality import load, protocol_seeds  # noqa: E402

import torchcut  # noqa: E402,F401

gc = sys.modules["torchcut.grabcut"]
PHASES = ("_normalise", "_smoothness", "_kmeans", "_fit", "_component_loglik", "_terminals")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="/tmp/grabcut_profile")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    data = load("all")[: args.images]
    spent = collections.defaultdict(float)
    cuts = []

    def timed(name, fn):
        def wrapper(*a, **k):
            sync()
            t0 = time.perf_counter()
            r = fn(*a, **k)
            sync()
            spent[name] += time.perf_counter() - t0
            return r
        return wrapper

    originals = {n: getattr(gc, n) for n in PHASES}
    call = gc._WarmCut.__call__

    def cut(self, *a):
        sync()
        t0 = time.perf_counter()
        m = call(self, *a)
        sync()
        spent["cut"] += time.perf_counter() - t0
        s = self.log[-1]
        cuts.append((len(self.log), self.warm, s.get("global_relabels", 0), s.get("push_launches", 0), time.perf_counter() - t0))
        return m

    lines = []
    variants = (("cuts from the last flow, CUDA graphs", True, True),
                ("cuts from the last flow, no CUDA graphs", True, False),
                ("cuts from zero flow, CUDA graphs", False, True))
    for proto in ("trimap-20", "box"):
        for label, warm, graphs in variants:
            totals, plain = [], []
            spent.clear()
            cuts.clear()
            for name, img, gt in data:
                seeds, box = protocol_seeds(gt, proto)
                rgb = torch.from_numpy(np.ascontiguousarray(img[:, :, ::-1])).permute(2, 0, 1).to(dev)
                st = None if seeds is None else torch.from_numpy(seeds).to(dev)
                gc.grabcut(rgb, st, box=box, cuda_graphs=graphs, warm_start=warm)  # warm-up
                for _ in range(args.repeat):  # plain calls, no instrumentation
                    sync()
                    t0 = time.perf_counter()
                    gc.grabcut(rgb, st, box=box, cuda_graphs=graphs, warm_start=warm)
                    sync()
                    plain.append(time.perf_counter() - t0)
                for n in PHASES:
                    setattr(gc, n, timed(n, originals[n]))
                gc._WarmCut.__call__ = cut
                try:
                    sync()
                    t0 = time.perf_counter()
                    gc.grabcut(rgb, st, box=box, cuda_graphs=False, warm_start=warm)  # phases timed eagerly
                    sync()
                    totals.append(time.perf_counter() - t0)
                finally:
                    for n in PHASES:
                        setattr(gc, n, originals[n])
                    gc._WarmCut.__call__ = call
            n = len(data)
            first = len(lines)
            lines.append(f"## {proto}, {label} ({n} images, {dev})")
            lines.append(f"plain call median {statistics.median(plain) * 1e3:.2f} ms; instrumented call (eager) mean "
                         f"{sum(totals) / n * 1e3:.2f} ms, of which per image:")
            for k, v in sorted(spent.items(), key=lambda kv: -kv[1]):
                lines.append(f"  {k:20s} {v / n * 1e3:7.2f} ms")
            rest = sum(totals) - sum(spent.values())
            lines.append(f"  {'(rest)':20s} {rest / n * 1e3:7.2f} ms")
            by_it = collections.defaultdict(list)
            for it, _, rel, push, sec in cuts:
                by_it[it].append((rel, push, sec))
            for it in sorted(by_it):
                v = by_it[it]
                lines.append(f"  cut {it}: {len(v)} images, global relabels mean {statistics.mean(x[0] for x in v):.1f}, "
                             f"push launches mean {statistics.mean(x[1] for x in v):.1f}, "
                             f"time mean {statistics.mean(x[2] for x in v) * 1e3:.2f} ms")
            print("\n".join(lines[first:]), flush=True)
    # the same call twice, and once from zero flow: the masks should be equal bit for bit
    differ_runs = differ_cold = differ_eager = 0
    for name, img, gt in data:
        for proto in ("trimap-20", "box"):
            seeds, box = protocol_seeds(gt, proto)
            rgb = torch.from_numpy(np.ascontiguousarray(img[:, :, ::-1])).permute(2, 0, 1).to(dev)
            st = None if seeds is None else torch.from_numpy(seeds).to(dev)
            a, b = (gc.grabcut(rgb, st, box=box) for _ in range(2))
            c = gc.grabcut(rgb, st, box=box, warm_start=False)
            d = gc.grabcut(rgb, st, box=box, cuda_graphs=False)
            differ_runs += not torch.equal(a, b)
            differ_cold += not torch.equal(a, c)
            differ_eager += not torch.equal(a, d)
    lines += ["", f"determinism: {differ_runs} of {2 * len(data)} calls differ between two runs; "
              f"{differ_cold} differ between warm-started cuts and cuts from zero flow; "
              f"{differ_eager} differ between CUDA-graph replays and eager steps"]
    print(lines[-1], flush=True)
    # one call under the profiler
    name, img, gt = data[0]
    seeds, _ = protocol_seeds(gt, "trimap-20")
    rgb = torch.from_numpy(np.ascontiguousarray(img[:, :, ::-1])).permute(2, 0, 1).to(dev)
    st = torch.from_numpy(seeds).to(dev)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        gc.grabcut(rgb, st)
        sync()
    ev = prof.key_averages()
    table_cpu = ev.table(sort_by="cpu_time_total", row_limit=30)
    table_dev = ev.table(sort_by="cuda_time_total", row_limit=30) if dev.type == "cuda" else ""
    counts = {e.key: e.count for e in ev if e.key in ("cudaStreamSynchronize", "cudaLaunchKernel", "cudaMemcpyAsync",
                                                     "cudaDeviceSynchronize", "cudaEventSynchronize")}
    lines += ["", f"## torch.profiler, one trimap-20 call on {name}", f"runtime calls: {counts}", "", table_cpu, "", table_dev]
    (out / "grabcut_profile.md").write_text("\n".join(lines) + "\n")
    print(f"runtime calls: {counts}")
    print(table_cpu[:6000])


if __name__ == "__main__":
    main()
