"""Peak memory of ``segment()`` on a 3D 6-connected volume, per stage, in bytes per voxel.

A synthetic volume (float32, a bright ball in noise) with uint8 seeds (a few object voxels in the
ball, background voxels at the corners) goes through the two stages of ``segment()``:

* energy + graph: ``segmentation_graph`` (data term, smoothness term, the GridGraph's tensors),
* solve: ``torchcut.maxflow`` on that graph.

CUDA (``--device cuda``): ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``,
counting everything allocated, the inputs included (5 bytes/voxel), in one process.
CPU: each stage runs in a fresh child process; the growth of the resident set's high-water mark
over the resident set before the stage (inputs loaded, solver loaded) is what the stage adds; the
inputs' 5 bytes/voxel are added to report the same quantity as on CUDA. RSS numbers include the
allocator's slack and are noisy.

    python benchmarks/memory_issue14.py --sizes 64 96 --device cpu --out benchmarks/results
    python benchmarks/memory_issue14.py --sizes 256 512 1024 --device cuda --out /tmp/out/issue14

Writes OUT/memory_issue14_<device>.md and .json. Also ``--distributed 768`` under torchrun (two
ranks, NCCL): the volume split along axis 0, ``torchcut.distributed.segment`` timed against
``torchcut.segment`` of the whole volume on rank 0's GPU, flows side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

INPUT_BYTES = 5  # float32 volume + uint8 seeds


def volume(n: int, device, lo: int = 0, hi: int | None = None):
    """Planes ``lo:hi`` (axis 0) of the synthetic n^3 volume and its seeds, made plane by plane.

    Each plane's noise comes from its own generator (seeded by the plane's index), so a slab is
    exactly the matching planes of the whole volume on the same kind of device.
    """
    hi = n if hi is None else hi
    y = torch.arange(n, dtype=torch.float32, device=device).view(-1, 1)
    x = torch.arange(n, dtype=torch.float32, device=device).view(1, -1)
    c = (n - 1) / 2
    image = torch.empty((hi - lo, n, n), dtype=torch.float32, device=device)
    for i in range(lo, hi):  # one plane at a time: no full-size temporaries
        g = torch.Generator(device=device).manual_seed(i)
        plane = ((((i - c) ** 2 + (y - c) ** 2 + (x - c) ** 2) < (0.35 * n) ** 2).float())
        plane.add_(torch.randn((n, n), generator=g, device=device), alpha=0.3)
        image[i - lo] = plane
    seeds = torch.zeros((hi - lo, n, n), dtype=torch.uint8, device=device)
    m = n // 2
    for p, label in (((m, m, m), 1), ((m + 1, m, m), 1), ((0, 0, 0), 2), ((n - 1, n - 1, n - 1), 2),
                     ((0, n - 1, 0), 2), ((n - 1, 0, n - 1), 2)):
        if lo <= p[0] < hi:
            seeds[p[0] - lo, p[1], p[2]] = label
    return image, seeds


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_child(n: int, stage: str) -> dict:
    """One stage in this (fresh) process: resident-set growth in bytes per voxel."""
    import torchcut
    from torchcut.solvers import consume_mask, cpu

    cpu.load_error()  # load the solver before measuring
    image, seeds = volume(n, "cpu")
    g = torchcut.segmentation_graph(image, seeds, connectivity=6) if stage == "solve" else None
    base = _rss()
    t0 = time.perf_counter()
    if stage == "energy":
        g = torchcut.segmentation_graph(image, seeds, connectivity=6)
        out = {}
    else:
        consume_mask(g)  # what segment() runs
        out = {}
    out.update(seconds=time.perf_counter() - t0, bytes_per_voxel=(_maxrss() - base) / n**3,
               kept_bytes_per_voxel=(_rss() - base) / n**3)
    if stage == "solve":
        out["flow"] = torchcut.maxflow(g).flow_value  # (the CPU solver left the graph untouched)
    return out


def run_cpu(sizes):
    rows = []
    for n in sizes:
        row = {"n": n, "device": "cpu"}
        for stage in ("energy", "solve"):
            cmd = [sys.executable, __file__, "--child", str(n), stage]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            row[stage] = res
        # stages run one after the other: the solve's peak sits on top of the graph the energy kept
        e = row["energy"]
        row["peak_bytes_per_voxel"] = INPUT_BYTES + max(e["bytes_per_voxel"],
                                                        e["kept_bytes_per_voxel"] + row["solve"]["bytes_per_voxel"])
        rows.append(row)
        print(row, flush=True)
    return rows


def run_cuda(sizes):
    import torchcut
    from torchcut.solvers import consume_mask

    rows = []
    for n in sizes:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            image, seeds = volume(n, "cuda")
            nv = n**3
            row = {"n": n, "device": torch.cuda.get_device_name()}
            row["inputs_bytes_per_voxel"] = torch.cuda.memory_allocated() / nv
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g = torchcut.segmentation_graph(image, seeds, connectivity=6)
            torch.cuda.synchronize()
            row["energy_seconds"] = time.perf_counter() - t0
            row["energy_peak_bytes_per_voxel"] = torch.cuda.max_memory_allocated() / nv
            row["graph_bytes_per_voxel"] = torch.cuda.memory_allocated() / nv
            torch.cuda.reset_peak_memory_stats()
            sink_total = int(g.sink.sum(dtype=torch.int64))
            t0 = time.perf_counter()
            consume_mask(g)  # what segment() runs: the solve in the graph's own tensors
            torch.cuda.synchronize()
            row["solve_seconds"] = time.perf_counter() - t0
            row["solve_peak_bytes_per_voxel"] = torch.cuda.max_memory_allocated() / nv
            row["flow"] = sink_total - int(g.sink.sum(dtype=torch.int64))
            row["peak_bytes_per_voxel"] = max(row["energy_peak_bytes_per_voxel"], row["solve_peak_bytes_per_voxel"])
            del g
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torchcut.segment(image, seeds, connectivity=6)  # end to end, as a user calls it
            torch.cuda.synchronize()
            row["segment_seconds"] = time.perf_counter() - t0
            del image, seeds
        except torch.cuda.OutOfMemoryError as exc:
            row = {"n": n, "error": f"out of memory: {str(exc).splitlines()[0]}"}
        rows.append(row)
        print(row, flush=True)
    return rows


def run_distributed(n: int, out: Path, single: bool = True):
    """Under torchrun: the n^3 volume over the ranks (NCCL) against the whole volume on one GPU."""
    import datetime

    import torch.distributed as dist

    import torchcut
    from torchcut import distributed as tcd

    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    cuts = [n * r // world for r in range(world + 1)]
    image, seeds = volume(n, "cuda", cuts[rank], cuts[rank + 1])
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    mask, r = tcd.segment(image, seeds, connectivity=6, return_result=True)
    torch.cuda.synchronize()
    row = {"n": n, "ranks": world, "seconds": time.perf_counter() - t0, "flow": r.flow_value,
           "peak_bytes_per_voxel": torch.cuda.max_memory_allocated() / image.numel(), **r.stats}
    del mask, r, image, seeds
    dist.barrier()
    if rank == 0 and single:
        torch.cuda.empty_cache()
        image, seeds = volume(n, "cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _, whole = torchcut.segment(image, seeds, connectivity=6, return_result=True)
        torch.cuda.synchronize()
        row["one_gpu_seconds"] = time.perf_counter() - t0
        row["one_gpu_flow"] = whole.flow_value
        row["speedup"] = row["one_gpu_seconds"] / row["seconds"]
    if rank == 0:
        print(json.dumps(row), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"distributed_{n}_{world}gpu.json").write_text(json.dumps(row, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def write(rows, out: Path, device: str):
    out.mkdir(parents=True, exist_ok=True)
    (out / f"memory_issue14_{device}.json").write_text(json.dumps(rows, indent=1))
    lines = [f"# segment() peak memory, 3D 6-connected, {device}", "",
             "| n^3 | energy+graph peak B/voxel (graph kept) | solve B/voxel | peak B/voxel (inputs incl.) | flow | segment() s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['n']} | {r['error']} | | | | |")
        elif device == "cpu":
            lines.append(f"| {r['n']} | {r['energy']['bytes_per_voxel']:.1f} ({r['energy']['kept_bytes_per_voxel']:.1f}) | "
                         f"{r['solve']['bytes_per_voxel']:.1f} | "
                         f"{r['peak_bytes_per_voxel']:.1f} | {r['solve']['flow']} | "
                         f"{r['energy']['seconds'] + r['solve']['seconds']:.2f} |")
        else:
            lines.append(f"| {r['n']} | {r['energy_peak_bytes_per_voxel']:.1f} (graph {r['graph_bytes_per_voxel']:.1f}) | "
                         f"{r['solve_peak_bytes_per_voxel']:.1f} | {r['peak_bytes_per_voxel']:.1f} | {r['flow']} | "
                         f"{r['segment_seconds']:.2f} |")
    (out / f"memory_issue14_{device}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[64, 96])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--distributed", type=int)
    ap.add_argument("--no-single", action="store_true", help="--distributed: skip the whole volume on one GPU")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(cpu_child(int(a.child[0]), a.child[1])))
        return
    if a.distributed:
        run_distributed(a.distributed, a.out, not a.no_single)
        return
    rows = run_cpu(a.sizes) if a.device == "cpu" else run_cuda(a.sizes)
    write(rows, a.out, a.device)


if __name__ == "__main__":
    main()
