"""End to end: the public calls a user makes, beside the solves inside them and beside torchmaxflow.

``python -m benchmarks --suite e2e`` times ``torchcut.segment``, ``torchcut.refine`` (with and without
seeds: ``refine_seeds``), ``torchcut.grabcut`` and ``torchcut.expansion`` per size (64^2-2048^2 and
64^3-256^3), gray and colour, 4/8- and 6/26-connected, on the CPU and, where CUDA is available, on the
GPU. Per case:

* **call ms**: the public call on inputs already on the device (median of ``--repeats`` calls after a
  warm-up, CUDA synchronised); the mask is read after the clock stops;
* **solve ms**: the solver alone on the graphs the call built. One untimed call runs under a dispatch
  mode that records every solver op it reaches (``torch.ops.torchcut.*solve*``) with copies of its
  inputs taken before the op runs; those ops are then replayed on fresh copies and timed the same way,
  a replay after each timed call (round by round, so that a drift of the machine's speed reaches both
  columns alike; :func:`time_alternating`).
  For ``segment`` this is ``torchcut.maxflow``'s solve of ``segmentation_graph``'s graph; for
  ``grabcut`` and ``expansion`` the sum over the iterations' or moves' solves, warm starts included.
  The replay's masks must equal the recorded ones (``replay`` in the JSON; else the case fails);
* **call / solve** and **outside**: the share of the call spent outside the solver (1 - solve / call);
* **maxflow ms** (``segment`` only): ``torchcut.maxflow`` on the graph that ``segmentation_graph`` built
  once before the clock, timed in the same rounds, and **call / maxflow**: what the call costs over the
  public solve of its graph (the solver ops and the call around them, the result with its certificate);
* **torchmaxflow ms**, **speed** (torchmaxflow / call) and **IoU** of the object masks, on CPU cases
  whose job torchmaxflow does: ``refine`` with two classes is the energy of
  ``torchmaxflow.maxflow(image, prob, lamda, sigma, connectivity)`` (``-log`` probabilities, a
  contrast-sensitive Potts term), and ``refine_seeds`` that of ``maxflow_interactive(image, prob,
  seed, ...)`` with the seeds fixed. Skipped when torchmaxflow is not installed. Where
  ``torchcut.compat.torchmaxflow`` exists its two functions are timed as calls of their own
  (``compat``, ``compat_interactive``, 2D and 3D) against the same peer; without it those rows say so
  and keep torchmaxflow's time alone.

Inputs (deterministic): scikit-image's astronaut (colour, or its luminance) and coffee resized to the
case size, in 0..255; volumes stack the resized picture along depth under a smooth gain with a ball
of brighter voxels. Class probabilities are synthesised from the picture: a soft disc (ball) mixed
with a soft brightness threshold and seeded noise. Seeds are a box of object seeds at the centre and
a two-pixel background border (``segment``, ``refine_seeds`` as fixed labels, torchmaxflow's seed
maps); ``grabcut`` gets a box inset by an eighth of the size and the object seeds; ``expansion`` has
three labels (disc, ring, background) with contrast weights of the picture.

Writes ``OUT/e2e-<device>.json`` and ``OUT/e2e-<device>.md`` (markdown tables ready for the README and
``docs/performance.md``).

    python -m benchmarks --suite e2e --quick                    # 2-core machine: small sizes
    python -m benchmarks --suite e2e --sizes 512,1024 --sizes3d '' --calls refine,compat --devices cpu
"""

from __future__ import annotations

import json
import math
import statistics
import time

import numpy as np

from . import worker as W

CALLS = ("segment", "refine", "refine_seeds", "grabcut", "expansion", "compat", "compat_interactive")
PEER_CALLS = ("refine", "refine_seeds", "compat", "compat_interactive")  # the jobs torchmaxflow does
SIZES_2D = (64, 128, 256, 512, 1024, 2048)
SIZES_3D = (64, 128, 256)
QUICK_2D = (64, 128, 256)
QUICK_3D = (64,)
LAM, SIGMA = 20.0, 15.0  # the refine / torchmaxflow energy: lam and sigma in 0..255 units
CONNS = {2: (4, 8), 3: (6, 26)}
PICTURES = ("astronaut", "coffee")


