"""CPU benchmark of torchcut.distributed: a segmentation split over 2 gloo processes vs one process.

Same run, same machine, same energies: the Boykov-Jolly graph of a synthetic volume / picture
(``memory_issue14.volume``; the 2D case is its middle plane), solved by

* ``torchcut.distributed.segment`` over 2 spawned gloo processes on the loopback (split along axis 0;
  the compiled CPU solver on each slab), time to the mask inside the processes (rank 0's clock),
* ``torchcut.segment`` on the whole volume in this process (compiled CPU solver),
* PyMaxflow on the same integer graph (solve only, the fastest CPU peer here).

Flow values are printed side by side and required equal. Medians of ``--repeat`` runs after a warm-up.
On 2 shared cores the two processes compete for the cores: this shows the overhead of the
distributed algorithm (sweeps, local solves, border bytes), not a speed-up.

    python benchmarks/distributed_issue14.py --out benchmarks/results [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from dist_pool import Pool  # noqa: E402
from memory_issue14 import volume  # noqa: E402


def main():
    import torchcut
    from torchcut.energy import to_pymaxflow

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    pool = Pool(2)
    rows = []
    try:
        for name, n, ndim in (("2D 512^2, 4-conn", 512, 2), ("3D 64^3, 6-conn", 64, 3), ("3D 96^3, 6-conn", 96, 3)):
            image, seeds = volume(n, "cpu")
            if ndim == 2:
                image, seeds = image[n // 2].contiguous(), seeds[n // 2].contiguous()
                seeds[n // 2, n // 2], seeds[0, 0], seeds[-1, -1] = 1, 2, 2
            case = dict(kind="segment", image=image.numpy(), seeds=seeds.numpy(), axis=0, cuts=[0, n // 2, n],
                        options={})
            dist_t, whole_t, pmf_t = [], [], []
            for i in range(a.repeat + 1):
                ans = pool.run(case)
                assert all(k == "ok" for k, _ in ans), ans
                t0 = time.perf_counter()
                mask, r = torchcut.segment(image, seeds, ndim=ndim, return_result=True)
                t1 = time.perf_counter()
                pg, _ = to_pymaxflow(r.graph)
                t2 = time.perf_counter()
                pmf = pg.maxflow()
                t3 = time.perf_counter()
                if i:
                    dist_t.append(ans[0][1]["stats"]["seconds"])
                    whole_t.append(t1 - t0)
                    pmf_t.append(t3 - t2)
            stats = ans[0][1]["stats"]
            dmask = np.concatenate([x["mask"] for _, x in ans], 0)
            row = dict(case=name, nodes=int(seeds.numel()), distributed_flow=ans[0][1]["flow"], torchcut_flow=r.flow_value,
                       pymaxflow_flow=int(pmf), masks_equal=bool(np.array_equal(dmask, mask.numpy())),
                       distributed_s=statistics.median(dist_t), torchcut_s=statistics.median(whole_t),
                       pymaxflow_solve_s=statistics.median(pmf_t), sweeps=stats["sweeps"],
                       label_rounds=stats["label_rounds"], local_solves=stats["local_solves"],
                       border_bytes_per_sweep=stats["border_bytes_per_sweep"])
            assert row["distributed_flow"] == row["torchcut_flow"] == row["pymaxflow_flow"], row
            rows.append(row)
            print(row, flush=True)
    finally:
        pool.close()
    slowest = max(rows, key=lambda r: r["distributed_s"] / r["torchcut_s"])
    lines = ["# torchcut.distributed on a CPU: 2 gloo processes vs one process (2 shared cores, noisy)", "",
             "| case | flow: distributed / torchcut / PyMaxflow | masks equal | distributed s | torchcut s (to mask) | "
             "PyMaxflow s (solve) | sweeps | label rounds | local solves | border bytes / sweep |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['distributed_flow']} / {r['torchcut_flow']} / {r['pymaxflow_flow']} | "
                     f"{r['masks_equal']} | {r['distributed_s']:.3f} | {r['torchcut_s']:.3f} | {r['pymaxflow_solve_s']:.3f} | "
                     f"{r['sweeps']} | {r['label_rounds']} | {r['local_solves']} | {r['border_bytes_per_sweep']} |")
    lines += ["", f"Slowest case relative to one process: {slowest['case']} "
              f"({slowest['distributed_s'] / slowest['torchcut_s']:.1f}x the single-process time)."]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "distributed_issue14.md").write_text("\n".join(lines) + "\n")
    (a.out / "distributed_issue14.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
