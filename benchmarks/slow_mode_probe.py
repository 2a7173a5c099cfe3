"""Is the slow mode of large solves a state of the GPU? (GPU session helper, session 11.)

Session 10 found 256^3 solves that take ~1.6x longer with identical work (same relabels, repairs and
launches), in stretches of consecutive solves, at the same SM clock. If that is a state of the machine
(memory system, atomics, scheduling), kernels that are not torchcut's must slow down in the same
stretches. ``python benchmarks/slow_mode_probe.py [--case 256-6] [--iters 120]`` interleaves, per
iteration: one solve (CUDA events; its counters), a 512 MiB device copy (HBM bandwidth), 64 copies of 8
MiB (L2-resident bandwidth), a scatter-add with many collisions (L2 atomics), a bf16 matrix product (SM
throughput), and one ``nvidia-smi`` reading (clocks, temperatures, power, clock event reasons). It prints
one line per iteration and, at the end, each probe's and each work counter's median over the slow solves
against the fast ones (slow: above 1.3x the fastest solve with the same relabels, repairs and launches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_grid as T  # noqa: E402

# Work counters of a solve (with option profile=1 also the per-visit ones): equal in slow and fast
# solves means the same work ran slower.
WORK = ("bfs_visits", "bfs_passes", "push_visits", "push_rounds", "bfs_us", "push_us", "bfs_relax_us", "push_visit_us")
SMI_FIELDS = "clocks.sm,clocks.mem,temperature.gpu,temperature.memory,power.draw,clocks_event_reasons.active"


def timed(fn, reps=1):
    """Milliseconds of ``reps`` calls of ``fn`` on the current stream (CUDA events, device idle before)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def smi():
    """One nvidia-smi reading of SMI_FIELDS (empty when the tool fails)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="256-6")
    ap.add_argument("--iters", type=int, default=120)
    ap.add_argument("--trace", type=int, default=0, help="then this many solves with profile=2 (per-cycle lines)")
    ap.add_argument("--opts", default='{"profile": 1}', help="solver options (JSON); profile=1 counts the work")
    args = ap.parse_args()
    opts = json.loads(args.opts)
    g = T.graph_of(T.cases()[args.case], "torchcut")
    big_src = torch.empty(1 << 29, dtype=torch.uint8, device="cuda")
    big_dst = torch.empty_like(big_src)
    small_src = torch.empty(1 << 23, dtype=torch.uint8, device="cuda")
    small_dst = torch.empty_like(small_src)
    idx = torch.randint(0, 4096, (1 << 24,), device="cuda")
    ones = torch.ones(1 << 24, device="cuda")
    acc = torch.zeros(4096, device="cuda")
    ma = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mb = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    probes = {
        "hbm_copy_GBs": (lambda: big_dst.copy_(big_src), 1, 2 * big_src.numel()),
        "l2_copy_GBs": (lambda: small_dst.copy_(small_src), 64, 2 * small_src.numel()),
        "atomic_Gops": (lambda: acc.index_add_(0, idx, ones), 1, idx.numel()),
        "matmul_TFs": (lambda: torch.mm(ma, mb), 4, 2 * 8192**3),
    }
    for fn, reps, _ in probes.values():  # warm-up (cuBLAS handles, kernels)
        timed(fn, reps)
    T.solve_ms(g, opts)
    rows = []
    print(f"== {args.case}: {g}; nvidia-smi fields: {SMI_FIELDS}", flush=True)
    for it in range(args.iters):
        ms, r = T.solve_ms(g, opts)
        key = (r.stats.get("global_relabels"), r.stats.get("repairs"), r.stats.get("push_launches"))
        row = {"solve_ms": ms, "key": key, **{k: r.stats.get(k, 0) for k in WORK}}
        for name, (fn, reps, units) in probes.items():
            t = timed(fn, reps)
            row[name] = units * reps / (t * 1e-3) / (1e12 if name == "matmul_TFs" else 1e9)
        row["smi"] = smi()
        rows.append(row)
        print(f"{it:4d} solve {ms:7.2f} ms {key} " + " ".join(f"{k} {row[k]}" for k in WORK if row[k]) + " "
              + " ".join(f"{k} {row[k]:8.1f}" for k in probes) + f" | {row['smi']}", flush=True)
    fastest = {}
    for row in rows:
        fastest[row["key"]] = min(fastest.get(row["key"], 1e9), row["solve_ms"])
    slow = [row for row in rows if row["solve_ms"] > 1.3 * fastest[row["key"]]]
    fast = [row for row in rows if row["solve_ms"] <= 1.3 * fastest[row["key"]]]
    print(f"slow solves: {len(slow)} of {len(rows)} (above 1.3x the fastest with the same counters)")
    for name in ["solve_ms", *WORK, *probes]:
        med = lambda rs: statistics.median(r[name] for r in rs) if rs else float("nan")  # noqa: E731
        print(f"  {name:14s} fast {med(fast):9.2f}  slow {med(slow):9.2f}")
    for k in range(args.trace):  # the trace lines of each solve (stderr), then its time
        ms, r = T.solve_ms(g, {**opts, "profile": 2})
        print(f"traced solve {k}: {ms:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