# ------------------------------------------------------------------------------------------ cases
def cases(sizes2=SIZES_2D, sizes3=SIZES_3D, calls=CALLS, devices=("cpu",), pictures=PICTURES, colours=(False, True)):
    """The case specs: one per call, device, picture, colour, connectivity and size.

    ``refine`` and ``grabcut`` are 2D only (their APIs); the ``compat`` calls run where
    ``torchcut.compat.torchmaxflow`` exists (checked when the case runs)."""
    out = []
    for device in devices:
        for call in calls:
            for ndim, sizes in ((2, sizes2), (3, sizes3)):
                if ndim == 3 and call in ("refine", "refine_seeds", "grabcut"):
                    continue
                for n in sizes:
                    for pic in pictures:
                        for colour in colours:
                            for conn in CONNS[ndim]:
                                shape = (n,) * ndim
                                cid = (
                                    f"{device}/{call}/{pic}-{'rgb' if colour else 'gray'}-"
                                    f"{'x'.join(map(str, shape))}-{conn}c"
                                )
                                out.append(
                                    dict(
                                        id=cid,
                                        call=call,
                                        device=device,
                                        picture=pic,
                                        colour=colour,
                                        ndim=ndim,
                                        n=n,
                                        conn=conn,
                                        nodes=n**ndim,
                                    )
                                )
    return out


# ----------------------------------------------------------------------------------------- inputs
def picture(name: str, n: int, colour: bool) -> np.ndarray:
    """``name`` of scikit-image's data resized to ``n x n``: ``[n, n, 3]`` or gray ``[n, n]``, float32 in
    0..255."""
    from skimage import data
    from skimage.transform import resize

    img = getattr(data, name)()[..., :3].astype(np.float64)
    img = resize(img, (n, n), order=1, anti_aliasing=n < min(img.shape[:2]), preserve_range=True)
    if not colour:
        img = img @ np.array([0.2125, 0.7154, 0.0721])
    return np.clip(img, 0, 255).astype(np.float32)


def _radius(shape) -> np.ndarray:
    """Distance to the centre over the half size, per pixel or voxel."""
    axes = np.meshgrid(*[(np.arange(s) + 0.5) / s * 2 - 1 for s in shape], indexing="ij")
    return np.sqrt(sum(a * a for a in axes))


def inputs(spec) -> dict:
    """A case's arrays (numpy, deterministic in the spec): ``image`` (channel-first when colour, 0..255),
    ``probs`` ``[2, *S]`` (background, object), ``seeds`` (``segment``'s), ``box``, ``unary3`` /
    ``weights`` (``expansion``'s three labels)."""
    from scipy import ndimage

    n, ndim = spec["n"], spec["ndim"]
    pic = picture(spec["picture"], n, spec["colour"])  # [n, n] or [n, n, 3]
    shape = (n,) * ndim
    r = _radius(shape)
    if ndim == 3:
        gain = 0.7 + 0.3 * np.cos(np.pi * (np.arange(n) + 0.5) / n)  # along depth
        gain = gain.reshape((n, 1, 1) + (1,) * (pic.ndim - 2))
        vol = pic[None] * gain
        vol = vol + 60.0 * (r < 0.45).reshape(shape + (1,) * (pic.ndim - 2))
        pic = np.clip(vol, 0, 255).astype(np.float32)
    gray = pic if not spec["colour"] else pic.mean(-1)
    rng = np.random.default_rng(1000 * n + ndim)  # the same probabilities for every connectivity
    disc = 1 / (1 + np.exp((r - 0.45) * 12))
    bright = 1 / (1 + np.exp(-(gray - gray.mean()) / (gray.std() + 1e-6) * 2))
    fg = 0.65 * disc + 0.35 * bright + rng.normal(0, 0.12, shape)
    fg = np.clip(ndimage.uniform_filter(fg, 3), 0.02, 0.98).astype(np.float32)
    probs = np.stack([1 - fg, fg]).astype(np.float32)
    seeds = np.zeros(shape, np.int64)
    c, h = n // 2, max(1, n // 16)
    seeds[tuple(slice(c - h, c + h) for _ in range(ndim))] = 1
    border = np.zeros(shape, bool)
    for ax in range(ndim):
        idx = [slice(None)] * ndim
        for sl in (slice(0, 2), slice(n - 2, n)):
            idx[ax] = sl
            border[tuple(idx)] = True
    seeds[border] = 2
    inset = n // 8
    image = np.ascontiguousarray(np.moveaxis(pic, -1, 0) if spec["colour"] else pic)
    out = dict(image=image, probs=probs, seeds=seeds, box=np.array([inset, inset, n - inset, n - inset]))
    if spec["call"] == "expansion":  # the others do not need them (1.7 GB at 256^3 26-connected)
        ring = np.clip(1 - np.abs(r - 0.75) * 6, 0, 1)
        p3 = np.stack([np.clip(1 - fg - 0.5 * ring, 0.02, None), fg, 0.5 * ring + 0.02])
        p3 = p3 / p3.sum(0, keepdims=True)
        out["unary3"] = (-np.log(p3)).astype(np.float32)
        out["weights"] = contrast_weights(image, spec["colour"], ndim, spec["conn"])
    return out


