"""Time torchcut on benchmark cases, through its public API only.

The runner (:mod:`benchmarks.run`) calls :func:`run_case` in its own process for the current code;
``--compare`` starts this file as a script, once per source tree and round, with ``PYTHONPATH`` set
to that tree, so each tree's ``torchcut`` solves the same saved inputs. This file therefore imports
nothing of the benchmarks package and, of torchcut, only names that older releases have too:
``GridGraph``, ``maxflow``, ``FlowGraph``, ``read_dimacs``, ``segment``, ``grabcut``, ``expansion``,
``labeling_energy``, ``refine``. A case whose function a tree lacks is reported as unavailable.

Each case: one warm-up call, then ``repeats`` timed calls (CUDA synchronised before and after each);
the median, every time, and the case's value (flow values; for the pipelines a digest of the output
and its energy or quality), which must not change between solvers or trees.

    PYTHONPATH=TREE python benchmarks/worker.py --cases DIR --device cpu --repeats 3 --out FILE.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
import zlib
from pathlib import Path

if __name__ == "__main__":  # run as a script: its own folder must not shadow installed modules
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402


class Unavailable(Exception):
    """The tree under test lacks a function the case needs."""


def _tc(name: str):
    import torchcut

    try:
        return getattr(torchcut, name)
    except AttributeError as exc:
        raise Unavailable(f"torchcut.{name} is missing") from exc


def _digest(t) -> str:
    a = np.ascontiguousarray(t.detach().cpu().numpy())
    return f"{zlib.crc32(a.tobytes()):08x}"


def _scalars(stats) -> dict:
    return {k: v for k, v in (stats or {}).items() if isinstance(v, (int, float, str, bool))}


def prepare(spec, x, device):
    """A callable that runs one timed solve of the case on ``device`` and returns ``(value, stats)``.

    Data goes to the device here, outside the timing; graph building is inside it (what a user pays).
    """
    import torch

    kind, p = spec["kind"], spec.get("params", {})
    dev = torch.device(device)
    if kind == "grid":
        GridGraph, maxflow = _tc("GridGraph"), _tc("maxflow")
        offs = [tuple(int(v) for v in o) for o in x["offsets"]]
        src, snk, edg = (torch.as_tensor(np.asarray(x[k])).to(dev) for k in ("source", "sink", "edges"))

        def fn():
            r = maxflow(GridGraph(src, snk, edg, offs))
            r.mask  # noqa: B018 - reading the mask is part of the work
            return [int(v) for v in r.flow_values.tolist()], _scalars(r.stats)

        return fn
    if kind == "moves":
        FlowGraph, maxflow = _tc("FlowGraph"), _tc("maxflow")
        count = sum(1 for k in x if k.endswith("_n"))
        moves = [
            (
                [
                    torch.as_tensor(np.asarray(x[f"m{i}_{k}"])).to(dev)
                    for k in ("u", "v", "cap", "rev_cap", "source", "sink")
                ],
                int(x[f"m{i}_n"]),
            )
            for i in range(count)
        ]

        def fn():
            flows = []
            for (u, v, c, rc, s, t), n in moves:
                r = maxflow(FlowGraph.from_edges(u, v, c, rc, source=s, sink=t, num_nodes=n))
                flows.append(int(r.flow_value))
            return flows, {"moves": len(flows)}

        return fn
    if kind == "dimacs":
        read_dimacs, maxflow = _tc("read_dimacs"), _tc("maxflow")
        g = read_dimacs(str(x["path"])).to(dev)

        def fn():
            r = maxflow(g)
            return [int(r.flow_value)], _scalars(r.stats)

        return fn
    if kind == "segment":
        segment = _tc("segment")
        img = torch.as_tensor(np.asarray(x["image"])).to(dev)
        seeds = torch.as_tensor(np.asarray(x["seeds"])).to(dev)

        def fn():
            m = segment(img, seeds, connectivity=p["connectivity"])
            return {"foreground": int(m.sum()), "digest": _digest(m)}, {}

        return fn
    if kind == "grabcut":
        grabcut = _tc("grabcut")
        # the iteration cap's keyword: max_iter, iterations in trees before the rename (the guard's references)
        cap = "max_iter" if "max_iter" in inspect.signature(grabcut).parameters else "iterations"
        count = sum(1 for k in x if k.endswith("_image"))
        items = []
        for i in range(count):
            img = torch.as_tensor(np.asarray(x[f"i{i}_image"])).permute(2, 0, 1).contiguous().to(dev)
            seeds = torch.as_tensor(np.asarray(x[f"i{i}_seeds"])).to(dev) if f"i{i}_seeds" in x else None
            box = tuple(int(v) for v in x[f"i{i}_box"]) if f"i{i}_box" in x else None
            items.append((img, seeds, box, np.asarray(x[f"i{i}_truth"])))

        def fn():
            ious, digests = [], []
            for img, seeds, box, truth in items:
                m = grabcut(img, seeds, box=box, **{cap: p["iterations"]})
                mm = m.cpu().numpy()
                known, t = truth != 128, truth == 255
                ious.append(round(float((mm & t & known).sum() / max(1, ((mm | t) & known).sum())), 6))
                digests.append(_digest(m))
            return {"iou": ious, "digest": ",".join(digests)}, {}

        return fn
    if kind == "expansion":
        expansion, energy = _tc("expansion"), _tc("labeling_energy")
        U, V, W = (torch.as_tensor(np.asarray(x[k])).to(dev) for k in ("unary", "pairwise", "weights"))

        def fn():
            lab = expansion(U, V, weights=W)
            return {"energy": float(energy(U, V, lab, weights=W)), "digest": _digest(lab)}, {}

        return fn
    if kind == "refine":
        refine = _tc("refine")
        img, probs = (torch.as_tensor(np.asarray(x[k])).to(dev) for k in ("image", "probs"))
        truth = torch.as_tensor(np.asarray(x["truth"]))
        lam, sigma = float(x["lam"]), float(x["sigma"])

        def fn():
            lab = refine(img, probs, lam=lam, sigma=sigma)
            acc = float((lab.cpu() == truth).double().mean())
            return {"accuracy": round(acc, 6), "digest": _digest(lab)}, {}

        return fn
    raise ValueError(f"spec['kind']: unknown kind {kind!r}")


def _sync(device):
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def time_fn(fn, device="cpu", repeats=3, warmup=1, budget=None, min_time=0.0):
    """Time ``fn() -> (value, stats)``: ``warmup`` untimed calls, then ``repeats`` timed ones (fewer, at
    least one, when ``budget`` seconds would not hold them at the speed of the last warm-up call; more,
    up to 25 times as many, while the timed calls add up to less than ``min_time`` seconds, so that a
    case of a millisecond gets a median of many calls), CUDA synchronised before and after each. Returns
    ``(times, value, stats)`` of the last call; raises ValueError when a call's value differs from the
    one before."""
    value = stats = None
    t_warm = None
    for _ in range(warmup):
        t0 = time.perf_counter()
        value, stats = fn()
        _sync(device)
        t_warm = time.perf_counter() - t0
    if budget and t_warm:
        repeats = max(1, min(repeats, int(budget / max(t_warm, 1e-9))))
    times = []
    while len(times) < repeats or (sum(times) < min_time and len(times) < 25 * repeats):
        _sync(device)
        t0 = time.perf_counter()
        v, stats = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
        if value is not None and v != value:
            raise ValueError(f"value changed between calls: {value} then {v}")
        value = v
    return times, value, stats


def run_case(spec, x, device="cpu", repeats=3, warmup=1, budget=None, min_time=0.0) -> dict:
    """Time one case with :func:`time_fn`.

    Returns a dict with ``id``, ``median`` (seconds), ``times``, ``value`` (of the last call;
    every call must give the same, else ``error`` says so) and ``stats``; or ``id`` and
    ``unavailable`` / ``error`` (a message) when the case could not run.
    """
    try:
        times, value, stats = time_fn(prepare(spec, x, device), device, repeats, warmup, budget, min_time)
    except Unavailable as exc:
        return {"id": spec["id"], "unavailable": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported per case, the other cases go on
        return {"id": spec["id"], "error": f"{type(exc).__name__}: {exc}"}
    return {"id": spec["id"], "median": statistics.median(times), "times": times, "value": value, "stats": stats}


def load_inputs(folder: Path, index: int) -> dict:
    with np.load(folder / f"{index}.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, type=Path, help="folder with cases.json and <index>.npz inputs")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds of timed calls per case (fewer repeats past it)"
    )
    ap.add_argument(
        "--min-time", type=float, default=0.0, help="seconds of timed calls per case at least (more calls, up to 25x)"
    )
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    import torch

    import torchcut

    specs = json.loads((args.cases / "cases.json").read_text())
    out = {"torchcut": str(Path(torchcut.__file__).resolve().parent), "torch": torch.__version__, "results": []}
    for i, spec in enumerate(specs):
        res = run_case(
            spec, load_inputs(args.cases, i), args.device, args.repeats, args.warmup, args.budget, args.min_time
        )
        out["results"].append(res)
        msg = f"{res['median'] * 1e3:.2f} ms" if "median" in res else res.get("unavailable") or res.get("error")
        print(f"  {spec['id']}: {msg}", file=sys.stderr, flush=True)
        args.out.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
