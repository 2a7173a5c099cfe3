"""A/B of the CUDA grid solver's ``item_skip`` option on batched solves (issue 10 item 4, issue 11).

With ``item_skip`` (the default), an item of a batch that a global relabel leaves with no active node
is left out of every later BFS; ``item_skip=-1`` relabels every item every cycle (the solver before the
option). Both settings run alternately in one process on the same inputs, medians of ``--repeat`` after
a warm-up, CUDA synchronised around each call; the outputs must be equal (the cut is the canonical
one). Cases: the batched alpha-expansion of Tsukuba (16 moves per solve) with per-edge and plain Potts,
the 4 x 1024^2 8-class refine (batches of 4), a GrabCut batch of 16 skimage pictures, and the batch of
32 x 512^2 of ``benchmarks/grid.py``. Needs a GPU; the Tsukuba cases need ``TORCHCUT_DATA``.

    python benchmarks/item_skip.py --out DIR
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
STATS = []  # stats of the solves of the current call


def _patched(skip: bool):
    def solve(caps, excess, sink, offsets, **options):
        if not skip:
            options.setdefault("item_skip", -1)
        out = _SOLVE(caps, excess, sink, offsets, **options)
        STATS.append(out[-1] if isinstance(out, tuple) else None)
        return out
    return solve


def _sum_stats(key):
    return sum(int(s.get(key, 0)) for s in STATS if isinstance(s, dict))


def ab(name, fn, repeat):
    """Alternate skip on/off; (row, outputs equal)."""
    times = {True: [], False: []}
    visits, relabels, outs = {}, {}, {}
    for skip in (True, False):  # warm-up of both
        cuda_backend.solve_grid = _patched(skip)
        outs[skip] = fn()
    equal = _equal(outs[True], outs[False])
    for i in range(repeat):
        for skip in ((True, False) if i % 2 == 0 else (False, True)):
            cuda_backend.solve_grid = _patched(skip)
            STATS.clear()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[skip].append(time.perf_counter() - t0)
            visits[skip] = _sum_stats("bfs_visits")
            relabels[skip] = _sum_stats("global_relabels")
    cuda_backend.solve_grid = _SOLVE
    on, off = statistics.median(times[True]), statistics.median(times[False])
    row = dict(case=name, skip_ms=on * 1e3, all_ms=off * 1e3, speedup=off / on, equal=equal,
               skip_min_ms=min(times[True]) * 1e3, all_min_ms=min(times[False]) * 1e3,
               visits_skip=visits[True], visits_all=visits[False], relabels_skip=relabels[True],
               relabels_all=relabels[False], solves=len(STATS))
    print(f"{name}: skip {on * 1e3:.1f} ms (min {row['skip_min_ms']:.1f}), all {off * 1e3:.1f} ms "
          f"(min {row['all_min_ms']:.1f}), {off / on:.2f}x; BFS visits {visits[True]} vs {visits[False]}; "
          f"equal={equal}", flush=True)
    return row


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def cases(names):
    import multilabel as ml  # benchmarks/multilabel.py: the same energies

    out = []
    if "tsukuba" in names:
        try:
            U, W, _ = ml.tsukuba_energy()
        except torchcut.datasets.DatasetNotFoundError as exc:
            print(f"tsukuba: skipped ({exc})")
        else:
            Ud, Wd = U.cuda(), W.cuda()
            V = (1 - torch.eye(U.shape[0], dtype=torch.int64)).cuda()
            out.append(("tsukuba batched, per-edge Potts",
                        lambda: torchcut.expansion(Ud, V, weights=Wd, schedule="batched")))
            out.append(("tsukuba sequential, per-edge Potts",
                        lambda: torchcut.expansion(Ud, V, weights=Wd, schedule="sequential")))
            out.append(("tsukuba batched, plain Potts 30", lambda: torchcut.expansion(Ud, 30 * V, schedule="batched")))
    if "refine" in names:
        _, image, probs = ml.refine_energy(4, 1024, 8)
        x, p = image.cuda(), probs.cuda()
        out.append(("refine 4 x 1024^2, 8 classes (sequential: batches of 4)",
                    lambda: torchcut.refine(x, p, lam=2.0, sigma=20.0)))
    if "grabcut" in names:
        from skimage import data

        pics = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
        imgs, boxes = [], []
        for i in range(16):
            im = torch.as_tensor(pics[i % 4][:: 1 + i // 8, :: 1 + i // 8].copy()).permute(2, 0, 1).contiguous()
            h, w = im.shape[1:]
            imgs.append(im.cuda())
            boxes.append((w // 6 + i, h // 8 + i, w - w // 6 - i, h - h // 10))
        out.append(("grabcut batch of 16 (box)", lambda: torchcut.grabcut(imgs, box=boxes)))
    if "grid" in names:
        import grid as gb  # benchmarks/grid.py

        spec = dict(name="batch 32 x 512^2", kind="2d", n=512, conn=4, batch=32, pic=0)
        offs, items = gb.make_case(spec)
        src = torch.stack([torch.as_tensor(it[0]) for it in items]).cuda()
        snk = torch.stack([torch.as_tensor(it[1]) for it in items]).cuda()
        edg = torch.stack([torch.as_tensor(it[2]) for it in items], 1).cuda()
        g = torchcut.GridGraph(src, snk, edg, offs)
        out.append(("grid batch 32 x 512^2 4c (library energy)", lambda: torchcut.maxflow(g).node_mask))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/out/item_skip"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", default="tsukuba,refine,grabcut,grid")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("item_skip.py needs a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, fn in cases(args.cases.split(",")):
        try:
            rows.append(ab(name, fn, args.repeat))
        except Exception as exc:  # one failing case must not lose the others
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
        (args.out / "item_skip.json").write_text(json.dumps(rows, indent=1))
    lines = [f"# item_skip A/B ({torch.cuda.get_device_name()}, torch {torch.__version__}), medians of {args.repeat}",
             "", "| case | item_skip (default) ms | every item ms | speed-up | BFS visits (skip / all) | "
             "relabels (skip / all) | outputs equal |", "|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['skip_ms']:.1f} | {r['all_ms']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['visits_skip']} / {r['visits_all']} | {r['relabels_skip']} / {r['relabels_all']} | "
                     f"{r['equal']} |")
    (args.out / "item_skip.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