def contrast_weights(image, colour: bool, ndim: int, conn: int) -> np.ndarray:
    """``LAM * exp(-||I_p - I_q||^2 / (2 SIGMA^2)) / dist(p, q)`` per offset of
    ``torchcut.grid_offsets(ndim, conn)``, ``[K, *S]`` float32 (0 where q is outside)."""
    import torchcut

    x = image if colour else image[None]
    out = []
    for o in torchcut.grid_offsets(ndim, conn):
        q = np.zeros_like(x)
        src = tuple(slice(max(0, v), x.shape[1 + a] + min(0, v)) for a, v in enumerate(o))
        dst = tuple(slice(max(0, -v), x.shape[1 + a] - max(0, v)) for a, v in enumerate(o))
        q[(slice(None),) + dst] = x[(slice(None),) + src]
        inside = np.zeros(x.shape[1:], bool)
        inside[dst] = True
        d2 = ((x - q) ** 2).sum(0)
        w = LAM * np.exp(-d2 / (2 * SIGMA**2)) / math.sqrt(sum(v * v for v in o))
        out.append(np.where(inside, w, 0.0))
    return np.stack(out).astype(np.float32)


# ------------------------------------------------------------------------------------------ calls
def call_fn(spec, x, device):
    """``fn() -> (None, {})`` running the case's public call on ``device`` tensors, and ``mask()``: the
    last call's object mask (label 1 of refine, expansion and compat), a flat bool numpy array."""
    import torch

    import torchcut

    dev = torch.device(device)
    img = torch.as_tensor(x["image"]).to(dev)
    call, conn = spec["call"], spec["conn"]
    last = {}
    if call == "segment":
        seeds = torch.as_tensor(x["seeds"]).to(dev)

        def run():
            return torchcut.segment(img, seeds, connectivity=conn)
    elif call == "refine":
        probs = torch.as_tensor(x["probs"]).to(dev)

        def run():
            return torchcut.refine(img, probs, lam=LAM, sigma=SIGMA, connectivity=conn)
    elif call == "refine_seeds":
        probs = torch.as_tensor(x["probs"]).to(dev)
        labels = torch.as_tensor(refine_seeds(x["seeds"])).to(dev)

        def run():
            return torchcut.refine(img, probs, lam=LAM, sigma=SIGMA, seeds=labels, connectivity=conn)
    elif call == "grabcut":
        box = tuple(int(v) for v in x["box"])
        inner = torch.as_tensor(np.where(x["seeds"] == 1, 1, 0)).to(dev)  # the object box; the border is outside

        def run():
            return torchcut.grabcut(img, inner, box=box, connectivity=conn)
    elif call == "expansion":
        U, Wt = (torch.as_tensor(x[k]).to(dev) for k in ("unary3", "weights"))
        V = 1 - torch.eye(3, device=dev)

        def run():
            return torchcut.expansion(U, V, weights=Wt, connectivity=conn)
    elif call in ("compat", "compat_interactive"):
        tm = compat_module()
        if tm is None:
            raise W.Unavailable("torchcut.compat.torchmaxflow is missing")
        im, pr, sd = (t.to(dev) for t in peer_inputs(x, spec))

        def run():
            if call == "compat":
                return tm.maxflow(im, pr, LAM, SIGMA, conn)
            return tm.maxflow_interactive(im, pr, sd, LAM, SIGMA, conn)
    else:
        raise ValueError(f"spec['call']: expected one of {CALLS}, got {call!r}")

    def fn():  # only the call is timed: the mask is read afterwards
        last["out"] = run()
        return None, {}

    def mask():
        out = last["out"].detach().cpu()
        return (out if out.dtype == torch.bool else out == 1).numpy().reshape(-1)

    return fn, mask


