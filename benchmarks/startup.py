"""Start-up costs: importing torch and torchcut, and the first ``torchcut.segment()`` of a process.

Each measurement runs in fresh processes (``--processes``, default 5; medians reported):

* ``import torch`` alone, then ``import torchcut`` in the same process (the difference is torchcut's
  import);
* on the CPU: the first ``torchcut.segment()`` of a 256x256 image in the process (loading the
  compiled solvers included) against the second call;
* on CUDA (when available): CUDA's own start, ``torch.zeros(1, device="cuda")``, timed first, then the
  first and the second ``segment()`` on the GPU.

    python benchmarks/startup.py [--out benchmarks/results/startup.md] [--processes 5] [--no-cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One fresh process: times in seconds, printed as JSON on the last line.
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import torchcut
t2 = time.perf_counter()
out = {"import torch": t1 - t0, "import torchcut": t2 - t1}
device = sys.argv[1]
g = torch.Generator().manual_seed(0)
img = torch.rand(3, 256, 256, generator=g)
seeds = torch.zeros(256, 256, dtype=torch.int64)
seeds[118:138, 118:138] = 1
seeds[:8] = 2
seeds[-8:] = 2
if device == "cuda":
    t = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out["cuda init"] = time.perf_counter() - t
    img, seeds = img.cuda(), seeds.cuda()
for k in ("first segment()", "second segment()"):
    t = time.perf_counter()
    m = torchcut.segment(img, seeds)
    if device == "cuda":
        torch.cuda.synchronize()
    out[k] = time.perf_counter() - t
print(json.dumps(out))
"""


def measure(device: str, processes: int) -> dict:
    """Medians over ``processes`` fresh processes of each step (seconds), and the process wall time."""
    runs = []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    for _ in range(processes):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", CHILD, device], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"start-up child on {device} failed:\n{r.stderr[-2000:]}")
        d = json.loads(r.stdout.strip().splitlines()[-1])
        d["process wall time"] = wall
        runs.append(d)
    return {k: statistics.median(d[k] for d in runs) for k in runs[0]}


def render(results: dict, processes: int) -> str:
    import platform

    import torch

    lines = [
        "# Start-up costs of torchcut",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores"
        + (f", {torch.cuda.get_device_name()}" if "cuda" in results else "")
        + f"; torch {torch.__version__}. Medians of {processes} fresh processes; 256x256 RGB image, "
        "`torchcut.segment(image, seeds)` with default options.",
        "",
        "| device | import torch ms | import torchcut ms (the difference) | CUDA init ms | first segment() ms "
        "| second segment() ms | first - second ms | process wall time ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for dev, r in results.items():
        ci = f"{r['cuda init'] * 1e3:.0f}" if "cuda init" in r else "-"
        lines.append(
            f"| {dev} | {r['import torch'] * 1e3:.0f} | {r['import torchcut'] * 1e3:.0f} | {ci} | "
            f"{r['first segment()'] * 1e3:.1f} | {r['second segment()'] * 1e3:.1f} | "
            f"{(r['first segment()'] - r['second segment()']) * 1e3:.1f} | {r['process wall time'] * 1e3:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the markdown table here (default: print only)")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--no-cuda", action="store_true")
    args = ap.parse_args(argv)
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and not args.no_cuda else [])
    results = {d: measure(d, args.processes) for d in devices}
    md = render(results, args.processes)
    print(md)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
