"""GrabCut quality and speed on the 50 images of the GrabCut set: torchcut.grabcut against cv2.grabCut.

Data: ``$TORCHCUT_DATA/grabcut/data_GT`` (images) and ``boundary_GT`` (truth: 255 object, 0 background,
128 unlabelled band). Protocols, all made from the truth:

* ``trimap-R`` for each radius R in ``--radii``: object seeds = truth eroded by R px, background seeds =
  outside the truth dilated by R px (disc structuring element), the band between unknown;
* ``box``: the truth's bounding box (outside background, inside unknown).

Both methods get the same seeds and the same number of iterations. cv2.grabCut is initialised with a
mask: seeds as GC_FGD / GC_BGD, unknown pixels as GC_PR_FGD or GC_PR_BGD (``--cv2-unknown``; for a box
the inside is GC_PR_FGD, as its rectangle mode does). IoU of the object over the pixels whose truth is
known (not 128); mean and median over the images.

Time per image: single-image calls, torchcut and cv2 interleaved image by image in one process, first
call of each a warm-up; plus one batched torchcut call on 16 images of different sizes (a list: padded
inside, see ``torchcut.grabcut``), whose masks must equal the single calls'.

    python benchmarks/grabcut_quality.py --out benchmarks/results [--device cuda] [--radii 10 20]
        [--split all|tune|test] [--lam 50] [--no-cv2]

Writes OUT/grabcut_quality[_DEVICE].md / .json and OUT/grabcut_overlays.png. The tuning split is the
images at even positions of the sorted file list (``tune``), the held-out split those at odd
positions (``test``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import torch  # noqa: E402

from torchcut._grabcut import DEFAULT_LAM, grabcut  # noqa: E402

DATA = Path(os.environ.get("TORCHCUT_DATA", ROOT / "data")) / "grabcut"


def load(split: str):
    names = sorted(p.name for p in (DATA / "data_GT").iterdir())
    if split == "tune":
        names = names[0::2]
    elif split == "test":
        names = names[1::2]
    out = []
    for n in names:
        img = cv2.imread(str(DATA / "data_GT" / n), cv2.IMREAD_COLOR)  # BGR
        gt = cv2.imread(str(DATA / "boundary_GT" / (Path(n).stem + ".bmp")), cv2.IMREAD_GRAYSCALE)
        assert img is not None and gt is not None and img.shape[:2] == gt.shape, n
        out.append((Path(n).stem, img, gt))
    return out


def protocol_seeds(gt: np.ndarray, protocol: str):
    """(seeds uint8 or None, box or None) for one protocol."""
    fg = (gt == 255).astype(np.uint8)
    if protocol == "box":
        ys, xs = np.nonzero(fg)
        return None, (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
    r = int(protocol.split("-")[1])
    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))
    seeds = np.zeros(gt.shape, np.uint8)
    seeds[cv2.erode(fg, disc) > 0] = 1
    seeds[cv2.dilate(fg, disc) == 0] = 2
    return seeds, None


def iou(mask: np.ndarray, gt: np.ndarray) -> float:
    known = gt != 128
    truth = gt == 255
    inter = (mask & truth & known).sum()
    union = ((mask | truth) & known).sum()
    return float(inter / union) if union else 1.0


def run_cv2(img, seeds, box, iterations, unknown):
    mask = np.full(img.shape[:2], cv2.GC_BGD, np.uint8)
    if box is not None:
        x0, y0, x1, y1 = box
        mask[y0:y1, x0:x1] = cv2.GC_PR_FGD
    else:
        mask[:] = cv2.GC_PR_FGD if unknown == "fg" else cv2.GC_PR_BGD
        mask[seeds == 1] = cv2.GC_FGD
        mask[seeds == 2] = cv2.GC_BGD
    bgd, fgd = np.zeros((1, 65)), np.zeros((1, 65))
    cv2.grabCut(img, mask, None, bgd, fgd, iterations, cv2.GC_INIT_WITH_MASK)
    return (mask == cv2.GC_FGD) | (mask == cv2.GC_PR_FGD)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_torchcut(rgb, seeds, box, args, device, warm_start=True):
    return grabcut(
        rgb,
        seeds,
        box=box,
        iterations=args.iterations,
        components=args.components,
        lam=args.lam,
        connectivity=args.connectivity,
        warm_start=warm_start,
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--radii", type=int, nargs="*", default=[10, 20])
    ap.add_argument("--no-box", action="store_true")
    ap.add_argument("--split", choices=("all", "tune", "test"), default="all")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--components", type=int, default=5)
    ap.add_argument("--lam", type=float, default=DEFAULT_LAM)
    ap.add_argument("--connectivity", type=int, default=8)
    ap.add_argument(
        "--cv2-unknown",
        choices=("fg", "bg", "both"),
        default="both",
        help="cv2 init of unknown trimap pixels (both: run both, report the better mean)",
    )
    ap.add_argument("--no-cv2", action="store_true")
    ap.add_argument("--no-timing", action="store_true", help="torchcut in batches of 16 only (for tuning)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--figure", action="store_true", help="also write the overlay figure")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (cv2.grabCut runs on one)")
    ap.add_argument(
        "--compare-cold",
        action="store_true",
        help="also time single calls whose cuts start from zero flow (grabcut(warm_start=False)), "
        "interleaved, and check that their masks are equal",
    )
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    data = load(args.split)
    if args.limit:
        data = data[: args.limit]
    protocols = [f"trimap-{r}" for r in args.radii] + ([] if args.no_box else ["box"])
    rgbs = [torch.from_numpy(np.ascontiguousarray(img[:, :, ::-1])).permute(2, 0, 1).to(device) for _, img, _ in data]
    rows, per_image, overlay = [], {}, {}
    for proto in protocols:
        inputs = [protocol_seeds(gt, proto) for _, _, gt in data]
        tc_iou, tc_t, cv_iou, cv_t, masks_single = [], [], {"fg": [], "bg": []}, [], []
        cold_t, cold_equal = [], True
        unknowns = ["fg"] if proto == "box" else (["fg", "bg"] if args.cv2_unknown == "both" else [args.cv2_unknown])
        if args.no_timing:
            for i in range(0, len(data), 16):
                part = range(i, min(i + 16, len(data)))
                seeds = None if inputs[0][0] is None else [torch.from_numpy(inputs[j][0]).to(device) for j in part]
                box = None if inputs[0][1] is None else [inputs[j][1] for j in part]
                ms = grabcut(
                    [rgbs[j] for j in part],
                    seeds,
                    box=box,
                    iterations=args.iterations,
                    components=args.components,
                    lam=args.lam,
                    connectivity=args.connectivity,
                )
                masks_single += [m.cpu().numpy() for m in ms]
            tc_iou = [iou(m, data[j][2]) for j, m in enumerate(masks_single)]
        if not args.no_cv2 or not args.no_timing:
            for j, (name, img, gt) in enumerate(data):
                seeds, box = inputs[j]
                if not args.no_timing:
                    st = None if seeds is None else torch.from_numpy(seeds).to(device)
                    if j == 0:
                        run_torchcut(rgbs[j], st, box, args, device)  # warm-up

                    def timed_call(warm):
                        sync(device)
                        t0 = time.perf_counter()
                        out = run_torchcut(rgbs[j], st, box, args, device, warm_start=warm)
                        sync(device)
                        return out, time.perf_counter() - t0

                    # with --compare-cold, odd images run the cold call first (first calls of a shape pay
                    # the CUDA-graph capture)
                    order = [True, False] if args.compare_cold else [True]
                    if j % 2:
                        order.reverse()
                    got = {w: timed_call(w) for w in order}
                    m, dt = got[True]
                    tc_t.append(dt)
                    m = m.cpu().numpy()
                    masks_single.append(m)
                    tc_iou.append(iou(m, gt))
                    if args.compare_cold:
                        mc, dt = got[False]
                        cold_t.append(dt)
                        cold_equal = cold_equal and np.array_equal(mc.cpu().numpy(), m)
                if not args.no_cv2:
                    for u in unknowns:
                        t0 = time.perf_counter()
                        cm = run_cv2(img, seeds, box, args.iterations, u)
                        if u == unknowns[0]:
                            cv_t.append(time.perf_counter() - t0)
                        cv_iou[u].append(iou(cm, gt))
                        if j < 4 and u == unknowns[0]:
                            overlay.setdefault(proto, {})[name] = (masks_single[j], cm)
                print(
                    f"{proto:10s} {name:10s} torchcut {tc_iou[j]:.4f}"
                    + "".join(f"  cv2[{u}] {cv_iou[u][j]:.4f}" for u in unknowns if cv_iou[u]),
                    flush=True,
                )
        row = {
            "protocol": proto,
            "images": len(data),
            "torchcut_mean": statistics.mean(tc_iou),
            "torchcut_median": statistics.median(tc_iou),
        }
        if not args.no_cv2:
            best = max(unknowns, key=lambda u: statistics.mean(cv_iou[u]))
            row.update(
                cv2_unknown=best,
                cv2_mean=statistics.mean(cv_iou[best]),
                cv2_median=statistics.median(cv_iou[best]),
                cv2_means={u: statistics.mean(cv_iou[u]) for u in unknowns},
                wins=sum(a > b for a, b in zip(tc_iou, cv_iou[best])),
                worst_vs_cv2=min(((a - b, data[j][0]) for j, (a, b) in enumerate(zip(tc_iou, cv_iou[best])))),
            )
            if args.split == "all":  # the held-out half: images at odd positions of the sorted list
                row.update(
                    torchcut_mean_test=statistics.mean(tc_iou[1::2]), cv2_mean_test=statistics.mean(cv_iou[best][1::2])
                )
            per_image[proto] = {data[j][0]: (tc_iou[j], cv_iou[best][j]) for j in range(len(data))}
        if tc_t:
            if cold_t:
                row.update(torchcut_cold_s=statistics.median(cold_t), cold_equal_warm=cold_equal)
            row.update(
                torchcut_s=statistics.median(tc_t),
                cv2_s=statistics.median(cv_t) if cv_t else None,
                torchcut_slowest=max(zip(tc_t, (d[0] for d in data))),
            )
            # one batched call on 16 images of different sizes
            part = list(range(min(16, len(data))))
            seeds = None if inputs[0][0] is None else [torch.from_numpy(inputs[j][0]).to(device) for j in part]
            box = None if inputs[0][1] is None else [inputs[j][1] for j in part]
            kw = dict(
                box=box,
                iterations=args.iterations,
                components=args.components,
                lam=args.lam,
                connectivity=args.connectivity,
            )
            grabcut([rgbs[j] for j in part], seeds, **kw)  # warm-up
            times = []
            for _ in range(2):
                sync(device)
                t0 = time.perf_counter()
                ms = grabcut([rgbs[j] for j in part], seeds, **kw)
                sync(device)
                times.append(time.perf_counter() - t0)
            equal = all(np.array_equal(ms[k].cpu().numpy(), masks_single[j]) for k, j in enumerate(part))
            sizes = sorted({tuple(rgbs[j].shape[1:]) for j in part})
            row.update(
                batch_images=len(part),
                batch_s_per_image=min(times) / len(part),
                batch_equal_single=equal,
                batch_sizes=len(sizes),
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(args, rows, per_image, {}, data, device)  # after every protocol: a timeout keeps what is done
    write(args, rows, per_image, overlay, data, device)


def write(args, rows, per_image, overlay, data, device):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if device.type == "cpu" else f"_{device.type}"
    tag = f"grabcut_quality{suffix}" + ("" if args.split == "all" else f"_{args.split}")
    dev_name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared)"
    )
    lines = [
        f"# GrabCut set: torchcut.grabcut vs cv2.grabCut ({device.type})",
        "",
        f"{len(data)} images (split: {args.split}), {args.iterations} iterations, {args.components} components, "
        f"lam {args.lam:g}, {args.connectivity}-connected; device {dev_name}; torch {torch.__version__}, "
        f"OpenCV {cv2.__version__}. IoU over pixels of known truth. Times: median per image of single-image "
        "calls (graph build + GMM fits + cuts), interleaved with cv2 in one process; noisy on a shared machine.",
        "",
        "| protocol | torchcut mean IoU | cv2 mean IoU | held-out half: torchcut / cv2 | torchcut median | cv2 median | torchcut better on | worst image vs cv2 | torchcut s/img | cv2 s/img | speed-up | batch of 16: s/img (equal to single) | slowest torchcut image |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:

        def f(k, fmt="{:.4f}"):
            return fmt.format(r[k]) if r.get(k) is not None else "-"

        speed = f"{r['cv2_s'] / r['torchcut_s']:.2f}x" if r.get("cv2_s") and r.get("torchcut_s") else "-"
        batch = f"{r['batch_s_per_image']:.3f} ({r['batch_equal_single']})" if "batch_s_per_image" in r else "-"
        worst = f"{r['worst_vs_cv2'][1]} ({r['worst_vs_cv2'][0]:+.3f})" if "worst_vs_cv2" in r else "-"
        slow = f"{r['torchcut_slowest'][1]} ({r['torchcut_slowest'][0]:.3f} s)" if "torchcut_slowest" in r else "-"
        cvm = f("cv2_mean") + (f" (unknown={r['cv2_unknown']})" if "cv2_unknown" in r else "")
        wins = f"{r['wins']}/{r['images']}" if "wins" in r else "-"
        held = f"{r['torchcut_mean_test']:.4f} / {r['cv2_mean_test']:.4f}" if "torchcut_mean_test" in r else "-"
        lines.append(
            f"| {r['protocol']} | {f('torchcut_mean')} | {cvm} | {held} | {f('torchcut_median')} | {f('cv2_median')} | "
            f"{wins} | {worst} | {f('torchcut_s', '{:.3f}')} | {f('cv2_s', '{:.3f}')} | {speed} | {batch} | {slow} |"
        )
    cold = [r for r in rows if "torchcut_cold_s" in r]
    if cold:
        lines += [
            "",
            "Cuts from zero flow (`grabcut(..., warm_start=False)`), single calls interleaved with the above:",
            "",
            "| protocol | warm-started s/img | from zero flow s/img | ratio | masks equal |",
            "|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| {r['protocol']} | {r['torchcut_s']:.4f} | {r['torchcut_cold_s']:.4f} | "
            f"{r['torchcut_cold_s'] / r['torchcut_s']:.2f}x | {r['cold_equal_warm']} |"
            for r in cold
        ]
    (out / f"{tag}.md").write_text("\n".join(lines) + "\n")
    (out / f"{tag}.json").write_text(
        json.dumps({"rows": rows, "per_image": per_image, "args": vars(args)}, indent=1, default=str)
    )
    print("\n".join(lines))
    if args.figure and overlay:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = {n: (img, gt) for n, img, gt in data}
        proto = "trimap-20" if "trimap-20" in overlay else next(iter(overlay))
        picks = list(overlay[proto].items())[:4]
        fig, axes = plt.subplots(len(picks), 3, figsize=(10, 3 * len(picks)))
        for i, (name, (tm, cm)) in enumerate(picks):
            img, gt = names[name]
            rgb = img[:, :, ::-1] / 255.0
            for k, (title, m) in enumerate((("truth", gt == 255), ("torchcut", tm), ("cv2.grabCut", cm))):
                ov = (
                    rgb * 0.45
                    + 0.55 * np.where(m[..., None], [0.1, 0.9, 0.2], [0.0, 0.0, 0.0]) * m[..., None]
                    + rgb * 0.55 * (~m[..., None])
                )
                axes[i, k].imshow(np.clip(ov, 0, 1))
                score = "" if k == 0 else f" IoU {iou(m, gt):.3f}"
                axes[i, k].set_title(f"{name}: {title}{score}", fontsize=8)
                axes[i, k].axis("off")
        fig.suptitle(f"GrabCut set, {proto}: object in green", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "grabcut_overlays.png", dpi=80)


if __name__ == "__main__":
    main()