def graph_solve_fn(spec, x, device):
    """For ``segment``: ``fn() -> (None, {})`` running ``torchcut.maxflow`` on the graph that
    ``segmentation_graph`` builds from the case's inputs (built once, here); None for the other calls."""
    if spec["call"] != "segment":
        return None
    import torch

    import torchcut

    dev = torch.device(device)
    img, seeds = (torch.as_tensor(x[k]).to(dev) for k in ("image", "seeds"))
    graph = torchcut.segmentation_graph(img, seeds, connectivity=spec["conn"])

    def fn():
        torchcut.maxflow(graph)
        return None, {}

    return fn


def compat_module():
    """``torchcut.compat.torchmaxflow`` where it exists, else None."""
    try:
        from torchcut.compat import torchmaxflow as tm
    except ImportError:
        return None
    return tm


def refine_seeds(seeds: np.ndarray) -> np.ndarray:
    """``segment``'s seeds (1 object, 2 background) as ``refine``'s: 1 and 0 fixed, -1 free."""
    return np.where(seeds == 1, 1, np.where(seeds == 2, 0, -1)).astype(np.int64)


def peer_inputs(x, spec):
    """torchmaxflow's shapes, float32: image ``[1, C, *S]``, probabilities ``[1, 2, *S]`` and the seed
    maps ``[1, 2, *S]`` of ``maxflow_interactive`` (channel 0 background, 1 object: the same seeds)."""
    import torch

    img = torch.as_tensor(x["image"])
    img = img.unsqueeze(0) if spec["colour"] else img.unsqueeze(0).unsqueeze(0)
    s = x["seeds"]
    seed = torch.as_tensor(np.stack([s == 2, s == 1])[None].astype(np.float32))
    return (img.float().contiguous(), torch.as_tensor(x["probs"]).unsqueeze(0).float().contiguous(), seed.contiguous())


def peer_fn(spec, x):
    """``(fn, mask)`` for torchmaxflow on the case, or None where it has no such job or is missing."""
    if spec["device"] != "cpu" or spec["call"] not in PEER_CALLS:
        return None
    try:
        import torchmaxflow
    except ImportError:
        return None
    im, pr, sd = peer_inputs(x, spec)
    interactive = spec["call"] in ("refine_seeds", "compat_interactive")
    last = {}

    def fn():
        if interactive:
            last["out"] = torchmaxflow.maxflow_interactive(im, pr, sd, LAM, SIGMA, spec["conn"])
        else:
            last["out"] = torchmaxflow.maxflow(im, pr, LAM, SIGMA, spec["conn"])
        return None, {}

    return fn, lambda: (last["out"].reshape(-1) == 1).numpy()


# ----------------------------------------------------------------------------------- solve capture
def _is_solve(func) -> bool:
    name = getattr(func, "name", lambda: "")()
    return name.startswith("torchcut::") and "solve" in name


