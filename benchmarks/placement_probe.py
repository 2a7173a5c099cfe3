"""Does the memory placement of a solve's buffers set its speed? (GPU session helper, session 10.)

``python benchmarks/placement_probe.py [--cases 256-6,2048-4] [--shifts 24] [--repeat 3]``: for each
shift k, releases the caching allocator's free blocks, holds a pad of k x 2 MiB (so that the solve's
buffers land elsewhere), and times ``--repeat`` solves in a row, which reuse the same cached blocks.
If placement sets the time, the solves of one shift agree and the shifts differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_grid as T  # noqa: E402

import torchcut  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="256-6,2048-4")
    ap.add_argument("--shifts", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--opts", default="{}", help="solver options (JSON)")
    args = ap.parse_args()
    opts = json.loads(args.opts)
    specs = T.cases()
    for name in args.cases.split(","):
        g = T.graph_of(specs[name], "torchcut")
        torchcut.maxflow(g, **opts)
        print(f"== {name} {opts}", flush=True)
        for k in range(args.shifts):
            torch.cuda.empty_cache()
            pad = torch.empty(k * (1 << 21), dtype=torch.uint8, device="cuda") if k else None
            ts = []
            for _ in range(args.repeat):
                ms, r = T.solve_ms(g, opts)
                ts.append(f"{ms:6.2f} ({r.stats['global_relabels']}/{r.stats['push_launches']})")
                del r
            print(f"  shift {k:2d} x 2 MiB: " + "  ".join(ts), flush=True)
            del pad


if __name__ == "__main__":
    main()
