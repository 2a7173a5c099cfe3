"""Benchmark of the backward passes of torchcut.diff against their forward solves.

For a batch of random 2D grids (scores from a smoothed noise field, contrast-like edge weights), times:

* ``cut_mask`` blackbox: the forward (graph, one batched solve), the backward (one more batched solve
  with shifted scores, plus the edge indicators) and their ratio (target: backward <= 1.1x forward);
* ``cut_mask`` perturbed with K samples: the forward (one batched solve of B K items), the backward
  (no solve: the Stein estimate from the saved masks) and the ratio of the backward to the forward
  (target: <= 1.2x one batched solve of K);
* ``cut_labels`` blackbox with L labels (alpha-expansion): forward, backward, ratio;
* ``flow_value``: the solve with and without capacities that require grad, and the backward.

Medians of ``--repeat`` runs after a warm-up; CUDA timed with synchronisation. Times on a shared,
loaded machine are noisy: rerun on a quiet one before quoting them.

    python -m benchmarks.diff [--device cuda] [--batch 8] [--size 256] [--samples 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torchcut  # noqa: E402
from benchmarks.timing import median_time  # noqa: E402
from torchcut.diff import cut_labels, cut_mask  # noqa: E402


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median(fn, device, repeat):
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        return median_time(fn, repeat, cuda=device.type == "cuda")[0]


def _inputs(B, L, size, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(B, L, size, size, generator=gen)
    smooth = torch.nn.functional.avg_pool2d(noise, 9, 1, 4) * 6 + 0.5 * noise
    w = 0.3 + torch.rand(B, 2, size, size, generator=gen)
    return smooth.to(device), w.to(device)


def bench(args):
    device = torch.device(args.device)
    B, S, K, rep = args.batch, args.size, args.samples, args.repeat
    rows = []
    s1, w = _inputs(B, 1, S, device)
    scores = s1[:, 0]
    grad = torch.randn(B, S, S, device=device)

    def fwd_bwd(**kw):
        x = scores.clone().requires_grad_()
        ww = w.clone().requires_grad_()
        holder = {}

        def fwd():
            holder["y"] = cut_mask(x, ww, **kw)

        def bwd():
            x.grad = ww.grad = None
            fwd()  # a fresh graph for each backward (outside the timing below)
            _sync(device)
            t0 = time.perf_counter()
            holder["y"].backward(grad)
            _sync(device)
            return time.perf_counter() - t0

        t_f = _median(fwd, device, rep)
        bwd()
        t_b = statistics.median(bwd() for _ in range(rep))
        return t_f, t_b

    t_f, t_b = fwd_bwd(estimator="blackbox", lambda_=2.0)
    rows.append(("cut_mask blackbox", t_f, t_b, t_b / t_f, "<= 1.1"))
    t_f, t_b = fwd_bwd(estimator="perturbed", samples=K, noise=1.0)
    rows.append((f"cut_mask perturbed K={K}", t_f, t_b, t_b / t_f, "<= 1.2"))

    L = args.labels
    sl, wl = _inputs(B, L, S, device, seed=1)
    x = sl.clone().requires_grad_()
    gl = torch.randn_like(sl)
    holder = {}

    def lfwd():
        holder["y"] = cut_labels(x, wl, estimator="blackbox", lambda_=2.0)

    t_f = _median(lfwd, device, rep)
    tb = []
    for _ in range(rep + 1):
        lfwd()
        _sync(device)
        t0 = time.perf_counter()
        holder["y"].backward(gl)
        _sync(device)
        tb.append(time.perf_counter() - t0)
    t_b = statistics.median(tb[1:])
    rows.append((f"cut_labels blackbox L={L}", t_f, t_b, t_b / t_f, "<= 1.1"))

    offsets = torchcut.grid_offsets(2, 4)
    src, snk = scores.clamp(min=0), (-scores).clamp(min=0)
    edges = w.transpose(0, 1)

    def plain():
        return torchcut.maxflow(torchcut.GridGraph(src, snk, edges, offsets)).flow_value

    srcg = src.clone().requires_grad_()
    holder = {}

    def with_grad():
        holder["v"] = torchcut.maxflow(torchcut.GridGraph(srcg, snk, edges, offsets)).flow_value

    t_plain = _median(plain, device, rep)
    t_grad = _median(with_grad, device, rep)
    tb = []
    for _ in range(rep):
        with_grad()
        _sync(device)
        t0 = time.perf_counter()
        holder["v"].sum().backward()
        _sync(device)
        tb.append(time.perf_counter() - t0)
    rows.append(("flow_value (solve with grad / without)", t_plain, statistics.median(tb), t_grad / t_plain, "~1.0"))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--labels", type=int, default=4)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = bench(args)
    print(
        f"device {args.device}, batch {args.batch} x {args.size}^2, torch threads {torch.get_num_threads()}, "
        f"median of {args.repeat}"
    )
    print("| case | forward s | backward s | ratio | target |")
    print("|---|---|---|---|---|")
    for name, f, b, r, target in rows:
        print(f"| {name} | {f:.4f} | {b:.4f} | {r:.2f} | {target} |")


if __name__ == "__main__":
    main()