def capture_solves(fn):
    """Run ``fn()`` once, recording every solver op it reaches: ``[(op, args, kwargs, outputs)]`` with
    copies of the tensors taken before the op ran (solvers may work in their inputs)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    def copy(t):
        return t.clone() if isinstance(t, torch.Tensor) else t

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not _is_solve(func):
                return func(*args, **kwargs)
            saved = (tree_map(copy, args), tree_map(copy, kwargs))
            out = func(*args, **kwargs)
            calls.append((func, saved[0], saved[1], tree_map(copy, out)))
            return out

    with Record():
        fn()
    return calls


def _first_tensor(out):
    import torch

    return out if isinstance(out, torch.Tensor) else next(t for t in out if isinstance(t, torch.Tensor))


def time_alternating(fn, calls, device="cpu", repeats=3, warmup=1, budget=None, also=None):
    """Time the call ``fn`` and the replay of its recorded solver ops ``calls`` in alternation: ``warmup``
    untimed rounds, then ``repeats`` rounds of one timed call and one timed replay (fewer, at least one,
    when ``budget`` seconds would not hold them at the speed of the last warm-up round); ``also``, a third
    function timed as ``fn`` is, runs after them in each round. Returns ``(call_times, solve_times, equal,
    also_times)`` (``equal`` as for :func:`time_replay`; ``also_times`` empty without ``also``); raises
    ValueError when a call's value differs from the one before."""
    value, call_times, solve_times, equal, t_warm, also_times = None, [], [], True, None, []
    for k in range(warmup + repeats):
        if k == warmup and budget and t_warm:
            repeats = max(1, min(repeats, int(budget / max(t_warm, 1e-9))))
        if k >= warmup + repeats:
            break
        c, v, _ = W.time_fn(fn, device, 1, 0)
        r, same = time_replay(calls, device, 1, 0)
        a = W.time_fn(also, device, 1, 0)[0] if also is not None else [0.0]
        if value is not None and v != value:
            raise ValueError(f"value changed between calls: {value} then {v}")
        value, equal = v, equal and same
        if k < warmup:
            t_warm = c[0] + r[0] + a[0]
        else:
            call_times += c
            solve_times += r
            also_times += a if also is not None else []
    return call_times, solve_times, equal, also_times


def time_replay(calls, device="cpu", repeats=3, warmup=1, budget=None):
    """Time the recorded solver ops alone, as :func:`benchmarks.worker.time_fn` times a call: each run
    replays every op in order on fresh copies of its recorded inputs (copied before the clock starts).
    Returns ``(times, equal)``: ``equal`` whether every run's masks (each op's first output) were the
    recorded ones."""
    import torch
    from torch.utils._pytree import tree_map

    def copy(t):
        return t.clone() if isinstance(t, torch.Tensor) else t

    equal, times, t_warm = True, [], None
    for k in range(warmup + repeats):
        if k == warmup and budget and t_warm:
            repeats = max(1, min(repeats, int(budget / max(t_warm, 1e-9))))
        if k >= warmup + repeats:
            break
        fresh = [(tree_map(copy, a), tree_map(copy, kw)) for _, a, kw, _ in calls]
        W._sync(device)
        t0 = time.perf_counter()
        outs = [func(*a, **kw) for (func, _, _, _), (a, kw) in zip(calls, fresh)]
        W._sync(device)
        dt = time.perf_counter() - t0
        if k < warmup:
            t_warm = dt
        else:
            times.append(dt)
        equal &= all(torch.equal(_first_tensor(o), _first_tensor(rec)) for o, (_, _, _, rec) in zip(outs, calls))
        del fresh, outs
    return times, bool(equal)


# --------------------------------------------------------------------------------------- the suite
def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def _timed(fn, device, args):
    times, _, _ = W.time_fn(fn, device, args.repeats, args.warmup, args.case_budget)
    return {"median": statistics.median(times), "times": times}


