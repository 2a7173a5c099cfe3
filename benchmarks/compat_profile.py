"""Where the time of a PyMaxflow-style script goes with device="cuda": each call timed alone.

python benchmarks/compat_profile.py   (GPU machine; prints one line per call, medians of 5)
"""
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat import energy, synthetic  # noqa: E402

import torchcut.compat.pymaxflow as tcm  # noqa: E402


def main():
    src, snk, weights = energy(synthetic((64, 256, 256)), integer=False)
    steps = {}
    for rep in range(6):
        torch.cuda.synchronize()
        marks = [("start", time.perf_counter())]
        g = tcm.Graph[float](device="cuda")
        ids = g.add_grid_nodes(src.shape)
        for a in range(3):
            st = np.zeros((3, 3, 3))
            st[tuple(2 if b == a else 1 for b in range(3))] = 1
            g.add_grid_edges(ids, weights=weights[a], structure=st, symmetric=True)
            torch.cuda.synchronize()
            marks.append((f"add_grid_edges[{a}]", time.perf_counter()))
        g.add_grid_tedges(ids, src, snk)
        torch.cuda.synchronize()
        marks.append(("add_grid_tedges", time.perf_counter()))
        g.maxflow()
        marks.append(("maxflow", time.perf_counter()))
        g.get_grid_segments(ids)
        marks.append(("get_grid_segments", time.perf_counter()))
        if rep:
            for (_, t0), (name, t1) in zip(marks, marks[1:]):
                steps.setdefault(name, []).append(t1 - t0)
    x = torch.from_numpy(src)
    h2d = []
    for _ in range(5):
        torch.cuda.synchronize(); t0 = time.perf_counter(); x.to("cuda"); torch.cuda.synchronize(); h2d.append(time.perf_counter() - t0)
    for name, ts in steps.items():
        print(f"{name:20s} {statistics.median(ts) * 1e3:7.2f} ms")
    print(f"H2D of one float64 map ({x.numel() * 8 / 2**20:.0f} MiB, pageable): {statistics.median(h2d) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
