"""A/B studies on the GPU: settings run alternately in one process on the same inputs.

Each case runs every variant once as a warm-up, then ``--repeat`` rounds in which the variants take
turns (the order reversed every other round), CUDA synchronised around each call; medians and minima
are reported, and the outputs of all variants must be equal. Studies:

* ``item_skip``: the grid solver's ``item_skip`` option on batched solves (default on; -1 relabels
  every item of a batch every cycle): Tsukuba's batched and sequential alpha-expansion, plain Potts,
  the 4 x 1024^2 8-class refine, a GrabCut batch of 16 skimage pictures, the 32 x 512^2 batch of
  ``benchmarks/grid.py``.
* ``multilabel_opts``: the grid solver's options (push launches, rounds, tail rule, tiles, persistence) under
  the default warm-started expansion: Tsukuba (per-edge and plain Potts) and the 4 x 1024^2 refine.
  The ``{"profile": 1}`` row also sums the solver's BFS and push times (events; slower itself).
* ``moves``: alpha-expansion with the move kernels against the tensor-op path (Tsukuba batched and
  sequential, plain Potts, truncated linear, the 4 x 1024^2 refine).
* ``multilabel``: alpha-expansion with and without warm-started moves (``warm_start``): Tsukuba batched
  and sequential, plain Potts batched, the 4 x 1024^2 refine.

The Tsukuba cases need ``TORCHCUT_DATA``. Needs a GPU.

    python benchmarks/ab.py --study multilabel --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import torchcut  # noqa: E402
from torchcut.solvers import cuda as cuda_backend  # noqa: E402

_SOLVE = cuda_backend.solve_grid
STATS = []  # solver counters of the current call


def _grid_options(**defaults):
    """Install a solve_grid that applies ``defaults`` and records the counters of every solve."""
    def solve(caps, excess, sink, offsets, **options):
        out = _SOLVE(caps, excess, sink, offsets, **{**defaults, **options})
        STATS.append(out[-1])
        return out
    cuda_backend.solve_grid = solve


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def ab(name, variants, repeat):
    """``variants``: {label: (solver defaults, fn)}. One row per variant."""
    times = {v: [] for v in variants}
    relabels, outs = {}, {}
    for v, (opts, fn) in variants.items():  # warm-up of each
        _grid_options(**opts)
        outs[v] = fn()
    first = next(iter(outs.values()))
    equal = all(_equal(first, o) for o in outs.values())
    order = list(variants)
    for i in range(repeat):
        for v in (order if i % 2 == 0 else order[::-1]):
            opts, fn = variants[v]
            _grid_options(**opts)
            STATS.clear()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[v].append(time.perf_counter() - t0)
            relabels[v] = (sum(int(s.get("global_relabels", 0)) for s in STATS),
                           sum(int(s.get("bfs_visits", 0)) for s in STATS), len(STATS),
                           sum(int(s.get("push_launches", 0)) for s in STATS),
                           sum(float(s.get("bfs_us", 0)) for s in STATS) / 1e3,
                           sum(float(s.get("push_us", 0)) for s in STATS) / 1e3)
    cuda_backend.solve_grid = _SOLVE
    base = statistics.median(times[order[0]])
    rows = []
    for v in order:
        med = statistics.median(times[v])
        rows.append(dict(case=name, variant=v, ms=med * 1e3, min_ms=min(times[v]) * 1e3, speedup=base / med,
                         relabels=relabels[v][0], bfs_visits=relabels[v][1], solves=relabels[v][2],
                         push_launches=relabels[v][3], bfs_ms=relabels[v][4], push_ms=relabels[v][5], equal=equal))
        prof = f"; BFS {relabels[v][4]:.1f} ms, pushes {relabels[v][5]:.1f} ms" if relabels[v][4] else ""
        print(f"{name} | {v}: {med * 1e3:.1f} ms (min {min(times[v]) * 1e3:.1f}), {base / med:.2f}x; "
              f"relabels {relabels[v][0]}, push launches {relabels[v][3]} in {relabels[v][2]} solves{prof}; "
              f"equal={equal}", flush=True)
    return rows


def _tsukuba():
    import multilabel as ml  # benchmarks/multilabel.py: the same energies

    try:
        U, W, _ = ml.tsukuba_energy()
    except torchcut.datasets.DatasetNotFoundError as exc:
        print(f"tsukuba: skipped ({exc})")
        return None
    return U.cuda(), W.cuda(), (1 - torch.eye(U.shape[0], dtype=torch.int64)).cuda()


def _refine_inputs():
    import multilabel as ml

    _, image, probs = ml.refine_energy(4, 1024, 8)
    return image.cuda(), probs.cuda()


def study_item_skip():
    off = {"item_skip": -1}
    cases = []
    t = _tsukuba()
    if t is not None:
        U, W, V = t
        for sched in ("batched", "sequential"):
            fn = (lambda s=sched: torchcut.expansion(U, V, weights=W, schedule=s))
            cases.append((f"tsukuba {sched}, per-edge Potts", {"item_skip": ({}, fn), "every item": (off, fn)}))
        fn = lambda: torchcut.expansion(U, 30 * V, schedule="batched")  # noqa: E731
        cases.append(("tsukuba batched, plain Potts 30", {"item_skip": ({}, fn), "every item": (off, fn)}))
    x, p = _refine_inputs()
    fn = lambda: torchcut.refine(x, p, lam=2.0, sigma=20.0)  # noqa: E731
    cases.append(("refine 4 x 1024^2, 8 classes", {"item_skip": ({}, fn), "every item": (off, fn)}))
    from skimage import data

    pics = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    imgs, boxes = [], []
    for i in range(16):
        im = torch.as_tensor(pics[i % 4][:: 1 + i // 8, :: 1 + i // 8].copy()).permute(2, 0, 1).contiguous()
        h, w = im.shape[1:]
        imgs.append(im.cuda())
        boxes.append((w // 6 + i, h // 8 + i, w - w // 6 - i, h - h // 10))
    fn = lambda: torchcut.grabcut(imgs, box=boxes)  # noqa: E731
    cases.append(("grabcut batch of 16 (box)", {"item_skip": ({}, fn), "every item": (off, fn)}))
    import grid as gb  # benchmarks/grid.py

    offs, items = gb.make_case(dict(name="batch 32 x 512^2", kind="2d", n=512, conn=4, batch=32, pic=0))
    src = torch.stack([torch.as_tensor(it[0]) for it in items]).cuda()
    snk = torch.stack([torch.as_tensor(it[1]) for it in items]).cuda()
    edg = torch.stack([torch.as_tensor(it[2]) for it in items], 1).cuda()
    g = torchcut.GridGraph(src, snk, edg, offs)
    fn = lambda: torchcut.maxflow(g).node_mask  # noqa: E731
    cases.append(("grid batch 32 x 512^2 4c", {"item_skip": ({}, fn), "every item": (off, fn)}))
    return cases


def _multilabel_cases(variants, truncated_linear=False):
    """The multi-label cases of the studies: ``variants(call)`` makes the variants of a case from its
    call (which takes the expansion's keyword arguments)."""
    cases = []
    t = _tsukuba()
    if t is not None:
        U, W, V = t
        for sched in ("batched", "sequential"):
            cases.append((f"tsukuba {sched}, per-edge Potts",
                          variants(lambda s=sched, **kw: torchcut.expansion(U, V, weights=W, schedule=s, **kw))))
        cases.append(("tsukuba batched, plain Potts 30",
                      variants(lambda **kw: torchcut.expansion(U, 30 * V, schedule="batched", **kw))))
        if truncated_linear:
            lin = (torch.arange(16).view(-1, 1) - torch.arange(16).view(1, -1)).abs().clamp(max=2).cuda() * 10
            cases.append(("tsukuba batched, truncated linear",
                          variants(lambda **kw: torchcut.expansion(U, lin, weights=W, **kw))))
    x, p = _refine_inputs()
    cases.append(("refine 4 x 1024^2, 8 classes (sequential)",
                  variants(lambda **kw: torchcut.refine(x, p, lam=2.0, sigma=20.0, **kw))))
    return cases


def study_multilabel():
    def variants(call):
        return {f"warm={w}": ({}, (lambda w=w: call(warm_start=w))) for w in (False, True)}

    return _multilabel_cases(variants)


def study_multilabel_opts():
    """Grid solver options under the warm-started expansion (defaults of the library)."""
    t = _tsukuba()
    if t is None:
        return []
    U, W, V = t
    opts = ({}, {"profile": 1}, {"push_launches": 1}, {"push_launches": 2}, {"push_launches": 8}, {"rounds": 8},
            {"rounds": 32}, {"push_tail": -1}, {"push_tail": 4}, {"push_tail": 48}, {"tile_x": 16, "tile_y": 16},
            {"bfs_tile_x": 16, "bfs_tile_y": 16}, {"persist": -1})
    x, p = _refine_inputs()
    cases = []
    for name, call in (("tsukuba batched, per-edge Potts", lambda: torchcut.expansion(U, V, weights=W)),
                       ("tsukuba batched, plain Potts 30", lambda: torchcut.expansion(U, 30 * V)),
                       ("refine 4 x 1024^2, 8 classes (sequential)", lambda: torchcut.refine(x, p, lam=2.0, sigma=20.0))):
        cases.append((name, {json.dumps(o): (o, call) for o in opts}))
    return cases


def study_moves():
    """The move kernels (torchcut/csrc/grid_moves.cu) against the tensor-op path (warm-started)."""
    import torchcut.multilabel as ml

    def variants(call):
        def with_kernels(on):
            def run():
                ml._FUSED_MOVES = on
                try:
                    return call()
                finally:
                    ml._FUSED_MOVES = True
            return run
        return {"move kernels": ({}, with_kernels(True)), "tensor ops": ({}, with_kernels(False))}

    return _multilabel_cases(variants, truncated_linear=True)


STUDIES = {"item_skip": study_item_skip, "multilabel": study_multilabel, "multilabel_opts": study_multilabel_opts,
           "moves": study_moves}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=sorted(STUDIES), required=True)
    ap.add_argument("--out", type=Path, default=Path("/tmp/out/ab"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("ab.py needs a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    lines = [f"# A/B study `{args.study}` ({torch.cuda.get_device_name()}, torch {torch.__version__}), medians of "
             f"{args.repeat}, variants alternated in one process", "",
             "| case | variant | ms (min) | speed-up vs first | relabels / BFS visits / solves / push launches (one call) "
             "| BFS / push ms (profile rows) | outputs equal |",
             "|---|---|---:|---:|---|---|---|"]
    for name, variants in STUDIES[args.study]():
        try:
            new = ab(name, variants, args.repeat)
        except Exception as exc:  # one failing case must not lose the others
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        rows += new
        for r in new:
            lines.append(f"| {r['case']} | {r['variant']} | {r['ms']:.1f} ({r['min_ms']:.1f}) | {r['speedup']:.2f}x | "
                         f"{r['relabels']} / {r['bfs_visits']} / {r['solves']} / {r['push_launches']} | "
                         f"{r['bfs_ms']:.1f} / {r['push_ms']:.1f} | {r['equal']} |")
        (args.out / f"ab_{args.study}.json").write_text(json.dumps(rows, indent=1))
        (args.out / f"ab_{args.study}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
