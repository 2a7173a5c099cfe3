"""torchcut.distributed.segment against torchcut.segment: time, peak memory per voxel, equal answers.

The volume: n^3 float32, bright spheres (a fixed random set, the same on every rank) in Gaussian
noise, object seeds at the spheres' centres, background seeds on the six faces; 6-connected by
default. Rank r makes only its planes along axis 0 (each plane from its own generator, seeded by
the plane's index), so the slabs are exactly the planes of the whole volume.

Peak memory per rank, inputs included (image and seeds), of the last of ``--repeat`` runs (a small
volume is solved first, so the solvers are loaded): on CUDA ``max_memory_allocated`` over
what was allocated before the inputs were made; on CPU the growth of the resident set's high-water
mark (reset through ``/proc/self/clear_refs``) over the resident set before the inputs (noisy: it
counts the allocator's slack).

With ``--single`` rank 0 also runs ``torchcut.segment`` on the whole volume (after the distributed
run, whose tensors are freed first) and the two answers are compared: the count and an index
checksum of the object voxels, and with ``--result`` the flow values. Without ``--result`` the
distributed call returns the mask only, as ``segment()`` does by default.

Two GPUs (NCCL)::

    torchrun --nproc_per_node=2 benchmarks/distributed.py --sizes 256 512 1024 --single --out OUT.jsonl

CPU (gloo, N spawned processes)::

    python benchmarks/distributed.py --cpu-ranks 2 --sizes 64 96 --single
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def spheres(n: int, count: int = 12, seed: int = 0):
    """Centres and radii of the spheres (the same on every rank)."""
    g = torch.Generator().manual_seed(seed)
    r = (n * (0.04 + 0.08 * torch.rand(count, generator=g))).tolist()
    c = (torch.rand(count, 3, generator=g) * 0.7 + 0.15).mul(n - 1).round().long().tolist()
    return list(zip(c, r))


def volume(n: int, device, lo: int, hi: int):
    """Planes ``lo:hi`` (axis 0) of the n^3 volume and its seeds, one plane at a time."""
    balls = spheres(n)
    y = torch.arange(n, dtype=torch.float32, device=device).view(-1, 1)
    x = torch.arange(n, dtype=torch.float32, device=device).view(1, -1)
    image = torch.empty((hi - lo, n, n), dtype=torch.float32, device=device)
    seeds = torch.zeros((hi - lo, n, n), dtype=torch.uint8, device=device)
    for i in range(lo, hi):
        plane = torch.zeros((n, n), dtype=torch.float32, device=device)
        for (cz, cy, cx), r in balls:
            if abs(i - cz) <= r:
                plane.masked_fill_((i - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2 <= r * r, 1.0)
        g = torch.Generator(device=device).manual_seed(i)
        plane.add_(torch.randn((n, n), generator=g, device=device), alpha=0.35)
        image[i - lo] = plane
        s = seeds[i - lo]
        if i in (0, n - 1):
            s.fill_(2)
        s[0, :] = 2
        s[-1, :] = 2
        s[:, 0] = 2
        s[:, -1] = 2
        for (cz, cy, cx), _ in balls:  # a 3 x 3 x 3 cube of object seeds at each centre
            if abs(i - cz) <= 1:
                s[cy - 1 : cy + 2, cx - 1 : cx + 2] = 1
    return image, seeds


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak(device) -> int:
    """Reset the peak counter; return the baseline it is measured from."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    return _rss("VmRSS")