def run_case(spec, args) -> dict:
    """One case: the call, its solves, the peers; a dict for the JSON (``error`` / ``unavailable`` when
    the call could not run)."""
    row = {"spec": spec}
    x = mine = None
    try:
        x = inputs(spec)
        fn, mask = call_fn(spec, x, spec["device"])
        calls = None
        try:
            calls = capture_solves(fn)
            row["solves"] = len(calls)
        except Exception as exc:  # noqa: BLE001 - the call's time stands; the solve column is left empty
            row["solve_error"] = f"{type(exc).__name__}: {exc}"
        if calls:
            also = graph_solve_fn(spec, x, spec["device"])
            c, v, equal, m = time_alternating(
                fn, calls, spec["device"], args.repeats, args.warmup, args.case_budget, also
            )
            row["call"] = {"median": statistics.median(c), "times": c}
            row["solve"] = {"median": statistics.median(v), "times": v}
            if m:
                row["maxflow"] = {"median": statistics.median(m), "times": m}
            row["replay"] = equal
        else:
            row["call"] = _timed(fn, spec["device"], args)
        del calls
        mine = mask()
        row["call"]["foreground"] = int(mine.sum())
    except W.Unavailable as exc:  # the peer's time still stands alone (compat not there yet)
        row["unavailable"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported per case, the others go on
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    finally:
        if spec["device"].startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
    if not args.no_peers:
        got = peer_fn(spec, x)
        if got is not None:
            pfn, pmask = got
            try:
                row["torchmaxflow"] = _timed(pfn, "cpu", args)
                row["torchmaxflow"]["foreground"] = int(pmask().sum())
                if mine is not None:
                    row["torchmaxflow"]["iou"] = round(iou(mine, pmask()), 6)
            except Exception as exc:  # noqa: BLE001 - a note in the table
                row["torchmaxflow"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    return row


def check(row) -> str:
    """``ok``, ``FAILED ...`` (the call or the replay of its solves went wrong), or a note."""
    if "error" in row:
        return f"FAILED: {row['error']}"
    if "unavailable" in row:
        return f"not run: {row['unavailable']}"
    if row.get("replay") is False:
        return "FAILED: the replayed solves gave other masks than the call's"
    if "solve_error" in row:
        return f"ok (solves not timed: {row['solve_error']})"
    return "ok"


def _ms(s) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.1f}" if s * 1e3 >= 10 else f"{s * 1e3:.2f}"


def render(meta, rows) -> str:
    """Markdown: one table per call and device."""
    lines = [
        f"# torchcut end to end, {meta['device']}",
        "",
        (
            f"{meta['date']}; {meta['device_name']}, {meta['cores']} cores, torch {meta['torch']} "
            f"({meta['threads']} threads); commit {meta['commit']}{' (modified)' if meta['dirty'] else ''}; "
            f"torchmaxflow {meta['torchmaxflow'] or 'not installed'}. Median of {meta['repeats']} calls after "
            f"{meta['warmup']} warm-up(s), CUDA synchronised. *solve*: the solver ops the call ran, replayed "
            f"alone on copies of their inputs after each timed call; *outside*: 1 - solve / call. *speed*: torchmaxflow ms / call ms "
            f"(above 1: torchcut faster); IoU of the two masks. lam {LAM:g}, sigma {SIGMA:g} (refine, compat, "
            "torchmaxflow); segment: box and border seeds; grabcut: a box and the object seeds, at most 5 "
            "iterations; expansion: 3 labels."
        ),
        "",
    ]
    by = {}
    for r in rows:
        by.setdefault(r["spec"]["call"], []).append(r)
    for call, group in by.items():
        peer = any("torchmaxflow" in r for r in group)
        graph = any("maxflow" in r for r in group)
        lines += [
            f"## `{call}`",
            "",
            "| picture | size | conn | nodes | call ms | solve ms | call / solve | outside |"
            + (" maxflow ms | call / maxflow |" if graph else "")
            + (" torchmaxflow ms | speed | IoU |" if peer else "")
            + " check |",
            "|---|---|---:|---:|---:|---:|---:|---:|"
            + ("---:|---:|" if graph else "")
            + ("---:|---:|---:|" if peer else "")
            + "---|",
        ]
        for r in group:
            s = r["spec"]
            c = (r.get("call") or {}).get("median")
            v = (r.get("solve") or {}).get("median")
            size = "x".join([str(s["n"])] * s["ndim"])
            cells = [
                f"{s['picture']} {'rgb' if s['colour'] else 'gray'}",
                size,
                str(s["conn"]),
                f"{s['nodes']:,}",
                _ms(c),
                _ms(v),
                f"{c / v:.2f}" if c and v else "-",
                f"{100 * (1 - v / c):.0f}%" if c and v else "-",
            ]
            if graph:
                m = (r.get("maxflow") or {}).get("median")
                cells += [_ms(m), f"{c / m:.2f}" if c and m else "-"]
            if peer:
                p = r.get("torchmaxflow") or {}
                pm = p.get("median")
                cells += [
                    _ms(pm) if pm else p.get("skipped", "-"),
                    f"{pm / c:.2f}x" if pm and c else "-",
                    f"{p['iou']:.4f}" if "iou" in p else "-",
                ]
            cells.append(r["check"])
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _meta(device, args, seconds):
    import os
    import platform

    import torch

    from .run import ROOT, _git

    try:
        from importlib.metadata import version

        tmf = version("torchmaxflow")
    except Exception:  # noqa: BLE001
        tmf = None
    name = torch.cuda.get_device_name() if device.startswith("cuda") else (platform.processor() or platform.machine())
    return {
        "device": device,
        "device_name": name,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "torchmaxflow": tmf,
        "commit": _git(["rev-parse", "--short", "HEAD"], ROOT),
        "dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"], ROOT)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": seconds,
    }