def _peak(device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _rss("VmHWM")


def _checksum(mask: torch.Tensor, start: int) -> list:
    """[object voxels, sum of their global linear indices mod 2**61 - 1] of a slab starting at plane start."""
    n2 = mask.shape[1] * mask.shape[2]
    idx = mask.reshape(-1).nonzero().squeeze(1).to(torch.int64) + start * n2
    return [int(idx.numel()), int(idx.remainder(2**61 - 1).sum()) % (2**61 - 1)]


def table(rows, device_name: str, argv) -> str:
    """The rows of one run as a markdown table with what produced them."""
    import subprocess

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()
            or "-"
        )
    except OSError:
        commit = "-"
    r0 = rows[0]

    def work(st):
        return f"{st.get('global_relabels', '-')} relabels ({st.get('repairs', 0)} repaired), {st.get('rounds', '-')} push launches"

    mode = "with the certificate (return_result=True)" if r0.get("flow") is not None else "mask only"
    lines = [
        f"# torchcut.distributed over {r0['ranks']} ranks against one device",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {r0['ranks']} x {device_name}, "
        f"{'torchrun, NCCL' if r0['device'] == 'cuda' else 'gloo'}; commit {commit}; {mode}. A {r0['connectivity']}-connected "
        "volume of spheres in noise (object seeds inside, background seeds on the faces): "
        "`torchcut.distributed.segment` over the ranks against `torchcut.segment` of the whole volume on "
        "rank 0's device, in the same run, best of the repeats. Peak bytes per voxel include the inputs. "
        "Bytes between ranks: sent by all ranks during the solve.",
        "",
        "    "
        + (f"torchrun --nproc_per_node={r0['ranks']} " if r0["device"] == "cuda" else "python ")
        + " ".join([os.path.relpath(argv[0])] + list(argv[1:])),
        "",
        f"| volume | one device | {r0['ranks']} ranks | speed-up | peak B/voxel per rank | one device B/voxel "
        "| bytes between ranks | work | equal answers |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        st = r["stats"]
        one = r.get("one_device_seconds")
        lines.append(
            f"| {r['n']}^3 | {'%.0f ms' % (one * 1000) if one else r.get('one_device', '-')} | "
            f"{r['seconds'] * 1000:.0f} ms | {'%.2fx' % r['speedup'] if r.get('speedup') else '-'} | "
            f"{max(r['peak_bytes_per_voxel_per_rank']):.1f} | "
            f"{'%.1f' % r['one_device_peak_bytes_per_voxel'] if r.get('one_device_peak_bytes_per_voxel') else '-'} | "
            f"{r['bytes_between_ranks'] / 1e6:.0f} MB | {work(st)} | {r.get('equal', '-')} |"
        )
    return "\n".join(lines) + "\n"


def run(sizes, connectivity: int, single: bool, repeat: int, out, result_too: bool):
    import torchcut
    from torchcut import distributed as tcd

    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    warm = volume(16, device, 16 * rank // world, 16 * (rank + 1) // world)  # loads the solvers
    tcd.segment(*warm, connectivity=connectivity)
    if single and rank == 0:
        torchcut.segment(*volume(16, device, 0, 16), connectivity=connectivity)
    del warm
    rows = []
    for n in sizes:
        cuts = [n * r // world for r in range(world + 1)]
        lo, hi = cuts[rank], cuts[rank + 1]
        times, result = [], None
        for _ in range(repeat):
            base = _reset_peak(device)
            image, seeds = volume(n, device, lo, hi)
            dist.barrier()
            t0 = time.perf_counter()
            if result_too:  # also the certificate: a copy of the network is kept
                mask, r = tcd.segment(image, seeds, connectivity=connectivity, return_result=True)
            else:
                mask, r = tcd.segment(image, seeds, connectivity=connectivity), None
            if device.type == "cuda":
                torch.cuda.synchronize()
            dist.barrier()
            times.append(time.perf_counter() - t0)
            peak = _peak(device) - base  # the last run's
            result = (r.flow_value if r else None, _checksum(mask, lo), dict(tcd.last_stats))
            del image, seeds, mask, r
        flow, check, stats = result
        t = torch.tensor(check + [peak, stats.get("border_bytes", 0)], dtype=torch.int64, device=device)
        gathered = [torch.zeros_like(t) for _ in range(world)]
        dist.all_gather(gathered, t)
        gathered = [g.tolist() for g in gathered]
        phases = [None] * world  # each rank's build and solve phases
        dist.all_gather_object(phases, {k: stats.get(k) for k in ("build_seconds", "seconds", "relabel_ms", "push_ms")})
        objects = sum(g[0] for g in gathered)
        checksum = sum(g[1] for g in gathered) % (2**61 - 1)
        peaks = [g[2] / ((cuts[i + 1] - cuts[i]) * n * n) for i, g in enumerate(gathered)]
        row = dict(
            n=n,
            connectivity=connectivity,
            ranks=world,
            device=str(device.type),
            seconds=min(times),
            all_seconds=times,
            flow=flow,
            objects=objects,
            peak_bytes_per_voxel_per_rank=peaks,
            bytes_between_ranks=sum(g[3] for g in gathered),
            phases=phases,
            stats={k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
        )
        if single and rank == 0:
            if device.type == "cuda":
                torch.cuda.empty_cache()
            try:
                base = _reset_peak(device)
                image, seeds = volume(n, device, 0, n)
                one = []
                for _ in range(repeat):
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    got = torchcut.segment(image, seeds, connectivity=connectivity, return_result=result_too)
                    whole, res = got if result_too else (got, None)
                    del got
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    one.append(time.perf_counter() - t0)
                row.update(
                    one_device_seconds=min(one),
                    one_device_flow=res.flow_value if res else None,
                    one_device_peak_bytes_per_voxel=(_peak(device) - base) / n**3,
                    equal=(
                        flow in (None, res.flow_value if res else None) and _checksum(whole, 0) == [objects, checksum]
                    ),
                    speedup=min(one) / min(times),
                )
                del whole, res
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()  # the energy alone, for the build / solve split
                g = torchcut.segmentation_graph(image, seeds, connectivity=connectivity, ndim=3)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                row.update(one_device_build_seconds=time.perf_counter() - t0)
                if n <= 1024:  # the solver's counters (a solve of the graph alone)
                    row.update(
                        one_device_stats={
                            k: v for k, v in torchcut.maxflow(g).stats.items() if isinstance(v, (int, float))
                        }
                    )
                del g
            except torch.OutOfMemoryError:
                row.update(one_device_seconds=None, one_device="out of memory")
            image = seeds = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        dist.barrier()
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
            if out:
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return rows


def _cpu_rank(rank, world, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=1800))
    try:
        rows = run(args.sizes, args.connectivity, args.single, args.repeat, args.out, args.result)
        if args.md and rank == 0:
            with open(args.md, "w") as f:
                f.write(table(rows, "CPU process (1 thread)", args.argv))
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64])
    p.add_argument("--connectivity", type=int, default=6)
    p.add_argument("--single", action="store_true", help="also torchcut.segment of the whole volume on rank 0")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--cpu-ranks", type=int, default=0, help="spawn this many gloo processes (no torchrun)")
    p.add_argument(
        "--result",
        action="store_true",
        help="distributed.segment with return_result=True (flow values compared; keeps a copy)",
    )
    p.add_argument("--out", default=None, help="append one JSON line per size")
    p.add_argument("--md", default=None, help="write the run's table (markdown) here")
    args = p.parse_args()
    if args.cpu_ranks:
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args.argv = list(sys.argv)
        mp.spawn(_cpu_rank, args=(args.cpu_ranks, port, args), nprocs=args.cpu_ranks)
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=1800))
    try:
        rows = run(args.sizes, args.connectivity, args.single, args.repeat, args.out, args.result)
        if args.md and dist.get_rank() == 0:
            name = torch.cuda.get_device_name() if backend == "nccl" else "CPU process"
            with open(args.md, "w") as f:
                f.write(table(rows, name, sys.argv))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