def _ints(text: str, name: str) -> tuple:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise SystemExit(f"{name}: expected comma-separated integers, got {text!r}") from None


def select(args):
    """The cases after ``--calls``, ``--sizes``, ``--sizes3d``, ``--devices``, ``--quick``, ``--only``."""
    import torch

    calls = tuple(c.strip() for c in args.calls.split(",") if c.strip()) if args.calls else CALLS
    bad = [c for c in calls if c not in CALLS]
    if bad:
        raise SystemExit(f"--calls: expected names among {CALLS}, got {bad}")
    s2 = _ints(args.sizes, "--sizes") if args.sizes else (QUICK_2D if args.quick else SIZES_2D)
    s3 = _ints(args.sizes3d, "--sizes3d") if args.sizes3d is not None else (QUICK_3D if args.quick else SIZES_3D)
    if args.devices:
        devices = tuple(d.strip() for d in args.devices.split(",") if d.strip())
        if "cuda" in devices and not torch.cuda.is_available():
            raise SystemExit("--devices: cuda named, but CUDA is not available here")
    else:
        devices = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
    pictures = tuple(p.strip() for p in args.pictures.split(",") if p.strip()) if args.pictures else PICTURES
    bad = [p for p in pictures if p not in PICTURES]
    if bad:
        raise SystemExit(f"--pictures: expected names among {PICTURES}, got {bad}")
    specs = cases(s2, s3, calls, devices, pictures)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        specs = [s for s in specs if any(k in s["id"] for k in keys)]
    return specs


def run_suite(args) -> int:
    """``--suite e2e``: time every selected case, write ``OUT/e2e-<device>.json`` / ``.md``; exit status 1
    when a call failed or its replayed solves differ, else 0."""
    specs = select(args)
    print(f"# suite e2e: {len(specs)} cases, {args.repeats} timed calls after {args.warmup} warm-up(s)", flush=True)
    status = 0
    by_device = {}
    t_start = time.perf_counter()
    for spec in specs:
        t0 = time.perf_counter()
        row = run_case(spec, args)
        row["check"] = check(row)
        row["run_s"] = time.perf_counter() - t0
        if row["check"].startswith("FAILED"):
            status = 1
        by_device.setdefault(spec["device"], []).append(row)
        c = (row.get("call") or {}).get("median")
        v = (row.get("solve") or {}).get("median")
        p = (row.get("torchmaxflow") or {}).get("median")
        print(
            f"{spec['id']:50s} call {_ms(c):>8s} ms  solve {_ms(v):>8s} ms"
            + (f"  torchmaxflow {_ms(p)} ms" if p else "")
            + (f" IoU {row['torchmaxflow']['iou']:.4f}" if "iou" in (row.get("torchmaxflow") or {}) else "")
            + ("" if row["check"] == "ok" else f"  {row['check']}"),
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    for device, rows in by_device.items():
        meta = _meta(device, args, time.perf_counter() - t_start)
        tag = device.split(":")[0]
        (args.out / f"e2e-{tag}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
        md = render(meta, rows)
        (args.out / f"e2e-{tag}.md").write_text(md)
        print(md)
        print(f"# wrote {args.out / f'e2e-{tag}.md'} and .json")
    return status
